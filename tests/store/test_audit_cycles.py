"""issue #14 item 9 (store side): audit rows keep the reason, failed/skipped cycles are
recorded with the process that ran them, and the audit/cycle queries filter by job, cycle and
time; on SQLite and on a real PostgreSQL server.  Migration 0003 upgrades and downgrades an
existing store without losing rows."""
from __future__ import annotations

import datetime as dt
import os
import socket

from sqlalchemy import text

from gimbalctl.store import Store
from tests.store.test_store import _cycle


def test_audit_log_keeps_reason_and_policy_and_filters(store):
    c1 = _cycle(store)
    a = store.audit_intent(c1, "11", "priority", 5, 100010, ["scontrol"], reason="position 1 of 2")
    store.audit_result(a, "applied", 100010)
    b = store.audit_intent(c1, "12", "priority", 5, 100000, ["scontrol"], reason="position 2 of 2")
    store.audit_result(b, "failed", None, "Invalid Priority value")
    store.finish_cycle(c1, "partial", n_changes=1)
    c2 = _cycle(store)
    store.audit_intent(c2, "11", "site_factor", 0, 10, ["scontrol"], reason="position 1 of 1")
    rows = store.audit_log()
    assert [(r.job_id, r.field, r.reason, c.policy, c.id) for r, c in rows] == [
        ("11", "priority", "position 1 of 2", "sjf", c1),
        ("12", "priority", "position 2 of 2", "sjf", c1),
        ("11", "site_factor", "position 1 of 1", "sjf", c2)]
    assert [r.id for r, _ in store.audit_log(job_id="11")] == [a, rows[2][0].id]
    assert [r.id for r, _ in store.audit_log(cycle_id=c1)] == [a, b]
    future = dt.datetime.utcnow() + dt.timedelta(hours=1)
    assert store.audit_log(since=future) == []
    assert len(store.audit_log(since=future - dt.timedelta(days=1))) == 3


def test_failed_and_skipped_cycles_are_recorded(store):
    ok = _cycle(store)
    store.finish_cycle(ok, "done", n_changes=3)
    f = store.record_cycle(policy="sjf", mode="ordering", knob="priority", backend="cli",
                           release="", status="failed",
                           error="Slurm unavailable: slurm_load_jobs error: Unable to contact")
    s = store.record_cycle(policy="fifo", mode="ordering", knob="priority", backend="cli",
                           release="22.05", status="skipped", error="pid 7 on host h holds it")
    rows = store.cycle_list()
    assert [(c.id, c.status) for c in rows] == [(s, "skipped"), (f, "failed"), (ok, "done")]
    assert rows[1].error.startswith("Slurm unavailable") and rows[1].finished_at is not None
    assert (rows[0].host, rows[0].pid) == (socket.gethostname(), os.getpid())
    assert (rows[2].host, rows[2].pid, rows[2].n_changes) == (socket.gethostname(), os.getpid(), 3)
    assert [c.id for c in store.cycle_list(status="failed")] == [f]
    assert store.last_cycle().id == s
    # a cycle that failed after its plan keeps its change count
    c = _cycle(store)
    store.finish_cycle(c, "applying", n_changes=2)
    store.finish_cycle(c, "failed", error="boom")
    assert store.cycle_list(limit=1)[0].n_changes == 2


def test_migration_0003_on_an_existing_store(tmp_path):
    st = Store(str(tmp_path / "old.db"))
    st.upgrade("0002")
    with st.engine.begin() as c:
        c.execute(text("insert into cycles (id, started_at, policy, mode, knob, backend, "
                       "slurm_release, dry_run, status, n_pending, n_running, n_changes) values "
                       "(1, '2026-01-01 00:00:00', 'sjf', 'ordering', 'priority', 'cli', '22.05', "
                       "0, 'done', 1, 0, 1)"))
        c.execute(text("insert into audit (id, cycle_id, job_id, field, before, after, status, "
                       "created_at, updated_at) values (1, 1, '5', 'priority', '1', '2', "
                       "'applied', '2026-01-01 00:00:00', '2026-01-01 00:00:00')"))
    assert st.upgrade("0003") == "0003"
    (a, c), = st.audit_log()
    assert (a.job_id, a.reason, c.policy, c.host, c.pid) == ("5", None, "sjf", None, None)
    from alembic import command
    cfg = st._alembic_config()
    with st.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0002")
    assert st.revision() == "0002"
    with st.engine.connect() as conn:
        assert conn.execute(text("select count(*) from audit")).scalar() == 1


HOLD = ("import sqlite3, sys, time\n"
        "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "c.execute('BEGIN IMMEDIATE')\n"
        "print('locked', flush=True)\n"
        "time.sleep(float(sys.argv[2]))\n"
        "c.execute('ROLLBACK')\n")


def test_locked_sqlite_store_says_it_waits_and_for_how_long(tmp_path, caplog):
    """issue #14 item 11: a writer that finds the SQLite store locked says so at once (and
    the limit), instead of waiting ~30 s silently; a lock that stays is a StoreError."""
    import logging
    import subprocess
    import sys
    import time

    import pytest

    from gimbalctl.store import StoreError
    db = tmp_path / "g.db"
    st = Store(str(db))
    st.upgrade()
    assert st.wait_write_lock() is None  # free: no message, no wait
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(db), "1.5"], stdout=subprocess.PIPE,
                         text=True)
    assert p.stdout.readline().strip() == "locked"
    caplog.set_level(logging.WARNING, logger="gimbal.store")
    t0 = time.monotonic()
    waited = st.wait_write_lock(wait=20)
    assert 0.5 < waited < 15 and time.monotonic() - t0 < 15
    msgs = [r.getMessage() for r in caplog.records]
    assert msgs[0] == (f"state store sqlite:///{db} is locked by another process (an open write "
                       f"transaction); waiting up to 20 s for it"), msgs
    assert msgs[1].startswith(f"state store sqlite:///{db}: lock free after ")
    p.wait()
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(db), "30"], stdout=subprocess.PIPE,
                         text=True)
    try:
        assert p.stdout.readline().strip() == "locked"
        with pytest.raises(StoreError, match=r"still locked by another process after 0.5 s"):
            st.wait_write_lock(wait=0.5)
    finally:
        p.kill()
        p.wait()
