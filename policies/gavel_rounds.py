"""Gavel-style round-based execution of a time-share allocation on heterogeneous GPU types
(the mechanism of Narayanan et al., OSDI'20, which seed 002 compares against in Table 3:
``min_total_duration`` and ``isolation``).

A policy computes ``X[j][t]``: the fraction of time job ``j`` should run on GPU type ``t``
(Σ_t X[j][t] ≤ 1, Σ_j n_j X[j][t] ≤ GPUs of type t).  Each round, jobs are served in
decreasing priority ``Σ_t X[j][t] / received_j`` (Gavel's priority: allocation over the
share already received; a job that has received nothing comes first), each on its type of
largest X that still has room for its GPU count.  Gavel tracks the time received per
(job, type); a policy here sees only the snapshot, so ``received_j`` is the job's run
time over its time in the system (our simplification, stated).
"""
from __future__ import annotations

import math
from itertools import chain
from heapq import heapify, heappop
from operator import attrgetter, itemgetter, ne
from typing import Mapping

from .model import ClusterSnapshot, Deferred, Job, JobState
from .plan import ReasonCode, make_plan, reason
from .base import FreeGpus, keep_running_reasons, keep_running_segment
from .gavel_mtd_arrays import OneTypeShares
from .typed_rounds import apply_decisions, free_of_type, node_memo, take_start, type_capacity


_NGPU = attrgetter("num_gpus")
_RUNNING = JobState.RUNNING
_FIRST = itemgetter(0)


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


def _nums(xs: Mapping[str, float], gpu_type: str) -> dict:
    return {f"x_{t}": v for t, v in sorted(xs.items())} | {"gpu_type_x": xs.get(gpu_type, 0.0)}


def _started(j: Job, opt, label: str, nums: dict):
    code = ReasonCode.RESUMED if j.start_time is not None else ReasonCode.STARTED
    return reason(code, f"{opt.ngpu} x {opt.gpu_type}: highest {label} priority", **nums)


def _kept(label: str, nums: dict):
    return reason(ReasonCode.KEEP_RUNNING, f"still within its {label} share", **nums)


def _priority(j: Job, x: float, now: float, executed) -> tuple:
    """Sort key of Gavel's priority ``x / received`` (highest first; nothing received:
    first; x = 0: last), ties by submit time and id."""
    age = now - j.submit_time
    got = executed(j) / age if age > 0 else 0.0
    p = math.inf if got <= 0 else x / got
    return (-p if x > 1e-9 else math.inf, j.submit_time, j.id)


