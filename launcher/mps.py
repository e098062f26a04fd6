"""MPS resource limits for a job's processes (seed 004 §4.1 "Low-level GPU
resource restriction (LGRR)" and §6 "Low-overhead resource restriction").

LGRR restricts a worker with NVIDIA MPS: ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``
caps the SMs a client may use and ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``
(``"0=8000M,1=8000M"``: device ordinal = limit) caps its device memory.  The
calibrator moves the thread share in 10 % steps (§4.1, §7.4):
:func:`squeeze` / :func:`swell`.

Both variables are read by a CUDA client when it creates its context, so a
running worker's share cannot change: gimbal-run applies a new share by
checkpoint + relaunch (see ``launcher.run``).  The paper's CUDA context pool
(§6) needs a patched PyTorch, which gimbal does not ship.

Never loosen: if the environment already carries a tighter limit (e.g. set
by Slurm's ``gres/mps``), it is kept (:func:`mps_env`).
"""
from __future__ import annotations

import re
from typing import Dict, Mapping, Optional

THREAD_VAR = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
MEM_VAR = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
LGRR_STEP = 10  # percent, seed 004 §4.1 / §7.4

_UNITS_MB = {"": 1.0, "M": 1.0, "MB": 1.0, "G": 1024.0, "GB": 1024.0,
             "K": 1.0 / 1024, "KB": 1.0 / 1024, "T": 1024.0 * 1024}


class MPSConfigError(ValueError):
    pass


def squeeze(pct: int, step: int = LGRR_STEP, floor: int = LGRR_STEP) -> int:
    """One LGRR squeeze: lower the thread share by ``step`` percent, to the
    10 % grid, never below ``floor``."""
    return max(floor, (int(pct) - 1) // step * step if int(pct) % step else int(pct) - step)


def swell(pct: int, step: int = LGRR_STEP) -> int:
    """One LGRR swell: raise the thread share by ``step`` percent on the 10 % grid, max 100."""
    return min(100, (int(pct) // step + 1) * step)


def parse_thread_pct(raw: str, var: str = THREAD_VAR) -> float:
    try:
        val = float(raw)
    except (TypeError, ValueError):
        raise MPSConfigError(f"{var}: expected a percentage, got {raw!r}") from None
    if not 0 < val <= 100:
        raise MPSConfigError(f"{var}: must be in (0, 100], got {raw!r}")
    return val


def parse_mem_limit(raw: str, var: str = MEM_VAR) -> Dict[str, float]:
    """``"0=8000M,1=2G"`` -> ``{"0": 8000.0, "1": 2048.0}`` (MB).

    A bare value without ``ordinal=`` applies to all devices (key ``"*"``)."""
    out: Dict[str, float] = {}
    for item in (raw or "").split(","):
        item = item.strip()
        if not item:
            continue
        if "=" in item:
            dev, val = item.split("=", 1)
        else:
            dev, val = "*", item
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?B?)\s*", val.upper())
        if not m or not dev.strip():
            raise MPSConfigError(f"{var}: cannot parse {item!r} (expected like '0=8000M')")
        out[dev.strip()] = float(m.group(1)) * _UNITS_MB[m.group(2)]
    return out


def format_mem_limit(limits: Mapping[str, float]) -> str:
    parts = []
    for dev in sorted(limits, key=lambda d: (d == "*", int(d) if d.isdigit() else 0)):
        mb = int(limits[dev])
        parts.append(f"{mb}M" if dev == "*" else f"{dev}={mb}M")
    return ",".join(parts)


def mps_env(thread_pct: Optional[int], mem_limit_mb: Optional[int], num_devices: int,
            current: Mapping[str, str]) -> Dict[str, str]:
    """Variables to set on the job's processes for the decided MPS share.

    ``current`` is the inherited environment; a value there that is already
    tighter wins (never loosen what Slurm's gres/mps set).  Returns only the
    variables whose value should be (re)set."""
    out: Dict[str, str] = {}
    if thread_pct is not None:
        pct = float(thread_pct)
        if not 0 < pct <= 100:
            raise MPSConfigError(f"mps thread percentage must be in (0, 100], got {thread_pct}")
        if current.get(THREAD_VAR, "").strip():
            pct = min(pct, parse_thread_pct(current[THREAD_VAR]))
        out[THREAD_VAR] = str(int(pct)) if float(pct).is_integer() else f"{pct:g}"
    if mem_limit_mb is not None:
        if mem_limit_mb <= 0:
            raise MPSConfigError(f"mps memory limit must be > 0 MB, got {mem_limit_mb}")
        existing = parse_mem_limit(current.get(MEM_VAR, ""))
        n = max(1, int(num_devices))
        limits = {}
        for dev in [str(i) for i in range(n)]:
            mb = float(mem_limit_mb)
            for key in (dev, "*"):
                if key in existing:
                    mb = min(mb, existing[key])
            limits[dev] = mb
        # devices the old setting named beyond ours keep their own limit
        for dev, mb in existing.items():
            if dev != "*" and dev not in limits:
                limits[dev] = mb
        out[MEM_VAR] = format_mem_limit(limits)
    return out


def rank_mps_env(workers, rank: int, num_devices: int,
                 current: Mapping[str, str]) -> Dict[str, str]:
    """This rank's own MPS limits from the per-worker allocation record (``GIMBAL_WORKERS``,
    rank order): a packed worker and an unpacked worker of one job may run with different
    thread shares (seed 004 §5.2: LGRR squeezes a worker, not a job).  Set by the per-rank
    shim (:mod:`launcher.worker`) before the training script creates its CUDA context; the
    job-level value gimbal-run put in the environment, or Slurm's gres/mps, stays the ceiling
    (:func:`mps_env` never loosens).  No record, or a rank beyond it: nothing to set."""
    if not workers or not 0 <= int(rank) < len(workers):
        return {}
    w = workers[int(rank)]
    return mps_env(w.get("mps_pct"), w.get("mem_limit_mb"), num_devices, current)


def current_limits(env: Mapping[str, str]) -> Dict[str, object]:
    """The MPS limits in force for this process (for logging and reports)."""
    res: Dict[str, object] = {"thread_pct": None, "mem_limit_mb": None}
    if env.get(THREAD_VAR, "").strip():
        res["thread_pct"] = parse_thread_pct(env[THREAD_VAR])
    if env.get(MEM_VAR, "").strip():
        res["mem_limit_mb"] = parse_mem_limit(env[MEM_VAR])
    return res
