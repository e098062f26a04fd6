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
from .registry import register


@register("optimus")
class Optimus(Policy):
    """Optimus: greedy marginal reduction of remaining time per extra GPU (seed 001 baseline)."""

    preemptive = True
    needs_lengths = True
    elastic = True

    def __init__(self, packing: bool = True):
        self.packing = bool(packing)

    def schedule(self, snap):
        rates = Rates(snap)
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

        def gain(j, k):
            if k >= cap[j.id]:
                return 0.0
            p, p1 = rate(j, k), rate(j, k + 1)
            if p1 > p:
                r = rem[j.id]
                return r / p - r / p1
            return 0.0

        # now[id]: gain(job, its share) at every point (the explain number at the end)
        now = {j.id: gain(j, 1) for j in jobs[:M]}
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

        def numbers(j):
            # no numbers: one shared empty mapping (waiting jobs then share a Reason)
            return {"marginal_gain_s": now[j.id]} if j.id in now else no_numbers(j)
        return elastic_plan(snap, self.name, shares, rates, [j.id for j in jobs], numbers,
                            packing=self.packing)