def run_round(snap: ClusterSnapshot, name: str, jobs: list[Job],
              alloc: Mapping[str, Mapping[str, float]], label: str):
    """Serve ``jobs`` by Gavel priority under allocation ``alloc`` (job -> type -> X).

    Jobs may share one allocation mapping (isolation gives every job of a GPU count the
    same): what is derived from a mapping alone — its total, its types by decreasing share,
    a kept job's reason on one type — is computed once per mapping and call (by identity;
    ``alloc`` holds the mappings for the call), and a KEEP_RUNNING reason is one shared
    immutable object per (mapping, type).

    On a ``ClusterSnapshot`` the keyed jobs are a heap the walk pops from; the jobs it does
    not reach (under overload, most of them) are sorted into the Plan's order, and given
    their shared WAIT_RESOURCES reason, only when a consumer reads them (``Deferred``, a
    ``Reasons`` segment).  gavel-mtd's array path hands its shares as a
    :class:`~policies.gavel_mtd_arrays.OneTypeShares`, whose keys come from arrays."""
    types = type_capacity(snap)
    cap = {t: v[0] for t, v in types.items()}
    now, executed = snap.now, snap.executed_time
    total_of: dict[int, float] = {}
    empty: Mapping[str, float] = {}

    decided = {}
    by_share: dict[int, list] = {}
    # once no type has room for the fewest GPUs any job asks, no later job is decided: the
    # walk stops there (under overload most of the order lies beyond that point)
    smallest = min(map(_NGPU, jobs), default=0)

    def decide(j: Job) -> None:
        xs = alloc.get(j.id, empty)
        ts = by_share.get(id(xs))
        if ts is None:
            # one type: its name is the order (gavel-mtd's one-type shares, isolation's)
            ts = by_share[id(xs)] = (list(xs) if len(xs) == 1
                                     else sorted(xs, key=lambda t: (-xs[t], t)))
        for t in ts:
            if xs[t] > 1e-9 and cap.get(t, 0) >= j.num_gpus:
                decided[j.id] = _Pick(t, j.num_gpus, j.global_batch)
                cap[t] -= j.num_gpus
                break

    walked: list[Job] = []
    rest: list[Job] = []  # with the sort: the jobs the walk did not reach, in order
    tail: list = []  # with the heap: the keyed items the walk did not reach (a heap)
    keyed = None
    if type(snap) is ClusterSnapshot:
        if isinstance(alloc, OneTypeShares):  # gavel-mtd's large one-type rounds
            keyed = alloc.keyed(now, jobs)
        if keyed is None:
            keyed = _keyed(snap, jobs, alloc, total_of, empty)
    if keyed is not None:
        # the walk pops the keyed items in order (keys are unique: they end in the id, so
        # the pops come in ``keyed.sort()``'s order); what it does not reach is sorted
        # only if the Plan's order is read (the simulator reads the actions only)
        heapify(keyed)
        pop = heappop
        while keyed and max(cap.values(), default=0) >= smallest:
            j = pop(keyed)[3]
            walked.append(j)
            decide(j)
        tail = keyed
    else:  # a snapshot type of its own (its own executed_time), or a NaN key: sorted
        if type(snap) is ClusterSnapshot:
            items = _keyed(snap, jobs, alloc, total_of, empty, True)
            items.sort()
            ordered = [item[3] for item in items]
        else:
            def prio(j: Job):
                xs = alloc.get(j.id, empty)
                x = total_of.get(id(xs))
                if x is None:
                    x = total_of[id(xs)] = sum(xs.values())
                return _priority(j, x, now, executed)

            ordered = sorted(jobs, key=prio)
        for j in ordered:
            if max(cap.values(), default=0) < smallest:
                break
            walked.append(j)
            decide(j)
        rest = ordered[len(walked):]

    def nums(j, opt):
        return _nums(alloc.get(j.id, {}), opt.gpu_type)

    def started(j, opt):
        return _started(j, opt, label, nums(j, opt))

    kept_reason: dict[tuple, object] = {}

    def kept(j, opt):
        key = (id(alloc.get(j.id, empty)), opt.gpu_type)
        r = kept_reason.get(key)
        if r is None:
            r = kept_reason[key] = _kept(label, nums(j, opt))
        return r

    # only walked jobs are decided: the start loop needs no other.  The running jobs in
    # (submit time, id) order, as snap.running() gives them: the shares' own list where
    # ``jobs`` is every job of the snapshot in that order (gavel-mtd's array path)
    running = alloc.running_of(jobs, len(snap.jobs)) if isinstance(alloc, OneTypeShares) \
        else None
    preempted, starts, placed, _, reasons = apply_decisions(snap, walked, decided, True,
                                                            started, kept, running)
    order = []
    wait = None  # one immutable WAIT_RESOURCES reason for every job left waiting
    for j in chain(walked, rest):
        if j.id not in placed:
            order.append(j.id)
            if j.id not in reasons:
                if wait is None:
                    wait = reason(ReasonCode.WAIT_RESOURCES, f"lower {label} priority this round")
                reasons[j.id] = wait
    actions = list(preempted.values()) + starts
    if not tail:
        keep_running_reasons(snap, reasons)
        return make_plan(name, actions, order, reasons)
    # the jobs the walk did not reach, in order, made when read; each without a reason of
    # its own (a running one has its pre-emption's) waits with the shared one, as above
    if wait is None:
        wait = reason(ReasonCode.WAIT_RESOURCES, f"lower {label} priority this round")
    ids = _sorted_ids(tail)
    return make_plan(name, actions, Deferred([order, ids]), reasons, [],
                     [(ids, wait), keep_running_segment(snap)])


