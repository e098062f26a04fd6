"""The simulator's side of the allocation-record contract (docs/architecture.md):
per-worker rates, GPU types, batch override, resize cost, rounds, history and the
policy flags.  Expected values are computed from the model's own equations."""
import dataclasses

import pandas as pd
import pytest

from gimbalctl.cluster import parse_cluster
from gimbalctl.profiles import default_models
from gimbalctl.sim import PlanError, SimConfig, Simulator, simulate
from gimbalctl.traces import load_trace
from policies import get_policy
from policies.base import Policy
from policies.model import Gpu, Job, WorkerAlloc, uniform_workers
from policies.plan import PreemptJob, ResizeJob, StartJob, make_plan
from policies.throughput import InterferenceTable

M = default_models()
PROF = M.profiles["cifar10"]


def job(i, t, g, iters, app="cifar10", batch=None, **kw):
    return Job(id=f"j{i}", submit_time=t, num_gpus=g, app=app,
               global_batch=batch or 128 * g, total_iters=iters, **kw)


class Scripted(Policy):
    """Calls ``fn(snap)`` for the actions; records every snapshot it is given."""

    name = "scripted"
    preemptive = True
    needs_lengths = True

    def __init__(self, fn, **flags):
        self.fn, self.seen = fn, []
        for k, v in flags.items():
            setattr(self, k, v)

    def schedule(self, snap):
        self.seen.append(snap)
        return make_plan(self.name, list(self.fn(snap)), [], {})


def start_pending(make):
    """Start every pending job with ``make(snap, job)`` (a StartJob)."""
    def fn(snap):
        return [make(snap, j) for j in snap.pending()]
    return fn


def first_gpus(snap, n, node=0):
    return tuple(Gpu(snap.nodes[node].name, i) for i in range(n))


# ---------------------------------------------------------------- equivalence
class _TodayRate(Simulator):
    """The rate model before per-worker records (kept here as the reference): eq. 7 on
    B = global/k, times the largest ξ over the partners, divided by the MPS share."""

    def _rate(self, rec):
        spec, alloc = rec.spec, rec.alloc
        prof = self.models.profiles[spec.app]
        k = len(alloc.gpus)
        t_iter = prof.iter_time(spec.global_batch / k, k, alloc.num_nodes, alloc.accum_steps)
        xi = 1.0
        for other in rec.partners:
            xi = max(xi, self.models.interference.ratio(spec.app, self.recs[other].spec.app))
        if alloc.mps_pct is not None:
            t_iter /= max(alloc.mps_pct, 1) / 100.0
        return 1.0 / (t_iter * xi)


@pytest.mark.parametrize("name", ["fifo", "tiresias", "sjf-bsbf", "sjf-ffs"])
def test_uniform_workers_give_exactly_the_previous_numbers(name):
    jobs = load_trace("gimbalctl/data/traces/pollux/workload-1.csv", models=M, limit=60)
    nodes = parse_cluster("8x4")
    cfg = SimConfig(xi=1.3, interval=60.0)
    new = simulate(jobs, nodes, get_policy(name), M, cfg)
    ref = _TodayRate(jobs, nodes, get_policy(name), M, cfg).run()
    pd.testing.assert_frame_equal(new.jobs, ref.jobs, check_exact=True)
    if name.startswith("sjf-"):
        assert new.jobs.shared.any(), "the workload must exercise co-location"


