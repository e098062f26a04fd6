"""SPWF (seed 003 §V-A 1-d, Tiresias' workload): shortest predicted duration x GPUs first, strict order.

Shared core: :mod:`policies.predicted_order`."""
from __future__ import annotations

from .predicted_order import PredictedOrder
from .registry import register


@register("spwf")
class Spwf(PredictedOrder):
    """SPWF (seed 003 §V-A 1-d, Tiresias' workload): shortest predicted duration x GPUs first, strict order."""

    work_conserving = False

    def key(self, job, duration):
        return (duration * job.num_gpus,)
