"""Themis-style finish-time fairness, the subset seed 001 uses (§6, footnote 13).

Seed 001 characterises Themis (Mahajan et al., NSDI'20) for its comparison by one
rule: a job whose throughput peaks at ``m`` GPUs and that runs beside ``n - 1``
other jobs should get GPUs until its speedup over one GPU reaches ``m / n``; the
leftover GPUs are distributed at random.  Here: ``n`` is the number of active jobs
now (ours: the paper's "on average over time" would need the job's history);
``m`` is the count, up to the cluster size, with the highest modelled throughput;
the unfairness of a job on ``k`` GPUs is ``rho = (m / n) / speedup(k)`` (infinite at
0).  GPUs go one at a time to the job with the largest ``rho`` above 1 (ties:
submit order, so with more jobs than GPUs the oldest jobs run); then each leftover
GPU goes to a job one more GPU speeds up, chosen by a reproducible pseudo-random
draw (hash of the snapshot seed, job id and its count).  Not modelled (footnote
13: "this does not cover all features of Themis"): the auction, the lease.
Length-unaware.  Network packing and placement as in :mod:`policies.elastic`.
"""
from __future__ import annotations

import sys

import hashlib
import heapq
from functools import lru_cache
from operator import itemgetter
from typing import Optional

from .base import Policy
from .elastic import Rates, elastic_plan, no_numbers, useful_share
from .max_min import _demand
from .max_min_kept import KeptDemands
from .model import SUBMIT_ORDER
from .registry import register
from .themis_leftover import KeptLeftovers

INF = float("inf")


def _draw(seed: int, jid: str, k: int) -> bytes:
    return hashlib.blake2b(f"{seed}|{jid}|{k}".encode(), digest_size=8).digest()


# :func:`_draw`, memoised (a pure function of its arguments: a job waiting for leftovers is
# drawn again at every call with the same count; functools' bounded cache)
_drawn = lru_cache(maxsize=1 << 20)(_draw)


def _comm_bound(rates: Rates, job):
    """For a profiled job whose model has non-negative parameters, ``k -> t_comm(k)`` on
    two or more nodes: a lower bound on the eq. 7 iteration time at *every* count >= k
    beyond one node (t_iter >= (t_comp^δ + t_comm^δ)^(1/δ) >= t_comm, and t_comm grows
    with k), so 1/t_comm(k) bounds every later rate; the walk stops once that bound
    (with a 1e-6 relative margin, far above float error) cannot beat the best rate.
    ``None`` when the conditions do not hold (the walk then goes to the limit); 0.0 at a
    count where t_comm^δ underflows (no bound there)."""
    if not rates.profiled(job):
        return None
    p = rates.snap.profiles[job.app]
    if min(p.alpha_comp, p.beta_comp, p.alpha_inter, p.beta_inter) < 0 or not p.delta > 0:
        return None
    d, tiny = p.delta, sys.float_info.min

    def bound(k: int) -> float:
        # in floats the bound holds while t_comm^δ is a normal number: eq. 7's sum is then
        # at least t_comm^δ and its root at least t_comm (up to rounding, far below the
        # margin); an underflowing t_comm^δ (parameters near 1e-200) can leave t_iter below
        # t_comm, so no bound then (0.0: the walk goes on)
        tm = p.t_comm(k, 2)
        return tm if tm ** d >= tiny else 0.0
    return bound


def _stops(rates: Rates, cap):
    """``stop(job, k0)``: the first share ``k >= k0`` where the leftover hand-out drops the job
    (``k = 0``, ``k >= cap(job)`` or one more GPU not useful); for a profiled job a function
    of (application, global batch, cap, k0), memoised with the rates."""
    memo = rates.kept.setdefault("themis-stop", {})
    profiled = rates.profiled

    def walk(j, k: int) -> int:
        c = cap(j)
        while 0 < k < c and useful_share(rates, j, k):
            k += 1
        return k

    def stop(j, k0: int) -> int:
        if not profiled(j):
            return walk(j, k0)
        key = (j.app, j.global_batch, cap(j), k0)
        s = memo.get(key)
        if s is None:
            s = memo[key] = walk(j, k0)
        return s
    return stop


