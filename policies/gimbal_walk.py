"""GIMBAL's coordination kept across rounds (issue #13: ``lucid+gimbal`` at 64x8 spent nine
tenths of its time re-running Algorithm 1 on every packing set at every 30 s round).

:class:`CoordKept` (one per host policy, :meth:`CoordKept.coordinate` is what
:func:`policies.gimbal_coord.coordinate` does with ``kept=``) returns the same
:class:`~policies.gimbal_coord.Coordination` records as the plain path, from three kept things
(below).  The hosts read :meth:`CoordKept.resizes`: of the same records, those with resizes,
as (J_max, objective before, objective after, resizes), from searches without their audit
trail (:func:`walk_best`), and without searching again a set that is sure to find no resizes
(:mod:`policies.gimbal_quiet`: how long the comparisons of its last search keep their signs).

* **The walk** (:class:`Walk`).  In :func:`~policies.gimbal_coord.coordination_search` the
  sequence of configurations visited (line 5's swell, then ``generate`` again and again until
  it has no new primitive) does not depend on any objective value: ``generate`` reads the
  configuration, the stragglers (the rate model on the jobs' applications, GPU counts, node
  counts and the configuration) and subset1; which subset is subset1 is one boolean (the set is
  split into {J_max} and the rest, lines 2-4).  The objective values (remaining steps x step
  time, i.e. the clock) only decide ``gain``, ``best``, ``fails`` and the early exit.  So a
  walk is kept per packing set and per split, extended lazily (one ``generate`` when the search
  first goes past its end), with each configuration's per-job step times; at each round only
  the values along it are computed (:func:`objective_value`: the products remaining steps x
  step time of :func:`~policies.gimbal_coord.local_objective`, summed or compared in the same
  order, on the same step times, which are the same pure functions of the same arguments: the
  same floats), and the split is decided again each round by ``prio``'s arithmetic on the
  kept start step times (:meth:`KeptSearch.split`; for "deadline" and "makespan" it moves
  with the clock, for "jct" it does not).  The resizes of a result are a function of its best
  configuration (one of the walk's, kept) and of the record: kept per configuration.  The
  switching cost's test (gimbal_coord's module doc) reads the best configuration's step times
  and which of its jobs' MPS shares differ from the walk's start (kept per configuration,
  :meth:`Walk.switch_costs`); a declined result is the walk's start, the object itself.
* **The packing sets** (:class:`policies.gimbal_sets.KeptSets`): brought up to date from the
  simulator's change records (the components through the GPUs and jobs that changed found
  again), built from ``gpu_jobs`` without them (the daemon's snapshots).
* **The per-set record** (:class:`_SetRec`): the members' Job views (by identity), the GPU
  occupancy of their workers, the start and actual configurations, J_max, the utilisations and
  node counts, the start step times and the walks.  Everything in it is a pure function of
  those views, that occupancy and the snapshot's profiles, interference table and predictors
  (the same objects, else everything is dropped).  When the sets changed, a record is kept
  for a set none of whose jobs the kept sets looked at again (their views and GPUs did not
  change: a new view or a GPU change of a member makes it a seed there), or whose member
  views are the very same objects on GPUs holding as many jobs.  Only the remaining steps
  and the deadline distance are read at each round.

* **Searches shared by content** (issue #13, second pass: at ``gavel+gimbal`` on the first
  10,000 Philly jobs at 64x8, 250,208 set records were made and 97 % of them built a
  :class:`KeptSearch` equal to one built before: resized sets go back and forth between a
  few configurations).  A KeptSearch and its walks read, besides the rate model, only what
  :func:`search_key` holds (each job's id, application, GPU count, start time and node count
  in the set's order, the start's worker records, the ablations), so :class:`CoordKept` keeps
  them by that key (``searches``, emptied past ``SEARCHES_CAP``; a new rate model, i.e. a new
  context, empties it) and a new record takes the kept one: the same walks, extended where
  they ended.  The resizes memo (per best configuration) is the record's, since resizes read
  the record's actual configuration.  Each job's utilisation and start configuration are
  memoised by its allocation's identity (:func:`job_static`).
* **The walks' times** (:mod:`policies.gimbal_steps`): each walk carries its last
  configuration's per-worker times and computes a step's times only for the jobs that can
  have changed.
* **Calls at which nothing changed** (issue #13, third pass; :mod:`policies.gimbal_still`):
  no change record entry since the last pass: its restore candidates and plan; every record
  of the plan quiet now: the plan is passed over.
* **Sets without deadlines** under "deadline" (gandiva+gimbal on the Philly trace: every
  set): every objective value is 0.0 and no step gains, so the lean search is the walk's
  head with 0.0 before and after, read without arithmetic and quiet for the record's life
  when it has no resizes (:meth:`_SetRec._no_deadline`).  Such a record finds or makes no
  KeptSearch (:attr:`_SetRec.kept` does that when first read): the head is computed from
  the start, J_max and the ablation (:meth:`_SetRec._head`).

The jobs below their MPS ceiling (restored when alone) are kept as a set of ids updated from
the job change record (a job's allocation and state are in its view), sorted each call by the
same (submit time, id) key the plain path sorts by.
"""
from __future__ import annotations

