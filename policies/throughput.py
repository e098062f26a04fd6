"""Throughput, memory and interference models (pure functions of fitted parameters).

Seed 000 (Luo et al.) §III-C:

* eq. 3 — compute time of one forward/backward pass on a per-GPU batch ``B``:
  ``t_comp(B) = α_comp + β_comp · B``
* eq. 4 — all-reduce time ``t_comm = α_comm + β_comm · M``.  The message size
  ``M`` (gradient bytes) is fixed per application, so for one application
  ``t_comm`` depends only on how many GPUs take part and whether the ring
  crosses nodes.  We use the form measured in the Pollux profiles (our choice,
  documented): ``t_comm = 0`` on one GPU, ``a_intra + b_intra·(K−2)`` on ``K``
  GPUs of one node, ``a_inter + b_inter·(K−2)`` across nodes.
* eq. 7 — iteration time with ``s`` accumulation steps of sub-batch ``B/s``:
  ``t_iter = (s−1)·t_comp(B/s) + (t_comp(B/s)^δ + t_comm^δ)^(1/δ)``
  where δ is the compute/communication overlap degree (Pollux's γ).
* eq. 5–6 — sharing a GPU set slows each job by its interference ratio ξ:
  ``t̂_A = ξ_A·t_A``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping


@dataclass(frozen=True)
class ThroughputProfile:
    """Fitted eq. 3/4/7 parameters of one application (times in seconds)."""

    app: str
    alpha_comp: float
    beta_comp: float
    alpha_intra: float
    beta_intra: float
    alpha_inter: float
    beta_inter: float
    delta: float = 1.0
    max_local_batch: int = 1 << 30  # largest per-GPU batch profiled

    def t_comp(self, local_batch: float) -> float:
        """Seed 000 eq. 3."""
        return self.alpha_comp + self.beta_comp * local_batch

    def t_comm(self, num_gpus: int, num_nodes: int) -> float:
        """Seed 000 eq. 4 with M fixed per application (see module doc)."""
        if num_gpus <= 1:
            return 0.0
        if num_nodes <= 1:
            return self.alpha_intra + self.beta_intra * (num_gpus - 2)
        return self.alpha_inter + self.beta_inter * (num_gpus - 2)

    def min_accum_steps(self, local_batch: float) -> int:
        """Smallest power-of-two accumulation count whose micro-batch fits the largest
        profiled per-GPU batch (the search order of seed 000 Alg. 2)."""
        s = 1
        while local_batch / s > self.max_local_batch:
            s *= 2
        return s

    def iter_time(self, local_batch: float, num_gpus: int, num_nodes: int,
                  accum_steps: int = 1) -> float:
        """Seed 000 eq. 7: ``local_batch`` is the per-GPU share of the global
        batch (``B``); each of ``accum_steps`` micro-steps runs ``B/s``."""
        s = max(1, int(accum_steps))
        tc = self.t_comp(local_batch / s)
        tm = self.t_comm(num_gpus, num_nodes)
        d = self.delta
        overlap = (tc ** d + tm ** d) ** (1.0 / d) if tm > 0 else tc
        return (s - 1) * tc + overlap


@dataclass(frozen=True)
class MemoryProfile:
    """GPU memory (MiB) of one worker: ``base_mb + per_sample_mb · b`` for a
    per-GPU micro-batch ``b``.  See gimbalctl/profiles.py for the source."""

    app: str
    base_mb: float
    per_sample_mb: float

    def mem_mb(self, micro_batch: float) -> float:
        return self.base_mb + self.per_sample_mb * micro_batch


@dataclass(frozen=True)
class InterferenceTable:
    """ξ per ordered application pair (seed 000 eq. 5-6).

    ``ratio(a, b)`` is the slowdown of ``a`` while co-located with ``b``.
    ``override`` (the ``--xi`` sweep, seed 000 Fig. 6(b)) replaces every pair.
    """

    pairs: Mapping[tuple[str, str], float] = field(
        default_factory=lambda: MappingProxyType({}))
    default: float = 1.5
    override: float | None = None

    def ratio(self, app: str, other: str, mps_pct: "int | None" = None,
              other_mps_pct: "int | None" = None) -> float:
        """ξ of ``app`` beside ``other``.  ``mps_pct``/``other_mps_pct``: the two jobs'
        MPS shares when they share through MPS (``None``: time-slicing).  This table has
        no MPS model, so the shares are accepted and ignored here; the MPS-aware model
        (issue: allocation record, item 3) refines it."""
        if self.override is not None:
            return self.override
        return self.pairs.get((app, other), self.default)

    def mps_alone(self, app: str, mps_pct: "int | None") -> float:
        """Slowdown (>= 1) of ``app`` running alone under an MPS thread limit.  This table
        models it as compute capped in proportion to the share (what the simulator did
        before): ``100 / mps_pct``."""
        if mps_pct is None:
            return 1.0
        return 100.0 / max(1, min(100, int(mps_pct)))

    def with_override(self, xi: float | None) -> "InterferenceTable":
        return InterferenceTable(self.pairs, self.default, xi)


@dataclass(frozen=True)
class GpuTypeTable:
    """Relative speed of an application on a GPU type (heterogeneous clusters, seed 002).

    ``speed(app, gpu_type)`` multiplies the application's throughput from its
    :class:`ThroughputProfile` (which describes the reference type): 2.0 = twice as many
    iterations per second.  Looked up per (app, type) first (measured, e.g. Gavel's
    K80/P100/V100 table), then per type (a site's ``[gpu_types]`` relative speed), else 1.0.
    A gang spread over several types runs at the slowest one's speed.
    """

    per_app: Mapping[tuple[str, str], float] = field(
        default_factory=lambda: MappingProxyType({}))
    per_type: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    memory_mb: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))

    def speed(self, app: str, gpu_type: str) -> float:
        v = self.per_app.get((app, gpu_type))
        if v is None:
            v = self.per_type.get(gpu_type, 1.0)
        return v

    def types(self) -> tuple[str, ...]:
        return tuple(sorted({t for _, t in self.per_app} | set(self.per_type)))
