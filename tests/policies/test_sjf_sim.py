"""SJF-BSBF / SJF-FFS in the simulator: invariants (hypothesis), determinism, CLI."""
from __future__ import annotations

import json
from collections import Counter

import pandas as pd
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings, strategies as st

import policies
from gimbalctl.cli import main as cli_main
from gimbalctl.cluster import parse_cluster
from gimbalctl.profiles import APPS, default_models
from gimbalctl.sim import SimConfig, simulate
from policies.model import Job

MODELS = default_models()
NODES = parse_cluster("2x4")


class Checked:
    """Asserts cluster invariants on every snapshot the policy sees."""

    def __init__(self, inner):
        self.inner, self.name = inner, inner.name
        self.preemptive = inner.preemptive
        self.max_shared = 0

    def schedule(self, snap):
        per_gpu = Counter()
        for job in snap.jobs.values():
            assert job.submit_time <= snap.now + 1e-9, "visible before arrival"
            if job.running:
                assert len(job.allocation.gpus) == job.num_gpus == len(set(job.allocation.gpus))
                per_gpu.update(job.allocation.gpus)
        for g, n in per_gpu.items():
            assert n <= 2, f"{g} holds {n} jobs"
            on = [snap.jobs[j] for j in snap.gpu_jobs[g]]
            assert sum(MODELS.memory[j.app].mem_mb(j.allocation.sub_batch) for j in on) \
                <= snap.node(g.node).gpu_mem_mb + 1e-6 or len(on) == 1
            self.max_shared = max(self.max_shared, n)
        plan = self.inner.schedule(snap)
        for a in plan.starts():
            assert snap.jobs[a.job_id].submit_time <= snap.now + 1e-9
        return plan


job_st = st.tuples(st.floats(0, 2000), st.sampled_from([1, 1, 2, 3, 4, 8]),
                   st.floats(50, 5000), st.sampled_from(APPS), st.sampled_from([1, 2, 4]))


def build(specs):
    return [Job(id=f"j{i}", submit_time=round(t, 3), num_gpus=g, app=app,
                global_batch=MODELS.iters_table[app][0][0] * g * m, total_iters=it)
            for i, (t, g, it, app, m) in enumerate(specs)]


@pytest.mark.parametrize("name", ["sjf-bsbf", "sjf-ffs"])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=st.lists(job_st, min_size=1, max_size=16),
       xi=st.sampled_from([None, 1.0, 1.5, 2.0]), interval=st.sampled_from([30.0, 600.0]))
def test_sim_invariants(name, specs, xi, interval):
    jobs = build(specs)
    cfg = SimConfig(interval=interval, seed=3, xi=xi)
    pol = Checked(policies.get_policy(name))
    res = simulate(jobs, NODES, pol, MODELS, cfg)
    df = res.jobs.set_index("id")
    assert len(df) == len(jobs) and df.end.notna().all(), "every job finishes"
    for j in jobs:
        assert df.loc[j.id].start >= j.submit_time - 1e-9, "started before arrival"
        assert df.loc[j.id].end > df.loc[j.id].start
    assert (df.preemptions == 0).all(), "non-preemptive"
    again = simulate(jobs, NODES, policies.get_policy(name), MODELS, cfg)
    pd.testing.assert_frame_equal(res.jobs, again.jobs)


def _burst(n=24):
    """Many jobs at once on a small cluster: sharing must happen somewhere."""
    specs = [(float(i), [1, 2, 4][i % 3], 300.0 + 97 * i, APPS[i % len(APPS)], 1)
             for i in range(n)]
    return build(specs)


def test_bsbf_without_benefit_is_backfilling_sjf():
    """With ξ so large that Theorem 1 never favours sharing, SJF-BSBF makes
    exactly SJF's (backfilling) decisions."""
    jobs = _burst()
    cfg = SimConfig(interval=60.0, xi=50.0)
    a = simulate(jobs, NODES, policies.get_policy("sjf-bsbf"), MODELS, cfg)
    b = simulate(jobs, NODES, policies.get_policy("sjf", backfill=True), MODELS, cfg)
    assert not a.jobs.shared.any()
    pd.testing.assert_series_equal(a.jobs.set_index("id").end, b.jobs.set_index("id").end)
    ffs = simulate(jobs, NODES, policies.get_policy("sjf-ffs"), MODELS, cfg)
    assert ffs.jobs.shared.any()  # FFS shares regardless of ξ


def test_bsbf_shares_when_cheap():
    jobs = _burst()
    res = simulate(jobs, NODES, policies.get_policy("sjf-bsbf"), MODELS, SimConfig(xi=1.0))
    assert res.jobs.shared.any()
    sjf = simulate(jobs, NODES, policies.get_policy("sjf", backfill=True), MODELS, SimConfig(xi=1.0))
    assert res.summary["avg_queueing"] < sjf.summary["avg_queueing"]


def test_cli_simulate_both_policies(tmp_path):
    rows = ["name,time,application,num_replicas,batch_size"]
    for i in range(14):
        app = APPS[i % len(APPS)]
        g = [1, 2, 4, 8][i % 4]
        rows.append(f"{app}-{i},{30 * i},{app},{g},{MODELS.iters_table[app][0][0] * g}")
    trace = tmp_path / "small.csv"
    trace.write_text("\n".join(rows) + "\n")
    runner = CliRunner()
    r = runner.invoke(cli_main, ["simulate", "--trace", str(trace), "--policy", "sjf-bsbf",
                                 "--policy", "sjf-ffs", "--cluster", "2x4", "--xi", "1.3",
                                 "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert set(out["results"]) == {"sjf-bsbf", "sjf-ffs"}
    assert out["jobs"] == 14
    for summ in out["results"].values():
        assert summ["avg_jct"] > 0
    r = runner.invoke(cli_main, ["simulate", "--trace", str(trace), "--policy", "sjf-bsbf",
                                 "--cluster", "2x4"])
    assert r.exit_code == 0, r.output
    assert "sjf-bsbf" in r.output