import math
from bisect import bisect_left
from typing import Iterable, Optional

from .model import ClusterSnapshot, SUBMIT_ORDER, plain_progress
from .gimbal_coord import (
    MAX_ATTEMPTS, MAX_FAILS, Attempt, Coordination, JobInfo, RateModel, SearchResult, _Search,
    _below_ceiling, _jmax, _restored, _with_mps, capped, declines, lgrr_swell, mps_switched,
    set_mps, start_config, utilization)
from .gimbal_quiet import QUIET_CAP, REL, affine_slopes, charged_value, horizon
from .gimbal_sets import KeptSets
from .gimbal_steps import TimedSteps
from .gimbal_still import Still, plan_window
from .records import records_usable
from .plan import ResizeJob


class Walk:
    """The configurations Algorithm 1 visits from ``start`` with ``subset1`` squeezed and
    ``subset2`` swelled (module doc): ``head`` after line 5, ``swell`` = (attempt text, step
    times) when line 5 changed the start (an attempt), then ``steps`` = (configuration, attempt
    text, step times) of each ``generate``, extended on demand; ``end`` once ``generate`` has
    no new configuration after the last step.  Step times are tuples in ``order`` (the jobs'
    order of the search's ``infos``, the order :func:`local_objective` sums in)."""

    __slots__ = ("search", "start", "order", "subset1", "subset2", "head", "swell", "steps",
                 "end", "timed", "last", "switched")

    def __init__(self, search: _Search, start, subset1: list, subset2: list, lgrr: bool,
                 start_times: Optional[dict] = None):
        """``start_times``: ``search.model.times(search.infos, start)`` when the caller has
        it (:class:`KeptSearch` does), else computed here."""
        self.search, self.subset1, self.subset2 = search, subset1, subset2
        self.start = start
        self.order = tuple(search.infos)
        self.timed = timed = TimedSteps(search, start)
        ct = timed.times(start) if start_times is None else start_times
        cur = dict(start)
        self.swell = None
        if lgrr:  # line 5, as coordination_search applies it
            cur = search.set_mps(cur, [(j, i) for j in subset2 for i in range(len(cur[j]))],
                                 lgrr_swell)
            if cur != start:
                ct = timed.retime(cur, start, ct)
                self.swell = (f"swell({','.join(subset2)}) by LGRR", self._st(ct))
            # else: the same values as start's, the same times
        self.head = cur
        self.steps: list = []
        self.end = False
        self.last = ct  # the per-worker times of the walk's last configuration
        self.switched: dict = {}  # id(configuration) -> (it, switch_costs' flags)

    def switch_costs(self, cfg, cost: float) -> Optional[list]:
        """Seconds charged to each job (in ``order``) for the MPS switches from the walk's start
        to ``cfg``, one of its configurations (:func:`~policies.gimbal_coord.mps_switched`);
        None when none switches.  The flags are kept per configuration."""
        hit = self.switched.get(id(cfg))
        if hit is None or hit[0] is not cfg:
            sw = mps_switched(self.start, cfg)
            hit = self.switched[id(cfg)] = (cfg, tuple([j in sw for j in self.order]))
        flags = hit[1]
        return [cost if x else 0.0 for x in flags] if any(flags) else None

    def _st(self, ct) -> tuple:
        """Step times (each job's slowest worker, step_times) in ``order``."""
        return tuple([max(ct[j]) for j in self.order])

    def step(self, i: int):
        """The ``i``-th generated configuration (0-based) or None past the walk's end."""
        steps = self.steps
        while len(steps) <= i:
            if self.end:
                return None
            cur = steps[-1][0] if steps else self.head
            new, what, nt = self.timed.generate(cur, self.last, self.subset1)  # line 7
            if new is None or new == cur:
                self.end = True
                return None
            steps.append((new, what, self._st(nt)))
            self.last = nt
        return steps[i]


def objective_value(objective: str, rems, dls, sts, extra=None) -> float:
    """:func:`~policies.gimbal_coord.local_objective` on the jobs' remaining steps, deadline
    distances and step times given as sequences in the jobs' order: the same products,
    summed or compared in the same order (the same float); ``extra``: seconds added to each
    job's remaining time (a sequence in that order), as ``local_objective``'s."""
    if extra is not None:
        return charged_value(objective, rems, dls, sts, extra)
    if objective == "jct":
        return sum([r * t for r, t in zip(rems, sts)]) / len(sts)
    if objective == "deadline":
        return max(max(0.0, r * t - d) for r, t, d in zip(rems, sts, dls))
    if objective == "makespan":
        return max([r * t for r, t in zip(rems, sts)])
    raise ValueError(f"unknown objective {objective!r}")


