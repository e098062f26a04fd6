"""Typed, immutable model of a GPU cluster and its jobs: what a policy sees.

Everything here is a frozen dataclass or a NamedTuple.  A :class:`ClusterSnapshot`
is the complete view of the cluster at time ``now``; a policy reads nothing else.

Progress fields of a running job (completed iterations, attained service,
executed time) are stored as of ``Job.as_of`` together with the rates in force
since then, and the snapshot extrapolates them to ``now`` (``snapshot.completed``
etc.).  That keeps records immutable while letting the simulator reuse a job's
record until its state actually changes, so simulation cost grows with events,
not with simulated seconds.
"""
from __future__ import annotations

import enum
from operator import attrgetter
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping, NamedTuple, Optional

from .throughput import InterferenceTable, MemoryProfile, ThroughputProfile


class Gpu(NamedTuple):
    """One GPU: the node's name and the GPU's index on that node (GRES index)."""

    node: str
    index: int


@dataclass(frozen=True)
class Node:
    name: str
    num_gpus: int
    gpu_type: str = "gpu"
    gpu_mem_mb: int = 16384

    def gpus(self) -> tuple[Gpu, ...]:
        return tuple(Gpu(self.name, i) for i in range(self.num_gpus))


class JobState(str, enum.Enum):
    PENDING = "pending"  # never started
    RUNNING = "running"
    SUSPENDED = "suspended"  # pre-empted, waiting to resume (keeps its progress)


@dataclass(frozen=True)
class Allocation:
    """Where and how a running job runs.

    ``sub_batch`` is the per-GPU micro-batch and ``accum_steps`` the number of
    gradient-accumulation steps (seed 000 eq. 7): ``sub_batch * accum_steps *
    len(gpus)`` covers the job's global batch.  ``mps_pct`` is an MPS active
    thread percentage (seed 004 LGRR) or ``None`` for no limit.
    """

    gpus: tuple[Gpu, ...]
    sub_batch: int
    accum_steps: int = 1
    mps_pct: Optional[int] = None

    @property
    def num_nodes(self) -> int:
        return len({g.node for g in self.gpus})


@dataclass(frozen=True)
class Job:
    """A training job.

    ``total_iters`` is the job's true length in iterations; it is ``None`` when
    the policy is not allowed to know it (length-unaware setting).  A policy
    that needs a length uses ``duration_estimate`` (user estimate, e.g. Slurm
    time limit) or its own prediction.
    """

    id: str
    submit_time: float
    num_gpus: int
    app: str
    global_batch: int
    user: str = "user"
    total_iters: Optional[float] = None
    duration_estimate: Optional[float] = None
    deadline: Optional[float] = None
    group_id: Optional[str] = None
    state: JobState = JobState.PENDING
    allocation: Optional[Allocation] = None
    start_time: Optional[float] = None  # first start
    # progress as of ``as_of``; rates valid while the state is unchanged
    as_of: float = 0.0
    completed_iters: float = 0.0
    attained_service: float = 0.0  # GPU-seconds
    executed_time: float = 0.0  # seconds spent running
    iter_rate: float = 0.0  # iterations / s while running (0 otherwise)
    # seconds of restore after a pre-emption still left as of ``as_of``: the
    # job holds its GPUs but makes no progress until they are over
    restore_left: float = 0.0
    preemptions: int = 0

    @property
    def running(self) -> bool:
        return self.state is JobState.RUNNING

    @property
    def waiting(self) -> bool:
        return self.state is not JobState.RUNNING


_EMPTY: Mapping = MappingProxyType({})
_SUBMIT_ORDER = attrgetter("submit_time", "id")
_FACTS: dict[int, tuple] = {}


def _node_facts(nodes: tuple[Node, ...]) -> tuple[int, int, Mapping[str, int]]:
    """(total GPUs, max GPUs per node, name -> rank) of a node tuple, memoised
    by identity: the simulator passes the same tuple in every snapshot."""
    hit = _FACTS.get(id(nodes))
    if hit is not None and hit[0] is nodes:
        return hit[1]
    facts = (sum(n.num_gpus for n in nodes), max((n.num_gpus for n in nodes), default=0),
             MappingProxyType({n.name: i for i, n in enumerate(nodes)}))
    if len(_FACTS) > 32:
        _FACTS.clear()
    _FACTS[id(nodes)] = (nodes, facts)  # keeps ``nodes`` alive, so the id stays unique
    return facts


