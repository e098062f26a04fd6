"""The waiting jobs' BI sums kept per change (gimbalctl/sim/wait_terms.py) are bit for bit
the loop they replace, over random changes, with the numpy mirror on from the first job."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st

from gimbalctl.sim.wait_terms import WaitTerms


def loop(terms: dict, now: float) -> float:
    s = 0.0
    for k in sorted(terms):
        start, d = terms[k]
        s += (now - start) / d
    return s


def same(a: float, b: float) -> bool:
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


# keys with tied submit times, starts around the sample times (zero and negative terms
# too), remaining seconds from tiny to large
KEYS = st.tuples(st.sampled_from([0.0, 1.5, 7.0, 100.0]), st.sampled_from("abcdefghij"))
TERMS = st.tuples(st.sampled_from([0.0, 3.0, 50.0, 99.5, 1e6]),
                  st.floats(1e-9, 1e7, allow_nan=False))
OPS = st.lists(st.one_of(st.tuples(st.just("set"), KEYS, TERMS),
                         st.tuples(st.just("remove"), KEYS),
                         st.tuples(st.just("total"), st.sampled_from([0.0, 3.0, 77.7, 1e6]))),
               max_size=120)


@settings(max_examples=300, deadline=None)
@given(ops=OPS, min_arrays=st.sampled_from([0, 1, 3, 6, 10**9]))
def test_sums_equal_the_loop(ops, min_arrays):
    w = WaitTerms(min_arrays)
    terms: dict = {}
    for op in ops:
        if op[0] == "set":
            _, k, (start, d) = op
            w.set(k, (start, d))
            terms[k] = (start, d)
        elif op[0] == "remove":
            if op[1] in terms:
                w.remove(op[1])
                del terms[op[1]]
        else:
            got, want = w.total(op[1], sorted(terms)), loop(terms, op[1])
            assert same(got, want), (got, want)
            assert len(w) == len(terms)
    assert same(w.total(5.0, sorted(terms)), loop(terms, 5.0))


def test_tombstones_are_dropped_and_slots_reused():
    """A job that leaves keeps its slot until the dead outnumber the live; one that comes
    back gets its slot again; the sums stay the loop's throughout."""
    w = WaitTerms(0)
    terms = {(float(i), "j"): (float(i), 1.0 + i) for i in range(10)}
    for k, v in terms.items():
        w.set(k, v)
    assert same(w.total(20.0, sorted(terms)), loop(terms, 20.0)) and len(w.keys) == 10
    for i in range(5):
        w.remove((float(i), "j"))
        del terms[(float(i), "j")]
    assert same(w.total(21.0, sorted(terms)), loop(terms, 21.0))
    assert len(w.keys) == 10 and w.dead == 5  # not more dead than live: kept
    w.set((0.0, "j"), (0.0, 2.0))
    terms[(0.0, "j")] = (0.0, 2.0)
    assert same(w.total(22.0, sorted(terms)), loop(terms, 22.0))
    assert len(w.keys) == 10 and w.dead == 4  # its slot again
    for i in range(5, 8):
        w.remove((float(i), "j"))
        del terms[(float(i), "j")]
    assert same(w.total(23.0, sorted(terms)), loop(terms, 23.0))
    assert w.dead == 0 and w.keys == sorted(terms)  # 7 dead > 3 live: compacted


def test_the_mirror_is_dropped_and_built_again():
    """Built at a sample with ``min_arrays`` jobs waiting, kept down to half of that,
    dropped below, built again from the live entries at ``min_arrays``."""
    w = WaitTerms(4)
    terms = {}

    def check(now):
        assert same(w.total(now, sorted(terms)), loop(terms, now))

    for i in range(3):
        terms[(float(i), "j")] = (float(i), 2.0 + i)
        w.set((float(i), "j"), terms[(float(i), "j")])
    check(10.0)
    assert w.t0 is None
    terms[(9.0, "j")] = (9.0, 1.5)
    w.set((9.0, "j"), (9.0, 1.5))
    check(11.0)
    assert w.t0 is not None
    for k in [(0.0, "j"), (1.0, "j")]:
        w.remove(k)
        del terms[k]
    check(12.0)
    assert w.t0 is not None  # 2 live: not below half of 4
    w.remove((2.0, "j"))
    del terms[(2.0, "j")]
    check(13.0)
    assert w.t0 is None and not w.pending and not w.keys
    for i in range(5):
        terms[(float(i), "k")] = (float(i), 3.0)
        w.set((float(i), "k"), (float(i), 3.0))
    check(14.0)
    assert w.t0 is not None and w.keys == sorted(terms)


def test_no_waiting_job_sums_to_zero():
    w = WaitTerms(0)
    assert same(w.total(1.0, []), 0.0)
    w.set((0.0, "a"), (0.0, 1.0))
    w.remove((0.0, "a"))
    assert same(w.total(1.0, []), 0.0)


@pytest.mark.parametrize("min_arrays", [0, 10**9])
def test_a_zero_sum_is_positive_zero(min_arrays):
    """Terms that are all ``-0.0`` or cancel give ``+0.0``, as ``0.0 + ...`` does."""
    w = WaitTerms(min_arrays)
    w.set((0.0, "a"), (5.0, 1.0))  # (5 - 5) / 1 = 0.0
    w.set((1.0, "b"), (4.0, 1.0))  # (5 - 4) / 1 = 1.0
    w.set((2.0, "c"), (6.0, 1.0))  # (5 - 6) / 1 = -1.0
    got = w.total(5.0, [(0.0, "a"), (1.0, "b"), (2.0, "c")])
    assert same(got, 0.0)
    w = WaitTerms(min_arrays)
    w.set((0.0, "a"), (1.0 + 2 ** -52, 1e308))  # a negative term that underflows to -0.0
    assert same((1.0 - (1.0 + 2 ** -52)) / 1e308, -0.0)
    assert same(w.total(1.0, [(0.0, "a")]), 0.0)
