"""Seed 002's similarity policy with Algorithm 3's partner search grouped by job class
(policies/similarity.py ``_Pool``) returns exactly the Plans of the literal walk over the
queue kept in reference_similarity.py: hypothesis-random rounds (every ``decide`` variant,
packing on and off, ranges, memory that rules partners out, running jobs from an earlier
round), a near-tie case that takes the literal walk, and the daemon benchmark's state at a
small size (no similarity database: every job is its own reference)."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings, strategies as st

from policies.model import Node
from policies.similarity import Similarity, _apart
from reference_similarity import RefSimilarity
from test_sjf_differential import assert_same
from test_similarity import APPS, snap, job
from daemon_pass import apply_plan, build


def typed_cluster(nv, nk, per, mem, specs):
    """``nv`` V100 and ``nk`` K80 nodes of ``per`` GPUs (one V100 node if none) and a job
    per spec (application, GPUs, batch, elastic GPU range?, flexible batch range?)."""
    nodes = tuple([Node(f"v{i}", per, "v100", mem) for i in range(nv)] +
                  [Node(f"k{i}", per, "k80", min(mem, 12288)) for i in range(nk)])
    if not nodes:
        nodes = (Node("v0", per, "v100", mem),)
    total = sum(n.num_gpus for n in nodes)
    jobs = [job(i, app=a, n=min(n, total), batch=b, t=float(i % 5),
                gpu_range=(1, 4) if el else None, batch_range=(32, 512) if fb else None)
            for i, (a, n, b, el, fb) in enumerate(specs)]
    return nodes, jobs


@settings(max_examples=200, deadline=None)
@given(nv=st.integers(0, 3), nk=st.integers(0, 2), per=st.sampled_from([1, 2, 4]),
       mem=st.sampled_from([4000, 12288, 16384, 40000]),
       specs=st.lists(st.tuples(st.sampled_from(APPS[:4]), st.sampled_from([1, 1, 1, 2, 4]),
                                st.sampled_from([32, 64, 128, 256]), st.booleans(), st.booleans()),
                      min_size=1, max_size=24),
       decide=st.sampled_from(["gpu", "gpu_ngpu", "gpu_ngpu_bs"]), jp=st.booleans(),
       cd=st.booleans(), rounds=st.integers(1, 2))
def test_random_rounds(nv, nk, per, mem, specs, decide, jp, cd, rounds):
    nodes, jobs = typed_cluster(nv, nk, per, mem, specs)
    sn = snap(nodes, jobs)
    for _ in range(rounds):
        plan = Similarity(decide=decide, jp=jp, cd=cd).schedule(sn)
        assert_same(plan, RefSimilarity(decide=decide, jp=jp, cd=cd).schedule(sn))
        sn = apply_plan(sn, plan, dt=60.0)  # the next round sees this one's placements


def test_near_ties_take_the_literal_walk():
    assert _apart((1.0, 2.0), (1.0 + 1e-9, 0.0))
    assert _apart((1.0, 2.0), (1.0, 2.0))
    assert _apart((1.0, 2.0), (1.0, 3.0))
    assert not _apart((1.0, 2.0), (1.0 + 1e-13, 0.0))
    assert not _apart((1.0, 2.0), (1.0, 2.0 + 1e-13))


@pytest.mark.parametrize("jp", [True, False])
def test_daemon_state(jp):
    sn, _ = build(12, 8, 60, 150, seed=1)
    plan = Similarity(jp=jp).schedule(sn)
    assert_same(plan, RefSimilarity(jp=jp).schedule(sn))
    if jp:
        assert any(a.share_with for a in plan.starts())
    small = dataclasses.replace(sn, nodes=tuple(dataclasses.replace(n, gpu_mem_mb=9000)
                                                for n in sn.nodes))
    assert_same(Similarity(jp=jp).schedule(small), RefSimilarity(jp=jp).schedule(small))


def test_equal_candidates_of_two_classes_go_by_arrival():
    """j3 and j4 score the same (same application and batch, different batch range): the
    second host takes j3 (the earlier one) once j2 is gone, as the walk does."""
    nodes = (Node("v0", 1, "v100", 40000), Node("v1", 1, "v100", 40000))
    jobs = [job(0, batch=64), job(1, batch=64, t=1.0),
            job(2, batch=64, t=2.0, batch_range=(32, 512)), job(3, batch=64, t=3.0),
            job(4, batch=64, t=4.0, batch_range=(32, 512))]
    sn = snap(nodes, jobs)
    plan = Similarity(decide="gpu_ngpu_bs").schedule(sn)
    assert_same(plan, RefSimilarity(decide="gpu_ngpu_bs").schedule(sn))
    assert {s.job_id: s.share_with for s in plan.starts() if s.share_with} == \
        {"j2": ("j0",), "j3": ("j1",)}


_VEC = st.lists(st.floats(0, 1e6, allow_nan=False), min_size=3, max_size=3)


@settings(max_examples=200, deadline=None)
@given(feats=st.dictionaries(st.sampled_from(["a", "b", "c", "d", "e"]),
                             st.one_of(_VEC.map(tuple), _VEC), max_size=5),
       refs=st.lists(st.sampled_from(["a", "b", "c", "d", "x"]), max_size=5, unique=True),
       ex=st.booleans(), app=st.sampled_from(["a", "b", "c", "e", "x"]), dup=st.booleans())
def test_closest_memo_answers_as_the_scan(feats, refs, ex, app, dup):
    """SimilarityDB.closest (memoised by the vectors' values) = the scan it replaced, on
    random databases: missing vectors, references without features, exclude_self, list
    vectors (no memo), equal vectors (ties by name), asked twice."""
    from policies.similarity import SimilarityDB
    from reference_similarity import SimilarityDB as RefDB

    if dup and len(feats) >= 2:  # two models with the same vector: the tie goes by name
        k = sorted(feats)
        feats[k[1]] = feats[k[0]]
    db = SimilarityDB(feats, tuple(refs), exclude_self=ex)
    want = RefDB.closest(db, app)  # the old scan, on the same database
    assert db.closest(app) == want
    assert db.closest(app) == want  # the memo's answer
