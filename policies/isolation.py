"""Isolation: every job an equal share of every GPU type (seed 002 Table 3 baseline
``isolation``, "Dominant Resource Fairness"; with GPUs as the one resource DRF's
progressive filling gives each job the same share).  After Gavel's isolated policy:
``X[j][t] = G_t / Σ_k n_k`` capped so Σ_t X[j][t] ≤ 1, served round by round
(:mod:`policies.gavel_rounds`).

:meth:`Isolation.schedule` computes the round by :func:`policies.isolation_round.isolation_round`
(the same Plan without per-job Python beyond one priority key; issue #13);
:meth:`Isolation.schedule_reference` is the code it replaces, kept as the reference of
tests/policies/test_isolation_differential.py."""
from __future__ import annotations

from .base import Policy
from .gavel_rounds import run_round
from .isolation_round import RoundMemo, isolation_round
from .model import ClusterSnapshot, SUBMIT_ORDER
from .registry import register
from .typed_rounds import type_capacity


@register("isolation")
class Isolation(Policy):
    """Isolation (DRF): equal time shares of every GPU type, in rounds (Gavel mechanism)."""

    preemptive = True
    rounds_only = True  # Gavel's mechanism decides at round boundaries only

    def __init__(self, round_length: float = 180.0):
        if not round_length > 0:
            raise ValueError(f"isolation: round_length must be > 0 seconds, not {round_length!r}")
        self.round_length = float(round_length)
        self.memo = RoundMemo()  # immutable results of pure functions only

    def schedule(self, snap: ClusterSnapshot):
        return isolation_round(snap, self.name, self.memo)

    def schedule_reference(self, snap: ClusterSnapshot):
        """The round as Gavel's mechanism over a mapping per job (the reference)."""
        types = type_capacity(snap)
        jobs = sorted(snap.jobs.values(), key=SUBMIT_ORDER)
        demand = sum(j.num_gpus for j in jobs) or 1
        alloc = {}
        per_count: dict[int, dict] = {}  # a job's shares depend only on its GPU count
        for j in jobs:
            xs = per_count.get(j.num_gpus)
            if xs is None:
                xs = {t: v[0] / demand for t, v in types.items() if j.num_gpus <= v[0]}
                tot = sum(xs.values())
                if tot > 1.0:
                    xs = {t: x / tot for t, x in xs.items()}
                per_count[j.num_gpus] = xs
            alloc[j.id] = xs  # shared, read only (policies.gavel_rounds.run_round)
        return run_round(snap, self.name, jobs, alloc, "isolation")
