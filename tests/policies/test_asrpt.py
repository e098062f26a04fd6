"""A-SRPT (seed 003): virtual SRPT vs brute force, Heavy-Edge on Fig. 2 and vs an exact ILP,
eq. 4-7 properties, Algorithm 1 decisions, the simulator's pipeline hook."""
from __future__ import annotations

import random

import numpy as np
import pytest

import policies
from gimbalctl.cluster import parse_cluster
from gimbalctl.placement_ilp import exact_min_cut
from gimbalctl.profiles import default_models
from gimbalctl.sim import SimConfig, simulate
from policies.asrpt_core import alpha_bounds, virtual_srpt
from policies.heavy_edge import cut_weight, heavy_edge
from policies.model import ClusterSnapshot, FinishedJob, Gpu, Job
from policies.pipeline import (MODELS, Network, configurations, counts_of, iter_time, job_graph,
                               pipeline_spec)

MODELS_ = default_models()


# ----------------------------------------------------------- virtual SRPT
def brute_srpt(items):
    """Unit time slots: each slot runs the arrived job with least remaining work
    (ties: earlier release, then key); completion = end of its last slot."""
    rem = {k: p for k, _, p in items}
    rel = {k: r for k, r, _ in items}
    done = {k: float(r) for k, r, p in items if p == 0}
    t = 0
    while len(done) < len(items):
        ready = [k for k in rem if rel[k] <= t and k not in done]
        if ready:
            k = min(ready, key=lambda k: (rem[k], rel[k], k))
            rem[k] -= 1
            if rem[k] == 0:
                done[k] = float(t + 1)
        t += 1
        for k in rem:  # zero-length jobs released now
            if rem[k] == 0 and k not in done and rel[k] <= t:
                done[k] = float(rel[k])
    return done


@pytest.mark.parametrize("seed", range(40))
def test_virtual_srpt_equals_brute_force(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 8)
    items = [(f"j{i}", rng.randint(0, 12), rng.randint(0, 9)) for i in range(n)]
    got = virtual_srpt(items)
    want = brute_srpt(items)
    assert got == pytest.approx(want)
    order = lambda d: sorted(d, key=lambda k: (d[k], k))  # noqa: E731
    assert order(got) == order(want)


def test_virtual_srpt_preempts_for_shorter_job():
    done = virtual_srpt([("long", 0, 10), ("short", 2, 3)])
    assert done == {"short": 5.0, "long": 13.0}


# ----------------------------------------------------------- Heavy-Edge
def fig2_graph():
    """Fig. 2: three stages x two replicas; S1's AllReduce edge is 20 MB (the heaviest),
    S1-S2 replica pairs 1 MB.  Weights the text does not give (ours): S2 and S3 AllReduce
    0.5 MB, S2-S3 pairs 0.2 MB."""
    MB = 1e6
    adj = {(s, r): {} for s in range(3) for r in range(2)}

    def e(u, v, w):
        adj[u][v] = adj[v][u] = w * MB

    e((0, 0), (0, 1), 20)
    e((0, 0), (1, 0), 1)
    e((0, 1), (1, 1), 1)
    e((1, 0), (1, 1), 0.5)
    e((2, 0), (2, 1), 0.5)
    e((1, 0), (2, 0), 0.2)
    e((1, 1), (2, 1), 0.2)
    return adj


def test_heavy_edge_fig2_assignment():
    where = heavy_edge(fig2_graph(), [("one-a", 1), ("four", 4), ("one-b", 1)])
    first = {v for v, m in where.items() if m == "four"}
    assert first == {(0, 0), (0, 1), (1, 0), (1, 1)}  # S1-R1, S1-R2, S2-R1, S2-R2
    assert {where[(2, 0)], where[(2, 1)]} == {"one-a", "one-b"}


def exact_cut(adj, servers):
    return exact_min_cut(adj, servers)


def random_instance(rng):
    model = rng.choice([m for m in MODELS if MODELS[m].min_stages == 1])
    k = rng.randint(3, 8)
    stages = rng.randint(1, min(4, k))
    spec = pipeline_spec(model, stages, k)
    caps, left = [], k
    while left:
        c = rng.randint(1, min(4, left))
        caps.append(c)
        left -= c
    return spec, [(f"m{i}", c) for i, c in enumerate(caps)]


def stage_counts(spec, where):
    nodes = [[] for _ in spec.stages]
    for (s, _), m in where.items():
        nodes[s].append(m)
    return counts_of(nodes)


