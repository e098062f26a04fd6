"""Slurm-side CLI commands: ``queue``, ``explain``, ``daemon``, ``revert``, ``db upgrade``
(``audit`` and ``cycles``: :mod:`gimbalctl.cli_admin`).

``register(group)`` adds them to the lead's ``gimbalctl`` click group.
Common flags: ``--config /etc/gimbal/gimbal.toml`` (TOML; CLI flags win; without it
``$GIMBAL_CONFIG``, else ``/etc/gimbal/gimbal.toml`` if present), ``--db URL``, ``--json``,
``--dry-run`` on everything that mutates.  Read-only commands (``queue``, ``explain``,
``audit``, ``cycles``) never create or migrate a state store.  Errors name the input and exit
with the codes of :class:`gimbalctl.daemon.Exit`.
"""
from __future__ import annotations

import json
import logging
import sys
from typing import Optional

import click

from .config import BACKENDS, KNOBS, MODES, ConfigError, load
from .daemon import Exit

log = logging.getLogger("gimbal.cli")


def _common(f):
    f = click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
                     help="TOML config file (default $GIMBAL_CONFIG, else /etc/gimbal/gimbal.toml "
                     "if it exists); flags win")(f)
    f = click.option("--db", default=None, help="state store URL or SQLite path "
                     "(default: the config's db, else $GIMBAL_DB or ./gimbal.db)")(f)
    f = click.option("--backend", type=click.Choice(BACKENDS), default=None,
                     help="Slurm access: auto (pyslurm if it matches the release), cli, pyslurm")(f)
    f = click.option("--json", "as_json", is_flag=True, help="machine-readable output")(f)
    return f


def _fail(msg: str, code: int) -> None:
    click.echo(f"gimbalctl: error: {msg}", err=True)
    sys.exit(code)


def _setup(config_path, **overrides):
    try:
        return load(config_path, overrides)
    except ConfigError as e:
        _fail(str(e), Exit.USAGE)


def _policy(name: str, options: dict):
    from policies.registry import UnknownPolicyError, get_policy
    try:
        return get_policy(name, **options)
    except UnknownPolicyError as e:
        _fail(f"--policy: {e}", Exit.USAGE)
    except TypeError as e:
        _fail(f"--policy {name}: bad policy_options ({e})", Exit.USAGE)


class _BackendFailed(SystemExit):
    """``_backend`` could not give a backend (the message was printed); ``error`` says why."""

    def __init__(self, error: str):
        super().__init__(Exit.SLURM_UNAVAILABLE)
        self.error = error


def _backend(cfg):
    from .slurm import SlurmError, get_backend
    try:
        return get_backend(cfg.backend, timeout=cfg.timeout, prefix=cfg.command_prefix,
                           partition=cfg.partition)
    except SlurmError as e:
        click.echo(f"gimbalctl: error: {e}", err=True)
        raise _BackendFailed(f"Slurm unavailable: {e}") from None


def _store(cfg, upgrade: bool = True, dry_run: bool = False):
    """The state store; ``dry_run``: never create or migrate it (a store with no schema yet
    reads as empty, one at an older revision is an error asking for ``db upgrade``)."""
    from .store import Store, StoreError
    try:
        st = Store(cfg.db)
        if dry_run:
            rev, head = st.revision(), st.head()
            if rev is None:  # nothing there yet: an empty in-memory store stands in
                mem = Store("sqlite://")
                mem.upgrade()
                return mem
            if rev != head:
                raise StoreError(f"--db {_redact(st.url)!r}: schema at revision {rev}, this "
                                 f"gimbal needs {head}; run `gimbalctl db upgrade` first (a dry "
                                 f"run changes nothing)")
        elif upgrade:
            st.ensure_schema()
        return st
    except StoreError as e:
        _fail(str(e), Exit.STORE)


def _store_ro(cfg):
    """``(store, None)`` for a read-only command, or ``(None, why)`` when there is no state
    store at ``cfg.db`` yet.  Never creates or migrates one (a store at another schema
    revision is an error asking for ``gimbalctl db upgrade``)."""
    from .store import Store, StoreError
    try:
        st = Store(cfg.db)
        rev = st.revision()
        if rev is None:
            return None, (f"no state store at {_redact(st.url)} ({cfg.describe_source()}): no "
                          f"daemon cycle is recorded there")
        head = st.head()
        if rev != head:
            raise StoreError(f"--db {_redact(st.url)!r}: schema at revision {rev}, this gimbal "
                             f"needs {head}; run `gimbalctl db upgrade` (read-only commands "
                             f"change nothing)")
        return st, None
    except StoreError as e:
        _fail(str(e), Exit.STORE)


