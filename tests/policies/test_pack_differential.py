"""The packing hosts (lucid, gandiva, gavel and their +gimbal variants, index-based round of
policies/pack_index.py) return exactly the Plans of the literal implementation kept in
reference_packing.py: same actions (incl. GIMBAL's resizes), order, infeasible list and
every reason's code, text and numbers.

Snapshots: recorded from the simulator at every policy call of several runs (fitted MPS
interference, the Gavel per-pair table without MPS, a flat ξ, deadlines), random hand-built
ones (hypothesis: packed sets that keep §5.1 and ones that break it, pre-empted jobs,
measured speeds for Gandiva's profile, GPU memory that rules pairs out), and the daemon
benchmark's state at a small size."""
from __future__ import annotations

import dataclasses
from collections import Counter
from types import MappingProxyType

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import policies
from gimbalctl.cluster import parse_cluster
from gimbalctl.profiles import APPS, default_models
from gimbalctl.sim import SimConfig, simulate
from policies.gimbal_coord import placement_ok
from policies.model import (Allocation, ClusterSnapshot, Frozen, Gpu, GpuChanges, Job,
                            JobChanges, JobState, Node)
from policies import pack_hosts
from policies.pack_components import Components
from policies.pack_hosts import HostState, _Kept
from policies.pack_index import Placement, RoundBase, pair_progress
from policies.throughput import InterferenceTable
from reference_packing import REFS
from test_sjf_differential import assert_same

from random_jobs import random_jobs
from daemon_pass import apply_plan, build

MODELS = default_models()
NAMES = sorted(REFS)
GAVEL_ONLY = dataclasses.replace(MODELS.interference, mps=None)


class Differential:
    """Runs the package's policy and the reference on every snapshot the simulator makes."""

    def __init__(self, name, **kw):
        self.inner, self.ref = policies.get_policy(name, **kw), REFS[name](**kw)
        self.name = name
        for flag in ("preemptive", "needs_lengths", "round_length", "rounds_only", "elastic"):
            setattr(self, flag, getattr(self.inner, flag))
        self.fresh = policies.get_policy(name, **kw)  # the same snapshots, no change records
        self.calls = 0
        self.codes = Counter()
        self.kept = 0  # calls whose waiting queue was brought up to date, not sorted afresh
        self.reused = 0  # calls that took the last call's round base over
        self.bases = 0  # calls that asked for a round base at all
        self.advanced = 0  # new round bases whose §5.1 components were the last ones advanced
        self.checked = 0  # round bases whose components were checked against a fresh build
        self.hosts_advanced = 0  # new round bases whose host state was the last one advanced
        self.synced = 0  # host lists brought up to date from the log (not built anew)
        self.lists_checked = 0  # kept host lists compared with a fresh build
        self.pairs_kept = 0  # Gandiva: calls whose packed pairs were advanced, not rebuilt

    def schedule(self, snap):
        inner = self.inner
        pq = getattr(inner, "_pack_queue", None)
        rebuilds = pq.rebuilds if pq is not None else None
        base = getattr(inner, "_round_base", None)
        base = base[0] if base is not None else None
        comps = base.components if base is not None else None
        hs = base.host_state if base is not None else None
        synced = hs.synced if hs is not None else 0
        packed = getattr(inner, "_packed", None)
        plan = inner.schedule(snap)
        if self.name.startswith("gandiva"):  # the packed pairs kept from the GPU record
            after = inner._packed
            assert after is not None and after[0] is snap.gpu_changes.log
            on = {g: ids for g, ids in snap.gpu_jobs.items() if len(ids) == 2}
            assert after[1] == on
            assert after[2] == dict(Counter(on.values()))
            self.pairs_kept += packed is not None and after[1] is packed[1]
        ref = self.ref.schedule(snap)
        assert_same(plan, ref)
        if rebuilds is not None and inner._pack_queue.rebuilds == rebuilds:
            self.kept += 1
        after = getattr(inner, "_round_base", None)
        if after is not None and after[2] is snap.job_changes.log:  # a round this call
            self.bases += 1
            self.reused += after[0] is base
            if after[0] is not base and base is not None:
                assert after[0].components is comps  # taken over, not built from none
                self.advanced += 1
                assert after[0].host_state is hs
                self.hosts_advanced += 1
            _assert_components(after[0].components, snap)
            self.checked += 1
            st_ = after[0].host_state
            self.synced += st_.synced - (synced if st_ is hs else 0)
            self.lists_checked += _assert_host_state(st_, inner, snap)
        # the daemon's kind: the same snapshot without the simulator's change records
        bare = dataclasses.replace(
            snap, gpu_changes=None, job_changes=None,
            queue=None if snap.queue is None else dataclasses.replace(snap.queue, changes=None))
        assert_same(self.fresh.schedule(bare), ref)
        assert getattr(self.fresh, "_round_base", None) is None
        assert getattr(self.fresh, "_packed", None) is None
        _assert_components(RoundBase(self.fresh, bare).components, bare)  # built from none
        self.calls += 1
        self.codes.update(r.code.value for r in plan.reasons.values())
        return plan


