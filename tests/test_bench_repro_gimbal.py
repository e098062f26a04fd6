"""bench/repro_gimbal.py (seed 004 §7): the workload it builds (a job alone on the simulated
cluster runs for its trace duration; deadlines = submit + λ x duration, λ in [1.5, 2.5]) and the
ablation tables (per host and the mean of the hosts beside Fig. 12), on a small synthetic
Philly-format trace (the shared traces are not part of this repository)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
N = 24  # jobs in the busiest window of the synthetic trace
DUR = [600.0 + 450.0 * k for k in range(N)]  # inside the [2 min, 8 h] clip


def _bench():
    spec = importlib.util.spec_from_file_location("repro_gimbal", ROOT / "bench" / "repro_gimbal.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def shared(tmp_path, monkeypatch):
    """A Philly-format trace: 10 jobs an hour apart, then N jobs one second apart (the busiest
    window of N), then 10 more an hour apart."""
    t0 = pd.Timestamp("2017-10-03 00:00:00")
    ts = ([t0 + pd.Timedelta(hours=h) for h in range(10)]
          + [t0 + pd.Timedelta(hours=10, seconds=s) for s in range(N)]
          + [t0 + pd.Timedelta(hours=20 + h) for h in range(10)])
    dur = [3600.0] * 10 + DUR + [3600.0] * 10
    d = tmp_path / "traces" / "philly"
    d.mkdir(parents=True)
    pd.DataFrame({"timestamp": [str(x) for x in ts], "duration": dur, "num_gpus": 1,
                  "gpu_time": dur, "cluster": "x"}).to_csv(d / "philly.csv", index=False)
    monkeypatch.setenv("GIMBAL_SHARED", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("cluster", ["16x2", "8x2"])
def test_workload_deadlines_and_durations_on_the_simulated_cluster(shared, cluster):
    from gimbalctl.cluster import parse_cluster
    from gimbalctl.profiles import default_models
    from gimbalctl.sim import SimConfig, simulate
    from policies import get_policy

    bench = _bench()
    jobs, clipped = bench.build_workload("philly", N, cluster=cluster)
    assert clipped == 0 and len(jobs) == N
    by_id = {j.id: j for j in jobs}
    assert sorted(by_id) == sorted(f"philly-{k}" for k in range(N))
    assert {j.num_gpus for j in jobs} <= {1, 2, 4, 8}
    assert 4 in {j.num_gpus for j in jobs}  # the case the 2-GPU nodes make multi-node
    for k in range(N):
        j = by_id[f"philly-{k}"]
        assert j.submit_time == pytest.approx(float(k))
        lam = (j.deadline - j.submit_time) / DUR[k]
        assert 1.5 <= lam <= 2.5
    # each job alone on the simulated cluster runs for its trace duration
    for j in jobs:
        if j.num_gpus not in (1, 4):
            continue
        alone = simulate([j], parse_cluster(cluster), get_policy("fifo"), default_models(),
                         SimConfig(interval=30.0, seed=4))
        row = alone.jobs.iloc[0]
        k = int(j.id.split("-")[1])
        assert row.end - row.start == pytest.approx(DUR[k], rel=1e-3), (j.id, j.num_gpus, j.app)


def _m(jct, q, dl, mk):
    return dict(jct=jct, queueing=q, deadline=dl, makespan=mk, shared=0, calls=0)


def test_ablation_tables_show_the_mean_of_the_hosts_beside_fig12():
    bench = _bench()
    res = {}
    for i, host in enumerate(bench.HOSTS):
        res[("ablation", host, "base")] = _m(100.0, 50.0, 0.2, 1000.0)
        res[("ablation", host, "unequal")] = _m(100.0 / (1.0 + 0.1 * i), 50.0, 0.2, 1000.0)
        res[("ablation", host, "liss")] = _m(50.0, 25.0, 0.4, 500.0)
        res[("ablation", host, "gimbal")] = _m(200.0, 100.0, 0.1, 2000.0)
    sizes = {"philly": 150, "second": 300, "ablation": 100}
    text = bench.render(res, sizes, {"ablation": 0})
    assert "Ablation in §7.3's setting (philly (100, 16 GPUs))" in text
    lines = text.splitlines()
    # unequal: JCT ratios 1.0, 1.1, 1.2 -> mean 1.10
    assert "| mean of 3 | + unequal packing | 1.10x | 1.00x | 1.00x | 1.00x | " \
           "1.05 / 1.09 / 1.04 / 1.01 |" in lines
    assert "| mean of 3 | + LISS | 2.00x | 2.00x | 2.00x | 2.00x | 1.18 / 1.54 / 1.11 / 1.10 |" \
        in lines
    assert "| mean of 3 | + LGRR (full) | 0.50x | 0.50x | 0.50x | 0.50x | " \
           "1.28 / 1.63 / 1.13 / 1.11 |" in lines
    assert "| Gavel | + unequal packing | 1.20x | 1.00x | 1.00x | 1.00x | " \
           "1.05 / 1.09 / 1.04 / 1.01 |" in lines
    # the 16-GPU runs are not mixed into the §7.2 ratio table
    assert not [x for x in lines if x.startswith("| ablation |")]
