"""The elastic placement's reduced form (issue #13: at 300x8 about 1.6 of ~120 jobs change
their share per call, yet :func:`policies.elastic_place.place` walked every job).

:func:`place_reduced` gives :func:`~policies.elastic_place.place`'s GPU sets placing only the
jobs that do not keep their GPUs, on the cluster less the kept jobs' GPUs, built from the
simulator's free views (``free_index``, ``free_buckets``) and its GPU change record; where the
whole rule could read a kept job's GPUs it gives up (``None``) and the whole rule runs.  Why
that is the same placement is in its docstring; tests/policies/test_elastic_reduced.py checks
it on random snapshots and on every call of whole simulations.
"""
from __future__ import annotations

from itertools import chain, filterfalse
from typing import Mapping, Optional

from .elastic_place import (_EMPTY, _RUNNING, KeptOnNodes, _FreeNodes, _empty_cluster, _place,
                            held_facts)
from .model import ClusterSnapshot, Gpu, identity_memo
from .records import any_shared_gpu, gpu_record

_CONV: dict = {}  # id of a free-index tuple or bucket tuple -> (it, its _FreeNodes form)


def _converted(t, make):
    hit = _CONV.get(id(t))
    if hit is None or hit[0] is not t:
        if len(_CONV) > 1_000:
            _CONV.clear()
        hit = _CONV[id(t)] = (t, make(t))
    return hit[1]


def _idle_lists(snap: ClusterSnapshot) -> Optional[dict]:
    """node -> the indexes of its idle GPUs (``free_index``), every node of the tuple (``[]``
    where none is idle); kept across calls with the simulator's GPU change record, so only the
    nodes with a GPU logged since are read again (the lists are never changed in place)."""
    fi, nodes = snap.free_index, snap.nodes
    log = gpu_record(snap)
    kept = _IDLE[0] if _IDLE else None
    if kept is not None and log is not None and kept[1] is nodes and log.extends(kept[0]):
        base = kept[2]
        for x in {g.node for g in log[len(kept[0]):]}:
            if x not in base:
                return None
            t = fi.get(x)
            base[x] = [g.index for g in t] if t else []
        _IDLE[0] = (log, nodes, base)
        return base
    base = {n.name: [] for n in nodes}
    for x, t in fi.items():
        if x not in base:
            return None
        base[x] = [g.index for g in t]
    _IDLE[:] = [(log, nodes, base)] if log is not None else []
    return base


_IDLE: list = []  # [(GPU change log read, node tuple, _idle_lists' dict)]


def _reduced_free(snap: ClusterSnapshot, back: list) -> Optional["_FreeNodes"]:
    """The :class:`_FreeNodes` of the snapshot's idle GPUs (``free_index``, ``free_buckets``)
    plus the GPUs of ``back`` (GPU tuples of running jobs that do not keep theirs), i.e. of the
    empty cluster less the GPUs of the kept jobs."""
    fb = snap.free_buckets
    nodes = snap.nodes
    base = _idle_lists(snap)
    if base is None:
        return None
    key, total = identity_memo(_EMPTY, nodes, _empty_cluster, 8)[1::2]
    free = dict(base)
    rank = snap.node_rank
    if len(rank) == len(nodes):
        # node names unique: a node's key (rank, position) is (i, i) for its rank i, so
        # keys and (key, name) entries order as ranks and (rank, name) do, and the
        # simulator's buckets hold (rank, name) already: they are read as they are
        key, buckets = rank, fb
    else:
        buckets = {c: _converted(b, lambda b: [(key[x], x) for _, x in b])
                   for c, b in fb.items()}
    fn = _FreeNodes.__new__(_FreeNodes)
    fn.free, fn.key, fn._template, fn._buckets, fn._noted = free, key, buckets, None, {}
    fn.total = len(snap.free_gpus)
    add: dict[str, list[int]] = {}
    for gpus in back:
        for g in gpus:
            add.setdefault(g.node, []).append(g.index)
    for x, idx in add.items():
        if x not in free:
            return None
        fn.set(x, free[x] + idx)
    if fn.total > total:  # a GPU counted twice: not the simulator's consistent views
        return None
    return fn


