"""Optimus's and Themis's shortcut when the GPUs do not run out (policies/optimus.py and
policies/themis.py ``_uncontended``): where every job's own stop fits in the cluster, the
hand-out's order (Optimus's gain heap; Themis's rho heap and leftover draws) decides nothing,
and the shares are the stops.  Whole Plans against the heap versions kept in
reference_afs_speed.py (through test_elastic_differential's ``_reference_plan``) on
hypothesis snapshots, small contended ones and large uncontended ones, with the shortcut
both taken and declined; Optimus's per-job walk (rates not separated, remaining times
outside the safe range) forced by narrowing its bounds; and simulator runs on a lightly
loaded cluster."""
from __future__ import annotations

import math
from collections import Counter
from types import MappingProxyType

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import policies
import policies.optimus as optimus
import policies.themis as themis
from gimbalctl.cluster import parse_cluster
from gimbalctl.sim import SimConfig, simulate
from policies.model import ClusterSnapshot, Job, Node
from test_afs_handout_differential import big_snapshots
from test_afs_speed_differential import snapshots
from test_elastic_differential import MODELS, Differential, _jobs, _reference_plan
from test_sjf_differential import assert_same

NAMES = ("optimus", "themis")


def _counting(mp, seen: Counter):
    """Wrap both modules' ``_uncontended``, counting the calls that took the shortcut."""
    for name, mod in (("optimus", optimus), ("themis", themis)):
        inner = mod._uncontended

        def wrapped(*a, _inner=inner, _name=name, **k):
            out = _inner(*a, **k)
            seen[(_name, out is not None)] += 1
            return out
        mp.setattr(mod, "_uncontended", wrapped)


@pytest.mark.parametrize("narrow", [False, True])
def test_plans_match_the_heaps(narrow):
    """Small clusters (often contended) and large ones (1-6 jobs on 128-2,400 GPUs): the same
    Plans as the heap versions; each policy takes the shortcut and declines it.  ``narrow``:
    Optimus's separation bound set so high (and its safe range so narrow) that every job
    with a remaining time walks its gains as the heap does."""
    seen: Counter = Counter()

    @settings(max_examples=250, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data())
    def check(data):
        snap = data.draw(big_snapshots() if data.draw(st.booleans()) else snapshots())
        if isinstance(snap, tuple):
            snap = snap[0]
        for name in NAMES:
            pol = policies.get_policy(name)
            assert_same(pol.schedule(snap), _reference_plan(pol, snap))

    with pytest.MonkeyPatch.context() as mp:
        if narrow:
            mp.setattr(optimus, "_SEP", 10.0)
            mp.setattr(optimus, "_SAFE", (1e300, 1e300))
        _counting(mp, seen)
        check()
    print(dict(seen))
    for name in NAMES:
        assert seen[(name, True)] >= 20 and seen[(name, False)] >= 20, dict(seen)


def _snap(jobs, nodes=4, per=8):
    ns = tuple(Node(f"n{i}", per) for i in range(nodes))
    return ClusterSnapshot(0.0, ns, MappingProxyType({j.id: j for j in jobs}),
                           MappingProxyType({}), tuple(g for n in ns for g in n.gpus()),
                           MODELS.profiles, MODELS.memory)


def test_optimus_stops_by_hand():
    """A finished job (0 iterations left) stops at one GPU; a job with iterations left stops
    where the model's rate stops rising; an infinite remaining time declines the shortcut
    (the heap's keys would be NaN); every case as the heap decides."""
    app = "cifar10"
    batch = MODELS.iters_table[app][0][0] * 4
    done = Job("done", 0.0, 1, app, batch, total_iters=0.0)
    left = Job("left", 1.0, 1, app, batch, total_iters=1e6)
    snap = _snap([done, left])
    pol = policies.get_policy("optimus")
    plan = pol.schedule(snap)
    assert_same(plan, _reference_plan(pol, snap))
    assert plan.reasons["done"].numbers["decided_share"] == 1.0
    assert plan.reasons["left"].numbers["decided_share"] > 1.0
    assert plan.reasons["left"].numbers["marginal_gain_s"] == 0.0
    rates = optimus.Rates(snap)
    jobs = [done, left]
    cap = {j.id: rates.cap(j, 2) for j in jobs}
    assert optimus._uncontended(rates, jobs, 32, cap, {"done": 0.0, "left": math.inf},
                                lambda j, k: 0.0) is None
    # the stops do not fit: declined (the heap decides)
    assert optimus._uncontended(rates, jobs, 2, cap, {"done": 0.0, "left": 1e6},
                                lambda j, k: 0.0) is None


def test_unprofiled_job_declines_the_shortcut():
    """A job without a fitted profile (its rates optimistic, its cap the fair share) sends
    both policies down the heaps."""
    app = "cifar10"
    batch = MODELS.iters_table[app][0][0]
    jobs = [Job("a", 0.0, 1, app, batch, total_iters=500.0),
            Job("b", 1.0, 1, "no-such-app", batch, total_iters=500.0)]
    snap = _snap(jobs)
    seen: Counter = Counter()
    with pytest.MonkeyPatch.context() as mp:
        _counting(mp, seen)
        for name in NAMES:
            pol = policies.get_policy(name)
            assert_same(pol.schedule(snap), _reference_plan(pol, snap))
    assert seen == Counter({("optimus", False): 1, ("themis", False): 1})


@pytest.mark.parametrize("name", NAMES)
def test_lightly_loaded_simulator_runs(name):
    """30 jobs on 4x8: calls take the shortcut and decline it (bursts of arrivals); whole
    Plans equal the heap versions' at every call."""
    seen: Counter = Counter()
    with pytest.MonkeyPatch.context() as mp:
        _counting(mp, seen)
        pol = Differential(name)
        simulate(_jobs(30, seed=5), parse_cluster("4x8"), pol, MODELS,
                 SimConfig(interval=120.0, seed=3, reveal_lengths=pol.needs_lengths))
    print(dict(seen))
    assert pol.calls > 10 and seen[(name, True)] >= 10 and seen[(name, False)] >= 5


@pytest.mark.parametrize("name", NAMES)
def test_stops_summing_to_the_cluster_size(name):
    """Two jobs whose stops are their caps (GPU range 1-3, the model's rate still rising at 4
    GPUs): on 6 GPUs the stops fit exactly (the shortcut), on 5 they do not (the heaps
    decide); the same Plans as the heaps in both."""
    app = "cifar10"
    batch = MODELS.iters_table[app][0][0] * 8
    jobs = [Job(f"j{i}", float(i), 1, app, batch, total_iters=1e6, gpu_range=(1, 3))
            for i in range(2)]
    for sizes, took in (((4, 2), True), ((4, 1), False)):
        ns = tuple(Node(f"n{i}", c) for i, c in enumerate(sizes))
        snap = ClusterSnapshot(0.0, ns, MappingProxyType({j.id: j for j in jobs}),
                               MappingProxyType({}), tuple(g for n in ns for g in n.gpus()),
                               MODELS.profiles, MODELS.memory)
        rates = optimus.Rates(snap)
        assert rates.rate(jobs[0], 4) > rates.rate(jobs[0], 3) * (1 + 1e-9)
        seen: Counter = Counter()
        with pytest.MonkeyPatch.context() as mp:
            _counting(mp, seen)
            pol = policies.get_policy(name)
            plan = pol.schedule(snap)
        assert seen == Counter({(name, took): 1}), (sizes, seen)
        assert_same(plan, _reference_plan(pol, snap))
