"""Shared machinery of the packing host schedulers GIMBAL is evaluated on (seed 004 §7.1):
Lucid-, Gandiva- and Gavel-style (``policies/lucid.py``, ``gandiva.py``, ``gavel_pack.py``).
Not a policy itself.

A host walks its waiting jobs in its own order (:meth:`PackingHost.order`); a job takes free
GPUs when enough are free (consolidated, exclusive), otherwise it may be *packed* onto the GPUs
of a running job when the host's rule accepts the pair (:meth:`PackingHost.pair_ok`, the
host's sharing score).  Packed workers run under CUDA MPS (gimbal packs through ``gres/mps``),
starting at 100 % each (free competition, §4.1: "200 % represents free-competition").

Without GIMBAL a host packs conservatively, as the originals do (§7.2): only jobs with the same
GPU count, on the GPUs of a running job that holds them alone, and only pairs whose score
passes the conservative threshold.  With GIMBAL (``gimbal=True``, the ``<host>+gimbal``
registry names) §7.1's relaxations apply: the more aggressive threshold, and unequal packing
(a smaller job on part of a larger job's GPUs) under the §5.1 rules
(:func:`policies.gimbal_coord.placement_ok`); and every round (``round_length``, 30 s: §6,
"monitors the runtime status of training jobs every 30 seconds") the coordinator runs
Algorithm 1 on each packing set the plan does not touch and emits ResizeJob actions with the
new per-worker MPS shares and sample shares (:func:`~policies.gimbal_coord.coordinate`).  It
acts at rounds only (``ClusterSnapshot.round_call``: every daemon cycle is one; the
simulator's calls at arrivals, completions and queue ticks between its round events are not),
so a new set runs at 100 % each and a job left alone keeps its limit until the next round,
as a monitor-driven coordinator leaves them (our reading of §6; the paper does not say that
an arrival elsewhere in the cluster triggers a search).  The coordinator charges each MPS
switch ``switch_cost`` seconds (default the paper's 3.6 s, §7.4; a site whose
LGRR is gimbal-run's checkpoint and relaunch sets its own measured cost: gimbal_coord's module
doc, "Switching cost").

``lgrr`` / ``liss`` switch the two mechanisms off for the ablation (§7.3).
"""
from __future__ import annotations

import math
from bisect import bisect_left
from heapq import heapify, heappop, heappush
from typing import Callable, Optional, Sequence

from .base import Policy, exclusive_config, free_gpus_of, keep_running_segment
from .gimbal_coord import LGRR_SWITCH_S
from .gimbal_walk import CoordKept
from .model import ClusterSnapshot, Frozen, Joined, Job
from .pack_index import PACK_MPS, PackRound, pair_progress, round_base
from .pack_queue import PackQueue, pack_queue_of
from .plan import Plan, ReasonCode, make_plan, reason, start_job

__all__ = ["PACK_MPS", "PackingHost", "pair_progress"]


