"""WCS-Workload (seed 003 §V-A 1-d): work-conserving, smallest predicted duration x GPUs first.

Shared core: :mod:`policies.predicted_order`."""
from __future__ import annotations

from .predicted_order import PredictedOrder
from .registry import register


@register("wcs-workload")
class WcsWorkload(PredictedOrder):
    """WCS-Workload (seed 003 §V-A 1-d): work-conserving, smallest predicted duration x GPUs first."""

    work_conserving = True

    def key(self, job, duration):
        return (duration * job.num_gpus,)
