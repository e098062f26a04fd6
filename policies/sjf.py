"""Shortest job first (known lengths), non-preemptive (seed 000 §VI baseline)."""
from __future__ import annotations

from .base import Policy, schedule_nonpreemptive
from .registry import register


@register("sjf")
class Sjf(Policy):
    """SJF: shortest exclusive duration L_k first, non-preemptive (needs lengths)."""

    needs_lengths = True

    def __init__(self, backfill: bool = False):
        self.backfill = backfill

    def schedule(self, snap):
        def key(j):
            length = snap.job_length(j)
            return (float("inf") if length is None else length, j.submit_time, j.id)
        order = sorted(snap.pending(), key=key)
        return schedule_nonpreemptive(
            snap, self.name, order, self.backfill,
            lambda j: {"length_s": snap.job_length(j) if snap.job_length(j) is not None else -1.0})
