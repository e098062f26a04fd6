"""The waiting jobs' BI terms, kept per change, summed in arrival order at each sample.

Seed 001 §2.2's BI of a waiting job at time ``t`` is ``(t - start) / d``: ``start`` is when
its wait began, ``d`` its remaining one-GPU seconds, both fixed while it waits
(:meth:`gimbalctl.sim.engine.Simulator._bi_term`).  A timeline sample adds the terms of every
waiting job, in the waiting order ((submit time, id) keys, ascending), left to right from
``0.0``, as a ``+=`` loop does.  That loop took a fifth of a fifo run over the Philly trace
at 64x8, where ~12,000 jobs wait at an average sample (docs/scale.md §2).

:class:`WaitTerms` keeps each waiting job's two numbers by key.  Below
:data:`MIN_ARRAYS` jobs a sample is that loop.  From there on it is two numpy arrays in
key order, a *mirror* brought up to date at each sample from the changes made since the
last one (a few dozen, against thousands of entries):

* a job that leaves keeps its slot as a *tombstone*: start ``0.0``, ``d = inf``; its term
  is then ``0.0 / inf = 0.0``, and adding ``+0.0`` leaves a running sum as it is (``s +
  0.0 == s`` for every ``s`` but ``-0.0``, below);
* a job that comes back (a pre-empted job waiting again: the same key) gets its slot back;
* new keys are inserted at their places in one ``np.insert`` per sample;
* the tombstones are dropped when they outnumber the live entries;
* the mirror itself is dropped when fewer than half of :data:`MIN_ARRAYS` jobs wait, and
  built again from the live entries when :data:`MIN_ARRAYS` wait.

The sum is then ``np.add.accumulate`` over the terms, which adds left to right (``np.sum``
is pairwise: other floats), plus ``0.0``.  It equals the loop's float bit for bit: once a
running sum is non-zero both add the same terms to the same value in the same order; while
it is zero (of either sign) adding ``t`` gives ``t`` for ``t != 0``, so only a zero's sign
could differ, and the loop's ``0.0 + ...`` and the trailing ``+ 0.0`` both make it ``+0.0``
(round to nearest never gives ``-0.0`` from ``+0.0 + x``).  numpy's float64 subtraction
and division are IEEE's, as Python's are.  ``tests/test_sim_wait_terms.py`` checks the sums
against the loop over random changes, the arrays on from the first job.
"""
from __future__ import annotations

from bisect import bisect_left
from typing import Optional, Sequence

MIN_ARRAYS = 1024  # live entries from which a sample uses the arrays (our choice)

Key = tuple  # (submit time, job id)


class WaitTerms:
    """key -> (start of the wait, remaining one-GPU seconds) of each waiting job."""

    def __init__(self, min_arrays: Optional[int] = None):
        self.min_arrays = MIN_ARRAYS if min_arrays is None else min_arrays
        self.live: dict[Key, tuple[float, float]] = {}
        # changes since the mirror was last brought up to date (only while it exists):
        # key -> its terms now, or None (it left)
        self.pending: dict[Key, Optional[tuple[float, float]]] = {}
        self.keys: list[Key] = []  # the mirror's keys, ascending, tombstones included
        self.t0 = None  # numpy arrays aligned with ``keys`` (None: no mirror yet)
        self.d = None
        self.dead = 0  # tombstones in the mirror

    def __len__(self) -> int:
        return len(self.live)

    def set(self, key: Key, terms: tuple[float, float]) -> None:
        """``key`` waits (again, or with new terms) with ``terms``: (start, d)."""
        self.live[key] = terms
        if self.t0 is not None:
            self.pending[key] = terms

    def remove(self, key: Key) -> None:
        """``key`` no longer waits."""
        del self.live[key]
        if self.t0 is not None:
            self.pending[key] = None

    def total(self, now: float, order: Sequence[Key]) -> float:
        """``sum((now - start) / d)`` over the waiting jobs, in ``order`` (the waiting
        keys ascending: the same set as this object's), added left to right from 0.0."""
        live = self.live
        if self.t0 is not None and len(live) < self.min_arrays // 2:
            self._drop()  # few jobs wait again: the loop is cheaper than numpy's calls
        if self.t0 is None:
            if len(live) < self.min_arrays:
                s = 0.0
                for k in order:
                    start, d = live[k]
                    s += (now - start) / d
                return s
            self._build(order)
        else:
            self._catch_up()
        if not self.keys:
            return 0.0
        import numpy as np
        x = now - self.t0
        x /= self.d
        return float(np.add.accumulate(x)[-1]) + 0.0

    # ------------------------------------------------------------ the mirror
    def _drop(self) -> None:
        self.t0 = self.d = None
        self.keys = []
        self.dead = 0
        self.pending.clear()

    def _build(self, order: Sequence[Key]) -> None:
        import numpy as np
        live, n = self.live, len(self.live)
        self.keys = list(order)
        self.t0 = np.fromiter((live[k][0] for k in self.keys), dtype=np.float64, count=n)
        self.d = np.fromiter((live[k][1] for k in self.keys), dtype=np.float64, count=n)
        self.dead = 0  # (``pending`` is empty: nothing is noted while there is no mirror)

    def _catch_up(self) -> None:
        import numpy as np
        keys, t0, d = self.keys, self.t0, self.d
        new: list[tuple[Key, int, tuple[float, float]]] = []
        inf = float("inf")
        for k, v in self.pending.items():
            i = bisect_left(keys, k)
            if i < len(keys) and keys[i] == k:
                was_dead = d[i] == inf
                if v is None:
                    if not was_dead:
                        t0[i], d[i] = 0.0, inf
                        self.dead += 1
                else:
                    t0[i], d[i] = v
                    if was_dead:
                        self.dead -= 1
            elif v is not None:
                new.append((k, i, v))
        self.pending.clear()
        if new:
            new.sort()
            at = [i for _, i, _ in new]
            self.t0 = np.insert(t0, at, [v[0] for _, _, v in new])
            self.d = np.insert(d, at, [v[1] for _, _, v in new])
            for k, i, _ in reversed(new):  # equal places: the larger key goes in first
                keys.insert(i, k)
        if self.dead > len(keys) - self.dead:
            keep = self.d != inf
            self.t0, self.d = self.t0[keep], self.d[keep]
            self.keys = [k for k, alive in zip(keys, keep.tolist()) if alive]
            self.dead = 0
