"""gavel-mtd's LP built as a sparse matrix gives exactly the allocation (and Plan) of the
dense build kept in reference_gavel_mtd.py: on hypothesis-random clusters of three GPU
types and on the daemon benchmark's state at small sizes."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from policies.gavel_mtd import GavelMinTotalDuration
from policies.model import Node
from reference_gavel_mtd import RefGavelMinTotalDuration
from test_similarity import APPS, job, snap
from test_sjf_differential import assert_same


def _order(sn):
    return sorted(sn.jobs.values(), key=lambda j: (j.submit_time, j.id))


@settings(max_examples=60, deadline=None)
@given(nv=st.integers(0, 3), nk=st.integers(0, 2), per=st.sampled_from([1, 2, 4, 8]),
       specs=st.lists(st.tuples(st.sampled_from(APPS), st.sampled_from([1, 1, 2, 4, 8, 16]),
                                st.sampled_from([32, 64, 128, 256]), st.floats(0, 100)),
                      min_size=1, max_size=30))
def test_random_typed_clusters(nv, nk, per, specs):
    nodes = tuple([Node(f"v{i}", per, "v100") for i in range(nv)] +
                  [Node(f"k{i}", per, "k80", 12288) for i in range(nk)]) or (Node("p0", per, "p100"),)
    sn = snap(nodes, [job(i, app=a, n=n, batch=b, t=t) for i, (a, n, b, t) in enumerate(specs)])
    new, ref = GavelMinTotalDuration(), RefGavelMinTotalDuration()
    assert new.allocation(sn, _order(sn)) == ref.allocation(sn, _order(sn))
    assert_same(new.schedule(sn), ref.schedule(sn))


@pytest.mark.parametrize("nodes,seed", [(12, 0), (12, 1), (30, 2)])
def test_daemon_state(nodes, seed):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    try:
        from daemon_pass import build
    finally:
        sys.path.pop(0)
    sn, _ = build(nodes, 8, 5 * nodes, 10 * nodes, seed=seed)
    assert_same(GavelMinTotalDuration().schedule(sn), RefGavelMinTotalDuration().schedule(sn))
