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
