"""SJF-BSBF / SJF-FFS (seed 000 Algorithm 1) on hand-built snapshots."""
from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import policies
from policies.model import Gpu
from policies.plan import ReasonCode
from policies.sharing import theorem1
from sjf_share_helpers import MEMORY, PROFILES, make_snap, pending, running

BSBF = policies.get_policy("sjf-bsbf")
FFS = policies.get_policy("sjf-ffs")


def starts(plan):
    return {a.job_id: a for a in plan.starts()}


def test_registered_names():
    assert {"sjf-bsbf", "sjf-ffs"} <= set(policies.names())
    assert BSBF.needs_lengths and not BSBF.preemptive


@pytest.mark.parametrize("pol", [BSBF, FFS])
def test_takes_free_gpus_when_enough(pol):
    # n0: A on GPUs 0-1 (shareable), n1 all free; a 4-GPU and a 2-GPU job arrive
    snap = make_snap([running("A", "x", [(0, 0), (0, 1)]),
                      pending("B", "x", 4, total=100), pending("C", "x", 2, total=200)],
                     nodes=2, xi_default=1.0)
    plan = pol.schedule(snap)
    st_ = starts(plan)
    assert set(st_) == {"B", "C"}
    assert st_["B"].gpus == tuple(Gpu("n1", i) for i in range(4))  # consolidated on one node
    assert st_["C"].gpus == (Gpu("n0", 2), Gpu("n0", 3))
    for s in st_.values():
        assert s.share_with == ()
        assert plan.reasons[s.job_id].code is ReasonCode.STARTED


def test_sjf_order_shortest_first():
    snap = make_snap([pending("long", "x", 4, total=5000, submit=0.0),
                      pending("short", "x", 4, total=50, submit=10.0)], xi_default=10.0)
    plan = BSBF.schedule(snap)
    assert list(starts(plan)) == ["short"]
    assert plan.order == ("long",)


def test_shares_when_theorem1_says_so():
    a = running("A", "x", [(0, 0), (0, 1), (0, 2), (0, 3)], total=1e6)
    b = pending("B", "x", 2, total=100)
    snap = make_snap([a, b], xi_default=1.2)
    plan = BSBF.schedule(snap)
    s = starts(plan)["B"]
    assert s.share_with == ("A",)
    assert set(s.gpus) <= set(a.allocation.gpus) and len(s.gpus) == 2
    assert s.sub_batch * s.accum_steps >= b.global_batch / b.num_gpus
    r = plan.reasons["B"]
    assert r.code is ReasonCode.STARTED_SHARED
    n = r.numbers
    assert n["t_share"] < n["t_seq"]
    assert n["sub_batch"] == s.sub_batch and n["accum_steps"] == s.accum_steps
    assert n["xi_run"] == 1.2 and n["xi_new"] == 1.2
    # numbers are Theorem 1's for this pair
    tA = PROFILES["x"].iter_time(64, 4, 1, 1)
    tB = PROFILES["x"].iter_time(64, 2, 1, 1)
    d = theorem1(tA, 1e6, tB, 100, 1.2, 1.2, tB)
    assert n["t_share"] == pytest.approx(d.t_share) and n["t_seq"] == pytest.approx(d.t_seq)
    assert plan.reasons["A"].code is ReasonCode.KEEP_RUNNING


def test_waits_when_sharing_does_not_pay_but_ffs_shares():
    # A almost done, B long, ξ = 2: Case 2 with 2ξ_B + ξ_A − 2ξ_Aξ_B < 0 -> run after
    a = running("A", "x", [(0, 0), (0, 1), (0, 2), (0, 3)], total=1000, done=900)
    b = pending("B", "x", 2, total=10000)
    snap = make_snap([a, b], xi_default=2.0)
    plan = BSBF.schedule(snap)
    assert not plan.starts()
    r = plan.reasons["B"]
    assert r.code is ReasonCode.WAIT_NO_SHARE_BENEFIT
    assert r.numbers["t_share"] >= r.numbers["t_seq"]
    assert r.numbers["case"] == 2
    assert plan.order == ("B",)
    ffs = FFS.schedule(snap)
    s = starts(ffs)["B"]
    assert s.share_with == ("A",) and s.gpus == (Gpu("n0", 0), Gpu("n0", 1))  # first fit
    assert ffs.reasons["B"].code is ReasonCode.STARTED_SHARED


def test_xi_override_changes_the_decision():
    a = running("A", "x", [(0, 0), (0, 1), (0, 2), (0, 3)], total=1000, done=900)
    b = pending("B", "x", 2, total=10000)
    assert BSBF.schedule(make_snap([a, b], xi_default=2.0, override=1.05)).starts()
    # a known pair in the table overrides the default
    plan = BSBF.schedule(make_snap([a, b], xi_default=1.05, pairs={("x", "x"): 2.0}))
    assert not plan.starts()


