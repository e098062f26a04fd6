"""The typed-round policies (isolation, gavel-mtd, similarity: policies/typed_rounds.py,
policies/gavel_rounds.py) with issue #13's memos — type capacity, node types and every
node's GPUs memoised per node tuple, a node without a kept job's GPU offered whole, an
allocation's GPU types memoised, Gavel's per-mapping totals, type orders and shared
KEEP_RUNNING reasons, isolation's shares per GPU count (docs/scale.md §2) — return exactly
the Plans of the code as it was (reference_typed_rounds.py, verbatim), patched into the
modules that call it: at every call of simulator runs on heterogeneous clusters, on
hypothesis-random rounds, and on the daemon benchmark's state."""
from __future__ import annotations

from contextlib import contextmanager

import pytest
from hypothesis import given, settings, strategies as st

import policies
import policies.gavel_mtd
import policies.gavel_mtd_arrays
import policies.gavel_rounds
import policies.isolation
import policies.model
import policies.similarity
import policies.typed_rounds
import reference_typed_rounds as ref
from policies.model import Node
from test_similarity import APPS, M, job, snap
from test_sjf_differential import assert_same
from daemon_pass import apply_plan, build

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
    # gavel-mtd's array path off: the allocation of the scalar code (policies/gavel_mtd_arrays.py)
    saved.append((policies.gavel_mtd_arrays, "MIN_JOBS", policies.gavel_mtd_arrays.MIN_JOBS))
    policies.gavel_mtd_arrays.MIN_JOBS = 10 ** 9
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
    for _ in range(rounds):
        plan = policies.get_policy(name).schedule(sn)
        with old_rounds():
            assert_same(plan, policies.get_policy(name).schedule(sn))
        sn = apply_plan(sn, plan, dt=400.0)  # the next round sees this one's placements


def test_daemon_state():
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


@settings(max_examples=80, deadline=None)
@given(specs=st.lists(st.tuples(st.integers(0, 7), st.sampled_from([1, 2]),
                                st.sampled_from(["same", "type", "count", "batch", "none"]),
                                st.booleans()), min_size=1, max_size=8, unique_by=lambda s: s[0]),
       fresh_view=st.integers(0, 7))