def _assert_components(comps, snap):
    """``comps`` (kept or built from none) holds the components and verdicts of a fresh
    :class:`Placement` of ``snap``, and its GPU -> workers map of the shared GPUs."""
    fresh = Placement(snap)
    part = {r: frozenset(m) for r, m in comps.members.items()}
    assert set(part.values()) == {frozenset(m) for m in fresh.members.values()}
    assert {x: part[r] for x, r in comps.root.items()} == {
        x: frozenset(fresh.members[r]) for x, r in fresh.root.items()}
    assert {part[r] for r in comps.bad} == {frozenset(fresh.members[r]) for r in fresh.bad}
    assert (comps.nover > 0) == fresh.over
    assert comps.shared == {g: ids for g, ids in snap.gpu_jobs.items() if len(ids) >= 2}


def _clone(hs):
    """A copy of a host state whose lists can be brought up to date without touching it."""
    out = HostState.__new__(HostState)
    out.__dict__.update(hs.__dict__)
    out.views, out.alone, out.log = dict(hs.views), dict(hs.alone), list(hs.log)
    out.sorted = {a: _Kept(k.gen, list(k.items), None, k.nan) for a, k in hs.sorted.items()}
    out.lists = {a: _Kept(k.gen, {n: list(v) for n, v in k.items.items()}, None, k.nan)
                 for a, k in hs.lists.items()}
    out.room = dict(hs.room)
    out.host_mb = dict(hs.host_mb)
    return out


def _scan_lists(hs, app, job_mb, policy, snap, ppof) -> dict:
    """The lists by GPU count as :meth:`HostState.lists_for` builds them, literally: the
    scan's sorted list, split by host GPU count, a host kept where some alone GPU's node
    holds both workers."""
    items, _ = hs.scan_sorted(app, policy, snap, ppof)
    out: dict = {}
    for e in items:
        h = e[1]
        hmem = snap.memory.get(h.app)
        need = job_mb + (hmem.mem_mb(h.allocation.sub_batch) if hmem else 0.0)
        if any(need <= hs.node_mem[g.node] for g in hs.alone[h.id]):
            out.setdefault(h.num_gpus, []).append(e)
    return out


