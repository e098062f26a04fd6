"""Seed 002's similarity policy over a queue kept across calls (policies/similarity_kept.py,
issue #13) returns exactly the Plans of the old code (reference_similarity.py, verbatim: the
queue gathered and sorted at every call, Algorithm 3's pool over every queued job): at every
call of loaded simulator runs (jobs queueing, pre-empted and packed; packing on and off, every
``decide``), on the same snapshots without their change record (the daemon's kind: the old
code answers) and without only the job change record (the running order made by a pass),
and on hypothesis-random rounds with a hand-kept change record.  The memos kept across calls
(running order, suggestions, apply_decisions' kept jobs) and Algorithm 3's skip of hosts
alike to one without a partner are asserted taken; hand-built cases check the skip's key
(micro-batch in force, GPU memory, batch) and the memos across another profile table, GPU
type table or reference database."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings, strategies as st

import policies.similarity
import policies.similarity_kept as sk
from policies.model import Deferred, Frozen, JobChanges, Node, WaitingQueue
from policies.similarity import Similarity
from reference_similarity import RefSimilarity
from test_similarity import APPS, M, job, snap
from test_similarity_differential import typed_cluster
from test_sjf_differential import assert_same
from daemon_pass import apply_plan


class _Counting(dict):
    """apply_decisions' kept-job memo, counting the entries it finds (a hit when the view
    and choice are still the recorded objects: checked by the caller)."""

    def __init__(self, paths, snap, *a):
        super().__init__(*a)
        self.paths, self.jobs = paths, snap.jobs

    def get(self, k, d=None):
        r = super().get(k, d)
        if r is not None and r[0] is self.jobs.get(k):  # the recorded view is current
            self.paths.memo_found += 1
        return r


class Paths:
    """Counts the calls answered by the kept path, and those where Alg. 3 walked every
    candidate (near ties) or packed a partner; the running order kept from the job change
    record (``running_kept``) or made by a pass (``running_made``); the suggestions taken
    from the memo kept across calls (``sugg_kept``); apply_decisions' memo entries found;
    Alg. 3 hosts skipped as alike to one that found no partner (``skips``, every pool)."""

    def __init__(self, monkeypatch):
        self.kept = self.walks = self.firsts = 0
        self.running_kept = self.running_made = self.sugg_kept = self.memo_found = 0
        self.pools = []
        self.resumed = self.walks_made = self.steps_taken_over = 0
        real_resume = sk._resume

        def resume(snap, walk, tnames):
            out = real_resume(snap, walk, tnames)
            self.resumed += out[0] > 0
            self.walks_made += out[0] == 0
            self.steps_taken_over += out[0]
            return out

        monkeypatch.setattr(sk, "_resume", resume)
        real, real_walk, real_firsts = sk.kept_schedule, sk._KeptPool.walk, sk._KeptPool.firsts
        real_update, real_memos = sk.RunningOrder.update, sk.SimilarityState.memos
        real_pack = policies.similarity.Similarity._pack

        def kept_schedule(pol, snap, state):
            plan = real(pol, snap, state)
            self.kept += plan is not None
            return plan

        def walk(pool):
            self.walks += 1
            return real_walk(pool)

        def firsts(pool):
            self.firsts += 1
            return real_firsts(pool)

        def update(ro, snap):
            rec = snap.job_changes
            incremental = (ro._seen is not None and rec is not None and rec.source is snap.jobs
                           and rec.log.extends(ro._seen))
            ok = real_update(ro, snap)
            if ok:
                self.running_kept += incremental
                self.running_made += not incremental
                assert ro.jobs == list(snap.running())  # the pass's order
                assert ro.keys == [sk.queue_key(j) for j in ro.jobs]
            return ok

        def memos(state, pol, snap, db):
            kept_before = len(state.sugg)
            real_memos(state, pol, snap, db)
            self.sugg_kept += kept_before > 0 and len(state.sugg) > 0  # not cleared
            state.kept = _Counting(self, snap, state.kept)

        def pack(pol, snap, walked, placed, preempted, starts, batch_of, pool, *a):
            self.pools.append(pool)
            return real_pack(pol, snap, walked, placed, preempted, starts, batch_of, pool, *a)

        monkeypatch.setattr(policies.similarity, "kept_schedule", kept_schedule)
        monkeypatch.setattr(sk._KeptPool, "walk", walk)
        monkeypatch.setattr(sk._KeptPool, "firsts", firsts)
        monkeypatch.setattr(sk.RunningOrder, "update", update)
        monkeypatch.setattr(sk.SimilarityState, "memos", memos)
        monkeypatch.setattr(policies.similarity.Similarity, "_pack", pack)

    @property
    def skips(self) -> int:
        return sum(p.skips for p in self.pools)


class Differential:
    def __init__(self, paths, **kw):
        self.inner, self.fresh, self.ref = Similarity(**kw), Similarity(**kw), RefSimilarity(**kw)
        self.nojobrec = Similarity(**kw)
        self.name, self.preemptive, self.rounds_only = "similarity", True, True
        self.round_length = self.inner.round_length
        self.paths, self.kw = paths, kw
        self.calls = self.deep = self.shared = self.walked_out = 0

    def schedule(self, sn):
        p = self.paths
        before, kept_before, made_before = p.kept, p.running_kept, p.running_made
        plan = self.inner.schedule(sn)
        assert p.kept == before + 1 and isinstance(plan.order, Deferred)
        # the running order from the job change record at every call but the first
        assert (p.running_kept, p.running_made) == (
            (kept_before + 1, made_before) if self.calls else (kept_before, made_before + 1))
        want = self.ref.schedule(sn)
        assert_same(plan, want)
        nolog = dataclasses.replace(sn, queue=dataclasses.replace(sn.queue, changes=None))
        other = self.fresh.schedule(nolog)
        assert p.kept == before + 1
        assert_same(other, want)
        # without the job change record (only the queue's): the kept path, its running
        # order made by a pass at every call
        made, walks_made = p.running_made, p.walks_made
        third = self.nojobrec.schedule(dataclasses.replace(sn, job_changes=None))
        assert p.kept == before + 2 and p.running_made == made + 1
        assert p.walks_made == walks_made + 1  # no record: the walk from the start
        assert_same(third, want)
        self.calls += 1
        self.deep += len(want.order) > 8
        self.shared += any(a.share_with for a in plan.starts())
        return plan


@pytest.mark.parametrize("kw", [{}, {"decide": "gpu", "jp": False},
                                {"decide": "gpu_ngpu", "jp": True}])
@pytest.mark.parametrize("cluster,n,seed", [("2x2:v100,1x4:p100,2x4:k80", 90, 1),
                                            ("3x4", 80, 5)])
def test_every_call_of_a_loaded_simulator_run(monkeypatch, kw, cluster, n, seed):
    from gimbalctl.cluster import parse_cluster
    from gimbalctl.hetero_workload import generate, jobs_from_rows
    from gimbalctl.sim import SimConfig, simulate

    nodes = parse_cluster(cluster)
    jobs = jobs_from_rows(generate(n, nodes, span_s=1200.0, seed=seed, models=M,
                                   duration_range=(300.0, 5400.0)))
    paths = Paths(monkeypatch)
    pol = Differential(paths, **kw)
    res = simulate(jobs, nodes, pol, M, SimConfig(interval=180.0, seed=seed, preempt_cost=10.0))
    assert res.jobs.end.notna().all()
    assert pol.calls > 20 and paths.kept == 2 * pol.calls and pol.deep > 5
    # the suggestions memo kept at every call but each instance's first (two instances);
    # apply_decisions found kept jobs recorded at earlier calls
    assert paths.sugg_kept == 2 * (pol.calls - 1) and paths.memo_found > pol.calls
    # Alg. 2's walk taken over in part from the last call at many calls
    assert paths.resumed > pol.calls // 4 and paths.steps_taken_over > pol.calls
    if kw.get("jp", True):
        assert paths.firsts > 0 and pol.shared > 0  # Alg. 3 over the kept classes packed jobs


def _recorded(sn, log: list):
    """``sn`` with a change record naming every job (a superset of the changes: allowed)."""
    log.extend(sn.jobs)
    q = dataclasses.replace(WaitingQueue.of(sn.jobs), changes=Frozen(log))
    return dataclasses.replace(sn, queue=q)


@settings(max_examples=150, deadline=None)
@given(nv=st.integers(0, 3), nk=st.integers(0, 2), per=st.sampled_from([1, 2, 4]),
       mem=st.sampled_from([4000, 12288, 16384, 40000]),
       specs=st.lists(st.tuples(st.sampled_from(APPS[:4]), st.sampled_from([1, 1, 1, 2, 4]),
                                st.sampled_from([32, 64, 128, 256]), st.booleans(), st.booleans()),
                      min_size=1, max_size=24),
       decide=st.sampled_from(["gpu", "gpu_ngpu", "gpu_ngpu_bs"]), jp=st.booleans(),
       cd=st.booleans(), rounds=st.integers(1, 4), dt=st.sampled_from([0.0, 60.0]))
def test_random_rounds_with_a_record(nv, nk, per, mem, specs, decide, jp, cd, rounds, dt):
    nodes, jobs = typed_cluster(nv, nk, per, mem, specs)
    sn = snap(nodes, jobs, now=5.0)
    pol, log = Similarity(decide=decide, jp=jp, cd=cd), []
    for _ in range(rounds):
        sn = _recorded(sn, log)
        plan = pol.schedule(sn)
        assert_same(plan, RefSimilarity(decide=decide, jp=jp, cd=cd).schedule(sn))
        assert isinstance(plan.order, Deferred) == cd
        sn = apply_plan(sn, plan, dt=dt)


def test_near_ties_walk_every_kept_candidate(monkeypatch):
    """Two classes whose partner scores differ by less than the 1e-12 tolerance: the kept
    pool gathers every candidate in queue order (the literal walk), as the old pool does."""
    paths = Paths(monkeypatch)
    real = Similarity._candidate

    def candidate(self, snap, job, *a):  # two classes 1e-13 apart
        c = real(self, snap, job, *a)
        if c is None:
            return None
        bump = 1e-13 if job.batch_range is not None else 0.0
        return c[0], (c[1][0] + bump, c[1][1])

    monkeypatch.setattr(Similarity, "_candidate", candidate)
    nodes = (Node("v0", 1, "v100", 40000), Node("v1", 1, "v100", 40000))
    jobs = [job(0, batch=64), job(1, batch=64, t=1.0),
            job(2, batch=64, t=2.0, batch_range=(32, 512)), job(3, batch=64, t=3.0),
            job(4, batch=64, t=4.0, batch_range=(32, 512)), job(5, batch=64, t=5.0)]
    sn = _recorded(snap(nodes, jobs, now=6.0), [])
    plan = Similarity(decide="gpu_ngpu_bs").schedule(sn)
    # the reference has no _candidate to patch: the old path of the package (its _Pool,
    # itself checked against the reference above) on the snapshot without a record
    nolog = dataclasses.replace(sn, queue=dataclasses.replace(sn.queue, changes=None))
    assert_same(plan, Similarity(decide="gpu_ngpu_bs").schedule(nolog))
    assert paths.kept == 1 and paths.walks > 0


@pytest.mark.parametrize("cluster", ["2x4", "2x2:v100,1x4:p100,2x4:k80"])
def test_alike_hosts_without_a_partner_are_skipped(monkeypatch, cluster):
    """A loaded run of few classes of one-GPU jobs (many hosts alike): Alg. 3 skips hosts
    alike to one that found no partner, at many calls, and the Plans stay the old code's."""
    import random

    from gimbalctl.cluster import parse_cluster
    from gimbalctl.sim import SimConfig, simulate

    rng = random.Random(3)
    nodes = parse_cluster(cluster)
    jobs = [job(i, app=rng.choice(APPS[:3]), n=rng.choice([1, 1, 1, 2]),
                batch=rng.choice([64, 128]), t=float(rng.randrange(0, 1500)),
                batch_range=rng.choice([None, (32, 256)]))
            for i in range(70)]
    jobs = [dataclasses.replace(j, total_iters=float(rng.randrange(200, 4000))) for j in jobs]
    paths = Paths(monkeypatch)
    pol = Differential(paths)
    res = simulate(jobs, nodes, pol, M, SimConfig(interval=180.0, seed=2, preempt_cost=10.0))
    assert res.jobs.end.notna().all()
    assert pol.calls > 20 and paths.kept == 2 * pol.calls and pol.shared > 0
    assert paths.skips > 10 and sum(p.skips > 0 for p in paths.pools) > 5


