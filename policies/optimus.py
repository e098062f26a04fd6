"""Optimus-style marginal-gain greedy on throughput scalability (seed 001 §5 baseline, [38]).

Optimus (Peng et al., EuroSys'18) estimates each job's remaining time from a fitted
loss curve and a throughput model, then hands out resources one unit at a time to
the job whose estimated completion time drops the most.  Seed 001 §5.1 runs it with
its estimates assumed correct, so here the remaining iterations are the true ones
(``needs_lengths``) and the throughput is the fitted model at any GPU count.

Every job first gets one GPU (with more jobs than GPUs: in submit order — Optimus
does not prioritise short jobs); then each remaining GPU goes to the job with the
largest marginal gain ``rem / p(k) - rem / p(k + 1)`` (seconds of remaining time
saved), while that gain is positive.  Ties: submit order.  Network packing and
placement as in :mod:`policies.elastic`.
"""
from __future__ import annotations

import heapq

from .base import Policy
from .elastic import Rates, elastic_plan, no_numbers
from .model import SUBMIT_ORDER
from .optimus_kept import _SAFE, KeptStops, stop_memo  # (_SAFE: where r / p is a normal float)
from .registry import register


_SEP = 1.0 + 1e-12  # a rate step this large keeps r / p and r / p1 apart in floats


def _structural_stop(rates, job, cap: int, memo: dict) -> tuple:
    """(s, separated) for a profiled job: ``s`` the first count ``k >= 1`` with ``k >= cap`` or
    ``rate(k + 1) <= rate(k)`` (where the gain is 0.0 whatever the remaining time);
    ``separated``: every rate below it lies in ``_SAFE`` and each step ``rate(k+1) / rate(k)``
    exceeds ``_SEP``.  Depends on (application, global batch, cap) only: memoised with the
    rates."""
    key = (job.app, job.global_batch, cap)
    hit = memo.get(key)
    if hit is None:
        rate = rates.rate
        k, p = 1, rate(job, 1)
        sep = _SAFE[0] < p < _SAFE[1]
        while k < cap:
            p1 = rate(job, k + 1)
            if not p1 > p:
                break
            sep = sep and p1 > p * _SEP and p1 < _SAFE[1]
            k, p = k + 1, p1
        hit = memo[key] = (k, sep)
    return hit


def _rate_table(rates, job, cap: int, memo: dict) -> tuple:
    """(s, P) for a profiled job: ``s`` its structural stop (:func:`_structural_stop`) and
    ``P[k] = rate(job, k)`` for ``k <= s`` (``P[0]`` unused).  For ``k < s`` the gain is
    ``r / P[k] - r / P[k + 1]`` (``k < cap`` and the rate rises there); at ``k = s`` it is
    0.0 (``s >= cap``, or the rate does not rise): the same floats as ``gain`` in
    :meth:`Optimus.schedule`, read from lists (ours: a shortcut).  Memoised with the rates
    by (application, global batch, cap), as the stop is."""
    key = (job.app, job.global_batch, cap)
    hit = memo.get(key)
    if hit is None:
        s = _structural_stop(rates, job, cap, stop_memo(rates))[0]
        rate = rates.rate
        hit = memo[key] = (s, (0.0,) + tuple(rate(job, k) for k in range(1, s + 1)))
    return hit


def _separated(rates, job, cap: int) -> bool:
    """Whether :func:`_uncontended` reads a profiled job's stop from its structural stop
    whatever its remaining iterations in ``_SAFE``: a stop of 1, or separated rates."""
    s, sep = _structural_stop(rates, job, cap, stop_memo(rates))
    return s == 1 or sep


