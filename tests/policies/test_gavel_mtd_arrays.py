"""gavel-mtd's array path (policies/gavel_mtd_arrays.py) gives the scalar code's floats:
the closed form against :func:`policies.gavel_mtd.one_type`, the lengths against
``max(snap.remaining_iters(j) or 1.0, 1e-9)``, the priority keys against
``gavel_rounds._keyed``, and the shares mapping against the allocation's dict.  Whole
rounds are compared with the reference code in test_typed_rounds_differential.py."""
from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import given, settings, strategies as st

from policies import gavel_mtd_arrays as arrays
from policies.gavel_mtd import one_type
from policies.gavel_rounds import _keyed
from policies.model import ClusterSnapshot, JobState
from daemon_pass import build

_pos = st.floats(1e-3, 1e4, allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_pos, st.floats(1e-9, 1e9), st.sampled_from([1, 2, 4, 8])),
                min_size=1, max_size=400),
       st.integers(1, 600))
def test_closed_form_as_one_type(rows, cap):
    rate = [r for r, _, _ in rows]
    rem = [m for _, m, _ in rows]
    gpus = [float(g) for _, _, g in rows]
    got = arrays.one_type_common(np.array(rate), np.array(rem), np.array(gpus), float(cap))
    want = one_type(rate, rem, gpus, float(cap))
    if got is not None:  # the case it takes: every float as one_type's
        assert got == want
        assert sum(gpus) > cap
    elif sum(gpus) > cap:  # the other case: the knapsack's sorted walk
        assert want.count(1.0) >= 1


def test_closed_form_takes_the_large_overloaded_rounds():
    """Thousands of jobs on 512 GPUs: the sums add up thousands of terms, in order."""
    for seed in range(5):
        rng = np.random.default_rng(seed)
        n = 4000
        rate = rng.uniform(5.0, 30.0, n)
        rem = rng.uniform(1e5, 1e6, n)
        gpus = rng.choice([1.0, 2.0, 4.0, 8.0], n)
        got = arrays.one_type_common(rate, rem, gpus, 512.0)
        assert got is not None  # the capacity bounds z: what is left is rounding
        assert got == one_type(rate.tolist(), rem.tolist(), gpus.tolist(), 512.0)


def _views(seed: int):
    sn, _ = build(12, 8, 40, 400, seed=seed)
    return sn, sorted(sn.jobs.values(), key=lambda j: (j.submit_time, j.id))


def test_lengths_and_keys_as_the_scalar_code():
    for seed in (1, 2, 3):
        sn, jobs = _views(seed)
        # running jobs past their restore, mid-restore (floored at 0), at a later clock
        jobs = [dataclasses.replace(j, restore_left=100.0 * (i % 3), as_of=sn.now - 100.0,
                                    iter_rate=0.37 * (i % 5))
                if j.state is JobState.RUNNING else j for i, j in enumerate(jobs)]
        sn = dataclasses.replace(sn, jobs={j.id: j for j in jobs}, now=sn.now + 77.5)
        assert any(j.state is JobState.RUNNING for j in jobs)
        rem = arrays.remaining(sn, jobs)
        assert len({r for r, j in zip(rem.tolist(), jobs) if j.running}) > 5
        assert rem.tolist() == [max(sn.remaining_iters(j) or 1.0, 1e-9) for j in jobs]
        x = [0.0 if i % 7 == 0 else 1.0 if i % 5 == 0 else 0.5 / (i + 1)
             for i in range(len(jobs))]
        shares = arrays.OneTypeShares("a100", [j.id for j in jobs], x)
        want = _keyed(sn, jobs, shares, {}, {})
        assert shares.keyed(sn.now, jobs) == want
        # the list the shares were computed from: its columns are read again, not the views
        kept = arrays.OneTypeShares("a100", [j.id for j in jobs], x, jobs, arrays.Columns(jobs))
        assert kept.keyed(sn.now, jobs) == want
        assert shares.keyed(sn.now, jobs[::-1]) is None  # another order: the scalar path


def test_shares_mapping_as_the_allocation_dict():
    ids = ["a", "b", "c", "d"]
    x = [1.0, 0.25, 1e-12, 0.0]
    m = arrays.OneTypeShares("v100", ids, x)
    assert dict(m) == {"a": {"v100": 1.0}, "b": {"v100": 0.25}, "c": {}, "d": {}}
    assert m["b"] is m["b"] and m.get("zz") is None and "c" in m and "zz" not in m
    assert list(m) == ids and len(m) == 4
    assert isinstance(ClusterSnapshot, type)
