"""The per-worker allocation record on the wire: decision files, launcher reports, the
state store and dry-run output all carry :class:`policies.model.WorkerAlloc` as

    {"gpu": "node:index", "share": 48, "micro_batch": 16, "accum_steps": 3,
     "mps_pct": 50, "mem_limit_mb": null, "stage": 0}

(the form ``Plan.as_dict`` prints).  :func:`workers_from_wire` turns such a list back
into the exact ``WorkerAlloc`` tuple; everything read is untrusted, so a malformed
record is a :class:`RecordError` naming the worker and the field."""
from __future__ import annotations

from typing import Any, Iterable, Optional, Sequence

from policies.model import Gpu, WorkerAlloc

FIELDS = ("gpu", "share", "micro_batch", "accum_steps", "mps_pct", "mem_limit_mb", "stage")


class RecordError(ValueError):
    """A worker record that cannot be read (message names the worker and field)."""


def gpu_name(g: Gpu) -> str:
    return f"{g.node}:{g.index}"


def parse_gpu(text: Any, where: str = "gpu") -> Gpu:
    if not isinstance(text, str) or ":" not in text:
        raise RecordError(f"{where}: expected 'node:index', got {text!r}")
    node, _, idx = text.rpartition(":")
    if not node or not idx.isdigit():
        raise RecordError(f"{where}: expected 'node:index', got {text!r}")
    return Gpu(node, int(idx))


def worker_to_wire(w: WorkerAlloc) -> dict:
    return {"gpu": gpu_name(w.gpu), "share": w.share, "micro_batch": w.micro_batch,
            "accum_steps": w.accum_steps, "mps_pct": w.mps_pct,
            "mem_limit_mb": w.mem_limit_mb, "stage": w.stage}


def workers_to_wire(workers: Iterable[WorkerAlloc]) -> list[dict]:
    return [worker_to_wire(w) for w in workers]


def _int(d: dict, key: str, where: str, lo: int, default: Any = ...) -> Optional[int]:
    if key not in d or d[key] is None:
        if default is ...:
            raise RecordError(f"{where}: field {key!r} is missing")
        return default
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise RecordError(f"{where}: field {key!r} must be an integer >= {lo}, got {v!r}")
    return v


def workers_from_wire(items: Any, where: str = "workers") -> tuple[WorkerAlloc, ...]:
    """The exact ``WorkerAlloc`` tuple of a wire list (order kept)."""
    if not isinstance(items, Sequence) or isinstance(items, (str, bytes)) or not items:
        raise RecordError(f"{where}: expected a non-empty list of worker records")
    out = []
    for i, d in enumerate(items):
        at = f"{where}[{i}]"
        if not isinstance(d, dict):
            raise RecordError(f"{at}: expected an object, got {type(d).__name__}")
        gpu = parse_gpu(d.get("gpu"), f"{at}.gpu")
        mps = _int(d, "mps_pct", at, 1, None)
        if mps is not None and mps > 100:
            raise RecordError(f"{at}: field 'mps_pct' must be in 1..100, got {mps}")
        out.append(WorkerAlloc(gpu, _int(d, "share", at, 0), _int(d, "micro_batch", at, 1),
                               _int(d, "accum_steps", at, 1, 1), mps,
                               _int(d, "mem_limit_mb", at, 1, None), _int(d, "stage", at, 0, 0)))
    return tuple(out)
