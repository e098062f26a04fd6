"""Elastic GPU placement (seed 001 §4.4, Appendix E), used by :func:`policies.elastic.elastic_plan`.

Multi-node shares (>= GPUs per node) take whole nodes and the rest are placed largest first,
first-fit-decreasing, which never fails with allowed shares on equal nodes (Appendix E,
Proposition 1: the sizes divide each other, so whichever node each share goes to, the free
space of every node stays a multiple of the next share).  That leaves the choice of node
free, and §4.4 says how to make it: the scheduler "finds a placement decision that maximizes
the number of jobs which reuse at least one GPU, and then maximizes the total number of
reused GPUs as the secondary goal.  It conducts migration as the final resort when it is
unavoidable."  The paper gives no algorithm for that; ours is greedy (our choice):

* Running jobs claim the GPUs they are expected to keep (:class:`_Claims`): a sub-node share,
  the lowest-index ``min(share, n)`` of its ``n`` GPUs on its node holding most of them
  (ties: node rank); a multi-node share, the first ``share / per_node`` nodes (by rank) it
  holds whole.  A claim lapses once its job is placed.
* Jobs are placed largest share first, running jobs before new ones among equal shares (then
  the policy's priority order).
* A multi-node share takes whole free nodes: first its own nodes where it holds at least as
  many GPUs as other jobs claim (most of its GPUs, then rank: staying moves no more GPUs of
  others than it keeps of its own, §4.4's second goal), then unclaimed nodes by rank, then
  its other own nodes, then claimed nodes by rank.
* A sub-node share goes to a node with at least the share in unclaimed free GPUs: the one
  holding most of the job's GPUs, else the one with the fewest unclaimed free GPUs (best fit,
  then rank); where no node has that many unclaimed GPUs, to the node holding most of its
  GPUs that has room, else the fullest node that fits (best fit, then rank): another job
  then moves.
* Within a node a job takes its own GPUs first, then unclaimed ones, then ones no job of
  ``shares`` holds now, then by index.

Before this rule (until 2026-11-28) a new or growing job took whichever node the
first-fit-decreasing order reached first, counting the GPUs of running jobs not placed yet as
free: on the Philly trace at 300x8 max-min made about 15 migrations per job, nearly all of
jobs whose share had not changed (docs/scale.md §2b).  The literal scans of the rule are kept in
tests/policies/reference_elastic.py; this module gives exactly their result through
free-count buckets (:class:`_FreeNodes`) and unclaimed-count buckets (:class:`_Claims`).

Where nodes are unequal a share may not fit on the fewest nodes: it is then placed on as few
nodes as possible (most free GPUs first), and left out if fewer GPUs than it needs are left.
"""
from __future__ import annotations

from bisect import bisect_left, insort
from itertools import chain
from types import MappingProxyType
from typing import Mapping, Optional

from .model import ClusterSnapshot, Gpu, JobState, identity_memo
from .records import any_shared_gpu, records_usable

_RUNNING = JobState.RUNNING


