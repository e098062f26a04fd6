"""GIMBAL coordinator (seed 004 §5): eq. 1-6 by hand, Algorithm 1 on hand-built sets (the
Fig. 5 example), early exit, and the §5.1 packing constraints under random placements."""
import math
from dataclasses import dataclass

import pytest
from hypothesis import given, settings, strategies as st

from policies.gimbal_coord import (JobInfo, RateModel, coordination_search, importance,
                                   job_priority, lgrr_squeeze, lgrr_swell, local_objective,
                                   packing_ok, packing_sets, packing_violations)
from policies.model import ClusterSnapshot, Gpu, Job, Allocation, JobState, Node, WorkerAlloc
from policies.throughput import InterferenceTable, ThroughputProfile


@dataclass(frozen=True)
class DemandTable(InterferenceTable):
    """A test MPS model: each app needs a fraction ``d`` of the SMs; a worker gets
    min(d, its MPS cap), scaled down when the two together ask for more than the GPU."""

    demand: tuple = (("a", 1.0), ("h", 1.0), ("l", 0.2))

    def _d(self, app):
        return dict(self.demand)[app]

    def ratio(self, app, other, mps_pct=None, other_mps_pct=None):
        pa = (mps_pct or 100) / 100
        pb = (other_mps_pct or 100) / 100
        a, b = min(self._d(app), pa), min(self._d(other), pb)
        s = max(1.0, a + b)
        return self._d(app) / (a / s)

    def mps_alone(self, app, mps_pct):
        return max(1.0, self._d(app) / ((mps_pct or 100) / 100))


PROF = {a: ThroughputProfile(a, 0.0, 0.01, 0.0, 0.0, 0.0, 0.0) for a in "ahl"}
MODEL = RateModel(PROF, DemandTable())
G = [Gpu("n0", i) for i in range(4)]


def job(jid, app, n, batch):
    return Job(jid, 0.0, n, app, batch)


def fig5(util1, util2, util3):
    """Fig. 5 (a): Job 1 on GPUs 0-3 (J_max), Job 2 on GPUs 0-1, Job 3 on GPUs 2-3."""
    infos = {"J1": JobInfo(job("J1", "a", 4, 64), 1000, utilization=util1),
             "J2": JobInfo(job("J2", "h", 2, 32), 100, utilization=util2),
             "J3": JobInfo(job("J3", "l", 2, 32), 100, utilization=util3)}
    cfg = {"J1": tuple(WorkerAlloc(g, 16, 16, 1, 100) for g in G),
           "J2": tuple(WorkerAlloc(g, 16, 16, 1, 100) for g in G[:2]),
           "J3": tuple(WorkerAlloc(g, 16, 16, 1, 100) for g in G[2:])}
    return infos, cfg


# Hand numbers: worker time = 0.01 s x share x slowdown.  J1 beside J2 at 100/100: both get
# half the GPU (slowdown 2); J1 beside J3: J1 gets 1/1.2, J3 0.2/1.2 (slowdown 1.2 each).
# J1 = max(0.32, 0.192) = 0.32 s/step, J2 = 0.32, J3 = 0.192.
BEFORE = (1000 * 0.32 + 100 * 0.32 + 100 * 0.192) / 3  # eq. 1 = 123.733...


def test_fig5_option_b_squeeze_job2_swell_job1():
    """Job 1 has the lowest utilisation -> high priority (eq. 2): Algorithm 1 takes the first
    option of Fig. 5 (b): squeeze Job 2's workers on GPUs 0-1, Job 1 gains their resources."""
    infos, cfg = fig5(0.3, 0.9, 0.5)
    res = coordination_search("jct", infos, cfg, MODEL)
    assert res.high == ("J1",) and res.low == ("J2", "J3")
    assert res.objective_before == pytest.approx(BEFORE)
    # J2 at share p: J1 slowdown 1 + p on GPUs 0-1, J2's (1 + p) / p; J1's GPUs 2-3 stay 0.192.
    # objective(p) = (160 (1 + p) + 16 (1 + p) / p + 19.2) / 3, minimal on the grid at p = 0.3
    after = (160 * 1.3 + 16 * 1.3 / 0.3 + 19.2) / 3  # 98.844...
    assert res.objective_after == pytest.approx(after)
    assert [w.mps_pct for w in res.config["J2"]] == [30, 30]
    assert res.config["J1"] == cfg["J1"] and res.config["J3"] == cfg["J3"]
    assert res.changed(cfg) == ("J2",)
    # the walk: J2 at 90..30 % gains, 20 % does not ((192 + 96 + 19.2) / 3 = 102.4); at 20 %
    # J1 has no straggler left, so line 13 squeezes the whole low subset, then J1's workers
    # beside J3 are the slow ones (line 20): three attempts without gain, early exit
    assert [a.gain for a in res.attempts] == [True] * 7 + [False] * 3
    assert res.attempts[7].objective == pytest.approx(102.4)
    assert res.attempts[7].primitive == "squeeze J2[0],J2[1] by LGRR"
    assert res.attempts[8].primitive == "squeeze(J2,J3) by LGRR"
    assert res.exit == "early-exit"


