"""Event-driven simulator: applies a policy's Plans to a modelled cluster.

Events are job arrivals, job completions and scheduling ticks.  The policy is
called (with a fresh :class:`~policies.model.ClusterSnapshot`) after every
arrival or completion and every ``interval`` seconds while jobs wait; its Plan
is validated and applied.  Between events, running jobs progress at the rate
given by the throughput model (seed 000 eq. 7), divided by the interference
ratio ξ while they share a GPU with another job (eq. 5-6).  A job resumed after
a pre-emption first spends ``preempt_cost`` seconds restoring (no progress).

Jobs of a seed 003 Table I model (``policies.pipeline.MODELS``; pipeline stages
``Job.stages``) run at ``1/α`` with ``α`` from eq. 4–7 on their placement: the stage of
each GPU is the plan's ``WorkerAlloc.stage`` (without worker records: stages fill the GPUs
in the order given) and the bandwidths are ``SimConfig.network`` (§V-B defaults).

History and predictors (seed 003 §IV): every finished job is appended to
``snapshot.history`` (after ``prior_history``, jobs that ended before the run); when a
``refit`` callable is given it is called with the history every ``refit_every`` seconds
of simulated time and its mapping becomes ``snapshot.predictors``.

Progress is settled lazily (only for jobs whose state or rate changes), so the
cost grows with the number of events, not with simulated seconds.  The
simulator is deterministic: no randomness, ties broken by event sequence.
"""
from __future__ import annotations

import dataclasses
import heapq
import math
from itertools import chain
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from policies.model import Allocation, ClusterSnapshot, FinishedJob, Gpu, Job, JobState, Node
from policies.pipeline import MODELS as PIPELINE_MODELS, Network, configurations, counts_of, \
    iter_time as pipeline_iter_time, pipeline_spec
from policies.plan import Plan, PreemptJob, ResizeJob, StartJob

from ..profiles import Models
from .result import JobRecord, SimResult, TimelineSample

ARRIVAL, COMPLETION, TICK = 0, 1, 2
EPS = 1e-6
STALL_CALLS = 1000  # idle-cluster policy calls before the run is declared stuck


class PlanError(ValueError):
    """A policy returned a plan the cluster cannot carry out (a policy bug)."""


@dataclass(frozen=True)
class SimConfig:
    interval: float = 60.0  # seconds between scheduling ticks while jobs wait
    seed: int = 0
    xi: Optional[float] = None  # override every pair's interference ratio
    preempt_cost: float = 0.0  # seconds of restore after a pre-emption
    reveal_lengths: bool = True  # policies see total_iters
    sample_every: Optional[float] = None  # timeline sampling; default adaptive
    max_jobs_per_gpu: int = 2
    network: Network = Network()  # seed 003 eq. 5-6 bandwidths (Table I jobs)