def _uncontended(rates, jobs: list, M: int, cap: dict, rem: dict, gain) -> "dict | None":
    """Each job's (share, gain at that share) when the greedy hand-out ends with every job at
    its own stop — the first count where ``gain`` is not positive — and GPUs to spare:
    ``sum of stops <= M`` (with ``len(jobs) <= M``).  Then the order in which the heap hands
    GPUs out does not matter and the hand-out's result is this (ours: a shortcut, the same
    shares and numbers; tests/policies/test_elastic_uncontended.py against the heap).
    ``None`` otherwise, or where a job is not profiled or its remaining time is not finite.

    A stop is read from the memoised structural stop: with a remaining time ``r = 0`` the
    gain is 0.0 from the first GPU; with ``r`` in ``_SAFE`` and separated rates, ``r/p`` and
    ``r/p1`` are normal floats more than 2 ulp apart at every step below the structural
    stop, so every gain there is positive and the stop is the structural one (its gain
    0.0).  Other jobs walk their gains as the heap would."""
    memo = stop_memo(rates)
    out: dict = {}
    total = 0
    lo, hi = _SAFE
    for j in jobs:
        if not rates.profiled(j):
            return None
        r = rem[j.id]
        s, sep = _structural_stop(rates, j, cap[j.id], memo)
        if r == 0.0 or s == 1:
            k, g = 1, 0.0
        elif sep and lo < r < hi:
            k, g = s, 0.0
        elif r - r != 0.0:  # inf or nan: the heap's keys would not order
            return None
        else:
            k = 1
            g = gain(j, 1)
            while g > 0 and k <= M:
                k += 1
                g = gain(j, k)
            if g != g:
                return None
        total += k
        if total > M:
            return None
        out[j.id] = (k, g)
    return out


def _by_sorted_steps(front: list, left: int, gain, shares: dict, now: dict,
                     tabs: "dict | None" = None) -> bool:
    """The heap's hand-out of ``left`` GPUs to ``front`` (each holding one), by one sort
    (ours: a shortcut, the same shares and gains; tests/policies/test_optimus_kept.py
    against the heap).

    The heap pops the largest gain among each job's next step (ties: the first job).  A job's
    step ``k`` can be popped only after its steps before it, so it is popped as if its gain
    were ``e_k = min(g_1, ..., g_k)``: once its step with gain ``e_k`` is popped (the largest
    head then, so every other head is at most ``e_k``, equal ones behind it), each later step
    of gain at least ``e_k`` is the largest head in turn.  With those keys non-increasing
    along each job, the pops are one sorted order of all steps by (−e, position, k), the
    merge of sorted lists.  A job's steps end at its first gain that is not positive (the
    heap stops at such a head: every head is then not positive), and the pops end there or
    when the GPUs run out: the first ``left`` steps of that order.  Sets ``shares`` and
    ``now`` and returns True; False (nothing changed) where a gain read is not a number, or
    where the jobs' positive steps are many more than the GPUs (the heap then costs less).

    ``tabs`` (optional): job id -> ``(s, P, r)``, a profiled job's :func:`_rate_table` and its
    remaining iterations; its gains below ``s`` are then computed here from the lists (each
    ``r / P[k]`` once, the same floats as ``gain``)."""
    steps: list = []
    append = steps.append
    budget = 2 * left + len(front)  # (past it the heap's left pops cost less: it answers)
    for i, j in enumerate(front):
        g = e = now[j.id]
        k = 1
        t = tabs.get(j.id) if tabs is not None else None
        if t is not None:
            s, P, r = t
            q = None  # r / P[k] once read
            while g > 0 and k <= left:
                if len(steps) >= budget:
                    return False
                append((-e, i, k))
                k += 1
                if k < s:  # gain(j, k)
                    if q is None:
                        q = r / P[k]
                    q1 = r / P[k + 1]
                    g = q - q1
                    q = q1
                else:  # k == s: the stop's gain
                    g = 0.0
                if g < e:
                    e = g
            if g != g:
                return False
            continue
        while g > 0 and k <= left:
            if len(steps) >= budget:
                return False
            append((-e, i, k))
            g = gain(j, k + 1)
            if g < e:
                e = g
            k += 1
        if g != g:  # NaN: the heap's order is not a sort
            return False
    steps.sort()
    more = [0] * len(front)
    for _, i, _ in steps[:left]:
        more[i] += 1
    for i, j in enumerate(front):
        if more[i]:
            k = shares[j.id] = 1 + more[i]
            now[j.id] = gain(j, k)
    return True


