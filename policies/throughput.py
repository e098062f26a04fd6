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
  ``t̂_A = ξ_A·t_A``.  ξ depends on how the jobs share (time-slicing or MPS) and
  on the MPS split (:class:`InterferenceTable`, :class:`MpsInterference`;
  docs/interference.md).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
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
class MpsInterference:
    """Interference by co-location mechanism and MPS split, fitted to one H100.

    Pure data fitted by :func:`gimbalctl.profiles.fit_mps` from the measured table in
    ``gimbalctl/data/traces/h100-mps/`` (five models, eight pairs, MPS splits 100/100,
    50/50, 30/70, 70/30, plain time-slicing, solo runs under 100/70/50/30/10 % limits).
    ``p`` is an MPS thread percentage as a fraction (0.3 = 30 %).  Per measured model:

    * **alone under an MPS limit** (``alone``): ``s(p) = (1 + (c/p)^k)^(1/k) / (1 + c^k)^(1/k)``,
      a smooth ``max(1, c/p)``: a job that keeps about ``c`` of the SMs busy does not slow
      down above that share and slows in proportion below it; ``s(1) = 1``.
    * **beside another MPS client** (``xi``): ``ln ξ_a = ln s_a(p_a) + κ_a · π_b · p_b^γ / s_b(p_b)``
      — a's own limit plus a contention term: a's sensitivity κ_a times b's pressure π_b
      times b's work rate under its own limit (``p_b^γ / s_b(p_b)``).  ξ is relative to a
      running alone *without* a limit, so it already contains the limit's own slowdown.
      It falls as a's share grows and rises with b's share (tested).
    * **time-slicing** (no MPS, ``timeslice``): one ξ per model, the geometric mean of its
      measured pairs (the H100 measured 1.6-2.2 whatever the partner, ``shared/notes/gpu.md``).

    Applications without H100 measurements use the model named in ``alias`` (Pollux's
    applications: nearest measured architecture, see docs/interference.md); any other
    application uses the ``"*"`` entry, the mean of the fitted per-model parameters.
    """

    apps: Mapping[str, Mapping[str, float]] = field(
        default_factory=lambda: MappingProxyType({}))  # model -> {c, k, kappa, pi, timeslice}
    alias: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    gamma: float = 1.0

    def params(self, app: str) -> Mapping[str, float]:
        p = self.apps.get(app) or self.apps.get(self.alias.get(app, ""))
        if p is None:
            p = self.apps["*"]
        return p

    @staticmethod
    def _frac(pct: "int | float | None") -> float:
        return 1.0 if pct is None else max(1.0, min(100.0, float(pct))) / 100.0

    def alone(self, app: str, mps_pct: "int | float | None") -> float:
        """Slowdown ``s_a(p)`` of ``app`` alone under an MPS limit (1.0 at 100 % or None)."""
        p = self._frac(mps_pct)
        q = self.params(app)
        c, k = q["c"], q["k"]
        return (1.0 + (c / p) ** k) ** (1.0 / k) / (1.0 + c ** k) ** (1.0 / k)

    def xi(self, app: str, other: str, mps_pct: "int | float | None",
           other_mps_pct: "int | float | None") -> float:
        """ξ of ``app`` beside ``other`` when both are MPS clients (None = 100 %)."""
        pb = self._frac(other_mps_pct)
        load_b = pb ** self.gamma / self.alone(other, other_mps_pct)
        return self.alone(app, mps_pct) * math.exp(
            self.params(app)["kappa"] * self.params(other)["pi"] * load_b)

    def timeslice(self, app: str, other: str) -> float:
        """ξ of ``app`` beside ``other`` under plain time-slicing (per model, any partner)."""
        return self.params(app)["timeslice"]


MECHANISMS = ("timeslice", "mps")


@dataclass(frozen=True)
class InterferenceTable:
    """ξ of a co-located job (seed 000 eq. 5-6), by co-location mechanism.

    * **Time-slicing** (no MPS shares given; plain ``gres/shard`` sharing): ``pairs``, ξ
      per ordered application pair, else ``default``.  The bundled table is Gavel's
      measured co-location on a V100 (gimbalctl/profiles.py); :meth:`gimbalctl.profiles.
      Models.with_interference` can swap in the H100 time-slicing fit.
    * **MPS** (either share given, or ``mechanism="mps"``): the fitted H100 model
      ``mps`` (:class:`MpsInterference`), pair-, split- and direction-dependent.  Without
      an MPS model the time-slicing value is used and the shares are ignored.
    * ``mechanism``: what co-location without MPS shares means — ``"timeslice"`` (the
      default) or ``"mps"`` (both clients at 100 %, i.e. a cluster that runs every shared
      GPU under MPS).
    * ``override`` (the ``--xi`` sweep, seed 000 Fig. 6(b)) replaces every co-located ξ,
      whatever the mechanism; it does not touch ``mps_alone``.
    """

    pairs: Mapping[tuple[str, str], float] = field(
        default_factory=lambda: MappingProxyType({}))
    default: float = 1.5
    override: float | None = None
    mps: MpsInterference | None = None
    mechanism: str = "timeslice"

    def __post_init__(self):
        if self.mechanism not in MECHANISMS:
            raise ValueError(f"interference mechanism {self.mechanism!r} is not one of {MECHANISMS}")

    def ratio(self, app: str, other: str, mps_pct: "int | None" = None,
              other_mps_pct: "int | None" = None) -> float:
        """ξ of ``app`` beside ``other``.  ``mps_pct``/``other_mps_pct``: the two jobs' MPS
        thread percentages when they share through MPS (``None`` for both: no MPS, i.e.
        time-slicing unless ``mechanism="mps"``; ``None`` for one: that one at 100 %).

        Under MPS the value is relative to ``app`` running alone *without* a limit, so it
        includes the slowdown of ``app``'s own limit: do not multiply by :meth:`mps_alone`
        as well (that is for a limited job with nobody beside it)."""
        if self.override is not None:
            return self.override
        use_mps = mps_pct is not None or other_mps_pct is not None or self.mechanism == "mps"
        if use_mps and self.mps is not None:
            return self.mps.xi(app, other, mps_pct, other_mps_pct)
        return self.pairs.get((app, other), self.default)

    def mps_alone(self, app: str, mps_pct: "int | None") -> float:
        """Slowdown (>= 1) of ``app`` running alone under an MPS thread limit: the fitted
        H100 curve when there is an MPS model, else compute capped in proportion to the
        share (``100 / mps_pct``)."""
        if mps_pct is None:
            return 1.0
        if self.mps is not None:
            return self.mps.alone(app, mps_pct)
        return 100.0 / max(1, min(100, int(mps_pct)))

    def with_override(self, xi: float | None) -> "InterferenceTable":
        return replace(self, override=xi)


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
