"""Running jobs' keys kept across policy calls (issue #13, docs/scale.md §2).

:func:`policies.kept_order.schedule_preemptive_kept` ranks the running jobs of every call
by the policy's key and merges them with the kept waiting order.  On the Philly trace at
64x8 (~150 running jobs per call, 100k calls) evaluating those keys was most of SRTF's,
SRSF's and Tiresias' time.  Two facts make most of them unnecessary:

* SRTF and SRSF (seed 001 §5) rank by (remaining exclusive time [x GPUs], submit time,
  id).  While one job view keeps running, its completed iterations (or executed time)
  only grow with ``now``, so its key never rises: a key computed at ``t0 <= now`` is an
  upper bound of the key at ``now`` (same view, same profiles and nodes).
* Tiresias (Gu et al., NSDI'19, discretized 2D-LAS, promote knob off) ranks by (queue of
  the attained GPU-service, submit time, id).  While one view keeps running, its attained
  service grows linearly with ``now`` (on the GPUs it holds), so its queue, hence its key,
  stays the same until the service reaches the next threshold: the key computed at ``t0``
  is exact up to a time :func:`tiresias_horizon` computes (checked against
  :meth:`ClusterSnapshot.attained_service` itself).

In the merge every running job whose key is below the first waiting key is admitted before
any waiting job is considered, and, when the running jobs' GPUs fit in the cluster all
together, every one of them fits: their relative order does not matter.  So a running job
whose cached bound (or exact key) is already below the first waiting key is admitted
without a key; only the others get one (exact: cached while valid, else evaluated) and are
sorted and merged.  The Plan is the same (tests/policies/test_queue_differential.py,
against verbatim copies of the old code).

:class:`RunningKeys` also finds the running jobs without scanning every GPU: the jobs
running at the last call of the same run plus the ones the change record names since (a
job enters the running set only by leaving the waiting order), checked by count against
the snapshot (a miss takes the scan).  The last call's sure jobs are taken over as a whole
(one identity check of their views, at C speed, instead of a Python step per job) when
``now`` has not gone back, the first waiting key has not fallen and no Tiresias key among
them has reached its horizon.

SRTF's and SRSF's keys of the running jobs that are not sure are evaluated at every call
(their bound is not below the first waiting key); :func:`remaining_time_rekey` makes, once
per view, a function of ``now`` that gives that key from the view's constants (the
arithmetic of :meth:`ClusterSnapshot.remaining_time`, step for step, so the very same
float) instead of the policy's key through the snapshot's methods.

A short arrival puts a small key first in the waiting order, below most running jobs'
bounds: on the whole Philly trace at 64x8 about 57k of SRSF's 275k calls then evaluated
~180 running keys each, about half of the policy's time.  With a second threshold (the
second waiting key) :meth:`RunningKeys.collect` defers, without a key, the running jobs
whose bound (of a key that never rises) lies below it;
:func:`policies.kept_order.schedule_preemptive_kept` admits the first waiting job and
all of them as one block when the ranked jobs at or after the second key hold at least
the GPUs that job needs beyond the free ones (each item before the second key then fits
at its turn), and otherwise ranks them by their exact keys after all
(:meth:`RunningKeys.exact`).

With ``sorted_path`` (the default) :meth:`RunningKeys.collect` answers from the last
call's running entries kept sorted by key (:mod:`policies.running_order`): the sure and
the deferred jobs are two slices found by bisection, and only the ranked jobs, the new or
changed ones and those past their horizon are looked at one by one; the per-job visit
above answers the calls it cannot (a first call, an older ``now``, counts that disagree)."""
from __future__ import annotations

import bisect
import math
from itertools import chain, compress
from operator import attrgetter, is_, not_
from typing import Callable, Optional

from .model import ClusterSnapshot, Frozen, Job, JobState
from .records import queue_record
from .running_order import RunningOrder, collect_sorted

# (until, falling) for a key just computed at ``now``: the key is exact for every ``now``
# in [t0, until]; ``falling``: after ``until`` it is still an upper bound (it never rises)
Horizon = Callable[[Job, tuple], tuple]
# a running view -> a function of ``now`` giving its exact key at any ``now`` not earlier
# than the call that made it (or ``None``: no such function for this view); used only for
# keys with a falling horizon, the new key then exact at that ``now`` only
Rekey = Callable[[Job], Optional[Callable[[float], tuple]]]

_INF = math.inf
_RUN = JobState.RUNNING
_ID = attrgetter("id")


