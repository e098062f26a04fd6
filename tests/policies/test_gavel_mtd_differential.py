"""gavel-mtd's allocation: the paper's LP optimum, then the documented second stage.

* every allocation is feasible and reaches the makespan optimum z* of the paper's LP as the
  older builds solved it (the dense one-stage LP kept in reference_gavel_mtd.py);
* on several GPU types, ``allocation`` (numpy-built arrays handed to HiGHS as linprog's
  wrapper hands them, policies/highs_direct.py) against ``allocation_reference`` (both
  stages through ``scipy.optimize.linprog``): every ``Highs`` object is recorded, and under
  both paths it must be handed the same model (every HighsLp field: same element types and
  bytes) and the same value of every option, and return the same x and row values, at
  each stage; the allocations are the same floats under the same keys in the same order;
* on one GPU type, the closed form (no solver at all) against both stages' LPs: the same
  z* and the same second-stage objective, within the solver's tolerance;
* on every call of simulator runs on three-type and one-type clusters, on
  hypothesis-random snapshots (jobs that fit no type, applications without a profile =
  zero rates, one job, many jobs, unknown / done / partly run lengths, a cluster without
  GPUs) and on the daemon benchmark's state; where the wrapper itself is called, it gets
  linprog's very arrays (dtype, shape, bytes) and options;
* the Plan around the allocation equals the older build's round with that allocation;
* linprog's status and message where HiGHS answers other than optimal or an answer fails
  linprog's check (at either stage); the fallback to linprog where the fast entry is
  unavailable (another scipy, a missing private name, a changed default) or an input is
  not finite."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import scipy
import scipy.optimize
import scipy.optimize._highspy._core as core
import scipy.optimize._linprog_highs as lh
from hypothesis import example, given, settings, strategies as st

import policies.highs_direct as hd
from policies.gavel_mtd import GavelMinTotalDuration, Z_SLACK, _caps, _rate_row
from policies.gavel_rounds import iter_rate
from policies.model import JobState, Node
from policies.plan import ReasonCode
from policies.typed_rounds import type_capacity
from reference_gavel_mtd import RefGavelMinTotalDuration
from test_similarity import APPS, M, job, snap
from test_sjf_differential import assert_same

FAST = scipy.__version__ in hd.VERIFIED  # the fast entry is expected to be taken
# looked up before any test patches scipy (the entry checks that linprog's wrapper is
# scipy's own; a recorder's stand-in would make it unavailable for the whole session)
assert (hd.entry() is not None) == FAST
ARGS = "c indptr indices data lhs rhs lb ub integrality options".split()


def same_args(a, b):
    """Two _highs_wrapper calls got the same arrays (dtype, shape, bytes) and options."""
    for name, x, y in zip(ARGS, a, b):
        if isinstance(y, np.ndarray):
            assert isinstance(x, np.ndarray), name
            assert (x.dtype, x.shape) == (y.dtype, y.shape), name
            assert x.tobytes() == y.tobytes(), name
        else:
            assert list(x.items()) == list(y.items()), name


def _order(sn):
    return sorted(sn.jobs.values(), key=lambda j: (j.submit_time, j.id))


_LP = ("num_col_", "num_row_", "col_cost_", "col_lower_", "col_upper_", "row_lower_",
       "row_upper_", "integrality_", "offset_", "sense_")
_MATRIX = ("format_", "num_col_", "num_row_", "start_", "index_", "value_")


def _lp_fields(lp):
    return ([(f, getattr(lp, f)) for f in _LP] +
            [("a_matrix_." + f, getattr(lp.a_matrix_, f)) for f in _MATRIX])


def _option_values(opts):
    return {a: getattr(opts, a) for a in dir(opts)
            if not a.startswith("_") and not callable(getattr(opts, a))}


class Recorder:
    """Records what HiGHS is handed (the HighsLp and HighsOptions of every Highs object's
    passModel / passOptions) and the solution it returns, plus every _highs_wrapper and
    linprog call; everything still runs."""

    def __init__(self, monkeypatch):
        self.wrapper, self.linprog, self.highs = [], 0, []
        wrapper, linprog = lh._highs_wrapper, scipy.optimize.linprog
        rec = self

        class Highs(core._Highs):
            def __init__(self):
                super().__init__()
                self.seen = {}
                rec.highs.append(self.seen)

            def passOptions(self, opts):
                self.seen["options"] = _option_values(opts)
                return super().passOptions(opts)

            def passModel(self, lp):
                self.seen["lp"] = _lp_fields(lp)
                return super().passModel(lp)

            def getSolution(self):
                sol = super().getSolution()
                self.seen["x"] = list(sol.col_value)
                self.seen["row"] = list(sol.row_value)
                return sol

        def rec_wrapper(*a):
            self.wrapper.append(tuple(x.copy() if isinstance(x, np.ndarray) else dict(x)
                                      for x in a))
            return wrapper(*a)

        def rec_linprog(*a, **kw):
            self.linprog += 1
            return linprog(*a, **kw)

        monkeypatch.setattr(core, "_Highs", Highs)
        monkeypatch.setattr(lh, "_highs_wrapper", rec_wrapper)
        monkeypatch.setattr(scipy.optimize, "linprog", rec_linprog)


@pytest.fixture
def rec(monkeypatch):
    return Recorder(monkeypatch)


def same_highs(a, b):
    """Two Highs runs were handed the same model and options and returned the same x."""
    assert a["options"] == b["options"]
    assert [f for f, _ in a["lp"]] == [f for f, _ in b["lp"]]
    for (f, x), (_, y) in zip(a["lp"], b["lp"]):
        assert type(x) is type(y), f
        if isinstance(y, np.ndarray):
            assert (x.dtype, x.shape, x.tobytes()) == (y.dtype, y.shape, y.tobytes()), f
        elif isinstance(y, list):  # vectors: exact, element types included
            assert [type(v) for v in x] == [type(v) for v in y], f
            assert np.array(x).tobytes() == np.array(y).tobytes(), f
        else:
            assert x == y, f
    assert np.array(a["x"]).tobytes() == np.array(b["x"]).tobytes()
    assert np.array(a["row"]).tobytes() == np.array(b["row"]).tobytes()


def same_alloc(got, want):
    assert got == want
    assert list(got) == list(want)
    for k, v in want.items():
        assert list(got[k].items()) == list(v.items())
        assert all(type(x) is float for x in got[k].values())


def measures(sn, jobs, alloc):
    """(z, objective, GPUs used per type, share per job) of an allocation: z = min over
    the jobs of Σ_t r X / remaining (1 / makespan), objective = the second stage's
    Σ r X / remaining over its largest coefficient; rates and remaining as the policy
    computes them."""
    types = type_capacity(sn)
    caps = _caps(types)
    z, obj, top = float("inf"), 0.0, 0.0
    used = {t: 0.0 for t in types}
    for j in jobs:
        row = dict(zip(sorted(types), _rate_row(sn, j, caps)))
        rem = max(sn.remaining_iters(j) or 1.0, 1e-9)
        x = alloc[j.id]
        assert all(v > 1e-9 and row[t] > 0.0 for t, v in x.items()), (j.id, x)
        done = sum(row[t] * v for t, v in x.items()) / rem
        z, obj = min(z, done), obj + done
        top = max([top] + [r / rem for r in row.values()])
        for t, v in x.items():
            used[t] += j.num_gpus * v
    return z, (obj / top if top > 0 else 0.0), used, {j.id: sum(alloc[j.id].values()) for j in jobs}


def assert_optimal(sn, jobs, got):
    """``got`` is feasible and its makespan is the paper's LP optimum (the one-stage
    dense LP of the older builds): on one type (the closed form, exact) to 10⁻⁶ of it —
    HiGHS's answer may overshoot by its tolerance (10⁻⁷, absolute, on each row); on
    several (both stages by HiGHS) to Z_SLACK and, as each job's row may fall short by the
    tolerance and its remaining iterations are at least 1, 2·10⁻⁷ absolute.  The old
    answer is one of the LP's optima, so the second stage's objective is at least its
    (less what the slack and tolerances move: as in :func:`assert_near`)."""
    z, obj, used, share = measures(sn, jobs, got)
    types = type_capacity(sn)
    assert all(v <= 1.0 + 1e-9 for v in share.values())
    assert all(used[t] <= types[t][0] * (1.0 + 1e-9) + 1e-9 for t in types)
    old = RefGavelMinTotalDuration().allocation(sn, jobs)
    z_old, obj_old, _, _ = measures(sn, jobs, old)
    gpus = sum(v[0] for v in types.values())
    assert obj >= obj_old - 2 * Z_SLACK * gpus - 1e-6, (obj, obj_old)
    if len(types) == 1:
        assert z >= z_old * (1.0 - 1e-6), (z, z_old)
    else:
        assert z >= z_old * (1.0 - 2 * Z_SLACK) - 2e-7, (z, z_old)


def assert_near(sn, jobs, got, want):
    """The closed form against both stages' LPs on one type: at least the LP's z (which
    keeps (1 − Z_SLACK) z*; that the closed form's is not above the optimum is its
    feasibility, :func:`assert_optimal`) and at least the LP's second-stage objective,
    less what the LP's slack frees: at most Z_SLACK of the type's GPUs, each worth at
    most 1 in the scaled objective."""
    zg, og, _, _ = measures(sn, jobs, got)
    zw, ow, _, _ = measures(sn, jobs, want)
    gpus = sum(v[0] for v in type_capacity(sn).values())
    assert zg >= zw * (1.0 - 1e-9) - 1e-12, (zg, zw)
    assert og >= ow - 2 * Z_SLACK * gpus - 1e-7, (og, ow)


def check(sn, r: Recorder, jobs=None):
    """allocation against allocation_reference on ``sn``; on several types HiGHS saw the
    same problem at each stage and the answers are the same; on one, no solver runs."""
    pol = GavelMinTotalDuration()
    jobs = _order(sn) if jobs is None else jobs
    w0, l0, h0 = len(r.wrapper), r.linprog, len(r.highs)
    got = pol.allocation(sn, jobs)
    fast = (len(r.wrapper) - w0, r.linprog - l0, len(r.highs) - h0)
    want = pol.allocation_reference(sn, jobs)
    if not jobs:
        same_alloc(got, want)
        return got
    assert (len(r.wrapper), r.linprog, len(r.highs)) == (w0 + fast[0] + 2, l0 + fast[1] + 2,
                                                         h0 + fast[2] + 2)
    assert_optimal(sn, jobs, got)
    if len(type_capacity(sn)) == 1:
        assert fast == (0, 0, 0)  # the closed form
        assert list(got) == [j.id for j in jobs]
        assert all(type(x) is float for v in got.values() for x in v.values())
        assert_near(sn, jobs, got, want)
        return got
    same_alloc(got, want)
    # the fast path: no linprog, no wrapper, a Highs run per stage (linprog's where not verified)
    assert fast == ((0, 0, 2) if FAST else (2, 2, 2))
    same_highs(r.highs[h0], r.highs[h0 + 2])  # stage 1: the fast run, then linprog's
    same_highs(r.highs[h0 + 1], r.highs[h0 + 3])  # stage 2
    return got


# ------------------------------------------------------------------ random snapshots
GPUS = [1, 1, 2, 4, 8, 16]


def _runs_somewhere(sn, j) -> bool:
    types = type_capacity(sn)
    return any(iter_rate(sn, j, t, v[1]) > 0.0 for t, v in types.items() if j.num_gpus <= v[0])


class RefRound(RefGavelMinTotalDuration):
    """The older build's round (every job in the LP, served by ``run_round``) with the
    allocation of today's, each job's mapping a copy of its own: what ``schedule`` adds
    around the allocation is compared, and so is the sharing of one mapping by the jobs
    with all of a type (run_round's memos by mapping)."""

    def allocation(self, sn, jobs):
        return {k: dict(v) for k, v in GavelMinTotalDuration().allocation(sn, jobs).items()}


def same_schedule(sn, nodes, jobs):
    """The plan equals the reference round's; where some job has rate 0 on every GPU type
    (in the LP its row forces z = 0), it equals the reference's plan for the other jobs,
    and each such job waits with its reason (INFEASIBLE, in ``plan.infeasible``, where no
    type has its GPU count)."""
    new, ref = GavelMinTotalDuration(), RefRound()
    plan = new.schedule(sn)
    left = [j for j in _order(sn) if not _runs_somewhere(sn, j)]  # in submit order
    if not left:
        assert_same(plan, ref.schedule(sn))
        return
    gone = {j.id for j in left}
    want = ref.schedule(snap(nodes, [j for j in jobs if j.id not in gone]))
    assert plan.actions == want.actions
    assert plan.order[:len(want.order)] == want.order
    most = max((v[0] for v in type_capacity(sn).values()), default=0)
    big = [j.id for j in left if j.num_gpus > most]
    assert list(plan.infeasible) == list(want.infeasible) + big
    assert set(plan.order[len(want.order):]) == gone - set(big)
    for j in left:
        assert plan.reasons[j.id].code == (ReasonCode.INFEASIBLE if j.id in big
                                           else ReasonCode.WAIT_RESOURCES)
    for jid, r in want.reasons.items():
        assert plan.reasons[jid] == r


@settings(max_examples=120, deadline=None)
@given(nv=st.integers(0, 3), nk=st.integers(0, 2), np_=st.integers(0, 1),
       per=st.sampled_from([1, 2, 4, 8]),
       specs=st.lists(st.tuples(st.sampled_from(APPS + ("no-such-app",)), st.sampled_from(GPUS),
                                st.sampled_from([32, 64, 128, 256]), st.floats(0, 100),
                                st.sampled_from([None, 0.0, 1.0, 1000.0, 1e7, 123.456]),
                                st.floats(0, 2000)),
                      min_size=1, max_size=40))
# found by hypothesis: z* ~ 1e-7 (an 8-GPU job of 10^7 iterations on K80s), HiGHS's
# absolute tolerance, so the unscaled LP took z = 0 and gave the short job a whole GPU
@example(nv=0, nk=1, np_=0, per=8, specs=[("bert", 8, 32, 0.0, 1e7, 0.0),
                                          ("cifar10", 1, 32, 0.0, 1000.0, 0.0)])
# found by a longer run (2026-12-01, lengths up to 10^9): with the rows divided by the jobs'
# largest rates, the answer over-filled a type (a row's tolerance on a 10^-9 scale)
@example(nv=2, nk=2, np_=0, per=4, specs=[("bert", 8, 32, 0.0, 1e7, 0.0)]
         + [("cifar10", 2, 32, 0.0, None, 0.0)] * 3
         + [("cifar10", 4, 32, 0.0, 1e9, 0.0), ("deepspeech2", 1, 256, 0.0, None, 0.0)])
# found by a longer run (2026-12-01, rows divided by each job's own need): HiGHS's answer,
# feasible to its 1e-7 tolerance, gave a job shares summing to 1 + 2.2e-8 (clip_to_rows)
@example(nv=2, nk=2, np_=0, per=8, specs=[("bert", 16, 32, 0.0, None, 0.0),
                                          ("bert", 16, 32, 0.0, 1e7, 0.0),
                                          ("cifar10", 16, 32, 0.0, 123.456, 0.0)])
# ... and with a share of -1.2e-9 (dropped with the shares <= 1e-9) a type's other jobs
# used 1 + 1e-9 of its GPUs
@example(nv=2, nk=2, np_=0, per=8, specs=[("bert", 16, 32, 0.0, None, 0.0),
                                          ("bert", 16, 32, 0.0, 1e9, 0.0),
                                          ("cifar10", 16, 32, 0.0, None, 0.0)])
# ... and jobs of 10^9 iterations beside short ones made rows of needs near 1e-9, whose
# coefficients HiGHS did not solve (status Unknown: a RuntimeError; lp_scale's NEED_FLOOR)
@example(nv=1, nk=1, np_=1, per=8, specs=[("bert", 1, 32, 0.0, None, 0.0)]
         + [("bert", 8, 32, 0.0, 1e9, 0.0)] * 2
         + [("cifar10", 1, 32, 0.0, None, 0.0), ("cifar10", 4, 32, 0.0, None, 0.0),
            ("cifar10", 8, 32, 0.0, 1e9, 0.0)])
def test_random_snapshots(nv, nk, np_, per, specs):
    nodes = tuple([Node(f"v{i}", per, "v100") for i in range(nv)] +
                  [Node(f"p{i}", per, "p100") for i in range(np_)] +
                  [Node(f"k{i}", per, "k80", 12288) for i in range(nk)]) or (Node("p0", per, "p100"),)
    jobs = [dataclasses.replace(job(i, app=a, n=n, batch=b, t=t), total_iters=it,
                                completed_iters=min(done, it or 0.0))
            for i, (a, n, b, t, it, done) in enumerate(specs)]
    sn = snap(nodes, jobs)
    with pytest.MonkeyPatch.context() as mp:
        check(sn, Recorder(mp))
    same_schedule(sn, nodes, jobs)


def test_tiny_shares_on_two_types():
    """Found by test_random_snapshots (2026-12-01): one K80 and one P100 GPU, five jobs of
    unknown length (one remaining iteration each) and one of 10^7 iterations.  With each
    makespan row divided by its job's largest rate (the builds before), the short jobs'
    rows read ``X ≥ 10⁻⁷ w``: within HiGHS's 10⁻⁷ feasibility tolerance, so X = 0 passed and
    a job got no share (z = 0 where z* = 1.8e-6).  lp_scale now divides each row by its
    job's own need: every job gets its share and z reaches z* (check's assert_optimal)."""
    nodes = (Node("p0", 1, "p100"), Node("k0", 1, "k80", 12288))
    specs = [("bert", None)] * 3 + [("cifar10", None)] * 2 + [("cifar10", 1e7)]
    jobs = [dataclasses.replace(job(i, app=a, n=1, batch=32, t=0.0), total_iters=it,
                                completed_iters=0.0)
            for i, (a, it) in enumerate(specs)]
    sn = snap(nodes, jobs)
    with pytest.MonkeyPatch.context() as mp:
        check(sn, Recorder(mp))


@settings(max_examples=40, deadline=None)
@given(nv=st.integers(0, 3), nk=st.integers(0, 2), per=st.sampled_from([1, 2, 4, 8]),
       specs=st.lists(st.tuples(st.sampled_from(APPS), st.sampled_from([1, 1, 2, 4, 8, 16]),
                                st.sampled_from([32, 64, 128, 256]), st.floats(0, 100)),
                      min_size=1, max_size=30))
def test_random_typed_clusters(nv, nk, per, specs):
    nodes = tuple([Node(f"v{i}", per, "v100") for i in range(nv)] +
                  [Node(f"k{i}", per, "k80", 12288) for i in range(nk)]) or (Node("p0", per, "p100"),)
    jobs = [job(i, app=a, n=n, batch=b, t=t) for i, (a, n, b, t) in enumerate(specs)]
    sn = snap(nodes, jobs)
    with pytest.MonkeyPatch.context() as mp:
        check(sn, Recorder(mp))
    same_schedule(sn, nodes, jobs)


def test_a_job_no_type_can_run_does_not_idle_the_cluster():
    """One job with more GPUs than any type has, or with no throughput profile, has rate 0
    everywhere; in the LP its row forced z = 0 and every job's X to 0 (no job started).
    It is left out: the others start, it waits with its reason."""
    nodes = (Node("v0", 4, "v100"), Node("k0", 4, "k80", 12288))
    base = [job(0), job(1, n=2), job(2, n=1)]
    for extra, code in ((job(3, n=16), ReasonCode.INFEASIBLE),
                        (dataclasses.replace(job(3), app="no-such-app"), ReasonCode.WAIT_RESOURCES)):
        sn = snap(nodes, base + [extra])
        assert not any(RefGavelMinTotalDuration().allocation(sn, _order(sn)).values())
        plan = GavelMinTotalDuration().schedule(sn)
        assert sorted(a.job_id for a in plan.starts()) == ["j0", "j1", "j2"]
        assert plan.reasons["j3"].code == code
        assert (plan.infeasible == ("j3",)) == (code == ReasonCode.INFEASIBLE)


def test_rates_made_once_per_call_and_handed_to_allocation(monkeypatch):
    """``schedule`` makes each (application, GPUs, batch) rate row once and hands the rows
    to ``allocation``, which makes none again: one ``iter_rate`` per signature and type
    that fits (the same Plan); ``allocation`` not handed rows makes its own."""
    import policies.gavel_mtd as gm
    nodes = (Node("v0", 4, "v100"), Node("p0", 8, "p100"), Node("k0", 2, "k80", 12288))
    jobs = [job(i, app=APPS[i % len(APPS)], n=GPUS[i % 5], batch=64, t=float(i % 7))
            for i in range(60)] + [job(60, n=16)]  # one that fits no type: its row too
    sn = snap(nodes, jobs)
    want = GavelMinTotalDuration().schedule(sn)
    same_schedule(sn, nodes, jobs)  # that Plan is the reference's
    calls = []

    def counted(s, j, t, per):
        calls.append((j.app, j.num_gpus, j.global_batch, t))
        return iter_rate(s, j, t, per)

    monkeypatch.setattr(gm, "iter_rate", counted)
    got = GavelMinTotalDuration().schedule(sn)
    assert len(calls) == len(set(calls))
    caps = type_capacity(sn)
    assert set(calls) == {(j.app, j.num_gpus, j.global_batch, t) for j in jobs
                          for t, (g, _, _) in caps.items() if j.num_gpus <= g}
    assert_same(got, want)
    lp_jobs = [j for j in _order(sn) if j.num_gpus <= 8]
    want = GavelMinTotalDuration().allocation_reference(sn, lp_jobs)
    calls.clear()  # allocation alone makes the rows it is not handed
    assert GavelMinTotalDuration().allocation(sn, lp_jobs) == want
    assert calls and len(calls) == len(set(calls))


@pytest.mark.parametrize("n", [1, 2, 300])
def test_one_and_many_jobs(rec, n):
    nodes = (Node("v0", 4, "v100"), Node("p0", 8, "p100"), Node("k0", 2, "k80", 12288))
    # every job fits a type (one that fits none has rate 0 everywhere: z = 0, X = 0)
    jobs = [job(i, app=APPS[i % len(APPS)], n=GPUS[i % 5], batch=64, t=float(i % 7))
            for i in range(n)]
    got = check(snap(nodes, jobs), rec)
    assert len(got) == n and sum(map(bool, got.values())) >= min(n, 3)


def test_running_jobs_and_no_gpus(rec):
    from policies.model import Allocation
    nodes = (Node("v0", 4, "v100"), Node("k0", 4, "k80", 12288))
    gpus = nodes[0].gpus()
    running = dataclasses.replace(job(0, n=2), state=JobState.RUNNING, start_time=0.0,
                                  allocation=Allocation(gpus[:2], 64, 1, None), iter_rate=3.0,
                                  as_of=10.0, completed_iters=100.0)
    check(snap(nodes, [running, job(1, n=1), job(2, n=8)], now=50.0), rec)
    check(snap((), [job(1, n=1), job(2, n=2)]), rec)  # no GPU type: only z
    assert check(snap(nodes, []), rec) == {}


# ------------------------------------------------------------------ simulator runs
class Both:
    """gavel-mtd in a simulator run; at every call the fast allocation is compared."""

    def __init__(self, r):
        self.inner, self.r, self.calls = GavelMinTotalDuration(), r, 0

    def __getattr__(self, attr):
        return getattr(self.inner, attr)

    def schedule(self, sn):
        check(sn, self.r)
        self.calls += 1
        return self.inner.schedule(sn)


@pytest.mark.parametrize("cluster,seed", [("2x2:v100,1x4:p100,2x4:k80", 1),
                                          ("2x2:v100,1x4:p100,2x4:k80", 7),
                                          ("1x8:v100,2x2:k80", 3), ("3x4:v100", 5)])
def test_every_call_of_a_simulator_run(rec, cluster, seed):
    from gimbalctl.cluster import parse_cluster
    from gimbalctl.hetero_workload import generate, jobs_from_rows
    from gimbalctl.sim import SimConfig, simulate

    nodes = parse_cluster(cluster)
    jobs = jobs_from_rows(generate(30, nodes, span_s=900.0, seed=seed, models=M,
                                   duration_range=(300.0, 3600.0)))
    pol = Both(rec)
    res = simulate(jobs, nodes, pol, M, SimConfig(interval=180.0, seed=seed, preempt_cost=10.0))
    assert res.jobs.end.notna().all()
    assert pol.calls > 10


# ------------------------------------------------------------------ daemon state
@pytest.mark.parametrize("nodes,seed", [(12, 0), (12, 1), (30, 2)])
def test_daemon_state(rec, nodes, seed):
    from daemon_pass import build
    sn, _ = build(nodes, 8, 5 * nodes, 10 * nodes, seed=seed)
    check(sn, rec)
    assert_same(GavelMinTotalDuration().schedule(sn), RefRound().schedule(sn))


# ------------------------------------------------------------------ the fallback
@pytest.mark.parametrize("how", ["version", "missing", "default"])
def test_fallback_when_the_fast_entry_is_unavailable(monkeypatch, how):
    monkeypatch.setattr(hd, "_entry", None)
    if how == "version":
        monkeypatch.setattr(scipy, "__version__", "1.10.0")
    elif how == "missing":  # linprog's HiGHS entry is no longer the wrapper replicated
        import scipy.optimize._linprog_highs as lh
        real = lh._highs_wrapper
        monkeypatch.setattr(lh, "_highs_wrapper", lambda *a: real(*a))
    else:  # a changed default of _linprog_highs
        monkeypatch.setitem(hd._DEFAULTS, "presolve", False)
    assert hd.entry() is None
    r = Recorder(monkeypatch)
    sn = _typed(40, seed=4)
    pol = GavelMinTotalDuration()
    got = pol.allocation(sn, _order(sn))
    assert r.linprog == 2 and len(r.wrapper) == 2  # through linprog, a call per stage
    same_alloc(got, pol.allocation_reference(sn, _order(sn)))
    same_args(r.wrapper[0], r.wrapper[2])
    same_args(r.wrapper[1], r.wrapper[3])
    from daemon_pass import build  # one type: the closed form needs no solver
    sn, _ = build(12, 8, 40, 120, seed=4)
    got = pol.allocation(sn, _order(sn))
    assert r.linprog == 4 and len(r.wrapper) == 4
    assert_optimal(sn, _order(sn), got)


def _typed(n, seed):
    """``n`` jobs of several applications and sizes on a three-type cluster."""
    import random
    rnd = random.Random(seed)
    nodes = (Node("v0", 4, "v100"), Node("p0", 8, "p100"), Node("k0", 2, "k80", 12288))
    jobs = [dataclasses.replace(job(i, app=rnd.choice(APPS), n=rnd.choice(GPUS[:5]), batch=64,
                                    t=float(rnd.randrange(20))),
                                total_iters=rnd.choice([None, 500.0, 5e4, 1e6]))
            for i in range(n)]
    return snap(nodes, jobs)


@pytest.mark.skipif(not FAST, reason=f"fast entry verified on scipy {hd.VERIFIED} only")
def test_fast_entry_taken_on_the_verified_scipy():
    assert hd.entry() is not None


def _outcome(fn, *a):
    try:
        return "ok", fn(*a)
    except Exception as e:  # noqa: BLE001 (the error is the outcome compared)
        return "raised", type(e), str(e)


@pytest.mark.parametrize("it,raises", [(float("inf"), True), (float("nan"), False), (-5.0, False)])
def test_non_finite_or_odd_lengths_as_linprog(rec, it, raises):
    """An infinite length reaches A_ub: linprog's ValueError, from linprog (fallback); a
    NaN or negative one is a remaining 0 -> 1 iteration, solved as usual."""
    nodes = (Node("v0", 4, "v100"),)
    sn = snap(nodes, [job(0), dataclasses.replace(job(1), total_iters=it)])
    pol = GavelMinTotalDuration()
    got = _outcome(pol.allocation, sn, _order(sn))
    want = _outcome(pol.allocation_reference, sn, _order(sn))
    assert (got[0] == "raised") == raises
    if raises:
        assert got == want
        assert got[1] is ValueError and rec.linprog == 2 and not rec.wrapper
    else:  # one type: the closed form, the LP's answer
        assert want[0] == "ok" and rec.linprog == 2
        assert_optimal(sn, _order(sn), got[1])
        assert_near(sn, _order(sn), got[1], want[1])


@pytest.mark.skipif(not FAST, reason=f"fast entry verified on scipy {hd.VERIFIED} only")
@pytest.mark.parametrize("n,seed,stage", [(40, 5, 1), (120, 6, 1), (40, 7, 2), (120, 8, 2)])
def test_no_optimal_answer_goes_through_linprog(monkeypatch, n, seed, stage):
    """Where the replicated run gives no optimal answer at either stage (what happens when
    HiGHS answers other than optimal), the allocation is linprog's own: both stages through
    linprog, the same result as the reference."""
    r = Recorder(monkeypatch)
    run, runs = hd._Entry._run, []

    def fails_at_stage(self, *a):
        runs.append(1)
        return None if len(runs) == stage else run(self, *a)

    monkeypatch.setattr(hd._Entry, "_run", fails_at_stage)
    sn = _typed(n, seed)
    pol = GavelMinTotalDuration()
    got = pol.allocation(sn, _order(sn))
    assert len(runs) == stage and (len(r.wrapper), r.linprog) == (2, 2)
    same_alloc(got, pol.allocation_reference(sn, _order(sn)))
    same_args(r.wrapper[0], r.wrapper[2])
    same_args(r.wrapper[1], r.wrapper[3])


@pytest.mark.skipif(not FAST, reason=f"fast entry verified on scipy {hd.VERIFIED} only")
@pytest.mark.parametrize("shift,fails", [(-1e-3, True), (-3e-4, False), (float("nan"), True),
                                         ("slack", True)])
def test_solution_checked_as_linprog_checks_it(monkeypatch, shift, fails):
    """An 'optimal' answer outside linprog's tolerance (x below its bound, a violated row,
    NaN; linprog's status 4) is not taken: linprog itself is run (here, where only the
    replicated run was bent, it succeeds); inside the tolerance the answer is taken."""
    run = hd._Entry._run

    def bent(self, *a):
        res = run(self, *a)
        if shift == "slack":
            res["slack"] = res["slack"] - 1e-3
        else:
            res["x"] = res["x"].copy()
            res["x"][0] = shift
        return res

    monkeypatch.setattr(hd._Entry, "_run", bent)
    r = Recorder(monkeypatch)
    sn = snap((Node("v0", 4, "v100"), Node("k0", 2, "k80", 12288)), [job(0), job(1, n=2)])
    got = _outcome(GavelMinTotalDuration().allocation, sn, _order(sn))
    assert got[0] == "ok" and r.linprog == (2 if fails else 0)
    if fails:
        same_alloc(got[1], GavelMinTotalDuration().allocation_reference(sn, _order(sn)))


@pytest.mark.parametrize("status", ["kInfeasible", "kTimeLimit", "kUnbounded"])
def test_other_highs_answers_raise_linprogs_error(monkeypatch, status):
    """HiGHS answering other than optimal (made up here: this LP is always feasible and
    bounded) gives the RuntimeError with linprog's message on both paths."""
    class Highs(core._Highs):
        def getModelStatus(self):
            return getattr(core.HighsModelStatus, status)

    monkeypatch.setattr(core, "_Highs", Highs)
    sn = snap((Node("v0", 4, "v100"), Node("k0", 2, "k80", 12288)), [job(0), job(1, n=2)])
    pol = GavelMinTotalDuration()
    got = _outcome(pol.allocation, sn, _order(sn))
    assert got[:2] == ("raised", RuntimeError)
    assert got == _outcome(pol.allocation_reference, sn, _order(sn))
