"""Lossless input-sample stealing (LISS), seed 004 §4.1 and §6 ("Data
samplers for stealing input samples"; the idea comes from LB-BSP).

In unequal packing some workers of a job are slowed by their co-located
jobs.  LISS lets fast workers *steal* input samples from slow ones: every
global batch is still processed exactly once per step (so convergence is
unchanged), but it is split into per-rank *shares* of different sizes.

* :class:`StealingBatchSampler` - each rank gets a contiguous slice of every
  global batch; shares may differ per rank and change between steps; every
  sample of an epoch is seen exactly once across ranks; deterministic
  shuffle from ``seed + epoch``; resumable from ``(epoch, step)``.
* :func:`liss_loss` - loss weighting that makes the uneven update equal the
  uniform one.  **Convention used here**: each rank computes the *sum* of its
  per-sample losses and divides by the global batch size; DDP then *averages*
  gradients over the ``W`` ranks, so the loss is also multiplied by ``W``
  (DDP average x world-size correction == SUM all-reduce of
  ``sum_local / global_batch``).  Ranks with a zero share still run forward /
  backward on an empty batch so that DDP's all-reduce does not hang.
* :class:`Rebalancer` - moves shares toward equal finish time: shares
  proportional to the measured per-sample speed (samples / forward latency,
  seed 004 §6 measures forward latency because backward includes waiting in
  the all-reduce), exponentially smoothed, integer shares summing to the
  global batch.
* :class:`StealingController` - measures latency, all-gathers it, decides on
  rank 0 and broadcasts the shares (torch.distributed), then updates the
  sampler.  Latency comes from :mod:`launcher.timing`: CUDA events on a GPU
  (the host returns before the kernels ran, so wall time would record the
  launch only), the wall clock on a CPU; read once per ``end_step``.
"""
from __future__ import annotations

import contextlib
import math
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

import torch


