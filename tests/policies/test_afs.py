"""Seed 001 (AFS): inequality (3) against brute force, Algorithm 1, network packing,
placement with migration only when unavoidable, AFS-P processor sharing, the
overestimate-first throughput rule, and the elastic baselines in the simulator."""
from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import assume, given, settings, strategies as st

import policies
from gimbalctl.cluster import parse_cluster
from gimbalctl.profiles import default_models
from gimbalctl.sim import SimConfig, simulate
from policies.afs_core import Cand, afs_l_shares, ineq3, ineq3_sides, top_priority_l
from policies.elastic import (MEASURED_RATES, UNPROFILED, Rates, allowed, place, regulate,
                              round_down)
from policies.model import Allocation, ClusterSnapshot, Gpu, Job, JobState
from policies.plan import ResizeJob, StartJob

MODELS = default_models()
ELASTIC = ("afs-l", "afs-p", "max-min", "optimus", "themis")


# ------------------------------------------------------------ inequality (3) vs brute force
def concave_curve(p1: float, gains: list[float]):
    """Throughput p(k) with p(1) = p1 and sublinear, increasing steps."""
    pts = [0.0, p1]
    for g in gains:
        pts.append(pts[-1] * (1 + g))
    return lambda k: pts[k]


def total_jct(first: str, w: dict, p: dict, r: dict) -> float:
    """Total JCT of two jobs from time 0 when the extra GPU goes to ``first``.

    Time-slot model of seed 001 §3.2 with the AFS assumption: ``a`` is the job that
    finishes first under the current shares ``r``.  Case (a): ``a`` runs on r_a+1,
    ``b`` on r_b until ``a`` ends, then on r_b+1 (the GPU passes to the survivor,
    p'_{b,2} = p'_{b,1}).  Case (b): ``b`` runs on r_b+1, ``a`` on r_a; the survivor
    keeps its share (p'_{a,2} = p_{a,1}, p'_{b,2} = p'_{b,1})."""
    if first == "a":
        t1 = w["a"] / p["a"](r["a"] + 1)
        left_b = w["b"] - p["b"](r["b"]) * t1
        return t1 + t1 + left_b / p["b"](r["b"] + 1)
    return w["a"] / p["a"](r["a"]) + w["b"] / p["b"](r["b"] + 1)


gain = st.floats(0.02, 0.95)


@settings(max_examples=400, deadline=None)
@given(pa1=st.floats(0.5, 5), pb1=st.floats(0.5, 5), ga=st.lists(gain, min_size=8, max_size=8),
       gb=st.lists(gain, min_size=8, max_size=8), ra=st.integers(1, 6), rb=st.integers(1, 6),
       wa=st.floats(10, 1e4), wb=st.floats(10, 1e4))
def test_inequality3_agrees_with_brute_force(pa1, pb1, ga, gb, ra, rb, wa, wb):
    ga, gb = sorted(ga, reverse=True), sorted(gb, reverse=True)  # diminishing returns
    p = {"a": concave_curve(pa1, ga), "b": concave_curve(pb1, gb)}
    r = {"a": ra, "b": rb}
    w = {"a": wa, "b": wb}
    # name the job that finishes first under the current shares "a" (as §3.2 does)
    if w["a"] / p["a"](ra) > w["b"] / p["b"](rb):
        p, r, w = {"a": p["b"], "b": p["a"]}, {"a": rb, "b": ra}, {"a": wb, "b": wa}
    ja = Cand("a", w["a"], p["a"], cap=64, cnt=r["a"])
    jb = Cand("b", w["b"], p["b"], cap=64, cnt=r["b"])
    left, right = ineq3_sides(ja, jb)
    jct_a, jct_b = total_jct("a", w, p, r), total_jct("b", w, p, r)
    assume(abs(jct_a - jct_b) > 1e-7 * (jct_a + jct_b) and abs(left - right) > 1e-9)
    assume(abs(ja.length(ja.cnt) - jb.length(jb.cnt)) > 1e-9 * jb.length(jb.cnt))  # who is j_a
    brute = "b" if jct_b < jct_a else "a"
    assert ("b" if ineq3(ja, jb) else "a") == brute
    # TOPPRIORITY over the pair (either walk order) makes the same choice
    assert top_priority_l([ja, jb]).id == brute
    assert top_priority_l([jb, ja]).id == brute


