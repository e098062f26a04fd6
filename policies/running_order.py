"""The running jobs' cache entries kept sorted by key across calls (issue #13,
docs/scale.md §2).

:meth:`policies.running_keys.RunningKeys.collect` sorts the running jobs of a call into
three kinds by their cache entries: *sure* (a key, exact or an upper bound of one that
never rises, below the first waiting key ``first``), *deferred* (an upper bound not below
``first`` but below the second waiting key ``theta``) and *ranked* (every other: its exact
key at ``now`` is needed).  Its per-job visit of every running job (~150 per call on the
Philly trace at 64x8) was most of SRTF's and SRSF's policy time: of 4.2M visits on the
first 30,000 jobs, 1.6M were sure and 2.3M deferred, none of them needing a key.

:class:`RunningOrder` keeps, for the running jobs of the last call, their cache entries
(view, key, t0, until, falling, rekey function) sorted by key, with the keys, views, ids
and "until" times (``inf`` for a falling entry: it never stops being a bound) as aligned
lists.  :func:`collect_sorted` then does in bulk what the visit did per job:

* the entries whose view is no longer the snapshot's (finished, pre-empted, a new view)
  are dropped by one C-level identity pass; so are the non-falling entries past their
  ``until`` (Tiresias' horizon: no longer exact) — the jobs of both, and the ids the
  change record names since (a job enters the running set only by leaving the waiting
  order), are looked at one by one, as the visit looks at them, and their entries
  inserted by bisection;
* every entry was made at a ``t0`` not later than ``now`` (the order is used only while
  ``now`` has not gone back), so an entry's key is, as in the visit, exact at ``now`` (a
  non-falling entry before its ``until``) or an upper bound (a falling entry): the entries
  before ``bisect_left(keys, first)`` are sure, their ``until`` the least of that slice's
  (the visit's rule: only non-falling entries count); the falling ones from there to
  ``bisect_left(keys, theta)`` are deferred; every other one is ranked, with its cached key
  when it is exact at ``now`` (non-falling, or made at ``now``), else evaluated as the
  visit evaluates it (the view's rekey function, else the policy's key and horizon) and
  its entry put back in order (a falling key only falls);
* the counts are checked as :meth:`~policies.running_keys.RunningKeys.collect` checks
  them (the running jobs found and the waiting ones add up to the job map), else ``None``
  and the caller's old path.

Which entry a job is classified by (a newer one in the cache, after
:meth:`~policies.running_keys.RunningKeys.exact`, or the older one kept here) does not
matter: both are exact or bounds at ``now``, and the merge's Plan depends only on the
exact keys of the ranked jobs and on sure/deferred jobs being below ``first``/``theta``
(policies/kept_order.py).  The order of the running list differs from the visit's; the
Plan does not read it (tests/policies/test_running_order_differential.py: both paths at
every call of simulator runs and hypothesis sequences)."""
from __future__ import annotations

import math
from bisect import bisect_left
from itertools import compress, repeat
from operator import attrgetter, is_, itemgetter, lt, not_
from typing import Callable, Optional

from .model import ClusterSnapshot, JobState
from .records import job_record

_INF = math.inf
_RUN = JobState.RUNNING
_ID = attrgetter("id")
_VIEW = itemgetter(0)
_KEY = itemgetter(1)
_FALLING = itemgetter(4)


