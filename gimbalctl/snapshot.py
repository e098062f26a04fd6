"""Slurm state + gimbal DB + fitted models -> the ``ClusterSnapshot`` policies see.

The same :class:`policies.model.ClusterSnapshot` the simulator builds, from:

* nodes: usable Slurm nodes with GPUs (GPU count from their configured GRES);
* jobs: pending/running Slurm jobs that want GPUs (GRES, or gimbal metadata
  ``gpus`` for gate jobs submitted without GRES).  ``app``/``batch``/``iters``
  come from gimbal metadata; missing or malformed values fall back to the
  configured defaults and produce a warning.  ``Job.batch_range`` is the metadata's
  ``batchrange`` (``gsbatch --allow-batch-change``), ``None`` without it: only then
  may a policy change the job's global batch;
* expected duration (length-aware policies): metadata ``iters`` (→
  ``total_iters``); ``duration_estimate`` is the Slurm time limit, or with the site
  rule ``estimates = "bounded"`` min(``est``, time limit) unless the user is penalised
  or the job already ran past its estimate (then the limit again; docs/daemon.md);
* nodes: GPU type from the configured GRES type (``gpu:v100:4``), memory from the
  ``[gpu_types]`` table (bundled K80/P100/V100 figures, else 16384 MiB); relative speeds
  reach policies as ``snapshot.gpu_types``;
* allocations: the GPU indices Slurm reports allocated to each running job
  (``IDX`` / per-GPU detail), whatever the job asked for: an ``--exclusive`` job gets
  every GPU of its nodes without asking for GRES; shard/mps jobs on the same GPU index
  share it (``gpu_jobs``).  GPUs of a node Slurm reports fully ``allocated`` (a
  whole-node job without GRES) are not free either; the per-worker record
  (share, micro-batch, accumulation, MPS share, stage) from rank 0's newest launcher
  report, else from the launcher decision file, else the even split
  (:func:`_running_alloc`); a worker on a GPU where the job holds ``gres/mps`` units gets
  the ceiling ``mps_cap`` = its units as a percentage of the GPU's (Slurm sets
  ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` from them) and the share applied, min(record, ceiling)
  (:func:`mps_caps`, :func:`_apply_caps`);
* progress: launcher throughput reports (latest step) and the DB's
  pre-emption counts;
* profiles: ``gimbalctl.profiles.default_models()`` overridden by DB profiles;
* measured throughput (``inputs``, for ``explain``/``queue``): the DB profile row's
  ``measured`` entry for the job's app and GPU count, and the job's own newest report;
  for jobs whose app has no fitted profile also in ``predictors`` (``unprofiled`` ids and
  ``measured_rates``: GPU count -> iterations/s), which the elastic policies use instead of a
  model (seed 001 §4.5, :mod:`policies.elastic`).
"""
from __future__ import annotations

import dataclasses
import gc
import logging
import time
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Iterable, Mapping, Optional

from policies.elastic import MEASURED_RATES, UNPROFILED
from policies.pipeline import MODELS as PIPELINE_MODELS
from policies.model import Allocation, ClusterSnapshot, Gpu, Job, JobState, Node, WaitingQueue, \
    uniform_workers
from policies.throughput import GpuTypeTable, MemoryProfile, ThroughputProfile

from .config import ConfigError
from .records import RecordError, gpu_name, workers_from_wire
from .slurm.types import SlurmJob, SlurmNode

log = logging.getLogger("gimbal.snapshot")


@dataclass(frozen=True)
class SnapshotResult:
    snapshot: ClusterSnapshot
    inputs: Mapping[str, dict]  # per job: what the policy was given and where it came from
    warnings: tuple[str, ...] = ()
    slurm_jobs: Mapping[str, SlurmJob] = field(default_factory=dict)
    skipped: tuple[str, ...] = ()  # Slurm jobs left out (no GPUs, ended)
    outran: tuple[str, ...] = ()  # running jobs past the estimate used for them


def merged_models(models, db_profiles: Optional[Mapping] = None):
    """(profiles, memory) from ``models`` with DB rows (``ProfileRow``) on top."""
    profiles = dict(models.profiles)
    memory = dict(models.memory)
    for app, row in (db_profiles or {}).items():
        if not row.params:  # a row with measurements only: the fitted model stays
            continue
        params = dict(row.params)
        params.setdefault("app", app)
        profiles[app] = ThroughputProfile(**params)
        if row.memory:
            mem = dict(row.memory)
            mem.setdefault("app", app)
            memory[app] = MemoryProfile(**mem)
    return profiles, memory


