"""Round state of SJF-BSBF / SJF-FFS (seed 000 Alg. 1) kept as indexes.

Algorithm 1 recomputes G_free and G_OJ for every pending job and evaluates
Algorithm 2 against every job on G_OJ.  Done literally that is O(cluster) per
pending job.  This module keeps the same sets as indexes updated per start
(O(changes)):

* free GPUs by node (what :func:`policies.base.pick_consolidated` needs) and the
  counts |G_free|, |G_OJ|;
* single-occupied GPUs grouped by their job (a *group*: Algorithm 1 line 10's
  candidate), and groups in *classes* of equal (application, memory use, GPU
  memory, evaluable).  Within a class Algorithm 2's memory test is the same for
  every group and Theorem 1 depends on the running job A only through
  X = t_A · i_A (A's remaining exclusive time, eq. 18–25), so a class is kept
  sorted by X.

For a candidate B, :func:`runs` labels a class's X-sorted groups by Theorem 1's
sign with closed-form bounds: the share-now minus run-after difference is
piecewise linear in X with one break (the proof's two cases), and the share-now
time is increasing in B's iteration time t_B (so the fastest fitting sub-batch
decides whether *some* sub-batch shares).  Only groups within a safety margin
(1e-9 relative) of a sign change, and the few groups an answer depends on
(best pair JCTs, best rejected pair), are evaluated exactly with
:func:`policies.sharing.algorithm2` — the same call with the same arguments as
before, so the Plans are identical (tests/policies/test_sjf_differential.py
checks this against the literal implementation).
"""
from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from itertools import accumulate
from operator import itemgetter
from typing import Optional

from .base import exclusive_config, free_gpus_of
from .model import ClusterSnapshot, Gpu, Job, JobState, identity_memo, plain_progress
from .sharing import (ShareChoice, _theorem1_numbers, algorithm2, algorithm2_fitted,
                      share_choice, sub_batch_candidates)
from .single_gpus import SingleGpus, _node_offsets, by_job_of, single_gpus

_FIRST = itemgetter(0)
_RUNNING = JobState.RUNNING
REL = 1e-9  # safety margin of the closed-form bounds (float error is ~1e-15 relative)


@dataclass(slots=True)
class Occupant:
    """A job holding GPUs this round (running, or started earlier in the round)."""

    job: Job
    gpus: tuple[Gpu, ...]
    sub_batch: int
    t_iter: float  # s/iteration alone in its configuration (eq. 7)
    rem_iters: Optional[float]  # None: unknown

    @property
    def usable(self) -> bool:
        t = self.t_iter
        return self.rem_iters is not None and t == t and t > 0


def occupant_from_job(snap: ClusterSnapshot, job: Job) -> Optional[Occupant]:
    alloc = job.allocation
    if alloc is None or not alloc.gpus:
        return None
    return _occupant(snap, job, _alloc_iter_time(snap, job))


def _alloc_iter_time(snap: ClusterSnapshot, job: Job) -> Optional[float]:
    """t_A: eq. 7 of the running job's own allocation (``None`` without a profile)."""
    alloc = job.allocation
    prof = snap.profiles.get(job.app)
    k = len(alloc.gpus)
    return (prof.iter_time(job.global_batch / k, k, alloc.num_nodes, alloc.accum_steps)
            if prof is not None else None)


def _occupant(snap: ClusterSnapshot, job: Job, t: Optional[float]) -> Occupant:
    """The occupant record of a running job with iteration time ``t``; i_A at ``snap.now``."""
    rem = snap.remaining_iters(job)
    if rem is None and t is not None:  # length-unaware: estimate / exclusive s-per-iteration
        rt = snap.remaining_time(job)
        if rt is not None:
            rem = rt / snap.exclusive_iter_time(job)
    return Occupant(job, job.allocation.gpus, job.allocation.sub_batch,
                    t if t is not None else float("nan"), rem)


def _held_t(snap: ClusterSnapshot, keep: "ShareKeep", jid: str) -> tuple:
    """(view, t_A) of running job ``jid`` holding GPUs (t_A of the kept entry while its view
    is the same, else of its allocation; ``None`` without a profile); (None, None) where it
    is not such a job."""
    j = snap.jobs.get(jid)
    if j is None or not j.running or j.allocation is None or not j.allocation.gpus:
        return None, None
    e = keep.entries.get(jid)
    return j, (e.t if e is not None and e.job is j else _alloc_iter_time(snap, j))


