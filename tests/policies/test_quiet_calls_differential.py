"""Quiet calls (policies/quiet_calls.py) and the merge's runs of ranked jobs admitted in one
step (policies/kept_order.py): every Plan equals the old code's (reference_queue.py, via
test_queue_differential's helpers), at every call of simulator runs where jobs queue and
on hand-built snapshot sequences (quiet ones, ones that only look quiet, snapshots without
a change record as the daemon's)."""
from __future__ import annotations

import bisect
import dataclasses
from collections import Counter
from contextlib import ExitStack
from unittest import mock

import pytest

import policies
from gimbalctl.cluster import parse_cluster
from gimbalctl.sim import SimConfig, simulate
from policies import kept_order, quiet_calls
from policies.model import Allocation, Gpu, Job, JobState, Node
from policies.plan import PreemptJob, StartJob
from test_queue_differential import (MODELS, Differential, Lineage, _jobs, assert_same,
                                     reference_plan)

QUIET = [("srtf", {}), ("srsf", {}), ("tiresias", {}),
         ("tiresias", {"thresholds": (300.0, 3000.0)}), ("srtf", {"min_run_s": 600.0})]


def _counting():
    """Patches counting the quiet answers (True / False) and the merge's one-step runs
    (``bisect_left`` with a lower bound is only the merge's)."""
    answers, runs = Counter(), Counter()
    answer = quiet_calls.QuietCalls.answer

    def counted_answer(self, *a):
        out = answer(self, *a)
        answers[out] += 1
        return out

    def counted_bisect(a, x, lo=0, hi=None):
        if lo:
            runs["bisect"] += 1
        return bisect.bisect_left(a, x, lo) if hi is None else bisect.bisect_left(a, x, lo, hi)

    return answers, runs, [mock.patch.object(quiet_calls.QuietCalls, "answer", counted_answer),
                           mock.patch.object(kept_order, "bisect_left", counted_bisect)]


@pytest.mark.parametrize("name,kw", QUIET, ids=[n + ("+" + ",".join(kw) if kw else "")
                                                for n, kw in QUIET])
@pytest.mark.parametrize("cluster,seed", [("2x8", 3), ("4x4", 4)])
def test_quiet_calls_in_simulator_runs(name, kw, cluster, seed):
    """Simulator runs with a long queue, pre-emptions and restores: quiet calls are answered
    (after calls that started and pre-empted jobs too) and every Plan, quiet or not, is the
    old code's; with a minimum run time no call is answered quietly."""
    pol = Differential(name, kw)
    answers, runs, patches = _counting()
    acted = Counter()
    inner = pol.inner.schedule

    def schedule(snap):  # what the last Plan did, for the counts below
        before = pol.inner.__dict__.get("_quiet_calls")
        rec = before is not None and before._log is not None and (
            bool(before._started) or bool(before._preempted))
        plan = inner(snap)
        if rec and not plan.actions and before._log is not None \
                and not before._started and not before._preempted:
            acted["after_actions"] += 1
        return plan

    pol.inner.schedule = schedule
    with ExitStack() as stack:
        for p in patches:
            stack.enter_context(p)
        simulate(_jobs(160, seed), parse_cluster(cluster), pol, MODELS,
                 SimConfig(interval=60.0, preempt_cost=5.0))
    assert pol.calls > 50 and pol.longest > 30
    assert pol.codes["preempted"] > 0
    if kw.get("min_run_s"):
        assert answers[True] == 0
    else:
        assert answers[True] > 10 and answers[False] > 10
        assert acted["after_actions"] > 0  # quiet right after a Plan with actions
    assert runs["bisect"] > 0  # runs of ranked jobs admitted in one step


