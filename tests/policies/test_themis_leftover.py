"""Themis's leftover hand-out from kept steps (policies.themis_leftover): on sequences of random
calls (jobs coming and going, first-hand-out shares and stops moving, draws from a tiny range
so that keys tie) the kept steps give the heap's shares or ``None`` (a tie at the cut); at
every call of whole contended simulations Themis plans with them as with the heap alone.
The first hand-out as a sort (``themis._first_sorted``) against its heap (``_first_heap``): at
every call of whole simulations, on keys tied across groups and counts cut at every GPU
count, for one job given every GPU, and where it must decline (a falling key, NaN, -inf)."""
from __future__ import annotations

import hashlib
import heapq
import math
from types import SimpleNamespace
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import policies
from gimbalctl.cluster import parse_cluster
from gimbalctl.profiles import default_models
from gimbalctl.sim import SimConfig, simulate
from policies import themis
from policies.themis_leftover import KeptLeftovers
from policy_probe import PolicyProbe
from test_elastic_differential import _jobs

MODELS = default_models()


def _heap(seed, leftover, shares, left, stop, draw):
    """The leftover hand-out as Themis.schedule's heap makes it, one GPU per pop (the
    reference: the scan's order, (draw, position in ``leftover``))."""
    shares = dict(shares)
    heap = [(draw(seed, j.id, shares[j.id]), i, j) for i, j in enumerate(leftover)]
    heapq.heapify(heap)
    while left > 0 and heap:
        d, i, j = heap[0]
        k = shares[j.id]
        if stop(j, k) <= k:  # may not grow at its share: dropped
            heapq.heappop(heap)
            continue
        shares[j.id] = k + 1
        left -= 1
        heapq.heapreplace(heap, (draw(seed, j.id, k + 1), i, j))
    return {j.id: shares[j.id] for j in leftover}


def _tiny_draw(seed, jid, k):
    """Draws from four values: ties between jobs are common."""
    h = hashlib.blake2b(f"{seed}|{jid}|{k}".encode(), digest_size=1).digest()
    return bytes([h[0] & 3])


@settings(max_examples=300, deadline=None)
@given(data=st.data(), tiny=st.booleans())
def test_kept_steps_give_the_heaps_shares_over_calls(data, tiny):
    draw = _tiny_draw if tiny else themis._draw
    kept = KeptLeftovers(draw)
    ids = [f"j{i}" for i in range(10)]
    answered = 0
    for _ in range(data.draw(st.integers(1, 6))):
        seed = data.draw(st.sampled_from([0, 0, 0, 7]))
        chosen = data.draw(st.lists(st.sampled_from(ids), unique=True, max_size=8))
        leftover = [SimpleNamespace(id=j) for j in chosen]
        shares = {j: data.draw(st.integers(0, 3)) for j in chosen}
        # a job's stop: any share from its start on (its cap or the first one not useful)
        tops = {j: shares[j] + data.draw(st.integers(0, 6)) if shares[j] else 0 for j in chosen}

        def stop(j, k0, tops=tops):
            return max(k0, tops[j.id])
        left = data.draw(st.integers(1, 30))
        got = kept.hand_out(seed, leftover, shares, left, stop)
        want = _heap(seed, leftover, shares, left, stop, draw)
        if got is not None:
            answered += 1
            assert got == want
        else:
            assert tiny  # (with 8-byte draws no two keys tie)
        # what it keeps: the steps of this call's jobs, sorted
        assert kept.steps == sorted(kept.steps)
        assert {jid for _, jid, _ in kept.steps} <= set(chosen)
        assert len(kept.steps) == sum(tops[j] - shares[j] for j in chosen if tops[j] > shares[j])