_NO_FREE: dict = {}  # identity_memo: node tuple -> {node: []}
_KIND: dict = {}  # id of an allocation record -> _kind's answer for it


def _kind(alloc, nodes: tuple, per_node: int, size, tfree) -> tuple:
    """(alloc, node tuple, its GPU count n, the nodes it keeps on a share of n or None, the
    GPU tuple it keeps then, whether the shape is a kept one but for an index its node does
    not have): the rule's shortcut tests of :func:`place_reduced`, memoised per record."""
    if len(_KIND) > 20_000:  # (it holds the records: those of ended jobs go at a clear)
        _KIND.clear()
    h = held_facts(alloc, nodes, tfree)
    gp, mine = alloc.gpus, h[1]
    n = len(gp)
    keeps, bad = None, False
    if n < per_node:  # a sub-node share: its n GPUs on one node
        x = gp[0].node
        if len(mine) == 1 and mine.get(x) == n:
            if h[3] > size[x]:
                bad = True
            else:
                keeps = (x,)
    elif len(h[2]) == n and all(c == per_node and size[x] == per_node for x, c in mine.items()):
        if h[3] > per_node:  # whole nodes of per_node GPUs
            bad = True
        else:
            keeps = tuple(mine)
    out = _KIND[id(alloc)] = (alloc, nodes, n, keeps, h[2], bad)
    return out


