"""SJF-BSBF's ``quiet_until`` (policies/sjf_bsbf.py, policies/bsbf_marks.bounded_until): after
a walk that started nothing, the time given must hold on a fresh walk — an instance with no
order, marks or groups kept — of the same snapshot at any later time up to it.

Snapshots: the hand-built random ones of test_sjf_differential.py (ξ from 0.3, where the bounds
are not used and every group is evaluated exactly, to 2.5; many jobs of few signatures), with
the running jobs progressing at a fraction of their iteration rate alone (as a shared GPU
slows them), so that X = t_A·i_A falls as the time moves and reaches 0 (finished, not yet
removed) within the times tried; the waiting jobs that fit in the free GPUs are left out."""
from __future__ import annotations

import dataclasses
import math
from collections import Counter
from types import MappingProxyType

from hypothesis import HealthCheck, given, settings, strategies as st

from policies.share_index import _alloc_iter_time
from policies.sjf_bsbf import SjfBsbf
from test_sjf_differential import _random_snapshot


def _progressing(draw, snap):
    """``snap`` with its running jobs progressing, and without the waiting jobs that fit in
    the free GPUs (they would start: the walks of interest start nothing)."""
    jobs = {}
    free = len(snap.free_gpus)
    for j in snap.jobs.values():
        if not j.running and j.num_gpus <= free:
            continue
        if j.running:
            t = _alloc_iter_time(snap, j)
            j = dataclasses.replace(j, iter_rate=draw(st.sampled_from([1.0, 1.0, 0.9, 0.5])) / t)
        jobs[j.id] = j
    return dataclasses.replace(snap, jobs=MappingProxyType(jobs))


def test_the_time_given_holds_on_a_fresh_walk():
    seen = Counter()

    @settings(max_examples=800, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data())
    def check(data):
        snap = _progressing(data.draw, _random_snapshot(data.draw,
                                                        few_signatures=data.draw(st.booleans())))
        pol = SjfBsbf()
        if pol.schedule(snap).actions:
            seen["started"] += 1
            return
        until = pol.quiet_until(snap)
        if until == -math.inf:
            seen["none"] += 1
            return
        if until == math.inf:
            seen["inf"] += 1
            later = [snap.now + dt for dt in (1.0, 60.0, 3600.0, 1e5, 1e7)]
        else:
            seen["finite"] += 1
            assert until > snap.now
            later = [snap.now + (until - snap.now) * f for f in (0.01, 0.5, 1.0)]
        for t in later:
            plan = SjfBsbf().schedule(dataclasses.replace(snap, now=t))
            assert not plan.actions, (snap.now, until, t, plan.actions[:2])

    check()
    print(dict(seen))
    # (the examples vary with the modules loaded: Hypothesis draws constants from their
    # source; about 8 finite times in 800 walks, 575-605 infinite ones)
    assert seen["inf"] > 300 and seen["finite"] >= 1
