"""``gimbalctl audit`` and ``gimbalctl cycles``: what gimbal changed and when it ran, in the
manner of ``sacct`` / ``sacctmgr show``.  Both only read the state store (never create or
migrate it) and take the same ``--config`` / ``--db`` as the daemon.
"""
from __future__ import annotations

import datetime as dt
import json
import re
from typing import Optional

import click

from .cli_slurm import Exit, _fail, _setup, _store_ro


def _config_opts(f):
    f = click.option("--json", "as_json", is_flag=True, help="machine-readable output")(f)
    f = click.option("--db", default=None, help="state store URL or SQLite path "
                     "(default: the config's db)")(f)
    f = click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
                     help="TOML config file (default $GIMBAL_CONFIG, else "
                     "/etc/gimbal/gimbal.toml if it exists)")(f)
    return f


_AGE = re.compile(r"(\d+(?:\.\d+)?)\s*(s|m|min|h|d)")


def parse_since(raw: str, now: Optional[dt.datetime] = None) -> dt.datetime:
    """``--since``: an age (``90s``, ``30m``, ``2h``, ``7d``) or an ISO 8601 time (without a
    zone: local time, as ``sacct -S``) -> naive UTC datetime (how the store keeps times)."""
    now = now or dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    m = _AGE.fullmatch(raw.strip().lower())
    if m:
        unit = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}[m.group(2)]
        return now - dt.timedelta(seconds=float(m.group(1)) * unit)
    try:
        when = dt.datetime.fromisoformat(raw.strip())
    except ValueError:
        raise click.BadParameter(f"{raw!r} is neither an age (90s, 30m, 2h, 7d) nor an ISO 8601 "
                                 f"time (2026-11-22T14:00)", param_hint="--since") from None
    return when.astimezone(dt.timezone.utc).replace(tzinfo=None)


def _since(raw):
    return parse_since(raw) if raw else None


def _store_or_fail(cfg, what: str):
    st, why = _store_ro(cfg)
    if st is None:
        _fail(f"{why}; no {what} to show (give the daemon's --config or --db)", Exit.STORE)
    return st


def _loads(v):
    try:
        return None if v is None else json.loads(v)
    except ValueError:
        return v


def _ts(t: Optional[dt.datetime]) -> str:
    return f"{t:%Y-%m-%d %H:%M:%S}" if t else ""


def _console():
    from rich.console import Console
    c = Console()
    return c if c.is_terminal else Console(width=200)


# ---------------------------------------------------------------- audit
@click.command("audit")
@_config_opts
@click.option("--job", "job_id", default=None, help="only this Slurm job id")
@click.option("--since", default=None, help="only changes since: an age (30m, 2h, 7d) or an "
              "ISO 8601 time (no zone: local time)")
@click.option("--cycle", "cycle_id", type=click.IntRange(min=1), default=None,
              help="only this daemon cycle")
def audit_cmd(config_path, db, as_json, job_id, since, cycle_id):
    """Every change gimbal made to Slurm: job, field, before -> after, status, cycle, policy,
    reason (oldest first; times in UTC)."""
    cfg = _setup(config_path, db=db)
    from .store import StoreError
    st = _store_or_fail(cfg, "audit")
    try:
        rows = st.audit_log(job_id=job_id, cycle_id=cycle_id, since=_since(since))
    except StoreError as e:
        _fail(str(e), Exit.STORE)
    recs = [dict(id=a.id, time=_ts(a.created_at), cycle=a.cycle_id,
                 policy=c.policy if c else None, mode=c.mode if c else None, job_id=a.job_id,
                 field=a.field, before=_loads(a.before), after=_loads(a.after),
                 read_back=_loads(a.read_back), status=a.status, reason=a.reason,
                 error=a.error, argv=a.argv) for a, c in rows]
    if as_json:
        click.echo(json.dumps({"changes": recs}, default=str))
        return
    from rich.table import Table
    t = Table(title=f"gimbal audit: {len(recs)} change(s)")
    for col in ("id", "time (UTC)", "cycle", "policy", "job", "field", "before", "after",
                "status", "reason"):
        t.add_column(col, overflow="fold")
    for r in recs:
        why = r["reason"] or ""
        if r["error"]:
            why = f"{why}; error: {r['error']}" if why else f"error: {r['error']}"
        t.add_row(str(r["id"]), r["time"], str(r["cycle"]), str(r["policy"] or ""), r["job_id"],
                  r["field"], json.dumps(r["before"], default=str),
                  json.dumps(r["after"], default=str), r["status"], why)
    _console().print(t)


# ---------------------------------------------------------------- cycles
@click.command("cycles")
@_config_opts
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True,
              help="newest N cycles")
@click.option("--status", default=None, help="only cycles with this status (done, partial, "
              "failed, skipped, interrupted, ...)")
@click.option("--since", default=None, help="only cycles since: an age or an ISO 8601 time")
def cycles_cmd(config_path, db, as_json, limit, status, since):
    """Daemon cycles, newest first, with their status: done, partial, failed (with the
    error), skipped (another daemon held the cluster lock), interrupted (the process died)."""
    cfg = _setup(config_path, db=db)
    from .store import StoreError
    st = _store_or_fail(cfg, "cycles")
    try:
        rows = st.cycle_list(limit=limit, status=status, since=_since(since))
    except StoreError as e:
        _fail(str(e), Exit.STORE)
    recs = []
    for c in rows:
        took = (c.finished_at - c.started_at).total_seconds() if c.finished_at else None
        recs.append(dict(id=c.id, started=_ts(c.started_at), finished=_ts(c.finished_at),
                         seconds=took, policy=c.policy, mode=c.mode, knob=c.knob,
                         backend=c.backend, slurm=c.slurm_release, status=c.status,
                         pending=c.n_pending, running=c.n_running, changes=c.n_changes,
                         host=c.host, pid=c.pid, error=c.error))
    if as_json:
        click.echo(json.dumps({"cycles": recs}, default=str))
        return
    from rich.table import Table
    t = Table(title=f"gimbal cycles (newest {len(recs)})")
    for col in ("cycle", "started (UTC)", "took", "policy", "mode", "status", "pending",
                "running", "changes", "process", "error / reason"):
        t.add_column(col, overflow="fold")
    for r in recs:
        t.add_row(str(r["id"]), r["started"],
                  f"{r['seconds']:.1f}s" if r["seconds"] is not None else "-",
                  r["policy"], r["mode"], r["status"], str(r["pending"]), str(r["running"]),
                  str(r["changes"]), f"{r['host']}:{r['pid']}" if r["host"] else "",
                  r["error"] or "")
    _console().print(t)
