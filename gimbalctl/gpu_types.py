"""GPU types: relative speed per (application, type) and memory per type.

Bundled default (``data/gpu_types.json``), derived by :func:`derive` from Gavel's
measured single-job throughputs on K80, P100 and V100 (stanford-futuredata/gavel,
MIT, ``scheduler/simulation_throughputs.json``; see ``data/traces/SOURCES.md``):

* each Pollux application is mapped to its nearest Gavel model
  (``gimbalctl.profiles.GAVEL_MODEL``, the same map the interference table uses);
* ``speed(app, type)`` = geometric mean, over that model's batch-size variants at
  scale factor 1, of ``throughput(type) / throughput(v100)``.

V100 is the reference (speed 1.0): a node of type ``v100`` runs at the fitted
throughput profile's speed.  Our choice, documented: the profiles were fitted on
Pollux's T4 testbed, and Gavel measured no T4, so a profile is taken as V100 speed;
the ``gpu`` type of an untyped cluster is 1.0 as well.  Memory per type is the
NVIDIA datasheet figure of the Gavel GPUs (K80: 12 GiB per GPU die; P100, V100:
16 GiB).

A site adds or overrides types in ``gimbal.toml``::

    [gpu_types.a100]
    speed = 2.2          # relative to the reference (all applications)
    memory_mb = 40960

Regenerate: ``python -m gimbalctl.gpu_types GAVEL_JSON gimbalctl/data/gpu_types.json``.
"""
from __future__ import annotations

import ast
import json
import math
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from policies.throughput import GpuTypeTable

REFERENCE = "v100"
GAVEL_TYPES = ("k80", "p100", "v100")
DATASHEET_MEM_MB = {"k80": 12288, "p100": 16384, "v100": 16384}


class GpuTypeError(ValueError):
    """Bad ``[gpu_types]`` entry (message names the type and the key)."""


def derive(gavel: Mapping[str, Any]) -> dict:
    """Per-application relative speeds from Gavel's isolated throughputs."""
    from .profiles import APPS, GAVEL_MODEL

    ratios: dict[tuple[str, str], list[float]] = {}
    for key, entry in gavel[REFERENCE].items():
        name, scale = ast.literal_eval(key)
        ref = entry.get("null")
        if scale != 1 or not ref:
            continue
        model = name.split(" (")[0]
        for t in GAVEL_TYPES:
            iso = gavel.get(t, {}).get(key, {}).get("null")
            if iso:
                ratios.setdefault((model, t), []).append(iso / ref)
    speeds = {}
    for app in APPS:
        row = {}
        for t in GAVEL_TYPES:
            vals = ratios.get((GAVEL_MODEL[app], t))
            if vals:
                row[t] = round(math.exp(sum(map(math.log, vals)) / len(vals)), 4)
        speeds[app] = row
    return {"source": "derived by gimbalctl.gpu_types.derive from Gavel's "
                      "simulation_throughputs.json (stanford-futuredata/gavel, MIT)",
            "reference": REFERENCE, "speeds": speeds, "memory_mb": DATASHEET_MEM_MB}


def table_from_dict(d: Mapping[str, Any]) -> GpuTypeTable:
    per_app = {(app, t): float(v) for app, row in d["speeds"].items() for t, v in row.items()}
    return GpuTypeTable(MappingProxyType(per_app), MappingProxyType({}),
                        MappingProxyType({t: int(m) for t, m in d.get("memory_mb", {}).items()}))


_CACHE: GpuTypeTable | None = None


def default_table() -> GpuTypeTable:
    """The bundled Gavel-derived table (``gimbalctl/data/gpu_types.json``)."""
    global _CACHE
    if _CACHE is None:
        text = resources.files("gimbalctl").joinpath("data/gpu_types.json").read_text()
        _CACHE = table_from_dict(json.loads(text))
    return _CACHE


def with_site_types(base: GpuTypeTable, section: Mapping[str, Any],
                    where: str = "[gpu_types]") -> GpuTypeTable:
    """``base`` plus a site's ``[gpu_types.<type>]`` entries (``speed``, ``memory_mb``).

    A site's ``speed`` applies to every application on that type and replaces the
    bundled per-application figures for it (the site measured its own GPUs)."""
    per_app = dict(base.per_app)
    per_type = dict(base.per_type)
    memory = dict(base.memory_mb)
    for gtype, body in section.items():
        name = str(gtype).strip().lower()
        if not name or not isinstance(body, Mapping):
            raise GpuTypeError(f"{where}: {gtype!r} must be a [gpu_types.<type>] table")
        for key, value in body.items():
            if key not in ("speed", "memory_mb"):
                raise GpuTypeError(f"{where}.{gtype}: unknown key {key!r} (speed, memory_mb)")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 \
                    or not math.isfinite(value):
                raise GpuTypeError(f"{where}.{gtype}.{key} must be a positive number, "
                                   f"got {value!r}")
        if "speed" in body:
            per_type[name] = float(body["speed"])
            per_app = {k: v for k, v in per_app.items() if k[1] != name}
        if "memory_mb" in body:
            memory[name] = int(body["memory_mb"])
    return GpuTypeTable(MappingProxyType(per_app), MappingProxyType(per_type),
                        MappingProxyType(memory))


if __name__ == "__main__":  # python -m gimbalctl.gpu_types GAVEL_JSON OUT
    import sys

    out = derive(json.loads(Path(sys.argv[1]).read_text()))
    Path(sys.argv[2]).write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"wrote {sys.argv[2]}")
