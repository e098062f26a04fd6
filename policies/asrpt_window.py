"""A-SRPT's instance Ã1 (seed 003 §IV-C, Fig. 3 ①②) kept across policy calls.

Ã1 is single-machine preemptive SRPT over ``(key, release, processing)`` items
(:func:`policies.asrpt_core.virtual_srpt`).  Over a long simulation its window — the
active jobs and the finished ones submitted since the earliest active job — holds
thousands of items (a job that runs for weeks keeps everything since its submission), while
between two calls only a few items change: jobs arrive (at the end), leave for the history
(usually the same item), and the window's front moves on.  :class:`A1Window` keeps the
items sorted by ``(release, key)`` with their completion times and re-simulates only
around what changed.

Why that is exact (float for float): single-machine SRPT splits into *busy periods*.  Say
the schedule is *idle at item i* when the simulation finds no job waiting as item ``i``
arrives: every earlier item is complete, the clock is at most ``r_i`` and the next step
sets it to ``r_i``, so the completion times from ``i`` on depend only on items ``i, i+1,
…``.  So

* items before the first change keep their completion times;
* a change at item ``q`` is re-simulated from the last idle item ``s ≤ q`` (items before
  ``s`` are complete by ``r_s`` whatever follows);
* the re-simulation stops at the first item ``i > s`` where it is idle again and the old
  schedule was idle too and item ``i`` is unchanged: from ``i`` up to the next change the
  items and the starting clock are the old ones, so are the completion times;
* dropping a prefix (the window's front) is a change at the new first item unless the
  old schedule was idle there.

Changed, inserted items and the item after a removed one lose their idle mark until a
re-simulation passes them, so they are never taken as a stopping point.

*Checkpoints* generalise the idle marks (an idle mark is a checkpoint with nothing waiting).
SRPT is causal: the state when item ``i`` is about to be pushed — the clock, which is
``r_i`` then, and the waiting items with their remaining work — depends only on the items
before ``i``, and the whole schedule from ``i`` on depends only on that state and the items
from ``i`` on.  A re-simulation records the state at some items it passes (at least
``_EVERY`` items apart and at least as many as are waiting, so copying the state costs O(1)
per item amortised), and

* a change at item ``q`` is re-simulated from the latest idle mark *or checkpoint* before
  ``q`` (the state there is restored: nothing before ``q`` changed), not from the start of
  its busy period — an arrival at the window's end now costs about the items waiting, not
  the whole busy period;
* the re-simulation also stops at an unchanged item whose recorded state equals the state
  it reaches there (same clock, same waiting items with the same remaining work): from
  there on the schedule is the recorded one, and so are the completion times (float for
  float: the same state and items give the same operations).

A checkpoint holds the waiting items sorted (a sorted list is a heap; the items are
distinct tuples, so the pops do not depend on the heap's layout).  It stays valid while
no item before it changes; every change marks its item as touched, and a touched item's
checkpoint is dropped with its idle mark, so neither is used as a start or a stopping point
until a re-simulation passes it and records it anew.  The result
equals :func:`~policies.asrpt_core.virtual_srpt` of the window's items
(tests/policies/test_asrpt_differential.py, on random edit sequences and at every call of
simulator runs).
"""
from __future__ import annotations

import heapq
import math
import operator
from bisect import bisect_left
from typing import Any, Iterable, Mapping

from .asrpt_core import virtual_srpt

_REL_KEY = operator.itemgetter(1, 0)
_REL = operator.itemgetter(1)
_ONE = b"\x01"
_EVERY = 16  # the fewest items between two checkpoints of one re-simulation


