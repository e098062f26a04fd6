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


_SHARED: list = []  # [gpu record log last read, GPUs held by two jobs or more then]


def any_shared_gpu(snap: ClusterSnapshot) -> bool:
    """Whether some GPU of ``snap.gpu_jobs`` is held by two jobs or more.

    With the simulator's GPU record the answer is kept from the last call that asked, and
    only the GPUs logged since are looked at again (their entries now decide whether they
    are shared); otherwise every entry is read."""
    gj = snap.gpu_jobs
    log = gpu_record(snap)
    if log is None:
        return max(map(len, gj.values()), default=0) > 1
    if _SHARED and log.extends(_SHARED[0]):
        shared = _SHARED[1]
        for g in set(log[len(_SHARED[0]):]):
            if len(gj.get(g, ())) > 1:
                shared.add(g)
            else:
                shared.discard(g)
    else:
        shared = {g for g, on in gj.items() if len(on) > 1}
        _SHARED[:] = [log, shared]
    _SHARED[0] = log
    return bool(shared)