@pytest.mark.parametrize("case", ["micro-batch", "memory", "batch"])
def test_hosts_alike_but_for_micro_batch_memory_or_batch_are_both_asked(monkeypatch, case):
    """Two hosts of one application on one GPU type: the first finds no partner (its
    micro-batch in force, its node's smaller GPU memory, or its larger batch leaves no
    room), the second does; the skip of alike hosts must not skip it."""
    from policies.base import exclusive_config
    from policies.model import Allocation, Gpu, JobState

    mem = M.memory
    if case == "micro-batch":  # yolov3 hosts, the first with a larger micro-batch in force
        small, large, app, batch, other = 16384, 16384, "yolov3", 32, "cifar10"
    else:  # imagenet hosts, the first on a node of less GPU memory or with a larger batch
        small, app, batch, other = 16384, "imagenet", 128, "deepspeech2"
        large = 40000 if case == "memory" else small
    nodes = (Node("v0", 1, "v100", small), Node("v1", 1, "v100", large))
    h0 = job(0, app=app, batch=batch)
    h1 = job(1, app=app, batch=32 if case == "batch" else batch, t=0.5)
    partner = job(2, app=other, batch=32, t=1.0)
    b1, _ = exclusive_config(snap(nodes, [h1]), h1)
    b0, _ = exclusive_config(snap(nodes, [h0]), h0)
    if case == "micro-batch":  # h0 runs with the largest micro-batch that fits alone
        b0 = max(b for b in range(1, 33) if mem[app].mem_mb(b) <= small)
        assert b0 > b1 and mem[other].mem_mb(32) > small - mem[app].mem_mb(b0)
    else:
        assert mem[app].mem_mb(b0) + mem[other].mem_mb(32) > small
    run = [dataclasses.replace(h, state=JobState.RUNNING, start_time=0.0,
                               allocation=Allocation((Gpu(f"v{i}", 0),), b,
                                                     -(-h.global_batch // b), None))
           for i, (h, b) in enumerate([(h0, b0), (h1, b1)])]
    if case == "batch":  # hosts started this round (no micro-batch in force): the batch tells
        run = [h0, h1]
    paths = Paths(monkeypatch)
    sn = _recorded(snap(nodes, run + [partner], now=360.0), [])
    plan = Similarity(decide="gpu").schedule(sn)
    assert paths.kept == 1
    assert_same(plan, RefSimilarity(decide="gpu").schedule(sn))
    starts = {s.job_id: s for s in plan.starts()}
    assert set(starts) == ({"j0", "j1", "j2"} if case == "batch" else {"j2"})
    assert starts["j2"].gpus == (Gpu("v1", 0),) and starts["j2"].share_with == ("j1",)
    assert paths.pools and paths.pools[0].skips == 0


def test_memos_follow_another_profile_table_type_table_or_reference_db(monkeypatch):
    """One policy instance called on snapshots of one run whose throughput profiles, GPU
    type table or reference database are replaced between calls: its memos (suggestions per
    class, per job view, kept jobs) are dropped, the Plans stay the old code's."""
    from policies.model import GpuTypeTable
    from test_similarity import DB, TYPES

    paths = Paths(monkeypatch)
    nodes, jobs = typed_cluster(2, 1, 2, 16384, [(APPS[i % 4], 1 + (i % 3 == 0), 64, i % 2, i % 3)
                                                  for i in range(10)])
    swapped = dict(zip(APPS, APPS[1:] + APPS[:1]))
    other_profiles = {a: M.profiles[swapped[a]] for a in M.profiles}
    other_types = GpuTypeTable(per_app={(a, t): s * (0.01 if t == "v100" else 1.0)
                                        for (a, t), s in TYPES.per_app.items()},
                               memory_mb=TYPES.memory_mb)
    other_db = dataclasses.replace(DB, references=tuple(DB.references)[1:])
    pol, log, jlog, prev = Similarity(), [], [], {}
    sn = snap(nodes, jobs, now=5.0)
    changes = [{}, {}, {"profiles": other_profiles}, {}, {"gpu_types": other_types}, {},
               {"predictors": {"similarity": other_db}}, {}]
    for kw in changes:
        sn = _recorded(dataclasses.replace(sn, **kw), log)
        # a job change record naming the jobs whose view is another object than before
        jlog.extend(j for j in sorted(set(prev) | set(sn.jobs)) if prev.get(j) is not sn.jobs.get(j))
        sn = dataclasses.replace(sn, job_changes=JobChanges(Frozen(jlog), sn.jobs))
        prev = dict(sn.jobs)
        plan = pol.schedule(sn)
        assert_same(plan, RefSimilarity().schedule(sn))
        sn = apply_plan(sn, plan, dt=0.0)
    assert paths.kept == len(changes) and paths.resumed > 0  # walks taken over, memos kept


def test_hosts_of_one_memory_but_another_batch_score_their_own_partners(monkeypatch):
    """Two hosts of one application, GPU type and memory in use but another batch (another
    throughput): each partner's reason carries its own host's packed throughput (the
    candidates kept for the round are per host numbers, throughput included)."""
    from policies.model import Allocation, Gpu, JobState

    paths = Paths(monkeypatch)
    nodes = (Node("v0", 1, "v100", 40000), Node("v1", 1, "v100", 40000))
    # ncf hosts running with micro-batch 256 in force: the memory of 256 for both batches
    hosts = [dataclasses.replace(job(i, app="ncf", batch=b, t=0.5 * i), state=JobState.RUNNING,
                                 start_time=0.0, allocation=Allocation((Gpu(f"v{i}", 0),), 256))
             for i, b in enumerate([64, 32])]
    jobs = hosts + [job(2, app="cifar10", batch=32, t=1.0), job(3, app="cifar10", batch=32, t=2.0)]
    sn = _recorded(snap(nodes, jobs, now=360.0), [])
    plan = Similarity(decide="gpu").schedule(sn)
    assert paths.kept == 1
    assert_same(plan, RefSimilarity(decide="gpu").schedule(sn))
    shared = {s.job_id: s.share_with for s in plan.starts() if s.share_with}
    assert shared == {"j2": ("j0",), "j3": ("j1",)}
    host_tput = {j: plan.reasons[j].numbers["host_tput"] for j in shared}
    assert host_tput["j2"] != host_tput["j3"]
