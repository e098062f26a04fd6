"""The per-host parts of the packing round kept across calls from the simulator's change
records (issue #13: at 64x8 redoing them for every new round base — the running hosts, their
alone GPUs, the per-application host lists sorted by key and split by GPU count and memory
fit — was a third of lucid's time after the §5.1 components were kept,
:mod:`policies.pack_components`).

A packing round (:class:`policies.pack_index.PackRound`) reads, per waiting job's
application, the hosts whose pair passes the threshold sorted by (-score, submit time, id)
(:meth:`HostState.sorted_for`), and per (application, worker memory) those split by host GPU
count without the hosts on none of whose alone GPUs the worker fits
(:meth:`HostState.lists_for`).  A host's entry is a function of its own view, its alone GPUs
(the GPUs of its allocation that hold it alone), the tables and nodes and the policy's
knobs (the score depends on the host only through its view, :meth:`PackingHost.score_from`).
Between two snapshots of a run it can differ only for a job with a new view (the job
record: a job that leaves a GPU has another allocation or state, so a new view) or one on
a GPU that changed hands (the GPU record): :meth:`HostState.advance` redoes those hosts'
views and alone GPUs and logs their ids; a list is brought up to date when a round asks
for it, by taking out and putting back (by key) the entries of the hosts logged since it
was last brought up to date, or built anew when that log was dropped or covers many hosts.
Keys are unique (they end in the id), so the lists equal a fresh sort.  Without records
(the daemon's snapshots), or when the tables, nodes or knobs change, the caller builds a
new state from the snapshot (:class:`HostState`'s constructor, the reference the tests
compare with)."""
from __future__ import annotations

from bisect import bisect_left
from math import isnan
from typing import Callable, Iterable, Optional

from .model import ClusterSnapshot, Gpu, Job
from .pack_misses import KeptMisses

LOG_MAX = 64  # advances whose touched hosts are kept (an older list is built anew)
REBUILD_SHARE = 4  # a list is built anew when more than 1/REBUILD_SHARE of the hosts changed


def running_hosts(snap: ClusterSnapshot):
    """The running jobs: with the simulator's ``waiting_ids`` those on ``gpu_jobs`` (checked:
    with the waiting ones they are all jobs, and all run), a cost by GPUs in use rather than
    by jobs; else every running job of the job map.  (Any order: the round sorts by keys
    that end in the id.)"""
    jobs, waiting = snap.jobs, snap.waiting_ids
    if waiting is not None:
        ids = set().union(*snap.gpu_jobs.values())
        if len(ids) + len(waiting) == len(jobs) and ids <= jobs.keys():
            views = [jobs[i] for i in ids]
            if all(j.running for j in views):
                return views
    return snap.running()


class _Kept:
    """One kept list (or lists by GPU count): brought up to date at ``gen``; ``ent``: host
    id -> its entry in it; ``nan``: a key holds a NaN (no order to insert by)."""

    __slots__ = ("gen", "items", "ent", "nan")

    def __init__(self, gen, items, ent, nan):
        self.gen, self.items, self.ent, self.nan = gen, items, ent, nan


