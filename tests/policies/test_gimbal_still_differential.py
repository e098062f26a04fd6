"""The +gimbal hosts' lean coordination with what issue #13's third pass keeps or skips
(policies/gimbal_still.py: calls at which nothing changed; gimbal_walk._SetRec._no_deadline:
the "deadline" search of a set without deadlines; gimbal_quiet.affine_slopes: the split's
room from the exact progress slopes; gimbal_quiet.no_gain_room: a step's room from the
terms' order) gives exactly what the plain path gives.

* Recorded simulator runs of the three hosts on jobs with and without deadlines: at every
  call, the lean answer of one CoordKept kept over the run (``resizes``), and of another
  called by turns for the full answer and the lean one with random skips, equal the plain
  :func:`policies.gimbal_coord.coordinate`'s; the counters show each new path was taken.
* Hypothesis: a set, jobs progressing as the simulator's views say (restores, jobs that
  finish, rates that match the step times or not), deadlines or none: within the horizon
  computed with :func:`affine_slopes` the lean search takes the same decisions at every
  time; without deadlines the "deadline" search is (the walk's head, 0.0, 0.0) for any
  remaining steps.
"""
from __future__ import annotations

import dataclasses
import math
import random
from types import MappingProxyType
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import policies
from gimbalctl.cluster import parse_cluster
from gimbalctl.profiles import APPS, default_models
from gimbalctl.sim import SimConfig, simulate
from policies import gimbal_quiet, gimbal_still, gimbal_walk
from policies.gimbal_coord import RateModel, _below_ceiling, coordinate
from policies.gimbal_quiet import REL, affine_slopes, horizon, split_room
from policies.gimbal_walk import CoordKept, KeptSearch, walk_best

from random_jobs import plain_jobs, random_jobs
from test_gimbal_walk_differential import kept_case, packed_set, remaining_at

MODELS = default_models()
HOSTS = ["lucid+gimbal", "gavel+gimbal", "gandiva+gimbal"]


def _lean(coords):
    return [(c.jmax, c.result.objective_before, c.result.objective_after, c.resizes)
            for c in coords if c.resizes]


class Checked:
    """The host policy; at every call the kept lean answers against the plain one."""

    def __init__(self, name, seed):
        self.inner = policies.get_policy(name)
        for flag in ("preemptive", "needs_lengths", "round_length", "rounds_only", "elastic"):
            setattr(self, flag, getattr(self.inner, flag))
        self.lean, self.mixed = CoordKept(), CoordKept()
        self.rng = random.Random(seed)
        self.calls = self.below_checked = 0

    def schedule(self, snap):
        pol = self.inner
        kw = dict(lgrr=pol.lgrr, liss=pol.liss, switch_cost=pol.switch_cost)
        plain = coordinate(snap, pol.objective, **kw)
        assert self.lean.resizes(snap, pol.objective, **kw) == _lean(plain)
        kept = self.lean.below  # the kept below-ceiling jobs: the very views, sorted afresh
        if kept is not None:
            fresh = sorted((j for j in snap.jobs.values() if j.allocation is not None
                            and j.running and _below_ceiling(j.allocation)),
                           key=lambda j: (j.submit_time, j.id))
            assert len(kept[2]) == len(fresh) and all(a is b for a, b in zip(kept[2], fresh))
            assert kept[3] == [(j.submit_time, j.id) for j in fresh] and kept[1] == set(
                j.id for j in fresh) and kept[4] == {j.id: (j.submit_time, j.id) for j in fresh}
            self.below_checked += 1
        # by turns: the full answer, the lean one with a random skip
        r = self.rng.random()
        if r < 0.3:
            assert self.mixed.coordinate(snap, pol.objective, **kw) == plain
        else:
            skip = ()
            if r > 0.8 and plain:
                skip = self.rng.choice(plain).members[:1]
            want = plain if not skip else coordinate(snap, pol.objective, skip=skip, **kw)
            assert self.mixed.resizes(snap, pol.objective, skip=skip, **kw) == _lean(want)
        self.calls += 1
        return pol.schedule(snap)


