"""Trace formats and the trace error: what the CLI needs before it loads a trace
(kept apart from :mod:`gimbalctl.traces` so that ``gimbalctl --help`` and commands
that load no trace do not import pandas)."""
from __future__ import annotations

from typing import Optional

# columns a trace of each kind must have (gimbalctl/traces.py documents the formats)
REQUIRED = {
    "pollux": ["name", "time", "application", "num_replicas", "batch_size"],
    "philly": ["timestamp", "duration", "num_gpus"],
    "tiresias": ["job_id", "num_gpu", "submit_time", "duration"],
    "muri": ["job_id", "num_gpu", "submit_time", "duration"],
    "generic": ["id", "submit_time", "num_gpus"],
    "sacct": ["JobID", "Submit", "Start", "End"],
}


class TraceError(ValueError):
    def __init__(self, path, line: Optional[int], column: Optional[str], problem: str):
        self.path, self.line, self.column, self.problem = path, line, column, problem
        where = str(path) + (f":{line}" if line is not None else "")
        where += f": column {column!r}" if column else ""
        super().__init__(f"{where}: {problem}")