class A1Window:
    """The items of Ã1, sorted by ``(release, key)``, and their SRPT completion times
    (``done``), kept across calls: :meth:`reset` builds it from scratch, :meth:`update`
    applies one call's changes.  Keys must be unique (:meth:`reset` returns ``None``
    otherwise and the caller uses :func:`virtual_srpt`)."""

    every = _EVERY  # the fewest items between two checkpoints (tests lower it)

    def __init__(self):
        self.clear()
        self.simulated = 0  # items re-simulated by update, all calls
        self.ck_starts = 0  # re-simulations started from a checkpoint
        self.ck_stops = 0   # re-simulations stopped at a checkpoint's state
        self.updates = 0    # calls of update
        self.built = 0      # items simulated by reset, all calls

    def clear(self) -> None:
        self.its: list = []              # items; the live ones are its[lo:]
        self.lo = 0
        self.idle = bytearray()          # idle[i] = 1: the schedule is idle when its[i] arrives
        self.ck = bytearray()            # ck[i] = 1: a checkpoint is kept for its[i] (in cks)
        self.cks: dict[Any, tuple] = {}  # key -> (clock, waiting items sorted) before its push
        self.rel: dict[Any, float] = {}  # key -> release, for the live items
        self.done: dict[Any, float] = {}  # key -> completion time, for the live items
        self.changed: list = []          # keys whose completion time the last update changed
        self.valid = False

    def __len__(self) -> int:
        return len(self.its) - self.lo

    def items(self) -> list:
        return self.its[self.lo:]

    # ---------------------------------------------------------------- building
    def reset(self, items: Iterable[tuple[Any, float, float]]):
        """Build from ``items``; the completion times (``done``), or ``None`` when two
        items share a key (the window is then left empty and invalid)."""
        its = sorted(items, key=_REL_KEY)
        rel = dict(zip(map(operator.itemgetter(0), its), map(_REL, its)))
        if len(rel) != len(its):
            self.clear()
            return None
        self.clear()
        self.its, self.rel, self.idle, self.valid = its, rel, bytearray(len(its)), True
        self.ck = bytearray(len(its))
        if its:
            self._run(0)
        self.built += len(its)
        return self.done

    def update(self, t0: float, removed: Iterable[Any],
               upserts: Mapping[Any, tuple[Any, float, float]]) -> dict[Any, float]:
        """Drop the items released before ``t0`` (the window's front), remove the items of
        ``removed`` keys, insert or replace the items of ``upserts`` (key -> item; one released
        before ``t0`` is removed instead), and
        bring the completion times up to date; returns ``done``."""
        self.updates += 1
        self.changed = []
        its, idle, ck, cks = self.its, self.idle, self.ck, self.cks
        rel, done = self.rel, self.done
        n, lo = len(its), self.lo
        k = bisect_left(its, t0, lo, n, key=_REL)
        for x in its[lo:k]:
            del rel[x[0]]
            done.pop(x[0], None)
            cks.pop(x[0], None)
        touched, tail = set(), False
        if lo < k < n and not idle[k]:
            touched.add(its[k][0])  # the new front, busy before: re-simulate from it
        self.lo = lo = k
        removed = list(removed)
        removed += [key for key, item in upserts.items() if item[1] < t0]
        for key in removed:
            r = rel.pop(key, None)
            if r is not None:
                q = bisect_left(its, (r, key), lo, len(its), key=_REL_KEY)
                del its[q], idle[q], ck[q]
                done.pop(key, None)
                cks.pop(key, None)
                touched.discard(key)
                if q < len(its):
                    idle[q] = 0
                    touched.add(its[q][0])
                else:  # the last item left: its busy period changes
                    tail = True
        for key, item in upserts.items():
            if item[1] < t0:  # outside the window (removed above)
                continue
            r = rel.get(key)
            if r is not None:
                q = bisect_left(its, (r, key), lo, len(its), key=_REL_KEY)
                if its[q] == item:
                    continue
                if item[1] == r:  # same place: replaced in place
                    its[q], idle[q] = item, 0
                    touched.add(key)
                    continue
                del its[q], idle[q], ck[q]
                done.pop(key, None)
                cks.pop(key, None)
                if q < len(its):
                    idle[q] = 0
                    touched.add(its[q][0])
                else:  # the last item left: its busy period changes
                    tail = True
            q = bisect_left(its, (item[1], key), lo, len(its), key=_REL_KEY)
            its.insert(q, item)
            idle.insert(q, 0)
            ck.insert(q, 0)
            rel[key] = item[1]
            touched.add(key)
        if touched or tail:
            qs = sorted(bisect_left(its, (rel[key], key), lo, len(its), key=_REL_KEY)
                        for key in touched if key in rel)
            for q in qs:  # a touched item's checkpoint is neither a start nor a stop
                if ck[q]:
                    ck[q] = 0
                    del cks[its[q][0]]
            if tail and len(its) > lo:
                qs.append(len(its))
            covered = lo
            for q in qs:
                if q < covered:
                    continue
                s = idle.rfind(_ONE, lo, q) if q > lo else -1
                c = ck.rfind(_ONE, lo, q) if q > lo else -1
                if c > s:  # the latest checkpoint: its state restored
                    covered = self._run(c, *cks[its[c][0]])
                    s = c
                    self.ck_starts += 1
                else:
                    s = lo if s < 0 else s
                    covered = self._run(s)
                self.simulated += covered - s
        if lo > 4096 and 2 * lo > len(its):  # compact the dropped front
            del its[:lo], idle[:lo], ck[:lo]
            self.lo = 0
        return done

    # ---------------------------------------------------------------- simulation
    def _run(self, s: int, t: float = -math.inf, waiting: tuple = ()) -> int:
        """Re-simulate from item ``s`` until the end or the first later item where the
        state is the recorded one and the item is unchanged (an idle mark, or a checkpoint
        whose clock and waiting items equal the state reached there); returns where it
        stopped.  ``s`` is an idle item (``t`` and ``waiting`` left out) or a checkpoint
        (its clock and waiting items).  Records idle marks and checkpoints for the items it
        passes.  Same steps and tie-breaks as :func:`~policies.asrpt_core.virtual_srpt`."""
        its, idle, ck, cks = self.its, self.idle, self.ck, self.cks
        done, changed = self.done, self.changed
        n = len(its)
        heap: list = list(waiting)  # sorted: a heap
        push, pop, replace = heapq.heappush, heapq.heappop, heapq.heapreplace
        i, since, every = s, 0, self.every
        while i < n or heap:
            if not heap:
                if i != s and idle[i]:
                    break
                idle[i] = 1
                key, r, p = its[i]
                if ck[i]:  # the idle mark is this item's checkpoint now
                    ck[i] = 0
                    del cks[key]
                t = max(t, r)
                push(heap, (max(p, 0.0), r, key))
                i += 1
                since += 1
            while i < n and its[i][1] <= t:
                key, r, p = its[i]
                if i != s:
                    if ck[i]:
                        old = cks[key]
                        if old[0] == t and len(old[1]) == len(heap) and old[1] == sorted(heap):
                            self.ck_stops += 1
                            return i  # the recorded state: the rest is as recorded
                        if since >= every and since >= len(heap):
                            cks[key] = (t, sorted(heap))
                            since = 0
                        else:
                            ck[i] = 0
                            del cks[key]
                    elif since >= every and since >= len(heap):
                        ck[i] = 1
                        cks[key] = (t, sorted(heap))
                        since = 0
                    idle[i] = 0
                push(heap, (max(p, 0.0), r, key))
                i += 1
                since += 1
            rem, r, key = heap[0]
            nxt = its[i][1] if i < n else math.inf
            if t + rem <= nxt:
                pop(heap)
                t += rem
                if done.get(key) != t:
                    done[key] = t
                    changed.append(key)
            else:
                replace(heap, (rem - (nxt - t), r, key))
                t = nxt
        return i


def check(window: A1Window) -> bool:
    """True when ``window.done`` equals :func:`virtual_srpt` of its items (tests)."""
    return window.done == virtual_srpt(window.items())
