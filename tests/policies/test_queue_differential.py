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
from collections import Counter
from contextlib import ExitStack
from types import MappingProxyType
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, note, settings, strategies as st

import policies
import reference_queue as ref
from gimbalctl.cluster import parse_cluster
from gimbalctl.profiles import APPS, default_models
from gimbalctl.sim import SimConfig, simulate
from policies import base, fifo, kept_order, quiet_calls, sjf, tiresias
from policies.model import (Allocation, ClusterSnapshot, Frozen, Gpu, Job, JobChanges, JobState,
                            Node, WaitingQueue)
from policies.plan import Reasons
from daemon_pass import build

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
        self.kept_calls = 0

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
        kept = self.inner.__dict__.get("_kept_order")
        if kept is not None and kept._seen is not None:  # the kept order is the fresh sort
            self.kept_calls += 1
            assert kept.ids == sorted(kept.ids, key=lambda i: kept.key_of[i])
            assert kept.ids == [j.id for j in kept.jobs]
            assert set(kept.ids) == set(snap.queue.ids)
            assert all(snap.jobs[j.id] is j for j in kept.jobs)  # the snapshot's own views
            assert kept.asked == sum(j.num_gpus for j in fresh)
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
    applied, merged = Counter(), Counter()
    apply, merge = kept_order.KeptOrder._apply, kept_order.schedule_preemptive_kept

    def count_apply(self, *a):
        applied["calls"] += 1
        return apply(self, *a)

    def count_merge(*a):
        plan = merge(*a)
        merged[plan is not None] += 1
        return plan

    with mock.patch.object(kept_order.KeptOrder, "_apply", count_apply), \
            mock.patch.object(kept_order, "schedule_preemptive_kept", count_merge):
        simulate(_jobs(120, seed), parse_cluster(cluster), pol, MODELS,
                 SimConfig(interval=120.0, preempt_cost=5.0))
    if name != "fifo":  # the kept order was brought up to date from the change record
        assert pol.kept_calls == pol.calls
        assert applied["calls"] > pol.calls // 2
    if name in ("srtf", "srsf", "tiresias"):  # ... and the merge answered most calls
        assert merged[True] > pol.calls // 2
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


def test_a_reasons_numbers_are_its_own():
    """A Reason's numbers are read-only and not the caller's mapping: changing the dict its
    numbers were passed from leaves them as made."""
    from policies.plan import ReasonCode, reason

    nums = {"length_s": 5.0}
    r = reason(ReasonCode.STARTED, "s", **nums, share=2.0)
    nums["length_s"] = 7.0
    nums["extra"] = 1.0
    assert dict(r.numbers) == {"length_s": 5.0, "share": 2.0}
    with pytest.raises(TypeError):
        r.numbers["share"] = 3.0  # type: ignore[index]


def test_start_job_is_the_dataclass_object():
    """``start_job()`` writes the instance dict directly: the object equals, hashes, prints,
    copies and pickles as ``StartJob(...)`` makes it, fields in order, and stays frozen."""
    import copy
    import dataclasses
    import pickle

    from policies.model import Gpu
    from policies.plan import StartJob, start_job

    gpus = (Gpu("n1", 0), Gpu("n1", 3))
    for args, kw in ((("j1", gpus, 8), {}), (("j2", gpus, 4, 2), {"share_with": ("a", "b")})):
        a, made = start_job(*args, **kw), StartJob(*args, **kw)
        assert type(a) is StartJob and a == made and hash(a) == hash(made)
        assert repr(a) == repr(made) and dataclasses.asdict(a) == dataclasses.asdict(made)
        assert list(vars(a)) == [f.name for f in dataclasses.fields(StartJob)] == list(vars(made))
        assert pickle.loads(pickle.dumps(a)) == made and copy.deepcopy(a) == made
        with pytest.raises(dataclasses.FrozenInstanceError):
            a.sub_batch = 1  # type: ignore[misc]
    assert start_job("j1", gpus, 8) != start_job("j1", gpus, 8, 2)


