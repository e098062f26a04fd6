"""Trace loaders (pandas) → lists of pending :class:`~policies.model.Job`.

Formats (``kind``; auto-detected from the header when omitted):

* ``pollux`` — ``name,time,application,num_replicas,batch_size``.  Length:
  iterations for the app to reach its target at that batch
  (:meth:`Models.iterations_for`, from Pollux's validation profiles).
* ``philly`` — ``timestamp,duration,num_gpus,gpu_time,cluster``.
* ``tiresias`` — ``job_id,num_gpu,submit_time,iterations,model_name,duration,...``
  (seconds); ``muri`` — the same columns with times in milliseconds.
* ``sacct`` — a cluster's own history: ``sacct -a -X -P --format=JobID,User,
  Submit,Start,End,AllocTRES,Comment,AdminComment`` (pipe-separated; ``Comment``
  and ``AdminComment`` optional).  GPUs from ``AllocTRES`` ``gres/gpu[:type]=N``
  (``ReqTRES`` if no AllocTRES); jobs that never started or hold no GPU are
  left out (they say nothing about GPU scheduling), job steps (``123.batch``)
  too.  Run time = End − Start.  gimbal metadata in the comments
  (``gimbal:app=..,batch=..``) gives the application and batch.
* ``generic`` — ``id,submit_time,num_gpus`` plus ``duration`` or
  ``iterations``; optional ``app``, ``batch_size``, ``user``, ``deadline``,
  ``group``.  Times in seconds.  Other names map with ``columns={"mine": "id"}``.

Where a trace has no Pollux application (seed 000 §VI-A annotates the Philly
trace with Pollux's six applications), one is drawn uniformly with
``numpy.random.default_rng(seed)`` in row order (model names that clearly
match an application are mapped instead, ``MODEL_TO_APP``).  The global batch
is the app's base batch (smallest batch Pollux profiled) × GPUs, capped at the
largest profiled batch, and the iteration count is chosen so the job's
exclusive run time on its requested GPUs equals the trace's duration on the
cluster it is simulated on (``nodes``: consolidated placement, the memory
limit's accumulation steps), so a job alone runs exactly as long as it did.
Submit times are shifted so the first job arrives at 0.

Recurrence key (``Job.group_id``, seed 003's ``group id``): a trace's own ``group`` column
(generic), else :func:`gimbalctl.predictor.group_key` of the fields the trace has that
identify a recurring job — never of the drawn application or the length:

* pollux: application + GPUs + batch (no user);
* philly: VC (``cluster``, standing in for the user) + GPUs (no user, name or batch);
* tiresias / muri: ``model_name`` + GPUs (no user);
* generic: ``user`` + ``app`` + GPUs + ``batch_size``, each when the trace has the column;
* sacct: user + ``JobName`` (else gimbal's ``app``) + GPUs + gimbal ``batch``.

Malformed input raises :class:`TraceError` naming file, line and column;
nothing is returned half-loaded.
"""
from __future__ import annotations

import math
import re
import warnings
from pathlib import Path
from typing import Mapping, Optional, Sequence

import numpy as np
import pandas as pd

from policies.base import exclusive_steps
from policies.model import Job, Node

from .predictor import group_key
from .profiles import APPS, Models, default_models
from .trace_kinds import REQUIRED, TraceError  # noqa: F401  (re-exported)

BASE_BATCH = {"bert": 12, "cifar10": 128, "deepspeech2": 20, "imagenet": 200, "ncf": 256,
              "yolov3": 8}
MODEL_TO_APP = [(re.compile(p, re.I), app) for p, app in (
    (r"bert|transformer", "bert"), (r"cifar|resnet-?18\b", "cifar10"),
    (r"deepspeech|lstm|rnn|speech", "deepspeech2"), (r"imagenet|resnet|vgg|inception|alexnet",
                                                    "imagenet"),
    (r"ncf|recommend", "ncf"), (r"yolo", "yolov3"))]
