#!/usr/bin/env python
"""LISS rebalancing benchmark (seed 004 §4.1 / §6): 2 ranks (gloo), rank 1
artificially slowed 3x per sample.

Per-sample compute is simulated by sleeping ``--per-sample-ms`` (x3 on rank
1) inside the forward pass, on top of a real small MLP forward/backward and
the DDP all-reduce, so the result does not depend on how many cores the
machine has.  Three runs of ``--steps`` steps each:

* uniform:  fixed equal shares (no stealing) - the straggler case;
* oracle:   fixed shares proportional to speed (3:1) - the balanced limit;
* stealing: uniform start, ``StealingController`` + ``Rebalancer`` every step.

Reported: steady-state median step time of each run, ratio stealing/oracle
(target <= 1.10), ratio to the analytic compute limit ``B * c * 3/4``, and
the first step from which the 3-step rolling median stays within 10 %
of the oracle (target
<= 5).  Usage: ``python bench/bench_stealing.py``.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from launcher.stealing import (Rebalancer, StealingBatchSampler, StealingController,  # noqa: E402
                               liss_loss, split_shares)


def worker(rank, world, init_file, out_dir, args, mode):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(1)
    n = args.global_batch * (args.steps + 1)
    x, y = torch.randn(n, 32, generator=g), torch.randint(0, 10, (n,), generator=g)
    cost = args.per_sample_ms / 1000.0 * (args.slowdown if rank == 1 else 1.0)
    shares = None
    if mode == "oracle":
        shares = split_shares(args.global_batch, [1.0] + [1.0 / args.slowdown] * (world - 1))
    sampler = StealingBatchSampler(n, args.global_batch, rank, world, shares=shares, seed=0)
    ctl = StealingController(sampler, Rebalancer(args.global_batch, world, smoothing=args.smoothing),
                             enabled=(mode == "stealing"))
    times, share_hist = [], []
    it = iter(sampler)
    dist.barrier()
    for step in range(args.steps):
        t0 = time.perf_counter()
        idx = next(it)
        with ctl.measure():
            out = model(x[idx])
            time.sleep(cost * len(idx))  # the simulated per-sample compute
        loss = liss_loss(F.cross_entropy(out, y[idx], reduction="sum"), args.global_batch, world)
        opt.zero_grad()
        loss.backward()
        opt.step()
        share_hist.append(list(sampler.shares))
        ctl.end_step(len(idx))
        times.append(time.perf_counter() - t0)
    dist.barrier()
    if rank == 0:
        torch.save({"times": times, "shares": share_hist}, os.path.join(out_dir, f"{mode}.pt"))
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--global-batch", type=int, default=64)
    p.add_argument("--per-sample-ms", type=float, default=1.0)
    p.add_argument("--slowdown", type=float, default=3.0)
    p.add_argument("--smoothing", type=float, default=0.5)
    p.add_argument("--steady-from", type=int, default=10)
    args = p.parse_args()
    world = 2
    res = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("uniform", "oracle", "stealing"):
            mp.spawn(worker, args=(world, os.path.join(tmp, f"init-{mode}"), tmp, args, mode),
                     nprocs=world)
            res[mode] = torch.load(os.path.join(tmp, f"{mode}.pt"))
    steady = {m: statistics.median(r["times"][args.steady_from:]) for m, r in res.items()}
    c = args.per_sample_ms / 1000.0
    analytic = args.global_batch / (1 / c + 1 / (c * args.slowdown))
    limit = steady["oracle"]
    st = res["stealing"]["times"]
    # convergence: first step from which the 3-step rolling median stays within
    # 10 % of the balanced limit (single spikes from a busy machine are ignored)
    roll = [statistics.median(st[i:i + 3]) for i in range(len(st) - 2)]
    within = [t <= 1.10 * limit for t in roll]
    reached = next((i for i in range(len(roll)) if all(within[i:])), None)
    oracle_sh = res["oracle"]["shares"][0]
    sh = res["stealing"]["shares"]  # shares in force at each step
    to_oracle = next((i for i in range(len(sh))
                      if all(max(abs(a - b) for a, b in zip(x, oracle_sh)) <= 1 for x in sh[i:])), None)
    summary = {
        "steady_step_s": steady,
        "analytic_compute_limit_s": analytic,
        "ratio_stealing_vs_oracle": steady["stealing"] / limit,
        "ratio_stealing_vs_analytic": steady["stealing"] / analytic,
        "ratio_uniform_vs_oracle": steady["uniform"] / limit,
        "steps_to_within_10pct": reached,
        "steps_to_oracle_shares": to_oracle,
        "final_shares": res["stealing"]["shares"][-1],
        "share_trace": [s[0] for s in res["stealing"]["shares"][:10]],
        "stealing_step_ms": [round(t * 1e3, 1) for t in st],
        "config": vars(args),
    }
    print(json.dumps(summary, indent=2))
    print(f"stealing steady step {steady['stealing'] * 1e3:.1f} ms vs balanced limit "
          f"{limit * 1e3:.1f} ms: ratio {summary['ratio_stealing_vs_oracle']:.3f} (target <= 1.10), "
          f"within 10% from step {reached} (target <= 5), shares within 1 sample of the "
          f"oracle's from step {to_oracle}; uniform ratio "
          f"{summary['ratio_uniform_vs_oracle']:.2f}")


if __name__ == "__main__":
    main()
