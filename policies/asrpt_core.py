"""Shared core of A-SRPT (seed 003 Algorithm 1) and its §V-A 1-d baselines.

* per-iteration time bounds of a job: ``α̂^min`` (Heavy-Edge on the fewest servers, §III-B
  last paragraph) and ``α^max`` (every replica on its own server);
* the predicted length ``ñ_i`` (from ``snapshot.predictors["iterations"]``, else the exact
  length the simulator reveals, else the user's time limit, else 0) and its source;
* the virtual single-machine preemptive SRPT of instance Ã1 (§IV-C, Fig. 3);
* :func:`place`: Heavy-Edge placement of a job on chosen servers, as GPUs + per-worker
  stage records (``WorkerAlloc.stage``).

Jobs of a Table I model (:mod:`policies.pipeline`) use eq. 4–7; any other application is
data parallel and uses its fitted throughput profile (seed 000 eq. 7) with the number of
nodes the placement spans, which is what the simulator runs.
"""
from __future__ import annotations

import heapq
import math
from functools import lru_cache
from typing import Any, Iterable, Mapping, Optional, Sequence

from .base import exclusive_config, take_gpus
from .heavy_edge import FreeIndex, heavy_edge
from .model import ClusterSnapshot, Gpu, Job, WorkerAlloc
from .pipeline import (MODELS, Network, PipelineSpec, alpha_max, configurations, counts_of,
                       iter_time, job_graph, pipeline_spec)

EPS = 1e-9


def spec_of(job) -> Optional[PipelineSpec]:
    """The pipeline spec of a Table I job (``None`` for other applications).  A job (or a
    history record without ``stages``) whose stage count does not fit takes the model's
    first configuration."""
    if job.app not in MODELS:
        return None
    stages = getattr(job, "stages", 1) or 1
    if not 1 <= stages <= job.num_gpus:
        cfg = configurations(job.app, job.num_gpus)
        stages = cfg[0] if cfg else job.num_gpus
    return pipeline_spec(job.app, stages, job.num_gpus)


@lru_cache(maxsize=4096)
def _graph(spec: PipelineSpec):
    return job_graph(spec)


@lru_cache(maxsize=8192)
def _pipeline_bounds(spec: PipelineSpec, g: int, net: Network) -> tuple[float, float]:
    servers, left, i = [], spec.num_gpus, 0
    while left > 0:
        servers.append((f"s{i}", min(g, left)))
        left -= min(g, left)
        i += 1
    where = heavy_edge(_graph(spec), servers)
    amin = iter_time(spec, _stage_counts(spec, where), {n: g for n, _ in servers}, net)
    return amin, alpha_max(spec, g, net)


def _stage_counts(spec: PipelineSpec, where: Mapping) -> list[dict[str, int]]:
    nodes: list[list[str]] = [[] for _ in spec.stages]
    for (s, _r), m in where.items():
        nodes[s].append(m)
    return counts_of(nodes)


def alpha_bounds(snap: ClusterSnapshot, job, net: Network) -> tuple[float, float]:
    """(``α̂^min``, ``α^max``) of ``job`` on this cluster's server size ``g``."""
    g = max(snap.max_gpus_per_node, 1)
    spec = spec_of(job)
    if spec is not None:
        return _pipeline_bounds(spec, g, net)
    prof = snap.profiles.get(job.app)
    if prof is None:
        return 1.0, 1.0  # unknown application: every placement looks the same
    k = max(job.num_gpus, 1)
    local = job.global_batch / k
    s = prof.min_accum_steps(local)
    amin = prof.iter_time(local, k, math.ceil(k / g), s)
    return amin, prof.iter_time(local, k, k, s)


# ------------------------------------------------------------------ prediction
def prediction(snap: ClusterSnapshot, job, perfect: bool) -> tuple[float, str, str]:
    """(value, unit, source) of ``job``'s predicted length; unit ``iterations`` or
    ``seconds``.  ``perfect``: the true length (A-SRPT-Perfect).  A predictor that returns
    ``None`` (an unseen group with the site's fallback rule) hands over to the exact length,
    else the time limit; the source then names both (``unseen-group, time-limit``)."""
    why = ""
    if not perfect:
        pred = snap.predictors.get("iterations")
        if pred is not None:
            v = pred.predict(job)
            src = pred.source(job) if hasattr(pred, "source") else getattr(pred, "kind", "model")
            if v is not None:
                return max(float(v), 0.0), getattr(pred, "unit", "iterations"), src
            why = f"{src}, "  # the predictor declines (an unseen group on a site): fall back
    total = getattr(job, "total_iters", None)
    if total is None:
        total = getattr(job, "iterations", None)
    if total is not None:
        return float(total), "iterations", why + "exact"
    est = getattr(job, "duration_estimate", None)
    if est is not None:
        return float(est), "seconds", why + "time-limit"
    return 0.0, "seconds", why + "none"


def predicted_seconds(value: float, unit: str, amin: float) -> float:
    """Predicted exclusive duration ``ñ_i · α̂^min`` (or the seconds predicted)."""
    return value * amin if unit == "iterations" else value


