"""AFS-P: Apathetic Future Share without job lengths (seed 001 §3.3).

* **At most M jobs** (M = GPUs): the counters are ignored and the shares come from
  the length-unaware ``TOPPRIORITY`` (:func:`policies.afs_core.afs_p_shares`):
  inequality (3) is evaluated both ways — (``j_a`` = j*, ``j_b`` = j) and
  (``j_a`` = j, ``j_b`` = j*); if it holds in either, that ``j_b`` wins; if in
  neither, a reproducible coin (seeded by the snapshot seed and the two ids) picks.
  Every job gets one GPU first (a job at count 0 has left side 1 in (3)).
* **More than M jobs** (stage one only): processor sharing.  Each job's counter is the
  number of whole units of time it has executed (``floor(executed / unit_s)``); one
  GPU per job in increasing counter order (ties: submit order), *non-preemptive*: a
  running job keeps its GPU until it completes its current unit (it is "evicted" when
  its counter goes up, which makes it compete again).  A running job that held more
  GPUs from an earlier stage two keeps running on one.

Unit time (footnote 11): 2 hours for full-scale traces, to be scaled with the
workload; ``unit_s`` sets it (bench/repro_afs.py scales it for the Pollux workloads
and states how).  A unit boundary is detected exactly when the job's record was
last updated before it (the simulator's ``as_of``), else when the executed time is
within ``window_s`` (60 s, the scheduling tick) past a multiple of the unit (the live
daemon rebuilds records every cycle).

Throughput, network packing, placement and the ``explain`` numbers are as in AFS-L
(:mod:`policies.afs_l`), plus ``counter`` for each job.
"""
from __future__ import annotations


from .afs_core import INF, afs_p_shares, pick_order
from .afs_l import _one_gpu_first, candidates, numbers_from, numbers_of
from .base import Policy
from .elastic import Rates, elastic_plan
from .max_min import _demand
from .max_min_kept import KeptDemands
from .model import SUBMIT_ORDER
from .registry import register


@register("afs-p")
class AfsP(Policy):
    """AFS-P: length-unaware AFS (3) both ways, processor sharing beyond M jobs (seed 001)."""

    preemptive = True
    elastic = True
    window_s = 60.0  # the simulator's tick while jobs wait (see unit_done)

    def __init__(self, unit_s: float = 7200.0, packing: bool = True):
        if not unit_s > 0:
            raise ValueError(f"afs-p unit_s must be positive, got {unit_s}")
        self.unit_s = float(unit_s)
        self.packing = bool(packing)
        self._kept = KeptDemands(_demand, also=_one_gpu_first)

    def counter(self, snap, job) -> int:
        return int(snap.executed_time(job) // self.unit_s)

    def unit_done(self, snap, job) -> bool:
        """A running job has finished a unit since it was last (re)started or looked at."""
        e_now = snap.executed_time(job)
        if int(e_now // self.unit_s) > int(job.executed_time // self.unit_s):
            return True
        return e_now >= self.unit_s and (e_now % self.unit_s) < self.window_s

    def schedule(self, snap):
        rates = Rates(snap)
        kept = self._kept.shares(snap, rates)
        if kept is not None:
            return self._uncontended_plan(snap, rates, kept)
        jobs = sorted(snap.jobs.values(), key=SUBMIT_ORDER)
        M = snap.total_gpus
        if len(jobs) > M:
            return self._sharing(snap, rates, jobs, M)
        cands = candidates(snap, rates, jobs, lambda j: INF)
        afs_p_shares(cands, M, snap.seed)
        shares = {c.id: c.cnt for c in pick_order(cands)}
        return elastic_plan(snap, self.name, shares, rates, list(shares),
                            self._with_counter(snap, numbers_of({c.id: c for c in cands})),
                            packing=self.packing)

    def _with_counter(self, snap, base):
        """``numbers(job)``: ``base(job)`` and the job's counter."""
        shown: dict = {}  # (id of a base mapping, counter) -> (that mapping, the numbers)

        def numbers(job):
            # jobs with the same base mapping and counter share one mapping (elastic_plan
            # then gives those with the same share one Reason); the base is held, so its id
            # names it for the call
            b = base(job)
            c = float(self.counter(snap, job))
            hit = shown.get((id(b), c))
            if hit is None or hit[0] is not b:
                hit = shown[(id(b), c)] = (b, dict(b, counter=c))
            return hit[1]
        return numbers

    def _uncontended_plan(self, snap, rates: Rates, shares: dict):
        """The Plan where every job's count is its demand (:class:`~policies.max_min_kept.
        KeptDemands`: at most M jobs, all profiled, none that a second GPU at least doubles,
        demands summing to at most M): :func:`~policies.afs_core.afs_p_shares`'s answer.
        Every job then gets one GPU in submit order (the pick order), and the hand-out ends
        with every job at its stop (:func:`~policies.afs_core._to_stops`): the first count
        at which one more GPU is not useful or its cap, which is the demand
        (:func:`policies.max_min._demand`, the same test on the same rates).  Its numbers
        are (3)'s sides at that count and its counter, made when asked for
        (tests/policies/test_max_min_kept.py against the full path at every call of whole
        simulations)."""
        rate = rates.rate

        def facts(job):
            k = shares[job.id]
            return rate(job, k), rate(job, k + 1), None
        return elastic_plan(snap, self.name, shares, rates, list(shares),
                            self._with_counter(snap, numbers_from(facts)),
                            packing=self.packing)

    def _sharing(self, snap, rates, jobs, M):
        """Processor sharing beyond M jobs: one GPU each to the running jobs inside their
        unit, then to the others by (counter, submit time, id).

        A call costs a few dictionary look-ups per queued job: each counter is computed
        once, and the explain numbers (ineq. (3) sides at the job's count 0 or 1, and its
        counter) are one shared mapping per distinct (p, p', counter), which
        :func:`~policies.elastic.elastic_plan` turns into one shared Reason for the
        waiting jobs (the Plan is the one a Cand per job gives:
        tests/policies/test_afs_speed_differential.py)."""
        unit = self.unit_s
        counter = {j.id: int(snap.executed_time(j) // unit) for j in jobs}
        keep = [j for j in jobs if j.running and not self.unit_done(snap, j)]
        keep_ids = {j.id for j in keep}
        rest = sorted((j for j in jobs if j.id not in keep_ids),
                      key=lambda j: (counter[j.id], j.submit_time, j.id))
        chosen = keep[:M] + rest[:max(0, M - len(keep))]
        shares = {j.id: 1 for j in chosen}
        shares.update({j.id: 0 for j in jobs if j.id not in shares})
        memo: dict = {}
        rate = rates.rate

        def numbers(job):
            # numbers_of() for a job at count ``cnt`` (0 or 1), length unknown, + counter
            cnt = shares[job.id]
            p, p1 = rate(job, cnt), rate(job, cnt + 1)
            c = counter[job.id]
            key = (p, p1, c)
            d = memo.get(key)
            if d is None:
                d = memo[key] = {"ineq3_left": (p1 - p) / p1 if p1 > 0 else 0.0,
                                 "ineq3_right": (p1 - p) / p if p > 0 else INF,
                                 "counter": float(c)}
            return d
        return elastic_plan(snap, self.name, shares, rates, list(shares), numbers,
                            packing=self.packing)
