"""Gavel min-total-duration (makespan) on heterogeneous GPU types (seed 002 Table 3
baseline ``min_total_duration``, after Narayanan et al., OSDI'20 §4.1).

Each round the LP over the active jobs

    maximise z  s.t.  Σ_t X[j][t] ≤ 1,   Σ_j n_j X[j][t] ≤ G_t,
                      Σ_t r[j][t] X[j][t] ≥ remaining_j · z,   X ≥ 0

(``r`` = iterations/s of job j as submitted on type t, ``z`` = 1 / makespan) gives the
time shares that finish every job soonest; :mod:`policies.gavel_rounds` serves them
round by round.  Needs job lengths (remaining iterations); a job with no known length
counts as one remaining iteration.  Solved with scipy's HiGHS.
"""
from __future__ import annotations

from .base import Policy
from .gavel_rounds import iter_rate, run_round
from .model import ClusterSnapshot
from .registry import register
from .typed_rounds import type_capacity


@register("gavel-mtd")
class GavelMinTotalDuration(Policy):
    """Gavel min-total-duration: LP time shares over GPU types minimising makespan, in rounds."""

    preemptive = True
    rounds_only = True  # Gavel's mechanism decides at round boundaries only
    needs_lengths = True

    def __init__(self, round_length: float = 180.0):
        if not round_length > 0:
            raise ValueError(f"gavel-mtd: round_length must be > 0 seconds, not {round_length!r}")
        self.round_length = float(round_length)

    def allocation(self, snap: ClusterSnapshot, jobs) -> dict[str, dict[str, float]]:
        import numpy as np  # here, not at import: listing policies stays light (start-up)
        from scipy.optimize import linprog
        from scipy.sparse import coo_array

        types = type_capacity(snap)
        tnames = sorted(types)
        nj, nt = len(jobs), len(tnames)
        if nj == 0:
            return {}
        rate = np.array([[iter_rate(snap, j, t, types[t][1]) if j.num_gpus <= types[t][0] else 0.0
                          for t in tnames] for j in jobs])
        rem = np.array([max(snap.remaining_iters(j) or 1.0, 1e-9) for j in jobs])
        nv = nj * nt + 1  # X (row-major) then z
        c = np.zeros(nv)
        c[-1] = -1.0
        # A_ub as a sparse matrix (2 nj + nt rows of nv columns would be ~3.6 GB dense at
        # 15,000 jobs); the same non-zero entries as the dense rows, so HiGHS gets the same
        # CSC input (linprog converts a dense A_ub to CSC dropping its zeros)
        ri, ci, vals = [], [], []

        def put(row, col, v):
            if v != 0.0:
                ri.append(row)
                ci.append(col)
                vals.append(float(v))

        for i in range(nj):  # Σ_t X ≤ 1
            for k in range(nt):
                put(i, i * nt + k, 1.0)
        for k in range(nt):  # Σ_j n_j X ≤ G_t
            for i, j in enumerate(jobs):
                put(nj + k, i * nt + k, float(j.num_gpus))
        for i in range(nj):  # rem_j z − Σ_t r X ≤ 0
            for k in range(nt):
                put(nj + nt + i, i * nt + k, -rate[i, k])
            put(nj + nt + i, nv - 1, rem[i])
        rhs = [1.0] * nj + [float(types[t][0]) for t in tnames] + [0.0] * nj
        a_ub = coo_array((vals, (ri, ci)), shape=(2 * nj + nt, nv)).tocsr()
        bounds = [(0.0, 1.0 if rate[i // nt, i % nt] > 0 else 0.0) for i in range(nj * nt)] + [(0, None)]
        res = linprog(c, A_ub=a_ub, b_ub=np.array(rhs), bounds=bounds, method="highs")
        if res.status != 0:
            raise RuntimeError(f"gavel-mtd: LP failed ({res.message})")
        x = res.x[:-1].reshape(nj, nt)
        return {j.id: {t: float(x[i, k]) for k, t in enumerate(tnames) if x[i, k] > 1e-9}
                for i, j in enumerate(jobs)}

    def schedule(self, snap: ClusterSnapshot):
        jobs = sorted(snap.jobs.values(), key=lambda j: (j.submit_time, j.id))
        return run_round(snap, self.name, jobs, self.allocation(snap, jobs), "min-total-duration")
