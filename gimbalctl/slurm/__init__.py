"""The only code in gimbal that talks to Slurm.

``get_backend("auto"|"cli"|"pyslurm")`` returns a :class:`Backend`; see
:mod:`.cli` (squeue/sinfo/scontrol/sprio/scancel) and :mod:`.pyslurm_backend`.
"""
from .backend import Backend
from .errors import (JobNotFound, SlurmCommandError, SlurmError, SlurmParseError, SlurmTimeout,
                     SlurmUnavailable, SlurmVersionError)
from .meta import GimbalMeta, parse_meta
from .select import get_backend
from .types import Change, GresUse, SlurmJob, SlurmNode

__all__ = ["Backend", "Change", "GimbalMeta", "GresUse", "JobNotFound", "SlurmCommandError",
           "SlurmError", "SlurmJob", "SlurmNode", "SlurmParseError", "SlurmTimeout",
           "SlurmUnavailable", "SlurmVersionError", "get_backend", "parse_meta"]
