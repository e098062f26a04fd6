"""Simulation results: per-job records, a sampled timeline and summary metrics.

Metrics: average / median / p99 JCT, average queueing delay (first start −
submit) and total waiting (JCT − run time), makespan, GPU utilisation (busy
GPU-seconds / (GPUs × makespan)), time-weighted averages of QL, CE and BI (seed 001 §2.2)
and the deadline-met ratio where jobs have deadlines.

The summary is computed on lists of Python floats, without numpy (a plain ``gimbalctl
simulate`` does not import it, docs/scale.md §6), to the same values the numpy code gave:
element-wise differences and products round once in both; sums and means are numpy's
pairwise ``add.reduce`` (:mod:`gimbalctl.npfree`); min/max/median/percentile pick or
interpolate the same elements with the same formulas (NaN as numpy propagates it).
tests/test_sim_summary.py compares it with the numpy code it replaced.
"""
from __future__ import annotations

import math
from math import isnan

from dataclasses import dataclass
from typing import NamedTuple, Optional

from ..npfree import mean, pairwise_sum

_NAN = float("nan")

# pandas is imported when a caller reads ``SimResult.jobs`` / ``.timeline`` (reports, plots,
# benches), not to simulate: a plain ``gimbalctl simulate`` prints from ``summary`` alone.


class TimelineSample(NamedTuple):
    t: float
    queue_length: float  # QL: waiting jobs
    ce: float  # cluster efficiency
    bi: float  # blocking index
    gpu_busy: float  # fraction of GPUs holding a job


@dataclass(frozen=True)
class JobRecord:
    id: str
    app: str
    num_gpus: int
    submit: float
    start: float
    end: float
    run_time: float
    preemptions: int
    shared: bool
    deadline: Optional[float]


_JOB_COLUMNS = ("id", "app", "num_gpus", "submit", "start", "end", "run_time", "preemptions",
                "shared", "deadline", "user")


class SimResult:
    """One policy's run: ``summary`` (metrics), and per-job records and the sampled timeline
    as pandas DataFrames built on first access (``jobs`` adds ``jct``, ``queueing`` and
    ``wait_total`` columns)."""

    __slots__ = ("policy", "summary", "_rows", "_samples", "_jobs", "_timeline")

    def __init__(self, policy: str, rows: list, samples: list, summary: dict):
        self.policy, self.summary = policy, summary
        self._rows, self._samples = rows, samples
        self._jobs = self._timeline = None

    @property
    def jobs(self):
        if self._jobs is None:
            import pandas as pd
            jobs = pd.DataFrame(self._rows, columns=list(_JOB_COLUMNS))
            jobs["jct"] = jobs.end - jobs.submit
            jobs["queueing"] = jobs.start - jobs.submit
            jobs["wait_total"] = jobs.jct - jobs.run_time
            self._jobs = jobs
        return self._jobs

    @property
    def timeline(self):
        if self._timeline is None:
            import pandas as pd
            self._timeline = pd.DataFrame(self._samples, columns=TimelineSample._fields)
        return self._timeline

    @classmethod
    def build(cls, sim) -> "SimResult":
        rows = []
        for r in sim.recs.values():
            s = r.spec
            rows.append((s.id, s.app, s.num_gpus, s.submit_time, r.first_start, r.end,
                         r.executed, r.preemptions, r.shared, s.deadline, s.user))
        samples = list(sim.timeline)
        by_col = tuple(zip(*rows)) or ((),) * len(_JOB_COLUMNS)  # the columns of ``rows``
        cols = {c: _floats(by_col[i])
                for i, c in enumerate(_JOB_COLUMNS) if c not in ("id", "app", "user")}
        cols["jct"] = _Floats([e - b for e, b in zip(cols["end"], cols["submit"])])
        cols["queueing"] = _Floats([a - b for a, b in zip(cols["start"], cols["submit"])])
        cols["wait_total"] = _Floats([j - r for j, r in zip(cols["jct"], cols["run_time"])])
        tl_cols = tuple(zip(*samples)) or ((),) * len(TimelineSample._fields)
        tl = {c: _floats(tl_cols[i]) for i, c in enumerate(TimelineSample._fields)}
        n = len(rows)
        first = _min(cols["submit"]) if n else 0.0
        makespan = _max(cols["end"]) - first if n else 0.0
        summary = summarize(cols, tl, makespan, sim.busy_gpu_seconds, sim.total_gpus)
        summary["policy_calls"] = sim.policy_calls
        name = getattr(sim.policy, "name", type(sim.policy).__name__)
        return cls(name, rows, samples, summary)


