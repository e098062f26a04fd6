"""Shortest remaining time first, preemptive (seed 001 baseline)."""
from __future__ import annotations

from .base import Policy, schedule_preemptive
from .registry import register


@register("srtf")
class Srtf(Policy):
    """SRTF: least remaining exclusive run time first, preemptive (needs lengths)."""

    preemptive = True
    needs_lengths = True
    accepts_min_run = True

    def __init__(self, min_run_s: float = 0.0):
        """``min_run_s``: minimum run time before a job may be pre-empted again
        (:func:`policies.base.schedule_preemptive`; 0 = none, the baseline as published)."""
        if min_run_s < 0:
            raise ValueError(f"{self.name}: min_run_s must be >= 0, got {min_run_s}")
        self.min_run_s = float(min_run_s)

    def schedule(self, snap):
        def rem(j):
            r = snap.remaining_time(j)
            return float("inf") if r is None else r
        return schedule_preemptive(snap, self.name, lambda j: (rem(j), j.submit_time, j.id),
                                   lambda j: {"remaining_s": rem(j)}, self.min_run_s)