class Counts:
    """Patches counting the new paths: calls whose plan was passed over, lean "deadline"
    searches of sets without deadlines, split rooms the slopes made longer."""

    def __init__(self):
        self.passed = self.nodl = self.longer = self.ordered = 0

    def patches(self):
        quiet, nodl, split, order = (gimbal_still.Still.quiet, gimbal_walk._SetRec._no_deadline,
                                     gimbal_quiet.split_room, gimbal_quiet.no_gain_room)

        def o(*a, **k):
            r = order(*a, **k)
            self.ordered += r > 0.0
            return r

        def q(still, now):
            r = quiet(still, now)
            self.passed += r
            return r

        def n(rec, now):
            self.nodl += 1
            return nodl(rec, now)

        def s(*a, **k):
            r = split(*a, **k)
            k.pop("slopes", None)
            self.longer += r > split(*a[:7], **k)
            return r

        return [mock.patch.object(gimbal_still.Still, "quiet", q),
                mock.patch.object(gimbal_walk._SetRec, "_no_deadline", n),
                mock.patch.object(gimbal_quiet, "split_room", s),
                mock.patch.object(gimbal_quiet, "no_gain_room", o)]


@pytest.mark.parametrize("name", HOSTS)
@pytest.mark.parametrize("cluster,seed,plain", [("2x8", 3, False), ("4x4", 5, True)])
def test_recorded_runs(name, cluster, seed, plain):
    jobs = (plain_jobs(60, seed, gpus=(1, 1, 2, 4), span=3000.0, iters=(50.0, 3000.0)) if plain
            else random_jobs(80, seed=seed, gpus=(1, 1, 2, 2, 4, 8)))
    pol = Checked(name, seed)
    counts = Counts()
    ps = counts.patches()
    for p in ps:
        p.start()
    try:
        simulate(jobs, parse_cluster(cluster), pol, MODELS, SimConfig(interval=30.0, seed=1))
    finally:
        for p in ps:
            p.stop()
    assert pol.calls > 100
    assert pol.below_checked > 50
    assert counts.passed > 20  # calls whose every set was quiet
    if name == "gandiva+gimbal" and plain:
        assert counts.nodl > 5
    if name == "gavel+gimbal" or name == "gandiva+gimbal" and not plain:
        assert counts.longer > 5  # ("jct" has no moving split; no deadlines: no split)
    if name == "gavel+gimbal":
        assert counts.ordered > 5  # steps sure to gain nothing by the terms' order


