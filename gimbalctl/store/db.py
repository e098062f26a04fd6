"""The state store: engine/URL handling, migrations and the operations the daemon uses.

Every public write runs in one transaction (``with self.tx() as s``): on an
error nothing of it is kept.  SQLite by default (``./gimbal.db`` or
``$GIMBAL_DB``); any SQLAlchemy URL works, e.g.
``postgresql+psycopg2://user:pw@host/db``.
"""
from __future__ import annotations

import contextlib
import json
import os
from importlib import resources
from typing import Any, Iterator, Optional

from sqlalchemy import create_engine, event, func, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import ArgumentError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from .models import (AuditRow, CycleRow, DecisionRow, JobDecisionRow, JobRow, ProfileRow,
                     ReportOffsetRow, ReportRow, utcnow)

DEFAULT_DB = "gimbal.db"


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
                kw["connect_args"] = {"timeout": 30}
            self.engine: Engine = create_engine(self.url, echo=echo, future=True, **kw)
        except (ArgumentError, ImportError, SQLAlchemyError) as e:
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
        cfg = self._alembic_config()
        try:
            with self.engine.begin() as conn:
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, revision)
        except OperationalError as e:
            raise StoreError(f"--db {_redact(self.url)!r}: {e.orig}") from None
        return self.revision() or ""

    def revision(self) -> Optional[str]:
        from alembic.runtime.migration import MigrationContext
        try:
            with self.engine.connect() as conn:
                return MigrationContext.configure(conn).get_current_revision()
        except OperationalError as e:
            raise StoreError(f"--db {_redact(self.url)!r}: {e.orig}") from None

    def head(self) -> str:
        from alembic.script import ScriptDirectory
        return ScriptDirectory.from_config(self._alembic_config()).get_current_head()

    def ensure_schema(self) -> None:
        if self.revision() != self.head():
            self.upgrade()

    @contextlib.contextmanager
    def tx(self) -> Iterator[Session]:
        with self._session() as s:
            with s.begin():
                yield s

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
                        setattr(row, k, v)
                row.last_seen = now
            n_pend = sum(1 for j in jobs if j.get("state") == "PENDING")
            cyc = CycleRow(policy=policy, mode=mode, knob=knob, backend=backend,
                           slurm_release=release, dry_run=int(dry_run), status="planned",
                           n_pending=n_pend, n_running=len(jobs) - n_pend, started_at=now)
            s.add(cyc)
            s.flush()
            s.add(DecisionRow(cycle_id=cyc.id, plan=plan, inputs=inputs))
            for d in job_decisions:
                s.add(JobDecisionRow(cycle_id=cyc.id, **d))
            return cyc.id

    def finish_cycle(self, cycle_id: int, status: str, error: Optional[str] = None,
                     n_changes: int = 0) -> None:
        with self.tx() as s:
            c = s.get(CycleRow, cycle_id)
            c.status, c.error, c.n_changes, c.finished_at = status, error, n_changes, utcnow()

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
                     argv: list) -> int:
        """Write the ``pending`` audit row *before* Slurm is changed."""
        with self.tx() as s:
            row = AuditRow(cycle_id=cycle_id, job_id=str(job_id), field=field, before=dumps(before),
                           after=dumps(after), argv=list(argv), status="pending",
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

    def unfinished_cycles(self) -> list[CycleRow]:
        with self.tx() as s:
            return list(s.scalars(select(CycleRow).where(
                CycleRow.status.in_(("planned", "applying")), CycleRow.dry_run == 0)))

    # ---- reports and profiles ----------------------------------------------
    def ingest_reports(self, reports_dir: str) -> int:
        """Read new lines of every ``<job>.jsonl`` in ``reports_dir`` into ``reports``."""
        from launcher.report import read_reports_from
        if not os.path.isdir(reports_dir):
            return 0
        added = 0
        for name in sorted(os.listdir(reports_dir)):
            if not name.endswith(".jsonl"):
                continue
            job_id = name[:-6]
            with self.tx() as s:
                off = s.get(ReportOffsetRow, job_id)
                start = off.offset if off else 0
                recs, new_off = read_reports_from(os.path.join(reports_dir, name), start)
                seen = set()
                for r in recs:
                    key = (str(r["job_id"]), r["ts"], r["step"])
                    if key in seen:
                        continue
                    seen.add(key)
                    extra = {k: v for k, v in r.items() if k not in (
                        "job_id", "ts", "step", "samples_per_s", "step_time_s", "gpu_util", "mem_used_mb")}
                    s.add(ReportRow(job_id=key[0], ts=r["ts"], step=r["step"],
                                    samples_per_s=_f(r.get("samples_per_s")),
                                    step_time_s=_f(r.get("step_time_s")),
                                    gpu_util=_f(r.get("gpu_util")), mem_used_mb=_f(r.get("mem_used_mb")),
                                    extra=extra or None))
                    added += 1
                if off is None:
                    s.add(ReportOffsetRow(job_id=job_id, offset=new_off))
                else:
                    off.offset = new_off
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

    def bump_preemptions(self, job_id: str) -> None:
        with self.tx() as s:
            row = s.get(JobRow, str(job_id))
            if row is not None:
                row.preemptions = (row.preemptions or 0) + 1


def _f(v: Any) -> Optional[float]:
    try:
        return None if v is None else float(v)
    except (TypeError, ValueError):
        return None


def _sqlite_pragmas(dbapi_conn, _rec) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA journal_mode=WAL")
    cur.close()
