"""Simulation results: per-job records, a sampled timeline and summary metrics.

Metrics: average / median / p99 JCT, average queueing delay (first start −
submit) and total waiting (JCT − run time), makespan, GPU utilisation (busy
GPU-seconds / (GPUs × makespan)), time-weighted averages of QL, CE and BI (seed 001 §2.2)
and the deadline-met ratio where jobs have deadlines.
"""
from __future__ import annotations

import math

from dataclasses import dataclass
from typing import NamedTuple, Optional

import numpy as np

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
        cols = {c: np.array(by_col[i], dtype=float)
                for i, c in enumerate(_JOB_COLUMNS) if c not in ("id", "app", "user")}
        cols["jct"] = cols["end"] - cols["submit"]
        cols["queueing"] = cols["start"] - cols["submit"]
        cols["wait_total"] = cols["jct"] - cols["run_time"]
        tl = {c: np.array([x[i] for x in samples], dtype=float)
              for i, c in enumerate(TimelineSample._fields)}
        n = len(rows)
        first = float(cols["submit"].min()) if n else 0.0
        makespan = float(cols["end"].max() - first) if n else 0.0
        summary = summarize(cols, tl, makespan, sim.busy_gpu_seconds, sim.total_gpus)
        summary["policy_calls"] = sim.policy_calls
        name = getattr(sim.policy, "name", type(sim.policy).__name__)
        return cls(name, rows, samples, summary)


def _arr(frame, col: str) -> np.ndarray:
    return np.asarray(frame[col], dtype=float)


def _median(x: np.ndarray) -> float:
    """``np.median`` of a non-empty array, the same value (the middle one, or the mean of
    the middle two, NaN if any is NaN) without the import of ``numpy.ma`` it costs the
    CLI's start-up (docs/scale.md §6)."""
    s = np.sort(x)
    m = len(s) // 2
    if np.isnan(s[-1]):
        return float("nan")
    return float(s[m]) if len(s) % 2 else float((s[m - 1] + s[m]) / 2)


def _percentile(x: np.ndarray, q: float) -> float:
    """``np.percentile(x, q)`` (method "linear") of a non-empty array, the same value:
    virtual index (n - 1)·q/100 and numpy's two-sided ``_lerp``; no ``numpy.ma``."""
    s = np.sort(x)
    if np.isnan(s[-1]):
        return float("nan")
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
    t = _arr(timeline, "t") if len(timeline["t"]) else np.zeros(0)
    out = {
        "jobs": int(n),
        "avg_jct": float(jct.mean()) if n else 0.0,
        "median_jct": _median(jct) if n else 0.0,
        "p99_jct": _percentile(jct, 99) if n else 0.0,
        "avg_queueing": float(_arr(jobs, "queueing").mean()) if n else 0.0,
        "avg_wait_total": float(_arr(jobs, "wait_total").mean()) if n else 0.0,
        "makespan": makespan,
        "gpu_utilization": busy_gpu_seconds / (total_gpus * makespan) if makespan > 0 else 0.0,
        "preemptions": int(_arr(jobs, "preemptions").sum()) if n else 0,
        "shared_jobs": int(_arr(jobs, "shared").sum()) if n else 0,
    }
    # time-weighted: each sample holds until the next one (the last until the final completion)
    if len(t):
        end = max(float(_arr(jobs, "end").max()), t[-1]) if n else t[-1]
        w = np.diff(np.append(t, end))
        if w.sum() <= 0:
            w = np.ones_like(t)
    for col, key in (("queue_length", "avg_ql"), ("ce", "avg_ce"), ("bi", "avg_bi")):
        out[key] = float(np.average(_arr(timeline, col), weights=w)) if len(t) else 0.0
    dl = _arr(jobs, "deadline") if n else np.zeros(0)
    has = ~np.isnan(dl)
    out["deadline_met_ratio"] = (float((_arr(jobs, "end")[has] <= dl[has]).mean())
                                 if has.any() else None)
    return out
