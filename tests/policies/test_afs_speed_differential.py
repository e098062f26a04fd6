"""The cheaper elastic Plan construction (waiting jobs with the same explain numbers share
one Reason; AFS-P's processor sharing without a Cand per job, its numbers memoised per
distinct (p, p', counter); AFS-L's numbers memoised per (p, p', length); Algorithm 1's
hand-out skipped with no GPU left; Themis's and Optimus's shared empty numbers) gives exactly the
Plans of the reference copies in reference_afs_speed.py: same actions, order, infeasible
list and every reason's code, text and numbers, for the five elastic policies on
hypothesis-random snapshots (both AFS-P branches, unit boundaries, unprofiled jobs with
and without measured rates, GPU ranges, unequal nodes) and on every call of simulator runs
with far more jobs than GPUs."""
from __future__ import annotations

import dataclasses
from types import MappingProxyType
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import policies
from gimbalctl.cluster import parse_cluster
from gimbalctl.profiles import APPS, default_models
from gimbalctl.sim import SimConfig, simulate
from policies.afs_core import Cand
from policies.elastic import MEASURED_RATES, UNPROFILED
from policies.model import Allocation, ClusterSnapshot, Job, JobState, Node
from policies.plan import ReasonCode
from test_elastic_differential import ELASTIC, _jobs, _reference_plan
from test_sjf_differential import assert_same

MODELS = default_models()
UNITS = (300.0, 1000.0, 7200.0)


def _policy(name, unit):
    return policies.get_policy(name, unit_s=unit) if name == "afs-p" else \
        policies.get_policy(name)


@st.composite
def snapshots(draw):
    per = draw(st.sampled_from([2, 4, 8]))
    if draw(st.integers(0, 4)):
        sizes = [per] * draw(st.integers(1, 4))
    else:  # unequal nodes: the placement's fallbacks
        sizes = [draw(st.sampled_from([1, 2, 3, 4, 8])) for _ in range(draw(st.integers(1, 4)))]
    nodes = tuple(Node(f"n{i}", c) for i, c in enumerate(sizes))
    gpus = [g for n in nodes for g in n.gpus()]
    unit = draw(st.sampled_from(UNITS))
    now = 20000.0
    # executed times from a few values (jobs then share numbers) and near unit boundaries
    executed = st.one_of(st.sampled_from([0.0, 10.0, unit - 1.0, unit, unit + 30.0, 2 * unit,
                                          3 * unit + 59.0]),
                         st.floats(0.0, 4 * unit))
    apps = st.sampled_from(APPS)

    def batch(app):
        return MODELS.iters_table[app][0][0] * draw(st.sampled_from([1, 2, 4]))

    def extra(app):
        kw = {}
        if draw(st.integers(0, 5)) == 0:
            lo = draw(st.integers(1, 4))
            kw["gpu_range"] = (lo, lo + draw(st.integers(0, 8)))
        if draw(st.booleans()):
            kw["total_iters"] = draw(st.sampled_from([100.0, 5000.0, 1e6]))
        elif draw(st.booleans()):
            kw["duration_estimate"] = draw(st.sampled_from([600.0, 36000.0]))
        return kw

    jobs, used = [], set()
    for k in range(draw(st.integers(0, 10))):
        free = [g for g in gpus if g not in used]
        if not free:
            break
        chosen = tuple(draw(st.lists(st.sampled_from(free), min_size=1,
                                     max_size=min(len(free), 8), unique=True)))
        used.update(chosen)
        app = draw(apps)
        b = batch(app)
        sub = -(-b // len(chosen))
        jobs.append(Job(f"R{k}", float(draw(st.integers(0, 50))), len(chosen), app, b,
                        state=JobState.RUNNING,
                        allocation=Allocation(chosen, sub, draw(st.sampled_from([1, 1, 2]))),
                        start_time=0.0, as_of=now - draw(st.sampled_from([0.0, 30.0, 400.0])),
                        executed_time=draw(executed),
                        iter_rate=draw(st.sampled_from([0.0, 0.5, 3.0])),
                        # restoring a checkpoint: no progress for the first seconds
                        restore_left=draw(st.sampled_from([0.0, 0.0, 10.0, 500.0])),
                        preemptions=draw(st.integers(0, 1)), **extra(app)))
    for k in range(draw(st.integers(0, 60))):
        app = draw(apps)
        pre = draw(st.integers(0, 2))
        jobs.append(Job(f"W{k}", float(draw(st.integers(0, 50))), 1, app, batch(app),
                        state=JobState.SUSPENDED if pre else JobState.PENDING,
                        executed_time=draw(executed) if pre else 0.0, preemptions=pre,
                        **extra(app)))
    ids = [j.id for j in jobs]
    unprofiled = draw(st.lists(st.sampled_from(ids), unique=True)) if ids else []
    measured = {}
    for jid in unprofiled:
        if draw(st.booleans()):
            measured[jid] = {draw(st.sampled_from([1, 2, 4])): draw(st.sampled_from([1.0, 2.5]))}
    predictors = {UNPROFILED: tuple(unprofiled), MEASURED_RATES: measured}
    gj = {g: (j.id,) for j in jobs if j.running for g in j.allocation.gpus}
    snap = ClusterSnapshot(now, nodes, MappingProxyType({j.id: j for j in jobs}),
                           MappingProxyType(gj), tuple(g for g in gpus if g not in gj),
                           MODELS.profiles, MODELS.memory, seed=draw(st.integers(0, 3)),
                           predictors=MappingProxyType(predictors))
    if draw(st.booleans()):  # the simulator's precomputed waiting ids
        snap = dataclasses.replace(snap, waiting_ids=tuple(j.id for j in jobs if j.waiting))
    return snap, unit


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=snapshots())
@pytest.mark.parametrize("name", ELASTIC)
def test_random_snapshots_match_reference(name, case):
    snap, unit = case
    pol = _policy(name, unit)
    assert_same(pol.schedule(snap), _reference_plan(pol, snap))


