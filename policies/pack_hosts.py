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
Keys are unique (they end in the id), so the lists equal a fresh sort.  A list built anew
is built by host application and GPU count (:meth:`HostState._build_sorted`: a pair's
progress asked once per application, a part whose hosts all have room for the worker taken
whole; the per-host scan, :meth:`HostState.scan_sorted`, is its reference and its path where
a key holds a NaN).  Without records
(the daemon's snapshots), or when the tables, nodes or knobs change, the caller builds a
new state from the snapshot (:class:`HostState`'s constructor, the reference the tests
compare with)."""
from __future__ import annotations

from bisect import bisect_left
from math import inf as _INF, isnan
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
    id -> its entry in it, made on first use by the kept path (:meth:`entries`; None until
    then: a list built and never brought up to date, as every list of the daemon's
    snapshots, never needs it); ``nan``: a key holds a NaN (no order to insert by)."""

    __slots__ = ("gen", "items", "ent", "nan", "parts")

    def __init__(self, gen, items, ent, nan, parts=None):
        self.gen, self.items, self.ent, self.nan = gen, items, ent, nan
        # a sorted list built anew: GPU count -> [(its entries of one host application's
        # part, that _Part)], what lists_for splits it by; None once brought up to date
        self.parts = parts

    def entries(self) -> dict:
        """``ent``, made from the items where not made yet (a sorted list: a list of
        entries; lists by GPU count: a dict of them)."""
        ent = self.ent
        if ent is None:
            items = self.items
            lists = items.values() if isinstance(items, dict) else (items,)
            ent = self.ent = {e[0][2]: e for lst in lists for e in lst}
        return ent


class _Part:
    """The listable hosts of one application with one GPU count (:meth:`HostState._groups`),
    in the hosts' order: views, submit times, ids; ``hmb`` the most memory of one of their
    workers, ``top`` the least of their nodes' largest memory (:meth:`HostState._room`), so
    that a worker of ``job_mb`` with ``job_mb + hmb <= top`` fits beside each of them;
    ``clean``: no NaN among the workers' memory (else each host is tested)."""

    __slots__ = ("hosts", "subs", "ids", "hmb", "top", "clean")

    def __init__(self):
        self.hosts: list = []
        self.subs: list = []
        self.ids: list = []


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
        self.room: dict[str, tuple[float, float]] = {}  # host id -> _room
        self._grp: Optional[tuple] = None  # (generation, *_groups)
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
        views, alone, room, hmb = self.views, self.alone, self.room, self.host_mb
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
            room.pop(i, None)
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

    def _groups(self, snap: ClusterSnapshot) -> tuple[dict, bool]:
        """(host application -> GPU count -> :class:`_Part`, whether a submit time is NaN) of
        the hosts :meth:`_entry` may list (an alone GPU; with equal packing all of them
        alone): what every application's lists read of a host apart from the pair, made
        once per generation."""
        grp = self._grp
        if grp is not None and grp[0] == self.gen:
            return grp[1], grp[2]
        unequal, alone = self.knobs[1], self.alone
        out: dict = {}
        for i, h in self.views.items():
            al = alone[i]
            if al and (unequal or len(al) >= h.num_gpus):
                by_n = out.get(h.app)
                if by_n is None:
                    by_n = out[h.app] = {}
                part = by_n.get(h.num_gpus)
                if part is None:
                    part = by_n[h.num_gpus] = _Part()
                part.hosts.append(h)
                part.subs.append(h.submit_time)
                part.ids.append(i)
        nan = False
        rooms, room = self.room, self._room
        for by_n in out.values():
            for part in by_n.values():
                rs = [rooms.get(i) or room(h, snap) for i, h in zip(part.ids, part.hosts)]
                mbs = [r[0] for r in rs]
                part.clean = sum(mbs) == sum(mbs)  # no NaN (+inf with -inf: each tested too)
                part.hmb, part.top = max(mbs), min(r[1] for r in rs)
                nan = nan or any(isinstance(t, float) and isnan(t) for t in part.subs)
        self._grp = (self.gen, out, nan)
        return out, nan

    def scan_sorted(self, app: str, policy, snap: ClusterSnapshot,
                    ppof: Callable[[str, str], float]) -> tuple[list, bool]:
        """(:meth:`sorted_for`'s list built anew, whether a key holds a NaN), one
        :meth:`_entry` per host in the hosts' order: the reference of :meth:`_build_sorted`,
        and its path where a key holds a NaN (a sort's result then depends on the order it
        is given)."""
        thr = self.knobs[0]
        items = []
        for i in self.views:
            e = self._entry(app, i, policy, snap, thr, ppof)
            if e is not None:
                items.append(e)
        items.sort(key=_KEY)
        return items, any(_has_nan(e[0]) for e in items)

    def _build_sorted(self, app: str, policy, snap: ClusterSnapshot,
                      ppof: Callable[[str, str], float]) -> tuple[list, bool, Optional[dict]]:
        """(:meth:`scan_sorted`'s result, the parts its entries came from by GPU count, or
        None where it is the scan's), built by host application and GPU count: a pair's
        progress is asked once per application, the hosts of one below the threshold are not
        looked at, and with the plain score (the pair's progress) every key of a part is
        made at once.  The keys are unique (they end in the id), so without a NaN the sort
        gives the same list whatever order it is given
        (tests/policies/test_pack_differential.py)."""
        groups, nan = self._groups(snap)
        if nan:
            return (*self.scan_sorted(app, policy, snap, ppof), None)
        thr, score = self.knobs[0], policy.score_from
        plain = _plain_score(policy)
        items: list = []
        parts: dict = {}
        for b, by_n in groups.items():
            pp = ppof(app, b)
            if not pp >= thr:
                continue
            for n, part in by_n.items():
                hosts = part.hosts
                if plain:
                    neg = [-pp] * len(hosts)
                else:
                    neg = [-score(pp, snap, h) for h in hosts]
                    total = sum(neg)
                    if total != total:  # a NaN (or ±inf summed to one): the scan
                        return (*self.scan_sorted(app, policy, snap, ppof), None)
                ents = list(zip(zip(neg, part.subs, part.ids), hosts))
                items += ents
                got = parts.get(n)
                if got is None:
                    parts[n] = [(ents, part)]
                else:
                    got.append((ents, part))
        items.sort(key=_KEY)
        return items, False, parts

    def sorted_for(self, app: str, policy, snap: ClusterSnapshot,
                   ppof: Callable[[str, str], float]) -> list:
        """Hosts whose pair with ``app`` passes the threshold, by (-score, submit, id)."""
        k = self.sorted.get(app)
        if k is not None and k.gen == self.gen:
            return k.items
        todo = self._since(k.gen) if k is not None and not k.nan else None
        if todo is None:
            items, nan, parts = self._build_sorted(app, policy, snap, ppof)
            self.sorted[app] = _Kept(self.gen, items, None, nan, parts)
            self.built += 1
            return items
        thr = self.knobs[0]
        k.parts = None
        items, ent = k.items, k.entries()
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
            rooms, room = self.room, self._room
            lists: dict[int, list] = {}
            if srt.parts is None:  # the sorted list was brought up to date: split it
                for e in items:
                    h = e[1]
                    r = rooms.get(h.id) or room(h, snap)
                    if job_mb + r[0] <= r[1]:  # :meth:`_fits`
                        lst = lists.get(h.num_gpus)
                        if lst is None:
                            lst = lists[h.num_gpus] = []
                        lst.append(e)
            else:  # from its parts: a part every host of which fits is taken whole
                for n, got in srt.parts.items():
                    lst = []
                    for ents, part in got:
                        if part.clean and job_mb + part.hmb <= part.top:
                            lst += ents
                        else:
                            for e in ents:
                                r = rooms.get(e[0][2]) or room(e[1], snap)
                                if job_mb + r[0] <= r[1]:
                                    lst.append(e)
                    if lst:
                        lst.sort(key=_KEY)  # a part is in the hosts' order
                        lists[n] = lst
            self.lists[key] = _Kept(self.gen, lists, None, False)
            self.built += 1
            return lists
        lists, ent, sent = k.items, k.entries(), srt.entries()
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

    def _room(self, h: Job, snap: ClusterSnapshot) -> tuple[float, float]:
        """(memory of one worker of host ``h``, the most GPU memory of a node of its alone
        GPUs, -inf without one; nodes whose memory is NaN left out), kept per host until
        :meth:`advance` redoes it."""
        mem = self.node_mem
        top = -_INF
        for g in self.alone[h.id]:
            m = mem[g.node]
            if m > top:  # a NaN never is
                top = m
        r = self.room[h.id] = (self.mb(h, snap), top)
        return r

    def _fits(self, job_mb: float, h: Job, snap: ClusterSnapshot) -> bool:
        """Whether a worker of ``job_mb`` fits beside ``h`` on one of its alone GPUs:
        job_mb + its worker's memory ≤ that GPU's node memory for some alone GPU, i.e. ≤
        the largest of them (a NaN compares false either way)."""
        r = self.room.get(h.id) or self._room(h, snap)
        return job_mb + r[0] <= r[1]

    def mb(self, host: Job, snap: ClusterSnapshot) -> float:
        """Memory of one worker of ``host`` (MB)."""
        hmb = self.host_mb.get(host.id)
        if hmb is None:
            hmem = snap.memory.get(host.app)
            hmb = self.host_mb[host.id] = (hmem.mem_mb(host.allocation.sub_batch)
                                           if hmem else 0.0)
        return hmb


def _KEY(e):
    return e[0]


def _plain_score(policy) -> bool:
    """Whether ``policy``'s score is the pair's progress itself (the packing host's own
    ``score_from``, not overridden)."""
    from .packing_host import PackingHost  # here: packing_host imports this module

    return getattr(type(policy), "score_from", None) is PackingHost.score_from


def _has_nan(key) -> bool:
    return any(isinstance(x, float) and isnan(x) for x in key)
