"""Theorem 1 and Algorithm 2 of seed 000 (policies/sharing.py) against brute force."""
from __future__ import annotations

import math

import pytest
from hypothesis import assume, given, settings, strategies as st

from policies.sharing import (algorithm2, algorithm2_fitted, pair_avg_jct, sub_batch_candidates,
                              theorem1)


def simulate_pair(kappa, t_a, i_a, t_b, i_b, xi_a, xi_b):
    """Independent event-by-event run of the two jobs: A alone until kappa,
    then both at the slowed rates 1/(ξ·t) until one ends, then the survivor
    alone at its exclusive rate.  Returns the average completion time."""
    rem_a = i_a - kappa / t_a  # A's iterations left when B is inserted
    if rem_a <= 0:  # sequential
        end_a = t_a * i_a
        return (end_a + max(kappa, end_a) + i_b * t_b) / 2.0
    ha, hb = xi_a * t_a, xi_b * t_b
    if rem_a * ha <= i_b * hb:  # A ends first while co-located
        end_a = kappa + rem_a * ha
        end_b = end_a + (i_b - rem_a * ha / hb) * t_b
    else:  # B ends first
        end_b = kappa + i_b * hb
        end_a = end_b + (rem_a - i_b * hb / ha) * t_a
    return (end_a + end_b) / 2.0


pos_t = st.floats(0.01, 5.0)
iters = st.floats(1.0, 5000.0)
xis = st.floats(1.0, 4.0)


@settings(max_examples=300, deadline=None)
@given(pos_t, iters, pos_t, iters, xis, xis)
def test_theorem1_matches_brute_force_over_kappa(t_a, i_a, t_b, i_b, xi_a, xi_b):
    dec = theorem1(t_a, i_a, t_b, i_b, xi_a, xi_b)
    end = t_a * i_a
    grid = [end * k / 400 for k in range(401)]
    brute = [simulate_pair(k, t_a, i_a, t_b, i_b, xi_a, xi_b) for k in grid]
    tol = 1e-7 * max(1.0, max(brute))
    # the closed form (eq. 18-25 generalised) agrees with the simulation everywhere
    for k, v in zip(grid, brute):
        assert pair_avg_jct(k, t_a, i_a, t_b, i_b, xi_a, xi_b) == pytest.approx(v, rel=1e-9, abs=tol)
    # both ends are the theorem's two options
    assert dec.t_share == pytest.approx(brute[0], rel=1e-9, abs=tol)
    assert dec.t_seq == pytest.approx(brute[-1], rel=1e-9, abs=tol)
    # no κ on the grid beats the better end (the theorem's claim)
    assert dec.t <= min(brute) + tol
    if abs(brute[0] - brute[-1]) > tol:  # a float tie may go either way
        assert dec.share == (brute[0] < brute[-1])
    # which case of the proof applies
    assert dec.case == (1 if xi_a * t_a * i_a >= xi_b * t_b * i_b else 2)


@settings(max_examples=200, deadline=None)
@given(pos_t, iters, pos_t, iters, xis, xis)
def test_case2_sign_condition_of_eq25(t_a, i_a, t_b, i_b, xi_a, xi_b):
    """Case 2: share now iff 2ξ_B + ξ_A − 2ξ_Aξ_B > 0 (the proof's slope test)."""
    dec = theorem1(t_a, i_a, t_b, i_b, xi_a, xi_b)
    assume(dec.case == 2)
    slope = 2 * xi_b + xi_a - 2 * xi_a * xi_b
    assume(abs(slope) > 1e-6)
    assert dec.share == (slope > 0)


def test_both_cases_concrete():
    # Case 1: long running job A, short candidate B, mild interference -> share
    d1 = theorem1(t_a=1.0, i_a=10000, t_b=1.0, i_b=100, xi_a=1.2, xi_b=1.2)
    assert d1.case == 1 and d1.share
    # eq. 21 by hand: hb*ib + ta*ia/2 - hb*ib/(2 xi_a)
    assert d1.t_share == pytest.approx(120 + 5000 - 120 / 2.4)
    assert d1.t_seq == pytest.approx(10000 + 50)
    # Case 2: A nearly done, B long, heavy interference -> run after
    d2 = theorem1(t_a=1.0, i_a=100, t_b=1.0, i_b=10000, xi_a=2.0, xi_b=2.0)
    assert d2.case == 2 and not d2.share
    assert d2.t_share == pytest.approx((1 - 1 / 4) * 200 + 5000)
    # Case 2 with small ξ -> share (2ξ_B + ξ_A − 2ξ_Aξ_B = 2.2+1.1-2.42 > 0)
    d3 = theorem1(t_a=1.0, i_a=100, t_b=1.0, i_b=10000, xi_a=1.1, xi_b=1.1)
    assert d3.case == 2 and d3.share
    # huge interference in case 1 -> run after
    d4 = theorem1(t_a=1.0, i_a=1000, t_b=1.0, i_b=900, xi_a=3.0, xi_b=3.0)
    assert d4.case == 1 and not d4.share


