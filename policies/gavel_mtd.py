"""Gavel min-total-duration (makespan) on heterogeneous GPU types (seed 002 Table 3
baseline ``min_total_duration``, after Narayanan et al., OSDI'20 §4.1).

Each round the LP over the active jobs

    maximise z  s.t.  Σ_t X[j][t] ≤ 1,   Σ_j n_j X[j][t] ≤ G_t,
                      Σ_t r[j][t] X[j][t] ≥ remaining_j · z,   X ≥ 0

(``r`` = iterations/s of job j as submitted on type t, ``z`` = 1 / makespan) gives the
time shares that finish every job soonest; :mod:`policies.gavel_rounds` serves them
round by round.  Needs job lengths (remaining iterations); a job with no known length
counts as one remaining iteration.  Solved with scipy's HiGHS.

Which optimum (our choice; neither paper says).  The optimum is rarely unique: once each
job has its share ``remaining_j · z* / r_j``, the capacity left over can go anywhere, and
a solver's pivoting decided where (another method, presolve setting or HiGHS release gave
other shares, so other round priorities and pre-emptions).  A second stage fixes it:
keeping ``z ≥ (1 − 10⁻⁶) z*`` (:data:`Z_SLACK`, on several types: HiGHS's own
feasibility tolerance is 10⁻⁷; the closed form keeps z* itself) it maximises
``Σ_j Σ_t r[j][t] X[j][t] / remaining_j`` — per job the fraction of its remaining work
done per second — so what is left goes to the jobs nearest to finishing.  That stage's
costs are scaled so the largest is 1, and both stages' makespan rows and z are scaled to
order 1, each makespan row by the job's own need (:func:`lp_scale`; the same optimum:
HiGHS's tolerances are absolute).  On one
GPU type both stages have a closed form (:func:`one_type`), used instead of the LPs; on
several types both are solved with HiGHS.  Where one GPU type has room for every job (the
usual round on a large cluster), every X is 1 and the round is served without the
allocation or a per-job reason (:meth:`GavelMinTotalDuration._whole`,
:func:`policies.gavel_rounds.run_round_whole`: the same Plan).  Over capacity on one type,
rounds of 256 jobs or more compute the lengths, the closed form and the priority keys
with array arithmetic in the same floats (:mod:`policies.gavel_mtd_arrays`).
"""
from __future__ import annotations

from math import inf, isfinite
from itertools import compress
from operator import attrgetter, is_, not_
from typing import Optional

from . import gavel_mtd_arrays as arrays
from .base import Policy
from .gavel_rounds import iter_rate, run_round, run_round_whole
from .model import ClusterSnapshot, JobState, SUBMIT_ORDER
from .plan import ReasonCode, make_plan, reason
from .registry import register
from .typed_rounds import keeps_own, node_memo, type_capacity


def _caps(types: dict) -> list:
    """(type, GPUs, most GPUs on one node) per GPU type, in type-name order (the LP's
    column order)."""
    return [(t, types[t][0], types[t][1]) for t in sorted(types)]


def _rate_row(snap: ClusterSnapshot, job, caps: list) -> list:
    """``job``'s iterations/s on each type of ``caps`` (0 where it asks more GPUs than
    the type has): a row of the LP's ``r``."""
    return [iter_rate(snap, job, t, per) if job.num_gpus <= g else 0.0 for t, g, per in caps]


_NGPU = attrgetter("num_gpus")
_APP = attrgetter("app")
_BATCH = attrgetter("global_batch")
_RUNNING = JobState.RUNNING
Z_SLACK = 1e-6  # the second stage keeps z >= (1 - Z_SLACK) z* (module docstring)