def split_shares(total: int, weights: Sequence[float], min_share: int = 0) -> List[int]:
    """Integer shares proportional to ``weights`` summing to ``total``
    (largest-remainder method; ties to the lower rank).  Every share is at
    least ``min_share`` when ``total`` allows it."""
    n = len(weights)
    if n == 0:
        raise ValueError("no ranks")
    if total < 0:
        raise ValueError(f"total must be >= 0, got {total}")
    w = [max(0.0, float(x)) if math.isfinite(float(x)) else 0.0 for x in weights]
    s = sum(w)
    if s <= 0:
        w = [1.0] * n
        s = float(n)
    raw = [total * x / s for x in w]
    shares = [int(math.floor(r)) for r in raw]
    left = total - sum(shares)
    order = sorted(range(n), key=lambda i: (-(raw[i] - shares[i]), i))
    for i in order[:left]:
        shares[i] += 1
    floor = min(min_share, total // n)
    for i in range(n):  # raise tiny shares, taking from the largest
        while shares[i] < floor:
            j = max(range(n), key=lambda k: (shares[k], -k))
            shares[j] -= 1
            shares[i] += 1
    return shares


def uniform_shares(global_batch: int, world_size: int) -> List[int]:
    return split_shares(global_batch, [1.0] * world_size)


def liss_loss(loss_sum: torch.Tensor, global_batch: int, world_size: int = 1,
              grad_reduction: str = "mean") -> torch.Tensor:
    """Loss to call ``backward()`` on for one rank's share.

    ``loss_sum``: sum of the per-sample losses of this rank's samples (use
    ``reduction="sum"``; an empty share gives 0).  ``grad_reduction="mean"``
    (DDP) multiplies by ``world_size`` to undo DDP's averaging;
    ``"sum"`` is for a manual SUM all-reduce."""
    if global_batch <= 0:
        raise ValueError(f"global_batch must be > 0, got {global_batch}")
    if grad_reduction == "mean":
        return loss_sum * (world_size / global_batch)
    if grad_reduction == "sum":
        return loss_sum / global_batch
    raise ValueError(f"grad_reduction must be 'mean' or 'sum', got {grad_reduction!r}")


class StealingBatchSampler:
    """Batch sampler giving rank ``rank`` its share of each global batch.

    Global batch ``k`` of epoch ``e`` is ``perm_e[k*B:(k+1)*B]`` whatever the
    shares are, so resuming from ``(epoch, step)`` is exact even if the shares
    changed in between.  The last global batch of an epoch may be smaller
    (``drop_last=False``, the default): the shares are then scaled down
    proportionally.  Shares set with :meth:`set_shares` apply to the batches
    produced after the call; all ranks must set the same shares at the same
    point (a ``DataLoader`` with workers prefetches a fixed number of batches,
    identically on every rank, so it only delays the change)."""

    def __init__(self, dataset_len: int, global_batch: int, rank: int, world_size: int,
                 shares: Optional[Sequence[int]] = None, seed: int = 0, shuffle: bool = True,
                 drop_last: bool = False):
        if dataset_len < 0 or global_batch < 1:
            raise ValueError("dataset_len must be >= 0 and global_batch >= 1")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} not in [0, {world_size})")
        self.dataset_len = int(dataset_len)
        self.global_batch = int(global_batch)
        self.rank, self.world_size = int(rank), int(world_size)
        self.seed, self.shuffle, self.drop_last = int(seed), bool(shuffle), bool(drop_last)
        self.epoch = 0
        self.step = 0  # global batches already produced in this epoch
        self.shares = uniform_shares(self.global_batch, self.world_size)
        if shares is not None:
            self.set_shares(shares)

    def set_shares(self, shares: Sequence[int]) -> None:
        shares = [int(s) for s in shares]
        if len(shares) != self.world_size:
            raise ValueError(f"expected {self.world_size} shares, got {len(shares)}")
        if any(s < 0 for s in shares) or sum(shares) != self.global_batch:
            raise ValueError(f"shares {shares} must be >= 0 and sum to {self.global_batch}")
        self.shares = shares

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch (resets the step unless it is the current epoch,
        so that ``load_state_dict`` followed by ``set_epoch`` resumes)."""
        if int(epoch) != self.epoch:
            self.epoch = int(epoch)
            self.step = 0

    def steps_per_epoch(self) -> int:
        if self.drop_last:
            return self.dataset_len // self.global_batch
        return -(-self.dataset_len // self.global_batch)

    def __len__(self) -> int:
        return self.steps_per_epoch()

    def global_size(self, step: int) -> int:
        """Number of samples in global batch ``step`` (smaller for the last one)."""
        return max(0, min(self.global_batch, self.dataset_len - step * self.global_batch))

    def _perm(self) -> torch.Tensor:
        if not self.shuffle:
            return torch.arange(self.dataset_len)
        g = torch.Generator()
        g.manual_seed(self.seed + self.epoch)
        return torch.randperm(self.dataset_len, generator=g)

    def share_bounds(self, step: int, shares: Optional[Sequence[int]] = None) -> List[int]:
        """Offsets (length ``world_size + 1``) of each rank's slice of batch ``step``."""
        shares = list(self.shares if shares is None else shares)
        n = self.global_size(step)
        if n != self.global_batch:
            shares = split_shares(n, shares)
        bounds = [0]
        for s in shares:
            bounds.append(bounds[-1] + s)
        return bounds

    def __iter__(self) -> Iterator[List[int]]:
        perm = self._perm()
        steps = self.steps_per_epoch()
        while self.step < steps:
            k = self.step
            start = k * self.global_batch
            batch = perm[start:start + self.global_size(k)]
            b = self.share_bounds(k)
            self.step = k + 1
            yield batch[b[self.rank]:b[self.rank + 1]].tolist()
        self.step = 0  # a finished epoch replays from the start if iterated again

    def state_dict(self) -> Dict[str, Any]:
        return {"epoch": self.epoch, "step": self.step, "shares": list(self.shares),
                "seed": self.seed, "global_batch": self.global_batch,
                "world_size": self.world_size, "dataset_len": self.dataset_len}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        for key in ("global_batch", "dataset_len", "seed"):
            if key in state and state[key] != getattr(self, key):
                raise ValueError(f"checkpoint has {key}={state[key]}, sampler has {getattr(self, key)}")
        self.epoch = int(state["epoch"])
        self.step = int(state["step"])
        shares = state.get("shares")
        if shares is not None and len(shares) == self.world_size and sum(shares) == self.global_batch:
            self.set_shares(shares)
        else:  # world size changed on relaunch: start uniform
            self.shares = uniform_shares(self.global_batch, self.world_size)


def empty_safe_collate(dataset: Any, collate: Optional[Callable] = None) -> Callable:
    """A collate function that turns an empty share into empty tensors shaped
    like ``dataset[0]`` (PyTorch's default collate fails on ``[]``)."""
    from torch.utils.data import default_collate
    collate = collate or default_collate

    def _cut(x):
        if isinstance(x, torch.Tensor):
            return x[:0]
        if isinstance(x, (list, tuple)):
            return type(x)(_cut(v) for v in x)
        if isinstance(x, dict):
            return {k: _cut(v) for k, v in x.items()}
        return x

    def _fn(batch):
        if len(batch) == 0:
            return _cut(collate([dataset[0]]))
        return collate(batch)
    return _fn


