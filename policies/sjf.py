"""Shortest job first (known lengths), non-preemptive (seed 000 §VI baseline)."""
from __future__ import annotations

from .base import Policy, schedule_nonpreemptive
from .kept_order import kept_order_of
from .registry import register


@register("sjf")
class Sjf(Policy):
    """SJF: shortest exclusive duration L_k first, non-preemptive (needs lengths)."""

    needs_lengths = True
    tick_invariant = True  # (base.Policy): a waiting job's length is fixed while it waits

    def __init__(self, backfill: bool = False):
        self.backfill = backfill

    def schedule(self, snap):
        def key(j):
            length = snap.job_length(j)
            return (float("inf") if length is None else length, j.submit_time, j.id)
        numbers = lambda j: {  # noqa: E731
            "length_s": snap.job_length(j) if snap.job_length(j) is not None else -1.0}
        # a waiting job's length is fixed while it waits: the order is kept across calls
        # from the snapshot's change record (policies.kept_order), else sorted afresh
        kept = kept_order_of(self).update(snap, key)
        if kept is not None:
            q = kept.queue(snap)
            return schedule_nonpreemptive(snap, self.name, q.jobs, self.backfill, numbers, q)
        order = sorted(snap.pending(), key=key)
        return schedule_nonpreemptive(snap, self.name, order, self.backfill, numbers)
