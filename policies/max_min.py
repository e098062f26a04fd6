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

import heapq

from .base import Policy
from .elastic import Rates, elastic_plan, useful_share
from .registry import register


@register("max-min")
class MaxMin(Policy):
    """Max-Min: max-min fair elastic GPU shares, submit order beyond M jobs (seed 001)."""

    preemptive = True
    elastic = True

    def __init__(self, packing: bool = True):
        self.packing = bool(packing)

    def schedule(self, snap):
        rates = Rates(snap)
        jobs = sorted(snap.jobs.values(), key=lambda j: (j.submit_time, j.id))
        M = snap.total_gpus
        n = len(jobs)
        cap = {j.id: rates.cap(j, n) for j in jobs}
        shares = {j.id: (1 if i < M else 0) for i, j in enumerate(jobs)}
        left = M - min(n, M)
        heap = [(1, i, j) for i, j in enumerate(jobs[:M])]
        while left > 0 and heap:
            cnt, i, j = heapq.heappop(heap)
            if cnt >= cap[j.id] or not useful_share(rates, j, cnt):
                continue  # demand met: drops out of the water-filling
            shares[j.id] = cnt + 1
            left -= 1
            heapq.heappush(heap, (cnt + 1, i, j))
        return elastic_plan(snap, self.name, shares, rates, [j.id for j in jobs],
                            packing=self.packing)
