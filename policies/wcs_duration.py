"""WCS-Duration (seed 003 §V-A 1-d): work-conserving, shortest predicted duration first.

Shared core: :mod:`policies.predicted_order`."""
from __future__ import annotations

from .predicted_order import PredictedOrder
from .registry import register


@register("wcs-duration")
class WcsDuration(PredictedOrder):
    """WCS-Duration (seed 003 §V-A 1-d): work-conserving, shortest predicted duration first."""

    work_conserving = True

    def key(self, job, duration):
        return (duration,)
