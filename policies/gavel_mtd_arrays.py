"""gavel-mtd's overloaded one-type rounds with array arithmetic (issue #13, docs/scale.md §2).

On the Philly trace at 64x8, gavel-mtd's rounds hold 3,000 jobs and more from about day 21,
and each such round computed, per job in Python: its remaining length, its share X by
:func:`policies.gavel_mtd.one_type`'s closed form, an ``{type: X}`` mapping, and Gavel's
priority key in :func:`policies.gavel_rounds.run_round`.  Here the same floats come from
numpy's elementwise operations, which round each operation as Python does (IEEE 754
double, one operation at a time, in the same order):

* the lengths: ``ClusterSnapshot.completed``'s arithmetic (``dt = now - as_of``, less the
  restore left where there is one, floored at 0; ``completed + rate x dt`` for a running
  job), then ``max(max(0, total - done) or 1.0, 1e-9)``;
* the closed form's stage 1 and the first knapsack step, where :func:`one_type` takes them
  (every job has a rate, Σ n_j exceeds the type's GPUs, and the first job in gain order
  does not fit whole in what is left): ``min`` is exact, and the two sums that
  :func:`one_type` adds up one term at a time (Σ n m / r, and the GPUs left) are
  ``np.add.accumulate`` / ``np.subtract.accumulate``, which also add one term at a time, in
  order (pairwise summation is only ``np.sum``'s); the other cases are left to
  :func:`one_type` itself;
* Gavel's priority key ``(-X / got, submit time, id)`` as :func:`run_round` builds it.

The shares are handed to :func:`run_round` as a :class:`OneTypeShares` mapping, whose
per-job ``{type: X}`` is made only for the jobs the round's walk reaches (at most a few
hundred of the thousands), once per job and call (the round's memos key on the mapping's
identity).  Used from :data:`MIN_JOBS` jobs on; below that the per-call cost of numpy is
more than the Python it replaces.  tests/policies/test_typed_rounds_differential.py runs
the overloaded rounds with the threshold at 0 against the reference rounds."""
from __future__ import annotations

from collections.abc import Mapping
from itertools import compress, repeat
from operator import attrgetter, is_, itemgetter, le
from typing import Optional

from .model import SUBMIT_ORDER, ClusterSnapshot, JobState

MIN_JOBS = 256  # rounds with fewer jobs keep the scalar path
_MISSING = object()
_RUNNING = JobState.RUNNING
_NGPU = attrgetter("num_gpus")
_APP = attrgetter("app")
_BATCH = attrgetter("global_batch")
_FIRST = itemgetter(0)
_TOTAL = attrgetter("total_iters")
_STATE = attrgetter("state")
_ID = attrgetter("id")
_SUBMIT = attrgetter("submit_time")


def _floats(jobs: list, name: str):
    import numpy as np

    return np.fromiter(map(attrgetter(name), jobs), float, len(jobs))


class Columns:
    """What both the lengths and the priority keys read of the call's jobs, read once:
    which run, and the running ones' ``as_of`` (the only jobs whose progress moves)."""

    __slots__ = ("run", "running", "as_of")

    def __init__(self, jobs: list):
        import numpy as np

        flags = list(map(is_, map(_STATE, jobs), repeat(_RUNNING)))
        self.run = np.array(flags, dtype=bool)
        self.running = list(compress(jobs, flags))
        self.as_of = _floats(self.running, "as_of")


def remaining(snap: ClusterSnapshot, jobs: list, cols: Optional[Columns] = None):
    """``max(snap.remaining_iters(j) or 1.0, 1e-9)`` per job as an array, or ``None`` where
    a job has no length (the scalar path then answers)."""
    import numpy as np

    totals = list(map(_TOTAL, jobs))
    if None in totals:
        return None
    cols = Columns(jobs) if cols is None else cols
    done = _floats(jobs, "completed_iters")
    if cols.running:
        rj = cols.running
        dt = snap.now - cols.as_of
        rl = _floats(rj, "restore_left")
        dt = np.where(rl != 0.0, np.maximum(0.0, dt - rl), dt)
        done[cols.run] = done[cols.run] + _floats(rj, "iter_rate") * dt
    left = np.array(totals, dtype=float) - done
    return np.maximum(np.where(left > 0.0, left, 1.0), 1e-9)


def one_type_shares(snap: ClusterSnapshot, jobs: list, memo: dict, caps: list, cap: float,
                    rate_row) -> Optional["OneTypeShares"]:
    """:meth:`policies.gavel_mtd.GavelMinTotalDuration.allocation` on one GPU type
    (``caps``: its one (type, GPUs, GPUs per node)) with array arithmetic: the X the scalar
    path computes, or ``None`` where that path must answer (a job without a length, a
    non-finite input, a case of :func:`~policies.gavel_mtd.one_type` other than the one
    taken here).  ``memo``: (application, GPUs, batch) -> rate row, filled as the scalar
    path fills it (``rate_row(snap, job, caps)``)."""
    import numpy as np

    ngpu = list(map(_NGPU, jobs))
    keys = list(zip(map(_APP, jobs), ngpu, map(_BATCH, jobs)))
    rows = list(map(memo.get, keys))
    for i in [i for i, r in enumerate(rows) if r is None]:
        rows[i] = memo.setdefault(keys[i], rate_row(snap, jobs[i], caps))
    rate = np.fromiter(map(_FIRST, rows), float, len(rows))
    cols = Columns(jobs)
    rem = remaining(snap, jobs, cols)
    if rem is None or not (np.isfinite(rem).all() and np.isfinite(rate).all()):
        return None
    x = one_type_common(rate, rem, np.array(ngpu, dtype=float), cap)
    if x is None:
        return None
    return OneTypeShares(caps[0][0], list(map(_ID, jobs)), x, jobs, cols)


