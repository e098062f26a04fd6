"""Exact GPU mapping by integer linear programming (seed 003 §V-B 2-e, Table II's reference):
minimise the cut weight of a job graph over servers with given GPU counts, with
``scipy.optimize.milp`` (HiGHS).  Only for small graphs (tests, the Table II benchmark).

Variables: ``y[v,m]`` binary (vertex v on server m), ``s[e,m] <= y[u,m], y[v,m]`` (edge e
kept inside m).  Each vertex on one server, each server exactly its GPU count; maximise the
kept weight, i.e. minimise the cut.
"""
from __future__ import annotations

from typing import Hashable, Mapping, Sequence

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import lil_matrix


def exact_min_cut(adj: Mapping[Hashable, Mapping[Hashable, float]],
                  servers: Sequence[tuple[str, int]], time_limit: float = 60.0
                  ) -> tuple[float, dict[Hashable, str]]:
    """(minimum cut weight, vertex -> server) of ``adj`` over ``servers``."""
    verts = sorted(adj)
    edges = [(u, v, w) for u in verts for v, w in adj[u].items() if u < v]
    V, M, E = len(verts), len(servers), len(edges)
    ny = V * M
    n = ny + E * M
    c = np.zeros(n)
    for ei, (_, _, w) in enumerate(edges):
        c[ny + ei * M: ny + (ei + 1) * M] = -w
    A = lil_matrix((V + M + 2 * E * M, n))
    lo, hi = [], []
    r = 0
    for vi in range(V):
        A[r, vi * M:(vi + 1) * M] = 1
        lo.append(1), hi.append(1)
        r += 1
    for mi, (_, cap) in enumerate(servers):
        for vi in range(V):
            A[r, vi * M + mi] = 1
        lo.append(cap), hi.append(cap)
        r += 1
    idx = {v: i for i, v in enumerate(verts)}
    for ei, (u, v, _) in enumerate(edges):
        for mi in range(M):
            for x in (u, v):
                A[r, ny + ei * M + mi] = 1
                A[r, idx[x] * M + mi] = -1
                lo.append(-np.inf), hi.append(0)
                r += 1
    res = milp(c, constraints=LinearConstraint(A.tocsr(), lo, hi), integrality=np.ones(n),
               bounds=Bounds(0, 1), options={"time_limit": time_limit})
    if res.x is None:
        raise RuntimeError(f"ILP found no solution: {res.message}")
    where = {v: servers[int(np.argmax(res.x[i * M:(i + 1) * M]))][0] for i, v in enumerate(verts)}
    return sum(w for _, _, w in edges) + float(res.fun), where
