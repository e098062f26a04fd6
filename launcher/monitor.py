"""Runtime monitor (seed 004 §3: "The runtime monitor collects runtime
information of workers, such as GPU utilization, memory usage, and training
speed"; §6 monitors every 30 s).

* :class:`NVMLReader` - the real reader on ``pynvml`` (package
  ``nvidia-ml-py``): per-device utilisation, memory and per-process memory.
* :class:`FakeNVML` - a scripted fake behind the same interface, for tests.
* :func:`open_nvml` - a real reader, or ``None`` with one clear log message
  when NVML is unavailable (no driver / no GPU / package missing); training
  continues and reports carry throughput only.
* :class:`ThroughputMonitor` - rank 0 calls ``step_done(samples, step_time)``
  each step; every ``every_s`` seconds (or ``every_steps`` steps) it writes
  one record through :class:`launcher.report.ReportWriter`.

  - ``step`` in a record is the *training* step (``start_step`` = the step the
    launch resumed from, plus the steps done since), so progress never goes
    back after a checkpoint/relaunch; the snapshot builder reads progress
    from it.
  - The first ``warmup_reports`` records of each launch carry
    ``"warmup": true`` (CUDA context, allocator and autotuning make them slow:
    886 vs 4428 samples/s on an H100, ``shared/notes/gpu.md`` §4); the state
    store keeps them but folds only steady records into measured throughput.
  - On a GPU, pass ``step_time_s=None`` and ``sync=torch.cuda.synchronize``:
    the window's busy time is then the wall time between two reports, taken
    after one device sync per report (per-step host timers would measure
    kernel launches, not work).
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

from .report import ReportWriter

log = logging.getLogger("gimbal.monitor")


@dataclass(frozen=True)
class GPUSample:
    index: int
    util_pct: float
    mem_used_mb: float
    mem_total_mb: float
    processes: Dict[int, float] = field(default_factory=dict)  # pid -> MB


class NVMLReader:
    """Reads GPUs through NVML (``import pynvml``).  Raises ``RuntimeError``
    from the constructor when NVML cannot be initialised."""

    def __init__(self):
        try:
            import pynvml
        except ImportError as exc:
            raise RuntimeError(f"nvidia-ml-py (pynvml) is not installed: {exc}") from None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise RuntimeError(f"NVML initialisation failed: {exc}") from None
        self._nv = pynvml
        self._closed = False

    def device_count(self) -> int:
        return int(self._nv.nvmlDeviceGetCount())

    def sample(self, index: int) -> GPUSample:
        nv = self._nv
        h = nv.nvmlDeviceGetHandleByIndex(index)
        util = nv.nvmlDeviceGetUtilizationRates(h)
        mem = nv.nvmlDeviceGetMemoryInfo(h)
        procs: Dict[int, float] = {}
        try:
            for p in nv.nvmlDeviceGetComputeRunningProcesses(h):
                used = getattr(p, "usedGpuMemory", None)
                procs[int(p.pid)] = float(used) / 2**20 if used is not None else 0.0
        except nv.NVMLError:
            pass  # not supported on every device / driver (e.g. under MIG)
        return GPUSample(index=index, util_pct=float(util.gpu), mem_used_mb=float(mem.used) / 2**20,
                         mem_total_mb=float(mem.total) / 2**20, processes=procs)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                self._nv.nvmlShutdown()
            except self._nv.NVMLError:
                pass


class FakeNVML:
    """Test double for :class:`NVMLReader`: returns scripted samples.

    ``samples[i]`` is a list of :class:`GPUSample` returned in turn for
    device ``i`` (the last one repeats)."""

    def __init__(self, samples: Sequence[Sequence[GPUSample]]):
        self._samples = [list(s) for s in samples]
        self._pos = [0] * len(self._samples)
        self.closed = False

    def device_count(self) -> int:
        return len(self._samples)

    def sample(self, index: int) -> GPUSample:
        seq = self._samples[index]
        s = seq[min(self._pos[index], len(seq) - 1)]
        self._pos[index] += 1
        return s

    def close(self) -> None:
        self.closed = True


_nvml_warned = False


def open_nvml():
    """A real :class:`NVMLReader`, or ``None`` (logged once per process)."""
    global _nvml_warned
    try:
        return NVMLReader()
    except RuntimeError as exc:
        if not _nvml_warned:
            _nvml_warned = True
            log.warning("gimbal: GPU monitoring disabled (%s); reporting throughput only", exc)
        return None


def visible_device_indices(env=None) -> List[int]:
    """NVML indices of the devices this job may use (CUDA_VISIBLE_DEVICES
    when numeric, else all)."""
    env = os.environ if env is None else env
    cvd = env.get("CUDA_VISIBLE_DEVICES", "").strip()
    if cvd and all(p.strip().isdigit() for p in cvd.split(",")):
        return [int(p) for p in cvd.split(",")]
    return []


class ThroughputMonitor:
    """Aggregates step throughput and GPU samples into periodic reports."""

    def __init__(self, writer: Optional[ReportWriter], nvml=None, devices: Optional[Sequence[int]] = None,
                 every_s: float = 30.0, every_steps: Optional[int] = None, extra: Optional[dict] = None,
                 clock=time.monotonic, start_step: int = 0, warmup_reports: int = 1,
                 sync: Optional[Callable[[], None]] = None):
        if start_step < 0 or warmup_reports < 0:
            raise ValueError("start_step and warmup_reports must be >= 0")
        self.writer = writer
        self.sync = sync
        self.warmup_left = int(warmup_reports)
        self.nvml = nvml
        self.devices = list(devices) if devices is not None else None
        self.every_s = every_s
        self.every_steps = every_steps
        self.extra = dict(extra or {})
        self.clock = clock
        self._reset(clock())
        self.step = int(start_step)
        self.records: List[dict] = []

    def _reset(self, now: float) -> None:
        self._t0 = now
        self._n_steps = 0
        self._samples = 0
        self._step_time = 0.0
        self._timed_steps = 0

    def _gpu_fields(self) -> dict:
        if self.nvml is None:
            return {}
        try:
            idx = self.devices if self.devices else list(range(self.nvml.device_count()))
            samples = [self.nvml.sample(i) for i in idx]
        except Exception as exc:  # NVML errors must not stop training
            log.warning("gimbal: NVML sample failed (%s); GPU fields skipped", exc)
            self.nvml = None
            return {}
        if not samples:
            return {}
        mine = os.getpid()
        return {
            "gpu_util": sum(s.util_pct for s in samples) / len(samples),
            "mem_used_mb": sum(s.mem_used_mb for s in samples),
            "mem_total_mb": sum(s.mem_total_mb for s in samples),
            "proc_mem_mb": sum(s.processes.get(mine, 0.0) for s in samples),
            "gpus": [{"index": s.index, "util": s.util_pct, "mem_used_mb": s.mem_used_mb,
                      "n_procs": len(s.processes)} for s in samples],
        }

    def step_done(self, samples: int, step_time_s: Optional[float] = None,
                  step: Optional[int] = None) -> Optional[dict]:
        """Record one finished step; returns the record when one was emitted.

        ``step``: the training step just finished (default: the previous one + 1).
        ``step_time_s=None``: the window's wall time is used instead (see the module doc)."""
        self.step = self.step + 1 if step is None else int(step)
        self._n_steps += 1
        self._samples += int(samples)
        if step_time_s is not None:
            self._step_time += float(step_time_s)
            self._timed_steps += 1
        now = self.clock()
        due = (self.every_steps is not None and self._n_steps >= self.every_steps) or \
              (self.every_steps is None and now - self._t0 >= self.every_s)
        if not due:
            return None
        return self.flush(now)

    def flush(self, now: Optional[float] = None) -> Optional[dict]:
        if self._n_steps == 0:
            return None
        if self.sync is not None:
            self.sync()  # the queued steps are done before the clock is read
            now = self.clock()
        now = self.clock() if now is None else now
        if self._timed_steps == self._n_steps and self._step_time > 0:
            busy = self._step_time
        else:
            busy = now - self._t0
        rec = {"samples_per_s": self._samples / busy if busy > 0 else None,
               "step_time_s": busy / self._n_steps if busy > 0 else None,
               "steps": self._n_steps, **self._gpu_fields(), **self.extra}
        if self.warmup_left > 0:
            self.warmup_left -= 1
            rec["warmup"] = True
        self._reset(now)
        self.records.append(rec)
        if self.writer is not None:
            self.writer.write(self.step, **rec)
        return rec

    def close(self) -> None:
        self.flush()
        if self.writer is not None:
            self.writer.close()
        if self.nvml is not None:
            self.nvml.close()
