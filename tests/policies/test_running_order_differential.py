"""The running jobs' cache entries kept sorted by key (policies/running_order.py) and the
merge's "skip" block (policies/kept_order.py ``_block``) give exactly the Plans of the
per-job visit (``RunningKeys.sorted_path`` off) and of the old helpers
(tests/policies/reference_queue.py): both paths at every call of simulator runs whose
running jobs' keys straddle the first waiting keys, and of hypothesis snapshot sequences
(new views of running jobs, restores, resizes, short arrivals, older snapshots, a second
lineage).  The tests also assert the sorted path and the skip block are taken."""
from __future__ import annotations

from collections import Counter
from contextlib import ExitStack
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import policies
from gimbalctl.cluster import parse_cluster
from gimbalctl.sim import SimConfig, simulate
from policies import kept_order, running_keys, running_order
from policies.model import Node
from test_queue_differential import (MODELS, RUNKEYS, RunLineage, _jobs, _runkeys_id,
                                     snapshot_sequence,
                                     assert_same, reference_plan)


def _pair(name, kw):
    """The same policy twice: the sorted path (new) and the per-job visit (old)."""
    new, old = policies.get_policy(name, **kw), policies.get_policy(name, **kw)
    running_keys.running_keys_of(old).sorted_path = False
    running_keys.running_keys_of(new)
    return new, old


class Both:
    """Runs the new path and the old one at every snapshot the simulator makes (the
    simulator follows the new Plan), and now and then the old helpers too."""

    def __init__(self, name, kw):
        self.new, self.old = _pair(name, kw)
        self.name = name
        self.preemptive = self.new.preemptive
        self.needs_lengths = self.new.needs_lengths
        self.calls = 0

    def schedule(self, snap):
        plan = self.new.schedule(snap)
        assert_same(plan, self.old.schedule(snap))
        if self.calls % 7 == 0:
            assert_same(plan, reference_plan(self.new, snap))
        self.calls += 1
        return plan


def _counting():
    """Patches counting the sorted path's answers and the merge's blocks."""
    count = Counter()
    collect, block = running_order.collect_sorted, kept_order._block

    def counted_collect(*a):
        out = collect(*a)
        count["sorted", out is not None] += 1
        return out

    def counted_block(*a):
        out = block(*a)
        count[out] += 1
        return out

    return count, [mock.patch.object(running_keys, "collect_sorted", counted_collect),
                   mock.patch.object(kept_order, "_block", counted_block)]


@pytest.mark.parametrize("name,kw", RUNKEYS, ids=[_runkeys_id(n, kw) for n, kw in RUNKEYS])
@pytest.mark.parametrize("cluster,seed,n", [("2x8", 3, 160), ("4x8", 5, 400), ("1x8", 7, 120)])
def test_simulator_runs_both_paths(name, kw, cluster, seed, n):
    pol = Both(name, kw)
    count, patches = _counting()
    with ExitStack() as stack:
        for p in patches:
            stack.enter_context(p)
        simulate(_jobs(n, seed), parse_cluster(cluster), pol, MODELS,
                 SimConfig(interval=120.0, preempt_cost=5.0))
    assert pol.calls > 50
    # the sorted path answered most of the calls that got that far
    assert count["sorted", True] > 10 * count["sorted", False]
    assert count["sorted", True] > 50
    rk = pol.new._running_keys
    assert rk._order is not None or rk._seen is None
    if kw.get("min_run_s") is None and name in ("srtf", "srsf"):
        assert count[None] + count["prefix"] + count["skip"] > 0


def test_the_skip_block_is_taken():
    """Over the runs above, SRTF and SRSF took every kind of block (the skip one is new)."""
    seen = Counter()
    for name in ("srtf", "srsf"):
        for cluster, seed, n in [("2x8", 3, 160), ("4x8", 5, 400), ("1x8", 7, 120)]:
            pol = Both(name, {})
            count, patches = _counting()
            with ExitStack() as stack:
                for p in patches:
                    stack.enter_context(p)
                simulate(_jobs(n, seed, gpus=(1, 1, 2, 4, 8, 8)), parse_cluster(cluster), pol,
                         MODELS, SimConfig(interval=120.0, preempt_cost=5.0))
            seen.update(count)
    assert seen["skip"] > 0 and seen["prefix"] > 0 and seen[None] > 0, seen


@pytest.mark.parametrize("name,kw", RUNKEYS, ids=[_runkeys_id(n, kw) for n, kw in RUNKEYS])
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_both_paths_over_snapshot_sequences(name, kw, data):
    """One instance of each path over the same snapshot sequences: the same Plans."""
    draw = data.draw
    nodes = tuple(Node(f"n{i}", draw(st.sampled_from([2, 4, 8])))
                  for i in range(draw(st.integers(1, 3))))
    lines = [RunLineage(nodes), RunLineage(nodes)]
    new, old = _pair(name, kw)
    for snap in snapshot_sequence(draw, lines, 16, 5, 10):
        plan = new.schedule(snap)
        assert_same(plan, old.schedule(snap))
        assert_same(plan, reference_plan(new, snap))


