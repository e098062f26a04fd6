"""Seed 003 §V-B 1-b job types for any trace (gimbalctl/pipeline_jobs.py, simulate --job-types)."""
from __future__ import annotations

import json

import pandas as pd
import pytest
from click.testing import CliRunner

from gimbalctl.cli import main
from gimbalctl.cluster import parse_cluster
from gimbalctl.pipeline_jobs import alpha_min, assign_table1, table1_jobs, trace_durations
from gimbalctl.profiles import default_models
from gimbalctl.traces import load_trace
from policies.pipeline import MODELS, configurations

PHILLY = ("timestamp,duration,num_gpus,gpu_time,cluster\n"
          "2017-10-09 07:00:00,3600,1,3600,vcA\n"
          "2017-10-09 07:10:00,7200,4,28800,vcA\n"
          "2017-10-09 07:20:00,1800,1,1800,vcB\n"
          "2017-10-09 07:30:00,5400,4,21600,vcA\n"
          "2017-10-09 07:40:00,900,8,7200,vcB\n"
          "2017-10-09 07:50:00,2400,2,4800,vcC\n")


def test_types_follow_v_b_1b_and_the_seed():
    groups = {f"g{i}": g for i, g in enumerate([1, 2, 4, 8, 16, 1, 4, 8] * 5)}
    types = assign_table1(groups, seed=3)
    assert types == assign_table1(dict(reversed(list(groups.items()))), seed=3)  # key order only
    assert types != assign_table1(groups, seed=4)
    for grp, gpus in groups.items():
        model, stages = types[grp]
        if gpus == 1:
            assert MODELS[model].min_stages == 1 and stages == 1
        else:
            assert stages in configurations(model, gpus)
    assert len({m for m, _ in types.values()}) >= 3


def test_jobs_take_their_groups_type_and_the_trace_duration(tmp_path):
    p = tmp_path / "philly.csv"
    p.write_text(PHILLY)
    models = default_models()
    nodes = parse_cluster("4x8")
    jobs = load_trace(p, models=models, nodes=nodes)
    durs = trace_durations(jobs, models, nodes)
    by_submit = sorted(pd.read_csv(p).duration)
    assert sorted(durs) == pytest.approx(by_submit, rel=1e-9)
    out = table1_jobs(jobs, durs, 8, seed=0)
    kinds = {}
    for j, d in zip(out, durs):
        assert j.app in MODELS and j.global_batch == MODELS[j.app].batch
        assert j.total_iters * alpha_min(j.app, j.stages, j.num_gpus, 8) == pytest.approx(d)
        kinds.setdefault((j.group_id, j.num_gpus), set()).add((j.app, j.stages))
    assert all(len(v) == 1 for v in kinds.values())  # one type per recurrence group
    assert table1_jobs(jobs, durs, 8, seed=0) == out


def test_simulate_job_types_table1_runs_a_lone_job_for_its_duration(tmp_path):
    p = tmp_path / "one.csv"
    p.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n"
                 "2017-10-09 07:00:00,7200,4,28800,vcA\n")
    out = tmp_path / "o"
    r = CliRunner().invoke(main, ["simulate", "--trace", str(p), "--policy", "a-srpt",
                                  "--cluster", "2x8", "--job-types", "table1", "--out", str(out),
                                  "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["jobs"] == 1
    jobs = pd.read_csv(out / "jobs-a-srpt.csv")
    assert jobs.app.iloc[0] in MODELS
    assert jobs.run_time.iloc[0] == pytest.approx(7200, rel=0.01)


def test_simulate_bandwidth_options_reach_the_simulated_network(tmp_path):
    """--option inter_gbits sets the policies' and the simulator's NIC alike: a 16-GPU
    Table I job on 8-GPU nodes runs slower on a 1 Gbps NIC than on the default 10 Gbps."""
    p = tmp_path / "one.csv"
    p.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n"
                 "2017-10-09 07:00:00,7200,16,115200,vcA\n")
    run_time = {}
    for extra in ([], ["--option", "inter_gbits=1"]):
        out = tmp_path / f"o{len(extra)}"
        r = CliRunner().invoke(main, ["simulate", "--trace", str(p), "--policy", "a-srpt",
                                      "--cluster", "2x8", "--job-types", "table1",
                                      "--out", str(out), *extra])
        assert r.exit_code == 0, r.output
        run_time[len(extra)] = float(pd.read_csv(out / "jobs-a-srpt.csv").run_time.iloc[0])
    assert run_time[0] == pytest.approx(7200, rel=0.01)
    assert run_time[2] > 1.01 * run_time[0]
