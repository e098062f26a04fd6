"""The elastic policies' shortcut when the GPUs do not run out (policies/optimus.py and
policies/themis.py ``_uncontended``, policies/afs_core.py ``_to_stops`` for AFS-L and AFS-P):
where every job's own stop fits in the cluster, the hand-out's order (Optimus's gain heap;
Themis's rho heap and leftover draws; Algorithm 1's TOPPRIORITY walks once every job holds a
GPU) decides nothing, and the shares are the stops.  AFS's counts and picks against
reference_afs_handout.py on hypothesis job sets (test_afs_handout_differential's generator).  Whole Plans against the heap versions kept in
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
import policies.afs_core as afs_core
import policies.optimus as optimus
import policies.themis as themis
from gimbalctl.cluster import parse_cluster
from gimbalctl.sim import SimConfig, simulate
from policies.max_min_kept import KeptDemands
from policies.model import ClusterSnapshot, Job, Node
import reference_afs_handout as ref_handout
from test_afs_handout_differential import _cands, _result, big_snapshots, cand_sets
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
        # (Themis's kept demands answer the uncontended calls of a simulation before
        # ``_uncontended`` is asked: off here; tests/policies/test_max_min_kept.py checks them)
        mp.setattr(KeptDemands, "shares", lambda self, snap, rates: None)
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


def _counting_stops(mp, seen: Counter):
    inner = afs_core._to_stops

    def wrapped(live, m):
        out = inner(live, m)
        seen[("afs", out)] += 1
        return out
    mp.setattr(afs_core, "_to_stops", wrapped)


def test_afs_counts_and_picks_match_the_walks():
    """AFS-L's and AFS-P's counts and picks on hypothesis job sets (1-9 jobs, 1-2,400 GPUs,
    shapes that rise, plateau, fall, jump, vanish or go negative): the walks' results, with
    the shortcut taken and declined."""
    seen: Counter = Counter()

    @settings(max_examples=400, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(case=cand_sets())
    def check(case):
        proto, total, seed = case
        new, old = _cands(proto), _cands(proto)
        afs_core.afs_p_shares(new, total, seed)
        ref_handout.afs_p_shares(old, total, seed)
        assert _result(new) == _result(old)
        new, old = _cands(proto), _cands(proto)
        afs_core.afs_l_shares(new, total)
        ref_handout.afs_l_shares(old, total)
        assert _result(new) == _result(old)

    with pytest.MonkeyPatch.context() as mp:
        _counting_stops(mp, seen)
        check()
    print(dict(seen))
    assert seen[("afs", True)] >= 15 and seen[("afs", False)] >= 50, dict(seen)


def test_afs_stops_summing_to_what_is_left():
    """Two jobs whose rates rise (less than doubling at two GPUs) up to their caps of 3: after
    stage one gives each a GPU, 4 GPUs left is exactly what they need (the shortcut), 3 is one short (the walks decide); either way
    the counts and picks of the reference walks."""
    proto = [("concave", 1.0, 0.1, 1, 500.0, 3), ("concave", 2.0, 0.1, 1, 900.0, 3)]
    for total, took in ((6, True), (5, False)):
        seen: Counter = Counter()
        for shares, ref in ((lambda c, t: afs_core.afs_l_shares(c, t),
                             lambda c, t: ref_handout.afs_l_shares(c, t)),
                            (lambda c, t: afs_core.afs_p_shares(c, t, 0),
                             lambda c, t: ref_handout.afs_p_shares(c, t, 0))):
            new, old = _cands(proto), _cands(proto)
            with pytest.MonkeyPatch.context() as mp:
                _counting_stops(mp, seen)
                shares(new, total)
            ref(old, total)
            assert _result(new) == _result(old)
        assert seen == Counter({("afs", took): 2}), (total, seen)
        if took:
            assert [c.cnt for c in new] == [3, 3]


def test_afs_stop_ignores_gains_within_the_margin():
    """A job whose rate rises from 1 to 2 GPUs, then by a relative 1e-12 per GPU, stops at 2
    (Cand.can_grow's 1e-9 margin), as in the walks."""
    def flatish(k):
        top = min(k, 2) / (1.0 + 0.1 * min(k, 2))
        return top * (1.0 + 1e-12 * max(0, k - 2))

    def make():
        return [afs_core.Cand("flatish", 100.0, flatish, 8),
                afs_core.Cand("rising", 100.0, lambda k: k / (1.0 + 0.1 * k), 4)]
    seen: Counter = Counter()
    new, old = make(), make()
    with pytest.MonkeyPatch.context() as mp:
        _counting_stops(mp, seen)
        afs_core.afs_l_shares(new, 16)
    ref_handout.afs_l_shares(old, 16)
    assert _result(new) == _result(old) and seen == Counter({("afs", True): 1})
    assert [c.cnt for c in new] == [2, 4]
