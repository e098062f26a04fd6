"""A-SRPT-Perfect (seed 003 §V-A 2): A-SRPT with perfect knowledge of job lengths."""
from __future__ import annotations

from .a_srpt import ASrpt
from .registry import register


@register("a-srpt-perfect")
class ASrptPerfect(ASrpt):
    """A-SRPT-Perfect: Algorithm 1 with the true iteration counts instead of predictions (needs lengths)."""

    perfect = True
    needs_lengths = True
