"""Max-Min's demands kept across policy calls (issue #13, docs/scale.md §2).

At 300x8 on the Philly trace every call of :class:`policies.max_min.MaxMin` found the GPUs
enough for every job's demand (the first 5,000 jobs: all 9,721 calls), so its shares were
the demands themselves, yet each call sorted every job, found every cap and demand and ran
the water-filling.  Water-filling (:func:`policies.max_min.water_fill`) gives every job
``min(D, L)`` for the largest level ``L`` with ``S(L) = Σ (min(D, L) − 1) ≤ left``; with
``n ≤ M`` jobs and ``left = M − n`` GPUs left after one each, ``S(∞) = Σ D − n ≤ M − n``
exactly when ``Σ D ≤ M``, and then every job's share is its demand ``D`` (no GPU is left
for the ones after the level, since no job has ``D > L``).

:class:`KeptDemands` keeps every job's demand, their sum and the jobs in submit order
across calls, brought up to date from the snapshot's job change record (O(changes) per
call; a job's demand is a function of its application, global batch and cap, and a
profiled job's cap is the cluster or the top of its ``gpu_range``, not the job count).
:meth:`KeptDemands.shares` gives the shares in submit order where the sum fits, else
``None`` and the policy takes its full path; it also gives ``None`` where a job is not
profiled (its cap is its fair share, which moves with the job count), without a usable
record (the daemon's snapshots, hand-built ones), for another profile table, node tuple or
predictors, or where the counts disagree with the snapshot.  A demand is probed only up to
``M − n + 1`` (a larger one cannot fit beside ``n − 1`` others): one cut there is probed
again at each call while it is kept.  tests/policies/test_max_min_kept.py checks the shares
against the full path at every call of whole simulations and on random snapshots.
"""
from __future__ import annotations

import math
from typing import Callable, Optional

from .elastic import UNPROFILED, Rates
from .model import SUBMIT_ORDER, ClusterSnapshot
from .records import job_record


class KeptShares(dict):
    """The shares :meth:`KeptDemands.shares` gives (id -> demand, in submit order), with
    ``delta``: ``(prev, token, moved, new)`` — ``token`` names these shares and ``prev`` the
    ones given at the last call of the same :class:`KeptDemands` (``None``: none); ``moved``
    holds every id whose entry was put or dropped since ``prev`` and ``new`` the ids added
    since, in the order they come (all after the others: the order of the rest is
    unchanged).  ``delta`` is ``None`` where the order was made again or the demands were
    cleared since ``prev``.  A fifth item (AFS-L's stage-one order:
    :meth:`policies.afs_l.AfsL._uncontended_plan`) says these are the kept demands in
    another order, with the kept demands' delta: the list of their ids in that order (not
    to be changed).  A consumer that kept ``prev``'s shares brings them to these
    from ``delta`` alone (:meth:`policies.elastic_regulate.Classes.update`)."""

    __slots__ = ("delta",)


