"""The elastic plan's kept jobs (policies.elastic_kept: running jobs kept at the last calls,
kept again without a pass over them): every call of whole simulations of the five elastic
policies gives the Plan made without them, and each placement made with them is the whole
rule's; the daemon's snapshots (no change record) keep none."""
from __future__ import annotations

from unittest import mock

import pytest

import policies
from gimbalctl.cluster import parse_cluster
from gimbalctl.profiles import default_models
from gimbalctl.sim import SimConfig, simulate
from policies import elastic, elastic_kept
from policies.elastic_place import place
from policies.elastic_reduced import place_reduced
from policy_probe import PolicyProbe, Recorder
from test_elastic_differential import _jobs, build

MODELS = default_models()
ELASTIC = ("afs-l", "afs-p", "max-min", "optimus", "themis")


def _plan_facts(plan):
    return plan.policy, plan.actions, tuple(plan.order), dict(plan.reasons), plan.infeasible


class _Checked(PolicyProbe):
    """A policy whose every call is also made without the kept jobs and compared."""

    def __init__(self, name):
        super().__init__(name)
        self.ref = policies.get_policy(name)
        self.calls = self.with_kept = self.placed = 0

    def schedule(self, snap):
        with mock.patch.object(elastic, "kept_jobs", lambda *a: None):
            want = self.ref.schedule(snap)
        got = self.inner.schedule(snap)
        assert _plan_facts(got) == _plan_facts(want)
        self.calls += 1
        kp = elastic_kept._KEPT.get((self.name, True))
        self.with_kept += bool(kp is not None and kp.share)
        return got

    def placing(self, snap, shares, kept=None, newly=None):
        got = place_reduced(snap, shares, kept, newly)
        if got is not None and kept is not None:
            assert got == place(snap, shares, reduced=False)  # the whole rule's GPU sets
            self.placed += bool(kept.share)
        return got


@pytest.mark.parametrize("name", ELASTIC)
@pytest.mark.parametrize("cluster", ["4x8", "16x8"])
def test_every_simulated_call_plans_as_without_the_kept_jobs(name, cluster):
    """60 jobs on 32 GPUs (contended: shares change and jobs move) and on 128 GPUs."""
    pol = _Checked(name)
    with mock.patch.object(elastic, "place_reduced", pol.placing):
        res = simulate(_jobs(60, seed=7), parse_cluster(cluster), pol, MODELS, SimConfig())
    assert len(res._rows) == 60
    assert pol.calls > 60 and pol.with_kept > pol.calls // 2, (pol.calls, pol.with_kept)
    assert pol.placed > 0
    plain = simulate(_jobs(60, seed=7), parse_cluster(cluster), policies.get_policy(name),
                     MODELS, SimConfig())
    assert plain._rows == res._rows


def test_dropping_a_kept_job_gives_back_its_gpus_and_nodes():
    """The kept set's sums follow its jobs: held GPUs, and per node the kept jobs there."""
    from policies.elastic_kept import KeptJobs

    kp = KeptJobs()
    kp.add("a", 2, (None, None, 2, ("n0",), ("g0", "g1"), False))
    kp.add("b", 8, (None, None, 8, ("n1",), tuple(range(8)), False))
    kp.add("c", 4, (None, None, 4, ("n0",), ("g2",) * 4, False))
    assert kp.held == 14 and kp.node_count == {"n0": 2, "n1": 1}
    kp.drop("a")
    assert kp.held == 12 and kp.node_count == {"n0": 1, "n1": 1} and set(kp.share) == {"b", "c"}
    kp.drop("c")
    assert kp.node_count == {"n1": 1}
    kp.drop("zzz")  # not kept: nothing happens
    assert kp.held == 8


@pytest.mark.parametrize("name", ELASTIC)
def test_the_daemons_snapshots_keep_nothing(name):
    snap, _ = build(12, 8, 60, 150, seed=1)
    assert snap.job_changes is None
    elastic_kept._KEPT.clear()
    pol = policies.get_policy(name)
    pol.schedule(snap)
    kp = elastic_kept._KEPT.get((name, True))
    assert kp is not None and not kp.share


def test_the_kept_set_follows_the_job_record():
    """Jobs named by the record since the last call leave the set; another run's record,
    another node tuple or another configuration memo empties it; no record, no set."""
    from types import SimpleNamespace

    from policies.elastic_kept import KeptJobs
    from policies.model import Frozen, JobChanges

    def snap_of(items, nodes):
        jobs: dict = {}
        return SimpleNamespace(jobs=jobs, nodes=nodes,
                               job_changes=JobChanges(log=Frozen(items), source=jobs))

    nodes, accum, items = ("n",), {}, ["x"]
    kp = KeptJobs()
    assert kp.update(snap_of(items, nodes), accum)
    for jid in "abc":
        kp.add(jid, 1, (None, None, 1, ("n0",), ("g",), False))
    items.append("b")
    assert kp.update(snap_of(items, nodes), accum) and set(kp.share) == {"a", "c"}
    assert kp.update(snap_of(items, nodes), accum) and set(kp.share) == {"a", "c"}
    assert kp.update(snap_of(items, nodes), {}) and not kp.share  # another memo
    kp.add("a", 1, (None, None, 1, ("n0",), ("g",), False))
    assert kp.update(snap_of(items, ("m",)), accum) is True and not kp.share  # other nodes
    kp.add("a", 1, (None, None, 1, ("n0",), ("g",), False))
    assert kp.update(snap_of(list(items), ("m",)), accum) and not kp.share  # another run
    kp.add("a", 1, (None, None, 1, ("n0",), ("g",), False))
    bare = SimpleNamespace(jobs={}, nodes=nodes, job_changes=None)
    assert not kp.update(bare, accum) and not kp.share


@pytest.mark.parametrize("name", ["max-min", "themis"])
def test_a_kept_job_whose_view_changes_is_planned_again(name):
    """A kept job whose record changed (here: its per-GPU batch, on the same GPUs) is named
    by the job record and planned again (a Resize to its configuration), at every call on
    that snapshot: it joins the kept set only with no action."""
    import dataclasses

    from policies.model import Frozen, JobChanges
    from policies.plan import ResizeJob

    rec = Recorder(name)
    simulate(_jobs(60, seed=7), parse_cluster("16x8"), rec, MODELS, SimConfig())
    inner = rec.inner.schedule
    snap = rec.seen[len(rec.seen) // 2]
    elastic_kept._KEPT.clear()
    first = inner(snap)
    kp = elastic_kept._KEPT[(name, True)]
    assert kp.share, "nothing kept at the middle call"
    jid = sorted(kp.share)[0]
    job = snap.jobs[jid]
    assert inner(snap) == first and jid in kp.share  # the same snapshot again
    alloc = job.allocation
    moved = dataclasses.replace(alloc, sub_batch=alloc.sub_batch + 1, workers=())
    jobs = dict(snap.jobs)
    jobs[jid] = dataclasses.replace(job, allocation=moved)
    items = snap.job_changes.log._items
    items.append(jid)
    changed = dataclasses.replace(snap, jobs=jobs,
                                  job_changes=JobChanges(log=Frozen(items), source=jobs))
    one = inner(changed)
    resized = [a for a in one.actions if isinstance(a, ResizeJob) and a.job_id == jid]
    assert resized and set(resized[0].gpus) == set(alloc.gpus)
    assert inner(changed) == one and jid not in kp.share
