"""Per-job scheduler decision file shared by the gimbal daemon and gimbal-run.

THE AGREED PLACE: the daemon writes ``$GIMBAL_STATE_DIR/decisions/<SLURM_JOB_ID>.json``
(``GIMBAL_STATE_DIR`` defaults to ``/var/spool/gimbal``) with
:func:`write_decision`; gimbal-run reads it with :func:`read_decision` at
launch and polls it for changes of the MPS share (seed 004 §4.1 LGRR: a
running MPS client's share cannot change, so a squeeze/swell is a
checkpoint + relaunch).

Schema (version 1), all fields but ``version``/``job_id`` optional::

    {"version": 1, "job_id": "123", "policy": "sjf-bsbf",
     "sub_batch": 16, "accum_steps": 4, "global_batch": 64,
     "mps_thread_pct": 50, "mps_mem_limit_mb": 8000,
     "stealing": true, "share_with": "122", "written_at": "2024-01-01T00:00:00+00:00",
     "workers": [{"gpu": "node1:0", "share": 40, "micro_batch": 16, "accum_steps": 3,
                  "mps_pct": 50, "mem_limit_mb": null, "stage": 0}, ...]}

``workers`` is the per-worker allocation record (``policies.model.WorkerAlloc``, one
per rank in rank order; docs/architecture.md): the rank's sample share of the global
batch (unequal shares = LISS split), its micro-batch and accumulation steps, MPS share,
memory limit and pipeline stage.  ``global_batch`` is the batch in force (a policy may
override the submitted one).  gimbal-run hands the record to the ranks
(``GIMBAL_WORKERS``) and rank 0's reports echo it back.

Unknown keys are ignored (forward compatible); a newer ``version`` is an error.
This module's public API (``LauncherDecision``, ``read_decision``,
``write_decision``, ``decision_path``, ``DecisionError``) is imported by the
daemon: keep it stable.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple, Union

from .fsutil import atomic_target

SCHEMA_VERSION = 1
DEFAULT_STATE_DIR = "/var/spool/gimbal"
PathLike = Union[str, "os.PathLike[str]"]


class DecisionError(ValueError):
    """A decision file or decision value is invalid (message names file and field)."""


def state_dir(env: Optional[Mapping[str, str]] = None) -> str:
    env = os.environ if env is None else env
    return env.get("GIMBAL_STATE_DIR") or DEFAULT_STATE_DIR


def decision_path(job_id: Union[str, int], root: Optional[str] = None) -> str:
    """``<root or $GIMBAL_STATE_DIR>/decisions/<job_id>.json``."""
    return os.path.join(root or state_dir(), "decisions", f"{job_id}.json")


@dataclass(frozen=True)
class LauncherDecision:
    job_id: str
    policy: Optional[str] = None
    sub_batch: Optional[int] = None
    accum_steps: Optional[int] = None
    global_batch: Optional[int] = None
    mps_thread_pct: Optional[int] = None
    mps_mem_limit_mb: Optional[int] = None
    stealing: Optional[bool] = None
    share_with: Optional[str] = None
    written_at: Optional[str] = None
    workers: Optional[Tuple[Dict[str, Any], ...]] = None
    version: int = SCHEMA_VERSION

    def __post_init__(self):
        if self.workers is not None:
            object.__setattr__(self, "workers", _normalise_workers(self.workers, "LauncherDecision"))
        _validate(self, where="LauncherDecision")

    def to_dict(self) -> Dict[str, Any]:
        """JSON-ready dict; ``None`` fields are left out."""
        d = {k: v for k, v in dataclasses.asdict(self).items() if v is not None}
        if self.workers is not None:
            d["workers"] = [dict(w) for w in self.workers]
        d["version"] = self.version
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "<dict>") -> "LauncherDecision":
        if not isinstance(data, Mapping):
            raise DecisionError(f"{where}: expected a JSON object, got {type(data).__name__}")
        if "version" not in data:
            raise DecisionError(f"{where}: field 'version' is missing")
        if "job_id" not in data:
            raise DecisionError(f"{where}: field 'job_id' is missing")
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in names}
        # JSON producers may write the job id as a number
        if isinstance(kwargs.get("job_id"), int) and not isinstance(kwargs["job_id"], bool):
            kwargs["job_id"] = str(kwargs["job_id"])
        if isinstance(kwargs.get("share_with"), int) and not isinstance(kwargs["share_with"], bool):
            kwargs["share_with"] = str(kwargs["share_with"])
        try:
            return cls(**kwargs)
        except DecisionError as exc:
            raise DecisionError(str(exc).replace("LauncherDecision", where, 1)) from None

    def merged(self, **overrides: Any) -> "LauncherDecision":
        """Copy with every non-``None`` override applied (CLI flags win)."""
        return dataclasses.replace(self, **{k: v for k, v in overrides.items() if v is not None})


def _check_int(where: str, name: str, value: Any, lo: int, hi: Optional[int] = None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise DecisionError(f"{where}: field {name!r} must be an integer, got {value!r}")
    if value < lo or (hi is not None and value > hi):
        rng = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise DecisionError(f"{where}: field {name!r} must be {rng}, got {value}")


WORKER_FIELDS = ("gpu", "share", "micro_batch", "accum_steps", "mps_pct", "mem_limit_mb", "stage")


def _normalise_workers(items: Any, where: str) -> Tuple[Dict[str, Any], ...]:
    """Validated worker records with every field present (defaults filled in)."""
    if isinstance(items, (str, bytes)) or not isinstance(items, (list, tuple)) or not items:
        raise DecisionError(f"{where}: field 'workers' must be a non-empty list of records")
    out = []
    for i, w in enumerate(items):
        at = f"{where}: workers[{i}]"
        if not isinstance(w, Mapping):
            raise DecisionError(f"{at} must be an object, got {type(w).__name__}")
        unknown = set(w) - set(WORKER_FIELDS)
        if unknown:
            raise DecisionError(f"{at}: unknown field(s) {sorted(unknown)}")
        gpu = w.get("gpu")
        node, _, idx = gpu.rpartition(":") if isinstance(gpu, str) else ("", "", "")
        if not node or not idx.isdigit():
            raise DecisionError(f"{at}: field 'gpu' must be 'node:index', got {gpu!r}")
        rec = {"gpu": gpu, "share": w.get("share"), "micro_batch": w.get("micro_batch"),
               "accum_steps": w.get("accum_steps", 1), "mps_pct": w.get("mps_pct"),
               "mem_limit_mb": w.get("mem_limit_mb"), "stage": w.get("stage", 0)}
        if rec["share"] is None or rec["micro_batch"] is None:
            raise DecisionError(f"{at}: fields 'share' and 'micro_batch' are required")
        _check_int(at, "share", rec["share"], 0)
        _check_int(at, "micro_batch", rec["micro_batch"], 1)
        _check_int(at, "accum_steps", rec["accum_steps"], 1)
        _check_int(at, "mps_pct", rec["mps_pct"], 1, 100)
        _check_int(at, "mem_limit_mb", rec["mem_limit_mb"], 1)
        _check_int(at, "stage", rec["stage"], 0)
        if rec["micro_batch"] * rec["accum_steps"] < rec["share"]:
            raise DecisionError(f"{at}: micro_batch {rec['micro_batch']} x accum_steps "
                                f"{rec['accum_steps']} does not cover share {rec['share']}")
        out.append(rec)
    return tuple(out)


def _validate(d: LauncherDecision, where: str) -> None:
    if isinstance(d.version, bool) or not isinstance(d.version, int):
        raise DecisionError(f"{where}: field 'version' must be an integer, got {d.version!r}")
    if d.version > SCHEMA_VERSION or d.version < 1:
        raise DecisionError(f"{where}: field 'version' is {d.version}; this launcher "
                            f"understands version {SCHEMA_VERSION}")
    if not isinstance(d.job_id, str) or not d.job_id.strip():
        raise DecisionError(f"{where}: field 'job_id' must be a non-empty string, got {d.job_id!r}")
    for name in ("policy", "share_with", "written_at"):
        v = getattr(d, name)
        if v is not None and not isinstance(v, str):
            raise DecisionError(f"{where}: field {name!r} must be a string, got {v!r}")
    _check_int(where, "sub_batch", d.sub_batch, 1)
    _check_int(where, "accum_steps", d.accum_steps, 1)
    _check_int(where, "global_batch", d.global_batch, 1)
    _check_int(where, "mps_thread_pct", d.mps_thread_pct, 1, 100)
    _check_int(where, "mps_mem_limit_mb", d.mps_mem_limit_mb, 1)
    if d.stealing is not None and not isinstance(d.stealing, bool):
        raise DecisionError(f"{where}: field 'stealing' must be true/false, got {d.stealing!r}")
    if d.written_at is not None:
        try:
            _dt.datetime.fromisoformat(d.written_at.replace("Z", "+00:00"))
        except ValueError:
            raise DecisionError(f"{where}: field 'written_at' must be an ISO-8601 time, "
                                f"got {d.written_at!r}") from None
    if d.workers and d.global_batch:
        per_stage: Dict[int, int] = {}
        for w in d.workers:
            per_stage[w["stage"]] = per_stage.get(w["stage"], 0) + w["share"]
        bad = {s: n for s, n in per_stage.items() if n != d.global_batch}
        if bad:
            raise DecisionError(f"{where}: worker shares sum to {sorted(bad.values())[0]}, not "
                                f"'global_batch' ({d.global_batch})")
    if d.sub_batch and d.global_batch and d.sub_batch > d.global_batch:
        raise DecisionError(f"{where}: field 'sub_batch' ({d.sub_batch}) exceeds "
                            f"'global_batch' ({d.global_batch})")


def read_decision(path: PathLike) -> LauncherDecision:
    """Parse and validate a decision file; errors name the file and the field.

    Raises ``FileNotFoundError`` when the file does not exist (callers decide
    whether that is fine) and :class:`DecisionError` for bad content."""
    path = os.fspath(path)
    with open(path, "rb") as fh:
        raw = fh.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecisionError(f"{path}: not valid UTF-8 ({exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DecisionError(f"{path}: not valid JSON ({exc})") from None
    return LauncherDecision.from_dict(data, where=path)


def write_decision(path: PathLike, decision: LauncherDecision) -> None:
    """Atomically write ``decision`` to ``path`` (temp file in the same
    directory + fsync + ``os.replace``); fills ``written_at`` when unset.
    Readers never observe a partial file."""
    if not isinstance(decision, LauncherDecision):
        raise TypeError(f"write_decision expects a LauncherDecision, got {type(decision).__name__}")
    if decision.written_at is None:
        now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        decision = dataclasses.replace(decision, written_at=now)
    path = os.fspath(path)
    with atomic_target(path, ".decision-") as tmp:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(decision.to_dict(), fh, sort_keys=True)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
