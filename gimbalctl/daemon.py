"""The gimbal daemon: snapshot -> policy -> plan -> apply -> audit, once or in a loop.

Apply modes
-----------
*ordering* (any Slurm job): the plan's queue order (jobs the plan starts first,
then ``plan.order``, infeasible last) becomes a fixed Slurm ``priority`` or a
``site_factor`` per pending, non-held job; Slurm's own scheduler then places
jobs.  The site factor adds to Slurm's multifactor priority and survives
hold/release; a fixed priority is undone by hold+release (that is how
``revert`` restores Slurm's own priority).

*gate* (jobs submitted with ``gsbatch --gate``: held and tagged ``gate=yes``):
for each ``StartJob`` of a gated held job, set its GRES (``gpu:N``, or
``shard``/``mps`` units when it shares a GPU), its ``ReqNodeList``, write the
launcher decision (``$GIMBAL_STATE_DIR/decisions/<job>.json``) and release it.
``PreemptJob``/``ResizeJob`` of a gated running job: ``USR2`` (gimbal-run
checkpoints), wait ``preempt_grace``, ``requeuehold``; a later cycle gates it
again (and sets ``StartTime=now``: Slurm delays a requeued job ~2 min).
Non-gated pending jobs are ordered as in ordering mode.

Crash safety
------------
The cycle and its plan are committed (status ``planned``) before Slurm is
touched; every change gets a ``pending`` audit row *before* it runs and its
result after.  A cycle that died leaves ``planned``/``applying`` and pending
rows; the next cycle re-reads Slurm and marks each pending row ``reconciled``
(Slurm has the intended value) or ``abandoned``, then computes changes from the
current state, so nothing is lost or applied twice.

Exit codes of ``gimbalctl daemon --once``: see :class:`Exit`.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import os
import signal as _signal
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from policies.model import uniform_workers
from policies.plan import (Plan, PreemptJob, ReasonCode, ResizeJob, StartJob, make_plan,
                          reason)

from .config import Config
from .slurm.backend import FIELDS, Backend, _same
from .slurm.meta import GimbalMeta
from .slurm.types import SlurmJob, SlurmNode
from .snapshot import SnapshotResult, build_snapshot, decide

log = logging.getLogger("gimbal.daemon")


class Exit:
    """``gimbalctl daemon --once`` exit statuses."""

    OK = 0  # cycle done (also: skipped because another cycle holds the lock)
    ERROR = 1  # unexpected error
    USAGE = 2  # bad flag / config / policy name
    SLURM_UNAVAILABLE = 3  # controller unreachable or Slurm tools missing; only a failed cycle row
    STORE = 4  # the state store cannot be opened/written
    PARTIAL = 5  # the cycle ran but some Slurm changes failed (see the audit)


@dataclass
class Target:
    """One desired change: set ``field`` of ``job_id`` to ``value``."""

    job_id: str
    field: str
    value: Any
    why: str = ""


@dataclass
class CycleResult:
    cycle_id: Optional[int]
    plan: Plan
    snapshot: SnapshotResult
    queue: list[str]
    targets: list[Target]
    changes: list = field(default_factory=list)  # slurm.types.Change
    reconciled: dict = field(default_factory=dict)  # status -> count
    warnings: list[str] = field(default_factory=list)
    status: str = "done"

    def as_dict(self) -> dict:
        return {"cycle_id": self.cycle_id, "status": self.status, "plan": self.plan.as_dict(),
                "queue": self.queue, "changes": [c.as_dict() for c in self.changes],
                "reconciled": self.reconciled, "warnings": self.warnings}


# ---------------------------------------------------------------- planning
def queue_order(plan: Plan, pending: list[str]) -> list[str]:
    """Gimbal's order of the pending jobs: started now, then ``plan.order``, then the rest."""
    out: list[str] = []
    for a in plan.starts():
        if a.job_id not in out:
            out.append(a.job_id)
    for j in plan.order:
        if j not in out:
            out.append(j)
    for j in pending:  # jobs the policy did not order (infeasible last)
        if j not in out and j not in plan.infeasible:
            out.append(j)
    out.extend(j for j in plan.infeasible if j not in out)
    return [j for j in out if j in set(pending)]


def site_step(jobs: list[SlurmJob], configured: int) -> int:
    """Gap between consecutive site factors: larger than the spread of Slurm's
    own priorities, rounded up to a power of ten so it is stable across cycles."""
    if configured > 0:
        return configured
    base = [j.priority - (j.site_factor or 0) for j in jobs] or [0]
    spread = max(base) - min(base)
    return max(1000, 10 ** math.ceil(math.log10(2 * (spread + 1))))


