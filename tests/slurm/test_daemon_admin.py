"""What an administrator sees, on the real 22.05 cluster (issue #14 items 9, 10, 11):

* two loop daemons on one cluster: the second skips every cycle and says once per cycle which
  process holds the cluster lock and since when; the order never flips; when the holder is
  killed (-9) the second takes over at once and says the previous holder died; every skip is
  recorded and listed by ``gimbalctl cycles``;
* each warning of a cycle is printed once, and alembic's INFO lines stay out of the loop log;
* a SQLite store locked by another writer is reported at once with the wait limit;
* Slurm's priority limit (the value ``config.SLURM_PRIORITY_MAX`` checks against) is real;
* ``gimbalctl audit`` shows exactly what a cycle changed, with the reason.
"""
from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time

import pytest

from gimbalctl.config import SLURM_PRIORITY_MAX
from tests.slurm.cluster import REPO
from tests.slurm.test_daemon_loop import poll
from tests.slurm.test_daemon_ordering import Gimbal, fill_cluster, pending_by_priority

pytestmark = pytest.mark.slurm


def loop_daemon(g, policy, name, extra=()):
    out, err = open(g.host_dir / f"{name}.out", "w"), open(g.host_dir / f"{name}.err", "w")
    env = dict(g.c.env, GIMBAL_STATE_DIR=f"{g.inner}/state", PYTHONPATH=str(REPO))
    p = subprocess.Popen([sys.executable, "-m", "gimbalctl.cli", "daemon", "--policy", policy,
                          "--interval", "0.5", "--db", g.db, "--backend", "cli", *extra],
                         env=env, stdout=out, stderr=err, cwd=str(REPO))
    p.files = (out, err)
    return p


def stop(p):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    for f in p.files:
        f.close()


def test_second_loop_daemon_reports_the_holder_each_cycle_and_takes_over_after_a_crash(
        slurm_2205, clean_slurm):
    """Before: both loops ran cycles in turn (the lock was per cycle and per state dir), the
    order flip-flopped, and the skipping one said nothing on stderr and recorded nothing."""
    c = slurm_2205
    fill_cluster(c)
    limits = [50, 20, 90, 10]
    jobs = [str(c.submit(["--gres=gpu:4", "-t", str(t)])) for t in limits]
    sjf = [j for _, j in sorted(zip(limits, jobs))]
    fifo = list(jobs)
    g = Gimbal(c)
    a = loop_daemon(g, "sjf", "a")
    b = None
    try:
        cycles = lambda sql: g.rows(sql)  # noqa: E731
        poll(lambda: cycles(f"select count(*) from cycles where status='done' and pid={a.pid}")
             [0][0] >= 2, 60, "2 cycles of daemon A")
        assert pending_by_priority(c)[0] == sjf
        b = loop_daemon(g, "fifo", "b")
        skipped = lambda: cycles(  # noqa: E731
            f"select count(*) from cycles where status='skipped' and pid={b.pid}")[0][0]
        poll(lambda: skipped() >= 4, 60, "4 skipped cycles of daemon B")
        assert pending_by_priority(c)[0] == sjf, "the second daemon changed the order"
        assert cycles(f"select count(*) from cycles where pid={b.pid} and status!='skipped'") \
            == [(0,)]
        a.send_signal(signal.SIGKILL)  # the holder crashes: no release, its record stays
        a.wait()
        poll(lambda: cycles(f"select count(*) from cycles where status='done' and pid={b.pid}")
             [0][0] >= 1, 60, "a cycle of daemon B after A died")
        poll(lambda: pending_by_priority(c)[0] == fifo, 30, "B's (fifo) order in Slurm")
    finally:
        stop(a)
        if b is not None:
            stop(b)
    err = (g.host_dir / "b.err").read_text()
    n_skipped = skipped()
    holder = re.escape(f"WARNING: cycle skipped: another gimbalctl daemon schedules cluster "
                       f"gimbal: pid {a.pid} on host ") + r"\S+" + re.escape(
        " (loop daemon, policy sjf, mode ordering) since ") + r"[-0-9: ]+ UTC holds lock \S+" \
        + re.escape("/state/daemon-gimbal.lock")
    assert len(re.findall(holder, err)) == n_skipped, err[-3000:]  # once per skipped cycle
    assert err.count(f"the previous holder, pid {a.pid} on host") == 1
    assert "ended without releasing it (crashed or killed)" in err
    r = g("cycles", "--db", g.db, "--limit", "100", "--json")
    assert r.returncode == 0, r.stderr
    listed = json.loads(r.stdout)["cycles"]
    mine = [x for x in listed if x["pid"] == b.pid]
    assert sum(x["status"] == "skipped" for x in mine) == n_skipped
    assert all(f"pid {a.pid}" in x["error"] for x in mine if x["status"] == "skipped")
    assert any(x["status"] == "done" and x["policy"] == "fifo" for x in mine)


