"""SimResult's summary (plain Python since the simulate path stopped importing numpy) equals
the numpy code it replaced, == on every value, on random columns and on simulator runs."""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from gimbalctl.sim.result import SimResult, summarize


# ---------------------------------------------------------------- the numpy code, as it was
def old__arr(frame, col: str) -> np.ndarray:
    return np.asarray(frame[col], dtype=float)


def old__median(x: np.ndarray) -> float:
    """``np.median`` of a non-empty array, the same value (the middle one, or the mean of
    the middle two, NaN if any is NaN) without the import of ``numpy.ma`` it costs the
    CLI's start-up (docs/scale.md §6)."""
    s = np.sort(x)
    m = len(s) // 2
    if np.isnan(s[-1]):
        return float("nan")
    return float(s[m]) if len(s) % 2 else float((s[m - 1] + s[m]) / 2)


def old__percentile(x: np.ndarray, q: float) -> float:
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


def old_summarize(jobs, timeline, makespan, busy_gpu_seconds, total_gpus):
    """Summary metrics from per-job and timeline columns (a DataFrame or a mapping of column
    name to array; a missing deadline is None or NaN)."""
    jct = old__arr(jobs, "jct")
    n = len(jct)
    t = old__arr(timeline, "t") if len(timeline["t"]) else np.zeros(0)
    out = {
        "jobs": int(n),
        "avg_jct": float(jct.mean()) if n else 0.0,
        "median_jct": old__median(jct) if n else 0.0,
        "p99_jct": old__percentile(jct, 99) if n else 0.0,
        "avg_queueing": float(old__arr(jobs, "queueing").mean()) if n else 0.0,
        "avg_wait_total": float(old__arr(jobs, "wait_total").mean()) if n else 0.0,
        "makespan": makespan,
        "gpu_utilization": busy_gpu_seconds / (total_gpus * makespan) if makespan > 0 else 0.0,
        "preemptions": int(old__arr(jobs, "preemptions").sum()) if n else 0,
        "shared_jobs": int(old__arr(jobs, "shared").sum()) if n else 0,
    }
    # time-weighted: each sample holds until the next one (the last until the final completion)
    if len(t):
        end = max(float(old__arr(jobs, "end").max()), t[-1]) if n else t[-1]
        w = np.diff(np.append(t, end))
        if w.sum() <= 0:
            w = np.ones_like(t)
    for col, key in (("queue_length", "avg_ql"), ("ce", "avg_ce"), ("bi", "avg_bi")):
        out[key] = float(np.average(old__arr(timeline, col), weights=w)) if len(t) else 0.0
    dl = old__arr(jobs, "deadline") if n else np.zeros(0)
    has = ~np.isnan(dl)
    out["deadline_met_ratio"] = (float((old__arr(jobs, "end")[has] <= dl[has]).mean())
                                 if has.any() else None)
    return out


_JOB_COLUMNS = ("id", "app", "num_gpus", "submit", "start", "end", "run_time", "preemptions",
                "shared", "deadline", "user")
_TL = ("t", "queue_length", "ce", "bi", "gpu_busy")


def old_build_summary(rows, samples, busy_gpu_seconds, total_gpus):
    """SimResult.build's summary as it was (numpy columns)."""
    by_col = tuple(zip(*rows)) or ((),) * len(_JOB_COLUMNS)
    cols = {c: np.array(by_col[i], dtype=float)
            for i, c in enumerate(_JOB_COLUMNS) if c not in ("id", "app", "user")}
    cols["jct"] = cols["end"] - cols["submit"]
    cols["queueing"] = cols["start"] - cols["submit"]
    cols["wait_total"] = cols["jct"] - cols["run_time"]
    tl = {c: np.array([x[i] for x in samples], dtype=float) for i, c in enumerate(_TL)}
    n = len(rows)
    first = float(cols["submit"].min()) if n else 0.0
    makespan = float(cols["end"].max() - first) if n else 0.0
    return old_summarize(cols, tl, makespan, busy_gpu_seconds, total_gpus)


