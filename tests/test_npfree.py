"""gimbalctl.npfree gives numpy's float64 values bit for bit (the simulate path's sums,
means, logs and interpolation without importing numpy)."""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from gimbalctl import npfree
from gimbalctl.profiles import default_models

FINITE = st.floats(allow_nan=False, allow_infinity=False, width=64)
ANY = st.floats(width=64)
# magnitudes spread over many exponents so that the order of additions shows in the bits
SPREAD = st.builds(lambda m, e: m * 10.0 ** e, st.floats(-1, 1), st.integers(-8, 12))
# lengths around numpy's unroll (8) and block (128) boundaries and the recursive split
LENGTHS = st.sampled_from([0, 1, 2, 7, 8, 9, 15, 16, 17, 127, 128, 129, 130, 135, 136, 255,
                           256, 257, 263, 300, 511, 1000, 1031, 4099])


def same(a: float, b: float) -> bool:
    """Equal bits (NaN equals NaN, -0.0 differs from 0.0)."""
    return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) ==
                                                 math.copysign(1, b))


def _numpy_log_is_libm() -> bool:
    """Whether this numpy's float64 log is the C library's (it is on CPUs without AVX512F,
    as this project's dev and CI machines; with AVX512F numpy dispatches its own SIMD log,
    within an ulp of it but not always the same bits)."""
    xs = np.random.default_rng(1).uniform(-300, 300, 20000)
    xs = np.exp(xs)
    return np.log(xs).tolist() == [math.log(v) for v in xs.tolist()]


LIBM_LOG = _numpy_log_is_libm()


def same_log(a: float, b: float) -> bool:
    """``same`` where numpy's log is the C library's; elsewhere a last-bit difference of a
    log (and what is computed from it) is allowed: relative 1e-12."""
    if same(a, b) or LIBM_LOG:
        return same(a, b)
    return math.isfinite(a) and math.isfinite(b) and abs(a - b) <= 1e-12 * max(abs(a), abs(b))


@settings(max_examples=400, deadline=None)
@given(st.data(), LENGTHS)
def test_pairwise_sum_and_mean_are_numpys(data, n):
    xs = data.draw(st.lists(st.one_of(SPREAD, FINITE, ANY), min_size=n, max_size=n))
    assert same(npfree.pairwise_sum(xs), float(np.asarray(xs, dtype=float).sum()))
    if n:
        assert same(npfree.mean(xs), float(np.asarray(xs, dtype=float).mean()))


def test_pairwise_sum_grouping_shows():
    """A sum where left-to-right and numpy's grouping differ: the test above can fail."""
    rng = np.random.default_rng(0)
    for n in (9, 100, 129, 300, 5000):
        x = rng.uniform(-1, 1, n) * 10.0 ** rng.integers(-8, 12, n)
        left = 0.0
        for v in x.tolist():
            left += v
        assert npfree.pairwise_sum(x.tolist()) == float(x.sum())
        if n >= 100:
            assert left != float(x.sum())  # the grouping matters for these inputs
    assert same(npfree.pairwise_sum([-0.0]), float(np.array([-0.0]).sum()))
    assert same(npfree.pairwise_sum([]), 0.0)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.integers(0, 2**40), st.floats(0, 1e300), ANY))
def test_log_is_numpys(v):
    with np.errstate(all="ignore"):
        assert same_log(npfree.log(v), float(np.log(np.array([v], dtype=float))[0]))


def test_log_of_the_bundled_tables_is_numpys():
    """Every batch size and iteration count of the shipped iteration tables: ``math.log``
    there is ``np.log``'s array loop (as the old iterations_for computed it), bit for bit."""
    for table in default_models().iters_table.values():
        for col in zip(*table):
            assert all(map(same_log, [npfree.log(v) for v in col], np.log(list(col)).tolist()))


sorted_nodes = st.lists(FINITE, min_size=2, max_size=12).map(sorted)


