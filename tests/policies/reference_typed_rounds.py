"""Verbatim copy of policies/typed_rounds.py type_capacity and apply_decisions before the
node memo (issue #13): the reference for tests/policies/test_typed_rounds_differential.py."""
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
