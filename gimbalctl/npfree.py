"""numpy's float64 arithmetic, bit for bit, in plain Python (no numpy import).

A plain ``gimbalctl simulate`` of a Pollux / Tiresias / generic CSV needs a handful of
numpy results: sums and means of the per-job columns (:mod:`gimbalctl.sim.result`), a
log-log interpolation (:meth:`gimbalctl.profiles.Models.iterations_for`).  Importing
numpy for them costs ~50 ms of the process's ~0.35 CPU-s (docs/scale.md §6), so this
module computes the same float64 values in the same order:

* :func:`pairwise_sum` is ``np.add.reduce`` of a contiguous float64 array: initial value
  ``0.0``, then numpy's ``pairwise_sum`` (fewer than 8 items: left to right; up to 128:
  eight left-to-right accumulators, combined ``((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7))``, then
  the remainder; larger: split at ``n/2`` rounded down to a multiple of 8).  Python floats
  are IEEE doubles and each ``+`` rounds once, as in C (no FMA, no reassociation), so the
  same additions in the same order give the same bits.  (Not the builtin ``sum``: from
  Python 3.12 it compensates float sums.)
* :func:`mean` is ``ndarray.mean``: that sum divided by the count (exact as a double).
* :func:`log` is ``np.log`` of one float64 where numpy's loop calls the C library's
  ``log`` (as ``math.log`` does): numpy dispatches its own SIMD log only on AVX512F CPUs.
  tests/test_npfree.py compares it with ``np.log`` bit for bit where numpy's log is the C
  library's (this project's dev and CI machines: the same simulation results as before);
  on a CPU where numpy has its own log the two may differ in the last bit, and so may a
  trace's iteration counts from the numpy-based code of before (the tests allow 1e-12 there).
* :func:`div` is a float64 division that, as numpy's, gives ±inf / NaN at zero.
* :func:`interp` is ``np.interp`` (numpy's ``arr_interp``) for a non-decreasing ``xp``
  without NaN: the same interval (the last ``j`` with ``xp[j] <= x``), the same end and
  node cases and the same formula ``slope * (x - xp[j]) + fp[j]`` with its NaN retries.
  Any other ``xp`` is handed to ``np.interp`` itself (numpy imported then).
"""
from __future__ import annotations

import math
from bisect import bisect_right
from functools import reduce
from operator import add

_BLOCK = 128  # numpy's PW_BLOCKSIZE


def _pairwise(a: list, lo: int, n: int) -> float:
    if n < 8:
        res = -0.0
        for i in range(lo, lo + n):
            res += a[i]
        return res
    if n <= _BLOCK:
        m = n - n % 8
        # accumulator j: a[lo+j] + a[lo+j+8] + ... left to right, as numpy's r[j] += a[i+j]
        r = [reduce(add, a[lo + j:lo + m:8]) for j in range(8)]
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        for i in range(lo + m, lo + n):
            res += a[i]
        return res
    n2 = n // 2
    n2 -= n2 % 8
    return _pairwise(a, lo, n2) + _pairwise(a, lo + n2, n - n2)


def pairwise_sum(values) -> float:
    """``float(np.asarray(values, dtype=float).sum())`` for a sequence of floats (a list
    is taken as it is: it must hold floats)."""
    a = values if isinstance(values, list) else [float(v) for v in values]
    return 0.0 + _pairwise(a, 0, len(a))


def mean(values) -> float:
    """``float(np.asarray(values, dtype=float).mean())`` of a non-empty sequence of floats."""
    return pairwise_sum(values) / len(values)


def log(v) -> float:
    """``float(np.log(float(v)))`` (C library log; -inf at 0, NaN below, no warning)."""
    v = float(v)
    if v > 0.0:
        return math.log(v)
    return -math.inf if v == 0.0 else math.nan


def div(a: float, b: float) -> float:
    """``a / b`` as a float64 division (numpy's): ±inf or NaN where ``b`` is zero (Python's
    ``/`` raises there)."""
    if b != 0.0:
        return a / b
    if a != a or a == 0.0:
        return math.nan
    return math.copysign(math.inf, a) * math.copysign(1.0, b)


def interp(x: float, xp: list, fp: list) -> float:
    """``float(np.interp(x, xp, fp))`` for a float ``x`` and lists of floats."""
    n = len(xp)
    if n < 2 or len(fp) != n or any(not (a <= b) for a, b in zip(xp, xp[1:])):
        import numpy as np  # unsorted or NaN nodes, one node, bad lengths: numpy's own answer

        return float(np.interp(x, xp, fp))
    if x != x:
        return x
    if x > xp[-1]:
        return float(fp[-1])
    if x < xp[0]:
        return float(fp[0])
    j = bisect_right(xp, x) - 1
    if j == n - 1 or xp[j] == x:
        return float(fp[j])
    slope = (fp[j + 1] - fp[j]) / (xp[j + 1] - xp[j])
    res = slope * (x - xp[j]) + fp[j]
    if res != res:
        res = slope * (x - xp[j + 1]) + fp[j + 1]
        if res != res and fp[j] == fp[j + 1]:
            res = fp[j]
    return float(res)
