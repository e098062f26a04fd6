"""Simulation results: per-job records, a sampled timeline and summary metrics.

Metrics: average / median / p99 JCT, average queueing delay (first start −
submit) and total waiting (JCT − run time), makespan, GPU utilisation (busy
GPU-seconds / (GPUs × makespan)), time-weighted averages of QL, CE and BI (seed 001 §2.2)
and the deadline-met ratio where jobs have deadlines.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Optional

import numpy as np
import pandas as pd


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


@dataclass(frozen=True)
class SimResult:
    policy: str
    jobs: pd.DataFrame
    timeline: pd.DataFrame
    summary: dict

    @classmethod
    def build(cls, sim) -> "SimResult":
        rows = []
        for r in sim.recs.values():
            s = r.spec
            rows.append(dict(id=s.id, app=s.app, num_gpus=s.num_gpus, submit=s.submit_time,
                             start=r.first_start, end=r.end, run_time=r.executed,
                             preemptions=r.preemptions, shared=r.shared, deadline=s.deadline,
                             user=s.user))
        jobs = pd.DataFrame(rows)
        jobs["jct"] = jobs.end - jobs.submit
        jobs["queueing"] = jobs.start - jobs.submit
        jobs["wait_total"] = jobs.jct - jobs.run_time
        timeline = pd.DataFrame(sim.timeline, columns=TimelineSample._fields)
        first = float(jobs.submit.min()) if len(jobs) else 0.0
        makespan = float(jobs.end.max() - first) if len(jobs) else 0.0
        summary = summarize(jobs, timeline, makespan, sim.busy_gpu_seconds, sim.total_gpus)
        summary["policy_calls"] = sim.policy_calls
        name = getattr(sim.policy, "name", type(sim.policy).__name__)
        return cls(name, jobs, timeline, summary)


def summarize(jobs: pd.DataFrame, timeline: pd.DataFrame, makespan: float,
              busy_gpu_seconds: float, total_gpus: int) -> dict:
    jct = jobs.jct.to_numpy(float)
    out = {
        "jobs": int(len(jobs)),
        "avg_jct": float(jct.mean()) if len(jct) else 0.0,
        "median_jct": float(np.median(jct)) if len(jct) else 0.0,
        "p99_jct": float(np.percentile(jct, 99)) if len(jct) else 0.0,
        "avg_queueing": float(jobs.queueing.mean()) if len(jobs) else 0.0,
        "avg_wait_total": float(jobs.wait_total.mean()) if len(jobs) else 0.0,
        "makespan": makespan,
        "gpu_utilization": busy_gpu_seconds / (total_gpus * makespan) if makespan > 0 else 0.0,
        "preemptions": int(jobs.preemptions.sum()) if len(jobs) else 0,
        "shared_jobs": int(jobs.shared.sum()) if len(jobs) else 0,
    }
    # time-weighted: each sample holds until the next one (the last until the final completion)
    if len(timeline):
        t = timeline.t.to_numpy(float)
        end = max(float(jobs.end.max()), t[-1]) if len(jobs) else t[-1]
        w = np.diff(np.append(t, end))
        if w.sum() <= 0:
            w = np.ones_like(t)
    for col, key in (("queue_length", "avg_ql"), ("ce", "avg_ce"), ("bi", "avg_bi")):
        out[key] = float(np.average(timeline[col].to_numpy(float), weights=w)) if len(timeline) else 0.0
    with_dl = jobs[jobs.deadline.notna()] if "deadline" in jobs else jobs.iloc[0:0]
    out["deadline_met_ratio"] = (float((with_dl.end <= with_dl.deadline).mean())
                                 if len(with_dl) else None)
    return out
