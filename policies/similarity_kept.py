"""Seed 002's similarity rounds (Algorithms 2-3, with re-scheduling ``cd``) over a queue kept
across calls (issue #13, docs/scale.md §2).

With re-scheduling the round walks the queue "unfinished jobs of earlier rounds first, then
new ones, each by arrival" (§4.2): the key (started?, submit time, id) of a waiting job is
fixed while it waits, so the waiting jobs are kept in a :class:`~policies.kept_order.KeptOrder`
brought up to date from the simulator's change record, and the running jobs (all started,
kept in (submit time, id) order from the job change record: :class:`RunningOrder`) are
merged into its first part per call.  Algorithm 2 stops once no GPU is left, as before; the
rest of the queue is not walked.  What does not change between calls is kept across them
while the profile table, GPU type table, nodes and reference database are the very same
objects (:meth:`SimilarityState.memos`): ``sch_m`` per class (§4.1; the Options shared
across calls) and per job view, and, for ``apply_decisions``, each running job kept with its
reason — a job whose view and chosen Option are the recorded objects keeps its GPUs again
without the comparison.  Algorithm 3 draws partners from the queued jobs that may
share a GPU, grouped by class (application, batch, batch range) and, within a class, in queue
order: a second KeptOrder keys the waiting jobs by (class number, queue key), so a class's
earliest candidate is the head of its segment (skipping the jobs placed or taken this round)
or an unplaced running job of the class, and only the literal walk over every candidate (near
ties, :meth:`Similarity._partner`) gathers them all.  The queue order of the Plan is made
when a consumer reads it (:class:`~policies.model.Deferred`) and the waiting reason is one
shared segment.  Without a change record, without re-scheduling, or with odd numbers (no
finite submit time, an unhashable range, a running job never started) the old code answers.
The Plan is the same (tests/policies/test_similarity_kept_differential.py, against the
verbatim old code at every call of loaded simulator runs)."""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from itertools import compress
from operator import is_, itemgetter
from typing import Optional

from .base import keep_running_segment
from .kept_order import KeptOrder
from .model import ClusterSnapshot, Deferred
from .records import job_record
from .plan import Plan, ReasonCode, make_plan, reason
from .typed_rounds import apply_decisions, type_capacity

STARTED, NEW, ODD = 0, 1, 2
_NONE = -1  # class number of a job that may not be packed (asks more than one GPU)
_BAD = 1 << 40  # class number of a job with odd numbers
_BIG = 1e15
_FIRST = itemgetter(0)


def queue_key(j) -> tuple:
    s = j.submit_time
    if not -_BIG <= s <= _BIG:
        return (ODD, 0.0, j.id)
    return (STARTED if j.start_time is not None else NEW, s, j.id)


class SimilarityState:
    """Per policy instance: the waiting jobs in queue order, the same by packing class, and
    the class numbers handed out (class -> number, stable for the instance)."""

    def __init__(self):
        self.queue = KeptOrder()
        self.by_class = KeptOrder()
        self.numbers: dict = {}
        self.ctx: Optional[tuple] = None  # what the memos below were made with
        self.sugg: dict = {}  # class -> sch_m (the Options, shared across calls)
        self.opts_of: dict = {}  # job id -> (view, reference match, sch_m)
        self.kept: dict = {}  # apply_decisions' memo of the running jobs kept
        self.running = RunningOrder()
        self.walk: Optional[tuple] = None  # the last call's Algorithm 2 walk (kept_schedule)

    def memos(self, pol, snap: ClusterSnapshot, db) -> None:
        """Keep the memos across calls while what they were made of is the very same
        (profiles, GPU types, nodes, reference database, decision variables), else clear
        them; bound them by the jobs of the snapshot (ids of ended jobs pile up)."""
        ctx = (snap.profiles, snap.gpu_types, snap.nodes, db, pol.decide)
        old = self.ctx
        if (old is None or any(a is not b for a, b in zip(old[:4], ctx[:4]))
                or old[4] != ctx[4] or len(self.opts_of) > 4 * len(snap.jobs) + 1024):
            self.sugg, self.opts_of, self.kept = {}, {}, {}
            self.walk = None  # its Options are of the memo dropped
        elif len(self.kept) > 4 * len(snap.jobs) + 1024:
            self.kept = {}
        self.ctx = ctx

    def options(self, pol, snap, job, types, ref_for) -> tuple:
        """(view, reference match, sch_m) of ``job``: ``Similarity._choose``'s suggestions,
        memoised per class across calls and per view."""
        hit = self.opts_of.get(job.id)
        if hit is not None and hit[0] is job:
            return hit
        m = ref_for(job.app)
        ref = m[0] if m else None
        cls = (ref, job.num_gpus, job.gpu_range, job.global_batch, job.batch_range)
        try:
            opts = self.sugg.get(cls)
        except TypeError:  # an unhashable range: no class memo for this job
            cls, opts = None, None
        if opts is None:
            opts = pol.suggestions(snap, job, ref, types)
            if cls is not None:
                self.sugg[cls] = opts
        hit = self.opts_of[job.id] = (job, m, opts)
        return hit

    def class_of(self, pol, j) -> int:
        """The packing class number of ``j`` (``_Pool``'s rule), ``_NONE`` or ``_BAD``."""
        if pol.decide == "gpu" or j.gpu_range is None:
            if j.num_gpus != 1:
                return _NONE
        elif not j.gpu_range[0] <= 1:
            return _NONE
        ck = (j.app, j.global_batch, j.batch_range)
        try:
            c = self.numbers.get(ck)
        except TypeError:
            return _BAD
        if c is None:
            c = self.numbers[ck] = len(self.numbers)
        return c


