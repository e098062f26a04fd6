"""Interval timers for the training side, one interface for CPU and GPU.

On a GPU the host returns from ``model(x)`` as soon as the kernels are *queued*; a
``time.perf_counter()`` pair around it measures the launch, not the work (on an H100 a
forward pass recorded 4.3 ms by wall time against 16.7 ms of GPU time, ``shared/notes/gpu.md``
§4).  :class:`CudaEventTimer` brackets each interval with CUDA events recorded on the
current stream and reads them only in :meth:`take`, which synchronises once on the last
event; :class:`WallTimer` is the exact CPU equivalent.  :func:`make_timer` picks one for a
device.

Usage (what :class:`launcher.stealing.StealingController` does)::

    t = make_timer(device)
    t.start(); out = model(x); t.stop()     # any number of intervals, no host sync
    seconds = t.take()                      # one sync; sum of the intervals, then reset
"""
from __future__ import annotations

import time
from typing import Any, List, Optional, Tuple


class WallTimer:
    """Host wall clock (``time.perf_counter``): exact when the work runs on the CPU."""

    kind = "wall"

    def __init__(self, clock=time.perf_counter):
        self._clock = clock
        self._t0: Optional[float] = None
        self._total = 0.0

    def start(self) -> None:
        self._t0 = self._clock()

    def stop(self) -> None:
        if self._t0 is not None:
            self._total += self._clock() - self._t0
            self._t0 = None

    def take(self) -> float:
        out, self._total = self._total, 0.0
        return out


class CudaEventTimer:
    """GPU time of the bracketed intervals from CUDA events on the current stream.

    ``start``/``stop`` only *record* events (asynchronous); :meth:`take` waits for the last
    one and sums ``elapsed_time`` over the pairs, so a whole measurement window costs one
    host synchronisation."""

    kind = "cuda"

    def __init__(self, device: Any = None):
        import torch
        self._torch = torch
        self.device = torch.device(device) if device is not None else torch.device(
            "cuda", torch.cuda.current_device())
        self._open: Optional[Any] = None
        self._pairs: List[Tuple[Any, Any]] = []

    def _event(self):
        ev = self._torch.cuda.Event(enable_timing=True)
        ev.record(self._torch.cuda.current_stream(self.device))
        return ev

    def start(self) -> None:
        self._open = self._event()

    def stop(self) -> None:
        if self._open is not None:
            self._pairs.append((self._open, self._event()))
            self._open = None

    def take(self) -> float:
        pairs, self._pairs = self._pairs, []
        if not pairs:
            return 0.0
        pairs[-1][1].synchronize()
        return sum(a.elapsed_time(b) for a, b in pairs) / 1000.0


def make_timer(device: Any = None):
    """:class:`CudaEventTimer` for a CUDA device, else :class:`WallTimer`.

    ``device=None``: CUDA when this process has already put work on a GPU (CUDA
    initialised), else the wall clock."""
    import torch
    if device is None:
        use_cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        dev = None
    else:
        dev = torch.device(device)
        use_cuda = dev.type == "cuda"
    if use_cuda:
        return CudaEventTimer(dev)
    return WallTimer()
