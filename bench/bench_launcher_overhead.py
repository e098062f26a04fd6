#!/usr/bin/env python
"""Wrapper overhead of gimbal-run + the training library vs plain DDP.

Runs examples/train_mnistlike.py (same model, data, batch) alternately as

* plain:  ``torchrun --standalone --nproc-per-node N train_mnistlike.py --plain``
  (bare DDP loop), and
* gimbal: ``gimbal-run --standalone --nproc N -- train_mnistlike.py``
  (launcher.worker shim, LISS sampler, GradientAccumulator, throughput
  monitor + report writer, checkpoint poll every --poll-every steps),

and compares the median steady-state step time (warm-up steps excluded).
Target: ratio <= 1.02.  Usage: ``python bench/bench_launcher_overhead.py [--repeats 3]``.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(REPO, "examples", "train_mnistlike.py")


def run(kind, args, tmp, i):
    out = os.path.join(tmp, f"{kind}{i}.json")
    train = [EXAMPLE, "--steps", str(args.steps), "--samples", str(args.samples),
             "--global-batch", str(args.global_batch), "--hidden", str(args.hidden),
             "--warmup", str(args.warmup), "--out", out]
    if kind == "plain":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc-per-node={args.nproc}", *train, "--plain"]
    else:
        cmd = [sys.executable, "-m", "launcher.run", "--standalone", "--nproc", str(args.nproc),
               "--state-dir", os.path.join(tmp, "state"), "--job-id", f"bench{i}", "--",
               *train, "--poll-every", str(args.poll_every)]
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(out) as fh:
        return json.load(fh)["median_step_s"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--samples", type=int, default=16384)
    p.add_argument("--global-batch", type=int, default=256)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--poll-every", type=int, default=10)
    args = p.parse_args()
    res = {"plain": [], "gimbal": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            for kind in ("plain", "gimbal") if i % 2 == 0 else ("gimbal", "plain"):
                res[kind].append(run(kind, args, tmp, i))
    plain, gimbal = statistics.median(res["plain"]), statistics.median(res["gimbal"])
    best = min(res["gimbal"]) / min(res["plain"])  # least disturbed runs (shared machines)
    # runs i of both kinds are adjacent in time: their ratio cancels slow load drift
    paired = statistics.median(g / p for g, p in zip(res["gimbal"], res["plain"]))
    summary = {"plain_step_s": plain, "gimbal_step_s": gimbal, "ratio": gimbal / plain,
               "ratio_of_best_runs": best, "median_paired_ratio": paired,
               "target_ratio": 1.02, "runs": res, "config": vars(args)}
    print(json.dumps(summary, indent=2))
    print(f"step time ratio gimbal/plain = {gimbal / plain:.4f} (median of runs), "
          f"{best:.4f} (best runs), {paired:.4f} (median paired); target <= 1.02")


if __name__ == "__main__":
    main()
