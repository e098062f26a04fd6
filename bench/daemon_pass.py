"""Daemon-pass benchmark: one policy decision on a 1,000-node cluster.

    python bench/daemon_pass.py [--nodes 1000] [--gpus 8] [--running 5000] [--pending 10000]
                                [--policies NAME ...] [--repeat 3]

The state is what a large site's daemon sees: ``--nodes`` nodes of ``--gpus`` GPUs,
``--running`` jobs holding GPUs and ``--pending`` jobs waiting, all tagged with gimbal
metadata (application, batch, iterations), built into a :class:`ClusterSnapshot` with
:func:`gimbalctl.snapshot.build_snapshot` exactly as the daemon builds it.  Job sizes
(1/2/4/8 GPUs with probabilities .84/.08/.05/.03) and applications are drawn from a fixed
seed; running jobs are packed node by node, so about a tenth of the GPUs stays free.

Each policy runs in its own process (so its peak RSS is its own): the snapshot is built
once, then ``policy.schedule(snapshot)`` runs ``--repeat`` times; the median is
reported.  Targets (issue #13): < 1 s per decision and < 500 MB peak RSS; the
target column judges CPU seconds (on a dedicated machine wall ~ CPU; on a shared one
the wall clock also counts other people's work).
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SIZES = (1, 2, 4, 8)
SIZE_P = (0.84, 0.08, 0.05, 0.03)


def daemon_state(nodes: int = 1000, gpus: int = 8, running: int = 5000, pending: int = 10000,
                 seed: int = 0, now: float = 1.0e9):
    """(Slurm jobs, Slurm nodes, now) of the benchmark state (deterministic for a seed)."""
    import numpy as np

    from gimbalctl.profiles import APPS, default_models
    from gimbalctl.slurm.meta import GimbalMeta
    from gimbalctl.slurm.types import GresUse, SlurmJob, SlurmNode
    from gimbalctl.traces import BASE_BATCH

    models = default_models()
    rng = np.random.default_rng(seed)
    snodes = [SlurmNode(f"n{i:04d}", "mixed", {"gpu": gpus}) for i in range(nodes)]
    free = [gpus] * nodes
    jobs = []

    def job(k: int, n: int, state: str, alloc=()):
        app = APPS[int(rng.integers(len(APPS)))]
        batch = int(min(BASE_BATCH[app] * n, models.iters_table[app][-1][0]))
        iters = float(rng.integers(100, 200_000))
        meta = GimbalMeta(app=app, batch=batch, iters=iters, source="admin_comment")
        per_node = min(n, gpus)
        return SlurmJob(
            job_id=str(k), name=f"j{k}", user=f"u{k % 50}", state=state, reason="",
            priority=1, nice=0, submit_time=now - 10_000 + k * 0.1,
            start_time=(now - float(rng.integers(1, 5000))) if state == "RUNNING" else None,
            time_limit_s=None, partition="gpu", num_nodes=max(1, n // gpus),
            nodes=tuple(sorted({u.node for u in alloc})), req_nodes=(),
            gres_req={"gpu": per_node}, gres_alloc=tuple(alloc), comment="", admin_comment="",
            meta=meta)

    sizes = rng.choice(SIZES, size=running + pending, p=SIZE_P)
    node = 0
    for k in range(running):
        n = int(sizes[k])
        alloc = []
        need = n
        while need and node < nodes:  # pack node by node
            take = min(need, free[node])
            if take:
                first = gpus - free[node]
                alloc.append(GresUse(snodes[node].name, "gpu", take,
                                     {i: 1 for i in range(first, first + take)}))
                free[node] -= take
                need -= take
            if free[node] == 0:
                node += 1
        if need:
            raise ValueError("running jobs do not fit the cluster; use fewer")
        jobs.append(job(k, n, "RUNNING", alloc))
    for k in range(running, running + pending):
        jobs.append(job(k, int(sizes[k]), "PENDING"))
    return jobs, snodes, now


def build(nodes, gpus, running, pending, seed=0):
    from gimbalctl.profiles import default_models
    from gimbalctl.snapshot import build_snapshot

    sj, sn, now = daemon_state(nodes, gpus, running, pending, seed)
    t0 = time.perf_counter()
    res = build_snapshot(sj, sn, default_models(), now=now)
    return res.snapshot, time.perf_counter() - t0


def one(a) -> dict:
    from policies import get_policy

    snap, build_s = build(a.nodes, a.gpus, a.running, a.pending)
    policy = get_policy(a.one)
    walls, cpus, plan = [], [], None
    for _ in range(a.repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        plan = policy.schedule(snap)
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return {"policy": a.one, "build_s": build_s, "wall_s": statistics.median(walls),
            "cpu_s": statistics.median(cpus), "rss_mb": rss_mb,
            "starts": len(plan.starts()), "preempts": len(plan.preempts()),
            "shared_starts": sum(1 for s in plan.starts() if s.share_with),
            "free_gpus": len(snap.free_gpus)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--running", type=int, default=5000)
    ap.add_argument("--pending", type=int, default=10000)
    ap.add_argument("--policies", nargs="*", default=None)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=300.0,
                    help="seconds per policy process before it is reported as not finishing")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(a)))
        return 0
    from policies.registry import names

    pols = a.policies or names()
    print(f"{a.nodes} nodes x {a.gpus} GPUs, {a.running} running, {a.pending} pending; "
          f"median of {a.repeat}, each policy in its own process")
    print("| policy | decide wall (s) | decide CPU (s) | peak RSS (MB) | starts (shared) | "
          "snapshot build (s) | target < 1 CPU-s, < 500 MB |")
    print("|---|---|---|---|---|---|---|")
    bad = 0
    for name in pols:
        cmd = [sys.executable, __file__, "--one", name, "--nodes", str(a.nodes), "--gpus",
               str(a.gpus), "--running", str(a.running), "--pending", str(a.pending),
               "--repeat", str(a.repeat)]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
        except subprocess.TimeoutExpired:
            print(f"| {name} | did not finish in {a.timeout:.0f} s (process, incl. build) "
                  f"| | | | | NO |", flush=True)
            bad += 1
            continue
        if out.returncode:
            print(f"| {name} | failed: {out.stderr.strip().splitlines()[-1:]} |")
            bad += 1
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        ok = r["cpu_s"] < 1.0 and r["rss_mb"] < 500
        bad += not ok
        print(f"| {name} | {r['wall_s']:.3f} | {r['cpu_s']:.3f} | {r['rss_mb']:.0f} | "
              f"{r['starts']} ({r['shared_starts']}) | {r['build_s']:.2f} | "
              f"{'yes' if ok else 'NO'} |", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
