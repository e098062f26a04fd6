"""Seed 002 (model similarity, rounds, packing): Alg. 1 / eq. 3, Alg. 2, Alg. 3."""
from __future__ import annotations

import math
from types import MappingProxyType

import pytest
from hypothesis import given, settings, strategies as st

from gimbalctl.profiles import default_models
from gimbalctl.similarity_db import APP_MODEL, build_db, load_features, FeatureTableError
from policies.model import Allocation, ClusterSnapshot, Gpu, Job, JobState, Node
from policies.plan import PreemptJob, ReasonCode, StartJob
from policies.similarity import SimilarityDB, Similarity, cosine, scaled
from policies.typed_rounds import type_capacity
from policies.throughput import GpuTypeTable
from tests.test_sim_properties import Checked  # the simulator's invariants, checked every round

M = default_models()
APPS = tuple(sorted(M.profiles))
TYPES = GpuTypeTable(per_app=MappingProxyType({
    (a, t): s for a in APPS for t, s in (("v100", 1.0), ("p100", 0.7), ("k80", 0.2))}),
    memory_mb=MappingProxyType({"v100": 16384, "p100": 16384, "k80": 12288}))
DB = build_db(APPS)


def snap(nodes, jobs, now=0.0, db=DB, gpu_types=TYPES):
    jobs = {j.id: j for j in jobs}
    gpu_jobs: dict = {}
    for j in jobs.values():
        if j.running:
            for g in j.allocation.gpus:
                gpu_jobs[g] = gpu_jobs.get(g, ()) + (j.id,)
    free = tuple(g for n in nodes for g in n.gpus() if g not in gpu_jobs)
    return ClusterSnapshot(now, tuple(nodes), MappingProxyType(jobs), MappingProxyType(gpu_jobs), free,
                           M.profiles, M.memory, M.interference, gpu_types=gpu_types,
                           predictors=MappingProxyType({"similarity": db} if db else {}))


def job(i, app="cifar10", n=1, batch=128, t=0.0, **kw):
    return Job(f"j{i}", t, n, app, batch, total_iters=1000.0, **kw)


# ------------------------------------------------------------------ Alg. 1 / eq. 3
def test_cosine_hand_values():
    assert cosine((1, 0), (0, 1)) == 0.0
    assert cosine((1, 2, 3), (2, 4, 6)) == pytest.approx(1.0)
    assert cosine((1, 2), (2, 1)) == pytest.approx(4 / 5)
    assert cosine((3, 4), (4, 3)) == pytest.approx(24 / 25)
    assert cosine((0, 0), (1, 1)) == 0.0
    assert scaled((0, math.e - 1)) == pytest.approx((0.0, 1.0))


def test_closest_is_the_model_itself_when_recorded():
    for app in APPS:
        ref, sim = DB.closest(app)
        assert ref == app and sim == pytest.approx(1.0)


def test_closest_by_hand_on_a_tiny_db():
    db = SimilarityDB({"a": (1.0, 0.0), "b": (0.0, 1.0), "c": (1.0, 1.0), "x": (5.0, 0.2)},
                      ("a", "b", "c"))
    # log1p scaling: x -> (1.79, 0.18); a -> (0.69, 0): cos = 0.995; c -> cos 0.77
    assert db.closest("x")[0] == "a"
    assert db.closest("unknown") is None
    assert SimilarityDB(db.features, db.references, exclude_self=True).closest("a")[0] == "c"


def test_unrecorded_zoo_models_map_to_plausible_references():
    assert DB.closest("resnet101")[0] == "cifar10"  # another ResNet on CIFAR-10
    assert DB.closest("transformer")[0] == "bert"  # another Transformer


def test_feature_table_errors_name_the_line():
    with pytest.raises(FeatureTableError, match="header"):
        load_features("name,a\nx,1\n")
    feats = load_features()
    head = "model,conv,linear,norm,activation,pool,recurrent,attention,embedding,params_m,gflops,act_mb\n"
    with pytest.raises(FeatureTableError, match=r":3: "):
        load_features(head + "a,1,1,1,1,1,1,1,1,1,1,1\nb,1,1,x,1,1,1,1,1,1,1,1\n")
    with pytest.raises(FeatureTableError, match="twice"):
        load_features(head + "a,1,1,1,1,1,1,1,1,1,1,1\na,1,1,1,1,1,1,1,1,1,1,1\n")
    assert set(APP_MODEL.values()) <= set(feats)


