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
  Pollux applications mapped to the nearest Gavel model (``GAVEL_MODEL``).  This
  is the **time-slicing** table (co-location without MPS shares).
* **MPS interference and MPS-limited solo slowdown** — :func:`fit_mps`, fitted to
  this project's H100 measurements (``data/traces/h100-mps/{solo,pairs}.csv``,
  see ``data/traces/SOURCES.md``): per measured model the solo curve ``(c, k)``,
  sensitivity κ, pressure π and time-slicing ξ, one global γ
  (:class:`policies.throughput.MpsInterference`).  Pollux applications map to the
  nearest measured model (``H100_MODEL``); docs/interference.md.
"""
from __future__ import annotations

import ast
import dataclasses
import json
import math
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Mapping, Optional

from policies.throughput import (GpuTypeTable, InterferenceTable, MemoryProfile, MpsInterference,
                                 ThroughputProfile)

from . import npfree

APPS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")

# Parameter counts (millions) of the reference models of Pollux's applications.
PARAMS_M = {"bert": 110.0, "cifar10": 11.2, "deepspeech2": 38.0, "imagenet": 25.6,
            "ncf": 5.0, "yolov3": 61.9}
GAVEL_MODEL = {"cifar10": "ResNet-18", "imagenet": "ResNet-50", "bert": "Transformer",
               "deepspeech2": "LM", "ncf": "Recommendation", "yolov3": "CycleGAN"}
# Pollux application -> the H100-measured model nearest in architecture and GPU load
# (a choice, docs/interference.md): no Recommendation or detection model was measured.
H100_MODEL = {"cifar10": "resnet18", "imagenet": "resnet50", "bert": "tinylm",
              "deepspeech2": "lstm", "ncf": "lstm", "yolov3": "vgg16"}
T4_MEM_MB = 16384
DEFAULT_XI = 1.5
H100_DIR = Path(__file__).resolve().parent / "data" / "traces" / "h100-mps"


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
        """Iterations to reach the app's target at ``global_batch`` (log-log interpolation).

        numpy's ``np.log`` / ``np.interp`` values computed without numpy
        (:mod:`gimbalctl.npfree`: same floats, tests/test_npfree.py), so a simulate of a
        Pollux workload does not import it."""
        table = self.iters_table.get(app)
        if not table:
            raise KeyError(f"no iteration table for application {app!r}")
        xs = [npfree.log(b) for b, _ in table]
        ys = [npfree.log(i) for _, i in table]
        x = math.log(max(global_batch, 1))
        if x <= xs[0] or x >= xs[-1]:  # extrapolate with the end slope
            k = (0, 1) if x <= xs[0] else (-2, -1)
            slope = npfree.div(ys[k[1]] - ys[k[0]], xs[k[1]] - xs[k[0]])
            return float(math.exp(ys[k[0]] + slope * (x - xs[k[0]])))
        return float(math.exp(npfree.interp(x, xs, ys)))

    def with_xi(self, xi: float | None = None, default: float | None = None) -> "Models":
        t = self.interference
        table = replace(t, default=t.default if default is None else default, override=xi)
        return replace(self, interference=table)

    def with_interference(self, timeslice: str = "gavel", mechanism: str = "timeslice") -> "Models":
        """The same models with another co-location assumption.

        ``timeslice``: ``"gavel"`` (the bundled per-pair V100 table) or ``"h100"`` (the
        fitted H100 time-slicing ξ, one per model).  ``mechanism``: ``"timeslice"`` or
        ``"mps"`` (co-location without explicit shares runs both jobs as MPS clients at
        100 %)."""
        t = self.interference
        if timeslice == "h100":
            if t.mps is None:
                raise ValueError("no MPS/H100 interference model in these models")
            apps = set(self.profiles) | {a for pair in t.pairs for a in pair}
            pairs = {(a, b): round(t.mps.timeslice(a, b), 4) for a in apps for b in apps}
            t = replace(t, pairs=MappingProxyType(pairs))
        elif timeslice != "gavel":
            raise ValueError(f"timeslice source {timeslice!r} is not 'gavel' or 'h100'")
        return replace(self, interference=replace(t, mechanism=mechanism))

    def with_gpu_types(self, gpu_types: GpuTypeTable) -> "Models":
        return dataclasses.replace(self, gpu_types=gpu_types)


# ---------------------------------------------------------------- fitting
def _placement_shape(p: str) -> tuple[int, int]:
    digits = [int(c) for c in str(p)]
    return sum(digits), len(digits)


def fit_profile(app: str, placements, scalability) -> ThroughputProfile:
    """Fit eq. 3/4/7 parameters from Pollux profile frames (pandas)."""
    import numpy as np  # fitting only (refit): the simulator's path does not import numpy
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
    import numpy as np
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


def _solo_curve(p, c: float, k: float):
    return (1 + (c / p) ** k) ** (1 / k) / (1 + c ** k) ** (1 / k)


def fit_mps(solo, pairs, alias: Mapping[str, str] = H100_MODEL) -> dict:
    """Fit :class:`policies.throughput.MpsInterference` to the H100 table (pandas frames of
    ``solo.csv`` / ``pairs.csv``).  All ξ are relative to the model's no-MPS solo time.

    1. Per model, ``(c, k)`` of the solo curve by least squares on ``ln(iter/iter_noMPS)``
       over the 100/70/50/30/10 % rows.
    2. κ (per model), π (per model) and γ (global) by least squares on ``ln ξ`` of every
       MPS pair row, both directions (64 values), with the solo curves fixed.
    3. Time-slicing ξ per model: geometric mean of its no-MPS pair rows.
    Returns pure data (``apps``, ``alias``, ``gamma``, ``fit`` errors) for models.json."""
    import numpy as np
    from scipy.optimize import least_squares

    base = {r.model: float(r.iter_ms) for r in solo[solo.mps_pct.isna()].itertuples()}
    models = sorted(base)
    curve: dict[str, tuple[float, float]] = {}
    for m in models:
        d = solo[(solo.model == m) & solo.mps_pct.notna()]
        p = d.mps_pct.to_numpy(float) / 100
        y = np.log(d.iter_ms.to_numpy(float) / base[m])
        r = least_squares(lambda th: np.log(_solo_curve(p, th[0], np.exp(th[1]))) - y,
                          [0.5, math.log(2.0)], bounds=([0.01, -3.0], [1.5, 4.0]))
        curve[m] = (float(r.x[0]), float(np.exp(r.x[1])))
    obs, ts = [], {m: [] for m in models}
    for r in pairs.itertuples():
        for a, b, pa, pb, x in ((r.model_a, r.model_b, r.pct_a, r.pct_b, r.xi_a),
                                (r.model_b, r.model_a, r.pct_b, r.pct_a, r.xi_b)):
            if r.mode == "mps":
                obs.append((a, b, float(pa) / 100, float(pb) / 100, float(x)))
            else:
                ts[a].append(float(x))
    ix = {m: i for i, m in enumerate(models)}
    n = len(models)
    ls_a = np.array([math.log(_solo_curve(pa, *curve[a])) for a, _, pa, _, _ in obs])
    s_b = np.array([_solo_curve(pb, *curve[b]) for _, b, _, pb, _ in obs])
    pb_ = np.array([pb for _, _, _, pb, _ in obs])
    ia = np.array([ix[a] for a, *_ in obs])
    ib = np.array([ix[b] for _, b, *_ in obs])
    y = np.log([x for *_, x in obs])

    def resid(th):
        kap, pi, g = th[:n], th[n:2 * n], th[2 * n]
        return ls_a + kap[ia] * pi[ib] * pb_ ** g / s_b - y

    # π is only defined up to a common factor with κ: the bounds keep both in [0, 5]
    r = least_squares(resid, np.r_[np.full(n, 0.3), np.ones(n), 1.0],
                      bounds=(np.r_[np.zeros(2 * n), 0.01], np.r_[np.full(2 * n, 5.0), 6.0]))
    kap, pi, gamma = r.x[:n], r.x[n:2 * n], float(r.x[2 * n])
    err = np.exp(r.fun) - 1
    apps = {m: {"c": round(curve[m][0], 4), "k": round(curve[m][1], 4),
                "kappa": round(float(kap[ix[m]]), 4), "pi": round(float(pi[ix[m]]), 4),
                "timeslice": round(float(np.exp(np.mean(np.log(ts[m])))), 4)} for m in models}
    apps["*"] = {key: round(float(np.mean([apps[m][key] for m in models])), 4)
                 for key in ("c", "k", "kappa", "pi", "timeslice")}
    return {"source": "fitted by gimbalctl.profiles.fit_mps from data/traces/h100-mps "
                      "(this project's H100 measurements, 2026-11-22)",
            "apps": apps, "alias": dict(alias), "gamma": round(gamma, 4),
            "fit": {"mps_rows": len(obs), "max_rel_err": round(float(np.abs(err).max()), 4),
                    "median_rel_err": round(float(np.median(np.abs(err))), 4)}}


def mps_model_from_dict(d: Optional[dict]) -> Optional[MpsInterference]:
    if not d:
        return None
    apps = {m: MappingProxyType({k: float(v) for k, v in p.items()}) for m, p in d["apps"].items()}
    return MpsInterference(MappingProxyType(apps), MappingProxyType(dict(d.get("alias", {}))),
                           float(d.get("gamma", 1.0)))


def refit(pollux_dir: Path, gavel_file: Path, h100_dir: Path = H100_DIR) -> dict:
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
    out["mps"] = fit_mps(pd.read_csv(Path(h100_dir) / "solo.csv"),
                         pd.read_csv(Path(h100_dir) / "pairs.csv"))
    return out


# ---------------------------------------------------------------- loading
def models_from_dict(d: dict) -> Models:
    profiles = {a: ThroughputProfile(**p) for a, p in d["profiles"].items()}
    memory = {a: MemoryProfile(**m) for a, m in d["memory"].items()}
    pairs = {(a, b): float(x) for a, b, x in d["interference"]}
    table = InterferenceTable(MappingProxyType(pairs), float(d.get("default_xi", DEFAULT_XI)),
                              mps=mps_model_from_dict(d.get("mps")))
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
