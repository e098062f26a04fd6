"""issue #14 item 10 (the lock itself, real processes, no cluster): one lock per cluster, the
holder named by pid/host/policy/since when busy, a crashed holder never blocks the next daemon
and is reported, a stale holder record is recognised."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from gimbalctl.lock import HOST, ClusterLock, Holder, lock_path, read_holder

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

HOLDER = textwrap.dedent("""
    import sys, time
    from gimbalctl.lock import ClusterLock
    lk = ClusterLock(sys.argv[1], sys.argv[2], policy="sjf", mode="ordering", loop=True)
    ok, note = lk.try_acquire()
    print("acquired" if ok else "busy", flush=True)
    time.sleep(120)
""")


def holder_process(template, cluster="gimbal"):
    p = subprocess.Popen([sys.executable, "-c", HOLDER, template, cluster], stdout=subprocess.PIPE,
                         text=True, env=dict(os.environ, PYTHONPATH=REPO))
    assert p.stdout.readline().strip() == "acquired"
    return p


def test_lock_is_per_cluster(tmp_path):
    tpl = str(tmp_path / "daemon-{cluster}.lock")
    assert lock_path(tpl, "gimbal") == str(tmp_path / "daemon-gimbal.lock")
    assert lock_path(tpl, "../etc x") == str(tmp_path / "daemon-.._etc_x.lock")
    a, b = ClusterLock(tpl, "alpha"), ClusterLock(tpl, "beta")
    assert a.try_acquire() == (True, None) and b.try_acquire() == (True, None)
    a.release(), b.release()


def test_busy_lock_names_the_holder_and_a_crashed_holder_is_taken_over(tmp_path):
    tpl = str(tmp_path / "daemon-{cluster}.lock")
    p = holder_process(tpl)
    try:
        me = ClusterLock(tpl, "gimbal", policy="fifo")
        got, why = me.try_acquire()
        assert not got
        assert (f"cycle skipped: another gimbalctl daemon schedules cluster gimbal: pid {p.pid} "
                f"on host {HOST} (loop daemon, policy sjf, mode ordering) since ") in why
        assert f"holds lock {tmp_path}/daemon-gimbal.lock" in why
        h = read_holder(me.record)
        assert isinstance(h, Holder) and h.pid == p.pid and abs(h.since - time.time()) < 60
    finally:
        p.send_signal(signal.SIGKILL)  # a crash: no release, the record stays
        p.wait()
    got, note = me.try_acquire()
    assert got, "the kernel drops a dead holder's lock"
    assert f"the previous holder, pid {p.pid} on host {HOST}" in note
    assert "ended without releasing it (crashed or killed)" in note
    assert read_holder(me.record).pid == os.getpid()
    me.release()
    assert read_holder(me.record) is None
    got, note = me.try_acquire()  # a clean release leaves nothing to report
    assert (got, note) == (True, None)
    me.release()


def test_stale_record_with_the_lock_held_elsewhere(tmp_path):
    tpl = str(tmp_path / "daemon-{cluster}.lock")
    p = holder_process(tpl)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        import json
        rec = tmp_path / "daemon-gimbal.lock.holder"
        rec.write_text(json.dumps({"pid": dead.pid, "host": HOST, "since": time.time(),
                                   "policy": "x", "mode": "ordering", "loop": False}))
        got, why = ClusterLock(tpl, "gimbal").try_acquire()
        assert not got
        assert f"its record names pid {dead.pid} on host {HOST}" in why and "stale record" in why
        rec.write_text("garbage \xff")
        got, why = ClusterLock(tpl, "gimbal").try_acquire()
        assert not got and "no holder record" in why
    finally:
        p.kill()
        p.wait()