def test_reason_is_the_dataclass_object():
    """``reason()`` writes the instance dict directly: the object equals, prints, copies
    and pickles as ``Reason(...)`` makes it, with the fields in order, and stays frozen."""
    import copy
    import dataclasses
    import pickle
    from types import MappingProxyType

    from policies.plan import Reason, ReasonCode, reason

    r = reason(ReasonCode.WAIT_MEMORY, "no room", free_gpus=3, length_s=-1.0)
    made = Reason(ReasonCode.WAIT_MEMORY, "no room",
                  MappingProxyType({"free_gpus": 3, "length_s": -1.0}))
    assert type(r) is Reason and r == made and repr(r) == repr(made)
    assert list(vars(r)) == [f.name for f in dataclasses.fields(Reason)] == list(vars(made))
    assert r != reason(ReasonCode.WAIT_MEMORY, "no room", free_gpus=4, length_s=-1.0)
    assert r.as_dict() == made.as_dict()
    assert reason(ReasonCode.KEEP_RUNNING) == Reason(ReasonCode.KEEP_RUNNING)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.text = "other"  # type: ignore[misc]
    assert dataclasses.replace(r, text="t").text == "t"
    assert copy.copy(r) == made
    for obj in (made, r):  # the numbers proxy neither pickles nor deep-copies, as before
        with pytest.raises(TypeError):
            pickle.dumps(obj)
        with pytest.raises(TypeError):
            copy.deepcopy(obj)


def test_daemon_state():
    """The daemon's snapshot (built by build_snapshot, with its queue sorted once)."""
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


# ---- the kept orders over sequences of snapshots (policies/kept_order.py) --------------

class Lineage:
    """A stand-in for the simulator's bookkeeping: a job map changed step by step and the
    change record (``WaitingQueue.changes``) naming every job that entered or left the
    waiting order or got a new view in it, so one policy instance reuses its kept order
    across the snapshots; and the job change record (``ClusterSnapshot.job_changes``)
    naming every job whose entry in the map changed, as the simulator's does."""

    def __init__(self, nodes):
        self.nodes = nodes
        self.jobs: dict = {}
        self.log: list = []
        self.jlog: list = []  # the job change record: every id whose map entry changed
        self.now = 1000.0
        self.n = 0

    def free(self):
        used = {g for j in self.jobs.values() if j.running for g in j.allocation.gpus}
        return [g for n in self.nodes for g in n.gpus() if g not in used]

    def set(self, job):
        old = self.jobs.get(job.id)
        self.jobs[job.id] = job
        self.jlog.append(job.id)
        if job.waiting or (old is not None and old.waiting):
            self.log.append(job.id)

    def step(self, draw):
        apps = list(MODELS.profiles)[:3]
        self.now += draw(st.sampled_from([0.0, 30.0, 600.0, 7200.0]))
        for _ in range(draw(st.integers(0, 6))):
            op = draw(st.sampled_from(["arrive", "arrive", "arrive", "start", "finish",
                                       "preempt", "view", "progress", "cancel"]))
            waiting = sorted(j.id for j in self.jobs.values() if j.waiting)
            running = sorted(j.id for j in self.jobs.values() if j.running)
            if op == "arrive":
                n = draw(st.sampled_from([1, 1, 2, 4, 8] * 4 + [16]))  # 16 may be infeasible
                self.n += 1
                self.set(Job(id=f"J{self.n:03d}",
                             submit_time=draw(st.sampled_from([0.0, 10.0, self.now])),
                             num_gpus=n, app=draw(st.sampled_from(apps)), global_batch=32 * n,
                             total_iters=draw(st.floats(10, 1e5))))
            elif op == "start" and waiting:
                j = self.jobs[draw(st.sampled_from(waiting))]
                free = self.free()
                if j.num_gpus <= len(free):
                    self.set(dataclasses.replace(
                        j, state=JobState.RUNNING, allocation=Allocation(
                            tuple(free[:j.num_gpus]), 32), start_time=j.start_time or self.now,
                        as_of=self.now, iter_rate=draw(st.sampled_from([0.1, 1.0, 5.0])),
                        run_start=self.now))
            elif op == "finish" and running:
                jid = draw(st.sampled_from(running))
                del self.jobs[jid]
                self.jlog.append(jid)
            elif op == "preempt" and running:
                j = self.jobs[draw(st.sampled_from(running))]
                dt = self.now - j.as_of
                self.set(dataclasses.replace(
                    j, state=JobState.SUSPENDED, allocation=None, as_of=self.now,
                    completed_iters=j.completed_iters + j.iter_rate * dt,
                    attained_service=j.attained_service + j.num_gpus * dt,
                    executed_time=j.executed_time + dt, iter_rate=0.0,
                    preemptions=j.preemptions + 1, run_start=None))
            elif op == "cancel" and waiting:  # leaves the waiting order
                jid = draw(st.sampled_from(waiting))
                del self.jobs[jid]
                self.log.append(jid)
                self.jlog.append(jid)
            elif op == "view" and waiting:  # a new view of a waiting job (same job)
                self.set(dataclasses.replace(self.jobs[draw(st.sampled_from(waiting))]))
            elif op == "progress" and waiting:  # a waiting job whose key changes (recorded)
                j = self.jobs[draw(st.sampled_from(waiting))]
                self.set(dataclasses.replace(j, attained_service=j.attained_service + 7e4,
                                             completed_iters=j.completed_iters + 3.0))

    def snapshot(self, record=True):
        jobs = MappingProxyType(dict(self.jobs))
        q = WaitingQueue.of(jobs)
        jr = None
        if record:
            q = dataclasses.replace(q, changes=Frozen(self.log))
            jr = JobChanges(log=Frozen(self.jlog), source=jobs)
        gj = {g: (j.id,) for j in jobs.values() if j.running for g in j.allocation.gpus}
        return ClusterSnapshot(self.now, self.nodes, jobs, MappingProxyType(gj),
                               tuple(self.free()), MODELS.profiles, MODELS.memory,
                               waiting_ids=q.ids, queue=q, job_changes=jr)