_GPU_TRES = re.compile(r"gres/gpu(?::[^=,]+)?=(\d+)")


def detect_kind(columns) -> str:
    cols = set(columns)
    if {"iteration_time", "resource_time_0"} <= cols:
        return "muri"
    for kind in ("pollux", "philly", "tiresias", "generic", "sacct"):
        if set(REQUIRED[kind]) <= cols:
            return kind
    raise ValueError("unrecognised trace header " + ",".join(columns))


def _numeric(df: pd.DataFrame, path, col: str, positive=False, integer=False) -> pd.Series:
    vals = pd.to_numeric(df[col], errors="coerce")
    bad = vals.isna() | ~np.isfinite(vals.fillna(0))
    if positive:
        bad |= vals <= 0
    elif not bad.all():
        bad |= vals < 0
    if integer:
        bad |= (vals.fillna(0) % 1) != 0
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        want = "a positive " if positive else "a non-negative "
        want += "integer" if integer else "number"
        raise TraceError(path, i + 2, col, f"expected {want}, got {df[col].iloc[i]!r}")
    return vals


def load_trace(path, kind: Optional[str] = None, seed: int = 0, models: Optional[Models] = None,
               columns: Optional[Mapping[str, str]] = None, limit: Optional[int] = None,
               nodes: Optional[Sequence[Node]] = None) -> list[Job]:
    """Load a trace.  ``nodes``: the cluster it will be simulated on; a trace duration
    becomes the iterations the job runs in that time alone there (see
    :func:`_iters_for_duration`).  Without ``nodes``: 4-GPU nodes, no memory limit."""
    path = Path(path)
    models = models or default_models()
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            head = fh.readline()
        sep = "|" if (kind == "sacct" or (kind is None and "|" in head)) else ","
        with warnings.catch_warnings():
            # index_col=False: a first row with more fields than the header is an
            # error, not silently read as an index column (every column shifted)
            warnings.simplefilter("error", pd.errors.ParserWarning)
            df = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True,
                             sep=sep, index_col=False)
    except pd.errors.ParserWarning:
        raise _at_line(TraceError(path, 2, None, "more fields than the header")) from None
    except FileNotFoundError:
        raise TraceError(path, None, None, "file not found") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as e:
        raise TraceError(path, None, None, f"not a readable CSV ({e})") from None
    except pd.errors.EmptyDataError:
        raise TraceError(path, None, None, "empty file") from None
    if columns:
        df = df.rename(columns=dict(columns))
    if kind is None:
        try:
            kind = detect_kind(df.columns)
        except ValueError as e:
            raise TraceError(path, 1, None, f"{e}; expected one of: " + "; ".join(
                f"{k}: {','.join(v)}" for k, v in REQUIRED.items())) from None
    if kind not in REQUIRED:
        raise TraceError(path, None, None, f"unknown trace kind {kind!r}; valid: {', '.join(REQUIRED)}")
    missing = [c for c in REQUIRED[kind] if c not in df.columns]
    if missing:
        raise TraceError(path, 1, missing[0], f"missing column for a {kind} trace")
    if len(df) == 0:
        raise TraceError(path, None, None, "no jobs in trace")
    if limit is not None:
        df = df.iloc[:limit]
    try:
        _check_ids(df, path, kind)
        jobs = _LOADERS[kind](df, path, np.random.default_rng(seed), models,
                              _shape(nodes))
    except TraceError as e:
        raise _at_line(e) from None
    jobs.sort(key=lambda j: (j.submit_time, j.id))
    return jobs


ID_COLUMN = {"pollux": "name", "tiresias": "job_id", "muri": "job_id", "generic": "id",
             "sacct": "JobID"}


