"""Seed 003's §V-A baselines (SPJF, SPWF, WCS-Duration, WCS-Workload, WCS-SubTime) keep
their waiting order across calls (``policies.kept_order``, keyed by the predicted length
under the same predictors) and give the jobs behind the last one that could start one
lazy reason segment (issue #13, docs/scale.md §2).  Their Plans equal those of the
replaced ``PredictedOrder.schedule``, kept verbatim in reference_predicted_order.py — same
actions, order, infeasible list and every job's reason code, text and numbers — at every
call of simulator runs with long queues (pipeline jobs with a refitted random-forest
predictor, generic jobs with exact lengths, jobs asking more than the cluster, NaN
predictions), on the same snapshots without the change record (the daemon's path), and
with every Plan's lazy reasons resolved only after the run (the kept lists changed since)."""
from __future__ import annotations

import dataclasses
import math
import types
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import policies
import reference_predicted_order as ref
from gimbalctl.cluster import parse_cluster
from gimbalctl.predictor import refitter
from gimbalctl.profiles import default_models
from gimbalctl.sim import SimConfig, simulate
from policies.model import Frozen, WaitingQueue
from test_asrpt_differential import _table1_jobs
from test_queue_differential import _jobs, _random_snapshot, assert_same

MODELS_ = default_models()
NAMES = ["spjf", "spwf", "wcs-duration", "wcs-workload", "wcs-subtime"]


def _same(plan, old):
    """``assert_same``, where a NaN number equals a NaN number."""
    def norm(nums):
        return {k: ("nan" if isinstance(v, float) and math.isnan(v) else v)
                for k, v in nums.items()}
    assert (plan.policy, plan.actions, plan.infeasible) == (old.policy, old.actions, old.infeasible)
    assert tuple(plan.order) == tuple(old.order)
    assert plan.reasons.keys() == old.reasons.keys()
    for jid, r in old.reasons.items():
        p = plan.reasons[jid]
        assert (p.code, p.text, norm(p.numbers)) == (r.code, r.text, norm(r.numbers)), jid


class Differential:
    """The package's policy on each snapshot, against the reference on the same snapshot
    and the package's policy (a second instance) on the snapshot without its queue."""

    pipeline_models = True

    def __init__(self, name, late=False):
        self.inner, self.plain = policies.get_policy(name), policies.get_policy(name)
        self.ref = policies.get_policy(name)
        self.ref.schedule = types.MethodType(ref.schedule, self.ref)
        self.name, self.preemptive = name, False
        self.needs_lengths = self.inner.needs_lengths
        self.late, self.held = late, []
        self.calls, self.kept, self.lazy, self.longest = 0, 0, 0, 0
        self.codes = Counter()

    def schedule(self, snap):
        plan = self.inner.schedule(snap)
        old = self.ref.schedule(snap)
        kept = self.inner.__dict__.get("_kept_order")
        if kept is not None and kept._seen is not None:
            self.kept += 1
            assert kept.ids == sorted(kept.ids, key=lambda i: kept.key_of[i])
            assert all(snap.jobs[j.id] is j for j in kept.jobs)
        self.lazy += isinstance(plan.order, Frozen)
        self.longest = max(self.longest, len(snap.pending()))
        if self.late:  # resolve the lazy reasons only after the run
            self.held.append((plan, old))
        else:
            _same(plan, old)
            _same(self.plain.schedule(dataclasses.replace(snap, queue=None)), old)
        self.calls += 1
        self.codes.update(r.code.value for r in old.reasons.values())
        return plan


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("cluster,seed", [("4x8", 0), ("16x8", 1)])
def test_table1_jobs_with_a_refitted_predictor(name, cluster, seed):
    jobs, hist = _table1_jobs(150, seed, span=10_000 if cluster == "4x8" else 40_000)
    pol = Differential(name)
    simulate(jobs, parse_cluster(cluster), pol, MODELS_, SimConfig(interval=60.0, seed=seed),
             prior_history=hist, refit=refitter("rf", seed), refit_every=3 * 3600)
    assert pol.calls > 100 and pol.kept == pol.calls
    assert pol.codes["started"] == len(jobs)
    if cluster == "4x8":
        assert pol.longest > 20 and pol.lazy > 0
        assert pol.codes["wait_order" if name in ("spjf", "spwf") else "wait_resources"] > 0


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("cluster,seed", [("2x8", 0), ("1x8", 2)])
def test_generic_jobs_with_a_long_queue_resolved_late(name, cluster, seed):
    pol = Differential(name, late=True)
    simulate(_jobs(150, seed), parse_cluster(cluster), pol, MODELS_, SimConfig(interval=120.0))
    assert pol.calls > 50 and pol.kept == pol.calls and pol.longest > 30 and pol.lazy > 0
    for plan, old in pol.held:
        assert_same(plan, old)


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_snapshots_with_infeasible_jobs(name, data):
    """Hand-built snapshots (running, pending and suspended jobs, some asking more GPUs
    than the cluster has), with a change record (the kept path, sorted afresh on a first
    call) and without one."""
    snap = _random_snapshot(data.draw)
    old = policies.get_policy(name)
    old.schedule = types.MethodType(ref.schedule, old)
    want = old.schedule(snap)
    assert_same(policies.get_policy(name).schedule(snap), want)
    waiting = WaitingQueue.of(snap.jobs)
    kept = dataclasses.replace(waiting, changes=Frozen(list(waiting.ids)))
    pol = policies.get_policy(name)
    assert_same(pol.schedule(dataclasses.replace(snap, queue=kept)), want)
    assert pol._kept_order._seen is not None  # the kept path answered


class _NanSome:
    """A predictor: NaN for one group, the exact length for the others."""

    kind, unit = "nan-some", "iterations"

    def predict(self, job):
        return math.nan if job.group_id == "g3" else job.total_iters

    def source(self, job):
        return self.kind


@pytest.mark.parametrize("name", ["spjf", "wcs-workload"])
def test_nan_predictions_take_the_sorted_path(name):
    jobs, hist = _table1_jobs(80, 3, span=8_000)
    pol = Differential(name)
    simulate(jobs, parse_cluster("4x8"), pol, MODELS_, SimConfig(interval=60.0, seed=3),
             prior_history=hist, refit=lambda h, now: {"iterations": _NanSome()},
             refit_every=3600)
    assert pol.calls > 50
    assert pol.kept < pol.calls  # a NaN key has no place in a kept order


def test_the_kept_path_evaluates_a_waiting_jobs_facts_once_per_view(monkeypatch):
    import policies.predicted_order as po

    seen = Counter()
    facts = po._facts

    def counting(snap, j, net):
        seen[j.id, id(j)] += 1
        return facts(snap, j, net)

    monkeypatch.setattr(po, "_facts", counting)
    pol = policies.get_policy("spjf")
    calls = []

    class Probe:
        pipeline_models, preemptive, needs_lengths, name = True, False, False, "probe"

        def schedule(self, snap):
            calls.append(len(snap.pending()))
            plan = pol.schedule(snap)
            return plan

    simulate(_jobs(150, 4), parse_cluster("1x8"), Probe(), MODELS_, SimConfig(interval=120.0))
    assert sum(calls) > 5 * 150  # the old code evaluated every waiting job at every call
    assert max(seen.values()) == 1