KEPT = [("sjf", {}), ("sjf", {"backfill": True}), ("srtf", {}), ("srsf", {}), ("tiresias", {}),
        ("tiresias", {"promote_knob": 1.0}), ("srtf", {"min_run_s": 600.0})]


@pytest.mark.parametrize("name,kw", KEPT, ids=[n + ("+" + ",".join(kw) if kw else "")
                                               for n, kw in KEPT])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_kept_order_over_snapshot_sequences(name, kw, data):
    """One policy instance over a sequence of snapshots of one lineage (jobs arriving,
    starting, finishing, pre-empted, new views, changed keys), now and then a snapshot
    without a change record (the daemon's), an older snapshot again, or a second lineage:
    every Plan equals the old code's on that snapshot alone."""
    draw = data.draw
    nodes = tuple(Node(f"n{i}", draw(st.sampled_from([2, 4, 8])))
                  for i in range(draw(st.integers(1, 3))))
    lines = [Lineage(nodes), Lineage(nodes)]
    pol = policies.get_policy(name, **kw)
    kept_order.kept_order_of(pol)  # made before the calls (the reference must not touch it)
    seen = []
    reused = 0
    for _ in range(draw(st.integers(1, 12))):
        line = lines[draw(st.sampled_from([0, 0, 0, 1]))]
        line.step(draw)
        how = draw(st.sampled_from(["record"] * 6 + ["none", "older"]))
        snap = line.snapshot(how != "none")
        if how == "older" and seen:
            snap = draw(st.sampled_from(seen))
        seen.append(snap)
        before = pol._kept_order._seen
        plan = pol.schedule(snap)
        reused += before is not None and pol._kept_order._seen is not before
        assert_same(plan, reference_plan(pol, snap))
    note(f"reused {reused}")