def cycle_warnings(st, cfg, now=None) -> list[str]:
    """Warnings about the newest daemon cycle in ``st``: it failed, was skipped or
    interrupted, changed only part of what it meant to, or is older than ``stale_after``."""
    from .store.models import utcnow
    c = st.last_cycle()
    if c is None:
        return []
    now = now or utcnow()
    when = f"cycle {c.id} at {c.started_at:%Y-%m-%d %H:%M:%S} UTC, policy {c.policy}"
    out = []
    if c.status in ("failed", "skipped", "interrupted"):
        out.append(f"the last daemon cycle ({when}) {c.status}: {c.error or 'no reason recorded'}")
    elif c.status == "partial":
        out.append(f"the last daemon cycle ({when}) applied only part of its changes "
                   f"(`gimbalctl audit --cycle {c.id}`)")
    age = (now - c.started_at).total_seconds()
    if age > cfg.stale_after:
        out.append(f"the last daemon cycle ({when}) started {_age(age)} ago, more than "
                   f"stale_after = {cfg.stale_after:g} s: is the daemon running? "
                   f"(`gimbalctl cycles`)")
    return out


def _age(secs: float) -> str:
    secs = int(secs)
    for unit, n in (("d", 86400), ("h", 3600), ("min", 60)):
        if secs >= n:
            return f"{secs / n:.1f} {unit}"
    return f"{secs} s"


def _redact(url: str) -> str:
    from .store.db import _redact as r
    return r(url)


def _print_changes(changes, as_json: bool, dry_run: bool) -> None:
    if as_json:
        return
    for c in changes:
        tag = "would run" if dry_run else ("FAILED" if c.error else "ran")
        click.echo(f"  {tag}: {json.dumps(list(c.argv))}" + (f"  ({c.error})" if c.error else ""))


# ---------------------------------------------------------------- daemon
@click.command("daemon")
@_common
@click.option("--once", is_flag=True, help="run one cycle and exit (for cron/systemd timers)")
@click.option("--policy", default=None, help="policy name (see `gimbalctl policies`)")
@click.option("--mode", type=click.Choice(MODES), default=None, help="ordering or gate")
@click.option("--knob", type=click.Choice(KNOBS), default=None,
              help="ordering mode: Slurm priority (fixed) or site factor")
@click.option("--interval", type=click.FloatRange(min=0.1), default=None, help="seconds between cycles")
@click.option("--state-dir", default=None, help="launcher decisions/reports root ($GIMBAL_STATE_DIR)")
@click.option("--lock-file", default=None, help="lock file; {cluster} = Slurm's ClusterName "
              "(default <state-dir>/daemon-{cluster}.lock)")
@click.option("--dry-run", is_flag=True, help="print the plan and the exact Slurm changes; change nothing")
def daemon_cmd(config_path, db, backend, as_json, once, policy, mode, knob, interval, state_dir,
               lock_file, dry_run):
    """Schedule: snapshot -> policy -> plan -> apply -> audit.

    \b
    Exit codes (--once): 0 done or skipped (another cycle holds the lock),
    1 unexpected error, 2 bad input, 3 Slurm unavailable (recorded as a failed cycle),
    4 state store error, 5 some Slurm changes failed (see the audit).
    Without --once: a cycle every --interval seconds until SIGTERM/SIGINT, which end the
    loop after the running cycle (exit 0); failed cycles are logged and retried.
    """
    cfg = _setup(config_path, db=db, backend=backend, policy=policy, mode=mode, knob=knob,
                 interval=interval, state_dir=state_dir, lock_file=lock_file)
    pol = _policy(cfg.policy, cfg.policy_options)
    from .daemon import loop
    if once or dry_run:
        sys.exit(_one_cycle(cfg, pol, as_json, dry_run))
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    log.info("daemon loop: policy %s, mode %s, every %g s, db %s, %s; SIGTERM/SIGINT stop it "
             "between cycles", cfg.policy, cfg.mode, cfg.interval, cfg.db or "(default)",
             cfg.describe_source())
    keep: dict = {}  # the cluster lock, held from the first cycle that gets it until exit
    try:
        rc = loop(cfg, lambda: _loop_cycle(cfg, pol, as_json, keep))
    finally:
        if keep.get("lock") is not None:
            keep["lock"].release()
    sys.exit(rc)


