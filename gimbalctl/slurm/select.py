"""Backend selection: pyslurm when it imports AND matches the running Slurm release, else the CLI."""
from __future__ import annotations

import logging
from typing import Optional, Sequence

from .backend import Backend
from .cli import CliBackend
from .errors import SlurmVersionError

log = logging.getLogger("gimbal.slurm")


def get_backend(kind: str = "auto", timeout: float = 20.0, prefix: Sequence[str] = (),
                partition: Optional[str] = None) -> Backend:
    """``kind``: ``auto`` | ``cli`` | ``pyslurm``.  ``pyslurm`` raises
    :class:`SlurmVersionError` when pyslurm is missing or built for another release."""
    if kind not in ("auto", "cli", "pyslurm"):
        raise ValueError(f"--backend {kind!r}: choose auto, cli or pyslurm")
    cli = CliBackend(timeout=timeout, prefix=prefix, partition=partition)
    if kind == "cli" or prefix:
        return cli
    try:
        from .pyslurm_backend import PyslurmBackend
        py = PyslurmBackend(timeout=timeout, partition=partition)
        py.check_compatible(cli)
        return py
    except (ImportError, SlurmVersionError) as e:
        if kind == "pyslurm":
            raise SlurmVersionError(f"--backend pyslurm: {e}") from None
        log.info("pyslurm backend not usable (%s); using the CLI backend", e)
        return cli
