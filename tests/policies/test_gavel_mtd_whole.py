"""gavel-mtd's round where one GPU type has room for every job
(``GavelMinTotalDuration._whole`` and ``policies.gavel_rounds.run_round_whole``) against
the full path (the allocation, then ``run_round``), which tests/policies/
test_gavel_mtd_differential.py checks against the older build's round.

* at every call of simulator runs on one-type clusters, light (most calls take the whole
  round) and loaded (some do not), one policy object throughout (its memo of checked views
  across calls), the Plan equals a fresh object's full path;
* on hypothesis-random one-type snapshots: jobs waiting, running as decided, running with
  another batch or GPU count (they do not keep their GPUs: the full path), jobs of no
  profile or more GPUs than the type has, unknown, infinite and NaN lengths; each object
  asked again with the same views at a later time, with some views replaced, and on
  another node tuple (its memo's context changes);
* the one-type closed form gives X = 1 exactly when all jobs fit."""
from __future__ import annotations

import dataclasses
from types import MappingProxyType

import pytest
from hypothesis import given, settings, strategies as st

from policies.gavel_mtd import GavelMinTotalDuration, one_type
from reference_gavel_mtd import one_type_sorted
from policies.model import Allocation, JobState, Node
from test_similarity import APPS, M, TYPES, job, snap
from test_sjf_differential import assert_same


class Slow(GavelMinTotalDuration):
    """The full path only."""

    def _whole(self, sn, types):
        return None


class Counted(GavelMinTotalDuration):
    """Counts the calls the whole round answered and the ones it left to the full path."""

    def __init__(self):
        super().__init__()
        self.whole = self.full = 0

    def _whole(self, sn, types):
        plan = super()._whole(sn, types)
        if plan is None:
            self.full += 1
        else:
            self.whole += 1
        return plan


def same(plan, want):
    assert_same(plan, want)
    assert plan == want  # Plan equality is by content, the shared reason segment included


def same_call(pol, sn):
    """``pol``'s Plan for ``sn`` is the full path's, or both raise the same error (an
    infinite length: linprog's ValueError)."""
    try:
        want = Slow().schedule(sn)
    except ValueError as e:
        with pytest.raises(ValueError) as got:
            pol.schedule(sn)
        assert str(got.value) == str(e)
        return
    same(pol.schedule(sn), want)


class Both:
    """The counted object in a simulator run; at every call a fresh full path beside it."""

    def __init__(self):
        self.inner, self.calls = Counted(), 0

    def __getattr__(self, attr):
        return getattr(self.inner, attr)

    def schedule(self, sn):
        plan = self.inner.schedule(sn)
        same(plan, Slow().schedule(sn))
        self.calls += 1
        return plan


@pytest.mark.parametrize("cluster,njobs,span,seed", [("4x8:v100", 30, 3600.0, 1),
                                                     ("2x4:k80", 30, 900.0, 2),
                                                     ("1x4:v100", 25, 900.0, 3)])
def test_every_call_of_a_simulator_run(cluster, njobs, span, seed):
    from gimbalctl.cluster import parse_cluster
    from gimbalctl.hetero_workload import generate, jobs_from_rows
    from gimbalctl.sim import SimConfig, simulate

    nodes = parse_cluster(cluster)
    jobs = jobs_from_rows(generate(njobs, nodes, span_s=span, seed=seed, models=M,
                                   duration_range=(300.0, 3600.0)))
    pol = Both()
    res = simulate(jobs, nodes, pol, M, SimConfig(interval=180.0, seed=seed, preempt_cost=10.0))
    assert res.jobs.end.notna().all()
    assert pol.calls > 10 and pol.inner.whole > 0 and pol.inner.full > 0


def _running(j, gpus, batch=None):
    return dataclasses.replace(j, state=JobState.RUNNING, start_time=j.submit_time,
                               allocation=Allocation(tuple(gpus), 32, 1, None, (), batch),
                               iter_rate=2.0, as_of=j.submit_time, completed_iters=10.0)


SLOW_FIRST = dataclasses.replace(TYPES, per_app=MappingProxyType(
    {**TYPES.per_app, (APPS[0], "v100"): 0.0}))
KINDS = ["wait", "wait", "run", "run", "run", "batch", "count"]


@st.composite
def states(draw):
    per = draw(st.sampled_from([1, 2, 4, 8]))
    nodes = tuple(Node(f"v{i}", per, "v100") for i in range(draw(st.integers(1, 4))))
    if draw(st.booleans()):  # every case the whole round must leave to the full path
        spec = st.tuples(st.sampled_from(APPS + ("no-such-app",)),
                         st.sampled_from([1, 1, 1, 2, 4, 8, 64]), st.sampled_from([32, 64, 128]),
                         st.floats(0, 500),
                         st.sampled_from([None, 1000.0, 1e7, float("inf"), float("nan")]),
                         st.sampled_from(KINDS))
    else:  # only jobs it can answer (it still must where they fit)
        spec = st.tuples(st.sampled_from(APPS), st.sampled_from([1, 1, 1, 2, 4]),
                         st.sampled_from([32, 64, 128]), st.floats(0, 500),
                         st.sampled_from([None, 1000.0, 1e7]), st.sampled_from(KINDS[:5]))
    specs = draw(st.lists(spec, min_size=0, max_size=24))
    free = [g for n in nodes for g in n.gpus()]
    jobs = []
    for i, (app, n, batch, t, it, kind) in enumerate(specs):
        j = dataclasses.replace(job(i, app=app, n=n, batch=batch, t=t), total_iters=it)
        if kind != "wait":
            k = n + (1 if kind == "count" else 0)
            if k <= len(free):
                gpus, free = free[:k], free[k:]
                j = _running(j, gpus, batch * 2 if kind == "batch" else None)
        jobs.append(j)
    return nodes, jobs


