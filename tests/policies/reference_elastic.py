"""Reference copies (test oracles) of the straightforward elastic placement
(policies/elastic.py ``place``) and Themis's peak search (policies/themis.py
``Themis.peak``) as literal scans.  tests/policies/test_elastic_differential.py compares the
package's results with these.  ``place`` is the literal form of the placement that leaves
other running jobs' GPUs alone where it can (2026-11-28: the earlier placement migrated
~15 jobs per job on the Philly trace at 300x8, docs/scale.md); ``place_v1`` is the literal
placement before that change, kept so tests can compare how many jobs each migrates."""
from __future__ import annotations

from typing import Mapping

from policies.elastic import Rates
from policies.model import ClusterSnapshot, Gpu


def place(snap: ClusterSnapshot, shares: Mapping[str, int]) -> dict[str, tuple[Gpu, ...]]:
    """GPU sets for ``shares`` (job id -> count > 0), reusing current GPUs and leaving other
    running jobs' GPUs alone where it can (§4.4: migration as the last resort).

    Largest share first (running jobs before new ones among equal shares).  A GPU is
    *claimed* while a job of ``shares`` not placed yet is expected to keep it (``keeps``
    below).  Multi-node shares take
    whole free nodes by (other jobs claim more of the node's GPUs than the job holds there,
    most of the job's GPUs, rank).  Sub-node shares go to the node
    holding most of the job's GPUs if it has room, else to the node with the fewest
    unclaimed free GPUs that still holds the share in unclaimed GPUs, else to the fullest
    node that fits (best fit, rank).  Unequal nodes: as before.  The literal scans; the
    package's ``place`` must give exactly this.
    """
    per_node = snap.max_gpus_per_node or 1
    rank = snap.node_rank
    free: dict[str, list[int]] = {n.name: list(range(n.num_gpus)) for n in snap.nodes}
    held_now: dict[Gpu, str] = {}
    cur: dict[str, set[Gpu]] = {}
    for jid in shares:
        job = snap.jobs[jid]
        if job.running and job.allocation is not None:
            cur[jid] = set(job.allocation.gpus)
            for g in job.allocation.gpus:
                held_now[g] = jid
    placed: set[str] = set()
    out: dict[str, tuple[Gpu, ...]] = {}

    def mine_on(jid: str, node: str) -> int:
        return sum(1 for g in cur.get(jid, ()) if g.node == node)

    # the GPUs a running job is expected to keep: a sub-node share, the lowest-index
    # min(share, n) of its n GPUs on its node holding most of them (ties: rank); a
    # multi-node share, every GPU of the first share / per_node nodes (by rank) it holds whole
    keeps: dict[Gpu, str] = {}
    for jid, gs in cur.items():
        k = shares[jid]
        on: dict[str, list[int]] = {}
        for g in gs:
            if g.node in free:
                on.setdefault(g.node, []).append(g.index)
        if not on:
            continue
        if k < per_node:
            y = min(on, key=lambda x: (-len(on[x]), rank.get(x, 0)))
            for i in sorted(on[y])[:max(k, 0)]:
                keeps.setdefault(Gpu(y, i), jid)  # GPUs held twice: the first job's
        else:
            whole = sorted((x for x in on if len(on[x]) == per_node == len(free[x])),
                           key=lambda x: rank.get(x, 0))
            for y in whole[:k // per_node]:
                for i in on[y]:
                    keeps.setdefault(Gpu(y, i), jid)

    def claimed(node: str) -> int:
        """Free GPUs of ``node`` that a job not placed yet is expected to keep."""
        return sum(1 for i in free[node]
                   if Gpu(node, i) in keeps and keeps[Gpu(node, i)] not in placed)

    def take(jid: str, node: str, n: int) -> list[Gpu]:
        idx = free[node]
        mine = cur.get(jid, set())
        idx.sort(key=lambda i: (Gpu(node, i) not in mine,
                                keeps.get(Gpu(node, i), jid) not in placed,
                                Gpu(node, i) in held_now, i))
        got, free[node] = idx[:n], idx[n:]
        return [Gpu(node, i) for i in got]

    # stable: keeps priority order in ties
    order = sorted(shares, key=lambda j: (-shares[j], j not in cur))
    for jid in order:
        k = shares[jid]
        if k < per_node:
            continue
        placed.add(jid)
        nodes = sorted((x for x in free if len(free[x]) == per_node),
                       key=lambda x: (claimed(x) > mine_on(jid, x), -mine_on(jid, x),
                                      rank.get(x, 0)))
        gpus: list[Gpu] = []
        for x in nodes:
            if len(gpus) >= k:
                break
            gpus += take(jid, x, min(per_node, k - len(gpus)))
        if len(gpus) < k:  # unequal nodes: fill from the nodes with most free GPUs
            for x in sorted(free, key=lambda x: (-len(free[x]), rank.get(x, 0))):
                if len(gpus) >= k:
                    break
                if free[x]:
                    gpus += take(jid, x, min(len(free[x]), k - len(gpus)))
        if len(gpus) < k:  # cannot happen with allowed shares on equal nodes
            for g in gpus:
                free[g.node].append(g.index)
            continue
        out[jid] = tuple(sorted(gpus))
    for jid in order:
        k = shares[jid]
        if k >= per_node or k <= 0:
            continue
        placed.add(jid)
        fits = [x for x in free if len(free[x]) >= k]
        if fits:
            def key(x):
                u = len(free[x]) - claimed(x)
                return (u < k, -mine_on(jid, x), u if u >= k else len(free[x]), rank.get(x, 0))
            x = min(fits, key=key)
            out[jid] = tuple(sorted(take(jid, x, k)))
            continue
        if sum(len(v) for v in free.values()) < k:
            continue
        gpus = []
        for x in sorted(free, key=lambda x: (-len(free[x]), rank.get(x, 0))):
            if len(gpus) >= k:
                break
            if free[x]:
                gpus += take(jid, x, min(len(free[x]), k - len(gpus)))
        out[jid] = tuple(sorted(gpus))
    return out


def place_v1(snap: ClusterSnapshot, shares: Mapping[str, int]) -> dict[str, tuple[Gpu, ...]]:
    """The placement before it avoided other running jobs' GPUs (kept to compare how
    many jobs each migrates): GPU sets for ``shares``, reusing current GPUs (§4.4).

    Multi-node shares (>= GPUs per node) take whole nodes, preferring the nodes the
    job is on; the rest are placed largest first, each on the node holding most of
    its current GPUs if it has room, else the fullest node that fits (best fit).  With
    allowed shares on equal nodes this always succeeds (Appendix E, Proposition 1).
    A share that cannot be placed (unequal nodes) is placed on as few nodes as
    possible, and left out if fewer GPUs than it needs are left.
    """
    per_node = snap.max_gpus_per_node or 1
    rank = snap.node_rank
    free: dict[str, list[int]] = {n.name: list(range(n.num_gpus)) for n in snap.nodes}
    held_now: dict[Gpu, str] = {}
    cur: dict[str, set[Gpu]] = {}
    for jid in shares:
        job = snap.jobs[jid]
        if job.running and job.allocation is not None:
            cur[jid] = set(job.allocation.gpus)
            for g in job.allocation.gpus:
                held_now[g] = jid
    out: dict[str, tuple[Gpu, ...]] = {}

    def mine_on(jid: str, node: str) -> int:
        return sum(1 for g in cur.get(jid, ()) if g.node == node)

    def take(jid: str, node: str, n: int) -> list[Gpu]:
        idx = free[node]
        mine = cur.get(jid, set())
        idx.sort(key=lambda i: (Gpu(node, i) not in mine, Gpu(node, i) in held_now, i))
        got, free[node] = idx[:n], idx[n:]
        return [Gpu(node, i) for i in got]

    order = sorted(shares, key=lambda j: -shares[j])  # stable: keeps priority order in ties
    for jid in order:
        k = shares[jid]
        if k < per_node:
            continue
        nodes = sorted((x for x in free if len(free[x]) == per_node),
                       key=lambda x: (-mine_on(jid, x), rank.get(x, 0)))
        gpus: list[Gpu] = []
        for x in nodes:
            if len(gpus) >= k:
                break
            gpus += take(jid, x, min(per_node, k - len(gpus)))
        if len(gpus) < k:  # unequal nodes: fill from the nodes with most free GPUs
            for x in sorted(free, key=lambda x: (-len(free[x]), rank.get(x, 0))):
                if len(gpus) >= k:
                    break
                if free[x]:
                    gpus += take(jid, x, min(len(free[x]), k - len(gpus)))
        if len(gpus) < k:  # cannot happen with allowed shares on equal nodes
            for g in gpus:
                free[g.node].append(g.index)
            continue
        out[jid] = tuple(sorted(gpus))
    for jid in order:
        k = shares[jid]
        if k >= per_node or k <= 0:
            continue
        fits = [x for x in free if len(free[x]) >= k]
        if fits:
            x = min(fits, key=lambda x: (-mine_on(jid, x), len(free[x]), rank.get(x, 0)))
            out[jid] = tuple(sorted(take(jid, x, k)))
            continue
        if sum(len(v) for v in free.values()) < k:
            continue
        gpus = []
        for x in sorted(free, key=lambda x: (-len(free[x]), rank.get(x, 0))):
            if len(gpus) >= k:
                break
            if free[x]:
                gpus += take(jid, x, min(len(free[x]), k - len(gpus)))
        out[jid] = tuple(sorted(gpus))
    return out


class RefPeak:
    def peak(self, rates: Rates, job, limit: int) -> int:
        best, best_k = rates.rate(job, 1), 1
        for k in range(2, limit + 1):
            r = rates.rate(job, k)
            if r > best * (1 + 1e-9):
                best, best_k = r, k
        return best_k


def max_min_schedule(self, snap):
    """MaxMin.schedule as it was before the water-filling by levels (policies/max_min.py):
    one GPU at a time from a heap (the Plan through ``policies.max_min.elastic_plan``, looked up
    at the call: the differential test patches it with its reference)."""
    import heapq

    import policies.max_min
    from policies.elastic import useful_share

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
    return policies.max_min.elastic_plan(snap, self.name, shares, rates, [j.id for j in jobs],
                                         packing=self.packing)
