"""Isolation's round computed per GPU count (policies/isolation_round.py, issue #13) returns
exactly the Plans of the code it replaces — ``Isolation.schedule_reference`` (Gavel's
``run_round`` over a mapping per job, as on main) and the verbatim pre-#13 copy in
reference_typed_rounds.py: the same actions in the same order, the same waiting order and
every job's reason (code, text, numbers).  Compared at every call of simulator runs (the
bundled Pollux workload at 4x8, where the round pre-empts and restarts most jobs; random
jobs on a three-type cluster, with GPU counts no type or only some types hold), on
hypothesis-random snapshots (running jobs on mixed or other-type GPUs, batch overrides,
received time of every kind, ties of key and submit time, jobs submitted at ``now``) and on
the daemon benchmark's state."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

import reference_typed_rounds as ref
from daemon_pass import apply_plan, build
from policies.isolation import Isolation
from policies.model import Allocation, Node, JobState
from test_similarity import APPS, M, job, snap
from test_sjf_differential import assert_same


def check(pol: Isolation, sn):
    """The new plan against both references; returns it."""
    plan = pol.schedule(sn)
    want = pol.schedule_reference(sn)
    assert_same(plan, want)
    assert dict(plan.reasons) == dict(want.reasons)  # numbers compared with ==
    assert_same(plan, ref.isolation_schedule(pol, sn))
    return plan


class Differential:
    def __init__(self):
        self.pol = Isolation()
        self.name, self.preemptive, self.rounds_only = "isolation", True, True
        self.round_length = self.pol.round_length
        self.calls = self.preempts = self.starts = self.waiting = 0

    def __getattr__(self, attr):
        return getattr(self.pol, attr)

    def schedule(self, sn):
        plan = check(self.pol, sn)
        self.calls += 1
        self.preempts += len(plan.preempts())
        self.starts += len(plan.starts())
        self.waiting += len(plan.order)
        return plan


def test_every_call_of_a_pollux_workload_run():
    from gimbalctl.cluster import parse_cluster
    from gimbalctl.profiles import default_models
    from gimbalctl.sim import SimConfig, simulate
    from gimbalctl.traces import load_trace

    # the bundled Pollux workload (the Philly trace lives outside the repository)
    trace = (Path(__file__).resolve().parents[2] / "gimbalctl" / "data" / "traces" / "pollux"
             / "workload-1.csv")
    models = default_models()
    nodes = parse_cluster("4x8")
    jobs = load_trace(str(trace), models=models, nodes=nodes)
    pol = Differential()
    simulate(jobs, nodes, pol, models, SimConfig())
    # the processor-sharing regime the change is for: rounds that swap many jobs
    assert pol.calls > 200 and pol.preempts > 500 and pol.starts > 500 and pol.waiting > 500


@pytest.mark.parametrize("seed", [1, 7, 11])
@pytest.mark.parametrize("cluster,gpus", [("2x2:v100,1x4:p100,2x4:k80", (1, 1, 2, 4, 8, 16)),
                                          ("2x4", (1, 2, 2, 4, 8, 16))])
def test_every_call_of_a_random_run(seed, cluster, gpus):
    from gimbalctl.cluster import parse_cluster
    from gimbalctl.sim import SimConfig, simulate
    from random_jobs import plain_jobs

    nodes = parse_cluster(cluster)
    total = sum(n.num_gpus for n in nodes)
    # counts above a type's size and above every type's (no share: never decided)
    jobs = plain_jobs(40, seed, gpus=gpus, span=3000.0, iters=(100.0, 4000.0))
    big = [j for j in jobs if j.num_gpus > total]
    jobs = [j for j in jobs if j.num_gpus <= total]
    pol = Differential()
    try:
        simulate(jobs, nodes, pol, M, SimConfig(interval=180.0, seed=seed, preempt_cost=10.0))
    except RuntimeError:
        pass
    assert pol.calls > 10 and pol.preempts > 0 and pol.starts > 10
    if big:  # a snapshot with jobs no type can hold, at the run's last state
        sn = snap(nodes, [dataclasses.replace(j, submit_time=0.0) for j in big + jobs[:5]],
                  now=100.0)
        check(Isolation(), sn)


def _gpus(nodes):
    return [g for n in nodes for g in n.gpus()]


@settings(max_examples=200, deadline=None)
@given(nv=st.integers(0, 3), nk=st.integers(0, 2), per=st.sampled_from([1, 2, 4, 8]),
       specs=st.lists(st.tuples(st.sampled_from(APPS[:4]), st.sampled_from([1, 1, 2, 3, 4, 8, 32]),
                                st.sampled_from([32, 64, 128]),
                                st.sampled_from(["wait0", "waitrun", "run", "runmix", "runbatch"]),
                                st.sampled_from([0.0, 0.0, 50.0, 100.0, 400.0]),
                                st.sampled_from([0.0, 10.0, 50.0, 99.0]),
                                st.integers(0, 5)),
                      min_size=1, max_size=24),
       now=st.sampled_from([100.0, 400.0]), shuffle=st.randoms(use_true_random=False),
       rounds=st.integers(1, 3))
def test_random_snapshots(nv, nk, per, specs, now, shuffle, rounds):
    nodes = tuple([Node(f"v{i}", per, "v100") for i in range(nv)] +
                  [Node(f"k{i}", per, "k80", 12288) for i in range(nk)])
    if not nodes:
        nodes = (Node("v0", per, "v100"),)
    free = _gpus(nodes)
    shuffle.shuffle(free)
    by_type = {}
    for g in free:
        by_type.setdefault(g.node[0], []).append(g)
    jobs = []
    for i, (app, n, batch, kind, submit, executed, tie) in enumerate(specs):
        j = job(i, app=app, n=n, batch=batch * n, t=min(submit + tie % 2, now))
        if kind.startswith("run"):
            pool = free if kind == "runmix" else by_type[shuffle.choice(sorted(by_type))]
            pool = [g for g in pool if g in free]
            if len(pool) < n:
                kind = "waitrun"
            else:
                gs = tuple(pool[:n])
                for g in gs:
                    free.remove(g)
                over = batch * n * 2 if kind == "runbatch" else None
                j = dataclasses.replace(
                    j, state=JobState.RUNNING, start_time=j.submit_time,
                    allocation=Allocation(gs, batch, 1, None, global_batch=over),
                    as_of=now - executed / 2, executed_time=executed / 2, run_start=j.submit_time)
        if kind == "waitrun":
            j = dataclasses.replace(j, state=JobState.SUSPENDED, start_time=j.submit_time,
                                    executed_time=executed, preemptions=1)
        jobs.append(j)
    sn = snap(nodes, jobs, now=now)
    pol = Isolation()
    for _ in range(rounds):
        plan = check(pol, sn)
        sn = apply_plan(sn, plan, dt=180.0)


def test_daemon_state():
    sn, _ = build(12, 8, 40, 60, seed=3)
    plan = check(Isolation(), sn)
    assert plan.preempts() or plan.starts()


def test_shared_reasons_are_immutable_and_per_count():
    """A started / kept / waiting job's reason is shared, so it must be immutable and
    carry the numbers of its own GPU count's shares."""
    nodes = (Node("v0", 4, "v100"), Node("k0", 4, "k80", 12288))
    jobs = [job(i, n=n, t=float(i)) for i, n in enumerate([1, 1, 2, 4, 4, 8])]
    sn = snap(nodes, jobs, now=50.0)
    plan = check(Isolation(), sn)
    started = {a.job_id for a in plan.starts()}
    assert started and plan.order
    r = plan.reasons
    with pytest.raises((TypeError, dataclasses.FrozenInstanceError)):
        r[next(iter(started))].numbers["x_v100"] = 1.0
    assert r["j0"] is r["j1"]  # same count, same type, same code