def one_type_common(rate, rem, gpus, cap: float) -> Optional[list]:
    """:func:`policies.gavel_mtd.one_type`'s X as a list, where its answer is the
    over-capacity case that ends at the first knapsack step; else ``None``."""
    import numpy as np

    if not cap > 0.0 or not (rate > 0.0).all() or float(gpus.sum()) <= cap:
        return None
    z = min(float((rate / rem).min()),
            cap / float(np.add.accumulate(gpus * rem / rate)[-1]))
    x = np.minimum(rem * z / rate, 1.0)
    left = float(np.subtract.accumulate(np.concatenate(([cap], gpus * x)))[-1])
    if left <= 0.0:
        return x.tolist()
    i = int(np.argmin(-rate / (rem * gpus)))  # the first of the smallest: the LP order
    need = float(gpus[i]) * (1.0 - float(x[i]))
    if not need > left:
        return None  # the knapsack's sorted walk: one_type's own loop
    v = float(x[i]) + left / float(gpus[i])
    out = x.tolist()
    out[i] = v if v < 1.0 else 1.0
    return out


class OneTypeShares(Mapping):
    """Job id -> ``{gpu_type: X}`` (``{}`` where X ≤ 1e-9, one shared ``{gpu_type: 1.0}``
    where X is 1), as :meth:`policies.gavel_mtd.GavelMinTotalDuration.allocation` returns
    them on one type, made on first lookup and kept (read-only, like those)."""

    __slots__ = ("gpu_type", "ids", "x", "_at", "_made", "_whole", "_jobs", "_cols")

    def __init__(self, gpu_type: str, ids: list, x: list, jobs: Optional[list] = None,
                 cols: Optional[Columns] = None):
        self.gpu_type, self.ids, self.x = gpu_type, ids, x
        self._jobs, self._cols = jobs, cols  # the views they were computed from
        self._at: Optional[dict] = None
        self._made: dict = {}
        self._whole = {gpu_type: 1.0}

    def _index(self) -> dict:
        if self._at is None:
            self._at = dict(zip(self.ids, range(len(self.ids))))
        return self._at

    def __getitem__(self, jid: str):
        m = self.get(jid, _MISSING)
        if m is _MISSING:
            raise KeyError(jid)
        return m

    def get(self, jid: str, default=None):
        m = self._made.get(jid)
        if m is not None:
            return m
        i = self._index().get(jid)
        if i is None:
            return default
        v = self.x[i]
        m = self._made[jid] = (self._whole if v == 1.0 else {self.gpu_type: v}
                               if v > 1e-9 else {})
        return m

    def __contains__(self, jid) -> bool:
        return jid in self._index()

    def __iter__(self):
        return iter(self.ids)

    def __len__(self) -> int:
        return len(self.ids)

    def running_of(self, jobs: list, n: int) -> Optional[list]:
        """The running jobs of ``jobs`` in its order where ``jobs`` is the list these shares
        were computed from and holds all ``n`` jobs of the snapshot (then, sorted by
        (submit time, id), they are ``snap.running()``); else ``None``."""
        if jobs is self._jobs and len(jobs) == n and self._cols is not None:
            run = self._cols.running
            keys = list(map(SUBMIT_ORDER, run))
            if all(map(le, keys, keys[1:])):  # (gavel-mtd hands its jobs in that order)
                return run
        return None

    def keyed(self, now: float, jobs: list) -> Optional[list]:
        """:func:`policies.gavel_rounds.run_round`'s ``[(key, submit time, id, job)]`` for
        ``jobs`` (this mapping's jobs, in its order), or ``None`` (another order, or a NaN
        key: the scalar path answers)."""
        import numpy as np

        if jobs is self._jobs:  # the very list: the same views
            ids, cols = self.ids, self._cols
        else:
            ids = list(map(_ID, jobs))
            if ids != self.ids:
                return None
            cols = Columns(jobs)
        x = np.array(self.x)
        submit = list(map(_SUBMIT, jobs))
        e = _floats(jobs, "executed_time")
        if cols.running:
            e[cols.run] = e[cols.run] + (now - cols.as_of)
        age = now - np.array(submit, dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            got = np.where(age > 0.0, e / age, 0.0)
            k = np.where(got <= 0.0, -np.inf, -(x / got))
        k = np.where(x > 1e-9, k, np.inf)
        if np.isnan(k).any():
            return None
        return list(zip(k.tolist(), submit, ids, jobs))
