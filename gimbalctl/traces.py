"""Trace loaders → lists of pending :class:`~policies.model.Job`.

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
  ``group``, and ``min_gpus,max_gpus`` / ``min_batch,max_batch`` (the GPU counts /
  global batches a policy may choose: ``Job.gpu_range`` / ``Job.batch_range``, as
  :mod:`gimbalctl.hetero_workload` writes them).  Times in seconds.  Other names map with
  ``columns={"mine": "id"}``.

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

Reading.  The ``pollux``, ``tiresias``, ``muri`` and ``generic`` kinds are read here
with the standard library's :mod:`csv` (no pandas: ``gimbalctl simulate`` of such a
CSV starts without importing pandas, docs/scale.md §6).  ``philly`` and ``sacct``
(timestamps: pandas' date parsing is not re-implemented here) are handed to the
pandas loader :mod:`gimbalctl.traces_pandas`, which
also reads every kind and is the reference this reader is tested against
(tests/test_traces_stdlib.py: same jobs, same rejected inputs).  The reader
follows pandas' ``read_csv(dtype=str, keep_default_na=False,
skipinitialspace=True)``: lines holding only spaces/tabs are skipped, short rows
are padded with empty fields, empty and repeated header names become
``Unnamed: i`` / ``name.1``; numbers are what ``pandas.to_numeric`` accepts
(ASCII decimal, optional exponent, ``inf``; surrounding whitespace ignored).
Where the two differ, this reader is stricter or more exact: a row with more
fields than the header and a quoted field left open at the end of the file are
errors naming that row's line, line numbers count the file's own lines (blank,
form-feed and multi-line quoted ones included), and a column name that a
``columns`` mapping makes ambiguous is an error when the loader reads it.
"""
from __future__ import annotations

import csv
import io
import math
import re
from pathlib import Path
from typing import Mapping, Optional, Sequence

from policies.base import exclusive_steps
from policies.model import Job, Node

from .groups import group_key  # not .predictor: simulate does not import it
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
ID_COLUMN = {"pollux": "name", "tiresias": "job_id", "muri": "job_id", "generic": "id",
             "sacct": "JobID"}
PANDAS_KINDS = ("philly", "sacct")  # read by gimbalctl.traces_pandas (timestamps)


def detect_kind(columns) -> str:
    cols = set(columns)
    if {"iteration_time", "resource_time_0"} <= cols:
        return "muri"
    for kind in ("pollux", "philly", "tiresias", "generic", "sacct"):
        if set(REQUIRED[kind]) <= cols:
            return kind
    raise ValueError("unrecognised trace header " + ",".join(columns))


