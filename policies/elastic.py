"""Shared machinery of the elastic-share policies (seed 001, Hwang et al. NSDI'21).

An elastic policy decides a GPU *count* per job (its share); this module turns
counts into a Plan:

* :class:`Rates` — throughput of a job on any GPU count (iterations/s), from the
  fitted model (seed 000 eq. 7 with the accumulation the plan will use, nodes =
  ``ceil(k / GPUs per node)`` as network packing places them), or, for a job whose
  application has no profile, the *overestimate-first* rule of seed 001 §4.5:
  measured rates where the launcher reported them, linear scaling from the last
  measured count above it, and linear scaling from "1 unit at 1 GPU" before any
  measurement (optimistic), with the initial share capped at the fair share.
* :func:`~policies.elastic_packing.packing_shares` / :func:`regulate` — network packing
  (§4.4, Appendix E): a share must be a power of two dividing the GPUs per node, or a
  multiple of the GPUs per node (``1/2/4n`` on 4-GPU nodes).  Shares are first rounded down to the
  largest allowed value (Appendix E's ``x_i``), then the GPUs this frees are given
  back by Appendix E's two moves (double a sub-node share, add a whole node to a
  multi-node share), largest deficit ``s_i - r_i`` first, so the total is kept
  (Proposition 2) and the result stays closest to the algorithm's shares.  The plan
  walks the same moves by classes of jobs kept across calls where the snapshot has a
  change record (:mod:`policies.elastic_regulate`).
* :func:`~policies.elastic_place.place` — GPU placement (§4.4): multi-node shares take
  whole nodes, then sub-node shares first-fit-decreasing (never fails, Proposition 1);
  running jobs keep their GPUs and others go where no running job is expected to stay,
  so a job migrates only where the greedy rule finds no room beside the others
  (:mod:`policies.elastic_place`).
* :func:`elastic_plan` — Start / Resize / Preempt actions and one reason per job.

Every job is elastic, as CoDDL makes every job (§4: it parallelizes any job over the
share it is given, and gimbal-run keeps the global batch exact on any count); a job's
``gpu_range``, when set, bounds its share (a share above it is cut to the largest
allowed value inside it, a share below it becomes 0).

Choices where the paper is open (ours): GPU counts per node are taken as the
largest node's count; on nodes whose count is not a power of two, the sub-node
shares are the powers of two dividing it (they still divide each other, so
Proposition 1's first-fit-decreasing argument holds).
"""
from __future__ import annotations

import heapq
import math
from itertools import compress
from operator import ne
from types import MappingProxyType
from typing import Callable, Mapping, Optional

from .base import exclusive_config
from .elastic_kept import kept_jobs
from .elastic_packing import allowed, round_down
from .elastic_packing import next_up as _next_up
from .elastic_place import place
from .elastic_regulate import kept_classes
from .elastic_reduced import place_reduced
from .model import ClusterSnapshot, Job, JobState
from .plan import Plan, PreemptJob, ReasonCode, ResizeJob, make_plan, reason, start_job

MEASURED_RATES = "measured_rates"  # predictors key: job id -> {gpus: iterations/s}
UNPROFILED = "unprofiled"  # predictors key: ids of jobs whose app has no fitted profile
_MEMO: dict = {}