# ------------------------------------------------------------------ virtual SRPT
def virtual_srpt(items: Iterable[tuple[Any, float, float]]) -> dict[Any, float]:
    """Completion times of the single-machine preemptive SRPT schedule of
    ``(key, release, processing)`` items (§IV-C instance Ã1).  Ties: smallest remaining,
    then earlier release, then key.  A job with 0 processing completes at its release."""
    its = sorted(items, key=lambda x: (x[1], x[0]))
    done: dict[Any, float] = {}
    heap: list = []
    t, i, n = -math.inf, 0, len(its)
    while i < n or heap:
        if not heap:
            t = max(t, its[i][1])
        while i < n and its[i][1] <= t:
            k, r, p = its[i]
            heapq.heappush(heap, (max(p, 0.0), r, k))
            i += 1
        rem, r, k = heap[0]
        nxt = its[i][1] if i < n else math.inf
        if t + rem <= nxt:
            heapq.heappop(heap)
            t += rem
            done[k] = t
        else:
            heapq.heapreplace(heap, (rem - (nxt - t), r, k))
            t = nxt
    return done


# ------------------------------------------------------------------ placement
def place(snap: ClusterSnapshot, job: Job, servers: Sequence[tuple[str, int]],
          by_node: Mapping[str, Sequence[Gpu]], net: Network,
          gpn: Optional[Mapping[str, int]] = None, mem: Optional[float] = None,
          ) -> tuple[tuple[Gpu, ...], tuple[WorkerAlloc, ...], float]:
    """GPUs, worker records and per-iteration time of ``job`` on ``servers`` ((name, GPUs
    taken) pairs; GPUs taken in index order from ``by_node``).  ``gpn`` (node -> GPUs) and
    ``mem`` (smallest GPU memory) may be passed precomputed."""
    b, s = exclusive_config(snap, job, mem)
    spec = spec_of(job)
    if spec is None:
        gpus = tuple(g for m, c in servers for g in sorted(by_node[m])[:c])
        prof = snap.profiles.get(job.app)
        k = len(gpus)
        alpha = prof.iter_time(job.global_batch / k, k, len(servers), s) if prof else 1.0
        return gpus, (), alpha
    where = heavy_edge(_graph(spec), servers, snap.seed)
    free_iter = {m: iter(sorted(by_node[m])) for m, _ in servers}
    workers = []
    for v in sorted(where):
        workers.append(WorkerAlloc(next(free_iter[where[v]]), 0, b, s, stage=v[0]))
    # each stage's replicas share the global batch (the allocation record's contract,
    # docs/architecture.md: per stage, the shares sum to the global batch)
    per_stage: dict[int, int] = {}
    for w in workers:
        per_stage[w.stage] = per_stage.get(w.stage, 0) + 1
    seen: dict[int, int] = {}
    out = []
    for w in workers:
        i = seen.get(w.stage, 0)
        seen[w.stage] = i + 1
        base, extra = divmod(job.global_batch, per_stage[w.stage])
        share = base + (1 if i < extra else 0)
        # micro-batch x accumulation covers the share (the record's contract); a stage holds
        # 1/S of the model, so the data-parallel sub-batch is not its memory bound
        out.append(WorkerAlloc(w.gpu, share, max(1, -(-share // w.accum_steps)),
                               w.accum_steps, stage=w.stage))
    workers = out
    if gpn is None:
        gpn = {n.name: n.num_gpus for n in snap.nodes}
    alpha = iter_time(spec, _stage_counts(spec, where), gpn, net)
    return tuple(w.gpu for w in workers), tuple(workers), alpha


def free_counts(by_node: Mapping[str, Sequence[Gpu]]) -> dict[str, int]:
    return {m: len(gs) for m, gs in by_node.items() if gs}


class Placer:
    """The free servers of one decision (Algorithm 1 lines 9-10 / 22-23 and the baselines'
    placement), built on first use: a call that places nothing (every job waits, or none is
    pending) builds nothing, and the server buckets come from ``snap.free_buckets`` when the
    snapshot carries them with its ``free_index`` (the simulator keeps both per change), so
    a call costs the servers it takes, not a sort of the cluster.  Same choices as a
    :class:`FreeIndex` built from ``snap.free_by_node()``."""

    def __init__(self, snap: ClusterSnapshot, net: Network):
        self.snap, self.net = snap, net
        self.by_node: Optional[dict] = None

    def _build(self) -> None:
        snap = self.snap
        self.by_node = snap.free_by_node()
        buckets = snap.free_buckets if snap.free_index is not None else None
        self.fidx = FreeIndex(free_counts(self.by_node), snap.node_rank, buckets)
        self.gpn = snap.node_gpus
        # smallest GPU memory of the cluster (exclusive_config's limit); read after place()
        self.mem = snap.min_gpu_mem_mb

    def place(self, job: Job, how) -> tuple[list, tuple[Gpu, ...], tuple[WorkerAlloc, ...], float]:
        """Servers (:meth:`FreeIndex.choose` with ``how``), GPUs, workers and α of ``job``."""
        if self.by_node is None:
            self._build()
        servers = self.fidx.choose(job.num_gpus, how)
        gpus, workers, alpha = place(self.snap, job, servers, self.by_node, self.net,
                                     self.gpn, self.mem)
        return servers, gpus, workers, alpha

    def take(self, servers: Sequence[tuple[str, int]], gpus: Iterable[Gpu]) -> None:
        take_gpus(self.by_node, gpus)
        self.fidx.take(servers)

