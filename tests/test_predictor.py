"""Seed 003 §IV-C 3 predictors: random forest on (group, user), unseen groups predict 0,
group mean/median baselines, determinism per seed, evaluation + Fig. 4 plot, sacct history,
the CLI."""
from __future__ import annotations

import random

import numpy as np
import pytest
from click.testing import CliRunner

from gimbalctl.cli import main
from gimbalctl.predictor import (GroupStatRefit, PerfectPredictor, evaluate, fit_group_stat,
                                 fit_rf, group_key, group_of, history_from_sacct, plot_error_cdf,
                                 refitter)
from policies.model import FinishedJob, Frozen, Job


def hist(n=400, seed=0):
    """Recurring groups: each group's length is its own (with some noise); user u1's
    runs of group g0 are 3x longer than u0's (the user feature matters)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        g = rng.randrange(8)
        u = rng.randrange(2)
        base = 100.0 * (g + 1) * (3 if (g == 0 and u == 1) else 1)
        it = base * rng.uniform(0.9, 1.1)
        out.append(FinishedJob(f"j{i}", f"u{u}", float(i), float(i), float(i) + it, 1 + g % 2,
                               "resnet152", f"name{g}", f"g{g}", it, 32))
    return out


def test_rf_learns_groups_and_users_and_unseen_is_zero():
    h = hist()
    p = fit_rf(h, seed=1)
    assert p.unit == "iterations"
    j = lambda g, u: Job("x", 0, 1, "resnet152", 32, user=u, group_id=g)  # noqa: E731
    assert p.predict(j("g3", "u0")) == pytest.approx(400, rel=0.1)
    assert p.predict(j("g0", "u1")) == pytest.approx(300, rel=0.15)
    assert p.predict(j("g0", "u0")) == pytest.approx(100, rel=0.15)
    assert p.predict(j("new-group", "u0")) == 0.0  # the paper's rule
    assert p.source(j("new-group", "u0")) == "unseen-group"
    assert p.source(j("g1", "u9")) == "rf" and p.predict(j("g1", "u9")) > 0


def test_rf_deterministic_per_seed():
    h = hist(300, seed=4)
    a, b = fit_rf(h, seed=7), fit_rf(h, seed=7)
    assert a.table == b.table
    c = fit_rf(h, seed=8)
    assert a.table != c.table  # the seed reaches the forest's bootstrap


def test_group_stats_and_perfect():
    h = hist(200)
    mean, med = fit_group_stat(h, "mean"), fit_group_stat(h, "median")
    vals = [f.iterations for f in h if f.group_id == "g2"]
    j = Job("x", 0, 1, "resnet152", 32, group_id="g2")
    assert mean.predict(j) == pytest.approx(np.mean(vals))
    assert med.predict(j) == pytest.approx(np.median(vals))
    assert PerfectPredictor().predict(Job("y", 0, 1, "a", 1, total_iters=12.0)) == 12.0


@pytest.mark.parametrize("stat", ["mean", "median"])
def test_incremental_group_stat_refit_is_the_full_fit(stat):
    """GroupStatRefit over a growing append-only history (the simulator's views), over
    other sequences, and when a record without iterations turns the unit to seconds: the
    same table (same values, same group order) and unit as fit_group_stat every time."""
    rng = random.Random(7)
    h = hist(300, seed=3)
    items: list = []
    inc = GroupStatRefit(stat)
    steps = 0
    for i, f in enumerate(h):
        if i == 220:  # a record without iterations: every target becomes seconds
            f = FinishedJob("noit", "u0", 0.0, 1.0, 41.0, 1, "resnet152", "", "g9", None, 32)
        items.append(f)
        if rng.random() < 0.3:
            view = Frozen(items) if rng.random() < 0.9 else tuple(items)
            got, want = inc(view), fit_group_stat(view, stat)
            assert (got.kind, got.unit) == (want.kind, want.unit)
            assert list(got.table.items()) == list(want.table.items())
            steps += 1
    assert steps > 50 and got.unit == "seconds"
    # an empty history first (unit seconds), then records with iterations
    inc = GroupStatRefit(stat)
    items = []
    assert inc(Frozen(items)).unit == "seconds"
    items.extend(h[:10])
    assert list(inc(Frozen(items)).table.items()) == list(fit_group_stat(h[:10], stat).table.items())
    assert inc(Frozen(items)).unit == "iterations"
    # a shorter view of another list: fitted from scratch
    assert inc(Frozen(list(h[:5]))).table == fit_group_stat(h[:5], stat).table
    with pytest.raises(ValueError, match="stat must be mean or median"):
        GroupStatRefit("max")


def test_refitter_mean_in_the_simulator_sees_what_a_full_fit_sees():
    """At every refit of a simulation (the bundled Pollux workload, SPJF), the incremental
    refitter's table equals a full fit of the same history."""
    from pathlib import Path

    from gimbalctl.cluster import parse_cluster
    from gimbalctl.profiles import default_models
    from gimbalctl.sim import SimConfig, simulate
    from gimbalctl.traces import load_trace
    from policies import get_policy

    models, nodes = default_models(), parse_cluster("4x4")
    trace = Path(__file__).resolve().parents[1] / "gimbalctl/data/traces/pollux/workload-2.csv"
    jobs = [j for j in load_trace(trace, models=models, nodes=nodes) if j.num_gpus <= 16]
    inc, seen = refitter("mean"), []

    def refit(history, now):
        got = inc(history, now)
        want = fit_group_stat(history, "mean")
        assert list(got["iterations"].table.items()) == list(want.table.items())
        seen.append(len(history))
        return got

    simulate(jobs, nodes, get_policy("spjf"), models, SimConfig(), refit=refit, refit_every=300)
    assert len(seen) > 10 and seen[-1] > 50 and len(set(seen)) > 10


def test_group_key_fallback_is_stable_and_field_sensitive():
    j = Job("x", 0, 2, "bert", 64, user="ann", name="train.sh")
    f = FinishedJob("y", "ann", 0, 0, 5, 2, "bert", "train.sh", None, None, 64)
    assert group_of(j) == group_of(f) == group_key("ann", "train.sh", 2, 64)
    assert group_of(j) != group_of(Job("x", 0, 4, "bert", 64, user="ann", name="train.sh"))


def test_evaluate_rf_beats_mean_and_plots(tmp_path):
    res = evaluate(hist(500, seed=2), seed=0)
    s = res["summary"]
    assert res["test"] == 100
    assert s["rf"]["mean_abs_error"] < s["mean"]["mean_abs_error"]
    plot_error_cdf(res, tmp_path / "cdf.png")
    assert (tmp_path / "cdf.png").stat().st_size > 1000


def test_refitter_predicts_nothing_on_empty_history():
    pred = refitter("rf")((), 0.0)["iterations"]
    assert pred.predict(Job("x", 0, 1, "a", 1, group_id="g")) == 0.0


SACCT = """JobID|JobName|User|Submit|Start|End|AllocTRES|Comment|AdminComment
{rows}
"""


def sacct_file(tmp_path, n=60):
    rng = random.Random(0)
    rows = []
    for i in range(n):
        user, name = rng.choice([("ann", "resnet.sh"), ("bob", "bert.sh"), ("bob", "tiny.sh")])
        dur = {"resnet.sh": 3600, "bert.sh": 7200, "tiny.sh": 60}[name] + rng.randint(0, 60)
        h, m = divmod(i * 7, 60)
        start = f"2025-01-{1 + h // 24:02d}T{h % 24:02d}:{m:02d}:00"
        end_s = i * 7 * 60 + dur
        eh, em = divmod(end_s // 60, 60)
        end = f"2025-01-{1 + eh // 24:02d}T{eh % 24:02d}:{em:02d}:{end_s % 60:02d}"
        rows.append(f"{100 + i}|{name}|{user}|{start}|{start}|{end}|cpu=1,gres/gpu=2||")
        rows.append(f"{100 + i}.batch|batch|{user}|{start}|{start}|{end}|cpu=1||")
    p = tmp_path / "sacct.txt"
    p.write_text(SACCT.format(rows="\n".join(rows)))
    return p


def test_history_from_sacct_and_cli(tmp_path):
    path = sacct_file(tmp_path)
    h = history_from_sacct(path)
    assert len(h) == 60 and all(f.num_gpus == 2 for f in h)
    assert len({f.group_id for f in h}) == 3
    r = CliRunner().invoke(main, ["predictor", "eval", "--sacct", str(path), "--out",
                                  str(tmp_path / "ev"), "--json"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "ev" / "error_cdf.png").exists()
    import json
    d = json.loads(r.output)
    assert d["unit"] == "seconds" and d["summary"]["rf"]["mean_abs_error"] < 100
    r = CliRunner().invoke(main, ["predictor", "fit", "--sacct", str(path), "--out",
                                  str(tmp_path / "p.pkl")])
    assert r.exit_code == 0, r.output
    import pickle
    p = pickle.loads((tmp_path / "p.pkl").read_bytes())
    assert p.predict(FinishedJob("z", "bob", 0, 0, 1, 2, "", "tiny.sh", h[0].group_id if
                                 h[0].name == "tiny.sh" else group_key("bob", "tiny.sh", 2, None))) < 200
    bad = tmp_path / "bad.txt"
    bad.write_text("JobID|User\n1|x\n")
    r = CliRunner().invoke(main, ["predictor", "eval", "--sacct", str(bad)])
    assert r.exit_code != 0 and "bad.txt" in r.output and "Submit" in r.output
    for args in ([], ["--sacct", str(path), "--slurm"]):  # exactly one source
        r = CliRunner().invoke(main, ["predictor", "eval", *args])
        assert r.exit_code == 2 and "exactly one of --sacct FILE and --slurm" in r.output


def test_loaders_give_recurrence_keys(tmp_path):
    from gimbalctl.traces import load_trace

    p = tmp_path / "philly.csv"
    p.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n"
                 "2017-10-09 07:01:55,66.0,1,66.0,vcA\n2017-10-09 07:02:55,99.0,1,99.0,vcA\n"
                 "2017-10-09 07:03:55,66.0,2,132.0,vcA\n2017-10-09 07:04:55,66.0,1,66.0,vcB\n")
    jobs = load_trace(p)
    g = [j.group_id for j in jobs]
    assert g[0] == g[1] == group_key("vcA", "", 1, None) and len(set(g)) == 3
    q = tmp_path / "gen.csv"
    q.write_text("id,submit_time,num_gpus,duration,user,group\na,0,1,5,ann,\nb,1,1,5,ann,\nc,2,1,5,ann,G\n")
    a, b, c = load_trace(q)
    assert a.group_id == b.group_id == group_key("ann", "", 1, None) and c.group_id == "G"


def test_simulate_cli_with_predictor(tmp_path):
    r = CliRunner().invoke(main, ["simulate", "--policy", "a-srpt", "--policy", "spjf",
                                  "--predictor", "rf", "--refit", "600", "--limit", "40",
                                  "--cluster", "16x4", "--json"])
    assert r.exit_code == 0, r.output
    import json
    d = json.loads(r.output)
    text = json.dumps(d)
    assert "a-srpt" in text and "spjf" in text


def test_sacct_history_survives_bad_bytes_and_reports_directories(tmp_path):
    path = sacct_file(tmp_path, n=5)
    raw = path.read_bytes().replace(b"resnet.sh", b"res\xffnet.sh").replace(b"bert.sh", b"b\xfe.sh")
    path.write_bytes(raw)
    assert len(history_from_sacct(path)) == 5
    from gimbalctl.traces import TraceError
    with pytest.raises(TraceError, match="cannot read"):
        history_from_sacct(tmp_path)