class RunningOrder:
    """The running jobs in queue order (all started: by (submit time, id)) with their queue
    keys, kept across calls from the snapshot's job change record
    (:class:`policies.model.JobChanges`): only the jobs named after the entries seen last
    are looked at again.  Without a usable record (the daemon's snapshots, a copy with
    other ``jobs``, a record of another run or an older snapshot) it is made by a pass
    over every job."""

    def __init__(self):
        self.clear()

    def clear(self) -> None:
        self._seen = None
        self.keys: list = []
        self.jobs: list = []
        self.key_of: dict = {}

    def update(self, snap: ClusterSnapshot) -> bool:
        """Bring the order up to ``snap``; ``False`` (cleared) when a running job's queue
        key is not a started one (the caller takes the old path)."""
        log = job_record(snap)
        jobs = snap.jobs
        if log is not None and self._seen is not None and log.extends(self._seen):
            keys, kjobs, key_of = self.keys, self.jobs, self.key_of
            for jid in dict.fromkeys(log[len(self._seen):]):
                old = key_of.pop(jid, None)
                if old is not None:
                    i = bisect_left(keys, old)
                    if i == len(keys) or keys[i] != old:  # not where it was put: rebuild
                        self.clear()
                        return self.update(snap)
                    del keys[i], kjobs[i]
                v = jobs.get(jid)
                if v is not None and v.running:
                    k = queue_key(v)
                    if k[0] != STARTED:
                        self.clear()
                        return False
                    i = bisect_left(keys, k)
                    keys.insert(i, k)
                    kjobs.insert(i, v)
                    key_of[jid] = k
        else:
            pairs = sorted(((queue_key(j), j) for j in jobs.values() if j.running), key=_FIRST)
            if pairs and pairs[-1][0][0] != STARTED:
                self.clear()
                return False
            self.keys = [k for k, _ in pairs]
            self.jobs = [j for _, j in pairs]
            self.key_of = {j.id: k for k, j in pairs}
        self._seen = log
        return True


