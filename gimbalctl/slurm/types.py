"""Release-independent records the Slurm backends return.

Both backends (CLI tools and pyslurm) translate what Slurm reports into these
frozen dataclasses, so nothing above ``gimbalctl.slurm`` depends on a Slurm
release or on how it was reached.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from .meta import GimbalMeta

# Slurm job states gimbal distinguishes; everything else is "other" (ended).
PENDING = "PENDING"
RUNNING = "RUNNING"
SUSPENDED = "SUSPENDED"
# held: user/admin hold, or `scontrol requeuehold` (squeue --json says JobHeldUser for that;
# pyslurm and scontrol give the requeue reason itself)
HELD_REASONS = ("JobHeldUser", "JobHeldAdmin", "job requeued in held state",
                "job_requeued_in_held_state")


@dataclass(frozen=True)
class GresUse:
    """GRES of one kind a job holds on one node.

    ``per_gpu`` maps GPU index -> units used there (``{2: 2}`` for
    ``shard:2(IDX:2)``; ``{0: 1, 1: 1}`` for ``gpu:2(IDX:0-1)``).
    """

    node: str
    name: str  # gpu | shard | mps
    count: int
    per_gpu: Mapping[int, int] = field(default_factory=dict)

    @property
    def indices(self) -> tuple[int, ...]:
        return tuple(sorted(self.per_gpu))


@dataclass(frozen=True)
class SlurmJob:
    job_id: str
    name: str
    user: str
    state: str  # PENDING, RUNNING, SUSPENDED, COMPLETED, ...
    reason: str
    priority: int
    nice: int
    submit_time: float
    start_time: Optional[float]
    time_limit_s: Optional[float]  # None: UNLIMITED
    partition: str
    num_nodes: int
    nodes: tuple[str, ...]  # allocated nodes (running)
    req_nodes: tuple[str, ...]  # ReqNodeList
    gres_req: Mapping[str, int]  # per node: {"gpu": 2} / {"shard": 2}
    gres_alloc: tuple[GresUse, ...]
    comment: str
    admin_comment: str
    restarts: int = 0
    site_factor: Optional[int] = None  # from sprio where Slurm lists it
    # when a pending job may start (Slurm's EligibleTime; a requeue puts it ~2 min ahead)
    eligible_time: Optional[float] = None
    meta: GimbalMeta = field(default_factory=GimbalMeta)
    # what had to be repaired in Slurm's record (undecodable bytes, control characters, cut
    # fields, values of the wrong type): one message per field, without the job id
    warnings: tuple[str, ...] = ()
    # the GPU type the job's GRES request names, as Slurm spells it (gres/gpu:k80:1 -> "k80")
    gpu_type_req: Optional[str] = None

    @property
    def pending(self) -> bool:
        return self.state == PENDING

    @property
    def running(self) -> bool:
        return self.state == RUNNING

    @property
    def held(self) -> bool:
        return self.pending and self.reason in HELD_REASONS

    @property
    def gpus_per_node(self) -> int:
        """Whole GPUs asked per node (shard/mps jobs count as 1: they use one GPU)."""
        if self.gres_req.get("gpu"):
            return int(self.gres_req["gpu"])
        if self.gres_req.get("shard") or self.gres_req.get("mps"):
            return 1
        return 0

    @property
    def num_gpus(self) -> int:
        """GPUs the job needs: from its GRES, else gimbal metadata ``gpus`` (gate jobs
        are submitted without GRES), else 0 (not a GPU job)."""
        if not self.gres_req and (self.meta.gpus or self.meta.gate):
            return int(self.meta.gpus or 1)
        return self.gpus_per_node * max(self.num_nodes, 1)

    @property
    def gated(self) -> bool:
        """Submitted through ``gsbatch --gate``: gimbal decides when and where it starts."""
        return bool(self.meta.gate)

    def as_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k not in ("meta", "gres_alloc")}
        d["gres_req"] = dict(self.gres_req)
        d["gres_alloc"] = [{"node": g.node, "name": g.name, "count": g.count,
                            "per_gpu": {str(k): v for k, v in g.per_gpu.items()}}
                           for g in self.gres_alloc]
        d["meta"] = self.meta.as_dict()
        d["nodes"], d["req_nodes"] = list(self.nodes), list(self.req_nodes)
        return d


@dataclass(frozen=True)
class SlurmNode:
    name: str
    state: str  # idle, mixed, allocated, down, drained, ...
    gres: Mapping[str, int]  # configured: {"gpu": 4, "shard": 16}
    partitions: tuple[str, ...] = ()
    gpu_type: Optional[str] = None  # GRES type of its GPUs (gpu:v100:4 -> "v100")
    gres_type: Optional[str] = None  # the same as Slurm spells it (for Gres=gpu:<type>:N)

    @property
    def num_gpus(self) -> int:
        return int(self.gres.get("gpu", 0))

    @property
    def usable(self) -> bool:
        s = self.state.lower()
        return not any(x in s for x in ("down", "drain", "fail", "maint", "future", "not_responding"))

    @property
    def shares_per_gpu(self) -> dict[str, int]:
        """Units of each sharing GRES per GPU (``{"shard": 4}``, ``{"mps": 100}``)."""
        n = max(self.num_gpus, 1)
        return {k: v // n for k, v in self.gres.items() if k in ("shard", "mps") and v}


@dataclass(frozen=True)
class Change:
    """One mutation of one job, as applied (or as a dry run would apply it)."""

    job_id: str
    field: str  # priority | site_factor | nice | hold | release | gres | req_nodes | requeue |
    #             signal | begin_time
    before: Any
    after: Any
    argv: tuple[str, ...] = ()  # the exact Slurm command (CLI backend; pyslurm: a description)
    applied: bool = False
    read_back: Any = None
    error: Optional[str] = None

    def as_dict(self) -> dict:
        return {"job_id": self.job_id, "field": self.field, "before": self.before,
                "after": self.after, "argv": list(self.argv), "applied": self.applied,
                "read_back": self.read_back, "error": self.error}


@dataclass(frozen=True)
class SlurmFinishedJob:
    """A job from the accounting database (``sacct``): the finished-job history A-SRPT's
    predictor trains on (seed 003 §IV-C 3).  Times are epoch seconds Slurm recorded; ``name``
    and ``comment`` are the user's text (cleaned; the comment is only a grouping hint),
    ``meta`` comes from the AdminComment only."""

    job_id: str
    name: str
    user: str
    state: str  # COMPLETED, FAILED, ... (first word: "CANCELLED by 0" -> CANCELLED)
    submit_time: float
    start_time: float
    end_time: float
    num_gpus: int  # allocated gres/gpu TRES
    comment: str = ""
    admin_comment: str = ""
    meta: GimbalMeta = field(default_factory=GimbalMeta)
    warnings: tuple[str, ...] = ()

    @property
    def duration(self) -> float:
        return max(0.0, self.end_time - self.start_time)
