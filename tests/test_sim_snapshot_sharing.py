"""The simulator reuses the last snapshot's job map in place when nothing kept it (no
full copy per call) and copies it when a policy kept the snapshot or its ``jobs``."""
from __future__ import annotations

import pytest

import policies
from gimbalctl.cluster import parse_cluster
from gimbalctl.profiles import default_models
from gimbalctl.sim import SimConfig
from gimbalctl.sim.engine import Simulator
from policies.model import Job, JobState
from random_jobs import plain_jobs

MODELS = default_models()


def _jobs(n=80):
    return plain_jobs(n, 11, gpus=(1, 2, 4), span=5000.0)

class Probe:
    def __init__(self, name, keep):
        self.inner = policies.get_policy(name)
        self.name, self.preemptive = self.inner.name, self.inner.preemptive
        self.keep, self.kept, self.sim = keep, [], None
        self.reused = self.gpus_reused = 0
        self.last_id = self.last_gpus = None

    def schedule(self, snap):
        assert dict(snap.jobs) == self.sim.views  # same content as a fresh copy
        assert list(snap.jobs) == list(self.sim.views)  # and the same order
        self.reused += self.sim.snap_jobs is not None and id(self.sim.snap_jobs) == self.last_id
        self.last_id = id(self.sim.snap_jobs)
        # the GPU map: the simulator's, items in the same order as a fresh copy of it
        assert list(snap.gpu_jobs.items()) == list(self.sim.gpu_jobs.items())
        self.gpus_reused += id(self.sim.snap_gpus) == self.last_gpus
        self.last_gpus = id(self.sim.snap_gpus)
        if self.keep == "snapshot":
            self.kept.append((snap, dict(snap.jobs), list(snap.gpu_jobs.items())))
        elif self.keep == "jobs":
            self.kept.append((snap.jobs, dict(snap.jobs), None))
        elif self.keep == "gpus":
            self.kept.append((snap.gpu_jobs, None, list(snap.gpu_jobs.items())))
        return self.inner.schedule(snap)


@pytest.mark.parametrize("name,keep", [("fifo", None), ("tiresias", None), ("sjf-bsbf", None),
                                       ("tiresias", "snapshot"), ("sjf-bsbf", "jobs"),
                                       ("srtf", "gpus"), ("gandiva", None)])
def test_snapshot_job_map_shared_only_when_unobserved(name, keep):
    probe = Probe(name, keep)
    sim = Simulator(_jobs(), parse_cluster("2x4"), probe, MODELS, SimConfig(interval=120.0))
    probe.sim = sim
    res = sim.run()
    assert res.jobs.end.notna().all()
    calls = res.summary["policy_calls"]
    if keep is None:
        assert probe.reused >= calls - 2  # in place from the second call on
        assert probe.gpus_reused >= calls - 2  # the GPU map too
    else:
        if keep != "gpus":
            assert probe.reused == 0
        if keep != "jobs":
            assert probe.gpus_reused == 0
        for held, content, gpus in probe.kept:  # what a policy kept never changed
            if content is not None:
                jobs = held.jobs if keep == "snapshot" else held
                assert dict(jobs) == content
            if gpus is not None:
                held_gpus = held.gpu_jobs if keep == "snapshot" else held
                assert list(held_gpus.items()) == gpus


class QueueProbe:
    """Keeps what ``keep`` names of some snapshots (their queue, ids, history, the plan
    holding the snapshot) and counts the calls whose queue lists are the last call's."""

    def __init__(self, name, keep):
        self.inner = policies.get_policy(name)
        self.name, self.preemptive = self.inner.name, self.inner.preemptive
        self.keep, self.kept, self.sim = keep, [], None
        self.same_list = self.calls = 0
        self.last = None

    def schedule(self, snap):
        fresh = tuple(sorted((j for j in snap.jobs.values() if j.waiting),
                             key=lambda j: (j.submit_time, j.id)))
        assert snap.pending() == fresh and tuple(snap.pending()) == fresh
        assert tuple(snap.queue.ids) == tuple(j.id for j in fresh) == tuple(snap.waiting_ids)
        assert tuple(snap.history) == tuple(self.sim.history)
        lists = (id(self.sim.wjobs), id(self.sim.wids))
        self.same_list += lists == self.last
        self.last = lists
        self.calls += 1
        plan = self.inner.schedule(snap)
        if self.keep and self.calls % 3 == 0:
            what = {"queue": snap.queue, "pending": snap.pending(), "ids": snap.waiting_ids,
                    "iter": iter(snap.pending()), "plan": plan}[self.keep]
            self.kept.append((what, fresh, tuple(snap.history), snap.history))
        return plan


