"""The simulator's change records of a snapshot, when a policy may use them.

A snapshot of the simulator carries append-only change records (:class:`~policies.model.
JobChanges`, :class:`~policies.model.GpuChanges`, the waiting queue's ``changes``): a later
snapshot of the same run gets a longer view of the same list, so a policy that kept
something from an earlier call reads only the entries since.  A record is usable only while
it belongs to the very mapping the snapshot holds (``dataclasses.replace(snap, jobs=...)``
drops back to a full pass) and is the simulator's :class:`~policies.model.Frozen` view; the
daemon's snapshots carry none.  These three functions say that once, for every kept
structure in ``policies/``; each returns the record's log, or ``None`` where it is not
usable (the caller then takes its full path).
"""
from __future__ import annotations

from typing import Optional

from .model import ClusterSnapshot, Frozen


def job_record(snap: ClusterSnapshot) -> Optional[Frozen]:
    """The log of the snapshot's job change record (``job_changes``: ids, one entry each
    time the job map changed at that id) when it belongs to ``snap.jobs``, else ``None``."""
    jr = snap.job_changes
    log = jr.log if jr is not None and jr.source is snap.jobs else None
    return log if isinstance(log, Frozen) else None


def gpu_record(snap: ClusterSnapshot) -> Optional[Frozen]:
    """The log of the snapshot's GPU change record (``gpu_changes``: GPUs, one entry each
    time the GPU map changed there) when it belongs to ``snap.gpu_jobs``, else ``None``."""
    gr = snap.gpu_changes
    log = gr.log if gr is not None and gr.source is snap.gpu_jobs else None
    return log if isinstance(log, Frozen) else None


def queue_record(snap: ClusterSnapshot) -> Optional[Frozen]:
    """The log of the waiting queue's change record (``queue.changes``) when it belongs to
    ``snap.jobs``, else ``None``."""
    q = snap.queue
    log = q.changes if q is not None and q.source is snap.jobs else None
    return log if isinstance(log, Frozen) else None


def records_usable(snap: ClusterSnapshot) -> bool:
    """Whether the snapshot carries usable change records of both its GPU map and its job
    map (the simulator's; the daemon's snapshots have none)."""
    return gpu_record(snap) is not None and job_record(snap) is not None
