"""Throughput reports: training (rank 0) -> scheduler daemon.

File: ``$GIMBAL_STATE_DIR/reports/<jobid>.jsonl``, one JSON object per line::

    {"job_id": "123", "ts": 1700000000.0, "step": 40, "samples_per_s": 812.5,
     "step_time_s": 0.0788, "gpu_util": 87.0, "mem_used_mb": 5120.0, ...}

The reports directory is writable by every user (mode 1733, docs/security.md), so another
user can create ``<jobid>.jsonl`` before the job's launcher does; the daemon reads a file
only when its owner is the job's user.  The writer therefore opens the file without following
a link and, where it cannot append to a file of its own there (someone else's file, a link, a
file it may not write), writes to ``<jobid>.<16 hex digits>.jsonl`` instead, a new file it
creates exclusively under a name nobody can guess; the daemon reads both names
(:func:`report_job_of`).

``job_id``, ``ts`` (unix seconds) and ``step`` are always present; other
fields are optional and extra keys may appear.  The daemon ingests them with
:func:`read_reports` (or incrementally with :func:`read_reports_from`) into
its SQL state store; this is the runtime information of seed 004 §3 /
§5.2 (training speed, GPU utilisation, memory).

:class:`ReportWriter` never blocks training: records go through a bounded
queue to a background thread that appends them; I/O errors are logged once
and the records dropped - training never crashes because of reporting.
"""
from __future__ import annotations

import json
import logging
import os
import queue
import re
import secrets
import stat
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

log = logging.getLogger("gimbal.report")

REQUIRED = ("job_id", "ts", "step")
_STOP = object()


def report_path(job_id: str, root: Optional[str] = None) -> str:
    from .decision import state_dir
    return os.path.join(root or state_dir(), "reports", f"{job_id}.jsonl")


_OWN_NAME = re.compile(r"([^.]+)(?:\.([0-9a-f]{16}))?\.jsonl")
_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def report_job_of(name: str) -> Optional[str]:
    """The job a report file name speaks for: ``<job>.jsonl`` or the writer's own
    ``<job>.<16 hex digits>.jsonl`` (:class:`ReportWriter`); ``None`` for any other name."""
    m = _OWN_NAME.fullmatch(name)
    return m.group(1) if m else None


def _open_own(path: str):
    """A text file appending to ``path`` if that is (or now becomes) a regular file of this
    user's, else to a new ``<stem>.<16 hex>.jsonl`` beside it (module doc): (file, path)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    try:
        fd = os.open(path, _FLAGS, 0o666)
    except OSError as exc:  # a link (ELOOP), someone else's file we may not write (EACCES)
        why = str(exc)
    else:
        st = os.fstat(fd)
        if st.st_uid == os.geteuid() and stat.S_ISREG(st.st_mode):
            return os.fdopen(fd, "a", encoding="utf-8"), path
        os.close(fd)
        why = f"owned by uid {st.st_uid}"
    if report_job_of(os.path.basename(path)) is None:  # not a report name: no other to take
        raise PermissionError(f"{path}: {why}")
    alt = f"{path[:-6]}.{secrets.token_hex(8)}.jsonl"
    fd = os.open(alt, _FLAGS | os.O_EXCL, 0o666)
    log.warning("gimbal: report file %s cannot be ours (%s); reporting to %s", path, why, alt)
    return os.fdopen(fd, "a", encoding="utf-8"), alt


class ReportWriter:
    """Append-only, non-blocking JSON-lines writer (one per job, rank 0)."""

    def __init__(self, path: Optional[str], job_id: str, max_queue: int = 1024):
        self.path = path
        self.job_id = str(job_id)
        self.dropped = 0
        self.written = 0
        self._error_logged = False
        self._q: "queue.Queue[Any]" = queue.Queue(maxsize=max_queue)
        self._thread: Optional[threading.Thread] = None
        if path:
            self._thread = threading.Thread(target=self._run, name="gimbal-report", daemon=True)
            self._thread.start()

    def write(self, step: int, **fields: Any) -> bool:
        """Queue one record; returns False if it was dropped (queue full/closed)."""
        if self._thread is None:
            return False
        rec: Dict[str, Any] = {"job_id": self.job_id, "ts": round(time.time(), 3), "step": int(step)}
        rec.update({k: v for k, v in fields.items() if v is not None})
        try:
            self._q.put_nowait(rec)
            return True
        except queue.Full:
            self.dropped += 1
            return False

    def _log_error_once(self, exc: BaseException) -> None:
        if not self._error_logged:
            self._error_logged = True
            log.warning("gimbal: cannot write throughput report %s (%s); reports are "
                        "dropped, training continues", self.path, exc)

    def _run(self) -> None:
        fh = None
        while True:
            item = self._q.get()
            if item is _STOP:
                break
            batch = [item]
            while True:  # drain what is queued to write it in one go
                try:
                    nxt = self._q.get_nowait()
                except queue.Empty:
                    break
                if nxt is _STOP:
                    self._q.put(_STOP)
                    break
                batch.append(nxt)
            try:
                if fh is None:
                    fh, self.path = _open_own(self.path)
                fh.write("".join(json.dumps(r, default=str) + "\n" for r in batch))
                fh.flush()
                self.written += len(batch)
            except (OSError, ValueError, TypeError) as exc:
                self.dropped += len(batch)
                self._log_error_once(exc)
                if fh is not None:
                    try:
                        fh.close()
                    except OSError:
                        pass
                    fh = None
        if fh is not None:
            try:
                fh.close()
            except OSError:
                pass

    def close(self, timeout: float = 5.0) -> None:
        """Flush what is queued and stop the writer thread (idempotent)."""
        if self._thread is None:
            return
        try:
            self._q.put(_STOP, timeout=timeout)
        except queue.Full:
            pass
        self._thread.join(timeout)
        self._thread = None

    def __enter__(self) -> "ReportWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _parse_line(line: str) -> Optional[Dict[str, Any]]:
    try:
        rec = json.loads(line)
    except json.JSONDecodeError:
        return None
    if not isinstance(rec, dict) or any(k not in rec for k in REQUIRED):
        return None
    try:
        rec["job_id"] = str(rec["job_id"])
        rec["ts"] = float(rec["ts"])
        rec["step"] = int(rec["step"])
    except (TypeError, ValueError):
        return None
    return rec


def read_reports_from(path: str, offset: int = 0) -> Tuple[List[Dict[str, Any]], int]:
    """Records appended after byte ``offset`` and the offset to resume from.

    A trailing line without newline (a write in progress) is not consumed;
    malformed lines are skipped (logged at debug level)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n")
    if end < 0:
        return [], offset
    records = []
    for raw in data[: end + 1].splitlines():
        if not raw.strip():
            continue
        rec = _parse_line(raw.decode("utf-8", errors="replace"))
        if rec is None:
            log.debug("skipping malformed report line in %s: %r", path, raw[:200])
            continue
        records.append(rec)
    return records, offset + end + 1


def read_reports(path: str) -> List[Dict[str, Any]]:
    """All well-formed records of a report file (missing file -> ``[]``)."""
    return read_reports_from(path, 0)[0]