@settings(max_examples=300, deadline=None)
@given(state=states(), later=st.floats(0, 1000), keep=st.integers(0, 24))
def test_random_one_type_snapshots(state, later, keep):
    nodes, jobs = state
    pol = Counted()
    same_call(pol, snap(nodes, jobs, now=600.0))
    # the same views later (memo hits), some replaced by equal copies (misses), some gone
    views = [j if i % 2 else dataclasses.replace(j) for i, j in enumerate(jobs[:keep])]
    k80 = tuple(Node(n.name, n.num_gpus, "k80", 12288) for n in nodes)
    for sn in (snap(nodes, jobs, now=600.0 + later), snap(nodes, views, now=700.0),
               # another node tuple: the memo's context changes (another type, fewer GPUs)
               snap(k80, jobs, now=600.0),
               snap(nodes[:1], [j for j in jobs if not j.running], now=600.0),
               # another speed table: the first application has no speed on v100 (rate 0)
               snap(nodes, jobs, now=600.0, gpu_types=SLOW_FIRST),
               # that table throughout, the node type changes: k80 (a rate), v100 (none)
               snap(k80, jobs, now=600.0, gpu_types=SLOW_FIRST),
               snap(nodes, jobs, now=600.0, gpu_types=SLOW_FIRST)):
        same_call(pol, sn)
    assert pol.whole + pol.full == 8


def test_whole_round_taken_and_left():
    """What the whole round answers and what it leaves to the full path, by hand."""
    nodes = (Node("v0", 4, "v100"), Node("v1", 4, "v100"))
    g = [x for n in nodes for x in n.gpus()]
    a, b, c = job(0, n=2), _running(job(1, n=4, t=1.0), g[:4]), job(2, n=2, t=2.0)
    cases = [([a, b, c], True),  # 8 of 8 GPUs
             ([a, b, c, job(3)], False),  # 9 of 8
             ([a, _running(job(1, n=4, batch=64), g[:4], 128), c], False),  # another batch
             ([a, _running(job(1, n=3), g[:4]), c], False),  # another GPU count
             ([a, dataclasses.replace(c, app="no-such-app")], False),  # no rate
             ([a, dataclasses.replace(c, total_iters=float("inf"))], False),
             ([a, dataclasses.replace(c, total_iters=None)], True)]
    for js, whole in cases:
        pol = Counted()
        same_call(pol, snap(nodes, js, now=10.0))  # the infinite length: both raise
        assert (pol.whole, pol.full) == ((1, 0) if whole else (0, 1))
    # one object, one speed table: a type where APPS[0] has a rate, then one where it has none
    pol, bert = Counted(), [job(0, app=APPS[0]), job(1, app=APPS[1])]
    k80 = tuple(Node(n.name, n.num_gpus, "k80", 12288) for n in nodes)
    for ns, started in ((k80, ["j0", "j1"]), (nodes, ["j1"])):
        sn = snap(ns, bert, gpu_types=SLOW_FIRST)
        same_call(pol, sn)
        assert [s.job_id for s in pol.schedule(sn).starts()] == started
    assert (pol.whole, pol.full) == (2, 2)
    plan = Counted().schedule(snap(nodes, [a, b, c], now=10.0))
    # both waiting jobs start (the earlier submit first: nothing received), b keeps its GPUs
    assert [s.job_id for s in plan.starts()] == ["j0", "j2"] and not plan.order
    assert plan.reasons["j1"].numbers == {"x_v100": 1.0, "gpu_type_x": 1.0}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(1e-3, 1e3), st.floats(1.0, 1e9), st.sampled_from([1, 2, 4, 8])),
                min_size=1, max_size=30), st.integers(0, 40))
def test_closed_form_gives_all_one_exactly_when_all_fit(rows, spare):
    rate, rem, gpus = (list(x) for x in zip(*rows))
    need = sum(gpus)
    assert one_type(rate, rem, gpus, float(need + spare)) == [1.0] * len(rows)
    if need > 1:
        assert min(one_type(rate, rem, gpus, float(need - 1))) < 1.0


@settings(max_examples=400, deadline=None)
@given(rows=st.lists(st.tuples(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.7, 10.0]),
                               st.floats(1.0, 1e6), st.sampled_from([1, 2, 4, 8])),
                     min_size=1, max_size=30),
       cap=st.sampled_from([0.0, 1.0, 4.0, 8.0, 16.0, 64.0]))
def test_one_type_knapsack_as_the_sorted_walk(rows, cap):
    """The knapsack's first key read before any sort: the same X as sorting every job."""
    rate = [r for r, _, _ in rows]
    rem = [m for _, m, _ in rows]
    gpus = [float(g) for _, _, g in rows]
    assert one_type(rate, rem, gpus, cap) == one_type_sorted(rate, rem, gpus, cap)
