"""The Plan a policy returns: typed actions plus a machine-readable reason per job.

Modelled on a scheduling reply: every job the policy looked at gets a
:class:`Reason` (an enum code, a short text and the numbers used), jobs that can
never run are listed as infeasible, and ``order`` is the policy's queue order
(what ordering mode turns into Slurm priorities).
"""
from __future__ import annotations

import enum
from collections import abc
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping, Optional, Sequence, Union

from .model import Frozen, Gpu, WorkerAlloc


class ReasonCode(str, enum.Enum):
    STARTED = "started"  # exclusive GPUs
    STARTED_SHARED = "started_shared"  # co-located with another job
    KEEP_RUNNING = "keep_running"
    RESUMED = "resumed"
    PREEMPTED = "preempted"
    RESIZED = "resized"
    WAIT_RESOURCES = "wait_resources"  # not enough GPUs now
    WAIT_ORDER = "wait_order"  # a job ahead in the order is waiting
    WAIT_NO_SHARE_BENEFIT = "wait_no_share_benefit"  # seed 000 Thm 1 says run after
    WAIT_MEMORY = "wait_memory"  # no sub-batch fits beside the running job
    INFEASIBLE = "infeasible"  # asks for more than the cluster has


@dataclass(frozen=True)
class Reason:
    code: ReasonCode
    text: str = ""
    numbers: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))

    def as_dict(self) -> dict:
        return {"code": self.code.value, "text": self.text, "numbers": dict(self.numbers)}


def reason(code: ReasonCode, text: str = "", **numbers: float) -> Reason:
    """``Reason(code, text, numbers)``, made without the dataclass's ``__init__``.

    ``numbers`` is a new dict on every call (keyword arguments are always collected into
    one), so the proxy holds the only reference to it: no copy needed.  The object is
    the one ``Reason(...)`` makes — a frozen dataclass with no ``__post_init__`` is its
    attribute dict, fields in order — but written into that dict directly: the generated
    ``__init__`` sets each field through ``object.__setattr__`` (frozen), which made a
    reason about 3x dearer, and every policy makes one per job it decides."""
    r = _new(Reason)
    d = r.__dict__
    d["code"] = code
    d["text"] = text
    d["numbers"] = MappingProxyType(numbers)
    return r


_new = object.__new__


@dataclass(frozen=True)
class StartJob:
    """Start (or resume) ``job_id`` on ``gpus``.

    ``sub_batch`` × ``accum_steps`` per GPU covers the global batch (seed 000
    eq. 7); ``share_with`` names the job(s) already on those GPUs; ``mps_pct``
    is an MPS thread percentage (seed 004 LGRR) or ``None``.

    ``workers`` (optional) is the per-worker allocation record (unequal sample shares,
    per-worker MPS shares, pipeline stages); when given, ``gpus`` must list the same GPUs
    in the same order.  ``global_batch`` overrides the job's batch (only within
    ``Job.batch_range``; progress then counts samples).
    """

    job_id: str
    gpus: tuple[Gpu, ...]
    sub_batch: int
    accum_steps: int = 1
    share_with: tuple[str, ...] = ()
    mps_pct: Optional[int] = None
    workers: tuple[WorkerAlloc, ...] = ()
    global_batch: Optional[int] = None


def start_job(job_id: str, gpus: tuple, sub_batch: int, accum_steps: int = 1,
              share_with: tuple = (), mps_pct: Optional[int] = None) -> StartJob:
    """``StartJob(job_id, gpus, sub_batch, accum_steps, share_with, mps_pct)``, made as
    :func:`reason` makes a Reason (its attribute dict written at once, fields in order,
    the rest their defaults): the frozen ``__init__``'s eight ``object.__setattr__`` calls
    made it about 4 µs, and a policy that starts thousands of jobs in one pass makes one
    per start."""
    a = _new(StartJob)
    a.__dict__.update(job_id=job_id, gpus=gpus, sub_batch=sub_batch, accum_steps=accum_steps,
                      share_with=share_with, mps_pct=mps_pct, workers=(), global_batch=None)
    return a


@dataclass(frozen=True)
class PreemptJob:
    """Stop ``job_id`` (checkpoint) and return it to the queue with its progress."""

    job_id: str


@dataclass(frozen=True)
class ResizeJob:
    """Change a running job's GPU set / share (elastic policies, seed 001), or only its
    per-worker record on the same GPUs (seed 004 squeeze/swell: MPS shares and sample
    shares).  Fields as :class:`StartJob`."""

    job_id: str
    gpus: tuple[Gpu, ...]
    sub_batch: int
    accum_steps: int = 1
    mps_pct: Optional[int] = None
    workers: tuple[WorkerAlloc, ...] = ()
    global_batch: Optional[int] = None