def _two_gpu_line(name):
    """One node of 2 GPUs: ``r`` runs on one, ``w`` waits for both."""
    app = list(MODELS.profiles)[0]
    line = Lineage((Node("n0", 2),))
    line.set(Job("r", 0.0, 1, app, 32, total_iters=1e4))
    line.set(dataclasses.replace(line.jobs["r"], state=JobState.RUNNING,
                                 allocation=Allocation((Gpu("n0", 0),), 32), as_of=line.now,
                                 iter_rate=1.0, run_start=line.now))
    line.set(Job("w", 1.0, 2, app, 64, total_iters=2e4))
    return line, app


def _check(pol, snap, answers, expect):
    before = answers[True]
    plan = pol.schedule(snap)
    assert_same(plan, reference_plan(pol, snap))
    assert answers[True] - before == expect
    return plan


def test_quiet_call_rules_falling_keys():
    """SRTF: later ``now`` with nothing changed is quiet; a new view of a running job (no
    record entry), an older ``now``, a snapshot without a change record, another profile
    table, a start or a completion are not; once a Plan that started a job is applied, the
    next call is quiet."""
    line, app = _two_gpu_line("srtf")
    pol = policies.get_policy("srtf")
    answers, _, patches = _counting()
    with ExitStack() as stack:
        for p in patches:
            stack.enter_context(p)
        _check(pol, line.snapshot(), answers, 0)  # first call: ranked
        line.now += 60.0
        s1 = line.snapshot()
        _check(pol, s1, answers, 1)  # nothing changed: quiet
        _check(pol, s1, answers, 1)  # the same snapshot again
        _check(pol, dataclasses.replace(s1, now=s1.now - 30.0), answers, 0)  # older now
        _check(pol, s1, answers, 1)  # later than that (ranked) call: quiet again
        _check(pol, line.snapshot(record=False), answers, 0)  # the daemon's: no record
        _check(pol, line.snapshot(record=False), answers, 0)
        _check(pol, line.snapshot(), answers, 0)  # record again: a first call of it
        # a new view of the running job without a queue record entry (as a co-location
        # change; the job change record names it, as the simulator's does)
        r = line.jobs["r"]
        line.now += 10.0
        line.jobs["r"] = dataclasses.replace(r, as_of=line.now, completed_iters=r.completed_iters
                                             + r.iter_rate * (line.now - r.as_of))
        line.jlog.append("r")
        _check(pol, line.snapshot(), answers, 0)
        # a queue record but no job change record: the pass over the running views sees it
        _check(pol, line.snapshot(), answers, 1)
        line.jobs["r"] = dataclasses.replace(line.jobs["r"])
        _check(pol, dataclasses.replace(line.snapshot(), job_changes=None), answers, 0)
        _check(pol, line.snapshot(), answers, 1)
        _check(pol, line.snapshot(), answers, 1)
        # a short arrival asking one GPU: it starts, and pre-empts nobody (one GPU free)
        line.set(Job("s", line.now, 1, app, 32, total_iters=5.0))
        plan = _check(pol, line.snapshot(), answers, 0)
        assert [type(a) for a in plan.actions] == [StartJob]
        # applied: ``s`` runs; the next call is quiet
        act = plan.actions[0]
        line.set(dataclasses.replace(line.jobs["s"], state=JobState.RUNNING,
                                     allocation=Allocation(act.gpus, 32), as_of=line.now,
                                     start_time=line.now, iter_rate=1.0, run_start=line.now))
        line.now += 1.0
        _check(pol, line.snapshot(), answers, 1)
        # ``s`` finishes; ``w`` (two GPUs) now has a GPU less than it needs: not quiet
        del line.jobs["s"]
        line.jlog.append("s")
        _check(pol, line.snapshot(), answers, 0)
        _check(pol, line.snapshot(), answers, 1)
        # a second table of the same profiles: not quiet
        snap = line.snapshot()
        other = dataclasses.replace(snap, profiles=dict(snap.profiles))
        _check(pol, other, answers, 0)