def test_fig5_option_c_job1_steals_samples():
    """Job 1 low priority: Job 1's workers on GPUs 2-3 take samples from those on GPUs 0-1
    (Fig. 5 (c)'s swell on 0-1 / squeeze on 2-3, by LISS), global batch exact."""
    infos, cfg = fig5(0.9, 0.3, 0.3)
    res = coordination_search("jct", infos, cfg, MODEL)
    assert res.low == ("J1",)
    first = res.attempts[0]
    assert first.primitive.startswith("LISS") and first.gain
    # rates 16/0.32 = 50 and 16/0.192 = 83.3 samples/s; 60 free samples split 11.25 / 18.75
    # -> largest remainder 11, 11, 19, 19 -> plus one each: 12, 12, 20, 20 (sum 64)
    # times: 0.01*12*2 = 0.24 and 0.01*20*1.2 = 0.24: J1 at 0.24 s/step
    assert first.objective == pytest.approx((1000 * 0.24 + 100 * 0.32 + 100 * 0.192) / 3)
    assert res.objective_after <= first.objective
    assert sum(w.share for w in res.config["J1"]) == 64
    best_shares = [w.share for w in res.config["J1"]]
    assert best_shares[0] < 16 < best_shares[3]
    for w in res.config["J1"]:
        assert w.micro_batch * w.accum_steps >= w.share


def test_early_exit_after_three_attempts_without_gain():
    """Two equal jobs on the same GPUs, both high demand: every squeeze of the low-priority
    job slows it more than it helps the other (JCT) -> three failures, search ends, no change."""
    infos = {"A": JobInfo(job("A", "a", 2, 32), 100, utilization=0.9),
             "B": JobInfo(job("B", "h", 2, 32), 100, utilization=0.8)}
    cfg = {"A": tuple(WorkerAlloc(g, 16, 16, 1, 100) for g in G[:2]),
           "B": tuple(WorkerAlloc(g, 16, 16, 1, 100) for g in G[:2])}
    res = coordination_search("jct", infos, cfg, MODEL)
    # A has the larger utilisation: low priority, squeezed.  Hand: A at p -> A slowdown
    # (1 + p) / p, B 1 + p; objective = 100 * 0.16 ((1 + p) / p + 1 + p) / 2 = 32 at p = 1,
    # 8 (1.9 / 0.9 + 1.9) = 32.09 at 0.9: worse, and worse further down.
    assert res.low == ("A",) and res.high == ("B",)
    assert res.objective_before == pytest.approx(32.0)
    assert [a.gain for a in res.attempts] == [False, False, False]
    assert res.attempts[0].objective == pytest.approx(8 * (1.9 / 0.9 + 1.9))
    assert res.exit == "early-exit"
    assert res.config == cfg and res.objective_after == res.objective_before
    # with a larger patience the walk would go on: the exit is the three-failure rule
    assert len(coordination_search("jct", infos, cfg, MODEL, max_fails=5).attempts) == 5


def test_a_gain_resets_the_failure_count():
    infos, cfg = fig5(0.3, 0.9, 0.5)
    res = coordination_search("jct", infos, cfg, MODEL, max_fails=1)
    assert [a.gain for a in res.attempts] == [True] * 7 + [False]
    assert res.exit == "early-exit"