@pytest.mark.parametrize("name,keep", [("fifo", None), ("tiresias", None), ("fifo", "queue"),
                                       ("fifo", "pending"), ("srtf", "ids"), ("fifo", "iter"),
                                       ("fifo", "plan")])
def test_waiting_order_and_history_views_never_change_once_handed_out(name, keep):
    """The kept waiting order and the history reach snapshots as O(1) views; what a policy
    keeps (the queue, pending(), the ids, an iterator over them, a plan holding the
    snapshot) never changes, and with nothing kept the lists change in place."""
    probe = QueueProbe(name, keep)
    sim = Simulator(_jobs(), parse_cluster("2x4"), probe, MODELS, SimConfig(interval=120.0))
    probe.sim = sim
    sim.run()
    assert probe.calls > 30
    if keep is None:
        assert probe.same_list >= probe.calls // 2
    for what, fresh, hist, hist_view in probe.kept:
        assert tuple(hist_view) == hist
        if keep == "queue":
            assert tuple(what.jobs) == fresh and tuple(what.ids) == tuple(j.id for j in fresh)
        elif keep == "pending":
            assert what == fresh
        elif keep == "ids":
            assert tuple(what) == tuple(j.id for j in fresh)
        elif keep == "iter":
            assert tuple(what) == fresh
        else:
            assert set(what.order) <= {j.id for j in fresh}
            assert all(jid in what.reasons for jid in what.order)


@pytest.mark.parametrize("min_arrays", [None, 0, 4])
@pytest.mark.parametrize("name,preempt_cost", [("fifo", 0.0), ("tiresias", 30.0), ("srsf", 0.0),
                                               ("sjf-bsbf", 0.0)])
def test_timeline_samples_equal_the_loop_over_every_active_job(name, preempt_cost, min_arrays,
                                                               monkeypatch):
    """QL, CE and BI from the kept waiting order (fixed BI terms) and the running jobs
    sorted into arrival order are bit for bit the old loop over every active job
    (tests/reference_sim_sample.py), pre-emptions, restores and sharing included; the BI
    sums also with their numpy mirror (gimbalctl/sim/wait_terms.py) from 0 and 4 waiting
    jobs."""
    import reference_sim_sample

    from gimbalctl.sim import wait_terms

    if min_arrays is not None:
        monkeypatch.setattr(wait_terms, "MIN_ARRAYS", min_arrays)

    seen, mirrored = [], []
    orig = Simulator._sample

    def both(self):
        orig(self)
        new = tuple(self.timeline[-1])[1:]
        assert new == reference_sample.sample(self), self.now
        seen.append(new)
        mirrored.append(self.wterms.t0 is not None)

    reference_sample = reference_sim_sample
    monkeypatch.setattr(Simulator, "_sample", both)
    sim = Simulator(_jobs(120), parse_cluster("2x4"), policies.get_policy(name), MODELS,
                    SimConfig(interval=120.0, preempt_cost=preempt_cost, sample_every=200.0))
    sim.run()
    assert len(seen) > 50 and max(s[0] for s in seen) > 10 and max(s[2] for s in seen) > 0
    assert any(mirrored) == (min_arrays is not None)


class ViewProbe:
    """Checks every view of every snapshot against the old ``_view``
    (tests/reference_sim_view.py): equal, of type Job, the same attributes in the same
    order, frozen."""

    def __init__(self, name):
        self.inner = policies.get_policy(name)
        self.name, self.preemptive = self.inner.name, self.inner.preemptive
        self.needs_lengths = self.inner.needs_lengths
        self.sim, self.views, self.states = None, 0, set()

    def schedule(self, snap):
        import dataclasses

        import reference_sim_view

        for jid, v in snap.jobs.items():
            old = reference_sim_view.view(self.sim, self.sim.recs[jid])
            assert type(v) is Job and v == old and hash(v.id) == hash(old.id)
            assert list(vars(v).items()) == list(vars(old).items())
            with pytest.raises(dataclasses.FrozenInstanceError):
                v.as_of = 0.0
            self.views += 1
            self.states.add((v.state, v.restore_left > 0, v.total_iters is None))
        return self.inner.schedule(snap)


