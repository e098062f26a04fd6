"""A-SRPT speed targets (issue: seed 003):

* one A-SRPT pass with 10,000 pending jobs on 1,000 nodes (8 GPUs each) under 1 s;
* predictor (100-tree random forest) fit on 100,000 history rows under 60 s on one core.

FIFO's pass on the same snapshot is timed in the same run as the baseline (ratio printed).
Times are CPU seconds of this process (``time.process_time``; the machine is shared, wall
time is printed too).

    PYTHONPATH=. nice python bench/bench_asrpt_speed.py
"""
from __future__ import annotations

import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import policies  # noqa: E402
from gimbalctl.cluster import parse_cluster  # noqa: E402
from gimbalctl.predictor import fit_rf  # noqa: E402
from gimbalctl.profiles import default_models  # noqa: E402
from policies.model import ClusterSnapshot, FinishedJob, Job, JobState, Allocation  # noqa: E402
from policies.pipeline import MODELS, configurations  # noqa: E402


def history(n, rng):
    out = []
    for i in range(n):
        g = rng.randrange(5000)
        out.append(FinishedJob(f"h{i}", f"u{g % 300}", float(i), float(i), float(i) + 100, 1,
                               "vgg19", "", f"g{g}", float(rng.randint(100, 100000)), 32))
    return out


def snapshot(n_pending, nodes, predictors, rng):
    models = default_models()
    gpus = [g for n in nodes for g in n.gpus()]
    jobs, gpu_jobs = {}, {}
    # half the GPUs busy with 1-8 GPU jobs, so placement has fragments to choose from
    k = 0
    while k < len(gpus) // 2:
        n = rng.choice([1, 1, 2, 4, 8])
        sel = tuple(gpus[k:k + n])
        k += n
        jid = f"r{k}"
        jobs[jid] = Job(jid, 0.0, len(sel), "resnet152", 4, state=JobState.RUNNING,
                        allocation=Allocation(sel, 1), start_time=0.0, group_id=f"g{k % 5000}",
                        user=f"u{k % 300}")
        for g in sel:
            gpu_jobs[g] = (jid,)
    free = tuple(g for g in gpus if g not in gpu_jobs)
    apps = sorted(MODELS)
    for i in range(n_pending):
        n = rng.choice([1, 1, 1, 2, 4, 8, 16])
        app = rng.choice([a for a in apps if configurations(a, n)])
        jobs[f"p{i}"] = Job(f"p{i}", rng.uniform(0, 3600), n, app, MODELS[app].batch,
                            user=f"u{i % 300}", group_id=f"g{rng.randrange(6000)}",
                            stages=configurations(app, n)[0])
    return ClusterSnapshot(3600.0, tuple(nodes), jobs, gpu_jobs, free, models.profiles,
                           models.memory, models.interference, predictors=predictors)


def main():
    rng = random.Random(0)
    hist = history(100_000, rng)
    t, c = time.perf_counter(), time.process_time()
    pred = fit_rf(hist, seed=0, n_jobs=1)
    fit_s, fit_c = time.perf_counter() - t, time.process_time() - c
    print(f"predictor fit on {len(hist):,} rows (100 trees, 1 core): {fit_c:.1f} s CPU, "
          f"{fit_s:.1f} s wall (target < 60 s)")
    nodes = parse_cluster("1000x8")
    snap = snapshot(10_000, nodes, {"iterations": pred}, rng)
    fifo = policies.get_policy("fifo")
    c = time.process_time()
    fifo.schedule(snap)
    fifo_s = time.process_time() - c
    for name in ("a-srpt", "spjf", "wcs-duration"):
        pol = policies.get_policy(name)
        pol.schedule(snap)  # warm the per-type caches (α bounds), as every later call is
        t, c = time.perf_counter(), time.process_time()
        plan = pol.schedule(snap)
        s, w = time.process_time() - c, time.perf_counter() - t
        print(f"{name}: one pass, 10,000 pending on 1,000 nodes: {s:.3f} s CPU, {w:.3f} s wall "
              f"({s / fifo_s:.1f}x FIFO's {fifo_s:.3f} s CPU"
              f"); {len(plan.starts())} started" + (" (target < 1 s)" if name == "a-srpt" else ""))


if __name__ == "__main__":
    main()