def test_heavy_edge_within_ilp_cut_on_random_graphs():
    """Table II analogue: Heavy-Edge vs the exact min-cut ILP (scipy milp) on 30 random small
    instances (Table I models, 3-8 replicas, 1-4 stages, 1-4 GPUs per server).  Measured with
    this seed: 27 of 30 cuts optimal, median cut ratio 1.00, mean 1.44; eq. 7 per-iteration
    time (PITT, what Table II reports) median ratio 1.00, 27 of 30 equal, two at 1.01, one
    outlier at 23x (resnet152 [2,2,1] on 3+2 free GPUs: the greedy seeds the 3-GPU server with
    stage 0's AllReduce edge and then must cut stage 1's, where the optimum puts stages 1-2
    on the 3-GPU server).  The paper: VGG19 PITT 1.06x, GPT-175B 1.00x.  Asserted: the ILP is
    never beaten, at least 24 of 30 cuts are optimal, median PITT ratio 1."""
    rng = random.Random(3)
    cut_ratios, pitt_ratios = [], []
    for _ in range(30):
        spec, servers = random_instance(rng)
        adj = job_graph(spec)
        opt, opt_where = exact_cut(adj, servers)
        he_where = heavy_edge(adj, servers)
        he = cut_weight(adj, he_where)
        assert he >= opt - 1e-6 * max(opt, 1)
        cut_ratios.append(he / opt if opt > 0 else 1.0)
        gpn = {m: 4 for m, _ in servers}
        pitt_ratios.append(iter_time(spec, stage_counts(spec, he_where), gpn)
                           / iter_time(spec, stage_counts(spec, opt_where), gpn))
    assert np.median(cut_ratios) <= 1.0 + 1e-9
    assert sum(r <= 1 + 1e-9 for r in cut_ratios) >= 24
    assert np.median(pitt_ratios) <= 1.0 + 1e-9, pitt_ratios


def test_heavy_edge_is_deterministic_per_seed():
    adj = {(0, i): {} for i in range(6)}  # no edges: every pick is the random one
    a = heavy_edge(adj, [("x", 3), ("y", 3)], seed=5)
    assert a == heavy_edge(adj, [("x", 3), ("y", 3)], seed=5)


# ----------------------------------------------------------- eq. 4-7
def test_eq7_consolidated_beats_spread_and_alpha_bounds():
    spec = pipeline_spec("bert_large", 2, 8)
    one = counts_of([["a"] * 4, ["a"] * 4])
    spread = counts_of([["a", "b", "c", "d"], ["e", "f", "g", "h"]])
    gpn = dict.fromkeys("abcdefgh", 8)
    assert iter_time(spec, one, gpn) < iter_time(spec, spread, gpn)
    snap = ClusterSnapshot(0.0, tuple(parse_cluster("4x8")), {}, {}, ())
    job = Job("j", 0.0, 8, "bert_large", 4, stages=2)
    amin, amax = alpha_bounds(snap, job, Network())
    assert amin == pytest.approx(iter_time(spec, one, gpn))
    assert amax / amin > 1.5  # communication-heavy on 10 Gbps
    slow = alpha_bounds(snap, job, Network.from_units(300, 1))[1]
    assert slow > amax  # a slower NIC only hurts the spread placement


def test_single_gpu_job_has_no_communication():
    spec = pipeline_spec("vgg19", 1, 1)
    a = iter_time(spec, counts_of([["n"]]), {"n": 8})
    assert a == pytest.approx(spec.stages[0].p_f + spec.stages[0].p_b)
    assert configurations("gpt_175b", 8) == ()


# ----------------------------------------------------------- Algorithm 1
def snap_of(jobs, nodes="2x8", now=100.0, history=(), predictors=None):
    ns = tuple(parse_cluster(nodes))
    free = tuple(g for n in ns for g in n.gpus())
    return ClusterSnapshot(now, ns, {j.id: j for j in jobs}, {}, free, MODELS_.profiles,
                           MODELS_.memory, MODELS_.interference, history=tuple(history),
                           predictors=predictors or {})


class Fixed:
    unit, kind = "iterations", "fixed"

    def __init__(self, table):
        self.table = table

    def predict(self, job):
        return self.table.get(job.group_id, 0.0)

    def source(self, job):
        return "rf" if job.group_id in self.table else "unseen-group"


def test_pending_queue_holds_jobs_until_virtual_completion():
    """Line 2: a job enters pending_queue only when it has completed in Ã1; an unseen
    group (prediction 0) completes on arrival and starts at once."""
    long = Job("long", 90.0, 1, "vgg19", 32, group_id="g-long")
    new = Job("new", 95.0, 1, "vgg19", 32, group_id="g-unseen")
    snap = snap_of([long, new], predictors={"iterations": Fixed({"g-long": 1e6})})
    plan = policies.get_policy("a-srpt").schedule(snap)
    started = {a.job_id for a in plan.starts()}
    assert started == {"new"}
    assert plan.order == ("long",)
    assert "virtual SRPT" in plan.reasons["long"].text
    assert plan.reasons["new"].numbers["virtual_pos"] == 0


def test_order_follows_virtual_completion_and_head_blocks():
    a = Job("a", 0.0, 16, "resnet152", 4, total_iters=1.0)  # small virtual p
    b = Job("b", 1.0, 4, "resnet152", 4, total_iters=1e4)
    snap = snap_of([a, b], now=1e6)
    # take 4 GPUs so that a (16 GPUs) cannot start; b fits but is behind a: line 25
    busy = tuple(snap.free_gpus[:4])
    snap = ClusterSnapshot(snap.now, snap.nodes, snap.jobs, {}, snap.free_gpus[4:],
                           snap.profiles, snap.memory, snap.interference)
    plan = policies.get_policy("a-srpt").schedule(snap)
    assert not plan.starts() and plan.order == ("a", "b")
    assert busy


