"""Records the simulator builds without the dataclass __init__ (gimbalctl/sim/records.py)
equal the constructor's at every call of simulator runs, and the run's garbage-collector
setting is restored."""
from __future__ import annotations

import dataclasses
import gc

import pytest
from hypothesis import given, settings, strategies as st

import policies
from gimbalctl.sim import PlanError, SimConfig
from gimbalctl.sim.engine import Simulator
from gimbalctl.sim.records import PLAIN, plain
from policies.model import (ClusterSnapshot, FinishedJob, Gpu, GpuChanges, Job, JobChanges,
                            JobState, Node, WaitingQueue, WorkerAlloc, uniform_workers)
from policies.plan import Plan, StartJob

from tests.test_sim_kept_free import MODELS, _jobs
from policy_probe import PolicyProbe


def same_as_constructed(obj):
    """``obj`` is in every respect ``type(obj)(**its fields)``."""
    cls = type(obj)
    names = [f.name for f in dataclasses.fields(cls)]
    ref = cls(**{n: getattr(obj, n) for n in names})
    assert list(vars(obj)) == names  # every field, in field order, nothing else
    assert all(vars(obj)[n] is vars(ref)[n] for n in names)
    assert obj == ref and repr(obj) == repr(ref)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(obj, names[0], None)
    return ref


class Probe(PolicyProbe):
    def __init__(self, name):
        super().__init__(name)
        self.calls = self.workers = self.history = self.allocs = 0
        self.thresholds = set()

    def schedule(self, snap):
        self.calls += 1
        self.thresholds.add(gc.get_threshold())
        same_as_constructed(snap)
        for part in (snap.queue, snap.gpu_changes, snap.job_changes):
            same_as_constructed(part)
        assert snap.waiting_ids is snap.queue.ids
        if snap.history:
            same_as_constructed(snap.history[-1])
            self.history += 1
        for j in snap.jobs.values():
            a = j.allocation
            if a is not None:
                same_as_constructed(a)  # the engine writes its attribute dict
                self.allocs += 1
            if j.running and len({w.share for w in a.workers}) <= 2 and \
                    a.workers == uniform_workers(a.gpus, a.sub_batch, a.accum_steps, a.mps_pct,
                                                 a.global_batch or j.global_batch):
                for w in a.workers:
                    same_as_constructed(w)
                self.workers += 1
        return self.inner.schedule(snap)


@pytest.mark.parametrize("name", ["fifo", "tiresias", "sjf-bsbf", "gandiva", "afs-l", "gavel"])
def test_records_equal_the_constructors_at_every_call(name):
    probe = Probe(name)
    nodes = (Node("b", 8), Node("a", 4), Node("d", 8))
    saved = gc.get_threshold()
    gc.set_threshold(650, 9, 11)  # the caller's (not the default: a run may have left that)
    try:
        res = Simulator(_jobs(60), nodes, probe, MODELS, SimConfig(interval=120.0)).run()
        # afterwards the caller's thresholds again
        assert gc.get_threshold() == (650, 9, 11)
    finally:
        gc.set_threshold(*saved)
    assert res.jobs.end.notna().all() and probe.calls > 30
    assert probe.history > 10 and probe.workers > 10 and probe.allocs > 10
    # during the run: no automatic full collection, the young generations as the caller's
    assert probe.thresholds == {(650, 9, 1 << 30)}


def test_thresholds_restored_when_a_plan_fails():
    class Bad:
        name = "bad"

        def schedule(self, snap):
            j = next(iter(snap.jobs))
            return Plan("bad", (StartJob(j, tuple(snap.free_gpus[:1]) * 2, 1),))

    saved = gc.get_threshold()
    gc.set_threshold(650, 9, 11)
    try:
        with pytest.raises(PlanError):
            Simulator(_jobs(5), (Node("a", 8),), Bad(), MODELS).run()
        assert gc.get_threshold() == (650, 9, 11)
    finally:
        gc.set_threshold(*saved)


def test_plain_classes_and_fields():
    assert set(PLAIN) >= {ClusterSnapshot, WaitingQueue, GpuChanges, JobChanges, FinishedJob,
                          WorkerAlloc}
    f = plain(FinishedJob, id="x", user="u", submit_time=1.0, start_time=2.0, end_time=3.0,
              num_gpus=1, app="a", name="", group_id=None, iterations=5.0, global_batch=None)
    assert same_as_constructed(f) == FinishedJob("x", "u", 1.0, 2.0, 3.0, 1, "a", "", None, 5.0)


@settings(max_examples=300, deadline=None)
@given(k=st.integers(0, 9), sub=st.integers(1, 64), accum=st.integers(1, 8),
       mps=st.one_of(st.none(), st.integers(1, 100)),
       batch=st.one_of(st.none(), st.integers(1, 2048)))
def test_uniform_workers_are_the_constructors_records(k, sub, accum, mps, batch):
    """policies.model.uniform_workers writes each WorkerAlloc's attribute dict; the records
    are the constructor's: same fields in order, the same objects, equal, frozen."""
    gpus = tuple(Gpu(f"n{i % 3}", i) for i in range(k))
    got = uniform_workers(gpus, sub, accum, mps, batch)
    if batch is None or k == 0:
        shares = [sub * accum] * k
    else:
        shares = [batch // k + (1 if i < batch % k else 0) for i in range(k)]
    want = tuple(WorkerAlloc(g, s, sub, accum, mps) for g, s in zip(gpus, shares))
    assert got == want and type(got) is tuple
    for w in got:
        assert type(w) is WorkerAlloc
        same_as_constructed(w)
        assert hash(w) == hash(WorkerAlloc(**vars(w)))


class _ViewChecked(Simulator):
    """After every call, each active job's view is the ``dataclasses.replace`` of its spec
    with the simulator's state (the form before views were filled in place)."""

    checked = 0

    def _schedule(self):
        super()._schedule()
        for rec in self.active.values():
            run = rec.state is JobState.RUNNING
            ref = dataclasses.replace(
                rec.spec, total_iters=rec.spec.total_iters if self.reveal else None,
                state=rec.state, allocation=rec.alloc, start_time=rec.first_start,
                as_of=rec.as_of, completed_iters=rec.done_iters, attained_service=rec.service,
                executed_time=rec.executed, iter_rate=rec.rate if run else 0.0,
                restore_left=rec.overhead if run else 0.0, preemptions=rec.preemptions,
                run_start=rec.run_start if run else None)
            view = self._view(rec)
            assert list(vars(view)) == list(vars(ref))  # every field, in field order
            assert all(vars(view)[k] is vars(ref)[k] or vars(view)[k] == vars(ref)[k]
                       for k in vars(ref))
            assert view == ref and type(view) is Job
            self.checked += 1


@pytest.mark.parametrize("name,reveal", [("tiresias", True), ("srsf", True), ("fifo", False),
                                         ("afs-l", True), ("isolation", True)])
def test_views_equal_the_replaced_spec_at_every_call(name, reveal):
    nodes = (Node("b", 8), Node("a", 4))
    sim = _ViewChecked(_jobs(50), nodes, policies.get_policy(name), MODELS,
                       SimConfig(interval=120.0, reveal_lengths=reveal))
    res = sim.run()
    assert res.jobs.end.notna().all() and sim.checked > 100
    if not reveal:  # the lengths were hidden from the policy
        assert not sim.reveal