def place_reduced(snap: ClusterSnapshot, shares: Mapping[str, int], kept=None,
                  newly: Optional[list] = None) -> Optional[dict[str, tuple[Gpu, ...]]]:
    """:func:`place`'s result, placing only the jobs that do not keep their GPUs; ``None``
    where it cannot tell (then :func:`place` runs the whole rule).

    A running job *keeps* its GPUs under the rule exactly when its share is the count it holds,
    they lie as one of the rule's shortcuts keeps them (a sub-node share on one node; a
    multi-node share on whole nodes of ``per_node`` GPUs) and they are still free at its turn.
    Every other job (``rest``) is placed here by the same rule on the cluster less the kept
    jobs' GPUs.  That is the whole rule's answer as long as no job of ``rest`` would take a
    kept job's GPU there, which holds while each of its choices reads only *unclaimed* free
    GPUs, the same on both clusters: a kept job not placed yet claims all its GPUs, which are
    free, so every node's unclaimed count (free less claimed) is the same on both; one placed
    already took exactly its own.  The choices that read claimed GPUs give up here: a
    whole-node walk past the unclaimed whole nodes (its last group, claimed nodes) and the
    unequal-node fill.  Within a node ``take`` orders unclaimed GPUs before claimed ones, so
    where the node has enough unclaimed ones it takes the same.  A sub-node share with no node
    of enough unclaimed GPUs is the exception that does not give up (the rule's fallbacks read
    every free GPU there): the whole rule's free count of a node at that job's turn is ours
    plus the GPUs of the kept sub-node jobs after it in the rule's order (those before it took
    theirs; whole-node jobs are all placed before), so its choice is made from those counts
    (``_fallback`` in policies/elastic_place.py); where the nodes it takes from hold none of
    those GPUs, their free GPUs, claims and holders are ours and the job takes the same GPUs
    here; else the kept jobs there join ``rest`` and the pass runs again, as below.  By
    induction over the rule's order every kept job then finds its GPUs free and keeps them.
    The argument holds for any set of jobs kept so (a kept job left in ``rest`` claims its GPUs
    there as in the whole rule); so a running multi-node job whose own nodes hold a kept job's
    GPUs (its walk reads their free counts, which differ) does not end the pass: every kept job
    on those nodes joins ``rest`` and the pass runs again
    (:class:`~policies.elastic_place.KeptOnNodes`; each run keeps fewer jobs, so it ends).
    Only the simulator's snapshots (consistent free views, no GPU held twice) are placed so;
    tests/policies/test_elastic_reduced.py checks the result against :func:`place`'s whole rule
    and the literal reference on random snapshots and on whole simulations.

    ``kept`` (:class:`policies.elastic_kept.KeptJobs`): jobs of ``shares`` known to be kept
    at their share with the GPUs it lists (their pass here would find that again); they are
    not looked at.  ``newly``: a list that gets ``(id, shortcut answer)`` of every other job
    kept here."""
    if snap.free_index is None or snap.free_buckets is None or any_shared_gpu(snap):
        return None
    per_node = snap.max_gpus_per_node or 1
    nodes = snap.nodes
    tfree = identity_memo(_EMPTY, nodes, _empty_cluster, 8)[0]
    jobs = snap.jobs
    out: dict[str, tuple[Gpu, ...]] = {}
    rest: dict[str, int] = {}
    on: list = []  # (id, its nodes) of each job kept in this pass
    back: list = []
    held = 0
    memo_get = _KIND.get
    ids = shares
    if kept is not None and kept.share:
        ks = kept.share
        out.update(kept.gpus)
        held = kept.held
        ids = list(filterfalse(ks.__contains__, shares))  # (a C-level pass)
    for jid in ids:
        k = shares[jid]
        job = jobs[jid]
        alloc = job.allocation
        if job.state is not _RUNNING or alloc is None:
            rest[jid] = k
            continue
        kind = memo_get(id(alloc))
        if kind is None or kind[0] is not alloc or kind[1] is not nodes:
            kind = _kind(alloc, nodes, per_node, snap.node_gpus, tfree)
        n = kind[2]
        held += n
        if n == k:
            if kind[3] is not None:
                out[jid] = kind[4]
                on.append((jid, kind[3]))
                if newly is not None:
                    newly.append((jid, kind))
                continue
            if kind[5]:
                return None  # an index its node does not have
        rest[jid] = k
        back.append(alloc.gpus)
    busy = snap.total_gpus - len(snap.free_gpus)
    if held != busy:  # running jobs without a share hold GPUs: free under the rule
        if held > busy:
            return None
        for job in jobs.values():
            if job.state is _RUNNING and job.allocation is not None and job.id not in shares:
                back.append(job.allocation.gpus)
    if not rest:
        return out
    # a running multi-node job to place whose own nodes hold a kept job's GPUs stops every
    # pass that reaches it (KeptOnNodes: it keeps no whole nodes there, as a kept job holds
    # one of their GPUs); the kept jobs on its nodes join ``rest`` before the first pass
    # (sub-node jobs, which stop no pass so: the passes after would unkeep the same)
    if (on or (kept is not None and kept.node_count)) \
            and any(k >= per_node for k in rest.values()):
        knodes = {x for _, xs in on for x in xs}
        if kept is not None:
            knodes.update(kept.node_count)
        hit: set = set()
        for jid, k in rest.items():
            job = jobs[jid]
            if k >= per_node and job.state is _RUNNING and job.allocation is not None:
                mine = held_facts(job.allocation, nodes, tfree)[1]
                if not knodes.isdisjoint(mine):
                    hit.update(mine)
        if hit and _unkeep(hit, shares, jobs, out, rest, on, back, kept, newly):
            rest = {j: shares[j] for j in shares if j in rest}  # (the rule's order)
    pos: list = []  # (_after: the positions in ``shares``, when first needed)
    while True:
        fn = _reduced_free(snap, back)
        if fn is None:
            return None
        knodes = {x for _, xs in on for x in xs}
        if kept is not None:
            knodes.update(kept.node_count)
        after = _after(shares, jobs, on, kept, per_node, pos)

        def rejoin(jid: str, xs, after=after) -> Optional[tuple]:
            # the kept jobs after ``jid`` with GPUs on ``xs`` leave the kept ones and join the
            # pass (policies.elastic_place._rejoined); ``rest`` is the pass's ``shares``
            gone = after.on_nodes(jid, xs)
            if not gone:
                return None
            _unkept(set(gone), shares, jobs, out, rest, on, back, kept, newly)
            after.reset()
            return ([(j, after.rank(j), jobs[j].allocation.gpus) for j in gone], after.rank)
        got = _place(snap, rest, fn, False, knodes, after, rejoin)
        if isinstance(got, KeptOnNodes):
            # a job to place holds GPUs beside kept jobs: those are placed by the rule too
            # (any set of jobs kept as above gives the whole rule's answer; this one holds
            # none on the nodes whose free counts the job reads), and the pass runs again
            if not _unkeep(got.nodes, shares, jobs, out, rest, on, back, kept, newly):
                return None
            rest = {j: shares[j] for j in shares if j in rest}  # (the rule's order)
            continue
        if got is None:
            return None
        out.update(got)
        return out


