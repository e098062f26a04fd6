"""Gavel-style makespan packing host (seed 004 §7.1's makespan baseline, after Gavel,
OSDI'20), with and without GIMBAL.

* Round-based: called every ``round_length`` seconds (Gavel's 6-minute rounds; GIMBAL's 30 s
  monitoring when on).  Each round the priorities are recomputed: for makespan the job with the
  longest remaining time goes first (longest-processing-time order; remaining exclusive time
  from ``snap.remaining_time``).
* Highest-priority pairs: a job that finds no free GPUs packs beside the running job giving the
  pair with the highest combined progress 1/ξ_a + 1/ξ_b (Gavel's space-sharing throughput of a
  job combination), if that is at least 1.0 (the combination must beat time-sharing).  Running
  jobs are not pre-empted between rounds (our simplification: Gavel's round-robin time shares
  are not modelled; only its packing choice is).
* ``gavel+gimbal``: threshold 0.9, unequal packing under §5.1, coordination with the makespan
  objective (eq. 5/6) every 30 s.
"""
from __future__ import annotations

from .model import ClusterSnapshot
from .packing_host import PackingHost
from .registry import register


@register("gavel")
class GavelPack(PackingHost):
    """Gavel-style makespan: rounds, longest remaining first, highest-throughput pairs packed."""

    needs_lengths = True
    objective = "makespan"
    threshold = 1.0
    gimbal_threshold = 0.9
    round_length = 360.0

    def order_key(self, snap: ClusterSnapshot):
        def key(j):
            r = snap.remaining_time(j)
            return (r is None, -(r or 0.0), j.submit_time, j.id)
        return key

    def numbers(self, snap, job):
        r = snap.remaining_time(job)
        return {} if r is None else {"remaining_s": r}


@register("gavel+gimbal")
class GavelPackGimbal(GavelPack):
    """Gavel-style with GIMBAL: threshold 0.9, unequal packing, makespan coordination every 30 s."""

    def __init__(self, gimbal: bool = True, **kw):
        super().__init__(gimbal=gimbal, **kw)
