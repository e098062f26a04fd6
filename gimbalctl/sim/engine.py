"""Event-driven simulator: applies a policy's Plans to a modelled cluster.

Events are job arrivals, job completions, scheduling ticks and rounds.  The
policy is called (with a fresh :class:`~policies.model.ClusterSnapshot`) after
every arrival or completion, every ``interval`` seconds while jobs wait, and
every ``Policy.round_length`` seconds while any job is active (round-based
policies); its Plan is validated and applied.  A policy with ``rounds_only``
(seed 002's rounds, Gavel's mechanism) is called only at multiples of its round
length, never at arrivals or completions.  A call's snapshot says whether it is a round
(``ClusterSnapshot.round_call``: a round event is among its events; always for a policy
without rounds), so a policy that acts on a monitoring period (GIMBAL's coordination) acts
at the rounds only, as it does at the daemon's cycles.  A tick or round at which nothing changed
since a call that made no action is answered with no action, without a call, up to the
time ``Policy.quiet_until`` gave after that call (``math.inf`` for a policy declaring
``Policy.tick_invariant``, whose Plan does not depend on the time; counted as a call:
``policy_calls`` is the same either way).

Rate model (docs/architecture.md, "Allocation record"): each worker of a
running job (:class:`~policies.model.WorkerAlloc`) takes seed 000 eq. 7 on its
own share and accumulation steps, multiplied by its slowdown — ξ from
``interference.ratio(app, other, my_mps_pct, other_mps_pct)`` when another job
is on its GPU (eq. 5-6), ``interference.mps_alone`` when alone under an MPS
limit — and divided by its GPU type's relative speed
(``gpu_types.speed(app, node.gpu_type)``); the gang runs at its slowest worker.
An even split (what :func:`~policies.model.uniform_workers` gives) uses eq. 7's
per-GPU batch ``B = global/k`` exactly as seed 000 writes it.  Pipeline stages
(seed 003): each stage's replicas share the global batch, run ``1/S`` of the
model's compute and all-reduce among themselves; the iteration is the slowest
stage (seed 003 eq. 7, asynchronous pipeline).  A job resumed after a
pre-emption first spends ``preempt_cost`` seconds restoring, a job resized onto
a different GPU set ``resize_cost`` seconds, one whose MPS share changes on the same GPUs
``mps_switch_cost`` seconds (no progress either way).  With a
global-batch override progress counts samples: ``completed_iters`` is samples
divided by the job's submitted batch, so ``total_iters`` stays the total work.

Jobs of a seed 003 Table I model (``policies.pipeline.MODELS``; pipeline stages
``Job.stages``) run at ``1/α`` with ``α`` from eq. 4–7 on their placement: the stage of
each GPU is the plan's ``WorkerAlloc.stage`` (without worker records: stages fill the GPUs
in the order given) and the bandwidths are ``SimConfig.network`` (§V-B defaults); their
worker shares are nominal (that model has no batch) and only the GPUs, stages and MPS
shares of their records are checked.

History and predictors (seed 003 §IV): every finished job is appended to
``snapshot.history`` (after ``prior_history``, jobs that ended before the run); when a
``refit`` callable is given it is called with the history every ``refit_every`` seconds
of simulated time and its mapping becomes ``snapshot.predictors``.

Progress is settled lazily (only for jobs whose state or rate changes), so the
cost grows with the number of events, not with simulated seconds.  The snapshots' free-GPU
views are kept per change (``kept_free``), the records made at every call (the snapshot, its
queue and change records) are built without the dataclass ``__init__`` (``records``), and no full garbage collection runs during a run
(:meth:`Simulator.run`).  The
simulator is deterministic: no randomness, ties broken by event sequence.
"""
from __future__ import annotations

import dataclasses
import gc
import heapq
import math
import sys
from bisect import bisect_left
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from policies.model import (Allocation, ClusterSnapshot, FinishedJob, Frozen, Gpu, GpuChanges,
                            Job, JobChanges, JobState, Node, WaitingQueue, WorkerAlloc,
                            uniform_workers)
from policies.pipeline import MODELS as PIPELINE_MODELS, Network, configurations, counts_of, \
    iter_time as pipeline_iter_time, pipeline_spec
from policies.plan import Plan, PreemptJob, ResizeJob, StartJob

from ..profiles import Models
from .kept_free import KeptFree
from .records import plain
from .result import SimResult, TimelineSample
from .wait_terms import WaitTerms

_new = object.__new__
_RUNNING = JobState.RUNNING  # a name lookup: the enum's class attribute costs ~0.3 µs on 3.11

ARRIVAL, COMPLETION, TICK, ROUND = 0, 1, 2, 3
EPS = 1e-6
STALL_CALLS = 1000  # idle-cluster policy calls before the run is declared stuck
_NO_FULL_GC = 1 << 30  # oldest-generation threshold during a run: never reached


class PlanError(ValueError):
    """A policy returned a plan the cluster cannot carry out (a policy bug)."""


@dataclass(frozen=True)
class SimConfig:
    interval: float = 60.0  # seconds between scheduling ticks while jobs wait
    seed: int = 0
    xi: Optional[float] = None  # override every pair's interference ratio
    preempt_cost: float = 0.0  # seconds of restore after a pre-emption
    resize_cost: float = 0.0  # seconds without progress after a resize onto other GPUs
    # seconds without progress after a resize on the same GPUs that changes a worker's MPS
    # share (an LGRR switch: 3.6 s with seed 004's context pool, §7.4; a checkpoint and
    # relaunch under gimbal-run, 19 s on an H100, docs/gimbal.md); 0: free
    mps_switch_cost: float = 0.0
    reveal_lengths: bool = True  # policies that declare needs_lengths see total_iters
    sample_every: Optional[float] = None  # timeline sampling; default adaptive
    max_jobs_per_gpu: int = 2
    network: Network = Network()  # seed 003 eq. 5-6 bandwidths (Table I jobs)


