"""Network-packing regulation by classes of jobs, kept across calls (issue #13, docs/scale.md §2).

:func:`policies.elastic.regulate` (Appendix E) walks a heap of every job with a positive
share at every call: at 300x8 on the Philly trace about 130 jobs per call, on about 8 share
values and 18 (share, application, global batch) triples, with one job's share changed per
call.  Its walk pops the jobs in the order of the key ``(r − s, rank)`` (``s`` the job's
share, ``r`` what it holds now, rank its place in the input's order), and what it does with
a job depends on the job only through ``s``, ``r`` and ``useful(job, up)``:

* the step ``up − r`` to the next allowed share is a function of ``r``;
* a job is dropped when the step is more than the GPUs left ``d`` (which only shrink), or
  when its deficit ``s − r`` is not positive and ``useful(job, up)`` is false.

So the jobs of one *class* — one share ``s``, one count ``r`` and one answer of
``useful`` — are popped in their rank order, at the same level ``r − s``; the walk here
keeps one heap entry per class (its first job not yet popped) instead of one per job, and
drops a class at once where the heap walk drops each of its jobs in turn (for the step:
``d`` only shrinks; for ``useful``: the same answer for every job of the class).  A job
moved up joins the class ``(s, up)`` of its own class's jobs moved so far, whose level
``up − s`` is above the level being walked, so that class is whole before its first job is
popped (its rank order is the order of their moves).  The walk then costs O(classes +
moves) heap steps, not O(jobs).

The classes are *kept across calls*: :class:`Classes` keeps the last input (its shares in
order), every job's rank and class, the shares rounded down (``base``, in the input's order)
and their sums, and at the next call reads only what changed: the ids whose share changed
or that came or went (a set difference of the two inputs, done in C), and the jobs whose
view changed (the snapshot's job change record: their application, batch, profile or GPU
range may be another).  The order is checked: the jobs still there must keep their relative
order and the new ones must come after them (else the classes are made again, O(jobs)).

The class of a job is ``(s, u)`` with ``u = (application, global batch)`` for a profiled
job — :func:`policies.elastic.elastic_plan`'s ``useful(job, k)`` compares the model's rate
at ``k`` with the rate at ``s``, a function of those three for a profiled job — and its own
id for any other job (a class of one).  That is the caller's contract: ``useful`` must give
the same answer for the jobs of a class.  Without a usable record (the daemon's snapshots,
hand-built ones), for another profile table, unprofiled set or node size, the classes are
made again from the input.  tests/policies/test_elastic_regulate.py checks the walk against
``regulate`` on random sequences of inputs and every call of whole simulations of the five
elastic policies.

Also kept here, from the same upkeep: ``ranged``, the ids of the input whose job has a
``gpu_range`` (the plan's pass that bounds their shares reads only them).
"""
from __future__ import annotations

import heapq
from bisect import bisect_left
from itertools import compress, filterfalse
from operator import ne, not_
from typing import Callable, Mapping, Optional

from .elastic_packing import next_up, round_down
from .model import ClusterSnapshot
from .records import job_record