@dataclass(frozen=True)
class ClusterSnapshot:
    """The immutable view of the cluster at ``now``: all a policy sees.

    ``gpu_jobs`` maps each GPU to the ids of the jobs placed on it (at most two
    jobs per GPU).  ``free_gpus`` lists GPUs with no job, in node order.
    ``seed`` is the only source of randomness a policy may use.
    """

    now: float
    nodes: tuple[Node, ...]
    jobs: Mapping[str, Job]
    gpu_jobs: Mapping[Gpu, tuple[str, ...]]
    free_gpus: tuple[Gpu, ...]
    profiles: Mapping[str, ThroughputProfile] = field(default_factory=lambda: _EMPTY)
    memory: Mapping[str, MemoryProfile] = field(default_factory=lambda: _EMPTY)
    interference: InterferenceTable = field(default_factory=InterferenceTable)
    seed: int = 0
    max_jobs_per_gpu: int = 2
    # optional precomputed node -> free GPUs (same content as free_gpus); the
    # simulator fills it so policies need not regroup thousands of GPUs
    free_index: Optional[Mapping[str, tuple[Gpu, ...]]] = None
    # optional precomputed ids of the waiting jobs (same as scanning ``jobs``)
    waiting_ids: Optional[tuple[str, ...]] = None

    # ---- derived views -------------------------------------------------
    @property
    def total_gpus(self) -> int:
        return _node_facts(self.nodes)[0]

    @property
    def max_gpus_per_node(self) -> int:
        return _node_facts(self.nodes)[1]

    @property
    def node_rank(self) -> Mapping[str, int]:
        """Node name -> position in ``nodes`` (tie-break order)."""
        return _node_facts(self.nodes)[2]

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def pending(self) -> tuple[Job, ...]:
        """Jobs waiting to (re)start, in submit order (ties by id)."""
        if self.waiting_ids is not None:
            jobs = self.jobs
            return tuple(sorted([jobs[i] for i in self.waiting_ids], key=_SUBMIT_ORDER))
        return tuple(sorted((j for j in self.jobs.values() if j.waiting), key=_SUBMIT_ORDER))

    def running(self) -> tuple[Job, ...]:
        return tuple(sorted((j for j in self.jobs.values() if j.running),
                            key=lambda j: (j.submit_time, j.id)))

    def completed(self, job: Job) -> float:
        """Iterations done by ``now`` (no progress during ``restore_left``)."""
        if not job.running:
            return job.completed_iters
        dt = self.now - job.as_of
        if job.restore_left:
            dt = max(0.0, dt - job.restore_left)
        return job.completed_iters + job.iter_rate * dt

    def attained_service(self, job: Job) -> float:
        """GPU-seconds received by ``now`` (Tiresias' 2D attained service)."""
        if job.running:
            return job.attained_service + job.num_gpus * (self.now - job.as_of)
        return job.attained_service

    def executed_time(self, job: Job) -> float:
        if job.running:
            return job.executed_time + (self.now - job.as_of)
        return job.executed_time

    def remaining_iters(self, job: Job) -> Optional[float]:
        if job.total_iters is None:
            return None
        return max(0.0, job.total_iters - self.completed(job))

    def exclusive_iter_time(self, job: Job) -> float:
        """Seconds per iteration of ``job`` alone on ``job.num_gpus`` GPUs,
        consolidated, whole global batch per step (no accumulation)."""
        prof = self.profiles.get(job.app)
        if prof is None:
            raise KeyError(f"no throughput profile for application {job.app!r}")
        per_node = self.max_gpus_per_node or job.num_gpus
        nodes = -(-job.num_gpus // max(per_node, 1))
        local = max(1.0, job.global_batch / job.num_gpus)
        return prof.iter_time(local, job.num_gpus, nodes, 1)

    def remaining_time(self, job: Job) -> Optional[float]:
        """Remaining seconds if run exclusively (known lengths), else the
        user's estimate minus executed time, else ``None``."""
        rem = self.remaining_iters(job)
        if rem is not None:
            return rem * self.exclusive_iter_time(job)
        if job.duration_estimate is not None:
            return max(0.0, job.duration_estimate - self.executed_time(job))
        return None

    def job_length(self, job: Job) -> Optional[float]:
        """Total exclusive duration ``L_k`` (seconds) if known or estimated."""
        if job.total_iters is not None:
            return job.total_iters * self.exclusive_iter_time(job)
        return job.duration_estimate

    def free_by_node(self) -> dict[str, tuple[Gpu, ...]]:
        """Node name -> its free GPUs, nodes with none left out (a fresh dict the
        caller may change; values are tuples, replace them rather than mutate)."""
        if self.free_index is not None:
            return {n: gs for n, gs in self.free_index.items() if gs}
        out: dict[str, list[Gpu]] = {}
        for g in self.free_gpus:
            out.setdefault(g.node, []).append(g)
        return {n: tuple(v) for n, v in out.items()}

    def xi(self, app: str, other: str) -> float:
        """Interference ratio ξ of ``app`` when sharing with ``other`` (seed 000 eq. 5-6)."""
        return self.interference.ratio(app, other)
