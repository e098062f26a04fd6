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

import math
from bisect import bisect_left, insort
from typing import Callable, Iterable, Mapping, Optional, Sequence

from .model import ClusterSnapshot, Gpu, Job, WaitingQueue
from .plan import Plan, PreemptJob, ReasonCode, make_plan, reason, start_job


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
    # True: the policy decides only at round boundaries (seed 002's rounds, Gavel's
    # mechanism): the simulator calls it only at multiples of ``round_length`` (not at
    # arrivals or completions); the daemon calls it once per cycle, one cycle = one round
    rounds_only = False
    # True: the policy sets each job's GPU count itself (seed 001 elastic shares): it may
    # start a job on any number of GPUs >= 1 and resize it later; the simulator calls it
    # at every arrival and completion, even when nothing waits
    elastic = False
    # True: the policy times jobs of a seed 003 Table I model (``policies.pipeline.MODELS``,
    # ``Job.stages``) by eq. 4-7 and needs no throughput profile for them; the daemon keeps
    # such a job's app (else the site's default app stands in, as for any unknown app)
    pipeline_models = False
    # True: the Plan's actions are a function of what the snapshot holds apart from its
    # time: the jobs' views, the GPUs, the predictors and the history, not ``snap.now`` and
    # not what earlier calls saw (a cache that gives the same answer is allowed).  A
    # non-pre-emptive policy's waiting jobs do not change between events, so this holds
    # for an order of them by a fixed key.  The simulator then answers a tick (its
    # ``interval`` call while jobs wait) at which nothing changed since a call that started
    # nothing with no action, without calling the policy: the call would see the same
    # jobs and GPUs and start nothing again (tests/test_sim_quiet_ticks.py calls each
    # declaring policy at every such tick and checks it; :meth:`quiet_until` gives
    # ``math.inf`` for it).  A subclass inherits it: one that adds a rule depending on the
    # time must set it back to False
    tick_invariant = False

    def schedule(self, snap: ClusterSnapshot) -> Plan:  # pragma: no cover
        raise NotImplementedError

    def quiet_until(self, snap: ClusterSnapshot) -> float:
        """Asked right after a call on ``snap`` whose Plan had no action: a time ``t`` such
        that a call on a snapshot that differs from ``snap`` only in its time, later than
        ``snap.now`` and at most ``t``, has no action either.  The simulator answers such a
        tick or round with no action, without calling (the daemon does not ask).
        ``math.inf`` for a :attr:`tick_invariant` policy, ``-math.inf`` (no such call)
        otherwise.  It reads only what the policy kept from the call and changes nothing
        (a host that keeps a time window overrides it: policies/packing_host.py)."""
        return math.inf if self.tick_invariant else -math.inf


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


_MIN_MEM: dict[int, tuple] = {}


def min_gpu_mem(nodes) -> Optional[float]:
    """Smallest ``gpu_mem_mb`` of a node tuple (``None`` without nodes), memoised by
    identity: the simulator and the daemon pass the same tuple to every call."""
    hit = _MIN_MEM.get(id(nodes))
    if hit is not None and hit[0] is nodes:
        return hit[1]
    v = min((n.gpu_mem_mb for n in nodes), default=None)
    if len(_MIN_MEM) > 32:
        _MIN_MEM.clear()
    _MIN_MEM[id(nodes)] = (nodes, v)  # keeps ``nodes`` alive, so the id stays unique
    return v