def test_theorem1_sequential_uses_t_b_seq():
    d = theorem1(1.0, 100, 2.0, 50, 1.5, 1.5, t_b_seq=1.0)
    assert d.t_seq == pytest.approx(100 + 25)
    with pytest.raises(ValueError):
        theorem1(0.0, 1, 1, 1, 1, 1)


def test_sub_batch_candidates():
    assert sub_batch_candidates(64) == [(64, 1), (32, 2), (16, 4), (8, 8), (4, 16), (2, 32), (1, 64)]
    assert sub_batch_candidates(1) == [(1, 1)]
    c = sub_batch_candidates(12)
    assert [b for b, _ in c] == [12, 6, 3, 2, 1]
    assert all(b * s >= 12 for b, s in c)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 4096), st.lists(st.floats(0.01, 3.0), min_size=13, max_size=13),
       st.integers(0, 5000), pos_t, iters, iters, xis, xis,
       st.one_of(st.none(), pos_t))
def test_algorithm2_best_and_memory_feasible(B, times, cap, t_run, i_run, i_new, xi_r, xi_n, t_seq):
    cands = sub_batch_candidates(B)
    table = {bs: times[i] for i, bs in enumerate(cands)}  # arbitrary, not monotone
    fits = lambda b: b <= cap  # noqa: E731
    seen = []

    def it(b, s):
        seen.append(b)
        return table[(b, s)]

    ch = algorithm2(cands, it, fits, t_run, i_run, i_new, xi_r, xi_n, t_seq)
    feasible = [bs for bs in cands if fits(bs[0])]
    if not feasible:  # nothing fits: never share; t is the run-after value
        assert not ch.fits and not ch.share
        assert ch.t == pytest.approx(t_run * i_run + (t_seq if t_seq is not None else table[cands[0]]) * i_new / 2)
        return
    assert all(fits(b) for b in seen), "evaluated a memory-infeasible sub-batch"
    assert ch.fits and fits(ch.sub_batch)
    assert ch.sub_batch * ch.accum_steps >= B
    brute = {bs: theorem1(t_run, i_run, table[bs], i_new, xi_r, xi_n, t_seq) for bs in feasible}
    best_t = min(d.t for d in brute.values())
    assert ch.t == pytest.approx(best_t)
    d = brute[(ch.sub_batch, ch.accum_steps)]
    assert d.t == pytest.approx(best_t) and ch.share == d.share
    # ties go to the larger sub-batch (first in search order)
    first_best = next(bs for bs in feasible if math.isclose(brute[bs].t, best_t) and brute[bs].t == best_t)
    assert (ch.sub_batch, ch.accum_steps) == first_best


odd = st.sampled_from([0.0, -1.0, math.nan, math.inf])


@settings(max_examples=400, deadline=None)
@given(st.integers(1, 4096), st.lists(st.one_of(st.floats(0.01, 3.0), odd), min_size=13,
                                      max_size=13),
       st.integers(0, 5000), st.one_of(pos_t, odd), st.one_of(iters, odd), iters,
       st.one_of(xis, odd), xis, pos_t, st.booleans())
