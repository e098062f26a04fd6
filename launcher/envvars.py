"""Environment contract between gimbal-run and the training processes.

gimbal-run exports the scheduler's decision (see ``launcher.decision``) to
every training process; the training side reads it with :func:`config`
(also available as ``launcher.config()``).

==========================  =====================================================
variable                    meaning
==========================  =====================================================
GIMBAL_JOB_ID               Slurm job id (or ``--job-id`` / ``standalone``)
GIMBAL_STATE_DIR            root of decisions/ and reports/
GIMBAL_REPORT_PATH          throughput report file (JSON lines), rank 0 appends
GIMBAL_CHECKPOINT_DIR       where ``launcher.checkpoint`` saves / resumes
GIMBAL_SUB_BATCH            micro-batch size for gradient accumulation
GIMBAL_ACCUM_STEPS          number of micro-batches per global batch
GIMBAL_GLOBAL_BATCH         global batch size (all ranks, one optimizer step)
GIMBAL_BATCH_SOURCE         what gimbal-run did with the decision's global batch:
                            ``submitted``, ``applied`` (an override the job's metadata
                            allows), ``refused``, ``unchecked``, ``user`` (launcher.jobmeta)
GIMBAL_STEALING             ``1``/``0``: LISS input-sample stealing on/off
GIMBAL_WORKERS              per-worker allocation record (JSON list, rank order)
GIMBAL_RESTART_COUNT        how many times gimbal-run relaunched (0 = first run)
GIMBAL_RUN_DIR              per-launch scratch dir (worker pid/exit files)
CUDA_MPS_ACTIVE_THREAD_PERCENTAGE / CUDA_MPS_PINNED_DEVICE_MEM_LIMIT  (LGRR)
==========================  =====================================================
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

JOB_ID = "GIMBAL_JOB_ID"
STATE_DIR = "GIMBAL_STATE_DIR"
REPORT_PATH = "GIMBAL_REPORT_PATH"
CHECKPOINT_DIR = "GIMBAL_CHECKPOINT_DIR"
SUB_BATCH = "GIMBAL_SUB_BATCH"
ACCUM_STEPS = "GIMBAL_ACCUM_STEPS"
GLOBAL_BATCH = "GIMBAL_GLOBAL_BATCH"
BATCH_SOURCE = "GIMBAL_BATCH_SOURCE"
STEALING = "GIMBAL_STEALING"
WORKERS = "GIMBAL_WORKERS"
RESTART_COUNT = "GIMBAL_RESTART_COUNT"
RUN_DIR = "GIMBAL_RUN_DIR"
MPS_THREAD = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
MPS_MEM = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"


class ConfigError(ValueError):
    pass


def _opt_int(env: Mapping[str, str], name: str) -> Optional[int]:
    raw = env.get(name, "").strip()
    if not raw:
        return None
    try:
        val = int(raw)
    except ValueError:
        raise ConfigError(f"{name}: expected an integer, got {raw!r}") from None
    if val < 1:
        raise ConfigError(f"{name}: must be >= 1, got {val}")
    return val


def _opt_bool(env: Mapping[str, str], name: str) -> Optional[bool]:
    raw = env.get(name, "").strip().lower()
    if not raw:
        return None
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name}: expected 1/0, got {raw!r}")


@dataclass(frozen=True)
class TrainingConfig:
    """What gimbal-run decided for this training process (all optional)."""
    job_id: Optional[str] = None
    state_dir: Optional[str] = None
    report_path: Optional[str] = None
    checkpoint_dir: Optional[str] = None
    sub_batch: Optional[int] = None
    accum_steps: Optional[int] = None
    global_batch: Optional[int] = None
    stealing: bool = False
    restart_count: int = 0
    mps_thread_pct: Optional[str] = None
    mps_mem_limit: Optional[str] = None
    # the decision's per-worker records (dicts as in launcher.decision), rank order
    workers: Optional[Tuple[Dict[str, Any], ...]] = None
    batch_source: Optional[str] = None

    @property
    def resumed(self) -> bool:
        return self.restart_count > 0

    def worker(self, rank: int, world_size: int) -> Optional[Dict[str, Any]]:
        """This rank's record when the decision has one record per rank, else ``None``
        (a record for another world size cannot be applied: the even split is used)."""
        if not self.workers or len(self.workers) != world_size or not 0 <= rank < world_size:
            return None
        return dict(self.workers[rank])

    def shares(self, world_size: int) -> Optional[List[int]]:
        """Per-rank sample shares of the decision (unequal = LISS split), or ``None``."""
        if not self.workers or len(self.workers) != world_size:
            return None
        return [int(w["share"]) for w in self.workers]

    def report_fields(self, world_size: int, global_batch: int,
                      shares: Optional[Sequence[int]] = None) -> Dict[str, Any]:
        """Fields rank 0's throughput reports carry so the daemon reads back what runs:
        the global batch the training runs, where it came from (``batch_source``, when
        gimbal-run set it) and the applied worker records (with the shares in force, which
        LISS stealing may have moved; only when a record was applied)."""
        out: Dict[str, Any] = {"global_batch": int(global_batch)}
        if self.batch_source:
            out["batch_source"] = self.batch_source
        if not self.workers or len(self.workers) != world_size:
            return out
        recs = [dict(w) for w in self.workers]
        if shares is not None and len(shares) == len(recs):
            for r, s in zip(recs, shares):
                r["share"] = int(s)
        out["workers"] = recs
        return out

    def resolve_batch(self, default_global: int, default_sub: Optional[int] = None,
                      world_size: int = 1):
        """(global_batch, sub_batch) with the decision applied over defaults.

        ``sub_batch`` is the per-rank micro-batch, as the scheduler plans it (seed 000
        eq. 7: each GPU runs ``accum_steps`` micro-steps of ``B/s``, B its share of the
        global batch).  With only ``accum_steps`` given, the sub-batch is
        ``ceil(ceil(global/world_size)/accum_steps)``."""
        gb = self.global_batch or default_global
        sb = self.sub_batch or default_sub
        if sb is None and self.accum_steps:
            local = -(-gb // max(world_size, 1))
            sb = -(-local // self.accum_steps)
        return gb, min(sb or gb, gb)


def config(env: Optional[Mapping[str, str]] = None) -> TrainingConfig:
    """Read the launcher's decision from the environment (``os.environ`` by default)."""
    env = os.environ if env is None else env
    rc = env.get(RESTART_COUNT, "0").strip() or "0"
    if not rc.isdigit():
        raise ConfigError(f"{RESTART_COUNT}: expected an integer, got {rc!r}")
    return TrainingConfig(
        job_id=env.get(JOB_ID) or None,
        state_dir=env.get(STATE_DIR) or None,
        report_path=env.get(REPORT_PATH) or None,
        checkpoint_dir=env.get(CHECKPOINT_DIR) or None,
        sub_batch=_opt_int(env, SUB_BATCH),
        accum_steps=_opt_int(env, ACCUM_STEPS),
        global_batch=_opt_int(env, GLOBAL_BATCH),
        stealing=bool(_opt_bool(env, STEALING)),
        restart_count=int(rc),
        mps_thread_pct=env.get(MPS_THREAD) or None,
        mps_mem_limit=env.get(MPS_MEM) or None,
        workers=_workers(env),
        batch_source=env.get(BATCH_SOURCE) or None,
    )


def _workers(env: Mapping[str, str]) -> Optional[Tuple[Dict[str, Any], ...]]:
    raw = env.get(WORKERS, "").strip()
    if not raw:
        return None
    try:
        items = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{WORKERS}: not valid JSON ({exc})") from None
    from .decision import DecisionError, _normalise_workers
    try:
        return _normalise_workers(items, WORKERS)
    except DecisionError as exc:
        raise ConfigError(str(exc)) from None
