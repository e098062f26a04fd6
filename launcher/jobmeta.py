"""The job's own permission for a batch change, as gimbal-run checks it (seed 002).

The scheduler may override a job's global batch (``LauncherDecision.global_batch``) only when
the job's gimbal metadata allows it: ``gsbatch --allow-batch-change[=MIN:MAX]`` writes
``batchrange=MIN:MAX`` into the comment, ``slurm_hooks/job_submit.lua`` validates it and copies
it into the job's ``AdminComment`` (which users cannot set).  gimbal-run reads that
AdminComment back from Slurm (``squeue --json --jobs=<id>``; the job's owner may read it) and
parses it with the daemon's own parser (:func:`gimbalctl.slurm.meta.parse_meta`); the user's
``Comment`` is never read.

:func:`check_batch` then decides what runs:

========================  ==========================================================
status                    meaning
========================  ==========================================================
``none``                  the decision names no global batch
``submitted``             it is the job's submitted batch (metadata ``batch``)
``applied``               an override inside the job's ``batchrange``
``refused``               an override the metadata does not allow (no ``batchrange``,
                          outside it, metadata unreadable in a Slurm job): the
                          submitted batch runs instead, or, when the metadata names
                          none, the training's own batch (global batch and per-worker
                          shares dropped, the micro-batch kept)
``unchecked``             not inside a Slurm job (no ``SLURM_JOB_ID``): no metadata
                          exists, the decision file is applied as written
========================  ==========================================================

This protects a job that did not opt in from the scheduler changing its batch; it is no
boundary against the job's own user, who controls the job's code and environment anyway
(docs/security.md).
"""
from __future__ import annotations

import dataclasses
import json
import subprocess
from dataclasses import dataclass
from typing import Mapping, Optional, Tuple

from .decision import LauncherDecision

SQUEUE_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class JobMeta:
    """What gimbal-run knows of its job's metadata: the submitted ``batch`` and the
    ``batch_range`` (None: no change allowed); ``error``: why nothing could be read."""
    batch: Optional[int] = None
    batch_range: Optional[Tuple[int, int]] = None
    tagged: bool = False
    error: Optional[str] = None


@dataclass(frozen=True)
class BatchCheck:
    status: str                       # none | submitted | applied | refused | unchecked
    global_batch: Optional[int]       # the batch gimbal-run exports (None: the training's own)
    requested: Optional[int] = None   # the decision file's global batch
    submitted: Optional[int] = None
    allowed: Optional[Tuple[int, int]] = None
    why: str = ""

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["allowed"] = list(self.allowed) if self.allowed else None
        return d


def meta_from_admin_comment(admin_comment: str) -> JobMeta:
    from gimbalctl.slurm.meta import parse_meta  # the daemon's parser: one reading of the tag
    m = parse_meta(admin_comment or "")
    return JobMeta(batch=m.batch, batch_range=m.batch_range, tagged=m.tagged)


def read_job_meta(job_id: str, env: Mapping[str, str], timeout: float = SQUEUE_TIMEOUT_S,
                  run=subprocess.run) -> JobMeta:
    """The job's metadata from its AdminComment (``squeue --json --jobs=<id>``); a JobMeta
    with ``error`` set when Slurm cannot be asked or does not know the job."""
    if not str(job_id).isdigit():
        return JobMeta(error=f"job id {str(job_id)[:40]!r} is not a Slurm job id")
    argv = ["squeue", "--json", f"--jobs={job_id}"]
    try:
        # errors="replace": 22.05 ignores --jobs and lists every job, and another job's name
        # may be invalid UTF-8 (squeue passes it through)
        proc = run(argv, env=dict(env), capture_output=True, text=True, errors="replace",
                   timeout=timeout)
    except (OSError, subprocess.SubprocessError) as e:
        return JobMeta(error=f"{' '.join(argv)}: {e}")
    if proc.returncode != 0:
        return JobMeta(error=f"{' '.join(argv)} failed (rc {proc.returncode}): "
                             f"{(proc.stderr or '').strip()[:200]}")
    try:
        jobs = json.loads(proc.stdout).get("jobs") or []
    except (ValueError, AttributeError) as e:
        return JobMeta(error=f"{' '.join(argv)}: unreadable output ({e})")
    for j in jobs:
        if isinstance(j, dict) and str(j.get("job_id")) == str(job_id):
            admin = j.get("admin_comment")
            return meta_from_admin_comment(admin if isinstance(admin, str) else "")
    return JobMeta(error=f"Slurm does not list job {job_id}")


def check_batch(dec: Optional[LauncherDecision], meta: Optional[JobMeta]
                ) -> Tuple[Optional[LauncherDecision], BatchCheck]:
    """The decision gimbal-run applies and what it did with its global batch (module doc).
    ``meta`` None: not inside a Slurm job."""
    if dec is None or dec.global_batch is None:
        return dec, BatchCheck("none", None, submitted=meta.batch if meta else None,
                               allowed=meta.batch_range if meta else None)
    g = dec.global_batch
    if meta is None:
        return dec, BatchCheck("unchecked", g, g, why="not inside a Slurm job: no job metadata "
                                                      "to check the decision's batch against")
    b, rng = meta.batch, meta.batch_range
    if meta.error is None and b == g:
        return dec, BatchCheck("submitted", g, g, b, rng)
    if meta.error is None and rng is not None and rng[0] <= g <= rng[1]:
        return dec, BatchCheck("applied", g, g, b, rng,
                               why=f"allowed by the job's batchrange {rng[0]}:{rng[1]}")
    if meta.error is not None:
        why = f"the job's metadata cannot be read ({meta.error})"
    elif rng is None:
        why = ("the job's metadata does not allow a batch change (no gsbatch "
               "--allow-batch-change)" if b is not None else
               "the job's metadata names no batch and allows no batch change")
    else:
        why = f"outside the job's batchrange {rng[0]}:{rng[1]}"
    keep = b if meta.error is None else None
    return _with_batch(dec, keep), BatchCheck("refused", keep, g, b, rng, why=why)


def _with_batch(dec: LauncherDecision, batch: Optional[int]) -> LauncherDecision:
    """``dec`` running ``batch`` instead of its own global batch: the per-worker shares are
    the even split of it (per pipeline stage; micro-batch = share / accumulation steps, other fields kept);
    with ``batch`` None the global batch and the shares are dropped (the micro-batch, a
    per-GPU memory bound, stays)."""
    if batch is None:
        return dataclasses.replace(dec, global_batch=None, workers=None)
    workers = None
    if dec.workers:  # per pipeline stage, the stage's workers split the whole batch
        workers = [dict(w) for w in dec.workers]
        for stage in sorted({w["stage"] for w in workers}):
            mine = [w for w in workers if w["stage"] == stage]
            base, extra = divmod(batch, len(mine))
            for i, w in enumerate(mine):
                w["share"] = base + (1 if i < extra else 0)
                w["micro_batch"] = max(1, -(-w["share"] // int(w.get("accum_steps") or 1)))
    sub = min(dec.sub_batch, batch) if dec.sub_batch else None
    return dataclasses.replace(dec, global_batch=batch, sub_batch=sub,
                               workers=tuple(workers) if workers else None)
