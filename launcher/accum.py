"""Gradient accumulation for the scheduler-decided sub-batch size.

The scheduler may run a job with a smaller per-step batch than the user asked
for (the daemon's ``sub_batch`` / ``accum_steps``, e.g. to fit a packed GPU's
memory limit under LGRR, seed 004 §4.1).  :class:`GradientAccumulator` keeps
the optimisation identical: each (local) global batch is split into
micro-batches, each micro-batch loss (a *mean* over the micro-batch) is
scaled by ``micro_size / batch_size`` so the accumulated gradient equals the
gradient of the full-batch mean loss, also when the last micro-batch is
smaller.  Under DDP all but the last micro-batch run inside ``no_sync()`` so
gradients are all-reduced once.  The optimizer and LR scheduler step once per
global batch.

BatchNorm caveat: BatchNorm normalises with statistics of the micro-batch, not
the full batch, and updates its running statistics once per micro-batch, so
accumulation cannot reproduce a full-batch step exactly for models with
BatchNorm (use GroupNorm/LayerNorm, or accept the approximation).  A warning
is issued once per model.
"""
from __future__ import annotations

import contextlib
import warnings
from typing import Any, Callable, List, Optional, Sequence

import torch
from torch import nn

_BN_TYPES = (nn.modules.batchnorm._BatchNorm,)


def micro_batch_sizes(batch_size: int, sub_batch: Optional[int] = None,
                      accum_steps: Optional[int] = None) -> List[int]:
    """Sizes of the micro-batches a batch of ``batch_size`` is split into.

    ``sub_batch``: fixed-size micro-batches, the last one holds the remainder
    (``10, sub_batch=4 -> [4, 4, 2]``).  ``accum_steps``: that many near-equal
    micro-batches (``10, accum_steps=4 -> [3, 3, 2, 2]``).  Neither: one."""
    if batch_size < 0:
        raise ValueError(f"batch_size must be >= 0, got {batch_size}")
    if sub_batch is not None and accum_steps is not None:
        raise ValueError("give sub_batch or accum_steps, not both")
    if batch_size == 0:
        return [0]
    if sub_batch is not None:
        if sub_batch < 1:
            raise ValueError(f"sub_batch must be >= 1, got {sub_batch}")
        full, rest = divmod(batch_size, sub_batch)
        return [sub_batch] * full + ([rest] if rest else [])
    if accum_steps is not None:
        if accum_steps < 1:
            raise ValueError(f"accum_steps must be >= 1, got {accum_steps}")
        k = min(accum_steps, batch_size)
        q, r = divmod(batch_size, k)
        return [q + 1] * r + [q] * (k - r)
    return [batch_size]


def _split(obj: Any, sizes: Sequence[int]) -> List[Any]:
    """Split tensors (possibly nested in tuples/lists/dicts) along dim 0."""
    if isinstance(obj, torch.Tensor):
        return list(torch.split(obj, list(sizes), dim=0))
    if isinstance(obj, (tuple, list)):
        parts = [_split(o, sizes) for o in obj]
        return [type(obj)(p[i] for p in parts) for i in range(len(sizes))]
    if isinstance(obj, dict):
        parts = {k: _split(v, sizes) for k, v in obj.items()}
        return [{k: v[i] for k, v in parts.items()} for i in range(len(sizes))]
    raise TypeError(f"cannot split a batch of type {type(obj).__name__}")


def _batch_len(obj: Any) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.shape[0]
    if isinstance(obj, (tuple, list)) and obj:
        return _batch_len(obj[0])
    if isinstance(obj, dict) and obj:
        return _batch_len(next(iter(obj.values())))
    raise TypeError(f"cannot find the batch size of {type(obj).__name__}")


def has_batchnorm(model: nn.Module) -> bool:
    return any(isinstance(m, _BN_TYPES) for m in model.modules())


class GradientAccumulator:
    """One optimizer step per global batch, computed in micro-batches.

    ``loss_fn(outputs, targets)`` must return the *mean* loss of its
    micro-batch.  ``step(inputs, targets)`` returns the mean loss of the whole
    batch: a float (one host sync per step), or with ``sync=False`` a detached
    0-d tensor on the model's device (no host sync at all; the caller syncs
    when it logs, e.g. once per report).  Micro-batch losses are summed on the
    device: a ``float(loss)`` per micro-batch would stall the GPU queue each
    time (up to 17 % at micro-batch 8 on an H100, ``shared/notes/gpu.md`` §4)."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer,
                 loss_fn: Callable[[Any, Any], torch.Tensor], sub_batch: Optional[int] = None,
                 accum_steps: Optional[int] = None, lr_scheduler: Any = None,
                 forward: Optional[Callable[[nn.Module, Any], Any]] = None):
        if sub_batch is not None and accum_steps is not None:
            raise ValueError("give sub_batch or accum_steps, not both")
        self.model = model
        self.optimizer = optimizer
        self.loss_fn = loss_fn
        self.sub_batch = sub_batch
        self.accum_steps = accum_steps
        self.lr_scheduler = lr_scheduler
        self.forward = forward or (lambda m, x: m(x))
        self.steps = 0
        if has_batchnorm(model) and (sub_batch is not None or (accum_steps or 1) > 1):
            warnings.warn("gimbal: gradient accumulation with BatchNorm is not exactly "
                          "equivalent to a full-batch step (batch statistics are per "
                          "micro-batch); see launcher.accum", RuntimeWarning, stacklevel=2)

    def _no_sync(self):
        ns = getattr(self.model, "no_sync", None)
        return ns() if callable(ns) else contextlib.nullcontext()

    def step(self, inputs: Any, targets: Any, normalizer: Optional[float] = None,
             sync: bool = True) -> "float | torch.Tensor":
        """One optimizer step on ``(inputs, targets)``.

        ``normalizer=None``: ``loss_fn`` returns the micro-batch *mean*;
        micro-batch losses are weighted by ``micro / batch`` size.
        ``normalizer=c``: ``loss_fn`` returns the micro-batch *sum* and it is
        multiplied by ``c`` (LISS: ``c = world_size / global_batch``, see
        ``launcher.stealing.liss_loss``); an empty batch is allowed then and
        still runs forward/backward so DDP's all-reduce is entered."""
        n = _batch_len(inputs)
        if n == 0 and normalizer is None:
            raise ValueError("empty batch (pass normalizer= for sum-reduced LISS losses)")
        sizes = micro_batch_sizes(n, self.sub_batch, self.accum_steps)
        self.optimizer.zero_grad(set_to_none=True)
        total: Optional[torch.Tensor] = None
        xs, ys = _split(inputs, sizes), _split(targets, sizes)
        for i, (x, y, m) in enumerate(zip(xs, ys, sizes)):
            last = i == len(sizes) - 1
            with (contextlib.nullcontext() if last else self._no_sync()):
                out = self.loss_fn(self.forward(self.model, x), y)
                loss = out * (m / n) if normalizer is None else out * normalizer
                loss.backward()
            total = loss.detach() if total is None else total + loss.detach()
        self.optimizer.step()
        if self.lr_scheduler is not None:
            self.lr_scheduler.step()
        self.steps += 1
        return float(total) if sync else total
