"""Property tests of the simulator with every registered policy (hypothesis).

Invariants checked on every snapshot a policy receives (i.e. after every
applied plan) and on the final result: no GPU over capacity, gang scheduling,
nothing runs before its arrival, every job finishes, same seed → same result.
"""
from collections import Counter

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import policies
from gimbalctl.cluster import parse_cluster
from gimbalctl.profiles import APPS, default_models
from gimbalctl.sim import SimConfig, simulate
from policies.model import Job

MODELS = default_models()
NODES = parse_cluster("3x4")


class Checked:
    """Wraps a policy; asserts the cluster invariants on every snapshot."""

    def __init__(self, inner):
        self.inner = inner
        self.name = inner.name
        self.preemptive = getattr(inner, "preemptive", False)
        self.elastic = getattr(inner, "elastic", False)
        self.calls = 0

    def schedule(self, snap):
        self.calls += 1
        per_gpu = Counter()
        for job in snap.jobs.values():
            assert job.submit_time <= snap.now + 1e-9, "a job is visible before its arrival"
            if job.running:
                gpus = job.allocation.gpus
                if self.elastic:  # seed 001 elastic shares: any count >= 1, network-packed
                    per = snap.max_gpus_per_node
                    assert len(gpus) >= 1, "a running job holds no GPU"
                    if job.gpu_range is not None:
                        assert job.gpu_range[0] <= len(gpus) <= job.gpu_range[1]
                    assert (len(gpus) % per == 0 if len(gpus) >= per else
                            per % len(gpus) == 0), f"forbidden share {len(gpus)}"
                else:
                    assert len(gpus) == job.num_gpus, "gang violated"
                assert len(set(gpus)) == len(gpus)
                per_gpu.update(gpus)
        for g, n in per_gpu.items():
            assert n <= snap.max_jobs_per_gpu, f"GPU {g} holds {n} jobs"
            assert tuple(sorted(snap.gpu_jobs[g])) == tuple(sorted(
                j.id for j in snap.jobs.values() if j.running and g in j.allocation.gpus))
            on = [snap.jobs[j] for j in snap.gpu_jobs[g]]
            mem = sum(snap.memory[j.app].mem_mb(j.allocation.sub_batch) for j in on)
            assert len(on) == 1 or mem <= snap.node(g.node).gpu_mem_mb + 1e-6
        assert not (set(snap.free_gpus) & set(per_gpu)), "a free GPU holds a job"
        assert len(snap.free_gpus) + len(per_gpu) == snap.total_gpus
        plan = self.inner.schedule(snap)
        missing = set(snap.jobs) - set(plan.reasons)
        assert not missing, f"jobs without a reason: {sorted(missing)[:5]}"
        return plan


job_st = st.tuples(st.floats(0, 3000), st.sampled_from([1, 1, 2, 4, 8, 12]),
                   st.floats(20, 3000), st.sampled_from(APPS))


def build(specs):
    return [Job(id=f"j{i}", submit_time=round(t, 3), num_gpus=g, app=app,
                global_batch=MODELS.iters_table[app][0][0] * g, total_iters=it)
            for i, (t, g, it, app) in enumerate(specs)]


@pytest.mark.parametrize("name", policies.names())
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=st.lists(job_st, min_size=1, max_size=14), interval=st.sampled_from([30.0, 300.0]),
       cost=st.sampled_from([0.0, 45.0]))
def test_invariants(name, specs, interval, cost):
    jobs = build(specs)
    cfg = SimConfig(interval=interval, preempt_cost=cost, seed=7)
    pol = Checked(policies.get_policy(name))
    res = simulate(jobs, NODES, pol, MODELS, cfg)
    df = res.jobs.set_index("id")
    assert len(df) == len(jobs)
    assert df.end.notna().all(), "every job finishes"
    for j in jobs:
        row = df.loc[j.id]
        assert row.start >= j.submit_time - 1e-9, "started before arrival"
        assert row.end > row.start
    if not pol.preemptive:
        assert (df.preemptions == 0).all()
    # same seed -> same result
    again = simulate(jobs, NODES, policies.get_policy(name), MODELS, cfg)
    pd.testing.assert_frame_equal(res.jobs, again.jobs)
    assert res.summary["avg_jct"] == again.summary["avg_jct"]