def test_kept_order_is_reused_and_rebuilt():
    """The cases the sequences rely on: a longer record of the same list is applied (no
    rebuild), a record of another list, a shorter one or another profile table rebuilds,
    and no record leaves the order empty (the caller sorts)."""
    line = Lineage((Node("n0", 4),))
    for i in range(5):
        line.set(Job(f"a{i}", float(i), 1, list(MODELS.profiles)[0], 32,
                     total_iters=100.0 * (5 - i)))
    pol = policies.get_policy("sjf")
    kept = kept_order.kept_order_of(pol)
    rebuilds = []
    real = kept_order.KeptOrder._rebuild

    def rebuild(self, *a):
        rebuilds.append(1)
        return real(self, *a)

    with mock.patch.object(kept_order.KeptOrder, "_rebuild", rebuild):
        s1 = line.snapshot()
        pol.schedule(s1)
        assert len(rebuilds) == 1 and kept.ids == ["a4", "a3", "a2", "a1", "a0"]
        line.set(Job("b", 9.0, 1, list(MODELS.profiles)[0], 32, total_iters=1.0))
        s2 = line.snapshot()
        pol.schedule(s2)
        assert len(rebuilds) == 1 and kept.ids[0] == "b"  # applied, not rebuilt
        pol.schedule(s1)  # older: rebuilt
        assert len(rebuilds) == 2 and "b" not in kept.ids
        other = dataclasses.replace(s2, profiles=MappingProxyType(dict(MODELS.profiles)))
        pol.schedule(other)
        assert len(rebuilds) == 3
        assert pol.schedule(line.snapshot(record=False)) is not None
        assert kept.ids == [] and kept._seen is None


def test_kept_views_handed_out_never_change():
    """A plan's order and reasons keep their content when later calls change the kept
    order (the lists are copied while a view of them is held)."""
    line = Lineage((Node("n0", 1),))
    app = list(MODELS.profiles)[0]
    line.set(Job("r", 0.0, 1, app, 32, total_iters=1e6))
    line.set(dataclasses.replace(line.jobs["r"], state=JobState.RUNNING,
                                 allocation=Allocation((Gpu("n0", 0),), 32), as_of=0.0,
                                 iter_rate=1.0, run_start=0.0))
    for i in range(6):
        line.set(Job(f"w{i}", float(i), 1, app, 32, total_iters=10.0 * (i + 1)))
    for name in ("sjf", "srtf"):
        pol = policies.get_policy(name)
        plan = pol.schedule(line.snapshot())
        order, reasons = tuple(plan.order), dict(plan.reasons)
        assert len(order) >= 5
        line.set(Job(f"x{name}", 0.5, 1, app, 32, total_iters=1.0))
        del line.jobs[order[-1]]
        line.log.append(order[-1])
        pol.schedule(line.snapshot())
        assert tuple(plan.order) == order and dict(plan.reasons) == reasons


def test_joined_view():
    from policies.model import Joined

    v = Joined(("x", "y"), Frozen(["a", "b", "c"], 1))
    assert v == ("x", "y", "b", "c") and len(v) == 4 and v[-1] == "c" and v[1] == "y"
    assert v[2:] == ("b", "c") and isinstance(v[2:], Frozen) and v[1:3] == ("y", "b")
    assert list(v[::-1]) == ["c", "b", "y", "x"]
    with pytest.raises(IndexError):
        v[4]
    import pickle
    assert pickle.loads(pickle.dumps(v)) == ("x", "y", "b", "c")
    assert Frozen(["a", "b", "c"], 1, 3).extends(Frozen(["a"], 1, 2)) is False
    base_list = ["a", "b", "c"]
    assert Frozen(base_list, 0, 3).extends(Frozen(base_list, 0, 2))
    assert not Frozen(base_list, 0, 2).extends(Frozen(base_list, 0, 3))


# ---- the running jobs' keys kept across calls (policies/running_keys.py) ---------------

