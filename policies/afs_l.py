"""AFS-L: Apathetic Future Share with known job lengths (seed 001 §3.3, Algorithm 1).

At every churn event (arrival, completion; the simulator also calls while jobs wait)
the GPU shares of all active jobs are recomputed from zero by Algorithm 1
(:func:`policies.afs_core.afs_l_shares`): one GPU at a time to the job
``TOPPRIORITY`` picks with inequality (3).  Stage one gives every job one GPU in
increasing order of its length on one GPU (when there are at least as many jobs as
GPUs the algorithm stops there); stage two hands out the rest by (3), which weighs
resource efficiency (fractional throughput gain of one more GPU) against length.

Throughput on any GPU count comes from the fitted models
(:class:`policies.elastic.Rates`: seed 000 eq. 7, the accumulation the plan uses);
a job with no profile is measured and estimated optimistically (§4.5).  Lengths
are remaining iterations / throughput; without a known length the user's duration
estimate is used, and with neither the length is infinite.  Shares are then
regulated by network packing (§4.4) and placed reusing current GPUs
(:mod:`policies.elastic`).

``explain`` numbers per job: ``share`` (GPUs after packing), ``decided_share``
(Algorithm 1's count), ``ineq3_left`` = (p'-p)/p' (the job's side of (3) when it is
the longer job ``j_b``), ``ineq3_right`` = (p'-p)/p (its side as the shorter job
``j_a``), both at its decided count, and ``len_s`` (its length at that count).
"""
from __future__ import annotations

from .afs_core import Cand, INF, afs_l_shares, pick_order
from .afs_lengths import KeptLengths
from .base import Policy
from .elastic import Rates, elastic_plan, no_numbers
from .max_min import _demand
from .max_min_kept import KeptDemands, KeptShares
from .model import JobState, SUBMIT_ORDER, plain_progress
from .registry import register

_RUNNING = JobState.RUNNING


def candidates(snap, rates: Rates, jobs, rem_of) -> list[Cand]:
    """A :class:`~policies.afs_core.Cand` per job.  A profiled job's rate on k GPUs depends
    on (application, global batch, k) only (:meth:`Rates.rate`), so the jobs of one
    (application, global batch) share one memo of p(k) (``Cand._p``: each extends it with
    the same values), and p is computed once per pair and count, not per job."""
    out = []
    n = len(jobs)
    memos: dict = {}
    profiled = rates.profiled
    for j in jobs:
        c = Cand(j.id, rem_of(j), (lambda k, j=j: rates.rate(j, k)), rates.cap(j, n))
        if profiled(j):
            key = (j.app, j.global_batch)
            m = memos.get(key)
            if m is None:
                m = memos[key] = [0.0]
            c._p = m
        out.append(c)
    return out


def _one_gpu_first(rates: Rates, job, cap: int) -> bool:
    """Not :meth:`~policies.afs_core.Cand.doubles_at_one` (where some job is, stage one is not
    one GPU per job in a fixed order: AFS-L's and AFS-P's kept demands give way)."""
    return not (cap > 1 and rates.rate(job, 2) >= 2 * rates.rate(job, 1))


def numbers_of(cands: dict[str, Cand]):
    """``explain`` numbers of each job at its count: (3)'s two sides and, when its length
    is known, ``len_s`` (:func:`numbers_from` of the job's Cand)."""
    def facts(job):
        c = cands.get(job.id)
        if c is None:
            return None
        return c.p(c.cnt), c.p(c.cnt + 1), (c.length(c.cnt) if c.rem != INF else None)
    return numbers_from(facts)


def numbers_from(facts):
    """``numbers(job)`` from ``facts(job)``: ``(p, p', length or None)`` at the job's count,
    or ``None`` (no numbers).  Jobs with equal facts get the same mapping (not to be
    changed), so :func:`~policies.elastic.elastic_plan` gives the waiting ones one shared
    Reason (a zero length is not shared: its sign is kept as computed)."""
    memo: dict = {}

    def numbers(job):
        key = facts(job)
        if key is None:
            return no_numbers(job)
        d = memo.get(key)
        if d is None:
            p, p1, ln = key
            d = {"ineq3_left": (p1 - p) / p1 if p1 > 0 else 0.0,
                 "ineq3_right": (p1 - p) / p if p > 0 else INF}
            if ln is not None:
                d["len_s"] = ln
            if ln != 0:
                memo[key] = d
        return d
    return numbers