def _check_ids(df: pd.DataFrame, path, kind: str) -> None:
    """Job ids must be present and unique (the simulator and reports key on them)."""
    col = ID_COLUMN.get(kind)
    if col is None:
        return
    ids = df[col].fillna("").astype(str).str.strip()
    empty = ids.eq("")
    if empty.any():
        i = int(np.flatnonzero(empty.to_numpy())[0])
        raise TraceError(path, i + 2, col, "empty job id")
    dup = ids.duplicated()
    if dup.any():
        i = int(np.flatnonzero(dup.to_numpy())[0])
        raise TraceError(path, i + 2, col, f"duplicate job id {ids.iloc[i]!r} "
                         "(an earlier row has it)")


def _at_line(e: TraceError) -> TraceError:
    """Loaders count data rows as lines 2, 3, …; pandas skips blank lines, so
    map that row number to the file's physical line (read only on error)."""
    if e.line is None or e.line < 2:
        return e
    try:
        with open(e.path, encoding="utf-8", errors="replace") as fh:
            filled = [n for n, text in enumerate(fh, 1) if text.strip()]
    except OSError:
        return e
    row = e.line - 1  # 1 = header
    if row >= len(filled) or filled[row] == e.line:
        return e
    return TraceError(e.path, filled[row], e.column, e.problem)


def _assign_app(model_name: str, rng) -> str:
    for pat, app in MODEL_TO_APP:
        if model_name and pat.search(model_name):
            return app
    return APPS[int(rng.integers(len(APPS)))]


def _batch_for(app: str, gpus: int, models: Models) -> int:
    table = models.iters_table[app]
    return int(min(BASE_BATCH[app] * gpus, table[-1][0]))


def _shape(nodes: Optional[Sequence[Node]]) -> tuple[int, Optional[float]]:
    """(GPUs of the largest node, smallest GPU memory) of the simulated cluster."""
    if not nodes:
        return 4, None
    return max(n.num_gpus for n in nodes), min(n.gpu_mem_mb for n in nodes)