def _loop_cycle(cfg, pol, as_json: bool, keep: dict) -> int:
    """One cycle of the loop: an error exit of a helper (Slurm/backend/store unusable right
    now) becomes that cycle's status instead of ending the daemon."""
    try:
        return _one_cycle(cfg, pol, as_json, False, keep=keep)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else Exit.ERROR
        log.warning("cycle ended with status %d; retrying in %g s", code, cfg.interval)
        return code


def _record(cfg, pol, be, err, status: str = "failed") -> None:
    """Record a cycle that could not run (best effort: a store that cannot be opened is only
    logged; the caller reports the original error)."""
    from .daemon import record_failure
    from .store import Store, StoreError
    try:
        st = Store(cfg.db)
        st.ensure_schema()
    except StoreError as e:
        log.warning("could not record the %s cycle: %s", status, e)
        return
    record_failure(st, cfg, pol.name, be, err, status=status)


def _one_cycle(cfg, pol, as_json: bool, dry_run: bool, keep: Optional[dict] = None) -> int:
    """One daemon cycle; ``keep`` (loop mode) keeps the cluster lock between cycles."""
    from .daemon import run_cycle
    from .lock import ClusterLock
    from .slurm import SlurmError, SlurmUnavailable
    from .statedirs import StateDirError, prepare
    from .store import StoreError
    if not dry_run:
        try:
            for d in prepare(cfg):
                click.echo(f"gimbalctl daemon: created {d}", err=True)
        except StateDirError as e:
            click.echo(f"gimbalctl daemon: state directory: {e}", err=True)
            return Exit.STORE
    try:
        be = _backend(cfg)
    except _BackendFailed as e:
        if not dry_run:
            _record(cfg, pol, None, e.error)
        raise
    try:
        be.version()
        cluster = be.cluster_name()
    except SlurmError as e:
        unavailable = isinstance(e, SlurmUnavailable)
        click.echo(f"gimbalctl daemon: Slurm {'unavailable' if unavailable else 'error'}: {e}",
                   err=True)
        if not dry_run:
            _record(cfg, pol, be, e)
        return Exit.SLURM_UNAVAILABLE if unavailable else Exit.ERROR
    except Exception as e:  # e.g. output that cannot be read: recorded, then as before
        if not dry_run:
            _record(cfg, pol, be, e)
        raise
    lock = None
    if not dry_run:
        lock = (keep or {}).get("lock")
        if lock is None:
            lock = ClusterLock(cfg.lock_path, cluster, policy=pol.name, mode=cfg.mode,
                               loop=keep is not None)
            if keep is not None:
                keep["lock"] = lock
        try:
            got, note = lock.try_acquire()
        except OSError as e:
            click.echo(f"gimbalctl daemon: lock {lock.path}: {e}", err=True)
            return Exit.STORE
        if not got:
            # loud, once per cycle: an operator must learn that two daemons compete
            click.echo(f"gimbalctl daemon: WARNING: {note}", err=True)
            if as_json:
                click.echo(json.dumps({"status": "skipped", "reason": note,
                                       "lock": lock.path, "cluster": cluster}))
            _record(cfg, pol, be, note, status="skipped")
            return Exit.OK
        if note:
            click.echo(f"gimbalctl daemon: WARNING: {note}", err=True)
    try:
        st = _store(cfg, dry_run=dry_run)
        try:
            if not dry_run:
                st.wait_write_lock()
            # the loop daemon never waits for the sacct history (A-SRPT); --once does
            res = run_cycle(cfg, be, st, pol, dry_run=dry_run, wait_history=keep is None)
        except SlurmUnavailable as e:
            click.echo(f"gimbalctl daemon: Slurm unavailable: {e}", err=True)
            return Exit.SLURM_UNAVAILABLE
        except SlurmError as e:
            click.echo(f"gimbalctl daemon: Slurm error: {e}", err=True)
            return Exit.ERROR
        except StoreError as e:
            click.echo(f"gimbalctl daemon: state store error: {e}", err=True)
            return Exit.STORE
        except ConfigError as e:
            click.echo(f"gimbalctl daemon: bad configuration: {e}", err=True)
            return Exit.USAGE
        for w in res.warnings:
            click.echo(f"warning: {w}", err=True)
        if as_json:
            click.echo(json.dumps(res.as_dict(), default=str))
        else:
            head = "dry run" if dry_run else f"cycle {res.cycle_id}"
            click.echo(f"{head}: policy {res.plan.policy}, mode {cfg.mode}"
                       + (f"/{cfg.knob}" if cfg.mode == "ordering" else "")
                       + f", backend {be.name} (Slurm {be.release}); "
                       f"{len(res.queue)} pending, {len(res.changes)} change(s)")
            if dry_run:
                click.echo("plan: " + json.dumps(res.plan.as_dict()))
            _print_changes(res.changes, as_json, dry_run)
        return Exit.PARTIAL if res.status == "partial" else Exit.OK
    finally:
        if lock is not None and keep is None:
            lock.release()


