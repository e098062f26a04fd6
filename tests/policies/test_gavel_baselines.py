"""Gavel-style baselines of seed 002 Table 3: min-total-duration LP and isolation."""
from __future__ import annotations

import pytest

from policies.gavel_mtd import GavelMinTotalDuration
from policies.isolation import Isolation
from policies.model import Node
from tests.policies.test_similarity import HET, _running, job, snap


def test_mtd_lp_shares_one_gpu_equally_between_equal_jobs():
    nodes = (Node("v0", 1, "v100"),)
    jobs = [job(0), job(1)]
    x = GavelMinTotalDuration().allocation(snap(nodes, jobs), jobs)
    assert x["j0"]["v100"] == pytest.approx(0.5) and x["j1"]["v100"] == pytest.approx(0.5)


def test_mtd_lp_gives_the_longer_job_more_time_and_respects_capacity():
    from dataclasses import replace
    jobs = [replace(job(0), total_iters=3000.0), job(1), job(2, n=2), job(3, app="bert")]
    sn = snap(HET, jobs)
    x = GavelMinTotalDuration().allocation(sn, jobs)
    for j in jobs:
        assert sum(x[j.id].values()) <= 1 + 1e-6
    for t, cap in (("v100", 2), ("k80", 4)):
        assert sum(j.num_gpus * x[j.id].get(t, 0.0) for j in jobs) <= cap + 1e-6


def test_mtd_lp_by_hand_one_gpu_three_to_one_work():
    from dataclasses import replace
    nodes = (Node("v0", 1, "v100"),)
    jobs = [replace(job(0), total_iters=3000.0), job(1)]  # 3000 vs 1000 iterations, same rate
    x = GavelMinTotalDuration().allocation(snap(nodes, jobs), jobs)
    # max z: 3000 z <= r X0, 1000 z <= r X1, X0 + X1 <= 1  ->  X0 = 3/4, X1 = 1/4 (unique)
    assert x["j0"]["v100"] == pytest.approx(0.75, abs=1e-6)
    assert x["j1"]["v100"] == pytest.approx(0.25, abs=1e-6)


def test_mtd_leftover_goes_to_the_job_nearest_to_finishing_by_hand():
    """One type of 2 GPUs, equal rates r, remaining 10,000 / 1,000 / 2,000 iterations:
    z* = min(r / 10,000, 2 r / 13,000) = r / 10,000, so the long job needs all of one GPU
    and the others 0.1 and 0.2; the 0.7 left goes first to the job with the most of its
    remaining work done per GPU-second (1,000 iterations: raised to 0.8), nothing to the
    next."""
    from dataclasses import replace
    nodes = (Node("v0", 2, "v100"),)
    jobs = [replace(job(0), total_iters=10000.0), job(1), replace(job(2), total_iters=2000.0)]
    x = GavelMinTotalDuration().allocation(snap(nodes, jobs), jobs)
    assert x["j0"]["v100"] == pytest.approx(1.0, abs=1e-12)
    assert x["j1"]["v100"] == pytest.approx(0.8, abs=1e-12)
    assert x["j2"]["v100"] == pytest.approx(0.2, abs=1e-12)


def test_mtd_leftover_ties_go_in_submit_order():
    """Two equal short jobs beside a long one: 0.8 of a GPU is left once each has its
    0.1; the earlier-submitted job (first in the LP's order) takes all of it."""
    from dataclasses import replace
    nodes = (Node("v0", 2, "v100"),)
    jobs = [replace(job(0), total_iters=10000.0), job(1, t=1.0), job(2, t=2.0)]
    x = GavelMinTotalDuration().allocation(snap(nodes, jobs), jobs)
    assert x["j1"]["v100"] == pytest.approx(0.9, abs=1e-12)
    assert x["j2"]["v100"] == pytest.approx(0.1, abs=1e-12)


def test_mtd_second_stage_on_two_types_by_hand():
    """One V100 and one K80 (rate 1/5 of the V100's): the long job (10,000 iterations)
    sets z* = r_V / 10,000 on the V100; the short one (1,000) needs 0.5 of the K80 for
    that, and the second stage gives it the whole K80 (any share from 0.5 to 1 is a
    makespan optimum).  The slack Z_SLACK lets about 10⁻⁶ of either GPU move."""
    from dataclasses import replace
    nodes = (Node("v0", 1, "v100"), Node("k0", 1, "k80", 12288))
    jobs = [replace(job(0), total_iters=10000.0), job(1)]
    x = GavelMinTotalDuration().allocation(snap(nodes, jobs), jobs)
    assert x["j0"]["v100"] == pytest.approx(1.0, abs=1e-5) and x["j0"].get("k80", 0) < 1e-5
    assert x["j1"]["k80"] == pytest.approx(1.0, abs=1e-5) and x["j1"].get("v100", 0) < 1e-5


def test_mtd_round_never_oversubscribes_and_waits_between_rounds():
    jobs = [job(i, n=2, t=float(i)) for i in range(5)]
    plan = GavelMinTotalDuration().schedule(snap(HET, jobs))
    used = [g for s in plan.starts() for g in s.gpus]
    assert len(used) == len(set(used)) <= 6


def test_isolation_serves_the_least_served_job_first():
    nodes = (Node("v0", 1, "v100"),)
    a = _running(job(0, t=0.0), [nodes[0].gpus()[0]])
    from dataclasses import replace
    a = replace(a, executed_time=300.0, as_of=360.0)
    b = replace(job(1, t=0.0), executed_time=0.0)
    plan = Isolation().schedule(snap(nodes, [a, b], now=360.0))
    assert [s.job_id for s in plan.starts()] == ["j1"]
    assert any(p.job_id == "j0" for p in plan.preempts())
