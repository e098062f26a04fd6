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


@pytest.mark.parametrize("name", ["max-min", "themis", "afs-p", "optimus", "afs-l"])
@pytest.mark.parametrize("cluster", ["16x8", "40x8", "2x8"])
def test_classes_brought_up_from_the_kept_demands_changes(name, cluster):
    """Where the shares are kept demands (policies.max_min_kept.KeptShares; AFS-L's in its
    own order, with the delta marked reordered), the classes are brought up from what
    changed alone: after each such call they are the classes made from the whole input
    (members in rank order, ranks in input order, base in input order, sums, ranged ids),
    and every call plans as without the classes."""
    pol = _Checked(name)
    real_update, real_delta = Classes.update, Classes._sync_delta
    by_delta = []

    def delta(self, *a):
        by_delta.append(True)
        return real_delta(self, *a)

    def update(self, snap, ctx, shares, per_node, keyof, delta=None):
        n = len(by_delta)
        ok = real_update(self, snap, ctx, shares, per_node, keyof, delta)
        if ok and len(by_delta) > n:
            fresh = Classes()
            fresh.per_node = per_node
            fresh._make(shares, keyof)
            assert self.members == fresh.members and self.key == fresh.key
            assert sorted(self.rank, key=self.rank.get) == list(shares)
            assert list(self.base.items()) == list(fresh.base.items())
            assert (self.tot_s, self.tot_r, self.ranged) == \
                (fresh.tot_s, fresh.tot_r, fresh.ranged)
        return ok
    with mock.patch.object(Classes, "update", update), \
            mock.patch.object(Classes, "_sync_delta", delta):
        # (Themis's kept demands leave jobs with a GPU range to the full path)
        jobs = (_jobs if name == "themis" else _mixed_jobs)(80, seed=5)
        res = simulate(jobs, parse_cluster(cluster), pol, MODELS, SimConfig())
    assert len(res._rows) == 80 and len(by_delta) > (10 if cluster != "2x8" else 0)


def test_a_broken_chain_of_kept_demands_takes_the_diff():
    """Shares given twice in one call (the first one never reached the classes), or plain
    shares between two kept ones: the next kept shares' delta does not name the classes'
    last input, so the classes diff the whole input."""
    from policies.max_min import _demand
    from policies.max_min_kept import KeptDemands
    from policy_probe import Recorder

    rec = Recorder("max-min")
    simulate(_jobs(40, seed=3), parse_cluster("16x8"), rec, MODELS, SimConfig())
    kd = KeptDemands(_demand)
    seen = [s for s in rec.seen if len(s.jobs) > 2]
    a = kd.shares(seen[0], elastic.Rates(seen[0]))
    b = kd.shares(seen[1], elastic.Rates(seen[1]))
    assert a.delta is None and b.delta[0] is not None
    c1 = kd.shares(seen[2], elastic.Rates(seen[2]))
    c2 = kd.shares(seen[2], elastic.Rates(seen[2]))  # (asked twice)
    assert c2.delta[0] is c1.delta[1] and dict(c1) == dict(c2)
    cls = Classes()
    keyof = lambda j: (j, False)  # noqa: E731
    ctx = ((), ())
    assert cls.update(seen[1], ctx, b, 8, keyof, b.delta)
    with mock.patch.object(Classes, "_sync_delta", side_effect=AssertionError("delta")):
        assert cls.update(seen[2], ctx, c2, 8, keyof, c2.delta)  # prev is c1: not b
        assert list(cls.base) == list(c2)
        assert cls.update(seen[3], ctx, dict(c2), 8, keyof, None)  # plain shares
        d = kd.shares(seen[3], elastic.Rates(seen[3]))
        assert cls.update(seen[3], ctx, d, 8, keyof, d.delta)  # the classes' token: None
    assert list(cls.base) == list(d)


def _with_job(snap, job):
    """``snap`` with ``job`` put in its job map and named by its change record (the same
    record, one entry longer: it extends the one read before)."""
    from policies.model import Frozen, JobChanges

    jobs = dict(snap.jobs)
    jobs[job.id] = job
    items = snap.job_changes.log._items
    items.append(job.id)
    return dataclasses.replace(snap, jobs=jobs,
                               job_changes=JobChanges(log=Frozen(items), source=jobs))


@pytest.mark.parametrize("change", ["older new job", "moved submit time"])
def test_kept_demands_whose_order_moved_are_followed(change):
    """A new job older than the newest kept one (the submit order made again: no delta), or
    a kept job whose submit time moved (it leaves its place for the end: the classes are
    made again): the classes stay those of the whole input."""
    from policies.max_min import _demand
    from policies.max_min_kept import KeptDemands
    from policy_probe import Recorder

    rec = Recorder("max-min")
    simulate(_jobs(40, seed=3), parse_cluster("16x8"), rec, MODELS, SimConfig())
    snap = next(s for s in rec.seen if 4 <= len(s.jobs) <= 8)
    kd = KeptDemands(_demand)
    cls = Classes()
    keyof = lambda j: ("u", False)  # noqa: E731
    ctx = ((), ())
    for _ in range(2):
        got = kd.shares(snap, elastic.Rates(snap))
        assert cls.update(snap, ctx, got, 8, keyof, got.delta)
    first = next(iter(snap.jobs.values()))
    if change == "older new job":
        other = _with_job(snap, dataclasses.replace(first, id="zz", submit_time=-1.0))
    else:
        other = _with_job(snap, dataclasses.replace(first, submit_time=1e9))
    got = kd.shares(other, elastic.Rates(other))
    assert got is not None
    assert kd._seen is other.job_changes.log  # (read on from the record: not made again)
    if change == "older new job":
        assert got.delta is None and list(got)[0] == "zz"
    else:
        assert got.delta is not None and got.delta[3] == (first.id,)
        assert list(got)[-1] == first.id
    assert cls.update(other, ctx, got, 8, keyof, got.delta)
    assert sorted(cls.rank, key=cls.rank.get) == list(got) == list(cls.base)
    assert cls.members == {(s, "u"): [j for j in got if got[j] == s] for s in set(got.values())}



def test_jobs_that_come_together_keep_the_delta():
    """Jobs submitted at one time come in one call; the kept demands put them in submit
    order, so every kept call after the first carries a delta (none makes the order again)."""
    from policies.max_min_kept import KeptDemands

    jobs = []
    for j in _jobs(30, seed=8):
        jobs += [j, dataclasses.replace(j, id=j.id + "b"), dataclasses.replace(j, id=j.id + "a")]
    real = KeptDemands.shares
    deltas = []

    def shares(self, snap, rates):
        got = real(self, snap, rates)
        if got is not None:
            deltas.append(got.delta is not None)
        return got
    with mock.patch.object(KeptDemands, "shares", shares):
        simulate(jobs, parse_cluster("40x8"), policies.get_policy("max-min"), MODELS,
                 SimConfig())
    assert len(deltas) > 30 and not deltas[0] and all(deltas[1:])