# ---------------------------------------------------------------- queue / explain
@click.command("queue")
@_common
@click.option("--policy", default=None, help="compute the order live with this policy "
              "(default: the last decision in the DB, else the configured policy live)")
@click.option("--live", is_flag=True, help="compute live even if the DB has a decision")
def queue_cmd(config_path, db, backend, as_json, policy, live):
    """Pending jobs in gimbal's order, with the reason for each."""
    cfg = _setup(config_path, db=db, backend=backend, policy=policy)
    from .store import StoreError
    warnings: list[str] = []
    try:
        rows, source = _queue_rows(cfg, live or policy is not None, warnings)
    except StoreError as e:
        _fail(str(e), Exit.STORE)
    for w in warnings:
        click.echo(f"warning: {w}", err=True)
    if as_json:
        click.echo(json.dumps({"source": source, "jobs": rows, "warnings": warnings}, default=str))
        return
    from rich.console import Console
    from rich.table import Table
    t = Table(title=f"gimbal queue ({source})")
    for col in ("#", "job", "gpus", "app", "est (s)", "slurm prio", "reason"):
        t.add_column(col)
    for r in rows:
        t.add_row(str(r["position"] + 1) if r["position"] is not None else "-", r["job_id"],
                  str(r.get("num_gpus", "")), str(r.get("app", "")),
                  f"{r['duration_estimate']:.0f}" if r.get("duration_estimate") else "-",
                  str(r.get("slurm_priority", "")), f"{r['reason_code']}: {r['reason_text']}")
    Console().print(t)


def _live(cfg):
    from .daemon import compute_targets
    from .slurm import SlurmError
    from .snapshot import build_snapshot, decide
    be = _backend(cfg)
    try:
        jobs, nodes = be.jobs(), be.nodes()
    except SlurmError as e:
        _fail(f"Slurm: {e}", Exit.SLURM_UNAVAILABLE)
    pol = _policy(cfg.policy, cfg.policy_options)
    try:
        snap = build_snapshot(jobs, nodes, cfg.models(), default_app=cfg.default_app,
                              default_batch=cfg.default_batch, estimates=cfg.estimates,
                              pipeline_apps=getattr(pol, "pipeline_models", False))
    except ConfigError as e:
        _fail(str(e), Exit.USAGE)
    from .daemon import site_history, with_history
    warns: list[str] = []
    history, pred = site_history(cfg, be, snap.snapshot.now, warns, background=False)
    for w in warns:
        click.echo(f"warning: {w}", err=True)
    snap = with_history(snap, history, pred)
    plan = decide(pol, snap.snapshot)
    order, _ = compute_targets(cfg, plan, snap, nodes, [])
    return snap, plan, order


