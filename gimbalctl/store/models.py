"""SQLAlchemy 2 models of the gimbal state store.

Tables:

* ``jobs`` — every Slurm job the daemon has seen (metadata, first/last seen, state);
* ``cycles`` — one row per daemon cycle (policy, mode, outcome);
* ``decisions`` — the plan of a cycle (JSON) and one ``job_decisions`` row per job
  (queue position, reason code/text/numbers, action);
* ``audit`` — every Slurm change: before, intended after, read-back, status
  (``pending`` is written *before* the change, so a crash leaves a trace the
  next cycle reconciles);
* ``reports`` / ``report_offsets`` — launcher throughput reports ingested from
  ``$GIMBAL_STATE_DIR/reports/<job>.jsonl``;
* ``profiles`` — per application: an optional override of the fitted throughput
  profile (``params``) and the throughput measured from launcher reports
  (``measured``, per GPU count; written by :meth:`Store.ingest_reports`).

The schema is created by the alembic migrations in ``migrations/`` (never by
``create_all`` outside tests).
"""
from __future__ import annotations

import datetime as dt
from typing import Optional

from sqlalchemy import (JSON, DateTime, Float, ForeignKey, Integer, String, Text,
                        UniqueConstraint)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


class Base(DeclarativeBase):
    pass


class JobRow(Base):
    __tablename__ = "jobs"
    job_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(256), default="")
    user: Mapped[str] = mapped_column(String(128), default="")
    app: Mapped[Optional[str]] = mapped_column(String(64))
    batch: Mapped[Optional[int]] = mapped_column(Integer)
    iters: Mapped[Optional[float]] = mapped_column(Float)
    est_s: Mapped[Optional[float]] = mapped_column(Float)
    gate: Mapped[int] = mapped_column(Integer, default=0)
    num_gpus: Mapped[int] = mapped_column(Integer, default=0)
    submit_time: Mapped[Optional[float]] = mapped_column(Float)
    state: Mapped[str] = mapped_column(String(32), default="")
    first_seen: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)
    last_seen: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)
    preemptions: Mapped[int] = mapped_column(Integer, default=0)
    meta_warnings: Mapped[Optional[str]] = mapped_column(Text)


class CycleRow(Base):
    __tablename__ = "cycles"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    started_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)
    finished_at: Mapped[Optional[dt.datetime]] = mapped_column(DateTime)
    policy: Mapped[str] = mapped_column(String(64))
    mode: Mapped[str] = mapped_column(String(16))
    knob: Mapped[str] = mapped_column(String(16))
    backend: Mapped[str] = mapped_column(String(16))
    slurm_release: Mapped[str] = mapped_column(String(16), default="")
    dry_run: Mapped[int] = mapped_column(Integer, default=0)
    # planned -> applying -> done | partial | failed; a crash leaves planned/applying (the next
    # cycle marks it interrupted); a cycle that could not run is recorded failed (Slurm
    # unavailable, an error before the plan) or skipped (another daemon holds the cluster lock)
    status: Mapped[str] = mapped_column(String(16), default="planned")
    error: Mapped[Optional[str]] = mapped_column(Text)
    n_pending: Mapped[int] = mapped_column(Integer, default=0)
    n_running: Mapped[int] = mapped_column(Integer, default=0)
    n_changes: Mapped[int] = mapped_column(Integer, default=0)
    host: Mapped[Optional[str]] = mapped_column(String(255))  # the process that ran it
    pid: Mapped[Optional[int]] = mapped_column(Integer)


class DecisionRow(Base):
    __tablename__ = "decisions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    cycle_id: Mapped[int] = mapped_column(ForeignKey("cycles.id", ondelete="CASCADE"), index=True)
    plan: Mapped[dict] = mapped_column(JSON)
    inputs: Mapped[dict] = mapped_column(JSON)  # per-job inputs the policy saw


class JobDecisionRow(Base):
    __tablename__ = "job_decisions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    cycle_id: Mapped[int] = mapped_column(ForeignKey("cycles.id", ondelete="CASCADE"), index=True)
    job_id: Mapped[str] = mapped_column(String(64), index=True)
    position: Mapped[Optional[int]] = mapped_column(Integer)  # in the plan's order; None: not waiting
    reason_code: Mapped[str] = mapped_column(String(32))
    reason_text: Mapped[str] = mapped_column(Text, default="")
    numbers: Mapped[dict] = mapped_column(JSON, default=dict)
    action: Mapped[Optional[dict]] = mapped_column(JSON)
    target: Mapped[Optional[dict]] = mapped_column(JSON)  # Slurm values gimbal wants (priority, gres, ...)


class AuditRow(Base):
    __tablename__ = "audit"
    __table_args__ = (UniqueConstraint("cycle_id", "job_id", "field", name="uq_audit_cycle_job_field"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    cycle_id: Mapped[int] = mapped_column(ForeignKey("cycles.id", ondelete="CASCADE"), index=True)
    job_id: Mapped[str] = mapped_column(String(64), index=True)
    field: Mapped[str] = mapped_column(String(32))
    before: Mapped[Optional[str]] = mapped_column(Text)  # JSON-encoded
    after: Mapped[Optional[str]] = mapped_column(Text)  # intended, JSON-encoded
    read_back: Mapped[Optional[str]] = mapped_column(Text)
    argv: Mapped[Optional[list]] = mapped_column(JSON)
    # pending (written before the change) -> applied | failed | reconciled | abandoned; reverted
    status: Mapped[str] = mapped_column(String(16), default="pending", index=True)
    error: Mapped[Optional[str]] = mapped_column(Text)
    reason: Mapped[Optional[str]] = mapped_column(Text)  # why (e.g. "position 3 of 10")
    created_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)


class ReportRow(Base):
    __tablename__ = "reports"
    __table_args__ = (UniqueConstraint("job_id", "ts", "step", name="uq_report_job_ts_step"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(String(64), index=True)
    ts: Mapped[float] = mapped_column(Float)
    step: Mapped[int] = mapped_column(Integer)
    samples_per_s: Mapped[Optional[float]] = mapped_column(Float)
    step_time_s: Mapped[Optional[float]] = mapped_column(Float)
    gpu_util: Mapped[Optional[float]] = mapped_column(Float)
    mem_used_mb: Mapped[Optional[float]] = mapped_column(Float)
    extra: Mapped[Optional[dict]] = mapped_column(JSON)


class ReportOffsetRow(Base):
    __tablename__ = "report_offsets"
    job_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    offset: Mapped[int] = mapped_column(Integer, default=0)


class ProfileRow(Base):
    __tablename__ = "profiles"
    app: Mapped[str] = mapped_column(String(64), primary_key=True)
    params: Mapped[Optional[dict]] = mapped_column(JSON)  # ThroughputProfile fields; None: no override
    memory: Mapped[Optional[dict]] = mapped_column(JSON)  # MemoryProfile fields
    # measured from launcher reports, keyed by GPU count ("2", or "1:shared" on a shared GPU):
    # {"samples_per_s": mean, "step_time_s": mean, "n": reports, "n_step_time": reports with a
    #  step time, "last_samples_per_s", "last_ts", "jobs": [recent job ids]}
    measured: Mapped[Optional[dict]] = mapped_column(JSON)
    source: Mapped[str] = mapped_column(String(256), default="")
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime, default=utcnow)
