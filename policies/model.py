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
from collections import abc
from itertools import chain, islice
from operator import attrgetter
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping, NamedTuple, Optional, Sequence

from .throughput import GpuTypeTable, InterferenceTable, MemoryProfile, ThroughputProfile


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


# the member itself: on Python 3.11 ``JobState.RUNNING`` is a class-attribute lookup through
# the enum's machinery, about 0.3 µs, and ``Job.running`` is asked in every policy's loops
_RUNNING = JobState.RUNNING
_new = object.__new__


@dataclass(frozen=True)
class WorkerAlloc:
    """One worker (rank) of a job: the allocation record the whole system passes along.

    policy -> Plan -> simulator / daemon -> launcher decision -> launcher report ->
    snapshot: every hop carries these fields unchanged.

    * ``share``: samples of the global batch this worker processes per optimizer step
      (unequal shares = seed 004 LISS sample stealing; the shares of a job sum to its
      global batch);
    * ``micro_batch``: samples per forward/backward pass; ``accum_steps`` micro-steps
      (seed 000 eq. 7) cover the share: ``micro_batch * accum_steps >= share``;
    * ``mps_pct``: CUDA MPS active-thread percentage (seed 004 LGRR) or ``None``;
    * ``mem_limit_mb``: MPS pinned device-memory limit or ``None``;
    * ``stage``: pipeline stage this worker runs (seed 003), 0 for pure data parallelism;
    * ``mps_cap``: the highest MPS share this worker can run with, or ``None`` (no ceiling,
      the simulator's default).  Not a decision: on Slurm the live snapshot sets it from the
      job's ``gres/mps`` units on the worker's GPU (Slurm sets
      ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` from them and gimbal-run never loosens it), and
      ``mps_pct`` there is the share applied, at most ``mps_cap``.  A policy that plans an MPS
      share keeps it within the ceiling (seed 004 Algorithm 1: ``policies.gimbal_coord``).
    """

    gpu: Gpu
    share: int
    micro_batch: int
    accum_steps: int = 1
    mps_pct: Optional[int] = None
    mem_limit_mb: Optional[int] = None
    stage: int = 0
    mps_cap: Optional[int] = None


def uniform_workers(gpus: tuple[Gpu, ...], sub_batch: int, accum_steps: int = 1,
                    mps_pct: Optional[int] = None,
                    global_batch: Optional[int] = None) -> tuple[WorkerAlloc, ...]:
    """Workers of an evenly split job.  With ``global_batch`` the shares are the even split
    of it (the first ``global_batch % k`` workers take one sample more, as the launcher
    splits); without it every worker's share is ``sub_batch * accum_steps``."""
    k = len(gpus)
    if global_batch is None or k == 0:
        base, extra = sub_batch * accum_steps, 0
    else:
        base, extra = divmod(int(global_batch), k)
    # each record is ``WorkerAlloc(g, share, sub_batch, accum_steps, mps_pct)``, written as
    # its attribute dict (every field, in field order: a frozen dataclass with no
    # ``__post_init__`` is nothing else; policies.plan.reason says why): the generated
    # ``__init__``'s eight ``object.__setattr__`` calls were most of a simulated start's cost
    # (tests/policies/test_model.py checks the records against the constructor's)
    out = []
    for i, g in enumerate(gpus):
        w = _new(WorkerAlloc)
        w.__dict__.update(gpu=g, share=base + 1 if i < extra else base, micro_batch=sub_batch,
                          accum_steps=accum_steps, mps_pct=mps_pct, mem_limit_mb=None, stage=0,
                          mps_cap=None)
        out.append(w)
    return tuple(out)