def _declined(objective: str, rems, dls, walk: Walk, best, best_st, before: float,
              switch_cost: float) -> bool:
    """coordination_search's switching-cost test on the walk's best configuration ``best``
    (step times ``best_st``) against the walk's start (gimbal_coord's module doc)."""
    if not switch_cost > 0 or best is walk.start:
        return False
    extra = walk.switch_costs(best, switch_cost)
    return extra is not None and declines(
        before, objective_value(objective, rems, dls, best_st, extra))


def walk_search(objective: str, rems, dls, st0, walk: Walk, *, max_fails: int = MAX_FAILS,
                max_attempts: int = MAX_ATTEMPTS,
                switch_cost: float = 0.0) -> tuple[SearchResult, dict]:
    """:func:`~policies.gimbal_coord.coordination_search` along a kept walk: ``rems``,
    ``dls`` the jobs' remaining steps and deadline distances now (in the walk's ``order``),
    ``st0`` the start's step times.  Returns the result and the best configuration (the kept
    object, for per-configuration memos; the walk's start where the result is declined)."""
    before = objective_value(objective, rems, dls, st0)
    attempts: list[Attempt] = []
    best_v = before
    best_st = st0
    if walk.swell is not None:
        what, best_st = walk.swell
        best_v = objective_value(objective, rems, dls, best_st)
        attempts.append(Attempt(what, best_v, True))
    best = walk.head
    fails = 0
    exit_ = "limit"
    i = 0
    while len(attempts) < max_attempts:
        step = walk.step(i)
        if step is None:
            exit_ = "no-primitive"
            break
        new, what, st = step
        i += 1
        v = objective_value(objective, rems, dls, st)
        gain = v < best_v * (1 - 1e-9)
        attempts.append(Attempt(what, v, gain))
        if gain:
            best, best_v, best_st, fails = new, v, st, 0
        else:
            fails += 1
        if fails >= max_fails:
            exit_ = "early-exit"
            break
    declined = _declined(objective, rems, dls, walk, best, best_st, before, switch_cost)
    if declined:
        best, best_v = walk.start, before
    return SearchResult(dict(best), before, best_v, tuple(attempts), tuple(walk.subset2),
                        tuple(walk.subset1), exit_, declined), best


def walk_best(objective: str, rems, dls, st0, walk: Walk, max_fails: int = MAX_FAILS,
              max_attempts: int = MAX_ATTEMPTS,
              switch_cost: float = 0.0) -> tuple[dict, float, float]:
    """:func:`walk_search` without its audit trail: (best configuration, objective before,
    objective after), the same decisions on the same values (what the host policies read)."""
    before = best_v = objective_value(objective, rems, dls, st0)
    n = 0
    best_st = st0
    if walk.swell is not None:
        best_st = walk.swell[1]
        best_v = objective_value(objective, rems, dls, best_st)
        n = 1
    best = walk.head
    fails = 0
    i = 0
    steps = walk.steps
    while n < max_attempts:
        step = steps[i] if i < len(steps) else walk.step(i)
        if step is None:
            break
        i += 1
        n += 1
        v = objective_value(objective, rems, dls, step[2])
        if v < best_v * (1 - 1e-9):
            best, best_v, best_st, fails = step[0], v, step[2], 0
        else:
            fails += 1
        if fails >= max_fails:
            break
    if _declined(objective, rems, dls, walk, best, best_st, before, switch_cost):
        return walk.start, before, before
    return best, before, best_v


def remaining_steps(snap: ClusterSnapshot, job) -> float:
    """:func:`~policies.gimbal_coord.job_info`'s remaining steps."""
    rem = snap.remaining_iters(job)
    if rem is None:
        rt = snap.remaining_time(job)
        rem = rt / snap.exclusive_iter_time(job) if rt is not None else 1.0
    return rem