def _job_gpus(sj: SlurmJob) -> tuple[tuple[Gpu, ...], dict[Gpu, str]]:
    """GPUs a running job uses and the GRES kind on each (gpu/shard/mps)."""
    kinds: dict[Gpu, str] = {}
    for use in sj.gres_alloc:
        for idx in use.indices:
            kinds.setdefault(Gpu(use.node, idx), use.name)
    return tuple(sorted(kinds)), kinds


def mps_caps(sj: SlurmJob, node_units: Mapping[str, int]) -> dict[Gpu, int]:
    """Per GPU, the MPS thread percentage Slurm's ``gres/mps`` units give the job there: its
    units x 100 / the GPU's units (``node_units``: node -> MPS units per GPU, 100 when the
    node does not say), in 1..100.  GPUs the job holds otherwise have no entry."""
    out: dict[Gpu, int] = {}
    for use in sj.gres_alloc:
        if use.name != "mps":
            continue
        total = int(node_units.get(use.node) or 100)
        for idx, units in use.per_gpu.items():
            if units > 0 and total > 0:
                out[Gpu(use.node, idx)] = max(1, min(100, units * 100 // total))
    return out


def _apply_caps(alloc: Allocation, caps: Mapping[Gpu, int]) -> Allocation:
    """The allocation with each worker's MPS ceiling and the share applied under it (an unset
    share runs at the ceiling)."""
    if not caps or not alloc.workers or not any(w.gpu in caps for w in alloc.workers):
        return alloc
    ws = tuple(dataclasses.replace(
        w, mps_cap=caps[w.gpu],
        mps_pct=caps[w.gpu] if w.mps_pct is None else min(w.mps_pct, caps[w.gpu]))
        if w.gpu in caps else w for w in alloc.workers)
    return Allocation.from_workers(ws, alloc.global_batch)


def duration_estimate(meta_est: Optional[float], limit_s: Optional[float], *, rule: str,
                      penalised: bool = False, executed_s: float = 0.0
                      ) -> tuple[Optional[float], Optional[str], bool]:
    """(estimate, source, outran) for one job (docs/daemon.md, "Duration estimates").

    ``rule="limit"``: the Slurm time limit only, whatever the user wrote.
    ``rule="bounded"`` (a site rule): min(``est``, limit), as schedulers with user
    estimates do (an estimate never exceeds the limit Slurm enforces); the limit alone
    when the user is ``penalised`` or once the job has run past its estimate
    (``outran``: re-estimated from its limit, and recorded for the user's next jobs)."""
    if meta_est is None or rule != "bounded":
        return limit_s, ("time_limit" if limit_s else None), False
    est = meta_est if limit_s is None else min(meta_est, limit_s)
    if executed_s > est:
        return limit_s, ("time_limit (outran meta.est)" if limit_s else None), True
    if penalised:
        return limit_s, ("time_limit (user penalised)" if limit_s else None), False
    return est, ("meta.est" if est == meta_est else "time_limit (meta.est above it)"), False


def build_snapshot(jobs: Iterable[SlurmJob], nodes: Iterable[SlurmNode], models, *,
                   now: Optional[float] = None, db_profiles: Optional[Mapping] = None,
                   history: Optional[Mapping] = None, reports: Optional[Mapping] = None,
                   default_app: str = "cifar10", default_batch: int = 128,
                   seed: int = 0, decisions: Optional[Mapping] = None,
                   estimates: str = "limit",
                   penalised_users: frozenset = frozenset(),
                   pipeline_apps: bool = False) -> SnapshotResult:
    """Build the policy's view.  ``history``: job id -> ``JobRow`` (DB);
    ``reports``: job id -> newest ``ReportRow``; ``decisions``: job id ->
    ``launcher.decision.LauncherDecision`` (the files the daemon wrote);
    ``estimates``/``penalised_users``: see :func:`duration_estimate`; ``pipeline_apps``: keep
    the app of a job of a seed 003 Table I model (metadata ``stages`` -> ``Job.stages``) for a
    policy that times them by eq. 4-7 (``Policy.pipeline_models``)."""
    from .predictor import group_key  # here: predictor needs numpy, the CLI starts without it
    now = time.time() if now is None else float(now)
    profiles, memory = merged_models(models, db_profiles)
    if default_app not in profiles:
        raise ConfigError(f"defaults.app {default_app!r} has no throughput profile; known: "
                          f"{', '.join(sorted(profiles))}")
    nodes = list(nodes)
    gpu_types = getattr(models, "gpu_types", None) or GpuTypeTable()
    node_objs = tuple(_node(n, gpu_types) for n in sorted(nodes, key=lambda n: n.name)
                      if n.usable and n.num_gpus > 0)
    valid = {g for n in node_objs for g in n.gpus()}
    warnings: list[str] = []
    out_jobs: dict[str, Job] = {}
    inputs: dict[str, dict] = {}
    by_id: dict[str, SlurmJob] = {}
    skipped: list[str] = []
    outran: list[str] = []
    iter_bounds: dict[str, tuple[Optional[float], bool]] = {}
    gpu_jobs: dict[Gpu, list[str]] = {}
    history = history or {}
    reports = reports or {}
    decisions = decisions or {}
    unprofiled: list[str] = []  # seed 001 §4.5: these jobs' rates are measured, not modelled
    measured_rates: dict[str, Mapping[int, float]] = {}
    jobs = sorted(jobs, key=lambda j: (j.submit_time, _idkey(j.job_id)))
    whole = _whole_node_gpus(jobs, nodes, valid)
    mps_units = {n.name: n.shares_per_gpu.get("mps", 0) for n in nodes}

    for sj in jobs:
        if sj.state not in ("PENDING", "RUNNING", "SUSPENDED"):
            skipped.append(sj.job_id)
            continue
        n = sj.num_gpus
        held_gpus: tuple[Gpu, ...] = ()
        if sj.running:
            # what Slurm allocated, not what the job asked for (exclusive / whole-node jobs)
            held_gpus = tuple(sorted(set(g for g in _job_gpus(sj)[0] if g in valid)
                                     | set(whole.get(sj.job_id, ()))))
            n = max(n, len(held_gpus))
        if n <= 0:
            skipped.append(sj.job_id)
            continue
        meta = sj.meta
        for w in meta.warnings:
            warnings.append(f"job {sj.job_id}: {w}")
        app = meta.app
        pipeline = pipeline_apps and app in PIPELINE_MODELS
        if not pipeline and (app is None or app not in profiles):
            if app is not None:  # named an app nothing is fitted for (untagged: site default)
                unprofiled.append(sj.job_id)
            if app is not None or meta.tagged:
                why = "no app given" if app is None else f"unknown app {app!r}"
                warnings.append(f"job {sj.job_id}: {why}; using default app {default_app!r}")
            app = default_app
        batch = meta.batch or default_batch
        if meta.tagged and meta.batch is None:
            warnings.append(f"job {sj.job_id}: no batch given; using default batch {batch}")
        executed_s = max(0.0, now - (sj.start_time or now)) if sj.running else 0.0
        est, est_src, ran_past = duration_estimate(
            meta.est, sj.time_limit_s, rule=estimates, executed_s=executed_s,
            penalised=sj.user in penalised_users)
        if ran_past:
            outran.append(sj.job_id)
        if meta.iters is not None:  # a user's claim too: bounded like est (_bound_iters)
            iter_bounds[sj.job_id] = (sj.time_limit_s, estimates == "bounded" and not ran_past
                                      and sj.user not in penalised_users)
        hist = history.get(sj.job_id)
        rep = reports.get(sj.job_id)
        state = {"PENDING": JobState.PENDING, "RUNNING": JobState.RUNNING,
                 "SUSPENDED": JobState.SUSPENDED}[sj.state]
        preempts = int(getattr(hist, "preemptions", 0) or 0)
        if state is JobState.PENDING and (sj.restarts or preempts):
            state = JobState.SUSPENDED  # requeued: keeps its progress
        alloc = None
        executed = 0.0
        completed = float(rep.step) if rep is not None else 0.0
        rate = 0.0
        if sj.running:
            gpus, kinds = held_gpus, _job_gpus(sj)[1]
            if not gpus:
                warnings.append(f"job {sj.job_id}: running but Slurm reports no GPU indices")
            shared = any(k in ("shard", "mps") for k in kinds.values())
            alloc = _running_alloc(sj.job_id, gpus, batch, n, rep, decisions.get(sj.job_id),
                                   warnings)
            alloc = _apply_caps(alloc, mps_caps(sj, mps_units))
            if alloc.global_batch:  # progress counts samples of the submitted batch
                completed = completed * alloc.global_batch / batch
            for g in gpus:
                gpu_jobs.setdefault(g, []).append(sj.job_id)
            executed = max(0.0, now - (sj.start_time or now))
            # a launch's first report includes warm-up (launcher.monitor marks it): its step
            # time is not the job's rate (the model's stands until the next report)
            if rep is not None and rep.step_time_s and not _warmup(rep):
                rate = 1.0 / rep.step_time_s
                if alloc.global_batch:
                    rate = rate * alloc.global_batch / batch
            inputs_alloc = [f"{g.node}:{g.index}" for g in gpus]
        else:
            inputs_alloc = []
            shared = False
        total_iters = meta.iters
        shared_key = f"{n}:shared" if shared else str(n)
        row = (db_profiles or {}).get(app)
        meas = ((getattr(row, "measured", None) or {}).get(shared_key)) if row is not None else None
        if unprofiled and unprofiled[-1] == sj.job_id:
            pts = _measured_rates((db_profiles or {}).get(meta.app) if meta.app else None)
            if sj.running and not shared and rate > 0 and alloc is not None and alloc.gpus:
                pts[len(alloc.gpus)] = rate  # the job's own newest report
            if pts:
                measured_rates[sj.job_id] = MappingProxyType(pts)
        out_jobs[sj.job_id] = Job(
            id=sj.job_id, submit_time=sj.submit_time, num_gpus=n, app=app, global_batch=batch,
            user=sj.user, name=sj.name or "", total_iters=total_iters, duration_estimate=est,
            state=state, group_id=group_key(sj.user, sj.name or meta.app or "", n, meta.batch),
            allocation=alloc, start_time=sj.start_time, as_of=now,
            stages=_stages(app, n, meta.stages) if pipeline else 1,
            completed_iters=min(completed, total_iters) if total_iters else completed,
            attained_service=executed * (len(alloc.gpus) if alloc is not None and alloc.gpus else n),
            executed_time=executed, iter_rate=rate,
            preemptions=max(preempts, sj.restarts),
            run_start=sj.start_time if sj.running else None,
            batch_range=meta.batch_range if meta.batch == batch else None)
        by_id[sj.job_id] = sj
        inputs[sj.job_id] = {
            "state": state.value, "num_gpus": n, "app": app, "batch": batch,
            "batch_range": list(meta.batch_range) if meta.batch_range else None,
            "iters": total_iters, "duration_estimate": est, "duration_source": est_src,
            "meta_est": meta.est, "meta_iters": meta.iters, "iters_source": (
                "meta.iters" if meta.iters is not None else None),
            "time_limit_s": sj.time_limit_s, "submit_time": sj.submit_time,
            "slurm_priority": sj.priority, "site_factor": sj.site_factor, "gate": sj.gated,
            "gpus": inputs_alloc, "shared": shared, "meta_source": meta.source,
            "partition": sj.partition, "reason": sj.reason,
            **({"stages": _stages(app, n, meta.stages)} if pipeline else {}),
            "measured": _measured_input(app, shared_key, meas, rep)}

    used = set(gpu_jobs)
    free = tuple(g for node in node_objs for g in node.gpus() if g not in used)
    snap = ClusterSnapshot(
        now=now, nodes=node_objs, jobs=MappingProxyType(out_jobs),
        gpu_jobs=MappingProxyType({g: tuple(v) for g, v in sorted(gpu_jobs.items())}),
        free_gpus=free, profiles=MappingProxyType(profiles), memory=MappingProxyType(memory),
        interference=models.interference, seed=seed, gpu_types=gpu_types,
        predictors=MappingProxyType({**dict(getattr(models, "predictors", {}) or {}),
                                     MEASURED_RATES: MappingProxyType(measured_rates),
                                     UNPROFILED: tuple(unprofiled)}))
    snap = _bound_iters(snap, iter_bounds, inputs)
    # the waiting order, sorted once here: pending() of every policy call reads it
    snap = dataclasses.replace(snap, queue=WaitingQueue.of(snap.jobs))
    for w in warnings:  # returned to the caller, which reports each once
        log.debug("%s", w)
    return SnapshotResult(snap, MappingProxyType(inputs), tuple(warnings),
                          MappingProxyType(by_id), tuple(skipped), tuple(outran))


def decide(policy, snapshot: ClusterSnapshot):
    """``policy.schedule(snapshot)`` as the daemon and ``gimbalctl plan`` make it: with every
    object alive at the call (the snapshot, its jobs, nodes and models, the process's own
    state) moved out of the cyclic collector's reach for the call (:func:`gc.freeze`), so an
    automatic collection during the decision walks only what the policy allocates.  On a
    1,000-node snapshot (15,000 jobs) each full collection otherwise walks every job and
    reason object again: 15-20 % of afs-l's decision (docs/scale.md §1).  Only when memory is
    reclaimed changes, not what is decided: the objects are unfrozen afterwards and a later
    collection finds any garbage among them.  Where something else froze objects first (a
    process that forks workers) or the collector is off, the call runs as it is."""
    if not gc.isenabled() or gc.get_freeze_count():
        return policy.schedule(snapshot)
    gc.freeze()
    try:
        return policy.schedule(snapshot)
    finally:
        gc.unfreeze()


def _bound_iters(snap: ClusterSnapshot, bounds: Mapping[str, tuple[Optional[float], bool]],
                 inputs: dict) -> ClusterSnapshot:
    """A user's ``iters`` is a length claim like ``est`` (length-aware policies rank by
    ``iters`` x exclusive iteration time): under ``estimates = "limit"`` the job's length is
    its time limit (``iters`` = limit / iteration time; none without a limit); under
    ``"bounded"`` at most the limit.  ``bounds``: job -> (time limit, claim trusted)."""
    jobs = dict(snap.jobs)
    for jid, (limit_s, trusted) in bounds.items():
        job = jobs[jid]
        try:
            t = snap.exclusive_iter_time(job)
        except (KeyError, ValueError, ZeroDivisionError, OverflowError):
            continue
        if not t > 0:
            continue
        cap = limit_s / t if limit_s else None
        total = (job.total_iters if cap is None else min(job.total_iters, cap)) if trusted else cap
        if total == job.total_iters:
            continue
        jobs[jid] = dataclasses.replace(
            job, total_iters=total,
            completed_iters=min(job.completed_iters, total) if total else job.completed_iters)
        inputs[jid]["iters"] = total
        inputs[jid]["iters_source"] = ("time_limit" if total is not None else None) if not trusted \
            else "time_limit (meta.iters above it)"
    if jobs == dict(snap.jobs):
        return snap
    return dataclasses.replace(snap, jobs=MappingProxyType(jobs))


def _stages(app: str, n: int, asked: Optional[int]) -> int:
    """Pipeline stages of a Table I job: as asked (metadata ``stages``) when it fits its GPUs,
    else the model's first configuration for ``n`` GPUs (:func:`policies.pipeline.configurations`)."""
    from policies.pipeline import configurations
    if asked and 1 <= asked <= n:
        return asked
    cfg = configurations(app, n)
    return cfg[0] if cfg else 1


def _whole_node_gpus(jobs: list[SlurmJob], nodes: list[SlurmNode],
                     valid: set) -> dict[str, tuple[Gpu, ...]]:
    """GPUs no job holds on nodes Slurm reports fully ``allocated``, given to the running
    jobs there that hold no GPU (a whole-node job without GRES): nothing else can start
    on such a node, so its GPUs are not free.  Job id -> GPUs."""
    out: dict[str, list[Gpu]] = {}
    held = {g for sj in jobs if sj.running for g in _job_gpus(sj)[0]}
    for node in nodes:
        base = node.state.split("+")[0]
        if base not in ("allocated", "alloc"):
            continue
        idle = [g for g in (Gpu(node.name, i) for i in range(node.num_gpus))
                if g in valid and g not in held]
        owners = [sj.job_id for sj in jobs if sj.running and node.name in sj.nodes
                  and not _job_gpus(sj)[0]]
        for k, g in enumerate(idle):
            if owners:
                out.setdefault(owners[k % len(owners)], []).append(g)
    return {j: tuple(v) for j, v in out.items()}


def _running_alloc(job_id: str, gpus: tuple[Gpu, ...], batch: int, n: int, rep, dec,
                   warnings: list[str]) -> Allocation:
    """A running job's allocation as decided and reported.

    In order: the per-worker record rank 0's newest report echoes (what runs), the record
    of the launcher decision file (what the daemon decided), the decision's job-level
    sub-batch / accumulation / MPS share as an even split, else the even split of the
    batch.  A record is used only when it names exactly the GPUs Slurm reports for the
    job; otherwise a warning names the job and the next source is tried."""
    gb = batch
    for source, raw, rec_gb in (
            ("report", _rep_workers(rep), _rep_batch(rep)),
            ("decision", list(dec.workers) if dec is not None and dec.workers else None,
             dec.global_batch if dec is not None else None)):
        if raw is None:
            continue
        try:
            workers = workers_from_wire(raw, f"job {job_id} {source} workers")
        except RecordError as e:
            warnings.append(str(e))
            continue
        if set(w.gpu for w in workers) != set(gpus) or len(workers) != len(gpus):
            warnings.append(f"job {job_id}: the {source}'s worker records name GPUs "
                            f"{sorted(gpu_name(w.gpu) for w in workers)}, Slurm reports "
                            f"{sorted(gpu_name(g) for g in gpus)}; not used")
            continue
        force = rec_gb if isinstance(rec_gb, int) and rec_gb > 0 else gb
        return Allocation.from_workers(workers, force if force != batch else None)
    if not gpus:
        return Allocation(gpus, -(-batch // max(n, 1)), 1, None)
    if dec is not None and (dec.sub_batch or dec.accum_steps or dec.mps_thread_pct):
        force = dec.global_batch or batch
        sub = dec.sub_batch or -(-(-(-force // len(gpus))) // (dec.accum_steps or 1))
        accum = dec.accum_steps or 1
        return Allocation(gpus, sub, accum, dec.mps_thread_pct,
                          uniform_workers(gpus, sub, accum, dec.mps_thread_pct, force),
                          force if force != batch else None)
    local = -(-batch // len(gpus))
    return Allocation(gpus, local, 1, None, uniform_workers(gpus, local, 1, None, batch))


def _warmup(rep) -> bool:
    extra = getattr(rep, "extra", None)
    return isinstance(extra, dict) and extra.get("warmup") is True


def _rep_workers(rep):
    extra = getattr(rep, "extra", None) if rep is not None else None
    return extra.get("workers") if isinstance(extra, dict) else None


def _rep_batch(rep):
    extra = getattr(rep, "extra", None) if rep is not None else None
    return extra.get("global_batch") if isinstance(extra, dict) else None


def _node(n: SlurmNode, gpu_types: GpuTypeTable) -> Node:
    gtype = getattr(n, "gpu_type", None) or "gpu"
    return Node(n.name, n.num_gpus, gtype, int(gpu_types.memory_mb.get(gtype, 16384)))


def _measured_rates(row) -> dict[int, float]:
    """GPU count -> iterations/s the launcher measured for an application without a fitted
    profile (the store's folded reports; shared-GPU entries left out).  Keys and values come
    from reports, so anything that is not a positive count and time is skipped."""
    out: dict[int, float] = {}
    for key, m in ((getattr(row, "measured", None) or {}) if row is not None else {}).items():
        try:
            k, t = int(str(key)), float((m or {}).get("step_time_s") or 0)
        except (TypeError, ValueError, AttributeError):
            continue
        if k > 0 and t > 0:
            out[k] = 1.0 / t
    return out


def _measured_input(app: str, key: str, meas: Optional[Mapping], rep) -> Optional[dict]:
    """What launcher reports measured for this job's app and GPU count (``key``: ``"2"`` or
    ``"1:shared"``) and for the job itself; None when nothing was measured."""
    out: dict = {}
    if meas:
        out.update(app=app, gpus=key, samples_per_s=meas.get("samples_per_s"),
                   step_time_s=meas.get("step_time_s"), reports=meas.get("n"),
                   jobs=len(meas.get("jobs") or ()))
    if rep is not None and rep.samples_per_s is not None:
        out.update(job_samples_per_s=rep.samples_per_s, job_step=rep.step)
    return out or None


def _idkey(job_id: str):
    return (0, int(job_id), "") if job_id.isdigit() else (1, 0, job_id)
