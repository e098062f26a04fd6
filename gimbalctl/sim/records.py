"""Frozen records the simulator makes at every call or start, built without the generated
dataclass ``__init__``.

A frozen dataclass's ``__init__`` sets each field with ``object.__setattr__`` (~5 µs for a
:class:`~policies.model.ClusterSnapshot` of 19 fields, ~1.5 µs per
:class:`~policies.model.WorkerAlloc`): the largest fixed costs of a simulator call and of a
start.  For a class with no ``__post_init__``, no ``init=False`` field and no slots (checked
here at import) an instance is nothing but its attribute dict, so filling that dict with
every field, in field order, makes an object equal to ``cls(**fields)`` in every respect
(fields, ``==``, ``repr``, hash, pickling, ``dataclasses.replace``).
tests/test_sim_records.py checks it against the dataclass constructor: at every call of
simulator runs (snapshots, worker records) and on random worker splits.

Such an instance has a dict of its own (~580 bytes for a FinishedJob against ~230 when the
constructor fills the shared-key one): use it for records that live short (a snapshot and its
parts, the workers of a running job), not for ones kept all run (the history).
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from policies.model import (ClusterSnapshot, FinishedJob, GpuChanges, JobChanges, WaitingQueue,
                            WorkerAlloc)

_new = object.__new__


def plain(cls, **fields):
    """``cls(**fields)`` for a class of :data:`PLAIN`; ``fields`` names every field, in
    field order."""
    obj = _new(cls)
    obj.__dict__.update(fields)
    return obj


def even_workers(gpus: tuple, sub_batch: int, accum_steps: int, mps_pct: Optional[int],
                 global_batch: int) -> tuple[WorkerAlloc, ...]:
    """``policies.model.uniform_workers(gpus, sub_batch, accum_steps, mps_pct,
    global_batch)`` for at least one GPU: the even split of ``global_batch`` (the first
    ``global_batch % k`` workers take one sample more), the other fields their defaults."""
    base, extra = divmod(int(global_batch), len(gpus))
    out = []
    for i, g in enumerate(gpus):
        w = _new(WorkerAlloc)
        w.__dict__.update(gpu=g, share=base + 1 if i < extra else base, micro_batch=sub_batch,
                          accum_steps=accum_steps, mps_pct=mps_pct, mem_limit_mb=None, stage=0,
                          mps_cap=None)
        out.append(w)
    return tuple(out)


PLAIN = (ClusterSnapshot, WaitingQueue, GpuChanges, JobChanges, FinishedJob, WorkerAlloc)
for _cls in PLAIN:  # what makes plain(cls, **every field) equal cls(**every field)
    if not (dataclasses.is_dataclass(_cls) and _cls.__dataclass_params__.frozen
            and not hasattr(_cls, "__post_init__") and not hasattr(_cls, "__slots__")
            and all(f.init for f in dataclasses.fields(_cls))):
        raise TypeError(f"records.plain cannot build {_cls.__name__}")
# even_workers' defaults are WorkerAlloc's: the fields after mps_pct and their defaults
if [(f.name, f.default) for f in dataclasses.fields(WorkerAlloc)][4:] != [
        ("mps_pct", None), ("mem_limit_mb", None), ("stage", 0), ("mps_cap", None)] or \
        [f.name for f in dataclasses.fields(WorkerAlloc)][:4] != \
        ["gpu", "share", "micro_batch", "accum_steps"]:
    raise TypeError("WorkerAlloc's fields changed: update records.even_workers")
