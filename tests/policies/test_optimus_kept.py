"""Optimus's stops kept across calls (policies.optimus_kept): at every call of whole
simulations Optimus plans with them as without them (the full path: sort, remaining
iterations, ``_uncontended`` or the heap), numbers included; a job whose remaining iterations
leave ``_SAFE`` sends the call down the full path; the remaining iterations of one view never
grow with ``now`` (the argument for looking at a job only when its time has passed)."""
from __future__ import annotations

import dataclasses
from types import MappingProxyType
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import policies
from gimbalctl.cluster import parse_cluster
from gimbalctl.profiles import default_models
from gimbalctl.sim import SimConfig, simulate
from policies.elastic import Rates
from policies.model import Job, JobState
from policies.optimus import _separated, _structural_stop
from policies.optimus_kept import _At, KeptStops
from policy_probe import PolicyProbe, Recorder
from test_elastic_differential import _jobs

MODELS = default_models()


class _Checked(PolicyProbe):
    def __init__(self):
        super().__init__("optimus")
        self.ref = policies.get_policy("optimus")
        self.kept = 0

    def schedule(self, snap):
        with mock.patch.object(KeptStops, "shares", lambda self, snap, rates: None):
            want = self.ref.schedule(snap)
        got = self.inner.schedule(snap)
        self.kept += self.inner._kept.shares(snap, Rates(snap)) is not None
        assert got == want and dict(got.reasons) == dict(want.reasons)
        return got


@pytest.mark.parametrize("cluster,n", [("16x8", 60), ("4x8", 60), ("40x8", 120), ("8x4", 40)])
def test_optimus_plans_with_its_kept_stops_as_without(cluster, n):
    pol = _Checked()
    looks = []
    real = KeptStops._look

    def look(self, snap, job):
        looks.append((job.id, snap.now, job))
        return real(self, snap, job)
    with mock.patch.object(KeptStops, "_look", look):
        res = simulate(_jobs(n, seed=11), parse_cluster(cluster), pol, MODELS,
                       SimConfig(reveal_lengths=True))
    assert len(res._rows) == n and pol.kept > 0
    # some job was looked at again with the view it had (its time had passed)
    seen: dict = {}
    again = 0
    for jid, _, view in looks:
        again += seen.get(jid) is view
        seen[jid] = view
    assert again > 0