def _assert_host_state(hs, policy, snap, keys=None) -> int:
    """``hs`` (kept or built from none) holds the hosts and alone GPUs of a fresh
    :class:`HostState` of ``snap``, and each of its lists (those a round brought up to date
    as they are; every other one on a copy, brought up to date now) equals a fresh build;
    ``keys``: (application, worker MB) pairs to ask of both as well.  Returns the lists
    compared."""
    fresh = HostState(policy, snap)
    assert hs.views.keys() == fresh.views.keys()
    assert all(hs.views[i] is snap.jobs[i] for i in hs.views)
    assert hs.alone == fresh.alone and hs.node_mem == fresh.node_mem
    assert hs.knobs == fresh.knobs
    ppof = lambda a, b: pair_progress(snap, a, b)  # noqa: E731
    n = 0
    for k in [a for a, kept in hs.lists.items() if kept.gen == hs.gen]:
        assert hs.lists[k].items == fresh.lists_for(*k, policy, snap, ppof), k
        n += 1
    for a in [a for a, kept in hs.sorted.items() if kept.gen == hs.gen]:
        assert hs.sorted[a].items == fresh.sorted_for(a, policy, snap, ppof), a
    copy = _clone(hs)
    for k in list(copy.lists) + list(keys or ()):
        built = fresh.lists_for(*k, policy, snap, ppof)
        assert copy.lists_for(*k, policy, snap, ppof) == built
        # the build by application and the hosts' memory room against the literal scan
        assert built == _scan_lists(fresh, *k, policy, snap, ppof), k
        assert fresh.sorted[k[0]].items == fresh.scan_sorted(k[0], policy, snap, ppof)[0]
        n += 1
    for a in list(copy.sorted):
        assert copy.sorted_for(a, policy, snap, ppof) == fresh.sorted_for(a, policy, snap, ppof)
    return n


_jobs = random_jobs  # tests/policies/random_jobs.py


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("xi,cluster,mps", [(None, "4x4", True), (None, "3x8", False),
                                            (1.1, "2x8", True)])
def test_recorded_simulator_snapshots(name, xi, cluster, mps):
    pol = Differential(name)
    models = MODELS if mps else dataclasses.replace(MODELS, interference=GAVEL_ONLY)
    simulate(_jobs(40, seed=len(cluster) + int(10 * (xi or 0))), parse_cluster(cluster), pol,
             models, SimConfig(interval=60.0, xi=xi, seed=1))
    assert pol.calls > 10
    if mps:  # the fitted MPS table lets every pair pass: the packing path is exercised
        assert pol.codes["started_shared"] > 0
    # the kept paths: the queue brought up to date at most calls, the round base both
    # taken over and rebuilt
    assert pol.kept >= pol.calls // 2
    assert 0 < pol.reused < pol.bases
    assert pol.advanced == pol.bases - pol.reused - 1 and pol.checked == pol.bases
    assert pol.hosts_advanced == pol.advanced and pol.lists_checked > pol.checked
    # Gandiva's packed pairs advanced from the GPU record at every call but the first
    assert pol.pairs_kept == (pol.calls - 1 if name.startswith("gandiva") else 0)


@pytest.mark.parametrize("name", NAMES)
def test_loaded_run(name):
    """A small cluster under a long queue (most jobs wait at every call): the class walk
    stops early, the waiting reasons come from position segments."""
    pol = Differential(name)
    simulate(_jobs(160, seed=7, gpus=(1, 1, 2, 2, 4, 8, 8)), parse_cluster("2x8"), pol, MODELS,
             SimConfig(interval=60.0, seed=2))
    assert pol.calls > 100 and pol.kept >= pol.calls - 2
    assert pol.codes["wait_resources"] > 20 * pol.calls
    assert 0 < pol.reused < pol.bases
    # every new round base but the first advanced the last one's §5.1 components, and each
    # equals a fresh build
    assert pol.advanced == pol.bases - pol.reused - 1 > 20
    assert pol.checked == pol.bases
    # and its host state, whose lists were brought up to date from the log many times
    assert pol.hosts_advanced == pol.advanced and pol.synced > 20
    assert pol.pairs_kept == (pol.calls - 1 if name.startswith("gandiva") else 0)