class Classes:
    """The jobs of the last input by class: ``members`` (class -> [id] in rank order),
    ``rank`` (id -> its place in the input), ``base`` (id -> its share rounded down, in the
    input's order), ``tot_s`` and ``tot_r`` (the sums of the shares and of ``base``) and
    ``ranged`` (ids whose job has a GPU range).  ``keys`` and ``vals`` (the last input's ids
    and shares, for the next diff) are ``None`` after a call brought up from a delta: the
    next diff then makes the classes again."""

    def __init__(self):
        self.clear()

    def clear(self) -> None:
        self._seen = None  # the job change record read so far
        self._token: Optional[object] = None  # the kept demands' token of the last input
        self._ctx: Optional[tuple] = None  # (profiles, unprofiled ids, GPUs per node)
        # the last input's order where it came reordered with a delta (the ranks follow it)
        self._order: Optional[list] = None
        self.per_node = 1
        self._make({}, None)

    def _make(self, shares: Mapping[str, int], keyof: Optional[Callable]) -> None:
        self.keys: list[str] = []  # the last input's ids and shares, in its order
        self.vals: list[int] = []
        self.rank: dict[str, int] = {}
        self.key: dict[str, tuple] = {}
        self.members: dict[tuple, list] = {}
        self.base: dict[str, int] = {}
        self.ranged: set[str] = set()
        self.tot_s = self.tot_r = 0
        self._down: dict[int, int] = {}
        self._next = 0
        for jid, s in shares.items():
            self.rank[jid] = self._next
            self._next += 1
            self._add(jid, s, keyof(jid))
        self.keys, self.vals = list(shares), list(shares.values())

    # ------------------------------------------------------------------ upkeep
    def _add(self, jid: str, s: int, kr: tuple) -> None:
        """Put ``jid`` (its rank set) in class ``(s, kr[0])``; ``kr[1]``: it has a GPU range."""
        key = self.key[jid] = (s, kr[0])
        rank = self.rank
        at = rank[jid]
        lst = self.members.get(key)
        if lst is None:
            self.members[key] = [jid]
        elif rank[lst[-1]] < at:
            lst.append(jid)
        else:
            lst.insert(bisect_left(lst, at, key=rank.__getitem__), jid)
        r = self._down.get(s)
        if r is None:
            r = self._down[s] = round_down(s, self.per_node)
        self.base[jid] = r  # (a job already there keeps its place)
        self.tot_s += s
        self.tot_r += r
        if kr[1]:
            self.ranged.add(jid)

    def _remove(self, jid: str) -> None:
        """Take ``jid`` out of its class and the sums (its rank and place in ``base`` stay)."""
        key = self.key.pop(jid)
        lst = self.members[key]
        rank = self.rank
        del lst[bisect_left(lst, rank[jid], key=rank.__getitem__)]
        if not lst:
            del self.members[key]
        self.tot_s -= key[0]
        self.tot_r -= self.base[jid]
        self.ranged.discard(jid)

    def sync(self, shares: Mapping[str, int], keyof: Callable[[str], tuple],
             stale: Optional[set]) -> None:
        """Bring the classes to the input ``shares`` (id -> share > 0, in rank order).
        ``keyof(id)``: ``(u, has a GPU range)`` of a job; ``stale``: the ids whose ``u`` or
        range may have changed since the last input (``None``: any; the classes are made
        again)."""
        if stale is None or self.keys is None:
            return self._make(shares, keyof)
        pkeys, pvals, rank = self.keys, self.vals, self.rank
        keys, vals = list(shares), list(shares.values())
        # (C-level passes over the jobs: no tuple or set of them)
        moved = False
        if keys == pkeys:  # the same jobs in the same order
            gone = new = ()
            m = len(keys)
            changed = list(compress(keys, map(ne, vals, pvals)))
        else:
            gone = list(filterfalse(shares.__contains__, pkeys))
            new = set(filterfalse(rank.__contains__, keys))
            m = len(keys) - len(new)
            if gone:
                keep = list(map(not_, map(set(gone).__contains__, pkeys)))
                okeys, ovals = list(compress(pkeys, keep)), compress(pvals, keep)
            else:
                okeys, ovals = pkeys, pvals
            # the jobs still there, first and in their order (so the new ones come last)
            if keys[:m] == okeys:
                changed = list(compress(okeys, map(ne, vals, ovals)))
            else:  # the order moved: each job's share looked up (new ones: None)
                moved = True
                was = dict(zip(pkeys, pvals))
                changed = list(compress(keys, map(ne, vals, map(was.get, keys))))
        base = self.base
        for jid in gone:
            self._remove(jid)
            del rank[jid], base[jid]
        for jid in stale.union(changed).difference(new):
            s = shares.get(jid)
            if s is not None:
                self._remove(jid)
                self._add(jid, s, keyof(jid))
        for jid in (filter(new.__contains__, keys) if moved else keys[m:]):
            rank[jid] = self._next
            self._next += 1
            self._add(jid, shares[jid], keyof(jid))
        if moved:
            self._rerank(keys)
        self.keys, self.vals = keys, vals

    def _rerank(self, keys: list) -> None:
        """Every job's rank made its place in ``keys`` (the input's order, which moved), the
        classes' member lists sorted again and ``base`` put in that order: O(classes) steps
        of Python and C-level passes over the jobs (their classes are unchanged)."""
        n = len(keys)
        rank = self.rank = dict(zip(keys, range(n)))
        self._next = n
        get = rank.__getitem__
        for lst in self.members.values():
            lst.sort(key=get)
        base = self.base
        self.base = dict(zip(keys, map(base.__getitem__, keys)))

    def update(self, snap: ClusterSnapshot, ctx: tuple, shares: Mapping[str, int],
               per_node: int, keyof: Callable[[str], tuple],
               delta: Optional[tuple] = None) -> bool:
        """:meth:`sync` with the jobs whose view changed since the last call (the snapshot's
        job change record); False (and the classes cleared) without a usable record.  ``ctx``:
        (profile table, unprofiled ids' object) that ``keyof`` reads; another one (by
        identity) or another node size makes the classes again.

        ``delta`` (:attr:`policies.max_min_kept.KeptShares.delta`, where ``shares`` are kept
        demands): where its ``prev`` names the last input, the classes are brought up to
        ``shares`` from its ids alone (:meth:`_sync_delta`), with no pass over the jobs."""
        token, self._token = self._token, (delta[1] if delta is not None else None)
        last, self._order = self._order, None
        log = job_record(snap)
        if log is None:
            self.clear()
            return False
        ctx = (ctx[0], ctx[1], per_node)
        old, seen = self._ctx, self._seen
        self._seen = log
        if (old is None or old[0] is not ctx[0] or old[1] is not ctx[1] or old[2] != per_node
                or seen is None or not log.extends(seen)):
            self._ctx = ctx
            self.per_node = per_node
            self._make(shares, keyof)
        elif delta is not None and token is not None and delta[0] is token:
            self._sync_delta(shares, keyof, set(log[len(seen):]), delta[2], delta[3])
            if len(delta) > 4:  # the same entries in their own order (its list): ranks
                order = delta[4]
                if order != last:
                    self._rerank(order)
                self._order = order
                return True
        else:
            self.sync(shares, keyof, set(log[len(seen):]))
        return True

    def _sync_delta(self, shares: Mapping[str, int], keyof: Callable[[str], tuple],
                    stale: set, moved: frozenset, new: tuple) -> None:
        """:meth:`sync` where the input differs from the last one only at ``moved`` (ids put
        or dropped since) and by ``new`` (ids added since, in order, after all others):
        O(changes).  An id of ``new`` that was in the last input moved to the end: the
        classes are made again."""
        rank, base, key = self.rank, self.base, self.key
        if any(map(key.__contains__, new)):
            return self._make(shares, keyof)
        for jid in moved:
            if jid not in shares and jid in key:  # gone
                self._remove(jid)
                del rank[jid], base[jid]
        for jid in stale.union(moved):
            s = shares.get(jid)
            if s is not None and jid in key:  # (the new ones come below)
                self._remove(jid)
                self._add(jid, s, keyof(jid))
        for jid in new:
            s = shares.get(jid)
            if s is not None:
                rank[jid] = self._next
                self._next += 1
                self._add(jid, s, keyof(jid))
        self.keys = self.vals = None  # (made from ``shares`` when a pass needs them)

    # ------------------------------------------------------------------ the walk
    def shares_seen(self):
        """The distinct shares of the input (one per class key's share)."""
        return {k[0] for k in self.members}

    def regulate(self, total: int, useful: Callable[[str, int], bool]) -> dict[str, int]:
        """:func:`policies.elastic.regulate` of the input with ``total`` GPUs, by classes."""
        per_node = self.per_node
        out = dict(self.base)
        d = min(self.tot_s, total) - self.tot_r
        if d <= 0:
            return out
        nxt: dict[int, int] = {}
        down = self._down
        rank = self.rank
        heap = []
        for (s, u), mem in self.members.items():
            r = down[s]
            up = nxt.get(r)
            if up is None:
                up = nxt[r] = next_up(r, per_node)
            if up - r <= d:  # (d only shrinks: a larger step is never taken)
                heap.append((r - s, rank[mem[0]], 0, s, u, r, mem))
        heapq.heapify(heap)
        # (s, u, up) -> the class's jobs moved up to ``up`` so far, in rank order
        moved: dict[tuple, list] = {}
        while d > 0 and heap:
            level, rk, p, s, u, r, mem = heap[0]
            up = nxt.get(r)
            if up is None:
                up = nxt[r] = next_up(r, per_node)
            step = up - r
            jid = mem[p]
            if step > d or (level >= 0 and not useful(jid, up)):
                heapq.heappop(heap)  # every job of the class, as the heap walk drops each
                continue
            heapq.heappop(heap)
            key = (s, u, up)
            lst = moved.get(key)
            if lst is None:  # (its level ``up - s`` is above this one)
                lst = moved[key] = []
                heapq.heappush(heap, (up - s, rk, 0, s, u, up, lst))
            # this class's jobs from p on, moved up while they come before the heap's top
            # (the heap walk's next pops: the others at this level come by rank) and the
            # step fits: one slice
            n = len(mem)
            q = min(n, p + d // step)
            if heap and heap[0][0] == level:
                q = bisect_left(mem, heap[0][1], p, q, key=rank.__getitem__)
            run = mem[p:q]
            lst.extend(run)
            for jid in run:  # (a few per slice: faster than a dict built to update from)
                out[jid] = up
            d -= step * (q - p)
            if q < n and step <= d:  # (a step that does not fit now never will)
                heapq.heappush(heap, (level, rank[mem[q]], q, s, u, r, mem))
        return out


_CLASSES: dict = {}  # policy name -> its Classes


def kept_classes(policy: str, snap: ClusterSnapshot, ctx: tuple, shares: Mapping[str, int],
                 per_node: int, keyof: Callable[[str], tuple],
                 delta: Optional[tuple] = None) -> Optional[Classes]:
    """The policy's classes brought up to ``shares`` (``None``: no usable record)."""
    c = _CLASSES.get(policy)
    if c is None:
        c = _CLASSES[policy] = Classes()
    return c if c.update(snap, ctx, shares, per_node, keyof, delta) else None