class Rebalancer:
    """Shares proportional to smoothed per-rank speed (samples / second).

    ``update(samples, latencies)``: per rank, how many samples it processed
    and how long its (forward) compute took in the last measurement window.
    Ranks that processed no sample keep their previous speed estimate."""

    def __init__(self, global_batch: int, world_size: int, smoothing: float = 0.5,
                 min_share: int = 1):
        if not 0 < smoothing <= 1:
            raise ValueError("smoothing must be in (0, 1]")
        self.global_batch, self.world_size = int(global_batch), int(world_size)
        self.smoothing = float(smoothing)
        self.min_share = int(min_share)
        self.speed: Optional[List[float]] = None

    def update(self, samples: Sequence[float], latencies: Sequence[float]) -> List[int]:
        if len(samples) != self.world_size or len(latencies) != self.world_size:
            raise ValueError("one sample count and one latency per rank expected")
        meas = [s / t if s > 0 and t > 0 else None for s, t in zip(samples, latencies)]
        if self.speed is None:
            known = [m for m in meas if m is not None]
            fill = sum(known) / len(known) if known else 1.0
            self.speed = [m if m is not None else fill for m in meas]
        else:
            a = self.smoothing
            self.speed = [old if m is None else a * m + (1 - a) * old
                          for m, old in zip(meas, self.speed)]
        return split_shares(self.global_batch, self.speed, self.min_share)

    @staticmethod
    def predicted_step_time(shares: Sequence[int], per_sample_s: Sequence[float]) -> float:
        """Step time of a synchronous step: the slowest rank's compute."""
        return max(s * c for s, c in zip(shares, per_sample_s))


class StealingController:
    """Glue between measurements, the rebalancer and the sampler (all ranks).

    Usage per step::

        with ctl.measure():           # around the forward pass
            out = model(x)
        ...
        ctl.end_step(len(x))          # every ``interval`` steps: rebalance

    Rank 0 decides and broadcasts (``torch.distributed``), so all ranks apply
    identical shares before producing the next batch."""

    def __init__(self, sampler: StealingBatchSampler, rebalancer: Optional[Rebalancer] = None,
                 interval: int = 1, enabled: bool = True, group: Any = None,
                 device: Any = None, timer: Any = None):
        from .timing import make_timer
        self.sampler = sampler
        # ``timer``: any object with start()/stop()/take() (launcher.timing); by default
        # CUDA events when ``device`` is a CUDA device, the wall clock otherwise.
        self.timer = timer if timer is not None else make_timer(device)
        self.rebalancer = rebalancer or Rebalancer(sampler.global_batch, sampler.world_size)
        self.interval = max(1, int(interval))
        self.enabled = enabled
        self.group = group
        self._lat = 0.0
        self._samples = 0
        self._steps = 0
        self.history: List[List[int]] = []

    @contextlib.contextmanager
    def measure(self):
        """Time the enclosed work (the forward pass) on the controller's timer; on a GPU
        this records events only and never waits for the device.  Nothing is timed while
        stealing is disabled."""
        if not self.enabled:
            yield
            return
        self.timer.start()
        try:
            yield
        finally:
            self.timer.stop()

    def add_latency(self, seconds: float) -> None:
        self._lat += seconds

    def end_step(self, local_samples: int) -> Optional[List[int]]:
        self._samples += int(local_samples)
        self._steps += 1
        if not self.enabled or self._steps % self.interval:
            return None
        self._lat += self.timer.take()  # one device sync per rebalancing window
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            rank = dist.get_rank(self.group)
            local = torch.tensor([float(self._samples), self._lat], dtype=torch.float64)
            dev = _coll_device(self.group)
            gathered = [torch.zeros(2, dtype=torch.float64, device=dev)
                        for _ in range(self.sampler.world_size)]
            dist.all_gather(gathered, local.to(dev), group=self.group)
            if rank == 0:
                shares = self.rebalancer.update([float(g[0]) for g in gathered],
                                                [float(g[1]) for g in gathered])
                t = torch.tensor(shares, dtype=torch.int64, device=dev)
            else:
                t = torch.zeros(self.sampler.world_size, dtype=torch.int64, device=dev)
            dist.broadcast(t, src=_global_rank0(self.group), group=self.group)
            shares = [int(v) for v in t.cpu()]
        else:
            shares = self.rebalancer.update([self._samples], [self._lat])
        self._lat, self._samples = 0.0, 0
        self.sampler.set_shares(shares)
        self.history.append(shares)
        return shares


def _coll_device(group: Any) -> torch.device:
    import torch.distributed as dist
    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _global_rank0(group: Any) -> int:
    import torch.distributed as dist
    if group is None:
        return 0
    return dist.get_global_rank(group, 0)