# ---------------------------------------------------------------- hypothesis
@st.composite
def progress(draw, sts, t0):
    """Per job (total, done, as_of, restore, rate) at ``t0``: rates that match the step times
    (the simulator's: 1 / step time) or not, restores over or still running at ``t0`` (or
    ending within a second of it), jobs near their end."""
    out = []
    for t in sts:
        rate = (draw(st.floats(0.9, 1.1)) / t if draw(st.booleans())
                else draw(st.floats(0.01, 50.0)))
        total = draw(st.sampled_from([1e3, 1e4, 1e6])) * draw(st.floats(0.1, 1.0))
        as_of = draw(st.floats(0.0, 50.0))
        restore = draw(st.sampled_from([0.0, 0.0, 20.0, 200.0, None, None]))
        if restore is None:  # still restoring at t0 (or just over)
            restore = (t0 - as_of) + draw(st.sampled_from([-0.5, 0.5, 30.0, 1e3]))
        out.append((total, draw(st.floats(0.0, 1e3)), as_of, max(0.0, restore), rate))
    return out


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_decisions_hold_within_the_slope_horizon(data):
    draw = data.draw
    infos0, objective, kept = kept_case(draw, ["deadline", "makespan", "makespan", "jct"])
    order = kept.order
    t0 = draw(st.floats(60.0, 5e3))
    prog = draw(progress(kept.st0, t0))
    deadlines = [draw(st.one_of(st.none(), st.floats(100.0, 1e5))) for _ in order]
    utils = [infos0[j].utilization for j in order]

    def at(now):
        return remaining_at(prog, deadlines, now)

    rems, dls = at(t0)
    dl = dls if objective == "deadline" else None
    swap = kept.split(objective, rems, dls, utils)
    walk = kept.walk(swap)
    cost = draw(st.sampled_from([0.0, 0.0, 3.6, 50.0, 1e4, 1e6]))
    sc = dict(switch_cost=cost)
    best = walk_best(objective, rems, dls, kept.st0, walk, **sc)[0]
    errs = [REL * (abs(t) + abs(d) + abs(r * (t0 - a)) + 1.0) for t, d, a, _, r in prog]
    derr = REL * (abs(t0) + max((abs(d) for d in deadlines if d is not None), default=0.0))
    rates = [p[4] for p in prog]
    slopes = affine_slopes(prog, t0, rems, errs)
    h = horizon(objective, rems, dl, rates, errs, kept, walk, derr, slopes=slopes,
                switch_cost=cost)
    assert h >= horizon(objective, rems, dl, rates, errs, kept, walk, derr,
                        switch_cost=cost)  # never shorter
    hs = split_room(objective, rems, dl, rates, errs, kept, derr, slopes)
    assert hs >= h
    assert hs >= split_room(objective, rems, dl, rates, errs, kept, derr)  # never shorter
    fracs = [1.0, 0.5, 0.999, draw(st.floats(0.0, 1.0)), draw(st.floats(0.95, 1.0))]
    if h > 0.0:
        span = min(h, 1e7)
        for frac in fracs:
            r2, d2 = at(t0 + span * frac)
            assert kept.split(objective, r2, d2, utils) == swap
            assert walk_best(objective, r2, d2, kept.st0, walk, **sc)[0] is best
    if hs > 0.0:  # the split on its own
        for frac in fracs:
            r2, d2 = at(t0 + min(hs, 1e7) * frac)
            assert kept.split(objective, r2, d2, utils) == swap