class RunningKeys:
    """Per policy instance: job id -> (view, key, t0, until, falling) for the running jobs
    of the last calls; the running ids of the last call with the change record seen; and
    that call's sure jobs (ids and views), its ``now``, first waiting key and the time up
    to which all of their keys stay below it (``until``); or, with ``sorted_path``, the
    last call's running entries sorted by key (:mod:`policies.running_order`)."""

    # True: :meth:`collect` answers from the running entries kept sorted by key
    # (:func:`policies.running_order.collect_sorted`) whenever it can; False: the per-job
    # visit only (the old path; tests compare both)
    sorted_path = True

    def __init__(self):
        self.clear()

    def clear(self) -> None:
        self._ctx: Optional[tuple] = None  # (profiles, nodes, context) the keys were made with
        self._seen: Optional[Frozen] = None  # the change record at the last call
        self._run: list = []  # the running views at the last call (their ids: the set)
        self.cache: dict = {}
        self._forget()

    def _forget(self) -> None:
        self._sure_ids: tuple = ()
        self._sure_views: tuple = ()
        self._sure_set: Optional[set] = None  # ``_sure_ids`` as a set, made when asked
        self._rest_ids: list = []  # the last call's running ids that were not sure
        # (the ``sure`` list :meth:`collect` returned, how many of its first views are the
        # last call's sure ones taken over whole): :meth:`remember` then extends the ids
        self._taken: Optional[tuple] = None
        self._now = self._until = -_INF
        self._first: Optional[tuple] = None
        self._order = None  # RunningOrder of the last call (sorted_path)
        self._pending = None  # the one this call made, kept by ``remember``

    def _context(self, snap: ClusterSnapshot, context: tuple) -> None:
        c = self._ctx
        if c is None or c[0] is not snap.profiles or c[1] is not snap.nodes or c[2] != context:
            self.cache = {}
            self._forget()
            self._ctx = (snap.profiles, snap.nodes, context)

    def running(self, snap: ClusterSnapshot, nwaiting: int) -> Optional[list]:
        """The running jobs of ``snap`` from the last call's running ids and the change
        record's entries since (``nwaiting``: the waiting jobs, all not running), or
        ``None`` (another run, an older snapshot, a first call, or a count that disagrees
        with the snapshot: the caller scans)."""
        log = queue_record(snap)
        seen = self._seen
        if seen is None or log is None or not log.extends(seen):
            return None
        cand = dict.fromkeys(map(_ID, self._run))
        cand.update(dict.fromkeys(log[len(seen):]))
        get = snap.jobs.get
        out = [v for v in map(get, cand) if v is not None and v.state is _RUN]
        # distinct running jobs of the map, as many as it holds: they are all of them
        return out if len(out) + nwaiting == len(snap.jobs) else None

    def collect(self, snap: ClusterSnapshot, nwaiting: int, first: tuple,
                priority: Callable[[Job], tuple], horizon: Horizon, context: tuple,
                rekey: Optional[Rekey] = None, theta: Optional[tuple] = None,
                deferred: Optional[list] = None):
        """:meth:`running` and :meth:`split` in one: (running, sure, keys, jobs, until), or
        ``None`` as :meth:`running`.  The last call's sure jobs whose views are still the
        snapshot's are taken over (no per-job step) while ``now`` is not earlier than that
        call's nor later than their ``until`` and the first waiting key is not lower
        (their keys are then still below it); the others are looked at one by one.
        ``deferred`` (a list) with ``theta``: the running jobs whose cached bound (a key
        that never rises) is not below ``first`` but below ``theta`` are put there without
        a key (the caller evaluates them with :meth:`exact` if it needs their keys)."""
        log = queue_record(snap)
        seen = self._seen
        if seen is None or log is None or not log.extends(seen):
            return None
        self._context(snap, context)
        now = snap.now
        self._pending = None
        order = self._order
        if order is not None and order.now <= now:
            found = collect_sorted(self, snap, log, nwaiting, first, priority, horizon, rekey,
                                   theta, deferred)
            if found is not None:
                return found
            if deferred:  # (what it put there before it gave up)
                del deferred[:]
        self._order = None
        get = snap.jobs.get
        sure: list = []
        until = _INF
        ids = None  # the last call's running ids
        kept = None  # the ids of the sure ones taken over
        self._taken = None
        if self._sure_ids and self._now <= now <= self._until and not first < self._first:
            old_ids, old_views = self._sure_ids, self._sure_views
            # the very views: still running (one pass, no list, while all are the same)
            if all(map(is_, map(get, old_ids), old_views)):
                sure = list(old_views)
                kept = self._sure_set
                if kept is None:
                    kept = self._sure_set = set(old_ids)
                ids = self._rest_ids
                self._taken = (sure, len(sure))
            else:  # the others are looked at one by one
                same = list(map(is_, map(get, old_ids), old_views))
                sure, kept = list(compress(old_views, same)), set(compress(old_ids, same))
                ids = chain(self._rest_ids, compress(old_ids, map(not_, same)))
            until = self._until
        # the last call's running ids (less the sure ones taken over), then the record's
        cand = dict.fromkeys(map(_ID, self._run) if ids is None else ids)
        if sure:  # not the ones taken over (the others are disjoint from them)
            for jid in log[len(seen):]:
                if jid not in kept:
                    cand[jid] = None
        else:
            cand.update(dict.fromkeys(log[len(seen):]))
        running = list(sure)
        keys: list = []
        jobs: list = []
        until = min(until, self._visit(map(get, cand), now, first, priority, horizon,
                                       running, sure, keys, jobs, rekey, theta, deferred))
        # distinct running jobs of the map, as many as it holds: they are all of them
        if len(running) + nwaiting != len(snap.jobs):
            return None
        return running, sure, keys, jobs, until

    def remember(self, snap: ClusterSnapshot, running: list, sure: list = (),
                 rest: Optional[list] = None, first: Optional[tuple] = None,
                 until: float = -_INF) -> None:
        """The running jobs of ``snap`` (found by :meth:`collect`, :meth:`running` or by the
        scan), the sure ones among them, the others (``rest``), the first waiting key and
        the time up to which the sure ones stay sure."""
        self._seen = queue_record(snap)
        self._run = running
        taken, self._taken = self._taken, None
        pending, self._pending = self._pending, None
        if self.sorted_path:  # the next call answers from the order (no sure ones kept)
            self._order = (pending if pending is not None
                           else RunningOrder.of(self.cache, running, snap.now))
            if self._order is not None:
                self._sure_ids = self._sure_views = ()
                self._sure_set = None
                self._rest_ids = []
                self._now, self._first, self._until = snap.now, first, -_INF
                return
        else:
            self._order = None
        if taken is not None and taken[0] is sure:  # the last sure ones, then new ones
            n = taken[1]
            if len(sure) > n:
                more = sure[n:]
                add = tuple(map(_ID, more))
                self._sure_ids += add
                self._sure_views += tuple(more)
                if self._sure_set is not None:
                    self._sure_set.update(add)
        else:
            self._sure_ids = tuple(map(_ID, sure))
            self._sure_views = tuple(sure)
            self._sure_set = None
        self._rest_ids = list(map(_ID, running if rest is None else rest))
        self._now, self._first, self._until = snap.now, first, until if sure else -_INF

    def split(self, snap: ClusterSnapshot, running: list, first: tuple,
              priority: Callable[[Job], tuple], horizon: Horizon, context: tuple,
              rekey: Optional[Rekey] = None):
        """(sure, keys, jobs, until): the running jobs certainly ranked below ``first`` (the
        first waiting key) without a key, the others with their exact keys at ``snap.now``,
        and the time up to which the sure ones stay below ``first``."""
        self._context(snap, context)
        sure: list = []
        keys: list = []
        jobs: list = []
        until = self._visit(running, snap.now, first, priority, horizon, [], sure, keys, jobs,
                            rekey)
        return sure, keys, jobs, until

    def _visit(self, views, now, first, priority, horizon, running, sure, keys, jobs,
               rekey: Optional[Rekey] = None, theta: Optional[tuple] = None,
               deferred: Optional[list] = None) -> float:
        """Sort the running ones of ``views`` (``None`` and waiting ones skipped) into
        ``sure`` or ``keys``/``jobs`` (all into ``running``); the time up to which the
        sure ones stay below ``first``.  Cache entries: (view, key, t0, until, falling,
        the view's ``rekey`` function or ``None``)."""
        cache = self.cache
        until = _INF
        get, run, keep, key_, job_ = (cache.get, running.append, sure.append, keys.append,
                                      jobs.append)
        if deferred is None or theta is None:
            theta = first  # nothing deferred: a bound not below ``first`` is not below it
        else:
            defer = deferred.append
        for j in views:
            if j is None or j.state is not _RUN:
                continue
            run(j)
            hit = get(j.id)
            if hit is not None and hit[0] is j and hit[2] <= now:
                k = hit[1]
                if now <= hit[3]:  # exact
                    if k < first:
                        keep(j)
                        if not hit[4] and hit[3] < until:
                            until = hit[3]
                    else:
                        key_(k)
                        job_(j)
                    continue
                if hit[4]:
                    if k < first:  # an upper bound below the first waiting key
                        keep(j)
                        continue
                    if k < theta:  # below ``theta``: deferred, no key yet
                        defer(j)
                        continue
                    at = hit[5]
                    if at is not None:  # the key at ``now`` from the view's constants
                        k = at(now)
                        cache[j.id] = (j, k, now, now, True, at)
                        key_(k)
                        job_(j)
                        continue
            k = priority(j)
            u, falling = horizon(j, k)
            cache[j.id] = (j, k, now, u, falling,
                           rekey(j) if falling and rekey is not None else None)
            key_(k)
            job_(j)
        if len(cache) > 2 * len(running) + 256:  # finished jobs' entries
            self.cache = {j.id: cache[j.id] for j in running if j.id in cache}
        return until


    def exact(self, views, now: float, priority: Callable[[Job], tuple], horizon: Horizon,
              rekey: Optional[Rekey], keys: list, jobs: list) -> None:
        """The exact keys at ``now`` of ``views`` (running jobs :meth:`collect` deferred:
        each has a cache entry of its view with a key that never rises) appended to
        ``keys`` (the views to ``jobs``), their cache entries made at ``now`` as
        :meth:`_visit` makes them."""
        cache = self.cache
        for j in views:
            hit = cache.get(j.id)
            at = hit[5] if hit is not None and hit[0] is j else None
            if at is not None:
                k = at(now)
                cache[j.id] = (j, k, now, now, True, at)
            else:
                k = priority(j)
                u, falling = horizon(j, k)
                cache[j.id] = (j, k, now, u, falling,
                               rekey(j) if falling and rekey is not None else None)
            keys.append(k)
            jobs.append(j)