def test_apply_decisions_memo_answers_like_the_plain_pass(specs, fresh_view):
    """apply_decisions with a memo kept across calls (similarity's kept path) returns what
    the plain pass returns — the same dicts in the same order, the same actions — at the
    call that fills the memo and at a later one that finds it (one job with a fresh view,
    one with another choice object)."""
    import dataclasses

    from policies.gavel_rounds import _Pick
    from policies.model import Allocation, JobState

    nodes = (Node("v0", 4, "v100"), Node("v1", 4, "v100"), Node("k0", 4, "k80", 12288))
    gpus = [g for n in nodes for g in n.gpus()]
    jobs, decided = [], {}
    for i, (slot, n, what, override) in enumerate(specs):
        gs = tuple(gpus[(slot * 2 + k) % len(gpus)] for k in range(n))
        if len({g for g in gs}) < n or any(g in {x for j in jobs for x in j.allocation.gpus}
                                           for g in gs):
            continue
        j = job(i, n=n, batch=64, t=float(i))
        alloc = Allocation(gs, 64 // n, 1, None, global_batch=128 if override else None)
        jobs.append(dataclasses.replace(j, state=JobState.RUNNING, allocation=alloc, start_time=0.0))
        t = "k80" if gs[0].node == "k0" else "v100"
        cur = 128 if override else 64
        pick = {"same": (t, n, cur), "type": ("k80" if t == "v100" else "v100", n, cur),
                "count": (t, n + 1, cur), "batch": (t, n, cur * 2), "none": None}[what]
        if pick is not None:
            decided[j.id] = _Pick(*pick)
    sn = snap(nodes, jobs)
    run = sn.running()

    def why(j, opt):
        return policies.plan.reason(policies.plan.ReasonCode.KEEP_RUNNING, "kept", n=opt.ngpu)

    def both(s, dec, memo):
        a = policies.typed_rounds.apply_decisions(s, [], dec, True, why, why, s.running(), memo)
        b = policies.typed_rounds.apply_decisions(s, [], dec, True, why, why, s.running())
        preempted, starts, placed, batch_of, _ = a
        assert list(preempted.items()) == list(b[0].items()) and starts == b[1]
        assert list(placed.items()) == list(b[2].items())
        assert list(batch_of.items()) == list(b[3].items())
        assert [(k, r.code, r.text, dict(r.numbers)) for k, r in a[4].items()] == \
               [(k, r.code, r.text, dict(r.numbers)) for k, r in b[4].items()]
        return a

    memo: dict = {}
    a = both(sn, decided, memo)
    assert set(memo) == set(a[2])  # every job kept (none started) recorded
    if not run:
        return
    # a later call: one job with a fresh view (same content), one with another choice object
    k = fresh_view % len(run)
    views = {j.id: j for j in run}
    views[run[k].id] = dataclasses.replace(run[k])
    dec2 = dict(decided)
    last = run[-1].id
    if last in dec2:
        o = dec2[last]
        dec2[last] = _Pick(o.gpu_type, o.ngpu, o.batch)
    sn2 = snap(nodes, list(views.values()))
    before = dict(memo)
    a2 = both(sn2, dec2, memo)
    for jid, (view, opt, r, _) in before.items():
        # the recorded reason object answers exactly where the view and choice are the same
        found = a2[4][jid] is r
        assert found == (sn2.jobs[jid] is view and dec2.get(jid) is opt)


@pytest.mark.parametrize("name,arrays_from", [("gavel-mtd", None), ("gavel-mtd", 0),
                                               ("gavel-mtd", 30), ("isolation", None)])
def test_every_call_of_an_overloaded_one_type_run(name, arrays_from, monkeypatch):
    """One GPU type, far more jobs than GPUs: most of each round's order lies past the point
    where no type has room (run_round's walk stops there) and waits with the one shared
    reason; gavel-mtd's shares are one-type mappings of one key each.  ``arrays_from``:
    gavel-mtd's array path (policies/gavel_mtd_arrays.py) from that many jobs on, against
    the scalar code's Plans (None: the module's threshold, above these rounds)."""
    from gimbalctl.cluster import parse_cluster
    from gimbalctl.sim import SimConfig, simulate
    from random_jobs import plain_jobs

    if arrays_from is not None:
        monkeypatch.setattr(policies.gavel_mtd_arrays, "MIN_JOBS", arrays_from)
    used = []
    real = policies.gavel_mtd_arrays.OneTypeShares.keyed

    def keyed(self, now, jobs):
        out = real(self, now, jobs)
        used.append(out is not None)
        return out

    monkeypatch.setattr(policies.gavel_mtd_arrays.OneTypeShares, "keyed", keyed)
    nodes = parse_cluster("2x4")
    pol = Differential(name)
    res = simulate(plain_jobs(70, 3), nodes, pol, M, SimConfig(interval=180.0))
    assert res.jobs.end.notna().all()
    assert pol.calls > 20 and pol.kept_nodes > 10
    # the array path answered rounds exactly where it was on
    assert (sum(used) > 10) == (arrays_from is not None)


class _OwnSnapshot(policies.model.ClusterSnapshot):
    """A snapshot type of its own: run_round and gavel-mtd's lengths ask its methods."""


def test_a_snapshot_type_of_its_own_gets_the_same_plan():
    import dataclasses

    sn, _ = build(12, 8, 40, 60, seed=3)
    own = _OwnSnapshot(**{f.name: getattr(sn, f.name) for f in dataclasses.fields(sn)})
    assert type(own) is not type(sn)
    for name in ("gavel-mtd", "isolation"):
        pol = policies.get_policy(name)
        if name == "isolation":  # its round through run_round (the reference method)
            a, b = pol.schedule_reference(sn), pol.schedule_reference(own)
        else:
            a, b = pol.schedule(sn), pol.schedule(own)
        assert_same(a, b)
        assert a.order and any(not j.running for j in sn.jobs.values())