def test_heavy_job_consolidates_light_job_fills_fragments():
    """Lines 9 and 22: a communication-heavy job takes the most-free server, a light one the
    least-free server that covers it."""
    nodes = tuple(parse_cluster("2x8"))
    # n0000 has 3 free GPUs, n0001 has 8
    free = tuple(Gpu("n0000", i) for i in range(5, 8)) + nodes[1].gpus()
    heavy = Job("h", 0.0, 4, "bert_large", 4, total_iters=10.0, stages=2)
    light = Job("l", 0.0, 1, "resnet152", 4, total_iters=10.0)
    snap = ClusterSnapshot(1e6, nodes, {"h": heavy, "l": light}, {}, free, MODELS_.profiles,
                           MODELS_.memory, MODELS_.interference)
    pol = policies.get_policy("a-srpt")
    facts, _ = pol.virtual(snap)
    assert facts["h"][1] / facts["h"][0] >= 1.5 and facts["l"][1] / facts["l"][0] < 1.5
    starts = {a.job_id: a for a in pol.schedule(snap).starts()}
    assert {g.node for g in starts["h"].gpus} == {"n0001"}
    assert {w.stage for w in starts["h"].workers} == {0, 1}
    for st in (0, 1):  # the allocation record's contract: per stage, shares sum to the batch
        assert sum(w.share for w in starts["h"].workers if w.stage == st) == heavy.global_batch
    assert all(w.micro_batch * w.accum_steps >= w.share for w in starts["h"].workers)
    assert {g.node for g in starts["l"].gpus} == {"n0000"}


def test_heavy_job_is_delayed_then_starts_after_tau():
    """Lines 14-20: spread placement only -> delayed (blocks the queue), starts when the
    delay tau * p is over."""
    nodes = tuple(parse_cluster("2x8"))
    free = tuple(Gpu("n0000", i) for i in range(4, 8)) + tuple(Gpu("n0001", i) for i in range(4, 8))
    heavy = Job("h", 0.0, 8, "bert_large", 4, total_iters=1000.0, stages=2)
    jobs = {"h": heavy}
    pol = policies.get_policy("a-srpt", tau=1.0)

    def at(now):
        return ClusterSnapshot(now, nodes, jobs, {}, free, MODELS_.profiles, MODELS_.memory,
                               MODELS_.interference)
    facts, done = pol.virtual(at(0.0))
    t = done["h"] + 1
    p1 = pol.schedule(at(t))
    assert not p1.starts() and p1.order == ("h",)
    p = facts["h"][5]
    assert p1.reasons["h"].numbers["delay_until"] == pytest.approx(t + p)
    assert not pol.schedule(at(t + p / 2)).starts()
    assert pol.schedule(at(t + p + 1)).starts()


def test_history_window_and_perfect_variant():
    hist = [FinishedJob("old", "u", 0.0, 0.0, 10.0, 1, "vgg19", iterations=1e9)]
    j = Job("j", 5.0, 1, "vgg19", 32, total_iters=10.0)
    snap = snap_of([j], now=50.0, history=hist)
    # "old" was submitted before the earliest active job: not part of Ã1
    plan = policies.get_policy("a-srpt-perfect").schedule(snap)
    assert plan.starts()


# ----------------------------------------------------------- simulator hook
def test_simulator_runs_pipeline_jobs_at_eq7_rate():
    nodes = parse_cluster("2x8")
    job = Job("p", 0.0, 8, "bert_large", 4, total_iters=100.0, stages=2)
    res = simulate([job], nodes, policies.get_policy("a-srpt"), MODELS_, SimConfig())
    snap = snap_of([job])
    amin, _ = alpha_bounds(snap, job, Network())
    row = res.jobs.iloc[0]
    assert row.run_time == pytest.approx(100 * amin, rel=1e-6)
    # placed across the two servers by another policy: slower (eq. 5-6)
    res2 = simulate([job], nodes, policies.get_policy("fifo"), MODELS_, SimConfig())
    assert res2.jobs.iloc[0].run_time >= row.run_time - 1e-9


def test_simulator_fills_history_and_refits():
    nodes = parse_cluster("1x4")
    jobs = [Job(f"j{i}", 100.0 * i, 1, "resnet152", 4, total_iters=50.0, group_id="g")
            for i in range(4)]
    seen = []

    def refit(history, now):
        seen.append((now, len(history)))
        return {"iterations": Fixed({"g": 50.0 * len(history)})}
    simulate(jobs, nodes, policies.get_policy("a-srpt"), MODELS_, SimConfig(),
             refit=refit, refit_every=150.0)
    assert seen[0] == (0.0, 0)
    assert all(b - a >= 150.0 for (a, _), (b, _) in zip(seen, seen[1:]))
    assert seen[-1][1] >= 1  # later fits saw finished jobs