def x_now(snap: ClusterSnapshot, keep: "ShareKeep", jid: str) -> Optional[float]:
    """X = t_A·i_A of running job ``jid`` at ``snap.now`` as :meth:`Round.build_shared`
    computes it (t_A of the kept entry while its view is the same, else of its allocation;
    i_A or its estimate as :func:`_occupant` says); ``None`` where it is not evaluable."""
    j, t = _held_t(snap, keep, jid)
    if j is None:
        return None
    rem = snap.remaining_iters(j)
    if rem is None or t is None:
        o = _occupant(snap, j, t)
        if not o.usable:
            return None
        return o.t_iter * o.rem_iters
    if not (t == t and t > 0):
        return None
    return t * rem


def x_fall(snap: ClusterSnapshot, keep: "ShareKeep", jid: str) -> Optional[float]:
    """How fast :func:`x_now` of running job ``jid`` can fall while the GPU map stays the
    same: X per second of ``now``.  With i_A known (:meth:`ClusterSnapshot.completed`:
    ``iter_rate`` per second, none while restoring) it is at most t_A·``iter_rate``; from
    the remaining-time estimate (executed time grows one second a second) t_A / the
    exclusive iteration time.  ``None`` where X is not evaluable or the snapshot class
    computes progress its own way."""
    j, t = _held_t(snap, keep, jid)
    if j is None or not plain_progress(type(snap)) or t is None or not (t == t and t > 0):
        return None
    if j.total_iters is not None:
        return t * max(j.iter_rate, 0.0)
    if j.duration_estimate is None:
        return None
    return t / snap.exclusive_iter_time(j)


def _node_mem(nodes: tuple) -> dict:
    """Node name -> its GPU memory (MiB; the last node of a name counts), memoised per node
    tuple (read only)."""
    return identity_memo(_MEM, nodes, lambda ns: {n.name: n.gpu_mem_mb for n in ns}, 64)


_MEM: dict = {}


class ShareKeep:
    """What the rounds of one SJF-BSBF / SJF-FFS instance keep across calls (issue #13):
    memos that depend only on the snapshot's profile, memory and interference tables and
    node tuple (B's per-signature precomputation, iteration times, exclusive
    configurations, ξ pairs, and per class what Algorithm 2 needs of each candidate
    signature, ``Cls.memo``), and per running job holding GPUs alone its candidate
    group(s) without the time-dependent part (t_A of its allocation, its single-occupied
    GPUs in GPU order, the class's memory numbers).  Everything is dropped when one of
    those tables, the node tuple or the bounds' margin is another object / value; a job's
    entry is used only while its view is the same object (its allocation cannot differ)
    and its single-occupied GPUs are the same set.  i_A (hence X) is evaluated at
    ``snap.now`` every round, as before."""

    def __init__(self):
        self._valid: Optional[tuple] = None
        self.reset()

    def reset(self) -> None:
        self.cand_memo: dict = {}
        self.iter_cache: dict = {}
        self.excl: dict = {}
        self.subs: dict = {}
        self.xi: dict = {}
        self.cls_memo: dict = {}  # class key -> {candidate signature -> Cls.memo value}
        self.entries: dict = {}  # job id -> _Entry

    @property
    def valid(self) -> Optional[tuple]:
        """What the kept state is valid for (a new tuple whenever :meth:`check` resets)."""
        return self._valid

    def check(self, snap: ClusterSnapshot, rel: float) -> None:
        """Drop everything unless ``snap``'s tables and nodes are those of the last call."""
        v = self._valid
        if (v is None or v[0] is not snap.profiles or v[1] is not snap.memory
                or v[2] is not snap.interference or v[3] is not snap.nodes or v[4] != rel):
            self.reset()
            self._valid = (snap.profiles, snap.memory, snap.interference, snap.nodes, rel)


class _Entry:
    """A running job's kept candidate group(s): its view, the set of its single-occupied
    GPUs, t_A (``None`` without a profile) and per group (one, or one per GPU for
    per-GPU groups) (app, A's memory MiB, GPU memory cap), GPUs and positions."""

    __slots__ = ("job", "gset", "t", "units")

    def __init__(self, job, gset, t, units):
        self.job, self.gset, self.t, self.units = job, gset, t, units