def _random_snapshot(draw):
    nodes = draw(st.integers(1, 3))
    per = draw(st.sampled_from([2, 4, 8]))
    mem = draw(st.sampled_from([8000, 16384, 80000]))
    node_objs = tuple(Node(f"n{i}", per, gpu_mem_mb=mem) for i in range(nodes))
    gpus = [g for n in node_objs for g in n.gpus()]
    occ: dict[Gpu, tuple[str, ...]] = {}
    jobs = []
    legal = draw(st.booleans())  # only §5.1-conforming packing, or anything up to ``cap``/GPU
    cap = draw(st.sampled_from([2, 2, 2, 3]))
    for k in range(draw(st.integers(0, 16))):  # up to a full cluster: packing is needed
        want = draw(st.sampled_from([1, 1, 2, 4, 8]))
        if legal:
            # alone on free GPUs, or inside a running job that holds its GPUs alone
            free = [g for g in gpus if g not in occ]
            hosts = [j for j in jobs if j.num_gpus >= want and all(
                occ[g] == (j.id,) for g in j.allocation.gpus)]
            if draw(st.booleans()) and hosts:
                h = draw(st.sampled_from(hosts))
                chosen = list(h.allocation.gpus[:want])
            elif len(free) >= want:
                start = draw(st.integers(0, len(free) - want))
                chosen = free[start:start + want]
            else:
                break
        else:  # anything, now and then a third worker on a GPU
            avail = [g for g in gpus if len(occ.get(g, ())) < cap]
            if len(avail) < want:
                break
            start = draw(st.integers(0, len(avail) - want))
            chosen = avail[start:start + want]
        app = draw(st.sampled_from(APPS))
        batch = MODELS.iters_table[app][0][0] * want
        total = draw(st.floats(100, 1e5))
        jid = f"R{k}"
        jobs.append(Job(jid, draw(st.floats(0, 50)), want, app, batch, total_iters=total,
                        state=JobState.RUNNING,
                        allocation=Allocation(tuple(chosen), -(-batch // want)),
                        start_time=draw(st.sampled_from([0.0, 10.0, 20.0])),
                        completed_iters=draw(st.floats(0, 0.9)) * total,
                        deadline=draw(st.one_of(st.none(), st.floats(10, 1e5)))))
        for g in chosen:
            occ[g] = occ.get(g, ()) + (jid,)
    if draw(st.booleans()):  # fill the free GPUs with small jobs: many candidate hosts
        size = draw(st.sampled_from([1, 2]))
        free = [g for g in gpus if g not in occ]
        for k in range(len(free) // size):
            chosen = tuple(free[k * size:(k + 1) * size])
            app = draw(st.sampled_from(APPS[:3]))
            batch = MODELS.iters_table[app][0][0] * size
            jid = f"F{k}"
            jobs.append(Job(jid, float(k % 3), size, app, batch, total_iters=1e4,
                            state=JobState.RUNNING, allocation=Allocation(chosen, -(-batch // size)),
                            start_time=0.0))
            for g in chosen:
                occ[g] = (jid,)
    for k in range(draw(st.integers(1, 12))):
        n = draw(st.sampled_from([1, 1, 1, 2, 2, 3, 4, 8, 32]))
        app = draw(st.sampled_from(APPS))
        jobs.append(Job(f"P{k}", draw(st.floats(0, 100)), n, app,
                        MODELS.iters_table[app][0][0] * n * draw(st.sampled_from([1, 2, 8])),
                        total_iters=draw(st.floats(10, 1e5)),
                        deadline=draw(st.one_of(st.none(), st.floats(10, 1e5))),
                        preemptions=draw(st.sampled_from([0, 0, 0, 1])),
                        state=draw(st.sampled_from([JobState.PENDING, JobState.SUSPENDED]))))
    table = draw(st.sampled_from(["fitted", "gavel", "flat"]))
    interference = {"fitted": MODELS.interference, "gavel": GAVEL_ONLY,
                    "flat": InterferenceTable(MappingProxyType({}),
                                              draw(st.sampled_from([0.9, 1.5, 1.7, 2.2])))}[table]
    snap = ClusterSnapshot(draw(st.floats(50, 500)), node_objs,
                           MappingProxyType({j.id: j for j in jobs}), MappingProxyType(occ),
                           tuple(g for g in gpus if g not in occ), MODELS.profiles,
                           MODELS.memory, interference)
    # measured speeds (Gandiva's runtime profile): some jobs unmeasured, some slowed
    rates = {}
    for j in jobs:
        if j.running and draw(st.booleans()):
            rates[j.id] = dataclasses.replace(
                j, iter_rate=draw(st.sampled_from([0.3, 0.6, 0.8, 0.9, 1.0]))
                / snap.exclusive_iter_time(j))
    return dataclasses.replace(snap, jobs=MappingProxyType({**snap.jobs, **rates}))


@pytest.mark.parametrize("name", ["gandiva", "lucid+gimbal"])
def test_host_lists_built_by_application_equal_the_scan(name):
    """The per-application host lists built by host application (each pair's progress asked
    once, the hosts' memory room kept) equal the literal scan, in the daemon's state; with a
    NaN submit time among the hosts the build takes the scan itself (a sort of keys with a
    NaN depends on the order it is given) and says so."""
    snap, _ = build(12, 8, 60, 150, seed=1)
    pol = policies.get_policy(name)
    ppof = lambda a, b: pair_progress(snap, a, b)  # noqa: E731
    hs = HostState(pol, snap)
    for app in APPS:
        for mb in (0.0, 8000.0, 30000.0):
            assert hs.lists_for(app, mb, pol, snap, ppof) == _scan_lists(hs, app, mb, pol,
                                                                         snap, ppof)
        assert hs.sorted[app].items == hs.scan_sorted(app, pol, snap, ppof)[0]
        assert hs.sorted[app].items and not hs.sorted[app].nan
    host = next(j for j in snap.jobs.values() if j.running)
    odd = dataclasses.replace(snap, jobs=MappingProxyType(
        {**snap.jobs, host.id: dataclasses.replace(host, submit_time=float("nan"))}))
    hs = HostState(pol, odd)
    calls = []
    scan = hs.scan_sorted
    hs.scan_sorted = lambda *a: calls.append(a[0]) or scan(*a)
    listed = [a for a in APPS if any(e[1].id == host.id
                                     for e in hs.sorted_for(a, pol, odd, ppof))]
    assert listed and set(calls) == set(APPS)  # every list holding it came from the scan
    assert all(hs.sorted[a].nan for a in listed)


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_snapshots(name, data):
    snap = _random_snapshot(data.draw)
    assert_same(policies.get_policy(name).schedule(snap), REFS[name]().schedule(snap))


@pytest.mark.parametrize("name", NAMES)
def test_daemon_state(name):
    snap, _ = build(12, 8, 60, 150, seed=1)
    plan = policies.get_policy(name).schedule(snap)
    assert_same(plan, REFS[name]().schedule(snap))
    assert any(a.share_with for a in plan.starts())
    # one cycle later, the plan applied: packed sets to coordinate (+gimbal: resizes)
    after = apply_plan(snap, plan)
    plan2 = policies.get_policy(name).schedule(after)
    assert_same(plan2, REFS[name]().schedule(after))
    # (the bench jobs have no deadlines: Gandiva's deadline objective has nothing to gain)
    assert bool(plan2.resizes()) == (name in ("lucid+gimbal", "gavel+gimbal"))
    # the same state under the Gavel table (pairs below the thresholds exist)
    snap2 = dataclasses.replace(snap, interference=GAVEL_ONLY)
    assert_same(policies.get_policy(name).schedule(snap2), REFS[name]().schedule(snap2))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_placement_index_matches_placement_ok(data):
    """The per-component §5.1 check answers placement_ok for any GPUs of a waiting job."""
    snap = _random_snapshot(data.draw)
    waiting = [j for j in snap.jobs.values() if j.waiting]
    index = Placement(snap, snap.running())
    gpus = [g for n in snap.nodes for g in n.gpus()]
    for host in snap.running():  # the GPUs a host round proposes: some of one job's GPUs
        hg = host.allocation.gpus
        for job in waiting[:3]:
            pick = tuple(hg[:data.draw(st.integers(1, len(hg)))])
            assert index.ok(job, pick) == placement_ok(snap, job, pick), (job.id, pick)
    for _ in range(5):  # and anything at all
        pick = tuple(data.draw(st.lists(st.sampled_from(gpus), min_size=1, max_size=4,
                                        unique=True)))
        job = waiting[0]
        assert index.ok(job, pick) == placement_ok(snap, job, pick), (job.id, pick)


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_kept_parts_across_snapshots(name, data):
    """Two snapshots with hand-made change records (the simulator's kind): between them
    running jobs get new views on the same GPUs (measured speed, sub-batch: no GPU changes
    hands) and a running job may leave.  The round base and Gandiva's pair memo taken over
    from the first call must answer as the reference does."""
    snap = _random_snapshot(data.draw)
    pol = policies.get_policy(name)
    gitems, jitems = list(snap.gpu_jobs), list(snap.jobs)  # append-only logs

    def records(s):
        return dataclasses.replace(s, gpu_changes=GpuChanges(Frozen(gitems), s.gpu_jobs),
                                   job_changes=JobChanges(Frozen(jitems), s.jobs))

    s1 = records(snap)
    assert_same(pol.schedule(s1), REFS[name]().schedule(s1))
    jobs, gj, free = dict(snap.jobs), dict(snap.gpu_jobs), list(snap.free_gpus)
    running = [j for j in snap.jobs.values() if j.running]
    for j in running:
        if data.draw(st.booleans()):
            et = snap.exclusive_iter_time(j)
            jobs[j.id] = dataclasses.replace(
                j, iter_rate=data.draw(st.sampled_from([0.2, 0.5, 0.9, 1.0])) / et,
                allocation=dataclasses.replace(  # a larger or smaller worker: memory fits flip
                    j.allocation, sub_batch=max(1, int(j.allocation.sub_batch * data.draw(
                        st.sampled_from([1, 2, 16, 1 / 16]))))))
            jitems.append(j.id)
    if running and data.draw(st.booleans()):  # one leaves: its GPUs change hands
        gone = data.draw(st.sampled_from(running))
        del jobs[gone.id]
        jitems.append(gone.id)
        for g in gone.allocation.gpus:
            rest = tuple(i for i in gj[g] if i != gone.id)
            gitems.append(g)
            if rest:
                gj[g] = rest
            else:
                del gj[g]
                free.append(g)
    s2 = records(dataclasses.replace(snap, jobs=MappingProxyType(jobs),
                                     gpu_jobs=MappingProxyType(gj), free_gpus=tuple(free)))
    kept = getattr(pol, "_round_base", None)
    comps = kept[0].components if kept is not None else None
    hs = kept[0].host_state if kept is not None else None
    ref = REFS[name]()
    knobs = data.draw(st.sampled_from([None, "unequal", "threshold"]))
    if knobs is not None:  # the policy's knobs changed between the calls: built anew
        for p in (pol, ref):
            if knobs == "unequal":
                p.unequal = not p.unequal
            else:
                p.threshold = p.gimbal_threshold = 1.3
    packed = getattr(pol, "_packed", None)
    assert_same(pol.schedule(s2), ref.schedule(s2))
    if name.startswith("gandiva"):  # the packed pairs advanced by the GPUs logged since
        on = {g: ids for g, ids in s2.gpu_jobs.items() if len(ids) == 2}
        assert packed is not None and pol._packed[1] is packed[1] and packed[1] == on
        assert pol._packed[2] == dict(Counter(on.values()))
    after = getattr(pol, "_round_base", None)
    if after is not None and after[2] is s2.job_changes.log:
        if comps is not None and after[0] is not kept[0]:
            # taken over, unless the knobs changed (then nothing is)
            assert (after[0].components is comps) == (knobs is None)
            assert (after[0].host_state is hs) == (knobs is None)
        _assert_components(after[0].components, s2)
        _assert_host_state(after[0].host_state, pol, s2)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_placement_memo_across_snapshots(data):
    """The §5.1 verdicts memoised per component across calls (``Placement(memo=...)``)
    equal the ones computed afresh, over a sequence of snapshots whose components have the
    same job ids (R0, R1, ...) but other allocations: a member's new view must not reuse
    the verdict of its old one."""
    memo: dict = {}
    for _ in range(4):
        snap = _random_snapshot(data.draw)
        fresh = Placement(snap)
        kept = Placement(snap, memo=memo)
        assert kept.members == fresh.members
        assert kept.bad == fresh.bad


def test_placement_memo_new_views_same_members():
    """One component, the same two jobs in both snapshots: inside its host's GPUs first
    (§5.1 holds), then across a GPU the host does not hold (it does not).  The verdict
    memoised for the first views must not answer for the second."""
    node = Node("n0", 4, gpu_mem_mb=80000)
    g = list(node.gpus())
    app = APPS[0]
    batch = MODELS.iters_table[app][0][0] * 2

    def snap(r1_gpus):
        r0 = Job("R0", 0.0, 2, app, batch, total_iters=1e4, state=JobState.RUNNING,
                 allocation=Allocation((g[0], g[1]), batch // 2), start_time=0.0)
        r1 = Job("R1", 1.0, 2, app, batch, total_iters=1e4, state=JobState.RUNNING,
                 allocation=Allocation(tuple(r1_gpus), batch // 2), start_time=0.0)
        occ: dict = {}
        for j in (r0, r1):
            for x in j.allocation.gpus:
                occ[x] = occ.get(x, ()) + (j.id,)
        return ClusterSnapshot(10.0, (node,), MappingProxyType({"R0": r0, "R1": r1}),
                               MappingProxyType(occ), tuple(x for x in g if x not in occ),
                               MODELS.profiles, MODELS.memory, MODELS.interference)

    memo: dict = {}
    verdicts = []
    for s in (snap((g[0], g[1])), snap((g[1], g[2])), snap((g[0], g[1]))):
        fresh, kept = Placement(s), Placement(s, memo=memo)
        assert kept.members == fresh.members and len(fresh.members) == 1
        assert kept.bad == fresh.bad
        verdicts.append(bool(fresh.bad))
    assert verdicts == [False, True, False]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_components_advanced_across_snapshots(data):
    """§5.1's components kept across a sequence of unrelated snapshots (the same job ids
    R0, R1, ... on other GPUs, other sets), advanced by the GPUs whose workers differ (and the
    jobs with another view, or not: the GPU record alone suffices): each step equals a fresh
    build (the kept path of
    :class:`policies.pack_components.Components`)."""
    memo: dict = {}
    comps, last = Components(), None
    steps = 0
    for _ in range(4):
        snap = _random_snapshot(data.draw)
        set_ok = Placement.kept(snap, Components())._set_ok
        if last is None:
            changed, fresh = snap.gpu_jobs.keys(), ()
        else:
            gj0, gj1 = last.gpu_jobs, snap.gpu_jobs
            changed = {g for g in gj0.keys() | gj1.keys() if gj0.get(g) != gj1.get(g)}
            fresh = [j for j in last.jobs.keys() | snap.jobs.keys()  # or the GPUs alone
                     if last.jobs.get(j) is not snap.jobs.get(j)] if data.draw(
                         st.booleans()) else ()
        assert comps.advance(snap, changed, fresh, memo, set_ok)
        _assert_components(comps, snap)
        steps += last is not None
        last = snap
    assert steps == 3


@pytest.mark.parametrize("name", ["lucid", "gandiva+gimbal"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_host_state_advanced_across_snapshots(name, data):
    """The round's per-host parts kept across a sequence of unrelated snapshots (the same
    job ids on other GPUs, with other views, some gone, some new), advanced by the GPUs
    whose workers differ and the jobs with another view: at each step the hosts, alone GPUs
    and every list (some brought up to date at each step, others only after several steps,
    or never) equal a fresh build (the kept path of
    :class:`policies.pack_hosts.HostState`, taken here whatever the share of hosts)."""
    pol = policies.get_policy(name)
    keys = [(a, mb) for a in APPS[:4] for mb in (0.0, 4000.0, 30000.0)]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pack_hosts, "REBUILD_SHARE", 0)  # never built anew while the log holds
        hs, last = None, None
        synced = 0
        for _ in range(5):
            snap = _random_snapshot(data.draw)
            snap = dataclasses.replace(snap, interference=MODELS.interference)  # one table
            if last is not None:
                snap = dataclasses.replace(snap, nodes=last.nodes)  # the same nodes
                # (GPUs beyond them dropped: the snapshot's nodes hold every GPU)
                gs = {g for n in snap.nodes for g in n.gpus()}
                jobs = {i: j for i, j in snap.jobs.items()
                        if j.allocation is None or set(j.allocation.gpus) <= gs}
                snap = dataclasses.replace(
                    snap, jobs=MappingProxyType(jobs),
                    gpu_jobs=MappingProxyType({
                        g: tuple(i for i in ids if i in jobs)
                        for g, ids in snap.gpu_jobs.items() if any(i in jobs for i in ids)}))
            if hs is None:
                hs = HostState(pol, snap)
            else:
                gj0, gj1 = last.gpu_jobs, snap.gpu_jobs
                changed = {g for g in gj0.keys() | gj1.keys() if gj0.get(g) != gj1.get(g)}
                fresh = [j for j in last.jobs.keys() | snap.jobs.keys()
                         if last.jobs.get(j) is not snap.jobs.get(j)]
                before = hs.synced
                assert hs.advance(pol, snap, changed, fresh)
            ppof = lambda a, b, s=snap: pair_progress(s, a, b)  # noqa: E731
            # a round's asks: one key at every step, others now and then
            for k in [keys[0]] + data.draw(st.lists(st.sampled_from(keys), max_size=4)):
                hs.lists_for(*k, pol, snap, ppof)
            if last is not None:
                synced += hs.synced - before
            _assert_host_state(hs, pol, snap, keys)
            last = snap
    # the key asked at every step was brought up to date from the log (its list and its
    # application's sorted list) at each of the four later steps
    assert synced >= 8


@pytest.mark.parametrize("name", ["gandiva", "gandiva+gimbal"])
def test_slow_pair_verdict_follows_the_threshold(name):
    """Gandiva's slow-pair memo is keyed by its threshold: one packed pair whose measured
    progress sums to 1.1 is kept under the threshold it was judged with, and unpacked (the
    later job pre-empted) on the same snapshot once the threshold is raised to 1.3."""
    node = Node("n0", 2, gpu_mem_mb=80000)
    g = node.gpus()
    app = APPS[0]
    batch = MODELS.iters_table[app][0][0] * 2
    jobs = {}
    for jid, start in (("R0", 0.0), ("R1", 5.0)):
        j = Job(jid, 0.0, 2, app, batch, total_iters=1e6, state=JobState.RUNNING,
                allocation=Allocation(tuple(g), batch // 2), start_time=start)
        jobs[jid] = j
    snap0 = ClusterSnapshot(100.0, (node,), MappingProxyType(jobs),
                            MappingProxyType({x: ("R0", "R1") for x in g}), (), MODELS.profiles,
                            MODELS.memory, MODELS.interference)
    for jid in jobs:  # measured: 0.55 of its speed alone each, 1.1 together
        jobs[jid] = dataclasses.replace(
            jobs[jid], iter_rate=0.55 / snap0.exclusive_iter_time(jobs[jid]))
    snap = dataclasses.replace(snap0, jobs=MappingProxyType(jobs))
    pol = policies.get_policy(name)
    pol.threshold = pol.gimbal_threshold = 1.0
    first = pol.schedule(snap)
    assert not any(a.job_id == "R1" for a in first.actions)
    pol.threshold = pol.gimbal_threshold = 1.3
    second = pol.schedule(snap)
    ref = REFS[name]()
    ref.threshold = ref.gimbal_threshold = 1.3
    assert_same(second, ref.schedule(snap))
    assert [(type(a).__name__, a.job_id) for a in second.actions] == [("PreemptJob", "R1")]