def _uncontended(rates: Rates, front: list, M: int, rho, cap, groups: list,
                 unprofiled: bool) -> Optional[dict]:
    """Each job's share when both hand-outs end with every job at its own stop and GPUs to
    spare, else ``None`` (ours: a shortcut, the same shares; tests/policies/
    test_elastic_uncontended.py against the heaps).  A job's stop in the first hand-out is
    the first count ``p1 >= 1`` with ``rho <= 1`` or one more GPU not useful; in the
    leftover hand-out it then grows while below its cap and useful.  When the stops sum to
    at most ``M`` the GPUs never run out, so neither the rho order nor the draws decide
    anything.  Profiled jobs only (their rates are positive and finite; ``unprofiled``: some
    job of ``front`` is not); with the job count fixed for the call (``rho``'s target,
    ``cap``) a stop depends on (application, global batch, cap) alone: found once per group
    of ``groups`` (positions in ``front`` of jobs with the same application, global batch
    and GPU range, as :meth:`Themis.schedule` makes them)."""
    if unprofiled:
        return None
    total = 0
    stops = []
    for pos in groups:
        j = front[pos[0]]
        c = cap(j)
        k = 1
        while k <= M:  # the first hand-out (the heap's test, the same floats)
            r = rho(j, k)
            if r != r:
                return None
            if r <= 1.0 or not useful_share(rates, j, k):
                break
            k += 1
        while k <= M and k < c and useful_share(rates, j, k):  # the leftovers
            k += 1
        total += k * len(pos)
        if total > M:
            return None
        stops.append(k)
    out: dict = {}
    for pos, k in zip(groups, stops):
        out.update(dict.fromkeys([front[p].id for p in pos], k))
    return out