class PackingHost(Policy):
    """Base of the packing hosts (see module doc)."""

    objective = "jct"  # seed 004 eq. 1/3/5 local objective GIMBAL coordinates for
    threshold = 1.0  # conservative pair threshold (host-specific meaning)
    gimbal_threshold = 1.0  # GIMBAL's relaxed one

    def __init__(self, gimbal: bool = False, lgrr: bool = True, liss: bool = True,
                 unequal: Optional[bool] = None, round_length: Optional[float] = None,
                 switch_cost: float = LGRR_SWITCH_S):
        self.gimbal = bool(gimbal)
        try:
            cost = float(switch_cost)
        except (TypeError, ValueError):
            cost = math.nan
        if not (cost >= 0 and math.isfinite(cost)):
            raise ValueError(f"switch_cost must be a finite number of seconds >= 0, "
                             f"got {switch_cost!r}")
        self.switch_cost = cost
        self.lgrr, self.liss = bool(lgrr), bool(liss)
        self.unequal = self.gimbal if unequal is None else bool(unequal)
        if self.gimbal:  # eq. 1-6 need RemainingSteps: GIMBAL reads the jobs' lengths
            self.needs_lengths = True
        if round_length is not None:
            self.round_length = float(round_length)
        elif self.gimbal:
            self.round_length = 30.0  # §6: GIMBAL monitors every 30 s
        if self.round_length is not None and self.round_length <= 0:
            raise ValueError(f"round_length must be > 0 s, got {round_length}")

    # ---- host-specific hooks
    def order_key(self, snap: ClusterSnapshot):
        """The host's order as a sort key (fixed while a job waits; unique: ends in the id)."""
        return lambda j: (j.submit_time, j.id)

    def order(self, snap: ClusterSnapshot) -> list[Job]:
        return sorted(snap.pending(), key=self.order_key(snap))

    def score_from(self, progress: float, snap: ClusterSnapshot, host: Job) -> float:
        """Sharing score of packing beside ``host`` given the pair's progress
        (:func:`pair_progress`; larger = better).  The score depends on the waiting job only
        through its application (the round's index relies on it)."""
        return progress

    def score(self, snap: ClusterSnapshot, job: Job, host: Job) -> float:
        """Sharing score of packing ``job`` beside ``host`` (larger = better)."""
        return self.score_from(pair_progress(snap, job.app, host.app), snap, host)

    def may_pack(self, job: Job) -> bool:
        """Whether ``job`` may pack at all (a per-job gate before the pair threshold)."""
        return True

    def pair_threshold(self) -> float:
        return self.gimbal_threshold if self.gimbal else self.threshold

    def pair_ok(self, snap: ClusterSnapshot, job: Job, host: Job) -> bool:
        """The packing rule: the job may pack and the pair's progress 1/ξ_a + 1/ξ_b reaches
        the threshold."""
        return self.may_pack(job) and pair_progress(snap, job.app, host.app) >= self.pair_threshold()

    def numbers(self, snap: ClusterSnapshot, job: Job) -> dict:
        return {}

    def _kept_queue(self, snap: ClusterSnapshot) -> tuple[Optional[PackQueue], Callable]:
        """(The kept queue brought up to ``snap``, None when it cannot be kept; the call's
        exclusive-config memo)."""
        pq = pack_queue_of(self)
        config = _exclusive_memo(snap)
        klass = lambda j: (j.num_gpus, j.app, config(j)[2], self.may_pack(j))  # noqa: E731
        return (pq if pq.update(snap, self.order_key(snap), klass) else None), config

    def order_ids(self, snap: ClusterSnapshot) -> Sequence[str]:
        """The waiting jobs' ids in the host's order (:meth:`order`), read off the kept
        queue where it can be kept (the same ids: it holds the waiting jobs sorted by the
        same unique key; a read-only view, :class:`~policies.model.Frozen`)."""
        pq, _ = self._kept_queue(snap)
        if pq is not None:
            return Frozen(pq.ids)
        return [j.id for j in self.order(snap)]

    def schedule(self, snap: ClusterSnapshot) -> Plan:
        pq, config = self._kept_queue(snap)
        total = snap.total_gpus
        if pq is not None and all(1 <= c[0] <= total for c in pq.classes):
            return self._schedule_classes(snap, pq, config)
        return self._schedule_walk(snap)

    def quiet_until(self, snap: ClusterSnapshot) -> float:
        """(:meth:`policies.base.Policy.quiet_until`.)  A host's starts, and Gandiva's
        introspection, read the views, the GPUs and the tables, never the time: the orders'
        keys are fixed while a job waits (submit time, deadline, length, a waiting job's
        remaining time), the pair scores read the profiles and the hosts' views.  Without
        GIMBAL: ``math.inf``.  With it the coordinator's resizes move with the time:
        :meth:`policies.gimbal_walk.CoordKept.quiet_until`.  After a call that was not a
        round (no coordination ran) its answer holds as well: it gives a time only while the
        change records got no entry since the coordinator's last pass, and then a round in
        that window gives no resizes either; otherwise ``-math.inf``, and the next round is
        called."""
        if not self.gimbal:
            return math.inf
        kept = self.__dict__.get("_gimbal_kept")
        return -math.inf if kept is None else kept.quiet_until(snap)

    def _schedule_classes(self, snap: ClusterSnapshot, pq: PackQueue,
                          config: Optional[Callable] = None) -> Plan:
        """:meth:`_schedule_walk`'s Plan from the queue kept by class
        (:mod:`policies.pack_queue`): the classes' heads merged in the host's order, a class
        dropped at its first job that waits (every later one of its class waits too).
        ``config``: :func:`_exclusive_memo` of ``snap`` (made here if not given)."""
        if config is None:
            config = _exclusive_memo(snap)
        classes = pq.classes
        # the free-GPU index only when a job waits (GIMBAL's 30 s rounds mostly call with
        # nothing waiting, where building it was a fifth of the call)
        free = free_gpus_of(snap) if classes else None
        nfree = nfree0 = free.total if classes else 0
        rnd = None
        actions, reasons = [], {}
        touched: set[str] = set()
        heap = [(ck[0], c) for c, (ck, _) in classes.items()
                if c[0] <= nfree or c[3]]  # neither fits nor may pack: all of it waits
        heapify(heap)
        nxt: dict[tuple, int] = {}
        removed = []  # keys of the started jobs
        cuts = []  # (key, free GPUs after it) of each job started on free GPUs
        while heap:
            k, c = heappop(heap)
            ck, cj = classes[c]
            i = nxt.get(c, 0)
            job = cj[i]
            n = c[0]
            if n <= nfree:
                gpus = free.pick(n)
                free.take(gpus)
                nfree -= n
                b, s, _ = config(job)
                actions.append(start_job(job.id, gpus, b, s))
                reasons[job.id] = reason(ReasonCode.STARTED, f"{n} GPUs free",
                                         **self.numbers(snap, job))
                cuts.append((k, nfree))
            else:
                if not c[3]:
                    continue  # may not pack, and the free GPUs only get fewer
                if rnd is None:
                    rnd = PackRound(self, snap, round_base(self, snap))
                target = rnd.target(job, c[2])  # c[2]: the class's worker memory
                if target is None:
                    continue  # the class is done: its later jobs miss too
                gpus, host = target
                rnd.take(host, gpus)
                touched.update((job.id, host.id))
                b, s, _ = config(job)
                actions.append(start_job(job.id, gpus, b, s, (host.id,), PACK_MPS))
                reasons[job.id] = reason(ReasonCode.STARTED_SHARED, f"packed beside {host.id}",
                                         score=rnd.score(job, host), **self.numbers(snap, job))
            removed.append(k)
            nxt[c] = i + 1
            if i + 1 < len(ck):
                heappush(heap, (ck[i + 1], c))
        self._coordinate(snap, touched, actions, reasons)
        ids, keys, jobs = pq.ids, pq.keys, snap.jobs
        # the waiting jobs' reasons by position: the free count changes only at a free start
        segments = []
        a, nf = 0, nfree0
        for key, after in cuts:
            p = bisect_left(keys, key)
            segments.append((Frozen(ids, a, p), self._waiting_reason(snap, jobs, nf)))
            a, nf = p, after
        segments.append((Frozen(ids, a), self._waiting_reason(snap, jobs, nf)))
        segments.append(keep_running_segment(snap))
        # the order: the waiting jobs without the started ones (slices of the kept ids)
        if removed:
            pos = sorted(bisect_left(keys, key) for key in removed)
            head, a = [], 0
            for p in pos:
                head += ids[a:p]
                a = p + 1
            order = Joined(tuple(head), Frozen(ids, a))
        else:
            order = Frozen(ids)
        return make_plan(self.name, actions, order, reasons, [], segments)

    def _waiting_reason(self, snap, jobs, nfree):
        def why(jid):
            job = jobs[jid]
            return reason(ReasonCode.WAIT_RESOURCES, f"needs {job.num_gpus} GPUs, {nfree} free, "
                          "no pair passes the packing rule", free_gpus=nfree,
                          **self.numbers(snap, job))
        return why

    def _coordinate(self, snap, touched, actions, reasons) -> None:
        if self.gimbal and snap.round_call:
            kept = self.__dict__.get("_gimbal_kept")
            if kept is None:
                kept = self._gimbal_kept = CoordKept()
            # coordinate(snap, ..., kept=kept)'s records with resizes, without the audit trail
            for jmax, before, after, resizes in kept.resizes(
                    snap, self.objective, lgrr=self.lgrr, liss=self.liss, skip=touched,
                    switch_cost=self.switch_cost):
                for rz in resizes:
                    actions.append(rz)
                    reasons[rz.job_id] = reason(
                        ReasonCode.RESIZED, f"GIMBAL coordination of the set of {jmax}",
                        objective_before=before, objective_after=after)

    def _schedule_walk(self, snap: ClusterSnapshot) -> Plan:
        """Every waiting job in order (a job asks more GPUs than the cluster has, or none,
        or a key is NaN)."""
        # the free-GPU index is built for the first job in the order (GIMBAL's 30 s rounds
        # call with nothing waiting, where building it was a fifth of the call)
        free = None
        nfree = 0
        total = snap.total_gpus
        rnd = None  # the packing round's indexes, built when a job first finds no free GPUs
        actions, reasons, order, infeasible = [], {}, [], []
        touched: set[str] = set()
        for job in self.order(snap):
            nums = self.numbers(snap, job)
            if job.num_gpus > total:
                infeasible.append(job.id)
                reasons[job.id] = reason(ReasonCode.INFEASIBLE,
                                         f"asks {job.num_gpus} GPUs, cluster has {total}", **nums)
                continue
            if free is None:
                free = free_gpus_of(snap)
                nfree = free.total
            gpus = free.pick(job.num_gpus) if job.num_gpus <= nfree else None
            if gpus is not None:
                free.take(gpus)
                nfree -= len(gpus)
                b, s = exclusive_config(snap, job)
                actions.append(start_job(job.id, gpus, b, s))
                reasons[job.id] = reason(ReasonCode.STARTED, f"{job.num_gpus} GPUs free", **nums)
                continue
            if rnd is None:
                rnd = PackRound(self, snap)
            target = rnd.target(job)
            if target is None:
                order.append(job.id)
                reasons[job.id] = reason(ReasonCode.WAIT_RESOURCES,
                                         f"needs {job.num_gpus} GPUs, {nfree} free, no pair "
                                         "passes the packing rule", free_gpus=nfree, **nums)
                continue
            gpus, host = target
            rnd.take(host, gpus)
            touched.update((job.id, host.id))
            b, s = exclusive_config(snap, job)
            actions.append(start_job(job.id, gpus, b, s, (host.id,), PACK_MPS))
            reasons[job.id] = reason(ReasonCode.STARTED_SHARED, f"packed beside {host.id}",
                                     score=rnd.score(job, host), **nums)
        self._coordinate(snap, touched, actions, reasons)
        # running jobs the plan does not mention: the shared KEEP_RUNNING reason, computed
        # when a consumer asks (explicit reasons win, as keep_running_reasons gives them)
        return make_plan(self.name, actions, order, reasons, infeasible,
                         [keep_running_segment(snap)])


def _exclusive_memo(snap: ClusterSnapshot) -> Callable[[Job], tuple[int, int, float]]:
    """job -> (its exclusive sub-batch, its accumulation steps, the memory of one of its
    workers: :func:`~policies.pack_queue.worker_mb`) on ``snap``, memoised per (application,
    global batch, GPUs) for one call: what :func:`~policies.base.exclusive_config` and the
    memory model read of a job."""
    memo: dict = {}

    def config(job: Job) -> tuple[int, int, float]:
        key = (job.app, job.global_batch, job.num_gpus)
        v = memo.get(key)
        if v is None:
            b, s = exclusive_config(snap, job)
            mem = snap.memory.get(job.app)
            v = memo[key] = (b, s, mem.mem_mb(b) if mem else 0.0)
        return v
    return config