def test_equations_1_to_6_by_hand():
    a = JobInfo(job("A", "a", 2, 32), remaining_steps=100, deadline_left=50, utilization=0.7)
    b = JobInfo(job("B", "h", 1, 16), remaining_steps=40, deadline_left=100, utilization=0.2)
    infos, st_ = {"A": a, "B": b}, {"A": 0.6, "B": 2.0}  # remaining 60 s and 80 s
    assert local_objective("jct", infos, st_) == pytest.approx((60 + 80) / 2)  # eq. 1
    assert job_priority("jct", a, 0.6) == -0.7  # eq. 2
    # eq. 3 (overrun form, module doc): A 60 - 50 = 10 over, B 80 < 100 -> 0
    assert local_objective("deadline", infos, st_) == pytest.approx(10)
    assert job_priority("deadline", a, 0.6) == pytest.approx(50 - 60)  # eq. 4
    assert job_priority("deadline", b, 2.0) == pytest.approx(100 - 80)
    assert local_objective("makespan", infos, st_) == pytest.approx(80)  # eq. 5
    assert job_priority("makespan", b, 2.0) == pytest.approx(-80)  # eq. 6
    # importance: low utilisation, little slack, long remaining time come first
    assert importance("jct", b, 2.0) > importance("jct", a, 0.6)
    assert importance("deadline", a, 0.6) > importance("deadline", b, 2.0)
    assert importance("makespan", b, 2.0) > importance("makespan", a, 0.6)
    assert math.isinf(job_priority("deadline", JobInfo(job("C", "a", 1, 8), 5), 1.0))
    with pytest.raises(ValueError, match="unknown objective"):
        local_objective("fairness", infos, st_)


def test_lgrr_grid():
    assert [lgrr_squeeze(p) for p in (100, 95, 20, 10, None)] == [90, 90, 10, 10, 90]
    assert [lgrr_swell(p) for p in (90, 95, 100, None)] == [100, 100, 100, 100]


def test_ablations_restrict_the_mechanisms():
    infos, cfg = fig5(0.3, 0.9, 0.5)
    no_lgrr = coordination_search("jct", infos, cfg, MODEL, lgrr=False)
    assert all(w.mps_pct == 100 for ws in no_lgrr.config.values() for w in ws)
    no_liss = coordination_search("jct", *fig5(0.9, 0.3, 0.3), MODEL, liss=False)
    assert all(w.share == 16 for ws in no_liss.config.values() for w in ws)


# ------------------------------------------------------------------ §5.1 under random placements
def _snapshot(placements):
    """placements: list of (n_gpus, gpu indices) on one 8-GPU node; builds running jobs."""
    node = Node("n0", 8)
    gpus = node.gpus()
    jobs, gpu_jobs = {}, {}
    for i, idx in enumerate(placements):
        gs = tuple(gpus[k] for k in idx)
        alloc = Allocation(gs, 8)
        jobs[f"j{i}"] = Job(f"j{i}", 0.0, len(gs), "a", 8 * len(gs), state=JobState.RUNNING,
                            allocation=alloc)
        for g in gs:
            gpu_jobs[g] = gpu_jobs.get(g, ()) + (f"j{i}",)
    free = tuple(g for g in gpus if g not in gpu_jobs)
    return ClusterSnapshot(0.0, (node,), jobs, gpu_jobs, free)


placement_st = st.lists(st.sets(st.integers(0, 7), min_size=1, max_size=8).map(sorted),
                        min_size=1, max_size=6)


@settings(max_examples=300, deadline=None)
@given(placement_st)
def test_packing_sets_satisfy_5_1(placements):
    snap = _snapshot(placements)
    jg = {j.id: j.allocation.gpus for j in snap.jobs.values()}
    for ps in packing_sets(snap):
        jm = set(jg[ps.jmax])
        assert all(len(jg[o]) <= len(jg[ps.jmax]) for o in ps.others)
        for o in ps.others:
            assert set(jg[o]) <= jm  # co-located with J_max, on its GPUs
            for g in jg[o]:
                assert set(snap.gpu_jobs[g]) == {o, ps.jmax}  # and only with J_max
            assert len(jg[o]) < len(jm) or set(jg[o]) == jm
    # and a set is reported only when the whole placement around it keeps the rules
    viol = packing_violations(snap.gpu_jobs, jg)
    assert packing_ok(snap.gpu_jobs, jg) is (not viol)  # the kept sets' verdict (gimbal_sets)
    if not viol:
        sharing = {j for ids in snap.gpu_jobs.values() if len(ids) > 1 for j in ids}
        assert sharing == {m for ps in packing_sets(snap) for m in ps.members}


def test_violations_named():
    assert packing_violations(*_gj([[0, 1], [1, 2]])) == [
        "job j1 is packed outside the GPUs of its set's J_max j0",
        "jobs j1 and j0 have the same world size but are not co-located on the same GPUs"]
    assert "holds 3 workers" in packing_violations(*_gj([[0], [0], [0]]))[0]
    assert packing_violations(*_gj([[0, 1, 2, 3], [0, 1], [2, 3]])) == []  # Fig. 5


def _gj(placements):
    snap = _snapshot(placements)
    return snap.gpu_jobs, {j.id: j.allocation.gpus for j in snap.jobs.values()}
