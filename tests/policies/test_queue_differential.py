"""The simulator's kept waiting order (``ClusterSnapshot.queue``) and the lazy reasons of
``schedule_nonpreemptive`` / ``schedule_preemptive`` (``policies.plan.Reasons``: the
blocked tail and the kept-running jobs as shared segments) give exactly the Plans of the
helpers they replaced, kept verbatim in reference_queue.py: same actions, order,
infeasible list and every job's reason code, text and numbers.

Every policy built on those helpers (fifo, fifo with backfill, sjf, srtf, srsf, tiresias)
runs both ways at every call of simulator runs whose queue grows long (small clusters,
pre-emptions, ties in submit time) and on random hand-built snapshots (running,
pending and suspended jobs, jobs asking more than the cluster, with and without the
simulator's ``waiting_ids`` and a queue)."""
from __future__ import annotations

import dataclasses
import sys
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from types import MappingProxyType
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import policies
import reference_queue as ref
from gimbalctl.cluster import parse_cluster
from gimbalctl.profiles import APPS, default_models
from gimbalctl.sim import SimConfig, simulate
from policies import base, fifo, sjf, tiresias
from policies.model import (Allocation, ClusterSnapshot, Gpu, Job, JobState, Node, WaitingQueue)
from policies.plan import Reasons

MODELS = default_models()
POLICIES = [("fifo", {}), ("fifo", {"backfill": True}), ("sjf", {}), ("srtf", {}),
            ("srsf", {}), ("tiresias", {}), ("srtf", {"min_run_s": 600.0})]
IDS = [n + ("+" + ",".join(kw) if kw else "") for n, kw in POLICIES]


def reference_plan(pol, snap):
    """``pol``'s Plan with the replaced helpers and the sorting ``pending`` in place."""
    with ExitStack() as stack:
        for mod, name, fn in [(fifo, "schedule_nonpreemptive", ref.schedule_nonpreemptive),
                              (sjf, "schedule_nonpreemptive", ref.schedule_nonpreemptive),
                              (base, "schedule_preemptive", ref.schedule_preemptive),
                              (ClusterSnapshot, "pending", ref.pending),
                              (sjf.Sjf, "schedule", ref.sjf_schedule),
                              (base.PreemptiveByKey, "schedule", ref.preemptive_by_key_schedule),
                              (tiresias.Tiresias, "schedule", ref.tiresias_schedule)]:
            stack.enter_context(mock.patch.object(mod, name, fn))
        return pol.schedule(snap)


def assert_same(plan, old):
    assert plan.policy == old.policy
    assert plan.actions == old.actions
    assert plan.order == old.order
    assert plan.infeasible == old.infeasible
    assert plan.reasons.keys() == old.reasons.keys()
    assert len(plan.reasons) == len(old.reasons)
    for jid, r in old.reasons.items():
        p = plan.reasons[jid]
        assert (p.code, p.text) == (r.code, r.text), jid
        assert dict(p.numbers) == dict(r.numbers), jid
        assert jid in plan.reasons
    assert plan == old  # Plan equality is by content, lazy reasons included
    assert plan.as_dict() == old.as_dict()


class Differential:
    """Runs the package's helpers and the reference at every snapshot the simulator makes;
    also checks the kept queue against a fresh sort of the waiting jobs."""

    def __init__(self, name, kw):
        self.inner = policies.get_policy(name, **kw)
        self.name = name
        self.preemptive = self.inner.preemptive
        self.needs_lengths = self.inner.needs_lengths
        self.calls = 0
        self.codes = Counter()
        self.longest = 0
        self.lazy = 0

    def schedule(self, snap):
        assert snap.queue is not None and snap.queue.source is snap.jobs
        fresh = ref.pending(snap)
        assert snap.pending() == fresh
        assert all(a is b for a, b in zip(snap.pending(), fresh))  # the very views of jobs
        assert snap.queue.ids == tuple(j.id for j in fresh)
        assert snap.queue.max_gpus == max((j.num_gpus for j in fresh), default=0)
        assert set(snap.waiting_ids) == {j.id for j in snap.jobs.values() if j.waiting}
        self.longest = max(self.longest, len(fresh))
        plan = self.inner.schedule(snap)
        old = reference_plan(self.inner, snap)
        if isinstance(plan.reasons, Reasons):
            self.lazy += 1
        assert_same(plan, old)
        self.calls += 1
        self.codes.update(r.code.value for r in plan.reasons.values())
        return plan