def one_type(rate: list, rem: list, gpus: list, cap: float) -> list:
    """Both stages in closed form on one GPU type of ``cap`` GPUs (lists over the jobs, in
    the LP's order: iterations/s, remaining iterations, GPUs; plain Python: a round has
    tens of jobs in simulation, where numpy's per-call cost was most of it).  Stage 1: with
    ``t_j = remaining_j / r_j`` (its run time alone), z* = min(min_j r_j / remaining_j,
    cap / Σ_j n_j t_j): a job cannot finish sooner than alone, nor all of them sooner
    than their GPU-seconds allow (0 where some job has rate 0: its row forces it).
    Stage 2 is then a fractional knapsack: every job gets ``remaining_j z* / r_j`` (z*
    itself: no slack is needed without a solver's tolerance), and what capacity is left
    raises jobs to 1 in decreasing ``r_j / (remaining_j n_j)`` (the objective per GPU),
    ties in the LP's order (submit time, id), the last one fractionally — the second
    stage's exact optimum.  Where every job has a rate and Σ_j n_j ≤ cap, every X is 1
    (both stages' optimum: X ≤ 1 bounds z by min r/remaining, and every cost is
    positive), returned as such: the knapsack's subtractions could round one below 1."""
    n = len(rate)
    x = [0.0] * n
    pos = [i for i in range(n) if rate[i] > 0.0]
    if not pos or not cap > 0.0:
        return x
    if len(pos) == n and sum(gpus) <= cap:  # all fit: X = 1 is both stages' optimum, exactly
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
    # by gain, descending; ties: LP order
    keys = [(-rate[i] / (rem[i] * gpus[i]), i) for i in pos]
    i = min(keys)[1]  # the order's first (the keys are distinct: i)
    need = gpus[i] * (1.0 - x[i])
    if need > left:  # the usual case over capacity (left is the rounding of z): no sort
        v = x[i] + left / gpus[i]
        x[i] = v if v < 1.0 else 1.0
        return x
    for _, i in sorted(keys):
        need = gpus[i] * (1.0 - x[i])
        if need > left:  # the first that does not fit whole: what is left
            v = x[i] + left / gpus[i]
            x[i] = v if v < 1.0 else 1.0
            break
        x[i] = 1.0
        left -= need
    return x


# lp_scale: the smallest need a makespan row is divided by (in units of the job's largest
# rate); below it the row keeps a w coefficient under 1 and X coefficients of at most 10⁴
NEED_FLOOR = 1e-4


def lp_scale(rate, rem) -> tuple:
    """(d, z_ub) for the LPs on several types: z = z_ub · w with z_ub = min_j r_j / remaining_j
    (r_j the job's largest rate; no job finishes sooner than on its fastest type alone, so
    w ≤ 1), and each job's makespan row divided by ``d_j`` = remaining_j · z_ub, its own
    need at w = 1, so the row reads ``w ≤ Σ_t r X / d_j``: the same LP, its z of order 1
    and every row's violation at X = 0 equal to w.  HiGHS's feasibility tolerance is 10⁻⁷
    absolute and z itself is 1 / makespan in seconds (10⁻⁴ for a 3-hour makespan, 10⁻⁷ at
    four months), so unscaled it could take z = 0 for a feasible z* (found by hypothesis:
    an 8-GPU job of 10⁷ iterations beside a short one).  Dividing the rows by the jobs'
    largest rates instead (the builds before 2026-12-01) left a short job's row at
    ``X ≥ 10⁻⁷ w`` beside a long one: within the tolerance, so that job got no share
    (hypothesis again: test_tiny_shares_on_two_types).

    A job whose need on its fastest type (remaining_j · z_ub / r_j, at most 1) is below
    :data:`NEED_FLOOR` has its row divided by ``r_j · NEED_FLOOR`` instead (our choice): the
    row's X coefficients stay at most 10⁴, since dividing by needs of 10⁻⁹ (jobs of 10⁹
    iterations beside short ones) gave coefficients HiGHS did not solve (status Unknown;
    hypothesis), and its violation at X = 0 is (need / NEED_FLOOR) · w, above the 10⁻⁷
    tolerance for every need above 10⁻¹¹ / w (w, the fraction of the bound z_ub that the
    optimum reaches, is near 1 unless the cluster is far over capacity; shares of 10⁻⁹ and
    less are cut from the allocation anyway).  Where z_ub is 0 (a job with no rate on any
    type, or an infinite length) the rows are divided by the largest rates (1 where a job
    has none): w has no bound from them then."""
    import numpy as np

    rmax = rate.max(axis=1) if rate.shape[1] else np.zeros(rate.shape[0])
    z_ub = float((rmax / rem).min())
    if z_ub > 0.0:
        d = rem * z_ub
        return np.where(d >= rmax * NEED_FLOOR, d, rmax * NEED_FLOOR), z_ub
    return np.where(rmax > 0.0, rmax, 1.0), z_ub