# ---------------------------------------------------------------- comparisons
def same(a, b) -> bool:
    """== on every value, NaN equal to NaN, same types (the JSON output's text)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b and (not isinstance(a, float)
                                              or math.copysign(1, a) == math.copysign(1, b))


def assert_same(new: dict, old: dict):
    assert list(new) == list(old)
    for k in old:
        assert same(new[k], old[k]), (k, new[k], old[k])


class _Spec:
    def __init__(self, i, submit, num_gpus, deadline):
        self.id, self.app, self.user = f"j{i}", "cifar10", "u"
        self.submit_time, self.num_gpus, self.deadline = submit, num_gpus, deadline


class _Rec:
    def __init__(self, spec, start, end, executed, preemptions, shared):
        self.spec, self.first_start, self.end = spec, start, end
        self.executed, self.preemptions, self.shared = executed, preemptions, shared


class _Sim:
    """What SimResult.build reads of a simulator."""

    def __init__(self, recs, timeline, busy, total):
        self.recs = {r.spec.id: r for r in recs}
        self.timeline, self.busy_gpu_seconds, self.total_gpus = timeline, busy, total
        self.policy_calls, self.policy = 7, None


SPREAD = st.builds(lambda m, e: abs(m) * 10.0 ** e, st.floats(0, 1), st.integers(-3, 7))
TIME = st.one_of(SPREAD, st.integers(0, 10**6).map(float), st.just(0.0))


@st.composite
def sims(draw):
    from gimbalctl.sim.result import TimelineSample

    n = draw(st.sampled_from([0, 1, 2, 3, 7, 8, 9, 64, 127, 128, 129, 200, 257, 600]))
    recs = []
    for i in range(n):
        submit = draw(TIME)
        start = submit + draw(TIME)
        run = draw(TIME)
        end = start + run + draw(st.one_of(st.just(0.0), TIME))
        dl = draw(st.one_of(st.none(), st.just(float("nan")), TIME))
        recs.append(_Rec(_Spec(i, submit, draw(st.integers(1, 8)), dl), start, end, run,
                         draw(st.integers(0, 5)), draw(st.booleans())))
    m = draw(st.sampled_from([0, 1, 2, 9, 130, 300]))
    ts = sorted(draw(st.lists(TIME, min_size=m, max_size=m)))
    if draw(st.booleans()) and ts:
        ts = [ts[0]] * len(ts)  # zero weights: np.average's fallback to equal weights
    tl = [TimelineSample(t, float(draw(st.integers(0, 50))), draw(st.floats(0, 1)),
                         draw(st.one_of(SPREAD, st.just(0.0))), draw(st.floats(0, 1)))
          for t in ts]
    return _Sim(recs, tl, draw(TIME), draw(st.integers(1, 512)))


@settings(max_examples=300, deadline=None)
@given(sims())
def test_summary_is_the_numpy_summary(sim):
    res = SimResult.build(sim)
    old = old_build_summary(res._rows, res._samples, sim.busy_gpu_seconds, sim.total_gpus)
    old["policy_calls"] = 7
    assert_same(res.summary, old)


def test_summary_of_data_frames_is_the_numpy_summary():
    """summarize also takes DataFrames (tests, benches): the same values as numpy's."""
    import pandas as pd

    rng = np.random.default_rng(3)
    for n in (1, 5, 130, 1000):
        jobs = pd.DataFrame(dict(jct=rng.uniform(0, 1e5, n), queueing=rng.uniform(0, 1e4, n),
                                 wait_total=rng.uniform(0, 1e4, n),
                                 preemptions=rng.integers(0, 4, n), shared=rng.random(n) < .5,
                                 deadline=[None if i % 3 else 5e4 for i in range(n)],
                                 end=rng.uniform(0, 1e5, n)))
        tl = pd.DataFrame(dict(t=np.sort(rng.uniform(0, 1e5, 3 * n)),
                               queue_length=rng.integers(0, 9, 3 * n).astype(float),
                               ce=rng.random(3 * n), bi=rng.random(3 * n) * 4,
                               gpu_busy=rng.random(3 * n)))
        assert_same(summarize(jobs, tl, 1e5, 3e6, 64), old_summarize(jobs, tl, 1e5, 3e6, 64))
        jobs.loc[n // 2, "end"] = np.nan  # NaN as numpy propagates it (max, then the weights)
        new = summarize(jobs, tl, 1e5, 3e6, 64)
        assert_same(new, old_summarize(jobs, tl, 1e5, 3e6, 64))
        assert math.isnan(new["avg_ql"])


@pytest.mark.parametrize("policy,trace,cluster", [
    ("tiresias", "pollux/workload-1.csv", "16x4"), ("similarity", "pollux/workload-2.csv", "16x4"),
    ("gandiva+gimbal", "pollux/workload-5.csv", "16x4"), ("srtf", "pollux/workload-8.csv", "16x4"),
])
def test_summary_of_simulator_runs_is_the_numpy_summary(monkeypatch, policy, trace, cluster):
    from gimbalctl.cli import bundled_trace
    from gimbalctl.cluster import parse_cluster
    from gimbalctl.profiles import default_models
    from gimbalctl.sim import SimConfig, simulate
    from gimbalctl.traces import load_trace
    from policies import get_policy

    seen = []
    build = SimResult.build.__func__
    monkeypatch.setattr(SimResult, "build", classmethod(lambda c, sim: seen.append(sim)
                                                        or build(c, sim)))
    res = simulate(load_trace(bundled_trace(trace)), parse_cluster(cluster), get_policy(policy),
                   default_models(), SimConfig())
    (sim,) = seen
    old = old_build_summary(res._rows, res._samples, sim.busy_gpu_seconds, sim.total_gpus)
    old["policy_calls"] = sim.policy_calls
    assert_same(res.summary, old)
    assert len(res._rows) > 100 and len(res._samples) > 128