class _Rec:
    """Mutable simulator-side state of one job."""

    __slots__ = ("spec", "state", "alloc", "as_of", "done_iters", "service", "executed",
                 "rate", "overhead", "preemptions", "first_start", "end", "version",
                 "view", "shared", "partners")

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
        self.end: Optional[float] = None
        self.version = 0
        self.view: Optional[Job] = None
        self.shared = False
        self.partners: frozenset[str] = frozenset()


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
        self.recs = {j.id: _Rec(j) for j in jobs}
        self.gpu_mem = {n.name: n.gpu_mem_mb for n in self.nodes}
        self.gpu_jobs: dict[Gpu, tuple[str, ...]] = {}
        self.free_by_node: dict[str, set[int]] = {n.name: set(range(n.num_gpus)) for n in self.nodes}
        self.total_gpus = sum(n.num_gpus for n in self.nodes)
        self.valid_gpus = frozenset(g for n in self.nodes for g in n.gpus())
        self.gpu_obj = {n.name: n.gpus() for n in self.nodes}
        self.free_tuples: dict[str, tuple[Gpu, ...]] = {}
        self.dirty_nodes = {n.name for n in self.nodes}
        self.free_cache = None
        self.active: dict[str, _Rec] = {}
        self.views: dict[str, Job] = {}  # active job -> its current frozen view
        self.dirty_views: set[str] = set()
        self.waiting_ids: dict[str, None] = {}  # insertion-ordered set
        self.events: list = []
        self.seq = 0
        self.now = 0.0
        self.tick_pending = False
        self.busy_gpu_seconds = 0.0
        self.busy_gpus = 0
        self.last_busy_t = 0.0
        self.timeline: list[TimelineSample] = []
        self.policy_calls = 0
        self.n_done = 0
        self.arrivals_left = len(jobs)
        self.idle_calls = 0  # consecutive calls that left an idle cluster idle for good
        self.history: list[FinishedJob] = list(prior_history)
        self.history_view: tuple = tuple(self.history)
        self.refit, self.refit_every = refit, float(refit_every)
        self.last_fit: Optional[float] = None
        self.predictors: Mapping[str, Any] = MappingProxyType({})
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
        total = len(self.recs)
        while self.events:
            t = self.events[0][0]
            self._advance_busy(t)
            self.now = t
            changed = False
            tick = False
            while self.events and self.events[0][0] <= t:
                _, kind, _, jid, version = heapq.heappop(self.events)
                if kind == ARRIVAL:
                    self.arrivals_left -= 1
                    rec = self.recs[jid]
                    self.active[jid] = rec
                    self.waiting_ids[jid] = None
                    self.dirty_views.add(jid)
                    changed = True
                elif kind == COMPLETION:
                    rec = self.recs[jid]
                    if rec.version == version and rec.state is JobState.RUNNING:
                        self._complete(rec)
                        changed = True
                else:
                    self.tick_pending = False
                    tick = True
            if (changed or tick) and self.waiting_ids:
                self._schedule()
                self._check_stall()
            if self.waiting_ids and not self.tick_pending:
                self._push(self.now + self.cfg.interval, TICK, "", 0)
                self.tick_pending = True
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

    def _advance_busy(self, t: float) -> None:
        self.busy_gpu_seconds += self.busy_gpus * (t - self.last_busy_t)
        self.last_busy_t = t

    # ------------------------------------------------------------ progress
    def _settle(self, rec: _Rec) -> None:
        if rec.state is JobState.RUNNING:
            dt = self.now - rec.as_of
            o = min(rec.overhead, dt)
            rec.overhead -= o
            rec.done_iters += rec.rate * (dt - o)
            rec.service += rec.spec.num_gpus * dt
            rec.executed += dt
        rec.as_of = self.now
        rec.view = None
        self.dirty_views.add(rec.spec.id)

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
        spec, alloc = rec.spec, rec.alloc
        if spec.app in PIPELINE_MODELS:
            t_iter = self._pipeline_alpha(spec, alloc)
        else:
            prof = self.models.profiles[spec.app]
            k = len(alloc.gpus)
            t_iter = prof.iter_time(spec.global_batch / k, k, alloc.num_nodes, alloc.accum_steps)
        xi = 1.0
        for other in rec.partners:
            xi = max(xi, self.models.interference.ratio(spec.app, self.recs[other].spec.app))
        if alloc.mps_pct is not None:  # an MPS share caps compute (seed 004 LGRR)
            t_iter /= max(alloc.mps_pct, 1) / 100.0
        return 1.0 / (t_iter * xi)

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
        for g in rec.alloc.gpus:
            rest = tuple(x for x in self.gpu_jobs.get(g, ()) if x != rec.spec.id)
            if rest:
                self.gpu_jobs[g] = rest
                affected.update(rest)
            else:
                self.gpu_jobs.pop(g, None)
                self.free_by_node[g.node].add(g.index)
                self.busy_gpus -= 1
                self.dirty_nodes.add(g.node)
                self.free_cache = None
        return affected

    def _refresh(self, jids: Iterable[str]) -> None:
        for jid in jids:
            other = self.recs[jid]
            if other.state is JobState.RUNNING:
                self._settle(other)
                other.partners = self._partners_of(other.alloc.gpus, jid)
                self._reschedule(other)

    def _complete(self, rec: _Rec) -> None:
        self._settle(rec)
        rec.done_iters = rec.spec.total_iters
        rec.state = JobState.PENDING  # leaves the active set
        rec.end = self.now
        sp = rec.spec
        self.history.append(FinishedJob(sp.id, sp.user, sp.submit_time, rec.first_start, self.now,
                                        sp.num_gpus, sp.app, sp.name, sp.group_id,
                                        sp.total_iters, sp.global_batch))
        self.history_view = None
        affected = self._release(rec)
        del self.active[rec.spec.id]
        self.views.pop(rec.spec.id, None)
        self.dirty_views.discard(rec.spec.id)
        self.n_done += 1
        self._refresh(affected)

    # ------------------------------------------------------------ scheduling
    def snapshot(self) -> ClusterSnapshot:
        for jid in self.dirty_views:
            self.views[jid] = self._view(self.recs[jid])
        self.dirty_views.clear()
        jobs = dict(self.views)
        if self.free_cache is None:
            for name in self.dirty_nodes:
                self.free_tuples[name] = tuple(
                    self.gpu_obj[name][i] for i in sorted(self.free_by_node[name]))
            self.dirty_nodes.clear()
            index = {n: t for n, t in self.free_tuples.items() if t}
            self.free_cache = (tuple(chain.from_iterable(index.values())),
                               MappingProxyType(index))
        free, index = self.free_cache
        if self.history_view is None:
            self.history_view = tuple(self.history)
        if self.refit is not None and (self.last_fit is None
                                       or self.now - self.last_fit >= self.refit_every):
            self.predictors = MappingProxyType(dict(self.refit(self.history_view, self.now)))
            self.last_fit = self.now
        return ClusterSnapshot(
            now=self.now, nodes=self.nodes, jobs=MappingProxyType(jobs),
            gpu_jobs=MappingProxyType(dict(self.gpu_jobs)), free_gpus=free,
            profiles=self.models.profiles, memory=self.models.memory,
            interference=self.models.interference, seed=self.cfg.seed,
            max_jobs_per_gpu=self.cfg.max_jobs_per_gpu, free_index=index,
            waiting_ids=tuple(self.waiting_ids), history=self.history_view,
            predictors=self.predictors)

    def _view(self, rec: _Rec) -> Job:
        if rec.view is None:
            rec.view = dataclasses.replace(
                rec.spec,
                total_iters=rec.spec.total_iters if self.cfg.reveal_lengths else None,
                state=rec.state, allocation=rec.alloc, start_time=rec.first_start,
                as_of=rec.as_of, completed_iters=rec.done_iters, attained_service=rec.service,
                executed_time=rec.executed,
                iter_rate=rec.rate if rec.state is JobState.RUNNING else 0.0,
                restore_left=rec.overhead if rec.state is JobState.RUNNING else 0.0,
                preemptions=rec.preemptions)
        return rec.view

    def _schedule(self) -> None:
        snap = self.snapshot()
        plan = self.policy.schedule(snap)
        self.policy_calls += 1
        self.apply(plan)

    def apply(self, plan: Plan) -> None:
        if not isinstance(plan, Plan):
            raise PlanError(f"policy returned {type(plan).__name__}, not a Plan")
        affected: set[str] = set()
        for act in plan.actions:
            if act.job_id not in self.active:
                raise PlanError(f"plan names job {act.job_id!r}, which is not active")
        for act in plan.preempts():
            rec = self.active[act.job_id]
            if rec.state is not JobState.RUNNING:
                raise PlanError(f"cannot pre-empt job {act.job_id}: it is not running")
            self._settle(rec)
            affected |= self._release(rec)
            rec.state, rec.alloc, rec.rate = JobState.SUSPENDED, None, 0.0
            rec.partners = frozenset()
            rec.preemptions += 1
            rec.version += 1
            self.waiting_ids[rec.spec.id] = None
        for act in plan.resizes():
            rec = self.active[act.job_id]
            if rec.state is not JobState.RUNNING:
                raise PlanError(f"cannot resize job {act.job_id}: it is not running")
            self._settle(rec)
            affected |= self._release(rec)
            self._place(rec, act.gpus, act.sub_batch, act.accum_steps, act.mps_pct, resize=True,
                        workers=act.workers)
            affected |= set(rec.partners)
        for act in plan.starts():
            rec = self.active[act.job_id]
            if rec.state is JobState.RUNNING:
                raise PlanError(f"cannot start job {act.job_id}: it is already running")
            if len(act.gpus) != rec.spec.num_gpus:
                raise PlanError(f"gang violation: job {act.job_id} needs {rec.spec.num_gpus} GPUs,"
                                f" plan gives {len(act.gpus)}")
            self._settle(rec)
            self._place(rec, act.gpus, act.sub_batch, act.accum_steps, act.mps_pct,
                        workers=act.workers)
            del self.waiting_ids[rec.spec.id]
            affected |= set(rec.partners)
        self._refresh(affected)

    def _place(self, rec: _Rec, gpus, sub_batch, accum, mps_pct, resize=False, workers=()) -> None:
        jid = rec.spec.id
        if workers and tuple(w.gpu for w in workers) != tuple(gpus):
            raise PlanError(f"job {jid}: worker records do not list the plan's GPUs in order")
        if len(set(gpus)) != len(gpus):
            raise PlanError(f"job {jid}: the same GPU listed twice")
        # the rate (eq. 7) runs the whole per-GPU share in ``accum`` steps and the
        # memory check uses ``sub_batch``: they must agree with the global batch
        if int(sub_batch) < 1 or int(accum) < 1 or \
                int(sub_batch) * int(accum) * len(gpus) < rec.spec.global_batch:
            raise PlanError(f"job {jid}: sub-batch {sub_batch} x {accum} accumulation steps on "
                            f"{len(gpus)} GPUs does not cover its global batch "
                            f"{rec.spec.global_batch}")
        if mps_pct is not None and not 1 <= mps_pct <= 100:
            raise PlanError(f"job {jid}: MPS share {mps_pct}% is not in 1..100")
        for g in gpus:
            if g not in self.valid_gpus:
                raise PlanError(f"job {jid}: no such GPU {g}")
            on = self.gpu_jobs.get(g, ())
            if len(on) >= self.cfg.max_jobs_per_gpu:
                raise PlanError(f"job {jid}: GPU {g} already holds {len(on)} jobs")
            if on:
                mem = self.models.memory
                need = sum(mem[self.recs[x].spec.app].mem_mb(self.recs[x].alloc.sub_batch)
                           for x in on if self.recs[x].spec.app in mem)
                if rec.spec.app in mem:
                    need += mem[rec.spec.app].mem_mb(sub_batch)
                if need > self.gpu_mem[g.node] + EPS:
                    raise PlanError(f"job {jid}: GPU {g} memory over capacity ({need:.0f} MiB)")
        for g in gpus:
            if g not in self.gpu_jobs:
                self.busy_gpus += 1  # GPUs holding at least one job
            self.gpu_jobs[g] = self.gpu_jobs.get(g, ()) + (jid,)
            self.free_by_node[g.node].discard(g.index)
            self.dirty_nodes.add(g.node)
            self.free_cache = None
        rec.alloc = Allocation(tuple(gpus), int(sub_batch), int(accum), mps_pct,
                               workers=tuple(workers))
        rec.partners = self._partners_of(gpus, jid)
        if rec.partners:
            rec.shared = True
        if not resize:
            if rec.first_start is None:
                rec.first_start = self.now
            elif rec.preemptions:
                rec.overhead += self.cfg.preempt_cost
        rec.state = JobState.RUNNING
        self._reschedule(rec)

    # ------------------------------------------------------------ metrics
    def _sample(self) -> None:
        """QL, CE and BI at ``now`` (seed 001 §2.2) and GPU use."""
        ce = 0.0
        bi_sum, n_wait = 0.0, 0
        for rec in self.active.values():
            one = self._one_gpu_rate(rec.spec)
            if rec.state is JobState.RUNNING:
                if self.now - rec.as_of >= rec.overhead:  # restoring: no throughput yet
                    ce += rec.rate / one
            else:
                n_wait += 1
                left = rec.spec.total_iters - rec.done_iters
                pending = self.now - (rec.as_of if rec.preemptions else rec.spec.submit_time)
                bi_sum += pending / max(left / one, EPS)
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
