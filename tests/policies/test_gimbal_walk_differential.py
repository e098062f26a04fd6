"""GIMBAL's coordination kept across rounds (policies/gimbal_walk.py, policies/gimbal_sets.py)
gives exactly what the plain path of :func:`policies.gimbal_coord.coordinate` gives.

* Recorded simulator snapshots of the three +gimbal hosts (each host's objective: "jct",
  "makespan", "deadline"): at every policy call, ``coordinate(snap, kept=K)`` (one K kept over
  the run, with the change records; another over the same snapshots without them) equals
  ``coordinate(snap)``: the same Coordination records (configurations, every attempt's text and
  objective value, subsets, exit, resizes); the kept packing sets equal ``packing_sets(snap)``.
* Hypothesis: a packing set (J_max and jobs packed on its GPUs, MPS shares, sample shares,
  ceilings), then a sequence of rounds with other remaining steps and deadlines:
  ``KeptSearch.run`` on one kept object equals ``coordination_search`` each round, for the
  three objectives and the LGRR/LISS ablations.
"""
from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import policies
from gimbalctl.cluster import parse_cluster
from gimbalctl.profiles import APPS, default_models
from gimbalctl.sim import SimConfig, simulate
from policies.gimbal_coord import (JobInfo, RateModel, coordinate, coordination_search,
                                   packing_sets)
from policies.gimbal_walk import CoordKept, KeptSearch, walk_best
from policies.model import Allocation, Gpu, Job, JobState, WorkerAlloc

from random_jobs import random_jobs

MODELS = default_models()
HOSTS = ["lucid+gimbal", "gavel+gimbal", "gandiva+gimbal"]


_jobs = random_jobs  # tests/policies/random_jobs.py
# switching costs (s) the searches are drawn with: none (Algorithm 1 as written), the hosts'
# 3.6 s, and costs large enough that most results are declined
SWITCH_COSTS = st.sampled_from([0.0, 0.0, 3.6, 50.0, 1e4, 1e6])


class Checked:
    """The host policy, and at every call the kept coordination against the plain one."""

    def __init__(self, name):
        self.inner = policies.get_policy(name)
        for flag in ("preemptive", "needs_lengths", "round_length", "rounds_only", "elastic"):
            setattr(self, flag, getattr(self.inner, flag))
        self.kept, self.bare, self.lean = CoordKept(), CoordKept(), CoordKept()
        self.calls = self.sets = self.resizes = self.same = self.attempts = self.quiet = 0
        self.declined = 0
        self.exits = set()

    def schedule(self, snap):
        pol = self.inner
        # the host's own switching cost (gimbal_coord, "Switching cost")
        cost = pol.switch_cost
        assert cost > 0
        plain = coordinate(snap, pol.objective, lgrr=pol.lgrr, liss=pol.liss, switch_cost=cost)
        self.declined += sum(c.result.declined for c in plain)
        before = self.kept.sets.logs
        kept = coordinate(snap, pol.objective, lgrr=pol.lgrr, liss=pol.liss, kept=self.kept,
                          switch_cost=cost)
        assert kept == plain
        assert self.kept.sets.sets == packing_sets(snap)
        # what the host reads (its own kept state, the searches without the audit trail)
        assert self.lean.resizes(snap, pol.objective, lgrr=pol.lgrr, liss=pol.liss,
                                 switch_cost=cost) == [
            (c.jmax, c.result.objective_before, c.result.objective_after, c.resizes)
            for c in plain if c.resizes]
        # sets the lean path did not search this call (sure to find no resizes: gimbal_quiet)
        self.quiet += sum(r.quiet_at(pol.objective, snap.now) and r.quiet[1] < snap.now
                          for r in self.lean.recs.values())
        self.same += before is not None and self.kept.sets.sets is not None and len(
            snap.gpu_changes.log) == len(before[0])
        # a skipped set is left alone on both paths
        if plain:
            skip = plain[-1].members[:1]
            assert coordinate(snap, pol.objective, skip=skip, kept=self.kept,
                              switch_cost=cost) == coordinate(snap, pol.objective, skip=skip,
                                                              switch_cost=cost)
        bare = dataclasses.replace(snap, gpu_changes=None, job_changes=None)
        assert coordinate(bare, pol.objective, kept=self.bare, switch_cost=cost) == plain
        assert self.bare.sets.logs is None
        self.calls += 1
        self.sets += len(plain)
        self.resizes += sum(len(c.resizes) for c in plain)
        self.attempts += sum(len(c.result.attempts) for c in plain)
        self.exits.update(c.result.exit for c in plain)
        return pol.schedule(snap)


