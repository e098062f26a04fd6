"""The backend interface: read jobs/nodes, mutate jobs, each mutation returns a Change.

Subclasses implement the small set of primitives (``_load_jobs``,
``_load_nodes``, ``_version``, ``_do``); the shared logic here reads the
"before" value, skips no-op changes, performs the change and reads it back.
"""
from __future__ import annotations

import logging
from typing import Any, Iterable, Optional, Sequence

from .errors import JobNotFound, SlurmError
from .types import Change, SlurmFinishedJob, SlurmJob, SlurmNode

log = logging.getLogger("gimbal.slurm")

# fields a Change may name, and how to read the current value from a SlurmJob
FIELDS = {
    "priority": lambda j: j.priority,
    "site_factor": lambda j: j.site_factor,
    "nice": lambda j: j.nice,
    "gres": lambda j: gres_str(j.gres_req, j.gpu_type_req),
    "req_nodes": lambda j: ",".join(j.req_nodes),
    "hold": lambda j: j.held,
    "release": lambda j: not j.held,
    "requeue_hold": lambda j: j.state,
    "signal": lambda j: j.state,
    "begin_time": lambda j: j.eligible_time,  # set to "now": clears a requeue's start delay
}


def gres_str(req: dict, gpu_type: Optional[str] = None) -> str:
    """``{"gpu": 2}`` -> ``gpu:2`` (``gpu:<type>:2`` with the type the request names)."""
    return ",".join(f"{k}:{gpu_type}:{v}" if k == "gpu" and gpu_type else f"{k}:{v}"
                    for k, v in sorted(req.items()))


class Backend:
    """Abstract Slurm access.  ``name`` is ``cli`` or ``pyslurm``."""

    name = "abstract"

    def __init__(self) -> None:
        self._ver: Optional[tuple[int, int, int]] = None
        # records the last jobs() / nodes() read had to leave out, one message each (naming
        # the job or node); the daemon records them in the cycle
        self.read_warnings: list[str] = []
        self.node_warnings: list[str] = []
        # records the last finished_jobs() read left out, and the sacct format it used
        self.history_warnings: list[str] = []
        self.history_format: str = ""

    # ---- primitives -----------------------------------------------------
    def _version(self) -> tuple[int, int, int]:
        raise NotImplementedError

    def _load_jobs(self, job_ids: Optional[Sequence[str]] = None) -> list[SlurmJob]:
        raise NotImplementedError

    def _load_nodes(self) -> list[SlurmNode]:
        raise NotImplementedError

    def _do(self, job_id: str, field: str, value: Any) -> tuple[str, ...]:
        """Perform one change; returns the argv (or a description) used."""
        raise NotImplementedError

    def describe(self, job_id: str, field: str, value: Any) -> tuple[str, ...]:
        """The argv a change would run (for dry runs)."""
        raise NotImplementedError

    # ---- reads ----------------------------------------------------------
    def cluster_name(self) -> str:
        """Slurm's ClusterName (keys the daemon lock); backends override this."""
        return "default"

    def version(self) -> tuple[int, int, int]:
        if self._ver is None:
            self._ver = self._version()
        return self._ver

    @property
    def release(self) -> str:
        v = self.version()
        return f"{v[0]}.{v[1]:02d}"

    def jobs(self, states: Optional[Iterable[str]] = None) -> list[SlurmJob]:
        want = {s.upper() for s in states} if states else None
        self.read_warnings = []
        return [j for j in self._load_jobs() if want is None or j.state in want]

    def job(self, job_id: str) -> SlurmJob:
        for j in self._load_jobs([str(job_id)]):
            if j.job_id == str(job_id):
                return j
        raise JobNotFound(job_id)

    def nodes(self) -> list[SlurmNode]:
        self.node_warnings = []
        return self._load_nodes()

    def finished_jobs(self, since: float, until: Optional[float] = None,
                      max_rows: int = 100_000, timeout: Optional[float] = None
                      ) -> list[SlurmFinishedJob]:
        """Jobs that completed between ``since`` and ``until`` (epoch seconds; ``until``
        None: now) from the accounting database, newest ``max_rows`` only (a message in
        ``history_warnings`` says when rows were cut).  Raises :class:`SlurmError` when there
        is no accounting (no slurmdbd) or it cannot be read."""
        raise NotImplementedError

    # ---- mutations ------------------------------------------------------
    def change(self, job_id: str, field: str, value: Any, before: Optional[SlurmJob] = None,
               dry_run: bool = False, force: bool = False) -> Change:
        """Set ``field`` of ``job_id`` to ``value``; returns what changed.

        No-op (``applied=False``, no argv) when the current value already
        equals ``value`` unless ``force``.  After the change the job is read
        again and ``read_back`` holds the new value.
        """
        if field not in FIELDS:
            raise ValueError(f"unknown job field {field!r}; valid: {', '.join(FIELDS)}")
        job_id = str(job_id)
        cur = before if before is not None else self.job(job_id)
        old = FIELDS[field](cur)
        target = value
        if not force and field not in ("requeue_hold", "signal", "begin_time") and \
                _same(field, old, target):
            return Change(job_id, field, old, target, (), applied=False, read_back=old)
        argv = self.describe(job_id, field, value)
        if dry_run:
            return Change(job_id, field, old, target, argv, applied=False)
        try:
            argv = self._do(job_id, field, value)
        except SlurmError as e:
            return Change(job_id, field, old, target, argv, applied=False, error=str(e))
        try:
            after = FIELDS[field](self.job(job_id))
        except JobNotFound:
            after = None
        return Change(job_id, field, old, target, argv, applied=True, read_back=after)

    def set_priority(self, job_id, value: int, **kw) -> Change:
        return self.change(job_id, "priority", int(value), **kw)

    def set_site_factor(self, job_id, value: int, **kw) -> Change:
        return self.change(job_id, "site_factor", int(value), **kw)

    def set_nice(self, job_id, value: int, **kw) -> Change:
        return self.change(job_id, "nice", int(value), **kw)

    def hold(self, job_id, **kw) -> Change:
        return self.change(job_id, "hold", True, **kw)

    def release_job(self, job_id, **kw) -> Change:
        return self.change(job_id, "release", True, **kw)

    def set_gres(self, job_id, spec: str, **kw) -> Change:
        """``spec`` like ``gpu:2`` / ``shard:2`` / ``mps:50`` (per node)."""
        return self.change(job_id, "gres", spec, **kw)

    def set_req_nodes(self, job_id, nodes: Sequence[str], **kw) -> Change:
        return self.change(job_id, "req_nodes", ",".join(nodes), **kw)

    def requeue_hold(self, job_id, **kw) -> Change:
        return self.change(job_id, "requeue_hold", "PENDING", **kw)

    def signal(self, job_id, sig: str = "USR2", **kw) -> Change:
        return self.change(job_id, "signal", sig, **kw)


def _same(field: str, old: Any, new: Any) -> bool:
    if field in ("hold", "release"):
        return bool(old) == bool(new)
    if field == "gres":  # counts and the GPU type (gpu:k80:1 is not gpu:v100:1 nor gpu:1)
        from .parse import gres_gpu_type, parse_gres_spec
        return parse_gres_spec(old) == parse_gres_spec(new) and \
            gres_gpu_type(old) == gres_gpu_type(new)
    if field == "req_nodes":
        return sorted(filter(None, str(old or "").split(","))) == \
            sorted(filter(None, str(new or "").split(",")))
    return old == new