class _FreeNodes:
    """Free GPU indexes per node, with the nodes kept in buckets by free count (each bucket
    sorted by node rank, then position), so that :func:`place` finds its node without
    scanning the cluster per share.

    Starts from the empty cluster, built once per node tuple (memoised by identity, as
    the simulator hands in the same tuple every call) and copied: the per-node index lists
    are shared with that template and never changed in place (:meth:`set` replaces a
    node's list).  The buckets are brought up to date only when read (:attr:`buckets`,
    also through :meth:`by_count_desc` and :meth:`best_fit`): :meth:`set` notes the node's count as the
    buckets hold it, and the first read after it moves each noted node to the bucket of its
    count now, the same buckets as moving it at every :meth:`set`.  Until the first read
    they are the template's (copied then), so a call whose jobs all keep their GPUs never
    touches them."""

    def __init__(self, snap: ClusterSnapshot):
        free, key, buckets, total = identity_memo(_EMPTY, snap.nodes, _empty_cluster, 8)
        self.free: dict[str, list[int]] = dict(free)
        self.key = key
        self._template = buckets
        self._buckets: Optional[dict[int, list]] = None
        self._noted: dict[str, int] = {}  # node -> its free count as the buckets hold it
        self.total = total

    def set(self, x: str, idx: list[int]) -> None:
        old = self.free[x]
        self.free[x] = idx
        self.total += len(idx) - len(old)
        if x not in self._noted:
            self._noted[x] = len(old)

    @property
    def buckets(self) -> dict[int, list]:
        """The buckets, up to date."""
        b = self._buckets
        if b is None:
            b = self._buckets = {c: list(v) for c, v in self._template.items()}
        if self._noted:
            free, key = self.free, self.key
            for x, old in self._noted.items():
                _rebucket(b, (key[x], x), old, len(free[x]))
            self._noted.clear()
        return b

    def by_count_desc(self):
        """Nodes with free GPUs, most free first, then rank (read-only walk)."""
        buckets = self.buckets
        for c in sorted((c for c, b in buckets.items() if b), reverse=True):
            for _, x in buckets[c]:
                yield x

    def best_fit(self, k: int) -> Optional[str]:
        """The node with the fewest free GPUs that still holds ``k``, then rank."""
        buckets = self.buckets
        cs = [c for c, b in buckets.items() if b and c >= k]
        return buckets[min(cs)][0][1] if cs else None


def _rebucket(buckets: dict[int, list], kx: tuple, old: int, new: int) -> None:
    """Move entry ``kx`` of sorted bucket lists from count ``old`` to ``new`` (0: none)."""
    if old != new:
        if old:
            v = buckets[old]
            del v[bisect_left(v, kx)]
        if new:
            insort(buckets.setdefault(new, []), kx)


_NONE: Mapping[str, int] = MappingProxyType({})
_EMPTY: dict = {}  # node tuple id -> (that tuple, its empty _FreeNodes parts)


def _empty_cluster(nodes) -> tuple:
    """(free index lists, node key, buckets, total) of ``nodes`` with every GPU free: the
    node key is (rank, position), each bucket sorted by (key, name)."""
    rank = {n.name: i for i, n in enumerate(nodes)}  # ClusterSnapshot.node_rank
    free = {n.name: list(range(n.num_gpus)) for n in nodes}
    key = {x: (rank.get(x, 0), i) for i, x in enumerate(free)}
    buckets: dict[int, list] = {}
    total = 0
    for x, idx in free.items():
        total += len(idx)
        if idx:
            buckets.setdefault(len(idx), []).append((key[x], x))
    for b in buckets.values():
        b.sort()
    return free, MappingProxyType(key), buckets, total



_KEEP: dict[int, tuple] = {}  # identity_memo: allocation -> {share: (node tuple, _keep_of)}
_HELD: dict[int, tuple] = {}  # identity_memo: allocation -> [(node tuple, _held_of)]


def _per_share(alloc) -> dict:
    return {}


def _slot(alloc) -> list:
    return [None]


def _held_of(alloc, free: Mapping[str, list]) -> tuple:
    """(the GPUs of ``alloc`` as a frozenset, node -> how many of them lie there for the nodes
    of ``free``, those GPUs sorted — ``alloc.gpus`` itself where that is the same tuple —,
    one more than the largest index among them, and their indexes where they are one node's
    (else ``None``)): what :func:`place` reads of a running job's record, the same for every
    call with the same node tuple."""
    held = frozenset(alloc.gpus)
    mine: dict[str, int] = {}
    for g in held:
        if g.node in free:
            mine[g.node] = mine.get(g.node, 0) + 1
    on = tuple(sorted(g for g in held if g.node in mine))
    if on == alloc.gpus:
        on = alloc.gpus
    top = max((g.index for g in on), default=-1) + 1
    one = frozenset(g.index for g in on) if len(mine) == 1 else None
    return held, MappingProxyType(mine), on, top, one


