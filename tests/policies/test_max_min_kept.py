"""Max-Min's demands kept across calls (policies.max_min_kept): at every call of whole
simulations the kept shares, where they are given, are the full path's (sort, caps,
water-filling), and they are given only where every job gets its demand."""
from __future__ import annotations

import dataclasses
import math
from unittest import mock

import pytest

import policies
from gimbalctl.cluster import parse_cluster
from gimbalctl.profiles import default_models
from gimbalctl.sim import SimConfig, simulate
from policies import elastic
from policies.elastic import UNPROFILED, Rates
from policies.max_min import _demand, full_shares
from policies.max_min_kept import KeptDemands
from policies.model import Frozen, JobChanges
from policy_probe import PolicyProbe, Recorder
from test_elastic_differential import _jobs

MODELS = default_models()


class _Checked(PolicyProbe):
    def __init__(self):
        super().__init__("max-min")
        self.kept = self.full = self.filled = 0

    def schedule(self, snap):
        rates = Rates(snap)
        want = full_shares(snap, rates)
        got = self.inner._kept.shares(snap, rates)
        M, n = snap.total_gpus, len(want)
        dem = {j: _demand(rates, snap.jobs[j], rates.cap(snap.jobs[j], 1), M) for j in want}
        if got is None:
            filled = self.inner._kept.filled(snap, rates)
            if filled is None:
                self.full += 1
            else:  # the water-filling from the kept demands: at most M jobs, not all met
                self.filled += 1
                assert list(filled.items()) == list(want.items())
                assert n <= M and want != dem
            # only where some job is below its demand (or a demand sits at the probe bound)
            assert (n > M or want != dem or M - n + 1 in dem.values()
                    or snap.job_changes is None)
        else:
            self.kept += 1
            assert list(got.items()) == list(want.items()) and want == dem
        return self.inner.schedule(snap)


@pytest.mark.parametrize("cluster,n", [("16x8", 60), ("4x8", 60), ("3x8", 40), ("40x8", 120),
                                       ("2x8", 80), ("1x8", 30)])
def test_every_simulated_call_gives_the_full_paths_shares(cluster, n):
    pol = _Checked()
    res = simulate(_jobs(n, seed=11), parse_cluster(cluster), pol, MODELS, SimConfig())
    assert len(res._rows) == n
    assert pol.kept > 0
    if cluster in ("4x8", "3x8", "2x8"):
        assert pol.filled > 0  # contended: the water level binds at some calls
    if cluster == "2x8":
        assert pol.full > 0  # more jobs than GPUs at some calls
    plain = simulate(_jobs(n, seed=11), parse_cluster(cluster), policies.get_policy("max-min"),
                     MODELS, SimConfig())
    assert plain._rows == res._rows