@pytest.mark.parametrize("pol", [BSBF, FFS])
def test_sub_batch_shrinks_to_fit_memory(pol):
    # A ("big", sub-batch 256) uses 14240 MiB of 16384: B ("x") needs 1000 + 20 b <= 2144
    a = running("A", "big", [(0, 0), (0, 1), (0, 2), (0, 3)], sub_batch=256, batch=1024, total=1e6)
    b = pending("B", "x", 1, total=100, batch=256)
    plan = pol.schedule(make_snap([a, b], xi_default=1.1))
    s = starts(plan)["B"]
    assert (s.sub_batch, s.accum_steps) == (32, 8)
    assert MEMORY["big"].mem_mb(256) + MEMORY["x"].mem_mb(s.sub_batch) <= 16384


@pytest.mark.parametrize("pol", [BSBF, FFS])
def test_waits_for_memory(pol):
    a = running("A", "big", [(0, 0), (0, 1), (0, 2), (0, 3)], sub_batch=256, batch=1024, total=1e6)
    b = pending("B", "big", 1, total=100, batch=256)
    plan = pol.schedule(make_snap([a, b], xi_default=1.0))
    assert not plan.starts()
    assert plan.reasons["B"].code is ReasonCode.WAIT_MEMORY


@pytest.mark.parametrize("pol", [BSBF, FFS])
def test_never_a_third_job_on_a_gpu(pol):
    jobs = [running("A", "x", [(0, 0), (0, 1), (0, 2), (0, 3)], sub_batch=16, batch=64),
            running("C", "x", [(0, 0), (0, 1), (0, 2), (0, 3)], sub_batch=16, batch=64),
            pending("B", "x", 1, total=10)]
    plan = pol.schedule(make_snap(jobs, xi_default=1.0))
    assert not plan.starts()
    assert plan.reasons["B"].code is ReasonCode.WAIT_RESOURCES


def test_no_sharing_when_one_job_per_gpu():
    jobs = [running("A", "x", [(0, 0), (0, 1), (0, 2), (0, 3)]), pending("B", "x", 1, total=10)]
    plan = BSBF.schedule(make_snap(jobs, xi_default=1.0, max_jobs_per_gpu=1))
    assert not plan.starts()


def test_multi_partner_group_and_sort_by_t():
    # A1 (long) on GPU 0, A2 (shorter) on GPU 1, C on GPUs 2-3: all beneficial at ξ=1.1
    jobs = [running("A1", "x", [(0, 0)], total=1e6), running("A2", "x", [(0, 1)], total=1e5),
            running("C", "x", [(0, 2), (0, 3)], total=5e5),
            pending("B", "x", 1, total=100)]
    snap = make_snap(jobs, xi_default=1.1)
    plan = BSBF.schedule(snap)
    # line 14: the lowest pair JCT t first -> the job with least remaining work
    assert starts(plan)["B"].share_with == ("A2",)
    assert starts(plan)["B"].gpus == (Gpu("n0", 1),)
    assert starts(FFS.schedule(snap))["B"].share_with == ("A1",)  # first fit: GPU 0
    # a 4-GPU job takes every group, in t order, with one sub-batch fitting all
    jobs[-1] = pending("B", "x", 4, total=100)
    plan = BSBF.schedule(make_snap(jobs, xi_default=1.1))
    s = starts(plan)["B"]
    assert s.share_with == ("A2", "C", "A1")
    assert sorted(s.gpus) == [Gpu("n0", i) for i in range(4)]
    assert plan.reasons["B"].numbers["partners"] == 3


def test_shared_gpus_first_then_free():
    # 3 free GPUs, job needs 4; A (long) on GPU 0 is a beneficial partner
    jobs = [running("A", "x", [(0, 0)], total=1e6), pending("B", "x", 4, total=100)]
    plan = BSBF.schedule(make_snap(jobs, xi_default=1.1))
    s = starts(plan)["B"]
    assert s.gpus[0] == Gpu("n0", 0) and sorted(s.gpus) == [Gpu("n0", i) for i in range(4)]
    n = plan.reasons["B"].numbers
    assert n["shared_gpus"] == 1 and n["free_gpus_used"] == 3


def test_waiting_job_does_not_block_later_ones():
    # shortest job needs 8 GPUs = 4 free + 4 shareable, but no sub-batch fits beside A
    jobs = [running("A", "big", [(0, 0), (0, 1), (0, 2), (0, 3)], sub_batch=256, batch=1024),
            pending("J1", "big", 8, total=10, batch=8 * 256),
            pending("J2", "x", 2, total=5000)]
    plan = BSBF.schedule(make_snap(jobs, nodes=2, xi_default=1.0))
    assert plan.reasons["J1"].code is ReasonCode.WAIT_MEMORY
    assert starts(plan)["J2"].gpus == (Gpu("n1", 0), Gpu("n1", 1))
    assert plan.order == ("J1",)


def test_infeasible_job():
    plan = BSBF.schedule(make_snap([pending("huge", "x", 16)]))
    assert plan.infeasible == ("huge",)
    assert plan.reasons["huge"].code is ReasonCode.INFEASIBLE


