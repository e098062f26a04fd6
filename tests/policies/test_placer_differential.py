"""Seed 003's policies (A-SRPT, A-SRPT-Perfect and the five §V-A baselines) place through
``policies.asrpt_core.Placer``: built on the first placement of a call and bucketed from the
simulator's kept ``free_buckets``.  On every policy call of simulator runs (a loaded cluster
with queueing, line-25 blocking and communication-heavy delays, and a light one), the Plan
equals the Plan of a twin instance that sees the same snapshot without ``free_index`` /
``free_buckets`` (the FreeIndex built by sorting the free servers, as before the change):
same actions, order, infeasible list and every reason's code, text and numbers."""
from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

import policies
from gimbalctl.cluster import parse_cluster
from gimbalctl.predictor import refitter
from gimbalctl.profiles import default_models
from gimbalctl.sim import SimConfig, simulate
from policies.asrpt_core import Placer
from policies.heavy_edge import FreeIndex
from test_asrpt_differential import _table1_jobs, assert_same

MODELS_ = default_models()
NAMES = ["a-srpt", "a-srpt-perfect", "spjf", "spwf", "wcs-duration", "wcs-workload", "wcs-subtime"]


class Twin:
    """The policy on the simulator's snapshot, checked against a twin on the bucket-less copy."""

    pipeline_models = True

    def __init__(self, name):
        self.inner, self.twin = policies.get_policy(name), policies.get_policy(name)
        self.name, self.preemptive = name, False
        self.needs_lengths = self.inner.needs_lengths
        self.calls, self.bucketed, self.codes = 0, 0, Counter()

    def schedule(self, snap):
        plain = dataclasses.replace(snap, free_index=None, free_buckets=None)
        assert len(snap.free_gpus) == sum(len(g) for g in snap.free_by_node().values())
        plan = self.inner.schedule(snap)
        assert_same(plan, self.twin.schedule(plain))
        self.calls += 1
        self.bucketed += snap.free_buckets is not None
        self.codes.update(r.code.value for r in plan.reasons.values())
        return plan


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("cluster,seed", [("4x8", 0), ("16x8", 1)])
def test_same_plans_with_and_without_the_simulators_buckets(name, cluster, seed):
    jobs, hist = _table1_jobs(120, seed, span=10_000 if cluster == "4x8" else 40_000)
    pol = Twin(name)
    kw = {}
    if name != "a-srpt-perfect":
        kw = dict(prior_history=hist, refit=refitter("rf", seed), refit_every=3 * 3600)
    simulate(jobs, parse_cluster(cluster), pol, MODELS_, SimConfig(interval=60.0, seed=seed), **kw)
    assert pol.calls > 100 and pol.bucketed == pol.calls  # the bucketed path ran every time
    assert pol.codes["started"] == len(jobs)
    if cluster == "4x8":
        assert pol.codes["wait_resources"] + pol.codes["wait_order"] > 0


def test_free_index_from_buckets_equals_the_sorted_one():
    """FreeIndex from the snapshot's buckets holds the same buckets, counts and choices."""
    jobs, _ = _table1_jobs(60, 5, span=5_000)
    seen = []

    class Probe:
        pipeline_models, preemptive, needs_lengths, name = True, False, False, "probe"
        inner = policies.get_policy("wcs-subtime")

        def schedule(self, snap):
            if snap.free_buckets is not None and snap.free_gpus:
                free = {m: len(g) for m, g in snap.free_by_node().items()}
                a = FreeIndex(free, snap.node_rank, snap.free_buckets)
                b = FreeIndex(free, snap.node_rank)
                assert (a.buckets, a.free, a.total) == (b.buckets, b.free, b.total)
                for n in sorted({1, 2, 3, a.total}):
                    if n <= a.total:
                        for how in (True, False, "best-fit"):
                            assert a.choose(n, how) == b.choose(n, how)
                seen.append(len(free))
            return self.inner.schedule(snap)

    simulate(jobs, parse_cluster("3x8"), Probe(), MODELS_, SimConfig(interval=60.0, seed=5))
    assert len(seen) > 20 and max(seen) > 1


def test_placer_builds_nothing_until_a_job_is_placed():
    jobs, _ = _table1_jobs(10, 7, span=100)
    built = []

    class Probe:
        pipeline_models, preemptive, needs_lengths, name = True, False, False, "probe"
        inner = policies.get_policy("spjf")

        def schedule(self, snap):
            p = Placer(snap, self.inner.net)
            built.append(p.by_node is None)
            if snap.pending():
                servers, gpus, _, _ = p.place(snap.pending()[0], "best-fit") \
                    if snap.pending()[0].num_gpus <= len(snap.free_gpus) else (None, None, 0, 0)
                if servers is not None:
                    assert p.by_node is not None and len(gpus) == snap.pending()[0].num_gpus
            return self.inner.schedule(snap)

    simulate(jobs, parse_cluster("2x8"), Probe(), MODELS_, SimConfig(interval=60.0, seed=7))
    assert built and all(built)
