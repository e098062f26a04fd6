"""Application models the simulator and daemon put into every snapshot.

Sources (all fitted offline by :func:`refit` and shipped as ``data/models.json``):

* **Throughput** (seed 000 eq. 3, 4, 7) — fitted to Pollux's measured profiles
  ``traces/<app>/{placements,scalability}.csv`` (petuum/adaptdl, Apache-2.0):
  ``t_comp`` by least squares on ``step_time − sync_time`` vs per-GPU batch;
  ``t_comm`` on ``sync_time`` vs GPU count, separately for one node and across
  nodes; δ by a 1-D search minimising the relative error of ``step_time``.
* **Iterations to target** — the last row of Pollux's
  ``validation-<batch>.csv`` is the iteration at which a run with that global
  batch reached the application's target; other batch sizes are interpolated
  in log-log space.  This is how a Pollux workload row (app, GPUs, batch) gets
  a length.
* **GPU memory** — the profiles carry no memory figures.  Our model (a choice,
  documented): the largest per-GPU batch Pollux profiled is taken as the
  largest that fits a 16 GiB T4 (their testbed) at 90 % use; the fixed part is
  weights + gradients + two Adam moments (16 bytes/parameter, parameter counts
  of the public reference models) plus 600 MiB of CUDA context; the rest is
  linear in the batch.
* **Interference ξ** (seed 000 eq. 5–6) — from Gavel's measured co-location
  throughputs (stanford-futuredata/gavel, MIT): ``ξ_A = isolated / co-located``
  throughput of A beside B on one V100, averaged over batch-size variants, with
  Pollux applications mapped to the nearest Gavel model (``GAVEL_MODEL``).
"""
from __future__ import annotations

import ast
import dataclasses
import json
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

import numpy as np

from policies.throughput import GpuTypeTable, InterferenceTable, MemoryProfile, ThroughputProfile

APPS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")

# Parameter counts (millions) of the reference models of Pollux's applications.
PARAMS_M = {"bert": 110.0, "cifar10": 11.2, "deepspeech2": 38.0, "imagenet": 25.6,
            "ncf": 5.0, "yolov3": 61.9}
GAVEL_MODEL = {"cifar10": "ResNet-18", "imagenet": "ResNet-50", "bert": "Transformer",
               "deepspeech2": "LM", "ncf": "Recommendation", "yolov3": "CycleGAN"}
T4_MEM_MB = 16384
DEFAULT_XI = 1.5


@dataclass(frozen=True)
class Models:
    """Everything a snapshot needs about applications."""

    profiles: Mapping[str, ThroughputProfile]
    memory: Mapping[str, MemoryProfile]
    interference: InterferenceTable
    iters_table: Mapping[str, tuple[tuple[int, int], ...]]  # app -> ((batch, iters), ...)
    # relative speed per (app, GPU type) and per type (gimbalctl/gpu_types.py)
    gpu_types: GpuTypeTable = GpuTypeTable()
    # fixed predictors a snapshot carries by name (seed 002's reference database:
    # "similarity" -> policies.similarity.SimilarityDB); see gimbalctl/similarity_db.py
    predictors: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))

    def iterations_for(self, app: str, global_batch: int) -> float:
        """Iterations to reach the app's target at ``global_batch`` (log-log interpolation)."""
        table = self.iters_table.get(app)
        if not table:
            raise KeyError(f"no iteration table for application {app!r}")
        xs = np.log([b for b, _ in table])
        ys = np.log([i for _, i in table])
        x = math.log(max(global_batch, 1))
        if x <= xs[0] or x >= xs[-1]:  # extrapolate with the end slope
            k = (0, 1) if x <= xs[0] else (-2, -1)
            slope = (ys[k[1]] - ys[k[0]]) / (xs[k[1]] - xs[k[0]])
            return float(math.exp(ys[k[0]] + slope * (x - xs[k[0]])))
        return float(math.exp(np.interp(x, xs, ys)))

    def with_xi(self, xi: float | None = None, default: float | None = None) -> "Models":
        table = InterferenceTable(self.interference.pairs,
                                  self.interference.default if default is None else default, xi)
        return dataclasses.replace(self, interference=table)

    def with_gpu_types(self, gpu_types: GpuTypeTable) -> "Models":
        return dataclasses.replace(self, gpu_types=gpu_types)


# ---------------------------------------------------------------- fitting
def _placement_shape(p: str) -> tuple[int, int]:
    digits = [int(c) for c in str(p)]
    return sum(digits), len(digits)