@pytest.mark.parametrize("name", HOSTS)
@pytest.mark.parametrize("cluster,seed", [("2x8", 3), ("4x4", 5)])
def test_recorded_simulator_snapshots(name, cluster, seed):
    pol = Checked(name)
    simulate(_jobs(80, seed=seed, gpus=(1, 1, 2, 2, 4, 8)), parse_cluster(cluster), pol, MODELS,
             SimConfig(interval=60.0, seed=1))
    assert pol.calls > 100
    assert pol.sets > 50 and pol.resizes > 5 and pol.attempts > pol.sets
    assert {"early-exit", "no-primitive"} <= pol.exits
    assert pol.same > pol.calls // 4  # the kept sets were taken over at many calls
    assert pol.quiet > 20  # and searches were left out


# ---------------------------------------------------------------- hypothesis: one set, many rounds
def kept_case(draw, objectives):
    """(job infos, objective, its KeptSearch) of a drawn packed set, the objective drawn
    from ``objectives``."""
    infos0, start = draw(packed_set())
    objective = draw(st.sampled_from(objectives))
    return infos0, objective, KeptSearch(infos0, start, RateModel(MODELS.profiles,
                                                                   MODELS.interference))


def remaining_at(prog, deadlines, now):
    """(remaining iterations, time to deadline) of each job at ``now``: ``prog`` holds per
    job (total, done, as_of, restore, rate), progress at ``rate`` from ``as_of`` once the
    ``restore`` seconds are over; a deadline None is infinitely far."""
    rems = []
    for total, done, as_of, restore, rate in prog:
        dt = now - as_of
        if restore:
            dt = max(0.0, dt - restore)
        rems.append(max(0.0, total - (done + rate * dt)))
    return rems, [math.inf if d is None else d - now for d in deadlines]