def test_a_tie_at_the_cut_between_two_jobs_gives_none():
    """Two jobs whose first draws are equal, one GPU left: the leftover list's order decides
    (the first job), which the kept steps cannot tell."""
    def draw(seed, jid, k):
        return b"\x01"
    kept = KeptLeftovers(draw)
    a, b = SimpleNamespace(id="b"), SimpleNamespace(id="a")

    def stop(j, k0):
        return k0 + 2
    assert kept.hand_out(0, [a, b], {"a": 1, "b": 1}, 1, stop) is None
    assert _heap(0, [a, b], {"a": 1, "b": 1}, 1, stop, draw) == {"b": 2, "a": 1}
    # two GPUs: the first job's next draw is no larger, so it takes both (the heap's
    # "picked again at once"); still the list's order, so still no answer here
    assert kept.hand_out(0, [a, b], {"a": 1, "b": 1}, 2, stop) is None
    assert _heap(0, [a, b], {"a": 1, "b": 1}, 2, stop, draw) == {"b": 3, "a": 1}
    # four GPUs: every step of both is taken, no order needed
    assert kept.hand_out(0, [a, b], {"a": 1, "b": 1}, 4, stop) == {"a": 3, "b": 3}
    # a tie within one job's steps at the cut is its step order: answered
    kept = KeptLeftovers(lambda seed, jid, k: jid.encode())
    assert kept.hand_out(0, [a, b], {"a": 1, "b": 1}, 1, stop) == {"a": 2, "b": 1}
    assert _heap(0, [a, b], {"a": 1, "b": 1}, 1, stop,
                 lambda seed, jid, k: jid.encode()) == {"a": 2, "b": 1}


class _Checked(PolicyProbe):
    """Every call planned with the kept steps and with the heap alone: the same Plan."""

    def __init__(self):
        super().__init__("themis")
        self.ref = policies.get_policy("themis")
        self.used = 0

    def schedule(self, snap):
        real = KeptLeftovers.hand_out

        def counted(kept, *a):
            got = real(kept, *a)
            self.used += got is not None
            return got
        with mock.patch.object(KeptLeftovers, "hand_out", counted):
            got = self.inner.schedule(snap)
        with mock.patch.object(KeptLeftovers, "hand_out", lambda *a: None):
            want = self.ref.schedule(snap)
        assert got == want and dict(got.reasons) == dict(want.reasons)
        return got


@pytest.mark.parametrize("cluster,n", [("4x8", 60), ("3x8", 40), ("6x4", 60), ("2x8", 40)])
def test_every_contended_call_plans_as_with_the_heap(cluster, n):
    pol = _Checked()
    res = simulate(_jobs(n, seed=7), parse_cluster(cluster), pol, MODELS, SimConfig())
    assert len(res._rows) == n
    assert pol.used >= 40  # (calls the kept steps answered with GPUs left over)