class KeptSearch:
    """:func:`~policies.gimbal_coord.coordination_search` from one start, kept across rounds:
    :meth:`run` with the set's jobs of the round gives the same SearchResult.  ``infos``: the
    jobs' records of any round (only their jobs and node counts are read here: the walk reads
    nothing else of them; later rounds list the same jobs in the same order), ``start``: the
    start configuration."""

    __slots__ = ("start", "jm", "order", "st0", "search", "lgrr", "walks", "subsets", "t0")

    def __init__(self, infos, start, model: RateModel, *, lgrr: bool = True, liss: bool = True,
                 straggler_tol: float = 0.05):
        self.start = start
        world = {j: len(start[j]) for j in infos}
        since = {j: infos[j].job.start_time or 0.0 for j in infos}
        self.jm = jm = _jmax(infos, world, since)  # line 1
        self.search = _Search(None, infos, model, jm, straggler_tol, lgrr, liss)
        self.order = order = tuple(infos)
        self.t0 = t0 = model.times(infos, start)  # step_times' per-worker times
        self.st0 = tuple([max(t0[j]) for j in order])
        # line 2, as positions in ``order``: subset1 = [J_max], subset2 = the rest by id
        self.subsets = ([order.index(jm)],
                        [order.index(j) for j in sorted(j for j in order if j != jm)])
        self.lgrr = lgrr
        self.walks: dict = {}  # the split (subsets swapped?) -> its Walk

    def split(self, objective: str, rems, dls, utils) -> bool:
        """Lines 3-4: whether the subsets swap (subset2's priority below subset1's), by
        ``prio`` of coordination_search on the start's step times: the mean importance
        (eq. 2: -utilization; eq. 4 negated: -(deadline distance - remaining time); eq. 6
        negated: the remaining time), summed in the subset's order."""
        st0 = self.st0
        if objective == "jct":
            def imp(i):
                return -utils[i]
        elif objective == "deadline":
            def imp(i):
                return -(dls[i] - rems[i] * st0[i])
        elif objective == "makespan":
            def imp(i):
                return -(-(rems[i] * st0[i]))
        else:
            raise ValueError(f"unknown objective {objective!r}")
        s1, s2 = self.subsets
        return sum(imp(i) for i in s2) / len(s2) < sum(imp(i) for i in s1) / len(s1)

    def walk(self, swap: bool) -> Walk:
        walk = self.walks.get(swap)
        if walk is None:
            jm = self.jm
            subset1, subset2 = [jm], sorted(j for j in self.order if j != jm)
            if swap:
                subset1, subset2 = subset2, subset1
            walk = self.walks[swap] = Walk(self.search, self.start, subset1, subset2, self.lgrr,
                                                self.t0)
        return walk

    def run_values(self, objective: str, rems, dls, utils,
                   switch_cost: float = 0.0) -> tuple[SearchResult, dict]:
        """The search on the jobs' remaining steps, deadline distances and utilisations (in
        ``order``): (result, the best configuration's kept object)."""
        walk = self.walk(self.split(objective, rems, dls, utils))
        return walk_search(objective, rems, dls, self.st0, walk, switch_cost=switch_cost)

    def run(self, objective: str, infos, switch_cost: float = 0.0) -> SearchResult:
        order = self.order
        return self.run_values(objective, [infos[j].remaining_steps for j in order],
                               [infos[j].deadline_left for j in order],
                               [infos[j].utilization for j in order], switch_cost)[0]


# kept searches of a CoordKept; emptied past it (a memo: only its size changes).  gavel+gimbal,
# 10k Philly jobs at 64x8: 65.6 CPU-s, 216 MB peak with 2048; 65.9 CPU-s, 293 MB with 8192
SEARCHES_CAP = 1 << 11


def search_key(static, start, lgrr: bool, liss: bool) -> tuple:
    """Everything a :class:`KeptSearch` (and its walks) reads besides the rate model: each
    job's id, application, GPU count, start time (J_max's tie break) and node count, in the
    set's order, the start configuration's worker records (every field: the walk's
    configurations carry them), and the ablations.  Two records with equal keys get equal
    walks, step times and splits (pure functions of these and of the model)."""
    return (tuple([(j.id, j.app, j.num_gpus, j.start_time, n) for j, _, n in static]),
            tuple(start.values()), lgrr, liss)


PER_ALLOC_CAP = 1 << 16


def job_static(memo: dict, snap: ClusterSnapshot, job) -> tuple:
    """(:func:`~policies.gimbal_coord.utilization`, :func:`~policies.gimbal_coord.start_config`)
    of a running job, memoised by its allocation's identity (``memo``: id -> (allocation,
    (application, GPU count, global batch), utilisation, start configuration)).  Both read
    only the allocation (a frozen record; kept alive by the memo, so its id is not reused),
    the job's application, GPU count and global batch, and the snapshot's profiles and
    predictors (the caller keeps ``memo`` only while those are the same objects)."""
    a = job.allocation
    jk = (job.app, job.num_gpus, job.global_batch)
    hit = memo.get(id(a))
    if hit is not None and hit[0] is a and hit[1] == jk:
        return hit[2], hit[3]
    util, act = utilization(snap, job), start_config(job)
    if len(memo) >= PER_ALLOC_CAP:
        memo.clear()
    memo[id(a)] = (a, jk, util, act)
    return util, act