# ------------------------------------------------------------------ Alg. 2
HET = (Node("v0", 2, "v100"), Node("k0", 4, "k80", 12288))


def test_a_job_goes_to_the_type_its_reference_says_is_fastest():
    plan = Similarity(decide="gpu").schedule(snap(HET, [job(1)]))
    (st_,) = plan.starts()
    assert {g.node for g in st_.gpus} == {"v0"}
    assert plan.reasons["j1"].numbers["similarity"] == pytest.approx(1.0)


def test_gpu_variant_keeps_count_and_batch():
    j = job(1, n=2, batch=256, gpu_range=(1, 4), batch_range=(32, 1024))
    plan = Similarity(decide="gpu").schedule(snap(HET, [j]))
    (s,) = plan.starts()
    assert len(s.gpus) == 2 and s.global_batch is None


def test_ngpu_variant_chooses_the_count_within_range_only():
    fixed = Similarity(decide="gpu_ngpu").schedule(snap(HET, [job(1, n=2)]))
    assert len(fixed.starts()[0].gpus) == 2  # no gpu_range: the count is the user's
    free = Similarity(decide="gpu_ngpu").schedule(snap(HET, [job(1, n=2, gpu_range=(1, 4))]))
    s = free.starts()[0]
    assert 1 <= len(s.gpus) <= 4
    # the chosen option is the fastest of the suggestions that fit
    pol = Similarity(decide="gpu_ngpu")
    sn = snap(HET, [job(1, n=2, gpu_range=(1, 4))])
    best = pol.suggestions(sn, sn.jobs["j1"], "cifar10", type_capacity(sn))[0]
    assert len(s.gpus) == best.ngpu


def test_bs_variant_overrides_batch_only_within_range():
    pol = Similarity(decide="gpu_ngpu_bs")
    s = pol.schedule(snap(HET, [job(1, batch=128, batch_range=(64, 512))])).starts()[0]
    assert s.global_batch is None or 64 <= s.global_batch <= 512
    s2 = pol.schedule(snap(HET, [job(1, batch=128)])).starts()[0]
    assert s2.global_batch is None


def test_a_round_never_oversubscribes_a_type_and_walks_in_arrival_order():
    jobs = [job(i, n=2, t=float(i)) for i in range(5)]
    plan = Similarity(decide="gpu", jp=False).schedule(snap(HET, jobs, now=0.0))
    used: dict = {}
    for s in plan.starts():
        for g in s.gpus:
            used[g] = used.get(g, 0) + 1
    assert all(v == 1 for v in used.values())
    assert [s.job_id for s in plan.starts()] == ["j0", "j1", "j2"]  # v100 pair, then 2x k80 pairs
    assert plan.order == ("j3", "j4")