Action = Union[StartJob, PreemptJob, ResizeJob]


@dataclass(frozen=True)
class Plan:
    policy: str
    actions: tuple[Action, ...] = ()
    # waiting jobs, first = next to run (a tuple, or a read-only Frozen view of the queue)
    order: Sequence[str] = ()
    reasons: Mapping[str, Reason] = field(default_factory=lambda: MappingProxyType({}))
    infeasible: tuple[str, ...] = ()

    def starts(self) -> tuple[StartJob, ...]:
        return tuple(a for a in self.actions if isinstance(a, StartJob))

    def preempts(self) -> tuple[PreemptJob, ...]:
        return tuple(a for a in self.actions if isinstance(a, PreemptJob))

    def resizes(self) -> tuple[ResizeJob, ...]:
        return tuple(a for a in self.actions if isinstance(a, ResizeJob))

    def as_dict(self) -> dict:
        """JSON-ready form (the dry run prints this)."""
        acts = []
        for a in self.actions:
            d = {"action": type(a).__name__, "job_id": a.job_id}
            if isinstance(a, (StartJob, ResizeJob)):
                d.update(gpus=[f"{g.node}:{g.index}" for g in a.gpus],
                         sub_batch=a.sub_batch, accum_steps=a.accum_steps,
                         mps_pct=a.mps_pct)
                if a.workers:
                    d["workers"] = [{"gpu": f"{w.gpu.node}:{w.gpu.index}", "share": w.share,
                                     "micro_batch": w.micro_batch, "accum_steps": w.accum_steps,
                                     "mps_pct": w.mps_pct, "mem_limit_mb": w.mem_limit_mb,
                                     "stage": w.stage} for w in a.workers]
                if a.global_batch is not None:
                    d["global_batch"] = a.global_batch
            if isinstance(a, StartJob):
                d["share_with"] = list(a.share_with)
            acts.append(d)
        return {"policy": self.policy, "actions": acts, "order": list(self.order),
                "infeasible": list(self.infeasible),
                "reasons": {k: v.as_dict() for k, v in sorted(self.reasons.items())}}


class Reasons(abc.Mapping):
    """A read-only job id -> :class:`Reason` map made of explicit entries plus shared
    segments: ``(ids, reason)`` gives every id in ``ids`` that one reason, where ``ids`` is
    a collection of job ids or a no-argument callable returning one (computed on first
    use), and ``reason`` a :class:`Reason` or a callable ``job id -> Reason`` (per-job
    numbers, computed on first use).  Explicit entries win over segments, an earlier segment over a later one (what
    filling a dict explicit-first with ``setdefault`` would give).

    A policy that leaves thousands of jobs with one shared reason (a blocked tail, every
    running job kept as it is) pays nothing per job: the full map is resolved on the first
    lookup that the explicit entries cannot answer and kept.  Every consumer sees a reason
    for every job, as with a plain mapping; equality is by content."""

    __slots__ = ("_explicit", "_segments", "_flat")

    def __init__(self, explicit: Mapping[str, Reason], segments=()):
        self._explicit = dict(explicit)
        self._segments = tuple(segments)
        self._flat: Optional[dict] = None if self._segments else self._explicit

    def _all(self) -> dict:
        if self._flat is None:
            flat: dict = {}
            for ids, why in self._segments:
                ids = ids() if callable(ids) else ids
                if isinstance(why, Reason):
                    for jid in ids:
                        flat.setdefault(jid, why)
                else:
                    for jid in ids:
                        if jid not in flat:
                            flat[jid] = why(jid)
            flat.update(self._explicit)
            self._flat = flat
            self._segments = ()  # drop what the callables held (e.g. the snapshot)
        return self._flat

    def __getitem__(self, jid: str) -> Reason:
        r = self._explicit.get(jid)
        return r if r is not None else self._all()[jid]

    def __contains__(self, jid) -> bool:
        return jid in self._explicit or jid in self._all()

    def __iter__(self):
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())

    def __repr__(self) -> str:
        return f"Reasons({self._all()!r})"


def make_plan(policy: str, actions: list, order: list, reasons: dict,
              infeasible: list = (), shared=()) -> Plan:
    """A :class:`Plan`; ``shared``: segments ``(ids, reason)`` for jobs not in ``reasons``
    (see :class:`Reasons`)."""
    if shared:  # ``order`` may be a read-only view (policies.model.Frozen): kept as it is
        return Plan(policy, tuple(actions), order if isinstance(order, Frozen) else tuple(order),
                    Reasons(reasons, shared), tuple(infeasible))
    return Plan(policy, tuple(actions), tuple(order), MappingProxyType(dict(reasons)),
                tuple(infeasible))
