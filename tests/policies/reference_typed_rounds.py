"""Verbatim copies, before issue #13's memos, of policies/typed_rounds.py (type_capacity,
apply_decisions, ...), policies/gavel_rounds.py (_Pick, iter_rate, run_round) and
Isolation.schedule (as ``isolation_schedule``): the reference for
tests/policies/test_typed_rounds_differential.py."""
from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, Optional, Protocol

from policies.base import FreeGpus, exclusive_config
from policies.model import ClusterSnapshot, Gpu, Job
from policies.plan import PreemptJob, Reason, ReasonCode, StartJob, reason


class Choice(Protocol):
    gpu_type: str
    ngpu: int
    batch: int


def type_capacity(snap: ClusterSnapshot) -> dict[str, list]:
    """GPU type -> [GPUs, most GPUs on one node, smallest GPU memory MiB]."""
    out: dict[str, list] = {}
    for n in snap.nodes:
        t = out.setdefault(n.gpu_type, [0, 0, n.gpu_mem_mb])
        t[0] += n.num_gpus
        t[1] = max(t[1], n.num_gpus)
        t[2] = min(t[2], n.gpu_mem_mb)
    return out


def start_on(snap: ClusterSnapshot, job: Job, gpus, batch: int, share_with=()) -> StartJob:
    """StartJob on ``gpus`` with global batch ``batch`` (an override when it differs)."""
    if batch == job.global_batch and gpus:  # no copy of the job needed (same numbers)
        b, s = exclusive_config(snap, job, num_gpus=len(gpus))
    else:
        view = dataclasses.replace(job, num_gpus=len(gpus), global_batch=batch)
        b, s = exclusive_config(snap, view)
    return StartJob(job.id, tuple(gpus), b, s, share_with=tuple(share_with),
                    global_batch=None if batch == job.global_batch else batch)


def current_batch(job: Job) -> int:
    return (job.allocation.global_batch if job.allocation is not None else None) or job.global_batch


def apply_decisions(snap: ClusterSnapshot, queue: list[Job], decided: Mapping[str, Choice],
                    reallocate: bool, started_why: Callable[[Job, Choice], Reason],
                    kept_why: Callable[[Job, Choice], Reason]):
    """Plan pieces for ``decided`` (job id -> choice) over the queue order.

    ``reallocate`` (re-scheduling rounds): a running job whose choice equals what it runs
    keeps its GPUs; any other running job is pre-empted (and restarted where its new
    choice puts it).  Without it running jobs keep their GPUs and only queued jobs start.
    Returns ``(preempted, starts, placed, batch_of, reasons)``.
    """
    gtype_of = {n.name: n.gpu_type for n in snap.nodes}
    reasons: dict[str, Reason] = {}
    preempted: dict[str, PreemptJob] = {}
    kept: dict[str, tuple[Gpu, ...]] = {}
    batch_of: dict[str, int] = {}
    for job in snap.running():
        alloc, opt = job.allocation, decided.get(job.id)
        cur = current_batch(job)
        same = (opt is not None and len(alloc.gpus) == opt.ngpu and cur == opt.batch
                and all(gtype_of[g.node] == opt.gpu_type for g in alloc.gpus))
        if not reallocate or same:
            kept[job.id] = alloc.gpus
            batch_of[job.id] = cur
            if same:
                reasons[job.id] = kept_why(job, opt)
            continue
        preempted[job.id] = PreemptJob(job.id)
        reasons[job.id] = reason(ReasonCode.PREEMPTED, "re-allocated at this round" if opt
                                 else "not chosen for this round")
    held = {g for gs in kept.values() for g in gs}
    by_type: dict[str, dict[str, tuple[Gpu, ...]]] = {}
    for n in snap.nodes:
        gs = tuple(g for g in n.gpus() if g not in held)
        if gs:
            by_type.setdefault(n.gpu_type, {})[n.name] = gs
    rank = snap.node_rank
    placed: dict[str, tuple[Gpu, ...]] = dict(kept)
    starts: list[StartJob] = []
    free: dict[str, FreeGpus] = {}  # per GPU type, indexed by free count (policies.base)
    for job in queue:
        opt: Optional[Choice] = decided.get(job.id)
        if opt is None or job.id in kept:
            continue
        pool = free.get(opt.gpu_type)
        if pool is None:
            pool = free[opt.gpu_type] = FreeGpus(by_type.get(opt.gpu_type, {}), rank)
        gpus = pool.pick(opt.ngpu)  # = pick_consolidated over the type's free GPUs
        if gpus is None:
            raise AssertionError(f"no {opt.ngpu} free {opt.gpu_type} GPUs for {job.id}: "
                                 "the caller counted capacity wrongly")
        pool.take(gpus)
        placed[job.id] = gpus
        batch_of[job.id] = opt.batch
        starts.append(start_on(snap, job, gpus, opt.batch))
        reasons[job.id] = started_why(job, opt)
    return preempted, starts, placed, batch_of, reasons