@register("themis")
class Themis(Policy):
    """Themis: finish-time fairness target speedup m/n, random leftovers (seed 001 subset)."""

    preemptive = True
    elastic = True

    def __init__(self, packing: bool = True):
        self.packing = bool(packing)
        self._kept = KeptDemands(_demand, strict=True)
        self._left = KeptLeftovers(_drawn)

    def peak(self, rates: Rates, job, limit: int, memo: Optional[dict] = None) -> int:
        """``m``: the GPU count up to ``limit`` with the highest modelled throughput.  A
        profiled job's rates depend only on (application, global batch), so with ``memo``
        the walk is done once per (application, batch, limit) while the rates' memo holds
        (``Rates.kept``: across calls on the same models)."""
        key = (job.app, job.global_batch, limit)
        if memo is not None and rates.profiled(job):
            hit = memo.get(key)
            if hit is None:
                hit = memo[key] = self.peak(rates, job, limit)
            return hit
        best, best_k = rates.rate(job, 1), 1
        bound = _comm_bound(rates, job)
        for k in range(2, limit + 1):
            if bound is not None and k > rates.per_node:
                # no count from k on can beat ``best`` (see _comm_bound): the walk's answer
                tm = bound(k)
                if tm > 0 and (1.0 / tm) * (1 + 1e-6) <= best * (1 + 1e-9):
                    break
            r = rates.rate(job, k)
            if r > best * (1 + 1e-9):
                best, best_k = r, k
        return best_k

    def schedule(self, snap):
        rates = Rates(snap)
        kept = self._kept.shares(snap, rates)
        if kept is not None:
            return self._uncontended_plan(snap, rates, kept)
        jobs = sorted(snap.jobs.values(), key=SUBMIT_ORDER)
        M = snap.total_gpus
        n = len(jobs)
        shares = {j.id: 0 for j in jobs}
        front = jobs[:M]  # with more jobs than GPUs only the oldest M can get one
        target, one = {}, {}
        caps: dict = {}  # a job's cap, once per call
        memo = rates.kept.setdefault("themis-peak", {})
        # a profiled job's cap, peak and rate on one GPU depend on (application, global
        # batch, GPU range) for the call (Rates.cap, Themis.peak's memo, Rates.rate): found
        # once for each; so do its first hand-out's steps (``groups``: the positions in
        # ``front`` of each such key's jobs; each unprofiled job a group of its own)
        same: dict = {}
        groups: list = []
        unprofiled = False
        profiled = rates.profiled
        for i, j in enumerate(front):
            if profiled(j):
                key = (j.app, j.global_batch, j.gpu_range)
                hit = same.get(key)
                if hit is None:
                    c = rates.cap(j, n)
                    hit = same[key] = (c, self.peak(rates, j, min(M, c), memo) / n,
                                       rates.rate(j, 1), [])
                    groups.append(hit[3])
                caps[j.id], target[j.id], one[j.id], at = hit
                at.append(i)
                continue
            groups.append([i])
            unprofiled = True
            m = self.peak(rates, j, min(M, rates.cap(j, n)), memo)
            target[j.id] = m / n
            one[j.id] = rates.rate(j, 1)

        def rho(j, k):
            if k == 0:
                return INF
            return target[j.id] / (rates.rate(j, k) / one[j.id])

        seed = snap.seed

        def cap(j):
            c = caps.get(j.id)
            if c is None:
                c = caps[j.id] = rates.cap(j, n)
            return c
        ends = _uncontended(rates, front, M, rho, cap, groups, unprofiled) if n <= M else None
        if ends is not None:  # every job ends both hand-outs at its own stop
            shares.update(ends)
            front = ()
        first = _first_sorted(rates, front, M, rho, groups, shares) if front else None
        if first is None:
            first = _first_heap(rates, front, M, rho, shares)
        left, leftover = first
        # Leftover GPUs one at a time, each to the job with the smallest draw among those
        # one more GPU helps (first in ``leftover`` on equal draws).  A job's draw and
        # whether it may grow depend on its own share only, so the jobs wait in a heap by
        # (draw, position): one that may not grow at its share never may again (its share
        # only changes when it is picked) and is dropped; the top that may grow is the
        # minimum of the scan over all of them (tests/policies/
        # test_afs_handout_differential.py against reference_afs_handout.ThemisBefore).
        # A job picked at (draw e, position i) is picked again at once while its next draw
        # is <= e: the other entries are all above (e, i), so its next (draw, i) is the top;
        # those GPUs are handed out without the heap.  (No GPU left: nothing drawn.)
        # The same from the jobs' steps kept across calls where no tie at the cut needs the
        # leftover list's order (policies.themis_leftover; the heap below otherwise).
        got = (self._left.hand_out(seed, leftover, shares, left, _stops(rates, cap))
               if left > 0 and leftover else None)
        if got is not None:
            shares.update(got)
            left = 0
        drawn = [(_drawn(seed, j.id, shares[j.id]), i, shares[j.id], j)
                 for i, j in enumerate(leftover)] if left > 0 else []
        heapq.heapify(drawn)
        while left > 0 and drawn:
            e, i, k, j = drawn[0]
            c = cap(j)
            if shares[j.id] != k or not (0 < k < c and useful_share(rates, j, k)):
                heapq.heappop(drawn)  # stale (a duplicate entry) or may not grow
                continue
            jid = j.id
            k += 1
            left -= 1
            d = _drawn(seed, jid, k)
            while left > 0 and d <= e:
                if not (k < c and useful_share(rates, j, k)):
                    break  # may not grow: it is dropped when next on top
                k += 1
                left -= 1
                d = _drawn(seed, jid, k)
            shares[jid] = k
            heapq.heapreplace(drawn, (d, i, k, j))

        return elastic_plan(snap, self.name, shares, rates, [j.id for j in jobs],
                            _numbers(target.__contains__, lambda j: target[j.id], rho,
                                     shares), packing=self.packing)

    def _uncontended_plan(self, snap, rates: Rates, shares: dict):
        """The Plan where every job's stop is its demand (:class:`~policies.max_min_kept.
        KeptDemands`, strict: profiled jobs without a GPU range, finite positive rates up to
        the demand, demands summing to at most M): :func:`_uncontended`'s answer, since a
        job's first hand-out stops at the first count with rho <= 1 or one more GPU not
        useful, and the leftovers then grow it while useful below its cap (the cluster),
        i.e. to the first count where one more GPU is not useful: its demand; rho is finite
        there (so no NaN sends ``_uncontended`` to the heaps).  Its numbers (``m / n`` and
        rho at its share) are made when asked for (tests/policies/test_max_min_kept.py
        against the full path at every call of whole simulations)."""
        M, n = snap.total_gpus, len(shares)
        memo = rates.kept.setdefault("themis-peak", {})
        target: dict = {}
        one: dict = {}

        def tgt(j) -> float:
            t = target.get(j.id)
            if t is None:
                m = self.peak(rates, j, min(M, rates.cap(j, n)), memo)
                t = target[j.id] = m / n
                one[j.id] = rates.rate(j, 1)
            return t

        def rho(j, k):
            if k == 0:
                return INF
            return tgt(j) / (rates.rate(j, k) / one[j.id])

        return elastic_plan(snap, self.name, shares, rates, list(shares),
                            _numbers(lambda jid: True, tgt, rho, shares),
                            packing=self.packing)