def _iters_for_duration(app: str, gpus: int, batch: int, duration: float, models: Models,
                        shape: tuple[int, Optional[float]] = (4, None)) -> float:
    """Iterations that take ``duration`` seconds for the job alone on the cluster of
    ``shape`` (:func:`_shape`): consolidated on ⌈gpus / GPUs per node⌉ nodes (what
    :func:`policies.base.pick_consolidated` gives on an idle cluster) with the
    exclusive micro-batch and accumulation steps a policy starts it with
    (:func:`policies.base.exclusive_steps`), at the simulator's eq. 7 rate."""
    gpus_per_node, mem_limit = shape
    prof = models.profiles[app]
    _, s = exclusive_steps(-(-batch // gpus), prof, models.memory.get(app), mem_limit)
    t = prof.iter_time(batch / gpus, gpus, math.ceil(gpus / gpus_per_node), s)
    return max(duration / t, 1.0)


def _from_durations(ids, submits, gpus, durations, model_names, rng, models, shape, users=None,
                    apps=None, batches=None, extra=None, groups=None) -> list[Job]:
    jobs = []
    t0 = float(np.min(submits))
    for k in range(len(ids)):
        g = int(gpus[k])
        app = apps[k] if apps is not None and apps[k] else _assign_app(
            model_names[k] if model_names is not None else "", rng)
        batch = int(batches[k]) if batches is not None and batches[k] else _batch_for(app, g, models)
        iters = _iters_for_duration(app, g, batch, float(durations[k]), models, shape)
        kw = dict(extra[k]) if extra else {}
        if groups is not None and not kw.get("group_id"):
            kw["group_id"] = groups[k]
        jobs.append(Job(id=str(ids[k]), submit_time=float(submits[k]) - t0, num_gpus=g, app=app,
                        global_batch=batch, total_iters=iters,
                        user=str(users[k]) if users is not None else "user", **kw))
    return jobs


def _pollux(df, path, rng, models, shape) -> list[Job]:
    t = _numeric(df, path, "time")
    g = _numeric(df, path, "num_replicas", positive=True, integer=True)
    b = _numeric(df, path, "batch_size", positive=True, integer=True)
    jobs = []
    for i, app in enumerate(df.application):
        if app not in models.iters_table:
            raise TraceError(path, i + 2, "application",
                             f"unknown application {app!r}; known: {', '.join(sorted(models.iters_table))}")
        jobs.append(Job(id=str(df.name.iloc[i]), submit_time=float(t.iloc[i]), num_gpus=int(g.iloc[i]),
                        app=app, global_batch=int(b.iloc[i]),
                        total_iters=models.iterations_for(app, int(b.iloc[i])),
                        group_id=group_key("", app, int(g.iloc[i]), int(b.iloc[i]))))
    return jobs


def _philly(df, path, rng, models, shape) -> list[Job]:
    ts = pd.to_datetime(df.timestamp, errors="coerce", format="%Y-%m-%d %H:%M:%S")
    if ts.isna().any():
        i = int(np.flatnonzero(ts.isna().to_numpy())[0])
        raise TraceError(path, i + 2, "timestamp",
                         f"expected YYYY-MM-DD HH:MM:SS, got {df.timestamp.iloc[i]!r}")
    dur = _numeric(df, path, "duration", positive=True)
    g = _numeric(df, path, "num_gpus", positive=True, integer=True)
    submits = (ts - ts.min()).dt.total_seconds().to_numpy()
    order = np.argsort(submits, kind="stable")  # apps are drawn in submit order
    ids = [f"philly-{i}" for i in range(len(df))]
    vcs = df.cluster.to_numpy() if "cluster" in df else np.full(len(df), "")
    groups = [group_key(vcs[i], "", int(g.iloc[i]), None) for i in order]
    jobs = _from_durations([ids[i] for i in order], submits[order], g.to_numpy()[order],
                           dur.to_numpy()[order], None, rng, models, shape,
                           users=df.cluster.to_numpy()[order] if "cluster" in df else None,
                           groups=groups)
    return jobs


def _tiresias_like(scale: float):
    def load(df, path, rng, models, shape) -> list[Job]:
        sub = _numeric(df, path, "submit_time") / scale
        dur = _numeric(df, path, "duration", positive=True) / scale
        g = _numeric(df, path, "num_gpu", positive=True, integer=True)
        names = df.model_name.to_numpy() if "model_name" in df else None
        groups = [group_key("", names[i] if names is not None else "", int(g.iloc[i]), None)
                  for i in range(len(df))]
        return _from_durations(df.job_id.to_numpy(), sub.to_numpy(), g.to_numpy(), dur.to_numpy(),
                               names, rng, models, shape, groups=groups)
    return load


def _generic(df, path, rng, models, shape) -> list[Job]:
    sub = _numeric(df, path, "submit_time")
    g = _numeric(df, path, "num_gpus", positive=True, integer=True)
    apps = df.app.to_numpy() if "app" in df else None
    if apps is not None:
        for i, a in enumerate(apps):
            if a and a not in models.profiles:
                raise TraceError(path, i + 2, "app", f"unknown application {a!r}; known: "
                                 + ", ".join(sorted(models.profiles)))
    batches = _numeric(df, path, "batch_size", positive=True, integer=True).to_numpy() \
        if "batch_size" in df else None
    extra = [{} for _ in range(len(df))]
    if "deadline" in df:
        given = df.deadline.fillna("").astype(str).str.strip().ne("")
        dl = pd.to_numeric(df.deadline.where(given), errors="coerce")
        bad = given & ~np.isfinite(dl.fillna(np.inf))
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise TraceError(path, i + 2, "deadline",
                             f"expected a number or nothing, got {df.deadline.iloc[i]!r}")
        for i, v in enumerate(dl):
            if given.iloc[i]:
                extra[i]["deadline"] = float(v) - float(sub.min())
    if "group" in df:
        for i, v in enumerate(df.group):
            extra[i]["group_id"] = v or None
    users = df.user.to_numpy() if "user" in df else None
    for i in range(len(df)):
        if not extra[i].get("group_id"):
            extra[i]["group_id"] = group_key(users[i] if users is not None else "",
                                             apps[i] if apps is not None else "", int(g.iloc[i]),
                                             int(batches[i]) if batches is not None else None)
    if "iterations" in df:
        it = _numeric(df, path, "iterations", positive=True)
        t0 = float(sub.min())
        jobs = []
        for i in range(len(df)):
            app = (apps[i] if apps is not None and apps[i] else _assign_app("", rng))
            gi = int(g.iloc[i])
            batch = int(batches[i]) if batches is not None else _batch_for(app, gi, models)
            jobs.append(Job(id=str(df["id"].iloc[i]), submit_time=float(sub.iloc[i]) - t0,
                            num_gpus=gi, app=app, global_batch=batch,
                            total_iters=float(it.iloc[i]),
                            user=str(users[i]) if users is not None else "user", **extra[i]))
        return jobs
    if "duration" not in df:
        raise TraceError(path, 1, "duration", "a generic trace needs 'duration' or 'iterations'")
    dur = _numeric(df, path, "duration", positive=True)
    return _from_durations(df["id"].to_numpy(), sub.to_numpy(), g.to_numpy(), dur.to_numpy(), None,
                           rng, models, shape, users=users, apps=apps, batches=batches, extra=extra)


def _sacct(df, path, rng, models, shape) -> list[Job]:
    from .slurm.meta import parse_meta

    times = {}
    for col in ("Submit", "Start", "End"):
        times[col] = pd.to_datetime(df[col].where(~df[col].isin(["Unknown", "None", ""])),
                                    errors="coerce", format="%Y-%m-%dT%H:%M:%S")
    bad = df["Submit"].ne("") & times["Submit"].isna()
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise TraceError(path, i + 2, "Submit", f"expected YYYY-MM-DDTHH:MM:SS, got {df.Submit.iloc[i]!r}")
    tres_col = "AllocTRES" if "AllocTRES" in df else ("ReqTRES" if "ReqTRES" in df else None)
    if tres_col is None:
        raise TraceError(path, 1, "AllocTRES", "an sacct trace needs AllocTRES or ReqTRES")
    rows = []
    for i in range(len(df)):
        jid = str(df.JobID.iloc[i])
        if "." in jid:
            continue  # a job step
        m = _GPU_TRES.search(str(df[tres_col].iloc[i]))
        gpus = int(m.group(1)) if m else 0
        st, en, sub = times["Start"].iloc[i], times["End"].iloc[i], times["Submit"].iloc[i]
        if gpus <= 0 or pd.isna(st) or pd.isna(en) or pd.isna(sub):
            continue
        # offline workload modelling only (never a scheduling input): the user Comment's
        # tag is accepted here when the AdminComment has none
        meta = parse_meta(str(df.AdminComment.iloc[i]) if "AdminComment" in df else "")
        if not meta.tagged and "Comment" in df:
            meta = parse_meta(str(df.Comment.iloc[i]))
        app = meta.app if meta.app in models.profiles else None
        user = str(df.User.iloc[i]) if "User" in df else "user"
        name = str(df.JobName.iloc[i]) if "JobName" in df else ""
        rows.append((jid, sub.timestamp(), gpus, max((en - st).total_seconds(), 1.0),
                     user, app, meta.batch, group_key(user, name or meta.app or "", gpus, meta.batch)))
    if not rows:
        raise TraceError(path, None, None, "no finished GPU jobs in the sacct output")
    ids, sub, g, dur, users, apps, batches, groups = map(list, zip(*rows))
    return _from_durations(ids, np.array(sub), g, dur, None, rng, models, shape, users=users,
                           apps=apps, batches=batches, groups=groups)


_LOADERS = {"pollux": _pollux, "philly": _philly, "tiresias": _tiresias_like(1.0),
            "muri": _tiresias_like(1000.0), "generic": _generic,
            "sacct": _sacct}
