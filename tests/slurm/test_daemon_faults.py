"""Faults: controller unreachable, overlapping --once runs, a kill between plan and apply,
malformed job metadata (22.05 host cluster)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import filelock
import pytest

from tests.slurm.test_daemon_ordering import Gimbal, fill_cluster

pytestmark = pytest.mark.slurm


def test_controller_unreachable_exits_3_and_records_a_failed_cycle(slurm_2205, clean_slurm,
                                                                   tmp_path):
    """Nothing is planned or changed; the only write is the failed cycle with its error
    (issue #14 item 9: failed cycles are recorded; before, nothing showed the failure)."""
    c = slurm_2205
    g = Gimbal(c)
    assert g("db", "upgrade", "--db", g.db).returncode == 0
    # a client config whose controller port nobody listens on (as if slurmctld were stopped;
    # the shared test controller itself keeps running for the other tests)
    conf = Path(c.env["SLURM_CONF"]).read_text()
    conf = re.sub(r"(?m)^SlurmctldPort=\d+", "SlurmctldPort=6999", conf)
    (tmp_path / "slurm.conf").write_text(conf)
    for f in ("gres.conf", "cgroup.conf"):
        src = Path(c.env["SLURM_CONF"]).with_name(f)
        if src.exists():
            (tmp_path / f).write_text(src.read_text())
    r = g("daemon", "--once", "--policy", "sjf", env={"SLURM_CONF": str(tmp_path / "slurm.conf")},
          timeout=200)
    assert r.returncode == 3, (r.returncode, r.stderr)
    assert "Slurm unavailable" in r.stderr
    (cid, status, err), = g.rows("select id, status, error from cycles")
    assert status == "failed" and err.startswith("Slurm unavailable: "), err
    for table in ("jobs", "decisions", "job_decisions", "audit"):
        assert g.rows(f"select count(*) from {table}") == [(0,)], table
    r = g("cycles", "--db", g.db, "--json")
    assert r.returncode == 0, r.stderr
    assert [(x["id"], x["status"]) for x in json.loads(r.stdout)["cycles"]] == [(cid, "failed")]


def test_overlapping_once_runs_one_skips(slurm_2205, clean_slurm):
    g = Gimbal(slurm_2205)
    # the lock is per cluster: <state_dir>/daemon-<ClusterName>.lock
    lock = filelock.FileLock(str(g.host_dir / "state" / "daemon-gimbal.lock"))
    (g.host_dir / "state").mkdir()
    with lock.acquire(timeout=0):  # a cycle in progress (no holder record: not gimbalctl's)
        r = g("daemon", "--once", "--policy", "fifo", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["status"] == "skipped" and out["cluster"] == "gimbal"
    assert "WARNING: cycle skipped" in r.stderr and "no holder record" in r.stderr
    assert g.rows("select id, status from cycles") == [(1, "skipped")]
    assert g.rows("select count(*) from audit") == [(0,)]
    r = g("daemon", "--once", "--policy", "fifo")
    assert r.returncode == 0 and "cycle 2" in r.stdout


@pytest.mark.parametrize("point", ["after_plan", "after_first_intent"])
def test_kill_between_plan_and_apply_reconciles(slurm_2205, clean_slurm, point):
    c = slurm_2205
    fill_cluster(c)
    jobs = [str(c.submit(["--gres=gpu:4", "-t", str(t)])) for t in (40, 10, 30, 20)]
    g = Gimbal(c)
    r = g("daemon", "--once", "--policy", "sjf", env={"GIMBAL_TEST_CRASH": point})
    assert r.returncode == 137
    r = g("daemon", "--once", "--policy", "sjf", "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["reconciled"].get("cycles") == 1
    # every job's priority was set exactly once, nothing left pending
    rows = g.rows("select job_id, after, status from audit where field='priority'")
    done = [(j, a) for j, a, s in rows if s in ("applied", "reconciled")]
    assert sorted(j for j, _ in done) == sorted(jobs)
    assert not [x for x in rows if x[2] == "pending"]
    assert g.rows("select status from cycles order by id") == [("interrupted",), ("done",)]
    prio = dict(l.split() for l in c.run(["squeue", "-h", "-t", "PD", "-o", "%i %Q"]).stdout.splitlines())
    assert [j for j in sorted(jobs, key=lambda j: -int(prio[j]))] == [jobs[1], jobs[3], jobs[2], jobs[0]]


def test_malformed_metadata_defaults_and_warning(slurm_2205, clean_slurm):
    c = slurm_2205
    fill_cluster(c)
    j = str(c.submit(["--gres=gpu:1", "-t", "10"]))
    c.run(["scontrol", "update", f"JobId={j}", "AdminComment=gimbal:v1;app=nosuchapp;batch=lots"],
          check=True)
    g = Gimbal(c)
    r = g("daemon", "--once", "--policy", "sjf", "--json")
    assert r.returncode == 0, r.stderr
    assert f"job {j}: admin_comment: bad value batch='lots'" in r.stderr
    assert f"job {j}: unknown app 'nosuchapp'; using default app" in r.stderr
    r = g("explain", j, "--json")
    inputs = json.loads(r.stdout)["inputs"]
    assert (inputs["app"], inputs["batch"], inputs["duration_estimate"]) == ("cifar10", 128, 600)
