"""Max-Min: max-min fair elastic GPU shares (seed 001 §2.2 and §5 baseline, after [20]).

Every active job gets one GPU, then the remaining GPUs go one at a time to the job
holding the fewest (ties: submit order) among the jobs one more GPU still speeds up
(water-filling up to each job's demand, the count beyond which throughput no
longer rises).  With more jobs than GPUs, the GPUs go to the jobs in submit order
(ours: the paper leaves the order open; its Fig. 2b shows Max-Min leaving newly
arrived short jobs blocked under heavy contention, which submit order reproduces).
Shares are regulated by network packing and placed as in :mod:`policies.elastic`.
"""
from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate

from .base import Policy
from .elastic import Rates, elastic_plan, useful_share
from .max_min_kept import KeptDemands
from .model import SUBMIT_ORDER
from .registry import register


def _demand(rates: Rates, job, cap: int, bound: int) -> int:
    """min(D, ``bound``), D the count at which the one-GPU-at-a-time water-filling drops
    ``job``: the first count ``c ≥ 1`` with ``c ≥ cap`` or one more GPU not helping
    (:func:`~policies.elastic.useful_share`).  For a profiled job that test depends only on
    (application, global batch, c) (``Rates.rate``), so what is learnt is kept in
    ``rates.useful_upto`` across calls while the rates' memo is valid."""
    top = min(max(cap, 1), bound)
    if rates.profiled(job):
        key = (job.app, job.global_batch)
        m = rates.useful_upto.get(key)
        if m is None:
            m = rates.useful_upto[key] = [1, False]
        k, done = m
        if done or k >= top:
            return min(k, top)
        while k < top:
            if not useful_share(rates, job, k):
                m[0], m[1] = k, True
                return k
            k += 1
        m[0] = k
        return k
    c = 1
    while c < top and useful_share(rates, job, c):
        c += 1
    return c


def _demands(rates: Rates, jobs: list, cap: dict, bound: int) -> list[int]:
    """``[_demand(rates, j, cap[j.id], bound) for j in jobs]``, with the memo's final answers
    for profiled jobs read inline (most jobs of a call, every call)."""
    upto, unprofiled, profiles = rates.useful_upto, rates.unprofiled, rates.profiles
    out = []
    for j in jobs:
        c = cap[j.id]
        if j.id not in unprofiled and j.app in profiles:  # rates.profiled(j)
            m = upto.get((j.app, j.global_batch))
            if m is not None:
                top = min(max(c, 1), bound)
                if m[1] or m[0] >= top:
                    out.append(min(m[0], top))
                    continue
        out.append(_demand(rates, j, c, bound))
    return out


def water_fill(rates: Rates, jobs: list, cap: dict, left: int) -> dict[str, int]:
    """Shares of ``jobs`` (each holding 1 GPU, in priority order) after handing out ``left``
    GPUs one at a time to the job holding the fewest (ties: that order), a job dropping
    out at its demand D (:func:`_demand`) — computed by levels instead of per GPU: with
    ``S(L) = Σ (min(D, L) − 1)`` the GPUs needed to lift every job to level L, each job
    gets min(D, L) for the largest L with S(L) ≤ left, and the ``left − S(L)`` GPUs still
    left go, one each, to the first jobs in order with D > L — what the per-GPU heap
    walk hands out (it serves level L's jobs in order before any of level L + 1's;
    tests/policies/test_elastic_differential.py against it).  The demands are found up to
    a bound doubled until the level lies below it, so no job is probed far above the
    level the walk would reach (a demand below the bound is final: only those cut at it
    are asked again)."""
    n = len(jobs)
    bound = left // max(n, 1) + 2
    d = _demands(rates, jobs, cap, bound)
    while True:
        srt = sorted(d)
        pre = list(accumulate(srt, initial=0))
        # S(L) = Σ_{d < L} d + L·#{d ≥ L} − n, non-decreasing in L
        if pre[n] - n <= left:  # every job reaches its (bounded) demand
            level = srt[-1] if n else 0
        else:
            lo, hi = 1, srt[-1]  # S(lo) ≤ left < S(hi)
            while hi - lo > 1:
                mid = (lo + hi) // 2
                i = bisect_right(srt, mid - 1)
                if pre[i] + mid * (n - i) - n <= left:
                    lo = mid
                else:
                    hi = mid
            level = lo
        if level + 1 < bound or not n or srt[-1] < bound:
            break
        old, bound = bound, bound * 2  # only the demands cut at the old bound can grow
        d = [_demand(rates, j, cap[j.id], bound) if x == old else x for j, x in zip(jobs, d)]
    out = {}
    i = bisect_right(srt, level - 1)
    rest = left - (pre[i] + level * (n - i) - n)
    for j, dj in zip(jobs, d):
        s = min(dj, level)
        if rest > 0 and dj > level:
            s += 1
            rest -= 1
        out[j.id] = s
    return out


@register("max-min")
class MaxMin(Policy):
    """Max-Min: max-min fair elastic GPU shares, submit order beyond M jobs (seed 001)."""

    preemptive = True
    elastic = True

    def __init__(self, packing: bool = True):
        self.packing = bool(packing)
        self._kept = KeptDemands(_demand)

    def schedule(self, snap):
        rates = Rates(snap)
        shares = self._kept.shares(snap, rates)
        if shares is None:  # the water level binds: from the kept demands where it can
            shares = self._kept.filled(snap, rates)
        if shares is None:
            shares = full_shares(snap, rates)
        # (every path gives the shares in submit order, the policy's priority order)
        return elastic_plan(snap, self.name, shares, rates, list(shares), packing=self.packing)


def full_shares(snap, rates: Rates) -> dict[str, int]:
    """Every job's share, in submit order: one GPU each to the first M jobs, then the
    water-filling (:func:`water_fill`) of the GPUs left among them."""
    jobs = sorted(snap.jobs.values(), key=SUBMIT_ORDER)
    M = snap.total_gpus
    n = len(jobs)
    cap = {j.id: rates.cap(j, n) for j in jobs}
    shares = {j.id: (1 if i < M else 0) for i, j in enumerate(jobs)}
    left = M - min(n, M)
    if left > 0:
        shares.update(water_fill(rates, jobs[:M], cap, left))
    return shares