def test_algorithm1_two_jobs_matches_step_by_step_brute_force():
    """AFS-L on two jobs = one GPU at a time, each to the brute-force winner."""
    pa = concave_curve(1.0, [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1])
    pb = concave_curve(1.0, [0.5, 0.3, 0.2, 0.1, 0.05, 0.02, 0.01, 0.01, 0.01])
    for wa, wb in ((100.0, 1000.0), (1000.0, 100.0), (500.0, 520.0)):
        a, b = Cand("a", wa, pa, cap=10), Cand("b", wb, pb, cap=10)
        afs_l_shares([a, b], 8)
        r = {"a": 0, "b": 0}
        # stage one: one GPU each, shorter on one GPU first
        r = {"a": 1, "b": 1}
        for _ in range(6):
            w, p = {"a": wa, "b": wb}, {"a": pa, "b": pb}
            first = "a" if wa / pa(r["a"]) <= wb / pb(r["b"]) else "b"
            other = "b" if first == "a" else "a"
            ww = {"a": w[first], "b": w[other]}
            pp = {"a": p[first], "b": p[other]}
            rr = {"a": r[first], "b": r[other]}
            win = "a" if total_jct("a", ww, pp, rr) <= total_jct("b", ww, pp, rr) else "b"
            r[first if win == "a" else other] += 1
        assert (a.cnt, b.cnt) == (r["a"], r["b"])


def test_stage_one_shortest_first_and_stops_when_jobs_exceed_gpus():
    curve = concave_curve(1.0, [0.5] * 10)
    cands = [Cand(f"j{i}", w, curve, cap=64) for i, w in enumerate([50.0, 10.0, 30.0, 20.0])]
    afs_l_shares(cands, 3)
    assert [c.cnt for c in cands] == [0, 1, 1, 1]  # the longest on one GPU waits


def test_intransitive_triple_shows_walk_order_matters():
    """(3) is not transitive (module doc of afs_core): gains 1.3, 1.4, 1.5 with lengths
    increasing form a cycle, so the pass's result depends on its order."""
    def flat(f):
        return lambda k: 1.0 if k == 1 else (f if k == 2 else f)
    c1 = Cand("1", 10.0, flat(1.3), cap=2, cnt=1)
    c2 = Cand("2", 20.0, flat(1.4), cap=2, cnt=1)
    c3 = Cand("3", 30.0, flat(1.5), cap=2, cnt=1)
    assert not ineq3(c1, c2) and not ineq3(c2, c3) and ineq3(c1, c3)  # 1>2, 2>3, 3>1
    assert top_priority_l([c1, c2, c3]).id != top_priority_l([c2, c3, c1]).id


# ------------------------------------------------------------ network packing
@settings(max_examples=300, deadline=None)
@given(per=st.sampled_from([1, 2, 4, 8]), nodes=st.integers(1, 6), data=st.data())
def test_packing_never_yields_a_forbidden_share(per, nodes, data):
    total = per * nodes
    n = data.draw(st.integers(1, total))
    cuts = sorted(data.draw(st.lists(st.integers(1, total - 1), min_size=n - 1, max_size=n - 1,
                                     unique=True))) if n > 1 else []
    bounds = [0] + cuts + [total]
    shares = {f"j{i}": bounds[i + 1] - bounds[i] for i in range(n)}
    out = regulate(shares, per, total)
    assert all(allowed(r, per) for r in out.values())
    assert all(out[j] >= round_down(s, per) for j, s in shares.items())  # Prop. 2, x_i
    assert sum(out.values()) == total  # Prop. 2: the regulation keeps every GPU busy
    # Prop. 1: a placement exists on the minimum number of nodes, no GPU twice
    snap = ClusterSnapshot(0.0, parse_cluster(f"{nodes}x{per}"), {}, {}, ())
    jobs = {j: Job(j, 0.0, 1, "cifar10", 128) for j in out}
    snap = dataclasses.replace(snap, jobs=jobs)
    gpus = place(snap, {j: r for j, r in out.items() if r > 0})
    used = [g for gs in gpus.values() for g in gs]
    assert len(used) == len(set(used)) == total
    for j, gs in gpus.items():
        assert len(gs) == out[j]
        assert len({g.node for g in gs}) == math.ceil(out[j] / per)