@dataclass(frozen=True)
class Allocation:
    """Where and how a running job runs: the job-level view of its worker records.

    ``sub_batch`` is the per-GPU micro-batch and ``accum_steps`` the number of
    gradient-accumulation steps (seed 000 eq. 7): ``sub_batch * accum_steps *
    len(gpus)`` covers the job's global batch.  ``mps_pct`` is an MPS active
    thread percentage (seed 004 LGRR) or ``None`` for no limit.

    ``workers`` is the per-worker record (:class:`WorkerAlloc`); when not given it is
    derived as the uniform split.  Build an allocation from explicit workers with
    :meth:`from_workers`: the job-level fields are then derived (largest micro-batch and
    accumulation count, the MPS share when all workers agree, else the smallest).
    ``global_batch`` is the batch in force when a policy overrode the job's own
    (``None``: the job's submitted batch).
    """

    gpus: tuple[Gpu, ...]
    sub_batch: int
    accum_steps: int = 1
    mps_pct: Optional[int] = None
    workers: tuple[WorkerAlloc, ...] = ()
    global_batch: Optional[int] = None

    def __post_init__(self):
        if not self.workers:
            object.__setattr__(self, "workers", uniform_workers(
                self.gpus, self.sub_batch, self.accum_steps, self.mps_pct, self.global_batch))

    @classmethod
    def from_workers(cls, workers: tuple[WorkerAlloc, ...],
                     global_batch: Optional[int] = None) -> "Allocation":
        if not workers:
            raise ValueError("an allocation needs at least one worker")
        pcts = [w.mps_pct for w in workers]
        if all(p is None for p in pcts):
            mps = None
        else:
            mps = min(p if p is not None else 100 for p in pcts)
        return cls(tuple(w.gpu for w in workers), max(w.micro_batch for w in workers),
                   max(w.accum_steps for w in workers), mps, tuple(workers), global_batch)

    @property
    def num_nodes(self) -> int:
        return len({g.node for g in self.gpus})

    @property
    def total_share(self) -> int:
        return sum(w.share for w in self.workers)

    def stages(self) -> tuple[tuple[Gpu, ...], ...]:
        """GPU set of each pipeline stage, in stage order (one stage for data parallel)."""
        out: dict[int, list[Gpu]] = {}
        for w in self.workers:
            out.setdefault(w.stage, []).append(w.gpu)
        return tuple(tuple(out[k]) for k in sorted(out))


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
    name: str = ""
    # the job's metadata allows a policy to change its global batch (seed 002 Alg. 2/3):
    # ``None`` = fixed; else the (min, max) global batch the user accepts
    batch_range: Optional[tuple[int, int]] = None
    # moldable / elastic GPU count (seed 001 shares, seed 002 Alg. 2 chooses the count):
    # None = exactly num_gpus; else a policy may run the job on any count in (min, max)
    gpu_range: Optional[tuple[int, int]] = None
    # pipeline stages the job's model is split into (seed 003); 1 = data parallel only
    stages: int = 1
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
    # when the current run began (a running job; a resumed one counts from its resume):
    # the minimum run time before a job may be pre-empted again counts from here
    run_start: Optional[float] = None

    @property
    def running(self) -> bool:
        return self.state is _RUNNING

    @property
    def waiting(self) -> bool:
        return self.state is not _RUNNING


@dataclass(frozen=True)
class FinishedJob:
    """A job that has ended: the history predictors train on (seed 003 §IV).

    In the simulator: jobs finished before ``now``; on the cluster: the site's sacct
    history plus gimbal's own records.  ``iterations`` is ``None`` when unknown."""

    id: str
    user: str
    submit_time: float
    start_time: float
    end_time: float
    num_gpus: int
    app: str = ""
    name: str = ""
    group_id: Optional[str] = None
    iterations: Optional[float] = None
    global_batch: Optional[int] = None

    @property
    def duration(self) -> float:
        return max(0.0, self.end_time - self.start_time)


_EMPTY: Mapping = MappingProxyType({})
# (submit time, id): the waiting and running orders (a job view's key, made in C)
SUBMIT_ORDER = attrgetter("submit_time", "id")
_FACTS: dict[int, tuple] = {}
_XIT: dict[tuple, tuple] = {}  # ClusterSnapshot.exclusive_iter_time's memo


def identity_memo(store: dict, obj, compute: Callable, limit: int):
    """``compute(obj)`` memoised in ``store`` by ``obj``'s identity, for pure functions of an
    immutable object the simulator and the daemon hand in again and again (a node tuple, an
    allocation record).  The entry keeps ``obj`` alive, so its id stays unique; the store is
    emptied once it holds more than ``limit`` entries."""
    hit = store.get(id(obj))
    if hit is not None and hit[0] is obj:
        return hit[1]
    value = compute(obj)
    if len(store) > limit:
        store.clear()
    store[id(obj)] = (obj, value)
    return value


def _node_facts(nodes: tuple[Node, ...]) -> tuple:
    """(total GPUs, max GPUs per node, name -> rank, name -> GPUs, smallest GPU memory) of a
    node tuple, memoised by identity: the simulator passes the same tuple in every snapshot."""
    return identity_memo(_FACTS, nodes, _compute_node_facts, 32)


def _compute_node_facts(nodes: tuple[Node, ...]) -> tuple:
    return (sum(n.num_gpus for n in nodes), max((n.num_gpus for n in nodes), default=0),
            MappingProxyType({n.name: i for i, n in enumerate(nodes)}),
            MappingProxyType({n.name: n.num_gpus for n in nodes}),
            min((n.gpu_mem_mb for n in nodes), default=None))


