"""Shared pieces of the policy contract: the Policy base class, GPU choice and
the two generic disciplines most baselines are made of.

* :func:`pick_consolidated` — choose GPUs on as few nodes as possible.
* :func:`exclusive_config` — per-GPU sub-batch and accumulation steps for a job
  running alone (accumulation only when the per-GPU batch does not fit).
* :func:`schedule_nonpreemptive` — start waiting jobs in a given order.
* :func:`schedule_preemptive` — keep the highest-priority set running, pre-empt
  the rest (Tiresias, SRTF, SRSF).
"""
from __future__ import annotations

from typing import Callable, Iterable, Mapping, Optional

from .model import ClusterSnapshot, Gpu, Job
from .plan import Plan, PreemptJob, ReasonCode, StartJob, make_plan, reason


class Policy:
    """Base class: subclasses set ``name`` (by ``@register``) and implement
    :meth:`schedule`.  The class flags are read by the simulator (docs/architecture.md):

    * ``preemptive``: the policy may return :class:`~policies.plan.PreemptJob`; a plan from
      a policy declaring ``False`` that pre-empts is rejected (``PlanError``);
    * ``needs_lengths``: the policy reads ``Job.total_iters``; the simulator shows true
      lengths only to policies declaring ``True`` (and never with ``--unknown-lengths``);
    * ``round_length``: see below."""

    name = "base"
    preemptive = False
    needs_lengths = False  # True: uses total_iters / duration estimates
    # seconds between calls the policy asks for even when nothing waits (round-based
    # policies: seed 002 Alg. 2, seed 004's 30 s monitoring); None = event-driven only
    round_length: "float | None" = None
    # True: the policy sets each job's GPU count itself (seed 001 elastic shares): it may
    # start a job on any number of GPUs >= 1 and resize it later; the simulator calls it
    # at every arrival and completion, even when nothing waits
    elastic = False

    def schedule(self, snap: ClusterSnapshot) -> Plan:  # pragma: no cover
        raise NotImplementedError


def pick_consolidated(free: Iterable[Gpu], n: int, node_order=(),
                      by_node: Optional[Mapping[str, Iterable[Gpu]]] = None) -> Optional[tuple[Gpu, ...]]:
    """Pick ``n`` GPUs from ``free`` on as few nodes as possible.

    If one node can hold the job, the node with the fewest free GPUs that still
    suffices is used (best fit keeps large holes for large jobs); otherwise the
    nodes with most free GPUs are filled first.  Ties break by node order
    (``node_order``: node names in order, or a name -> rank mapping).
    Returns ``None`` if fewer than ``n`` GPUs are free.  ``by_node`` (node ->
    free GPUs, as ``snapshot.free_by_node()``) may be given instead of ``free``
    to avoid regrouping.
    """
    if by_node is None:
        by_node = {}
        for g in free:
            by_node.setdefault(g.node, []).append(g)
    rank = node_order if isinstance(node_order, Mapping) else {
        name: i for i, name in enumerate(node_order)}
    big = len(rank)
    best, best_key, total = None, None, 0
    for x, gs in by_node.items():
        c = len(gs)
        total += c
        if c >= n:
            key = (c, rank.get(x, big), x)
            if best_key is None or key < best_key:
                best, best_key = x, key
    if best is not None:
        return tuple(sorted(by_node[best])[:n])
    if total < n:
        return None
    chosen: list[Gpu] = []
    for x in sorted(by_node, key=lambda x: (-len(by_node[x]), rank.get(x, big), x)):
        take = min(n - len(chosen), len(by_node[x]))
        chosen.extend(sorted(by_node[x])[:take])
        if len(chosen) == n:
            break
    return tuple(chosen)


