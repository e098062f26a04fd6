"""WCS-SubTime (seed 003 §V-A 1-d): work-conserving, submission order.

Shared core: :mod:`policies.predicted_order`."""
from __future__ import annotations

from .predicted_order import PredictedOrder
from .registry import register


@register("wcs-subtime")
class WcsSubtime(PredictedOrder):
    """WCS-SubTime (seed 003 §V-A 1-d): work-conserving, submission order."""

    work_conserving = True

    def key(self, job, duration):
        return ()