def _running(j, gpus, batch=None, start=0.0):
    from dataclasses import replace
    alloc = Allocation(tuple(gpus), j.global_batch // len(gpus), 1, None, global_batch=batch)
    return replace(j, state=JobState.RUNNING, allocation=alloc, start_time=start)


def test_rescheduling_keeps_an_unchanged_job_and_moves_a_better_placed_one():
    # j0 runs on k80 although v100 is free now: with cd it moves, without it stays
    j0 = _running(job(0, t=0.0), [Gpu("k0", 0)])
    cd = Similarity(decide="gpu", jp=False, cd=True).schedule(snap(HET, [j0], now=360.0))
    assert PreemptJob("j0") in cd.actions
    assert {g.node for g in cd.starts()[0].gpus} == {"v0"}
    nocd = Similarity(decide="gpu", jp=False, cd=False).schedule(snap(HET, [j0], now=360.0))
    assert nocd.actions == ()
    j1 = _running(job(1, t=0.0), [Gpu("v0", 0)])
    keep = Similarity(decide="gpu", jp=False, cd=True).schedule(snap(HET, [j1], now=360.0))
    assert keep.actions == () and keep.reasons["j1"].code is ReasonCode.KEEP_RUNNING


# ------------------------------------------------------------------ Alg. 3
ONE = (Node("v0", 1, "v100"),)


def test_packing_takes_a_partner_when_memory_allows():
    plan = Similarity(decide="gpu", jp=True).schedule(snap(ONE, [job(0, batch=64), job(1, batch=64)]))
    starts = {s.job_id: s for s in plan.starts()}
    assert set(starts) == {"j0", "j1"}
    assert starts["j1"].share_with == ("j0",) and starts["j1"].gpus == starts["j0"].gpus
    assert plan.reasons["j1"].code is ReasonCode.STARTED_SHARED
    off = Similarity(decide="gpu", jp=False).schedule(snap(ONE, [job(0, batch=64), job(1, batch=64)]))
    assert [s.job_id for s in off.starts()] == ["j0"]


def test_packing_never_exceeds_memory():
    small = (Node("v0", 1, "v100", 4000),)  # too small for two imagenet workers
    plan = Similarity(decide="gpu", jp=True).schedule(
        snap(small, [job(0, app="imagenet", batch=64), job(1, app="imagenet", batch=64)]))
    assert [s.job_id for s in plan.starts()] == ["j0"]


def test_packing_overrides_batch_to_fit_when_allowed():
    mem = M.memory["imagenet"]
    # room for the host at batch 32 plus a partner at batch 32 but not at its own 128
    cap = int(mem.mem_mb(32) * 2 + 1)
    node = (Node("v0", 1, "v100", cap),)
    host = job(0, app="imagenet", batch=32)
    fixed = job(1, app="imagenet", batch=128)
    flex = job(1, app="imagenet", batch=128, batch_range=(32, 128))
    p1 = Similarity(decide="gpu_ngpu_bs").schedule(snap(node, [host, fixed]))
    assert [s.job_id for s in p1.starts()] == ["j0"]
    p2 = Similarity(decide="gpu_ngpu_bs").schedule(snap(node, [host, flex]))
    s = {x.job_id: x for x in p2.starts()}
    assert s["j1"].global_batch == 32


# ------------------------------------------------------------------ properties
@settings(max_examples=150, deadline=None)
@given(nv=st.integers(0, 2), nk=st.integers(0, 2), per=st.sampled_from([1, 2, 4]),
       specs=st.lists(st.tuples(st.sampled_from(APPS), st.sampled_from([1, 2, 4]),
                                st.sampled_from([32, 64, 128, 256]), st.booleans(), st.booleans()),
                      min_size=1, max_size=12),
       decide=st.sampled_from(["gpu", "gpu_ngpu", "gpu_ngpu_bs"]), jp=st.booleans())
def test_rounds_respect_capacity_memory_and_two_per_gpu(nv, nk, per, specs, decide, jp):
    nodes = tuple([Node(f"v{i}", per, "v100") for i in range(nv)] +
                  [Node(f"k{i}", per, "k80", 12288) for i in range(nk)])
    if not nodes:
        nodes = (Node("v0", per, "v100"),)
    total = sum(n.num_gpus for n in nodes)
    jobs = [job(i, app=a, n=min(n, total), batch=b, t=float(i),
                gpu_range=(1, 4) if el else None, batch_range=(32, 512) if fb else None)
            for i, (a, n, b, el, fb) in enumerate(specs)]
    sn = snap(nodes, jobs)
    pol = Similarity(decide=decide, jp=jp)
    plan = pol.schedule(sn)
    again = Similarity(decide=decide, jp=jp).schedule(sn)
    assert plan == again  # deterministic
    on: dict = {}
    mem_node = {n.name: n.gpu_mem_mb for n in nodes}
    for s in plan.starts():
        j = sn.jobs[s.job_id]
        if j.gpu_range is None or decide == "gpu":
            assert len(s.gpus) == j.num_gpus
        b = s.global_batch or j.global_batch
        if s.global_batch is not None:
            assert j.batch_range and j.batch_range[0] <= b <= j.batch_range[1]
        assert s.sub_batch * s.accum_steps * len(s.gpus) >= b
        for g in s.gpus:
            on.setdefault(g, []).append((j.app, s.sub_batch))
    for g, occ in on.items():
        assert len(occ) <= 2
        if len(occ) == 2:
            need = sum(M.memory[a].mem_mb(b) for a, b in occ)
            assert need <= mem_node[g.node] + 1e-6
    assert set(plan.reasons) == set(sn.jobs)


@settings(max_examples=150, deadline=None)
@given(nv=st.integers(0, 2), nk=st.integers(0, 2), per=st.sampled_from([1, 2, 4]),
       specs=st.lists(st.tuples(st.sampled_from(APPS), st.sampled_from([1, 2, 4]),
                                st.sampled_from([32, 64, 128, 256]), st.booleans(), st.booleans(),
                                st.booleans()),
                      min_size=1, max_size=12),
       decide=st.sampled_from(["gpu", "gpu_ngpu", "gpu_ngpu_bs"]), jp=st.booleans(),
       cd=st.booleans())
def test_rounds_with_running_jobs_and_rescheduling(nv, nk, per, specs, decide, jp, cd):
    """Every variant with and without re-scheduling (``cd``) on a heterogeneous cluster where
    some jobs already run: after the plan no GPU holds more than two jobs or more than its
    memory, no type is over-subscribed, each job is started at most once, only ``cd`` moves or
    stops a running job, counts and batches stay within the job's ranges, and the plan is
    deterministic."""
    nodes = tuple([Node(f"v{i}", per, "v100") for i in range(nv)] +
                  [Node(f"k{i}", per, "k80", 12288) for i in range(nk)]) or (Node("v0", per, "v100"),)
    total = sum(n.num_gpus for n in nodes)
    free = {n.name: list(n.gpus()) for n in nodes}
    jobs = []
    for i, (a, n, b, el, fb, run) in enumerate(specs):
        j = job(i, app=a, n=min(n, total), batch=b, t=float(i),
                gpu_range=(1, 4) if el else None, batch_range=(32, 512) if fb else None)
        host = next((h for h, gs in free.items() if len(gs) >= j.num_gpus), None) if run else None
        if host is not None:  # running with the accumulation that fits its GPU (seed 000 eq. 7)
            gpus, free[host] = free[host][:j.num_gpus], free[host][j.num_gpus:]
            cap = next(n.gpu_mem_mb for n in nodes if n.name == host)
            local = -(-j.global_batch // len(gpus))
            acc = 1
            while M.memory[a].mem_mb(-(-local // acc)) > cap and acc < local:
                acc *= 2
            from dataclasses import replace
            j = replace(j, state=JobState.RUNNING, start_time=float(i),
                        allocation=Allocation(tuple(gpus), -(-local // acc), acc, None))
        jobs.append(j)
    sn = snap(nodes, jobs, now=360.0)
    plan = Similarity(decide=decide, jp=jp, cd=cd).schedule(sn)
    assert plan == Similarity(decide=decide, jp=jp, cd=cd).schedule(sn)
    stopped = {a.job_id for a in plan.actions if not isinstance(a, StartJob)}
    starts = plan.starts()
    assert len({s.job_id for s in starts}) == len(starts)
    if not cd:
        assert not stopped and not {s.job_id for s in starts} & {j.id for j in jobs if j.running}
    occ: dict = {}
    for j in jobs:  # running jobs that keep their GPUs
        if j.running and j.id not in stopped and j.id not in {s.job_id for s in starts}:
            for g in j.allocation.gpus:
                occ.setdefault(g, []).append((j.app, j.allocation.sub_batch))
    valid = {g for n in nodes for g in n.gpus()}
    for s in starts:
        j = sn.jobs[s.job_id]
        assert set(s.gpus) <= valid and len(set(s.gpus)) == len(s.gpus)
        if j.gpu_range is None or decide == "gpu":
            assert len(s.gpus) == j.num_gpus
        else:
            assert j.gpu_range[0] <= len(s.gpus) <= j.gpu_range[1]
        if s.global_batch is not None and s.global_batch != j.global_batch:
            assert decide == "gpu_ngpu_bs" or jp
            assert j.batch_range and j.batch_range[0] <= s.global_batch <= j.batch_range[1]
        for g in s.gpus:
            occ.setdefault(g, []).append((j.app, s.sub_batch))
    mem_node = {n.name: n.gpu_mem_mb for n in nodes}
    for g, on in occ.items():
        assert len(on) <= 2, (g, on)
        if len(on) == 2:
            assert sum(M.memory[a].mem_mb(b) for a, b in on) <= mem_node[g.node] + 1e-6
        if not jp:  # no packing: Alg. 2 gives every GPU to one job at most
            assert len(on) <= 1, (g, on)
    # Alg. 2's own decisions never share a GPU (a round never over-subscribes a type): apart
    # from Alg. 3's partners (a start with share_with, or a running job packed again where
    # it runs) every GPU holds at most one job
    packed_again = {jid for jid, r in plan.reasons.items()
                    if r.code is ReasonCode.KEEP_RUNNING and "host_tput" in r.numbers}
    alg2: dict = {}
    for j in jobs:
        if (j.running and j.id not in stopped and j.id not in {s.job_id for s in starts}
                and j.id not in packed_again):
            for g in j.allocation.gpus:
                alg2[g] = alg2.get(g, 0) + 1
    for s in starts:
        if not s.share_with:
            for g in s.gpus:
                alg2[g] = alg2.get(g, 0) + 1
    assert all(v == 1 for v in alg2.values()), alg2
    by_type: dict = {}
    for g in occ:
        t = next(n.gpu_type for n in nodes if n.name == g.node)
        by_type[t] = by_type.get(t, 0) + 1
    for t, (cap, _, _) in type_capacity(sn).items():
        assert by_type.get(t, 0) <= cap
    assert set(plan.reasons) == set(sn.jobs)


def test_packing_counts_a_kept_hosts_micro_batch_in_force():
    """Alg. 3 beside a running job that keeps its GPU: the host's memory is that of the
    micro-batch it runs with, which may be larger than the one a fresh start would pick."""
    from dataclasses import replace
    node = (Node("v0", 1, "v100"),)
    mem = M.memory
    host = job(0, app="yolov3", batch=32)
    partner = job(1, app="cifar10", batch=32)
    big = max(b for b in range(1, 33) if mem["yolov3"].mem_mb(b) <= 16384)
    room = 16384 - mem["yolov3"].mem_mb(big)
    assert mem["cifar10"].mem_mb(32) > room  # the partner does not fit beside the real host
    running = replace(host, state=JobState.RUNNING, start_time=0.0,
                      allocation=Allocation((Gpu("v0", 0),), big, -(-32 // big), None))
    plan = Similarity(decide="gpu", jp=True, cd=True).schedule(snap(node, [running, partner], now=360.0))
    assert not [s for s in plan.starts() if s.job_id == "j1"]


@pytest.mark.parametrize("jp", [False, True], ids=["", "jp"])
@pytest.mark.parametrize("cd", [False, True], ids=["", "cd"])
@pytest.mark.parametrize("decide", ["gpu", "gpu_ngpu", "gpu_ngpu_bs"])
@settings(max_examples=4, deadline=None)
@given(n=st.integers(2, 10), seed=st.integers(0, 10_000), span=st.sampled_from([0.0, 420.0]))
def test_every_variant_in_the_simulator_on_a_heterogeneous_cluster(decide, cd, jp, n, seed, span):
    """Each of Table 3's twelve variants run by the simulator, round after round, on a
    cluster of three GPU types with §5.1 workloads (every job lets the scheduler choose
    its count and batch): the simulator's invariants hold at every round (no GPU over
    two jobs or over its memory, counts within ``gpu_range``, batches within
    ``batch_range``: ``tests/test_sim_properties.py``'s checker), every job finishes,
    only ``cd`` pre-empts, only ``jp`` packs, only ``gpu_ngpu*`` change a count and only
    ``gpu_ngpu_bs`` or packing a batch; same seed, same result."""
    from gimbalctl.cluster import parse_cluster
    from gimbalctl.hetero_workload import generate, jobs_from_rows
    from gimbalctl.sim import SimConfig, simulate

    nodes = parse_cluster("1x2:v100,1x2:p100,1x4:k80")
    jobs = jobs_from_rows(generate(n, nodes, span_s=span, seed=seed, models=M,
                                   duration_range=(300.0, 2400.0)))
    cfg = SimConfig(interval=180.0, seed=seed, preempt_cost=10.0)
    changed = {"count": False, "batch": False}

    class Watch(Checked):
        def schedule(self, sn):
            plan = super().schedule(sn)
            for s in plan.starts():
                j = sn.jobs[s.job_id]
                changed["count"] |= len(s.gpus) != j.num_gpus
                changed["batch"] |= s.global_batch not in (None, j.global_batch)
            return plan

    pol = Watch(Similarity(decide=decide, cd=cd, jp=jp))
    res = simulate(jobs, nodes, pol, M, cfg)
    df = res.jobs.set_index("id")
    assert len(df) == n and df.end.notna().all()
    assert all(df.loc[j.id].start >= j.submit_time - 1e-9 for j in jobs)
    if not cd:
        assert (df.preemptions == 0).all()
    if not jp:
        assert res.summary["shared_jobs"] == 0
    if decide == "gpu":
        assert not changed["count"]
    if decide != "gpu_ngpu_bs" and not jp:
        assert not changed["batch"]
    again = simulate(jobs, nodes, Similarity(decide=decide, cd=cd, jp=jp), M, cfg)
    assert res.summary == again.summary