class _KeptPool:
    """``similarity._Pool``'s interface over the kept class order: positions are queue keys
    (ordered as the queue positions are)."""

    def __init__(self, ckeys, cjobs, run_by_class: dict, placed, left: int):
        self.ckeys, self.cjobs, self.run_by_class, self.placed = ckeys, cjobs, run_by_class, placed
        self.gone: set = set()
        self.left = left
        self.mem_memo: dict = {}
        self.cand_memo: dict = {}  # (class, host's numbers) -> candidate (Similarity._partner)
        self.seg: dict = {}  # class -> [next index, end] in the class order
        i, n = 0, len(ckeys)
        while i < n:  # the classes present among the waiting jobs: one bisection each
            c = ckeys[i][0]
            end = bisect_left(ckeys, (c + 1,), i, n)
            if c >= 0:
                self.seg[c] = [i, end]
            i = end
        self.run_head = dict.fromkeys(run_by_class, 0)

    def _first(self, c):
        best = None
        s = self.seg.get(c)
        if s is not None:
            i, end = s
            ck, cj, placed, gone = self.ckeys, self.cjobs, self.placed, self.gone
            while i < end and (cj[i].id in placed or cj[i].id in gone):
                i += 1
            s[0] = i
            if i < end:
                best = (ck[i][1:], cj[i])
        lst = self.run_by_class.get(c)
        if lst is not None:
            k = self.run_head[c]
            while k < len(lst) and lst[k][1].id in self.gone:
                k += 1
            self.run_head[c] = k
            if k < len(lst) and (best is None or lst[k][0] < best[0]):
                best = lst[k]
        return best

    def firsts(self) -> list:
        out = []
        for c in set(self.seg) | set(self.run_by_class):
            f = self._first(c)
            if f is not None:
                out.append((c, f))
        return out

    def walk(self):
        rest = []
        for c, (i, end) in self.seg.items():
            for k in range(i, end):
                j = self.cjobs[k]
                if j.id not in self.placed and j.id not in self.gone:
                    rest.append((self.ckeys[k][1:], c, j))
        for c, lst in self.run_by_class.items():
            rest.extend((pos, c, j) for pos, j in lst if j.id not in self.gone)
        rest.sort(key=_FIRST)
        for _, c, j in rest:
            yield c, j

    def take(self, job) -> None:
        self.gone.add(job.id)
        self.left -= 1


_NO_WALK = (0, [], [], [], [], [], [])  # sliced (copied) by the caller, never changed


def _resume(snap: ClusterSnapshot, walk: Optional[tuple], tnames: tuple) -> tuple:
    """How much of the last call's walk (``SimilarityState.walk``) this call takes over:
    ``d`` and the walk's lists (keys, views, ids, Options or None, reference matches, caps
    after each step).  Each step's choice is a function of the job's view (its ``sch_m``,
    kept) and of the caps left by the steps before, so the walk is the same up to the first
    position a job changed since (named by the job change record) held or would now take;
    ``d = 0`` without a usable record.  The views taken over are checked to be the
    snapshot's (one identity test each, at C speed)."""
    log = job_record(snap)
    if walk is None or log is None or walk[8] != tnames or not log.extends(walk[0]):
        return _NO_WALK
    seen, wkeys, wjobs, wids, wopts, wms, wcaps, pos_of, _ = walk
    d = len(wkeys)
    jobs = snap.jobs
    for jid in dict.fromkeys(log[len(seen):]):
        p = pos_of.get(jid)
        if p is not None and p < d:
            d = p
        v = jobs.get(jid)
        if v is not None:
            k = queue_key(v)
            if k[0] == ODD:
                return _NO_WALK
            p = bisect_left(wkeys, k, 0, d)
            if p < d:
                d = p
    if not all(map(is_, wjobs[:d], map(jobs.get, wids[:d]))):
        return _NO_WALK
    return d, wkeys, wjobs, wids, wopts, wms, wcaps


