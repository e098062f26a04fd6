"""Network-packing regulation by classes, kept across calls (policies.elastic_regulate):
the walk by classes gives ``policies.elastic.regulate``'s shares on random sequences of
inputs (jobs coming and going, shares changing, orders changing, classes changing), and
every call of whole simulations of the five elastic policies plans as without the classes,
with GPU ranges and unprofiled jobs among them."""
from __future__ import annotations

import dataclasses
import random
from types import MappingProxyType
from unittest import mock

import pytest

import policies
from gimbalctl.cluster import parse_cluster
from gimbalctl.profiles import default_models
from gimbalctl.sim import SimConfig, simulate
from policies import elastic, elastic_regulate
from policies.elastic import UNPROFILED, regulate
from policies.elastic_regulate import Classes
from policy_probe import PolicyProbe
from test_elastic_differential import _jobs, build

MODELS = default_models()
ELASTIC = ("afs-l", "afs-p", "max-min", "optimus", "themis")


def _random_steps(rng: random.Random, steps: int):
    """A sequence of (shares, class of each job, ids whose class may have changed), each
    input a few changes away from the one before, with now and then a larger upheaval."""
    nid = 0
    shares: dict[str, int] = {}
    klass: dict[str, tuple] = {}
    top = rng.choice([3, 10, 20, 40, 100])
    for _ in range(steps):
        stale: set = set()
        for _ in range(rng.choice([0, 1, 1, 2, 5])):
            op = rng.random()
            if op < 0.35 or not shares:  # a job comes, at the end
                jid = f"j{nid}"
                nid += 1
                shares[jid] = rng.randint(1, top)
                klass[jid] = (rng.choice(["a", "b", "c", jid]), rng.random() < 0.2)
            elif op < 0.55:  # a job goes
                jid = rng.choice(list(shares))
                del shares[jid]
            elif op < 0.75:  # another share
                shares[rng.choice(list(shares))] = rng.randint(1, top)
            elif op < 0.85:  # another class (named as changed)
                jid = rng.choice(list(shares))
                klass[jid] = (rng.choice(["a", "b", "c", jid]), rng.random() < 0.2)
                stale.add(jid)
            elif op < 0.92:  # a new job in front of old ones
                jid = f"j{nid}"
                nid += 1
                items = list(shares.items())
                at = rng.randint(0, len(items))
                items.insert(at, (jid, rng.randint(1, top)))
                shares = dict(items)
                klass[jid] = (rng.choice(["a", "b", "c", jid]), False)
            elif op < 0.96:  # two jobs swap places
                keys = list(shares)
                i, k = rng.randrange(len(keys)), rng.randrange(len(keys))
                keys[i], keys[k] = keys[k], keys[i]
                shares = {j: shares[j] for j in keys}
            else:  # a new order, and a new job in it (AFS-L's order by remaining length)
                jid = f"j{nid}"
                nid += 1
                keys = list(shares)
                rng.shuffle(keys)
                keys.insert(rng.randint(0, len(keys)), jid)
                shares[jid] = rng.randint(1, top)
                klass[jid] = (rng.choice(["a", "b", "c", jid]), rng.random() < 0.2)
                shares = {j: shares[j] for j in keys}
            if rng.random() < 0.1:  # a job named as changed that did not change
                stale.add(rng.choice(list(shares)) if shares else "gone")
        yield dict(shares), dict(klass), stale


@pytest.mark.parametrize("seed", range(40))
def test_the_walk_by_classes_matches_regulate_on_random_sequences(seed):
    rng = random.Random(seed)
    per = rng.choice([2, 3, 4, 6, 8])
    c = Classes()
    c.per_node = per
    c.sync({}, None, None)
    refuse = {(cls, s, k) for cls in "abc" for s in range(1, 101) for k in range(1, 210)
              if rng.random() < 0.3}
    walked = reordered = 0
    last: list = []
    for shares, klass, stale in _random_steps(rng, 150):
        c.sync(shares, lambda j: klass[j], stale)
        kept = [j for j in shares if j in set(last)]
        reordered += kept != [j for j in last if j in shares] or list(shares)[:len(kept)] != kept
        last = list(shares)
        # the classes' ranks are the input's order (re-ranked where it moved)
        assert sorted(c.rank, key=c.rank.get) == list(shares) and list(c.base) == list(shares)
        assert c.ranged == {j for j in shares if klass[j][1]}
        assert {k[0] for k in c.members} == set(shares.values())

        def useful(j, k):  # a function of (class, share, k), as the contract asks
            return (klass[j][0], shares[j], k) not in refuse

        for total in (sum(shares.values()), rng.randint(0, 3 * sum(shares.values()) + 1)):
            got = c.regulate(total, useful)
            want = regulate(shares, per, total, useful)
            assert list(got.items()) == list(want.items())
            walked += got != {j: elastic.round_down(s, per) for j, s in shares.items()}
    assert walked > 20 and reordered > 0


