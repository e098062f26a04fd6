"""Error types raised by the Slurm backend.

Every error carries a message that names what failed (command, job, field),
so the CLI can print it as is.
"""
from __future__ import annotations

from typing import Optional, Sequence


class SlurmError(RuntimeError):
    """Base class of every Slurm backend error."""


class SlurmUnavailable(SlurmError):
    """The controller cannot be reached, or the Slurm tools are not installed."""


class SlurmTimeout(SlurmUnavailable):
    """A Slurm command or API call did not answer in time."""


class SlurmCommandError(SlurmError):
    """A Slurm command ran but failed (non-zero exit status)."""

    def __init__(self, argv: Sequence[str], returncode: int, stderr: str):
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = (stderr or "").strip()
        super().__init__(f"{' '.join(self.argv)} failed (exit {returncode}): {self.stderr}")


class SlurmParseError(SlurmError):
    """Slurm output could not be understood (message names the field/text)."""


class SlurmVersionError(SlurmError):
    """The backend does not support the running Slurm release."""


class JobNotFound(SlurmError):
    def __init__(self, job_id: str, detail: Optional[str] = None):
        self.job_id = str(job_id)
        super().__init__(f"Slurm job {job_id} not found" + (f": {detail}" if detail else ""))


# stderr fragments that mean "the controller is not there"
UNAVAILABLE_HINTS = (
    "Unable to contact slurm controller",
    "Socket timed out",
    "Connection refused",
    "Zero Bytes were transmitted or received",
    "Could not establish a configuration source",
    "Unable to establish controller machine",
)


def is_unavailable(stderr: str) -> bool:
    return any(h.lower() in (stderr or "").lower() for h in UNAVAILABLE_HINTS)