class _SetRec:
    """What one packing set's coordination reads besides the clock (module doc)."""

    __slots__ = ("jobs", "lens", "static", "utils", "actual", "_make", "_kept", "_headv", "prog",
                 "quiet", "memo", "nodl")

    def __init__(self, snap: ClusterSnapshot, jobs: list, lens: tuple, model: RateModel,
                 lgrr: bool, liss: bool, searches: Optional[dict] = None,
                 per_alloc: Optional[dict] = None):
        """``searches``: KeptSearch objects by :func:`search_key`, ``per_alloc``: each job's
        utilisation and start configuration by :func:`job_static` (the caller's, kept across
        records with ``model`` and the snapshot's profiles and predictors), or None."""
        self.jobs, self.lens = tuple(jobs), lens
        static = []
        actual = {}
        for j in jobs:
            if per_alloc is None:
                util, act = utilization(snap, j), start_config(j)
            else:
                util, act = job_static(per_alloc, snap, j)
            static.append((j, util, j.allocation.num_nodes if j.allocation else 1))
            actual[j.id] = act
        self.static = tuple(static)
        self.utils = tuple(u for _, u, _ in static)
        # ClusterSnapshot.remaining_iters' inputs of each (running, known length) job: the
        # same arithmetic at each round without the calls; None: the calls
        self.prog = (tuple((j.total_iters, j.completed_iters, j.as_of, j.restore_left,
                            j.iter_rate) for j in jobs)
                     if all(j.running and j.total_iters is not None for j in jobs) else None)
        self.actual = actual
        # no member has a deadline: the "deadline" search's values are all 0.0 (no_deadline)
        self.nodl = all(j.deadline is None for j in jobs)
        gj = snap.gpu_jobs
        # a worker whose GPU holds only its own job has no partner to yield to: 100 % (or its
        # ceiling), as coordinate's plain path starts
        start = {jid: tuple(w if len(gj.get(w.gpu, ())) > 1
                            else _with_mps(w, capped(w, 100)) for w in ws)
                 for jid, ws in actual.items()}
        # the KeptSearch is found or made when first read (:attr:`kept`): a lean "deadline"
        # search of a set without deadlines reads only the walk's head (:meth:`_head`)
        self._make = (start, model, lgrr, liss, searches)
        self._kept: Optional[KeptSearch] = None
        self._headv = None
        self.memo: dict = {}  # id(best configuration) -> (configuration, its resizes)
        self.quiet = None  # (objective, from, until): no resizes in between (gimbal_quiet)

    @property
    def kept(self) -> KeptSearch:
        """The set's KeptSearch: the one kept by :func:`search_key`, else made (and kept)."""
        kept = self._kept
        if kept is None:
            start, model, lgrr, liss, searches = self._make
            key = None
            if searches is not None:
                key = search_key(self.static, start, lgrr, liss)
                kept = searches.get(key)
            if kept is None:
                infos = {j.id: JobInfo(j, 0.0, math.inf, u, n)  # walk fields only
                         for j, u, n in self.static}
                kept = KeptSearch(infos, start, model, lgrr=lgrr, liss=liss)
                if searches is not None:
                    if len(searches) >= SEARCHES_CAP:
                        searches.clear()
                    searches[key] = kept
            self._kept = kept
        return kept

    def _head(self) -> dict:
        """The head of the walk without a swap (``kept.walk(False).head``: line 5's swell of
        every worker of the jobs other than J_max, or the start without LGRR), computed
        without the KeptSearch while none is made: the head reads only the start, the
        ablation and J_max (:func:`~policies.gimbal_coord._jmax` on the start's world sizes
        and the jobs' start times, as KeptSearch finds it) -- no step time."""
        h = self._headv
        if h is None:
            if self._kept is not None:
                h = self._kept.walk(False).head
            else:
                start, _, lgrr, _, _ = self._make
                world = {j.id: len(start[j.id]) for j, _, _ in self.static}
                since = {j.id: j.start_time or 0.0 for j, _, _ in self.static}
                jm = _jmax(world, world, since)
                h = (set_mps(start, [(j, i) for j in sorted(world) if j != jm
                                     for i in range(len(start[j]))], lgrr_swell)
                     if lgrr else dict(start))
            self._headv = h
        return h

    def _rems(self, snap: ClusterSnapshot) -> list:
        """job_info's remaining steps of the members now."""
        if self.prog is not None and plain_progress(type(snap)):
            now = snap.now
            out = []
            for total, done, as_of, restore, rate in self.prog:  # ClusterSnapshot.completed
                dt = now - as_of
                if restore:
                    dt = max(0.0, dt - restore)
                out.append(max(0.0, total - (done + rate * dt)))
            return out
        ri = snap.remaining_iters
        out = []
        for j in self.jobs:
            r = ri(j)
            out.append(remaining_steps(snap, j) if r is None else r)
        return out

    def _resizes(self, best, res: Optional[SearchResult]) -> tuple:
        """The resizes of a result whose best configuration is ``best`` (kept per
        configuration: they are a function of it and of the record)."""
        memo = self.memo
        hit = memo.get(id(best))
        if hit is None or hit[0] is not best:
            resizes = []
            jobs = {j.id: j for j in self.jobs}
            for jid in sorted(best):  # SearchResult.changed
                ws = tuple(best[jid])
                if ws == tuple(self.actual[jid]):
                    continue
                mps = min(w.mps_pct for w in ws)
                resizes.append(ResizeJob(jid, tuple(w.gpu for w in ws),
                                         max(w.micro_batch for w in ws),
                                         max(w.accum_steps for w in ws), mps, ws,
                                         jobs[jid].allocation.global_batch))
            hit = memo[id(best)] = (best, tuple(resizes))
        return hit[1]

    def coordinate(self, snap: ClusterSnapshot, objective: str, full: bool = True,
                   switch_cost: float = 0.0):
        """``full``: (SearchResult, resizes); else (resizes, objective before, after);
        ``switch_cost``: coordination_search's."""
        if not full and objective == "deadline" and self.nodl:
            return self._no_deadline(snap.now)
        rems = self._rems(snap)
        dls = None
        if objective == "deadline":
            now = snap.now
            dls = [math.inf if j.deadline is None else j.deadline - now for j in self.jobs]
        kept = self.kept
        if full:
            res, best = kept.run_values(objective, rems, dls, self.utils, switch_cost)
            return res, self._resizes(best, res)
        walk = kept.walk(kept.split(objective, rems, dls, self.utils))
        best, before, after = walk_best(objective, rems, dls, kept.st0, walk,
                                        switch_cost=switch_cost)
        resizes = self._resizes(best, None)
        if not resizes and self.prog is not None and plain_progress(type(snap)):
            # how long the same decisions are sure to be taken (policies.gimbal_quiet)
            now = snap.now
            rates = [p[4] for p in self.prog]
            errs = [REL * (abs(total) + abs(done) + abs(rate * (now - as_of)) + 1.0)
                    for total, done, as_of, _, rate in self.prog]
            derr = 0.0
            if dls is not None:
                # deadline - τ for τ up to now + QUIET_CAP
                derr = REL * (abs(now) + QUIET_CAP + max(
                    (abs(j.deadline) for j in self.jobs if j.deadline is not None), default=0.0))
            h = min(horizon(objective, rems, dls, rates, errs, kept, walk, derr,
                            slopes=affine_slopes(self.prog, now, rems, errs),
                            switch_cost=switch_cost), QUIET_CAP)
            if h > 0.0:
                self.quiet = (objective, now, now + h)
        return resizes, before, after

    def _no_deadline(self, now: float) -> tuple:
        """The lean "deadline" search of a set none of whose members has a deadline, without
        its arithmetic: every deadline distance is inf, so every term max(0.0, r x t - inf) of
        :func:`objective_value` is 0.0 whatever r x t is (-inf, or nan from inf - inf, and
        max(0.0, nan) is 0.0), every value is 0.0 and no step gains (0.0 < 0.0 x (1 - 1e-9) is
        False): :func:`walk_best` returns (the walk's head, 0.0, 0.0).  The split is False
        (each importance -(inf - r x t) is -inf or nan, and neither -inf < -inf nor a nan
        comparison holds).  Nothing here reads the clock or the remaining steps, and the
        members' deadlines are in their views (kept with the record): a set with no resizes
        is quiet for as long as its record lives."""
        resizes = self._resizes(self._head(), None)
        if not resizes:
            self.quiet = ("deadline", now, math.inf)
        return resizes, 0.0, 0.0

    def quiet_at(self, objective: str, now: float) -> bool:
        """Whether the lean search is sure to find no resizes at ``now`` (gimbal_quiet)."""
        q = self.quiet
        return q is not None and q[0] == objective and q[1] <= now <= q[2]