def running_keys_of(pol) -> RunningKeys:
    """The policy instance's running-key cache (``pol._running_keys``), made on first use."""
    rk = pol.__dict__.get("_running_keys")
    if rk is None:
        rk = pol._running_keys = RunningKeys()
    return rk


def falling_horizon(snap: ClusterSnapshot) -> Horizon:
    """SRTF's and SRSF's: the key is exact at ``now`` only and never rises after (a job
    running at a rate of at least 0 iterations per second)."""
    now = snap.now
    return lambda job, key: (now, job.iter_rate >= 0)


def remaining_time_rekey(snap: ClusterSnapshot, per_gpu: bool) -> Rekey:
    """SRTF's key ``(remaining_time, submit time, id)`` (SRSF's with the time x
    ``num_gpus``: ``per_gpu``) of a running view as a function of ``now``: the view's
    constants and its exclusive iteration time (fixed for the snapshot's profiles and
    nodes, which the cache is kept for) taken once, then
    :meth:`ClusterSnapshot.completed`, :meth:`~ClusterSnapshot.remaining_iters` and
    :meth:`~ClusterSnapshot.remaining_time` computed as they compute them.  ``None`` for
    a view without ``total_iters`` (its key reads the estimate instead)."""
    xit_of = snap.exclusive_iter_time

    def make(job: Job) -> Optional[Callable[[float], tuple]]:
        if job.total_iters is None or job.state is not _RUN:
            return None
        xit = xit_of(job)
        total, done, rate, as_of, restore = (job.total_iters, job.completed_iters,
                                             job.iter_rate, job.as_of, job.restore_left)
        g, submit, jid = job.num_gpus, job.submit_time, job.id

        if per_gpu:
            def at(now: float) -> tuple:
                dt = now - as_of
                if restore:
                    dt = max(0.0, dt - restore)
                return (max(0.0, total - (done + rate * dt)) * xit * g, submit, jid)
        else:
            def at(now: float) -> tuple:
                dt = now - as_of
                if restore:
                    dt = max(0.0, dt - restore)
                return (max(0.0, total - (done + rate * dt)) * xit, submit, jid)
        return at

    return make