def test_algorithm2_fitted_is_algorithm2(B, times, cap, t_run, i_run, i_new, xi_r, xi_n, t_seq,
                                         no_fit):
    """With the fitting (b, s, t_b) given, the same ShareChoice as Algorithm 2's search (NaN
    numbers compared as equal), or None exactly where the search raises or is handed
    inputs its checks refuse (the caller then runs the search)."""
    cands = sub_batch_candidates(B)
    table = {bs: times[i] for i, bs in enumerate(cands)}
    cap = -1 if no_fit else cap
    fits = lambda b: b <= cap  # noqa: E731
    fl = tuple((b, s, table[(b, s)]) for b, s in cands if fits(b))
    got = algorithm2_fitted(fl, cands[0], t_run, i_run, i_new, xi_r, xi_n, t_seq)
    if all(t_b > 0 for _, _, t_b in fl):  # the caller's positive t_b known: the same answer
        again = algorithm2_fitted(fl, cands[0], t_run, i_run, i_new, xi_r, xi_n, t_seq, True)
        assert (got is None) == (again is None) and (got is None or repr(got) == repr(again))
    try:
        ref = algorithm2(cands, lambda b, s: table[(b, s)], fits, t_run, i_run, i_new, xi_r,
                         xi_n, t_seq)
    except ValueError:
        assert got is None
        return
    checked = min(t_run, xi_r, xi_n) > 0 and i_run >= 0 and i_new >= 0
    if got is None:  # refused: inputs the search's checks refuse, or a t_b <= 0
        assert not checked or any(table[bs] <= 0 for bs in cands if fits(bs[0]))
        return
    assert checked
    same = lambda x, y: x == y or (x != x and y != y)  # noqa: E731
    assert all(same(getattr(got, f), getattr(ref, f)) for f in got.__dataclass_fields__)


@settings(max_examples=400, deadline=None)
@given(st.integers(1, 4096), st.lists(st.floats(0.01, 3.0), min_size=13, max_size=13),
       st.integers(1, 5000), pos_t, iters, iters, st.floats(0.3, 4.0), st.floats(0.3, 4.0),
       pos_t)
def test_algorithm2_fitted_is_algorithm2_on_valid_inputs(B, times, cap, t_run, i_run, i_new,
                                                         xi_r, xi_n, t_seq):
    """Where every input is valid (the random inputs above are mostly refused), the fitted
    form's arithmetic (t_b-free terms computed once) gives Algorithm 2's ShareChoice bit for
    bit, told or not that every t_b is positive; both of Theorem 1's cases are drawn."""
    cands = sub_batch_candidates(B)
    table = {bs: times[i] for i, bs in enumerate(cands)}
    fits = lambda b: b <= cap  # noqa: E731
    fl = tuple((b, s, table[(b, s)]) for b, s in cands if fits(b))
    ref = algorithm2(cands, lambda b, s: table[(b, s)], fits, t_run, i_run, i_new, xi_r, xi_n,
                     t_seq)
    for positive in (False, True):
        got = algorithm2_fitted(fl, cands[0], t_run, i_run, i_new, xi_r, xi_n, t_seq, positive)
        assert got is not None and repr(got) == repr(ref) and got == ref


def test_algorithm2_prefers_largest_fitting_with_eq7_times():
    """With eq. 7 times (accumulation only adds overhead) the best is the
    largest sub-batch that fits, and the chosen b respects the memory cap."""
    from policies.throughput import ThroughputProfile
    p = ThroughputProfile("x", 0.05, 0.002, 0.01, 0.005, 0.05, 0.01, 1.0)
    cands = sub_batch_candidates(128)
    ch = algorithm2(cands, lambda b, s: p.iter_time(b * s, 2, 1, s), lambda b: b <= 20,
                    t_run=0.5, i_run=20000, i_new=500, xi_run=1.2, xi_new=1.2)
    assert (ch.sub_batch, ch.accum_steps) == (16, 8)
    assert ch.share


@given(share=st.booleans(), b=st.integers(1, 512), s=st.integers(1, 8),
       t=st.floats(allow_nan=True), case=st.integers(0, 2), fits=st.booleans())
def test_share_choice_is_the_dataclass_object(share, b, s, t, case, fits):
    """``share_choice`` (the dict written at once) makes the object ``ShareChoice(...)``
    makes: equal (NaN aside: then the same fields by identity), the same repr, fields in
    order, frozen."""
    import dataclasses

    from policies.sharing import ShareChoice, share_choice

    vals = (share, b, s, t, t * 2, t / 3 if t == t else t, case, 0.75, 1.25, fits)
    c, made = share_choice(*vals), ShareChoice(*vals)
    assert type(c) is ShareChoice and repr(c) == repr(made)
    assert list(vars(c)) == [f.name for f in dataclasses.fields(ShareChoice)] == list(vars(made))
    assert all(getattr(c, f) is getattr(made, f) for f in vars(made))
    assert c == made or t != t
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.share = not share  # type: ignore[misc]
