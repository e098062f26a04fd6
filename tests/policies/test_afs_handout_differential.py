"""Algorithm 1's hand-out that resumes each walk at the job that changed (with the tie coin
memoised), and network-packing regulation with its candidates in a heap, make exactly the
decisions of the literal copies in reference_afs_handout.py (a full walk over every job
for every GPU, the coin hashed at every tie; a scan over every job for every move):

* shares on hypothesis-random candidate sets: large GPU totals with few jobs (the case
  where one job is handed hundreds of GPUs), identical jobs (ties decided by the coin),
  throughputs that plateau, fall, jump, are zero, negative or infinite, unknown and zero
  lengths; every job's count and the step at which it got its first GPU;
* regulation on random shares (zero and negative ones, every node size, a ``useful`` test
  that refuses some moves);
* Themis's leftover GPUs drawn from a heap: whole Plans against its former ``schedule``
  (``ThemisBefore``) on hypothesis-random snapshots;
* whole Plans of the five elastic policies on hypothesis snapshots of 16-300 nodes with
  1-6 jobs, and at every call of simulator runs on large clusters with few jobs (tests/policies/test_elastic_differential.py's reference path).

A mutation check is in ``test_a_wrong_resume_point_is_caught``."""
from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import policies.afs_core as afs_core
import reference_afs_handout as ref
from gimbalctl.cluster import parse_cluster
from gimbalctl.sim import SimConfig, simulate
from policies.afs_core import Cand, afs_l_shares, afs_p_shares
from policies.elastic import regulate
from policies.themis import Themis
from test_afs_speed_differential import snapshots
from test_elastic_differential import MODELS, Differential, _jobs
from test_sjf_differential import assert_same

# throughput shapes: k -> iterations/s
SHAPES = ("concave", "linear", "plateau", "fall", "jump", "zero", "negative", "inf", "flat")


def _rate(shape: str, a: float, b: float, knee: int):
    def rate(k: int) -> float:
        if k <= 0:
            return 0.0
        if shape == "concave":
            return a * k / (1.0 + b * k)
        if shape == "linear":
            return a * k
        if shape == "plateau":
            return a * min(k, knee)
        if shape == "fall":  # rises to the knee, then falls (communication-bound)
            top = a * min(k, knee) / (1.0 + b * min(k, knee))
            return top if k <= knee else top - 1e-3 * (k - knee)
        if shape == "jump":  # a step at each multiple of the knee (crossing a node)
            return a * k / (1.0 + b * k) * (0.7 if (k // knee) % 2 else 1.0)
        if shape == "zero":
            return 0.0 if k % knee == 0 else a * k / (1.0 + b * k)
        if shape == "negative":
            return -a * k if k > knee else a * k
        if shape == "inf":
            return math.inf if k == knee else a * k / (1.0 + b * k)
        return a  # flat: one more GPU never helps
    return rate


@st.composite
def cand_sets(draw):
    n = draw(st.integers(1, 9))
    total = draw(st.sampled_from([1, 2, 7, 64, 300, 1200, 2400]))
    proto = []
    for i in range(n):
        if proto and draw(st.integers(0, 2)) == 0:  # a copy of an earlier job: ties
            shape, a, b, knee, rem, cap = draw(st.sampled_from(proto))
        else:
            shape = draw(st.sampled_from(SHAPES))
            a = draw(st.sampled_from([0.5, 1.0, 3.0, 10.0]))
            b = draw(st.sampled_from([0.0, 1e-3, 0.01, 0.1, 0.5]))
            knee = draw(st.integers(1, 40))
            rem = draw(st.sampled_from([math.inf, 0.0, 1.0, 500.0, 1e6]))
            cap = draw(st.sampled_from([1, 4, 100, total]))
        proto.append((shape, a, b, knee, rem, cap))
    seed = draw(st.integers(0, 5))
    return proto, total, seed


def _cands(proto):
    return [Cand(f"j{i}", rem, _rate(shape, a, b, knee), cap)
            for i, (shape, a, b, knee, rem, cap) in enumerate(proto)]


def _result(cands):
    return [(c.id, c.cnt, c.pick) for c in cands]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cand_sets())
def test_afs_p_shares_match_reference(case):
    proto, total, seed = case
    new, old = _cands(proto), _cands(proto)
    afs_p_shares(new, total, seed)
    ref.afs_p_shares(old, total, seed)
    assert _result(new) == _result(old)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cand_sets())
def test_afs_l_shares_match_reference(case):
    proto, total, _ = case
    new, old = _cands(proto), _cands(proto)
    afs_l_shares(new, total)
    ref.afs_l_shares(old, total)
    assert _result(new) == _result(old)


