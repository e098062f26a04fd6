"""Reference copy (test oracle) of the elastic Plan construction (policies/elastic.py
``elastic_plan``), of AFS-P's, Themis's and Optimus's ``schedule``, of AFS-L's explain
numbers (policies/afs_l.py ``numbers_of``) and of Algorithm 1's hand-out loop
(policies/afs_core.py ``_hand_out``) as they were before waiting jobs shared their Reason,
AFS-P's processor sharing stopped building a Cand per job and the hand-out stopped building
states with no GPU left.  Do not edit: tests/policies/test_afs_speed_differential.py and
tests/policies/test_elastic_differential.py compare the package's Plans with these.
The placement these call is the literal one of reference_elastic.py."""
from __future__ import annotations

import heapq
from typing import Callable, Mapping, Sequence

from policies.afs_core import Cand, INF, _state, afs_p_shares
from policies.afs_l import candidates
from policies.base import keep_running_reasons
from policies.elastic import Rates, allowed, regulate, round_down, useful_share
from policies.model import ClusterSnapshot, Job
from policies.plan import Plan, PreemptJob, ReasonCode, ResizeJob, StartJob, make_plan, reason
from policies.themis import _draw
from reference_elastic import place


def numbers_of(cands: dict[str, Cand]):
    def numbers(job) -> dict:
        c = cands.get(job.id)
        if c is None:
            return {}
        p, p1 = c.p(c.cnt), c.p(c.cnt + 1)
        d = {"ineq3_left": (p1 - p) / p1 if p1 > 0 else 0.0,
             "ineq3_right": (p1 - p) / p if p > 0 else INF}
        if c.rem != INF:
            d["len_s"] = c.length(c.cnt)
        return d
    return numbers


def _hand_out(jobs: Sequence[Cand], m: int, step: int, pick) -> None:
    """Lines 18-21: ``m`` GPUs, one at a time, to the job ``pick(states, ids)`` names among
    the jobs one more GPU helps."""
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


def elastic_plan(snap: ClusterSnapshot, policy: str, shares: Mapping[str, int], rates: Rates,
                 order: list[str], numbers: Callable[[Job], dict] = lambda j: {},
                 packing: bool = True) -> Plan:
    """Plan that gives every job in ``shares`` its share (0 = wait / pre-empt).

    ``order`` is the policy's priority order (the waiting jobs' queue order comes from
    it).  With ``packing`` the shares are regulated by network packing first.
    """
    per_node = snap.max_gpus_per_node or 1
    total = snap.total_gpus
    positive = {j: s for j, s in shares.items() if s > 0}
    if packing and any(not allowed(s, per_node) for s in positive.values()):
        positive = regulate(positive, per_node, total,
                            lambda j, k: rates.rate(snap.jobs[j], k)
                            > rates.rate(snap.jobs[j], shares[j]) * (1 + 1e-9))
    for jid, r in list(positive.items()):  # a job's own GPU range bounds its share
        rng = snap.jobs[jid].gpu_range
        if rng is not None and not rng[0] <= r <= rng[1]:
            r = round_down(min(r, rng[1]), per_node) if packing else min(r, rng[1])
            positive[jid] = r if r >= rng[0] else 0
    positive = {j: r for j, r in positive.items() if r > 0}
    placed = place(snap, positive)
    actions: list = []
    reasons: dict = {}
    waiting: list[str] = []
    for jid in order:
        job = snap.jobs[jid]
        gpus = placed.get(jid)
        nums = dict(numbers(job), share=float(len(gpus) if gpus else 0),
                    decided_share=float(shares.get(jid, 0)))
        if not gpus:
            if job.running:
                actions.append(PreemptJob(jid))
                reasons[jid] = reason(ReasonCode.PREEMPTED, "its share is 0 GPUs", **nums)
            else:
                waiting.append(jid)
                reasons[jid] = reason(ReasonCode.WAIT_RESOURCES,
                                      "its share is 0 GPUs (higher-priority jobs hold them)",
                                      **nums)
            continue
        b, s = rates.config(job, len(gpus))
        if job.running:
            old = job.allocation.gpus
            if set(old) == set(gpus) and (job.allocation.sub_batch, job.allocation.accum_steps) \
                    == (b, s):
                continue  # KEEP_RUNNING below
            moved = not (set(old) & set(gpus))
            actions.append(ResizeJob(jid, gpus, b, s))
            reasons[jid] = reason(ReasonCode.RESIZED,
                                  f"share {len(old)} -> {len(gpus)} GPUs"
                                  + (" (migrated: no old GPU kept)" if moved else ""),
                                  **nums, migrated=float(moved))
        else:
            actions.append(StartJob(jid, gpus, b, s))
            code = ReasonCode.RESUMED if job.preemptions else ReasonCode.STARTED
            reasons[jid] = reason(code, f"share {len(gpus)} GPUs", **nums)
    for jid in snap.jobs:
        if jid not in reasons and snap.jobs[jid].running:
            job = snap.jobs[jid]
            reasons[jid] = reason(ReasonCode.KEEP_RUNNING,
                                  f"keeps its share of {len(job.allocation.gpus)} GPUs",
                                  **numbers(job), share=float(len(job.allocation.gpus)),
                                  decided_share=float(shares.get(jid, 0)))
    keep_running_reasons(snap, reasons)
    return make_plan(policy, actions, waiting, reasons)



