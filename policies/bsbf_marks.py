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
robust marks standing at the end of a call (made after its last start), and hands them to
the next call while the snapshot's GPU change record shows no change since but that
call's starts, applied as planned (each started job running on its GPUs with its
sub-batch and accumulation steps, each of those GPUs holding what it held plus the jobs
started on it), and the tables, nodes and knobs are the same: there the round's state
is the one the marks were made on, but for the time, and they hold as they did.
A mark that is robust but for X near 0 (a bounds "F" class with D(0) = p2 within the
margin, D rising with X below the case break c) is *bounded*: D ≥ 2·margin for X ≥
low = (2·margin − p2)/q, so it is kept with (the class's jobs, low) per such class and
handed on only while every one of those jobs' X at the new call (as the groups would get
it, :func:`policies.share_index.x_now`) is ≥ low (:meth:`KeptMarks.take_bounded`); the
upper end holds as for robust marks.
A bounds "F" run of a class whose other groups are shared with (or evaluated exactly and
shared with) counts the same way over [0, the run's largest X]
(:meth:`policies.sjf_bsbf.SjfBsbf._run_holds`): D is piecewise linear in X with one
break at c, so its least value there is at 0, at c or at that largest X; robust when
all are above the margin, bounded by the run's own jobs (not the whole class's) when
only D(0) is not.  The run's other groups only lower what the job could share as X falls
(shared-with groups count at most what they count now), so the job still cannot start.
Without a usable record (the daemon's snapshots) nothing is carried and every call
starts without marks, as before.  The Plans are unchanged: a passed job's reason is
still made by ``_share`` on its own call's state (tests/policies/test_sjf_differential.py).
"""
from __future__ import annotations

import math
from typing import Optional

from .model import ClusterSnapshot, Frozen
from .records import gpu_record
from .share_index import x_fall, x_now


class KeptMarks:
    """The robust marks (signature -> i_B) left standing by the last call, with the GPU
    change record and context they hold for."""

    __slots__ = ("_log", "_ctx", "marks", "_starts", "_expect", "carried", "carried_started",
                 "bounds", "pending", "carried_bounded", "dropped_bounded")

    def __init__(self):
        self._log: Optional[Frozen] = None
        self._ctx: Optional[tuple] = None
        self.marks: dict = {}
        self._starts: tuple = ()  # (id, GPUs, sub-batch, accumulation steps) per start
        self._expect: dict = {}  # GPU -> the ids it holds once the starts are applied
        self.carried = 0  # calls that got marks (the tests assert the path is taken)
        self.carried_started = 0  # ... of them after a call that started jobs
        # signature -> (mark, ((job ids of a class, low), ...)): marks that hold while
        # each class's smallest X = t_A·i_A is ≥ its low (SjfBsbf._share)
        self.bounds: dict = {}
        self.pending: dict = {}  # those handed by take, for take_bounded to check
        self.carried_bounded = 0  # calls that kept a bounded mark (the tests assert it)
        self.dropped_bounded = 0  # bounded marks dropped: a class's X fell below its low

    @staticmethod
    def _context(snap: ClusterSnapshot, valid, per_gpu: bool) -> tuple:
        return (valid, snap.nodes, snap.gpu_types, snap.max_jobs_per_gpu, per_gpu)

    def take(self, snap: ClusterSnapshot, valid, per_gpu: bool) -> dict:
        """The marks that hold for ``snap`` (a new dict), else an empty one: the last call
        saved them, the GPU map has not changed since (same record, no entry after the one
        seen) and the context (``valid``: the :class:`policies.share_index.ShareKeep`
        validity tuple, replaced whenever its tables change) is the same; or the GPU map
        changed by exactly the last call's starts, applied as planned."""
        log, self._log = self._log, None
        marks, self.marks = self.marks, {}
        bounds, self.bounds = self.bounds, {}
        self.pending = {}
        if log is None or not (marks or bounds):
            return {}
        glog = gpu_record(snap)
        if glog is None or not glog.extends(log):
            return {}
        if ((len(glog) != len(log) or self._starts)
                and not self._applied(snap, glog[len(log):])):
            return {}
        ctx = self._context(snap, valid, per_gpu)
        old = self._ctx
        if (old is None or old[0] is not ctx[0] or old[1] is not ctx[1]
                or old[2] is not ctx[2] or old[3:] != ctx[3:]):
            return {}
        self.carried += 1
        self.carried_started += bool(self._starts)
        self.pending = bounds
        return dict(marks)

    def take_bounded(self, x_of) -> dict:
        """Of the bounded marks :meth:`take` handed on (``pending``), those whose every
        class's smallest X now (``x_of(job id)``: X at this call, ``None`` where not
        evaluable) is ≥ its low: signature -> (mark, constraints).  X only falls while
        the GPU map is the same, so the marks' upper ends hold as for robust marks."""
        pending, self.pending = self.pending, {}
        least: dict = {}  # id of a class's (or run's) job tuple -> its smallest X now
        x_at: dict = {}  # job id -> its X now (runs of several marks share jobs)
        held = {}
        for sid, (mark, cons) in pending.items():
            for jids, low in cons:
                m = least.get(id(jids))
                if m is None:
                    xs = []
                    for jid in jids:
                        x = x_at.get(jid, x_at)
                        if x is x_at:
                            x = x_at[jid] = x_of(jid)
                        xs.append(x)
                    m = least[id(jids)] = -1.0 if None in xs else min(xs)
                if not m >= low:
                    self.dropped_bounded += 1
                    break
            else:
                held[sid] = (mark, cons)
        self.carried_bounded += bool(held)
        return held

    def _applied(self, snap: ClusterSnapshot, changed) -> bool:
        """The GPUs changed since (``changed``) are the last call's starts', each holding
        what it held then plus the jobs started on it, and each started job runs there
        with the planned sub-batch and accumulation steps."""
        expect = self._expect
        if not expect or set(changed) != expect.keys():
            return False
        gpu_jobs = snap.gpu_jobs
        for g, on in expect.items():
            if gpu_jobs.get(g) != on:
                return False
        jobs = snap.jobs
        for jid, gpus, b, s in self._starts:
            view = jobs.get(jid)
            alloc = view.allocation if view is not None and view.running else None
            if (alloc is None or tuple(alloc.gpus) != gpus or alloc.sub_batch != b
                    or alloc.accum_steps != s):
                return False
        return True

    def save(self, snap: ClusterSnapshot, valid, per_gpu: bool, marks: Optional[dict],
             starts=(), bounded: Optional[dict] = None) -> None:
        """Keep ``marks`` (robust, standing at the end of the call, made after its last
        start; ``None``: nothing to keep) and ``bounded`` (signature -> (mark,
        [(class or RunRef, low)] made this call or the constraints carried)) for the next call of
        the same run, with the call's ``starts`` (:class:`policies.plan.StartJob`, in
        plan order)."""
        glog = gpu_record(snap)
        if not (marks or bounded) or glog is None:
            self._log, self.marks, self.bounds = None, {}, {}
            return
        self._log, self.marks = glog, dict(marks) if marks else {}
        bounds: dict = {}
        # (id of a class, lo, hi) of a run (a whole class: 0, None) -> its groups' job ids
        jobs_of: dict = {}
        for sid, (mark, cons) in (bounded or {}).items():
            if sid in self.marks:
                continue
            out = []
            for cls, low in cons:
                if not isinstance(cls, tuple):  # a class, or a run of one, of this call
                    run = _run_of(cls)
                    key = (id(run.cls), run.lo, run.hi)
                    jids = jobs_of.get(key)
                    if jids is None:
                        jids = jobs_of[key] = run.job_ids()
                    cls = jids
                out.append((cls, low))
            bounds[sid] = (mark, tuple(out))
        self.bounds = bounds
        self._ctx = self._context(snap, valid, per_gpu)
        expect: dict = {}
        for a in starts:  # the simulator appends a started job to each of its GPUs
            for g in a.gpus:
                on = expect.get(g)
                expect[g] = (tuple(snap.gpu_jobs.get(g, ())) if on is None else on) \
                    + (a.job_id,)
        self._expect = expect
        self._starts = tuple((a.job_id, tuple(a.gpus), a.sub_batch, a.accum_steps)
                             for a in starts)


def bounded_until(snap: ClusterSnapshot, keep, bounded: dict) -> float:
    """The time up to which every bounded mark of ``bounded`` (signature -> (mark,
    constraints), as :meth:`KeptMarks.save` takes them: a class or :class:`RunRef` of this
    call, or the job ids of a carried one, each with its low) still holds while only the
    time moves: each constrained job's X (:func:`policies.share_index.x_now`) falls at most
    at :func:`policies.share_index.x_fall`, so it stays ≥ its low until ``now + (X − low)
    / fall``, less a margin of 1e-6 of X and 1 ms against the float error of a later X.
    ``-inf`` where a job's X or its fall is not known, or X is at its low already (the
    simulator then calls at every tick, as before)."""
    now = snap.now
    until = math.inf
    seen: set = set()
    for _, cons in bounded.values():
        for ref, low in cons:
            if (id(ref), low) in seen:
                continue
            seen.add((id(ref), low))
            for jid in ref if isinstance(ref, tuple) else _run_of(ref).job_ids():
                x, fall = x_now(snap, keep, jid), x_fall(snap, keep, jid)
                if x is None or fall is None:
                    return -math.inf
                room = x - low - 1e-6 * max(abs(x), abs(low)) - 1e-3
                if room < 0.0:
                    return -math.inf
                if fall > 0.0 and now + room / fall < until:
                    until = now + room / fall
    return until


class RunRef:
    """The groups ``lo:hi`` of class ``cls`` of this call, named by a bounded mark's
    constraint (:meth:`policies.sjf_bsbf.SjfBsbf._run_holds`); :meth:`KeptMarks.save` turns
    it into the run's job ids, once per run.  A constraint names the run rather than copying
    its job ids when it is made: a waiting job's walk makes one per bounds "F" run of a
    mixed class, thousands on a large cluster, and only the marks still standing at the end
    of the call are kept (each made after the call's last start, so ``cls.groups`` are then
    the groups they were made on: a start is the only change to a class, and it clears the
    marks)."""

    __slots__ = ("cls", "lo", "hi")

    def __init__(self, cls, lo: int, hi: Optional[int]):
        self.cls, self.lo, self.hi = cls, lo, hi

    def job_ids(self) -> tuple:
        """The job ids of the run's groups, in order."""
        return tuple(gr.occ.job.id for gr in self.cls.groups[self.lo:self.hi])


def _run_of(ref) -> RunRef:
    """A constraint's class (the whole of it) or run of this call, as a :class:`RunRef`."""
    return ref if isinstance(ref, RunRef) else RunRef(ref, 0, None)


def kept_marks_of(pol) -> KeptMarks:
    """The policy instance's :class:`KeptMarks` (``pol._kept_marks``, made on first use)."""
    kept = pol.__dict__.get("_kept_marks")
    if kept is None:
        kept = pol._kept_marks = KeptMarks()
    return kept