def _queue_rows(cfg, live: bool, warnings: list):
    if not live:
        st, why = _store_ro(cfg)
        if st is None:
            click.echo(f"note: {why}; computing the order live", err=True)
        else:
            warnings.extend(cycle_warnings(st, cfg))
            last = st.last_plan()
            if last is not None:
                cyc, d = last
                from .store.models import JobDecisionRow
                from sqlalchemy import select
                with st.tx() as s:
                    jds = list(s.scalars(select(JobDecisionRow).where(
                        JobDecisionRow.cycle_id == cyc.id)))
                rows = []
                for jd in jds:
                    if jd.position is None:
                        continue
                    inp = d["inputs"].get(jd.job_id, {})
                    rows.append(dict(job_id=jd.job_id, position=jd.position,
                                     reason_code=jd.reason_code, reason_text=jd.reason_text,
                                     numbers=jd.numbers, target=jd.target, **inp))
                rows.sort(key=lambda r: r["position"])
                return rows, f"cycle {cyc.id}, policy {cyc.policy}, {cyc.started_at:%Y-%m-%d %H:%M:%S}"
    snap, plan, order = _live(cfg)
    rows = []
    for i, jid in enumerate(order):
        r = plan.reasons.get(jid)
        rows.append(dict(job_id=jid, position=i, reason_code=r.code.value if r else "none",
                         reason_text=r.text if r else "", numbers=dict(r.numbers) if r else {},
                         **snap.inputs[jid]))
    return rows, f"live, policy {plan.policy} from {cfg.describe_source()}"


@click.command("explain")
@click.argument("job_id")
@_common
@click.option("--live", is_flag=True, help="compute now instead of reading the last decision")
@click.option("--policy", default=None, help="policy for --live")
def explain_cmd(job_id, config_path, db, backend, as_json, live, policy):
    """Why JOB_ID has its position or placement: policy, inputs, numbers."""
    cfg = _setup(config_path, db=db, backend=backend, policy=policy)
    out = None
    warnings: list[str] = []
    if not live:
        from .store import StoreError
        st, why = _store_ro(cfg)
        found = None
        if st is None:
            click.echo(f"note: {why}; computing live", err=True)
        else:
            try:
                found = st.last_decision(job_id)
                audit = st.audit_rows(job_id=job_id) if found is not None else []
                warnings = cycle_warnings(st, cfg)
            except StoreError as e:
                _fail(str(e), Exit.STORE)
        if found is not None:
            cyc, jd, d = found
            out = {"source": f"cycle {cyc.id} ({cyc.started_at:%Y-%m-%d %H:%M:%S})",
                   "policy": cyc.policy, "mode": cyc.mode, "knob": cyc.knob, "job_id": job_id,
                   "position": jd.position, "reason": {"code": jd.reason_code, "text": jd.reason_text,
                                                       "numbers": jd.numbers},
                   "action": jd.action, "slurm_target": jd.target,
                   "inputs": d["inputs"].get(job_id, {}),
                   "audit": [dict(field=a.field, before=a.before, after=a.after, status=a.status,
                                  cycle=a.cycle_id) for a in audit]}
    if out is None:
        snap, plan, order = _live(cfg)
        if job_id not in snap.inputs:
            known = ", ".join(sorted(snap.inputs)) or "none"
            _fail(f"JOB {job_id!r}: not a pending/running GPU job gimbal knows "
                  f"(jobs now: {known})", Exit.USAGE)
        r = plan.reasons.get(job_id)
        act = next((a for a in plan.actions if a.job_id == job_id), None)
        from .daemon import _action_dict
        out = {"source": f"live, {cfg.describe_source()}", "policy": plan.policy,
               "job_id": job_id,
               "position": order.index(job_id) if job_id in order else None,
               "reason": r.as_dict() if r else None, "action": _action_dict(act),
               "inputs": dict(snap.inputs[job_id])}
    out["warnings"] = warnings
    for w in warnings:
        click.echo(f"warning: {w}", err=True)
    if as_json:
        click.echo(json.dumps(out, default=str))
        return
    pos = out["position"]
    click.echo(f"job {job_id}: {'position ' + str(pos + 1) if pos is not None else 'not waiting'}"
               f" under policy {out['policy']} ({out['source']})")
    if out.get("reason"):
        r = out["reason"]
        click.echo(f"  reason: {r['code']} - {r['text']}")
        for k, v in (r.get("numbers") or {}).items():
            click.echo(f"    {k} = {v}")
    if out.get("action"):
        click.echo(f"  action: {json.dumps(out['action'])}")
    inp = out.get("inputs") or {}
    if inp.get("predicted") is not None:  # seed 003: the predicted length and where it came from
        nums = (out.get("reason") or {}).get("numbers") or {}
        line = (f"  predicted length: {inp['predicted']:.0f} {inp.get('predicted_unit', '')} "
                f"({inp.get('prediction_source')}; history of {inp.get('history_jobs', 0)} "
                f"finished job(s))")
        if nums.get("virtual_pos") is not None:
            line += f"; virtual-SRPT position {int(nums['virtual_pos']) + 1}"
            if nums.get("virtual_done") is not None:
                line += f", completes in it at {nums['virtual_done']:.0f}"
        click.echo(line)
    m = inp.get("measured")
    if m:
        parts = []
        if m.get("samples_per_s") is not None:
            parts.append(f"{m['app']} on {m['gpus']} GPU(s): {m['samples_per_s']:.1f} samples/s "
                         f"(mean of {m['reports']} report(s) from {m['jobs']} job(s))")
        if m.get("job_samples_per_s") is not None:
            parts.append(f"this job: {m['job_samples_per_s']:.1f} samples/s at step {m['job_step']}")
        click.echo("  measured: " + "; ".join(parts))
    click.echo("  inputs: " + json.dumps(out["inputs"], default=str))
    for a in out.get("audit", []):
        click.echo(f"  audit cycle {a['cycle']}: {a['field']} {a['before']} -> {a['after']} [{a['status']}]")


