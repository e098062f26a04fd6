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
(:func:`policies.gimbal_coord.placement_ok`); and every round (``round_length``, 30 s, §6) the
coordinator runs Algorithm 1 on each packing set the plan does not touch and emits ResizeJob
actions with the new per-worker MPS shares and sample shares (:func:`~policies.gimbal_coord.coordinate`).

``lgrr`` / ``liss`` switch the two mechanisms off for the ablation (§7.3).
"""
from __future__ import annotations

from typing import Optional

from .base import (Policy, exclusive_config, keep_running_reasons, node_order, pick_consolidated,
                   take_gpus)
from .gimbal_coord import coordinate, placement_ok
from .model import ClusterSnapshot, Gpu, Job
from .plan import Plan, ReasonCode, StartJob, make_plan, reason

PACK_MPS = 100  # packed workers start under MPS at 100 % (free competition)


def pair_progress(snap: ClusterSnapshot, a: str, b: str) -> float:
    """Combined normalised progress of two applications packed at MPS 100/100:
    1/ξ_a + 1/ξ_b (> 1: packing beats running one after the other)."""
    it = snap.interference
    return 1.0 / it.ratio(a, b, PACK_MPS, PACK_MPS) + 1.0 / it.ratio(b, a, PACK_MPS, PACK_MPS)


class PackingHost(Policy):
    """Base of the packing hosts (see module doc)."""

    objective = "jct"  # seed 004 eq. 1/3/5 local objective GIMBAL coordinates for
    threshold = 1.0  # conservative pair threshold (host-specific meaning)
    gimbal_threshold = 1.0  # GIMBAL's relaxed one

    def __init__(self, gimbal: bool = False, lgrr: bool = True, liss: bool = True,
                 unequal: Optional[bool] = None, round_length: Optional[float] = None):
        self.gimbal = bool(gimbal)
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
    def order(self, snap: ClusterSnapshot) -> list[Job]:
        return list(snap.pending())

    def score(self, snap: ClusterSnapshot, job: Job, host: Job) -> float:
        """Sharing score of packing ``job`` beside ``host`` (larger = better)."""
        return pair_progress(snap, job.app, host.app)

    def pair_ok(self, snap: ClusterSnapshot, job: Job, host: Job) -> bool:
        thr = self.gimbal_threshold if self.gimbal else self.threshold
        return self.score(snap, job, host) >= thr

    def numbers(self, snap: ClusterSnapshot, job: Job) -> dict:
        return {}

    # ---- the round
    def _pack_target(self, snap, job, taken: set, by_node) -> Optional[tuple[tuple[Gpu, ...], Job]]:
        """GPUs of a running job to pack ``job`` on, the best-scoring host first."""
        best = None
        for host in snap.running():
            if host.id == job.id or host.allocation is None:
                continue
            n, k = job.num_gpus, host.num_gpus
            if n > k or (n < k and not self.unequal):
                continue
            alone = [g for g in host.allocation.gpus
                     if snap.gpu_jobs.get(g, ()) == (host.id,) and g not in taken]
            if len(alone) < n or (n == k and len(alone) < k):
                continue
            if not self.pair_ok(snap, job, host):
                continue
            gpus = self._fit(snap, job, host, alone, by_node)
            if gpus is None or not placement_ok(snap, job, gpus):
                continue
            key = (-self.score(snap, job, host), host.submit_time, host.id)
            if best is None or key < best[0]:
                best = (key, gpus, host)
        return None if best is None else (best[1], best[2])

    def _fit(self, snap, job, host, alone, by_node) -> Optional[tuple[Gpu, ...]]:
        """``job.num_gpus`` of ``alone`` on as few nodes as possible where memory fits."""
        b, _ = exclusive_config(snap, job)
        mem, hmem = snap.memory.get(job.app), snap.memory.get(host.app)
        need = (mem.mem_mb(b) if mem else 0.0) + (
            hmem.mem_mb(host.allocation.sub_batch) if hmem else 0.0)
        ok = [g for g in alone if need <= snap.node(g.node).gpu_mem_mb]
        grouped: dict[str, list[Gpu]] = {}
        for g in ok:
            grouped.setdefault(g.node, []).append(g)
        return pick_consolidated((), job.num_gpus, node_order(snap), grouped)

    def schedule(self, snap: ClusterSnapshot) -> Plan:
        by_node = snap.free_by_node()
        nfree = sum(len(v) for v in by_node.values())
        total = snap.total_gpus
        actions, reasons, order, infeasible = [], {}, [], []
        taken: set[Gpu] = set()  # running jobs' GPUs packed this round
        touched: set[str] = set()
        for job in self.order(snap):
            nums = self.numbers(snap, job)
            if job.num_gpus > total:
                infeasible.append(job.id)
                reasons[job.id] = reason(ReasonCode.INFEASIBLE,
                                         f"asks {job.num_gpus} GPUs, cluster has {total}", **nums)
                continue
            gpus = pick_consolidated((), job.num_gpus, node_order(snap), by_node) \
                if job.num_gpus <= nfree else None
            if gpus is not None:
                take_gpus(by_node, gpus)
                nfree -= len(gpus)
                b, s = exclusive_config(snap, job)
                actions.append(StartJob(job.id, gpus, b, s))
                reasons[job.id] = reason(ReasonCode.STARTED, f"{job.num_gpus} GPUs free", **nums)
                continue
            target = self._pack_target(snap, job, taken, by_node)
            if target is None:
                order.append(job.id)
                reasons[job.id] = reason(ReasonCode.WAIT_RESOURCES,
                                         f"needs {job.num_gpus} GPUs, {nfree} free, no pair "
                                         "passes the packing rule", free_gpus=nfree, **nums)
                continue
            gpus, host = target
            taken.update(gpus)
            touched.update((job.id, host.id))
            b, s = exclusive_config(snap, job)
            actions.append(StartJob(job.id, gpus, b, s, share_with=(host.id,), mps_pct=PACK_MPS))
            reasons[job.id] = reason(ReasonCode.STARTED_SHARED, f"packed beside {host.id}",
                                     score=self.score(snap, job, host), **nums)
        if self.gimbal:
            for c in coordinate(snap, self.objective, lgrr=self.lgrr, liss=self.liss,
                                skip=touched):
                for rz in c.resizes:
                    actions.append(rz)
                    reasons[rz.job_id] = reason(
                        ReasonCode.RESIZED, f"GIMBAL coordination of the set of {c.jmax}",
                        objective_before=c.result.objective_before,
                        objective_after=c.result.objective_after)
        keep_running_reasons(snap, reasons)
        return make_plan(self.name, actions, order, reasons, infeasible)