@settings(max_examples=500, deadline=None)
@given(sorted_nodes, st.data())
def test_interp_is_numpys(xp, data):
    fp = data.draw(st.lists(st.one_of(FINITE, ANY), min_size=len(xp), max_size=len(xp)))
    lo, hi = xp[0], xp[-1]
    x = data.draw(st.one_of(st.sampled_from(xp), ANY,
                            st.floats(lo, hi) if lo < hi and math.isfinite(hi - lo) else ANY))
    assert same(npfree.interp(x, xp, fp), float(np.interp(x, xp, fp)))


@settings(max_examples=200, deadline=None)
@given(st.lists(FINITE, min_size=1, max_size=8), st.data())
def test_interp_of_unsorted_nodes_is_numpys(xp, data):
    fp = data.draw(st.lists(FINITE, min_size=len(xp), max_size=len(xp)))
    x = data.draw(FINITE)
    assert same(npfree.interp(x, xp, fp), float(np.interp(x, xp, fp)))


def outcome(f, *args):
    """The value, or the exception type where ``f`` raises (math.exp overflows in both)."""
    try:
        with np.errstate(all="ignore"):
            return f(*args)
    except (OverflowError, ValueError, ZeroDivisionError) as e:
        return type(e)


def same_outcome(a, b) -> bool:
    return a is b if isinstance(a, type) or isinstance(b, type) else same_log(a, b)


def _iterations_with_numpy(models, app, global_batch):
    """Models.iterations_for as it was written with numpy (the reference)."""
    table = models.iters_table[app]
    xs = np.log([b for b, _ in table])
    ys = np.log([i for _, i in table])
    x = math.log(max(global_batch, 1))
    if x <= xs[0] or x >= xs[-1]:
        k = (0, 1) if x <= xs[0] else (-2, -1)
        slope = (ys[k[1]] - ys[k[0]]) / (xs[k[1]] - xs[k[0]])
        return float(math.exp(ys[k[0]] + slope * (x - xs[k[0]])))
    return float(math.exp(np.interp(x, xs, ys)))


def test_iterations_for_is_the_numpy_value_on_every_batch():
    """Every global batch 0 .. 40000 of every bundled application (the Pollux workloads'
    batches are in there), and the node batches themselves."""
    m = default_models()
    for app, table in m.iters_table.items():
        for b in [*range(0, 40001), *(b for b, _ in table)]:
            assert same_log(m.iterations_for(app, b), _iterations_with_numpy(m, app, b)), (app, b)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 10**5), st.integers(1, 10**7)), min_size=2,
                max_size=9, unique_by=lambda r: r[0]).map(sorted),
       st.integers(0, 2 * 10**5), st.booleans())
def test_iterations_for_any_table_is_the_numpy_value(table, batch, shuffle):
    import dataclasses
    from types import MappingProxyType

    if shuffle:  # an unsorted table takes numpy's own interp
        table = table[1:] + table[:1]
    m = dataclasses.replace(default_models(), iters_table=MappingProxyType({"a": tuple(table)}))
    assert same_outcome(outcome(m.iterations_for, "a", batch),
                        outcome(_iterations_with_numpy, m, "a", batch))


@pytest.mark.parametrize("bad", [[(0, 5), (8, 3)], [(4, 0), (8, 3)], [(4, 5), (4, 3), (8, 1)]])
def test_iterations_for_degenerate_tables_is_the_numpy_value(bad):
    import dataclasses
    from types import MappingProxyType

    m = dataclasses.replace(default_models(), iters_table=MappingProxyType({"a": tuple(bad)}))
    for b in (1, 2, 4, 5, 8, 100):
        assert same_outcome(outcome(m.iterations_for, "a", b),
                            outcome(_iterations_with_numpy, m, "a", b))


@pytest.mark.parametrize("a", [1.0, -2.5, 0.0, -0.0, math.inf, -math.inf, math.nan, 5e-324])
@pytest.mark.parametrize("b", [0.0, -0.0, 2.0, -math.inf, 5e-324])
def test_div_is_numpys(a, b):
    with np.errstate(all="ignore"):
        assert same(npfree.div(a, b), float(np.float64(a) / np.float64(b)))