def fit_profile(app: str, placements, scalability) -> ThroughputProfile:
    """Fit eq. 3/4/7 parameters from Pollux profile frames (pandas)."""
    import pandas as pd

    rows = []
    for r in placements.itertuples(index=False):
        k, n = _placement_shape(r.placement)
        rows.append((k, n, r.local_bsz, r.step_time, r.sync_time))
    for r in scalability.itertuples(index=False):
        rows.append((int(r.num_replicas), int(r.num_nodes), r.local_bsz, r.step_time, r.sync_time))
    df = pd.DataFrame(rows, columns=["k", "n", "b", "step", "sync"])
    comp = (df.step - df.sync).clip(lower=1e-6)
    A = np.vstack([np.ones(len(df)), df.b.to_numpy(float)]).T
    ac, bc = np.linalg.lstsq(A, comp.to_numpy(), rcond=None)[0]
    ac, bc = max(ac, 0.0), max(bc, 1e-9)

    def fit_comm(sel):
        sub = df[sel & (df.k > 1)]
        if len(sub) == 0:
            return 0.0, 0.0
        if sub.k.nunique() < 2:
            return float(sub.sync.mean()), 0.0
        M = np.vstack([np.ones(len(sub)), (sub.k - 2).to_numpy(float)]).T
        a, b = np.linalg.lstsq(M, sub.sync.to_numpy(), rcond=None)[0]
        return max(float(a), 0.0), max(float(b), 0.0)

    ai, bi = fit_comm(df.n == 1)
    ae, be = fit_comm(df.n > 1)
    if ae == 0.0 and be == 0.0:
        ae, be = ai, bi
    best = (float("inf"), 1.0)
    for d in np.arange(1.0, 10.01, 0.05):
        p = ThroughputProfile(app, ac, bc, ai, bi, ae, be, float(d))
        pred = np.array([p.iter_time(b, k, n) for k, n, b in zip(df.k, df.n, df.b)])
        err = float(np.mean(((pred - df.step) / df.step) ** 2))
        if err < best[0]:
            best = (err, float(d))
    return ThroughputProfile(app, float(ac), float(bc), ai, bi, ae, be, round(best[1], 2),
                             int(df.b.max()))


def fit_memory(app: str, max_local_batch: int) -> MemoryProfile:
    base = PARAMS_M[app] * 1e6 * 16 / 2**20 + 600.0
    per = max(0.9 * T4_MEM_MB - base, 1.0) / max(max_local_batch, 1)
    return MemoryProfile(app, round(base, 1), round(per, 4))


def fit_interference(gavel: dict, gpu: str = "v100") -> dict[tuple[str, str], float]:
    table = gavel[gpu]
    by_model: dict[tuple[str, str], list[float]] = {}
    for key, entry in table.items():
        name, scale = ast.literal_eval(key)
        if scale != 1:
            continue
        model_a = name.split(" (")[0]
        iso = entry.get("null")
        for other, pair in entry.items():
            if other == "null" or not iso:
                continue
            oname, oscale = ast.literal_eval(other)
            if oscale != 1:
                continue
            shared = pair[0]
            if shared <= 0:
                continue
            by_model.setdefault((model_a, oname.split(" (")[0]), []).append(iso / shared)
    out = {}
    for a in APPS:
        for b in APPS:
            vals = by_model.get((GAVEL_MODEL[a], GAVEL_MODEL[b]))
            if vals:
                out[(a, b)] = round(float(np.mean(vals)), 3)
    return out


def refit(pollux_dir: Path, gavel_file: Path) -> dict:
    """Re-derive ``data/models.json`` from the raw Pollux and Gavel files."""
    import pandas as pd

    out = {"source": "fitted by gimbalctl.profiles.refit from Pollux profiles "
                     "(petuum/adaptdl, Apache-2.0) and Gavel throughputs (MIT)",
           "profiles": {}, "memory": {}, "iters": {}, "interference": [], "default_xi": DEFAULT_XI}
    for app in APPS:
        d = Path(pollux_dir) / app
        prof = fit_profile(app, pd.read_csv(d / "placements.csv"), pd.read_csv(d / "scalability.csv"))
        out["profiles"][app] = prof.__dict__
        out["memory"][app] = fit_memory(app, prof.max_local_batch).__dict__
        table = []
        for f in sorted(d.glob("validation-*.csv")):
            bs = int(f.stem.split("-")[1])
            last = pd.read_csv(f).iloc[-1]
            table.append([bs, int(last["iteration"])])
        out["iters"][app] = sorted(table)
    gavel = json.loads(Path(gavel_file).read_text())
    out["interference"] = [[a, b, x] for (a, b), x in sorted(fit_interference(gavel).items())]
    return out


# ---------------------------------------------------------------- loading
def models_from_dict(d: dict) -> Models:
    profiles = {a: ThroughputProfile(**p) for a, p in d["profiles"].items()}
    memory = {a: MemoryProfile(**m) for a, m in d["memory"].items()}
    pairs = {(a, b): float(x) for a, b, x in d["interference"]}
    table = InterferenceTable(MappingProxyType(pairs), float(d.get("default_xi", DEFAULT_XI)))
    iters = {a: tuple((int(b), int(i)) for b, i in rows) for a, rows in d["iters"].items()}
    return Models(MappingProxyType(profiles), MappingProxyType(memory), table,
                  MappingProxyType(iters))


_CACHE: Models | None = None


def default_models() -> Models:
    """The bundled fitted models (``gimbalctl/data/models.json``) with the bundled GPU-type
    speeds (``gimbalctl/data/gpu_types.json``, see :mod:`gimbalctl.gpu_types`) and the
    model-similarity reference database (:mod:`gimbalctl.similarity_db`)."""
    global _CACHE
    if _CACHE is None:
        from .gpu_types import default_table
        from .similarity_db import build_db

        text = resources.files("gimbalctl").joinpath("data/models.json").read_text()
        m = models_from_dict(json.loads(text)).with_gpu_types(default_table())
        _CACHE = dataclasses.replace(m, predictors=MappingProxyType(
            {"similarity": build_db(m.profiles)}))
    return _CACHE


if __name__ == "__main__":  # python -m gimbalctl.profiles POLLUX_TRACES GAVEL_JSON OUT
    import sys

    res = refit(Path(sys.argv[1]), Path(sys.argv[2]))
    Path(sys.argv[3]).write_text(json.dumps(res, indent=1) + "\n")
    print(f"wrote {sys.argv[3]}")