def _snapshot_with(job_change):
    rec = Recorder("optimus")
    simulate(_jobs(40, seed=3), parse_cluster("16x8"), rec, MODELS, SimConfig(reveal_lengths=True))
    snap = rec.seen[len(rec.seen) // 2]
    jobs = dict(snap.jobs)
    jid = next(j for j, v in jobs.items() if v.running and v.num_gpus > 1
               and _structural_stop(Rates(snap), v, Rates(snap).cap(v, 1), {})[0] > 1)
    jobs[jid] = job_change(jobs[jid])
    view = MappingProxyType(jobs)
    return dataclasses.replace(snap, jobs=view, job_changes=dataclasses.replace(
        snap.job_changes, source=view)), snap


def test_remaining_iterations_outside_safe_take_the_full_path():
    """A running job with 1e-120 iterations left (or none: r = 0.0) gets one GPU in the full
    path, not its stop, and one with 1e101 left has its gains walked there: the kept stops
    give way."""
    for left in (1e-120, 0.0, 1e101):
        snap, before = _snapshot_with(lambda j: dataclasses.replace(
            j, total_iters=j.completed_iters + left, iter_rate=0.0))
        assert KeptStops(_structural_stop, _separated).shares(before, Rates(before)) is not None
        ks = KeptStops(_structural_stop, _separated)
        assert ks.shares(snap, Rates(snap)) is None and ks.unsafe
        pol = _Checked()
        pol.schedule(snap)  # the full path's Plan, compared inside


def test_a_duration_estimate_takes_the_full_path():
    snap, _ = _snapshot_with(lambda j: dataclasses.replace(j, total_iters=None,
                                                           duration_estimate=3600.0))
    ks = KeptStops(_structural_stop, _separated)
    assert ks.shares(snap, Rates(snap)) is None and ks.bad


@settings(max_examples=300, deadline=None)
@given(total=st.floats(0, 1e12), done=st.floats(0, 1e12), rate=st.floats(0, 1e6),
       as_of=st.floats(0, 1e7), restore=st.floats(0, 600),
       t1=st.floats(0, 1e8), dt=st.floats(0, 1e8))
def test_remaining_iterations_of_one_view_never_grow_with_now(total, done, rate, as_of,
                                                              restore, t1, dt):
    job = Job("j", 0.0, 1, "resnet50", 32, total_iters=total, state=JobState.RUNNING,
              completed_iters=done, iter_rate=rate, as_of=as_of, restore_left=restore)
    t2 = t1 + dt
    assert _At(t2).remaining_iters(job) <= _At(t1).remaining_iters(job)


def _heap_hand_out(front, left, gain, shares, now):
    """The heap hand-out as Optimus.schedule writes it (the reference)."""
    import heapq
    heap = [(-now[j.id], i, j) for i, j in enumerate(front)]
    heapq.heapify(heap)
    while left > 0 and heap:
        g, i, j = heapq.heappop(heap)
        if g >= 0:
            break
        k = shares[j.id] + 1
        shares[j.id] = k
        left -= 1
        g = now[j.id] = gain(j, k)
        heapq.heappush(heap, (-g, i, j))


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_sorted_steps_hand_out_as_the_heap(data):
    """Gains per job drawn from a few values (ties), rising and falling, with zeros, NaN and
    negative values; where the shortcut answers (no NaN read) it is the heap's."""
    from types import SimpleNamespace

    from policies.optimus import _by_sorted_steps

    n = data.draw(st.integers(1, 8))
    vals = st.sampled_from([0.0, -1.0, 0.5, 1.0, 2.0, 3.0, float("nan")])
    tables = []
    for _ in range(n):
        t = data.draw(st.lists(vals, min_size=1, max_size=10))
        if data.draw(st.booleans()):  # no NaN
            t = [x for x in t if x == x] or [0.0]
        tables.append(t)
    front = [SimpleNamespace(id=f"j{i}") for i in range(n)]
    table = {j.id: t for j, t in zip(front, tables)}

    def gain(j, k):
        t = table[j.id]
        return t[k - 1] if k <= len(t) else 0.0
    left = data.draw(st.integers(0, 40))
    want_s, want_n = {j.id: 1 for j in front}, {j.id: gain(j, 1) for j in front}
    _heap_hand_out(front, left, gain, want_s, want_n)
    got_s, got_n = {j.id: 1 for j in front}, {j.id: gain(j, 1) for j in front}
    if _by_sorted_steps(front, left, gain, got_s, got_n):
        assert got_s == want_s
        assert repr(got_n) == repr(want_n)  # (NaN-safe)
    else:
        assert got_s == {j.id: 1 for j in front}  # nothing changed


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_sorted_steps_from_rate_tables_hand_out_as_the_heap(data):
    """The rate tables' path (``tabs``: a job's gains ``r / P[k] - r / P[k + 1]`` below its
    stop, 0.0 at it) hands out as the heap does with ``gain`` read the rates' way: rates
    rising by tiny and large steps (equal gains between jobs), remaining iterations from 0
    to huge and infinite (NaN gains: no answer), jobs without a table beside them."""
    from types import SimpleNamespace

    from policies.optimus import _by_sorted_steps

    n = data.draw(st.integers(1, 8))
    rises = st.sampled_from([1.0, 1.0 + 1e-15, 1.0 + 1e-12, 1.01, 1.5, 2.0])
    rems = st.sampled_from([0.0, 1e-300, 1.0, 3.0, 7.5e3, 1e12, 1e300, float("inf")])
    front = [SimpleNamespace(id=f"j{i}") for i in range(n)]
    rate, cap, rem, tabs = {}, {}, {}, {}
    for j in front:
        p = [0.0, data.draw(st.sampled_from([0.5, 1.0, 3.0]))]
        for m in data.draw(st.lists(rises, max_size=12)):
            p.append(p[-1] * m)
        p.append(p[-1] * data.draw(st.sampled_from([1.0, 0.9])))  # then flat or falling
        rate[j.id], cap[j.id] = p, data.draw(st.integers(1, len(p)))
        rem[j.id] = data.draw(rems)

    def gain(j, k):  # Optimus.schedule's gain, the rates' way
        if k >= cap[j.id]:
            return 0.0
        p = rate[j.id]
        p0, p1 = (p[k], p[k + 1]) if k + 1 < len(p) else (p[-1], p[-1])
        if p1 > p0:
            r = rem[j.id]
            return r / p0 - r / p1
        return 0.0
    for j in front:
        if data.draw(st.booleans()):  # _rate_table's (s, P) with its remaining iterations
            p, s = rate[j.id], 1
            while s < cap[j.id] and s + 1 < len(p) and p[s + 1] > p[s]:
                s += 1
            tabs[j.id] = (s, tuple(p[:s + 1]), rem[j.id])
    left = data.draw(st.integers(0, 40))
    want_s, want_n = {j.id: 1 for j in front}, {j.id: gain(j, 1) for j in front}
    _heap_hand_out(front, left, gain, want_s, want_n)
    got_s, got_n = {j.id: 1 for j in front}, {j.id: gain(j, 1) for j in front}
    plain_s, plain_n = dict(got_s), dict(got_n)
    ok = _by_sorted_steps(front, left, gain, got_s, got_n, tabs)
    assert ok == _by_sorted_steps(front, left, gain, plain_s, plain_n)
    if ok:
        assert got_s == want_s == plain_s
        assert repr(got_n) == repr(want_n) == repr(plain_n)
    else:
        assert got_s == {j.id: 1 for j in front}


def test_rate_tables_give_the_rates_gains():
    """_rate_table's lists give gain(j, k) of the rates for every k up to the stop, for
    every application and batch of the bundled models (on 4- and 8-GPU nodes, capped and
    not)."""
    from policies.optimus import _rate_table, _structural_stop
    from policies.optimus_kept import stop_memo
    from test_elastic_differential import _jobs as jobs_of

    for cluster in ("16x8", "8x4"):
        nodes = parse_cluster(cluster)
        for cap in (3, 64):
            seen = 0
            for job in jobs_of(60, seed=3):
                snap = _snapshot_of(job, nodes)
                rates = Rates(snap)
                s, P = _rate_table(rates, job, cap, {})
                assert s == _structural_stop(rates, job, cap, stop_memo(rates))[0]
                assert P[1:] == tuple(rates.rate(job, k) for k in range(1, s + 1))
                for r in (0.0, 1.0, 12345.678, 1e15):
                    for k in range(1, s + 1):
                        p, p1 = rates.rate(job, k), rates.rate(job, k + 1)
                        want = r / p - r / p1 if k < cap and p1 > p else 0.0
                        got = r / P[k] - r / P[k + 1] if k < s else 0.0
                        assert repr(got) == repr(want)
                seen += s > 1
            assert seen > 0


def _snapshot_of(job, nodes):
    from policies.model import ClusterSnapshot
    free = tuple(g for x in nodes for g in x.gpus())
    return ClusterSnapshot(0.0, nodes, MappingProxyType({job.id: job}), {}, free,
                           profiles=MODELS.profiles, memory=MODELS.memory)


@pytest.mark.parametrize("cluster,n", [("4x8", 60), ("3x8", 40), ("2x4", 30)])
def test_contended_optimus_plans_as_with_the_heap(cluster, n):
    """Whole simulations where the GPUs run out: every call's Plan with the sorted steps is
    the heap's (the shortcut patched off), numbers included."""
    import policies.optimus as optimus

    rec = Recorder("optimus")
    simulate(_jobs(n, seed=5), parse_cluster(cluster), rec, MODELS, SimConfig(reveal_lengths=True))
    ref = policies.get_policy("optimus")
    used = 0
    real = optimus._by_sorted_steps

    def counted(*a):
        nonlocal used
        ok = real(*a)
        used += ok and a[1] > 0
        return ok
    for snap in rec.seen:
        with mock.patch.object(optimus, "_by_sorted_steps", counted):
            got = policies.get_policy("optimus").schedule(snap)
        with mock.patch.object(optimus, "_by_sorted_steps", lambda *a: False):
            want = ref.schedule(snap)
        assert got == want and dict(got.reasons) == dict(want.reasons)
    assert used >= 5  # (calls the sort answered with GPUs to hand out)
