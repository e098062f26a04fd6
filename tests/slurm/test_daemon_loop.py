"""``gimbalctl daemon --interval S`` (loop mode) as a real process against the 22.05 cluster.

It runs cycles until SIGTERM; the signal, sent while a cycle is half-way (between plan and
apply, held there by the ``GIMBAL_TEST_PAUSE`` hook), lets that cycle finish and starts no
other: exit 0, every cycle ``done``.  Meanwhile the launcher's report file of a running job
grows, and each line reaches the state store and the app's measured throughput exactly once.
"""
from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import time

import pytest

from tests.slurm.cluster import REPO
from tests.slurm.test_daemon_ordering import Gimbal

pytestmark = pytest.mark.slurm


def poll(pred, timeout: float, what: str, every: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        try:
            v = pred()
        except sqlite3.Error:  # the daemon has not created the DB yet
            v = None
        if v:
            return v
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what} not within {timeout}s")
        time.sleep(every)


def report(job: str, i: int) -> str:
    return json.dumps({"job_id": job, "ts": 1000.0 + i, "step": 10 * i,
                       "samples_per_s": 100.0 * i, "step_time_s": 0.5}) + "\n"


def test_loop_runs_cycles_ingests_reports_and_stops_cleanly_on_sigterm(slurm_2205, clean_slurm):
    c = slurm_2205
    job = str(c.submit(["--gres=gpu:2", "--comment=gimbal:app=bert,batch=64", "-t", "30"]))
    pending = str(c.submit(["--gres=gpu:4", "-w", "gpu1", "--hold"]))  # something to order
    c.wait_state(job, "RUNNING", timeout=30)
    g = Gimbal(c)
    reports = g.host_dir / "state" / "reports"
    reports.mkdir(parents=True)
    rep = reports / f"{job}.jsonl"
    rep.write_text(report(job, 1) + report(job, 2))
    out, err = open(g.host_dir / "out", "w"), open(g.host_dir / "err", "w")
    env = dict(c.env, GIMBAL_STATE_DIR=f"{g.inner}/state", PYTHONPATH=str(REPO),
               GIMBAL_TEST_PAUSE="applying:0.6")
    proc = subprocess.Popen(["python3", "-m", "gimbalctl.cli", "daemon", "--policy", "sjf",
                             "--interval", "0.3", "--json", "--db", g.db, "--backend", "cli"],
                            env=env, stdout=out, stderr=err, cwd=str(REPO))
    try:
        done = lambda: g.rows("select count(*) from cycles where status='done'")[0][0]  # noqa: E731
        poll(lambda: done() >= 2, 30, "2 cycles")
        with open(rep, "a") as fh:  # the job reports on while the daemon runs
            fh.write(report(job, 3) + report(job, 4))
        n_then = done()
        poll(lambda: done() >= n_then + 2, 30, "2 more cycles")
        # SIGTERM while a cycle is between plan and apply
        busy = poll(lambda: g.rows("select id from cycles where status in ('planned', 'applying')"),
                    30, "a cycle in progress")[0][0]
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        out.close()
        err.close()
    stderr = (g.host_dir / "err").read_text()
    assert rc == 0, stderr[-3000:]
    cycles = g.rows("select id, status from cycles order by id")
    n = len(cycles)
    assert n >= 4 and cycles == [(i, "done") for i in range(1, n + 1)], cycles
    assert busy == n  # the interrupted cycle finished; no new cycle began after the signal
    lines = [json.loads(x) for x in (g.host_dir / "out").read_text().splitlines() if x.strip()]
    assert [(x["cycle_id"], x["status"]) for x in lines] == [(i, "done") for i in range(1, n + 1)]
    assert f"stopped by signal {int(signal.SIGTERM)} after {n} cycle(s)" in stderr
    # every cycle read the real queue: the held job is its only pending job
    assert all(x["queue"] == [pending] for x in lines), [x["queue"] for x in lines]
    # reports: 4 lines over n >= 4 cycles, each stored once and folded into bert's profile once
    assert g.rows(f"select step from reports where job_id='{job}' order by step") == \
        [(10,), (20,), (30,), (40,)]
    measured = json.loads(g.rows("select measured from profiles where app='bert'")[0][0])
    assert (measured["2"]["n"], measured["2"]["samples_per_s"], measured["2"]["jobs"]) == \
        (4, 250.0, [job])
    r = g("explain", job)
    assert r.returncode == 0, r.stderr
    assert "measured: bert on 2 GPU(s): 250.0 samples/s (mean of 4 report(s) from 1 job(s))" \
        in r.stdout