class Differential:
    """Runs the policy and the reference on every snapshot the simulator makes."""

    def __init__(self, name, unit):
        self.inner = _policy(name, unit)
        self.name = name
        for flag in ("preemptive", "needs_lengths", "round_length", "rounds_only", "elastic"):
            setattr(self, flag, getattr(self.inner, flag))
        self.calls = self.crowded = self.shared = 0

    def schedule(self, snap):
        plan = self.inner.schedule(snap)
        assert_same(plan, _reference_plan(self.inner, snap))
        self.calls += 1
        if len(snap.jobs) > snap.total_gpus:
            self.crowded += 1
            wait = [r for r in plan.reasons.values() if r.code is ReasonCode.WAIT_RESOURCES]
            self.shared += len({id(r) for r in wait}) < len(wait)
        return plan


@pytest.mark.parametrize("name", ELASTIC)
def test_crowded_simulator_runs_match_reference(name):
    """60 jobs on 8 GPUs: most calls have far more jobs than GPUs (AFS-P's processor
    sharing, with a 300 s unit so counters and evictions vary); the shared Reasons are
    used on some of those calls."""
    pol = Differential(name, 300.0)
    simulate(_jobs(60, seed=5), parse_cluster("2x4"), pol, MODELS,
             SimConfig(interval=60.0, seed=3, reveal_lengths=pol.needs_lengths))
    assert pol.calls > 30 and pol.crowded > 20
    assert pol.shared > 0


class _OwnProgress(ClusterSnapshot):
    """A snapshot class with its own (the same) progress arithmetic: callers may not inline
    it (``plain_progress`` is False), so AFS-L asks ``Rates.remaining_iters``."""

    def completed(self, job):
        return ClusterSnapshot.completed(self, job)


def _unshared_candidates(snap, rates, jobs, rem_of):
    """AFS-L's candidates as first written: a p(k) memo per job, rates asked per job."""
    n = len(jobs)
    return [Cand(j.id, rem_of(j), (lambda k, j=j: rates.rate(j, k)), rates.cap(j, n))
            for j in jobs]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=snapshots())
def test_afs_l_inlined_lengths_and_shared_rates(case):
    """AFS-L's remaining iterations inlined (running jobs restoring a checkpoint included)
    and its p(k) memo shared per (application, global batch) give the Plan of
    ``Rates.remaining_iters`` (a snapshot class that keeps its own progress) and of a memo
    per job."""
    snap, _ = case
    pol = policies.get_policy("afs-l")
    own = _OwnProgress(**{f.name: getattr(snap, f.name) for f in dataclasses.fields(snap)})
    with mock.patch.object(policies.afs_l, "candidates", _unshared_candidates):
        ref = pol.schedule(own)
    assert_same(pol.schedule(snap), ref)