@register("afs-l")
class AfsL(Policy):
    """AFS-L: Alg. 1 elastic shares by inequality (3), job lengths known (seed 001)."""

    preemptive = True
    needs_lengths = True
    elastic = True

    def __init__(self, packing: bool = True):
        self.packing = bool(packing)
        self._kept = KeptDemands(_demand, also=_one_gpu_first)
        self._lens = KeptLengths()

    def schedule(self, snap):
        rates = Rates(snap)

        # a known length as ClusterSnapshot.remaining_iters computes it (the same float
        # operations, inlined: one call per job per call), unless a snapshot class overrides
        # the progress arithmetic; else Rates.remaining_iters (the estimate, or unknown)
        inline = plain_progress(type(snap))
        now = snap.now

        def rem(j):
            total = j.total_iters
            if inline and total is not None:
                if j.state is _RUNNING:
                    dt = now - j.as_of
                    if j.restore_left:
                        dt = max(0.0, dt - j.restore_left)
                    return max(0.0, total - (j.completed_iters + j.iter_rate * dt))
                return max(0.0, total - j.completed_iters)
            r = rates.remaining_iters(j)
            return INF if r is None else r
        kept = self._kept.shares(snap, rates)
        if kept is not None:
            plan = self._uncontended_plan(snap, rates, kept, rem, inline)
            if plan is not None:
                return plan
        jobs = sorted(snap.jobs.values(), key=SUBMIT_ORDER)
        cands = candidates(snap, rates, jobs, rem)
        afs_l_shares(cands, snap.total_gpus)
        by_id = {c.id: c for c in cands}
        shares = {c.id: c.cnt for c in pick_order(cands)}
        order = list(shares)
        return elastic_plan(snap, self.name, shares, rates, order, numbers_of(by_id),
                            packing=self.packing)

    def _uncontended_plan(self, snap, rates: Rates, kept: dict, rem, inline: bool = False):
        """The Plan where Algorithm 1 gives every job its demand (``kept``, in submit order:
        :class:`~policies.max_min_kept.KeptDemands` with at most M jobs, all profiled, none
        that a second GPU at least doubles, demands summing to at most M), else ``None``.

        Stage one is then :func:`~policies.afs_core._fast_stage_one`'s sort: one GPU to
        every job in increasing ``len(1)`` (ties: the later in submit order, line 7's
        ``else``), which is the pick order; the hand-out ends with every job at its stop
        (:func:`~policies.afs_core._to_stops`: the first count at which one more GPU is not
        useful, or its cap), which is its demand (:func:`policies.max_min._demand`, the same
        test on the same rates), as for AFS-P (:meth:`policies.afs_p.AfsP._uncontended_plan`).
        Only the lengths are computed per call (with ``inline``, the snapshot's own progress
        arithmetic, on arrays kept across calls: :class:`~policies.afs_lengths.KeptLengths`;
        else per job with ``rem``); where one is not finite (the full path's stage one is
        then the plain walk) this gives ``None``.  The explain numbers are
        :func:`numbers_of`'s, made when asked for (tests/policies/test_max_min_kept.py
        against the full path at every call of whole simulations)."""
        rate = rates.rate
        rems: dict = {}
        order = self._lens.order(snap, rates, list(kept)) if inline else None
        if order is not None:
            # the kept demands in this order: the kept demands' delta with the order (the
            # regulation's classes are brought up from it and re-ranked)
            shares = KeptShares(zip(order, map(kept.__getitem__, order)))
            d = getattr(kept, "delta", None)
            shares.delta = None if d is None else (*d, order)
        else:
            shares = self._by_lengths(snap, rates, kept, rem, rems)
            if shares is None:
                return None
            order = list(shares)

        def facts(job):
            k = shares[job.id]
            p = rate(job, k)
            left = rems.get(job.id)
            if left is None:
                left = rem(job)
            return p, rate(job, k + 1), (left / p if p > 0 else INF)
        return elastic_plan(snap, self.name, shares, rates, order, numbers_from(facts),
                            packing=self.packing)

    @staticmethod
    def _by_lengths(snap, rates: Rates, kept: dict, rem, rems: dict):
        """``kept`` in stage one's order, each job's length computed with ``rem`` (kept in
        ``rems``), or ``None`` where one is not finite."""
        jobs = snap.jobs
        memo = rates._rate  # Rates.rate's memo: a profiled job's rate on k GPUs
        rate = rates.rate
        keyed = []
        i = 0
        for jid in kept:
            j = jobs[jid]
            r1 = memo.get((j.app, j.global_batch, 1))
            if r1 is None:
                r1 = rate(j, 1)
            left = rems[jid] = rem(j)
            ln = left / r1 if r1 > 0 else INF  # Cand.length(1)
            if not ln < INF:  # (infinite or NaN)
                return None
            keyed.append((ln, i, jid))
            i -= 1
        keyed.sort()  # by (len(1), -submit index): the items' second fields are distinct
        return {jid: kept[jid] for _, _, jid in keyed}
