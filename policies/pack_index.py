"""Round state of the packing hosts (``policies/packing_host.py``) kept as indexes.

Done literally, a packing host's round walks every running job for every waiting job that
finds no free GPUs (sharing score, memory fit, and §5.1's :func:`~policies.gimbal_coord.
placement_ok`, which rebuilds the whole cluster's GPU -> jobs map and its packing sets per
candidate).  That is O(cluster) per candidate pair.  This module computes the same answer
from indexes built once per call:

* **candidate order.**  The best host is the one with the smallest key
  (-score, submit time, id) among those that pass every test.  A host's score depends on the
  waiting job only through its application (:meth:`PackingHost.score_from`), and the pair
  threshold likewise (:meth:`PackingHost.pair_ok`: a per-job gate plus the pair progress),
  so per application of the waiting job and per host GPU count the hosts that pass the
  threshold are sorted by that key once; a waiting job walks these lists in key order
  (merged over the GPU counts it may pack beside) and stops at the **first** host that
  passes the remaining tests — the same host the literal minimum over all hosts picks.
* **alone GPUs.**  The GPUs of a host that hold it alone in the snapshot are computed once;
  GPUs packed earlier in the round are removed from them as they are taken.  A host with
  none left is dropped from the lists (it can never pass again this round).
* **§5.1 check.**  Placing a job on GPUs that hold one host alone changes only the host's
  packing component (the job joins it) and the per-GPU worker counts of those GPUs.  The
  snapshot's components, GPUs with more than two workers and components that already break
  §5.1 are found once; a candidate is then checked on its own component only
  (:meth:`Placement.ok`), exactly as :func:`~policies.gimbal_coord.packing_violations` judges
  the whole cluster with the job added (a violation elsewhere in the cluster still fails
  every placement, as before).  The components and their verdicts are kept across calls
  (:mod:`policies.pack_components`): a new round base advances the last one's by the GPUs
  that changed hands and the jobs with new views, instead of building them anew; so are
  the hosts, their alone GPUs and the per-application lists (:mod:`policies.pack_hosts`:
  only the hosts those changes touch are redone).

The snapshot's ``gpu_jobs`` must agree with the running jobs' allocations (the snapshot
contract).  The Plans are identical to the literal implementation kept in
``tests/policies/reference_packing.py`` (tests/policies/test_pack_differential.py).
"""
from __future__ import annotations

from typing import Optional

from .base import exclusive_config, pick_consolidated
from .model import ClusterSnapshot, Gpu, Job
from .records import records_usable
from .pack_components import Components
from .pack_hosts import HostState

PACK_MPS = 100  # packed workers start under MPS at 100 % (free competition)


def pair_progress(snap: ClusterSnapshot, a: str, b: str) -> float:
    """Combined normalised progress of two applications packed at MPS 100/100:
    1/ξ_a + 1/ξ_b (> 1: packing beats running one after the other)."""
    it = snap.interference
    return 1.0 / it.ratio(a, b, PACK_MPS, PACK_MPS) + 1.0 / it.ratio(b, a, PACK_MPS, PACK_MPS)


class _AllocGpus:
    """Job id -> its allocation's GPUs (``()`` without one), read from the job map."""

    __slots__ = ("jobs",)

    def __init__(self, jobs):
        self.jobs = jobs

    def __getitem__(self, jid: str):
        a = self.jobs[jid].allocation
        return a.gpus if a is not None else ()