class Frozen(abc.Sequence):
    """A read-only sequence over ``items[start:stop]`` of a list that its owner does not
    change there while any view of it is referenced: an append-only list (the simulator's
    history: later appends are past ``stop``) or a list the owner copies before changing it
    when something still holds it (the simulator's waiting order, checked by reference
    count).  Handing out a view costs O(1) instead of a tuple copy of the whole list.
    Compares equal to a tuple or list of the same items; a slice with step 1 is another
    view, any other slice a tuple."""

    __slots__ = ("_items", "_start", "_stop")

    def __init__(self, items: list, start: int = 0, stop: Optional[int] = None):
        self._items = items
        self._start = start
        self._stop = len(items) if stop is None else stop

    def __len__(self) -> int:
        return self._stop - self._start

    def __getitem__(self, i):
        n = self._stop - self._start
        if isinstance(i, slice):
            a, b, step = i.indices(n)
            if step == 1:
                return Frozen(self._items, self._start + a, self._start + max(a, b))
            return tuple(self._items[self._start:self._stop][i])
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("index out of range")
        return self._items[self._start + i]

    def __iter__(self):
        if self._start == 0:
            if self._stop == len(self._items):
                return iter(self._items)
            return islice(self._items, self._stop)
        # a C-level copy of the slice: islice would step over the first ``start`` items
        return iter(self._items[self._start:self._stop])

    def __eq__(self, other) -> bool:
        if isinstance(other, (Frozen, tuple, list)):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None

    def __repr__(self) -> str:
        return f"Frozen({tuple(self)!r})"

    def __reduce__(self):  # pickles (and deep-copies) as a view of its own list
        return (Frozen, (list(self),))

    def extends(self, other: "Frozen") -> bool:
        """True when this view is ``other`` or a later view of the same append-only list
        (same list object, same start, stop at or past ``other``'s): then ``other``'s
        items are this view's first ``len(other)`` items (the simulator's change record,
        :attr:`WaitingQueue.changes`)."""
        return (type(other) is Frozen and type(self) is Frozen and other._items is self._items
                and other._start == self._start and other._stop <= self._stop)


class Joined(Frozen):
    """A read-only sequence: the tuple ``head`` followed by a :class:`Frozen` view
    ``tail`` (same rules as Frozen: its owner does not change the tail's list while the
    view is referenced).  A policy's queue order made of a few jobs it skipped plus the
    untouched rest of a kept order, without copying the rest."""

    __slots__ = ("_head",)

    def __init__(self, head: tuple, tail: Frozen):
        super().__init__(tail._items, tail._start, tail._stop)
        self._head = tuple(head)

    def __len__(self) -> int:
        return len(self._head) + self._stop - self._start

    def __getitem__(self, i):
        h = len(self._head)
        if isinstance(i, slice):
            a, b, step = i.indices(len(self))
            if step == 1 and a >= h:
                return Frozen(self._items, self._start + a - h, self._start + max(a, b) - h)
            return tuple(self)[i]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("index out of range")
        return self._head[i] if i < h else self._items[self._start + i - h]

    def __iter__(self):
        return chain(self._head, Frozen.__iter__(self))

    def __repr__(self) -> str:
        return f"Joined({tuple(self)!r})"


class Deferred(Frozen):
    """A read-only sequence made on first use: the concatenation of ``parts``, each a
    sequence or a no-argument callable returning one (then kept; the parts are dropped).
    A policy's queue order that would be re-sorted at every call (similarity's queue past
    the point where no GPU is left, :mod:`policies.similarity_kept`) costs nothing per job
    unless a consumer reads it (the simulator reads only the actions).  Compares, slices and pickles as Frozen."""

    __slots__ = ("_parts",)

    def __init__(self, parts):
        super().__init__([], 0, 0)
        self._items = None
        self._parts = tuple(parts)

    def _made(self) -> "Deferred":
        if self._items is None:
            items: list = []
            for p in self._parts:
                items.extend(p() if callable(p) else p)
            self._items, self._stop, self._parts = items, len(items), ()
        return self

    def __len__(self) -> int:
        return Frozen.__len__(self._made())

    def __getitem__(self, i):
        return Frozen.__getitem__(self._made(), i)

    def __iter__(self):
        return Frozen.__iter__(self._made())

    def __repr__(self) -> str:
        return f"Deferred({tuple(self)!r})"


