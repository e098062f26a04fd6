"""Tiresias discretized 2D-LAS (Gu et al., NSDI'19), preemptive, length-unaware.

A job's priority is its attained service in GPU-seconds (GPUs × executed
time, the "2D" age).  Jobs sit in K queues split by ``thresholds``: a job whose
attained service passes threshold k drops to queue k+1.  Lower queues go first;
inside a queue jobs run FIFO by submit time.  Starvation guard (Tiresias
§4.2, optional): a waiting job whose waiting time since its last run exceeds
``promote_knob`` × its executed time returns to queue 0.

Choices where the paper leaves details open (ours): default K = 2 with one
threshold of 16 GPU-hours (57,600 GPU-s) — the paper finds two queues capture
most of the gain; the promote knob is off by default.

Pre-emption churn.  Tiresias's own knobs are the queue thresholds and the
PromoteKnob; it has no lease: its simulator (SymbioticLab/Tiresias,
``simulator/run_sim.py``, ``dlas_sim_jobs``) re-ranks the queues at every event and
pre-empts any running job that no longer fits, however recently it (re)started.
``min_run_s`` (ours, default 0 = as published) is a minimum run time before a job
may be pre-empted again (:func:`policies.base.schedule_preemptive`); with a
restore cost c per pre-emption it caps the time lost to restores at c / min_run_s
of a job's running time.
"""
from __future__ import annotations

import bisect
from typing import Optional

from .base import Policy
from .kept_order import preemptive_with_kept_order
from .quiet_calls import quiet_until_of
from .registry import register
from .running_keys import tiresias_horizon


@register("tiresias")
class Tiresias(Policy):
    """Tiresias: discretized 2D-LAS over attained GPU-service, preemptive."""

    preemptive = True

    accepts_min_run = True

    def __init__(self, thresholds: tuple[float, ...] = (57600.0,),
                 promote_knob: Optional[float] = None, min_run_s: float = 0.0):
        if list(thresholds) != sorted(thresholds) or any(t <= 0 for t in thresholds):
            raise ValueError(f"tiresias thresholds must be positive and ascending, got {thresholds}")
        self.thresholds = tuple(float(t) for t in thresholds)
        self.promote_knob = promote_knob
        if min_run_s < 0:
            raise ValueError(f"tiresias min_run_s must be >= 0, got {min_run_s}")
        self.min_run_s = float(min_run_s)

    def queue_of(self, snap, job) -> int:
        q = bisect.bisect_right(self.thresholds, snap.attained_service(job))
        if (self.promote_knob is not None and job.waiting and job.preemptions
                and snap.executed_time(job) > 0):
            waited = snap.now - job.as_of  # since it last stopped
            if waited > self.promote_knob * snap.executed_time(job):
                q = 0
        return q

    def quiet_until(self, snap):
        """(``Policy.quiet_until``.)  The quiet calls' record of this call
        (:meth:`policies.quiet_calls.QuietCalls.until`): up to the first time a running
        job's service reaches its queue's threshold; ``-inf`` with the promote knob on (no
        record is kept) or a minimum run time."""
        return quiet_until_of(self, snap)

    def schedule(self, snap):
        # a waiting job's attained service, hence its queue, is fixed while it waits unless
        # the promote knob (which reads ``now``) is on: then the waiting order is kept
        # across calls (policies.kept_order; same Plans as ranking every job per call); a
        # running job's queue stays until its service reaches the next threshold, so its
        # key is cached until then (policies.running_keys)
        return preemptive_with_kept_order(
            self, snap, lambda j: (self.queue_of(snap, j), j.submit_time, j.id),
            lambda j: {"queue": self.queue_of(snap, j), "attained_gpu_s": snap.attained_service(j)},
            self.min_run_s, self.promote_knob is None, (self.thresholds,),
            tiresias_horizon(snap, self.thresholds))
