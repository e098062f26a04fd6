import ast
import json

import pandas as pd
import pytest
from click.testing import CliRunner

import policies
from gimbalctl.cli import main


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_policies_lists_registry():
    r = run("policies", "--json")
    assert r.exit_code == 0
    assert sorted(json.loads(r.output)) == policies.names()
    for name in ("fifo", "sjf", "srtf", "srsf", "tiresias"):
        assert name in json.loads(r.output)


def test_simulate_json_and_outputs(tmp_path):
    out = tmp_path / "o"
    r = run("simulate", "--policy", "fifo", "--policy", "tiresias", "--limit", "40",
            "--out", str(out), "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["jobs"] == 40 and set(d["results"]) == {"fifo", "tiresias"}
    for pol in ("fifo", "tiresias"):
        assert d["results"][pol]["avg_jct"] > 0
        assert (out / f"jobs-{pol}.csv").exists()
    for f in ("summary.json", "jct_cdf.png", "waiting_cdf.png", "queue_length.png", "ql_ce_bi.png"):
        assert (out / f).stat().st_size > 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["fifo"]["jobs"] == 40
    for pol in ("fifo", "tiresias"):  # total waiting counts the waits after pre-emptions too
        s = summary[pol]
        assert s["avg_wait_total"] >= s["avg_queueing"] - 1e-9 and "preemptions" in s
        jobs = pd.read_csv(out / f"jobs-{pol}.csv")
        assert (jobs.wait_total >= jobs.queueing - 1e-6).all()
        assert jobs.wait_total.to_numpy() == pytest.approx((jobs.jct - jobs.run_time).to_numpy())


def test_simulate_table_shows_both_waits():
    r = run("simulate", "--policy", "tiresias", "--limit", "30")
    assert r.exit_code == 0, r.output
    assert "avg queue" in r.output and "avg wait" in r.output and "preempt" in r.output


def test_simulate_table_default_policies():
    r = run("simulate", "--limit", "20")
    assert r.exit_code == 0, r.output
    assert "fifo" in r.output and "tiresias" in r.output


def test_unknown_policy_lists_valid():
    r = CliRunner().invoke(main, ["simulate", "--policy", "nope"])
    assert r.exit_code == 2
    assert "unknown policy 'nope'" in r.output and "tiresias" in r.output


def test_bad_cluster_and_trace(tmp_path):
    r = CliRunner().invoke(main, ["simulate", "--cluster", "4by4"])
    assert r.exit_code == 2 and "--cluster" in r.output
    bad = tmp_path / "bad.csv"
    bad.write_text("name,time,application,num_replicas,batch_size\na,1,cifar10,x,128\n")
    r = CliRunner().invoke(main, ["simulate", "--trace", str(bad)])
    assert r.exit_code == 1
    assert "bad trace" in r.output and ":2: column 'num_replicas'" in r.output


def test_generic_trace_with_column_map(tmp_path):
    t = tmp_path / "mine.csv"
    t.write_text("jid,t,gpus,iterations,app\na,0,2,500,cifar10\nb,30,1,200,ncf\n")
    r = run("simulate", "--trace", str(t), "--kind", "generic", "--map", "jid=id",
            "--map", "t=submit_time", "--map", "gpus=num_gpus", "--policy", "fifo", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["results"]["fifo"]["jobs"] == 2
    bad = CliRunner().invoke(main, ["simulate", "--map", "nonsense"])
    assert bad.exit_code == 2 and "COLUMN=FIELD" in bad.output


def test_job_larger_than_cluster_is_a_clear_error():
    r = CliRunner().invoke(main, ["simulate", "--cluster", "4x4", "--policy", "fifo"])
    assert r.exit_code == 1
    assert "asks 32 GPUs" in r.output and "Traceback" not in r.output


def test_listing_policies_imports_no_pandas():
    """Start-up: a command that loads no trace does not pay for pandas/numpy/matplotlib."""
    import subprocess
    import sys

    code = ("import sys; from click.testing import CliRunner; from gimbalctl.cli import main; "
            "r = CliRunner().invoke(main, ['policies']); assert r.exit_code == 0, r.output; "
            "print(sorted(m for m in ('pandas', 'numpy', 'matplotlib', 'sklearn', 'scipy') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


HEAVY = ('gimbalctl.daemon', 'gimbalctl.slurm', 'gimbalctl.store', 'sqlalchemy', 'matplotlib',
         'sklearn', 'scipy', 'pandas', 'gimbalctl.traces_pandas')


def _simulate_imports(args: list[str], heavy=HEAVY) -> list[str]:
    """The heavy modules a ``gimbalctl simulate ARGS`` process has imported when it ends."""
    import subprocess
    import sys

    code = ("import sys; from click.testing import CliRunner; from gimbalctl.cli import main; "
            f"r = CliRunner().invoke(main, ['simulate', *{args!r}]); "
            "assert r.exit_code == 0, r.output; "
            f"print(sorted(m for m in {heavy!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return ast.literal_eval(out.stdout.strip())


def test_simulate_loads_no_slurm_side_and_builds_frames_on_demand():
    """Start-up (issue: CLI imports only what the command needs): a plain ``simulate`` does not
    import the daemon, the Slurm backend, the store (SQLAlchemy), matplotlib or pandas; its
    results still give pandas frames when a caller asks for them."""
    assert _simulate_imports(['--policy', 'fifo', '--limit', '20', '--json']) == []
    from gimbalctl.cluster import parse_cluster
    from gimbalctl.profiles import default_models
    from gimbalctl.sim import SimConfig, simulate
    from gimbalctl.traces import load_trace
    from policies import get_policy
    from gimbalctl.cli import bundled_trace
    jobs = load_trace(bundled_trace(), limit=30)
    res = simulate(jobs, parse_cluster("16x4"), get_policy("fifo"), default_models(), SimConfig())
    assert len(res.jobs) == 30 and res.summary["avg_jct"] == pytest.approx(res.jobs.jct.mean())
    assert res.summary["avg_wait_total"] == pytest.approx(res.jobs.wait_total.mean())
    assert list(res.timeline.columns)[:2] == ["t", "queue_length"]


@pytest.mark.parametrize("header,rows", [
    ("job_id,num_gpu,submit_time,iterations,model_name,duration,interval",
     ["0,1,0,606,vgg19,164,30", "1,8,30,133,bert,147,23"]),
    ("id,submit_time,num_gpus,duration,app,user,deadline",
     ["a,0,2,600,cifar10,u1,", "b,30,1,60,,u2,9000"]),
])
def test_simulate_of_a_csv_imports_no_pandas(tmp_path, header, rows):
    """The stdlib trace reader: a plain simulate of a tiresias or generic CSV imports no
    pandas (nor matplotlib/sklearn); ``--out`` (per-job CSV and plots) still may."""
    p = tmp_path / "t.csv"
    p.write_text("\n".join([header, *rows]) + "\n")
    assert _simulate_imports(['--trace', str(p), '--policy', 'tiresias', '--policy', 'fifo']) == []


TIRESIAS_CSV = ("job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
                "0,1,0,606,vgg19,164,30\n1,8,30,133,bert,147,23\n2,2,45,90,resnet50,300,10\n")


@pytest.mark.parametrize("trace", ["pollux", "tiresias"])
@pytest.mark.parametrize("json_out", [True, False])
def test_simulate_of_a_pollux_or_tiresias_csv_imports_no_numpy(tmp_path, trace, json_out):
    """Start-up (docs/scale.md §6): a plain simulate of a Pollux workload (bench/vs_pollux.py's
    command) or of a Tiresias CSV whose model names all map to applications imports no numpy
    (nor pandas): the summary, the iteration counts and the reader are plain Python.  Nor
    what only other commands or options use: the predictor module (the readers' group key
    lives in gimbalctl.groups), pickle (``predictor fit``), tomllib (``--option``)."""
    from gimbalctl.cli import bundled_trace

    if trace == "pollux":
        path = str(bundled_trace("pollux/workload-3.csv"))
        args = ['--trace', path, '--policy', 'tiresias', '--cluster', '16x4', '--interval', '60']
    else:
        (tmp_path / "t.csv").write_text(TIRESIAS_CSV)
        args = ['--trace', str(tmp_path / "t.csv"), '--policy', 'tiresias', '--policy', 'fifo']
    # (rich's table, the non-JSON output, imports pickle itself)
    heavy = ('numpy', 'gimbalctl.predictor', 'tomllib', *HEAVY) + ('pickle',) * json_out
    assert _simulate_imports(args + ['--json'] * json_out, heavy) == []
    if trace == "pollux" and json_out:  # --option still reads its TOML values
        opt = ['--trace', path, '--policy', 'similarity', '--option', 'cd=false', '--json']
        assert _simulate_imports(opt, ('numpy', 'tomllib')) == ['tomllib']


def test_simulate_still_uses_numpy_where_it_must(tmp_path):
    """What needs numpy still works and imports it then: ``--out`` (per-job CSV, plots) and
    a trace whose model names do not name an application (numpy's seeded draw picks one)."""
    from gimbalctl.cli import bundled_trace

    out = tmp_path / "out"
    args = ['--trace', str(bundled_trace("pollux/workload-3.csv")), '--policy', 'fifo',
            '--cluster', '16x4', '--out', str(out)]
    assert 'numpy' in _simulate_imports(args, ('numpy',))
    assert any(out.glob("*.csv")) and any(out.glob("*.png"))
    (tmp_path / "u.csv").write_text(TIRESIAS_CSV.replace("vgg19", "mystery-net"))
    args = ['--trace', str(tmp_path / "u.csv"), '--policy', 'fifo', '--json']
    assert _simulate_imports(args, ('numpy',)) == ['numpy']
    r1, r2 = run("simulate", *args), run("simulate", *args)
    assert r1.exit_code == 0 and json.loads(r1.output)["jobs"] == 3
    s1, s2 = (json.loads(r.output)["results"]["fifo"] for r in (r1, r2))
    assert {k: v for k, v in s1.items() if k != "wall_s"} == \
        {k: v for k, v in s2.items() if k != "wall_s"}


def test_policy_options_reach_the_policy():
    from gimbalctl.cli import _parse_options, _parse_policies

    opts, scoped = _parse_options(("decide=gpu", "cd=false", "round_length=360", 'jp="yes"'))
    assert opts == {"decide": "gpu", "cd": False, "round_length": 360, "jp": "yes"}
    assert scoped == {}
    (pol,) = _parse_policies(("similarity",), 0.0, *_parse_options(("decide=gpu", "cd=false",
                                                                     "round_length=360.5")))
    assert (pol.decide, pol.cd, pol.jp, pol.round_length) == ("gpu", False, True, 360.5)


def test_policy_scoped_options_reach_that_policy_only():
    """``--option POLICY:KEY=VALUE`` goes to that policy only, over an option for every
    policy; a value may hold a colon."""
    from gimbalctl.cli import _parse_options, _parse_policies

    opts, scoped = _parse_options(("round_length=360", "similarity:cd=false",
                                   "similarity:round_length=90", 'similarity:decide="gpu"',
                                   "gavel:round_length=30"))
    assert opts == {"round_length": 360}
    assert scoped == {"similarity": {"cd": False, "round_length": 90, "decide": "gpu"},
                      "gavel": {"round_length": 30}}
    sim, gavel, iso = _parse_policies(("similarity", "gavel", "isolation"), 0.0, opts, scoped)
    assert (sim.cd, sim.round_length, sim.decide) == (False, 90.0, "gpu")
    assert gavel.round_length == 30.0 and iso.round_length == 360.0
    assert _parse_options(('x:k="a:b"',)) == ({}, {"x": {"k": "a:b"}})


def test_simulate_with_an_option_one_policy_lacks_scoped_to_the_other():
    """``cd`` is similarity's own: for every policy it is an error for fifo, scoped to
    similarity both run, and similarity runs the variant it runs alone."""
    base = ["simulate", "--limit", "30", "--cluster", "4x8:v100,4x8:k80", "--json"]
    r = CliRunner().invoke(main, [*base, "--policy", "fifo", "--policy", "similarity",
                                  "--option", "cd=false"])
    assert r.exit_code == 2 and "'fifo'" in r.output, r.output
    r = run(*base, "--policy", "fifo", "--policy", "similarity", "--option", "similarity:cd=false")
    assert r.exit_code == 0, r.output
    both = json.loads(r.output)["results"]
    alone = json.loads(run(*base, "--policy", "similarity", "--option", "cd=false").output)
    assert both["similarity"]["avg_jct"] == alone["results"]["similarity"]["avg_jct"]
    assert set(both) == {"fifo", "similarity"}


def test_simulate_with_policy_options_runs_that_variant():
    base = ["simulate", "--policy", "similarity", "--limit", "30", "--cluster",
            "4x8:v100,4x8:k80", "--json"]
    default = json.loads(run(*base).output)["results"]["similarity"]
    r = run(*base, "--option", "decide=gpu", "--option", "cd=false", "--option", "jp=false")
    assert r.exit_code == 0, r.output
    variant = json.loads(r.output)["results"]["similarity"]
    assert variant["avg_jct"] != pytest.approx(default["avg_jct"])


@pytest.mark.parametrize("args, words", [
    (["--policy", "similarity", "--option", "decide"], "not [POLICY:]KEY=VALUE"),
    (["--policy", "similarity", "--option", "1x=2"], "not [POLICY:]KEY=VALUE"),
    (["--policy", "similarity", "--option", ":cd=true"], "not [POLICY:]KEY=VALUE"),
    (["--policy", "similarity", "--option", "similarity:cd=true", "--option",
      "similarity:cd=false"], "given twice for similarity"),
    (["--policy", "similarity", "--option", "gavel:round_length=30"],
     "gavel: not among the --policy names (similarity)"),
    (["--policy", "similarity", "--option", "similarity:inter_gbits=1"], "the same for every"),
    (["--option", "similarity:cd=true"], "name the policies"),
    (["--policy", "similarity", "--option", "cd=true", "--option", "cd=false"], "given twice"),
    (["--policy", "similarity", "--option", "nope=1"], "nope"),
    (["--policy", "similarity", "--option", "decide=fastest"], "decide must be one of"),
    (["--option", "cd=true"], "name the policies"),
])
def test_bad_policy_options_are_usage_errors(args, words):
    r = CliRunner().invoke(main, ["simulate", "--limit", "5", *args])
    assert r.exit_code == 2 and "--option" in r.output and words in r.output, r.output
