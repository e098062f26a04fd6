"""Verbatim copy of ``Simulator._view`` as it was before the views were built without
``dataclasses.replace`` (issue #13).  The test in tests/test_sim_snapshot_sharing.py checks
every view of every snapshot against it (equal, the same attributes in the same order)."""
from __future__ import annotations

import dataclasses

from policies.model import Job, JobState


def view(self, rec) -> Job:
    """The view the old ``_view`` made of ``rec`` (``self``: the simulator)."""
    return dataclasses.replace(
        rec.spec,
        total_iters=rec.spec.total_iters if self.reveal else None,
        state=rec.state, allocation=rec.alloc, start_time=rec.first_start,
        as_of=rec.as_of, completed_iters=rec.done_iters, attained_service=rec.service,
        executed_time=rec.executed,
        iter_rate=rec.rate if rec.state is JobState.RUNNING else 0.0,
        restore_left=rec.overhead if rec.state is JobState.RUNNING else 0.0,
        preemptions=rec.preemptions,
        run_start=rec.run_start if rec.state is JobState.RUNNING else None)
