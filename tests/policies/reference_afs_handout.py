"""Reference copy (test oracle) of Algorithm 1's GPU-by-GPU hand-out as it was before the
hand-out resumed its walk at the job that changed and the tie coin was memoised
(policies/afs_core.py ``coin``, ``_walk_l``, ``_walk_p``, ``_hand_out``, ``afs_l_shares``,
``afs_p_shares``), and of network-packing regulation before it kept its candidates in a heap
(policies/elastic.py ``regulate``), and of Themis's ``schedule`` before its leftover GPUs
were drawn from a heap (policies/themis.py; here ``ThemisBefore.schedule``, called with a
``Themis`` as ``self``).  Verbatim but for the imports.  Do not edit:
tests/policies/test_afs_handout_differential.py and tests/policies/test_elastic_differential.py
compare the package's shares and Plans with these."""
from __future__ import annotations

import hashlib
import heapq
from typing import Callable, Mapping, Sequence

from policies.afs_core import Cand, INF, _fast_stage_one, _reset, _state
from policies.elastic import Rates, _next_up, elastic_plan, no_numbers, round_down, useful_share
from policies.themis import _draw


def coin(seed: int, x: str, y: str) -> bool:
    """A fair, reproducible coin for the pair (x, y) (same answer for (y, x))."""
    lo, hi = sorted((x, y))
    h = hashlib.blake2b(f"{seed}|{lo}|{hi}".encode(), digest_size=2).digest()
    return (h[0] & 1) == (x == lo)


def _walk_l(st: list) -> int:
    """:func:`top_priority_l` on precomputed states (same decisions, no calls per pair)."""
    k_star, s = 0, st[0]
    for k, r in enumerate(st):
        if s[0] and r[0]:  # lines 5-7
            if not s[1] < r[1]:
                k_star, s = k, r
        elif s[2] >= r[2]:  # line 9: j_a = j, j_b = j*; (3) keeps j*, else j
            if not s[3] > r[4]:
                k_star, s = k, r
        elif r[3] > s[4]:  # j_a = j*, j_b = j; (3) gives j
            k_star, s = k, r
    return k_star


def _walk_p(st: list, ids: list, seed: int) -> int:
    """:func:`top_priority_p` on precomputed states."""
    k_star, s = 0, st[0]
    for k, r in enumerate(st):
        if k == k_star:
            continue
        if r[3] > s[4]:  # (3) with j_a = j*, j_b = j
            k_star, s = k, r
        elif s[3] > r[4]:  # (3) with j_a = j, j_b = j*
            continue
        elif coin(seed, ids[k_star], ids[k]):
            k_star, s = k, r
    return k_star


def _hand_out(jobs: Sequence[Cand], m: int, step: int, pick) -> None:
    """Lines 18-21: ``m`` GPUs, one at a time, to the job ``pick(states, ids)`` names among
    the jobs one more GPU helps.  With no GPU left (more jobs than GPUs after stage one)
    nothing is handed out, so the states are not built."""
    if m <= 0:
        return
    live = [c for c in jobs if c.can_grow()]
    st = [_state(c) for c in live]
    ids = [c.id for c in live]
    while m > 0 and live:
        k = pick(st, ids)  # line 19
        c = live[k]
        c.cnt += 1  # line 20
        if c.pick < 0:
            c.pick = step
        step += 1
        m -= 1  # line 21
        if c.can_grow():
            st[k] = _state(c)
        else:
            del live[k], st[k], ids[k]


def afs_l_shares(jobs: list[Cand], total: int) -> None:
    """Algorithm 1, procedure AFS-L (lines 14-23): sets ``cnt`` of every job."""
    _reset(jobs)  # lines 15-16
    m = total  # line 17
    left = _fast_stage_one(jobs, m) if jobs else 0
    if left is None:
        _reset(jobs)
    else:
        m = left
    _hand_out(jobs, m, total - m, lambda st, ids: _walk_l(st))


def afs_p_shares(jobs: list[Cand], total: int, seed: int) -> None:
    """AFS-P's stage for at most ``total`` jobs (§3.3): every job gets one GPU, the rest
    by the length-unaware TOPPRIORITY."""
    _reset(jobs)
    m = total
    step = 0
    if not any(c.doubles_at_one() for c in jobs):
        for c in jobs:  # count-0 jobs win every (3) test against jobs holding a GPU
            if m == 0:
                break
            c.cnt, c.pick = 1, step
            step += 1
            m -= 1
    _hand_out(jobs, m, step, lambda st, ids: _walk_p(st, ids, seed))


def regulate(shares: Mapping[str, int], per_node: int, total: int,
             useful: Callable[[str, int], bool] = lambda j, k: True) -> dict[str, int]:
    """Network-packing regulation of ``shares`` (Appendix E, Proposition 2).

    Every share becomes allowed and the sum is kept when the moves allow it.  Freed GPUs
    go to the job with the largest deficit ``s_i - r_i`` whose next allowed share fits in
    what is left (ties: the order of ``shares``, i.e. the policy's priority order); a job
    whose next share would exceed what it was given only gets it if ``useful(job, new)``
    (its throughput rises), else the GPUs stay idle.
    """
    out = {j: round_down(s, per_node) for j, s in shares.items()}
    d = min(sum(shares.values()), total) - sum(out.values())
    rank = {j: i for i, j in enumerate(shares)}
    while d > 0:
        best, best_key = None, None
        for j, r in out.items():
            if r == 0:
                continue
            up = _next_up(r, per_node)
            if up is None or up - r > d:
                continue
            deficit = shares[j] - r
            if deficit <= 0 and not useful(j, up):
                continue
            key = (-deficit, rank[j])
            if best_key is None or key < best_key:
                best, best_key = j, key
        if best is None:
            break
        up = _next_up(out[best], per_node)
        d -= up - out[best]
        out[best] = up
    return out


class ThemisBefore:
    def schedule(self, snap):
        rates = Rates(snap)
        jobs = sorted(snap.jobs.values(), key=lambda j: (j.submit_time, j.id))
        M = snap.total_gpus
        n = len(jobs)
        shares = {j.id: 0 for j in jobs}
        front = jobs[:M]  # with more jobs than GPUs only the oldest M can get one
        target, one, memo = {}, {}, {}
        for j in front:
            m = self.peak(rates, j, min(M, rates.cap(j, n)), memo)
            target[j.id] = m / n
            one[j.id] = rates.rate(j, 1)

        def rho(j, k):
            if k == 0:
                return INF
            return target[j.id] / (rates.rate(j, k) / one[j.id])

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
        while left > 0:
            grow = [j for j in leftover if shares[j.id] > 0 and shares[j.id] < rates.cap(j, n)
                    and useful_share(rates, j, shares[j.id])]
            if not grow:
                break
            j = min(grow, key=lambda j: _draw(snap.seed, j.id, shares[j.id]))
            shares[j.id] += 1
            left -= 1

        def numbers(j):
            if j.id not in target:  # beyond the first M jobs: one shared empty mapping,
                return no_numbers(j)  # so the waiting queue shares one Reason (elastic_plan)
            return {"target_speedup": target[j.id], "rho": rho(j, shares[j.id])}
        return elastic_plan(snap, self.name, shares, rates, [j.id for j in jobs], numbers,
                            packing=self.packing)