def _snap(jobs, spec="2x4", now=100.0, **kw):
    nodes = parse_cluster(spec)
    gpu_jobs = {}
    for j in jobs:
        if j.running:
            for g in j.allocation.gpus:
                gpu_jobs.setdefault(g, ()).__add__((j.id,))
                gpu_jobs[g] = gpu_jobs.get(g, ()) + (j.id,)
    free = tuple(g for n in nodes for g in n.gpus() if g not in gpu_jobs)
    return ClusterSnapshot(now, nodes, {j.id: j for j in jobs}, gpu_jobs, free,
                           profiles=MODELS.profiles, memory=MODELS.memory, **kw)


def _running(jid, gpus, app="cifar10", batch=512, iters=1e5, submit=0.0, done=0.0):
    return Job(jid, submit, len(gpus), app, batch, total_iters=iters, state=JobState.RUNNING,
               allocation=Allocation(tuple(gpus), batch // len(gpus)), start_time=submit,
               as_of=100.0, completed_iters=done)


def test_placement_keeps_old_gpus_when_shrinking_and_growing():
    a = _running("a", [Gpu("n0000", i) for i in range(4)])
    b = _running("b", [Gpu("n0001", 0), Gpu("n0001", 1)])
    snap = _snap([a, b])
    got = place(snap, {"a": 2, "b": 4})
    assert set(got["a"]) <= set(a.allocation.gpus)  # shrinks in place
    assert set(b.allocation.gpus) <= set(got["b"])  # grows around its GPUs
    assert not set(got["a"]) & set(got["b"])


def test_migration_only_when_no_old_gpu_can_be_kept():
    # b holds one GPU on each node's half; a needs a whole node: b moves, flagged
    a = _running("a", [Gpu("n0000", 0), Gpu("n0000", 1)], iters=1e7)
    b = _running("b", [Gpu("n0000", 2)], iters=1e3)
    snap = _snap([a, b])
    got = place(snap, {"a": 4, "b": 1})
    assert set(a.allocation.gpus) <= set(got["a"])
    assert got["b"][0].node == "n0001"  # the only place left: a migration


# ------------------------------------------------------------ policies on snapshots
def test_afs_l_plan_reports_share_and_both_sides_of_inequality3():
    a = _running("a", [Gpu("n0000", i) for i in range(4)], iters=1e6)
    w = Job("w", 50.0, 2, "imagenet", 400, total_iters=1e3)
    plan = policies.get_policy("afs-l").schedule(_snap([a, w]))
    for jid in ("a", "w"):
        nums = plan.reasons[jid].numbers
        assert {"share", "ineq3_left", "ineq3_right"} <= set(nums)
        assert nums["ineq3_left"] <= nums["ineq3_right"] + 1e-12
    starts = {s.job_id: s for s in plan.starts()}
    assert "w" in starts  # the new job gets at least one GPU (stage one)
    total = sum(len(s.gpus) for s in plan.starts()) + sum(
        len(r.gpus) for r in plan.resizes()) + (4 if not plan.resizes() else 0)
    assert total <= 8
    for act in plan.actions:
        if isinstance(act, (StartJob, ResizeJob)):
            assert allowed(len(act.gpus), 4)
            assert act.sub_batch * act.accum_steps * len(act.gpus) >= (400 if act.job_id == "w"
                                                                       else 512)


def test_afs_p_processor_sharing_is_non_preemptive_within_a_unit():
    pol = policies.get_policy("afs-p", unit_s=1000.0)
    jobs = [_running(f"r{i}", [Gpu(f"n000{i // 4}", i % 4)], submit=float(i)) for i in range(8)]
    jobs = [dataclasses.replace(j, executed_time=400.0) for j in jobs]  # mid-unit
    new = Job("new", 90.0, 1, "cifar10", 128, total_iters=1e3)
    plan = pol.schedule(_snap(jobs + [new]))
    assert not plan.preempts() and not plan.starts()  # 9 jobs > 8 GPUs: the new one waits
    assert plan.reasons["new"].numbers["counter"] == 0
    # r0 has now crossed its unit boundary since its record (as_of) was written: evicted
    crossed = dataclasses.replace(jobs[0], executed_time=990.0, as_of=80.0)
    plan = pol.schedule(_snap([crossed] + jobs[1:] + [new]))
    assert [p.job_id for p in plan.preempts()] == ["r0"]
    assert [s.job_id for s in plan.starts()] == ["new"]


def test_overestimate_first_for_a_job_without_profile():
    """§4.5 for jobs whose application has no fitted profile."""
    snap = _snap([], predictors={UNPROFILED: ("u", "m"), MEASURED_RATES: {"m": {2: 10.0}}})
    rates = Rates(snap)
    u = Job("u", 0.0, 1, "cifar10", 128)
    m = dataclasses.replace(u, id="m")
    assert [rates.rate(u, k) for k in (1, 2, 4)] == [1.0, 2.0, 4.0]  # linear, optimistic
    assert rates.cap(u, 4) == 2  # first share within the fair share (8 GPUs / 4 jobs)
    assert rates.rate(m, 2) == 10.0  # measured
    assert rates.rate(m, 4) == 20.0  # linear beyond the last measured count
    assert rates.rate(m, 1) == 5.0
    assert rates.cap(m, 4) == 8  # once measured, no fair-share cap
    # a running job's own reported rate counts as a measurement at its current count
    r = dataclasses.replace(_running("u", [Gpu("n0000", 0), Gpu("n0000", 1)]), iter_rate=3.0)
    assert Rates(dataclasses.replace(snap, jobs={"u": r})).rate(r, 4) == 6.0
    # a profiled job uses the fitted model
    assert Rates(_snap([])).rate(u, 2) == pytest.approx(
        1.0 / MODELS.profiles["cifar10"].iter_time(64, 2, 1, 1))


# ------------------------------------------------------------ in the simulator
@pytest.mark.parametrize("name", ELASTIC)
def test_elastic_policies_resize_and_finish(name):
    jobs = [Job(f"j{i}", 60.0 * i, g, app, b, total_iters=it) for i, (g, app, b, it) in enumerate(
        [(4, "cifar10", 512, 3000), (1, "imagenet", 200, 800), (2, "bert", 24, 500),
         (8, "cifar10", 1024, 4000), (1, "ncf", 256, 20000)])]
    res = simulate(jobs, parse_cluster("2x4"), policies.get_policy(name), MODELS,
                   SimConfig(interval=60.0, seed=3))
    assert res.jobs.end.notna().all()
    # elastic: a job's GPU count is the policy's, not the request (j3 asked 8 of 8)
    assert res.summary["gpu_utilization"] > 0.5


def test_afs_l_beats_srtf_when_a_long_job_scales_and_short_ones_do_not():
    """§3.2's point on a tiny instance: an efficient long job should not be starved."""
    jobs = [Job("long", 0.0, 8, "cifar10", 2048, total_iters=30000)] + [
        Job(f"s{i}", 0.0, 8, "bert", 96, total_iters=800) for i in range(3)]
    cfg = SimConfig(interval=60.0)
    afs = simulate(jobs, parse_cluster("2x4"), policies.get_policy("afs-l"), MODELS, cfg)
    srtf = simulate(jobs, parse_cluster("2x4"), policies.get_policy("srtf"), MODELS, cfg)
    assert afs.summary["avg_jct"] < srtf.summary["avg_jct"]


def test_simulator_regrows_after_a_completion_with_nothing_waiting():
    """Elastic policies are called at every completion (the freed GPUs go to the running
    jobs) and attained service counts the GPUs actually held."""
    seen = []

    class Spy:
        name, preemptive, elastic = "spy", True, True

        def __init__(self):
            self.inner = policies.get_policy("afs-l")

        def schedule(self, snap):
            plan = self.inner.schedule(snap)
            held = {j.id: len(j.allocation.gpus) for j in snap.jobs.values() if j.running}
            held.update({a.job_id: len(a.gpus) for a in plan.resizes() + plan.starts()})
            seen.append((snap.now, held, {j.id: snap.attained_service(j)
                                          for j in snap.jobs.values()}))
            return plan

    jobs = [Job("long", 0.0, 1, "cifar10", 2048, total_iters=20000),
            Job("short", 0.0, 1, "bert", 96, total_iters=300)]
    res = simulate(jobs, parse_cluster("2x4"), Spy(), MODELS, SimConfig(interval=60.0))
    end_short = float(res.jobs.set_index("id").end["short"])
    after = [s for s in seen if s[0] >= end_short - 1e-9]
    assert after and after[0][1] == {"long": 8}  # regrown to the whole cluster at once
    before = [s for s in seen if 0 < s[0] < end_short]
    assert all(n < 8 for s in before for n in s[1].values())
    t0, held0, att0 = seen[0]
    # attained service grows with the GPUs held, not the 1 GPU asked for
    t1, held1, att1 = after[0]
    assert att1["long"] > (t1 - t0) * 1.5


@pytest.mark.parametrize("name", ELASTIC)
def test_gpu_range_bounds_the_share(name):
    jobs = [Job("r", 0.0, 1, "cifar10", 1024, total_iters=5000, gpu_range=(1, 2)),
            Job("f", 0.0, 1, "cifar10", 1024, total_iters=5000)]
    seen = []

    class Spy:
        preemptive, elastic = True, True

        def __init__(self):
            self.inner = policies.get_policy(name)
            self.name = name

        def schedule(self, snap):
            seen.extend(len(j.allocation.gpus) for j in snap.jobs.values()
                        if j.running and j.id == "r")
            return self.inner.schedule(snap)

    simulate(jobs, parse_cluster("2x4"), Spy(), MODELS, SimConfig(interval=30.0))
    assert seen and max(seen) <= 2


def test_fig2_style_plot_has_one_line_per_policy_in_each_panel(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from gimbalctl.report import plot_ql_ce_bi

    jobs = [Job(f"j{i}", 30.0 * i, 4, "cifar10", 512, total_iters=2000) for i in range(6)]
    res = [simulate(jobs, parse_cluster("1x4"), policies.get_policy(p), MODELS, SimConfig())
           for p in ("afs-l", "srtf")]
    figs = []
    monkeypatch.setattr(plt, "close", lambda fig=None: figs.append(fig))
    path = plot_ql_ce_bi(res, tmp_path / "f.png")
    assert path.stat().st_size > 0
    axes = figs[-1].axes
    assert [a.get_ylabel() for a in axes] == ["QL (waiting jobs)", "CE", "BI (log scale)"]
    assert all(len(a.lines) == 2 for a in axes[:2])
    assert {t.get_text() for t in axes[0].get_legend().get_texts()} == {"afs-l", "srtf"}


@settings(max_examples=200, deadline=None)
@given(data=st.data(), n=st.integers(1, 7), total=st.integers(1, 20))
def test_fast_walks_equal_topriority_as_written(data, n, total):
    """The precomputed walks used by the policies make the decisions of Algorithm 1's
    TOPPRIORITY (and its length-unaware variant) as written, GPU after GPU."""
    from policies.afs_core import afs_p_shares, top_priority_p

    def cands():
        out = []
        for i in range(n):
            gains = sorted(data.draw(st.lists(st.floats(0.0, 1.2), min_size=12, max_size=12),
                                     label=f"g{i}"), reverse=True)
            out.append(Cand(f"j{i}", data.draw(st.floats(1, 1e4), label=f"w{i}"),
                            concave_curve(data.draw(st.floats(0.5, 3), label=f"p{i}"), gains),
                            cap=data.draw(st.integers(1, 12), label=f"c{i}")))
        return out

    def reference(jobs, pick):
        for c in jobs:
            c.cnt = 0
        for _ in range(total):
            live = [c for c in jobs if c.can_grow()]
            if not live:
                break
            pick(live).cnt += 1
        return [c.cnt for c in jobs]

    js = cands()
    want = reference(js, top_priority_l)
    afs_l_shares(js, total)
    assert [c.cnt for c in js] == want
    want_p = reference(js, lambda live: top_priority_p(live, 5))
    afs_p_shares(js, total, 5)
    if n <= total and not any(c.doubles_at_one() for c in js):
        assert [c.cnt for c in js] == want_p