class RunningOrder:
    """Cache entries of one call's running jobs, sorted by key (aligned lists), the call's
    ``now`` and the number of non-falling entries."""

    __slots__ = ("ents", "keys", "views", "ids", "untils", "now", "nonfalling", "view_of", "jseen")

    def __init__(self, ents: list, now: float, of: Optional[dict] = None):
        """``ents``: cache entries sorted by key (keys unique: they end in the id);
        ``of``: id -> view of those very entries when the caller has it."""
        self.ents = ents
        self.keys = list(map(_KEY, ents))
        self.views = list(map(_VIEW, ents))
        self.ids = list(map(_ID, self.views))
        self.untils = [_INF if e[4] else e[3] for e in ents]
        self.nonfalling = sum(map(not_, map(_FALLING, ents)))  # C-level: no Python step
        self.now = now
        self.view_of = dict(zip(self.ids, self.views)) if of is None else of  # id -> view
        self.jseen = None  # the job change record of the call the views are from

    @classmethod
    def of(cls, cache: dict, running: list, now: float) -> Optional["RunningOrder"]:
        """The order of ``running``'s cache entries, or ``None`` when one has none of its
        view (it was ranked without the cache)."""
        ents = list(map(cache.get, map(_ID, running)))
        if None in ents or not all(map(is_, map(_VIEW, ents), running)):
            return None
        ents.sort(key=_KEY)
        return cls(ents, now)

    def insert(self, e: tuple) -> None:
        k = e[1]
        i = bisect_left(self.keys, k)
        self.keys.insert(i, k)
        self.ents.insert(i, e)
        self.views.insert(i, e[0])
        self.ids.insert(i, e[0].id)
        self.view_of[e[0].id] = e[0]
        if e[4]:
            self.untils.insert(i, _INF)
        else:
            self.untils.insert(i, e[3])
            self.nonfalling += 1

    def keep(self, mask) -> None:
        """Keep the entries where ``mask`` is true: a few dropped are deleted in place,
        from the end (a finished or pre-empted job: the lists are this object's own), else
        C-level passes build the lists anew."""
        mask = list(mask)
        drop = list(compress(range(len(mask)), map(not_, mask)))
        if len(drop) * 8 <= len(mask):
            ents, keys, views, ids, untils = (self.ents, self.keys, self.views, self.ids,
                                              self.untils)
            of = self.view_of
            for i in reversed(drop):
                if not ents[i][4]:
                    self.nonfalling -= 1
                del of[ids[i]]
                del ents[i], keys[i], views[i], ids[i], untils[i]
            return
        self.ents = list(compress(self.ents, mask))
        self.keys = list(compress(self.keys, mask))
        self.views = list(compress(self.views, mask))
        self.ids = list(compress(self.ids, mask))
        self.untils = list(compress(self.untils, mask))
        self.nonfalling = sum(map(not_, map(_FALLING, self.ents))) if self.nonfalling else 0
        self.view_of = dict(zip(self.ids, self.views))


def _entry(j, cache: dict, now: float, priority, horizon, rekey) -> tuple:
    """A running view's cache entry usable at ``now`` (as :meth:`RunningKeys._visit` uses
    one: made at or before ``now``, exact or falling), made at ``now`` when the cache has
    none."""
    hit = cache.get(j.id)
    if hit is not None and hit[0] is j and hit[2] <= now and (hit[4] or now <= hit[3]):
        return hit
    k = priority(j)
    u, falling = horizon(j, k)
    e = cache[j.id] = (j, k, now, u, falling,
                       rekey(j) if falling and rekey is not None else None)
    return e


