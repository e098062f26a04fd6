"""Training-side half of the checkpoint/relaunch protocol.

Protocol (squeeze/swell of the MPS share, seed 004 §4.1 LGRR and §6: a
running MPS client's share cannot change, so a new share needs a restart;
also used for Slurm pre-emption notices):

1. gimbal-run sends ``SIGUSR2`` to every training process (the
   ``launcher.worker`` shim installs :func:`install_handler` before the
   script runs, so the signal only sets a flag; ``SIGUSR1`` is left alone).
2. The training loop polls :func:`should_checkpoint` at step boundaries
   (``sync=True`` all-reduces the flag so all ranks agree on the same step),
   and calls :func:`checkpoint_and_exit`: rank 0 saves atomically, all ranks
   meet at a barrier, then every rank exits with :data:`EXIT_CHECKPOINT` (75).
3. gimbal-run sees exit code 75, re-reads the decision file and relaunches
   torchrun with the new limits and ``GIMBAL_RESTART_COUNT`` incremented; the
   script resumes with :func:`load_checkpoint`.
"""
from __future__ import annotations

import os
import signal
import sys
from typing import Any, Optional

from .fsutil import atomic_target

EXIT_CHECKPOINT = 75  # EX_TEMPFAIL: "checkpointed, relaunch me"
CHECKPOINT_SIGNAL = signal.SIGUSR2
DEFAULT_NAME = "checkpoint.pt"

_flag = False
_installed = False


def _handler(signum, frame) -> None:  # pragma: no cover - trivial
    global _flag
    _flag = True


def install_handler(sig: int = CHECKPOINT_SIGNAL) -> None:
    """Make ``sig`` (SIGUSR2) set the checkpoint flag instead of killing us.

    Must be called from the main thread; idempotent."""
    global _installed
    signal.signal(sig, _handler)
    _installed = True


def request_checkpoint() -> None:
    """Set the flag programmatically (tests, or a training-side policy)."""
    global _flag
    _flag = True


def clear() -> None:
    global _flag
    _flag = False


def checkpoint_requested() -> bool:
    """This process's flag, without synchronising with other ranks."""
    return _flag


def _dist():
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover
        return None
    return dist if dist.is_available() and dist.is_initialized() else None


def should_checkpoint(sync: bool = True) -> bool:
    """True when a checkpoint was requested on any rank.

    With ``sync`` and an initialised process group the flag is all-reduced
    (MAX), so every rank must call this at the same step.  Costs one tiny
    collective: poll every few steps in tight loops."""
    dist = _dist()
    if not sync or dist is None:
        return _flag
    import torch
    backend = dist.get_backend()
    dev = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
    t = torch.tensor([1 if _flag else 0], dtype=torch.int32, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def checkpoint_dir(default: Optional[str] = None) -> Optional[str]:
    return os.environ.get("GIMBAL_CHECKPOINT_DIR") or default


def default_path(path: Optional[str] = None) -> str:
    if path:
        return path
    d = checkpoint_dir()
    if not d:
        raise RuntimeError("no checkpoint path given and GIMBAL_CHECKPOINT_DIR is not set")
    return os.path.join(d, DEFAULT_NAME)


def save_checkpoint(state: Any, path: Optional[str] = None) -> str:
    """``torch.save`` to a temp file next to ``path`` then ``os.replace``:
    a crash mid-save leaves the previous checkpoint intact."""
    import torch
    path = default_path(path)
    with atomic_target(path, ".ckpt-") as tmp:
        torch.save(state, tmp)
    return path


def load_checkpoint(path: Optional[str] = None, map_location: Any = "cpu") -> Optional[Any]:
    """The saved state, or ``None`` when there is no checkpoint yet."""
    import torch
    try:
        path = default_path(path)
    except RuntimeError:
        return None
    if not os.path.exists(path):
        return None
    return torch.load(path, map_location=map_location, weights_only=False)


def checkpoint_and_exit(state: Any, path: Optional[str] = None,
                        exit_code: int = EXIT_CHECKPOINT) -> None:
    """Rank 0 saves ``state``; all ranks wait for it, then exit with 75."""
    dist = _dist()
    rank = dist.get_rank() if dist is not None else 0
    if rank == 0:
        save_checkpoint(state, path)
    if dist is not None:
        dist.barrier()
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(exit_code)