class CoordKept:
    """GIMBAL's coordination state kept on a host policy across calls (module doc)."""

    def __init__(self):
        self.ctx: Optional[tuple] = None  # (profiles, interference, predictors, knobs)
        self.model: Optional[RateModel] = None
        self.sets = KeptSets()
        self.recs: dict = {}  # members -> _SetRec
        self.rec_of: dict = {}  # member id -> its record's key in ``recs``
        self.searches: dict = {}  # search_key -> KeptSearch, for self.model (search_key)
        self.per_alloc: dict = {}  # job_static's memo, for the context's profiles/predictors
        self.below = None  # (job log, ids of running jobs with a worker below its ceiling,
        #                     those jobs by (submit time, id))
        self.cands = None  # the last call's jobs to restore (before ``skip``)
        self.plan = None  # the last call's (set, record) pairs
        self.still = Still()  # the last pass's change logs and quiet window (gimbal_still)

    def _below(self, snap: ClusterSnapshot, usable: bool) -> tuple[list, bool]:
        """(The running jobs with a worker below its ceiling by (submit time, id), whether it
        is the last call's list: no job of it or entering it got a new view since).  Kept
        as (job log, ids, the list, its keys, each id's key): a job in the log since is
        taken out of the list and, below now, put in again with its new view where its key
        sorts (bisect on the kept keys: the place ``sort`` gives, ids being unique), so the
        list is the one the full pass sorts (submit times are finite; issue #13: the sort of
        every below-ceiling job at each resize at gavel+gimbal)."""
        jobs, jr = snap.jobs, snap.job_changes
        kept = self.below
        if usable and kept is not None and jr.log.extends(kept[0]):
            _, ids, out, keys, key_of = kept
            same = True
            for jid in set(jr.log[len(kept[0]):]):
                j = jobs.get(jid)
                now_below = j is not None and j.allocation is not None and j.running \
                    and _below_ceiling(j.allocation)
                if jid in ids:
                    i = bisect_left(keys, key_of.pop(jid))
                    del keys[i], out[i]
                    ids.discard(jid)
                    same = False
                if now_below:
                    k = (j.submit_time, jid)
                    i = bisect_left(keys, k)
                    keys.insert(i, k)
                    out.insert(i, j)
                    ids.add(jid)
                    key_of[jid] = k
                    same = False
            self.below = (jr.log, ids, out, keys, key_of)
            return out, same  # (the caller only reads the list, this call)
        ids = {j.id for j in jobs.values()
               if j.allocation is not None and j.running and _below_ceiling(j.allocation)}
        out = [jobs[j] for j in ids]
        out.sort(key=SUBMIT_ORDER)
        keys = [(j.submit_time, j.id) for j in out]
        self.below = (jr.log, ids, out, keys, {k[1]: k for k in keys}) if usable else None
        return out, False

    def _valid(self, snap: ClusterSnapshot, rec: _SetRec, members: tuple) -> bool:
        """Whether ``rec`` was made for these very member views on GPUs holding as many jobs."""
        jobs, gj = snap.jobs, snap.gpu_jobs
        js = [jobs[j] for j in members]
        return (all(a is b for a, b in zip(rec.jobs, js)) and rec.lens == tuple(
            len(gj.get(w.gpu, ())) for j in js for w in j.allocation.workers))

    def _record(self, snap: ClusterSnapshot, members: tuple, lgrr, liss) -> Optional[_SetRec]:
        """The set's record (made now if none is kept), None when a member's application has
        no throughput profile (the set is left alone, as the plain path does)."""
        rec = self.recs.get(members)
        if rec is not None:
            return rec
        js = [snap.jobs[j] for j in members]
        if any(j.app not in snap.profiles for j in js):
            return None
        gj = snap.gpu_jobs
        lens = tuple(len(gj.get(w.gpu, ())) for j in js for w in j.allocation.workers)
        rec = self.recs[members] = _SetRec(snap, js, lens, self.model, lgrr, liss,
                                           self.searches, self.per_alloc)
        for m in members:
            self.rec_of[m] = members
        return rec

    def coordinate(self, snap: ClusterSnapshot, objective: str, *, lgrr: bool = True,
                   liss: bool = True, skip: Iterable[str] = (),
                   switch_cost: float = 0.0) -> tuple[Coordination, ...]:
        """:func:`policies.gimbal_coord.coordinate`'s answer (module doc)."""
        return tuple(self._run(snap, objective, lgrr, liss, skip, True, switch_cost))

    def resizes(self, snap: ClusterSnapshot, objective: str, *, lgrr: bool = True,
                liss: bool = True, skip: Iterable[str] = (),
                switch_cost: float = 0.0) -> list[tuple]:
        """What a host reads of :meth:`coordinate`'s answer: (J_max, objective before,
        objective after, resizes) of each record with resizes, in its order; the searches
        without their audit trail (:func:`walk_best`)."""
        return [r for r in self._run(snap, objective, lgrr, liss, skip, False, switch_cost)
                if r[3]]

    def quiet_until(self, snap: ClusterSnapshot) -> float:
        """Asked after a :meth:`resizes` call on ``snap`` that gave none, by a host whose call
        started nothing (so nothing was skipped): the latest time up to which such a call
        gives none again while the change records get no entry.  Then :meth:`_run` takes
        the kept candidates (none: each would be restored) and, within
        :attr:`Still.window <policies.gimbal_still.Still.window>`, passes the plan over.
        ``-math.inf`` when the records are not usable, a candidate is kept, or the window
        does not hold ``snap.now``."""
        still = self.still
        if self.cands or not still.unchanged(snap, records_usable(snap)):
            return -math.inf
        w = still.window
        if w is None or not w[0] <= snap.now <= w[1]:
            return -math.inf
        return w[1]

    def _run(self, snap, objective, lgrr, liss, skip, full, switch_cost=0.0):
        c = self.ctx
        if c is None or c[0] is not snap.profiles or c[1] is not snap.interference \
                or c[2] is not snap.predictors or c[3:] != (objective, lgrr, liss, switch_cost):
            self.ctx = (snap.profiles, snap.interference, snap.predictors, objective, lgrr, liss,
                        switch_cost)
            self.model, self.recs = RateModel(snap.profiles, snap.interference), {}
            self.rec_of = {}  # member id -> its record's key in ``recs``
            self.searches, self.per_alloc = {}, {}
            self.sets, self.below, self.cands, self.plan = KeptSets(), None, None, None
            self.still = Still()
        usable = records_usable(snap)
        skip = set(skip)
        out = []
        now = snap.now
        still = self.still
        if still.unchanged(snap, usable):
            # nothing changed since the last full pass: its candidates and plan
            # (policies.gimbal_still); every record quiet now: the plan is passed over
            cands = self.cands
            plan = None if not full and still.quiet(now) else self.plan
        else:
            cands, plan = self._pass(snap, lgrr, liss, usable)
            still.logs = (snap.gpu_changes.log, snap.job_changes.log) if usable else None
        for job in cands:
            if job.id in skip:
                continue
            new = _restored(job.allocation.workers, job.allocation.global_batch or job.global_batch)
            rz = (ResizeJob(job.id, tuple(w.gpu for w in new), max(w.micro_batch for w in new),
                            max(w.accum_steps for w in new), min(w.mps_pct for w in new), new,
                            job.allocation.global_batch),)
            if full:
                none = Attempt("restore: no partner left", 0.0, True)
                res = SearchResult({job.id: new}, 0.0, 0.0, (none,), (job.id,), (),
                                   "no-primitive")
                out.append(Coordination(job.id, (job.id,), res, rz))
            else:
                out.append((job.id, 0.0, 0.0, rz))
        if plan is None:
            return out
        for ps, rec in plan:
            if rec is None:
                continue
            if skip and not skip.isdisjoint(ps.members):
                continue
            if full:
                res, resizes = rec.coordinate(snap, objective, True, switch_cost)
                out.append(Coordination(ps.jmax, ps.members, res, resizes))
            else:
                q = rec.quiet
                if q is not None and q[1] <= now <= q[2] and q[0] == objective:
                    continue  # no resizes: nothing the host reads (rec.quiet_at)
                resizes, before, after = rec.coordinate(snap, objective, False, switch_cost)
                out.append((ps.jmax, before, after, resizes))
        # a record's quiet window changes only in a pass over the plan
        still.window = None if full else plan_window(plan, objective)
        return out

    def _pass(self, snap, lgrr, liss, usable) -> tuple[list, list]:
        """(The jobs to restore, the (set, record) pairs), brought up to date from the
        change records (or built without them)."""
        sets, same = self.sets.update(snap)
        if not same:  # a record is kept only for a set still there, made for what it sees now
            # (one no member of which the sets looked at again is: module doc)
            recs, touched = self.recs, self.sets.touched
            if touched is None:
                self.recs = {ps.members: recs[ps.members] for ps in sets if ps.members in recs
                             and self._valid(snap, recs[ps.members], ps.members)}
                self.rec_of = {m: k for k in self.recs for m in k}
            else:  # only a record with a member looked at again can be gone or stale
                rec_of, set_of = self.rec_of, self.sets.set_of
                for key in {rec_of[j] for j in touched if j in rec_of}:
                    ps = set_of(key[0])
                    if ps is None or ps.members != key or not self._valid(snap, recs[key], key):
                        del recs[key]
                        for m in key:
                            del rec_of[m]
        below, bsame = self._below(snap, usable)
        if same and bsame and self.cands is not None:
            cands = self.cands  # the same below-ceiling views, sets and GPU map
        else:
            set_of = self.sets.set_of
            gj = snap.gpu_jobs
            cands = [job for job in below if set_of(job.id) is None and all(
                gj.get(g, ()) == (job.id,) for g in job.allocation.gpus)]
        self.cands = cands if usable else None
        if same and self.plan is not None:
            plan = self.plan
        else:
            recs, plan = self.recs, []
            for ps in sets:
                rec = recs.get(ps.members)
                plan.append((ps, rec if rec is not None
                             else self._record(snap, ps.members, lgrr, liss)))
        self.plan = plan if usable else None
        return cands, plan