class RunLineage(Lineage):
    """A lineage whose running jobs also change as the simulator's do, without an entry in
    the change record: a new view of a running job (its progress checkpointed at ``now``,
    maybe at another rate, as after a co-location change), a restore after a start, an
    allocation smaller than the GPUs asked (elastic: Tiresias counts the GPUs held), and
    time steps of 0 and 1 s (the same running view seen at several ``now``)."""

    def step(self, draw):
        super().step(draw)
        self.now += draw(st.sampled_from([0.0, 0.0, 1.0, 5.0]))
        for _ in range(draw(st.integers(0, 3))):
            op = draw(st.sampled_from(["runview", "restore", "resize", "short"]))
            running = sorted(j.id for j in self.jobs.values() if j.running)
            if op == "short":  # a short arrival: lowers the first waiting key
                self.n += 1
                self.set(Job(id=f"J{self.n:03d}", submit_time=self.now,
                             num_gpus=draw(st.sampled_from([1, 2, 8])),
                             app=list(MODELS.profiles)[0], global_batch=32,
                             total_iters=draw(st.sampled_from([1.0, 5.0, 50.0]))))
                continue
            if not running:
                continue
            j = self.jobs[draw(st.sampled_from(running))]
            dt = self.now - j.as_of
            held = len(j.allocation.gpus)
            if op == "runview":  # progress checkpointed, maybe a new rate: same job
                self.set(dataclasses.replace(
                    j, as_of=self.now, completed_iters=j.completed_iters + j.iter_rate * dt,
                    attained_service=j.attained_service + held * dt,
                    executed_time=j.executed_time + dt,
                    iter_rate=draw(st.sampled_from([j.iter_rate, 0.0, 0.1, 20.0]))))
            elif op == "restore":
                self.set(dataclasses.replace(j, restore_left=draw(st.sampled_from([5.0, 600.0]))))
            elif op == "resize" and held > 1:  # holds fewer GPUs than it asked
                keep = draw(st.integers(1, held - 1))
                self.set(dataclasses.replace(
                    j, allocation=Allocation(j.allocation.gpus[:keep], 32), as_of=self.now,
                    attained_service=j.attained_service + held * dt,
                    completed_iters=j.completed_iters + j.iter_rate * dt,
                    executed_time=j.executed_time + dt))


RUNKEYS = [("srtf", {}), ("srsf", {}), ("tiresias", {}),
           ("tiresias", {"thresholds": (50.0, 400.0, 3000.0)}), ("srtf", {"min_run_s": 600.0}),
           ("tiresias", {"min_run_s": 30.0, "thresholds": (200.0,)})]


def _runkeys_id(n, kw):
    return n + ("+" + ",".join(kw) if kw else "")


def snapshot_sequence(draw, lines, steps: int, first: int, records: int):
    """Up to ``steps`` snapshots of the lineages ``lines`` (:class:`RunLineage`): each step
    moves one lineage (the first ``first`` times in ``first + 1``) and snapshots it with its
    change records (``records`` times in ``records + 3``), without them, or hands an earlier
    snapshot (an older one or the last one) in again."""
    seen = []
    for _ in range(draw(st.integers(1, steps))):
        line = lines[draw(st.sampled_from([0] * first + [1]))]
        line.step(draw)
        how = draw(st.sampled_from(["record"] * records + ["none", "older", "again"]))
        snap = line.snapshot(how != "none")
        if how in ("older", "again") and seen:
            snap = draw(st.sampled_from(seen)) if how == "older" else seen[-1]
        seen.append(snap)
        yield snap


@pytest.mark.parametrize("name,kw", RUNKEYS, ids=[_runkeys_id(n, kw) for n, kw in RUNKEYS])
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_running_keys_over_snapshot_sequences(name, kw, data):
    """One policy instance over snapshot sequences in which the same running view is seen
    at increasing ``now`` (its cached key a bound or, for Tiresias, exact until the next
    threshold), an older ``now`` again, a new view of a running job, threshold crossings,
    short arrivals that lower the first waiting key, and a second lineage: every Plan
    equals the old code's on that snapshot alone."""
    draw = data.draw
    nodes = tuple(Node(f"n{i}", draw(st.sampled_from([2, 4, 8])))
                  for i in range(draw(st.integers(1, 3))))
    lines = [RunLineage(nodes), RunLineage(nodes)]
    pol = policies.get_policy(name, **kw)
    kept_order.kept_order_of(pol)
    for snap in snapshot_sequence(draw, lines, 14, 4, 8):
        assert_same(pol.schedule(snap), reference_plan(pol, snap))


