"""Shared mechanics of round-based policies on heterogeneous GPU types (seed 002 and the
Gavel-style baselines it compares against): round boundaries, per-type capacity, and
turning per-job (GPU type, GPU count, batch) decisions into a Plan that keeps a running
job where it is when its decision did not change (the overhead-saving rule seed 002
§4.2 takes from Gavel) and pre-empts / restarts it otherwise."""
from __future__ import annotations

import dataclasses
from itertools import chain, compress, repeat
from operator import and_, attrgetter, is_, itemgetter, not_
from types import MappingProxyType
from typing import Callable, Mapping, Optional, Protocol

from .base import FreeGpus, exclusive_config
from .model import ClusterSnapshot, Gpu, Job, Node, identity_memo
from .plan import PreemptJob, Reason, ReasonCode, StartJob, reason


class Choice(Protocol):
    gpu_type: str
    ngpu: int
    batch: int


_NODE_MEMO: dict[int, tuple] = {}


def node_memo(nodes: tuple[Node, ...]) -> tuple:
    """(type capacity, node name -> GPU type, GPU type -> its nodes' (name, GPUs) in node
    order, node name -> GPU memory MiB) of a node tuple, memoised by identity (the simulator
    passes the same tuple in every snapshot; a round-based policy asked these of every node
    at every round)."""
    return identity_memo(_NODE_MEMO, nodes, _compute_node_memo, 32)


def _compute_node_memo(nodes: tuple[Node, ...]) -> tuple:
    cap: dict[str, list] = {}
    for n in nodes:
        t = cap.setdefault(n.gpu_type, [0, 0, n.gpu_mem_mb])
        t[0] += n.num_gpus
        t[1] = max(t[1], n.num_gpus)
        t[2] = min(t[2], n.gpu_mem_mb)
    of_type: dict[str, list] = {}
    for n in nodes:
        of_type.setdefault(n.gpu_type, []).append((n.name, n.gpus()))
    return ({t: tuple(v) for t, v in cap.items()},
            MappingProxyType({n.name: n.gpu_type for n in nodes}),
            MappingProxyType({t: tuple(v) for t, v in of_type.items()}),
            MappingProxyType({n.name: n.gpu_mem_mb for n in nodes}))


TYPES_MEMO: dict[int, tuple] = {}  # id(allocation) -> (allocation, gtype_of, its GPU types); read
# inline by isolation_round (its hot loop tests a hit before calling all_of_type)


def all_of_type(alloc, gtype_of: Mapping[str, str], gpu_type: str) -> bool:
    """Whether every GPU of ``alloc`` is of ``gpu_type``; the types of an allocation's GPUs are
    memoised per (allocation record, node-type map) by identity (a round-based policy asks it
    of every running job at every round)."""
    hit = TYPES_MEMO.get(id(alloc))
    if hit is None or hit[0] is not alloc or hit[1] is not gtype_of:
        try:
            ts = frozenset(gtype_of[g.node] for g in alloc.gpus)
        except KeyError:  # a GPU on a node the snapshot does not list: the plain test
            return all(gtype_of[g.node] == gpu_type for g in alloc.gpus)
        if len(TYPES_MEMO) > 65536:
            TYPES_MEMO.clear()
        hit = TYPES_MEMO[id(alloc)] = (alloc, gtype_of, ts)  # keeps both alive: ids stay unique
    ts = hit[2]
    return not ts or (len(ts) == 1 and gpu_type in ts)


def node_maps(snap: ClusterSnapshot) -> tuple[Mapping[str, str], Mapping[str, int]]:
    """(node name -> GPU type, node name -> GPU memory MiB), read-only, memoised per node
    tuple."""
    facts = node_memo(snap.nodes)
    return facts[1], facts[3]


def type_capacity(snap: ClusterSnapshot) -> dict[str, list]:
    """GPU type -> [GPUs, most GPUs on one node, smallest GPU memory MiB] (a fresh dict of
    fresh lists: callers may change them)."""
    return {t: list(v) for t, v in node_memo(snap.nodes)[0].items()}


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


def keeps_own(job: Job, gtype_of: Mapping[str, str], gpu_type: str) -> bool:
    """Whether running ``job`` keeps its GPUs under :func:`apply_decisions` with re-scheduling
    when its choice is ``gpu_type`` with its own GPU count and batch (that function's test,
    inlined in its loops)."""
    alloc = job.allocation
    return (len(alloc.gpus) == job.num_gpus and current_batch(job) == job.global_batch
            and all_of_type(alloc, gtype_of, gpu_type))


def take_start(snap: ClusterSnapshot, pool: FreeGpus, job: Job, opt: Choice) -> StartJob:
    """Start ``job`` as ``opt`` on GPUs picked from ``pool`` (a type's free GPUs), taken from
    it; the caller counted the type's capacity, so there are enough."""
    gpus = pool.pick(opt.ngpu)  # = pick_consolidated over the type's free GPUs
    if gpus is None:
        raise AssertionError(f"no {opt.ngpu} free {opt.gpu_type} GPUs for {job.id}: "
                             "the caller counted capacity wrongly")
    pool.take(gpus)
    return start_on(snap, job, gpus, opt.batch)


_NOHIT = (None, None, None, None)
_ID = attrgetter("id")
_GPUS = attrgetter("allocation.gpus")
_VIEW, _CHOICE, _REASON, _BATCH = (itemgetter(i) for i in range(4))


def _preempted_why(opt) -> Reason:
    return reason(ReasonCode.PREEMPTED, "re-allocated at this round" if opt
                  else "not chosen for this round")


