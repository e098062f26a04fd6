"""The pandas trace loader: reads every trace kind with ``pandas.read_csv``.

:func:`gimbalctl.traces.load_trace` hands ``philly`` and ``sacct`` traces (timestamps)
to :func:`load_trace_pandas` and reads the other kinds with the standard library;
this loader is also the reference that reader is tested against
(tests/test_traces_stdlib.py).  The formats are documented in :mod:`gimbalctl.traces`.
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Mapping, Optional, Sequence

import numpy as np
import pandas as pd

from policies.model import Job, Node

from .predictor import group_key
from .profiles import Models, default_models
from .trace_kinds import REQUIRED, TraceError
from .traces import (_GPU_TRES, ID_COLUMN, _assign_app, _at_line, _batch_for, _from_durations,
                     _ranges, _shape, detect_kind)


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


def load_trace_pandas(path, kind: Optional[str] = None, seed: int = 0,
                      models: Optional[Models] = None, columns: Optional[Mapping[str, str]] = None,
                      limit: Optional[int] = None,
                      nodes: Optional[Sequence[Node]] = None) -> list[Job]:
    """:func:`gimbalctl.traces.load_trace` (same arguments, same jobs) read with pandas."""
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
    return _ranges(_generic_jobs(df, path, rng, models, shape), lambda c: c in df,
                   lambda c: _numeric(df, path, c, positive=True, integer=True),
                   lambda i, c, msg: TraceError(path, i + 2, c, msg),
                   lambda c, msg: TraceError(path, 1, c, msg))


def _generic_jobs(df, path, rng, models, shape) -> list[Job]:
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