@settings(max_examples=300, deadline=None)
@given(falls=st.lists(st.booleans(), max_size=60), data=st.data())
def test_keep_equals_the_lists_built_anew(falls, data):
    """``RunningOrder.keep`` (in place for a few dropped entries, else built anew) leaves
    the aligned lists and the count of non-falling entries as a build from the kept
    entries alone."""

    class V:
        def __init__(self, i):
            self.id = f"v{i}"

    ents = [(V(i), (float(i), f"v{i}"), 0.0, float(i) * 2, falling, None)
            for i, falling in enumerate(falls)]
    order = running_order.RunningOrder(list(ents), 0.0)
    n = len(ents)
    # mostly a few dropped (deleted in place), sometimes many (built anew)
    dropped = data.draw(st.sets(st.integers(0, max(n - 1, 0)), max_size=min(n, 9) if n else 0)
                        if data.draw(st.integers(0, 3)) else
                        st.sets(st.integers(0, max(n - 1, 0)), max_size=n))
    mask = [i not in dropped for i in range(n)]
    order.keep(iter(mask))  # a one-pass iterable, as the callers pass
    expect = running_order.RunningOrder([e for e, m in zip(ents, mask) if m], 0.0)
    for name in ("ents", "keys", "views", "ids", "untils", "nonfalling", "view_of"):
        assert getattr(order, name) == getattr(expect, name), name
    assert expect.nonfalling == sum(1 for e, m in zip(ents, mask) if m and not e[4])


@pytest.mark.parametrize("name", ["srtf", "tiresias"])
def test_the_order_is_the_cache_sorted(name):
    """After every call the kept order is sorted by key, its aligned lists agree, and each
    entry is one the cache made for that very view (a key exact or a bound at ``now``)."""
    pol = Both(name, {})
    checked = Counter()
    remember = running_keys.RunningKeys.remember

    def checked_remember(self, snap, running, *a):
        remember(self, snap, running, *a)
        o = self._order
        if o is None or not self.sorted_path:
            return
        checked["calls"] += 1
        assert o.keys == sorted(o.keys)
        assert o.keys == [e[1] for e in o.ents]
        assert o.views == [e[0] for e in o.ents]
        assert o.ids == [e[0].id for e in o.ents]
        assert o.untils == [float("inf") if e[4] else e[3] for e in o.ents]
        assert o.nonfalling == sum(1 for e in o.ents if not e[4])
        assert sorted(o.view_of) == sorted(o.ids)
        assert all(o.view_of[v.id] is v for v in o.views)
        # the views are this snapshot's: the next call looks only at the ids its record
        # names since (None: an order made from the cache, not by ``collect_sorted``)
        assert o.jseen is None or o.jseen is snap.job_changes.log
        checked["record"] += o.jseen is not None
        assert {j.id for j in running} == set(o.ids) and len(o.ids) == len(running)
        assert all(snap.jobs[j.id] is j for j in o.views)
        assert all(e[2] <= snap.now == o.now for e in o.ents)

    with mock.patch.object(running_keys.RunningKeys, "remember", checked_remember):
        simulate(_jobs(200, 11), parse_cluster("2x8"), pol, MODELS,
                 SimConfig(interval=120.0, preempt_cost=5.0))
    assert checked["calls"] > 50 and checked["record"] > checked["calls"] / 2


@pytest.mark.parametrize("name", ["srtf", "srsf"])
@pytest.mark.parametrize("cluster,seed,n", [("2x8", 3, 160), ("1x8", 7, 120)])
def test_mixed_horizons(name, cluster, seed, n):
    """Falling and non-falling entries in one order (a horizon that calls the keys of
    jobs with an odd last digit exact at ``now`` only, not falling: still true for
    SRTF/SRSF): the per-entry branch of the sorted path, ranked entries between the two
    first waiting keys, and its rebuilds."""
    from policies import running_keys as rkmod

    falling = rkmod.falling_horizon

    def mixed(snap):
        inner = falling(snap)

        def horizon(job, key):
            u, f = inner(job, key)
            return u, f and int(job.id[-1]) % 2 == 0

        return horizon

    pol = Both(name, {})
    count, patches = _counting()
    with ExitStack() as stack:
        for p in patches:
            stack.enter_context(p)
        stack.enter_context(mock.patch.object(rkmod, "falling_horizon", mixed))
        simulate(_jobs(n, seed, gpus=(1, 1, 2, 4, 8, 8)), parse_cluster(cluster), pol,
                 MODELS, SimConfig(interval=120.0, preempt_cost=5.0))
    assert count["sorted", True] > 50
    assert 0 < pol.new._running_keys._order.nonfalling < len(pol.new._running_keys._order.ids) \
        or count["skip"] + count["prefix"] + count[None] > 0