@pytest.mark.parametrize("name,reveal", [("tiresias", True), ("srtf", True), ("gandiva", False)])
def test_views_are_the_old_views(name, reveal):
    probe = ViewProbe(name)
    sim = Simulator(_jobs(), parse_cluster("2x4"), probe, MODELS,
                    SimConfig(interval=120.0, preempt_cost=30.0, reveal_lengths=reveal))
    probe.sim = sim
    sim.run()
    assert probe.views > 200
    states = {s for s, _, _ in probe.states}
    assert JobState.RUNNING in states and JobState.PENDING in states
    if name != "gandiva":
        assert JobState.SUSPENDED in states and any(r for _, r, _ in probe.states)
    hidden = not (reveal and probe.needs_lengths)  # total_iters shown only then
    assert {h for _, _, h in probe.states} == {hidden}


class RecordProbe:
    """Keeps a copy of every snapshot's map (``gpu_jobs`` or ``jobs``) and the log of its
    change record (``gpu_changes`` or ``job_changes``)."""

    def __init__(self, name, kind="gpu"):
        self.inner = policies.get_policy(name)
        self.name, self.preemptive = self.inner.name, self.inner.preemptive
        self.needs_lengths = self.inner.needs_lengths
        self.kind = kind
        self.seen = []

    def schedule(self, snap):
        rec, mapping = ((snap.gpu_changes, snap.gpu_jobs) if self.kind == "gpu"
                        else (snap.job_changes, snap.jobs))
        assert rec.source is mapping
        self.seen.append((dict(mapping), rec.log))
        return self.inner.schedule(snap)

    def run(self, preempt_cost, keep):
        """Simulate ``_jobs()`` on 2x4; ``keep``: the policy holds every snapshot (the
        simulator then copies its maps per call)."""
        schedule = self.schedule
        if keep:
            held = []
            self.schedule = lambda snap: (held.append(snap), schedule(snap))[1]
        Simulator(_jobs(), parse_cluster("2x4"), self, MODELS,
                  SimConfig(interval=120.0, preempt_cost=preempt_cost)).run()
        assert len(self.seen) > 30


@pytest.mark.parametrize("name,preempt_cost,keep", [("sjf-bsbf", 0.0, False),
                                                    ("tiresias", 30.0, False),
                                                    ("gandiva", 0.0, True)])
def test_gpu_change_record_names_every_changed_gpu(name, preempt_cost, keep):
    """Between two snapshots of a run the GPU map changes only at the GPUs of the record's
    new entries (sharing, pre-emption, migration), and each record extends the last."""
    probe = RecordProbe(name)
    probe.run(preempt_cost, keep)
    changed = 0
    for (a, la), (b, lb) in zip(probe.seen, probe.seen[1:]):
        assert lb.extends(la)
        named = set(lb[len(la):])
        diff = {g for g in a.keys() | b.keys() if a.get(g) != b.get(g)}
        assert diff <= named
        changed += bool(diff)
    assert changed > 10


@pytest.mark.parametrize("name,preempt_cost,keep", [("a-srpt", 0.0, False),
                                                    ("tiresias", 30.0, False),
                                                    ("sjf-bsbf", 0.0, True)])
def test_job_change_record_names_every_changed_job(name, preempt_cost, keep):
    """Between two snapshots of a run the job map changes (a job arrives, gets a new
    view, leaves) only at the ids of the record's new entries, and each record extends
    the last."""
    probe = RecordProbe(name, "job")
    probe.run(preempt_cost, keep)
    changed = left = 0
    for (a, la), (b, lb) in zip(probe.seen, probe.seen[1:]):
        assert lb.extends(la)
        named = set(lb[len(la):])
        diff = {j for j in a.keys() | b.keys() if a.get(j) is not b.get(j)}
        assert diff <= named
        changed += bool(diff)
        left += bool(a.keys() - b.keys())
    assert changed > 10 and left > 5