@st.composite
def many_cand_sets(draw):
    """Dozens to a couple of hundred jobs (from a few shapes, so ties and repeated states
    are common) and a few GPUs to hundreds more than jobs: stage two's walks are long
    enough to be passed over block by block (afs_core.BLOCK, drawn small too)."""
    protos = draw(st.lists(st.tuples(
        st.sampled_from(SHAPES), st.sampled_from([0.5, 1.0, 3.0, 10.0]),
        st.sampled_from([0.0, 1e-3, 0.01, 0.1, 0.5]), st.integers(1, 12),
        st.sampled_from([math.inf, 0.0, 1.0, 500.0, 1e6]), st.sampled_from([1, 2, 4, 100])),
        min_size=1, max_size=6))
    n = draw(st.integers(8, 150))
    proto = [protos[draw(st.integers(0, len(protos) - 1))] for _ in range(n)]
    total = n + draw(st.sampled_from([1, 5, 40, 200]))
    return proto, total, draw(st.integers(0, 5)), draw(st.sampled_from([1, 2, 3, 5, 16]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=many_cand_sets())
def test_many_jobs_block_walks_match_reference(case):
    proto, total, seed, block = case
    real = afs_core.BLOCK
    afs_core.BLOCK = block
    try:
        for shares, ref_shares in ((lambda c: afs_l_shares(c, total),
                                    lambda c: ref.afs_l_shares(c, total)),
                                   (lambda c: afs_p_shares(c, total, seed),
                                    lambda c: ref.afs_p_shares(c, total, seed))):
            new, old = _cands(proto), _cands(proto)
            shares(new)
            ref_shares(old)
            assert _result(new) == _result(old)
    finally:
        afs_core.BLOCK = real


def test_equal_jobs_share_a_large_cluster_by_coin():
    """Eight identical jobs on 2,400 GPUs: every step is a tie or a (3) decision between
    equal curves; hundreds of GPUs each, the same as the reference."""
    proto = [("concave", 3.0, 0.002, 1, math.inf, 2400)] * 8
    for seed in range(3):
        new, old = _cands(proto), _cands(proto)
        afs_p_shares(new, 2400, seed)
        ref.afs_p_shares(old, 2400, seed)
        assert _result(new) == _result(old)
        assert sum(c.cnt for c in new) == 2400 and min(c.cnt for c in new) > 100


def test_coin_memo_is_the_coin():
    afs_core._coin.cache_clear()
    for seed in range(3):
        for x, y in (("a", "b"), ("b", "a"), ("j1", "j10"), ("x", "x")):
            assert afs_core._coin(seed, x, y) == ref.coin(seed, x, y)
            assert afs_core._coin(seed, x, y) == ref.coin(seed, x, y)  # from the memo


def test_a_wrong_resume_point_is_caught(monkeypatch):
    """Mutation check: resuming one position too late (skipping the changed job's own
    comparison) must change some decision on these inputs."""
    real = afs_core._walk_p_from

    def late(st_, ids, seed, k0, k_star, traj, blocks=None):
        if k0:
            return real(st_, ids, seed, min(k0 + 1, len(st_)), k_star, traj, blocks)
        return real(st_, ids, seed, k0, k_star, traj, blocks)

    monkeypatch.setattr(afs_core, "_walk_p_from", late)
    proto = [("concave", 3.0, 0.002, 1, math.inf, 2400)] * 6 + \
        [("concave", 10.0, 0.01, 1, math.inf, 2400)] * 3
    differs = False
    for seed in range(4):
        new, old = _cands(proto), _cands(proto)
        afs_p_shares(new, 2400, seed)
        ref.afs_p_shares(old, 2400, seed)
        differs |= _result(new) != _result(old)
    assert differs


@st.composite
def share_sets(draw):
    per = draw(st.sampled_from([1, 2, 3, 4, 6, 8]))
    n = draw(st.integers(0, 30))
    shares = {f"j{i}": draw(st.one_of(st.integers(-2, 3 * per + 1), st.integers(0, 3000)))
              for i in range(n)}
    total = draw(st.one_of(st.just(sum(max(0, s) for s in shares.values())),
                           st.integers(0, 3000)))
    refuse = draw(st.sets(st.sampled_from(sorted(shares)) if shares else st.nothing()))
    cut = draw(st.integers(1, 64))
    return shares, per, total, refuse, cut


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=share_sets())
def test_regulate_matches_reference(case):
    shares, per, total, refuse, cut = case

    def useful(j, k):  # refuses moves of some jobs, and every move beyond ``cut`` GPUs
        return j not in refuse and k <= cut

    new = regulate(shares, per, total, useful)
    old = ref.regulate(shares, per, total, useful)
    assert list(new.items()) == list(old.items())
    assert list(regulate(shares, per, total).items()) == \
        list(ref.regulate(shares, per, total).items())


