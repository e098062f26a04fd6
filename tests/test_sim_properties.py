"""Property tests of the simulator with every registered policy (hypothesis).

Invariants checked on every snapshot a policy receives (i.e. after every
applied plan) and on the final result: no GPU over capacity, at most two jobs per
GPU, co-located workers' memory fits the GPU, gang size (``num_gpus`` or within
``gpu_range``), worker records name the allocation's GPUs and their shares sum to the
global batch in force (per pipeline stage), a batch override stays in
``batch_range``, nothing runs before its arrival, every job finishes, same seed →
same result.  ``test_contract_actions_keep_the_invariants`` drives the actions no
registered policy may emit yet (resize, batch override, rounds, stage placement,
unequal shares, MPS shares) on a heterogeneous cluster through a test policy.
"""
import zlib
from collections import Counter

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import policies
from gimbalctl.cluster import parse_cluster
from gimbalctl.profiles import APPS, default_models
from gimbalctl.sim import SimConfig, simulate
from policies.base import Policy, keep_running_reasons, pick_consolidated, take_gpus
from policies.model import Job, WorkerAlloc
from policies.plan import ReasonCode, ResizeJob, StartJob, make_plan, reason

MODELS = default_models()
NODES = parse_cluster("3x4")


class Checked:
    """Wraps a policy; asserts the cluster invariants on every snapshot."""

    def __init__(self, inner):
        self.inner = inner
        self.name = inner.name
        # the flags the simulator reads (docs/architecture.md), as the policy declares them
        self.preemptive = getattr(inner, "preemptive", False)
        self.needs_lengths = getattr(inner, "needs_lengths", True)
        self.round_length = getattr(inner, "round_length", None)
        self.rounds_only = getattr(inner, "rounds_only", False)
        self.elastic = getattr(inner, "elastic", False)
        self.calls = 0

    def schedule(self, snap):
        self.calls += 1
        per_gpu = Counter()
        for job in snap.jobs.values():
            assert job.submit_time <= snap.now + 1e-9, "a job is visible before its arrival"
            if job.running:
                a = job.allocation
                gpus = a.gpus
                if self.elastic:  # seed 001 elastic shares: any count >= 1, network-packed
                    per = snap.max_gpus_per_node
                    assert len(gpus) >= 1, "a running job holds no GPU"
                    if job.gpu_range is not None:
                        assert job.gpu_range[0] <= len(gpus) <= job.gpu_range[1]
                    assert (len(gpus) % per == 0 if len(gpus) >= per else
                            per % len(gpus) == 0), f"forbidden share {len(gpus)}"
                elif job.gpu_range is None:
                    assert len(gpus) == job.num_gpus, "gang violated"
                else:
                    assert job.gpu_range[0] <= len(gpus) <= job.gpu_range[1], "gpu_range violated"
                assert len(set(gpus)) == len(gpus)
                assert tuple(w.gpu for w in a.workers) == gpus, "records name other GPUs"
                batch = a.global_batch or job.global_batch
                if job.batch_range is None:
                    assert batch == job.global_batch, "a fixed batch was overridden"
                else:
                    assert job.batch_range[0] <= batch <= job.batch_range[1]
                if job.app in snap.profiles:  # (Table I pipeline jobs carry nominal shares)
                    per_stage = Counter()
                    for w in a.workers:
                        assert w.micro_batch * w.accum_steps >= w.share
                        per_stage[w.stage] += w.share
                    assert set(per_stage.values()) == {batch}, "shares do not sum to the batch"
                per_gpu.update(gpus)
        for g, n in per_gpu.items():
            assert n <= snap.max_jobs_per_gpu, f"GPU {g} holds {n} jobs"
            assert tuple(sorted(snap.gpu_jobs[g])) == tuple(sorted(
                j.id for j in snap.jobs.values() if j.running and g in j.allocation.gpus))
            on = [snap.jobs[j] for j in snap.gpu_jobs[g]]
            mem = sum(snap.memory[j.app].mem_mb(
                next(w.micro_batch for w in j.allocation.workers if w.gpu == g)) for j in on)
            assert len(on) == 1 or mem <= snap.node(g.node).gpu_mem_mb + 1e-6
        assert not (set(snap.free_gpus) & set(per_gpu)), "a free GPU holds a job"
        assert len(snap.free_gpus) + len(per_gpu) == snap.total_gpus
        plan = self.inner.schedule(snap)
        missing = set(snap.jobs) - set(plan.reasons)
        assert not missing, f"jobs without a reason: {sorted(missing)[:5]}"
        return plan


job_st = st.tuples(st.floats(0, 3000), st.sampled_from([1, 1, 2, 4, 8, 12]),
                   st.floats(20, 3000), st.sampled_from(APPS))


