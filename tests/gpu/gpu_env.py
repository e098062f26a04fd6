"""What a GPU test needs from the machine, found once: an NVIDIA GPU that nvidia-smi and torch see,
and for the MPS tests root and ``nvidia-cuda-mps-control``.  ``tests/conftest.py`` deselects
``tests/gpu`` (with one line saying why) on a machine without a GPU: CI machines have none,
and there the same code paths run against fakes (tests/launcher, tests/hooks)."""
from __future__ import annotations

import functools
import os
import shutil
import subprocess


@functools.lru_cache(maxsize=None)
def gpu_missing() -> str:
    """Why this machine cannot run tests/gpu, or "" when it can."""
    if shutil.which("nvidia-smi") is None:
        return "nvidia-smi not found"
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"nvidia-smi -L failed: {exc}"
    if out.returncode != 0 or "GPU 0" not in out.stdout:
        return f"nvidia-smi -L lists no GPU (rc {out.returncode})"
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} sees no CUDA device (a CPU build?)"
    return ""


def mps_missing() -> str:
    """Why the real MPS tests cannot run here, or ""."""
    if os.geteuid() != 0:
        return "the MPS hook tests run the hooks as slurmd does, as root"
    if shutil.which("nvidia-cuda-mps-control") is None:
        return "nvidia-cuda-mps-control not found"
    if shutil.which("setpriv") is None:
        return "setpriv (util-linux) not found"
    return ""
