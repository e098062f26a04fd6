"""Shortest remaining time first, preemptive (seed 001 baseline)."""
from __future__ import annotations

from .base import Policy, schedule_preemptive
from .registry import register


@register("srtf")
class Srtf(Policy):
    """SRTF: least remaining exclusive run time first, preemptive (needs lengths)."""

    preemptive = True
    needs_lengths = True

    def schedule(self, snap):
        def rem(j):
            r = snap.remaining_time(j)
            return float("inf") if r is None else r
        return schedule_preemptive(snap, self.name, lambda j: (rem(j), j.submit_time, j.id),
                                   lambda j: {"remaining_s": rem(j)})
