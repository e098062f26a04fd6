#!/usr/bin/env python
"""Small DDP training on synthetic MNIST-like data using the gimbal library.

Run it through gimbal-run (standalone or inside Slurm)::

    gimbal-run --standalone --nproc 2 -- examples/train_mnistlike.py --steps 50

What it shows:
* ``launcher.config()``: sub-batch / global batch / stealing from gimbal-run;
* ``launcher.accum.GradientAccumulator``: the decided sub-batch;
* ``launcher.stealing``: LISS sampler + rebalancer when ``GIMBAL_STEALING=1``;
* ``launcher.checkpoint``: SIGUSR2 -> checkpoint -> exit 75 -> resume after
  gimbal-run's relaunch;
* ``launcher.monitor``/``launcher.report``: throughput reports (rank 0).

``--plain`` runs the same model with a bare DDP loop and none of the library
(the baseline of bench/bench_launcher_overhead.py).  No dataset download: the
data are generated from a fixed seed.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


def make_data(n, seed=1234):
    g = torch.Generator().manual_seed(seed)
    protos = torch.randn(10, 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (n,), generator=g)
    x = protos[y] + 0.8 * torch.randn(n, 1, 28, 28, generator=g)
    return x, y


def make_model(seed=0, hidden=128):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(784, hidden), nn.ReLU(), nn.Linear(hidden, 10))


def parse(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=50, help="total optimizer steps")
    p.add_argument("--samples", type=int, default=2048, help="synthetic dataset size")
    p.add_argument("--global-batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--hidden", type=int, default=128, help="hidden layer width")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="rank 0 writes a JSON summary here")
    p.add_argument("--plain", action="store_true", help="bare DDP loop, no gimbal library")
    p.add_argument("--step-sleep", type=float, default=0.0, help="extra seconds per step (tests)")
    p.add_argument("--poll-every", type=int, default=1, help="steps between checkpoint polls")
    p.add_argument("--warmup", type=int, default=5, help="steps excluded from timing")
    p.add_argument("--exit-code", type=int, default=0, help="exit with this code at the end (tests)")
    p.add_argument("--marker", default=None, help="rank 0 touches this file after its first step")
    return p.parse_args(argv)


def init_dist():
    if "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) >= 1 and not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        dist.init_process_group(backend)
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def write_out(path, summary):
    if path:
        tmp = path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(summary, fh)
        os.replace(tmp, path)


def run_plain(args, rank, world, x, y):
    model = make_model(args.seed, args.hidden)
    ddp = nn.parallel.DistributedDataParallel(model) if world > 1 else model
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    local = args.global_batch // world
    times = []
    step = 0
    while step < args.steps:
        g = torch.Generator().manual_seed(args.seed + step // (args.samples // args.global_batch))
        perm = torch.randperm(args.samples, generator=g)
        for k in range(args.samples // args.global_batch):
            if step >= args.steps:
                break
            t0 = time.perf_counter()
            idx = perm[k * args.global_batch + rank * local: k * args.global_batch + (rank + 1) * local]
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(ddp(x[idx]), y[idx])
            loss.backward()
            opt.step()
            if args.step_sleep:
                time.sleep(args.step_sleep)
            times.append(time.perf_counter() - t0)
            step += 1
    return model, step, times, {}


def run_gimbal(args, rank, world, x, y):
    import launcher
    from launcher import checkpoint
    from launcher.accum import GradientAccumulator
    from launcher.monitor import ThroughputMonitor, open_nvml, visible_device_indices
    from launcher.report import ReportWriter
    from launcher.stealing import StealingBatchSampler, StealingController

    cfg = launcher.config()
    global_batch, sub_batch = cfg.resolve_batch(args.global_batch, world_size=world)
    mine = cfg.worker(rank, world)  # this rank's record of the decision (issue #8)
    if mine is not None:  # unequal shares (LISS split) and this rank's own micro-batch
        sub_batch = min(mine["micro_batch"], global_batch)
    model = make_model(args.seed, args.hidden)
    ddp = nn.parallel.DistributedDataParallel(model) if world > 1 else model
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    sampler = StealingBatchSampler(args.samples, global_batch, rank, world, seed=args.seed,
                                   shares=cfg.shares(world))
    ctl = StealingController(sampler, enabled=cfg.stealing and world > 1)
    local_max = global_batch  # micro-batches are at most sub_batch anyway
    acc = GradientAccumulator(
        ddp, opt, lambda out, t: F.cross_entropy(out, t, reduction="sum"),
        sub_batch=sub_batch if sub_batch < local_max else None,
        forward=lambda m, inp: _timed(ctl, m, inp))

    step, resumed_from = 0, None
    state = checkpoint.load_checkpoint() if cfg.checkpoint_dir else None
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        sampler.load_state_dict(state["sampler"])
        if cfg.shares(world) is not None:  # the (new) decision's split wins over the checkpoint's
            sampler.set_shares(cfg.shares(world))
        step = resumed_from = state["step"]

    monitor = None
    if rank == 0:
        writer = ReportWriter(cfg.report_path, cfg.job_id or "standalone") if cfg.report_path else None
        monitor = ThroughputMonitor(writer, nvml=open_nvml(), devices=visible_device_indices() or None,
                                    every_steps=10, extra={"restart": cfg.restart_count,
                                                          "global_batch": global_batch,
                                                          "mps_thread_pct": cfg.mps_thread_pct,
                                                           **cfg.report_fields(world, global_batch)})
    times = []
    while step < args.steps:
        sampler.set_epoch(step // len(sampler))
        for idx in sampler:
            k = sampler.step - 1
            t0 = time.perf_counter()
            acc.step(x[idx], y[idx], normalizer=world / sampler.global_size(k))
            if ctl.end_step(len(idx)) is not None and monitor is not None:
                # stealing moved the shares: reports echo the split in force
                monitor.extra.update(cfg.report_fields(world, global_batch, sampler.shares))
            if args.step_sleep:
                time.sleep(args.step_sleep)
            dt = time.perf_counter() - t0
            times.append(dt)
            step += 1
            if monitor is not None:
                monitor.step_done(sampler.global_size(k), dt)
            if rank == 0 and args.marker and step == (resumed_from or 0) + 1:
                open(args.marker, "a").close()
            if step % args.poll_every == 0 and checkpoint.should_checkpoint():
                if monitor is not None:
                    monitor.close()
                checkpoint.checkpoint_and_exit({"model": model.state_dict(), "opt": opt.state_dict(),
                                                "sampler": sampler.state_dict(), "step": step})
            if step >= args.steps:
                break
    if monitor is not None:
        monitor.close()
    extra = {"resumed_from": resumed_from, "restart_count": cfg.restart_count,
             "global_batch": global_batch, "sub_batch": sub_batch, "stealing": cfg.stealing,
             "shares": sampler.shares, "mps_thread_pct": cfg.mps_thread_pct,
             "mps_mem_limit": cfg.mps_mem_limit}
    return model, step, times, extra


def _timed(ctl, m, inp):
    with ctl.measure():
        return m(inp)


def main(argv=None):
    args = parse(argv)
    rank, world = init_dist()
    torch.set_num_threads(1)
    x, y = make_data(args.samples)
    run = run_plain if args.plain else run_gimbal
    model, step, times, extra = run(args, rank, world, x, y)
    with torch.no_grad():
        loss = float(F.cross_entropy(model(x[:512]), y[:512]))
        param_sum = float(sum(p.double().sum() for p in model.parameters()))
    if rank == 0:
        steady = times[args.warmup:] or times
        write_out(args.out, {"steps": step, "world_size": world, "final_loss": loss,
                             "param_sum": param_sum,
                             "mean_step_s": sum(steady) / max(1, len(steady)),
                             "median_step_s": sorted(steady)[len(steady) // 2] if steady else None,
                             **extra})
        print(f"rank 0: {step} steps, loss {loss:.4f}", flush=True)
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    return args.exit_code


if __name__ == "__main__":
    sys.exit(main())
