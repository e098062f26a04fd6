"""The state store: engine/URL handling, migrations and the operations the daemon uses.

Every public write runs in one transaction (``with self.tx() as s``): on an
error nothing of it is kept.  SQLite by default (``./gimbal.db`` or
``$GIMBAL_DB``); any SQLAlchemy URL works, e.g.
``postgresql+psycopg2://user:pw@host/db``.
"""
from __future__ import annotations

import contextlib
import copy
import json
import logging
import math
import os
import socket
from importlib import resources
import datetime as dt
from typing import Any, Iterable, Iterator, Mapping, Optional

from sqlalchemy import create_engine, event, func, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from .models import (AuditRow, CycleRow, DecisionRow, JobDecisionRow, JobRow, ProfileRow,
                     ReportOffsetRow, ReportRow, utcnow)

log = logging.getLogger("gimbal.store")


class _AlembicAtDebug(logging.Filter):
    """Alembic logs ``Context impl SQLiteImpl.`` / ``Will assume ... DDL.`` at INFO each time the
    schema revision is read: every cycle of a loop daemon.  Those lines become DEBUG (shown only
    when gimbal's own logger is at DEBUG)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.INFO:
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger("gimbal").isEnabledFor(logging.DEBUG)
        return True


for _name in ("alembic.runtime.migration", "alembic.runtime.plugins"):
    logging.getLogger(_name).addFilter(_AlembicAtDebug())

DEFAULT_DB = "gimbal.db"
LOCK_WAIT = 30.0  # seconds a SQLite writer waits for another writer's lock
_HOST = socket.gethostname()
MEASURED_JOBS = 20  # job ids kept per measured entry (the most recent)


class StoreError(RuntimeError):
    """The state store cannot be opened/used (message names the URL)."""


def resolve_url(db: Optional[str] = None) -> str:
    """``--db`` value (URL or file path) -> SQLAlchemy URL; default ``$GIMBAL_DB`` or ``./gimbal.db``."""
    db = db or os.environ.get("GIMBAL_DB") or DEFAULT_DB
    if "://" in db:
        return db
    return "sqlite:///" + os.path.abspath(db)


def _redact(url: str) -> str:
    try:
        from sqlalchemy.engine import make_url
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - only for messages
        return url


def dumps(v: Any) -> str:
    return json.dumps(v, sort_keys=True, default=str)


def loads(v: Optional[str]) -> Any:
    return None if v is None else json.loads(v)


class Store:
    def __init__(self, url: Optional[str] = None, echo: bool = False):
        self.url = resolve_url(url)
        try:
            kw: dict = {}
            if self.url.startswith("sqlite"):
                kw["connect_args"] = {"timeout": LOCK_WAIT}
            self.engine: Engine = create_engine(self.url, echo=echo, future=True, **kw)
        except (ArgumentError, ImportError, SQLAlchemyError, ValueError) as e:
            # ValueError: a malformed URL (e.g. a non-numeric port)
            raise StoreError(f"--db {_redact(self.url)!r}: cannot open ({e})") from None
        if self.url.startswith("sqlite"):
            event.listen(self.engine, "connect", _sqlite_pragmas)
        self._session = sessionmaker(self.engine, expire_on_commit=False)

    # ---- schema -----------------------------------------------------------
    def _alembic_config(self):
        from alembic.config import Config
        cfg = Config()
        cfg.set_main_option("script_location",
                            str(resources.files("gimbalctl.store").joinpath("migrations")))
        cfg.set_main_option("sqlalchemy.url", self.url.replace("%", "%%"))
        return cfg

    def upgrade(self, revision: str = "head") -> str:
        """Apply migrations up to ``revision``; returns the new revision."""
        from alembic import command
        from alembic.util.exc import CommandError
        cfg = self._alembic_config()
        try:
            with self.engine.begin() as conn:
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, revision)
        except DBAPIError as e:
            raise StoreError(f"--db {_redact(self.url)!r}: {e.orig}") from None
        except CommandError as e:  # e.g. the DB is at a revision this gimbal does not know
            raise StoreError(f"--db {_redact(self.url)!r}: schema revision: {e}") from None
        return self.revision() or ""

    def revision(self) -> Optional[str]:
        from alembic.runtime.migration import MigrationContext
        db = self.engine.url.database
        if self.url.startswith("sqlite") and db and db != ":memory:" and not os.path.exists(db):
            return None  # no file yet: do not create one just to look
        try:
            with self.engine.connect() as conn:
                return MigrationContext.configure(conn).get_current_revision()
        except DBAPIError as e:
            raise StoreError(f"--db {_redact(self.url)!r}: {e.orig}") from None

    def head(self) -> str:
        from alembic.script import ScriptDirectory
        return ScriptDirectory.from_config(self._alembic_config()).get_current_head()

    def pending(self, revision: str = "head") -> list[tuple[str, str]]:
        """Migrations ``upgrade(revision)`` would apply, oldest first: (revision, message)."""
        from alembic.script import ScriptDirectory
        script = ScriptDirectory.from_config(self._alembic_config())
        current = self.revision()
        try:
            revs = list(script.iterate_revisions(revision, current))
        except Exception as e:  # alembic raises several types for unknown revisions
            raise StoreError(f"--revision {revision!r}: {e}") from None
        return [(r.revision, (r.doc or "").strip()) for r in reversed(revs)]

    def ensure_schema(self) -> None:
        if self.revision() != self.head():
            self.upgrade()

    def wait_write_lock(self, wait: float = LOCK_WAIT) -> Optional[float]:
        """SQLite: make sure this process can write now.  If another process holds the write
        lock (an open write transaction: another gimbalctl, an ``sqlite3`` shell, a backup),
        say so on the log at once and wait up to ``wait`` s for it, instead of waiting
        silently inside the first write.  Returns the seconds waited (None: no wait needed, or
        not SQLite); raises :class:`StoreError` naming the URL when the lock stays taken."""
        import sqlite3
        import time
        db = self.engine.url.database
        if not self.url.startswith("sqlite") or not db or db == ":memory:" or \
                (not db.startswith("file:") and not os.path.exists(db)):
            return None
        raw = self.engine.raw_connection()
        try:
            cur = raw.driver_connection.cursor()
            cur.execute("PRAGMA busy_timeout = 0")
            try:
                try:
                    cur.execute("BEGIN IMMEDIATE")
                    cur.execute("ROLLBACK")
                    return None
                except sqlite3.OperationalError as e:
                    if "locked" not in str(e) and "busy" not in str(e):
                        raise StoreError(f"--db {_redact(self.url)!r}: {e}") from None
                log.warning("state store %s is locked by another process (an open write "
                            "transaction); waiting up to %g s for it", _redact(self.url), wait)
                t0 = time.monotonic()
                cur.execute(f"PRAGMA busy_timeout = {int(wait * 1000)}")
                try:
                    cur.execute("BEGIN IMMEDIATE")
                    cur.execute("ROLLBACK")
                except sqlite3.OperationalError as e:
                    raise StoreError(f"--db {_redact(self.url)!r}: still locked by another "
                                     f"process after {wait:g} s ({e}); is another gimbalctl or "
                                     f"an sqlite3 shell holding a transaction open?") from None
                took = time.monotonic() - t0
                log.warning("state store %s: lock free after %.1f s", _redact(self.url), took)
                return took
            finally:
                cur.execute(f"PRAGMA busy_timeout = {int(LOCK_WAIT * 1000)}")
                cur.close()
        finally:
            raw.close()

    @contextlib.contextmanager
    def tx(self) -> Iterator[Session]:
        """One transaction; a database error (cannot connect, read-only, locked, a value refused)
        becomes :class:`StoreError` naming the URL."""
        try:
            with self._session() as s:
                with s.begin():
                    yield s
        except DBAPIError as e:
            raise StoreError(f"--db {_redact(self.url)!r}: {e.orig}") from e

    # ---- cycles and decisions ----------------------------------------------
    def begin_cycle(self, *, policy: str, mode: str, knob: str, backend: str, release: str,
                    dry_run: bool, jobs: list[dict], plan: dict, inputs: dict,
                    job_decisions: list[dict]) -> int:
        """Record the jobs seen, the cycle (status ``planned``) and its plan, atomically."""
        now = utcnow()
        with self.tx() as s:
            for j in jobs:
                row = s.get(JobRow, j["job_id"])
                if row is None:
                    row = JobRow(job_id=j["job_id"], first_seen=now)
                    s.add(row)
                for k, v in j.items():
                    if k != "job_id" and hasattr(JobRow, k):
                        setattr(row, k, _clip(JobRow, k, v))
                row.last_seen = now
            n_pend = sum(1 for j in jobs if j.get("state") == "PENDING")
            cyc = CycleRow(policy=policy, mode=mode, knob=knob, backend=backend,
                           slurm_release=release, dry_run=int(dry_run), status="planned",
                           n_pending=n_pend, n_running=len(jobs) - n_pend, started_at=now,
                           host=_HOST, pid=os.getpid())
            s.add(cyc)
            s.flush()
            s.add(DecisionRow(cycle_id=cyc.id, plan=plan, inputs=inputs))
            for d in job_decisions:
                s.add(JobDecisionRow(cycle_id=cyc.id,
                                     **{k: _clip(JobDecisionRow, k, v) for k, v in d.items()}))
            return cyc.id

    def finish_cycle(self, cycle_id: int, status: str, error: Optional[str] = None,
                     n_changes: Optional[int] = None) -> None:
        """Close a cycle (``n_changes`` None: keep the count already stored)."""
        with self.tx() as s:
            c = s.get(CycleRow, cycle_id)
            c.status, c.error, c.finished_at = status, error, utcnow()
            if n_changes is not None:
                c.n_changes = n_changes

    def record_cycle(self, *, policy: str, mode: str, knob: str, backend: str, release: str,
                     status: str, error: Optional[str]) -> int:
        """A cycle that did not run (``failed`` before its plan, ``skipped``): one finished
        row with the reason, so ``gimbalctl cycles`` lists it."""
        now = utcnow()
        with self.tx() as s:
            cyc = CycleRow(policy=_clip(CycleRow, "policy", policy), mode=mode, knob=knob,
                           backend=_clip(CycleRow, "backend", backend),
                           slurm_release=_clip(CycleRow, "slurm_release", release or ""),
                           dry_run=0, status=status, error=error, started_at=now,
                           finished_at=now, host=_HOST, pid=os.getpid())
            s.add(cyc)
            s.flush()
            return cyc.id

    def last_cycle(self, exclude_modes: tuple = ("revert",)) -> Optional[CycleRow]:
        """The newest non-dry-run cycle (revert runs left out)."""
        with self.tx() as s:
            return s.scalars(select(CycleRow).where(
                CycleRow.dry_run == 0, CycleRow.mode.not_in(exclude_modes))
                .order_by(CycleRow.id.desc()).limit(1)).first()

    def cycle_list(self, limit: int = 50, status: Optional[str] = None,
                   since: Optional[Any] = None) -> list[CycleRow]:
        """Cycles, newest first (``since``: a naive UTC datetime)."""
        q = select(CycleRow).order_by(CycleRow.id.desc()).limit(limit)
        if status:
            q = q.where(CycleRow.status == status)
        if since is not None:
            q = q.where(CycleRow.started_at >= since)
        with self.tx() as s:
            return list(s.scalars(q))

    def audit_log(self, job_id: Optional[str] = None, cycle_id: Optional[int] = None,
                  since: Optional[Any] = None) -> list[tuple[AuditRow, Optional[CycleRow]]]:
        """Audit rows (oldest first) with their cycle (policy, mode), filtered by job, cycle
        and creation time (``since``: a naive UTC datetime)."""
        q = select(AuditRow, CycleRow).join(CycleRow, CycleRow.id == AuditRow.cycle_id,
                                            isouter=True).order_by(AuditRow.id)
        if job_id:
            q = q.where(AuditRow.job_id == str(job_id))
        if cycle_id is not None:
            q = q.where(AuditRow.cycle_id == cycle_id)
        if since is not None:
            q = q.where(AuditRow.created_at >= since)
        with self.tx() as s:
            return [(a, c) for a, c in s.execute(q).all()]

    def set_cycle_status(self, cycle_id: int, status: str) -> None:
        with self.tx() as s:
            s.get(CycleRow, cycle_id).status = status

    def cycles(self, limit: int = 20) -> list[CycleRow]:
        with self.tx() as s:
            return list(s.scalars(select(CycleRow).order_by(CycleRow.id.desc()).limit(limit)))

    def count(self, model) -> int:
        with self.tx() as s:
            return s.scalar(select(func.count()).select_from(model))

    def last_decision(self, job_id: str) -> Optional[tuple[CycleRow, JobDecisionRow, dict]]:
        """The newest recorded decision about ``job_id``: (cycle, job decision, plan+inputs)."""
        with self.tx() as s:
            jd = s.scalars(select(JobDecisionRow).where(JobDecisionRow.job_id == str(job_id))
                           .order_by(JobDecisionRow.cycle_id.desc()).limit(1)).first()
            if jd is None:
                return None
            cyc = s.get(CycleRow, jd.cycle_id)
            dec = s.scalars(select(DecisionRow).where(DecisionRow.cycle_id == jd.cycle_id)).first()
            return cyc, jd, {"plan": dec.plan if dec else {}, "inputs": dec.inputs if dec else {}}

    def last_plan(self) -> Optional[tuple[CycleRow, dict]]:
        with self.tx() as s:
            dec = s.scalars(select(DecisionRow).order_by(DecisionRow.cycle_id.desc()).limit(1)).first()
            if dec is None:
                return None
            return s.get(CycleRow, dec.cycle_id), {"plan": dec.plan, "inputs": dec.inputs}

    # ---- audit ------------------------------------------------------------
    def audit_intent(self, cycle_id: int, job_id: str, field: str, before: Any, after: Any,
                     argv: list, reason: Optional[str] = None) -> int:
        """Write the ``pending`` audit row *before* Slurm is changed."""
        with self.tx() as s:
            row = AuditRow(cycle_id=cycle_id, job_id=str(job_id), field=field, before=dumps(before),
                           after=dumps(after), argv=list(argv), status="pending", reason=reason,
                           created_at=utcnow(), updated_at=utcnow())
            s.add(row)
            s.flush()
            return row.id

    def audit_result(self, audit_id: int, status: str, read_back: Any = None,
                     error: Optional[str] = None) -> None:
        with self.tx() as s:
            row = s.get(AuditRow, audit_id)
            row.status, row.read_back, row.error = status, dumps(read_back), error
            row.updated_at = utcnow()

    def audit_rows(self, status: Optional[str] = None, job_id: Optional[str] = None,
                   cycle_id: Optional[int] = None) -> list[AuditRow]:
        q = select(AuditRow).order_by(AuditRow.id)
        if status:
            q = q.where(AuditRow.status == status)
        if job_id:
            q = q.where(AuditRow.job_id == str(job_id))
        if cycle_id:
            q = q.where(AuditRow.cycle_id == cycle_id)
        with self.tx() as s:
            return list(s.scalars(q))

    def cycle_ids(self, mode: str) -> set[int]:
        """Ids of the cycles of ``mode`` (e.g. ``revert``)."""
        with self.tx() as s:
            return set(s.scalars(select(CycleRow.id).where(CycleRow.mode == mode)))

    def unfinished_cycles(self) -> list[CycleRow]:
        with self.tx() as s:
            return list(s.scalars(select(CycleRow).where(
                CycleRow.status.in_(("planned", "applying")), CycleRow.dry_run == 0)))

    # ---- reports and profiles ----------------------------------------------
    def ingest_reports(self, reports_dir: str,
                       job_info: Optional[Mapping[str, Mapping[str, Any]]] = None,
                       owners: Optional[Mapping[str, int]] = None) -> int:
        """Read the new lines of every ``<job>.jsonl`` in ``reports_dir`` into ``reports`` and
        fold their throughput into the application's profile row (``profiles.measured``).

        Exactly once: per file, the new rows, the profile update and the file's new byte offset
        (``report_offsets``) are one transaction, so a crash keeps all of it or none of it and
        the next call starts where the last commit ended.  Rows whose ``(job_id, ts, step)`` is
        already stored are skipped (a file that shrank, i.e. was replaced, is read again from
        the start and only its new records count).  A trailing line without newline (being
        written) waits for the next call.

        ``job_info``: job id -> ``{"app", "num_gpus", "shared"}`` of jobs Slurm lists now (the
        daemon passes the current jobs); a record's own ``app`` / ``num_gpus`` win, and jobs
        not listed fall back to the ``jobs`` table.  Records whose app or GPU count is unknown
        are stored but not folded into a profile.  Returns the number of rows added.

        Attribution (the reports directory is writable by every user, docs/security.md): a
        file ``<job>.jsonl``, or ``<job>.<16 hex digits>.jsonl`` (the launcher's own file where
        someone else made ``<job>.jsonl`` first, :mod:`launcher.report`), speaks only for
        ``<job>``; records naming another job are dropped; other names are not read.
        ``owners`` (job id -> uid of the job's user, from Slurm; the daemon passes it): a file
        is read only when its owner is that uid or this process's own, so one user cannot
        report for another's job by creating its file first.  Files of jobs not in
        ``owners`` wait unread.  ``owners=None`` (library use, tests): no owner check.
        """
        from launcher.report import report_job_of
        if not os.path.isdir(reports_dir):
            return 0
        job_info = job_info or {}
        added = 0
        for name in sorted(os.listdir(reports_dir)):
            job = report_job_of(name)
            if job is None:
                continue
            path = os.path.join(reports_dir, name)
            file_key = name[:-6]
            try:
                st = os.stat(path)
            except OSError:
                continue
            size = st.st_size
            if owners is not None:
                uid = owners.get(job)
                if uid is None:
                    continue  # not a job Slurm lists now: its owner cannot be checked
                if st.st_uid not in (uid, os.geteuid()):
                    log.warning("reports: %s is owned by uid %d, not by the job's user (uid %d);"
                                " not read", path, st.st_uid, uid)
                    continue
            try:
                added += self._ingest_file(path, file_key, job, size, job_info)
            except (SQLAlchemyError, StoreError) as e:  # e.g. a value the DB refuses: retried next time
                log.warning("reports: cannot ingest %s (%s); the file's offset is unchanged",
                            path, e)
        return added

    def _ingest_file(self, path: str, file_key: str, job: str, size: int,
                     job_info: Mapping) -> int:
        from launcher.report import read_reports_from
        with self.tx() as s:
            off = s.get(ReportOffsetRow, file_key)
            start = off.offset if off else 0
            if size == start:
                return 0
            if size < start:  # truncated or replaced: read again, dedup keys keep it once
                start = 0
            recs, new_off = read_reports_from(path, start)
            mine = [r for r in recs if str(r.get("job_id")) == job]
            if len(mine) < len(recs):
                log.warning("reports: %s: %d record(s) name another job; dropped", path,
                            len(recs) - len(mine))
            added = self._add_reports(s, mine, job_info)
            if off is None:
                s.add(ReportOffsetRow(job_id=file_key, offset=new_off))
            else:
                off.offset = new_off
            _test_crash("ingest_before_commit")
            return added

    def _add_reports(self, s: Session, recs: list[dict], job_info: Mapping) -> int:
        """Insert records not stored yet and fold them into profiles (inside ``s``)."""
        by_job: dict[str, list[dict]] = {}
        for r in recs:
            if math.isfinite(r["ts"]):
                by_job.setdefault(str(r["job_id"]), []).append(r)
        added = 0
        measured: dict[str, dict] = {}  # app -> measured dict being updated in this transaction
        for job_id, rows in by_job.items():
            lo, hi = min(r["ts"] for r in rows), max(r["ts"] for r in rows)
            seen = set(s.execute(select(ReportRow.ts, ReportRow.step).where(
                ReportRow.job_id == job_id, ReportRow.ts >= lo, ReportRow.ts <= hi)).all())
            app, n_gpus, shared = _attribution(s, job_id, job_info)
            for r in rows:
                key = (r["ts"], r["step"])
                if key in seen:
                    continue
                seen.add(key)
                extra = {k: _finite(v) for k, v in r.items() if k not in (
                    "job_id", "ts", "step", "samples_per_s", "step_time_s", "gpu_util", "mem_used_mb")}
                sps, stt = _f(r.get("samples_per_s")), _f(r.get("step_time_s"))
                s.add(ReportRow(job_id=job_id, ts=r["ts"], step=r["step"], samples_per_s=sps,
                                step_time_s=stt, gpu_util=_f(r.get("gpu_util")),
                                mem_used_mb=_f(r.get("mem_used_mb")), extra=extra or None))
                added += 1
                r_app = r.get("app") if isinstance(r.get("app"), str) and r.get("app") else app
                r_n = _pos_int(r.get("num_gpus")) or n_gpus
                # a launch's first report includes warm-up (launcher.monitor marks it): kept
                # in ``reports`` but never folded into the measured throughput
                if r_app and r_n and _good(sps) and r.get("warmup") is not True:
                    if r_app not in measured:
                        row = s.get(ProfileRow, r_app)
                        measured[r_app] = copy.deepcopy(row.measured) if row and row.measured else {}
                    _fold(measured[r_app], f"{r_n}:shared" if shared else str(r_n), job_id,
                          r["ts"], sps, stt if _good(stt) else None)
        now = utcnow()
        for app, m in measured.items():
            row = s.get(ProfileRow, app)
            if row is None:
                s.add(ProfileRow(app=app, params=None, measured=m, source="reports",
                                 updated_at=now))
            else:
                row.measured, row.updated_at = m, now  # a new dict: SQLAlchemy sees the change
        return added

    def latest_reports(self) -> dict[str, ReportRow]:
        """The newest report per job."""
        with self.tx() as s:
            sub = select(ReportRow.job_id, func.max(ReportRow.id).label("mid")).group_by(
                ReportRow.job_id).subquery()
            rows = s.scalars(select(ReportRow).join(sub, ReportRow.id == sub.c.mid))
            return {r.job_id: r for r in rows}

    def set_profile(self, app: str, params: dict, memory: Optional[dict] = None,
                    source: str = "") -> None:
        with self.tx() as s:
            row = s.get(ProfileRow, app) or ProfileRow(app=app)
            row.params, row.memory, row.source, row.updated_at = params, memory, source, utcnow()
            s.merge(row)

    def profiles(self) -> dict[str, ProfileRow]:
        with self.tx() as s:
            return {r.app: r for r in s.scalars(select(ProfileRow))}

    def job_rows(self) -> dict[str, JobRow]:
        with self.tx() as s:
            return {r.job_id: r for r in s.scalars(select(JobRow))}

    def mark_outran(self, job_ids: Iterable[str]) -> None:
        """Jobs that ran longer than the duration estimate gimbal used (estimate accuracy)."""
        ids = [str(j) for j in job_ids]
        if not ids:
            return
        with self.tx() as s:
            for row in s.scalars(select(JobRow).where(JobRow.job_id.in_(ids))):
                row.est_outran = 1

    def users_outran_since(self, since: dt.datetime) -> set[str]:
        """Users with a job seen since ``since`` (UTC, naive) that outran its estimate."""
        with self.tx() as s:
            return set(s.scalars(select(JobRow.user).where(JobRow.est_outran == 1,
                                                            JobRow.last_seen >= since)))

    def last_hold_actions(self, job_ids: Iterable[str]) -> dict[str, str]:
        """Job id -> the field of gimbal's newest applied hold/release change to it
        (``release``, ``requeue_hold``, ``hold``, ``revert:hold``, ``revert:release``):
        whether a job's current hold is one gimbal placed (gate mode releases only those)."""
        ids = [str(j) for j in job_ids]
        if not ids:
            return {}
        fields = ("release", "requeue_hold", "hold", "revert:hold", "revert:release")
        out: dict[str, str] = {}
        with self.tx() as s:
            for row in s.scalars(select(AuditRow).where(
                    AuditRow.job_id.in_(ids), AuditRow.field.in_(fields),
                    AuditRow.status.in_(("applied", "reconciled", "reverted")))
                    .order_by(AuditRow.id)):
                out[row.job_id] = row.field
        return out

    def last_resizes(self, job_ids: Iterable[str], reason: str) -> dict[str, float]:
        """Job id -> unix time of gimbal's newest applied (or reconciled) requeue of the job
        whose audit reason starts with ``reason`` (the daemon's ``plan: ResizeJob``): when the job's
        GPU count was last changed by a resize (gate mode's ``gate.min_resize_interval``)."""
        ids = [str(j) for j in job_ids]
        if not ids:
            return {}
        out: dict[str, float] = {}
        with self.tx() as s:
            for row in s.scalars(select(AuditRow).where(
                    AuditRow.job_id.in_(ids), AuditRow.field == "requeue_hold",
                    AuditRow.reason.startswith(reason, autoescape=True),
                    AuditRow.status.in_(("applied", "reconciled"))).order_by(AuditRow.id)):
                out[row.job_id] = row.created_at.replace(tzinfo=dt.timezone.utc).timestamp()
        return out

    def bump_preemptions(self, job_id: str) -> None:
        with self.tx() as s:
            row = s.get(JobRow, str(job_id))
            if row is not None:
                row.preemptions = (row.preemptions or 0) + 1


def _clip(model, key: str, v: Any) -> Any:
    """``v`` cut to the length of ``model``'s String column ``key``: job names, users and apps
    come from users, and PostgreSQL refuses (SQLite ignores) a value longer than its column."""
    col = model.__table__.columns.get(key)
    n = getattr(col.type, "length", None) if col is not None else None
    return v[:n] if n and isinstance(v, str) and len(v) > n else v


def _attribution(s: Session, job_id: str, job_info: Mapping) -> tuple[Optional[str], int, bool]:
    """(app, GPU count, on a shared GPU) of a job: from ``job_info``, else the jobs table."""
    info = job_info.get(job_id)
    if info is not None:
        return info.get("app"), int(info.get("num_gpus") or 0), bool(info.get("shared"))
    row = s.get(JobRow, job_id)
    if row is not None:
        return row.app, int(row.num_gpus or 0), False
    return None, 0, False


def _fold(m: dict, key: str, job_id: str, ts: float, sps: float, stt: Optional[float]) -> None:
    """Add one report to the running means of ``m[key]`` (see ``ProfileRow.measured``)."""
    e = m.setdefault(key, {"n": 0, "samples_per_s": 0.0, "n_step_time": 0, "step_time_s": None,
                           "jobs": []})
    e["n"] += 1
    e["samples_per_s"] += (sps - e["samples_per_s"]) / e["n"]
    if stt is not None:
        e["n_step_time"] += 1
        prev = e["step_time_s"] or 0.0
        e["step_time_s"] = prev + (stt - prev) / e["n_step_time"]
    if ts >= (e.get("last_ts") or 0.0):
        e["last_ts"], e["last_samples_per_s"] = ts, sps
    if job_id not in e["jobs"]:
        e["jobs"] = (e["jobs"] + [job_id])[-MEASURED_JOBS:]


def _good(v: Optional[float]) -> bool:
    return v is not None and math.isfinite(v) and v > 0


def _pos_int(v: Any) -> int:
    try:
        n = int(v)
    except (TypeError, ValueError):
        return 0
    return n if n > 0 and not isinstance(v, bool) else 0


def _test_crash(name: str) -> None:
    """Test hook: ``GIMBAL_TEST_CRASH=<name>`` kills the process at that point."""
    if os.environ.get("GIMBAL_TEST_CRASH") == name:
        os._exit(137)


def _f(v: Any) -> Optional[float]:
    """A finite float, else None (reports may carry NaN/Infinity, which PostgreSQL's JSON and
    the running means must not see)."""
    try:
        x = None if v is None or isinstance(v, bool) else float(v)
    except (TypeError, ValueError):
        return None
    return x if x is not None and math.isfinite(x) else None


def _finite(v: Any) -> Any:
    """``v`` with non-finite floats (also nested) replaced by None: JSON-safe everywhere."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    return v


def _sqlite_pragmas(dbapi_conn, _rec) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA journal_mode=WAL")
    cur.close()