def exclusive_config(snap: ClusterSnapshot, job: Job, mem_limit_mb: Optional[float] = None,
                     num_gpus: Optional[int] = None) -> tuple[int, int]:
    """(sub_batch, accum_steps) for ``job`` alone on ``num_gpus`` GPUs (default: the
    count it asked for).

    The per-GPU share ``B = ceil(global/num_gpus)``; accumulation steps double
    (powers of two, as seed 000 Alg. 2 searches) until the micro-batch fits the
    profiled maximum and the memory model (if known).
    """
    local = -(-job.global_batch // max(num_gpus or job.num_gpus, 1))
    prof = snap.profiles.get(job.app)
    mem = snap.memory.get(job.app)
    if mem_limit_mb is None and snap.nodes:
        mem_limit_mb = min(n.gpu_mem_mb for n in snap.nodes)
    s = 1
    while True:
        b = -(-local // s)
        fits_prof = prof is None or b <= prof.max_local_batch
        fits_mem = mem is None or mem_limit_mb is None or mem.mem_mb(b) <= mem_limit_mb
        if (fits_prof and fits_mem) or b <= 1:
            return b, s
        s *= 2


def take_gpus(by_node: dict[str, tuple[Gpu, ...]], gpus: Iterable[Gpu]) -> None:
    """Remove ``gpus`` from a node -> free GPUs index (in place)."""
    for g in gpus:
        rest = tuple(x for x in by_node[g.node] if x != g)
        if rest:
            by_node[g.node] = rest
        else:
            del by_node[g.node]


_KEEP = reason(ReasonCode.KEEP_RUNNING, "running; the plan leaves it as it is")


def keep_running_reasons(snap: ClusterSnapshot, reasons: dict) -> None:
    """Give every running job the plan does not mention the shared KEEP_RUNNING reason
    (set arithmetic, so it costs little even with thousands of running jobs)."""
    waiting = snap.waiting_ids if snap.waiting_ids is not None else [
        j.id for j in snap.jobs.values() if j.waiting]
    running = snap.jobs.keys() - set(waiting) - reasons.keys()
    reasons.update(dict.fromkeys(running, _KEEP))


def node_order(snap: ClusterSnapshot) -> Mapping[str, int]:
    """Node name -> position in the cluster's node list (tie-break order)."""
    return snap.node_rank


def schedule_nonpreemptive(snap: ClusterSnapshot, policy: str, order: list[Job],
                           backfill: bool = False,
                           numbers: Callable[[Job], dict] = lambda j: {}) -> Plan:
    """Start waiting jobs in ``order`` on free GPUs, consolidated.

    Without ``backfill`` the first job that does not fit blocks all behind it
    (strict order); with it, later jobs that fit may start.
    """
    by_node = snap.free_by_node()
    nfree = sum(len(v) for v in by_node.values())
    order_nodes = node_order(snap)
    total = snap.total_gpus
    actions, reasons, out_order, infeasible = [], {}, [], []
    blocked = False
    for k, job in enumerate(order):
        if (blocked and not backfill) or nfree == 0:
            # nothing behind this point can start: one shared reason, no per-job work
            why = (reason(ReasonCode.WAIT_ORDER, "a job ahead is waiting") if blocked and not backfill
                   else reason(ReasonCode.WAIT_RESOURCES, "no GPU is free", free_gpus=0))
            tail = order[k:]
            rest = [j.id for j in tail if j.num_gpus <= total]
            for j in tail:
                if j.num_gpus > total:
                    infeasible.append(j.id)
                    reasons[j.id] = reason(ReasonCode.INFEASIBLE,
                                           f"asks {j.num_gpus} GPUs, cluster has {total}", **numbers(j))
            out_order.extend(rest)
            reasons.update(dict.fromkeys(rest, why))
            break
        nums = numbers(job)
        if job.num_gpus > total:
            infeasible.append(job.id)
            reasons[job.id] = reason(ReasonCode.INFEASIBLE,
                                     f"asks {job.num_gpus} GPUs, cluster has {total}", **nums)
            continue
        gpus = pick_consolidated((), job.num_gpus, order_nodes, by_node) \
            if job.num_gpus <= nfree else None
        if gpus is None:
            blocked = True
            out_order.append(job.id)
            reasons[job.id] = reason(ReasonCode.WAIT_RESOURCES,
                                     f"needs {job.num_gpus} GPUs, {nfree} free",
                                     free_gpus=nfree, **nums)
            continue
        take_gpus(by_node, gpus)
        nfree -= len(gpus)
        b, s = exclusive_config(snap, job)
        actions.append(StartJob(job.id, gpus, b, s))
        reasons[job.id] = reason(ReasonCode.STARTED, f"{job.num_gpus} GPUs free", **nums)
    keep_running_reasons(snap, reasons)
    return make_plan(policy, actions, out_order, reasons, infeasible)


def schedule_preemptive(snap: ClusterSnapshot, policy: str, priority: Callable[[Job], tuple],
                        numbers: Callable[[Job], dict] = lambda j: {}) -> Plan:
    """Run the jobs that fit greedily in priority order (smallest ``priority(job)``
    first, over all active jobs); pre-empt running jobs outside that set.

    Admission counts GPUs only (gang: all of a job's GPUs or none); running jobs
    keep their GPUs, starting jobs take consolidated GPUs from what is free
    after the pre-emptions.  When every waiting job fits in the free GPUs the
    greedy pass admits everything, so running jobs are not ranked at all (same
    result, less work).
    """
    waiting = snap.pending()
    total = snap.total_gpus
    admitted: set[str] = set()
    all_fit = sum(j.num_gpus for j in waiting) <= len(snap.free_gpus)
    if all_fit:
        order = sorted(waiting, key=priority)
        capacity = len(snap.free_gpus)
    else:
        order = sorted(snap.jobs.values(), key=priority)
        capacity = total
    reasons, infeasible = {}, []
    for job in order:
        if job.num_gpus > total:
            infeasible.append(job.id)
            reasons[job.id] = reason(ReasonCode.INFEASIBLE,
                                     f"asks {job.num_gpus} GPUs, cluster has {total}", **numbers(job))
            continue
        if job.num_gpus <= capacity:
            admitted.add(job.id)
            capacity -= job.num_gpus
    actions: list = []
    by_node = snap.free_by_node()
    order_nodes = node_order(snap)
    for job in () if all_fit else snap.running():
        if job.id not in admitted:
            actions.append(PreemptJob(job.id))
            reasons[job.id] = reason(ReasonCode.PREEMPTED, "higher-priority jobs need its GPUs",
                                     **numbers(job))
            for g in job.allocation.gpus:
                by_node[g.node] = by_node.get(g.node, ()) + (g,)
    out_order = []
    for job in order:
        if job.running or job.id in infeasible:
            continue
        if job.id in admitted:
            gpus = pick_consolidated((), job.num_gpus, order_nodes, by_node)
            assert gpus is not None, "admission guarantees enough GPUs"
            take_gpus(by_node, gpus)
            b, s = exclusive_config(snap, job)
            actions.append(StartJob(job.id, gpus, b, s))
            code = ReasonCode.RESUMED if job.preemptions else ReasonCode.STARTED
            reasons[job.id] = reason(code, "within the top of the priority order", **numbers(job))
        else:
            out_order.append(job.id)
            reasons[job.id] = reason(ReasonCode.WAIT_RESOURCES,
                                     "higher-priority jobs hold the GPUs", **numbers(job))
    keep_running_reasons(snap, reasons)
    return make_plan(policy, actions, out_order, reasons, infeasible)