def kept_schedule(pol, snap: ClusterSnapshot, state: SimilarityState) -> Optional[Plan]:
    """:meth:`Similarity.schedule`'s Plan with re-scheduling over the kept queue, or
    ``None`` where the old code should answer."""
    if not pol.cd:
        return None
    kq = state.queue.update(snap, queue_key, (pol.decide,))
    if kq is None:
        return None
    keys, kjobs = kq.keys, kq.jobs
    n = len(keys)
    if n and keys[-1][0] == ODD:
        return None
    kc = None
    if pol.jp:
        kc = state.by_class.update(snap, lambda j: (state.class_of(pol, j),) + queue_key(j),
                                   (pol.decide,))
        if kc is None or (kc.keys and kc.keys[-1][0] == _BAD):
            return None
    ro = state.running
    if not ro.update(snap) or len(ro.jobs) + n != len(snap.jobs):
        return None
    running, rkeys = list(ro.jobs), list(ro.keys)  # copies: the kept lists change later

    db = snap.predictors.get("similarity")
    types = type_capacity(snap)
    cap = {t: v[0] for t, v in types.items()}
    if any(c < 0 for c in cap.values()):
        return None
    state.memos(pol, snap, db)
    ref_cache: dict = {}

    def ref_for(app):
        if app not in ref_cache:
            ref_cache[app] = db.closest(app) if db is not None else None
        return ref_cache[app]

    # ---- Algorithm 2 over merge(running, started waiting) + new waiting, until no GPU is left
    # (the queue order: every key, running or waiting, in one sorted order); the part of the
    # last call's walk before the first job changed since is taken over (_resume)
    f_end = bisect_left(keys, (NEW,))
    nr = len(running)
    tnames = tuple(cap)
    d, wk, wj, wi, wo, wm, wc = _resume(snap, state.walk, tnames)
    walked, wkeys, wids, wopts, wms, wcaps = wj[:d], wk[:d], wi[:d], wo[:d], wm[:d], wc[:d]
    decided = dict(compress(zip(wids, wopts), wopts))  # an Option is true, None is not
    refs = dict(compress(zip(wids, wms), wopts))
    if d:
        cap = dict(zip(tnames, wcaps[-1]))
        ri, ki = bisect_right(rkeys, wkeys[-1]), bisect_right(keys, wkeys[-1])
    else:
        ri = ki = 0
    total = sum(cap.values())  # no cap is negative: any GPU left <=> total > 0
    options, opts_of = state.options, state.opts_of
    while total > 0:  # Similarity._choose per job, its sch_m memoised (SimilarityState)
        if ri < nr and (ki >= n or rkeys[ri] < keys[ki]):
            job, k = running[ri], rkeys[ri]
            ri += 1
        elif ki < n:
            job, k = kjobs[ki], keys[ki]
            ki += 1
        else:
            break
        walked.append(job)
        wkeys.append(k)
        wids.append(job.id)
        hit = opts_of.get(job.id)
        if hit is None or hit[0] is not job:
            hit = options(pol, snap, job, types, ref_for)
        _, m, opts = hit
        chosen = None
        for opt in opts:
            if opt.ngpu <= cap[opt.gpu_type]:
                chosen = decided[job.id] = opt
                refs[job.id] = m
                cap[opt.gpu_type] -= opt.ngpu
                total -= opt.ngpu
                break
        wopts.append(chosen)
        wms.append(m)
        wcaps.append(tuple(cap.values()))
    log = job_record(snap)
    state.walk = (log, wkeys, walked, wids, wopts, wms, wcaps,
                  dict(zip(wids, range(len(wids)))), tnames) if log is not None else None

    started_why, kept_why = pol._why(refs)
    preempted, starts, placed, batch_of, reasons = apply_decisions(
        snap, walked, decided, True, started_why, kept_why, running, state.kept)

    # ---- Algorithm 3 over the queued jobs by class
    left = nr + n - len(placed)
    gone: set = set()
    if pol.jp and left:
        run_by_class: dict = {}
        for k, j in zip(rkeys, running):
            if j.id not in placed:
                c = state.class_of(pol, j)
                if c == _BAD:
                    return None
                if c >= 0:
                    run_by_class.setdefault(c, []).append((k, j))
        pool = _KeptPool(kc.keys, kc.jobs, run_by_class, placed, left)
        pol._pack(snap, walked, placed, preempted, starts, batch_of, pool, ref_for, reasons)
        gone = pool.gone

    rest_run = running[ri:]
    rest_keys = rkeys[ri:]
    kq_ids = kq.ids  # the kept lists of jobs and ids are copied before a change while held

    def rest() -> list:
        """The queue after the walked jobs (none of them placed), less the packed ones."""
        out = []
        a, b = 0, ki
        while a < len(rest_run) or b < n:
            if a < len(rest_run) and (b >= f_end or rest_keys[a] < (
                    STARTED, kjobs[b].submit_time, kq_ids[b])):
                jid = rest_run[a].id
                a += 1
            else:
                jid = kq_ids[b]
                b += 1
            if jid not in gone:
                out.append(jid)
        return out

    order = Deferred([[j.id for j in walked if j.id not in placed], rest])
    wait = reason(ReasonCode.WAIT_RESOURCES, "no suggestion fits the GPUs left this round")
    return make_plan(pol.name, list(preempted.values()) + starts, order, reasons, [],
                     [(order, wait), keep_running_segment(snap)])
