"""AFS-L's stage-one order from lengths kept per job across calls (issue #13, docs/scale.md §2).

Where every job gets its demand (:meth:`policies.afs_l.AfsL._uncontended_plan`), a call of
AFS-L computes one thing per job: its length on one GPU, ``len(1) = rem / p(1)``, to sort
the jobs by it (ties: the later in submit order).  ``rem`` is
:meth:`~policies.model.ClusterSnapshot.remaining_iters`'s arithmetic on the job's view
(``total``, ``completed``, ``iter_rate``, ``as_of``, ``restore_left``, its state) and the
snapshot's ``now``; ``p(1)`` is the model's rate of its (application, global batch) on one
GPU.  :class:`KeptLengths` keeps those numbers of every job as one row, brought up to date
from the snapshot's job change record (a job's view changes only where the record names it),
and computes every length of a call with the same IEEE operations in the same order, on
arrays (numpy's element-wise operations are each one rounding, as Python's float operations
are): the same lengths, bit for bit (but for the sign of a zero), wherever they are finite.
Where Python's ``max(0.0, x)`` and numpy's differ (``x`` NaN) or a length is not finite,
:meth:`KeptLengths.order` gives ``None`` and the caller takes its per-job path, which gives
way to the full path there.  (numpy is imported at the first job kept, not with the policy
registry: start-up stays free of it.)
tests/policies/test_max_min_kept.py checks the Plans against the full path at every call of
whole simulations, and the lengths against the per-job arithmetic.
"""
from __future__ import annotations

from operator import itemgetter
from typing import Optional

from .elastic import UNPROFILED
from .model import ClusterSnapshot, JobState
from .records import job_record

_RUNNING = JobState.RUNNING


_COLS = 6  # total, completed, iter_rate, as_of, restore_left, p(1)


class KeptLengths:
    """Every job of the last snapshot whose total iterations are known has a column of
    ``cols`` (``cols[:, i]``: ``(total, completed, iter_rate, as_of, restore_left, p(1))``;
    a job not running has ``iter_rate``, ``as_of`` and ``restore_left`` 0.0: its remaining
    iterations ``max(0.0, total - (completed + 0.0 * now))`` are then ``max(0.0, total -
    completed)`` but for the sign of a zero, which no comparison sees), in the order of
    ``ids`` (the jobs' ids; put in the order :meth:`order` was last asked for, so that the
    next call finds the columns in its order and reads them as they lie); ``unknown``: the
    ids of the others; ``late``: of the jobs with a restore left (not 0.0); ``bad``: of
    the jobs whose ``p(1)`` is not positive (their length is infinite)."""

    def __init__(self):
        self.clear()

    def clear(self) -> None:
        self._seen = None  # the job change record read so far
        # what the rows' p(1) came from: the rates' memo (Rates._rate) and the ids of jobs
        # with no profile (a job's p(1) is the model's only where it has one)
        self._ctx: Optional[tuple] = None
        self.ids: list[str] = []
        self.cols = None  # (a numpy array from the first job on: numpy is imported then)
        self.unknown: set[str] = set()
        self.late: set[str] = set()
        self.bad: set[str] = set()

    def _drop(self, jid: str) -> None:
        try:
            at = self.ids.index(jid)
        except ValueError:
            return
        n = len(self.ids)
        self.cols[:, at:n - 1] = self.cols[:, at + 1:n]  # (numpy copies overlapping slices)
        del self.ids[at]
        self.late.discard(jid)
        self.bad.discard(jid)

    def _put(self, rates, job) -> None:
        jid = job.id
        total = job.total_iters
        if total is None:
            self._drop(jid)
            self.unknown.add(jid)
            return
        if self.unknown:
            self.unknown.discard(jid)
        r1 = rates._rate.get((job.app, job.global_batch, 1))
        if r1 is None:
            r1 = rates.rate(job, 1)
        try:
            at = self.ids.index(jid)
        except ValueError:
            at = len(self.ids)
            cap = 0 if self.cols is None else self.cols.shape[1]
            if at == cap:  # (room for as many again)
                import numpy as np

                grown = np.zeros((_COLS, max(2 * cap, 64)))
                if cap:
                    grown[:, :cap] = self.cols
                self.cols = grown
            self.ids.append(jid)
        r1 = float(r1)
        if job.state is _RUNNING:
            restore = float(job.restore_left or 0.0)
            self.cols[:, at] = (float(total), float(job.completed_iters),
                                float(job.iter_rate), float(job.as_of), restore, r1)
        else:
            restore = 0.0
            self.cols[:, at] = (float(total), float(job.completed_iters), 0.0, 0.0, 0.0, r1)
        if restore != 0.0:  # (NaN too)
            self.late.add(jid)
        elif self.late:
            self.late.discard(jid)
        if not r1 > 0.0:
            self.bad.add(jid)
        elif self.bad:
            self.bad.discard(jid)

    def update(self, snap: ClusterSnapshot, rates) -> bool:
        """Bring the rows up to ``snap``; False (and cleared) without a usable record."""
        log = job_record(snap)
        if log is None:
            self.clear()
            return False
        jobs = snap.jobs
        ctx = (rates._rate, snap.predictors.get(UNPROFILED))
        old = self._ctx
        if (old is not None and old[0] is ctx[0] and old[1] is ctx[1]
                and self._seen is not None and log.extends(self._seen)):
            for jid in dict.fromkeys(log[len(self._seen):]):  # (in the record's order)
                job = jobs.get(jid)
                if job is None:
                    self._drop(jid)
                    self.unknown.discard(jid)
                else:
                    self._put(rates, job)
        else:
            self.clear()
            self._ctx = ctx
            for job in jobs.values():
                self._put(rates, job)
        self._seen = log
        return True

    def order(self, snap: ClusterSnapshot, rates, ids: list[str]) -> Optional[list[str]]:
        """``ids`` (in submit order, every one profiled) sorted by ``len(1)``, ties to the
        later one (:func:`~policies.afs_core._fast_stage_one`'s sort), or ``None`` where a
        length is unknown, not finite or not computed as Python computes it."""
        if not self.update(snap, rates) or self.unknown or self.bad or not ids:
            return None
        import numpy as np

        n = len(ids)
        if ids == self.ids:  # (the columns lie in this order)
            cols = self.cols[:, :n]
        else:
            pos = dict(zip(self.ids, range(len(self.ids))))
            try:
                idx = np.fromiter(map(pos.__getitem__, ids), dtype=np.intp, count=n)
            except KeyError:  # (not the record's contract: start again next call)
                self.clear()
                return None
            cols = self.cols[:, idx]
            if n == len(self.ids):  # the same jobs: their columns put in this order
                self.cols[:, :n] = cols
                self.ids = list(ids)
        total, done, rate, as_of, restore, r1 = cols
        # ClusterSnapshot.remaining_iters, as AfsL.schedule's rem inlines it (a job not
        # running: rate and as_of 0.0, see the class)
        dt = snap.now - as_of
        if self.late:
            late = restore != 0.0
            dt = np.where(late, np.maximum(0.0, dt - restore), dt)
        rem = np.maximum(0.0, total - (done + rate * dt))
        with np.errstate(over="ignore", invalid="ignore"):
            ln = rem / r1  # (every p(1) positive: ``bad`` is empty)
        if not np.isfinite(ln).all():  # (infinite, or NaN where Python's max gives 0.0)
            return None
        perm = np.lexsort((np.arange(0, -n, -1), ln)).tolist()
        return [ids[perm[0]]] if n == 1 else list(itemgetter(*perm)(ids))
