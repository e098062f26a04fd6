"""Cluster specs for the simulator: ``NODESxGPUS[:TYPE[:MEM_MB]]``, comma-separated
for heterogeneous clusters (e.g. ``16x4``, ``4x4:v100,4x4:k80`` or ``8x4:v100:32768,8x8:t4``).

``TYPE`` (default ``gpu``) selects the relative speed of every application on those GPUs
(:mod:`gimbalctl.gpu_types`: bundled K80/P100/V100 from Gavel's measurements, more in
``[gpu_types]``); ``MEM_MB`` defaults to the type's memory in that table, else 16384."""
from __future__ import annotations

import re
from typing import Mapping, Optional

from policies.model import Node

_SPEC = re.compile(r"^(\d+)x(\d+)(?::([A-Za-z0-9_-]+))?(?::(\d+))?$")


class ClusterSpecError(ValueError):
    pass


def parse_cluster(spec: str, default_mem_mb: int = 16384,
                  type_mem_mb: Optional[Mapping[str, int]] = None) -> tuple[Node, ...]:
    if type_mem_mb is None:
        from .gpu_types import default_table

        type_mem_mb = default_table().memory_mb
    nodes: list[Node] = []
    for part in str(spec).split(","):
        m = _SPEC.match(part.strip())
        if not m:
            raise ClusterSpecError(
                f"--cluster {spec!r}: {part!r} is not NODESxGPUS[:TYPE[:MEM_MB]] (e.g. 16x4)")
        count, gpus = int(m.group(1)), int(m.group(2))
        if count <= 0 or gpus <= 0:
            raise ClusterSpecError(f"--cluster {spec!r}: node and GPU counts must be positive")
        gtype = (m.group(3) or "gpu").lower()
        mem = int(m.group(4)) if m.group(4) else type_mem_mb.get(gtype, default_mem_mb)
        for _ in range(count):
            nodes.append(Node(f"n{len(nodes):04d}", gpus, gtype, mem))
    return tuple(nodes)