# ------------------------------------------------------------------ properties
def _random_snapshot(draw):
    nodes = draw(st.integers(1, 3))
    gpus = [(n, i) for n in range(nodes) for i in range(4)]
    occupancy = Counter()
    jobs = []
    for k in range(draw(st.integers(0, 6))):
        want = draw(st.sampled_from([1, 1, 2, 4]))
        avail = [g for g in gpus if occupancy[g] < 2]
        if len(avail) < want:
            break
        start = draw(st.integers(0, len(avail) - want))
        chosen = avail[start:start + want]
        app = "x" if any(occupancy[g] for g in chosen) else draw(st.sampled_from(["x", "big"]))
        sb = draw(st.sampled_from([8, 32, 64])) if app == "x" else draw(st.sampled_from([8, 64, 256]))
        total = draw(st.floats(100, 1e6))
        for g in chosen:
            occupancy[g] += 1
        jobs.append(running(f"R{k}", app, chosen, sub_batch=sb, batch=sb * want, total=total,
                            done=draw(st.floats(0, 0.99)) * total))
    for k in range(draw(st.integers(1, 8))):
        n = draw(st.sampled_from([1, 1, 2, 3, 4, 8]))
        jobs.append(pending(f"P{k}", draw(st.sampled_from(["x", "big"])), n,
                            total=draw(st.floats(10, 1e5)),
                            batch=draw(st.sampled_from([16, 64, 256])) * n,
                            submit=draw(st.floats(0, 100))))
    xi = draw(st.sampled_from([1.0, 1.3, 1.7, 2.5]))
    return make_snap(jobs, nodes=nodes, xi_default=xi)


@pytest.mark.parametrize("name", ["sjf-bsbf", "sjf-ffs"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_plan_invariants(name, data):
    snap = _random_snapshot(data.draw)
    plan = policies.get_policy(name).schedule(snap)
    on = {g: list(snap.gpu_jobs.get(g, ())) for n in snap.nodes for g in n.gpus()}
    sub_batch = {j.id: j.allocation.sub_batch for j in snap.running()}
    for a in plan.actions:  # actions are in decision order: replay them
        job = snap.jobs[a.job_id]
        assert job.waiting
        assert len(a.gpus) == job.num_gpus == len(set(a.gpus)), "gang"
        free_before = [g for g, xs in on.items() if not xs]
        holders = {x for g in a.gpus for x in on[g]}
        assert set(a.share_with) == holders
        if a.share_with:
            # Alg. 1 lines 6-8: share only when free GPUs do not suffice
            assert len(free_before) < job.num_gpus
            assert plan.reasons[a.job_id].code is ReasonCode.STARTED_SHARED
            for g in a.gpus:
                if on[g]:
                    other = snap.jobs[on[g][0]]
                    assert (MEMORY[other.app].mem_mb(sub_batch[other.id])
                            + MEMORY[job.app].mem_mb(a.sub_batch) <= snap.node(g.node).gpu_mem_mb)
        else:
            assert all(not on[g] for g in a.gpus)
        assert a.sub_batch * a.accum_steps * job.num_gpus >= job.global_batch
        sub_batch[a.job_id] = a.sub_batch
        for g in a.gpus:
            on[g].append(a.job_id)
    assert all(len(xs) <= 2 for xs in on.values()), "more than two jobs on a GPU"
    # SJF with enough free GPUs: the shortest fitting job never waits
    started = {a.job_id for a in plan.actions}
    for jid in plan.order:
        assert jid not in started
    waiting = [j for j in snap.pending() if j.id not in started and j.id not in plan.infeasible]
    for j in waiting:
        assert plan.reasons[j.id].code in (ReasonCode.WAIT_RESOURCES, ReasonCode.WAIT_MEMORY,
                                           ReasonCode.WAIT_NO_SHARE_BENEFIT)
        if name == "sjf-ffs":
            assert plan.reasons[j.id].code is not ReasonCode.WAIT_NO_SHARE_BENEFIT
    if snap.pending():
        first = min(snap.pending(), key=lambda j: (snap.job_length(j), j.submit_time, j.id))
        if first.num_gpus <= len(snap.free_gpus):
            assert first.id in started and not starts(plan)[first.id].share_with


def test_unknown_lengths_never_share_under_bsbf():
    from dataclasses import replace
    a = replace(running("A", "x", [(0, 0), (0, 1), (0, 2), (0, 3)], total=1e6), total_iters=None)
    b = replace(pending("B", "x", 2, total=100), total_iters=None)
    snap = make_snap([a, b], xi_default=1.0)
    plan = BSBF.schedule(snap)
    assert not plan.starts()
    r = plan.reasons["B"]
    assert r.code is ReasonCode.WAIT_NO_SHARE_BENEFIT and "unknown" in r.text
    assert starts(FFS.schedule(snap))["B"].share_with == ("A",)