class HostState:
    """The round's per-host parts for one snapshot (see module doc): ``views`` (host id ->
    view: running, with an allocation), ``alone`` (host id -> its alone GPUs), ``node_mem``
    and the lists, kept in place by :meth:`advance`."""

    def __init__(self, policy, snap: ClusterSnapshot):
        gj = snap.gpu_jobs
        self.knobs = (policy.pair_threshold(), policy.unequal)
        self.node_mem = {n.name: n.gpu_mem_mb for n in snap.nodes}
        self.views: dict[str, Job] = {
            h.id: h for h in running_hosts(snap) if h.allocation is not None}
        self.alone: dict[str, list[Gpu]] = {
            i: [g for g in h.allocation.gpus if gj.get(g, ()) == (i,)]
            for i, h in self.views.items()}
        self.gen, self.log0 = 0, 0
        self.log: list[set] = []  # log[i - log0]: the hosts redone from gen i to i + 1
        self.sorted: dict[str, _Kept] = {}
        self.lists: dict[tuple[str, float], _Kept] = {}
        self.fit: dict[str, dict[float, bool]] = {}
        self.host_mb: dict[str, float] = {}
        self.synced = 0  # lists brought up to date from the log (tests)
        self.built = 0  # lists built anew (tests)
        self.misses = KeptMisses()  # packing misses kept while this state is advanced

    def advance(self, policy, snap: ClusterSnapshot, changed: Iterable[Gpu],
                fresh: Iterable[str]) -> bool:
        """Bring the state to ``snap``: ``changed`` holds every GPU whose workers may differ
        from the last state's snapshot, ``fresh`` every job that may have a new view (the
        tables and nodes the same objects).  False when the knobs changed (then it must be
        dropped)."""
        if (policy.pair_threshold(), policy.unequal) != self.knobs:
            return False
        gj, jobs = snap.gpu_jobs, snap.jobs
        views, alone, fit, hmb = self.views, self.alone, self.fit, self.host_mb
        seeds = set(fresh)
        for g in changed:
            seeds.update(gj.get(g, ()))
        touched = set()
        for i in seeds:
            h = jobs.get(i)
            if h is not None and h.running and h.allocation is not None:
                views[i] = h
                alone[i] = [g for g in h.allocation.gpus if gj.get(g, ()) == (i,)]
            elif i in views:
                del views[i], alone[i]
            else:
                continue  # neither was nor is a host
            touched.add(i)
            fit.pop(i, None)
            hmb.pop(i, None)
        self.log.append(touched)
        self.gen += 1
        if len(self.log) > LOG_MAX:
            del self.log[0]
            self.log0 += 1
        return True

    def _since(self, gen: int) -> Optional[set]:
        """The hosts redone since ``gen``; None when that log was dropped or covers more
        than a quarter of the hosts (building anew is then as cheap)."""
        if gen < self.log0:
            return None
        out: set = set()
        for s in self.log[gen - self.log0:]:
            out |= s
        return out if REBUILD_SHARE * len(out) <= len(self.views) + 4 else None

    def _entry(self, app: str, i: str, policy, snap, thr: float, ppof):
        h = self.views.get(i)
        if h is None:
            return None
        al = self.alone[i]  # the round's start: alone GPUs only get fewer
        # equal packing needs all k GPUs alone
        if not al or (not self.knobs[1] and len(al) < h.num_gpus):
            return None
        pp = ppof(app, h.app)
        if pp >= thr:
            return ((-policy.score_from(pp, snap, h), h.submit_time, i), h)
        return None

    def sorted_for(self, app: str, policy, snap: ClusterSnapshot,
                   ppof: Callable[[str, str], float]) -> list:
        """Hosts whose pair with ``app`` passes the threshold, by (-score, submit, id)."""
        k = self.sorted.get(app)
        if k is not None and k.gen == self.gen:
            return k.items
        thr = self.knobs[0]
        todo = self._since(k.gen) if k is not None and not k.nan else None
        if todo is None:
            items = []
            for i in self.views:
                e = self._entry(app, i, policy, snap, thr, ppof)
                if e is not None:
                    items.append(e)
            items.sort(key=lambda e: e[0])
            k = self.sorted[app] = _Kept(self.gen, items, {e[0][2]: e for e in items},
                                         any(_has_nan(e[0]) for e in items))
            self.built += 1
            return items
        items, ent = k.items, k.ent
        for i in todo:
            e = ent.pop(i, None)
            if e is not None:
                del items[bisect_left(items, (e[0],))]
        for i in todo:
            e = self._entry(app, i, policy, snap, thr, ppof)
            if e is not None:
                items.insert(bisect_left(items, (e[0],)), e)
                ent[i] = e
                k.nan = k.nan or _has_nan(e[0])
        k.gen = self.gen
        self.synced += 1
        return items

    def lists_for(self, app: str, job_mb: float, policy, snap: ClusterSnapshot,
                  ppof: Callable[[str, str], float]) -> dict[int, list]:
        """:meth:`sorted_for` by host GPU count, without the hosts on none of whose alone
        GPUs a worker of ``job_mb`` fits (the memory test of the round's ``_fit``, which
        stays false as alone GPUs are taken)."""
        key = (app, job_mb)
        k = self.lists.get(key)
        if k is not None and k.gen == self.gen:
            return k.items
        items = self.sorted_for(app, policy, snap, ppof)
        srt = self.sorted[app]
        todo = self._since(k.gen) if k is not None and not srt.nan else None
        if todo is None:
            lists: dict[int, list] = {}
            ent = {}
            for e in items:
                h = e[1]
                if self._fits(job_mb, h, snap):
                    lists.setdefault(h.num_gpus, []).append(e)
                    ent[h.id] = e
            self.lists[key] = _Kept(self.gen, lists, ent, False)
            self.built += 1
            return lists
        lists, ent, sent = k.items, k.ent, srt.ent
        for i in todo:
            e = ent.pop(i, None)
            if e is not None:
                lst = lists[e[1].num_gpus]
                del lst[bisect_left(lst, (e[0],))]
                if not lst:
                    del lists[e[1].num_gpus]
        for i in todo:
            e = sent.get(i)
            if e is not None and self._fits(job_mb, e[1], snap):
                lst = lists.setdefault(e[1].num_gpus, [])
                lst.insert(bisect_left(lst, (e[0],)), e)
                ent[i] = e
        k.gen = self.gen
        self.synced += 1
        return lists

    def _fits(self, job_mb: float, h: Job, snap: ClusterSnapshot) -> bool:
        f = self.fit.get(h.id)
        if f is None:
            f = self.fit[h.id] = {}
        ok = f.get(job_mb)
        if ok is None:
            need = job_mb + self.mb(h, snap)
            mem = self.node_mem
            ok = f[job_mb] = any(need <= mem[g.node] for g in self.alone[h.id])
        return ok

    def mb(self, host: Job, snap: ClusterSnapshot) -> float:
        """Memory of one worker of ``host`` (MB)."""
        hmb = self.host_mb.get(host.id)
        if hmb is None:
            hmem = snap.memory.get(host.app)
            hmb = self.host_mb[host.id] = (hmem.mem_mb(host.allocation.sub_batch)
                                           if hmem else 0.0)
        return hmb


def _has_nan(key) -> bool:
    return any(isinstance(x, float) and isnan(x) for x in key)