class KeyCount:
    """Counts a policy's key evaluations, the running jobs admitted without one, and the
    calls whose running jobs came from the last call's (``found``) or a scan."""

    def __init__(self):
        self.sure = self.evaluated = self.found = self.scanned = self.visited_sure = 0
        self.rekeyed = 0  # of ``evaluated``: from a view's ``rekey`` function (SRTF, SRSF)

    @property
    def reused(self):
        """Running jobs admitted as part of the last call's sure set taken over whole."""
        return self.sure - self.visited_sure

    def patches(self):
        from policies import running_keys

        rk = running_keys.RunningKeys
        visit, split, collect = rk._visit, rk.split, rk.collect
        me = self

        def count_visit(self, views, now, first, priority, horizon, running, sure, *a):
            def counted(j):
                me.evaluated += 1
                return priority(j)

            if len(a) > 2 and a[2] is not None:  # rekey: its functions count as evaluations
                rekey = a[2]

                def counted_rekey(j):
                    at = rekey(j)
                    if at is None:
                        return None

                    def counted_at(t):
                        me.evaluated += 1
                        me.rekeyed += 1
                        return at(t)

                    return counted_at

                a = a[:2] + (counted_rekey,) + a[3:]
            before = len(sure)
            out = visit(self, views, now, first, counted, horizon, running, sure, *a)
            me.visited_sure += len(sure) - before
            return out

        def count_split(self, *a):
            out = split(self, *a)
            me.sure += len(out[0])
            return out

        def count_collect(self, *a):
            out = collect(self, *a)
            me.found += out is not None
            me.scanned += out is None
            if out is not None:
                me.sure += len(out[1])
            return out

        return [mock.patch.object(rk, "_visit", count_visit),
                mock.patch.object(rk, "split", count_split),
                mock.patch.object(rk, "collect", count_collect)]


@pytest.mark.parametrize("name,kw", RUNKEYS[:4], ids=[_runkeys_id(n, kw) for n, kw in RUNKEYS[:4]])
def test_running_keys_are_reused_in_simulator_runs(name, kw):
    """In a simulator run (every Plan checked against the old code's) most running jobs
    are admitted from a cached key, and the running set comes from the last call's (the
    per-job visit: ``sorted_path`` off; the sorted path: test_running_order_differential)."""
    from policies import running_keys

    pol = Differential(name, kw)
    count = KeyCount()
    remember = running_keys.RunningKeys.remember
    extended = Counter()

    def checked_remember(self, snap, running, sure=(), *a):
        whole = self._taken is not None and self._taken[0] is sure
        remember(self, snap, running, sure, *a)
        extended[whole] += 1
        # the sure ids, views and set, kept incrementally, are those of ``sure``
        assert self._sure_views == tuple(sure)
        assert self._sure_ids == tuple(j.id for j in sure)
        assert self._sure_set is None or self._sure_set == set(self._sure_ids)
        assert self._run is running

    with ExitStack() as stack:
        for p in count.patches():
            stack.enter_context(p)
        stack.enter_context(mock.patch.object(running_keys.RunningKeys, "remember",
                                              checked_remember))
        stack.enter_context(mock.patch.object(running_keys.RunningKeys, "sorted_path", False))
        simulate(_jobs(160, 3), parse_cluster("2x8"), pol, MODELS,
                 SimConfig(interval=120.0, preempt_cost=5.0))
    assert pol.calls > 50
    assert count.sure > count.evaluated > 0
    assert count.found > count.scanned
    assert count.reused > 0
    assert extended[True] > 0 and extended[False] > 0
    if name in ("srtf", "srsf"):  # keys at a later now from the views' rekey functions
        assert count.rekeyed > 0
    else:
        assert count.rekeyed == 0