def collect_sorted(rk, snap: ClusterSnapshot, log, nwaiting: int, first: tuple,
                   priority: Callable, horizon: Callable, rekey, theta: Optional[tuple],
                   deferred: Optional[list]):
    """:meth:`RunningKeys.collect`'s answer (running, sure, keys, jobs, until) from the
    kept order ``rk._order`` (the caller checked the context, the change record and
    ``now``), or ``None`` (the caller's old path).  The new order is left in
    ``rk._pending`` for :meth:`RunningKeys.remember`."""
    order: RunningOrder = rk._order
    rk._order = None  # changed below: kept again only by ``remember``
    now = snap.now
    get = snap.jobs.get
    cache = rk.cache
    seen = rk._seen
    # the views still the snapshot's (one C-level pass)
    cand: dict = {}
    of = order.view_of
    jlog = job_record(snap)
    if jlog is not None and order.jseen is not None and jlog.extends(order.jseen):
        # only the jobs the record names since can have another view (JobChanges)
        gone = [jid for jid in dict.fromkeys(jlog[len(order.jseen):])
                if jid in of and get(jid) is not of[jid]]
        if gone:
            same = [True] * len(order.ids)
            for i in map(order.ids.index, gone):
                same[i] = False
            cand.update(dict.fromkeys(compress(order.ids, map(not_, same))))
            order.keep(same)
    else:
        same = list(map(is_, map(get, order.ids), order.views))
        if not all(same):  # (most calls: a job finished, was pre-empted or started)
            cand.update(dict.fromkeys(compress(order.ids, map(not_, same))))
            order.keep(same)
    if order.nonfalling and min(order.untils, default=_INF) < now:  # past their horizon
        fresh = list(map(not_, map(lt, order.untils, repeat(now))))
        cand.update(dict.fromkeys(compress(order.ids, map(not_, fresh))))
        order.keep(fresh)
    if len(log) > len(seen):
        ids = order.view_of  # (kept by ``keep`` and ``insert``)
        for jid in log[len(seen):]:
            if jid not in ids:
                cand[jid] = None
    for jid in cand:
        j = get(jid)
        if j is not None and j.state is _RUN:
            order.insert(_entry(j, cache, now, priority, horizon, rekey))
    keys, views, ents = order.keys, order.views, order.ents
    n = len(keys)
    if n + nwaiting != len(snap.jobs):
        return None
    running = list(views)
    i1 = bisect_left(keys, first)
    sure = views[:i1]
    until = min(order.untils[:i1], default=_INF) if order.nonfalling else _INF
    rkeys: list = []
    rjobs: list = []
    if theta is None or deferred is None:
        i2 = i1
    else:
        i2 = bisect_left(keys, theta, i1)
    if not order.nonfalling:  # every entry falling: [i1, i2) deferred, the rest ranked
        if i2 > i1:
            deferred.extend(views[i1:i2])
        start = i2
    elif order.nonfalling == n:  # every entry exact at ``now``: ranked by its key
        rkeys = keys[i1:]
        rjobs = views[i1:]
        start = n
    else:
        start = i1
    moved = False
    for i in range(start, n):
        e = ents[i]
        j = e[0]
        if now <= e[3]:  # exact (non-falling, or made at ``now``)
            if not e[4] or i >= i2:
                rkeys.append(e[1])
                rjobs.append(j)
            else:
                deferred.append(j)
            continue
        if i < i2:  # a falling bound below ``theta``
            deferred.append(j)
            continue
        at = e[5]
        if at is not None:
            k = at(now)
            e = (j, k, now, now, True, at)
        else:
            k = priority(j)
            u, falling = horizon(j, k)
            e = (j, k, now, u, falling, rekey(j) if falling and rekey is not None else None)
        cache[j.id] = ents[i] = e
        rkeys.append(k)
        rjobs.append(j)
        moved = True
    if moved:  # keys fell (or were made anew): back in order
        if order.nonfalling or not all(e[4] for e in ents[i2:]):
            ents.sort(key=_KEY)
            order = RunningOrder(ents, now, order.view_of)  # the same entries' views
        else:  # every change in [i2, n), all falling: cut it off, put it back
            tail = ents[i2:]
            tail.sort(key=_KEY)
            for name in ("ents", "keys", "views", "ids", "untils"):
                del getattr(order, name)[i2:]
            if not i2 or order.keys[-1] < tail[0][1]:
                order.ents += tail
                order.keys += map(_KEY, tail)
                order.views += map(_VIEW, tail)
                order.ids += map(_ID, map(_VIEW, tail))
                order.untils += repeat(_INF, len(tail))
            else:
                for e in tail:
                    order.insert(e)
    order.now = now
    order.jseen = jlog
    rk._pending = order
    if len(cache) > 2 * n + 256:  # finished jobs' entries
        rk.cache = {jid: cache[jid] for jid in order.ids if jid in cache}
    return running, sure, rkeys, rjobs, until