@st.composite
def packed_set(draw):
    """(infos, start): a J_max on k GPUs and 1-3 jobs packed on its GPUs."""
    k = draw(st.sampled_from([1, 2, 4, 8]))
    gpus = tuple(Gpu("n0" if i < 8 else "n1", i % 8) for i in range(k))
    specs = [("M", k, gpus)]
    for n in range(draw(st.integers(1, 3))):
        m = draw(st.sampled_from([s for s in (1, 2, 4, 8) if s <= k]))
        lo = draw(st.integers(0, k - m))
        specs.append((f"o{n}", m, gpus[lo:lo + m]))
    infos, start = {}, {}
    for jid, m, gs in specs:
        app = draw(st.sampled_from(APPS))
        micro = MODELS.iters_table[app][0][0]
        batch = micro * m * draw(st.sampled_from([1, 2]))
        cap = draw(st.sampled_from([None, None, 50, 80]))
        ws = []
        shares = [batch // m + (1 if i < batch % m else 0) for i in range(m)]
        if m > 1 and draw(st.booleans()):  # uneven shares (an earlier LISS step)
            d = draw(st.integers(1, max(1, shares[0] - 1)))
            shares[0] -= d
            shares[-1] += d
        for i, g in enumerate(gs):
            pct = draw(st.sampled_from([10, 30, 50, 70, 90, 100]))
            if cap is not None:
                pct = min(pct, cap)
            ws.append(WorkerAlloc(g, shares[i], micro, max(1, -(-shares[i] // micro)), pct,
                                  mps_cap=cap))
        job = Job(jid, 0.0, m, app, batch, total_iters=1e6, state=JobState.RUNNING,
                  allocation=Allocation(gs, micro, global_batch=batch, workers=tuple(ws)),
                  start_time=draw(st.sampled_from([0.0, 5.0])))
        infos[jid] = JobInfo(job, 1.0, math.inf, draw(st.floats(0.05, 1.0)),
                             draw(st.sampled_from([1, 1, 2])) if m > 1 else 1)
        start[jid] = tuple(ws)
    return infos, start


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_kept_search_equals_search_every_round(data):
    infos0, start = data.draw(packed_set())
    objective = data.draw(st.sampled_from(["jct", "deadline", "makespan"]))
    lgrr, liss = data.draw(st.sampled_from([(True, True), (True, True), (False, True),
                                            (True, False)]))
    interference = data.draw(st.sampled_from([MODELS.interference, dataclasses.replace(
        MODELS.interference, mps=None)]))
    model = RateModel(MODELS.profiles, interference)
    kept = KeptSearch(infos0, start, RateModel(MODELS.profiles, interference), lgrr=lgrr,
                      liss=liss)
    rounds = data.draw(st.integers(1, 6))
    cost = data.draw(SWITCH_COSTS)
    for _ in range(rounds):
        infos = {j: dataclasses.replace(
            i, remaining_steps=data.draw(st.floats(0.0, 1e5)),
            deadline_left=data.draw(st.one_of(st.just(math.inf), st.floats(-1e3, 1e5))))
            for j, i in infos0.items()}
        want = coordination_search(objective, infos, start, model, lgrr=lgrr, liss=liss,
                                   switch_cost=cost)
        assert kept.run(objective, infos, cost) == want
        # the search without its audit trail (what the host policies read)
        order = kept.order
        rems = [infos[j].remaining_steps for j in order]
        dls = [infos[j].deadline_left for j in order]
        utils = [infos[j].utilization for j in order]
        walk = kept.walk(kept.split(objective, rems, dls, utils))
        best, before, after = walk_best(objective, rems, dls, kept.st0, walk, switch_cost=cost)
        assert (dict(best), before, after) == (want.config, want.objective_before,
                                               want.objective_after)
        assert (best is kept.start) == want.declined or want.config == dict(kept.start)


def test_kept_search_follows_the_split_and_the_clock():
    """The makespan split moves with the remaining steps: both walks are kept, and a round
    with the other split answers as the plain search does (a kept search keyed without the
    split would walk the first round's subsets)."""
    infos0, start = _fixed_set()
    model = RateModel(MODELS.profiles, MODELS.interference)
    kept = KeptSearch(infos0, start, model)
    seen = set()
    for rem_m, rem_o in [(1e4, 10.0), (10.0, 1e4), (1e4, 10.0), (5e3, 5e3)]:
        infos = {j: dataclasses.replace(i, remaining_steps=rem_m if j == "M" else rem_o)
                 for j, i in infos0.items()}
        want = coordination_search("makespan", infos, start, model)
        assert kept.run("makespan", infos) == want
        seen.add(want.high)
    assert len(seen) == 2 and len(kept.walks) == 2


def _fixed_set():
    gpus = (Gpu("n0", 0), Gpu("n0", 1))
    infos, start = {}, {}
    for jid, app, gs in [("M", APPS[0], gpus), ("o0", APPS[1], gpus[:1])]:
        micro = MODELS.iters_table[app][0][0]
        batch = micro * len(gs)
        ws = tuple(WorkerAlloc(g, micro, micro, 1, 50) for g in gs)
        job = Job(jid, 0.0, len(gs), app, batch, total_iters=1e6, state=JobState.RUNNING,
                  allocation=Allocation(gs, micro, global_batch=batch, workers=ws),
                  start_time=0.0)
        infos[jid] = JobInfo(job, 1.0, math.inf, 0.5, 1)
        start[jid] = ws
    return infos, start


# ---------------------------------------------------------------- hypothesis: kept packing sets
def _snap(now, jobs, gj, glog, jlog):
    from types import MappingProxyType

    from policies.model import ClusterSnapshot, Frozen, GpuChanges, JobChanges, Node

    jv, gv = MappingProxyType(dict(jobs)), MappingProxyType(dict(gj))
    return ClusterSnapshot(now, (Node("n0", 8), Node("n1", 8)), jv, gv, (), MODELS.profiles,
                           MODELS.memory, MODELS.interference,
                           gpu_changes=GpuChanges(Frozen(glog), gv),
                           job_changes=JobChanges(Frozen(jlog), jv))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_kept_sets_follow_the_change_records(data):
    """A run of hand-made snapshots whose change records name what changed: jobs placed,
    moved and removed (GPUs up to three ids, §5.1 broken or not), taken off and put back on
    the same GPUs, a job's state flipped between running and suspended, its start time or
    only its progress changed with no GPU change (a job on a shared GPU that starts running
    links its partners' sets).  At each snapshot the kept
    sets equal ``packing_sets``, and a kept answer is reported only when no set, member view
    or member GPU's job count changed."""
    from policies.gimbal_sets import KeptSets

    draw = data.draw
    gpus = [Gpu(f"n{i // 8}", i % 8) for i in range(16)]
    jobs: dict = {}
    gj: dict = {}
    glog: list = []
    jlog: list = []
    kept = KeptSets()
    n = 0
    last = None

    def place(jid, gs, state, t0):
        app = APPS[int(jid[1:]) % len(APPS)]
        jobs[jid] = Job(jid, 0.0, len(gs), app, 8 * len(gs), total_iters=1e4, state=state,
                        allocation=Allocation(tuple(gs), 8), start_time=t0)
        for g in gs:
            gj[g] = gj.get(g, ()) + (jid,)
            glog.append(g)
        jlog.append(jid)

    def remove(jid):
        for g in jobs[jid].allocation.gpus:
            gj[g] = tuple(i for i in gj[g] if i != jid)
            if not gj[g]:
                del gj[g]
            glog.append(g)
        del jobs[jid]
        jlog.append(jid)

    for step in range(draw(st.integers(1, 25))):
        for _ in range(draw(st.integers(0, 3))):
            kind = draw(st.sampled_from(["place", "place", "remove", "move", "flip", "since",
                                         "inplace", "view"]))
            if kind == "place" or not jobs:
                avail = [g for g in gpus if len(gj.get(g, ())) < 3]
                m = draw(st.sampled_from([1, 1, 2, 4]))
                if len(avail) < m:
                    continue
                lo = draw(st.integers(0, len(avail) - m))
                n += 1
                place(f"j{n}", avail[lo:lo + m],
                      draw(st.sampled_from([JobState.RUNNING] * 4 + [JobState.SUSPENDED])),
                      draw(st.sampled_from([0.0, 1.0, 2.0])))
                continue
            jid = draw(st.sampled_from(sorted(jobs)))
            job = jobs[jid]
            if kind == "remove":
                remove(jid)
            elif kind == "move":
                remove(jid)
                avail = [g for g in gpus if len(gj.get(g, ())) < 3]
                if len(avail) >= job.num_gpus:
                    lo = draw(st.integers(0, len(avail) - job.num_gpus))
                    place(jid, avail[lo:lo + job.num_gpus], job.state, job.start_time)
            elif kind == "inplace":  # off and back on its GPUs (a resize): a new order
                remove(jid)
                place(jid, job.allocation.gpus, job.state, job.start_time)
            elif kind == "view":  # a new view with the same facts, no GPU change
                jobs[jid] = dataclasses.replace(job, completed_iters=job.completed_iters + 1.0)
                jlog.append(jid)
            elif kind == "flip":  # the same GPUs, no GPU change
                jobs[jid] = dataclasses.replace(job, state=JobState.SUSPENDED if job.running
                                                else JobState.RUNNING)
                jlog.append(jid)
            else:
                jobs[jid] = dataclasses.replace(job, start_time=draw(st.sampled_from([0.0, 3.0])))
                jlog.append(jid)
        g0, j0 = len(glog), len(jlog)
        snap = _snap(float(step), jobs, gj, glog, jlog)
        before = kept.logs
        sets, same = kept.update(snap)
        assert sets == packing_sets(snap)
        if same:  # nothing a set reads changed: its members' views, their GPUs' job counts
            assert before is not None and sets is last[1]
            for ps in sets:
                for m in ps.members:
                    assert snap.jobs[m] is last[0].jobs[m]
                    for g in snap.jobs[m].allocation.gpus:
                        assert len(snap.gpu_jobs.get(g, ())) == len(last[0].gpu_jobs.get(g, ()))
        # what CoordKept reads: set_of agrees with the answer, and a set of the last answer
        # or of this one with no member looked at again is in both (the same object)
        member = {m: ps for ps in sets for m in ps.members}
        for jid in set(jobs) | set(member):
            assert kept.set_of(jid) is member.get(jid)
        if last is not None and kept.touched is not None:
            now_ids = {id(ps) for ps in sets}
            old_ids = {id(ps) for ps in last[1]}
            for ps in (*sets, *last[1]):
                if kept.touched.isdisjoint(ps.members):
                    assert id(ps) in now_ids and id(ps) in old_ids
        last = (snap, sets)
        # the same snapshot again: nothing changed
        assert kept.update(_snap(float(step), jobs, gj, glog, jlog)) == (sets, True)
        assert len(glog) == g0 and len(jlog) == j0


def test_kept_sets_changes_away_from_the_sets_keep_the_answer():
    """A and B share GPU 0 (a set).  C starts alone on GPU 5 and a view of a job on no kept
    GPU changes: the GPU log grew, but no kept GPU or job on one changed, so the last answer is
    reported as such (``same``).  D then joins C on GPU 5: a new set, not the last answer."""
    from policies.gimbal_sets import KeptSets

    g0, g1, g5 = Gpu("n0", 0), Gpu("n0", 1), Gpu("n0", 5)
    jobs, glog, jlog = {}, [], []

    def add(jid, gs):
        jobs[jid] = Job(jid, 0.0, len(gs), APPS[0], 8 * len(gs), total_iters=1e4,
                        state=JobState.RUNNING, allocation=Allocation(gs, 8), start_time=0.0)
        glog.extend(gs)
        jlog.append(jid)

    add("A", (g0, g1))
    add("B", (g0,))
    gj = {g0: ("A", "B"), g1: ("A",)}
    kept = KeptSets()
    sets, same = kept.update(_snap(0.0, jobs, gj, glog, jlog))
    assert [s.members for s in sets] == [("A", "B")] and not same
    add("C", (g5,))
    gj[g5] = ("C",)
    snap = _snap(1.0, jobs, gj, glog, jlog)
    got, same = kept.update(snap)
    assert same and got is sets and got == packing_sets(snap)
    jobs["C"] = dataclasses.replace(jobs["C"], completed_iters=5.0)  # a new view, no kept GPU
    jlog.append("C")
    got, same = kept.update(_snap(2.0, jobs, gj, glog, jlog))
    assert same and got is sets
    add("D", (g5,))
    gj[g5] = ("C", "D")
    snap = _snap(3.0, jobs, gj, glog, jlog)
    got, same = kept.update(snap)
    assert not same and got == packing_sets(snap)
    assert [s.members for s in got] == [("A", "B"), ("C", "D")]


def test_kept_sets_a_job_that_starts_running_joins_a_kept_set():
    """A and B share GPU 0 (a set); X, suspended, sits on GPU 1 with A.  X runs again with no
    GPU change: the kept set {A, B} is part of the set {A, B, X} now, and gone."""
    from policies.gimbal_sets import KeptSets

    g0, g1 = Gpu("n0", 0), Gpu("n0", 1)
    jobs, glog, jlog = {}, [], []
    specs = [("A", (g0, g1), JobState.RUNNING), ("B", (g0,), JobState.RUNNING),
             ("X", (g1,), JobState.SUSPENDED)]
    for jid, gs, state in specs:
        jobs[jid] = Job(jid, 0.0, len(gs), APPS[0], 8 * len(gs), total_iters=1e4, state=state,
                        allocation=Allocation(gs, 8), start_time=0.0)
    gj = {g0: ("A", "B"), g1: ("A", "X")}
    kept = KeptSets()
    sets, _ = kept.update(_snap(0.0, jobs, gj, glog, jlog))
    assert [s.members for s in sets] == [("A", "B")]
    jobs["X"] = dataclasses.replace(jobs["X"], state=JobState.RUNNING)
    jlog.append("X")
    snap = _snap(1.0, jobs, gj, glog, jlog)
    sets, same = kept.update(snap)
    assert not same and sets == packing_sets(snap)
    assert [s.members for s in sets] == [("A", "B", "X")]
    assert set(kept.comp_of) == {"A", "B", "X"} and len(kept.verdict) == 1


# ---------------------------------------------------------------- hypothesis: the quiet horizon
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_decisions_hold_within_the_horizon(data):
    """A set whose jobs progress as the simulator's views say (remaining = total - (done +
    rate x max(0, elapsed - restore)), floored at 0; deadline distances fall with the clock):
    at every time within :func:`horizon` of a round, the lean search takes the same
    decisions (same best configuration, same split)."""
    from policies.gimbal_quiet import REL, horizon, split_room

    draw = data.draw
    infos0, objective, kept = kept_case(draw, ["jct", "jct", "deadline", "makespan"])
    order = kept.order
    prog = [(draw(st.floats(1e3, 1e6)), draw(st.floats(0.0, 1e3)), draw(st.floats(0.0, 50.0)),
             draw(st.sampled_from([0.0, 0.0, 20.0])), draw(st.floats(0.01, 50.0)))
            for _ in order]
    deadlines = [draw(st.one_of(st.none(), st.floats(100.0, 1e5))) for _ in order]
    utils = [infos0[j].utilization for j in order]

    def at(now):
        return remaining_at(prog, deadlines, now)

    t0 = draw(st.floats(60.0, 5e3))
    rems, dls = at(t0)
    swap = kept.split(objective, rems, dls, utils)
    walk = kept.walk(swap)
    cost = draw(SWITCH_COSTS)
    sc = dict(switch_cost=cost)
    best = walk_best(objective, rems, dls, kept.st0, walk, **sc)[0]
    errs = [REL * (abs(t) + abs(d) + abs(r * (t0 - a)) + 1.0) for t, d, a, _, r in prog]
    derr = REL * (abs(t0) + max((abs(d) for d in deadlines if d is not None), default=0.0))
    h = horizon(objective, rems, dls if objective == "deadline" else None,
                [p[4] for p in prog], errs, kept, walk, derr, switch_cost=cost)
    assert h >= 0.0
    if h == 0.0:
        return
    span = min(h, 1e7)
    for frac in [1.0, 0.5, draw(st.floats(0.0, 1.0)), draw(st.floats(0.9, 1.0))]:
        r2, d2 = at(t0 + span * frac)
        assert kept.split(objective, r2, d2, utils) == swap
        assert walk_best(objective, r2, d2, kept.st0, walk, **sc)[0] is best
    # the split on its own (its bound is what holds the horizon when the steps do not)
    hs = split_room(objective, rems, dls if objective == "deadline" else None,
                    [p[4] for p in prog], errs, kept, derr)
    assert hs >= h
    for frac in [1.0, 0.5, 0.99, draw(st.floats(0.0, 1.0))]:
        r2, d2 = at(t0 + min(hs, 1e7) * frac)
        assert kept.split(objective, r2, d2, utils) == swap