def _preempted(extra, answers):
    """A short arrival asking both GPUs pre-empts ``r``; the Plan applied as the simulator
    does (``r`` waits with its progress, ``extra`` iterations less, the short job runs)."""
    line, app = _two_gpu_line("srtf")
    pol = policies.get_policy("srtf")
    _check(pol, line.snapshot(), answers, 0)
    line.now += 60.0
    line.set(Job("s", line.now, 2, app, 64, total_iters=2.0))
    plan = _check(pol, line.snapshot(), answers, 0)
    assert {type(a) for a in plan.actions} == {StartJob, PreemptJob}
    start = next(a for a in plan.actions if isinstance(a, StartJob))
    r = line.jobs["r"]
    dt = line.now - r.as_of
    line.set(dataclasses.replace(
        r, state=JobState.SUSPENDED, allocation=None, as_of=line.now,
        completed_iters=r.completed_iters + r.iter_rate * dt - extra,
        executed_time=r.executed_time + dt, iter_rate=0.0, preemptions=1, run_start=None))
    line.set(dataclasses.replace(line.jobs["s"], state=JobState.RUNNING,
                                 allocation=Allocation(start.gpus, 32), as_of=line.now,
                                 start_time=line.now, iter_rate=1.0, run_start=line.now))
    return line, pol


@pytest.mark.parametrize("extra,quiet", [(0.0, 1), (5.0, 1), (-5.0, 0)])
def test_quiet_call_after_a_preemption(extra, quiet):
    """Once a Plan that started and pre-empted jobs is applied, the next call is quiet, and
    so is a later one; a pre-empted job whose waiting key came out below its running key
    at the last call (more progress than it had) makes the call a ranked one."""
    answers, _, patches = _counting()
    with ExitStack() as stack:
        for p in patches:
            stack.enter_context(p)
        line, pol = _preempted(extra, answers)
        _check(pol, line.snapshot(), answers, quiet)
        line.now += 0.5
        _check(pol, line.snapshot(), answers, 1)


def test_quiet_call_tiresias_horizon():
    """Tiresias: the running job's queue stays until its attained service reaches the
    threshold; before, the call is quiet, after, it is ranked (and the waiting job, now
    ahead, pre-empts it)."""
    line, _ = _two_gpu_line("tiresias")
    pol = policies.get_policy("tiresias", thresholds=(100.0,))
    answers, _, patches = _counting()
    with ExitStack() as stack:
        for p in patches:
            stack.enter_context(p)
        _check(pol, line.snapshot(), answers, 0)
        line.now += 50.0
        _check(pol, line.snapshot(), answers, 1)
        line.now += 100.0  # attained 150 GPU-s: queue 1, behind ``w``
        plan = _check(pol, line.snapshot(), answers, 0)
        assert {type(a) for a in plan.actions} == {StartJob, PreemptJob}


@pytest.mark.parametrize("name", ["srtf", "srsf"])
@pytest.mark.parametrize("cluster,seed", [("2x8", 3), ("4x4", 4), ("1x8", 5)])
def test_deferred_running_jobs_in_simulator_runs(name, cluster, seed):
    """Running jobs whose cached bound lies between the first and the second waiting key
    are deferred without a key: at some calls the first waiting job and all of them are
    admitted as a block, at others (the jobs after the second key hold too few GPUs) they
    are ranked by their exact keys after all; every Plan is the old code's."""
    from policies.running_keys import RunningKeys

    pol = Differential(name, {})
    counts = Counter()
    collect, exact = RunningKeys.collect, RunningKeys.exact

    def counted_collect(self, *a):
        out = collect(self, *a)
        if out is not None and len(a) > 8 and a[8]:
            counts["deferring"] += 1
        return out

    def counted_exact(self, views, *a):
        counts["ranked after all"] += 1
        return exact(self, views, *a)

    with mock.patch.object(RunningKeys, "collect", counted_collect), \
            mock.patch.object(RunningKeys, "exact", counted_exact):
        simulate(_jobs(160, seed), parse_cluster(cluster), pol, MODELS,
                 SimConfig(interval=60.0, preempt_cost=5.0))
    assert pol.calls > 50 and pol.codes["preempted"] > 0
    assert counts["deferring"] > counts["ranked after all"] > 0