def _jobs(n, seed, gpus=(1, 1, 1, 2, 2, 4, 8)):
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        app = APPS[int(rng.integers(len(APPS)))]
        g = int(gpus[int(rng.integers(len(gpus)))])
        batch = MODELS.iters_table[app][0][0] * g * int(rng.choice([1, 2, 4]))
        # whole minutes: several jobs arrive at the same second (ties broken by id)
        out.append(Job(id=f"j{i}", submit_time=float(60 * int(rng.uniform(0, 60))),
                       num_gpus=g, app=app, global_batch=batch,
                       total_iters=float(rng.uniform(50, 20000))))
    return out


@pytest.mark.parametrize("name,kw", POLICIES, ids=IDS)
@pytest.mark.parametrize("cluster,seed", [("2x8", 0), ("4x4", 1), ("1x8", 2)])
def test_simulator_runs(name, kw, cluster, seed):
    pol = Differential(name, kw)
    simulate(_jobs(120, seed), parse_cluster(cluster), pol, MODELS,
             SimConfig(interval=120.0, preempt_cost=5.0))
    assert pol.calls > 50
    assert pol.longest > 30  # a long queue
    assert pol.lazy == pol.calls
    assert pol.codes["keep_running"] > 0
    if name == "fifo" and not kw:
        assert pol.codes["wait_order"] > 0  # the blocked tail as one shared reason
    if name in ("srtf", "srsf", "tiresias"):
        assert pol.codes["preempted"] > 0


def _random_snapshot(draw):
    nodes = draw(st.integers(1, 3))
    per = draw(st.sampled_from([2, 4, 8]))
    node_objs = tuple(Node(f"n{i}", per) for i in range(nodes))
    free = [g for n in node_objs for g in n.gpus()]
    apps = list(MODELS.profiles)[:3]
    now = 5000.0
    jobs = []
    for k in range(draw(st.integers(0, 10))):
        want = draw(st.sampled_from([1, 1, 2, 4]))
        if len(free) < want:
            break
        start = draw(st.integers(0, len(free) - want))
        gpus = tuple(free[start:start + want])
        del free[start:start + want]
        app = draw(st.sampled_from(apps))
        jobs.append(Job(id=f"R{k}", submit_time=draw(st.sampled_from([0.0, 10.0, 20.0])),
                        num_gpus=want, app=app, global_batch=32 * want,
                        total_iters=draw(st.floats(1e3, 1e6)), state=JobState.RUNNING,
                        allocation=Allocation(gpus, 32), start_time=0.0,
                        as_of=draw(st.floats(0, now)), completed_iters=draw(st.floats(0, 900)),
                        attained_service=draw(st.floats(0, 1e5)), iter_rate=0.5,
                        run_start=draw(st.sampled_from([0.0, 4800.0, now]))))
    for k in range(draw(st.integers(0, 25))):
        n = draw(st.sampled_from([1, 1, 2, 4, 8, 16, 64]))  # 16 and 64 may be infeasible
        suspended = draw(st.booleans())
        jobs.append(Job(id=f"P{k:02d}", submit_time=draw(st.sampled_from([0.0, 10.0, 30.0, 50.0])),
                        num_gpus=n, app=draw(st.sampled_from(apps)), global_batch=32 * n,
                        total_iters=draw(st.floats(10, 1e5)),
                        state=JobState.SUSPENDED if suspended else JobState.PENDING,
                        completed_iters=5.0 if suspended else 0.0,
                        attained_service=draw(st.floats(0, 1e5)) if suspended else 0.0,
                        preemptions=1 if suspended else 0))
    order = draw(st.permutations(jobs))  # the job map's own order must not matter
    gj = {g: (j.id,) for j in jobs if j.running for g in j.allocation.gpus}
    snap = ClusterSnapshot(now, node_objs, MappingProxyType({j.id: j for j in order}),
                           MappingProxyType(gj), tuple(free), MODELS.profiles, MODELS.memory)
    if draw(st.booleans()):  # the simulator's precomputed waiting ids
        snap = dataclasses.replace(snap, waiting_ids=tuple(j.id for j in order if j.waiting))
    if draw(st.booleans()):  # the kept waiting order, as the simulator and the daemon give it
        snap = dataclasses.replace(snap, queue=WaitingQueue.of(snap.jobs))
    return snap