# ---------------------------------------------------------------- revert / db
@click.command("revert")
@_common
@click.option("--job", "jobs", multiple=True, help="only these job ids")
@click.option("--dry-run", is_flag=True, help="print the Slurm changes; change nothing")
def revert_cmd(config_path, db, backend, as_json, jobs, dry_run):
    """Undo gimbal's changes to pending jobs (from the audit log), restoring Slurm's own ordering."""
    cfg = _setup(config_path, db=db, backend=backend)
    from .daemon import revert
    from .slurm import SlurmError, SlurmUnavailable
    from .store import StoreError
    st0, why = _store_ro(cfg) if not dry_run else (True, None)
    if st0 is None:  # no store: no audit, nothing gimbal changed; do not create one
        click.echo(json.dumps({"dry_run": False, "changes": [], "note": why}) if as_json
                   else f"revert: 0 change(s) ({why})")
        return
    be = _backend(cfg)
    st = _store(cfg, dry_run=dry_run)
    try:
        changes = revert(be, st, dry_run=dry_run, job_ids=list(jobs) or None)
    except SlurmUnavailable as e:
        _fail(f"Slurm unavailable: {e}", Exit.SLURM_UNAVAILABLE)
    except SlurmError as e:
        _fail(f"Slurm: {e}", Exit.ERROR)
    except StoreError as e:
        _fail(f"state store error: {e}", Exit.STORE)
    if as_json:
        click.echo(json.dumps({"dry_run": dry_run, "changes": [c.as_dict() for c in changes]},
                              default=str))
    else:
        click.echo(f"revert: {len(changes)} change(s)" + (" (dry run)" if dry_run else ""))
        _print_changes(changes, False, dry_run)
    if any(c.error for c in changes):
        sys.exit(Exit.PARTIAL)


@click.group("db")
def db_group():
    """State store maintenance."""


@db_group.command("upgrade")
@click.option("--db", default=None, help="state store URL or SQLite path")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None)
@click.option("--revision", default="head", show_default=True)
@click.option("--dry-run", is_flag=True, help="list the migrations that would run; change nothing")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def db_upgrade(db, config_path, revision, dry_run, as_json):
    """Create or migrate the state store schema (alembic)."""
    cfg = _setup(config_path, db=db)
    st = _store(cfg, upgrade=False)
    from .store import StoreError
    from .store.db import _redact
    try:
        before = st.revision()
        todo = st.pending(revision)
        rev = before if dry_run else st.upgrade(revision)
    except StoreError as e:
        _fail(str(e), Exit.STORE)
    if as_json:
        click.echo(json.dumps({"db": _redact(st.url), "dry_run": dry_run, "from": before,
                               "revision": rev, "migrations": [r for r, _ in todo]}))
        return
    verb = "would apply" if dry_run else "applied"
    for r, doc in todo:
        click.echo(f"{verb} {r}: {doc}")
    click.echo(f"{_redact(st.url)}: schema at revision {rev}"
               + (" (dry run: nothing changed)" if dry_run else ""))


def register(group: click.Group) -> None:
    """Add the Slurm-side commands to a click group (``gimbalctl`` itself loads them lazily,
    ``gimbalctl.cli.SLURM_COMMANDS``)."""
    from .cli_admin import audit_cmd, cycles_cmd
    for cmd in (daemon_cmd, queue_cmd, explain_cmd, revert_cmd, db_group, audit_cmd, cycles_cmd):
        group.add_command(cmd)
