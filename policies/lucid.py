"""Lucid-style packing host (seed 004 §7.1's JCT baseline, after Lucid, ASPLOS'23), with and
without GIMBAL.

* Order: shortest job first by the job's length (Lucid orders by predicted duration; here
  ``snap.job_length``: the length oracle in simulation, the user's estimate on the cluster),
  ties by submit time, then id.
* Sharing score: the pair's combined normalised progress at MPS 100/100 from the profiled
  interference table, 1/ξ_a + 1/ξ_b (:func:`policies.packing_host.pair_progress`).  Lucid packs
  only pairs its profile says interfere little: score ≥ 1.25 (our conservative threshold: each
  job keeps about 60 % of its speed), equal GPU counts only.
* ``lucid+gimbal`` (§7.2 "JCT"): the threshold drops to 1.0 (any pair that does not lose
  combined progress: LGRR can move the split afterwards), unequal packing under §5.1, and the
  coordinator with the JCT objective (eq. 1/2) every 30 s.
Thresholds are chosen a priori (not fitted to the paper's results).
"""
from __future__ import annotations

from .model import ClusterSnapshot
from .packing_host import PackingHost
from .registry import register


@register("lucid")
class Lucid(PackingHost):
    """Lucid-style: SJF, pack equal-size pairs whose profiled sharing score passes 1.25."""

    needs_lengths = True
    objective = "jct"
    threshold = 1.25
    gimbal_threshold = 1.0

    def order_key(self, snap: ClusterSnapshot):
        def key(j):
            n = snap.job_length(j)
            return (n is None, n if n is not None else 0.0, j.submit_time, j.id)
        return key

    def numbers(self, snap, job):
        n = snap.job_length(job)
        return {} if n is None else {"length_s": n}


@register("lucid+gimbal")
class LucidGimbal(Lucid):
    """Lucid-style with GIMBAL: threshold 1.0, unequal packing, JCT coordination every 30 s."""

    def __init__(self, gimbal: bool = True, **kw):
        super().__init__(gimbal=gimbal, **kw)