def share_keep_of(pol) -> ShareKeep:
    """The policy instance's :class:`ShareKeep` (``pol._share_keep``, made on first use)."""
    keep = pol.__dict__.get("_share_keep")
    if keep is None:
        keep = pol._share_keep = ShareKeep()
    return keep


class Candidate:
    """Per-round precomputation for one pending job B (Algorithm 2 inputs); what depends
    only on B's (application, global batch, GPUs) is made once per round and shared."""

    def __init__(self, rnd: "Round", job: Job):
        self.job = job
        sig = (job.app, job.global_batch, job.num_gpus)
        v = rnd.cand_memo.get(sig)
        if v is None:
            v = rnd.cand_memo[sig] = self._static(rnd, job)
        (self.prof, self.mem, self.nodes, self.local, self.cands, self._t, self.excl,
         self.t_excl) = v
        self.iters = job.total_iters
        self.usable = self.prof is not None and self.iters is not None

    def _static(self, rnd: "Round", job: Job) -> tuple:
        snap = rnd.snap
        self.prof = snap.profiles.get(job.app)
        self.mem = snap.memory.get(job.app)
        per_node = rnd.per_node if rnd.per_node is not None else job.num_gpus
        self.nodes = -(-job.num_gpus // max(per_node, 1))
        self.local = -(-job.global_batch // max(job.num_gpus, 1))
        self.cands = rnd.sub_batches(self.local)
        self._t = rnd.iter_cache.setdefault((job.app, job.global_batch, job.num_gpus, self.nodes),
                                            {})
        self.excl = rnd.exclusive(job)
        self.t_excl = self.iter_time(*self.excl) if self.prof is not None else None
        return (self.prof, self.mem, self.nodes, self.local, self.cands, self._t, self.excl,
                self.t_excl)

    def iter_time(self, b: int, s: int) -> float:
        """Eq. 7 with s accumulation steps of the per-GPU share B = global/G_k
        (micro-batch ⌈B/s⌉ = b; the simulator's rate uses the same form)."""
        key = (b, s)
        t = self._t.get(key)
        if t is None:
            k = self.job.num_gpus
            t = self.prof.iter_time(self.job.global_batch / k, k, self.nodes, s)
            self._t[key] = t
        return t

    def mem_mb(self, b: int) -> float:
        return 0.0 if self.mem is None else self.mem.mem_mb(b)

    def fits_beside(self, b: int, other_mb: float, gpu_mem_mb: float) -> bool:
        if self.prof is not None and b > self.prof.max_local_batch:
            return False
        return self.mem_mb(b) + other_mb <= gpu_mem_mb


class Group:
    """Candidate for sharing: one occupant and its GPUs that hold only it (GPU order),
    tuples (shared with the kept :class:`_Entry`; replaced, never changed in place)."""

    __slots__ = ("occ", "gpus", "pos", "x", "cls", "choice")

    def __init__(self, occ: Occupant, gpus: tuple, pos: tuple, x: Optional[float] = None):
        """``x``: X of ``occ`` where the caller has it (the same product as below)."""
        self.occ, self.gpus, self.pos = occ, gpus, pos
        if x is None:
            x = occ.t_iter * occ.rem_iters if occ.usable else 0.0
        self.x = x
        self.cls: Optional[Cls] = None
        self.choice: Optional[ShareChoice] = None

    @property
    def first(self) -> int:
        return self.pos[0]

    @property
    def key(self) -> tuple:
        return (self.x, self.pos[0])


class Cls:
    """Groups of one (app, A's memory MiB, GPU memory cap, evaluable), sorted by
    (X, position) (``keys``); ``xs`` holds each group's X and ``cnts`` its GPU count in the
    same order (``xs`` is what the bounds read: a float list bisects at about half the cost
    of the key tuples, to the same index, see :func:`runs`; ``None`` for SJF-FFS's per-GPU
    groups, which no bound reads: thousands of them per class, so keeping a third list
    cost more than it saved)."""

    __slots__ = ("app", "a_mb", "cap", "usable", "keys", "xs", "groups", "cnts", "_cum",
                 "memo", "total")

    def __init__(self, app: str, a_mb: float, cap: float, usable: bool):
        self.app, self.a_mb, self.cap, self.usable = app, a_mb, cap, usable
        self.keys: list = []
        self.xs: Optional[list[float]] = []
        self.groups: list[Group] = []
        self.cnts: list[int] = []
        self._cum: Optional[list] = None
        self.memo: dict = {}  # candidate signature -> what Algorithm 2 needs of this class
        self.total = 0  # GPUs of all groups

    def add(self, gr: Group) -> None:
        k = gr.key
        i = bisect_left(self.keys, k)
        self.keys.insert(i, k)
        if self.xs is not None:
            self.xs.insert(i, k[0])
        self.groups.insert(i, gr)
        self.cnts.insert(i, len(gr.gpus))
        self.total += len(gr.gpus)
        gr.cls = self
        self._cum = None

    def remove(self, gr: Group) -> None:
        # the group's index (it is there once): by its X first, a float bisect, where that
        # lands on it (distinct X values); else by its (X, position) key
        xs = self.xs
        i = bisect_left(xs, gr.x) if xs is not None else -1
        if i < 0 or i >= len(xs) or self.groups[i] is not gr:
            i = bisect_left(self.keys, gr.key)
        while self.groups[i] is not gr:
            i += 1
        del self.keys[i]
        if self.xs is not None:
            del self.xs[i]
        del self.groups[i]
        self.total -= self.cnts[i]
        del self.cnts[i]
        gr.cls = None
        self._cum = None

    @property
    def cum(self) -> list:
        if self._cum is None:
            self._cum = list(accumulate(self.cnts, initial=0))
        return self._cum

    def gpus_in(self, lo: int, hi: int) -> int:
        c = self.cum
        return c[hi] - c[lo]


def _group_key(gr: "Group") -> tuple:
    return (gr.x, gr.pos[0])


class Round:
    """Free and single-occupied GPUs of one scheduling round, updated per start."""

    def __init__(self, snap: ClusterSnapshot, keep: Optional[ShareKeep] = None,
                 singles: Optional[SingleGpus] = None):
        """``keep``: the policy's :func:`share_keep_of` (memos and running jobs' groups
        kept across rounds, checked against ``snap`` by the caller), or ``None``;
        ``singles``: the policy's :func:`single_gpus_of` (G_OJ kept across rounds), or
        ``None``."""
        self.snap = snap
        self.keep = keep
        self.singles = singles
        # rejected jobs whose wait reason is not made yet (policies.sjf_bsbf)
        self.deferred: list = []
        # candidate signature -> i_B of a job that could not start since the round's last
        # start, every group it did not share with surely (policies.sjf_bsbf)
        self.fails: dict = {}
        # those of ``fails`` that also hold while only time moves (policies.bsbf_marks)
        self.robust: dict = {}
        # signature -> (mark, [(class, low)]): of ``fails`` those that hold while only time
        # moves and each class's smallest X stays ≥ its low (policies.bsbf_marks)
        self.bounded: dict = {}
        nodes = snap.nodes
        self.per_node = snap.max_gpus_per_node if nodes else None
        self.min_mem = snap.min_gpu_mem_mb
        self.mem_of = _node_mem(nodes)
        self.free = free_gpus_of(snap)
        self.n_free = self.free.total
        if keep is None:
            keep = ShareKeep()
        self.cand_memo, self.iter_cache, self._excl = keep.cand_memo, keep.iter_cache, keep.excl
        self._subs, self._xi, self._cls_memo = keep.subs, keep.xi, keep.cls_memo
        self.counted = False  # n_one known (count_shared)
        self.shared_ready = False  # groups built (build_shared)
        self.started: list = []  # starts made before the sharing indexes were built
        self._occ_t: dict = {}  # (app, batch, GPUs, nodes, accum) -> a started job's t_A

    # ----------------------------------------------------------- memo helpers
    def exclusive(self, job: Job) -> tuple[int, int]:
        key = (job.app, job.global_batch, job.num_gpus)
        v = self._excl.get(key)
        if v is None:
            v = self._excl[key] = exclusive_config(self.snap, job, self.min_mem)
        return v

    def xi_pair(self, run_app: str, new_app: str) -> tuple[float, float]:
        """(ξ of the running job beside the new one, ξ of the new one beside it)."""
        key = (run_app, new_app)
        v = self._xi.get(key)
        if v is None:
            v = self._xi[key] = (self.snap.xi(run_app, new_app), self.snap.xi(new_app, run_app))
        return v

    def sub_batches(self, local: int) -> list:
        v = self._subs.get(local)
        if v is None:
            v = self._subs[local] = sub_batch_candidates(local)
        return v

    # ----------------------------------------------------- occupancy (lazy)
    def count_shared(self) -> None:
        """|G_OJ| (``n_one``) the first time a job needs it this round: the GPUs holding
        one job (kept across calls, :class:`SingleGpus`, or one pass) plus those of the
        exclusive starts made so far this round; its groups wait for :meth:`build_shared`."""
        one = self.singles.update(self.snap) if self.singles is not None else None
        self.one = single_gpus(self.snap) if one is None else one
        # the same GPUs by job, kept with them (SingleGpus), else grouped when built
        self.one_by_job = self.singles.by_job if one is not None else None
        self.n_one = len(self.one) + sum(len(st[1]) for st in self.started)
        self.counted = True

    def build_shared(self, per_gpu_groups: bool) -> None:
        """G_OJ's groups, built the first time a job needs them this round."""
        if not self.counted:
            self.count_shared()
        snap = self.snap
        self.per_gpu_groups = per_gpu_groups
        offset, size = _node_offsets(snap.nodes)
        self.offset, self.size = offset, size
        # GPU -> ids of its jobs, as lists changed by this round's starts (copy on write of
        # the snapshot's valid entries, see :meth:`_on`)
        self.occ: dict[Gpu, list[str]] = {}
        self.occupants: dict[str, Occupant] = {}
        self.groups: dict = {}  # job id (or GPU for per-GPU groups) -> Group
        self.classes: dict[tuple, Cls] = {}
        self.n_one = len(self.one)  # the exclusive starts so far are added back below
        singles = self.one_by_job  # job id -> set of its single-occupied GPUs
        if singles is None:
            singles = by_job_of(self.one)
        # only jobs holding a GPU alone are candidates (Alg. 1 line 10); a job the snapshot
        # places but does not list as running, or cannot model, is skipped
        jobs = snap.jobs
        keep = self.keep
        old = keep.entries if keep is not None else {}
        kept: dict = {}
        per_gpu = self.per_gpu_groups
        by_cls: dict = {}  # class key -> its (key, group) pairs (sorted below)
        groups = self.groups
        occupants = self.occupants
        # i_A as ClusterSnapshot.remaining_iters computes it (the same float operations,
        # inlined: one call per running job per build), unless a subclass overrides it
        inline = plain_progress(type(snap))
        remaining_iters = snap.remaining_iters
        now = snap.now
        for jid, gs in singles.items():
            j = jobs.get(jid)
            if j is None or j.state is not _RUNNING:
                continue
            alloc = j.allocation
            if alloc is None or not alloc.gpus:
                continue
            e = old.get(jid)
            if e is None or e.job is not j or e.gset != gs:
                e = self._entry(j, gs)
            kept[jid] = e
            t = e.t
            if inline:
                total = j.total_iters
                if total is None:
                    rem = None
                else:
                    dt = now - j.as_of
                    if j.restore_left:
                        dt = max(0.0, dt - j.restore_left)
                    rem = max(0.0, total - (j.completed_iters + j.iter_rate * dt))
            else:
                rem = remaining_iters(j)
            if rem is None or t is None:  # an estimate, or no profile: as _occupant says
                o = _occupant(snap, j, t)
                usable = o.usable
                x = o.t_iter * o.rem_iters if usable else 0.0
            else:
                o = Occupant(j, alloc.gpus, alloc.sub_batch, t, rem)
                usable = t == t and t > 0  # Occupant.usable (rem is known)
                x = t * rem if usable else 0.0
            occupants[jid] = o
            if per_gpu:
                x = 0.0
            for key3, ugpus, upos in e.units:
                gr = Group(o, ugpus, upos, x)
                if per_gpu:
                    groups[ugpus[0]] = gr
                else:
                    groups[jid] = gr
                key = (*key3, usable)
                lst = by_cls.get(key)
                if lst is None:
                    lst = by_cls[key] = []
                lst.append(((x, upos[0]), gr))
        if keep is not None:
            keep.entries = kept
        for key, lst in by_cls.items():
            c = self.classes[key] = self._new_cls(key)
            lst.sort(key=_FIRST)  # (X, position): unique, as _group_key orders
            c.keys = [k for k, _ in lst]
            c.xs = None if per_gpu else [k[0] for k, _ in lst]
            c.groups = grs = [gr for _, gr in lst]
            c.cnts = cnts = [len(gr.gpus) for gr in grs]
            c.total = sum(cnts)
            for gr in grs:
                gr.cls = c
        self.shared_ready = True
        for job, gpus, b, s in self.started:  # exclusive starts earlier in the round
            self.occupy(job, gpus, b, s, list(gpus))

    def _on(self, g: Gpu) -> list:
        """The ids on GPU ``g`` this round (a list this round may change): the snapshot's
        for a GPU of the cluster holding jobs, else empty."""
        on = self.occ.get(g)
        if on is None:
            ids = self.snap.gpu_jobs.get(g)
            size = self.size.get(g.node)
            on = self.occ[g] = (list(ids) if ids and size is not None and 0 <= g.index < size
                                else [])
        return on

    def pos_of(self, g: Gpu) -> int:
        return self.offset[g.node] + g.index

    def _class_of(self, occ: Occupant, gpus) -> Cls:
        mem = self.snap.memory.get(occ.job.app)
        a_mb = 0.0 if mem is None else mem.mem_mb(occ.sub_batch)
        cap = min(self.mem_of[g.node] for g in gpus)
        key = (occ.job.app, a_mb, cap, occ.usable)
        c = self.classes.get(key)
        if c is None:
            c = self.classes[key] = self._new_cls(key)
        return c

    def _new_cls(self, key: tuple) -> "Cls":
        """The class of ``key`` = (app, A's memory MiB, cap, evaluable), its Algorithm 2
        memo kept across rounds (:class:`ShareKeep`)."""
        c = Cls(*key)
        if self.per_gpu_groups:
            c.xs = None
        memo = self._cls_memo.get(key)
        if memo is None:
            memo = self._cls_memo[key] = {}
        c.memo = memo
        return c

    def _entry(self, job: Job, gs: list) -> _Entry:
        """The kept part of a running job's group(s) (:class:`_Entry`): t_A of its
        allocation, its single-occupied GPUs ``gs`` in GPU order and the class numbers."""
        snap = self.snap
        t = _alloc_iter_time(snap, job)
        gpus = sorted(gs, key=self.pos_of)
        mem = snap.memory.get(job.app)
        a_mb = 0.0 if mem is None else mem.mem_mb(job.allocation.sub_batch)
        mem_of = self.mem_of
        if self.per_gpu_groups:
            units = tuple(((job.app, a_mb, mem_of[g.node]), (g,), (self.pos_of(g),))
                          for g in gpus)
        else:
            units = (((job.app, a_mb, min(mem_of[g.node] for g in gpus)), tuple(gpus),
                      tuple(self.pos_of(g) for g in gpus)),)
        return _Entry(job, frozenset(gpus), t, units)

    def _add_groups(self, occ: Occupant, gpus: list) -> None:
        if self.per_gpu_groups:  # SJF-FFS: first fit, kept in GPU order
            for g in gpus:
                gr = Group(occ, (g,), (self.pos_of(g),))
                gr.x = 0.0
                self.groups[g] = gr
                self._class_of(occ, [g]).add(gr)
        else:
            gr = Group(occ, tuple(gpus), tuple([self.pos_of(g) for g in gpus]))
            self.groups[occ.job.id] = gr
            self._class_of(occ, gpus).add(gr)

    def occupy(self, job: Job, gpus: tuple, b: int, s: int, from_free: list) -> None:
        """``job`` starts on ``gpus`` (those in ``from_free`` were free, the rest
        held one job): G_free / G_OJ and the groups follow."""
        if not self.shared_ready:
            self.started.append((job, gpus, b, s))
            if self.counted:  # free GPUs now holding this job alone
                self.n_one += len(gpus)
            return
        snap = self.snap
        k = len(gpus)
        nodes = 1 if k == 1 else len({g.node for g in gpus})
        # t_A of the started job: eq. 7 of its profile, a pure function of these five
        tkey = (job.app, job.global_batch, k, nodes, s)
        t = self._occ_t.get(tkey)
        if t is None:
            prof = snap.profiles.get(job.app)
            t = self._occ_t[tkey] = (prof.iter_time(job.global_batch / k, k, nodes, s)
                                     if prof is not None else float("nan"))
        rem = job.total_iters - job.completed_iters if job.total_iters is not None else None
        occ = Occupant(job, tuple(gpus), b, t, rem)
        self.occupants[job.id] = occ
        freed = set(from_free) if from_free else ()
        for g in gpus:
            on = self._on(g)
            on.append(job.id)
            if g in freed:
                self.n_one += 1
            elif len(on) == 2:
                self.n_one -= 1
                self._leave_single(on[0], g)
        if from_free:
            self._add_groups(occ, sorted(from_free, key=self.pos_of))

    def _leave_single(self, jid: str, g: Gpu) -> None:
        """GPU ``g`` of job ``jid`` now holds two jobs: it leaves jid's group."""
        if self.per_gpu_groups:
            gr = self.groups.pop(g, None)
            if gr is not None:
                gr.cls.remove(gr)
            return
        gr = self.groups.get(jid)
        if gr is None:
            return
        cls = gr.cls
        cls.remove(gr)
        if len(gr.gpus) == 1:  # g was its only GPU: the group is left empty, as below
            gr.gpus = gr.pos = ()
            del self.groups[jid]
            return
        i = gr.gpus.index(g)
        # new tuples: a group's GPUs are the kept entry's tuples (_Entry.units)
        gr.gpus = gr.gpus[:i] + gr.gpus[i + 1:]
        gr.pos = gr.pos[:i] + gr.pos[i + 1:]
        if not gr.gpus:
            del self.groups[jid]
            return
        # its class key differs only in the memory cap, the least of its GPUs' nodes'
        mem_of = self.mem_of
        if min(mem_of[x.node] for x in gr.gpus) == cls.cap:
            cls.add(gr)
        else:
            self._class_of(gr.occ, gr.gpus).add(gr)


# ---------------------------------------------------------------- bounds
class Lin:
    """Closed form of Theorem 1 for one candidate configuration (t_B, i_B) against a class:
    share-now time T(X), run-after time X + S, difference D(X) = T(X) − X − S.

    Case 1 (ξ_A·X ≥ ξ_B·t_B·i_B, eq. 21): T = ξ_B t_B i_B (1 − 1/(2ξ_A)) + X/2;
    Case 2 (eq. 25 at κ = 0): T = (1 − 1/(2ξ_B)) ξ_A X + t_B i_B / 2.
    """

    __slots__ = ("c", "k1", "k2", "m", "s")

    def __init__(self, t_b: float, i_b: float, xi_a: float, xi_b: float, s: float):
        hbib = xi_b * t_b * i_b
        self.c = hbib / xi_a
        self.k1 = hbib * (1.0 - 1.0 / (2.0 * xi_a))
        self.k2 = t_b * i_b / 2.0
        self.m = (1.0 - 1.0 / (2.0 * xi_b)) * xi_a
        self.s = s

    def t(self, x: float) -> float:
        return self.k1 + x / 2.0 if x >= self.c else self.k2 + self.m * x

    def d(self, x: float) -> float:
        return self.t(x) - x - self.s

    def breaks(self, margin: float) -> list:
        """X values where D crosses ±margin, and the case break."""
        out = [self.c]
        base1 = self.k1 - self.s  # D = base1 − X/2  (X ≥ c)
        for v in (margin, -margin):
            x = 2.0 * (base1 - v)
            if x >= self.c:
                out.append(x)
            q = self.m - 1.0  # D = (k2 − s) + q X  (X < c)
            if q != 0.0:
                x = (v - (self.k2 - self.s)) / q
                if x < self.c:
                    out.append(x)
        return out


def runs(xs: list, lin: Lin, margin: float) -> list:
    """Label the sorted X values ``xs`` of a class (:attr:`Cls.xs`): [(label, lo, hi)],
    label 'T' where Theorem 1 surely says share (D < −margin), 'F' where it surely does
    not (D > margin), 'U' where the sign needs exact evaluation.  Between two
    consecutive breaks of :meth:`Lin.breaks` the label cannot change.  (A break ``e``
    splits the class at ``bisect_left(xs, e)``: the first key (X, position) not below
    ``(e,)``, as a key is below ``(e,)`` exactly when its X is below ``e``.)"""
    n = len(xs)
    xa, xb = xs[0], xs[-1]
    # D is piecewise linear with one break at c: its extremes over [xa, xb] are
    # among xa, xb and c
    da, db = lin.d(xa), lin.d(xb)
    lo_d, hi_d = min(da, db), max(da, db)
    if xa < lin.c < xb:
        dc = lin.d(lin.c)
        lo_d, hi_d = min(lo_d, dc), max(hi_d, dc)
    if hi_d < -margin:
        return [("T", 0, n)]
    if lo_d > margin:
        return [("F", 0, n)]
    out = []
    lo = 0
    for e in [*sorted(set(lin.breaks(margin))), None]:
        hi = n if e is None else bisect_left(xs, e)
        if hi <= lo:
            continue
        da, db = lin.d(xs[lo]), lin.d(xs[hi - 1])
        if da < -margin and db < -margin:
            label = "T"
        elif da > margin and db > margin:
            label = "F"
        else:
            label = "U"
        if out and out[-1][0] == label:
            out[-1] = (label, out[-1][1], hi)
        else:
            out.append((label, lo, hi))
        lo = hi
    return out


def evaluate(rnd: Round, cand: Candidate, gr: Group) -> ShareChoice:
    """Line 11: Algorithm 2 for candidate B beside the group's job A (exact).  The
    sub-batches that fit beside the class and their t_B are B's and the class's alone:
    kept in the class's memo (:func:`fitted`), so each evaluation is Theorem 1's arithmetic
    (:func:`~policies.sharing.algorithm2_fitted`, the same ShareChoice as
    :func:`~policies.sharing.algorithm2`)."""
    a = gr.occ
    xi_run, xi_new = rnd.xi_pair(a.job.app, cand.job.app)
    cls = gr.cls
    a_mb, cap = cls.a_mb, cls.cap
    usable = cand.prof is not None and cand.iters is not None and a.usable
    if not usable:  # cannot evaluate Theorem 1: never share (SF false)
        b0, s0 = cand.cands[0]
        ok = any(cand.fits_beside(b, a_mb, cap) for b, _ in cand.cands)
        return ShareChoice(False, b0, s0, float("inf"), float("inf"), float("inf"), 0,
                           xi_run, xi_new, ok)
    fl, positive = fitted_checked(cand, cls)
    c = algorithm2_fitted(fl, cand.cands[0] if cand.cands else (1, 1),
                          a.t_iter, a.rem_iters, cand.iters, xi_run, xi_new, cand.t_excl,
                          positive)
    if c is not None:
        return c
    return algorithm2(cand.cands, cand.iter_time, lambda b: cand.fits_beside(b, a_mb, cap),
                      a.t_iter, a.rem_iters, cand.iters, xi_run, xi_new, cand.t_excl)


def fitted(cand: Candidate, cls: Cls) -> tuple:
    """The (b, s, t_B) of B's sub-batch search order that fit beside ``cls``'s jobs, in
    that order (B profiled), kept in the class's memo per B's signature (it holds while
    the memo does: the profile and memory tables and the nodes the same)."""
    return fitted_checked(cand, cls)[0]


def fitted_checked(cand: Candidate, cls: Cls) -> tuple:
    """(:func:`fitted`, whether each of its t_B is > 0), memoised together: the check
    :func:`~policies.sharing.algorithm2_fitted` makes of its input is made once per
    memo entry instead of once per evaluation."""
    job = cand.job
    key = ((job.app, job.global_batch, job.num_gpus), "fitted")
    v = cls.memo.get(key)
    if v is None:
        a_mb, cap = cls.a_mb, cls.cap
        fl = tuple((b, s, cand.iter_time(b, s)) for b, s in cand.cands
                   if cand.fits_beside(b, a_mb, cap))
        v = cls.memo[key] = (fl, all(t_b > 0 for _, _, t_b in fl))
    return v


def rejected(rnd: Round, cand: Candidate, gr: Group, t0: float, b0s0: tuple) -> None:
    """Algorithm 2's answer for a group whose bounds say Theorem 1 runs B after A for
    every fitting sub-batch: the first fitting sub-batch stays best (line 7's strict
    ``<`` never replaces it), so one evaluation at it gives the same ShareChoice."""
    a = gr.occ
    xi_run, xi_new = rnd.xi_pair(a.job.app, cand.job.app)
    if min(a.t_iter, t0, xi_run, xi_new) <= 0 or a.rem_iters < 0 or cand.iters < 0:
        gr.choice = evaluate(rnd, cand, gr)  # the checks of theorem1 raise there
        return
    t_share, t_seq, case = _theorem1_numbers(a.t_iter, a.rem_iters, t0, cand.iters,
                                             xi_run, xi_new, cand.t_excl)
    gr.choice = share_choice(t_share < t_seq, b0s0[0], b0s0[1], min(t_share, t_seq), t_share,
                             t_seq, case, xi_run, xi_new, True)