class Placement:
    """§5.1 over the snapshot with one job added, answered per packing component."""

    def __init__(self, snap: ClusterSnapshot, running: Optional[tuple[Job, ...]] = None,
                 memo: Optional[dict] = None):
        gj = snap.gpu_jobs
        self.gj = gj
        if running is not None:
            self.jg = {j.id: (j.allocation.gpus if j.allocation is not None else ())
                       for j in running}
        else:  # the GPUs of a job on ``gpu_jobs`` (a running job, by the snapshot contract)
            self.jg = _AllocGpus(snap.jobs)
        parent: dict[str, str] = {}

        def find(x):
            while parent.setdefault(x, x) != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        # only GPUs shared by two or more jobs join components (each distinct tuple once);
        # a job on no shared GPU is a component of its own (``root``/``members`` defaults)
        shared = [ids for ids in set(gj.values()) if len(ids) >= 2]
        self.over = any(len(ids) > 2 for ids in shared)  # a GPU holds more than two workers
        for ids in shared:
            for a in ids:
                find(a)
            for a, b in zip(ids, ids[1:]):
                parent[find(a)] = find(b)
        comps: dict[str, list[str]] = {}
        for x in list(parent):
            comps.setdefault(find(x), []).append(x)
        self.root = {x: find(x) for x in parent}
        self.members = comps
        if memo is None or running is not None:
            self.bad = {r for r, m in comps.items()
                        if len(m) >= 2 and not self._set_ok(m, None, ())}
            return
        # a component's verdict is a function of its members' allocations (every job on
        # one of its GPUs is a member): memoised per member views across calls
        jobs, bad = snap.jobs, set()
        for r, m in comps.items():
            key = tuple(sorted(m))
            views = tuple(jobs[j] for j in key)
            hit = memo.get(key)
            if hit is None or any(a is not b for a, b in zip(hit[0], views)):
                if len(memo) > 65536:
                    memo.clear()
                hit = memo[key] = (views, self._set_ok(m, None, ()))
            if not hit[1]:
                bad.add(r)
        self.bad = bad

    def _set_ok(self, comp, job_id: Optional[str], gpus, gj=None, jg=None) -> bool:
        """No §5.1 violation inside ``comp`` (``job_id`` placed on ``gpus`` added)."""
        gj = self.gj if gj is None else gj
        jg = self.jg if jg is None else jg
        added = set(gpus)

        def job_gpus(j):
            return gpus if j == job_id else jg[j]

        def on(g):
            ids = gj.get(g, ())
            return ids + (job_id,) if g in added else ids

        jm = min(comp, key=lambda j: (-len(job_gpus(j)), 0.0, j))  # gimbal_coord._jmax
        mine = set(job_gpus(jm))
        for j in comp:
            if j == jm:
                continue
            mg = job_gpus(j)
            if not set(mg) <= mine:
                return False
            if len(mg) == len(mine) and set(mg) != mine:
                return False
            for g in mg:
                if set(on(g)) - {j, jm}:
                    return False
        return True

    def ok(self, job: Job, gpus: tuple[Gpu, ...], snap: Optional[ClusterSnapshot] = None) -> bool:
        """Same as :func:`policies.gimbal_coord.placement_ok` (``gpus`` non-empty);
        ``snap``: the snapshot to read the GPU map and allocations from (one with the same
        ones as the index was built from) when the index holds none (:meth:`release`)."""
        if self.over:
            return False
        if snap is not None:
            gj, jg = snap.gpu_jobs, _AllocGpus(snap.jobs)
        else:
            gj, jg = self.gj, self.jg
        root = self.root
        touched = set()
        for g in gpus:
            ids = gj.get(g, ())
            if len(ids) >= 2:
                return False
            touched.update(root.get(i, i) for i in ids)
        if not self.bad <= touched:
            return False
        comp = [job.id]
        members = self.members
        for r in touched:
            comp.extend(members.get(r, (r,)))
        return self._set_ok(comp, job.id, tuple(gpus), gj, jg)

    @classmethod
    def kept(cls, snap: ClusterSnapshot, comps: Components) -> "Placement":
        """The index over ``comps`` (:class:`~policies.pack_components.Components`, brought
        up to ``snap``): shares its maps, so it answers only until they are advanced again."""
        p = cls.__new__(cls)
        p.gj, p.jg = snap.gpu_jobs, _AllocGpus(snap.jobs)
        p.over, p.root, p.members, p.bad = comps.nover > 0, comps.root, comps.members, comps.bad
        return p

    def release(self) -> None:
        """Drop the references to the snapshot's maps (an index kept across calls must not
        hold them: the simulator reuses an unobserved map in place); :meth:`ok` then reads
        them from the snapshot it is given."""
        self.gj = self.jg = None