def _separator(path: Path, kind: Optional[str]) -> str:
    """``|`` for sacct output (given, or a ``|`` in the file's first line), else ``,``."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        head = fh.readline()
    return "|" if (kind == "sacct" or (kind is None and "|" in head)) else ","


def load_trace(path, kind: Optional[str] = None, seed: int = 0, models: Optional[Models] = None,
               columns: Optional[Mapping[str, str]] = None, limit: Optional[int] = None,
               nodes: Optional[Sequence[Node]] = None) -> list[Job]:
    """Load a trace.  ``nodes``: the cluster it will be simulated on; a trace duration
    becomes the iterations the job runs in that time alone there (see
    :func:`_iters_for_duration`).  Without ``nodes``: 4-GPU nodes, no memory limit."""
    path = Path(path)
    if kind in PANDAS_KINDS:
        return _with_pandas(path, kind, seed, models, columns, limit, nodes)
    try:
        sep = _separator(path, kind)
    except FileNotFoundError:
        raise TraceError(path, None, None, "file not found") from None
    except OSError as e:
        raise TraceError(path, None, None, f"cannot read the file ({e.strerror or e})") from None
    if kind is None and _peek_kind(path, sep, columns) in PANDAS_KINDS:
        return _with_pandas(path, None, seed, models, columns, limit, nodes)
    table = read_table(path, sep)
    if columns:
        table.rename(columns)
    given = kind
    if kind is None:
        try:
            kind = detect_kind(table.names)
        except ValueError as e:
            raise TraceError(path, table.header_line, None, f"{e}; expected one of: " + "; ".join(
                f"{k}: {','.join(v)}" for k, v in REQUIRED.items())) from None
    if kind not in REQUIRED:
        raise TraceError(path, None, None, f"unknown trace kind {kind!r}; valid: {', '.join(REQUIRED)}")
    if kind in PANDAS_KINDS:
        return _with_pandas(path, given, seed, models, columns, limit, nodes)
    missing = [c for c in REQUIRED[kind] if c not in table]
    if missing:
        raise TraceError(path, table.header_line, missing[0], f"missing column for a {kind} trace")
    if len(table) == 0:
        raise TraceError(path, None, None, "no jobs in trace")
    if limit is not None:
        table.head(limit)
    _check_ids(table, kind)
    jobs = _LOADERS[kind](table, _Draws(seed), models or default_models(), _shape(nodes))
    jobs.sort(key=lambda j: (j.submit_time, j.id))
    return jobs


def _peek_kind(path: Path, sep: str, columns: Optional[Mapping[str, str]]) -> Optional[str]:
    """The kind detected from the first non-blank line alone (None when that says
    nothing): a Philly or sacct trace goes to pandas without being read here first."""
    try:
        with open(path, encoding="utf-8-sig", errors="replace", newline="") as fh:
            line = next((ln for ln in fh if not _blank(ln)), "")
        names = _header_names(next(csv.reader([line], delimiter=sep, skipinitialspace=True), []))
        return detect_kind([(columns or {}).get(n, n) for n in names])
    except (ValueError, csv.Error):
        return None


class _Draws:
    """``numpy.random.default_rng(seed)``, made on the first draw: a trace that names
    every job's application draws nothing and need not import numpy at all."""

    def __init__(self, seed: int):
        self.seed, self.rng = seed, None

    def integers(self, *args, **kw):
        if self.rng is None:
            import numpy as np  # the first draw: a trace that names every app never gets here

            self.rng = np.random.default_rng(self.seed)
        return self.rng.integers(*args, **kw)


def _with_pandas(path, kind, seed, models, columns, limit, nodes) -> list[Job]:
    from .traces_pandas import load_trace_pandas

    return load_trace_pandas(path, kind=kind, seed=seed, models=models, columns=columns,
                             limit=limit, nodes=nodes)


# ---------------------------------------------------------------- reading (stdlib csv)

class Table:
    """A trace read as text: header names and, per data row, its fields and the
    file line it starts on (1-based)."""

    def __init__(self, path: Path, names: list[str], rows: list[list[str]], lines: list[int],
                 header_line: int):
        self.path, self.names, self.rows, self.lines = path, names, rows, lines
        self.header_line = header_line

    def __len__(self) -> int:
        return len(self.rows)

    def __contains__(self, name: str) -> bool:
        return name in self.names

    def rename(self, mapping: Mapping[str, str]) -> None:
        self.names = [mapping.get(n, n) for n in self.names]

    def head(self, n: int) -> None:
        self.rows, self.lines = self.rows[:n], self.lines[:n]

    def col(self, name: str) -> list[str]:
        idx = [k for k, n in enumerate(self.names) if n == name]
        if len(idx) != 1:
            raise TraceError(self.path, self.header_line, name,
                             "more than one column has this name (after renaming)")
        k = idx[0]
        return [r[k] for r in self.rows]

    def error(self, i: int, column: Optional[str], problem: str) -> TraceError:
        """An error about data row ``i`` (0-based), naming the file line it starts on."""
        return TraceError(self.path, self.lines[i], column, problem)


def _blank(line: str) -> bool:
    return not line.rstrip("\r\n").strip(" \t")