def _first_heap(rates: Rates, front, M: int, rho, shares: dict) -> tuple[int, list]:
    """The first hand-out: GPUs one at a time to the job with the largest ``rho`` above 1
    (ties: position in ``front``), each job leaving at its first count with ``rho <= 1`` or
    one more GPU not useful.  Sets ``shares``; returns (GPUs left, the jobs for the
    leftovers: those that left, in that order, then those still in the heap)."""
    heap = [(-INF, i, j) for i, j in enumerate(front)]
    left = M
    leftover: list = []
    while left > 0 and heap:
        r, i, j = heapq.heappop(heap)
        k = shares[j.id]
        if -r <= 1.0 or (k > 0 and not useful_share(rates, j, k)):
            leftover.append(j)
            continue
        shares[j.id] = k + 1
        left -= 1
        heapq.heappush(heap, (-rho(j, k + 1), i, j))
    leftover += [j for _, _, j in heap]
    return left, leftover


def _first_sorted(rates: Rates, front, M: int, rho, groups: list, shares: dict):
    """:func:`_first_heap`'s shares and GPUs left, from a sort (ours: a shortcut); None where
    it does not apply (the heap then runs).

    A job's pops from the heap are its steps in turn: a grant at count 0 (key -inf), at each
    count ``k`` with ``rho(k) > 1`` and one more GPU useful (key ``-rho(k)``), and its exit
    (key ``-rho(s)`` at the first count ``s`` that fails).  Where each job's keys do not
    decrease from step to step (checked; no NaN), the heap's pops are the merge of the jobs'
    steps in (key, position, step) order: the popped key never decreases, and a job's next
    step is pushed only when the one before is popped.  The grants go in that order until
    the GPUs run out.  A job can be granted at most ``M`` GPUs, so its steps are listed up to
    count ``M - 1``.  The leftovers' list is what the heap gives where GPUs are left (every
    job then left the heap: the exits in pop order); with none left nothing reads it.

    ``groups``: lists of positions in ``front`` (ascending, together every position once)
    whose jobs have the same steps (for a profiled job they depend on its application,
    global batch and GPU range for the call: rho's target and rates, useful_share).  The
    steps are listed once per group and sorted by key; a key held by one group's step alone
    goes to its jobs in position order, keys held by several steps to theirs in (position,
    step) order.  Every job takes count 0's grant first (its key is the least; no later key
    may be -inf here).  (tests/policies/test_themis_leftover.py against :func:`_first_heap`
    at every call of whole simulations.)"""
    if M <= 0 or len(front) > M:
        return None
    steps: list = []  # (key, group, count, exit?)
    for g, pos in enumerate(groups):
        j = front[pos[0]]
        last = -INF
        k = 1
        while k < M:
            r = rho(j, k)
            x = -r
            if not x > -INF or not x >= last:  # (-inf, a key that falls, or NaN)
                return None
            last = x
            if r <= 1.0 or not useful_share(rates, j, k):
                steps.append((x, g, k, True))
                break
            steps.append((x, g, k, False))
            k += 1
    for j in front:  # count 0's grants, in position order
        shares[j.id] = 1
    left = M - len(front)
    leftover: list = []
    if not left:
        return left, leftover
    steps.sort(key=_KEY)  # (stable: a group's counts stay in order within a key)
    n = len(steps)
    a = 0
    while a < n:
        b = a + 1
        while b < n and steps[b][0] == steps[a][0]:
            b += 1
        if b == a + 1:
            _, g, k, out = steps[a]
            run = [(p, k, out) for p in groups[g]]
        else:
            run = sorted((p, k, out) for _, g, k, out in steps[a:b] for p in groups[g])
        for p, k, out in run:
            j = front[p]
            if out:
                leftover.append(j)
            else:
                shares[j.id] = k + 1
                left -= 1
                if not left:
                    return left, leftover
        a = b
    return left, leftover


_KEY = itemgetter(0)


def _numbers(has, of, rho, shares):
    """A job's explain numbers: ``m / n`` (``of(job)``) and rho at its share; none for a job
    beyond the first M (``has(id)`` false)."""
    shown: dict = {}

    def numbers(j):
        if not has(j.id):  # beyond the first M jobs: one shared empty mapping,
            return no_numbers(j)  # so the waiting queue shares one Reason (elastic_plan)
        # jobs with the same two numbers share one mapping, and so (with the same
        # share) one Reason; neither is ever zero (target > 0, rho > 0 or infinite)
        key = (of(j), rho(j, shares[j.id]))
        d = shown.get(key)
        if d is None:
            d = shown[key] = {"target_speedup": key[0], "rho": key[1]}
        return d
    return numbers