_odd = st.one_of(st.floats(0.0, 1e9), st.just(0.0), st.just(math.inf), st.just(math.nan),
                 st.floats(-1e3, 0.0))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_no_deadline_search_is_the_head(data):
    """No job of the set has a deadline: whatever the remaining steps (0, inf, nan, negative
    ones included), the split does not swap and the lean search returns the walk's head with
    objective values 0.0 (the positive zero) before and after."""
    infos0, start = data.draw(packed_set())
    lgrr, liss = data.draw(st.sampled_from([(True, True), (False, True), (True, False)]))
    kept = KeptSearch(infos0, start, RateModel(MODELS.profiles, MODELS.interference),
                      lgrr=lgrr, liss=liss)
    n = len(kept.order)
    utils = [infos0[j].utilization for j in kept.order]
    for _ in range(3):
        rems = [data.draw(_odd) for _ in range(n)]
        dls = [math.inf] * n
        assert kept.split("deadline", rems, dls, utils) is False
        best, before, after = walk_best("deadline", rems, dls, kept.st0, kept.walk(False))
        assert best is kept.walk(False).head
        # a switching cost changes nothing: every charged value is 0.0 too (the lean path's
        # shortcut, _SetRec._no_deadline, holds for the hosts' cost)
        for cost in (3.6, 1e6):
            assert walk_best("deadline", rems, dls, kept.st0, kept.walk(False),
                             switch_cost=cost) == (best, before, after)
        assert (before, after) == (0.0, 0.0)
        assert math.copysign(1.0, before) == math.copysign(1.0, after) == 1.0


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_still_calls_follow_the_change_records(data):
    """Hand-made snapshots of one packed set whose change records name what changed: a job's
    view replaced with no GPU change (a deadline given or taken, a worker's MPS share moved,
    progress), or nothing at all while the clock moves.  At each snapshot, asked twice (a
    host may drop the resizes it is given; and now and then first with a snapshot whose
    records are not usable; the clock now and then goes back), the lean answer equals the
    plain path's."""
    from test_gimbal_walk_differential import _snap

    draw = data.draw
    infos0, _ = draw(packed_set())
    objective = draw(st.sampled_from(["deadline", "deadline", "makespan", "jct"]))
    dl = st.one_of(st.none(), st.none(), st.floats(1e3, 1e5))
    jobs = {jid: dataclasses.replace(info.job, deadline=draw(dl),
                                     iter_rate=draw(st.floats(0.1, 10.0)))
            for jid, info in infos0.items()}
    gj: dict = {}
    for jid, job in jobs.items():
        for g in job.allocation.gpus:
            gj[g] = gj.get(g, ()) + (jid,)
    glog, jlog = list(gj), list(jobs)
    kept = CoordKept()
    now = 0.0
    ids = sorted(jobs)
    for _ in range(draw(st.integers(2, 10))):
        what = draw(st.sampled_from(["none", "none", "deadline", "mps", "progress"]))
        jid = draw(st.sampled_from(ids))
        job = jobs[jid]
        if what == "deadline":
            jobs[jid] = dataclasses.replace(job, deadline=draw(dl))
        elif what == "mps":
            ws = list(job.allocation.workers)
            i = draw(st.integers(0, len(ws) - 1))
            w = ws[i]
            pct = draw(st.sampled_from([10, 30, 50, 70, 100]))
            ws[i] = dataclasses.replace(w, mps_pct=pct if w.mps_cap is None else min(pct, w.mps_cap))
            jobs[jid] = dataclasses.replace(job, allocation=dataclasses.replace(
                job.allocation, workers=tuple(ws)))
        elif what == "progress":
            jobs[jid] = dataclasses.replace(job, completed_iters=job.completed_iters + 1e3,
                                            as_of=now)
        if what != "none":
            jlog.append(jid)
        now = max(0.0, now + draw(st.sampled_from([0.0, 30.0, 1e3, 1e5, -1e3])))
        snap = _snap(now, jobs, gj, glog, jlog)
        want = _lean(coordinate(snap, objective))
        if draw(st.integers(0, 4)) == 0:  # records that are not the job map's: not usable
            other = dataclasses.replace(snap, jobs=MappingProxyType(dict(jobs)))
            assert kept.resizes(other, objective) == want
        assert kept.resizes(snap, objective) == want
        assert kept.resizes(snap, objective) == want


def test_a_restored_job_leaves_the_candidates_without_a_gpu_change():
    """A job alone on its GPUs below its MPS ceiling is restored (a candidate); a new view of
    it at its ceiling, with no GPU change (only the job record names it), is one no more; a
    view below again is one again: the lean answer is the plain path's at each snapshot."""
    from policies.model import Allocation, Gpu, Job, JobState, WorkerAlloc
    from test_gimbal_walk_differential import _snap

    g0, g1 = Gpu("n0", 0), Gpu("n0", 1)

    def view(pct):
        ws = tuple(WorkerAlloc(g, 8, 8, 1, pct) for g in (g0, g1))
        return Job("A", 0.0, 2, APPS[0], 16,
                   total_iters=1e4, state=JobState.RUNNING, start_time=0.0,
                   allocation=Allocation((g0, g1), 8, workers=ws), iter_rate=1.0)

    jobs = {"A": view(50)}
    gj = {g0: ("A",), g1: ("A",)}
    glog, jlog = [g0, g1], ["A"]
    kept = CoordKept()
    seen = []
    for t, pct in enumerate([50, 50, 100, 100, 40, 100]):
        if jobs["A"].allocation.workers[0].mps_pct != pct:
            jobs["A"] = view(pct)
            jlog.append("A")
        snap = _snap(30.0 * t, jobs, gj, glog, jlog)
        want = _lean(coordinate(snap, "makespan"))
        assert kept.resizes(snap, "makespan") == want
        seen.append(bool(want))
    assert seen == [True, True, False, False, True, False]
