"""Optimus's stops kept across calls (issue #13, docs/scale.md §2).

:func:`policies.optimus._uncontended` gives every job its *structural stop* ``s`` (the first
count ``k ≥ 1`` with ``k ≥ cap`` or ``rate(k + 1) ≤ rate(k)``) and the gain 0.0 where, with at
most M jobs, all profiled, the stops sum to at most M and each job with ``s > 1`` has
separated rates below it and remaining iterations ``r`` in ``_SAFE`` (a job with ``s = 1``
gets one GPU whatever ``r``).  The stops are a function of application, global batch and cap
(a profiled job's cap is the cluster or the top of its GPU range), so they are kept as
Max-Min's demands are (:class:`~policies.max_min_kept.KeptDemands`, with the stop as the
demand and the separation as its ``also`` test).

What moves at every call is ``r`` of the running jobs.  For one view of a job (the job change
record names every job whose view changed) ``r(now) = max(0, total − (done + rate · dt))``
with ``dt`` the time since ``as_of`` less the restore time: every operation there is
monotone in ``now`` under IEEE rounding, so with ``rate ≥ 0`` ``r`` never grows as ``now``
does.  So ``r < hi`` at the call that met the view holds at every later call, and ``r > lo``
holds up to any time ``T`` at which it holds, computed exactly by the snapshot's own
methods at ``now = T`` (:class:`_At`).  :class:`KeptStops` keeps for each such job a time
``T`` (halfway to where ``r`` would reach 0) in a heap, and at a call looks again only at the
jobs whose ``T`` has passed (each job O(log) times in its life).  A job whose length is not
known (total iterations unknown, a duration estimate given), a negative or NaN rate, or ``r``
outside ``_SAFE`` at a call sends that call down the full path.
tests/policies/test_optimus_kept.py compares whole Plans with and without the kept stops at
every call of whole simulations.
"""
from __future__ import annotations

import heapq
import math
from typing import Optional

from .elastic import Rates
from .max_min_kept import KeptDemands
from .model import ClusterSnapshot

_SAFE = (1e-100, 1e100)  # rates and remaining iterations where r / p is a normal float


def stop_memo(rates: Rates) -> dict:
    """Optimus's memo of structural stops (kept with the rates)."""
    return rates.kept.setdefault("optimus-stop", {})


class _At:
    """The snapshot's ``remaining_iters`` at another ``now`` (the same code, so the same
    floats as a snapshot taken then)."""

    __slots__ = ("now",)
    completed = ClusterSnapshot.completed
    remaining_iters = ClusterSnapshot.remaining_iters

    def __init__(self, now: float):
        self.now = now


class KeptStops(KeptDemands):
    """:class:`KeptDemands` of Optimus's structural stops, and for each job with a stop above
    1 a time up to which its remaining iterations are known to lie in ``_SAFE``."""

    def __init__(self, stop, separated):
        # stop(rates, job, cap) -> (s, separated): policies.optimus._structural_stop
        self._stop = stop
        super().__init__(lambda rates, job, cap, bound: min(stop(rates, job, cap,
                                                                 stop_memo(rates))[0], bound),
                         also=separated)

    def clear(self) -> None:
        super().clear()
        self.until: dict[str, float] = {}  # id -> time up to which r > lo is known
        self.heap: list = []  # (that time, id), stale entries left in
        self.unsafe: set[str] = set()  # ids whose r was outside _SAFE when last looked at

    def _drop(self, jid: str) -> None:
        super()._drop(jid)
        self.until.pop(jid, None)
        self.unsafe.discard(jid)

    def _put(self, rates: Rates, job, bound: int) -> None:
        super()._put(rates, job, bound)
        jid = job.id
        self.until.pop(jid, None)
        self.unsafe.discard(jid)
        if jid in self.bad or self.dem.get(jid) is None:
            return
        if self._stop(rates, job, rates.cap(job, 1), stop_memo(rates))[0] <= 1:
            return  # one GPU whatever its remaining iterations
        if job.total_iters is None and job.duration_estimate is not None:
            self.bad.add(jid)  # (its estimate moves with executed time: not followed here)
            return
        self._look(rates.snap, job)

    def _look(self, snap, job) -> None:
        """Check ``job``'s remaining iterations now and keep a time up to which they stay
        above ``lo`` (or mark it unsafe)."""
        jid = job.id
        r = snap.remaining_iters(job)
        if r is None:  # unknown length: Optimus reads 1.0, at every call
            self.until[jid] = math.inf
            return
        lo, hi = _SAFE
        rate = job.iter_rate
        if not lo < r < hi or (job.running and not rate >= 0.0):
            self.unsafe.add(jid)
            self.until[jid] = snap.now  # looked at again at the next call
            heapq.heappush(self.heap, (snap.now, jid))
            return
        self.unsafe.discard(jid)
        if not job.running or rate == 0.0:
            self.until[jid] = math.inf  # r does not move
            return
        # halfway to where r would reach 0, checked with the snapshot's own arithmetic
        t = snap.now + 0.5 * r / rate
        if not (t > snap.now and _At(t).remaining_iters(job) > lo):
            t = snap.now
        self.until[jid] = t
        heapq.heappush(self.heap, (t, jid))

    def shares(self, snap: ClusterSnapshot, rates: Rates) -> Optional[dict[str, int]]:
        """The stops where :func:`policies.optimus._uncontended` gives them, else ``None``."""
        got = super().shares(snap, rates)
        if got is None:
            return None
        now, heap, until, jobs = snap.now, self.heap, self.until, snap.jobs
        while heap and heap[0][0] < now:
            t, jid = heapq.heappop(heap)
            if until.get(jid) == t:  # (else stale: the job went or was looked at again)
                self._look(snap, jobs[jid])
        return None if self.unsafe else got
