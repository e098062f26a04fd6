"""Frozen records the simulator makes at every call, built without the generated
dataclass ``__init__``.

A frozen dataclass's ``__init__`` sets each field with ``object.__setattr__`` (~5 µs for a
:class:`~policies.model.ClusterSnapshot` of 19 fields): the largest fixed cost of a simulator
call.  For a class with no ``__post_init__``, no ``init=False`` field and no slots (checked
here at import) an instance is nothing but its attribute dict, so filling that dict with
every field, in field order, makes an object equal to ``cls(**fields)`` in every respect
(fields, ``==``, ``repr``, hash, pickling, ``dataclasses.replace``).
tests/test_sim_records.py checks it against the dataclass constructor at every call of
simulator runs.

Such an instance has a dict of its own (~580 bytes for a FinishedJob against ~230 when the
constructor fills the shared-key one): use it for records that live short (a snapshot and its
parts), not for ones kept all run (the history).
"""
from __future__ import annotations

import dataclasses

from policies.model import (ClusterSnapshot, FinishedJob, GpuChanges, JobChanges, WaitingQueue,
                            WorkerAlloc)

_new = object.__new__


def plain(cls, **fields):
    """``cls(**fields)`` for a class of :data:`PLAIN`; ``fields`` names every field, in
    field order."""
    obj = _new(cls)
    obj.__dict__.update(fields)
    return obj


PLAIN = (ClusterSnapshot, WaitingQueue, GpuChanges, JobChanges, FinishedJob, WorkerAlloc)
for _cls in PLAIN:  # what makes plain(cls, **every field) equal cls(**every field)
    if not (dataclasses.is_dataclass(_cls) and _cls.__dataclass_params__.frozen
            and not hasattr(_cls, "__post_init__") and not hasattr(_cls, "__slots__")
            and all(f.init for f in dataclasses.fields(_cls))):
        raise TypeError(f"records.plain cannot build {_cls.__name__}")