def test_an_unprofiled_job_or_no_record_takes_the_full_path():
    rec = Recorder("max-min")
    simulate(_jobs(40, seed=3), parse_cluster("16x8"), rec, MODELS, SimConfig())
    seen = rec.seen
    snap = seen[len(seen) // 2]
    kd = KeptDemands(_demand)
    assert kd.shares(snap, Rates(snap)) == full_shares(snap, Rates(snap))
    jid = next(iter(snap.jobs))
    other = dataclasses.replace(snap, predictors={**snap.predictors, UNPROFILED: frozenset({jid})})
    assert kd.shares(other, Rates(other)) is None  # its cap is its fair share: full path
    bare = dataclasses.replace(snap, job_changes=None)
    assert kd.shares(bare, Rates(bare)) is None


def test_a_demand_cut_at_the_probe_bound_is_probed_again():
    """A demand probed up to M - n + 1 and cut there is looked at again when n falls."""
    rec = Recorder("max-min")
    simulate(_jobs(30, seed=5), parse_cluster("1x8"), rec, MODELS, SimConfig())
    seen = rec.seen
    checked = cut = 0
    kd = KeptDemands(_demand)
    for snap in seen:
        rates = Rates(snap)
        was_cut = bool(kd.cut)
        got = kd.shares(snap, rates)
        if got is not None:
            checked += 1
            cut += was_cut
            assert got == full_shares(snap, rates)
    assert checked > 0 and cut > 0


class _PlansChecked(PolicyProbe):
    """A policy with kept demands (Themis, AFS-P) at every call with them and without them
    (the full path: for Themis the peaks, ``_uncontended`` or the heaps; for AFS-P the
    candidates and the hand-out): the same Plan, numbers included."""

    def __init__(self, name):
        super().__init__(name)
        self.ref = policies.get_policy(name)
        self.kept = 0

    def schedule(self, snap):
        with mock.patch.object(KeptDemands, "shares", lambda self, snap, rates: None):
            want = self.ref.schedule(snap)
        self.kept += self.inner._kept.shares(snap, Rates(snap)) is not None
        got = self.inner.schedule(snap)
        assert got == want and dict(got.reasons) == dict(want.reasons)
        return got


@pytest.mark.parametrize("name", ["themis", "afs-p", "afs-l"])
@pytest.mark.parametrize("cluster,n", [("16x8", 60), ("4x8", 60), ("40x8", 120)])
def test_plans_with_kept_demands_as_without(name, cluster, n):
    pol = _PlansChecked(name)
    res = simulate(_jobs(n, seed=11), parse_cluster(cluster), pol, MODELS, SimConfig())
    assert len(res._rows) == n and pol.kept > 0


def test_afs_p_leaves_a_job_a_second_gpu_doubles_to_the_full_path():
    """Where a second GPU at least doubles some job's rate, AFS-P does not give every job one
    GPU first: its kept demands give way to the full path (Max-Min's do not)."""
    from policies import afs_p

    rec = Recorder("afs-p")
    simulate(_jobs(40, seed=3), parse_cluster("16x8"), rec, MODELS, SimConfig())
    snap = rec.seen[len(rec.seen) // 2]
    kd = KeptDemands(_demand, also=afs_p._one_gpu_first)
    assert kd.shares(snap, Rates(snap)) is not None
    doubled = next(iter(snap.jobs.values()))
    real = Rates.rate

    def rate(self, job, k):  # the first job's second GPU doubles its rate
        r = real(self, job, k)
        return 2.5 * real(self, job, 1) if job.id == doubled.id and k == 2 else r
    elastic._MEMO.clear()  # (the rates' memos are kept across calls: none made here stays)
    try:
        with mock.patch.object(Rates, "rate", rate):
            kd = KeptDemands(_demand, also=afs_p._one_gpu_first)
            assert kd.shares(snap, Rates(snap)) is None
            assert KeptDemands(_demand).shares(snap, Rates(snap)) is not None
            pol = _PlansChecked("afs-p")
            pol.schedule(snap)
            assert pol.kept == 0
    finally:
        elastic._MEMO.clear()


def test_themis_strict_demands_leave_a_ranged_job_to_the_full_path():
    """A job with a GPU range (Themis's first hand-out ignores its cap) or a rate that is not
    finite and positive up to its demand sends Themis down its full path; Max-Min keeps it."""
    rec = Recorder("themis")
    simulate(_jobs(40, seed=3), parse_cluster("16x8"), rec, MODELS, SimConfig())
    seen = rec.seen
    snap = seen[len(seen) // 2]
    strict, plain = KeptDemands(_demand, strict=True), KeptDemands(_demand)
    assert strict.shares(snap, Rates(snap)) == plain.shares(snap, Rates(snap)) is not None
    jid = next(iter(snap.jobs))
    jobs = dict(snap.jobs)
    jobs[jid] = dataclasses.replace(jobs[jid], gpu_range=(1, 64))
    items = snap.job_changes.log._items
    items.append(jid)
    ranged = dataclasses.replace(snap, jobs=jobs,
                                 job_changes=JobChanges(log=Frozen(items), source=jobs))
    assert strict.shares(ranged, Rates(ranged)) is None
    assert plain.shares(ranged, Rates(ranged)) is not None
    job = snap.jobs[jid]
    rates = Rates(snap)
    with mock.patch.object(Rates, "rate", lambda self, j, k: math.nan):
        assert not KeptDemands(_demand, strict=True)._rates_finite(rates, job, 2)
    assert KeptDemands(_demand, strict=True)._rates_finite(rates, job, 2)


def test_jobs_met_out_of_submit_order_are_kept_in_it():
    """A snapshot whose job map is not in submit order (the simulator's is): the kept
    shares still come in submit order, the full path's."""
    rec = Recorder("max-min")
    simulate(_jobs(40, seed=3), parse_cluster("16x8"), rec, MODELS, SimConfig())
    snap = max(rec.seen, key=lambda s: len(s.jobs))
    assert len(snap.jobs) >= 3
    jobs = dict(reversed(list(snap.jobs.items())))
    back = dataclasses.replace(snap, jobs=jobs,
                               job_changes=JobChanges(log=Frozen([]), source=jobs))
    got = KeptDemands(_demand).shares(back, Rates(back))
    assert got is not None and list(got.items()) == list(full_shares(back, Rates(back)).items())


def _twins(n, seed):
    """Pairs of jobs alike in all but their ids (one submit time, application, batch and
    length): their ``len(1)`` tie while both wait, so stage one's tie-break decides."""
    out = []
    for j in _jobs(n, seed):
        out.append(j)
        out.append(dataclasses.replace(j, id=j.id + "b"))
    return out


@pytest.mark.parametrize("cluster,jobs", [("40x8", _jobs(120, seed=11)),
                                          ("16x8", _twins(30, seed=4)),
                                          ("6x8", _twins(20, seed=9))])
def test_afs_l_plans_from_kept_demands_as_from_the_walk(cluster, jobs):
    """AFS-L's Plans where the kept demands answer (its stage one a sort by len(1), ties to
    the later job in submit order) are the full path's; the kept path answers at some
    calls, and on the contended cluster the full path at others."""
    from policies.afs_l import AfsL

    pol = _PlansChecked("afs-l")
    real, inner = AfsL._uncontended_plan, pol.schedule
    used = [0, 0]
    calls = []
    pol.schedule = lambda snap: calls.append(snap) or inner(snap)

    def counted(self, *a):
        plan = real(self, *a)
        used[plan is None] += 1
        return plan
    with mock.patch.object(AfsL, "_uncontended_plan", counted):
        res = simulate(jobs, parse_cluster(cluster), pol, MODELS, SimConfig())
    assert len(res._rows) == len(jobs) and used[0] > 0
    if cluster == "6x8":
        assert pol.kept < len(calls)


def test_afs_l_job_without_a_length_takes_the_full_path():
    """A job whose length is unknown (no iterations, no estimate: len(1) infinite) makes the
    full path's stage one the plain walk; the kept path gives way to it."""
    from policies.afs_l import AfsL

    rec = Recorder("afs-l")
    simulate(_jobs(40, seed=3), parse_cluster("16x8"), rec, MODELS, SimConfig())
    snap = rec.seen[len(rec.seen) // 2]
    pol = AfsL()
    rates = Rates(snap)
    assert pol._kept.shares(snap, rates) is not None
    assert pol._uncontended_plan(snap, rates, pol._kept.shares(snap, rates),
                                 lambda j: j.total_iters) is not None
    jid = next(iter(snap.jobs))
    jobs = dict(snap.jobs)
    jobs[jid] = dataclasses.replace(jobs[jid], total_iters=None, duration_estimate=None)
    items = snap.job_changes.log._items
    items.append(jid)
    unknown = dataclasses.replace(snap, jobs=jobs,
                                  job_changes=JobChanges(log=Frozen(items), source=jobs))
    rates = Rates(unknown)
    kept = pol._kept.shares(unknown, rates)
    assert kept is not None  # (its demand does not read its length)
    assert pol._uncontended_plan(unknown, rates, kept, lambda j: math.inf) is None
    probe = _PlansChecked("afs-l")
    probe.schedule(unknown)


class _LengthsChecked(PolicyProbe):
    """AFS-L where, at every call with kept demands, the kept lengths' order (arrays) is the
    per-job order (Python floats), and each job's length on arrays is its Python length."""

    def __init__(self):
        super().__init__("afs-l")
        from policies.afs_lengths import KeptLengths

        self.lens = KeptLengths()
        self.kd = KeptDemands(_demand, also=__import__("policies.afs_l").afs_l._one_gpu_first)
        self.same = self.restoring = 0
        self.laid = [0, 0]  # calls that found the columns in the kept order, and not

    def schedule(self, snap):
        from policies.afs_l import AfsL

        rates = Rates(snap)
        kept = self.kd.shares(snap, rates)
        if kept is not None:
            if self.same % 3 == 1:  # (asked in another order: the columns move)
                self.lens.order(snap, rates, list(reversed(kept)))
            self.lens.update(snap, rates)
            self.laid[list(kept) != self.lens.ids] += 1
            got = self.lens.order(snap, rates, list(kept))
            want = AfsL._by_lengths(snap, rates, kept, snap.remaining_iters, {})
            if got is not None:
                assert want is not None and got == list(want)
                self.same += 1
                self.restoring += any(snap.jobs[j].restore_left for j in kept)
        return self.inner.schedule(snap)


@pytest.mark.parametrize("cfg", [SimConfig(), SimConfig(resize_cost=30.0, preempt_cost=60.0)])
def test_afs_l_lengths_on_arrays_are_the_per_job_lengths(cfg):
    pol = _LengthsChecked()
    res = simulate(_twins(40, seed=2), parse_cluster("12x8"), pol, MODELS, cfg)
    assert len(res._rows) == 80 and pol.same > 20
    assert min(pol.laid) > 0, pol.laid  # (columns read as they lie, and put in order)
    if cfg.resize_cost:
        assert pol.restoring > 0  # (restores under way: the restore_left arithmetic)


def test_afs_l_lengths_give_way_where_numpy_and_python_differ():
    """A NaN restore (Python's max(0.0, nan) is 0.0, numpy's maximum is NaN), an unknown
    total, a snapshot without a record: no order from the arrays."""
    from policies.afs_lengths import KeptLengths

    rec = Recorder("afs-l")
    simulate(_jobs(40, seed=3), parse_cluster("16x8"), rec, MODELS, SimConfig())
    snap = next(s for s in rec.seen[len(rec.seen) // 2:]
                if any(j.running for j in s.jobs.values()))
    ids = sorted(snap.jobs, key=lambda j: (snap.jobs[j].submit_time, j))
    kl = KeptLengths()
    assert kl.order(snap, Rates(snap), ids) is not None
    jid = next(j for j in ids if snap.jobs[j].running)
    for change in ({"restore_left": math.nan}, {"total_iters": None}):
        jobs = dict(snap.jobs)
        jobs[jid] = dataclasses.replace(jobs[jid], **change)
        items = snap.job_changes.log._items
        items.append(jid)
        other = dataclasses.replace(snap, jobs=jobs,
                                    job_changes=JobChanges(log=Frozen(items), source=jobs))
        assert KeptLengths().order(other, Rates(other), ids) is None
        assert kl.order(other, Rates(other), ids) is None  # (kept: the record names it)
    assert kl.order(dataclasses.replace(snap, job_changes=None), Rates(snap), ids) is None