@register("optimus")
class Optimus(Policy):
    """Optimus: greedy marginal reduction of remaining time per extra GPU (seed 001 baseline)."""

    preemptive = True
    needs_lengths = True
    elastic = True

    def __init__(self, packing: bool = True):
        self.packing = bool(packing)
        self._kept = KeptStops(_structural_stop, _separated)

    def schedule(self, snap):
        rates = Rates(snap)
        kept = self._kept.shares(snap, rates)
        if kept is not None:
            # _uncontended's answer (policies.optimus_kept): every job at its structural
            # stop with the gain 0.0 there (one shared mapping, as below)
            zero = {"marginal_gain_s": 0.0}
            return elastic_plan(snap, self.name, kept, rates, list(kept), lambda j: zero,
                                packing=self.packing)
        jobs = sorted(snap.jobs.values(), key=SUBMIT_ORDER)
        M = snap.total_gpus
        n = len(jobs)
        shares = {j.id: (1 if i < M else 0) for i, j in enumerate(jobs)}
        rem = {}
        for j in jobs[:M]:
            r = rates.remaining_iters(j)
            rem[j.id] = r if r is not None else 1.0  # unknown length: gain in relative time

        cap = {j.id: rates.cap(j, n) for j in jobs[:M]}  # gain() is asked of these only
        rate = rates.rate
        tabs: dict = {}  # id -> (s, P, r): the contended hand-out's rate tables

        def gain(j, k):
            t = tabs.get(j.id)
            if t is not None and k <= t[0]:  # (_rate_table: the same floats)
                if k == t[0]:
                    return 0.0
                r, P = t[2], t[1]
                return r / P[k] - r / P[k + 1]
            if k >= cap[j.id]:
                return 0.0
            p, p1 = rate(j, k), rate(j, k + 1)
            if p1 > p:
                r = rem[j.id]
                return r / p - r / p1
            return 0.0

        # now[id]: gain(job, its share) at every point (the explain number at the end)
        now = _uncontended(rates, jobs, M, cap, rem, gain) if n <= M else None
        if now is not None:  # every job ends at its own stop: GPUs to spare
            for jid, (k, _) in now.items():
                shares[jid] = k
            now = {jid: g for jid, (_, g) in now.items()}
        else:
            memo = rates.kept.setdefault("optimus-rates", {})
            profiled = rates.profiled
            for j in jobs[:M]:
                if profiled(j):
                    tabs[j.id] = _rate_table(rates, j, cap[j.id], memo) + (rem[j.id],)
            now = {j.id: gain(j, 1) for j in jobs[:M]}
            if _by_sorted_steps(jobs[:M], M - min(n, M), gain, shares, now, tabs):
                heap = []  # (the heap's answer: shares and now set)
            else:
                heap = [(-now[j.id], i, j) for i, j in enumerate(jobs[:M])]
            heapq.heapify(heap)
            left = M - min(n, M)
            while left > 0 and heap:
                g, i, j = heapq.heappop(heap)
                if g >= 0:
                    break  # no job gains from another GPU
                k = shares[j.id] + 1
                shares[j.id] = k
                left -= 1
                g = now[j.id] = gain(j, k)
                heapq.heappush(heap, (-g, i, j))

        shown: dict = {}

        def numbers(j):
            # no numbers: one shared empty mapping (waiting jobs then share a Reason); jobs
            # with the same gain share one mapping (elastic_plan then gives the kept and the
            # waiting ones with the same share one Reason).  A gain is never -0.0 (0.0 as
            # written, or x - y, which is +0.0 where x == y), so equal keys print alike
            g = now.get(j.id)
            if g is None:
                return no_numbers(j)
            d = shown.get(g)
            if d is None:
                d = shown[g] = {"marginal_gain_s": g}
            return d
        return elastic_plan(snap, self.name, shares, rates, [j.id for j in jobs], numbers,
                            packing=self.packing)