class RefAfsP:
    def schedule(self, snap):
        rates = Rates(snap)
        jobs = sorted(snap.jobs.values(), key=lambda j: (j.submit_time, j.id))
        M = snap.total_gpus
        cands = candidates(snap, rates, jobs, lambda j: INF)
        by_id = {c.id: c for c in cands}
        base = numbers_of(by_id)

        def numbers(job):
            return dict(base(job), counter=float(self.counter(snap, job)))

        if len(jobs) <= M:
            afs_p_shares(cands, M, snap.seed)
            shares = {c.id: c.cnt for c in sorted(cands, key=lambda c: (c.pick < 0, c.pick))}
        else:
            keep = [j for j in jobs if j.running and not self.unit_done(snap, j)]
            keep_ids = {j.id for j in keep}
            rest = sorted((j for j in jobs if j.id not in keep_ids),
                          key=lambda j: (self.counter(snap, j), j.submit_time, j.id))
            chosen = keep[:M] + rest[:max(0, M - len(keep))]
            shares = {j.id: 1 for j in chosen}
            shares.update({j.id: 0 for j in jobs if j.id not in shares})
            for c in cands:
                c.cnt = shares[c.id]
        return elastic_plan(snap, self.name, shares, rates, list(shares), numbers,
                            packing=self.packing)


class RefThemis:
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
            if j.id not in target:
                return {}
            return {"target_speedup": target[j.id], "rho": rho(j, shares[j.id])}
        return elastic_plan(snap, self.name, shares, rates, [j.id for j in jobs], numbers,
                            packing=self.packing)


class RefOptimus:
    def schedule(self, snap):
        rates = Rates(snap)
        jobs = sorted(snap.jobs.values(), key=lambda j: (j.submit_time, j.id))
        M = snap.total_gpus
        n = len(jobs)
        shares = {j.id: (1 if i < M else 0) for i, j in enumerate(jobs)}
        rem = {}
        for j in jobs[:M]:
            r = rates.remaining_iters(j)
            rem[j.id] = r if r is not None else 1.0  # unknown length: gain in relative time

        def gain(j, k):
            if k >= rates.cap(j, n):
                return 0.0
            p, p1 = rates.rate(j, k), rates.rate(j, k + 1)
            return rem[j.id] / p - rem[j.id] / p1 if p1 > p else 0.0

        heap = [(-gain(j, 1), i, j) for i, j in enumerate(jobs[:M])]
        heapq.heapify(heap)
        left = M - min(n, M)
        while left > 0 and heap:
            g, i, j = heapq.heappop(heap)
            if g >= 0:
                break  # no job gains from another GPU
            k = shares[j.id] + 1
            shares[j.id] = k
            left -= 1
            heapq.heappush(heap, (-gain(j, k), i, j))

        def numbers(j):
            k = shares.get(j.id, 0)
            return {"marginal_gain_s": gain(j, k)} if j.id in rem and k > 0 else {}
        return elastic_plan(snap, self.name, shares, rates, [j.id for j in jobs], numbers,
                            packing=self.packing)
