"""G_OJ of SJF-BSBF / SJF-FFS (seed 000 Alg. 1 line 5: the GPUs holding exactly one job)
kept across policy calls (issue #13, docs/scale.md §2).

On the Philly trace at 64x8 nearly every call of SJF-FFS needs |G_OJ| (whether a job
that does not fit in the free GPUs could share, whether the rest of the queue is
blocked), and a pass over all 512 GPUs per call to find it cost about as much as the rest
of the policy.  The simulator records every GPU whose entry of its GPU map changed
(:class:`policies.model.GpuChanges`); :class:`SingleGpus` brings its map up to date from
the entries after the ones it saw: O(changes) per call.  The map equals the pass's
(``tests/policies/test_sjf_differential.py`` checks it at every call of simulator runs that uses it);
only its order may differ, and nothing the policies compute depends on that order (every
choice among groups is broken by GPU position)."""
from __future__ import annotations

from typing import Optional

from .model import ClusterSnapshot, identity_memo
from .records import gpu_record


def _node_offsets(nodes: tuple) -> tuple[dict, dict]:
    """Node name -> position of its first GPU in the cluster's GPU order, and -> its GPU
    count (the first node of a name counts), memoised per node tuple."""
    return identity_memo(_OFFSETS, nodes, _compute_node_offsets, 64)


def _compute_node_offsets(nodes: tuple) -> tuple[dict, dict]:
    offset, size = {}, {}
    p = 0
    for n in nodes:
        offset.setdefault(n.name, p)
        size.setdefault(n.name, n.num_gpus)
        p += n.num_gpus
    return offset, size


_OFFSETS: dict = {}


class SingleGpus:
    """The GPUs of the cluster that hold exactly one job, each mapped to that job's id
    (|G_OJ|'s members, Alg. 1 line 5, before the round's starts), kept across calls from
    the snapshot's GPU change record (:class:`policies.model.GpuChanges`): only the GPUs
    named after the entries seen last are looked at again, O(changes) instead of a pass
    over every GPU per call.  Without a record (the daemon's snapshots, hand-built ones,
    a copy with other ``gpu_jobs``), a record of another run or an older snapshot, or
    another node tuple, it is made by that pass."""

    def __init__(self):
        self._seen = None  # the change record applied so far
        self._nodes = None
        self.one: dict = {}
        # the same GPUs by job: id -> set of its single-occupied GPUs (Alg. 1 line 10's
        # candidate groups before GPU order), kept with ``one``
        self.by_job: dict = {}

    def update(self, snap: ClusterSnapshot) -> Optional[dict]:
        """GPU -> id of its only job for ``snap`` (not to be changed by the caller), or
        ``None`` where the snapshot has no usable record (the caller scans)."""
        log, gpu_jobs = gpu_record(snap), snap.gpu_jobs
        if log is None:
            self._seen, self._nodes, self.one, self.by_job = None, None, {}, {}
            return None
        if (self._nodes is snap.nodes and self._seen is not None
                and log.extends(self._seen)):
            offset, size = _node_offsets(snap.nodes)
            one, by_job = self.one, self.by_job
            for g in dict.fromkeys(log[len(self._seen):]):
                ids = gpu_jobs.get(g)
                old = one.get(g)
                if (ids is not None and len(ids) == 1 and g.node in offset
                        and 0 <= g.index < size[g.node]):
                    new = ids[0]
                    if new == old:
                        continue
                    one[g] = new
                    gs = by_job.get(new)
                    if gs is None:
                        by_job[new] = {g}
                    else:
                        gs.add(g)
                elif old is None:
                    continue
                else:
                    del one[g]
                gs = by_job[old] if old is not None else None
                if gs is not None:
                    gs.discard(g)
                    if not gs:
                        del by_job[old]
        else:
            self.one = single_gpus(snap)
            self.by_job = by_job_of(self.one)
        self._seen, self._nodes = log, snap.nodes
        return self.one


def single_gpus(snap: ClusterSnapshot) -> dict:
    """GPU -> id of its only job, for the GPUs of the cluster holding exactly one job
    (``gpu_jobs``' order): one pass over every GPU."""
    offset, size = _node_offsets(snap.nodes)
    return {g: ids[0] for g, ids in snap.gpu_jobs.items()
            if len(ids) == 1 and g.node in offset and 0 <= g.index < size[g.node]}


def by_job_of(one: dict) -> dict:
    """Job id -> the set of its GPUs in ``one`` (a :func:`single_gpus` map)."""
    out: dict = {}
    for g, jid in one.items():
        gs = out.get(jid)
        if gs is None:
            out[jid] = {g}
        else:
            gs.add(g)
    return out


def single_gpus_of(pol) -> SingleGpus:
    """The policy instance's :class:`SingleGpus` (``pol._single_gpus``, made on first use)."""
    kept = pol.__dict__.get("_single_gpus")
    if kept is None:
        kept = pol._single_gpus = SingleGpus()
    return kept
