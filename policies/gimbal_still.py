"""GIMBAL's calls at which nothing changed (issue #13: a +gimbal host is called every 30 s
round; at 64x8 on the Philly trace nineteen calls in twenty follow a call after which no job
view and no GPU changed, and each of them still brought the kept packing sets, the
below-ceiling jobs and the plan up to date from the change records, then asked every set
whether it was quiet).

:class:`Still` keeps, for :class:`policies.gimbal_walk.CoordKept`, the change records' logs of
its last full pass (``logs``) and the window in which every record of that pass's plan is
quiet (``window``).

* :meth:`Still.unchanged`: the snapshot's change records are usable and their logs are the
  very lists of the last pass, no longer (the same ids up to the same length, nothing
  appended).  Then every input of the kept packing sets, below-ceiling jobs, restore
  candidates and plan is what it was (the job views and the GPU map change only with an
  entry in those logs): ``KeptSets.update`` would answer ``same``, ``CoordKept._below``
  would answer the same list, and the pass would take the kept candidates and plan, as
  the full pass does on ``same``.
* :attr:`Still.window` = (lo, hi): the intersection of the quiet windows
  (:attr:`policies.gimbal_walk._SetRec.quiet`, for the objective) of every record of the
  plan, computed by the last lean pass that went over the plan (None when a record was
  not quiet or after a full pass).  A record's window changes only when it is searched,
  i.e. in a pass over the plan, which sets ``window`` again.  For ``lo <= now <= hi`` every
  record is quiet at ``now``: the loop over the plan would skip each, so it is skipped
  whole.
"""
from __future__ import annotations

import math
from typing import Optional

from .model import ClusterSnapshot


class Still:
    """What a CoordKept keeps to answer a call at which nothing changed (module doc)."""

    __slots__ = ("logs", "window")

    def __init__(self):
        self.logs: Optional[tuple] = None  # (GPU log, job log) of the last full pass
        self.window: Optional[tuple] = None  # (lo, hi): every plan record quiet within

    def unchanged(self, snap: ClusterSnapshot, usable: bool) -> bool:
        """Whether the change records (usable: ``records_usable(snap)``) got no entry since
        the last full pass."""
        logs = self.logs
        if not usable or logs is None:
            return False
        gl, jl = snap.gpu_changes.log, snap.job_changes.log
        return (len(gl) == len(logs[0]) and len(jl) == len(logs[1]) and gl.extends(logs[0])
                and jl.extends(logs[1]))

    def quiet(self, now: float) -> bool:
        """Whether every record of the kept plan is quiet at ``now``."""
        w = self.window
        return w is not None and w[0] <= now <= w[1]


def plan_window(plan, objective: str) -> Optional[tuple]:
    """The intersection of the quiet windows of the plan's records (records None are left
    alone by every pass: no constraint), None when a record has none for ``objective``."""
    lo, hi = -math.inf, math.inf
    for _, rec in plan:
        if rec is None:
            continue
        q = rec.quiet
        if q is None or q[0] != objective:
            return None
        if q[1] > lo:
            lo = q[1]
        if q[2] < hi:
            hi = q[2]
    return lo, hi