class KeptDemands:
    """Every active job's demand (``dem``, in submit order), their sum (``total``), the ids
    whose demand was cut at the probe bound (``cut``: bound it was found with) and the ids
    of jobs not profiled (``bad``)."""

    def __init__(self, demand: Callable, strict: bool = False,
                 also: Optional[Callable] = None):
        self.demand = demand  # policies.max_min._demand (rates, job, cap, bound) -> demand
        # strict (Themis's shortcut, policies.themis): a job with a ``gpu_range`` or with a
        # rate up to its demand that is not finite and positive counts as not profiled
        self.strict = strict
        # also(rates, job, cap) (AFS-P's shortcut, policies.afs_p): a profiled job for which
        # it is false counts as not profiled (a function of application, batch and cap)
        self.also = also
        self.clear()

    def clear(self) -> None:
        self._seen = None  # the job change record read so far
        self._ctx: Optional[tuple] = None  # (useful memo, node tuple, unprofiled ids)
        self.dem: dict[str, int] = {}  # id -> demand, in submit order
        self.cut: dict[str, int] = {}  # id -> the bound its demand was cut at
        self.bad: set[str] = set()
        self.hist: dict[int, int] = {}  # demand -> how many jobs have it
        self._over: Optional[ClusterSnapshot] = None  # see :meth:`filled`
        self._key_of: dict[str, float] = {}  # id -> its submit time as kept
        self._finite: dict[tuple, bool] = {}  # (app, global batch, demand) -> rates finite
        self.total = 0
        # what changed since the last shares given (KeptShares.delta)
        self._token: Optional[object] = None
        self._moved: set[str] = set()
        self._new: list[str] = []
        self._resorted = True

    # ------------------------------------------------------------------ upkeep
    def _drop(self, jid: str) -> None:
        d = self.dem.pop(jid, None)
        if d is None:
            return
        self._moved.add(jid)
        self.total -= d
        self._count(d, -1)
        self.cut.pop(jid, None)
        self.bad.discard(jid)
        del self._key_of[jid]

    def _put(self, rates: Rates, job, bound: int) -> None:
        """Add ``job`` (or renew it: its view changed) with its demand probed up to ``bound``."""
        jid = job.id
        key = (job.submit_time, jid)
        self._moved.add(jid)
        old = self.dem.get(jid)
        if old is not None and self._key_of[jid] != key[0]:
            self._drop(jid)
            old = None
        if not rates.profiled(job):
            self.bad.add(jid)
            d, top = 1, None
        else:
            self.bad.discard(jid)
            cap = rates.cap(job, 1)  # a profiled job's cap does not read the job count
            top = max(cap, 1)
            d = self.demand(rates, job, cap, bound)
            if self.strict and (job.gpu_range is not None or not self._rates_finite(rates, job, d)):
                self.bad.add(jid)
            elif self.also is not None and not self.also(rates, job, cap):
                self.bad.add(jid)
        if top is not None and d == bound and bound < top:
            self.cut[jid] = bound
        else:
            self.cut.pop(jid, None)
        if old is None:
            dem, key_of = self.dem, self._key_of
            last = next(reversed(dem), None)
            key_of[jid] = key[0]
            dem[jid] = d
            self._new.append(jid)
            if last is not None and (key_of[last], last) > key:
                # older than the newest kept job: the submit order is made again
                self.dem = {i: dem[i] for i in sorted(dem, key=lambda i: (key_of[i], i))}
                self._resorted = True
            self.total += d
            self._count(d, 1)
        else:
            self.dem[jid] = d
            self.total += d - old
            self._count(old, -1)
            self._count(d, 1)

    def _count(self, d: int, by: int) -> None:
        c = self.hist.get(d, 0) + by
        if c:
            self.hist[d] = c
        else:
            del self.hist[d]

    def _rates_finite(self, rates: Rates, job, d: int) -> bool:
        key = (job.app, job.global_batch, d)
        ok = self._finite.get(key)
        if ok is None:
            ok = self._finite[key] = all(0.0 < rates.rate(job, k) < math.inf
                                         for k in range(1, d + 1))
        return ok

    def update(self, snap: ClusterSnapshot, rates: Rates) -> bool:
        """Bring the kept demands up to ``snap``; False when it has no usable record (the
        state is then cleared)."""
        log = job_record(snap)
        if log is None:
            self.clear()
            return False
        jobs = snap.jobs
        n = len(jobs)
        bound = max(snap.total_gpus - n + 1, 1)
        ctx = (rates.useful_upto, snap.nodes, snap.predictors.get(UNPROFILED))
        old = self._ctx
        if (old is not None and old[0] is ctx[0] and old[1] is ctx[1] and old[2] is ctx[2]
                and self._seen is not None and log.extends(self._seen)):
            # the jobs that went first, then the others in submit order: jobs that came at
            # one time (one submit time, in the trace's order) are put in the kept order,
            # not made again (the same entries either way)
            here = []
            for jid in set(log[len(self._seen):]):
                job = jobs.get(jid)
                if job is None:
                    self._drop(jid)
                else:
                    here.append(job)
            if len(here) > 1:
                here.sort(key=SUBMIT_ORDER)
            for job in here:
                self._put(rates, job, bound)
        else:
            self.clear()
            self._ctx = ctx
            for job in jobs.values():
                self._put(rates, job, bound)
        self._seen = log
        return True

    def shares(self, snap: ClusterSnapshot, rates: Rates) -> Optional[KeptShares]:
        """Max-Min's shares of ``snap`` (id -> demand, in submit order) where every job
        gets its demand, else ``None`` (the full path decides)."""
        self._over = None
        got = self._shares(snap, rates)
        prev = self._token
        if got is None:
            self._token = None
        else:
            self._token = object()
            got = KeptShares(got)
            got.delta = (None if self._resorted or prev is None
                         else (prev, self._token, frozenset(self._moved), tuple(self._new)))
        self._moved, self._new, self._resorted = set(), [], False
        return got

    def _shares(self, snap: ClusterSnapshot, rates: Rates) -> Optional[dict[str, int]]:
        if not self.update(snap, rates):
            return None
        n = len(snap.jobs)
        if len(self.dem) != n:  # not the record's contract: start again next call
            self.clear()
            return None
        M = snap.total_gpus
        if self.bad or n > M:
            return None
        if self.total > M:  # (a cut demand is a lower bound of its own)
            self._over = snap
            return None
        if self.cut:  # probed again up to this call's bound
            self._probe_cut(snap, rates)
            if self.cut or self.total > M:
                if self.total > M:
                    self._over = snap
                return None
        return self.dem

    def _probe_cut(self, snap: ClusterSnapshot, rates: Rates) -> None:
        """Every demand cut at another bound than this call's ``M − n + 1`` probed again."""
        bound = max(snap.total_gpus - len(snap.jobs) + 1, 1)
        for jid, b in list(self.cut.items()):
            if b != bound:
                self._put(rates, snap.jobs[jid], bound)

    def filled(self, snap: ClusterSnapshot, rates: Rates) -> Optional[dict[str, int]]:
        """Max-Min's water-filling (:func:`policies.max_min.water_fill`) of ``snap`` from the
        kept demands, where the last :meth:`shares` (of this ``snap``) found every job
        profiled, at most M jobs and the demands summing to more than M; else ``None``.

        Each job gets ``min(D, L)`` for the largest level ``L`` with ``F(L) = Σ min(D, L) ≤
        M`` (water_fill's ``S(L) ≤ left`` with ``left = M − n``), and the ``M − F(L)`` GPUs
        left go one each to the first jobs in submit order with ``D > L``.  ``L`` comes from
        the demands' counts (``hist``): ``F`` is ``P + L·R`` between two demand values (``P``
        the sum of the smaller demands, ``R`` how many are larger), so the first value ``v``
        with ``F(v) > M`` bounds the segment and ``L = (M − P) // R``.

        The demands cut at the probe bound ``B = M − n + 1`` (probed again at ``B`` first)
        are lower bounds; every other one is exact.  The level is at most ``B`` (a job at
        ``min(D, L) = L`` alone needs ``L − 1 ≤ M − n`` GPUs beyond one each), ``F`` is the
        same on ``[1, B]`` for the kept and the true demands, and above ``B`` both exceed
        M where any demand does (``n − 1 + B + 1 > M``): the same level.  Each share is then
        the true demands' (a cut one is ``min(B, L) = L``), and so is the test ``D > L`` for
        the GPUs left: where ``L < B`` a cut demand is above ``L`` as its true value is; where
        ``L = B`` with a cut demand, some other demand is above ``B`` (``L`` is below the
        largest kept one), so ``F(B) ≥ n − 2 + 2B = 2M − n``, at most M only at ``n = M``,
        ``B = 1``, ``F(1) = M``: no GPU is left for the test (tests/policies/
        test_max_min_kept.py against the full path at every call of whole simulations)."""
        if self._over is not snap:
            return None
        self._over = None
        M = snap.total_gpus
        if self.cut:
            self._probe_cut(snap, rates)
        hist, dem = self.hist, self.dem
        p, r = 0, len(dem)
        for v in sorted(hist):
            if p + v * r > M:
                break
            c = hist[v]
            p += v * c
            r -= c
        else:  # the demands fit once the cut ones were probed again: the full path decides
            return None
        level = (M - p) // r
        rest = M - p - level * r
        out = {j: (d if d < level else level) for j, d in dem.items()}
        if rest:
            for j, d in dem.items():
                if d > level:
                    out[j] = level + 1
                    rest -= 1
                    if not rest:
                        break
        return out
