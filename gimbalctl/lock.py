"""One scheduling daemon per Slurm cluster: a file lock plus a holder record.

The lock is ``fcntl.flock`` (``filelock.FileLock``) on ``lock_file`` with ``{cluster}``
replaced by Slurm's ClusterName, so daemons of different clusters never block each other and
two daemons of one cluster (with the same lock path: the shipped config and the default put it
in a fixed place) never both change its queue.  The kernel drops the lock when its holder dies,
even by ``kill -9``: a crashed daemon never blocks the next one.

Next to it, ``<lock>.holder`` (JSON: pid, host, since, policy, mode, loop) says who holds it.
A daemon that finds the lock busy reads the record and reports, once per cycle, which process
holds it and since when; if the record names a process on this host that no longer runs, it
says the record is stale.  A daemon that gets the lock and still finds a record knows the
previous holder ended without releasing it (crash, ``kill -9``, power loss) and says so.
"""
from __future__ import annotations

import datetime as dt
import json
import logging
import os
import re
import socket
from dataclasses import asdict, dataclass
from typing import Optional

import filelock

log = logging.getLogger("gimbal.lock")
HOST = socket.gethostname()


def lock_path(template: str, cluster: str) -> str:
    """``template`` with ``{cluster}`` replaced by a file-name-safe ``cluster``."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", cluster or "default")[:64] or "default"
    return template.replace("{cluster}", safe)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    except (OverflowError, ValueError):
        return False
    return True


@dataclass(frozen=True)
class Holder:
    pid: int
    host: str
    since: float  # Unix time the lock was taken
    policy: str = ""
    mode: str = ""
    loop: bool = False
    cluster: str = ""

    def describe(self) -> str:
        t = dt.datetime.fromtimestamp(self.since, dt.timezone.utc)
        kind = "loop daemon" if self.loop else "one cycle (--once)"
        return (f"pid {self.pid} on host {self.host} ({kind}, policy {self.policy or '?'}, "
                f"mode {self.mode or '?'}) since {t:%Y-%m-%d %H:%M:%S} UTC")

    @property
    def stale_here(self) -> bool:
        """The record names a process on this host that is not running."""
        return self.host == HOST and not pid_alive(self.pid)


def read_holder(path: str) -> Optional[Holder]:
    """The holder record at ``path``, or None if absent or unreadable (never raises)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            d = json.load(fh)
        return Holder(pid=int(d["pid"]), host=str(d["host"]), since=float(d["since"]),
                      policy=str(d.get("policy", "")), mode=str(d.get("mode", "")),
                      loop=bool(d.get("loop", False)), cluster=str(d.get("cluster", "")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


class ClusterLock:
    """The per-cluster daemon lock.  ``try_acquire`` never blocks; a loop daemon keeps the lock
    between its cycles (so a second daemon cannot interleave with it) and releases it at exit."""

    def __init__(self, template: str, cluster: str, policy: str = "", mode: str = "",
                 loop: bool = False):
        self.cluster = cluster
        self.path = lock_path(template, cluster)
        self.record = self.path + ".holder"
        self.info = dict(policy=policy, mode=mode, loop=loop, cluster=cluster)
        self._lock = filelock.FileLock(self.path, timeout=0)
        self.held = False

    def try_acquire(self) -> tuple[bool, Optional[str]]:
        """``(True, note)`` when this process holds the lock (``note``: the previous holder
        ended without releasing it), ``(False, why)`` when another process does."""
        if self.held:
            return True, None
        try:
            self._lock.acquire()
        except filelock.Timeout:
            return False, self.busy_message()
        note = None
        old = read_holder(self.record)
        if old is not None and not (old.pid == os.getpid() and old.host == HOST):
            note = (f"lock {self.path}: the previous holder, {old.describe()}, ended without "
                    f"releasing it (crashed or killed); this process takes over")
        self._write_record()
        self.held = True
        return True, note

    def busy_message(self) -> str:
        h = read_holder(self.record)
        base = f"cycle skipped: another gimbalctl daemon schedules cluster {self.cluster}"
        if h is None:
            return f"{base} (lock {self.path} is held; no holder record at {self.record})"
        if h.stale_here:
            return (f"{base}: lock {self.path} is held, but its record names {h.describe()}, "
                    f"which is not running (a stale record); find the holder with "
                    f"`fuser {self.path}`")
        return f"{base}: {h.describe()} holds lock {self.path}"

    def _write_record(self) -> None:
        rec = Holder(pid=os.getpid(), host=HOST, since=dt.datetime.now().timestamp(), **self.info)
        tmp = f"{self.record}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(asdict(rec), fh)
            os.chmod(tmp, 0o644)
            os.replace(tmp, self.record)
        except OSError as e:  # the lock itself still works; only the report is poorer
            log.warning("cannot write the lock holder record %s: %s", self.record, e)

    def release(self) -> None:
        if not self.held:
            return
        try:
            h = read_holder(self.record)
            if h is not None and h.pid == os.getpid() and h.host == HOST:
                os.unlink(self.record)
        except OSError:
            pass
        self._lock.release()
        self.held = False