def test_stops_are_the_first_share_the_heap_drops_at_for_any_start():
    """themis._stops: for every job of a simulated call and every start share (asked in both
    orders, so the memo is read for one start after another), the first share ``k >= k0``
    with ``k = 0``, ``k >= cap`` or one more GPU not useful."""
    from policies.elastic import Rates, useful_share
    from policy_probe import Recorder

    rec = Recorder("themis")
    simulate(_jobs(30, seed=7), parse_cluster("4x8"), rec, MODELS, SimConfig())
    snap = rec.seen[len(rec.seen) // 2]
    rates = Rates(snap)
    n = len(snap.jobs)

    def cap(j):
        return rates.cap(j, n)
    moved = 0
    for starts in (range(0, 12), range(11, -1, -1)):
        rates.kept.pop("themis-stop", None)
        stop = themis._stops(rates, cap)
        for j in snap.jobs.values():
            for k0 in starts:
                k = k0
                while 0 < k < cap(j) and useful_share(rates, j, k):
                    k += 1
                assert stop(j, k0) == k
                moved += k > k0 > 1
    assert moved > 0  # (starts above 1 that still grow: the memo's key holds the start)


class _FirstChecked(PolicyProbe):
    """Every call's first hand-out made by the sort and by the heap: the same shares and
    GPUs left, and (where GPUs are left, the only case that reads it) the same leftovers'
    list; counts the calls the sort answered, those with the GPUs running out within the
    steps and those with GPUs left over."""

    def __init__(self):
        super().__init__("themis")
        self.seen = {"sorted": 0, "cut": 0, "left": 0, "heap": 0}

    def schedule(self, snap):
        real = themis._first_sorted

        def both(rates, front, M, rho, groups, shares):
            assert sorted(p for g in groups for p in g) == list(range(len(front)))
            before = dict(shares)
            got = real(rates, front, M, rho, groups, shares)
            if got is None:
                self.seen["heap"] += 1
                return None
            mine = dict(shares)
            shares.clear()
            shares.update(before)
            want = themis._first_heap(rates, front, M, rho, shares)
            assert mine == shares and got[0] == want[0]
            if got[0] > 0:
                assert [j.id for j in got[1]] == [j.id for j in want[1]]
                self.seen["left"] += 1
            else:
                self.seen["cut"] += 1
            self.seen["sorted"] += 1
            return got
        with mock.patch.object(themis, "_first_sorted", both):
            return self.inner.schedule(snap)


@pytest.mark.parametrize("cluster,n,case", [("4x8", 60, "left"), ("2x8", 40, "left"),
                                            ("6x4", 60, "left"), ("1x8", 30, "cut")])
def test_first_hand_out_sorted_is_the_heaps(cluster, n, case):
    """At every call of whole simulations; on 1x8 the GPUs run out within the steps at every
    call, elsewhere GPUs are left for the leftovers' draws at most calls."""
    pol = _FirstChecked()
    res = simulate(_jobs(n, seed=7), parse_cluster(cluster), pol, MODELS, SimConfig())
    assert len(res._rows) == n
    assert pol.seen[case] >= 60 and pol.seen["sorted"] >= 70, pol.seen


def test_first_hand_out_falls_back_where_a_key_falls():
    """rho rising with the count (a key that falls), NaN, or infinite past count 0: no sort
    (the heap decides), and the shares are left as they were."""
    from policies.elastic import Rates
    from policy_probe import Recorder

    rec = Recorder("themis")
    simulate(_jobs(12, seed=7), parse_cluster("2x8"), rec, MODELS, SimConfig())
    snap = next(s for s in rec.seen if len(s.jobs) >= 3)
    rates = Rates(snap)
    front = sorted(snap.jobs.values(), key=lambda j: (j.submit_time, j.id))
    shares = {j.id: 0 for j in front}
    one = [[i] for i in range(len(front))]
    for bad in (lambda j, k: 1.5 + k, lambda j, k: float("nan"), lambda j, k: math.inf):
        got = dict(shares)
        assert themis._first_sorted(rates, front, 16, bad, one, got) is None
        assert got == shares
    # a falling rho, above 1 at count 1 only: sorted, as the heap (at most two GPUs each)
    got, want = dict(shares), dict(shares)
    ok = themis._first_sorted(rates, front[:3], 12, lambda j, k: 2.0 / k, one[:3], got)
    heap = themis._first_heap(rates, front[:3], 12, lambda j, k: 2.0 / k, want)
    assert ok is not None and got == want and ok[0] == heap[0] >= 12 - 2 * 3
    assert [j.id for j in ok[1]] == [j.id for j in heap[1]] and len(ok[1]) == 3


def test_first_hand_out_sorted_ties_across_groups_and_counts(monkeypatch):
    """Keys held by several groups' steps and by one group's consecutive counts (rho flat),
    cut at every GPU count: the heap's (key, position, step) order, the same shares, GPUs
    left and leftovers' list."""
    from policies.elastic import Rates
    from policy_probe import Recorder

    rec = Recorder("themis")
    simulate(_jobs(30, seed=7), parse_cluster("1x8"), rec, MODELS, SimConfig())
    snap = next(s for s in rec.seen if len(s.jobs) >= 6)
    rates = Rates(snap)
    front = sorted(snap.jobs.values(), key=lambda j: (j.submit_time, j.id))[:6]
    groups = [[0, 2, 4], [1, 3], [5]]
    of = {front[p].id: g for g, ps in enumerate(groups) for p in ps}
    table = [{1: 3.0, 2: 2.0, 3: 2.0, 4: 0.5}, {1: 2.0, 2: 2.0, 3: 1.5, 4: 1.0},
             {1: 2.0, 2: 0.9}]

    def rho(j, k):
        return math.inf if k == 0 else table[of[j.id]].get(k, 0.5)
    monkeypatch.setattr(themis, "useful_share", lambda rates, j, k: True)
    cuts = 0
    for M in range(6, 26):
        zero = {j.id: 0 for j in front}
        got, want = dict(zero), dict(zero)
        ok = themis._first_sorted(rates, front, M, rho, groups, got)
        heap = themis._first_heap(rates, front, M, rho, want)
        assert ok is not None and got == want and ok[0] == heap[0], M
        if ok[0]:
            assert [j.id for j in ok[1]] == [j.id for j in heap[1]], M
        cuts += not ok[0]
    assert 5 <= cuts < 20
    # one job whose rho stays above 1: the heap hands it every GPU (counts up to M - 1)
    for M in (1, 2, 5):
        got, want = {front[0].id: 0}, {front[0].id: 0}
        ok = themis._first_sorted(rates, front[:1], M, lambda j, k: 2.0, [[0]], got)
        heap = themis._first_heap(rates, front[:1], M, lambda j, k: 2.0, want)
        assert ok is not None and ok[0] == heap[0] == 0 and got == want == {front[0].id: M}
