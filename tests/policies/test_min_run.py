"""Bounded pre-emption churn: the minimum run time of the pre-emptive baselines
(``min_run_s``; policies.base.schedule_preemptive) and ``Job.run_start``."""
from __future__ import annotations

from dataclasses import replace

import pytest

import policies
from gimbalctl.cluster import parse_cluster
from gimbalctl.profiles import default_models
from gimbalctl.sim import SimConfig, simulate
from policies.plan import ReasonCode
from sjf_share_helpers import make_snap, pending, running
from random_jobs import plain_jobs

MODELS = default_models()


def _snap(now, run_start):
    # a long job holds all 4 GPUs since run_start; a short one arrives and outranks it
    a = replace(running("A", "x", [(0, i) for i in range(4)], total=1e6, done=1e5), run_start=run_start)
    b = pending("B", "x", 4, total=10.0, submit=1.0)
    return make_snap([a, b], now=now)


@pytest.mark.parametrize("name", ["srtf", "srsf", "tiresias"])
def test_lease_keeps_a_recent_start_then_lets_go(name):
    kw = {"thresholds": (1.0,)} if name == "tiresias" else {}  # A past the threshold: queue 1
    pol0 = policies.get_policy(name, **kw)
    assert [a.job_id for a in pol0.schedule(_snap(100.0, 90.0)).preempts()] == ["A"]
    pol = policies.get_policy(name, min_run_s=60.0, **kw)
    plan = pol.schedule(_snap(100.0, 90.0))  # ran 10 s < 60 s
    assert not plan.preempts() and not plan.starts()
    r = plan.reasons["A"]
    assert r.code is ReasonCode.KEEP_RUNNING and "minimum run time" in r.text
    assert r.numbers["ran_s"] == pytest.approx(10.0)
    assert plan.reasons["B"].code is ReasonCode.WAIT_RESOURCES
    plan = pol.schedule(_snap(100.0, 30.0))  # ran 70 s >= 60 s
    assert [a.job_id for a in plan.preempts()] == ["A"] and plan.starts()[0].job_id == "B"


def test_negative_min_run_rejected():
    for name in ("srtf", "srsf", "tiresias"):
        with pytest.raises(ValueError, match="min_run_s"):
            policies.get_policy(name, min_run_s=-1)


class Leased:
    """Checks on every snapshot: run_start is the current run's start, and no job is
    pre-empted within ``min_run_s`` of it."""

    def __init__(self, inner, min_run_s):
        self.inner, self.min_run_s = inner, min_run_s
        self.name, self.preemptive = inner.name, inner.preemptive
        self.started: dict = {}

    def schedule(self, snap):
        for j in snap.jobs.values():
            if j.running:
                assert j.run_start == self.started[j.id]
            else:
                assert j.run_start is None
        plan = self.inner.schedule(snap)
        for a in plan.preempts():
            assert snap.now - snap.jobs[a.job_id].run_start >= self.min_run_s - 1e-9
        for a in plan.starts():
            self.started[a.job_id] = snap.now
        return plan


def _jobs():
    return plain_jobs(60, 5, gpus=(1, 1, 2, 4), span=20000.0, iters=(100.0, 30000.0))

@pytest.mark.parametrize("name", ["srtf", "tiresias"])
def test_simulated_churn_is_bounded(name):
    kw = {"thresholds": (600.0,)} if name == "tiresias" else {}
    nodes, cfg = parse_cluster("2x4"), SimConfig(interval=60.0, preempt_cost=30.0)
    free = simulate(_jobs(), nodes, policies.get_policy(name, **kw), MODELS, cfg)
    pol = Leased(policies.get_policy(name, min_run_s=1800.0, **kw), 1800.0)
    bounded = simulate(_jobs(), nodes, pol, MODELS, cfg)
    assert free.summary["preemptions"] > 0
    df = bounded.jobs
    assert df.end.notna().all()
    # each pre-emption ends a run of at least min_run_s: a job's count is bounded by
    # its running time (restores included) over min_run_s
    assert (df.preemptions <= df.run_time / 1800.0 + 1e-9).all()
    # without the lease some job was pre-empted sooner than that
    f = free.jobs
    assert (f.preemptions > f.run_time / 1800.0).any()