def _sorted_ids(heap: list):
    """A no-argument callable: the ids of ``heap``'s items in sorted order, made once."""
    made: list = []

    def ids() -> list:
        if not made:
            made.append([item[2] for item in sorted(heap)])
        return made[0]

    return ids


def _keyed(snap: ClusterSnapshot, jobs: list, alloc, total_of: dict, empty,
           nan_ok: bool = False):
    """``[(key, submit time, id, job)]``: :func:`_priority`'s key with
    ClusterSnapshot.executed_time's arithmetic written out (the same floats), built in one
    pass; ids are unique, so the job itself is never compared and sorting the items gives
    ``sorted(jobs, key=prio)``'s order.  ``None`` where a key is NaN (only from NaN
    inputs) unless ``nan_ok``: a heap's pops need not then follow ``sort``'s order."""
    now = snap.now
    keyed = []
    append = keyed.append
    for j in jobs:
        xs = alloc.get(j.id, empty)
        x = total_of.get(id(xs))
        if x is None:
            x = total_of[id(xs)] = sum(xs.values())
        if x > 1e-9:
            age = now - j.submit_time
            e = (j.executed_time + (now - j.as_of) if j.state is _RUNNING
                 else j.executed_time)
            got = e / age if age > 0 else 0.0
            k = -math.inf if got <= 0 else -(x / got)
        else:
            k = math.inf
        append((k, j.submit_time, j.id, j))
    if not nan_ok:
        ks = list(map(_FIRST, keyed))
        if any(map(ne, ks, ks)):  # NaN != NaN (C-level)
            return None
    return keyed


def run_round_whole(snap: ClusterSnapshot, name: str, running: list[Job], waiting: list[Job],
                    gpu_type: str, label: str):
    """:func:`run_round`'s Plan where every job of the snapshot (``running`` and
    ``waiting``, in any order) has the allocation ``{gpu_type: 1.0}``, the type has GPUs
    for them all and every running job keeps its GPUs (:func:`~policies.typed_rounds.keeps_own`; the caller checked: one GPU
    type, Σ n_j ≤ its GPUs).

    Why it is the same Plan.  Every X totals 1, so every job is decided (the type's count
    covers them all, in whatever order) on ``gpu_type`` with its own GPU count and batch;
    the running jobs keep their GPUs with the one KEEP_RUNNING reason of the mapping, the
    jobs started are the waiting ones, in priority order (``x / received``: the same key
    as :func:`run_round`'s), on the GPUs the kept jobs leave, and no job is left in the
    order.  What is spared is per-job work at every round: the allocation mappings, the
    sort of the running jobs, a reason per running job (one shared segment)."""
    nums = _nums({gpu_type: 1.0}, gpu_type)
    shared = ((tuple(j.id for j in running), _kept(label, nums)),) if running else ()
    if not waiting:
        return make_plan(name, [], [], {}, shared=shared)
    now, executed = snap.now, snap.executed_time
    kept = {j.id: j.allocation.gpus for j in running}
    of_type = node_memo(snap.nodes)[2]
    pool = FreeGpus(free_of_type(of_type, gpu_type, kept, set(), set()), snap.node_rank)
    starts, reasons = [], {}
    for j in sorted(waiting, key=lambda j: _priority(j, 1.0, now, executed)):
        opt = _Pick(gpu_type, j.num_gpus, j.global_batch)
        starts.append(take_start(snap, pool, j, opt))
        reasons[j.id] = _started(j, opt, label, nums)
    return make_plan(name, starts, [], reasons, shared=shared)
