"""bench/repro_asrpt.py (seed 003 §V-B): how it turns a Philly trace into the paper's
workload — recurrence groups, Table I job types per group (§V-B 1-b), iterations from the
trace duration and α̂^min, the history before a window."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

from gimbalctl.predictor import group_key
from policies.pipeline import MODELS, configurations

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("repro_asrpt", ROOT / "bench" / "repro_asrpt.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _philly(tmp_path, rows):
    p = tmp_path / "philly.csv"
    p.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n" + "\n".join(
        f"{ts},{d},{g},{d * g},{vc}" for ts, d, g, vc in rows) + "\n")
    return p


def test_groups_are_vc_and_gpus_in_time_order(tmp_path):
    b = _bench()
    df = b.load_philly(_philly(tmp_path, [
        ("2017-10-09 07:05:00", 60.0, 2, "vcA"),
        ("2017-10-09 07:00:00", 30.0, 1, "vcA"),
        ("2017-10-09 07:01:00", 90.0, 1, "vcA"),
        ("2017-10-09 07:02:00", 90.0, 1, "vcB")]))
    assert list(df.t) == [0.0, 60.0, 120.0, 300.0]  # sorted, seconds from the first
    assert list(df.group) == [group_key("vcA", "", 1, None), group_key("vcA", "", 1, None),
                              group_key("vcB", "", 1, None), group_key("vcA", "", 2, None)]


def test_table1_types_per_group_as_v_b_1b():
    """A single-GPU group gets a model with a single-GPU configuration (1 stage); a
    multi-GPU group a model and one of its configurations for that GPU count; the choice is
    fixed by the seed."""
    b = _bench()
    gpus = [1] * 12 + [2] * 6 + [4] * 6 + [8] * 6 + [16] * 4 + [32] * 2
    df = pd.DataFrame({"group": [f"g{i}" for i in range(len(gpus))], "num_gpus": gpus})
    types = b.assign_types(df, 8, seed=3)
    assert set(types) == set(df.group)
    for grp, g in zip(df.group, df.num_gpus):
        model, stages = types[grp]
        if g == 1:
            assert MODELS[model].min_stages == 1 and stages == 1, (grp, model, stages)
        else:
            assert stages in configurations(model, g), (grp, g, model, stages)
    assert types == b.assign_types(df, 8, seed=3)
    assert types != b.assign_types(df, 8, seed=4)
    assert len({m for m, _ in types.values()}) >= 3  # random models, not one


def test_build_turns_durations_into_iterations_and_keeps_the_history_before_the_window():
    b = _bench()
    df = pd.DataFrame({
        "t": [0.0, 100.0, 500.0, 1000.0, 1200.0],
        "duration": [200.0, 5000.0, 300.0, 7200.0, 1e-9],
        "num_gpus": [1, 2, 1, 4, 1],
        "cluster": ["a", "a", "b", "b", "a"]})
    df["group"] = [group_key(c, "", g, None) for c, g in zip(df.cluster, df.num_gpus)]
    types = b.assign_types(df, 8, seed=0)
    jobs, hist = b.build(df, types, 3, len(df), 8)
    t0 = 1000.0
    # rows 0 and 2 ended before the window opened (t0 = 1000 s), row 1 (ends at 5100 s) did
    # not: it is neither history nor a job of the window
    assert [h.id for h in hist] == ["h0", "h2"]
    assert [(h.submit_time, h.end_time) for h in hist] == [(-1000.0, -800.0), (-500.0, -200.0)]
    assert [j.id for j in jobs] == ["p3", "p4"]
    for j, (_, row) in zip(jobs, df.iloc[3:].iterrows()):
        model, st = types[row.group]
        assert (j.app, j.stages, j.num_gpus, j.group_id, j.user) == (
            model, st, row.num_gpus, row.group, row.cluster)
        assert j.submit_time == row.t - t0
        amin = b.alpha_min(model, st, row.num_gpus, 8)
        assert j.total_iters == pytest.approx(max(row.duration / amin, 1.0))
    assert jobs[1].total_iters == 1.0  # at least one iteration
    for h, (_, row) in zip(hist, df.iloc[[0, 2]].iterrows()):
        model, st = types[row.group]
        assert h.iterations == pytest.approx(row.duration / b.alpha_min(model, st, row.num_gpus, 8))


def test_single_gpu_share_redraws_gpus_per_job_as_v_b_2b():
    """Fig. 7 (§V-B 2-b): each job single-GPU with the given probability, otherwise
    distributed; a multi-GPU job that stays distributed keeps its count, a single-GPU job
    made distributed draws a count from the trace's multi-GPU jobs; durations, arrivals and
    VCs are kept; the group is VC + the new GPU count; the draw is fixed by the seed."""
    b = _bench()
    n = 4000
    df = pd.DataFrame({"t": [float(i) for i in range(n)],
                       "duration": [60.0 + i for i in range(n)],
                       "num_gpus": [1, 1, 1, 4, 1, 8, 1, 16] * (n // 8),
                       "cluster": ["a", "b"] * (n // 2)})
    df["group"] = [group_key(c, "", g, None) for c, g in zip(df.cluster, df.num_gpus)]
    for share in (0.8, 0.5, 0.2):
        out = b.set_single_gpu_share(df, share, seed=1)
        single = (out.num_gpus == 1).mean()
        assert abs(single - share) < 0.03, (share, single)
        kept = (df.num_gpus > 1) & (out.num_gpus > 1)
        assert (out.num_gpus[kept] == df.num_gpus[kept]).all()
        made = (df.num_gpus == 1) & (out.num_gpus > 1)
        assert made.any() and set(out.num_gpus[made]) <= {4, 8, 16}
        assert len(set(out.num_gpus[made])) == 3  # drawn, not one fixed count
        assert list(out.group) == [group_key(c, "", g, None)
                                   for c, g in zip(out.cluster, out.num_gpus)]
        assert out[["t", "duration", "cluster"]].equals(df[["t", "duration", "cluster"]])
        assert out.equals(b.set_single_gpu_share(df, share, seed=1))
        assert not out.num_gpus.equals(b.set_single_gpu_share(df, share, seed=2).num_gpus)
    assert (b.set_single_gpu_share(df, 0.0, seed=1).num_gpus > 1).all()
    assert (b.set_single_gpu_share(df, 1.0, seed=1).num_gpus == 1).all()
    assert df.num_gpus.tolist()[:8] == [1, 1, 1, 4, 1, 8, 1, 16]  # input untouched
    with pytest.raises(ValueError, match="share"):
        b.set_single_gpu_share(df, 1.5, seed=1)
    with pytest.raises(ValueError, match="no multi-GPU job"):
        b.set_single_gpu_share(df[df.num_gpus == 1], 0.5, seed=1)


def test_fig7_table_reports_reduction_against_best_and_worst_baseline():
    b = _bench()
    rows = []
    for share, totals in ((0.8, {"a-srpt": 90.0, "spjf": 100.0, "spwf": 120.0}),
                          (0.0, {"a-srpt": 50.0, "spjf": 100.0, "spwf": 200.0})):
        rows += [{"share": share, "policy": p, "total_jct_h": v, "window": 0}
                 for p, v in totals.items()]
    lines = b.fig7(pd.DataFrame(rows))
    text = "\n".join(lines)
    assert "| 80 % | 90 | 100 | 120 | +10 % | +25 % |" in text
    assert "| 0 % | 50 | 100 | 200 | +50 % | +75 % |" in text
    assert text.index("| 80 %") < text.index("| 0 %")  # shares falling, as Fig. 7


@pytest.mark.parametrize("bad,why", [("0.8,x", "'x' is not a number"), ("0.5,1.2", "within")])
def test_single_gpu_share_bad_list_is_a_usage_error(bad, why, capsys):
    b = _bench()
    with pytest.raises(SystemExit) as e:
        b.main(["--single-gpu-share", bad])
    assert e.value.code == 2  # argparse's usage error, before any trace is read
    err = capsys.readouterr().err
    assert "--single-gpu-share" in err and why in err
    assert b.share_list("0.8, 0.6,0") == "0.8, 0.6,0"