def _after(shares, jobs, on, kept, per_node, pos: list):
    """``_place``'s ``after`` for this pass: job id -> {node: GPUs of the kept sub-node jobs
    after it in the rule's order (largest share first, running jobs first, then ``shares``'
    order)}.  A kept job is running and holds its share on one node, so it comes after
    job ``j`` exactly when its share is smaller, or equal with ``j`` running and ``j`` first
    in ``shares``.  Built when first asked; ``pos`` (a list shared by the passes of one
    call) gets the positions in ``shares`` when first needed."""
    st: list = []

    def kept_subs() -> list:
        if not st:
            subs = chain(on, kept.on.items()) if kept is not None else on
            st.append([(shares[j], j, xs[0]) for j, xs in subs if shares[j] < per_node])
        return st[0]

    def later(jid: str):
        """The (share, id, node) of the kept sub-node jobs after ``jid``."""
        kj = shares[jid]
        job = jobs[jid]
        run = job.state is _RUNNING and job.allocation is not None
        for t in kept_subs():
            k = t[0]
            if k < kj or (k == kj and run and _position(pos, shares, t[1])
                          > _position(pos, shares, jid)):
                yield t

    def after(jid: str) -> dict:
        ka: dict = {}
        for k, _, x in later(jid):
            ka[x] = ka.get(x, 0) + k
        return ka

    def on_nodes(jid: str, xs) -> list:
        """The kept sub-node jobs after ``jid`` on nodes ``xs``, in the kept ones' order."""
        return [q for _, q, x in later(jid) if x in xs]

    def rank(jid: str) -> tuple:
        """A job's key in the rule's order (the pass's ``shares`` follow ``shares``)."""
        job = jobs[jid]
        return (-shares[jid], job.state is not _RUNNING or job.allocation is None,
                _position(pos, shares, jid))
    after.on_nodes, after.rank, after.reset = on_nodes, rank, st.clear
    return after


def _position(pos: list, shares, jid: str) -> int:
    if not pos:
        pos.append({j: i for i, j in enumerate(shares)})
    return pos[0][jid]


def _unkeep(nodes, shares, jobs, out, rest, on, back, kept, newly) -> bool:
    """Move every kept job with a GPU on ``nodes`` to ``rest`` (its GPUs back to the free
    ones); False when there is none."""
    gone = {j for j, xs in on if not nodes.isdisjoint(xs)}
    if kept is not None:
        gone.update(j for j, xs in kept.on.items() if not nodes.isdisjoint(xs))
    if not gone:
        return False
    _unkept(gone, shares, jobs, out, rest, on, back, kept, newly)
    return True


def _unkept(gone: set, shares, jobs, out, rest, on, back, kept, newly) -> None:
    """Move the kept jobs ``gone`` to ``rest`` (their GPUs to ``back``, for a pass after)."""
    for jid in gone:
        del out[jid]
        rest[jid] = shares[jid]
        back.append(jobs[jid].allocation.gpus)
        if kept is not None:
            kept.drop(jid)
    on[:] = [(j, xs) for j, xs in on if j not in gone]
    if newly is not None:
        newly[:] = [(j, kind) for j, kind in newly if j not in gone]