class RoundBase:
    """What a packing round reads of the snapshot before any job is placed: the hosts,
    their alone GPUs, the §5.1 index and the per-application host lists (filled as asked,
    :class:`~policies.pack_hosts.HostState`).  A function of ``gpu_jobs``, the running
    jobs' views, the tables and the policy's knobs (:func:`round_base` keeps it across calls
    while those are unchanged).  ``prev``: the last call's base, whose host state and
    components are taken over and advanced by ``dirty_gpus`` (every GPU whose workers may
    differ since) and ``fresh_jobs`` (every job that may have a new view since)."""

    def __init__(self, policy, snap: ClusterSnapshot, prev: Optional["RoundBase"] = None,
                 dirty_gpus: frozenset = frozenset(), fresh_jobs: tuple = ()):
        # the per-host parts and §5.1's components: the last base's taken over (it gives
        # them up) and advanced by the changed GPUs and jobs, else built from the snapshot
        hs = prev.host_state if prev is not None else None
        comps = prev.components if prev is not None else None
        if prev is not None:
            prev.host_state = prev.components = None
        if hs is None or not hs.advance(policy, snap, dirty_gpus, fresh_jobs):
            hs = HostState(policy, snap)
        self.host_state: Optional[HostState] = hs
        self.host_ids = hs.views.keys()
        self.alone: dict[str, list[Gpu]] = hs.alone
        memo = _policy_memo(policy, "_placement_memo", snap)
        set_ok = Placement.kept(snap, Components())._set_ok  # reads snap's maps
        if comps is None or not comps.advance(snap, dirty_gpus, fresh_jobs, memo, set_ok):
            comps = Components()
            comps.advance(snap, snap.gpu_jobs.keys(), (), memo, set_ok)
        self.components: Optional[Components] = comps
        self.placement = Placement.kept(snap, comps)
        self.placement.release()
        self.node_mem = hs.node_mem
        self.pp: dict[tuple[str, str], float] = _policy_memo(policy, "_pp_memo", snap)


def _policy_memo(policy, name: str, snap: ClusterSnapshot) -> dict:
    """A memo dict kept on the policy for the snapshot's tables and nodes (a new one when
    any of them is another object)."""
    ctx = (snap.profiles, snap.nodes, snap.memory, snap.interference)
    kept = policy.__dict__.get(name)
    if kept is None or any(a is not b for a, b in zip(ctx, kept[0])):
        kept = (ctx, {})
        setattr(policy, name, kept)
    return kept[1]


def round_base(policy, snap: ClusterSnapshot) -> RoundBase:
    """The policy's :class:`RoundBase` for ``snap`` with the simulator's change records
    (``snap.gpu_changes``, ``snap.job_changes``): the last call's while no GPU changed
    hands and no running job (nor a job now running) got a new view since; else a new one
    that takes over the last one's host state and components, advanced by the changes (the
    tables and nodes the same objects, the knobs equal).  Built afresh without the records."""
    kept = policy.__dict__.get("_round_base")
    gr, jr = snap.gpu_changes, snap.job_changes
    ctx = (snap.profiles, snap.nodes, snap.memory, snap.interference)
    usable = records_usable(snap)
    prev, dirty, fresh = None, frozenset(), ()
    if usable and kept is not None:
        base, glog, jlog, kctx = kept
        if (all(a is b for a, b in zip(ctx, kctx)) and gr.log.extends(glog)
                and jr.log.extends(jlog) and base.host_state is not None
                and base.host_state.knobs == (policy.pair_threshold(), policy.unequal)):
            if len(gr.log) == len(glog):
                jobs, hosts = snap.jobs, base.host_ids
                fresh = jr.log[len(jlog):]
                if not any(j in hosts or (j in jobs and jobs[j].running) for j in fresh):
                    policy._round_base = (base, gr.log, jr.log, ctx)
                    return base
            prev, dirty, fresh = base, frozenset(gr.log[len(glog):]), jr.log[len(jlog):]
    base = RoundBase(policy, snap, prev, dirty, fresh)
    policy._round_base = (base, gr.log, jr.log, ctx) if usable else None
    return base


