"""Heavy-Edge GPU mapping (seed 003 §III-B) and the placement helpers A-SRPT and its
baselines share.

:func:`heavy_edge` partitions a job graph (:func:`policies.pipeline.job_graph`) over a set
of servers with ``g_m`` GPUs each, as §III-B describes:

1. servers sorted by available GPUs, descending (ties: the order given);
2. if the unassigned vertices exactly fill the current server, all go there;
3. a single-GPU server takes the unassigned vertex of minimum total edge weight (the
   paper's rule; "total" = all its edges, our reading);
4. a multi-GPU server grows ``node_set``: the heaviest edge between ``node_set`` and an
   unassigned vertex adds that vertex; an empty ``node_set`` starts from the heaviest edge
   among unassigned vertices (both ends when two GPUs are left, as the Fig. 2 walk-through
   does); with no connecting edge an unassigned vertex is taken at random
   (``random.Random(seed)``, so the result is deterministic per seed).

Ties between equal weights break by vertex order (stage, replica).
"""
from __future__ import annotations

import bisect
import random
from typing import Hashable, Mapping, Optional, Sequence


def heavy_edge(adj: Mapping[Hashable, Mapping[Hashable, float]],
               servers: Sequence[tuple[str, int]], seed: int = 0) -> dict[Hashable, str]:
    """Vertex -> server name; ``sum(g_m)`` must equal the number of vertices."""
    verts = sorted(adj)
    if sum(c for _, c in servers) != len(verts):
        raise ValueError(f"servers offer {sum(c for _, c in servers)} GPUs for "
                         f"{len(verts)} stage replicas")
    pos = {v: i for i, v in enumerate(verts)}
    rng = random.Random(seed)
    order = sorted(range(len(servers)), key=lambda i: -servers[i][1])  # stable
    unassigned = dict.fromkeys(verts)
    out: dict[Hashable, str] = {}
    for i in order:
        name, cap = servers[i]
        if cap <= 0:
            continue
        if len(unassigned) == cap:  # case 1: the rest fills this server
            for v in unassigned:
                out[v] = name
            unassigned.clear()
            break
        if cap == 1:  # case 2: lightest vertex alone
            v = min(unassigned, key=lambda u: (sum(adj[u].values()), pos[u]))
            out[v] = name
            del unassigned[v]
            continue
        node_set: list = []
        conn: dict = {}  # unassigned vertex -> heaviest edge to node_set
        while len(node_set) < cap and unassigned:
            pick: list = []
            if conn:
                pick = [max(conn, key=lambda u: (conn[u], -pos[u]))]
            elif not node_set and cap - len(node_set) >= 2:
                best = None
                for u in unassigned:
                    for v, w in adj[u].items():
                        if v in unassigned and pos[u] < pos[v]:
                            key = (w, -pos[u], -pos[v])
                            if best is None or key > best[0]:
                                best = (key, u, v)
                if best is not None:
                    pick = [best[1], best[2]]
            if not pick:  # no connecting edge: an unassigned vertex at random
                pick = [list(unassigned)[rng.randrange(len(unassigned))]]
            for v in pick:
                node_set.append(v)
                out[v] = name
                del unassigned[v]
                conn.pop(v, None)
                for u, w in adj[v].items():
                    if u in unassigned and w > conn.get(u, -1.0):
                        conn[u] = w
    return out


def cut_weight(adj: Mapping[Hashable, Mapping[Hashable, float]], where: Mapping[Hashable, str]) -> float:
    """Total weight of edges whose ends sit on different servers (each edge once)."""
    tot = 0.0
    for u, nb in adj.items():
        for v, w in nb.items():
            if u < v and where[u] != where[v]:
                tot += w
    return tot


class FreeIndex:
    """Servers bucketed by free-GPU count (each bucket in node order), so choosing servers
    for a job costs O(buckets + servers taken), not a sort of the whole cluster."""

    def __init__(self, free: Mapping[str, int], rank: Mapping[str, int],
                 buckets: Optional[Mapping[int, Sequence[tuple[int, str]]]] = None):
        """``free``: server -> free GPUs.  ``buckets`` (optional): the same servers already
        bucketed as ``ClusterSnapshot.free_buckets`` keeps them (count -> ascending
        ``(rank, server)``), which saves the sort; it must describe ``free``."""
        self.rank, self.big = rank, len(rank)
        self.free = {m: c for m, c in free.items() if c > 0}
        self.buckets: dict[int, list] = {}
        if buckets is not None:
            self.buckets = {c: [m for _, m in b] for c, b in buckets.items() if b}
        else:
            for m in sorted(self.free, key=self._key):
                self.buckets.setdefault(self.free[m], []).append(m)
        self.total = sum(self.free.values())

    def _key(self, m):
        return (self.rank.get(m, self.big), m)

    def choose(self, n: int, most_available) -> list[tuple[str, int]]:
        """Servers and GPU counts covering ``n`` GPUs.

        ``most_available=True``: Algorithm 1 line 9 — servers with most free GPUs first
        (fewest servers).  ``False``: line 22 (fragmentation-aware) — servers with *least*
        free GPUs first, so the emptier servers stay free for communication-heavy jobs.
        ``"best-fit"``: the server with the fewest free GPUs that holds all ``n`` if there
        is one, else most free first (the project's consolidated choice, used by the
        baselines).  Ties by node order.  Each chosen server gives all its free GPUs except
        the last, which gives the rest.
        """
        if n > self.total:
            raise ValueError(f"{n} GPUs asked, {self.total} free")
        counts = sorted(c for c, ms in self.buckets.items() if ms)
        if most_available == "best-fit":
            for c in counts:
                if c >= n:
                    return [(self.buckets[c][0], n)]
            most_available = True
        out, left = [], n
        for c in (reversed(counts) if most_available else counts):
            for m in self.buckets[c]:
                take = min(left, c)
                out.append((m, take))
                left -= take
                if left == 0:
                    return out
        raise AssertionError("free counts out of step")  # pragma: no cover

    def take(self, servers: Sequence[tuple[str, int]]) -> None:
        for m, k in servers:
            c = self.free[m]
            self.buckets[c].remove(m)
            self.total -= k
            c -= k
            if c > 0:
                self.free[m] = c
                b = self.buckets.setdefault(c, [])
                bisect.insort(b, m, key=self._key)
            else:
                del self.free[m]


def choose_servers(free: Mapping[str, int], n: int, most_available,
                   rank: Mapping[str, int]) -> list[tuple[str, int]]:
    """One-off :meth:`FreeIndex.choose`."""
    return FreeIndex(free, rank).choose(n, most_available)