def build(specs):
    return [Job(id=f"j{i}", submit_time=round(t, 3), num_gpus=g, app=app,
                global_batch=MODELS.iters_table[app][0][0] * g, total_iters=it)
            for i, (t, g, it, app) in enumerate(specs)]


@pytest.mark.parametrize("name", policies.names())
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=st.lists(job_st, min_size=1, max_size=14), interval=st.sampled_from([30.0, 300.0]),
       cost=st.sampled_from([0.0, 45.0]))
def test_invariants(name, specs, interval, cost):
    jobs = build(specs)
    cfg = SimConfig(interval=interval, preempt_cost=cost, seed=7)
    pol = Checked(policies.get_policy(name))
    res = simulate(jobs, NODES, pol, MODELS, cfg)
    df = res.jobs.set_index("id")
    assert len(df) == len(jobs)
    assert df.end.notna().all(), "every job finishes"
    for j in jobs:
        row = df.loc[j.id]
        assert row.start >= j.submit_time - 1e-9, "started before arrival"
        assert row.end > row.start
    if not pol.preemptive:
        assert (df.preemptions == 0).all()
    # same seed -> same result
    again = simulate(jobs, NODES, policies.get_policy(name), MODELS, cfg)
    pd.testing.assert_frame_equal(res.jobs, again.jobs)
    assert res.summary["avg_jct"] == again.summary["avg_jct"]


# ---------------------------------------------------------------- the contract's actions
class Explorer(Policy):
    """Test policy (not registered) that emits every action of the contract no registered
    policy may emit yet: unequal worker shares, MPS shares, accumulation, pipeline stages,
    batch overrides within ``batch_range``, GPU counts within ``gpu_range``, co-location
    within memory, and round-based resizes (onto more GPUs, or new records on the same
    GPUs).  Choices are a deterministic function of the job id and time."""

    name = "contract-explorer"
    preemptive = False
    needs_lengths = False
    round_length = 250.0

    def schedule(self, snap):
        acts, reasons = [], {}
        by_node = snap.free_by_node()
        order = snap.node_rank
        for j in snap.running():
            h = _h(j.id, snap.now)
            a = j.allocation
            if h % 3 or any(len(snap.gpu_jobs[g]) > 1 for g in a.gpus):
                continue
            gpus = a.gpus
            if j.gpu_range and len(gpus) < j.gpu_range[1] and by_node.get(gpus[0].node):
                extra = by_node[gpus[0].node][0]
                take_gpus(by_node, (extra,))
                gpus = gpus + (extra,)
            batch = _batch(j, h >> 4)
            ws = _workers(snap, j, gpus, batch, h)
            acts.append(ResizeJob(j.id, gpus, ws[0].micro_batch, workers=ws,
                                  global_batch=batch if j.batch_range else None))
            reasons[j.id] = reason(ReasonCode.RESIZED)
        for j in snap.pending():
            h = _h(j.id, snap.now)
            n = j.num_gpus
            if j.gpu_range:
                lo, hi = j.gpu_range
                n = lo + h % (hi - lo + 1)
            batch = _batch(j, h >> 4)
            gpus = pick_consolidated((), n, order, by_node) if by_node else None
            share_with = ()
            if gpus is None and n == 1:
                gpus, share_with = _beside(snap, j, batch, acts)
            if gpus is None:
                reasons[j.id] = reason(ReasonCode.WAIT_RESOURCES)
                continue
            if not share_with:
                take_gpus(by_node, gpus)
            ws = _workers(snap, j, gpus, batch, h, small=bool(share_with))
            acts.append(StartJob(j.id, gpus, ws[0].micro_batch, share_with=share_with,
                                 workers=ws, global_batch=batch if j.batch_range else None))
            reasons[j.id] = reason(ReasonCode.STARTED)
        keep_running_reasons(snap, reasons)
        return make_plan(self.name, acts, [], reasons)


def _h(jid, now):
    return zlib.crc32(f"{jid}@{now:.3f}".encode())