class Counted(Deferred):
    """A :class:`Deferred` whose length is known before it is made: the simulator's
    ``free_gpus``, whose count it keeps, while the GPUs are chained from its free index
    only when a consumer reads them (most policies ask only the count, the elastic ones
    not even that)."""

    __slots__ = ("_n",)

    def __init__(self, parts, n: int):
        super().__init__(parts)
        self._n = n

    def __len__(self) -> int:
        return self._n


@dataclass(frozen=True)
class WaitingQueue:
    """The waiting jobs in submit order (ties by id), as :meth:`ClusterSnapshot.pending`
    returns them: ``jobs`` and their ``ids`` in the same order, and ``max_gpus``, the
    largest GPU count any of them asks (0 when none waits).

    The simulator keeps this order incrementally (one binary-search insertion or removal per
    job entering or leaving the queue) and hands a copy to each snapshot, so that a policy
    call with 10k waiting jobs does not gather and sort them; the daemon builds it once per
    snapshot with :meth:`of`."""

    jobs: Sequence[Job] = ()  # a tuple, or the simulator's Frozen view of its kept order
    ids: Sequence[str] = ()
    max_gpus: int = 0
    # the snapshot job map this queue was taken from: a snapshot uses its queue only while
    # its ``jobs`` is that very object, so ``dataclasses.replace(snap, jobs=...)`` falls
    # back to sorting instead of answering from a stale queue
    source: Optional[Mapping[str, Job]] = field(default=None, compare=False, repr=False)
    # the change record (simulator only; None elsewhere): a Frozen view of an append-only
    # list of job ids, one entry each time a job entered or left this order or its view in
    # it was replaced, oldest first, since the order began.  A later snapshot of the same
    # run gets a longer view of the same list (``Frozen.extends``), so a policy that kept
    # an order of its own over these jobs (policies.kept_order) brings it up to date from
    # the entries after the ones it has seen; every waiting job's view in ``source`` is
    # the one of its last entry
    changes: Optional[Sequence[str]] = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, jobs: Mapping[str, Job]) -> "WaitingQueue":
        """The queue of the waiting jobs of the job map ``jobs`` (its source)."""
        js = tuple(sorted((j for j in jobs.values() if j.waiting), key=SUBMIT_ORDER))
        return cls(js, tuple(j.id for j in js), max((j.num_gpus for j in js), default=0), jobs)


@dataclass(frozen=True)
class GpuChanges:
    """The change record of a snapshot's ``gpu_jobs`` (simulator only): ``log`` is a
    :class:`Frozen` view of an append-only list of GPUs, one entry each time the
    simulator's GPU map changed at that GPU (a job placed on it or taken off it), oldest
    first, since the run began; a later snapshot of the same run gets a longer view of the
    same list (``Frozen.extends``), so between two snapshots of a run only the GPUs of the
    entries after the first one's can map to other jobs.  ``source`` is the ``gpu_jobs``
    mapping the record was made for: a snapshot uses it only while its ``gpu_jobs`` is that
    very object (``dataclasses.replace(snap, gpu_jobs=...)`` drops back to a full scan)."""

    log: Sequence[Gpu]
    source: Mapping[Gpu, tuple[str, ...]]


