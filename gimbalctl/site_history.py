"""The finished-job history of a live cluster, and the predictor fitted on it (seed 003).

A-SRPT predicts a job's length from the jobs of its recurrence group that finished before
(§IV-C 3), retrained periodically.  On a Slurm site the history is:

* the accounting database, read through the Slurm backend
  (:meth:`gimbalctl.slurm.backend.Backend.finished_jobs`: ``sacct --json``, else two
  ``sacct -P`` reads): completed GPU jobs of the last ``predictor.history_days`` days, at most
  ``predictor.history_max_rows``.  Times and GPUs are what Slurm recorded; the job name and
  user Comment are the user's text and serve only as the grouping hint; gimbal metadata
  (app, batch) comes from the AdminComment;
* plus gimbal's own records of the jobs it saw (the state store): the metadata it kept from
  the AdminComment (when another tool overwrote it since), and from the launcher reports the
  iterations a job reached and the global batch it ran with.  A job the accounting database
  does not list is not in the history (its start and end are unknown to gimbal).

Group key (:func:`gimbalctl.predictor.group_key`): user + job name (else gimbal ``app``) +
GPUs + gimbal ``batch`` — the key the snapshot builder gives a pending Slurm job.

:class:`SiteHistory` keeps the history and the fitted predictor between daemon cycles.  A
``daemon --once`` reads and fits at once (it has nothing to reuse); the loop daemon starts even
its first read in the background (its first cycles rank by time limits), and a read older than
``predictor.refit`` seconds is refreshed in the background while cycles use the previous
history and fit, so a loop cycle never waits on sacct or the random forest.  A failed read is
a warning, never a failed cycle; the policy then predicts from time limits.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from policies.model import FinishedJob

from .slurm.meta import GimbalMeta, parse_meta

log = logging.getLogger("gimbal.history")


def history_from_slurm(records: Sequence, job_rows: Optional[Mapping] = None,
                       reports: Optional[Mapping] = None) -> list[FinishedJob]:
    """``SlurmFinishedJob`` records (+ the store's job rows and newest reports, job id ->
    row) -> history, oldest end first.  Only completed GPU jobs count."""
    from .predictor import group_key
    job_rows, reports = job_rows or {}, reports or {}
    out = []
    seen: set = set()
    for r in records:
        if r.state != "COMPLETED" or r.num_gpus <= 0 or r.end_time < r.start_time:
            continue
        # job ids restart after a controller's state is reset, while the database keeps the
        # old jobs: a repeated id is a different job (its own submit time), not a duplicate
        jid = r.job_id if r.job_id not in seen else f"{r.job_id}@{int(r.submit_time)}"
        if jid in seen:
            continue
        seen.add(jid)
        row = job_rows.get(r.job_id) if jid == r.job_id else None
        rep = reports.get(r.job_id) if jid == r.job_id else None
        meta = r.meta
        if not meta.tagged and row is not None and getattr(row, "meta", None):
            meta = GimbalMeta.from_state(row.meta)  # kept from the AdminComment earlier
        if not meta.tagged and r.comment.startswith("gimbal:"):
            meta = parse_meta(r.comment)  # the user's Comment: a grouping hint, nothing more
        iters = _pos(getattr(rep, "step", None))
        extra = getattr(rep, "extra", None)
        gb = _pos(extra.get("global_batch")) if isinstance(extra, dict) else None
        out.append(FinishedJob(
            jid, r.user, r.submit_time, r.start_time, r.end_time, r.num_gpus,
            meta.app or "", r.name, group_key(r.user, r.name or meta.app or "", r.num_gpus,
                                              meta.batch),
            iters, int(gb) if gb else meta.batch))
    out.sort(key=lambda f: (f.end_time, f.submit_time, f.id))
    return out


def _pos(v: Any) -> Optional[float]:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if 0 < x < 1e15 else None


@dataclass(frozen=True)
class Fitted:
    history: tuple[FinishedJob, ...]
    predictor: Any  # TablePredictor
    read_at: float
    source: str  # "sacct json" / "sacct parsable"
    warnings: tuple[str, ...] = ()


class SiteHistory:
    """History + predictor cache of one daemon (see the module docstring)."""

    def __init__(self, kind: str = "rf", refit: float = 3600.0, days: float = 30.0,
                 max_rows: int = 100_000, timeout: Optional[float] = None,
                 unseen: str = "time-limit", seed: int = 0):
        self.kind, self.refit, self.days, self.max_rows = kind, float(refit), float(days), max_rows
        self.timeout, self.unseen, self.seed = timeout, unseen, seed
        self.fitted: Optional[Fitted] = None
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        self._notes: list[str] = []
        self._ok = True
        self._tried_at: Optional[float] = None

    def _read(self, backend, job_rows, reports, now: float) -> Fitted:
        from .predictor import FITTERS
        recs = backend.finished_jobs(now - self.days * 86400.0, None, self.max_rows,
                                     self.timeout)
        warns = tuple(getattr(backend, "history_warnings", ()) or ())
        hist = tuple(history_from_slurm(recs, job_rows, reports))
        if self.kind == "rf":
            pred = FITTERS["rf"](hist, seed=self.seed)
        else:
            pred = FITTERS[self.kind](hist)
        if self.unseen == "time-limit":
            import dataclasses
            pred = dataclasses.replace(pred, unseen="fallback")
        fmt = getattr(backend, "history_format", "") or "?"
        return Fitted(hist, pred, now, f"sacct {fmt}", warns)

    def _refresh(self, backend, job_rows, reports, now: float) -> None:
        from .slurm.errors import SlurmError
        try:
            f = self._read(backend, job_rows, reports, now)
        except (SlurmError, OSError, ValueError) as e:
            log.warning("predictor: sacct history not read: %s", e)
            with self._lock:
                old = self.fitted
                self._ok = False
                self._notes.append(
                    f"predictor: sacct history not read ({e}); " + (
                        "using the history read at " + time.strftime(
                            "%Y-%m-%d %H:%M:%S", time.localtime(old.read_at)) if old
                        else "predicting from time limits"))
            return
        with self._lock:
            self.fitted, self._ok = f, True
            self._notes.extend(f"predictor: {w}" for w in f.warnings)

    def get(self, backend, job_rows: Mapping, reports: Mapping, now: float,
            warnings: list[str], background: bool = True,
            first_wait: bool = True) -> Optional[Fitted]:
        """The current history and fit (``None`` until one read succeeded); see the module
        docstring for when it reads.  ``first_wait=False``: the first read runs in the
        background too (a loop daemon; its first cycles rank by time limits).
        ``background=False``: every due read runs now.  A failed read is tried again after
        ``min(refit, 300)`` s.  ``warnings`` gets each read's problems once."""
        with self._lock:
            running = self._thread is not None and self._thread.is_alive()
            have = self.fitted is not None
        wait = self.refit if self._ok else min(self.refit, 300.0)
        if running and not have:
            warnings.append("predictor: the sacct history is being read in the background; "
                            "predicting from time limits this cycle")
        if not running and (self._tried_at is None or now - self._tried_at >= wait):
            self._tried_at = now
            if not background or (not have and first_wait):
                self._refresh(backend, dict(job_rows), dict(reports), now)
            else:
                t = threading.Thread(target=self._refresh, name="gimbal-sacct-history",
                                     args=(backend, dict(job_rows), dict(reports), now),
                                     daemon=True)
                self._thread = t
                t.start()
                if not have:
                    warnings.append("predictor: reading the sacct history in the background; "
                                    "predicting from time limits this cycle")
        with self._lock:
            fitted, notes, self._notes = self.fitted, self._notes, []
        warnings.extend(notes)
        return fitted

    def wait(self, timeout: Optional[float] = None) -> None:
        """Wait for a background refresh (tests)."""
        t = self._thread
        if t is not None:
            t.join(timeout)