def exclusive_steps(local: int, prof, mem, mem_limit_mb: Optional[float]) -> tuple[int, int]:
    """(micro-batch, accumulation steps) for a per-GPU share of ``local`` samples:
    accumulation steps double (powers of two, as seed 000 Alg. 2 searches) until the
    micro-batch fits the profiled maximum (``prof``: ThroughputProfile or None) and
    the memory model (``mem``: MemoryProfile or None) within ``mem_limit_mb``."""
    s = 1
    while True:
        b = -(-local // s)
        fits_prof = prof is None or b <= prof.max_local_batch
        fits_mem = mem is None or mem_limit_mb is None or mem.mem_mb(b) <= mem_limit_mb
        if (fits_prof and fits_mem) or b <= 1:
            return b, s
        s *= 2


def exclusive_config(snap: ClusterSnapshot, job: Job, mem_limit_mb: Optional[float] = None,
                     num_gpus: Optional[int] = None) -> tuple[int, int]:
    """(sub_batch, accum_steps) for ``job`` alone on ``num_gpus`` GPUs (default: the
    count it asked for).

    The per-GPU share ``B = ceil(global/num_gpus)``; see :func:`exclusive_steps`
    (memory limit: the smallest GPU memory of the cluster unless given).
    """
    local = -(-job.global_batch // max(num_gpus or job.num_gpus, 1))
    if mem_limit_mb is None and snap.nodes:
        mem_limit_mb = min_gpu_mem(snap.nodes)
    return exclusive_steps(local, snap.profiles.get(job.app), snap.memory.get(job.app),
                           mem_limit_mb)


class FreeGpus:
    """Free GPUs by node, kept in buckets by free count so that :meth:`pick` answers
    what :func:`pick_consolidated` answers without scanning every node (a daemon pass
    on 1,000 nodes starts thousands of jobs).  ``by_node`` (node -> free GPUs, as
    ``snapshot.free_by_node()``) is taken over and kept current by :meth:`take` and
    :meth:`give`."""

    def __init__(self, by_node: dict, node_order: Mapping[str, int],
                 buckets: Optional[Mapping[int, Sequence[tuple[int, str]]]] = None):
        self.by_node = by_node
        self.rank = node_order
        self.big = len(node_order)
        if buckets is not None:  # precomputed for this very by_node (snapshot.free_buckets)
            self.buckets = {c: list(b) for c, b in buckets.items() if b}
            self.total = sum(c * len(b) for c, b in self.buckets.items())
            return
        total = 0
        buckets: dict[int, list] = {}
        rank, big = node_order, self.big
        for x, gs in by_node.items():  # one append per node, then one sort per bucket
            if gs:
                total += len(gs)
                buckets.setdefault(len(gs), []).append((rank.get(x, big), x))
        for b in buckets.values():
            b.sort()
        self.total = total
        self.buckets = buckets

    def _key(self, x: str) -> tuple:
        return (self.rank.get(x, self.big), x)

    def _move(self, x: str, old: int, new: int) -> None:
        k = self._key(x)
        if old:
            b = self.buckets[old]
            del b[bisect_left(b, k)]
        if new:
            insort(self.buckets.setdefault(new, []), k)

    def pick(self, n: int) -> Optional[tuple[Gpu, ...]]:
        """:func:`pick_consolidated` over the current free GPUs (same result)."""
        if n > self.total:
            return None
        by_node, buckets = self.by_node, self.buckets
        for c in sorted(c for c, b in buckets.items() if b and c >= n):
            return tuple(sorted(by_node[buckets[c][0][1]])[:n])  # best fit on one node
        chosen: list[Gpu] = []
        for c in sorted((c for c, b in buckets.items() if b), reverse=True):
            for _, x in buckets[c]:
                take = min(n - len(chosen), c)
                chosen.extend(sorted(by_node[x])[:take])
                if len(chosen) == n:
                    return tuple(chosen)
        return None  # not reached: total >= n

    def take(self, gpus: Iterable[Gpu]) -> None:
        """Remove ``gpus`` (free ones) from the index, as :func:`take_gpus`."""
        per: dict[str, set] = {}
        for g in gpus:
            per.setdefault(g.node, set()).add(g)
        for x, gs in per.items():
            old = self.by_node[x]
            rest = tuple(g for g in old if g not in gs)
            self._move(x, len(old), len(rest))
            self.total -= len(old) - len(rest)
            if rest:
                self.by_node[x] = rest
            else:
                del self.by_node[x]

    def give(self, gpus: Iterable[Gpu]) -> None:
        """``gpus`` become free (appended to their node's tuple)."""
        for g in gpus:
            old = self.by_node.get(g.node, ())
            self.by_node[g.node] = old + (g,)
            self._move(g.node, len(old), len(old) + 1)
            self.total += 1


def free_gpus_of(snap: ClusterSnapshot) -> FreeGpus:
    """A :class:`FreeGpus` over the snapshot's free GPUs (its precomputed buckets when the
    snapshot carries them with its free_index: a copy that dropped the index, e.g.
    ``dataclasses.replace(snap, free_gpus=..., free_index=None)``, is built afresh)."""
    buckets = snap.free_buckets if snap.free_index is not None else None
    return FreeGpus(snap.free_by_node(), snap.node_rank, buckets)


def take_gpus(by_node: dict[str, tuple[Gpu, ...]], gpus: Iterable[Gpu]) -> None:
    """Remove ``gpus`` from a node -> free GPUs index (in place)."""
    for g in gpus:
        rest = tuple(x for x in by_node[g.node] if x != g)
        if rest:
            by_node[g.node] = rest
        else:
            del by_node[g.node]


_KEEP = reason(ReasonCode.KEEP_RUNNING, "running; the plan leaves it as it is")


def _running_ids(snap: ClusterSnapshot) -> set:
    """Ids of the jobs that are not waiting.

    With the simulator's ``waiting_ids`` the running jobs are those on ``gpu_jobs``
    (checked: together with the waiting ones they are all jobs), so the cost grows
    with the GPUs in use, not with the queue; otherwise set arithmetic over all jobs."""
    waiting = snap.waiting_ids
    if waiting is not None:
        running = {j for ids in snap.gpu_jobs.values() for j in ids}
        if (len(running) + len(waiting) == len(snap.jobs) and running <= snap.jobs.keys()
                and running.isdisjoint(waiting)):
            return running
    else:
        waiting = [j.id for j in snap.jobs.values() if j.waiting]
    return snap.jobs.keys() - set(waiting)


def keep_running_reasons(snap: ClusterSnapshot, reasons: dict) -> None:
    """Give every running job the plan does not mention the shared KEEP_RUNNING reason
    (in place; :func:`keep_running_segment` is the lazy form)."""
    reasons.update(dict.fromkeys(_running_ids(snap) - reasons.keys(), _KEEP))


def keep_running_segment(snap: ClusterSnapshot) -> tuple:
    """The shared KEEP_RUNNING reason of every running job as a segment of
    :func:`~policies.plan.make_plan`'s ``shared`` (explicit reasons win): the ids are
    computed only when a consumer asks a running job's reason, so a policy call pays
    nothing per running job (the plan holds the snapshot until then)."""
    return (lambda: _running_ids(snap), _KEEP)


def node_order(snap: ClusterSnapshot) -> Mapping[str, int]:
    """Node name -> position in the cluster's node list (tie-break order)."""
    return snap.node_rank


def schedule_nonpreemptive(snap: ClusterSnapshot, policy: str, order: list[Job],
                           backfill: bool = False,
                           numbers: Callable[[Job], dict] = lambda j: {},
                           queue: Optional[WaitingQueue] = None) -> Plan:
    """Start waiting jobs in ``order`` on free GPUs, consolidated.

    Without ``backfill`` the first job that does not fit blocks all behind it
    (strict order); with it, later jobs that fit may start.  ``queue``: a kept order
    whose ``jobs`` is ``order`` (SJF's, :mod:`policies.kept_order`), with its ids and
    largest GPU count, as the snapshot's own queue is for fifo.
    """
    free = free_gpus_of(snap)
    nfree = free.total
    total = snap.total_gpus
    actions, reasons, out_order, infeasible = [], {}, [], []
    # ``order`` is the snapshot's own waiting order (fifo) or a kept one: its ids and
    # largest GPU count are known, so a blocked tail costs no Python work per job
    if queue is None or order is not queue.jobs:
        queue = snap.queue if snap.queue is not None and order is snap.queue.jobs \
            and snap.queue.source is snap.jobs else None
    shared: list = []
    blocked = False
    for k, job in enumerate(order):
        if (blocked and not backfill) or nfree == 0:
            # nothing behind this point can start: one shared reason, no per-job work
            why = (reason(ReasonCode.WAIT_ORDER, "a job ahead is waiting") if blocked and not backfill
                   else reason(ReasonCode.WAIT_RESOURCES, "no GPU is free", free_gpus=0))
            if queue is not None and queue.max_gpus <= total:  # no job of the tail is infeasible
                rest = queue.ids[k:]  # a view (the simulator's) or a tuple slice
                shared.append((rest, why))
                j = k - len(out_order)
                if list(queue.ids[j:k]) == out_order:  # the order is one run of the queue: a view
                    out_order = queue.ids[j:]
                else:
                    out_order.extend(rest)
                break
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
        gpus = free.pick(job.num_gpus) if job.num_gpus <= nfree else None
        if gpus is None:
            blocked = True
            out_order.append(job.id)
            reasons[job.id] = reason(ReasonCode.WAIT_RESOURCES,
                                     f"needs {job.num_gpus} GPUs, {nfree} free",
                                     free_gpus=nfree, **nums)
            continue
        free.take(gpus)
        nfree -= len(gpus)
        b, s = exclusive_config(snap, job)
        actions.append(start_job(job.id, gpus, b, s))
        reasons[job.id] = reason(ReasonCode.STARTED, f"{job.num_gpus} GPUs free", **nums)
    shared.append(keep_running_segment(snap))
    return make_plan(policy, actions, out_order, reasons, infeasible, shared)


def leased(snap: ClusterSnapshot, min_run_s: float) -> list[Job]:
    """Running jobs still inside their minimum run time (``min_run_s`` seconds since
    their current run began, ``Job.run_start``): they may not be pre-empted yet."""
    if min_run_s <= 0:
        return []
    now = snap.now
    return [j for j in snap.jobs.values()
            if j.running and j.run_start is not None and now - j.run_start < min_run_s]


class PreemptiveByKey(Policy):
    """Base of the pre-emptive policies that rank every active job by one key
    (:func:`schedule_preemptive`): SRTF, SRSF.  Subclasses give ``key(snap, job)`` (smaller
    runs first) and ``key_name`` (the number each job's reason carries)."""

    preemptive = True
    needs_lengths = True
    accepts_min_run = True
    key_name = "key"
    # True: ``key`` of a waiting job depends only on the job and the snapshot's profiles
    # and nodes (not on ``now``), so the waiting order is kept across calls
    # (policies.kept_order); the running jobs are re-ranked at every call
    static_waiting_key = False
    # True: a running job's key never rises while its view keeps running (it falls with its
    # remaining time), so keys computed at an earlier call bound it (policies.running_keys)
    falling_running_key = False

    def __init__(self, min_run_s: float = 0.0):
        """``min_run_s``: minimum run time before a job may be pre-empted again
        (:func:`schedule_preemptive`; 0 = none, the baseline as published)."""
        if min_run_s < 0:
            raise ValueError(f"{self.name}: min_run_s must be >= 0, got {min_run_s}")
        self.min_run_s = float(min_run_s)

    def key(self, snap: ClusterSnapshot, job: Job) -> float:
        raise NotImplementedError

    def running_rekey(self, snap: ClusterSnapshot):
        """A running view's key ``(key, submit time, id)`` as a function of ``now``
        (:data:`policies.running_keys.Rekey`), or ``None``: the key is evaluated."""
        return None

    def quiet_until(self, snap: ClusterSnapshot) -> float:
        """(:meth:`Policy.quiet_until`.)  The time up to which the quiet calls' record of this
        call answers (:meth:`policies.quiet_calls.QuietCalls.until`): no running key rises
        before it."""
        from .quiet_calls import quiet_until_of

        return quiet_until_of(self, snap)

    def schedule(self, snap):
        from .kept_order import preemptive_with_kept_order
        from .running_keys import falling_horizon

        falling = self.falling_running_key
        return preemptive_with_kept_order(
            self, snap, lambda j: (self.key(snap, j), j.submit_time, j.id),
            lambda j: {self.key_name: self.key(snap, j)}, self.min_run_s,
            self.static_waiting_key, (),
            falling_horizon(snap) if falling else None,
            self.running_rekey(snap) if falling else None)


def start_admitted(snap: ClusterSnapshot, free: FreeGpus, job: Job, actions: list,
                   reasons: dict, numbers: Callable[[Job], dict]) -> None:
    """Start (or resume) a job the pre-emptive admission let in, on the consolidated free
    GPUs (``free``, taken), with its reason."""
    gpus = free.pick(job.num_gpus)
    assert gpus is not None, "admission guarantees enough GPUs"
    free.take(gpus)
    b, s = exclusive_config(snap, job)
    actions.append(start_job(job.id, gpus, b, s))
    code = ReasonCode.RESUMED if job.preemptions else ReasonCode.STARTED
    reasons[job.id] = reason(code, "within the top of the priority order", **numbers(job))


def schedule_preemptive(snap: ClusterSnapshot, policy: str, priority: Callable[[Job], tuple],
                        numbers: Callable[[Job], dict] = lambda j: {},
                        min_run_s: float = 0.0) -> Plan:
    """Run the jobs that fit greedily in priority order (smallest ``priority(job)``
    first, over all active jobs); pre-empt running jobs outside that set.

    Admission counts GPUs only (gang: all of a job's GPUs or none); running jobs
    keep their GPUs, starting jobs take consolidated GPUs from what is free
    after the pre-emptions.  When every waiting job fits in the free GPUs the
    greedy pass admits everything, so running jobs are not ranked at all (same
    result, less work).

    ``min_run_s`` bounds pre-emption churn: a running job that started (or resumed)
    less than that many seconds ago keeps its GPUs whatever its priority — it is
    admitted before the priority order (0: no minimum, every call may pre-empt).
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
    for job in () if all_fit else leased(snap, min_run_s):
        admitted.add(job.id)
        capacity -= job.num_gpus
        reasons[job.id] = reason(
            ReasonCode.KEEP_RUNNING,
            f"within its minimum run time of {min_run_s:.0f} s: not pre-empted yet",
            ran_s=snap.now - job.run_start, **numbers(job))
    for job in order:
        if job.num_gpus > total:
            infeasible.append(job.id)
            reasons[job.id] = reason(ReasonCode.INFEASIBLE,
                                     f"asks {job.num_gpus} GPUs, cluster has {total}", **numbers(job))
            continue
        if job.id in admitted:
            continue
        if job.num_gpus <= capacity:
            admitted.add(job.id)
            capacity -= job.num_gpus
    actions: list = []
    free = free_gpus_of(snap)
    for job in () if all_fit else snap.running():
        if job.id not in admitted:
            actions.append(PreemptJob(job.id))
            reasons[job.id] = reason(ReasonCode.PREEMPTED, "higher-priority jobs need its GPUs",
                                     **numbers(job))
            free.give(job.allocation.gpus)
    out_order = []
    for job in order:
        if job.running or job.id in infeasible:
            continue
        if job.id in admitted:
            start_admitted(snap, free, job, actions, reasons, numbers)
        else:
            out_order.append(job.id)
    jobs = snap.jobs
    waiting_why = (out_order, lambda jid: reason(
        ReasonCode.WAIT_RESOURCES, "higher-priority jobs hold the GPUs", **numbers(jobs[jid])))
    return make_plan(policy, actions, out_order, reasons, infeasible,
                     [waiting_why, keep_running_segment(snap)])