def _kept_by_memo(run, decided, memo: dict, gtype_of, kept_why):
    """``apply_decisions``' pass over the running jobs with re-scheduling and a memo: the
    jobs whose view and choice are the recorded objects are found at C speed (maps over
    the running order) and keep their GPUs, recorded reason and batch; only the others are
    compared as in the plain pass.  The dicts come out in the plain pass's order (the
    reasons laid out in running order first, then filled in)."""
    run = list(run)
    ids = list(map(_ID, run))
    hits = list(map(memo.get, ids, repeat(_NOHIT)))
    opts = list(map(decided.get, ids))
    mask = list(map(and_, map(is_, map(_VIEW, hits), run), map(is_, map(_CHOICE, hits), opts)))
    reasons = dict(zip(ids, map(_REASON, hits)))  # every running job gets one: order kept
    batches = list(map(_BATCH, hits))
    preempted: dict = {}
    for i in compress(range(len(run)), map(not_, mask)):
        job, opt = run[i], opts[i]
        alloc, jid = job.allocation, ids[i]
        cur = current_batch(job)
        if (opt is not None and len(alloc.gpus) == opt.ngpu and cur == opt.batch
                and all_of_type(alloc, gtype_of, opt.gpu_type)):
            mask[i], batches[i] = True, cur
            r = reasons[jid] = kept_why(job, opt)
            memo[jid] = (job, opt, r, cur)
        else:
            preempted[jid] = PreemptJob(jid)
            reasons[jid] = _preempted_why(opt)
    kept = dict(zip(compress(ids, mask), compress(map(_GPUS, run), mask)))
    batch_of = dict(zip(compress(ids, mask), compress(batches, mask)))
    return preempted, kept, batch_of, reasons


def free_of_type(of_type: Mapping[str, tuple], t: str, kept: Mapping[str, tuple],
                 held: set, held_nodes: set) -> dict[str, tuple[Gpu, ...]]:
    """Node -> GPUs no kept job holds, the nodes of GPU type ``t`` in node order (``of_type``:
    type -> ((node, its GPUs), ...), :func:`node_memo`).  ``held``/``held_nodes`` (the
    caller's, empty at first) are filled from ``kept`` (job -> GPUs) the first time a job
    starts in a round: most rounds start nothing; the kept jobs' GPUs are gathered then,
    once."""
    if kept and not held:
        held.update(chain.from_iterable(kept.values()))
        held_nodes.update(g.node for g in held)
    by_node: dict[str, tuple[Gpu, ...]] = {}
    for name, all_gs in of_type.get(t, ()):
        # only a node with a kept job's GPU loses any: the others offer all their GPUs
        gs = tuple(g for g in all_gs if g not in held) if name in held_nodes else all_gs
        if gs:
            by_node[name] = gs
    return by_node


def apply_decisions(snap: ClusterSnapshot, queue: list[Job], decided: Mapping[str, Choice],
                    reallocate: bool, started_why: Callable[[Job, Choice], Reason],
                    kept_why: Callable[[Job, Choice], Reason], running=None,
                    memo: Optional[dict] = None):
    """Plan pieces for ``decided`` (job id -> choice) over the queue order.

    ``reallocate`` (re-scheduling rounds): a running job whose choice equals what it runs
    keeps its GPUs; any other running job is pre-empted (and restarted where its new
    choice puts it).  Without it running jobs keep their GPUs and only queued jobs start.
    ``running``: the snapshot's running jobs in (submit time, id) order, as
    ``snap.running()`` gives them (a caller that knows them spares the scan of every job).
    ``memo`` (with ``reallocate`` only): job id -> (view, choice, reason, batch) of the
    running jobs kept at earlier calls, kept by the caller across calls; a job whose view
    and choice are the very objects recorded keeps its GPUs again with the recorded reason
    and batch, without the comparison (the caller passes it only while ``kept_why`` is a
    function of the view and the choice alone and its choices are shared objects).
    Returns ``(preempted, starts, placed, batch_of, reasons)``.
    """
    _, gtype_of, of_type, _ = node_memo(snap.nodes)
    run = snap.running() if running is None else running
    if reallocate and memo is not None:
        preempted, kept, batch_of, reasons = _kept_by_memo(run, decided, memo, gtype_of,
                                                           kept_why)
    else:
        reasons: dict[str, Reason] = {}
        preempted: dict[str, PreemptJob] = {}
        kept: dict[str, tuple[Gpu, ...]] = {}
        batch_of: dict[str, int] = {}
        for job in run:
            alloc, opt = job.allocation, decided.get(job.id)
            cur = current_batch(job)
            same = (opt is not None and len(alloc.gpus) == opt.ngpu and cur == opt.batch
                    and all_of_type(alloc, gtype_of, opt.gpu_type))
            if not reallocate or same:
                kept[job.id] = alloc.gpus
                batch_of[job.id] = cur
                if same:
                    reasons[job.id] = kept_why(job, opt)
                continue
            preempted[job.id] = PreemptJob(job.id)
            reasons[job.id] = _preempted_why(opt)
    held: set = set()
    held_nodes: set = set()

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
            pool = free[opt.gpu_type] = FreeGpus(
                free_of_type(of_type, opt.gpu_type, kept, held, held_nodes), rank)
        st = take_start(snap, pool, job, opt)
        placed[job.id] = st.gpus
        batch_of[job.id] = opt.batch
        starts.append(st)
        reasons[job.id] = started_why(job, opt)
    return preempted, starts, placed, batch_of, reasons