def _model_rate(prof, batch: int, k: int, per_node: int, accum: int) -> float:
    nodes = -(-k // max(per_node, 1))
    return 1.0 / prof.iter_time(batch / k, k, nodes, accum)


class Rates:
    """``rate(job, k)``: iterations/s of ``job`` on ``k`` GPUs (0 for ``k <= 0``)."""

    def __init__(self, snap: ClusterSnapshot):
        self.snap = snap
        self.per_node = snap.max_gpus_per_node or 1
        self.measured: Mapping[str, Mapping[int, float]] = snap.predictors.get(MEASURED_RATES, {})
        self.unprofiled = frozenset(snap.predictors.get(UNPROFILED, ()))
        self.profiles = snap.profiles
        self.total_gpus = snap.total_gpus
        # model rates are pure functions of (profiles, memory, node size): reuse them across
        # calls while the snapshot carries the same objects (the simulator's do)
        mem = snap.min_gpu_mem_mb  # (memoised per node tuple; None: no node)
        key = (id(snap.profiles), id(snap.memory), self.per_node, 0 if mem is None else mem)
        hit = _MEMO.get("rates")
        if hit is None or hit[0] != key or hit[1] is not snap.profiles or hit[2] is not snap.memory:
            hit = (key, snap.profiles, snap.memory, {}, {}, {}, {}, {})
            _MEMO["rates"] = hit
        self._accum: dict[tuple, tuple[int, int]] = hit[3]
        self._rate: dict[tuple, float] = hit[4]
        # (app, global batch) -> [k, done]: one more GPU helps a profiled job of them at
        # every count below k; done: it does not at k (policies.max_min's demands)
        self.useful_upto: dict[tuple, list] = hit[5]
        # (app, global batch, k) -> useful_share of a profiled job of them at k
        self._useful: dict[tuple, bool] = hit[6]
        # a policy's own memos of pure functions of the model rates (e.g. Themis' peak
        # count), kept as long as the rates are: name -> that policy's dict
        self.kept: dict[str, dict] = hit[7]

    def config(self, job: Job, k: int) -> tuple[int, int]:
        """(sub_batch, accum_steps) of ``job`` on ``k`` GPUs."""
        key = (job.app, job.global_batch, k)
        c = self._accum.get(key)
        if c is None:
            c = self._accum[key] = exclusive_config(self.snap, job, num_gpus=k)
        return c

    def profiled(self, job: Job) -> bool:
        return job.id not in self.unprofiled and job.app in self.profiles

    def rate(self, job: Job, k: int) -> float:
        if k <= 0:
            return 0.0
        if job.id not in self.unprofiled and job.app in self.profiles:  # profiled(job)
            key = (job.app, job.global_batch, k)
            r = self._rate.get(key)
            if r is None:
                r = self._rate[key] = _model_rate(self.profiles[job.app], job.global_batch,
                                                  k, self.per_node, self.config(job, k)[1])
            return r
        return self.optimistic(job, k)

    def optimistic(self, job: Job, k: int) -> float:
        """§4.5: measured where known; else linear from the largest measured count below
        ``k`` (or the smallest above); with nothing measured, ``k`` (linear, unitless)."""
        pts = dict(self.measured.get(job.id, {}))
        if job.running and job.iter_rate > 0 and job.allocation is not None:
            pts.setdefault(len(job.allocation.gpus), job.iter_rate)
        if k in pts:
            return float(pts[k])
        below = [c for c in pts if c < k]
        if below:
            c = max(below)
            return pts[c] * k / c
        if pts:
            c = min(pts)
            return pts[c] * k / c
        return float(k)

    def remaining_iters(self, job: Job) -> Optional[float]:
        """Known remaining iterations, else the estimate from the user's duration
        estimate (converted at the job's requested GPU count), else ``None``."""
        rem = self.snap.remaining_iters(job)
        if rem is not None:
            return rem
        if job.duration_estimate is not None:
            left = max(0.0, job.duration_estimate - self.snap.executed_time(job))
            return left * self.rate(job, job.num_gpus)
        return None

    def cap(self, job: Job, n_jobs: int) -> int:
        """Largest share a job may get: the top of its ``gpu_range`` (else the cluster);
        for a job with neither a profile nor a measured rate, at most its fair share
        ``max(1, M // n)`` (§4.5 "initial share within 1/n")."""
        M = self.total_gpus
        top = min(M, job.gpu_range[1]) if job.gpu_range is not None else M
        if self.profiled(job) or self.measured.get(job.id) or (job.running and job.iter_rate > 0):
            return top
        return min(top, max(1, M // max(n_jobs, 1)))


# ---------------------------------------------------------------- network packing
def regulate(shares: Mapping[str, int], per_node: int, total: int,
             useful: Callable[[str, int], bool] = lambda j, k: True) -> dict[str, int]:
    """Network-packing regulation of ``shares`` (Appendix E, Proposition 2).

    Every share becomes allowed and the sum is kept when the moves allow it.  Freed GPUs
    go to the job with the largest deficit ``s_i - r_i`` whose next allowed share fits in
    what is left (ties: the order of ``shares``, i.e. the policy's priority order); a job
    whose next share would exceed what it was given only gets it if ``useful(job, new)``
    (its throughput rises), else the GPUs stay idle.

    The jobs wait in a heap by that key (``-deficit``, rank); a job is looked at when it is
    the heap's top.  One that is not eligible then never becomes so while it is not moved:
    the GPUs left ``d`` only shrink, and its step ``up - r`` and ``useful(job, up)`` depend
    on its own share only; so it is dropped, and the top that is eligible is the
    minimum the scan over all jobs finds (tests/policies/test_afs_handout_differential.py
    against the scan kept in reference_afs_handout.py).
    """
    down = {s: round_down(s, per_node) for s in set(shares.values())}
    out = {j: down[s] for j, s in shares.items()}
    d = min(sum(shares.values()), total) - sum(out.values())
    if d <= 0:
        return out
    # the next allowed share above each share there is (a job whose step up is more than
    # the d GPUs left now never gets one: d only shrinks; it is left out of the heap, where
    # it would only be dropped when it came to the top)
    nxt = {r: _next_up(r, per_node) for r in set(out.values()) if r != 0}
    step = {r: (d + 1 if up is None else up - r) for r, up in nxt.items()}
    heap = [(r - shares[j], i, j) for i, (j, r) in enumerate(out.items())
            if r != 0 and step[r] <= d]
    heapq.heapify(heap)
    while d > 0 and heap:
        _, i, j = heap[0]
        r = out[j]
        up = nxt.get(r)
        if up is None:
            up = nxt[r] = _next_up(r, per_node)
        if up is None or up - r > d or (shares[j] - r <= 0 and not useful(j, up)):
            heapq.heappop(heap)
            continue
        d -= up - r
        out[j] = up
        heapq.heapreplace(heap, (up - shares[j], i, j))
    return out


# ---------------------------------------------------------------- plan
_NO_NUMBERS: Mapping[str, float] = MappingProxyType({})
_WAIT_TEXT = "its share is 0 GPUs (higher-priority jobs hold them)"


def no_numbers(job: Job) -> Mapping[str, float]:
    """The ``numbers`` of a policy that reports none (one shared empty mapping)."""
    return _NO_NUMBERS


def elastic_plan(snap: ClusterSnapshot, policy: str, shares: Mapping[str, int], rates: Rates,
                 order: list[str], numbers: Callable[[Job], Mapping] = no_numbers,
                 packing: bool = True) -> Plan:
    """Plan that gives every job in ``shares`` its share (0 = wait / pre-empt).

    ``order`` is the policy's priority order (the waiting jobs' queue order comes from
    it).  With ``packing`` the shares are regulated by network packing first.

    ``numbers(job)`` gives a job's explain numbers; it may return the *same* mapping
    for several jobs (and must then not change it): the waiting jobs that get no GPU
    and return the same mapping with the same decided share share one
    :class:`~policies.plan.Reason` object, so a queue of hundreds of jobs costs one
    dictionary entry per job rather than one Reason each (the Plan is the one the
    per-job construction gives: tests/policies/test_afs_speed_differential.py).
    """
    per_node = snap.max_gpus_per_node or 1
    total = snap.total_gpus
    # (a C-level copy where every share is positive: Max-Min's and Themis's kept demands)
    whole = bool(shares) and min(shares.values()) > 0
    positive = dict(shares) if whole else {j: s for j, s in shares.items() if s > 0}
    jobs = snap.jobs
    # the classes of the regulation's walk, kept across calls (policies.elastic_regulate)
    cls = kept_classes(policy, snap, (rates.profiles, snap.predictors.get(UNPROFILED)),
                       positive, per_node, _class_of(jobs, rates),
                       # (kept demands: what changed since the last call's)
                       getattr(shares, "delta", None) if whole else None) if packing else None

    def useful(j: str, k: int) -> bool:
        # a function of (share, application, global batch, k) for a profiled job: the
        # classes' contract
        return rates.rate(jobs[j], k) > rates.rate(jobs[j], shares[j]) * (1 + 1e-9)
    # (each test once per distinct share)
    if packing and any(not allowed(s, per_node)
                       for s in (set(positive.values()) if cls is None else cls.shares_seen())):
        positive = (regulate(positive, per_node, total, useful) if cls is None
                    else cls.regulate(total, useful))
    cut = False
    for jid in ([j for j in positive if jobs[j].gpu_range is not None] if cls is None
                else list(cls.ranged)):
        # a job's own GPU range bounds its share
        r = positive[jid]
        rng = jobs[jid].gpu_range
        if not rng[0] <= r <= rng[1]:
            r = round_down(min(r, rng[1]), per_node) if packing else min(r, rng[1])
            positive[jid] = r if r >= rng[0] else 0
            cut = cut or positive[jid] <= 0
    if cut:
        positive = {j: r for j, r in positive.items() if r > 0}
    accum = rates._accum
    # the jobs the last calls kept, kept again at the same share (policies.elastic_kept)
    kp = kept_jobs(policy, packing, snap, accum)
    if kp is not None:
        ks = kp.share
        if ks and not ks.items() <= positive.items():
            # (the kept jobs not in ``positive`` at their kept share; C-level passes)
            for jid in list(compress(ks, map(ne, map(positive.get, ks), ks.values()))):
                kp.drop(jid)
        newly: Optional[list] = []
        placed = place_reduced(snap, positive, kp, newly)
        if placed is None:  # the whole rule: it may move a kept job
            kp.empty()
            newly = None
            placed = place(snap, positive, reduced=False)
        ks = kp.share
    else:
        placed = place(snap, positive)
        ks = _NO_NUMBERS
    actions: list = []
    reasons: dict = {}
    waiting: list[str] = []
    running_state = JobState.RUNNING
    # (id of a numbers mapping, decided share) -> (that mapping, its WAIT_RESOURCES reason);
    # the mapping is held, so its id names it for the whole call
    idle: dict = {}
    for jid in order:
        if jid in ks:  # kept: KEEP_RUNNING below, with no action
            continue
        job = jobs[jid]
        gpus = placed.get(jid)
        if not gpus and job.state is not running_state:
            waiting.append(jid)
            base = numbers(job)
            decided = float(shares.get(jid, 0))
            key = (id(base), decided)
            hit = idle.get(key)
            if hit is None or hit[0] is not base:
                hit = idle[key] = (base, reason(ReasonCode.WAIT_RESOURCES, _WAIT_TEXT,
                                                **dict(base, share=0.0, decided_share=decided)))
            reasons[jid] = hit[1]
            continue
        if not gpus:
            actions.append(PreemptJob(jid))
            reasons[jid] = reason(ReasonCode.PREEMPTED, "its share is 0 GPUs",
                                  **dict(numbers(job), share=0.0,
                                         decided_share=float(shares.get(jid, 0))))
            continue
        c = accum.get((job.app, job.global_batch, len(gpus)))  # Rates.config's memo
        b, s = c if c is not None else rates.config(job, len(gpus))
        if job.state is running_state:
            alloc = job.allocation
            old = alloc.gpus
            if (old is gpus or old == gpus or set(old) == set(gpus)) \
                    and alloc.sub_batch == b and alloc.accum_steps == s:
                # KEEP_RUNNING below: its numbers are asked for there, once (every
                # ``numbers`` is pure, so when it is asked does not matter)
                continue
        nums = dict(numbers(job), share=float(len(gpus)),
                    decided_share=float(shares.get(jid, 0)))
        if job.running:
            moved = not (set(old) & set(gpus))
            actions.append(ResizeJob(jid, gpus, b, s))
            reasons[jid] = reason(ReasonCode.RESIZED,
                                  f"share {len(old)} -> {len(gpus)} GPUs"
                                  + (" (migrated: no old GPU kept)" if moved else ""),
                                  **nums, migrated=float(moved))
        else:
            actions.append(start_job(jid, gpus, b, s))
            code = ReasonCode.RESUMED if job.preemptions else ReasonCode.STARTED
            reasons[jid] = reason(code, f"share {len(gpus)} GPUs", **nums)
    if kp is not None and newly:  # the jobs the shortcut kept and that got no action
        for jid, kind in newly:
            if jid not in reasons:
                kp.add(jid, positive[jid], kind)
    # the running jobs that keep their GPUs as they are (and running jobs not in ``order``):
    # KEEP_RUNNING with their numbers, given lazily (a segment of the Plan's Reasons, made
    # on the first lookup of such a job: the simulator never asks) — the numbers functions
    # are pure and read only this call's values, so asking later gives the same numbers.
    # (id of a numbers mapping, share, decided share) -> (that mapping, its reason): one
    # immutable KEEP_RUNNING reason for the kept jobs with the same three, in the
    # snapshot's order
    def kept_ids() -> list:
        return [jid for jid, job in jobs.items()
                if job.state is running_state and jid not in reasons]

    kept: dict = {}

    def kept_reason(jid: str):
        job = jobs[jid]
        base = numbers(job)
        n = len(job.allocation.gpus)
        decided = float(shares.get(jid, 0))
        key = (id(base), n, decided)
        hit = kept.get(key)
        if hit is None or hit[0] is not base:
            hit = kept[key] = (base, reason(ReasonCode.KEEP_RUNNING,
                                            f"keeps its share of {n} GPUs",
                                            **base, share=float(n), decided_share=decided))
        return hit[1]
    return make_plan(policy, actions, waiting, reasons, shared=[(kept_ids, kept_reason)])


def _class_of(jobs, rates: Rates) -> Callable[[str], tuple]:
    """``(u, has a GPU range)`` of a job, for :mod:`policies.elastic_regulate`: ``u`` its
    (application, global batch) when profiled (the model's rates are a function of those),
    else its id (a class of its own)."""
    unprofiled, profiles = rates.unprofiled, rates.profiles

    def of(jid: str) -> tuple:
        job = jobs[jid]
        u = (job.app, job.global_batch) if jid not in unprofiled and job.app in profiles else jid
        return u, job.gpu_range is not None
    return of


def useful_share(rates: Rates, job: Job, k: int) -> bool:
    """True when one more GPU raises ``job``'s throughput (Appendix B: the regime where
    an extra GPU helps); a job never gets a GPU that adds nothing.  For a profiled job
    the answer depends on (application, global batch, k) only: memoised with the rates."""
    if job.id not in rates.unprofiled and job.app in rates.profiles:  # rates.profiled(job)
        key = (job.app, job.global_batch, k)
        u = rates._useful.get(key)
        if u is None:
            u = rates._useful[key] = rates.rate(job, k + 1) > rates.rate(job, k) * (1 + 1e-9)
        return u
    return rates.rate(job, k + 1) > rates.rate(job, k) * (1 + 1e-9)


def fair_count(n: int, total: int) -> int:
    return max(1, math.floor(total / max(n, 1)))