def test_many_jobs_on_few_classes_match_regulate():
    """Hundreds of jobs on a few classes, made at once, in shuffled orders."""
    rng = random.Random(3)
    for _ in range(200):
        per = rng.choice([2, 4, 8])
        n = rng.randint(1, 400)
        shares = {f"j{i}": rng.randint(1, rng.choice([3, 10, 40])) for i in range(n)}
        keys = list(shares)
        rng.shuffle(keys)
        shares = {k: shares[k] for k in keys}
        klass = {j: (rng.choice("ab"), False) for j in shares}
        cut = rng.randint(1, 64)

        def useful(j, k):
            return klass[j][0] == "a" and k <= cut + shares[j]

        c = Classes()
        c.per_node = per
        c.sync(shares, klass.__getitem__, None)
        total = rng.choice([sum(shares.values()), rng.randint(0, 3000)])
        assert list(c.regulate(total, useful).items()) == \
            list(regulate(shares, per, total, useful).items())


def _facts(plan):
    return plan.policy, plan.actions, tuple(plan.order), dict(plan.reasons), plan.infeasible


class _Checked(PolicyProbe):
    """A policy whose every call is also made without the classes and compared."""

    def __init__(self, name):
        super().__init__(name)
        self.ref = policies.get_policy(name)
        self.calls = self.walked = 0

    def schedule(self, snap):
        with mock.patch.object(elastic, "kept_classes", lambda *a: None):
            want = self.ref.schedule(snap)
        got = self.inner.schedule(snap)
        assert _facts(got) == _facts(want)
        self.calls += 1
        return got


def _mixed_jobs(n, seed):
    """The differential tests' jobs, every fifth with a GPU range."""
    out = []
    for i, j in enumerate(_jobs(n, seed)):
        if i % 5 == 2:
            j = dataclasses.replace(j, gpu_range=(1, 2 * j.num_gpus + 1))
        out.append(j)
    return out


@pytest.mark.parametrize("name", ELASTIC)
@pytest.mark.parametrize("cluster", ["4x8", "16x8", "12x4"])
def test_every_simulated_call_plans_as_without_the_classes(name, cluster):
    """60 jobs, some with GPU ranges and three not profiled, on 32, 128 and 48 GPUs."""
    models = dataclasses.replace(MODELS, predictors=MappingProxyType(
        {UNPROFILED: ("j3", "j11", "j40")}))
    pol = _Checked(name)
    walks = []
    real = Classes.regulate

    def counting(self, total, useful):
        out = real(self, total, useful)
        walks.append(out != self.base)
        return out
    with mock.patch.object(Classes, "regulate", counting):
        res = simulate(_mixed_jobs(60, seed=7), parse_cluster(cluster), pol, models, SimConfig())
    assert len(res._rows) == 60 and pol.calls > 60
    assert sum(walks) > 5, (len(walks), sum(walks))  # the walk moved shares up


@pytest.mark.parametrize("name", ELASTIC)
def test_the_daemons_snapshots_keep_no_classes(name):
    """No change record: the plain walk, and no classes kept for the policy."""
    snap, _ = build(12, 8, 60, 150, seed=1)
    assert snap.job_changes is None
    elastic_regulate._CLASSES.clear()
    with mock.patch.object(Classes, "regulate", side_effect=AssertionError("walked")):
        policies.get_policy(name).schedule(snap)
    c = elastic_regulate._CLASSES.get(name)
    assert c is not None and not c.members and not c.keys


def test_the_classes_follow_the_record_and_their_context():
    """Jobs the record names are classed again; another profile table or unprofiled set (by
    identity), another node size or another run's record makes the classes again; no record,
    no classes."""
    from types import SimpleNamespace

    from policies.model import Frozen, JobChanges

    def snap_of(items):
        jobs: dict = {}
        return SimpleNamespace(jobs=jobs, job_changes=JobChanges(log=Frozen(items), source=jobs))

    klass = {"a": ("x", False), "b": ("x", False), "c": ("y", True)}
    shares = {"a": 3, "b": 3, "c": 5}
    items = ["a"]
    profiles, unprof = {}, ()
    c = Classes()
    assert c.update(snap_of(items), (profiles, unprof), shares, 4, klass.__getitem__)
    assert c.members == {(3, "x"): ["a", "b"], (5, "y"): ["c"]}
    assert c.rank == {"a": 0, "b": 1, "c": 2}
    klass["b"] = ("y", False)  # not named by the record: kept as it was
    assert c.update(snap_of(items), (profiles, unprof), shares, 4, klass.__getitem__)
    assert (3, "y") not in c.members
    items.append("b")  # named: classed again, rank kept
    assert c.update(snap_of(items), (profiles, unprof), shares, 4, klass.__getitem__)
    assert c.members[(3, "y")] == ["b"] and c.rank["b"] == 1 and c.ranged == {"c"}
    made = []
    real = Classes._make

    def making(self, *a):
        made.append(a)
        return real(self, *a)
    with mock.patch.object(Classes, "_make", making):
        for ctx, per, log in [(({}, unprof), 4, items), ((profiles, ("a",)), 4, items),
                              ((profiles, ("a",)), 8, items),
                              ((profiles, ("a",)), 8, list(items))]:
            assert c.update(snap_of(log), ctx, shares, per, klass.__getitem__)
    assert len(made) == 4 and c.per_node == 8
    assert not c.update(SimpleNamespace(jobs={}, job_changes=None), (profiles, unprof),
                        shares, 8, klass.__getitem__)
    assert not c.members and not c.keys
