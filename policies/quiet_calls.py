"""Calls at which nothing happened since the last one (issue #13, docs/scale.md §2).

SRTF and SRSF (seed 001 §5) and Tiresias (Gu et al., NSDI'19, promote knob off, no
minimum run time) admit the active jobs greedily in key order over the whole cluster
(:func:`policies.base.schedule_preemptive`).  On the Philly trace at 64x8 about 40 % of the
simulator's calls are "quiet": ticks (every 60 s while jobs wait) with no arrival, no
completion and nothing else changed since the last call but the last call's own Plan
applied.  Such a call's Plan has no action, and this module answers it without ranking
any job.  (Those calls were already among the cheap ones: measured together with the
merge's one-step runs, SRSF's policy time on the whole trace fell by about 1.5 %.)

Why.  Let the last call (at ``t0``) admit the set ``A`` (its running jobs less the ones it
pre-empted, plus the ones it started).  Suppose at ``now >= t0``:

1. the jobs are ``A``, running, and the waiting ones, nothing else (no arrival, no
   completion): the running jobs of ``t0`` in ``A`` have the very same views, the started
   ones run, and the counts add up;
2. no running view's key has risen since ``t0`` (SRTF/SRSF: a running view's remaining
   time only falls; Tiresias: its queue stays until the horizon the running keys' cache
   computed, :mod:`policies.running_keys`), a started job's key is not above its waiting
   key at ``t0`` and a pre-empted job's waiting key is not below its running key at ``t0``;
3. every other waiting job has the same view (the change record names no other job),
   hence the same key.

At ``t0`` every waiting job ``w`` not admitted found fewer GPUs left than it asks:
``total - G_t0(< k_w) < g_w``, with ``G_t(< k)`` the GPUs of the jobs of ``A`` whose key
at ``t`` is below ``k`` (every job of ``A`` before ``w`` was admitted; a pre-empted job
counts as a waiting one at its running key, not lower).  Keys of ``A`` never rose, so
``G_now(< k_w) >= G_t0(< k_w)``: by induction along the order no waiting job is admitted
at ``now``, so every job of ``A`` fits (they all fit together) and is admitted.  The Plan
is the one :func:`policies.kept_order.schedule_preemptive_kept` makes when it starts and
pre-empts nothing: no action, every waiting job in the kept order with the shared
WAIT_RESOURCES reason, every running job the shared KEEP_RUNNING one
(tests/policies/test_queue_differential.py checks it against the old code at every call).

The checks cost O(changes) (the running views unchanged: read from the simulator's job
change record since the last call, else one C-level identity pass over them).  A
quiet answer becomes the record for the next call (``A`` with the started jobs' views of
``now``, nothing started or pre-empted).  Any call that is not answered here replaces the
record (or clears it); so does a snapshot of another run, an older one, another profile
table, node tuple or policy parameters."""
from __future__ import annotations

import math
from operator import attrgetter, is_
from typing import Callable, Optional

from .model import ClusterSnapshot, Frozen, Job
from .records import job_record, queue_record

_INF = math.inf
_ID = attrgetter("id")


