"""SPJF (seed 003 §V-A 1-d): shortest predicted job (duration) first, strict order, Heavy-Edge placement.

Shared core: :mod:`policies.predicted_order`."""
from __future__ import annotations

from .predicted_order import PredictedOrder
from .registry import register


@register("spjf")
class Spjf(PredictedOrder):
    """SPJF (seed 003 §V-A 1-d): shortest predicted job (duration) first, strict order, Heavy-Edge placement."""

    work_conserving = False

    def key(self, job, duration):
        return (duration,)