# ---- policies/gavel_rounds.py, verbatim from _Pick on
import math  # noqa: E402

from policies.base import keep_running_reasons  # noqa: E402
from policies.plan import make_plan  # noqa: E402


class _Pick:
    __slots__ = ("gpu_type", "ngpu", "batch")

    def __init__(self, t, n, b):
        self.gpu_type, self.ngpu, self.batch = t, n, b


def iter_rate(snap: ClusterSnapshot, job: Job, gtype: str, per_node: int) -> float:
    """Iterations/s of ``job`` as submitted (count, batch) on type ``gtype``."""
    prof = snap.profiles.get(job.app)
    if prof is None:
        return 0.0
    n = job.num_gpus
    local = job.global_batch / n
    s = prof.min_accum_steps(local)
    nodes = -(-n // max(per_node, 1))
    return snap.gpu_types.speed(job.app, gtype) / prof.iter_time(local, n, nodes, s)


def run_round(snap: ClusterSnapshot, name: str, jobs: list[Job],
              alloc: Mapping[str, Mapping[str, float]], label: str):
    """Serve ``jobs`` by Gavel priority under allocation ``alloc`` (job -> type -> X)."""
    types = type_capacity(snap)
    cap = {t: v[0] for t, v in types.items()}

    def prio(j: Job):
        x = sum(alloc.get(j.id, {}).values())
        age = snap.now - j.submit_time
        got = snap.executed_time(j) / age if age > 0 else 0.0
        p = math.inf if got <= 0 else x / got
        return (-p if x > 1e-9 else math.inf, j.submit_time, j.id)

    ordered = sorted(jobs, key=prio)
    decided, pri = {}, {}
    for j in ordered:
        xs = alloc.get(j.id, {})
        for t in sorted(xs, key=lambda t: (-xs[t], t)):
            if xs[t] > 1e-9 and cap.get(t, 0) >= j.num_gpus:
                decided[j.id] = _Pick(t, j.num_gpus, j.global_batch)
                pri[j.id] = prio(j)[0]
                cap[t] -= j.num_gpus
                break

    def nums(j, opt):
        xs = alloc.get(j.id, {})
        return {f"x_{t}": v for t, v in sorted(xs.items())} | {"gpu_type_x": xs.get(opt.gpu_type, 0.0)}

    def started(j, opt):
        code = ReasonCode.RESUMED if j.start_time is not None else ReasonCode.STARTED
        return reason(code, f"{opt.ngpu} x {opt.gpu_type}: highest {label} priority", **nums(j, opt))

    def kept(j, opt):
        return reason(ReasonCode.KEEP_RUNNING, f"still within its {label} share", **nums(j, opt))

    preempted, starts, placed, _, reasons = apply_decisions(snap, ordered, decided, True, started, kept)
    order = []
    for j in ordered:
        if j.id not in placed:
            order.append(j.id)
            if j.id not in reasons:
                reasons[j.id] = reason(ReasonCode.WAIT_RESOURCES,
                                       f"lower {label} priority this round")
    keep_running_reasons(snap, reasons)
    return make_plan(name, list(preempted.values()) + starts, order, reasons)


# ---- policies/isolation.py Isolation.schedule, verbatim (a function of the policy)
def isolation_schedule(self, snap: ClusterSnapshot):
    types = type_capacity(snap)
    jobs = sorted(snap.jobs.values(), key=lambda j: (j.submit_time, j.id))
    demand = sum(j.num_gpus for j in jobs) or 1
    alloc = {}
    for j in jobs:
        xs = {t: v[0] / demand for t, v in types.items() if j.num_gpus <= v[0]}
        tot = sum(xs.values())
        if tot > 1.0:
            xs = {t: x / tot for t, x in xs.items()}
        alloc[j.id] = xs
    return run_round(snap, self.name, jobs, alloc, "isolation")