@pytest.mark.parametrize("name", ["srtf", "srsf"])
@settings(max_examples=300, deadline=None)
@given(done=st.floats(0, 2e4), total=st.floats(1, 2e4), rate=st.sampled_from([0.0, 1e-3, 0.7,
                                                                               3.0, 250.0]),
       as_of=st.floats(0, 1e6), restore=st.sampled_from([0.0, 5.0, 600.0]),
       steps=st.lists(st.floats(0, 1e5), min_size=1, max_size=5),
       g=st.sampled_from([1, 2, 8, 16]), batch=st.sampled_from([1, 32, 96]),
       per=st.sampled_from([2, 8]))
def test_rekey_is_the_key(name, done, total, rate, as_of, restore, steps, g, batch, per):
    """A running view's ``rekey`` function gives, at every later ``now``, the very key
    (bit for bit) the policy's ``key`` gives through the snapshot at that ``now``: with a
    restore under way or over, at rate 0, and past the end (remaining time 0)."""
    app = list(MODELS.profiles)[1]
    nodes = tuple(Node(f"n{i}", per) for i in range(4))
    gpus = tuple(Gpu(f"n{i // per}", i % per) for i in range(min(g, 4 * per)))
    job = Job("r", 3.0, g, app, batch, total_iters=total, state=JobState.RUNNING,
              allocation=Allocation(gpus, 32), as_of=as_of, completed_iters=done,
              iter_rate=rate, restore_left=restore, run_start=as_of)
    pol = policies.get_policy(name)
    now = as_of
    snap = ClusterSnapshot(now, nodes, MappingProxyType({"r": job}), MappingProxyType({}), (),
                           MODELS.profiles, MODELS.memory)
    at = pol.running_rekey(snap)(job)
    for dt in steps:
        now += dt
        later = dataclasses.replace(snap, now=now)
        want = (pol.key(later, job), job.submit_time, job.id)
        assert at(now) == want and repr(at(now)[0]) == repr(want[0])
    assert pol.running_rekey(snap)(dataclasses.replace(job, total_iters=None)) is None


def test_rekey_only_for_the_policies_own_key():
    """A subclass with its own key gets no rekey function (its key is evaluated)."""
    from policies.srtf import Srtf

    class Other(Srtf):
        def key(self, snap, job):
            return 1.0

    snap = ClusterSnapshot(0.0, (Node("n0", 2),), MappingProxyType({}), MappingProxyType({}),
                           (), MODELS.profiles, MODELS.memory)
    assert Other().running_rekey(snap) is None
    assert policies.get_policy("srtf").running_rekey(snap) is not None
    assert policies.get_policy("tiresias").__dict__.get("running_rekey") is None


def test_running_keys_cache_rules():
    """The cases the cache relies on, on one running job and one waiting job: a bound
    computed earlier admits the job without a key; a new view, an older ``now``, another
    profile table or a waiting key below the bound evaluate it again."""
    from policies import running_keys

    app = list(MODELS.profiles)[0]
    line = Lineage((Node("n0", 2),))
    line.set(Job("r", 0.0, 1, app, 32, total_iters=1e4))
    line.set(dataclasses.replace(line.jobs["r"], state=JobState.RUNNING,
                                 allocation=Allocation((Gpu("n0", 0),), 32), as_of=line.now,
                                 iter_rate=1.0, run_start=line.now))
    line.set(Job("w", 0.0, 2, app, 64, total_iters=2e4))  # waits: asks both GPUs
    pol = policies.get_policy("srtf")
    count = KeyCount()
    with ExitStack() as stack:
        for p in count.patches():
            stack.enter_context(p)
        # the cache itself: calls at which nothing changed are not answered before it
        # (policies.quiet_calls; test_quiet_calls_* below)
        stack.enter_context(mock.patch.object(quiet_calls.QuietCalls, "answer",
                                              lambda *a: False))
        # the per-job visit (the sorted path's rules: test_running_order_differential)
        stack.enter_context(mock.patch.object(running_keys.RunningKeys, "sorted_path", False))

        def call(snap):
            assert_same(pol.schedule(snap), reference_plan(pol, snap))
            return count.sure, count.evaluated

        s0 = line.snapshot()
        assert call(s0) == (0, 1)  # first sight: evaluated
        line.now += 10.0
        s1 = line.snapshot()
        assert call(s1) == (1, 1)  # same view later: the bound admits it
        assert call(s0) == (2, 1)  # the very time of the bound: still admitted
        line.now += 10.0
        line.set(dataclasses.replace(line.jobs["r"], iter_rate=2.0))
        s2 = line.snapshot()
        assert call(s2) == (2, 2)  # a new view: evaluated
        assert call(s2) == (3, 2)
        assert call(dataclasses.replace(s2, now=s2.now - 5.0)) == (3, 3)  # an older now
        line.set(Job("x", 0.0, 2, app, 64, total_iters=1.0))  # a short arrival: the
        assert call(line.snapshot()) == (3, 4)  # first waiting key is below the bound
        other = dataclasses.replace(line.snapshot(), profiles=MappingProxyType(
            dict(MODELS.profiles)))
        assert call(other) == (3, 5)  # another profile table: the cache is dropped
    assert isinstance(pol._running_keys, running_keys.RunningKeys)


