"""Ordering mode on a real cluster: gimbal's plan order becomes Slurm's pending order; revert undoes it.

Runs the real CLI (``python -m gimbalctl.cli``) against 22.05 (host) and 26.05 (chroot,
through tests/slurm/in-chroot.sh), with the CLI backend and, on 26.05, pyslurm.
"""
from __future__ import annotations

import json
import sqlite3
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.slurm.cluster import REPO, SID_ROOT

pytestmark = pytest.mark.slurm


class Gimbal:
    """Runs ``gimbalctl`` against a test cluster with its own DB and state dir."""

    def __init__(self, cluster, backend: str = "cli"):
        self.c = cluster
        self.backend = backend
        tag = uuid.uuid4().hex[:8]
        inner = f"/tmp/gimbal-test-{tag}"  # as the command sees it
        self.host_dir = Path(str(SID_ROOT) + inner) if cluster.in_chroot else Path(inner)
        self.host_dir.mkdir(parents=True)
        self.inner = inner
        self.db = f"{inner}/g.db"
        self.host_db = self.host_dir / "g.db"

    def __call__(self, *args, env=None, timeout=120):
        argv = ["python3" if not self.c.in_chroot else "python", "-m", "gimbalctl.cli", *args]
        if args and args[0] in ("daemon", "queue", "explain", "revert"):
            argv += ["--db", self.db, "--backend", self.backend]
        e = dict(self.c.env)
        e.update({"GIMBAL_STATE_DIR": f"{self.inner}/state", "PYTHONPATH": str(REPO)})
        e.update(env or {})
        return subprocess.run(self.c.cmd(argv), env=e, capture_output=True, text=True,
                              timeout=timeout, cwd=str(REPO))

    def rows(self, sql):
        con = sqlite3.connect(self.host_db)
        try:
            return con.execute(sql).fetchall()
        finally:
            con.close()


def fill_cluster(c):
    """Occupy every GPU so that the jobs submitted next stay pending."""
    ids = [c.submit(["--gres=gpu:4", "-w", n, "-J", "blocker"]) for n in c.nodes if n.startswith("gpu")]
    ids += [c.submit(["--gres=gpu:2", "-w", n, "-J", "blocker"]) for n in c.nodes if n.startswith("mps")]
    for j in ids:
        c.wait_state(j, "RUNNING", timeout=30)
    return ids


def pending_by_priority(c):
    out = c.run(["squeue", "-h", "-t", "PD", "-o", "%i %Q"], check=True).stdout.split()
    pairs = [(out[i], int(out[i + 1])) for i in range(0, len(out), 2)]
    return [j for j, _ in sorted(pairs, key=lambda p: (-p[1], int(p[0])))], dict(pairs)


LIMITS = [50, 20, 90, 10, 70, 30, 80, 40, 60, 100]  # minutes; submit order != SJF order


def _ordering(c, backend, knob):
    fill_cluster(c)
    jobs = [str(c.submit(["--gres=gpu:4", "-t", str(t), "-J", f"ord{t}"])) for t in LIMITS]
    _, before = pending_by_priority(c)
    g = Gimbal(c, backend)
    r = g("daemon", "--once", "--policy", "sjf", "--knob", knob, "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    by_limit = [j for _, j in sorted(zip(LIMITS, jobs))]
    assert res["queue"] == by_limit  # SJF on the Slurm time limit
    order, prio = pending_by_priority(c)
    assert order == res["queue"], (order, prio)
    assert len(set(prio[j] for j in jobs)) == len(jobs)
    # a second cycle changes nothing (reconcile: only what differs)
    r2 = g("daemon", "--once", "--policy", "sjf", "--knob", knob, "--json")
    assert r2.returncode == 0, r2.stderr
    assert json.loads(r2.stdout.strip().splitlines()[-1])["changes"] == []
    n_first = len(res["changes"])  # site factor: the last job keeps 0, so it needs no change
    assert n_first == len(jobs) - (knob == "site_factor")
    assert g.rows("select count(*) from audit where status='applied'")[0][0] == n_first
    # revert restores Slurm's own priorities
    rv = g("revert", "--json")
    assert rv.returncode == 0, rv.stderr
    _, after = pending_by_priority(c)
    assert {j: after[j] for j in jobs} == {j: before[j] for j in jobs}
    assert g.rows("select count(*) from audit where status='applied' and cycle_id in "
                  "(select id from cycles where policy='sjf')")[0][0] == 0


def test_ordering_priority_2205(slurm_2205, clean_slurm):
    _ordering(slurm_2205, "cli", "priority")


def test_ordering_site_factor_2205(slurm_2205, clean_slurm):
    _ordering(slurm_2205, "cli", "site_factor")


def test_ordering_priority_2605_cli(slurm_2605, clean_slurm):
    _ordering(slurm_2605, "cli", "priority")


def test_ordering_priority_2605_pyslurm(slurm_2605, clean_slurm):
    _ordering(slurm_2605, "pyslurm", "priority")


def test_dry_run_prints_argv_and_changes_nothing(slurm_2205, clean_slurm):
    c = slurm_2205
    fill_cluster(c)
    jobs = [str(c.submit(["--gres=gpu:4", "-t", str(t)])) for t in (30, 10)]
    _, before = pending_by_priority(c)
    g = Gimbal(c)
    r = g("daemon", "--dry-run", "--policy", "sjf")
    assert r.returncode == 0, r.stderr
    assert f'"scontrol", "update", "JobId={jobs[1]}", "Priority=' in r.stdout
    assert pending_by_priority(c)[1] == before
    assert not g.host_db.exists() or g.rows("select count(*) from audit")[0][0] == 0
