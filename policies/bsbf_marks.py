"""SJF-BSBF's signature marks kept across policy calls (issue #13, docs/scale.md §2).

Within one round SJF-BSBF (seed 000 Alg. 1) marks the signature (application, global
batch, GPUs) of a waiting job that could not start when every group it did not share
with surely could not be shared with (:meth:`policies.sjf_bsbf.SjfBsbf._share`); later
jobs of that signature within the mark's i_B window are passed without the per-class
walk until the round's next start.  On the Philly trace at 64x8 most calls are the
simulator's periodic ticks and arrivals, which change neither the GPU map nor anything
Algorithm 2 reads except the time, so the same first job of every signature was walked
again at almost every call.

Time moves only X = t_A·i_A of each running job A, and only down (i_A is A's remaining
iterations at ``snap.now``, or its remaining estimate, neither of which grows while the
GPU map stays the same).  A mark is *robust* when each of its groups is, for every X
from 0 to its class's largest X now: memory-blocked, not evaluable (both
time-independent), or shared with (those GPUs count at most what they count now), or
a bounds "F" class whose D(X) = t_share − t_seq stays above the margin on all of
[0, X_max] (not only on the class's current range).  :class:`KeptMarks` keeps the
robust marks standing at the end of a call that started nothing, and hands them to the
next call while the snapshot's GPU change record shows no change since (and the tables,
nodes and knobs are the same): there they hold as they did.  Without a usable record
(the daemon's snapshots) nothing is carried and every call starts without marks, as
before.  The Plans are unchanged: a passed job's reason is still made by ``_share`` on
its own call's state (tests/policies/test_sjf_differential.py)."""
from __future__ import annotations

from typing import Optional

from .model import ClusterSnapshot, Frozen


class KeptMarks:
    """The robust marks (signature -> i_B) left standing by the last call, with the GPU
    change record and context they hold for."""

    __slots__ = ("_log", "_ctx", "marks", "carried")

    def __init__(self):
        self._log: Optional[Frozen] = None
        self._ctx: Optional[tuple] = None
        self.marks: dict = {}
        self.carried = 0  # calls that got marks (the tests assert the path is taken)

    @staticmethod
    def _context(snap: ClusterSnapshot, valid, per_gpu: bool) -> tuple:
        return (valid, snap.nodes, snap.gpu_types, snap.max_jobs_per_gpu, per_gpu)

    def take(self, snap: ClusterSnapshot, valid, per_gpu: bool) -> dict:
        """The marks that hold for ``snap`` (a new dict), else an empty one: the last call
        saved them, the GPU map has not changed since (same record, no entry after the one
        seen) and the context (``valid``: the :class:`policies.share_index.ShareKeep`
        validity tuple, replaced whenever its tables change) is the same."""
        log, self._log = self._log, None
        marks, self.marks = self.marks, {}
        if log is None or not marks:
            return {}
        rec = snap.gpu_changes
        if (rec is None or rec.source is not snap.gpu_jobs or type(rec.log) is not Frozen
                or len(rec.log) != len(log) or not rec.log.extends(log)):
            return {}
        ctx = self._context(snap, valid, per_gpu)
        old = self._ctx
        if (old is None or old[0] is not ctx[0] or old[1] is not ctx[1]
                or old[2] is not ctx[2] or old[3:] != ctx[3:]):
            return {}
        self.carried += 1
        return dict(marks)

    def save(self, snap: ClusterSnapshot, valid, per_gpu: bool, marks: Optional[dict]) -> None:
        """Keep ``marks`` (robust, standing at the end of a call that started nothing;
        ``None``: nothing to keep) for the next call of the same run."""
        rec = snap.gpu_changes
        if (not marks or rec is None or rec.source is not snap.gpu_jobs
                or type(rec.log) is not Frozen):
            self._log, self.marks = None, {}
            return
        self._log, self.marks = rec.log, dict(marks)
        self._ctx = self._context(snap, valid, per_gpu)


def kept_marks_of(pol) -> KeptMarks:
    """The policy instance's :class:`KeptMarks` (``pol._kept_marks``, made on first use)."""
    kept = pol.__dict__.get("_kept_marks")
    if kept is None:
        kept = pol._kept_marks = KeptMarks()
    return kept