@settings(max_examples=300, deadline=None)
@given(a=st.floats(0, 1e6), held=st.integers(1, 64), as_of=st.floats(0, 1e6),
       dt=st.floats(0, 1e6), th=st.lists(st.floats(1.0, 2e6), min_size=1, max_size=4),
       frac=st.floats(0, 1))
def test_tiresias_horizon_is_exact(a, held, as_of, dt, th, frac):
    """Over [now, until] the queue a running job's attained service gives is the one at
    ``now`` (the model's own sum at the horizon is below the next threshold)."""
    from policies.running_keys import tiresias_horizon

    th = tuple(sorted(set(th)))
    now = as_of + dt
    gpus = tuple(Gpu("n0", i) for i in range(held))
    job = Job("r", 0.0, 64, "x", 32, state=JobState.RUNNING, allocation=Allocation(gpus, 32),
              as_of=as_of, attained_service=a)
    snap = ClusterSnapshot(now, (Node("n0", 64),), MappingProxyType({"r": job}),
                           MappingProxyType({}), ())
    pol = policies.get_policy("tiresias", thresholds=th)
    q = pol.queue_of(snap, job)
    until, falling = tiresias_horizon(snap, th)(job, (q, 0.0, "r"))
    assert until >= now and not falling
    for t in (now, until, now + frac * (until - now)) if until < float("inf") else (now, now * 2):
        assert pol.queue_of(dataclasses.replace(snap, now=t), job) == q
    if q < len(th) and until < float("inf"):  # not far short of the threshold either
        later = until + max(1.0, until * 1e-6) + (th[q] - a) / held
        assert pol.queue_of(dataclasses.replace(snap, now=later), job) > q


def test_running_keys_only_when_the_running_jobs_fit():
    """Two running jobs on the same two GPUs (a daemon's snapshot with sharing): they do
    not fit together, so the one ranked second is pre-empted at every call, a cached
    bound below the first waiting key notwithstanding."""
    app = list(MODELS.profiles)[0]
    line = Lineage((Node("n0", 2),))
    gpus = (Gpu("n0", 0), Gpu("n0", 1))
    for jid, iters in (("a", 100.0), ("b", 200.0)):
        line.set(Job(jid, 0.0, 2, app, 64, total_iters=iters, state=JobState.RUNNING,
                     allocation=Allocation(gpus, 32), as_of=line.now, iter_rate=1.0,
                     run_start=line.now))
    line.set(Job("w", 0.0, 1, app, 32, total_iters=1e6))
    pol = policies.get_policy("srtf")
    for step in (0.0, 10.0, 20.0):
        line.now += step
        snap = line.snapshot()
        plan = pol.schedule(snap)
        assert_same(plan, reference_plan(pol, snap))
        assert [a.job_id for a in plan.actions] == ["b"]
