import json

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
    for f in ("summary.json", "jct_cdf.png", "queue_length.png", "ql_ce_bi.png"):
        assert (out / f).stat().st_size > 0
    assert json.loads((out / "summary.json").read_text())["fifo"]["jobs"] == 40


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