class PackRound:
    """Candidate hosts of one packing round (see module doc)."""

    def __init__(self, policy, snap: ClusterSnapshot, base: Optional[RoundBase] = None):
        self.policy, self.snap = policy, snap
        if base is None:
            base = RoundBase(policy, snap)
        self._state = base.host_state
        # the base's alone GPUs, copied at the round's first take() (lists are replaced by
        # take(), never changed in place; most rounds take nothing)
        self.alone = base.alone
        self._own = False
        self.placement = base.placement
        self.node_mem = base.node_mem
        self.rank = snap.node_rank
        self._pp = base.pp
        self._heads: dict[tuple, int] = {}
        self.taken = False  # a GPU was taken this round (a miss then is not recorded)
        hs = self._state
        if hs.misses is not None:  # brought to this round's generation
            hs.misses.sync(hs, self.pair_progress, hs.knobs[0], hs.knobs[1])

    def pair_progress(self, a: str, b: str) -> float:
        key = (a, b)
        v = self._pp.get(key)
        if v is None:
            v = self._pp[key] = pair_progress(self.snap, a, b)
        return v

    def score(self, job: Job, host: Job) -> float:
        return self.policy.score_from(self.pair_progress(job.app, host.app), self.snap, host)

    def _lists_for(self, app: str, job_mb: float) -> dict[int, list]:
        """Hosts whose pair with ``app`` passes the threshold, by (-score, submit, id), by
        host GPU count, without those on none of whose alone GPUs a worker of ``job_mb``
        fits (:meth:`~policies.pack_hosts.HostState.lists_for`)."""
        return self._state.lists_for(app, job_mb, self.policy, self.snap, self.pair_progress)

    def host_mb(self, host: Job) -> float:
        return self._state.mb(host, self.snap)

    def take(self, host: Job, gpus) -> None:
        gs = set(gpus)
        if not self._own:
            self.alone, self._own = dict(self.alone), True
        self.alone[host.id] = [g for g in self.alone[host.id] if g not in gs]
        self.taken = True

    def _record_miss(self, misses, key: tuple, blocked: bool, listed: list) -> None:
        """Keep the miss of ``key`` unless a listed host also holds GPUs not alone (its
        §5.1 component could then change without it)."""
        alone = self._state.alone
        for e in listed:
            h = e[1]
            if len(alone[h.id]) != len(h.allocation.gpus):
                return
        misses.record(self._state, key, blocked)

    def _fit(self, job: Job, host: Job, alone: list, job_mb: float) -> Optional[tuple[Gpu, ...]]:
        need = job_mb + self.host_mb(host)
        mem = self.node_mem
        grouped: dict[str, list[Gpu]] = {}
        for g in alone:
            if need <= mem[g.node]:
                grouped.setdefault(g.node, []).append(g)
        return pick_consolidated((), job.num_gpus, self.rank, grouped)

    def target(self, job: Job, job_mb: Optional[float] = None
               ) -> Optional[tuple[tuple[Gpu, ...], Job]]:
        """The reference ``_pack_target``: GPUs of the best-scoring host ``job`` may pack on
        (``job_mb``: its worker memory, :func:`policies.pack_queue.worker_mb`, when known).
        A miss is kept across calls (:mod:`policies.pack_misses`; with unequal packing only
        one where no host is listed for the job's class)."""
        pol = self.policy
        if not pol.may_pack(job):
            return None
        n = job.num_gpus
        if job_mb is None:
            b, _ = exclusive_config(self.snap, job)
            mem = self.snap.memory.get(job.app)
            job_mb = mem.mem_mb(b) if mem else 0.0
        hs = self._state
        misses = hs.misses
        if misses is not None:
            key = (job.app, job_mb, n)
            pl = self.placement
            blocked = bool(pl.over or pl.bad)
            if misses.holds(key, blocked):
                return None
        lists = self._lists_for(job.app, job_mb)
        ks = [k for k in lists if k >= n] if pol.unequal else ([n] if n in lists else [])
        if not ks:
            if misses is not None and not self.taken:
                misses.record(hs, key, blocked)
            return None
        alone = self.alone
        pos = {}
        for k in ks:  # skip hosts with no alone GPU left at the head of each list
            lst, hk = lists[k], (job.app, job_mb, k)
            i = self._heads.get(hk, 0)
            while i < len(lst) and not alone[lst[i][1].id]:
                i += 1
            self._heads[hk] = i
            pos[k] = i
        while True:
            best_k, best = None, None
            for k in ks:
                lst, i = lists[k], pos[k]
                while i < len(lst) and not alone[lst[i][1].id]:
                    i += 1
                pos[k] = i
                if i < len(lst) and (best is None or lst[i][0] < best[0]):
                    best_k, best = k, lst[i]
            if best is None:
                if misses is not None and not self.taken and not pol.unequal:
                    self._record_miss(misses, key, blocked, lists[n])
                return None
            pos[best_k] += 1
            host = best[1]
            if host.id == job.id:
                continue
            al = alone[host.id]
            k = host.num_gpus
            if len(al) < n or (n == k and len(al) < k):
                continue
            gpus = self._fit(job, host, al, job_mb)
            if gpus is None or not self.placement.ok(job, gpus, self.snap):
                continue
            return gpus, host
