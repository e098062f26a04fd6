"""The recurrence key of a job (:func:`group_key`), apart from :mod:`gimbalctl.predictor`.

The trace readers key every job with it; keeping it here lets ``gimbalctl simulate`` read a
trace without importing the predictor module (its dataclasses and fitters).  The predictor
re-exports it: one function, so the keys are the same wherever they are made.
"""
from __future__ import annotations

import hashlib


def group_key(user, name, num_gpus, batch) -> str:
    """Stable 12-hex recurrence key of (user, job name or application, GPUs, batch)."""
    text = "\x1f".join(str(x) for x in (user, name, num_gpus, batch))
    return hashlib.blake2b(text.encode(), digest_size=6).hexdigest()