@pytest.mark.parametrize("name,kw", POLICIES, ids=IDS)
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_snapshots(name, kw, data):
    snap = _random_snapshot(data.draw)
    pol = policies.get_policy(name, **kw)
    assert snap.pending() == ref.pending(snap)
    assert_same(pol.schedule(snap), reference_plan(pol, snap))


def test_stale_queue_is_not_used():
    """A copy with another job map ignores the queue taken from the old one."""
    a = Job("a", 0.0, 1, "x", 32)
    b = Job("b", 1.0, 1, "x", 32)
    snap = ClusterSnapshot(0.0, (Node("n0", 1),), MappingProxyType({"a": a}),
                           MappingProxyType({}), (Gpu("n0", 0),))
    snap = dataclasses.replace(snap, queue=WaitingQueue.of(snap.jobs))
    assert snap.pending() == (a,)
    other = dataclasses.replace(snap, jobs=MappingProxyType({"a": a, "b": b}))
    assert other.pending() == (a, b)


def test_lazy_reasons_mapping():
    """Explicit entries win over segments, an earlier segment over a later one; callables
    are evaluated once, on the first lookup the explicit entries cannot answer."""
    from policies.plan import ReasonCode, reason

    r1, r2, r3 = (reason(ReasonCode.STARTED, "s"), reason(ReasonCode.WAIT_ORDER, "w"),
                  reason(ReasonCode.KEEP_RUNNING, "k"))
    calls = []

    def running():
        calls.append(1)
        return {"a", "c"}

    m = Reasons({"a": r1}, [(("b", "c"), r2), (running, r3)])
    assert m["a"] == r1 and not calls
    assert m["b"] == r2 and m["c"] == r2 and len(calls) == 1
    assert dict(m) == {"a": r1, "b": r2, "c": r3} | {"c": r2}
    assert len(m) == 3 and "z" not in m and m.get("z") is None
    with pytest.raises(KeyError):
        m["z"]
    assert m == MappingProxyType({"a": r1, "b": r2, "c": r2})
    assert len(calls) == 1


def test_daemon_state():
    """The daemon's snapshot (built by build_snapshot, with its queue sorted once)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    try:
        from daemon_pass import build
    finally:
        sys.path.pop(0)
    snap, _ = build(12, 8, 60, 300, seed=0)
    assert snap.queue is not None and snap.queue.source is snap.jobs
    assert snap.pending() == ref.pending(snap)
    for name, kw in POLICIES:
        pol = policies.get_policy(name, **kw)
        assert_same(pol.schedule(snap), reference_plan(pol, snap))


@settings(max_examples=200, deadline=None)
@given(app=st.sampled_from(sorted(MODELS.profiles)), g=st.sampled_from([1, 2, 3, 4, 8, 16, 32]),
       batch=st.integers(1, 4096), per=st.sampled_from([1, 2, 4, 8]), repeat=st.booleans())
def test_exclusive_iter_time_memo_is_the_formula(app, g, batch, per, repeat):
    """The memoised ``exclusive_iter_time`` is the direct formula, for a repeated and a
    fresh profile object (a changed profile under the same name is not answered from
    the memo)."""
    nodes = (Node("n0", per), Node("n1", per))
    prof = MODELS.profiles[app]
    if not repeat:
        prof = dataclasses.replace(prof, alpha_comp=prof.alpha_comp * 1.5)
    snap = ClusterSnapshot(0.0, nodes, MappingProxyType({}), MappingProxyType({}), (),
                           MappingProxyType({app: prof}))
    job = Job("j", 0.0, g, app, batch)
    want = prof.iter_time(max(1.0, batch / g), g, -(-g // per), 1)
    assert snap.exclusive_iter_time(job) == want
    assert snap.exclusive_iter_time(job) == want


def test_frozen_views_slice_pickle_and_copy_as_their_content():
    import copy
    import pickle

    from policies.model import Frozen

    items = ["a", "b", "c", "d"]
    v = Frozen(items)[1:3]
    assert v == ("b", "c") and v[-1] == "c" and list(v[::-1]) == ["c", "b"] and v[5:] == ()
    assert pickle.loads(pickle.dumps(v)) == ("b", "c") == copy.deepcopy(v)
    assert Frozen(items, 0, 2) != ("a", "b", "c") and ("a", "b") == Frozen(items, 0, 2)
