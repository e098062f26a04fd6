"""The simulator's free GPUs as each snapshot shows them, kept per change.

A snapshot carries three views of the free GPUs (:class:`policies.model.ClusterSnapshot`):

* ``free_index``: node -> its free GPUs (ascending index), only nodes with a free GPU, in
  node order (the order of the node tuple);
* ``free_gpus``: all free GPUs, node by node in that order (the index's values, chained
  only when a consumer reads them: a :class:`policies.model.Counted` whose length, the free
  count kept here, is known without them; most policies read only the count);
* ``free_buckets``: free count -> ((node rank, node), ...) ascending, counts with no node
  left out.

Before this module the three were rebuilt from every node at each call after a change
(O(nodes + free GPUs) per call).  Here only the nodes that changed since the last call are
looked at: their tuples are rebuilt, their bucket entries moved (one bisection each) and
the index and bucket dicts changed in place (the free GPUs' view holds the index's proxy,
so an unread view keeps the index it was made from, as a held proxy does).  A dict handed out (behind a read-only proxy)
must never change under a snapshot or a policy that kept it: in-place changes are made
only when nothing but this object holds the dict (``sys.getrefcount``), else a copy is
changed.  A node that gets its first free GPU back must enter the index at its place in
node order: the index is then rebuilt from the per-node tuples (a dict only appends).

Exact: after :meth:`views` the index equals ``{n: t for n, t in tuples.items() if t}``
(same items, same order: a node leaving is deleted, a node staying changes its value in
place, a node entering rebuilds), the free GPUs are the index's values chained, and the
buckets map each count to ``tuple(lists[count])`` for the non-empty lists, as the old code
built them.  ``tests/test_sim_kept_free.py`` checks this against a from-scratch build at
every change of random sequences.

(The old code put the nodes in the order of a set of names, i.e. string hashing; no policy
depends on that order, the documented one is node order: ``ClusterSnapshot.free_gpus``.)
"""
from __future__ import annotations

import sys
from bisect import bisect_left, insort
from itertools import chain, compress
from types import MappingProxyType
from typing import Optional, Sequence

from policies.model import Counted, Gpu, Node


class KeptFree:
    """Free GPUs of a node tuple; :meth:`take` and :meth:`give` change one GPU,
    :meth:`views` answers the snapshot's (free_gpus, free_index, free_buckets)."""

    __slots__ = ("gpu_obj", "rank", "free", "tuples", "lists", "index", "bucket_map",
                 "dirty", "cache", "count")

    def __init__(self, nodes: Sequence[Node]):
        self.gpu_obj = {n.name: n.gpus() for n in nodes}
        self.rank = {n.name: i for i, n in enumerate(nodes)}
        self.free: dict[str, set[int]] = {n.name: set(range(n.num_gpus)) for n in nodes}
        # node -> its free GPUs (every node, in node order; empty tuple when none is free)
        self.tuples: dict[str, tuple[Gpu, ...]] = {n.name: () for n in nodes}
        # free count -> sorted (node rank, node) of the nodes with that many free GPUs
        self.lists: dict[int, list[tuple[int, str]]] = {}
        # the dicts behind the last views' proxies (None: rebuild)
        self.index: Optional[dict] = None
        self.bucket_map: dict[int, tuple] = {}
        self.dirty = set(self.tuples)  # nodes changed since the last views
        self.cache: Optional[tuple] = None  # the last views while nothing changed
        self.count = 0  # free GPUs in ``tuples``

    def take(self, g: Gpu) -> None:
        """``g`` now holds a job."""
        self.free[g.node].discard(g.index)
        self.dirty.add(g.node)
        self.cache = None

    def give(self, g: Gpu) -> None:
        """``g`` holds no job any more."""
        self.free[g.node].add(g.index)
        self.dirty.add(g.node)
        self.cache = None

    def views(self) -> tuple:
        """(free_gpus, free_index proxy, free_buckets proxy), up to date."""
        if self.cache is not None:
            return self.cache
        tuples, lists, rank, objs, free = self.tuples, self.lists, self.rank, self.gpu_obj, \
            self.free
        index = self.index
        # this attribute, ``index`` and getrefcount's argument: no proxy handed out holds it
        if index is not None and sys.getrefcount(index) > 3:
            index = dict(index)
        bmap = self.bucket_map
        if sys.getrefcount(bmap) > 3:
            bmap = dict(bmap)
        counts = set()
        rebuild = index is None
        for name in self.dirty:
            old = len(tuples[name])
            own = objs[name]
            t = tuples[name] = tuple(own[i] for i in sorted(free[name]))
            new = len(t)
            self.count += new - old
            if not rebuild:
                if not new:
                    index.pop(name, None)
                elif old:
                    index[name] = t
                else:  # enters: its place in node order
                    rebuild = True
            if old != new:
                key = (rank[name], name)
                if old:
                    b = lists[old]
                    del b[bisect_left(b, key)]
                    counts.add(old)
                if new:
                    insort(lists.setdefault(new, []), key)
                    counts.add(new)
        self.dirty.clear()
        if rebuild:
            index = dict(compress(tuples.items(), tuples.values()))  # (the nodes with free GPUs)
        for c in counts:
            b = lists[c]
            if b:
                bmap[c] = tuple(b)
            else:
                bmap.pop(c, None)
        self.index, self.bucket_map = index, bmap
        proxy = MappingProxyType(index)
        # free_gpus: chained from the index only if read (the closure holds the proxy the
        # snapshot holds, so ``index`` is copied, not changed, while either is alive)
        self.cache = (Counted((lambda: chain.from_iterable(proxy.values()),), self.count),
                      proxy, MappingProxyType(bmap))
        return self.cache
