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
the snapshot (a miss takes the scan)."""
from __future__ import annotations

import bisect
import math
from typing import Callable, Optional

from .model import ClusterSnapshot, Frozen, Job, JobState

# (until, falling) for a key just computed at ``now``: the key is exact for every ``now``
# in [t0, until]; ``falling``: after ``until`` it is still an upper bound (it never rises)
Horizon = Callable[[Job, tuple], tuple]

_INF = math.inf
_RUN = JobState.RUNNING


def _record(snap: ClusterSnapshot) -> Optional[Frozen]:
    q = snap.queue
    log = q.changes if q is not None and q.source is snap.jobs else None
    return log if isinstance(log, Frozen) else None


class RunningKeys:
    """Per policy instance: job id -> (view, key, t0, until, falling) for the running jobs
    of the last calls, and the running ids of the last call with the change record seen."""

    def __init__(self):
        self.clear()

    def clear(self) -> None:
        self._ctx: Optional[tuple] = None  # (profiles, nodes, context) the keys were made with
        self._seen: Optional[Frozen] = None  # the change record at the last call
        self._ids: list = []  # the running job ids at the last call
        self.cache: dict = {}

    def running(self, snap: ClusterSnapshot, nwaiting: int) -> Optional[list]:
        """The running jobs of ``snap`` from the last call's running ids and the change
        record's entries since (``nwaiting``: the waiting jobs, all not running), or
        ``None`` (another run, an older snapshot, a first call, or a count that disagrees
        with the snapshot: the caller scans)."""
        log = _record(snap)
        seen = self._seen
        if seen is None or log is None or not log.extends(seen):
            return None
        cand = dict.fromkeys(self._ids)
        cand.update(dict.fromkeys(log[len(seen):]))
        get = snap.jobs.get
        out = [v for v in map(get, cand) if v is not None and v.state is _RUN]
        # distinct running jobs of the map, as many as it holds: they are all of them
        return out if len(out) + nwaiting == len(snap.jobs) else None

    def remember(self, snap: ClusterSnapshot, running: list) -> None:
        """The running jobs of ``snap`` (found by :meth:`running` or by the scan)."""
        self._seen = _record(snap)
        self._ids = [j.id for j in running]

    def split(self, snap: ClusterSnapshot, running: list, first: tuple,
              priority: Callable[[Job], tuple], horizon: Horizon, context: tuple):
        """(sure, keys, jobs): the running jobs certainly ranked below ``first`` (the first
        waiting key) without a key, and the others with their exact keys at ``snap.now``."""
        ctx = (snap.profiles, snap.nodes, context)
        c = self._ctx
        if c is None or c[0] is not ctx[0] or c[1] is not ctx[1] or c[2] != context:
            self.cache = {}
            self._ctx = ctx
        now = snap.now
        cache = self.cache
        sure: list = []
        keys: list = []
        jobs: list = []
        get, keep, key_, job_ = cache.get, sure.append, keys.append, jobs.append
        for j in running:
            hit = get(j.id)
            if hit is not None and hit[0] is j and hit[2] <= now:
                k = hit[1]
                if now <= hit[3]:  # exact
                    if k < first:
                        keep(j)
                    else:
                        key_(k)
                        job_(j)
                    continue
                if hit[4] and k < first:  # an upper bound below the first waiting key
                    keep(j)
                    continue
            k = priority(j)
            until, falling = horizon(j, k)
            cache[j.id] = (j, k, now, until, falling)
            key_(k)
            job_(j)
        if len(cache) > 2 * len(running) + 256:  # finished jobs' entries
            self.cache = {j.id: cache[j.id] for j in running if j.id in cache}
        return sure, keys, jobs


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