@dataclass(frozen=True)
class JobChanges:
    """The change record of a snapshot's ``jobs`` (simulator only): ``log`` is a
    :class:`Frozen` view of an append-only list of job ids, one entry each time the
    simulator's job map changed at that id (a job arrived, got a new view, or left the
    active set), oldest first, since the run began; a later snapshot of the same run gets
    a longer view of the same list (``Frozen.extends``), so between two snapshots of a run
    only the jobs named by the entries after the first one's can differ.  ``source`` is
    the ``jobs`` mapping the record was made for: a snapshot uses it only while its
    ``jobs`` is that very object (``dataclasses.replace(snap, jobs=...)`` drops back to a
    full pass)."""

    log: Sequence[str]
    source: Mapping[str, "Job"]


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
    # optional precomputed free count -> ((node rank, node name), ...) ascending, nodes with
    # no free GPU left out: what policies.base.FreeGpus builds from free_index (the
    # simulator keeps it up to date per change instead of per call)
    free_buckets: Optional[Mapping[int, tuple[tuple[int, str], ...]]] = None
    # optional precomputed ids of the waiting jobs (same as scanning ``jobs``)
    waiting_ids: Optional[Sequence[str]] = None
    # relative speed of each application on each GPU type (Node.gpu_type)
    gpu_types: GpuTypeTable = field(default_factory=GpuTypeTable)
    # finished jobs, oldest first (seed 003 predictors train on them)
    history: Sequence[FinishedJob] = ()  # a tuple, or the simulator's Frozen view
    # fitted objects a policy may consult by name (e.g. "iterations": an A-SRPT
    # predictor fitted in gimbalctl); pure: they only map inputs to numbers
    predictors: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    # optional waiting order (WaitingQueue) of ``jobs`` (used while ``queue.source`` is
    # ``jobs``); None = pending() sorts the waiting jobs per call
    queue: Optional[WaitingQueue] = None
    # optional change record of ``gpu_jobs`` (GpuChanges; used while its ``source`` is
    # ``gpu_jobs``): lets a policy keep facts about the GPU map across calls
    gpu_changes: Optional[GpuChanges] = field(default=None, compare=False, repr=False)
    # optional change record of ``jobs`` (JobChanges; used while its ``source`` is ``jobs``)
    job_changes: Optional[JobChanges] = field(default=None, compare=False, repr=False)
    # whether this call is one of the policy's periodic rounds (``Policy.round_length``):
    # every daemon cycle is; the simulator's calls at arrivals, completions and queue ticks
    # between its round events are not.  A policy that acts on a monitoring period (GIMBAL's
    # coordination, seed 004 §6) acts at rounds only
    round_call: bool = True

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

    @property
    def node_gpus(self) -> Mapping[str, int]:
        """Node name -> its number of GPUs."""
        return _node_facts(self.nodes)[3]

    @property
    def min_gpu_mem_mb(self):
        """The smallest GPU memory of the cluster's nodes (None for no node)."""
        return _node_facts(self.nodes)[4]

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def pending(self) -> Sequence[Job]:
        """Jobs waiting to (re)start, in submit order (ties by id): a tuple, or with the
        simulator's queue a read-only :class:`Frozen` sequence (compares equal to the tuple)."""
        q = self.queue
        if q is not None and q.source is self.jobs:
            return q.jobs
        if self.waiting_ids is not None:
            jobs = self.jobs
            return tuple(sorted([jobs[i] for i in self.waiting_ids], key=SUBMIT_ORDER))
        return tuple(sorted((j for j in self.jobs.values() if j.waiting), key=SUBMIT_ORDER))

    def running(self) -> tuple[Job, ...]:
        return tuple(sorted((j for j in self.jobs.values() if j.running),
                            key=SUBMIT_ORDER))

    def completed(self, job: Job) -> float:
        """Iterations done by ``now`` (no progress during ``restore_left``)."""
        if not job.running:
            return job.completed_iters
        dt = self.now - job.as_of
        if job.restore_left:
            dt = max(0.0, dt - job.restore_left)
        return job.completed_iters + job.iter_rate * dt

    def attained_service(self, job: Job) -> float:
        """GPU-seconds received by ``now`` (Tiresias' 2D attained service), counted on the
        GPUs the job actually holds (an elastic resize changes them)."""
        if job.running:
            held = len(job.allocation.gpus) if job.allocation is not None else job.num_gpus
            return job.attained_service + held * (self.now - job.as_of)
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
        # memoised by (profile identity, node size, GPUs, batch): the time depends on
        # nothing else, and length-ranking policies ask it for every waiting job per call
        key = (id(prof), per_node, job.num_gpus, job.global_batch)
        hit = _XIT.get(key)
        if hit is not None and hit[0] is prof:
            return hit[1]
        nodes = -(-job.num_gpus // max(per_node, 1))
        local = max(1.0, job.global_batch / job.num_gpus)
        t = prof.iter_time(local, job.num_gpus, nodes, 1)
        if len(_XIT) > 8192:
            _XIT.clear()
        _XIT[key] = (prof, t)  # keeps ``prof`` alive, so its id stays unique
        return t

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

    def xi(self, app: str, other: str, mps_pct: Optional[int] = None,
           other_mps_pct: Optional[int] = None) -> float:
        """Interference ratio ξ of ``app`` when sharing with ``other`` (seed 000 eq. 5-6):
        time-slicing without MPS shares, the MPS model with them (docs/interference.md)."""
        return self.interference.ratio(app, other, mps_pct, other_mps_pct)

    def mps_alone(self, app: str, mps_pct: Optional[int]) -> float:
        """Slowdown of ``app`` alone on its GPU under an MPS thread limit."""
        return self.interference.mps_alone(app, mps_pct)


def plain_progress(cls) -> bool:
    """Whether a snapshot class computes progress as :class:`ClusterSnapshot` does (its
    ``remaining_iters`` and ``completed`` not overridden): then callers on a hot path may
    inline that arithmetic (``share_index``, ``gimbal_walk``)."""
    return (cls.remaining_iters is ClusterSnapshot.remaining_iters
            and cls.completed is ClusterSnapshot.completed)