def test_explicit_uniform_workers_equal_the_plain_start():
    jobs = [job(0, 0, 4, 500, batch=512), job(1, 5, 2, 300, batch=256)]

    def plain(snap, j):
        return StartJob(j.id, first_gpus(snap, j.num_gpus, int(j.id[1])), j.global_batch // j.num_gpus)

    def explicit(snap, j):
        gpus = first_gpus(snap, j.num_gpus, int(j.id[1]))
        b = j.global_batch // j.num_gpus
        return StartJob(j.id, gpus, b, workers=uniform_workers(gpus, b, 1, None, j.global_batch))

    a = simulate(jobs, parse_cluster("2x4"), Scripted(start_pending(plain)), M)
    b = simulate(jobs, parse_cluster("2x4"), Scripted(start_pending(explicit)), M)
    pd.testing.assert_frame_equal(a.jobs, b.jobs, check_exact=True)


# ---------------------------------------------------------------- per-worker rate
def test_uneven_shares_run_at_the_slowest_worker():
    shares = (200, 100, 100, 112)

    def make(snap, j):
        gpus = first_gpus(snap, 4)
        ws = tuple(WorkerAlloc(g, s, 100, 2 if s > 100 else 1) for g, s in zip(gpus, shares))
        return StartJob(j.id, gpus, 100, 2, workers=ws)

    pol = Scripted(start_pending(make))
    res = simulate([job(0, 0, 4, 1000, batch=512)], parse_cluster("1x4"), pol, M)
    worst = max(PROF.iter_time(s, 4, 1, 2 if s > 100 else 1) for s in shares)
    assert res.jobs.jct.iloc[0] == pytest.approx(1000 * worst)
    # the next snapshot shows exactly the plan's record
    pol = Scripted(start_pending(make), round_length=1.0)
    simulate([job(0, 0, 4, 1000, batch=512)], parse_cluster("1x4"), pol, M)
    view = pol.seen[1].jobs["j0"]
    assert view.allocation.workers == make(pol.seen[0], view).workers
    assert view.allocation.total_share == 512 and view.allocation.accum_steps == 2


@pytest.mark.parametrize("gtype", ["k80", "p100", "v100"])
def test_gpu_type_speed_scales_the_rate(gtype):
    speed = M.gpu_types.speed("cifar10", gtype)
    assert speed > 0
    res = simulate([job(0, 0, 2, 1000)], parse_cluster(f"1x4:{gtype}"), get_policy("fifo"), M)
    assert res.jobs.jct.iloc[0] == pytest.approx(1000 * PROF.iter_time(128, 2, 1) / speed)


def test_gang_over_two_gpu_types_runs_at_the_slower():
    slow = min(M.gpu_types.speed("cifar10", "k80"), M.gpu_types.speed("cifar10", "v100"))

    def make(snap, j):
        return StartJob(j.id, (Gpu("n0000", 0), Gpu("n0001", 0)), 128)

    res = simulate([job(0, 0, 2, 1000)], parse_cluster("1x1:v100,1x1:k80"),
                   Scripted(start_pending(make)), M)
    assert res.jobs.jct.iloc[0] == pytest.approx(1000 * PROF.iter_time(128, 2, 2) / slow)


class _SplitXi(InterferenceTable):
    """ξ that depends on the MPS split (a stand-in for an MPS-aware model)."""

    def ratio(self, app, other, mps_pct=None, other_mps_pct=None):
        if mps_pct is None:
            return 2.0
        return 100.0 / mps_pct * 0.9

    def mps_alone(self, app, mps_pct):
        return 1.0 if mps_pct is None else 1.25


def test_interference_gets_each_workers_mps_share_and_the_alone_cap():
    models = dataclasses.replace(M, interference=_SplitXi())
    g = Gpu("n0000", 0)

    def make(snap, j):
        pct = 70 if j.id == "j0" else 30
        return StartJob(j.id, (g,), 128, share_with=tuple(snap.gpu_jobs.get(g, ())), mps_pct=pct)

    jobs = [job(0, 0, 1, 1000), job(1, 0, 1, 100)]
    res = simulate(jobs, parse_cluster("1x1"), Scripted(start_pending(make)), models)
    df = res.jobs.set_index("id")
    t = PROF.iter_time(128, 1, 1)
    t1 = 100 * t * (100 / 30 * 0.9)  # j1 beside j0 at 30 %
    assert df.loc["j1", "jct"] == pytest.approx(t1)
    done0 = t1 / (t * 100 / 70 * 0.9)
    assert df.loc["j0", "jct"] == pytest.approx(t1 + (1000 - done0) * t * 1.25)  # alone, MPS cap


# ---------------------------------------------------------------- batch override
def test_batch_override_counts_samples():
    j = job(0, 0, 2, 1000, batch=256, batch_range=(128, 1024))

    def make(snap, jj):
        return StartJob(jj.id, first_gpus(snap, 2), 256, global_batch=512)

    res = simulate([j], parse_cluster("1x4"), Scripted(start_pending(make)), M)
    # 1000 iterations of 256 samples = 500 iterations of 512
    assert res.jobs.jct.iloc[0] == pytest.approx(500 * PROF.iter_time(256, 2, 1))


@pytest.mark.parametrize("batch_range,gb,msg", [
    (None, 512, "overrides a fixed batch"),
    ((128, 300), 512, "outside its batch_range"),
])
def test_batch_override_outside_the_range_is_rejected(batch_range, gb, msg):
    j = job(0, 0, 2, 100, batch=256, batch_range=batch_range)

    def make(snap, jj):
        return StartJob(jj.id, first_gpus(snap, 2), 256, global_batch=gb)

    with pytest.raises(PlanError, match=msg):
        simulate([j], parse_cluster("1x4"), Scripted(start_pending(make)), M)


# ---------------------------------------------------------------- resize
def _resize_after(t_resize, gpus_fn, workers_fn=None):
    def fn(snap):
        acts = [StartJob(j.id, first_gpus(snap, j.num_gpus), 64) for j in snap.pending()]
        for j in snap.running():
            if snap.now >= t_resize and len(j.allocation.gpus) == 2 and not fn.done:
                gpus = gpus_fn(snap)
                ws = workers_fn(gpus) if workers_fn else ()
                acts.append(ResizeJob(j.id, gpus, 128 // len(gpus) + 1, workers=ws))
                fn.done = True
        return acts
    fn.done = False
    return fn


def test_resize_onto_other_gpus_costs_resize_cost_and_service_counts_held_gpus():
    j = job(0, 0, 2, 20000, batch=128, gpu_range=(1, 4))
    four = lambda snap: first_gpus(snap, 4)  # noqa: E731
    pol = Scripted(_resize_after(100.0, four), round_length=100.0)
    res = simulate([j], parse_cluster("1x4"), pol, M, SimConfig(resize_cost=30.0))
    t2, t4 = PROF.iter_time(64, 2, 1), PROF.iter_time(32, 4, 1)
    done = 100.0 / t2
    assert res.jobs.jct.iloc[0] == pytest.approx(100.0 + 30.0 + (20000 - done) * t4)
    last = pol.seen[-1]
    view = last.jobs["j0"]
    assert last.now > 200 and len(view.allocation.gpus) == 4
    assert last.completed(view) == pytest.approx(
        done + (last.now - 130.0) / t4)
    assert last.attained_service(view) == pytest.approx(2 * 100.0 + 4 * (last.now - 100.0))


def test_resize_on_the_same_gpus_is_free():
    j = job(0, 0, 2, 2000, batch=128)
    same = lambda snap: first_gpus(snap, 2)  # noqa: E731
    uneven = lambda gpus: (WorkerAlloc(gpus[0], 80, 80), WorkerAlloc(gpus[1], 48, 48))  # noqa
    pol = Scripted(_resize_after(100.0, same, uneven), round_length=100.0)
    res = simulate([j], parse_cluster("1x4"), pol, M, SimConfig(resize_cost=30.0))
    done = 100.0 / PROF.iter_time(64, 2, 1)
    expect = 100.0 + (2000 - done) * PROF.iter_time(80, 2, 1)
    assert res.jobs.jct.iloc[0] == pytest.approx(expect)


def test_an_mps_change_on_the_same_gpus_costs_mps_switch_cost():
    """A resize on the same GPUs that changes a worker's MPS share (an LGRR switch) costs
    ``mps_switch_cost`` seconds without progress; one that only moves samples (LISS) or
    keeps every share costs nothing, and neither pays ``resize_cost``."""
    same = lambda snap: first_gpus(snap, 2)  # noqa: E731
    squeezed = lambda gpus: (WorkerAlloc(gpus[0], 64, 64, 1, 50),  # noqa: E731
                             WorkerAlloc(gpus[1], 64, 64, 1, None))
    uneven = lambda gpus: (WorkerAlloc(gpus[0], 80, 80), WorkerAlloc(gpus[1], 48, 48))  # noqa

    def jct(workers_fn, **cfg):
        pol = Scripted(_resize_after(100.0, same, workers_fn), round_length=100.0)
        res = simulate([job(0, 0, 2, 2000, batch=128)], parse_cluster("1x4"), pol, M,
                       SimConfig(**cfg))
        return res.jobs.jct.iloc[0]

    free = jct(squeezed)
    assert jct(squeezed, mps_switch_cost=25.0) == pytest.approx(free + 25.0)
    assert jct(squeezed, resize_cost=30.0) == pytest.approx(free)
    assert jct(uneven, mps_switch_cost=25.0) == pytest.approx(jct(uneven))


# ---------------------------------------------------------------- rounds, history, flags
def test_round_policy_is_called_every_round_while_nothing_waits():
    pol = Scripted(start_pending(lambda s, j: StartJob(j.id, first_gpus(s, 1), 128)),
                   round_length=250.0)
    res = simulate([job(0, 10, 1, 5000)], parse_cluster("1x1"), pol, M)
    end = res.jobs.end.iloc[0]
    times = [s.now for s in pol.seen]
    assert times[0] == 10.0
    assert times[1:] == pytest.approx([10.0 + 250.0 * k for k in range(1, len(times))])
    assert 10.0 + 250.0 * (len(times) - 1) < end <= 10.0 + 250.0 * len(times)


def test_history_lists_finished_jobs_and_is_shared_between_calls():
    jobs = [job(i, i * 10.0, 1, 100 + 50 * i) for i in range(4)]
    pol = Scripted(start_pending(lambda s, j: StartJob(j.id, (s.free_gpus[0],), 128)),
                   round_length=5.0)
    simulate(jobs, parse_cluster("1x4"), pol, M)
    for s in pol.seen:
        assert all(h.end_time <= s.now for h in s.history)
        assert len(s.history) == sum(1 for j in jobs if j.submit_time <= s.now and j.id not in s.jobs)
    finals = [s for s in pol.seen if len(s.history) == 3]
    assert finals and all(s.history is finals[0].history for s in finals)
    h = finals[0].history[0]
    assert (h.id, h.num_gpus, h.iterations, h.global_batch) == ("j0", 1, 100, 128)


def test_lengths_only_for_policies_that_need_them():
    blind = Scripted(start_pending(lambda s, j: StartJob(j.id, (s.free_gpus[0],), 128)),
                     needs_lengths=False)
    seeing = Scripted(start_pending(lambda s, j: StartJob(j.id, (s.free_gpus[0],), 128)))
    simulate([job(0, 0, 1, 100)], parse_cluster("1x1"), blind, M)
    simulate([job(0, 0, 1, 100)], parse_cluster("1x1"), seeing, M)
    assert blind.seen[0].jobs["j0"].total_iters is None
    assert seeing.seen[0].jobs["j0"].total_iters == 100


def test_non_preemptive_policy_cannot_preempt():
    def fn(snap):
        if snap.pending() and not snap.running():
            return [StartJob(j.id, (snap.free_gpus[0],), 128) for j in snap.pending()[:1]]
        return [PreemptJob(j.id) for j in snap.running()]
    with pytest.raises(PlanError, match="preemptive = False"):
        simulate([job(0, 0, 1, 10**6), job(1, 5, 1, 10)], parse_cluster("1x1"),
                 Scripted(fn, preemptive=False), M)


def test_gpu_count_is_the_gang_size_unless_the_job_gives_a_gpu_range():
    def make(snap, j):
        return StartJob(j.id, first_gpus(snap, 2), 64)

    with pytest.raises(PlanError, match="gang violation"):
        simulate([job(0, 0, 4, 100, batch=128)], parse_cluster("1x4"),
                 Scripted(start_pending(make)), M)
    with pytest.raises(PlanError, match="outside its gpu_range"):
        simulate([job(0, 0, 4, 100, batch=128, gpu_range=(3, 4))], parse_cluster("1x4"),
                 Scripted(start_pending(make)), M)
    res = simulate([job(0, 0, 4, 100, batch=128, gpu_range=(1, 4))], parse_cluster("1x4"),
                   Scripted(start_pending(make)), M)
    assert res.jobs.jct.iloc[0] == pytest.approx(100 * PROF.iter_time(64, 2, 1))


# ---------------------------------------------------------------- worker validation
def _bad(workers_fn, msg, **job_kw):
    def make(snap, j):
        gpus = first_gpus(snap, 2)
        return StartJob(j.id, gpus, 64, workers=workers_fn(gpus))
    with pytest.raises(PlanError, match=msg):
        simulate([job(0, 0, 2, 100, batch=128, **job_kw)], parse_cluster("1x4"),
                 Scripted(start_pending(make)), M)


@pytest.mark.parametrize("workers_fn,msg,kw", [
    (lambda g: (WorkerAlloc(g[0], 64, 64), WorkerAlloc(g[1], 60, 64)), "sum to 124", {}),
    (lambda g: (WorkerAlloc(g[1], 64, 64), WorkerAlloc(g[0], 64, 64)), "same GPUs", {}),
    (lambda g: (WorkerAlloc(g[0], 96, 32, 2), WorkerAlloc(g[1], 32, 32)), "does not cover", {}),
    (lambda g: (WorkerAlloc(g[0], 64, 64, mps_pct=0), WorkerAlloc(g[1], 64, 64)), "1..100", {}),
    (lambda g: (WorkerAlloc(g[0], 64, 64, mps_pct=60, mps_cap=50), WorkerAlloc(g[1], 64, 64)),
     "ceiling 50", {}),
    (lambda g: (WorkerAlloc(g[0], 64, 64, stage=1), WorkerAlloc(g[1], 64, 64)), "stage 1", {}),
    (lambda g: (WorkerAlloc(g[0], 128, 128, stage=1), WorkerAlloc(g[1], 128, 128)),
     None, dict(stages=2)),
    (lambda g: (WorkerAlloc(g[0], 64, 64, mem_limit_mb=100), WorkerAlloc(g[1], 64, 64)),
     "over its memory limit", {}),
])
def test_worker_records_are_validated(workers_fn, msg, kw):
    if msg is None:  # a valid two-stage placement: each stage carries the whole batch
        def make(snap, j):
            gpus = first_gpus(snap, 2)
            return StartJob(j.id, gpus, 128, workers=workers_fn(gpus))
        res = simulate([job(0, 0, 2, 100, batch=128, **kw)], parse_cluster("1x4"),
                       Scripted(start_pending(make)), M)
        stage_t = (PROF.t_comp(128) / 2)  # one replica per stage: no all-reduce
        assert res.jobs.jct.iloc[0] == pytest.approx(100 * stage_t)
        return
    _bad(workers_fn, msg, **kw)