class _Floats(list):
    """A list that holds only Python floats (made by :func:`_floats`)."""
    __slots__ = ()


def _floats(values) -> _Floats:
    """``np.asarray(values, dtype=float)`` as a list of Python floats (None is NaN)."""
    try:
        return _Floats(map(float, values))
    except TypeError:  # a None (a job without a deadline)
        return _Floats([_NAN if v is None else float(v) for v in values])


def _arr(frame, col: str) -> list:
    v = frame[col]
    return v if type(v) is _Floats else _floats(v)  # build()'s columns are converted already


def _min(x: list) -> float:
    """``float(np.min(x))`` of a non-empty list: NaN if any is NaN."""
    return _NAN if any(map(isnan, x)) else min(x)


def _max(x: list) -> float:
    """``float(np.max(x))`` of a non-empty list: NaN if any is NaN."""
    return _NAN if any(map(isnan, x)) else max(x)


def _median(x) -> float:
    """``np.median`` of a non-empty sequence, the same value (the middle one, or the mean of
    the middle two, NaN if any is NaN)."""
    if any(map(isnan, x)):
        return _NAN
    s = sorted(x)
    m = len(s) // 2
    return float(s[m]) if len(s) % 2 else float((s[m - 1] + s[m]) / 2)


def _percentile(x, q: float) -> float:
    """``np.percentile(x, q)`` (method "linear") of a non-empty sequence, the same value:
    virtual index (n - 1)·q/100 and numpy's two-sided ``_lerp``."""
    if any(map(isnan, x)):
        return _NAN
    s = sorted(x)
    v = (len(s) - 1) * (q / 100)
    if v >= len(s) - 1:
        return float(s[-1])
    lo = math.floor(v)
    g = v - lo
    a, b = s[lo], s[lo + 1]
    d = b - a
    return float(b - d * (1 - g)) if g >= 0.5 else float(a + d * g)


def summarize(jobs, timeline, makespan: float, busy_gpu_seconds: float, total_gpus: int) -> dict:
    """Summary metrics from per-job and timeline columns (a DataFrame or a mapping of column
    name to array; a missing deadline is None or NaN)."""
    jct = _arr(jobs, "jct")
    n = len(jct)
    t = _arr(timeline, "t")
    out = {
        "jobs": int(n),
        "avg_jct": mean(jct) if n else 0.0,
        "median_jct": _median(jct) if n else 0.0,
        "p99_jct": _percentile(jct, 99) if n else 0.0,
        "avg_queueing": mean(_arr(jobs, "queueing")) if n else 0.0,
        "avg_wait_total": mean(_arr(jobs, "wait_total")) if n else 0.0,
        "makespan": makespan,
        "gpu_utilization": busy_gpu_seconds / (total_gpus * makespan) if makespan > 0 else 0.0,
        "preemptions": int(pairwise_sum(_arr(jobs, "preemptions"))) if n else 0,
        "shared_jobs": int(pairwise_sum(_arr(jobs, "shared"))) if n else 0,
    }
    # time-weighted: each sample holds until the next one (the last until the final completion)
    if len(t):
        end = max(_max(_arr(jobs, "end")), t[-1]) if n else t[-1]
        w = [b - a for a, b in zip(t, [*t[1:], end])]  # np.diff(np.append(t, end))
        if pairwise_sum(w) <= 0:
            w = [1.0] * len(t)
        scl = pairwise_sum(w)  # > 0 or NaN: np.average's zero-weights error cannot arise
    for col, key in (("queue_length", "avg_ql"), ("ce", "avg_ce"), ("bi", "avg_bi")):
        # np.average(a, weights=w): (a * w).sum() / w.sum()
        out[key] = (pairwise_sum([a * b for a, b in zip(_arr(timeline, col), w)]) / scl
                    if len(t) else 0.0)
    dl = _arr(jobs, "deadline") if n else []
    met = [1.0 if e <= d else 0.0 for e, d in zip(_arr(jobs, "end"), dl) if d == d]  # d not NaN
    out["deadline_met_ratio"] = mean(met) if met else None
    return out