class _Clock:
    """A stand-in snapshot for :meth:`ClusterSnapshot.attained_service` at another time
    (it reads ``now`` and the job only)."""

    __slots__ = ("now",)

    def __init__(self, now: float):
        self.now = now


def _attained(job: Job, t: float) -> float:
    return ClusterSnapshot.attained_service(_Clock(t), job)


def tiresias_horizon(snap: ClusterSnapshot, thresholds: tuple) -> Horizon:
    """Tiresias' (promote knob off): the queue of a running job stays while its attained
    service is below the next threshold; the time returned is one at which
    :meth:`ClusterSnapshot.attained_service` (non-decreasing in ``now``) is still below it,
    so the key is exact on [now, until] (falling: never)."""
    now = snap.now

    def horizon(job: Job, key: tuple) -> tuple:
        a0 = snap.attained_service(job)
        q = bisect.bisect_right(thresholds, a0)
        if q != key[0] or not job.running:  # not the key this horizon is for
            return now, False
        if q == len(thresholds):
            return _INF, False  # the last queue: no threshold ahead
        nxt = thresholds[q]
        held = len(job.allocation.gpus) if job.allocation is not None else job.num_gpus
        if held <= 0:
            return (_INF if _attained(job, _INF) < nxt else now), False
        v = now + (nxt - a0) / held
        for i in range(64):  # step back until the model's own sum is below the threshold
            if not v > now:
                return now, False
            if _attained(job, v) < nxt:
                return v, False
            v = now + (v - now) * (0.5 if i >= 4 else 1.0 - 1e-9)
        return now, False

    return horizon
