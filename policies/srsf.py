"""Shortest remaining service first: remaining time × GPUs, preemptive.

Seed 001 §5 (baselines): SRSF orders jobs by remaining service, the product of
remaining run time and the number of GPUs the job holds.
"""
from __future__ import annotations

from .base import PreemptiveByKey
from .registry import register
from .running_keys import remaining_time_rekey


@register("srsf")
class Srsf(PreemptiveByKey):
    """SRSF: least remaining time x GPUs first, preemptive (needs lengths)."""

    # a waiting job's remaining time is fixed while it waits: the order is kept across calls
    static_waiting_key = True
    key_name = "remaining_service_gpus"
    # a running job's remaining time only falls while it runs (policies.running_keys)
    falling_running_key = True

    def key(self, snap, job):
        r = snap.remaining_time(job)
        return float("inf") if r is None else r * job.num_gpus

    def running_rekey(self, snap):
        # ``key`` above in closed form for a running view (a subclass with its own key
        # gets none: its key is evaluated)
        return remaining_time_rekey(snap, True) if type(self).key is Srsf.key else None
