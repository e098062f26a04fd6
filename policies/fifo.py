"""First-in first-out: start jobs in submit order, non-preemptive."""
from __future__ import annotations

from .base import Policy, schedule_nonpreemptive
from .registry import register


@register("fifo")
class Fifo(Policy):
    """FIFO: submit order, non-preemptive; strict order unless backfill=True."""

    tick_invariant = True  # (base.Policy): submit order and the free GPUs, no time

    def __init__(self, backfill: bool = False):
        self.backfill = backfill

    def schedule(self, snap):
        order = snap.pending()  # already (submit_time, id); the snapshot's own queue
        return schedule_nonpreemptive(snap, self.name, order, self.backfill,
                                      lambda j: {"submit_time": j.submit_time})