class _Rec:
    """Mutable simulator-side state of one job."""

    __slots__ = ("spec", "state", "alloc", "as_of", "done_iters", "service", "executed",
                 "rate", "overhead", "preemptions", "first_start", "end", "version",
                 "view", "shared", "partners", "batch", "uniform", "wmap", "held",
                 "run_start")

    def __init__(self, spec: Job):
        self.spec = spec
        self.state = JobState.PENDING
        self.alloc: Optional[Allocation] = None
        self.as_of = spec.submit_time
        self.done_iters = 0.0
        self.service = 0.0
        self.executed = 0.0
        self.rate = 0.0
        self.overhead = 0.0
        self.preemptions = 0
        self.first_start: Optional[float] = None
        self.run_start: Optional[float] = None  # start of the current run
        self.end: Optional[float] = None
        self.version = 0
        self.view: Optional[Job] = None
        self.shared = False
        self.partners: frozenset[str] = frozenset()
        self.batch = spec.global_batch  # global batch in force
        self.uniform = True  # workers are the even split (eq. 7 with B = batch / k)
        self.wmap: dict[Gpu, WorkerAlloc] = {}  # GPU -> this job's worker on it
        self.held = 0  # GPUs held (attained service counts these)


class Simulator:
    def __init__(self, jobs: Sequence[Job], nodes: Sequence[Node], policy, models: Models,
                 config: SimConfig = SimConfig(),
                 progress: Optional[Callable[[int, int], None]] = None,
                 prior_history: Sequence[FinishedJob] = (),
                 refit: Optional[Callable[[tuple, float], Mapping[str, Any]]] = None,
                 refit_every: float = 3600.0):
        ids = [j.id for j in jobs]
        if len(set(ids)) != len(ids):
            raise ValueError("job ids must be unique")
        cluster_gpus = sum(n.num_gpus for n in nodes)
        for j in jobs:
            if j.total_iters is None or j.total_iters <= 0:
                raise ValueError(f"job {j.id}: the simulator needs total_iters > 0")
            if j.num_gpus > cluster_gpus:  # could never start: the run would never end
                raise ValueError(f"job {j.id} asks {j.num_gpus} GPUs, the cluster has "
                                 f"{cluster_gpus}")
            if j.app not in models.profiles and j.app not in PIPELINE_MODELS:
                raise ValueError(f"job {j.id}: no throughput profile for application {j.app!r}")
        self.nodes = tuple(nodes)
        self.policy = policy
        self.models = models.with_xi(config.xi) if config.xi is not None else models
        self.cfg = config
        self.progress = progress
        # an elastic policy may start a job on any number of GPUs (>= 1), not only the
        # count it asked for, and is called at every arrival and completion
        self.elastic = bool(getattr(policy, "elastic", False))
        # what the policy declares (objects that are not Policy subclasses, e.g. test
        # wrappers, are taken as needing lengths and allowed to pre-empt)
        self.reveal = config.reveal_lengths and getattr(policy, "needs_lengths", True)
        self.may_preempt = getattr(policy, "preemptive", True)
        self.round_length = getattr(policy, "round_length", None)
        # rounds only: called at multiples of round_length, never at arrivals/completions
        self.rounds_only = bool(getattr(policy, "rounds_only", False))
        # policies.base.Policy.quiet_until: a tick or round at which nothing changed since a
        # call that made no action, up to the time the policy gave after that call, is
        # answered with no action without calling the policy (objects that are not Policy
        # subclasses: never); ``answer_quiet`` False calls at each (the tests' reference)
        self.quiet_hint = getattr(policy, "quiet_until", None)
        self.answer_quiet = True
        self.quiet_until = -math.inf  # the last call's answer (-inf after an action)
        self.last_idle = False  # the last call's Plan had no action
        self.quiet_ticks = 0  # calls answered so (counted in policy_calls too)
        self.round_call = True  # whether the next snapshot is a round's (set per call)
        if self.rounds_only and self.round_length is None:
            raise ValueError("a policy with rounds_only needs a round_length")
        if self.round_length is not None and not self.round_length > 0:
            raise ValueError(f"policy round_length must be > 0 seconds, got {self.round_length!r}")
        self.recs = {j.id: _Rec(j) for j in jobs}
        self.gpu_mem = {n.name: n.gpu_mem_mb for n in self.nodes}
        self.gpu_type = {n.name: n.gpu_type for n in self.nodes}
        self.types = frozenset(self.gpu_type.values())
        self.gpu_jobs: dict[Gpu, tuple[str, ...]] = {}
        # the last snapshot's copy of ``gpu_jobs`` and every change of ``gpu_jobs`` since,
        # in order ((GPU, its jobs) or (GPU, None): taken off): the copy is brought up to
        # date in place, the same operations in the same order (so the same items in the
        # same order), when nothing outside the simulator still holds it
        self.snap_gpus: Optional[dict] = None
        self.gpu_log: list[tuple[Gpu, Optional[tuple[str, ...]]]] = []
        # every GPU whose entry of ``gpu_jobs`` changed, oldest first, never cleared: the
        # snapshots' change record (policies.model.GpuChanges)
        self.gpu_changes: list[Gpu] = []
        # every job id whose view (entry of the snapshots' ``jobs``) changed, oldest first,
        # never cleared: the snapshots' change record (policies.model.JobChanges)
        self.job_changes: list[str] = []
        self.total_gpus = sum(n.num_gpus for n in self.nodes)
        self.valid_gpus = frozenset(g for n in self.nodes for g in n.gpus())
        # the snapshots' free_gpus, free_index and free_buckets, kept per change
        self.free = KeptFree(self.nodes)
        self.active: dict[str, _Rec] = {}
        self.views: dict[str, Job] = {}  # active job -> its current frozen view
        self.dirty_views: set[str] = set()
        # the last snapshot's job map and the ids changed since: reused in place when
        # nothing outside the simulator still holds it, so a call costs O(changes)
        self.snap_jobs: Optional[dict] = None
        self.changed_views: set[str] = set()
        self.waiting_ids: dict[str, None] = {}  # insertion-ordered set
        # the waiting order (ClusterSnapshot.queue) kept per change: (submit time, id) keys
        # sorted, with each job's view and id at the same index, and a count of the waiting
        # jobs per GPU count (the queue's max_gpus).  A view enters when the snapshot makes
        # it; a job that starts leaves at the next snapshot (``unqueue``), when the last
        # plan and snapshot are gone.  Snapshots get Frozen views of these lists (O(1));
        # the lists are copied before a change only while something still holds a view
        self.wkeys: list[tuple[float, str]] = []
        self.wjobs: list[Job] = []
        self.wids: list[str] = []
        self.wgpus: dict[int, int] = {}
        # per waiting job, by key: its _bi_term (the timeline's BI sums: wait_terms)
        self.wterms = WaitTerms()
        self.unqueue: list[Job] = []
        # the order's change record (WaitingQueue.changes): append-only, one id per job
        # entering or leaving the order or getting a new view in it; snapshots see views
        self.wlog: list[str] = []
        self.queue_cache: Optional[tuple] = None  # (jobs view, ids view, max GPUs, changes)
        self.events: list = []
        self.seq = 0
        self.now = 0.0
        self.tick_pending = False
        self.round_pending = False
        self.busy_gpu_seconds = 0.0
        self.busy_gpus = 0
        self.last_busy_t = 0.0
        self.timeline: list[TimelineSample] = []
        self.one_rates: dict[str, float] = {}  # job id -> _one_gpu_rate (CE/BI samples)
        # (app, batch in force, GPUs, nodes, accumulation) -> an even-split job's iteration
        # time alone on the one GPU type, no MPS limit (_rate's common case)
        self.alone_times: dict[tuple, float] = {}
        self.policy_calls = 0
        self.n_done = 0
        self.arrivals_left = len(jobs)
        self.idle_calls = 0  # consecutive calls that left an idle cluster idle for good
        self.history: list[FinishedJob] = list(prior_history)
        # snapshots see a Frozen view of the append-only history (O(1) per completion)
        self.history_view: Optional[Sequence[FinishedJob]] = Frozen(self.history)
        self.refit, self.refit_every = refit, float(refit_every)
        self.last_fit: Optional[float] = None
        # static predictors the models carry (seed 002's reference database), plus what
        # ``refit`` returns from the history
        self.static_predictors = dict(getattr(models, "predictors", {}) or {})
        self.predictors: Mapping[str, Any] = MappingProxyType(dict(self.static_predictors))
        self.gpn = {n.name: n.num_gpus for n in self.nodes}
        arrivals = sorted(jobs, key=lambda j: (j.submit_time, j.id))
        for j in arrivals:
            self._push(j.submit_time, ARRIVAL, j.id, 0)
        span = (arrivals[-1].submit_time - arrivals[0].submit_time) if arrivals else 0.0
        self.sample_every = config.sample_every or max(config.interval, span / 2000.0, 1.0)
        self.next_sample = arrivals[0].submit_time if arrivals else 0.0

    # ------------------------------------------------------------ events
    def _push(self, t: float, kind: int, jid: str, version: int) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, kind, self.seq, jid, version))

    def run(self) -> SimResult:
        """Run to the last completion and return the result.

        While it runs the cyclic garbage collector makes no full (oldest generation)
        collection: each one walks every object alive (the trace, every job's records, views
        and history: ~0.2 s per collection at 30k jobs, a fifth of a fifo run, 11 of afs-l's
        59 CPU-s at 5k), and the simulator makes no cyclic garbage (nor do most policies:
        none collected in runs of fifo, srtf, tiresias, similarity, gavel, a-srpt, afs-l,
        isolation, lucid, srsf; sjf-bsbf and gandiva make some).  Young objects are still
        collected as usual, so a policy's short-lived cycles go as before; cycles that
        reach the oldest generation wait for the end of the run, when the caller's
        thresholds come back and the next automatic collection finds them.  Only when memory is
        reclaimed changes: the simulation reads no collector state, and a snapshot kept alive longer only makes the
        next one copy (``sys.getrefcount``) what it would have changed in place, the same
        items either way."""
        thresholds = gc.get_threshold()
        gc.set_threshold(thresholds[0], thresholds[1], _NO_FULL_GC)
        try:
            return self._run()
        finally:
            gc.set_threshold(*thresholds)

    def _run(self) -> SimResult:
        total = len(self.recs)
        # the containers below are never rebound, only changed in place
        events, recs, active, waiting = self.events, self.recs, self.active, self.waiting_ids
        dirty, pop = self.dirty_views, heapq.heappop
        while events:
            head = events[0]
            t = head[0]
            if head[1] == ROUND and not active:
                pop(events)  # no job left: the round chain ends here
                self.round_pending = False
                continue
            # busy GPU-seconds (the GPUs holding a job did so since the last event)
            self.busy_gpu_seconds += self.busy_gpus * (t - self.last_busy_t)
            self.last_busy_t = t
            self.now = t
            changed = False
            tick = False
            round_due = False
            while events and events[0][0] <= t:
                _, kind, _, jid, version = pop(events)
                if kind == ARRIVAL:
                    self.arrivals_left -= 1
                    rec = recs[jid]
                    active[jid] = rec
                    waiting[jid] = None
                    dirty.add(jid)
                    changed = True
                elif kind == COMPLETION:
                    rec = recs[jid]
                    if rec.version == version and rec.state is _RUNNING:
                        self._complete(rec)
                        changed = True
                elif kind == TICK:
                    self.tick_pending = False
                    tick = True
                else:
                    self.round_pending = False
                    round_due = True
            if self.rounds_only:  # decides at rounds only (seed 002, Gavel's mechanism)
                call = round_due and active
            else:
                # elastic policies (seed 001) re-divide the GPUs at every churn event, even
                # when nothing waits (a completion frees GPUs the running jobs can take)
                call = ((changed or tick) and (waiting or (changed and self.elastic
                                                           and active))) \
                    or (round_due and active)
            if call:
                if (self.last_idle and not changed and self.now <= self.quiet_until
                        and self.answer_quiet and self._unchanged()):
                    # what the call would see is what the last call saw, but for the time
                    self.policy_calls += 1
                    self.quiet_ticks += 1
                else:
                    # a round event among the call's events: the call is a round
                    # (ClusterSnapshot.round_call); every call of a policy without rounds is
                    self.round_call = round_due or self.round_length is None
                    self._schedule()
                self._check_stall()
            if waiting and not self.tick_pending and not self.rounds_only:
                self._push(t + self.cfg.interval, TICK, "", 0)
                self.tick_pending = True
            if self.round_length is not None and active and not self.round_pending:
                r = self.round_length
                if not self.rounds_only or round_due:
                    nxt = self.now + r
                else:  # a chain (re)starts on the grid of multiples of the round length
                    nxt = math.ceil(self.now / r - 1e-9) * r
                self._push(nxt, ROUND, "", 0)
                self.round_pending = True
            if self.now >= self.next_sample:
                self._sample()
                self.next_sample = self.now + self.sample_every
            if self.progress:
                self.progress(self.n_done, total)
        unfinished = [r.spec.id for r in self.recs.values() if r.end is None]
        if unfinished:
            raise RuntimeError(f"simulation ended with unfinished jobs: {unfinished[:5]}")
        return SimResult.build(self)

    def _check_stall(self) -> None:
        """Nothing runs, nothing is left to arrive and the policy started nothing:
        without a guard the ticks would go on for ever."""
        if self.arrivals_left or len(self.waiting_ids) < len(self.active):
            self.idle_calls = 0
            return
        self.idle_calls += 1
        if self.idle_calls >= STALL_CALLS:
            name = getattr(self.policy, "name", type(self.policy).__name__)
            raise RuntimeError(
                f"policy {name} left {len(self.waiting_ids)} job(s) waiting on an idle cluster "
                f"for {self.idle_calls} calls with nothing left to arrive: "
                f"{list(self.waiting_ids)[:5]}")

    # ------------------------------------------------------------ progress
    def _settle(self, rec: _Rec) -> None:
        if rec.state is _RUNNING:
            dt = self.now - rec.as_of
            o = min(rec.overhead, dt)
            rec.overhead -= o
            rec.done_iters += rec.rate * (dt - o)
            rec.service += rec.held * dt  # the GPUs actually held
            rec.executed += dt
        rec.as_of = self.now
        rec.view = None
        self.dirty_views.add(rec.spec.id)

    def _worker_slowdown(self, rec: _Rec, w: WorkerAlloc) -> float:
        """Slowdown of one worker: ξ beside another job on its GPU (seed 000 eq. 5-6, MPS
        shares as the interference model takes them), the MPS-alone cap otherwise, over
        its GPU type's relative speed."""
        app, jid = rec.spec.app, rec.spec.id
        table = self.models.interference
        slow, shared = 1.0, False
        for other in self.gpu_jobs.get(w.gpu, ()):
            if other == jid:
                continue
            orec = self.recs[other]
            ow = orec.wmap.get(w.gpu)
            slow = max(slow, table.ratio(app, orec.spec.app, w.mps_pct,
                                         ow.mps_pct if ow is not None else None))
            shared = True
        if not shared and w.mps_pct is not None:
            slow = table.mps_alone(app, w.mps_pct)
        speed = self.models.gpu_types.speed(app, self.gpu_type[w.gpu.node])
        return slow if speed == 1.0 else slow / speed

    @staticmethod
    def _pipeline_spec(spec: Job, k: int):
        stages = spec.stages if 1 <= spec.stages <= k else (configurations(spec.app, k) or (k,))[0]
        return pipeline_spec(spec.app, stages, k)

    def _pipeline_alpha(self, spec: Job, alloc: Allocation) -> float:
        """Seed 003 eq. 7 of a Table I job on ``alloc`` (stages from the worker records)."""
        ps = self._pipeline_spec(spec, len(alloc.gpus))
        stages = len(ps.stages)
        nodes: list[list[str]] = [[] for _ in range(stages)]
        if any(w.stage for w in alloc.workers):
            for w in alloc.workers:
                nodes[min(max(w.stage, 0), stages - 1)].append(w.gpu.node)
        else:
            it = iter(alloc.gpus)
            for s, st in enumerate(ps.stages):
                nodes[s] = [next(it).node for _ in range(st.replicas)]
        return pipeline_iter_time(ps, counts_of(nodes), self.gpn, self.cfg.network)

    def _rate(self, rec: _Rec) -> float:
        """Submitted-batch iterations per second (samples / s over the submitted batch)."""
        spec, alloc = rec.spec, rec.alloc
        workers = alloc.workers
        if spec.app in PIPELINE_MODELS:
            t_iter = self._pipeline_alpha(spec, alloc)
            return 1.0 / (t_iter * max(self._worker_slowdown(rec, w) for w in workers))
        prof = self.models.profiles[spec.app]
        k = len(workers)
        if rec.uniform:
            if rec.partners or alloc.mps_pct is not None or len(self.types) > 1:
                t_iter = prof.iter_time(rec.batch / k, k, alloc.num_nodes, alloc.accum_steps)
                t_iter = t_iter * max(self._worker_slowdown(rec, w) for w in workers)
            else:  # alone, no MPS limit, one GPU type: the common case, no per-worker loop
                # a pure function of these five (the profile and speed are the app's for
                # the whole run): computed once, the same float every time
                key = (spec.app, rec.batch, k, alloc.num_nodes, alloc.accum_steps)
                t_iter = self.alone_times.get(key)
                if t_iter is None:
                    t_iter = prof.iter_time(rec.batch / k, k, key[3], key[4])
                    speed = self.models.gpu_types.speed(spec.app, self.nodes[0].gpu_type)
                    slow = 1.0 if speed == 1.0 else 1.0 / speed
                    t_iter = self.alone_times[key] = t_iter * slow
        else:
            stages: dict[int, list[WorkerAlloc]] = {}
            for w in workers:
                stages.setdefault(w.stage, []).append(w)
            depth = len(stages)
            t_iter = 0.0
            for ws in stages.values():
                kk = len(ws)
                nn = len({w.gpu.node for w in ws})
                for w in ws:
                    t = _eq7(prof, w.share, kk, nn, w.accum_steps, depth)
                    t_iter = max(t_iter, t * self._worker_slowdown(rec, w))
        rate = 1.0 / t_iter
        if rec.batch != spec.global_batch:  # progress counts samples
            rate = rate * rec.batch / spec.global_batch
        return rate

    def _reschedule(self, rec: _Rec) -> None:
        """Recompute rate and completion event of a running job (after settling)."""
        rec.rate = self._rate(rec)
        rec.version += 1
        left = max(rec.spec.total_iters - rec.done_iters, 0.0)
        self._push(self.now + rec.overhead + left / rec.rate, COMPLETION, rec.spec.id, rec.version)

    def _partners_of(self, gpus: Iterable[Gpu], jid: str) -> frozenset[str]:
        out = set()
        for g in gpus:
            out.update(self.gpu_jobs.get(g, ()))
        out.discard(jid)
        return frozenset(out)

    def _release(self, rec: _Rec) -> set[str]:
        """Take ``rec`` off its GPUs; return the partners whose rate changes."""
        affected: set[str] = set()
        jid, gpu_jobs, log, changes = rec.spec.id, self.gpu_jobs, self.gpu_log, self.gpu_changes
        for g in rec.alloc.gpus:
            on = gpu_jobs.get(g, ())
            # the job alone on the GPU (the usual case): nothing is left, no tuple to filter
            rest = () if on == (jid,) else tuple(x for x in on if x != jid)
            if rest:
                gpu_jobs[g] = rest
                log.append((g, rest))
                changes.append(g)
                affected.update(rest)
            else:
                gpu_jobs.pop(g, None)
                log.append((g, None))
                changes.append(g)
                self.free.give(g)
                self.busy_gpus -= 1
        return affected

    def _refresh(self, jids: Iterable[str]) -> None:
        for jid in jids:
            other = self.recs[jid]
            if other.state is _RUNNING:
                self._settle(other)
                other.partners = self._partners_of(other.alloc.gpus, jid)
                self._reschedule(other)

    def _complete(self, rec: _Rec) -> None:
        self._settle(rec)
        rec.done_iters = rec.spec.total_iters
        rec.state = JobState.PENDING  # leaves the active set
        rec.end = self.now
        affected = self._release(rec)
        del self.active[rec.spec.id]
        self.views.pop(rec.spec.id, None)
        self.dirty_views.discard(rec.spec.id)
        self.changed_views.add(rec.spec.id)
        self.n_done += 1
        s = rec.spec
        # the constructor, not records.plain: kept all run, and an instance made by the
        # dataclass __init__ takes 230 bytes against 580 for one filled through its __dict__
        self.history.append(FinishedJob(
            s.id, s.user, s.submit_time, rec.first_start, self.now, s.num_gpus, s.app, s.name,
            s.group_id, s.total_iters, s.global_batch))
        self.history_view = None
        self._refresh(affected)

    # ------------------------------------------------------------ scheduling
    def _own_queue(self) -> None:
        """Before changing the kept order: copy its lists if a view handed out is still
        held (a snapshot or plan kept by the policy or a caller), so that view never
        changes; otherwise change them in place."""
        if self.queue_cache is not None:
            self.queue_cache = None
            # this attribute and getrefcount's argument: no Frozen view holds the list
            if sys.getrefcount(self.wjobs) > 2 or sys.getrefcount(self.wids) > 2:
                self.wjobs, self.wids = list(self.wjobs), list(self.wids)

    def _enqueue(self, view: Job) -> None:
        """Put a waiting job's current view in the waiting order (replacing an older view)."""
        self._own_queue()
        self.wlog.append(view.id)
        key = (view.submit_time, view.id)
        i = bisect_left(self.wkeys, key)
        if i < len(self.wkeys) and self.wkeys[i] == key:
            self.wjobs[i] = view
            self.wterms.set(key, self._bi_term(view.id))
        else:
            self.wkeys.insert(i, key)
            self.wjobs.insert(i, view)
            self.wids.insert(i, view.id)
            self.wterms.set(key, self._bi_term(view.id))
            self.wgpus[view.num_gpus] = self.wgpus.get(view.num_gpus, 0) + 1

    def _unqueue(self, spec: Job) -> None:
        """Take a job that starts out of the waiting order (if its view entered it)."""
        key = (spec.submit_time, spec.id)
        i = bisect_left(self.wkeys, key)
        if i < len(self.wkeys) and self.wkeys[i] == key:
            self._own_queue()
            self.wlog.append(spec.id)
            del self.wkeys[i], self.wjobs[i], self.wids[i]
            self.wterms.remove(key)
            n = self.wgpus[spec.num_gpus] - 1
            if n:
                self.wgpus[spec.num_gpus] = n
            else:
                del self.wgpus[spec.num_gpus]

    def _sync(self) -> None:
        """Fresh views of the jobs changed since the last call and the waiting order up
        to date (jobs started since leave it, waiting jobs with a new view enter it)."""
        waiting = self.waiting_ids
        for spec in self.unqueue:  # jobs started since the last snapshot
            self._unqueue(spec)
        self.unqueue.clear()
        for jid in sorted(self.dirty_views):  # sorted: new jobs enter in id order
            v = self.views[jid] = self._view(self.recs[jid])
            if jid in waiting:
                self._enqueue(v)
        self.changed_views |= self.dirty_views
        self.dirty_views.clear()

    def snapshot(self) -> ClusterSnapshot:
        self._sync()
        jobs = self.snap_jobs
        changed = sorted(self.changed_views)
        # the job change record (policies.model.JobChanges): every id whose view changed
        self.job_changes.extend(changed)
        # only this attribute, ``jobs`` and getrefcount's argument hold the last
        # snapshot's map: no snapshot, proxy or policy kept it, so it may change in place
        if jobs is not None and sys.getrefcount(jobs) == 3:
            views = self.views
            for jid in changed:
                v = views.get(jid)
                if v is None:
                    jobs.pop(jid, None)
                else:
                    jobs[jid] = v
        else:
            jobs = dict(self.views)
        self.snap_jobs = jobs
        self.changed_views.clear()
        free, index, buckets = self.free.views()
        gpus = self.snap_gpus
        # as for ``jobs``: only this attribute, ``gpus`` and getrefcount's argument hold it
        if gpus is not None and sys.getrefcount(gpus) == 3:
            for g, on in self.gpu_log:
                if on is None:
                    gpus.pop(g, None)
                else:
                    gpus[g] = on
        else:
            gpus = self.snap_gpus = dict(self.gpu_jobs)
        self.gpu_log.clear()
        jobs_view = MappingProxyType(jobs)
        gpus_view = MappingProxyType(gpus)
        if self.queue_cache is None:  # (not the snapshot's queue: that holds the job map)
            self.queue_cache = (Frozen(self.wjobs), Frozen(self.wids), max(self.wgpus, default=0),
                                Frozen(self.wlog))
        jv, iv, mg, cv = self.queue_cache
        q = plain(WaitingQueue, jobs=jv, ids=iv, max_gpus=mg, source=jobs_view, changes=cv)
        if self.history_view is None:  # a view of the append-only list: O(1)
            self.history_view = Frozen(self.history)
        if self.refit is not None and (self.last_fit is None
                                       or self.now - self.last_fit >= self.refit_every):
            self.predictors = MappingProxyType({**self.static_predictors,
                                                **self.refit(self.history_view, self.now)})
            self.last_fit = self.now
        models, cfg = self.models, self.cfg
        return plain(
            ClusterSnapshot,
            now=self.now, nodes=self.nodes, jobs=jobs_view,
            gpu_jobs=gpus_view, free_gpus=free,
            profiles=models.profiles, memory=models.memory,
            interference=models.interference, seed=cfg.seed,
            max_jobs_per_gpu=cfg.max_jobs_per_gpu, free_index=index, free_buckets=buckets,
            waiting_ids=iv, gpu_types=models.gpu_types,
            history=self.history_view, predictors=self.predictors, queue=q,
            gpu_changes=plain(GpuChanges, log=Frozen(self.gpu_changes), source=gpus_view),
            job_changes=plain(JobChanges, log=Frozen(self.job_changes), source=jobs_view),
            round_call=self.round_call)

    def _view(self, rec: _Rec) -> Job:
        if rec.view is None:
            spec, run = rec.spec, rec.state is _RUNNING
            if type(spec) is Job:
                # ``dataclasses.replace``'s object without its per-field __init__: a Job
                # (frozen, no __post_init__, no init=False field) is its attribute dict, in
                # field order; the spec's, with the changed fields' values put in place
                # (keys already there keep their place)
                view = _new(Job)
                attrs = view.__dict__
                attrs.update(spec.__dict__)
                if not self.reveal:
                    attrs["total_iters"] = None
                attrs["state"] = rec.state
                attrs["allocation"] = rec.alloc
                attrs["start_time"] = rec.first_start
                attrs["as_of"] = rec.as_of
                attrs["completed_iters"] = rec.done_iters
                attrs["attained_service"] = rec.service
                attrs["executed_time"] = rec.executed
                if run:
                    attrs["iter_rate"] = rec.rate
                    attrs["restore_left"] = rec.overhead
                    attrs["run_start"] = rec.run_start
                else:
                    attrs["iter_rate"] = 0.0
                    attrs["restore_left"] = 0.0
                    attrs["run_start"] = None
                attrs["preemptions"] = rec.preemptions
                rec.view = view
            else:
                rec.view = dataclasses.replace(
                    spec, total_iters=spec.total_iters if self.reveal else None,
                    state=rec.state, allocation=rec.alloc, start_time=rec.first_start,
                    as_of=rec.as_of, completed_iters=rec.done_iters,
                    attained_service=rec.service, executed_time=rec.executed,
                    iter_rate=rec.rate if run else 0.0,
                    restore_left=rec.overhead if run else 0.0,
                    preemptions=rec.preemptions, run_start=rec.run_start if run else None)
        return rec.view

    def _schedule(self) -> None:
        snap = self.snapshot()
        plan = self.policy.schedule(snap)
        self.policy_calls += 1
        self.last_idle = idle = isinstance(plan, Plan) and not plan.actions
        hint = self.quiet_hint
        self.quiet_until = hint(snap) if idle and hint is not None else -math.inf
        self.apply(plan)

    def _unchanged(self) -> bool:
        """No job view, waiting order, GPU or predictor would differ from the last call's
        snapshot: no view made dirty or changed since, no start to take out of the queue,
        no GPU change logged, no refit due."""
        return (not self.dirty_views and not self.changed_views and not self.unqueue
                and not self.gpu_log
                and (self.refit is None or (self.last_fit is not None
                                            and self.now - self.last_fit < self.refit_every)))

    def apply(self, plan: Plan) -> None:
        if not isinstance(plan, Plan):
            raise PlanError(f"policy returned {type(plan).__name__}, not a Plan")
        if not plan.actions:  # most calls: nothing to check, nothing changes
            return
        affected: set[str] = set()
        active = self.active
        preempts, resizes, starts = [], [], []  # Plan.preempts(), resizes(), starts()
        for act in plan.actions:
            if act.job_id not in active:
                raise PlanError(f"plan names job {act.job_id!r}, which is not active")
            if isinstance(act, StartJob):
                starts.append(act)
            elif isinstance(act, PreemptJob):
                preempts.append(act)
            elif isinstance(act, ResizeJob):
                resizes.append(act)
        if preempts and not self.may_preempt:
            raise PlanError(f"policy {plan.policy} declares preemptive = False but its plan "
                            f"pre-empts {preempts[0].job_id}")
        for act in preempts:
            rec = self.active[act.job_id]
            if rec.state is not _RUNNING:
                raise PlanError(f"cannot pre-empt job {act.job_id}: it is not running")
            self._settle(rec)
            affected |= self._release(rec)
            rec.state, rec.alloc, rec.rate = JobState.SUSPENDED, None, 0.0
            rec.partners = frozenset()
            rec.wmap = {}
            rec.held = 0
            rec.preemptions += 1
            rec.version += 1
            self.waiting_ids[rec.spec.id] = None  # enters the queue with its new view
        old: dict[str, frozenset] = {}
        for act in resizes:  # release every resized job first: jobs may swap GPUs in one plan
            rec = self.active[act.job_id]
            if rec.state is not _RUNNING:
                raise PlanError(f"cannot resize job {act.job_id}: it is not running")
            if not act.gpus:
                raise PlanError(f"cannot resize job {act.job_id} to no GPU (pre-empt it instead)")
            self._check_count(rec, act)
            self._settle(rec)
            old[act.job_id] = frozenset(rec.alloc.gpus)
            affected |= self._release(rec)
        for act in resizes:
            rec = self.active[act.job_id]
            self._place(rec, act, resize=True, moved=frozenset(act.gpus) != old[act.job_id])
            affected |= set(rec.partners)
        for act in starts:
            rec = self.active[act.job_id]
            if rec.state is _RUNNING:
                raise PlanError(f"cannot start job {act.job_id}: it is already running")
            self._check_count(rec, act)
            self._settle(rec)
            self._place(rec, act)
            del self.waiting_ids[rec.spec.id]
            self.unqueue.append(rec.spec)
            affected |= set(rec.partners)
        self._refresh(affected)

    def _check_count(self, rec: _Rec, act) -> None:
        """Gang size: exactly ``Job.num_gpus``, or within ``Job.gpu_range`` when the job lets
        policies choose its GPU count (elastic / moldable jobs).  An elastic policy (seed
        001: CoDDL runs every job on the share it is given) may give a job without a
        range any count >= 1."""
        spec, n = rec.spec, len(act.gpus)
        if spec.gpu_range is None:
            if self.elastic:
                if n < 1:
                    raise PlanError(f"job {act.job_id}: a running job needs at least one GPU")
            elif n != spec.num_gpus:
                raise PlanError(f"gang violation: job {act.job_id} needs {spec.num_gpus} GPUs,"
                                f" plan gives {n}")
        elif not spec.gpu_range[0] <= n <= spec.gpu_range[1]:
            raise PlanError(f"job {act.job_id}: plan gives {n} GPUs, outside its gpu_range "
                            f"{tuple(spec.gpu_range)}")

    def _batch_in_force(self, rec: _Rec, act) -> int:
        """The global batch the action runs: its override (within ``Job.batch_range``), else
        the submitted batch for a start and the batch in force for a resize."""
        spec, g = rec.spec, act.global_batch
        if g is None:
            return rec.batch if isinstance(act, ResizeJob) else spec.global_batch
        g = int(g)
        if spec.batch_range is None:
            if g != spec.global_batch:
                raise PlanError(f"job {spec.id}: global batch {g} overrides a fixed batch "
                                f"{spec.global_batch} (the job has no batch_range)")
        elif not spec.batch_range[0] <= g <= spec.batch_range[1]:
            raise PlanError(f"job {spec.id}: global batch {g} is outside its batch_range "
                            f"{tuple(spec.batch_range)}")
        return g

    def _workers(self, rec: _Rec, act, gpus: tuple, batch: int) -> tuple[tuple, bool]:
        """Validated worker records of ``act`` and whether they are the even split."""
        jid = rec.spec.id
        if not act.workers:
            sub, accum = int(act.sub_batch), int(act.accum_steps)
            # the rate (eq. 7) runs the whole per-GPU share in ``accum`` steps and the
            # memory check uses ``sub_batch``: they must agree with the global batch
            if sub < 1 or accum < 1 or sub * accum * len(gpus) < batch:
                raise PlanError(f"job {jid}: sub-batch {act.sub_batch} x {act.accum_steps} "
                                f"accumulation steps on {len(gpus)} GPUs does not cover its "
                                f"global batch {batch}")
            if act.mps_pct is not None and not 1 <= act.mps_pct <= 100:
                raise PlanError(f"job {jid}: MPS share {act.mps_pct}% is not in 1..100")
            return uniform_workers(gpus, sub, accum, act.mps_pct, batch), True
        workers = tuple(act.workers)
        if tuple(w.gpu for w in workers) != gpus:
            raise PlanError(f"job {jid}: workers name other GPUs than the plan's gpus "
                            f"(they must list the same GPUs in the same order)")
        if rec.spec.app in PIPELINE_MODELS:  # timed by seed 003 eq. 7: shares are nominal
            for w in workers:
                if w.mps_pct is not None and not 1 <= w.mps_pct <= 100:
                    raise PlanError(f"job {jid}: worker on {w.gpu}: MPS share {w.mps_pct}% is "
                                    f"not in 1..100")
                if w.stage < 0:
                    raise PlanError(f"job {jid}: worker on {w.gpu}: negative stage {w.stage}")
            return workers, False
        per_stage: dict[int, int] = {}
        for w in workers:
            if w.share < 1 or w.micro_batch < 1 or w.accum_steps < 1 or \
                    w.micro_batch * w.accum_steps < w.share:
                raise PlanError(f"job {jid}: worker on {w.gpu}: micro-batch {w.micro_batch} x "
                                f"{w.accum_steps} accumulation steps does not cover its share "
                                f"{w.share}")
            if w.mps_pct is not None and not 1 <= w.mps_pct <= 100:
                raise PlanError(f"job {jid}: worker on {w.gpu}: MPS share {w.mps_pct}% is not "
                                f"in 1..100")
            if w.mps_cap is not None and (not 1 <= w.mps_cap <= 100 or (
                    w.mps_pct is not None and w.mps_pct > w.mps_cap)):
                raise PlanError(f"job {jid}: worker on {w.gpu}: MPS share {w.mps_pct}% is not "
                                f"within its ceiling {w.mps_cap}% (1..100)")
            if w.mem_limit_mb is not None and w.mem_limit_mb <= 0:
                raise PlanError(f"job {jid}: worker on {w.gpu}: memory limit {w.mem_limit_mb} "
                                f"MiB is not positive")
            if not 0 <= w.stage < max(rec.spec.stages, 1):
                raise PlanError(f"job {jid}: worker on {w.gpu}: stage {w.stage} is not in "
                                f"0..{max(rec.spec.stages, 1) - 1}")
            per_stage[w.stage] = per_stage.get(w.stage, 0) + w.share
        if sorted(per_stage) != list(range(len(per_stage))):
            raise PlanError(f"job {jid}: pipeline stages {sorted(per_stage)} are not 0..n-1")
        for st, total in per_stage.items():
            if total != batch:
                where = f" of stage {st}" if len(per_stage) > 1 else ""
                raise PlanError(f"job {jid}: worker shares{where} sum to {total}, not the "
                                f"global batch {batch}")
        first = workers[0]
        even = len(per_stage) == 1 and all(
            (w.micro_batch, w.accum_steps, w.mps_pct) ==
            (first.micro_batch, first.accum_steps, first.mps_pct) for w in workers) and \
            max(w.share for w in workers) - min(w.share for w in workers) <= 1
        return workers, even

    def _place(self, rec: _Rec, act, resize: bool = False, moved: bool = False) -> None:
        jid = rec.spec.id
        gpus = tuple(act.gpus)
        if not gpus:
            raise PlanError(f"job {jid}: the plan gives it no GPU")
        if len(set(gpus)) != len(gpus):
            raise PlanError(f"job {jid}: the same GPU listed twice")
        batch = self._batch_in_force(rec, act)
        workers, even = self._workers(rec, act, gpus, batch)
        before = rec.wmap if resize else None  # the workers it ran (GPU -> record)
        mem = self.models.memory
        mine = mem.get(rec.spec.app)
        for w in workers:
            g = w.gpu
            if g not in self.valid_gpus:
                raise PlanError(f"job {jid}: no such GPU {g}")
            if mine is not None and w.mem_limit_mb is not None and \
                    mine.mem_mb(w.micro_batch) > w.mem_limit_mb + EPS:
                raise PlanError(f"job {jid}: worker on {g} needs {mine.mem_mb(w.micro_batch):.0f}"
                                f" MiB, over its memory limit {w.mem_limit_mb} MiB")
            on = self.gpu_jobs.get(g, ())
            if len(on) >= self.cfg.max_jobs_per_gpu:
                raise PlanError(f"job {jid}: GPU {g} already holds {len(on)} jobs")
            if on:
                need = 0.0
                for x in on:
                    xr = self.recs[x]
                    if xr.spec.app in mem:
                        xw = xr.wmap.get(g)
                        need += mem[xr.spec.app].mem_mb(
                            xw.micro_batch if xw is not None else xr.alloc.sub_batch)
                if mine is not None:
                    need += mine.mem_mb(w.micro_batch)
                if need > self.gpu_mem[g.node] + EPS:
                    raise PlanError(f"job {jid}: GPU {g} memory over capacity ({need:.0f} MiB)")
        for g in gpus:
            if g not in self.gpu_jobs:
                self.busy_gpus += 1  # GPUs holding at least one job
            on = self.gpu_jobs[g] = self.gpu_jobs.get(g, ()) + (jid,)
            self.gpu_log.append((g, on))
            self.gpu_changes.append(g)
            self.free.take(g)
        override = batch if batch != rec.spec.global_batch else None
        if act.workers:
            rec.alloc = Allocation.from_workers(workers, override)
        else:
            # ``Allocation(gpus, sub, accum, mps, workers, override)``: its ``__post_init__``
            # does nothing when the workers are given, so the record is its attribute dict
            # (records.plain; tests/test_sim_records.py checks it at every call)
            rec.alloc = a = _new(Allocation)
            a.__dict__.update(gpus=gpus, sub_batch=int(act.sub_batch),
                              accum_steps=int(act.accum_steps), mps_pct=act.mps_pct,
                              workers=workers, global_batch=override)
        rec.batch = batch
        rec.uniform = even
        rec.wmap = {w.gpu: w for w in workers}
        rec.held = len(gpus)
        rec.partners = self._partners_of(gpus, jid)
        if rec.partners:
            rec.shared = True
        if not resize:
            rec.run_start = self.now
            if rec.first_start is None:
                rec.first_start = self.now
            elif rec.preemptions:
                rec.overhead += self.cfg.preempt_cost
        elif moved:
            rec.overhead += self.cfg.resize_cost
        elif self.cfg.mps_switch_cost and any(
                before[w.gpu].mps_pct != w.mps_pct for w in workers):  # the same GPUs
            rec.overhead += self.cfg.mps_switch_cost
        rec.state = JobState.RUNNING
        self._reschedule(rec)

    # ------------------------------------------------------------ metrics
    def _one(self, jid: str) -> float:
        """A job's one-GPU rate (never changes: computed once per job)."""
        one = self.one_rates.get(jid)
        if one is None:
            one = self.one_rates[jid] = self._one_gpu_rate(self.recs[jid].spec)
        return one

    def _bi_term(self, jid: str) -> tuple[float, float]:
        """(start of the wait, remaining one-GPU seconds floored at EPS) of a waiting job:
        its BI term at ``t`` is ``(t - start) / that``; both are fixed while it waits."""
        rec = self.recs[jid]
        left = rec.spec.total_iters - rec.done_iters
        return (rec.as_of if rec.preemptions else rec.spec.submit_time,
                max(left / self._one(jid), EPS))

    def _sample(self) -> None:
        """QL, CE and BI at ``now`` (seed 001 §2.2) and GPU use.

        Sums run over the active jobs in arrival order ((submit time, id), the order
        ``active`` holds them in): the running ones from ``gpu_jobs``, sorted, and the
        waiting ones from the kept waiting order with their fixed BI terms, so a sample
        costs O(running log running) plus, from :data:`~gimbalctl.sim.wait_terms.MIN_ARRAYS`
        waiting jobs, O(waiting) in numpy and O(changes since the last sample) in Python
        (:class:`~gimbalctl.sim.wait_terms.WaitTerms`, the same floats as a loop)."""
        self._sync()
        now, recs = self.now, self.recs
        ce = 0.0
        running = sorted({j for ids in self.gpu_jobs.values() for j in ids},
                         key=lambda j: (recs[j].spec.submit_time, j))
        for jid in running:
            rec = recs[jid]
            if now - rec.as_of >= rec.overhead:  # restoring: no throughput yet
                ce += rec.rate / self._one(jid)
        n_wait = len(self.wterms)
        bi_sum = self.wterms.total(now, self.wkeys)
        self.timeline.append(TimelineSample(
            self.now, n_wait, ce / max(self.total_gpus, 1), bi_sum / n_wait if n_wait else 0.0,
            self.busy_gpus / max(self.total_gpus, 1)))

    def _one_gpu_rate(self, spec: Job) -> float:
        """Rate of ``spec`` on one GPU (CE/BI normalisation); a Table I job that needs
        several GPUs counts as ``num_gpus`` GPUs at its consolidated rate."""
        if spec.app in PIPELINE_MODELS:
            g = max(self.gpn.values(), default=1)
            ps = self._pipeline_spec(spec, spec.num_gpus)
            nodes, i = [], 0
            for st in ps.stages:
                nodes.append([f"_{(i + r) // g}" for r in range(st.replicas)])
                i += st.replicas
            gpn = {f"_{x}": g for x in range(spec.num_gpus // g + 1)}
            alpha = pipeline_iter_time(ps, counts_of(nodes), gpn, self.cfg.network)
            return 1.0 / (alpha * spec.num_gpus)
        prof = self.models.profiles[spec.app]
        return 1.0 / prof.iter_time(spec.global_batch, 1, 1, prof.min_accum_steps(spec.global_batch))


def simulate(jobs: Sequence[Job], nodes: Sequence[Node], policy, models: Models,
             config: SimConfig = SimConfig(), progress=None, **kw) -> SimResult:
    """Run ``policy`` over ``jobs`` on ``nodes``; see :class:`Simulator` (``kw``:
    ``prior_history``, ``refit``, ``refit_every``)."""
    return Simulator(jobs, nodes, policy, models, config, progress, **kw).run()


def _eq7(prof, share: float, k: int, nodes: int, accum: int, depth: int) -> float:
    """Seed 000 eq. 7 for one worker with ``share`` samples in ``accum`` micro-steps among
    ``k`` replicas on ``nodes`` nodes; with ``depth`` > 1 pipeline stages the worker runs
    ``1/depth`` of the model (compute and gradient all-reduce; our choice: stages of
    equal cost, activation traffic between stages not modelled)."""
    if depth == 1:
        return prof.iter_time(share, k, nodes, accum)
    s = max(1, int(accum))
    tc = prof.t_comp(share / s) / depth
    tm = prof.t_comm(k, nodes) / depth
    d = prof.delta
    overlap = (tc ** d + tm ** d) ** (1.0 / d) if tm > 0 else tc
    return (s - 1) * tc + overlap