def priority_ladder(base: int, step: int, n: int,
                    warnings: Optional[list[str]] = None) -> tuple[int, int]:
    """``(base, step)`` such that ``base + (n-1)*step`` stays within Slurm's priority range
    (:data:`~gimbalctl.config.SLURM_PRIORITY_MAX`): a queue too long for the configured
    values is moved down (then squeezed), with a warning, instead of every update failing."""
    from .config import SLURM_PRIORITY_MAX
    if n <= 1 or base + (n - 1) * step <= SLURM_PRIORITY_MAX:
        return base, step
    new_base = SLURM_PRIORITY_MAX - (n - 1) * step
    new_step = step
    if new_base < 1:
        new_base, new_step = 1, max(1, (SLURM_PRIORITY_MAX - 1) // (n - 1))
    if warnings is not None:
        warnings.append(f"ordering: {n} pending jobs with priority_base {base} and step {step} "
                        f"exceed Slurm's maximum priority {SLURM_PRIORITY_MAX}; using base "
                        f"{new_base}, step {new_step} this cycle")
    return new_base, new_step


def ordering_targets(cfg: Config, order: list[str], sjobs: dict[str, SlurmJob],
                     warnings: Optional[list[str]] = None) -> list[Target]:
    ids = [j for j in order if j in sjobs and sjobs[j].pending and not sjobs[j].held]
    n = len(ids)
    out = []
    if cfg.knob == "priority":
        base, step = priority_ladder(cfg.priority_base, cfg.priority_step, n, warnings)
        for rank, jid in enumerate(ids):
            out.append(Target(jid, "priority", base + (n - 1 - rank) * step,
                              f"position {rank + 1} of {n}"))
    else:
        step = site_step([sjobs[j] for j in ids], cfg.site_step)
        for rank, jid in enumerate(ids):
            out.append(Target(jid, "site_factor", (n - 1 - rank) * step, f"position {rank + 1} of {n}"))
    return out


TYPED_GRES_FROM = (23, 2, 0)  # Slurm releases that change a pending job's GRES type (26.05.5 tested)


def target_gpu_type(action: StartJob, nodes: dict[str, SlurmNode]) -> Optional[str]:
    """The GPU type of the nodes a start names, as Slurm spells it (None: untyped or mixed)."""
    types = {getattr(nodes.get(g.node), "gres_type", None) for g in action.gpus}
    return types.pop() if len(types) == 1 else None


def gate_gres(action: StartJob, sj: SlurmJob, nodes: dict[str, SlurmNode], cfg: Config,
              warnings: list[str], typed: bool = False) -> str:
    """GRES per node for a gated start: ``gpu:N`` alone, ``shard``/``mps`` units when sharing.

    GPU types (seed 002): with ``typed`` (Slurm >= 23.02, :data:`TYPED_GRES_FROM`, which
    changes the type of a pending or requeue-held job) the request names the type of the
    chosen nodes, ``gpu:<type>:N``, so a job moved between types asks for what it gets.
    Without it (22.05, which cannot change a pending job's type) a job keeps the type its own
    request names, and the node pin (``ReqNodeList``) places it; :func:`gate_targets` never
    starts such a job on nodes of another type."""
    per_node: dict[str, int] = {}
    for g in action.gpus:
        per_node[g.node] = per_node.get(g.node, 0) + 1
    count = max(per_node.values()) if per_node else max(sj.num_gpus, 1)
    if len(set(per_node.values())) > 1:
        warnings.append(f"job {sj.job_id}: uneven GPUs per node {per_node}; asking {count} per node")
    wants_share = bool(action.share_with) or action.mps_pct is not None or \
        (bool(sj.meta.share) and sj.num_gpus == 1)
    if not wants_share:
        gtype = target_gpu_type(action, nodes) if typed else sj.gpu_type_req
        return f"gpu:{gtype}:{count}" if gtype else f"gpu:{count}"
    frac = action.mps_pct / 100.0 if action.mps_pct is not None else cfg.share_fraction
    if action.share_with:
        # Slurm's gres/mps lets the MPS units of one GPU add up to 100 %: a job started beside
        # another asks at most ``share_fraction`` (a tighter limit, e.g. a GIMBAL squeeze, is
        # the launcher's CUDA_MPS_ACTIVE_THREAD_PERCENTAGE from the decision)
        frac = min(frac, cfg.share_fraction)
    node = nodes.get(next(iter(per_node), ""))
    shares = node.shares_per_gpu if node else {}
    if "mps" in shares:
        return f"mps:{max(1, round(shares['mps'] * frac)) * count}"
    if "shard" in shares:
        return f"shard:{max(1, round(shares['shard'] * frac)) * count}"
    warnings.append(f"job {sj.job_id}: node {node.name if node else '?'} has no shard/mps GRES; "
                    f"starting on whole GPUs")
    return f"gpu:{count}"


def _whole_gpu_partners(action: StartJob, sjobs: dict[str, SlurmJob]) -> list[str]:
    """Partners of a packed start that hold one of its GPUs through whole-GPU ``gres/gpu``
    (``"<job> (<node>:<index>)"``).  Slurm gives a GPU either whole or in shard/mps units, never
    both, so such a packing cannot be applied; the simulator has no such limit (every job it
    starts can be packed), so this is where the cluster and the model differ."""
    mine = {(g.node, g.index) for g in action.gpus}
    out = []
    for jid in getattr(action, "share_with", ()) or ():
        sj = sjobs.get(jid)
        if sj is None:
            continue
        for u in sj.gres_alloc:
            if u.name != "gpu":
                continue
            hit = sorted(i for i in u.per_gpu if (u.node, i) in mine)
            if hit:
                out.append(f"{jid} ({u.node}:{hit[0]})")
                break
    return out


def own_hold(sj: SlurmJob, last_action: Optional[str]) -> bool:
    """Whether the hold on a gated job is one gimbal may release: the submission hold of
    ``gsbatch --gate`` (never released by gimbal yet) or gimbal's own requeue-hold / hold
    (its newest hold/release change, ``last_action``, from the audit).  Never an admin's
    hold (``JobHeldAdmin``), never a hold placed after gimbal released the job."""
    if sj.reason == "JobHeldAdmin":
        return False
    return last_action is None or last_action in ("requeue_hold", "hold", "revert:hold")


def gate_targets(cfg: Config, plan: Plan, sjobs: dict[str, SlurmJob],
                 nodes: dict[str, SlurmNode], warnings: list[str],
                 now: Optional[float] = None,
                 held_gpus: Optional[dict] = None,
                 hold_actions: Optional[dict[str, str]] = None,
                 typed_gres: bool = False) -> list[Target]:
    """Targets of gate mode: GRES, nodes, start delay (requeued jobs), decision file and
    release for a start; USR2 + requeue-hold for a pre-emption / resize onto other GPUs.  A
    resize that keeps a running job on the GPUs it holds (``held_gpus``: job id -> GPUs) is a
    GIMBAL squeeze/swell (seed 004): only the job's launcher decision changes (new MPS share,
    sample stealing), gimbal-run applies it without a requeue.  A start is applied only to a
    job whose hold gimbal may release (:func:`own_hold`; ``hold_actions``: job id -> gimbal's
    newest hold/release change).  ``typed_gres``: the release changes GRES types
    (:func:`gate_gres`); without it a job whose request names a GPU type is started only on
    nodes of that type."""
    now = time.time() if now is None else now
    held_gpus = held_gpus or {}
    hold_actions = hold_actions or {}
    out: list[Target] = []
    for a in plan.actions:
        sj = sjobs.get(a.job_id)
        if sj is None or not sj.gated:
            continue
        if isinstance(a, StartJob):
            if not (sj.pending and sj.held):
                continue
            if not own_hold(sj, hold_actions.get(sj.job_id)):
                who = "an admin" if sj.reason == "JobHeldAdmin" else "its user or an admin"
                warnings.append(f"job {sj.job_id}: held by {who} ({sj.reason}), not by gimbal; "
                                f"left held (gimbal releases only its own holds)")
                continue
            whole = _whole_gpu_partners(a, sjobs)
            if whole:
                warnings.append(f"job {sj.job_id}: not started: the plan packs it beside "
                                f"{', '.join(whole)}, which hold(s) the GPU(s) as whole gres/gpu; "
                                f"Slurm cannot place a gres/mps or gres/shard job there")
                continue
            want = target_gpu_type(a, nodes)
            if not typed_gres and sj.gpu_type_req and want and \
                    sj.gpu_type_req.lower() != want.lower():
                warnings.append(f"job {sj.job_id}: its GRES asks for GPU type "
                                f"{sj.gpu_type_req!r}; this Slurm release cannot change the type "
                                f"of a pending job, so it is not started on {want!r} nodes "
                                f"(submit gate jobs without a type: gsbatch --gate --gpus N)")
                continue
            delayed = bool(sj.restarts and sj.eligible_time and sj.eligible_time > now)
            since = now - (sj.eligible_time - REQUEUE_DELAY_S) if delayed else REQUEUE_SETTLE_S
            if since < REQUEUE_SETTLE_S:
                # slurmd refuses a launch in the same second as the requeue's kill ("Job
                # credential revoked"; the job then ends FAILED, seen on 22.05): next cycle
                warnings.append(f"job {sj.job_id}: requeued {max(since, 0.0):.1f} s ago; "
                                f"started by a later cycle (slurmd refuses a launch right "
                                f"after the requeue)")
                continue
            gres = gate_gres(a, sj, nodes, cfg, warnings, typed=typed_gres)
            hosts = sorted({g.node for g in a.gpus})
            out.append(Target(sj.job_id, "gres", gres, "plan: start"))
            out.append(Target(sj.job_id, "req_nodes", ",".join(hosts), "plan: start"))
            if delayed:
                # a requeue (our pre-emption) makes Slurm hold the job back ~2 min
                out.append(Target(sj.job_id, "begin_time", "now", "plan: start (requeued)"))
            out.append(Target(sj.job_id, "decision", a, "plan: start"))
            out.append(Target(sj.job_id, "release", True, "plan: start"))
        elif isinstance(a, ResizeJob) and sj.running and a.workers and \
                tuple(a.gpus) == tuple(held_gpus.get(sj.job_id, ())):
            nums = plan.reasons[a.job_id].numbers if a.job_id in plan.reasons else {}
            why = "plan: squeeze/swell on the same GPUs"
            if "objective_before" in nums and "objective_after" in nums:
                why += (f" (local objective {nums['objective_before']:.6g} -> "
                        f"{nums['objective_after']:.6g})")
            out.append(Target(sj.job_id, "decision", a, why))
        elif isinstance(a, (PreemptJob, ResizeJob)) and sj.running:
            why = RESIZE_REASON if isinstance(a, ResizeJob) else f"plan: {type(a).__name__}"
            if isinstance(a, ResizeJob):
                why = f"{why} ({len(held_gpus.get(sj.job_id, ()))} -> {len(a.gpus)} GPUs)"
            out.append(Target(sj.job_id, "signal", "USR2", why))
            out.append(Target(sj.job_id, "requeue_hold", "PENDING", why))
    return out


RESIZE_REASON = "plan: ResizeJob"
REQUEUE_DELAY_S = 120.0  # Slurm's start delay of a requeued job (EligibleTime, docs/slurm.md)
REQUEUE_SETTLE_S = 2.0  # no restart sooner after a requeue (see gate_targets; EligibleTime is
#                         requeue + 120 to 121 s, so this is 2 to 3 s)


def defer_resizes(plan: Plan, snap: SnapshotResult, interval: float,
                  last_resize: dict[str, float], now: float) -> tuple[Plan, dict[str, str]]:
    """Bound churn (gate mode, ``gate.min_resize_interval``): a ``ResizeJob`` that would
    requeue a running gated job onto other GPUs less than ``interval`` seconds after its last
    resize (``last_resize``: job id -> unix time, from the audit) is taken out of the plan,
    and the job keeps its GPUs.  The policy stays pure; the daemon filters its plan.

    Actions that need GPUs a deferred job keeps cannot run either: a start on them waits, a
    resize onto them is deferred too (repeated until nothing changes).  Each such job's
    reason says why, with the policy's numbers kept (``explain`` shows both); returns the
    filtered plan and job id -> the message."""
    if interval <= 0 or not plan.resizes():
        return plan, {}
    held = {j.id: tuple(j.allocation.gpus) for j in snap.snapshot.jobs.values()
            if j.running and j.allocation is not None}
    sjobs = snap.slurm_jobs
    why: dict[str, str] = {}
    for a in plan.resizes():
        sj = sjobs.get(a.job_id)
        last = last_resize.get(a.job_id)
        if sj is None or not sj.gated or not sj.running or last is None:
            continue
        if tuple(a.gpus) == held.get(a.job_id, ()):  # same GPUs: no requeue (GIMBAL squeeze)
            continue
        ago = max(0.0, now - last)
        if ago < interval:
            why[a.job_id] = (f"resize {len(held.get(a.job_id, ()))} -> {len(a.gpus)} GPUs "
                             f"deferred: last resized {ago:.0f} s ago, gate.min_resize_interval "
                             f"is {interval:g} s (next allowed in {interval - ago:.0f} s)")
    if not why:
        return plan, {}
    kept = {a.job_id: a for a in plan.actions}
    changed = True
    while changed:
        changed = False
        blocked = {g: j for j in why for g in held.get(j, ())}
        for jid, a in list(kept.items()):
            if jid in why or not isinstance(a, (StartJob, ResizeJob)):
                continue
            mine = set(held.get(jid, ()))
            hit = sorted({blocked[g] for g in a.gpus if g in blocked and g not in mine})
            if hit:
                what = "resize" if isinstance(a, ResizeJob) else "start"
                why[jid] = (f"{what} on {len(a.gpus)} GPUs deferred: GPUs still held by job(s) "
                            f"{', '.join(hit)}, whose resize is deferred (gate.min_resize_interval)")
                changed = True
        for jid in why:
            kept.pop(jid, None)
    reasons = dict(plan.reasons)
    waiting: list[str] = []
    for jid, text in why.items():
        old = plan.reasons.get(jid)
        nums = dict(old.numbers) if old else {}
        if jid in held:
            nums["held_gpus"] = float(len(held[jid]))
            if jid in last_resize:
                nums["resize_wait_s"] = float(max(0.0, interval - (now - last_resize[jid])))
            reasons[jid] = reason(ReasonCode.KEEP_RUNNING, text, **nums)
        else:
            waiting.append(jid)
            reasons[jid] = reason(ReasonCode.WAIT_RESOURCES, text, **nums)
    actions = [a for a in plan.actions if a.job_id not in why]
    order = waiting + [j for j in plan.order if j not in waiting]
    return make_plan(plan.policy, actions, order, reasons, list(plan.infeasible)), why


def compute_targets(cfg: Config, plan: Plan, snap: SnapshotResult, nodes: list[SlurmNode],
                    warnings: list[str], hold_actions: Optional[dict[str, str]] = None,
                    typed_gres: bool = False) -> tuple[list[str], list[Target]]:
    sjobs = dict(snap.slurm_jobs)
    pending = [j for j, sj in sjobs.items() if sj.pending]
    order = queue_order(plan, pending)
    node_map = {n.name: n for n in nodes}
    if cfg.mode == "ordering":
        ignored = [a for a in plan.actions if isinstance(a, (PreemptJob, ResizeJob))]
        if ignored:
            warnings.append(f"ordering mode: {len(ignored)} pre-empt/resize action(s) not applied "
                            f"(use --mode gate with gsbatch --gate jobs)")
        return order, ordering_targets(cfg, order, sjobs, warnings)
    held = {j.id: j.allocation.gpus for j in snap.snapshot.jobs.values()
            if j.running and j.allocation is not None}
    gated = gate_targets(cfg, plan, sjobs, node_map, warnings, now=snap.snapshot.now,
                         held_gpus=held, hold_actions=hold_actions, typed_gres=typed_gres)
    rest = [j for j in order if not sjobs[j].gated]
    return order, gated + ordering_targets(cfg, rest, sjobs, warnings)


# ---------------------------------------------------------------- apply
def _crash_point(name: str) -> None:
    """Test hook: ``GIMBAL_TEST_CRASH=<name>`` kills the process at that point."""
    if os.environ.get("GIMBAL_TEST_CRASH") == name:
        log.error("GIMBAL_TEST_CRASH=%s: exiting abruptly", name)
        os._exit(137)


def _pause_point(name: str) -> None:
    """Test hook: ``GIMBAL_TEST_PAUSE=<name>:<seconds>`` sleeps at that point (so a test can
    signal the daemon while a cycle is in progress)."""
    spec = os.environ.get("GIMBAL_TEST_PAUSE", "")
    if spec.partition(":")[0] == name:
        time.sleep(float(spec.partition(":")[2] or 1))


def reconcile(store, backend: Backend, sjobs: dict[str, SlurmJob], state_dir: str) -> dict[str, int]:
    """Resolve audit rows left ``pending`` by a cycle that died; close such cycles."""
    from .store.db import loads
    counts: dict[str, int] = {}
    for row in store.audit_rows(status="pending"):
        sj = sjobs.get(row.job_id)
        intended = loads(row.after)
        if row.field in FIELDS and sj is not None:
            cur = FIELDS[row.field](sj)
            if row.field in ("signal", "requeue_hold"):
                done = sj.pending
            elif row.field == "begin_time":
                done = not sj.eligible_time or sj.eligible_time <= time.time()
            else:
                done = _same(row.field, cur, intended)
        elif row.field == "decision":
            from launcher.decision import decision_path
            cur = None
            done = os.path.exists(decision_path(row.job_id, root=state_dir))
        else:
            cur, done = None, False
        status = "reconciled" if done else "abandoned"
        store.audit_result(row.id, status, read_back=cur,
                           error=None if done else "cycle died before this change was confirmed")
        counts[status] = counts.get(status, 0) + 1
    for cyc in store.unfinished_cycles():
        store.finish_cycle(cyc.id, "interrupted", error="the daemon stopped during this cycle",
                           n_changes=cyc.n_changes)
        counts["cycles"] = counts.get("cycles", 0) + 1
    return counts


def _mps_ceiling(workers, job_pct):
    """The job-level MPS thread share of a decision with a per-worker record: the largest
    worker share (gimbal-run puts it in the job's environment; each rank then lowers its own
    to its record's value, ``launcher.mps.rank_mps_env``, never raising it).  A worker without
    a limit beside one with a limit means no job-level limit.  Without a record, or a record
    that names no share: the action's own share."""
    pcts = [w.mps_pct for w in workers or ()]
    if all(p is None for p in pcts):
        return job_pct
    return None if any(p is None for p in pcts) else max(pcts)


def _decision_for(a, sj: SlurmJob, snap: SnapshotResult, policy: str, old=None):
    """The launcher decision of a start: job-level fields plus the per-worker record
    (the plan's ``workers``, else the even split of the batch in force), which gimbal-run
    applies and echoes back in its reports (docs/architecture.md).  For a same-GPU resize
    (GIMBAL squeeze/swell, seed 004) it is the decision in force with the new MPS share and
    per-worker record, and sample stealing on when the shares are uneven (LISS); batch,
    micro-batch and accumulation stay."""
    from launcher.decision import LauncherDecision
    from .records import workers_to_wire
    job = snap.snapshot.jobs.get(sj.job_id)
    if isinstance(a, ResizeJob) and old is not None:
        uneven = len({w.share for w in a.workers}) > 1
        return dataclasses.replace(old, policy=policy,
                                   mps_thread_pct=_mps_ceiling(a.workers, a.mps_pct),
                                   stealing=True if uneven else old.stealing, written_at=None,
                                   workers=tuple(workers_to_wire(a.workers)) or old.workers)
    gb = a.global_batch or (job.global_batch if job else None)
    refused = job is not None and gb != job.global_batch and not batch_allowed(job, gb)
    if refused:  # the job's metadata does not allow this batch: never written
        log.warning("job %s: plan's global batch %s not allowed by the job's metadata (%s); "
                    "keeping its batch %s", sj.job_id, gb,
                    "no --allow-batch-change" if job.batch_range is None else
                    f"batchrange {job.batch_range[0]}:{job.batch_range[1]}", job.global_batch)
        gb = job.global_batch
    sub = max(1, a.sub_batch if not gb or a.sub_batch <= gb else gb)
    accum = max(1, a.accum_steps)
    mps = a.mps_pct
    if a.workers and not refused:
        workers = a.workers
        mps = _mps_ceiling(workers, mps)
    else:
        workers = uniform_workers(tuple(a.gpus), sub, accum, mps, gb) if gb and a.gpus else ()
    share_with = getattr(a, "share_with", ())
    return LauncherDecision(job_id=sj.job_id, policy=policy, sub_batch=sub,
                            accum_steps=accum, global_batch=gb,
                            mps_thread_pct=mps, share_with=",".join(share_with) or None,
                            stealing=bool(share_with) or None,
                            workers=tuple(workers_to_wire(workers)) or None)


def _version(backend: Backend) -> tuple:
    try:
        return tuple(backend.version())
    except Exception as e:  # noqa: BLE001 - an unknown release is treated as the oldest
        log.warning("cannot read the Slurm release (%s); GPU types by node pinning only", e)
        return (0, 0, 0)


def batch_allowed(job, batch: Optional[int]) -> bool:
    """Whether ``batch`` may run for ``job``: its submitted batch, or one inside the
    ``Job.batch_range`` its metadata grants (``gsbatch --allow-batch-change``)."""
    if batch is None or batch == job.global_batch:
        return True
    return job.batch_range is not None and job.batch_range[0] <= batch <= job.batch_range[1]


def read_decisions(state_dir: str, jobs) -> dict:
    """Launcher decision files of the running jobs (job id -> ``LauncherDecision``); a
    missing or unreadable file is left out (the snapshot falls back to the even split)."""
    from launcher.decision import decision_path, read_decision
    out = {}
    for sj in jobs:
        if not sj.running:
            continue
        try:
            out[sj.job_id] = read_decision(decision_path(sj.job_id, root=state_dir))
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as e:
            log.warning("job %s: unreadable launcher decision (%s); not used", sj.job_id, e)
    return out


def describe_target(backend: Backend, t: Target, cfg: Config) -> list[str]:
    if t.field == "decision":
        from launcher.decision import decision_path
        return ["write", decision_path(t.job_id, root=cfg.state_dir)]
    return list(backend.describe(t.job_id, t.field, t.value))


def apply_targets(cfg: Config, backend: Backend, store, cycle_id: Optional[int],
                  targets: list[Target], snap: SnapshotResult, policy: str,
                  dry_run: bool) -> list:
    """Change only what differs; record intent before and result after each change."""
    from launcher.decision import decision_path, read_decision, write_decision
    from .slurm.types import Change
    changes = []
    failed_jobs: set[str] = set()
    n = 0
    for t in targets:
        sj = snap.slurm_jobs[t.job_id]
        if t.job_id in failed_jobs:  # an earlier step for this job failed: do not release it
            continue
        if t.field == "decision":
            path = decision_path(t.job_id, root=cfg.state_dir)
            try:
                old_dec = read_decision(path)
                old = old_dec.to_dict()
                old.pop("written_at", None)
            except (FileNotFoundError, ValueError):
                old_dec = old = None
            try:
                dec = _decision_for(t.value, sj, snap, policy, old_dec)
            except ValueError as e:  # a plan whose record the launcher cannot take: this job only
                log.warning("job %s: not writing its launcher decision: %s", t.job_id, e)
                changes.append(Change(t.job_id, "decision", None, None, ("write", path),
                                      error=f"{path}: {e}"))
                failed_jobs.add(t.job_id)
                continue
            new = dec.to_dict()
            new.pop("written_at", None)
            if old == new:
                continue
            ch = Change(t.job_id, "decision", old, new, ("write", path))
            if dry_run:
                changes.append(ch)
                continue
            aid = store.audit_intent(cycle_id, t.job_id, "decision", old, new, list(ch.argv),
                                     reason=t.why)
            try:
                write_decision(path, dec)
                ch = dataclasses.replace(ch, applied=True, read_back=read_decision(path).to_dict())
                store.audit_result(aid, "applied", ch.read_back)
            except (OSError, ValueError) as e:
                ch = dataclasses.replace(ch, error=f"{path}: {e}")
                store.audit_result(aid, "failed", None, ch.error)
                failed_jobs.add(t.job_id)
            changes.append(ch)
            continue
        cur = FIELDS[t.field](sj)
        if t.field not in ("signal", "requeue_hold", "begin_time") and _same(t.field, cur, t.value):
            continue
        if dry_run:
            changes.append(backend.change(t.job_id, t.field, t.value, before=sj, dry_run=True,
                                          force=True))
            continue
        argv = list(backend.describe(t.job_id, t.field, t.value))
        aid = store.audit_intent(cycle_id, t.job_id, t.field, cur, t.value, argv, reason=t.why)
        n += 1
        if n == 1:
            _crash_point("after_first_intent")
        ch = backend.change(t.job_id, t.field, t.value, before=sj, force=True)
        if ch.error:
            store.audit_result(aid, "failed", ch.read_back, ch.error)
            failed_jobs.add(t.job_id)
        else:
            store.audit_result(aid, "applied", ch.read_back)
        changes.append(ch)
        if t.field == "signal" and not ch.error and cfg.preempt_grace > 0:
            time.sleep(cfg.preempt_grace)
        if t.field == "requeue_hold" and not ch.error:
            store.bump_preemptions(t.job_id)
    return changes


# ---------------------------------------------------------------- cycle
def read_slurm(backend: Backend) -> tuple[list[SlurmJob], list[SlurmNode]]:
    backend.version()
    return backend.jobs(), backend.nodes()


def report_job_info(jobs: list[SlurmJob]) -> dict[str, dict]:
    """Job id -> app / GPU count / shared GPU of the jobs Slurm lists, for attributing launcher
    reports to a throughput profile.  Only an app the job named counts (never the default)."""
    out = {}
    for sj in jobs:
        if not sj.meta.app:
            continue
        shared = any(u.name in ("shard", "mps") for u in sj.gres_alloc) or \
            bool(sj.gres_req.get("shard") or sj.gres_req.get("mps"))
        out[sj.job_id] = {"app": sj.meta.app, "num_gpus": sj.num_gpus, "shared": shared}
    return out


def report_owners(jobs: list[SlurmJob]) -> dict[str, int]:
    """Job id -> uid of the job's user (Slurm's user name resolved on this host), for the
    owner check of launcher report files; a user this host cannot resolve is left out (that
    job's reports wait unread)."""
    import pwd
    uids: dict[str, Optional[int]] = {}
    out = {}
    for sj in jobs:
        if sj.user not in uids:
            try:
                uids[sj.user] = pwd.getpwnam(sj.user).pw_uid
            except (KeyError, TypeError, ValueError):
                uids[sj.user] = None
        if uids[sj.user] is not None:
            out[sj.job_id] = uids[sj.user]
    return out


_PREDICTORS: dict = {}  # sacct path -> (mtime, fitted at, kind, predictor, history)
_SITE: dict = {}  # (backend, cluster, [predictor] settings) -> SiteHistory


def _unseen_rule(cfg: Config, pred):
    if cfg.predictor_unseen == "time-limit" and hasattr(pred, "unseen"):
        return dataclasses.replace(pred, unseen="fallback")
    return pred


def site_history(cfg: Config, backend: Optional[Backend], now: float, warnings: list,
                 job_rows: Optional[dict] = None, reports: Optional[dict] = None,
                 background: bool = True, first_wait: bool = True) -> tuple[tuple, Optional[Any]]:
    """Seed 003: (history, predictor) from the site's finished jobs, ``((), None)`` when not
    configured.  ``[predictor] history = "slurm"``: sacct through ``backend``
    (:class:`gimbalctl.site_history.SiteHistory`; refreshed in the background every
    ``refit`` s, so a cycle never waits for it after the first; with ``first_wait=False``
    not even the first), plus the store's job rows and
    launcher reports; ``[predictor] sacct = FILE``: that file (refitted every ``refit`` s or
    when it changes).  A history that cannot be read is a warning, never a failed cycle (the
    policy then falls back to time limits)."""
    if cfg.predictor_history == "slurm" and backend is not None:
        from .site_history import SiteHistory
        from .slurm.errors import SlurmError
        try:
            cluster = backend.cluster_name()
        except SlurmError as e:
            warnings.append(f"predictor: cannot name the cluster ({e}); no history this cycle")
            return (), None
        key = (backend.name, cluster, tuple(getattr(backend, "prefix", ()) or ()),
               cfg.predictor_kind, cfg.predictor_refit, cfg.predictor_days,
               cfg.predictor_max_rows, cfg.predictor_timeout, cfg.predictor_unseen)
        sh = _SITE.get(key)
        if sh is None:
            sh = _SITE[key] = SiteHistory(cfg.predictor_kind, cfg.predictor_refit,
                                          cfg.predictor_days, cfg.predictor_max_rows,
                                          cfg.predictor_timeout, cfg.predictor_unseen)
        fitted = sh.get(backend, job_rows or {}, reports or {}, now, warnings, background,
                        first_wait)
        return (fitted.history, fitted.predictor) if fitted is not None else ((), None)
    path = cfg.predictor_sacct
    if not path:
        return (), None
    from .predictor import FITTERS, history_from_sacct
    from .traces import TraceError
    try:
        mtime = os.stat(path).st_mtime
        hit = _PREDICTORS.get(path)
        if hit and hit[0] == mtime and hit[2] == cfg.predictor_kind \
                and now - hit[1] < cfg.predictor_refit:
            return hit[4], _unseen_rule(cfg, hit[3])
        hist = tuple(sorted(history_from_sacct(path), key=lambda f: (f.end_time, f.id)))
        pred = FITTERS[cfg.predictor_kind](hist)
    except (OSError, TraceError, ValueError) as e:
        warnings.append(f"predictor: {path}: {e}; predicting from time limits")
        return (), None
    _PREDICTORS[path] = (mtime, now, cfg.predictor_kind, pred, hist)
    return hist, _unseen_rule(cfg, pred)


def with_history(snap: SnapshotResult, history: tuple, pred) -> SnapshotResult:
    """The snapshot with the finished-job history and the fitted predictor (the measured
    rates and other predictors the builder put there stay), and each job's predicted length
    and its source in ``inputs`` (for ``queue``/``explain``)."""
    if pred is None and not history:
        return snap
    from policies.asrpt_core import prediction
    preds = dict(snap.snapshot.predictors)
    if pred is not None:
        preds["iterations"] = pred
    s2 = dataclasses.replace(snap.snapshot, history=tuple(history), predictors=preds)
    for jid, job in s2.jobs.items():
        if jid in snap.inputs:
            val, unit, src = prediction(s2, job, False)
            snap.inputs[jid].update(predicted=val, predicted_unit=unit, prediction_source=src,
                                    history_jobs=len(history))
    return dataclasses.replace(snap, snapshot=s2)


def run_cycle(cfg: Config, backend: Backend, store, policy, models=None,
              dry_run: bool = False, now: Optional[float] = None,
              wait_history: bool = True) -> CycleResult:
    """One cycle.  Slurm is read before anything else is written.  A cycle that raises is
    recorded ``failed`` with the error (its cycle row if it got one, else a new row) and the
    exception propagates; audit rows it left ``pending`` are reconciled by the next cycle.
    ``wait_history=False`` (the loop daemon): even the first read of the sacct history runs
    in the background (:func:`site_history`); ``daemon --once`` waits for it."""
    state: dict = {"wait_history": wait_history}
    try:
        return _run_cycle(cfg, backend, store, policy, models, dry_run, now, state)
    except Exception as e:
        if not dry_run:
            record_failure(store, cfg, getattr(policy, "name", cfg.policy), backend, e,
                           cycle_id=state.get("cycle_id"))
        raise


def error_text(e: BaseException) -> str:
    from .slurm.errors import SlurmUnavailable as _SU
    what = "Slurm unavailable" if isinstance(e, _SU) else type(e).__name__
    return f"{what}: {e}"[:4000]


def record_failure(store, cfg: Config, policy: str, backend: Optional[Backend],
                   e: BaseException | str, cycle_id: Optional[int] = None,
                   status: str = "failed") -> Optional[int]:
    """Best effort: mark ``cycle_id`` (or a new cycle row) ``status`` with the error.  A store
    that cannot be written is logged, never raised (the original error matters more)."""
    msg = e if isinstance(e, str) else error_text(e)
    try:
        if cycle_id is not None:
            store.finish_cycle(cycle_id, status, error=msg)
            return cycle_id
        release = ""
        if backend is not None and backend._ver is not None:
            release = backend.release
        return store.record_cycle(policy=policy, mode=cfg.mode, knob=cfg.knob,
                                  backend=backend.name if backend is not None else cfg.backend,
                                  release=release, status=status, error=msg)
    except Exception as e2:  # noqa: BLE001 - e.g. the store is what failed
        log.warning("could not record the %s cycle in the state store: %s", status, e2)
        return None


def _run_cycle(cfg: Config, backend: Backend, store, policy, models, dry_run: bool,
               now: Optional[float], state: dict) -> CycleResult:
    if models is None:
        models = cfg.models()
    jobs, nodes = read_slurm(backend)
    problems = input_problems(backend, jobs)
    job_rows = store.job_rows()
    jobs = restore_meta(jobs, job_rows)
    sjobs = {j.job_id: j for j in jobs}
    reconciled = {} if dry_run else reconcile(store, backend, sjobs, cfg.state_dir)
    if not dry_run:
        store.ingest_reports(os.path.join(cfg.state_dir, "reports"), job_info=report_job_info(jobs),
                             owners=report_owners(jobs))
    penalised: frozenset = frozenset()
    if cfg.estimates == "bounded" and cfg.estimate_penalty_s > 0:
        import datetime as _dt
        since = _dt.datetime.now(_dt.timezone.utc).replace(tzinfo=None) - \
            _dt.timedelta(seconds=cfg.estimate_penalty_s)
        penalised = frozenset(store.users_outran_since(since))
    reports = store.latest_reports()
    snap = build_snapshot(jobs, nodes, models, now=now, db_profiles=store.profiles(),
                          history=job_rows, reports=reports,
                          default_app=cfg.default_app, default_batch=cfg.default_batch,
                          decisions=read_decisions(cfg.state_dir, jobs),
                          estimates=cfg.estimates, penalised_users=penalised,
                          pipeline_apps=getattr(policy, "pipeline_models", False))
    warnings = problems + list(snap.warnings)
    history, pred = site_history(cfg, backend, snap.snapshot.now, warnings, job_rows, reports,
                                 first_wait=state.get("wait_history", True))
    snap = with_history(snap, history, pred)
    plan = decide(policy, snap.snapshot)
    if cfg.mode == "gate" and cfg.min_resize_interval > 0 and plan.resizes():
        resizing = [a.job_id for a in plan.resizes()]
        plan, deferred = defer_resizes(plan, snap, cfg.min_resize_interval,
                                       store.last_resizes(resizing, RESIZE_REASON),
                                       snap.snapshot.now)
        for jid, text in deferred.items():
            log.info("job %s: %s", jid, text)
    hold_actions = store.last_hold_actions(
        [j for j, sj in sjobs.items() if sj.gated and sj.held]) if cfg.mode == "gate" else {}
    typed = cfg.mode == "gate" and any(n.gres_type for n in nodes) and \
        _version(backend) >= TYPED_GRES_FROM
    order, targets = compute_targets(cfg, plan, snap, nodes, warnings, hold_actions,
                                     typed_gres=typed)
    pos = {j: i for i, j in enumerate(order)}
    tmap: dict[str, dict] = {}
    for t in targets:
        tmap.setdefault(t.job_id, {})[t.field] = t.value if t.field != "decision" else "write"
    acts = {a.job_id: a for a in plan.actions}
    job_decisions = []
    for jid in snap.inputs:
        r = plan.reasons.get(jid)
        a = acts.get(jid)
        job_decisions.append(dict(
            job_id=jid, position=pos.get(jid), reason_code=r.code.value if r else "none",
            reason_text=r.text if r else "", numbers=dict(r.numbers) if r else {},
            action=_action_dict(a), target=tmap.get(jid)))
    cycle_id = None
    if not dry_run:
        seen = [dict(job_id=sj.job_id, name=sj.name, user=sj.user, app=sj.meta.app,
                     batch=sj.meta.batch, iters=sj.meta.iters, est_s=sj.meta.est,
                     gate=int(sj.gated), num_gpus=sj.num_gpus, submit_time=sj.submit_time,
                     state=sj.state, meta_warnings="\n".join(sj.meta.warnings) or None,
                     **({"meta": sj.meta.as_dict()} if sj.meta.source == "admin_comment" else {}))
                for sj in snap.slurm_jobs.values()]
        cycle_id = store.begin_cycle(
            policy=plan.policy, mode=cfg.mode, knob=cfg.knob, backend=backend.name,
            release=backend.release, dry_run=False, jobs=seen, plan=plan.as_dict(),
            inputs={k: dict(v) for k, v in snap.inputs.items()}, job_decisions=job_decisions)
        state["cycle_id"] = cycle_id
        _crash_point("after_plan")
        store.set_cycle_status(cycle_id, "applying")
        _pause_point("applying")
    changes = apply_targets(cfg, backend, store, cycle_id, targets, snap, plan.policy, dry_run)
    failed = [c for c in changes if c.error]
    status = "dry_run" if dry_run else ("partial" if failed or problems else "done")
    if not dry_run:
        if snap.outran:
            store.mark_outran(snap.outran)
        why = [f"{len(failed)} Slurm change(s) failed"] if failed else []
        why += [f"input: {p}" for p in problems]
        store.finish_cycle(cycle_id, status, error=_bounded("; ".join(why)) or None,
                           n_changes=sum(1 for c in changes if c.applied))
    return CycleResult(cycle_id, plan, snap, order, targets, changes, reconciled, warnings, status)


def input_problems(backend: Backend, jobs: list[SlurmJob]) -> list[str]:
    """One message per record Slurm reported that gimbal had to skip or repair, naming the
    job (or node): the cycle goes on without (or with the repaired) record and is recorded
    ``partial`` with these as its reason."""
    out = list(getattr(backend, "read_warnings", ()) or ())
    out += list(getattr(backend, "node_warnings", ()) or ())
    for sj in jobs:
        if sj.warnings and sj.state in ("PENDING", "RUNNING", "SUSPENDED"):  # ended: not used
            out.append(f"job {sj.job_id}: " + "; ".join(sj.warnings))
    return out


def restore_meta(jobs: list[SlurmJob], rows: dict) -> list[SlurmJob]:
    """Jobs whose AdminComment no longer holds gimbal's tag (another tool, such as jobstats'
    ``JS1:`` summary, wrote it) get the metadata gimbal read from it earlier (``jobs.meta``)."""
    out = []
    for sj in jobs:
        row = rows.get(sj.job_id)
        kept = getattr(row, "meta", None) if row is not None else None
        if not sj.meta.tagged and kept:
            sj = dataclasses.replace(sj, meta=GimbalMeta.from_state(kept))
        out.append(sj)
    return out


def _bounded(text: str, limit: int = 4000) -> str:
    return text if len(text) <= limit else text[:limit] + f" ... ({len(text) - limit} more characters)"


def _action_dict(a) -> Optional[dict]:
    if a is None:
        return None
    d = {"action": type(a).__name__}
    if isinstance(a, (StartJob, ResizeJob)):
        d.update(gpus=[f"{g.node}:{g.index}" for g in a.gpus], sub_batch=a.sub_batch,
                 accum_steps=a.accum_steps, mps_pct=a.mps_pct)
    if isinstance(a, StartJob):
        d["share_with"] = list(a.share_with)
    return d


# ---------------------------------------------------------------- revert
def revert(backend: Backend, store, dry_run: bool = False, job_ids: Optional[list[str]] = None) -> list:
    """Undo gimbal's changes to still-pending jobs, from the audit log.

    * priority: hold + release (Slurm recomputes its own priority);
    * site_factor / nice / req_nodes / gres: back to the value before gimbal's first change;
    * release of a gate job that is still pending: hold it again.
    Running/ended jobs are left alone.  Reverted rows get status ``reverted``.
    """
    from .store.db import loads
    # rows of earlier reverts are not gimbal's changes: undoing them would re-apply gimbal's value
    own = store.cycle_ids(mode="revert")
    rows = [r for r in store.audit_rows() if r.status in ("applied", "reconciled")
            and r.cycle_id not in own and (not job_ids or r.job_id in job_ids)]
    first: dict[tuple[str, str], Any] = {}
    ids: dict[tuple[str, str], list[int]] = {}
    for r in rows:
        key = (r.job_id, r.field)
        first.setdefault(key, loads(r.before))
        ids.setdefault(key, []).append(r.id)
    sjobs = {j.job_id: j for j in backend.jobs()}
    plan_steps: list[tuple[str, str, Any, tuple]] = []
    for (jid, fld), before in first.items():
        sj = sjobs.get(jid)
        if sj is None or not sj.pending:
            continue
        if fld == "priority":
            if sj.held or (jid, "release") in first:  # a gate job is held again below
                continue
            plan_steps.append((jid, "hold", True, (jid, fld)))
            plan_steps.append((jid, "release", True, (jid, fld)))
        elif fld in ("site_factor", "nice"):
            plan_steps.append((jid, fld, int(before or 0), (jid, fld)))
        elif fld in ("req_nodes", "gres"):
            plan_steps.append((jid, fld, before or "", (jid, fld)))
        elif fld == "release":
            plan_steps.append((jid, "hold", True, (jid, fld)))
    # hold a released gate job before its GRES / ReqNodeList are cleared: in between, Slurm
    # could start it without GPUs (stable sort: everything else keeps its order)
    plan_steps.sort(key=lambda s: s[3][1] != "release")
    changes = []
    if dry_run:
        from .slurm.types import Change
        return [Change(j, f, FIELDS[f](sjobs[j]), v, tuple(backend.describe(j, f, v)))
                for j, f, v, _ in plan_steps]
    cycle_id = store.begin_cycle(policy="revert", mode="revert", knob="-", backend=backend.name,
                                 release=backend.release, dry_run=False, jobs=[], plan={},
                                 inputs={}, job_decisions=[]) if plan_steps else None
    done_keys: dict[tuple, bool] = {}
    for jid, fld, val, key in plan_steps:
        sj = backend.job(jid)
        cur = FIELDS[fld](sj)
        if _same(fld, cur, val) and fld not in ("hold", "release"):
            done_keys.setdefault(key, True)
            continue
        if fld == "hold" and sj.held:
            continue
        argv = list(backend.describe(jid, fld, val))
        aid = store.audit_intent(cycle_id, jid, f"revert:{fld}" if fld in ("hold", "release")
                                 and key[1] == "priority" else fld, cur, val, argv,
                                 reason=f"revert gimbal's {key[1]}")
        ch = backend.change(jid, fld, val, before=sj, force=True)
        store.audit_result(aid, "failed" if ch.error else "applied", ch.read_back, ch.error)
        done_keys[key] = done_keys.get(key, True) and not ch.error
        changes.append(ch)
    for key, ok in done_keys.items():
        if ok:
            for rid in ids[key]:
                store.audit_result(rid, "reverted", None)
    if cycle_id is not None:
        store.finish_cycle(cycle_id, "partial" if any(c.error for c in changes) else "done",
                           n_changes=len(changes))
    return changes


# ---------------------------------------------------------------- loop
def loop(cfg: Config, make_cycle: Callable[[], int], sleep: Callable[[float], None] = time.sleep,
         max_cycles: Optional[int] = None) -> int:
    """Run ``make_cycle`` every ``cfg.interval`` s (start to start is at least the interval)
    until SIGTERM/SIGINT.

    A signal never interrupts a cycle: it is noted, the running cycle finishes (its audit and
    status are written), and the loop ends before the next one; a signal during the pause
    ends it within 0.25 s.  A cycle that fails (Slurm down, state store error, an exception)
    is logged and the loop carries on.  Returns :attr:`Exit.OK` when stopped by a signal,
    else (``max_cycles`` reached) the last cycle's status.
    """
    stop = {"signal": None}

    def _stop(signum, _frame):
        log.info("signal %d: stopping after the current cycle", signum)
        stop["signal"] = signum

    old = {s: _signal.signal(s, _stop) for s in (_signal.SIGTERM, _signal.SIGINT)}
    n = 0
    rc = Exit.OK
    try:
        while stop["signal"] is None:
            t_start = time.monotonic()
            n += 1
            try:
                rc = make_cycle()
            except Exception:  # noqa: BLE001 - a daemon outlives one bad cycle
                log.exception("cycle %d failed; next one in %g s", n, cfg.interval)
                rc = Exit.ERROR
            log.info("cycle %d finished (status %d)", n, rc)
            if max_cycles is not None and n >= max_cycles:
                break
            t_end = t_start + cfg.interval
            while stop["signal"] is None and time.monotonic() < t_end:
                sleep(min(0.25, max(0.0, t_end - time.monotonic())))
    finally:
        for s, h in old.items():
            _signal.signal(s, h)
    if stop["signal"] is not None:
        log.info("stopped by signal %d after %d cycle(s)", stop["signal"], n)
        return Exit.OK
    return rc