def second_stage(rate, rem, w: float, bounds):
    """Stage 2's costs and bounds for the LP of :meth:`GavelMinTotalDuration.allocation`
    (X row-major, then w = z / z_ub, :func:`lp_scale`): minimise ``−Σ r X / remaining``
    scaled so the largest cost is 1, w at least (1 − Z_SLACK) ``w`` (stage 1's)."""
    import numpy as np

    c = np.zeros(bounds.shape[0])
    g = (rate / rem[:, None]).reshape(-1)
    top = float(g.max()) if g.size else 0.0
    if top > 0.0:
        c[:-1] = -(g / top)
    b = bounds.copy()
    b[-1, 0] = max(0.0, w) * (1.0 - Z_SLACK)
    return c, b


def clip_to_rows(x, gpus, cap):
    """Both LPs' answer ``x`` (jobs x types), which HiGHS makes feasible to its absolute
    tolerance (10⁻⁷) only, brought inside the rows and bounds themselves (our choice): a
    negative share becomes 0, a job whose shares sum above 1 has them scaled to sum to 1,
    then a type whose jobs use more than its GPUs has its column scaled to fit.  Each step
    only lowers shares, so the earlier rows stay kept; the makespan rows move by the same
    10⁻⁷ order.  Found by hypothesis (2026-12-01): three 16-GPU jobs on two types of 16
    took 1 + 2.2·10⁻⁸ of a job's time; with a share of −1.2·10⁻⁹ (dropped from the
    allocation with the other shares ≤ 10⁻⁹) a type's other jobs used 1 + 10⁻⁹ of its GPUs.
    ``x`` is changed in place and returned."""
    x.clip(0.0, None, out=x)
    s = x.sum(axis=1)
    over = s > 1.0
    if over.any():
        x[over] /= s[over, None]
    used = (x * gpus[:, None]).sum(axis=0)
    over = used > cap
    if over.any():
        x[:, over] *= cap[over] / used[over]
    return x


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
        self._whole_memo: dict = {}  # _whole's checked views, across calls

    def allocation(self, snap: ClusterSnapshot, jobs,
                   rate_rows: Optional[dict] = None) -> dict[str, dict[str, float]]:
        """Job id -> {GPU type: X} (X > 1e-9 only): the two stages of the module docstring.
        On one GPU type :func:`one_type`'s closed form; on several, each stage's LP of
        :meth:`allocation_reference` with its arrays built with numpy and handed to the
        HiGHS call linprog makes (:mod:`policies.highs_direct`): the same c, CSC matrix
        (indptr / indices / data: per column the rows in increasing order, zeros dropped as
        ``put`` drops them), b_ub, bounds and options, so HiGHS returns the same x; where
        either stage is not linprog's plain success, :meth:`allocation_reference` is run.
        Rates are computed once per (application, GPUs, global batch) of the call:
        ``iter_rate`` reads nothing else of a job.  ``rate_rows``: (application, GPUs,
        global batch) -> that row (as :func:`_rate_row` makes it), rows :meth:`schedule`
        has already made this call; the missing ones are made and added.  Where an input
        is not finite, or the fast entry is unavailable on several types,
        :meth:`allocation_reference` (linprog then raises its own error).  The mappings
        are read-only: jobs with the same share may share one."""
        from .highs_direct import entry

        types = type_capacity(snap)
        tnames = sorted(types)
        nj, nt = len(jobs), len(tnames)
        if nj == 0:
            return {}
        caps = _caps(types)
        memo: dict = {} if rate_rows is None else rate_rows
        if nt == 1 and nj >= arrays.MIN_JOBS and type(snap) is ClusterSnapshot:
            shares = arrays.one_type_shares(snap, jobs, memo, caps, float(types[tnames[0]][0]),
                                            _rate_row)
            if shares is not None:
                return shares
        rows = []
        for j in jobs:
            key = (j.app, j.num_gpus, j.global_batch)
            r = memo.get(key)
            if r is None:
                r = memo[key] = _rate_row(snap, j, caps)
            rows.append(r)
        if type(snap) is ClusterSnapshot:
            # ``max(snap.remaining_iters(j) or 1.0, 1e-9)`` with ClusterSnapshot.completed's
            # arithmetic written out: the same floats, without two method calls per job
            now = snap.now
            rem_l = []
            for j in jobs:
                it = j.total_iters
                if it is None:
                    rem_l.append(1.0)  # max(None or 1.0, 1e-9)
                    continue
                if j.state is _RUNNING:
                    dt = now - j.as_of
                    if j.restore_left:
                        dt = max(0.0, dt - j.restore_left)
                    done = j.completed_iters + j.iter_rate * dt
                else:
                    done = j.completed_iters
                rem_l.append(max(max(0.0, it - done) or 1.0, 1e-9))
        else:
            rem_l = [max(snap.remaining_iters(j) or 1.0, 1e-9) for j in jobs]
        if not (all(map(isfinite, rem_l)) and all(isfinite(v) for r in rows for v in r)):
            return self.allocation_reference(snap, jobs)  # linprog's ValueError
        if nt == 1:  # jobs with all of the type share one mapping (run_round's memos)
            t0 = tnames[0]
            x1 = one_type([r[0] for r in rows], rem_l, [float(j.num_gpus) for j in jobs],
                          float(types[t0][0]))
            whole = {t0: 1.0}
            return {j.id: (whole if v == 1.0 else {t0: v} if v > 1e-9 else {})
                    for j, v in zip(jobs, x1)}
        import numpy as np  # here, not at import: listing policies stays light (start-up)
        rate = np.array(rows).reshape(nj, nt)
        rem = np.array(rem_l)
        gpus = np.array([float(j.num_gpus) for j in jobs])
        fast = entry()
        if fast is None:
            return self.allocation_reference(snap, jobs)
        nx = nj * nt
        nv = nx + 1  # X (row-major) then w = z / z_ub
        c = np.zeros(nv)
        c[-1] = -1.0
        d, z_ub = lp_scale(rate, rem)
        # column (i, k) of X: rows i (1), nj + k (n_i), nj + nt + i (−r_ik / d_i), in this
        # order; column w: rows nj + nt + i (rem_i z_ub / d_i); zeros left out (the entries
        # linprog keeps)
        ridx = np.empty((nj, nt, 3), dtype=np.int64)
        ridx[:, :, 0] = np.arange(nj, dtype=np.int64)[:, None]
        ridx[:, :, 1] = (nj + np.arange(nt, dtype=np.int64))[None, :]
        ridx[:, :, 2] = (nj + nt + np.arange(nj, dtype=np.int64))[:, None]
        vals = np.empty((nj, nt, 3))
        vals[:, :, 0] = 1.0
        vals[:, :, 1] = gpus[:, None]
        vals[:, :, 2] = -rate / d[:, None]
        zval = rem * z_ub / d
        keep = vals != 0.0
        zkeep = zval != 0.0
        indptr = np.zeros(nv + 1, dtype=np.int64)
        indptr[1:nx + 1] = np.cumsum(keep.sum(axis=2).reshape(-1))
        indptr[nv] = indptr[nx] + int(zkeep.sum())
        indices = np.concatenate((ridx[keep], (nj + nt + np.arange(nj, dtype=np.int64))[zkeep]))
        data = np.concatenate((vals[keep], zval[zkeep]))
        b_ub = np.array([1.0] * nj + [float(types[t][0]) for t in tnames] + [0.0] * nj)
        if not np.isfinite(b_ub).all():
            return self.allocation_reference(snap, jobs)  # linprog's ValueError
        bounds = np.zeros((nv, 2))
        bounds[:nx, 1] = np.where(rate.reshape(-1) > 0, 1.0, 0.0)
        bounds[nx, 1] = 1.0
        x = fast.solve(c, indptr, indices, data, b_ub, bounds)
        if x is None:  # not linprog's plain success: linprog itself (its answer or error)
            return self.allocation_reference(snap, jobs)
        c2, bounds2 = second_stage(rate, rem, float(x[-1]), bounds)
        x = fast.solve(c2, indptr, indices, data, b_ub, bounds2)
        if x is None:
            return self.allocation_reference(snap, jobs)
        x = clip_to_rows(x[:-1].reshape(nj, nt), gpus, b_ub[nj:nj + nt])
        ii, kk = np.nonzero(x > 1e-9)
        out: list[dict[str, float]] = [{} for _ in range(nj)]
        for i, k, v in zip(ii.tolist(), kk.tolist(), x[ii, kk].tolist()):
            out[i][tnames[k]] = v
        return {j.id: out[i] for i, j in enumerate(jobs)}

    def allocation_reference(self, snap: ClusterSnapshot, jobs) -> dict[str, dict[str, float]]:
        """Both stages' LPs through ``scipy.optimize.linprog``, on any number of GPU types
        (the fallback of :meth:`allocation` and its test oracle)."""
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
        nv = nj * nt + 1  # X (row-major) then w = z / z_ub (lp_scale)
        c = np.zeros(nv)
        c[-1] = -1.0
        d, z_ub = lp_scale(rate, rem)
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
        # an infinite length makes its rem·z_ub inf·0 = NaN: linprog's ValueError, unwarned
        with np.errstate(invalid="ignore"):
            zval = rem * z_ub / d
        for i in range(nj):  # (rem_j z − Σ_t r X) / d_j ≤ 0, z = z_ub w
            for k in range(nt):
                put(nj + nt + i, i * nt + k, -rate[i, k] / d[i])
            put(nj + nt + i, nv - 1, zval[i])
        rhs = [1.0] * nj + [float(types[t][0]) for t in tnames] + [0.0] * nj
        a_ub = coo_array((vals, (ri, ci)), shape=(2 * nj + nt, nv)).tocsr()
        bounds = [(0.0, 1.0 if rate[i // nt, i % nt] > 0 else 0.0) for i in range(nj * nt)] + [(0, 1.0)]
        res = linprog(c, A_ub=a_ub, b_ub=np.array(rhs), bounds=bounds, method="highs")
        if res.status != 0:
            raise RuntimeError(f"gavel-mtd: LP failed ({res.message})")
        # stage 2 (module docstring): the same rows, w kept, Σ r X / remaining maximised
        c2, bounds2 = second_stage(rate, rem, float(res.x[-1]),
                                   np.array([(lo, np.inf if hi is None else hi)
                                             for lo, hi in bounds], dtype=float))
        res = linprog(c2, A_ub=a_ub, b_ub=np.array(rhs), bounds=bounds2, method="highs")
        if res.status != 0:
            raise RuntimeError(f"gavel-mtd: LP failed ({res.message})")
        x = clip_to_rows(res.x[:-1].reshape(nj, nt), np.array([float(j.num_gpus) for j in jobs]),
                         np.array(rhs[nj:nj + nt]))
        return {j.id: {t: float(x[i, k]) for k, t in enumerate(tnames) if x[i, k] > 1e-9}
                for i, j in enumerate(jobs)}

    def _whole(self, snap: ClusterSnapshot, types: dict):
        """The Plan where one GPU type has room for every job of the snapshot and every
        running job keeps its GPUs (:func:`run_round_whole`), or None.  There every X is
        1 (:func:`one_type`'s first case, whatever the lengths, so none is read).  What
        :meth:`schedule` would do otherwise is left to it: a job with no rate or a
        non-finite one, a non-finite length (linprog's error), a running job that does
        not keep its GPUs.  Those checks read a job's view and the call's context only
        (profiles, speed table, node map, the type's GPUs), so a view that passed them is
        remembered by identity (views are immutable) while the context stays: a round
        checks only the views new since the last one."""
        ((t0, (cap, per, _)),) = types.items()
        gtype_of = node_memo(snap.nodes)[1]
        memo = self._whole_memo
        ctx = memo.get("ctx")
        if (ctx is None or ctx[0] is not snap.profiles or ctx[1] is not snap.gpu_types
                or ctx[2] is not gtype_of or ctx[3:] != (t0, cap, per)):
            memo.clear()
            memo["ctx"] = (snap.profiles, snap.gpu_types, gtype_of, t0, cap, per)
            memo["views"], memo["ok"] = {}, {}
        jobs = list(snap.jobs.values())
        if sum(map(_NGPU, jobs)) > cap:  # None whatever the views (asked first: overload)
            return None
        ids = list(map(id, jobs))
        if not all(map(is_, map(memo["views"].get, ids), jobs)):
            views, ok_of, caps = memo["views"], memo["ok"], [(t0, cap, per)]
            for j in jobs:
                if views.get(id(j)) is j:
                    continue
                key = (j.app, j.num_gpus, j.global_batch)
                ok = ok_of.get(key)
                if ok is None:
                    ok = ok_of[key] = 0.0 < _rate_row(snap, j, caps)[0] < inf
                it = j.total_iters
                if (not ok or (it is not None and not isfinite(it))
                        or (j.running and not keeps_own(j, gtype_of, t0))):
                    return None
        memo["views"] = dict(zip(ids, jobs))  # the views of this call only
        running = [j for j in jobs if j.running]
        waiting = [j for j in jobs if not j.running] if len(running) < len(jobs) else []
        return run_round_whole(snap, self.name, running, waiting, t0, "min-total-duration")

    def schedule(self, snap: ClusterSnapshot):
        """The LP over the jobs with a positive rate on some GPU type, served by
        :func:`run_round`.  A job with rate 0 on every type (more GPUs than any type has,
        or no throughput profile) is left out of the LP (our choice: the paper's LP
        assumes every job can run somewhere): in it, its row ``rem_j z ≤ 0`` would force
        z = 0, which makes every X optimal — all zero included — and idled the whole
        cluster.  Such a job waits: INFEASIBLE (in ``plan.infeasible``) where it asks more
        GPUs than any type has, WAIT_RESOURCES naming the missing rate otherwise."""
        types = type_capacity(snap)
        if len(types) == 1:
            plan = self._whole(snap, types)
            if plan is not None:
                return plan
        jobs = sorted(snap.jobs.values(), key=SUBMIT_ORDER)
        most = max((v[0] for v in types.values()), default=0)
        caps = _caps(types)
        rows: dict = {}  # (app, GPUs, batch) -> rate row, handed on to allocation
        ok_of: dict = {}
        # (application, GPUs, batch) per job; the rate row of each new key, once
        keys = list(zip(map(_APP, jobs), map(_NGPU, jobs), map(_BATCH, jobs)))
        for key, j in dict(zip(keys, jobs)).items():  # a row reads only the key's fields
            row = rows[key] = _rate_row(snap, j, caps)
            ok_of[key] = any(r > 0.0 for r in row)
        oks = list(map(ok_of.__getitem__, keys))
        if all(oks):
            lp_jobs, left = jobs, []
        else:
            lp_jobs = list(compress(jobs, oks))
            left = list(compress(jobs, map(not_, oks)))
        alloc = self.allocation(snap, lp_jobs, rows)
        if left:  # a running one stays in the round: with no share it is pre-empted there
            served = [j for j in jobs if j.id in alloc or j.running]
            left = [j for j in left if not j.running]
        else:
            served = jobs  # = lp_jobs, the list the shares were computed from (their memo)
        plan = run_round(snap, self.name, served, alloc, "min-total-duration")
        if not left:
            return plan
        reasons, infeasible, waiting = dict(plan.reasons), [], []
        for j in left:
            if j.num_gpus > most:
                infeasible.append(j.id)
                reasons[j.id] = reason(ReasonCode.INFEASIBLE,
                                       f"asks {j.num_gpus} GPUs, the largest GPU type has {most}")
            else:
                waiting.append(j.id)
                reasons[j.id] = reason(ReasonCode.WAIT_RESOURCES,
                                       f"no throughput for {j.app!r} on any GPU type it fits:"
                                       " left out of the min-total-duration LP")
        return make_plan(self.name, list(plan.actions), list(plan.order) + waiting, reasons,
                         list(plan.infeasible) + infeasible)
