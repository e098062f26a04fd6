"""Heterogeneous-cluster workloads of seed 002 §5.1: jobs as 4-tuples (model, batch, GPU
type, GPU count), sampled uniformly, arriving all at once or at a regular pace over a span
(0, 7 or 15 min as the paper).

The models are the bundled applications (each is a model of :mod:`gimbalctl.zoo`:
``gimbalctl.similarity_db.APP_MODEL``), batches {32, 64, 128, 256, 512} (the paper's set),
GPU types and counts per Table 2's pattern over the types the cluster has (counts 1-2 on
types with 2-GPU machines, 1-4 on 4-GPU ones).  The paper does not give job lengths (its
jobs train CIFAR-10 models); ours (a choice, stated): a duration drawn log-uniformly from
``duration_range`` (default 10 min to 3 h) for the job as submitted — on its requested
type and count, at its batch — turned into iterations with the simulator's own rate
model, so the same job is longer on a slower type.  Every job lets the scheduler choose its
GPU count (1 to 4) and its batch (32 to 512): which of these a policy uses is the policy's
variant (``similarity``'s ``decide``).

CSV columns (``write_csv``/``load_csv``): ``id,submit_time,app,batch_size,gpu_type,
num_gpus,iterations,min_gpus,max_gpus,min_batch,max_batch``.  ``gpu_type`` is the
submitted type (kept for the record; the policies decide the type).
"""
from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Sequence

import numpy as np

from policies.model import Job, Node

from .profiles import Models, default_models

BATCHES = (32, 64, 128, 256, 512)
COLUMNS = ("id", "submit_time", "app", "batch_size", "gpu_type", "num_gpus", "iterations",
           "min_gpus", "max_gpus", "min_batch", "max_batch")


class WorkloadError(ValueError):
    pass


def _iter_time(models: Models, app: str, gtype: str, n: int, per_node: int, batch: int) -> float:
    prof = models.profiles[app]
    local = batch / n
    s = prof.min_accum_steps(local)
    nodes = -(-n // max(per_node, 1))
    return prof.iter_time(local, n, nodes, s) / models.gpu_types.speed(app, gtype)


def generate(n_jobs: int, nodes: Sequence[Node], span_s: float = 0.0, seed: int = 0,
             models: Models | None = None, duration_range=(600.0, 10800.0)) -> list[tuple]:
    """Rows (as ``COLUMNS``) of a seeded workload for the cluster ``nodes``."""
    if n_jobs <= 0:
        raise WorkloadError(f"n_jobs must be positive, not {n_jobs}")
    models = models or default_models()
    rng = np.random.default_rng(seed)
    types: dict[str, list[int]] = {}
    for nd in nodes:
        t = types.setdefault(nd.gpu_type, [0, 0])
        t[0] += nd.num_gpus
        t[1] = max(t[1], nd.num_gpus)
    tnames = sorted(types)
    apps = sorted(models.profiles)
    lo, hi = (math.log(x) for x in duration_range)
    rows = []
    for i in range(n_jobs):
        app = apps[rng.integers(len(apps))]
        batch = BATCHES[rng.integers(len(BATCHES))]
        gtype = tnames[rng.integers(len(tnames))]
        per_node = types[gtype][1]
        counts = [c for c in (1, 2, 3, 4) if c <= min(types[gtype][0], 4 if per_node >= 4 else 2)]
        n = counts[rng.integers(len(counts))]
        dur = math.exp(rng.uniform(lo, hi))
        iters = max(1.0, round(dur / _iter_time(models, app, gtype, n, per_node, batch)))
        submit = 0.0 if span_s <= 0 or n_jobs == 1 else span_s * i / (n_jobs - 1)
        rows.append((f"job{i:04d}", round(submit, 3), app, batch, gtype, n, iters, 1, 4,
                     BATCHES[0], BATCHES[-1]))
    return rows


def write_csv(rows, path: Path) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        w.writerows(rows)


def jobs_from_rows(rows, source: str = "workload") -> list[Job]:
    jobs, seen = [], set()
    for line, r in enumerate(rows, start=2):
        d = dict(zip(COLUMNS, r))
        try:
            jid = str(d["id"])
            vals = {k: float(d[k]) for k in ("submit_time", "iterations")}
            ints = {k: int(float(d[k])) for k in ("batch_size", "num_gpus", "min_gpus", "max_gpus",
                                                   "min_batch", "max_batch")}
        except (KeyError, TypeError, ValueError) as e:
            raise WorkloadError(f"{source}:{line}: {e}") from None
        if not jid or jid in seen:
            raise WorkloadError(f"{source}:{line}: job id {jid!r} empty or repeated")
        if vals["iterations"] <= 0 or ints["num_gpus"] < 1 or ints["batch_size"] < 1:
            raise WorkloadError(f"{source}:{line}: iterations, num_gpus and batch_size must be positive")
        if not (1 <= ints["min_gpus"] <= ints["max_gpus"] and 1 <= ints["min_batch"] <= ints["max_batch"]):
            raise WorkloadError(f"{source}:{line}: need 1 <= min_gpus <= max_gpus and 1 <= min_batch <= max_batch")
        seen.add(jid)
        jobs.append(Job(jid, vals["submit_time"], ints["num_gpus"], str(d["app"]), ints["batch_size"],
                        total_iters=vals["iterations"],
                        gpu_range=(ints["min_gpus"], ints["max_gpus"]),
                        batch_range=(ints["min_batch"], ints["max_batch"])))
    return jobs


def load_csv(path: Path) -> list[Job]:
    with open(path, newline="") as f:
        r = csv.reader(f)
        header = next(r, None)
        if header is None or tuple(header) != COLUMNS:
            raise WorkloadError(f"{path}: header must be {','.join(COLUMNS)}")
        return jobs_from_rows(list(r), str(path))