def read_table(path: Path, sep: str = ",") -> Table:
    """Read a CSV as pandas' ``read_csv(dtype=str, keep_default_na=False,
    skipinitialspace=True, index_col=False)`` does (see the module docstring)."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise TraceError(path, None, None, "file not found") from None
    except UnicodeDecodeError as e:
        raise TraceError(path, None, None, f"not a readable CSV ({e})") from None
    except OSError as e:
        raise TraceError(path, None, None, f"cannot read the file ({e.strerror or e})") from None
    phys = io.StringIO(text, newline="").readlines()
    reader = csv.reader(phys, delimiter=sep, skipinitialspace=True)
    names: Optional[list[str]] = None
    header_line = 1
    rows: list[list[str]] = []
    lines: list[int] = []
    start = 1
    try:
        for rec in reader:
            end = reader.line_num
            if end == start and _blank(phys[start - 1]):
                start = end + 1
                continue
            if names is None:
                names, header_line = _header_names(rec), start
            elif len(rec) > len(names):
                raise TraceError(path, start, None, f"more fields than the header "
                                 f"({len(rec)} against {len(names)})")
            else:
                rows.append(rec + [""] * (len(names) - len(rec)))
                lines.append(start)
            last, start = start, end + 1
    except csv.Error as e:
        raise TraceError(path, start, None, f"not a readable CSV ({e})") from None
    if names is None:
        raise TraceError(path, None, None, "empty file")
    if '"' in text and _open_quote("".join(phys[last - 1:]), sep):
        raise TraceError(path, last, None, "a quoted field is not closed before the end of the file")
    return Table(path, names, rows, lines, header_line)


def _open_quote(record: str, sep: str) -> bool:
    """Whether the csv module's reader (non-strict, skipinitialspace) ends ``record``
    inside a quoted field: pandas rejects that ("EOF inside string"), csv does not."""
    state = 0  # 0 field start, 1 in a field, 2 in quotes, 3 a quote in quotes
    for c in record:
        if state == 0:
            if c == '"':
                state = 2
            elif c not in (sep, "\r", "\n", " "):
                state = 1
        elif state == 1:
            if c in (sep, "\r", "\n"):
                state = 0
        elif state == 2:
            if c == '"':
                state = 3
        elif c == '"':
            state = 2
        else:
            state = 0 if c in (sep, "\r", "\n") else 1
    return state == 2


def _header_names(rec: list[str]) -> list[str]:
    """pandas' C reader's header names: ``Unnamed: i`` for empty ones, then repeated
    names numbered ``name.1``, ``name.2``, … (given names first, skipping taken ones)."""
    names = [n if n else f"Unnamed: {i}" for i, n in enumerate(rec)]
    unnamed = {names[i] for i, n in enumerate(rec) if not n}
    order = [i for i in range(len(names)) if names[i] not in unnamed] + \
            [i for i in range(len(names)) if names[i] in unnamed]
    counts: dict[str, int] = {}
    for i in order:
        col = old = names[i]
        cur = counts.get(col, 0)
        if cur > 0:
            while cur > 0:
                counts[old] = cur + 1
                col = f"{old}.{cur}"
                cur = cur + 1 if col in names else counts.get(col, 0)
            names[i] = col
        counts[col] = cur + 1
    return names


_SPACE = " \t\n\r\x0b\x0c"
_INT = re.compile(r"[+-]?[0-9]+\Z")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z"
                    r"|[+-]?inf(?:inity)?\Z", re.I)
_I64, _U64 = 2 ** 63, 2 ** 64


def _number(s: str):
    """``pandas.to_numeric`` of one string: an int, a float, or None (not a number)."""
    s = s.strip(_SPACE)
    if _INT.match(s):
        return int(s)
    if _FLOAT.match(s):
        return float(s)
    return None


def _numeric(t: Table, col: str, positive=False, integer=False) -> list:
    """The column as numbers, checked as pandas' loader checks them; ints when every
    value is an int pandas keeps as int64/uint64, else floats (pandas' column dtype)."""
    raw = t.col(col)
    vals = [_number(s) for s in raw]
    for i, v in enumerate(vals):
        bad = v is None or not math.isfinite(v) or (v <= 0 if positive else v < 0)
        if not bad and integer and v % 1 != 0:
            bad = True
        if bad:
            want = "a positive " if positive else "a non-negative "
            want += "integer" if integer else "number"
            raise t.error(i, col, f"expected {want}, got {raw[i]!r}")
    if all(type(v) is int for v in vals) and (all(-_I64 <= v < _I64 for v in vals)
                                             or all(0 <= v < _U64 for v in vals)):
        return vals
    return [float(v) for v in vals]


def _check_ids(t: Table, kind: str) -> None:
    """Job ids must be present and unique (the simulator and reports key on them)."""
    col = ID_COLUMN.get(kind)
    if col is None:
        return
    ids = [raw.strip() for raw in t.col(col)]
    if "" in ids:
        raise t.error(ids.index(""), col, "empty job id")
    seen = set()
    for i, jid in enumerate(ids):
        if jid in seen:
            raise t.error(i, col, f"duplicate job id {jid!r} (an earlier row has it)")
        seen.add(jid)


# ---------------------------------------------------------------- shared with traces_pandas

def _at_line(e: TraceError) -> TraceError:
    """The pandas loader counts data rows as lines 2, 3, …; pandas skips blank lines,
    so map that row number to the file's physical line (read only on error)."""
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


def exclusive_iter_time(app: str, gpus: int, batch: int, models: Models,
                        shape: tuple[int, Optional[float]] = (4, None)) -> float:
    """Seconds per iteration of the job alone on the cluster of ``shape`` (:func:`_shape`):
    consolidated on ⌈gpus / GPUs per node⌉ nodes (what
    :func:`policies.base.pick_consolidated` gives on an idle cluster) with the
    exclusive micro-batch and accumulation steps a policy starts it with
    (:func:`policies.base.exclusive_steps`), at the simulator's eq. 7 rate."""
    gpus_per_node, mem_limit = shape
    prof = models.profiles[app]
    _, s = exclusive_steps(-(-batch // gpus), prof, models.memory.get(app), mem_limit)
    return prof.iter_time(batch / gpus, gpus, math.ceil(gpus / gpus_per_node), s)


def _iters_for_duration(app: str, gpus: int, batch: int, duration: float, models: Models,
                        shape: tuple[int, Optional[float]] = (4, None)) -> float:
    """Iterations that take ``duration`` seconds for the job alone on the cluster of
    ``shape`` (:func:`exclusive_iter_time`)."""
    return max(duration / exclusive_iter_time(app, gpus, batch, models, shape), 1.0)


def _from_durations(ids, submits, gpus, durations, model_names, rng, models, shape, users=None,
                    apps=None, batches=None, extra=None, groups=None) -> list[Job]:
    jobs = []
    t0 = float(min(submits))
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


# ---------------------------------------------------------------- loaders (stdlib)

def _pollux(t: Table, rng, models, shape) -> list[Job]:
    tm = _numeric(t, "time")
    g = _numeric(t, "num_replicas", positive=True, integer=True)
    b = _numeric(t, "batch_size", positive=True, integer=True)
    names = t.col("name")
    jobs = []
    for i, app in enumerate(t.col("application")):
        if app not in models.iters_table:
            raise t.error(i, "application", f"unknown application {app!r}; known: "
                          f"{', '.join(sorted(models.iters_table))}")
        gi, bi = int(g[i]), int(b[i])
        jobs.append(Job(id=names[i], submit_time=float(tm[i]), num_gpus=gi, app=app,
                        global_batch=bi, total_iters=models.iterations_for(app, bi),
                        group_id=group_key("", app, gi, bi)))
    return jobs


def _tiresias_like(scale: float):
    def load(t: Table, rng, models, shape) -> list[Job]:
        sub = [float(v) / scale for v in _numeric(t, "submit_time")]
        dur = [float(v) / scale for v in _numeric(t, "duration", positive=True)]
        g = _numeric(t, "num_gpu", positive=True, integer=True)
        names = t.col("model_name") if "model_name" in t else None
        groups = [group_key("", names[i] if names is not None else "", int(g[i]), None)
                  for i in range(len(t))]
        return _from_durations(t.col("job_id"), sub, g, dur, names, rng, models, shape,
                               groups=groups)
    return load


def _generic(t: Table, rng, models, shape) -> list[Job]:
    return _ranges(_generic_jobs(t, rng, models, shape), lambda c: c in t,
                   lambda c: _numeric(t, c, positive=True, integer=True), t.error,
                   lambda c, msg: TraceError(t.path, t.header_line, c, msg))


# generic traces: optional columns giving what a policy may choose (seed 002 §5.1 jobs,
# gimbalctl.hetero_workload): (Job field, lower column, upper column, the job's own value)
RANGE_COLUMNS = (("gpu_range", "min_gpus", "max_gpus", "num_gpus", "GPU count"),
                 ("batch_range", "min_batch", "max_batch", "global_batch", "batch"))


def _ranges(jobs: list[Job], has, values, row_error, missing_error) -> list[Job]:
    """``Job.gpu_range`` / ``Job.batch_range`` from a generic trace's ``min_gpus,max_gpus``
    / ``min_batch,max_batch`` (both columns of a pair or neither; positive integers with
    the job's own count / batch between them).  Shared by the stdlib and pandas readers."""
    import dataclasses

    for field, lo_c, hi_c, own, what in RANGE_COLUMNS:
        if not (has(lo_c) or has(hi_c)):
            continue
        for c in (lo_c, hi_c):
            if not has(c):
                raise missing_error(c, f"{lo_c} and {hi_c} go together")
        lo, hi = list(values(lo_c)), list(values(hi_c))
        for i, j in enumerate(jobs):
            a, b, v = int(lo[i]), int(hi[i]), getattr(j, own)
            if a > b:
                raise row_error(i, hi_c, f"{hi_c} {b} is below {lo_c} {a}")
            if not a <= v <= b:
                raise row_error(i, lo_c, f"the job's {what} {v} is outside {lo_c}..{hi_c} = {a}..{b}")
            jobs[i] = dataclasses.replace(j, **{field: (a, b)})
    return jobs


def _generic_jobs(t: Table, rng, models, shape) -> list[Job]:
    sub = _numeric(t, "submit_time")
    g = _numeric(t, "num_gpus", positive=True, integer=True)
    n = len(t)
    apps = t.col("app") if "app" in t else None
    if apps is not None:
        for i, a in enumerate(apps):
            if a and a not in models.profiles:
                raise t.error(i, "app", f"unknown application {a!r}; known: "
                              + ", ".join(sorted(models.profiles)))
    batches = _numeric(t, "batch_size", positive=True, integer=True) if "batch_size" in t else None
    extra: list[dict] = [{} for _ in range(n)]
    t0 = float(min(sub))
    if "deadline" in t:
        for i, raw in enumerate(t.col("deadline")):
            if not raw.strip():
                continue
            v = _number(raw)
            if v is None or not math.isfinite(v):
                raise t.error(i, "deadline", f"expected a number or nothing, got {raw!r}")
            extra[i]["deadline"] = float(v) - t0
    if "group" in t:
        for i, v in enumerate(t.col("group")):
            extra[i]["group_id"] = v or None
    users = t.col("user") if "user" in t else None
    for i in range(n):
        if not extra[i].get("group_id"):
            extra[i]["group_id"] = group_key(users[i] if users is not None else "",
                                             apps[i] if apps is not None else "", int(g[i]),
                                             int(batches[i]) if batches is not None else None)
    if "iterations" in t:
        it = _numeric(t, "iterations", positive=True)
        ids = t.col("id")
        jobs = []
        for i in range(n):
            app = apps[i] if apps is not None and apps[i] else _assign_app("", rng)
            gi = int(g[i])
            batch = int(batches[i]) if batches is not None else _batch_for(app, gi, models)
            jobs.append(Job(id=ids[i], submit_time=float(sub[i]) - t0, num_gpus=gi, app=app,
                            global_batch=batch, total_iters=float(it[i]),
                            user=users[i] if users is not None else "user", **extra[i]))
        return jobs
    if "duration" not in t:
        raise TraceError(t.path, t.header_line, "duration",
                         "a generic trace needs 'duration' or 'iterations'")
    dur = _numeric(t, "duration", positive=True)
    return _from_durations(t.col("id"), sub, g, dur, None, rng, models, shape, users=users,
                           apps=apps, batches=batches, extra=extra)


_LOADERS = {"pollux": _pollux, "tiresias": _tiresias_like(1.0), "muri": _tiresias_like(1000.0),
            "generic": _generic}