def test_each_warning_once_per_cycle_and_no_alembic_info_in_the_loop_log(slurm_2205,
                                                                        clean_slurm):
    """Before: every warning came out twice (logged by the snapshot and echoed by the CLI),
    and each loop cycle logged alembic's ``Context impl SQLiteImpl.`` lines at INFO."""
    c = slurm_2205
    fill_cluster(c)
    j = str(c.submit(["--gres=gpu:1", "-t", "10"]))
    c.run(["scontrol", "update", f"JobId={j}", "AdminComment=gimbal:v1;app=nosuchapp;batch=lots"],
          check=True)
    g = Gimbal(c)
    r = g("daemon", "--once", "--policy", "sjf")
    assert r.returncode == 0, r.stderr
    warns = [l for l in r.stderr.splitlines() if f"job {j}" in l]
    assert len(warns) >= 2 and len(set(warns)) == len(warns), r.stderr  # each once
    d = loop_daemon(g, "sjf", "loop")
    try:
        poll(lambda: g.rows("select count(*) from cycles where status='done'")[0][0] >= 4, 60,
             "3 loop cycles")
    finally:
        stop(d)
    err = (g.host_dir / "loop.err").read_text()
    n = int(re.findall(r"stopped by signal \d+ after (\d+) cycle", err)[0])
    for w in warns:
        text = w.split("warning: ", 1)[1]
        assert err.count(text) == n, (text, n, err[-3000:])
    assert "Context impl" not in err and "Will assume" not in err, err[-3000:]
    assert "alembic" not in err


def test_a_locked_state_store_is_reported_with_the_wait_limit(slurm_2205, clean_slurm):
    """Before: ``daemon --once`` waited up to 30 s inside its first write without a word."""
    c = slurm_2205
    g = Gimbal(c)
    assert g("daemon", "--once", "--policy", "fifo").returncode == 0
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sqlite3, sys, time\n"
         "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
         "c.execute('BEGIN IMMEDIATE'); print('locked', flush=True); time.sleep(10)\n"
         "c.execute('ROLLBACK')\n", str(g.host_db)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        t0 = time.monotonic()
        r = g("daemon", "--once", "--policy", "fifo")
        took = time.monotonic() - t0
    finally:
        holder.wait(timeout=30)
    assert r.returncode == 0, r.stderr
    assert (f"state store sqlite:///{g.db} is locked by another process (an open write "
            f"transaction); waiting up to 30 s for it") in r.stderr
    assert re.search(r"lock free after [0-9.]+ s", r.stderr) and took < 28
    assert "cycle 2" in r.stdout


def test_slurm_priority_limit_and_config_check(slurm_2205, clean_slurm, tmp_path):
    """The limit gimbal checks ``priority_base`` against is Slurm's: the maximum is accepted,
    one more is refused ("Invalid Priority value"); a config beyond it is refused at load (exit
    2, nothing changed) instead of failing every update with rc 5."""
    c = slurm_2205
    j = str(c.submit(["--begin=now+3600"]))
    ok = c.run(["scontrol", "update", f"JobId={j}", f"Priority={SLURM_PRIORITY_MAX}"])
    assert ok.returncode == 0, ok.stderr
    assert c.show_job(j)["Priority"] == str(SLURM_PRIORITY_MAX)
    bad = c.run(["scontrol", "update", f"JobId={j}", f"Priority={SLURM_PRIORITY_MAX + 1}"])
    assert bad.returncode != 0 and "Invalid Priority value" in bad.stderr
    g = Gimbal(c)
    conf = g.host_dir / "g.toml"
    conf.write_text("[ordering]\npriority_base = 4294967295\n")
    r = g("daemon", "--once", "--policy", "fifo", "--config", f"{g.inner}/g.toml")
    assert r.returncode == 2, r.stderr
    assert "priority_base = 4294967295" in r.stderr and "Invalid Priority value" in r.stderr
    assert not g.host_db.exists()


def test_audit_shows_exactly_what_a_cycle_changed(slurm_2205, clean_slurm):
    c = slurm_2205
    fill_cluster(c)
    limits = [30, 10, 20]
    jobs = [str(c.submit(["--gres=gpu:4", "-t", str(t)])) for t in limits]
    _, before = pending_by_priority(c)
    g = Gimbal(c)
    r = g("daemon", "--once", "--policy", "sjf", "--json")
    assert r.returncode == 0, r.stderr
    cyc = json.loads(r.stdout.strip().splitlines()[-1])["cycle_id"]
    order, after = pending_by_priority(c)
    r = g("audit", "--db", g.db, "--cycle", str(cyc), "--json")
    assert r.returncode == 0, r.stderr
    ch = json.loads(r.stdout)["changes"]
    assert sorted((x["job_id"], x["before"], x["after"]) for x in ch) == \
        sorted((j, before[j], after[j]) for j in jobs)
    assert {x["job_id"]: x["reason"] for x in ch} == \
        {j: f"position {order.index(j) + 1} of 3" for j in jobs}
    assert {(x["policy"], x["status"], x["field"]) for x in ch} == {("sjf", "applied", "priority")}
    r = g("audit", "--db", g.db, "--job", jobs[1])
    assert r.returncode == 0 and "position 1 of 3" in r.stdout