def _batch(job, h):
    if not job.batch_range:
        return job.global_batch
    lo, hi = job.batch_range
    return (lo, hi, (lo + hi) // 2)[h % 3]


def _split(total, weights):
    k = len(weights)
    base = [1] * k
    left = total - k
    s = sum(weights)
    raw = [left * w // s for w in weights]
    raw[0] += left - sum(raw)
    return [b + r for b, r in zip(base, raw)]


def _workers(snap, job, gpus, batch, h, small=False):
    """Uneven shares (per stage when the job is a 2-stage pipeline), micro-batches within
    the profiled maximum (8 beside another job), accumulation covering the share."""
    maxb = 8 if small else snap.profiles[job.app].max_local_batch
    stages = 2 if job.stages == 2 and len(gpus) >= 2 else 1
    cut = len(gpus) // stages
    groups = [gpus[:cut], gpus[cut:]] if stages == 2 else [gpus]
    out = []
    for s, gs in enumerate(groups):
        shares = _split(batch, [1 + ((h >> (2 * i)) & 3) for i in range(len(gs))])
        for i, (g, sh) in enumerate(zip(gs, shares)):
            micro = max(1, min(sh, maxb))
            mps = (None, 50, 70, 100)[(h >> (i + 3)) & 3]
            out.append(WorkerAlloc(g, sh, micro, -(-sh // micro), mps, None, s))
    return tuple(out)


def _beside(snap, job, batch, acts):
    """A GPU holding one job (not touched in this plan) where an 8-sample micro-batch fits."""
    mem = snap.memory[job.app]
    busy = {g for a in acts for g in a.gpus}
    for g, on in snap.gpu_jobs.items():
        if len(on) != 1 or g in busy:
            continue
        other = snap.jobs[on[0]]
        ow = next(w for w in other.allocation.workers if w.gpu == g)
        need = snap.memory[other.app].mem_mb(ow.micro_batch) + mem.mem_mb(min(8, batch))
        if need <= snap.node(g.node).gpu_mem_mb:
            return (g,), on
    return None, ()


contract_job_st = st.tuples(st.floats(0, 3000), st.sampled_from([1, 1, 2, 3, 4]),
                            st.floats(20, 2000), st.sampled_from(APPS),
                            st.booleans(), st.booleans(), st.sampled_from([1, 2]))


def build_contract(specs):
    out = []
    for i, (t, g, it, app, flex_batch, flex_gpus, stages) in enumerate(specs):
        b = MODELS.iters_table[app][0][0] * g
        out.append(Job(id=f"j{i}", submit_time=round(t, 3), num_gpus=g, app=app, global_batch=b,
                       total_iters=it, batch_range=(max(g * 2, b // 2), b * 2) if flex_batch else None,
                       gpu_range=(1, g + 1) if flex_gpus else None, stages=stages))
    return out


HETERO = parse_cluster("2x4:v100,1x4:k80,1x2:p100")


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=st.lists(contract_job_st, min_size=1, max_size=12),
       cost=st.sampled_from([0.0, 60.0]))
def test_contract_actions_keep_the_invariants(specs, cost):
    jobs = build_contract(specs)
    cfg = SimConfig(interval=120.0, preempt_cost=cost, resize_cost=cost, seed=3)
    pol = Checked(Explorer())
    res = simulate(jobs, HETERO, pol, MODELS, cfg)
    df = res.jobs.set_index("id")
    assert df.end.notna().all() and len(df) == len(jobs)
    assert pol.calls >= 1
    again = simulate(jobs, HETERO, Explorer(), MODELS, cfg)
    pd.testing.assert_frame_equal(res.jobs, again.jobs)
    assert res.summary == {**again.summary, "policy_calls": res.summary["policy_calls"]}


def test_the_explorer_exercises_every_contract_action():
    """The property test above is only as good as the actions it drives: on a fixed workload
    the explorer resizes (also onto more GPUs), overrides batches, places two pipeline
    stages, co-locates, sets MPS shares and uses every GPU type."""
    specs = [(i * 40.0, (1, 2, 3, 4)[i % 4], 800.0 + 150 * i, APPS[i % len(APPS)],
              i % 2 == 0, i % 3 == 0, 1 + i % 2) for i in range(16)]
    seen = Counter()

    class Counting(Explorer):
        def schedule(self, snap):
            plan = super().schedule(snap)
            for a in plan.actions:
                seen[type(a).__name__] += 1
                ws = a.workers
                seen["override"] += a.global_batch is not None
                seen["stage1"] += any(w.stage == 1 for w in ws)
                seen["mps"] += any(w.mps_pct is not None for w in ws)
                seen["uneven"] += len({w.share for w in ws}) > 1
                seen["grow"] += isinstance(a, ResizeJob) and len(a.gpus) > len(
                    snap.jobs[a.job_id].allocation.gpus)
                seen["shared"] += bool(getattr(a, "share_with", ()))
                seen.update(f"type:{snap.node(g.node).gpu_type}" for g in a.gpus)
            return plan

    simulate(build_contract(specs), HETERO, Checked(Counting()), MODELS,
             SimConfig(interval=120.0, resize_cost=30.0))
    for key in ("StartJob", "ResizeJob", "override", "stage1", "mps", "uneven", "grow", "shared",
                "type:v100", "type:k80", "type:p100"):
        assert seen[key] > 0, (key, dict(seen))
