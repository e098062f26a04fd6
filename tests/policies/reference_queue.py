"""Verbatim copy of the helpers of policies/base.py as they were before the lazy reasons
and the simulator's waiting order (issue #13): ``keep_running_reasons``,
``schedule_nonpreemptive`` and ``schedule_preemptive``, plus ``pending``, the sorting
``ClusterSnapshot.pending`` of then.  The differential test
(test_queue_differential.py) runs fifo, sjf, srtf, srsf and tiresias with these in place of
the package's and compares the Plans.

Also verbatim: the ``schedule`` methods of Sjf, PreemptiveByKey (SRTF, SRSF) and Tiresias
as they were before their waiting orders were kept across calls (policies/kept_order.py):
each sorts the waiting (or every active) job per call by its key."""
from __future__ import annotations

from typing import Callable

from policies.base import exclusive_config, free_gpus_of, leased
from policies.model import ClusterSnapshot, Job
from policies.plan import Plan, PreemptJob, ReasonCode, StartJob, make_plan, reason

_KEEP = reason(ReasonCode.KEEP_RUNNING, "running; the plan leaves it as it is")
_SUBMIT_ORDER = lambda j: (j.submit_time, j.id)  # noqa: E731


def pending(self) -> tuple[Job, ...]:
    """Jobs waiting to (re)start, in submit order (ties by id)."""
    if self.waiting_ids is not None:
        jobs = self.jobs
        return tuple(sorted([jobs[i] for i in self.waiting_ids], key=_SUBMIT_ORDER))
    return tuple(sorted((j for j in self.jobs.values() if j.waiting), key=_SUBMIT_ORDER))


def keep_running_reasons(snap: ClusterSnapshot, reasons: dict) -> None:
    """Give every running job the plan does not mention the shared KEEP_RUNNING reason.

    With the simulator's ``waiting_ids`` the running jobs are those on ``gpu_jobs``
    (checked: together with the waiting ones they are all jobs), so the cost grows
    with the GPUs in use, not with the queue; otherwise set arithmetic over all jobs."""
    waiting = snap.waiting_ids
    if waiting is not None:
        running = {j for ids in snap.gpu_jobs.values() for j in ids}
        if (len(running) + len(waiting) == len(snap.jobs) and running <= snap.jobs.keys()
                and running.isdisjoint(waiting)):
            reasons.update(dict.fromkeys(running - reasons.keys(), _KEEP))
            return
    else:
        waiting = [j.id for j in snap.jobs.values() if j.waiting]
    running = snap.jobs.keys() - set(waiting) - reasons.keys()
    reasons.update(dict.fromkeys(running, _KEEP))


def schedule_nonpreemptive(snap: ClusterSnapshot, policy: str, order: list[Job],
                           backfill: bool = False,
                           numbers: Callable[[Job], dict] = lambda j: {}) -> Plan:
    """Start waiting jobs in ``order`` on free GPUs, consolidated.

    Without ``backfill`` the first job that does not fit blocks all behind it
    (strict order); with it, later jobs that fit may start.
    """
    free = free_gpus_of(snap)
    nfree = free.total
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
        actions.append(StartJob(job.id, gpus, b, s))
        reasons[job.id] = reason(ReasonCode.STARTED, f"{job.num_gpus} GPUs free", **nums)
    keep_running_reasons(snap, reasons)
    return make_plan(policy, actions, out_order, reasons, infeasible)


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
            gpus = free.pick(job.num_gpus)
            assert gpus is not None, "admission guarantees enough GPUs"
            free.take(gpus)
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


# ---- the policies' schedule methods before policies/kept_order.py (verbatim) ----------

def sjf_schedule(self, snap):
    def key(j):
        length = snap.job_length(j)
        return (float("inf") if length is None else length, j.submit_time, j.id)
    order = sorted(snap.pending(), key=key)
    return schedule_nonpreemptive(
        snap, self.name, order, self.backfill,
        lambda j: {"length_s": snap.job_length(j) if snap.job_length(j) is not None else -1.0})


def preemptive_by_key_schedule(self, snap):
    return schedule_preemptive(snap, self.name,
                               lambda j: (self.key(snap, j), j.submit_time, j.id),
                               lambda j: {self.key_name: self.key(snap, j)}, self.min_run_s)


def tiresias_schedule(self, snap):
    return schedule_preemptive(
        snap, self.name, lambda j: (self.queue_of(snap, j), j.submit_time, j.id),
        lambda j: {"queue": self.queue_of(snap, j), "attained_gpu_s": snap.attained_service(j)},
        self.min_run_s)
