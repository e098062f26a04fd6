"""The typed-round policies (isolation, gavel-mtd, similarity: policies/typed_rounds.py,
policies/gavel_rounds.py) with issue #13's memos — type capacity, node types and every
node's GPUs memoised per node tuple, a node without a kept job's GPU offered whole, an
allocation's GPU types memoised, Gavel's per-mapping totals, type orders and shared
KEEP_RUNNING reasons, isolation's shares per GPU count (docs/scale.md §2) — return exactly
the Plans of the code as it was (reference_typed_rounds.py, verbatim), patched into the
modules that call it: at every call of simulator runs on heterogeneous clusters, on
hypothesis-random rounds, and on the daemon benchmark's state."""
from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

import policies
import policies.gavel_mtd
import policies.gavel_rounds
import policies.isolation
import policies.similarity
import policies.typed_rounds
import reference_typed_rounds as ref
from policies.model import Node
from test_similarity import APPS, M, job, snap
from test_sjf_differential import assert_same

_USERS = (policies.gavel_rounds, policies.isolation, policies.gavel_mtd, policies.similarity)
NAMES = ["isolation", "gavel-mtd", "similarity"]


@contextmanager
def old_rounds():
    """The reference type_capacity / apply_decisions in every module that imports them."""
    saved = [(m, n, getattr(m, n)) for m in _USERS for n in ("apply_decisions", "type_capacity")
             if hasattr(m, n)]
    assert len(saved) == 6  # every user is patched (a new import would escape the test)
    saved += [(policies.gavel_mtd, "run_round", policies.gavel_mtd.run_round),
              (policies.isolation.Isolation, "schedule", policies.isolation.Isolation.schedule),
              (policies.similarity, "kept_schedule", policies.similarity.kept_schedule)]
    for m, n, _ in saved[:6]:
        setattr(m, n, getattr(ref, n))
    policies.gavel_mtd.run_round = ref.run_round
    policies.isolation.Isolation.schedule = ref.isolation_schedule
    # similarity's queue kept across calls (policies/similarity_kept.py) off: the old walk
    policies.similarity.kept_schedule = lambda pol, snap, state: None
    try:
        yield
    finally:
        for m, n, v in saved:
            setattr(m, n, v)


def _make(name, **kw):
    return policies.similarity.Similarity(**kw) if kw else policies.get_policy(name)


class Differential:
    """The package's policy and the same policy on the reference code, at every call."""

    def __init__(self, name, **kw):
        self.inner, self.ref = _make(name, **kw), _make(name, **kw)
        self.name, self.preemptive = name, True
        self.calls = self.kept_nodes = 0

    def __getattr__(self, attr):
        return getattr(self.inner, attr)

    def schedule(self, sn):
        plan = self.inner.schedule(sn)
        with old_rounds():
            want = self.ref.schedule(sn)
        assert_same(plan, want)
        self.calls += 1
        self.kept_nodes += any(j.running for j in sn.jobs.values())
        return plan


@pytest.mark.parametrize("name,kw", [("isolation", {}), ("gavel-mtd", {}),
                                     ("similarity", {"decide": "gpu_ngpu_bs", "cd": True, "jp": True}),
                                     ("similarity", {"decide": "gpu", "cd": True, "jp": False})])
@pytest.mark.parametrize("seed", [1, 7])
def test_every_call_of_a_simulator_run(name, kw, seed):
    from gimbalctl.cluster import parse_cluster
    from gimbalctl.hetero_workload import generate, jobs_from_rows
    from gimbalctl.sim import SimConfig, simulate

    nodes = parse_cluster("2x2:v100,1x4:p100,2x4:k80")
    jobs = jobs_from_rows(generate(24, nodes, span_s=900.0, seed=seed, models=M,
                                   duration_range=(300.0, 3600.0)))
    pol = Differential(name, **kw)
    res = simulate(jobs, nodes, pol, M, SimConfig(interval=180.0, seed=seed, preempt_cost=10.0))
    assert res.jobs.end.notna().all()
    assert pol.calls > 10 and pol.kept_nodes > 5  # rounds with running jobs were compared


@settings(max_examples=60, deadline=None)
@given(nv=st.integers(0, 3), nk=st.integers(0, 2), per=st.sampled_from([1, 2, 4]),
       specs=st.lists(st.tuples(st.sampled_from(APPS[:4]), st.sampled_from([1, 1, 2, 4]),
                                st.sampled_from([32, 64, 128])), min_size=1, max_size=16),
       name=st.sampled_from(NAMES), rounds=st.integers(1, 3))
def test_random_rounds(nv, nk, per, specs, name, rounds):
    nodes = tuple([Node(f"v{i}", per, "v100") for i in range(nv)] +
                  [Node(f"k{i}", per, "k80", 12288) for i in range(nk)])
    if not nodes:
        nodes = (Node("v0", per, "v100"),)
    total = sum(n.num_gpus for n in nodes)
    jobs = [job(i, app=a, n=min(n, total), batch=b, t=float(i % 5))
            for i, (a, n, b) in enumerate(specs)]
    sn = snap(nodes, jobs)
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    try:
        from daemon_pass import apply_plan
    finally:
        sys.path.pop(0)
    for _ in range(rounds):
        plan = policies.get_policy(name).schedule(sn)
        with old_rounds():
            assert_same(plan, policies.get_policy(name).schedule(sn))
        sn = apply_plan(sn, plan, dt=400.0)  # the next round sees this one's placements


def test_daemon_state():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    try:
        from daemon_pass import build
    finally:
        sys.path.pop(0)
    sn, _ = build(12, 8, 40, 60, seed=3)
    for name in NAMES:
        plan = policies.get_policy(name).schedule(sn)
        with old_rounds():
            assert_same(plan, policies.get_policy(name).schedule(sn))


def test_memo_answers_like_the_scan_and_hands_out_fresh_lists():
    nodes = (Node("a", 2, "v100", 16000), Node("b", 4, "v100", 12000), Node("c", 1, "k80", 8000))
    sn = snap(nodes, [job(0)])
    got = policies.typed_rounds.type_capacity(sn)
    assert got == ref.type_capacity(sn) == {"v100": [6, 4, 12000], "k80": [1, 1, 8000]}
    got["v100"][0] = 0  # a caller's change does not reach the memo
    assert policies.typed_rounds.type_capacity(sn)["v100"][0] == 6