def held_facts(alloc, nodes: tuple, free: Mapping[str, list]) -> tuple:
    """:func:`_held_of` memoised per allocation record (by identity) and node tuple."""
    slot = identity_memo(_HELD, alloc, _slot, 20_000)
    hit = slot[0]
    if hit is None or hit[0] is not nodes:
        hit = slot[0] = (nodes, _held_of(alloc, free))
    return hit[1]


def _keep_of(alloc, k: int, per_node: int, nkey: Mapping[str, tuple],
             size: Mapping[str, int]) -> tuple:
    """((node, GPUs kept there), ...) and the frozenset of (node, index) a running job on
    ``alloc`` with share ``k`` is expected to keep (see :class:`_Claims`)."""
    on: dict[str, list[int]] = {}
    for g in alloc.gpus:
        if g.node in nkey:
            on.setdefault(g.node, []).append(g.index)
    if not on:
        return (), frozenset()
    if k < per_node:
        y = min(on, key=lambda x: (-len(on[x]), nkey[x]))
        idx = sorted(on[y])[:max(k, 0)]
        return ((y, len(idx)),), frozenset((y, i) for i in idx)
    whole = sorted((x for x in on if len(on[x]) == per_node == size[x]), key=nkey.__getitem__)
    sel = whole[:k // per_node]
    return tuple((y, len(on[y])) for y in sel), frozenset((y, i) for y in sel for i in on[y])


class _Claims:
    """The GPUs running jobs are expected to keep, and per node ``c``: how many of its free
    GPUs a job not placed yet keeps.  A node's *unclaimed* free count is ``len(free) - c``;
    :meth:`best_fit` finds the node with the fewest that still holds a share, through buckets
    by that count (each sorted by node key) brought up to date when read, as
    :class:`_FreeNodes` keeps its own: :meth:`note` records a node's count before it changes.

    What a job keeps depends on its allocation record, share and the node tuple only, so it is
    memoised per record (``_KEEP``); a GPU's claimer is the job ``snap.gpu_jobs`` names there,
    when the GPU is in what that job keeps.  Where a GPU is held by two jobs of the snapshot
    (``shared``) the claims are built GPU by GPU instead, the GPU going to the first of them in
    ``shares``' order, as the literal rule has it.

    Built at the first placement that needs it (a call whose jobs all keep their GPUs never
    builds it); every job placed before then kept exactly the GPUs it claims, so the counts
    are those of the call's start less those jobs'.  ``placed`` is the caller's set of jobs
    already placed."""

    def __init__(self, fn: _FreeNodes, snap: ClusterSnapshot, shares: Mapping[str, int],
                 per_node: int, placed: set, shared: bool):
        self.fn, self.placed, self.shares = fn, placed, shares
        free, jobs = fn.free, snap.jobs
        size = snap.node_gpus
        self.jobs, self.gpu_jobs = jobs, snap.gpu_jobs
        self.per_node, self.size, self.nodes = per_node, size, snap.nodes
        self.keeps: Optional[dict[tuple, str]] = None
        c: dict[str, int] = {}
        if shared:
            keeps: dict[tuple, str] = {}
            for jid in shares:
                job = jobs[jid]
                if job.running and job.allocation is not None:
                    for g in self.keep(jid)[1]:
                        keeps.setdefault(g, jid)
            self.keeps = keeps
            for (x, i), jid in keeps.items():
                if jid not in placed and i in free[x]:
                    c[x] = c.get(x, 0) + 1
        else:
            for jid in shares:
                if jid in placed:
                    continue
                job = jobs[jid]
                if job.running and job.allocation is not None:
                    for x, n in self.keep(jid)[0]:
                        c[x] = c.get(x, 0) + n
        self.c = c
        self._ub: Optional[dict[int, list]] = None
        self._noted: dict[str, int] = {}

    def keep(self, jid: str) -> tuple:
        """``_keep_of`` for running job ``jid``, memoised per allocation record (then per
        share, for this node tuple)."""
        alloc, k = self.jobs[jid].allocation, self.shares[jid]
        per = identity_memo(_KEEP, alloc, _per_share, 20_000)
        hit = per.get(k)
        if hit is None or hit[0] is not self.nodes:
            hit = per[k] = (self.nodes, _keep_of(alloc, k, self.per_node, self.fn.key, self.size))
        return hit[1]

    def owner(self, g: tuple, default: Optional[str]) -> Optional[str]:
        """The job that claims GPU ``g`` ((node, index)), else ``default``."""
        if self.keeps is not None:
            return self.keeps.get(g, default)
        on = self.gpu_jobs.get(g)
        if on:
            jid = on[0]
            job = self.jobs.get(jid)
            if jid in self.shares and job is not None and job.running \
                    and job.allocation is not None and g in self.keep(jid)[1]:
                return jid
        return default

    def note(self, x: str) -> None:
        """Call before ``x``'s free GPUs or claims change."""
        if self._ub is not None and x not in self._noted:
            self._noted[x] = len(self.fn.free[x]) - self.c.get(x, 0)

    def release(self, jid: str) -> None:
        """``jid`` is placed now: its claims on free GPUs lapse."""
        job = self.jobs[jid]
        if not job.running or job.allocation is None:
            return
        free, c, keeps = self.fn.free, self.c, self.keeps
        for g in self.keep(jid)[1]:
            x, i = g
            if i in free[x] and (keeps is None or keeps.get(g) == jid):
                self.note(x)
                c[x] -= 1

    def taken(self, x: str, got) -> None:
        """GPUs ``got`` of ``x`` were taken (after :meth:`note`): claims of jobs not placed lapse."""
        placed, c = self.placed, self.c
        if not c.get(x):  # no job not placed claims a free GPU of ``x``: none lapses
            return
        for i in got:
            jid = self.owner((x, i), None)
            if jid is not None and jid not in placed:
                c[x] -= 1

    def returned(self, g: Gpu) -> None:
        """``g`` is free again (after :meth:`note`): a claim of a job not placed counts again."""
        jid = self.owner(g, None)
        if jid is not None and jid not in self.placed:
            self.c[g.node] = self.c.get(g.node, 0) + 1

    def best_fit(self, k: int) -> Optional[str]:
        """The node with the fewest unclaimed free GPUs that still holds ``k`` of them, then
        node key; ``None`` when no node has ``k`` unclaimed free GPUs."""
        ub = self._ub
        free, c, key = self.fn.free, self.c, self.fn.key
        if ub is None:
            ub = self._ub = {n: list(v) for n, v in self.fn.buckets.items()}
            for x, cx in c.items():
                if cx:
                    _rebucket(ub, (key[x], x), len(free[x]), len(free[x]) - cx)
            self._noted.clear()
        elif self._noted:
            for x, old in self._noted.items():
                _rebucket(ub, (key[x], x), old, len(free[x]) - c.get(x, 0))
            self._noted.clear()
        cs = [n for n, b in ub.items() if b and n >= k]
        return ub[min(cs)][0][1] if cs else None


class _GiveUp(Exception):
    """(strict placement) A whole-node walk reached the claimed nodes."""


class KeptOnNodes:
    """(strict placement, what :func:`_place` returns then) A job to place holds GPUs on
    ``nodes``, where a kept job holds some: its own nodes' free counts there would count the
    kept job's GPUs.  (Returned, not raised: a raised exception's traceback would hold the
    placement's frames until the cycle collector ran.)"""

    __slots__ = ("nodes",)

    def __init__(self, nodes):
        self.nodes = nodes


def _past_kept():
    """The strict walk's last group: the claimed whole nodes, which may be kept jobs' there."""
    raise _GiveUp
    yield  # (a generator: raises when first drawn, not when made)


def place(snap: ClusterSnapshot, shares: Mapping[str, int],
          reduced: Optional[bool] = None) -> dict[str, tuple[Gpu, ...]]:
    """GPU sets for ``shares`` (job id -> count > 0) by the rule of the module docstring.

    Nodes are found through :class:`_FreeNodes` (free-count buckets), :class:`_Claims`
    (unclaimed-count buckets) and the job's own nodes, not by scanning the cluster per share;
    the result is the literal scans' (tests/policies/test_elastic_differential.py checks it
    against the reference copy).

    ``reduced`` (default: where the snapshot is the simulator's, :func:`records_usable`):
    first try :func:`policies.elastic_reduced.place_reduced`, which places only the jobs that do not simply keep their
    GPUs (the same GPU sets; the dict lists the kept jobs first)."""
    if reduced is None:
        reduced = records_usable(snap)
    if reduced:
        from .elastic_reduced import place_reduced
        out = place_reduced(snap, shares)
        if out is not None:
            return out
    return _place(snap, shares, _FreeNodes(snap), any_shared_gpu(snap), None)


def _place(snap: ClusterSnapshot, shares: Mapping[str, int], fn: "_FreeNodes", shared: bool,
           knodes: Optional[set], after=None, rejoin=None):
    """:func:`place`'s rule on the free GPUs ``fn``.  ``knodes`` (strict mode, from
    :func:`place_reduced`): the nodes where a kept job left out of ``shares`` holds GPUs; the
    placement then gives up (``None``) at every step whose choice could read those GPUs, or
    returns :class:`KeptOnNodes` where a job's own nodes are among them.  ``after`` (strict
    mode): job id -> {node: GPUs of the kept sub-node jobs after it in the rule's order}, the
    GPUs the whole rule still has free there at that job's turn; with it a sub-node share's
    fallbacks are the whole rule's (:func:`_fallback`).  ``rejoin`` (strict mode, with
    ``after``): ``rejoin(job, nodes)`` where a sub-node share's fallback chooses nodes holding
    kept jobs' GPUs: those kept jobs after it in the rule's order leave the kept ones and join
    ``shares`` (in place), and it returns ``[(id, its rule key, its GPUs)]`` of them (empty:
    none, the placement returns :class:`KeptOnNodes`); the pass goes on with them
    (:func:`_rejoined`)."""
    per_node = snap.max_gpus_per_node or 1
    free, nkey = fn.free, fn.key
    jobs = snap.jobs
    placed: set[str] = set()
    claims: list[_Claims] = []  # built when first needed
    # a GPU held by two jobs (a daemon snapshot after a packing policy): claims GPU by GPU,
    # and no job keeps its GPUs on the shortcuts below without the general path's tests
    strict = knodes is not None

    def claims_now() -> _Claims:
        if not claims:
            claims.append(_Claims(fn, snap, shares, per_node, placed, shared))
        return claims[0]

    def mark(jid: str) -> None:
        placed.add(jid)
        if claims:
            claims[0].release(jid)

    def setf(x: str, idx: list[int]) -> None:
        if claims:
            claims[0].note(x)
        fn.set(x, idx)

    # a placed job's current GPUs, and every GPU a placed job holds now: both read from the
    # snapshot (never changed here), so built when first asked for
    cur: dict[str, Optional[tuple]] = {}
    held_now: set[Gpu] = set()
    held_built = []

    nodes = snap.nodes

    def facts(jid: str) -> Optional[tuple]:
        """:func:`held_facts` of ``jid``'s record (``None``: not running); the memo's hit
        read inline (this is asked of every running job placed)."""
        h = cur.get(jid, False)
        if h is False:
            job = jobs[jid]
            alloc = job.allocation
            if job.state is not _RUNNING or alloc is None:
                h = None
            else:
                hit = _HELD.get(id(alloc))
                slot = hit[1][0] if hit is not None and hit[0] is alloc else None
                h = (slot[1] if slot is not None and slot[0] is nodes
                     else held_facts(alloc, nodes, free))
            cur[jid] = h
        return h

    def held(jid: str) -> Optional[frozenset]:
        h = facts(jid)
        return None if h is None else h[0]

    def held_by_any() -> set[Gpu]:
        if not held_built:
            held_built.append(True)
            for jid in shares:
                job = jobs[jid]
                if job.running and job.allocation is not None:
                    held_now.update(job.allocation.gpus)
        return held_now
    out: dict[str, tuple[Gpu, ...]] = {}

    def mine_by_node(jid: str) -> Mapping[str, int]:
        h = facts(jid)
        return _NONE if h is None else h[1]

    def take(jid: str, node: str, n: int) -> list[Gpu]:
        idx = free[node]
        cl = claims_now()
        if n < len(idx):
            mine = held(jid) or frozenset()
            held_now = held_by_any()
            owner, placed_ = cl.owner, placed
            # (node, i) looks up as Gpu(node, i) does (Gpu is a NamedTuple), without
            # building one; a sorted copy: the lists may be the empty cluster's (_FreeNodes).
            # With no claim on the node's free GPUs the claim term is False for each (the
            # default owner, ``jid``, is placed): left out
            if cl.c.get(node, 0):
                idx = sorted(idx, key=lambda i: ((node, i) not in mine,
                                                 owner((node, i), jid) not in placed_,
                                                 (node, i) in held_now, i))
            else:
                idx = sorted(idx, key=lambda i: ((node, i) not in mine, (node, i) in held_now, i))
        # all of a node's free GPUs: which ones needs no order (every caller sorts the
        # GPUs it gathers, and a node's list order is never read: keys are unique)
        got = idx[:n]
        cl.note(node)
        cl.taken(node, got)
        fn.set(node, idx[n:])
        return [Gpu(node, i) for i in got]

    def give_back(gpus: list[Gpu]) -> None:
        for g in gpus:
            setf(g.node, free[g.node] + [g.index])
            if claims:
                claims[0].returned(g)

    def prefix(nodes, k: int, have: int, cap: Optional[int]) -> list[str]:
        """The nodes the literal loop visits before it holds ``k`` GPUs (taking
        min(cap or free, k - held) from each), gathered before anything is taken."""
        picked = []
        if have >= k:
            return picked
        for x in nodes:  # (no node past the last one needed is drawn: see _past_kept)
            c = len(free[x]) if cap is None else cap
            if c:
                picked.append(x)
                have += min(c, k - have)
                if have >= k:
                    break
        return picked

    # stable: largest share first, running jobs before new ones, then the priority order
    order = sorted(shares, key=lambda j: (-shares[j], jobs[j].state is not _RUNNING
                                          or jobs[j].allocation is None))
    for jid in order:
        k = shares[jid]
        if k < per_node:
            continue
        mark(jid)
        h = facts(jid)
        mine = _NONE if h is None else h[1]
        if h is not None and len(h[2]) == k and all(
                c == per_node and len(free[x]) == per_node for x, c in mine.items()) \
                and not shared:
            # the job keeps whole nodes, all still free and nobody else's: they come first
            # in the order below (others cannot claim more of a node than the whole node it
            # holds), so the loop takes every free GPU of each (the general path gives the
            # same; its GPUs on nodes not in the snapshot, if any, are left out); where a GPU
            # is held twice the general path takes them, so that the claims on it lapse.
            # A node with ``per_node`` free GPUs has them all, 0 .. per_node - 1: where the
            # job's indexes lie below that, what it takes is its own GPUs there (h[2])
            gpus = (h[2] if h[3] <= per_node
                    else tuple(sorted(Gpu(x, i) for x in mine for i in free[x])))
            for x in mine:
                setf(x, [])
            out[jid] = gpus
            continue
        if strict and h is not None and not knodes.isdisjoint(mine):
            return KeptOnNodes(frozenset(mine))  # its nodes' free counts would count them
        cl = claims_now()
        c = cl.c
        full = fn.buckets.get(per_node, [])
        own = sorted((x for x in mine if len(free[x]) == per_node),
                     key=lambda x: (-mine[x], nkey[x]))
        lead = set(own)
        walk = chain((x for x in own if c.get(x, 0) <= mine[x]),
                     (x for _, x in full if x not in lead and not c.get(x)),
                     (x for x in own if c.get(x, 0) > mine[x]),
                     _past_kept() if strict else
                     (x for _, x in full if x not in lead and c.get(x)))
        gpus: list[Gpu] = []
        try:
            for x in prefix(walk, k, 0, per_node):
                gpus += take(jid, x, min(per_node, k - len(gpus)))
        except _GiveUp:
            return None
        if len(gpus) < k and strict:
            return None
        if len(gpus) < k:  # unequal nodes: fill from the nodes with most free GPUs
            for x in prefix(fn.by_count_desc(), k, len(gpus), None):
                gpus += take(jid, x, min(len(free[x]), k - len(gpus)))
        if len(gpus) < k:  # cannot happen with allowed shares on equal nodes
            give_back(gpus)
            continue
        out[jid] = tuple(sorted(gpus))
    subs = [jid for jid in order if 0 < shares[jid] < per_node]
    at = 0
    while at < len(subs):
        jid = subs[at]
        at += 1
        k = shares[jid]
        placed.add(jid)
        job = jobs[jid]
        now = job.allocation.gpus if job.running and job.allocation is not None else ()
        if len(now) == k and not shared:
            # the job keeps all of its GPUs where they are one node's, still free and nobody
            # else's: that node has them unclaimed and is its only one in ``mine``, so the
            # rule's choice, and ``take`` hands it its own GPUs first (the general path
            # below gives the same)
            g0 = now[0]
            node = g0.node
            idx = free.get(node)
            # (what it keeps is all of them: its claims, ``k`` on that node, lapse as it
            # takes them, so the node's unclaimed count does not change)
            if k == 1:  # the same test and take for one GPU, without the sets
                if idx is not None and g0.index in idx:
                    i0 = g0.index
                    if claims:
                        claims[0].note(node)
                        claims[0].c[node] -= 1
                    fn.set(node, [i for i in idx if i != i0])
                    out[jid] = tuple(now)
                    continue
            elif idx is not None:
                # k distinct GPUs on ``node`` <=> its k GPUs are all that node's (then
                # h[4] holds their indexes and h[2] the k GPUs sorted)
                h = facts(jid)
                if h[1].get(node) == k and h[4].issubset(idx):
                    mine_idx = h[4]
                    if claims:
                        claims[0].note(node)
                        claims[0].c[node] -= k
                    fn.set(node, [i for i in idx if i not in mine_idx])
                    out[jid] = h[2]
                    continue
        if claims:
            claims[0].release(jid)
        mine = mine_by_node(jid)
        cl = claims_now()
        c = cl.c
        own = [(-mine[x], u, nkey[x], x) for x in mine
               if (u := len(free[x]) - c.get(x, 0)) >= k]
        if own:
            x = min(own)[3]
        else:
            x = cl.best_fit(k)
            if x is None and strict:
                # the rule reads claimed GPUs, kept jobs' among them: its choice from the
                # free counts it has (ours plus the kept jobs' still free), taken here
                # where no kept job holds a GPU of the nodes it takes from
                if after is None:
                    return None
                how = _fallback(fn, after(jid), mine, k)
                while isinstance(how, KeptOnNodes):
                    # the kept jobs after it on those nodes join the pass here (``rejoin``):
                    # the whole rule's free GPUs there, claimed by them, placed at their turn
                    back = rejoin(jid, how.nodes) if rejoin is not None else None
                    if not back or not back[0]:
                        return how
                    _rejoined(back[0], back[1], subs, at, fn, cl, setf,
                              held_now if held_built else None)
                    how = _fallback(fn, after(jid), mine, k)
                gpus = []
                for x, n in how:
                    gpus += take(jid, x, n)
                if gpus:
                    out[jid] = tuple(sorted(gpus))
                continue
            if x is None:
                fits = [x for x in mine if len(free[x]) >= k]
                x = (min(fits, key=lambda x: (-mine[x], len(free[x]), nkey[x])) if fits
                     else fn.best_fit(k))
        if x is not None:
            out[jid] = tuple(sorted(take(jid, x, k)))
            continue
        if fn.total < k:
            continue
        gpus = []
        for x in prefix(fn.by_count_desc(), k, 0, None):
            gpus += take(jid, x, min(len(free[x]), k - len(gpus)))
        out[jid] = tuple(sorted(gpus))
    return out


def _rejoined(back: list, rank, subs: list, at: int, fn: _FreeNodes, cl: _Claims, setf,
              held_now: Optional[set]) -> None:
    """Kept sub-node jobs ``back`` (``(id, rule key, GPUs)``, each after the job placed now in
    the rule's order) join the pass at its sub-node job ``subs[at - 1]``'s turn: as a pass
    with them not kept would have them here (the multi-node jobs and the sub-node jobs before
    this one chose from unclaimed free counts and the same fallback counts, and took none of
    their GPUs: docs in policies/elastic_reduced.py), their GPUs are free and claimed by them
    (unclaimed counts unchanged), they hold them (``held_now``, where built), and they wait in
    ``subs`` at their place in the rule's order (``rank(id)``: a job's key in it, (-share,
    not running, position in the policy's order))."""
    free = fn.free
    c = cl.c
    for jid, key, gpus in back:
        by: dict[str, list[int]] = {}
        for g in gpus:
            by.setdefault(g.node, []).append(g.index)
        for x, idx in by.items():
            setf(x, free[x] + idx)
            c[x] = c.get(x, 0) + len(idx)
        if held_now is not None:
            held_now.update(gpus)
        i = at
        while i < len(subs) and rank(subs[i]) < key:
            i += 1
        subs.insert(i, jid)


def _fallback(fn: _FreeNodes, ka: Mapping[str, int], mine: Mapping[str, int], k: int):
    """(strict placement) The whole rule's choice for a sub-node share ``k`` that no node holds
    unclaimed: ``[(node, count), ...]`` to take (``[]``: not placed), or
    :class:`KeptOnNodes` of the chosen nodes holding kept jobs' GPUs (``ka``: node -> the kept
    sub-node jobs' GPUs still free there in the whole rule; a node's free count there is ours
    plus that).  The choice (as in :func:`_place`): the job's own node with room, most of its
    GPUs first, then fewest free, then key; else the fullest node that fits (best fit, then
    key); else, where the free GPUs hold ``k``, the nodes with most free GPUs first."""
    free, nkey = fn.free, fn.key

    def w(x: str) -> int:
        return len(free[x]) + ka.get(x, 0)

    fits = [x for x in mine if x in free and w(x) >= k]
    if fits:
        x = min(fits, key=lambda x: (-mine[x], w(x), nkey[x]))
    else:
        best = None
        buckets = fn.buckets
        for c in sorted(c for c, b in buckets.items() if b and c >= k):
            hit = next((kx for kx in buckets[c] if kx[1] not in ka), None)
            if hit is not None:
                best = (c, hit)
                break
        for x in ka:
            if w(x) >= k and (best is None or (w(x), (nkey[x], x)) < best):
                best = (w(x), (nkey[x], x))
        x = best[1][1] if best is not None else None
    if x is not None:
        return KeptOnNodes(frozenset((x,))) if x in ka else [(x, k)]
    if fn.total + sum(ka.values()) < k:
        return []
    wide = sorted(chain(((-c, kx) for c, b in fn.buckets.items() for kx in b if kx[1] not in ka),
                        ((-w(x), (nkey[x], x)) for x in ka if w(x))))
    got, have = [], 0
    for c, (_, x) in wide:
        n = min(-c, k - have)
        got.append((x, n))
        have += n
        if have >= k:
            break
    hit = frozenset(x for x, _ in got if x in ka)
    return KeptOnNodes(hit) if hit else got
