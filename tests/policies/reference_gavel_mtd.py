"""Reference copy (test oracle) of policies/gavel_mtd.py with its dense LP matrix, before
the sparse one (test_gavel_mtd_differential.py).  Do not edit.

Gavel min-total-duration (makespan) on heterogeneous GPU types (seed 002 Table 3
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

from policies.base import Policy
from policies.gavel_rounds import iter_rate, run_round
from policies.model import ClusterSnapshot
from policies.typed_rounds import type_capacity


class RefGavelMinTotalDuration(Policy):
    name = "gavel-mtd"

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
        rows, rhs = [], []
        for i in range(nj):  # Σ_t X ≤ 1
            r = np.zeros(nv)
            r[i * nt:(i + 1) * nt] = 1.0
            rows.append(r)
            rhs.append(1.0)
        for k, t in enumerate(tnames):  # Σ_j n_j X ≤ G_t
            r = np.zeros(nv)
            for i, j in enumerate(jobs):
                r[i * nt + k] = j.num_gpus
            rows.append(r)
            rhs.append(types[t][0])
        for i in range(nj):  # rem_j z − Σ_t r X ≤ 0
            r = np.zeros(nv)
            r[i * nt:(i + 1) * nt] = -rate[i]
            r[-1] = rem[i]
            rows.append(r)
            rhs.append(0.0)
        bounds = [(0.0, 1.0 if rate[i // nt, i % nt] > 0 else 0.0) for i in range(nj * nt)] + [(0, None)]
        res = linprog(c, A_ub=np.array(rows), b_ub=np.array(rhs), bounds=bounds, method="highs")
        if res.status != 0:
            raise RuntimeError(f"gavel-mtd: LP failed ({res.message})")
        x = res.x[:-1].reshape(nj, nt)
        return {j.id: {t: float(x[i, k]) for k, t in enumerate(tnames) if x[i, k] > 1e-9}
                for i, j in enumerate(jobs)}

    def schedule(self, snap: ClusterSnapshot):
        jobs = sorted(snap.jobs.values(), key=lambda j: (j.submit_time, j.id))
        return run_round(snap, self.name, jobs, self.allocation(snap, jobs), "min-total-duration")


def one_type_sorted(rate, rem, gpus, cap):
    """one_type as it was before its knapsack looked at the first key before sorting
    (verbatim but for the name)."""
    n = len(rate)
    x = [0.0] * n
    pos = [i for i in range(n) if rate[i] > 0.0]
    if not pos or not cap > 0.0:
        return x
    if len(pos) == n and sum(gpus) <= cap:
        return [1.0] * n
    if len(pos) == n:
        z = min(min(r / m for r, m in zip(rate, rem)),
                cap / sum(g * m / r for r, m, g in zip(rate, rem, gpus)))
    else:
        z = 0.0
    left = cap
    for i in pos:
        v = rem[i] * z / rate[i]
        x[i] = v = v if v < 1.0 else 1.0
        left -= gpus[i] * v
    if left <= 0.0:
        return x
    for i in sorted(pos, key=lambda i: (-rate[i] / (rem[i] * gpus[i]), i)):
        need = gpus[i] * (1.0 - x[i])
        if need > left:
            v = x[i] + left / gpus[i]
            x[i] = v if v < 1.0 else 1.0
            break
        x[i] = 1.0
        left -= need
    return x