@pytest.mark.parametrize("name", ["afs-p", "afs-l", "max-min", "optimus", "themis"])
def test_large_cluster_few_jobs_simulator_runs(name):
    """64x8 and 24 jobs: jobs are handed tens to hundreds of GPUs each; whole Plans equal
    the reference at every call."""
    pol = Differential(name)
    simulate(_jobs(24, seed=11), parse_cluster("64x8"), pol, MODELS,
             SimConfig(interval=120.0, seed=4, reveal_lengths=pol.needs_lengths))
    assert pol.calls > 10


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=snapshots())
def test_themis_leftover_matches_reference(case):
    snap, _ = case
    pol = Themis()
    assert_same(pol.schedule(snap), ref.ThemisBefore.schedule(pol, snap))


@st.composite
def big_snapshots(draw):
    """A large cluster (16-300 nodes of 8 GPUs) and 1-6 jobs, some running on a node or two,
    some of them copies of each other (ties); global batches up to 512x the smallest, so that
    a job may be handed tens to hundreds of GPUs."""
    from types import MappingProxyType

    from gimbalctl.profiles import APPS
    from policies.model import Allocation, ClusterSnapshot, Job, JobState, Node

    nodes = tuple(Node(f"n{i}", 8) for i in range(draw(st.sampled_from([16, 64, 300]))))
    jobs, proto = [], []
    for k in range(draw(st.integers(1, 6))):
        if proto and draw(st.booleans()):
            app, mult, iters = draw(st.sampled_from(proto))
        else:
            app = draw(st.sampled_from(APPS))
            mult = draw(st.sampled_from([1, 4, 64, 512]))
            iters = draw(st.sampled_from([1.0, 500.0, 1e6]))
            proto.append((app, mult, iters))
        batch = MODELS.iters_table[app][0][0] * mult
        kw = {}
        if draw(st.booleans()):  # running on GPUs of node k (and k+1)
            gpus = tuple(g for n in nodes[2 * k:2 * k + draw(st.integers(1, 2))] for g in n.gpus())
            gpus = gpus[:draw(st.sampled_from([1, 2, 4, 8, 16]))]
            kw = dict(state=JobState.RUNNING, start_time=0.0, as_of=1000.0,
                      allocation=Allocation(gpus, max(1, batch // len(gpus))))
        jobs.append(Job(f"J{k}", float(k % 3), 1, app, batch, total_iters=iters, **kw))
    gj = {g: (j.id,) for j in jobs if j.running for g in j.allocation.gpus}
    gpus = [g for n in nodes for g in n.gpus()]
    return ClusterSnapshot(1000.0, nodes, MappingProxyType({j.id: j for j in jobs}),
                           MappingProxyType(gj), tuple(g for g in gpus if g not in gj),
                           MODELS.profiles, MODELS.memory, seed=draw(st.integers(0, 3)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snap=big_snapshots())
@pytest.mark.parametrize("name", ["afs-p", "afs-l", "max-min", "optimus", "themis"])
def test_big_cluster_snapshots_match_reference(name, snap):
    import policies

    from test_elastic_differential import _reference_plan

    pol = policies.get_policy(name)
    assert_same(pol.schedule(snap), _reference_plan(pol, snap))


def test_regulate_many_jobs_on_few_shares_matches_reference():
    """Hundreds of jobs on a few share values (the groups of ``regulate``: one share, one
    count), in shuffled priority orders, with moves refused for some jobs."""
    import random

    rng = random.Random(1)
    for _ in range(300):
        per = rng.choice([1, 2, 3, 4, 6, 8])
        n = rng.randint(0, 300)
        shares = {f"j{i}": rng.randint(-1, rng.choice([3, 10, 20, 40, 100])) for i in range(n)}
        keys = list(shares)
        rng.shuffle(keys)
        shares = {k: shares[k] for k in keys}
        total = rng.choice([sum(max(0, s) for s in shares.values()), rng.randint(0, 3000)])
        refuse = set(rng.sample(keys, rng.randint(0, n)))
        cut = rng.randint(1, 64)

        def useful(j, k):
            return j not in refuse and k <= cut

        assert list(regulate(shares, per, total, useful).items()) == \
            list(ref.regulate(shares, per, total, useful).items())