class QuietCalls:
    """The last call's facts (one policy instance): its change record, ``now``, context,
    running views, the jobs it started (id -> waiting key) and pre-empted (id -> running
    key), and the time up to which no running key rises (``steady``, or a callable that
    computes it on first use)."""

    __slots__ = ("_log", "_now", "_ctx", "_running", "_started", "_preempted", "_steady",
                 "_jlog")

    def __init__(self):
        self.clear()

    def clear(self) -> None:
        self._log: Optional[Frozen] = None

    def note(self, snap: ClusterSnapshot, context: tuple, running: list, started: dict,
             preempted: dict, steady) -> None:
        """Record a call that ranked the jobs (``steady``: a time, or a no-argument
        callable giving it, for the running jobs of ``running`` kept by the Plan)."""
        log = queue_record(snap)
        if log is None or not math.isfinite(snap.now):
            self._log = None
            return
        self._log, self._now = log, snap.now
        self._jlog = job_record(snap)
        self._ctx = (snap.profiles, snap.nodes, context)
        self._running, self._started, self._preempted = running, started, preempted
        self._steady = steady

    def answer(self, snap: ClusterSnapshot, context: tuple, waiting: int, key_of: dict,
               priority: Callable[[Job], tuple],
               horizon: Callable[[Job, tuple], tuple]) -> bool:
        """True when the call at ``snap`` is quiet (its Plan has no action; the record is
        then brought to ``snap``).  ``waiting``: the waiting jobs (the kept order, brought
        up to ``snap``), ``key_of``: their keys by id; ``priority`` and ``horizon``: the
        policy's key and horizon at ``snap``."""
        log0 = self._log
        if log0 is None:
            return False
        log, now = queue_record(snap), snap.now
        if (log is None or not log.extends(log0) or not self._now <= now
                or not math.isfinite(now)):
            return False
        c = self._ctx
        if c[0] is not snap.profiles or c[1] is not snap.nodes or c[2] != context:
            return False
        started, preempted = self._started, self._preempted
        # no job entered, left or changed in the waiting order but the last Plan's own
        if len(log) > len(log0):
            moved = started.keys() | preempted.keys()
            if not moved.issuperset(log[len(log0):]):
                return False
        running = self._running
        jobs = snap.jobs
        get = jobs.get
        jlog, jseen = job_record(snap), self._jlog
        if jlog is not None and jseen is not None and jlog.extends(jseen):
            # the running views of the last call, the very same: none of them is named by
            # the job change record since but the moved ones (the pre-empted ones are
            # among ``running``: the last call pre-empted only running jobs)
            other = [jid for jid in jlog[len(jseen):]
                     if jid not in started and jid not in preempted]
            if other:
                ids = set(map(_ID, running))
                if any(jid in ids for jid in other):
                    return False
            if len(running) - len(preempted) + len(started) + waiting != len(jobs):
                return False
            # (the pre-empted ones are left out below, for a quiet answer only)
        else:
            if preempted:
                running = [j for j in running if j.id not in preempted]
            if len(running) + len(started) + waiting != len(jobs):
                return False
            # the running views of the last call, the very same (one C-level pass)
            if not all(map(is_, map(get, map(_ID, running)), running)):
                return False
        steady = self._steady
        if callable(steady):
            steady = self._steady = steady()
        if not now <= steady:
            return False
        views = []
        for jid, k in started.items():
            v = get(jid)
            if v is None or not v.running or jid in key_of or not priority(v) <= k:
                return False
            views.append(v)
        for jid, k in preempted.items():
            k1 = key_of.get(jid)
            if k1 is None or not k1 >= k:
                return False
        if preempted and running is self._running:
            running = [j for j in running if j.id not in preempted]
        if views:  # the started jobs run from now on: their keys' own horizons
            for v in views:
                u, falling = horizon(v, priority(v))
                if not falling and u < steady:
                    steady = u
            running = running + views
        self._log, self._now, self._jlog = log, now, jlog
        self._running, self._started, self._preempted = running, {}, {}
        self._steady = steady
        return True

    def until(self, snap: ClusterSnapshot) -> float:
        """Asked right after a call on ``snap`` whose Plan had no action: the time up to which
        a call on a snapshot that is ``snap`` but for a later ``now`` is answered quiet by
        :meth:`answer` (for ``policies.base.Policy.quiet_until``), ``-inf`` without a
        record of this very call.  With nothing started or pre-empted, conditions 1 and 3
        hold for such a snapshot (the same views, the same waiting order), and 2 holds up
        to ``steady``."""
        log0 = self._log
        if log0 is None or self._now != snap.now or self._started or self._preempted:
            return -_INF
        log = queue_record(snap)
        if log is None or len(log) != len(log0) or not log.extends(log0):
            return -_INF
        steady = self._steady
        if callable(steady):
            steady = self._steady = steady()
        return steady


def quiet_until_of(pol, snap: ClusterSnapshot) -> float:
    """``pol.quiet_until(snap)`` of a policy that answers quiet calls with :class:`QuietCalls`
    (``pol._quiet_calls``): :meth:`QuietCalls.until`, ``-inf`` before its first call."""
    q = pol.__dict__.get("_quiet_calls")
    return -_INF if q is None else q.until(snap)


def quiet_calls_of(pol) -> QuietCalls:
    """The policy instance's record (``pol._quiet_calls``), made on first use."""
    q = pol.__dict__.get("_quiet_calls")
    if q is None:
        q = pol._quiet_calls = QuietCalls()
    return q
