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
once, then the policy decides ``--repeat`` times as the daemon has it decide
(:func:`gimbalctl.snapshot.decide`: ``policy.schedule(snapshot)`` with the objects alive
at the call frozen out of the cyclic collector's reach); the median is
reported, and the first call's CPU apart (the elastic policies' model rates are memoised
across calls on the same models, so later calls can be cheaper).  ``--steady`` times the
pass after the policy's own first plan took effect (:func:`apply_plan`: packed sets for the
packing hosts' GIMBAL coordination, resized shares for the elastic policies).  Targets (issue #13): < 1 s per decision and < 500 MB peak RSS; the
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
    # synthetic jobs without time limits: their iters are the lengths (the site rule that
    # trusts user claims, docs/daemon.md "Duration estimates")
    res = build_snapshot(sj, sn, default_models(), now=now, estimates="bounded")
    return res.snapshot, time.perf_counter() - t0


def apply_plan(snap, plan, dt: float = 30.0):
    """The snapshot one daemon cycle later if every action of ``plan`` took effect (starts
    and resizes hold their GPUs with the plan's records, pre-empted jobs wait): the steady
    state of a cluster the policy already runs, with its packed sets and resized shares."""
    import dataclasses
    from types import MappingProxyType

    from policies.model import Allocation, JobState
    from policies.plan import PreemptJob

    jobs = dict(snap.jobs)
    now = snap.now + dt
    for a in plan.actions:
        j = jobs[a.job_id]
        if isinstance(a, PreemptJob):
            jobs[a.job_id] = dataclasses.replace(
                j, state=JobState.SUSPENDED, allocation=None, iter_rate=0.0, as_of=snap.now,
                completed_iters=snap.completed(j), preemptions=j.preemptions + 1, run_start=None)
            continue
        alloc = (Allocation.from_workers(a.workers, a.global_batch) if a.workers else
                 Allocation(a.gpus, a.sub_batch, a.accum_steps, a.mps_pct,
                            global_batch=a.global_batch))
        started = not j.running
        jobs[a.job_id] = dataclasses.replace(
            j, state=JobState.RUNNING, allocation=alloc, as_of=snap.now,
            completed_iters=snap.completed(j), iter_rate=0.0,
            start_time=j.start_time if j.start_time is not None else snap.now,
            run_start=snap.now if started else j.run_start)
    gj: dict = {}
    for j in jobs.values():
        if j.running:
            for g in j.allocation.gpus:
                gj[g] = gj.get(g, ()) + (j.id,)
    free = tuple(g for n in snap.nodes for g in n.gpus() if g not in gj)
    return dataclasses.replace(snap, now=now, jobs=MappingProxyType(jobs),
                               gpu_jobs=MappingProxyType(gj), free_gpus=free, free_index=None,
                               waiting_ids=tuple(i for i, j in jobs.items() if j.waiting))


def one(a) -> dict:
    from gimbalctl.snapshot import decide
    from policies import get_policy

    snap, build_s = build(a.nodes, a.gpus, a.running, a.pending)
    policy = get_policy(a.one)
    if a.steady:
        snap = apply_plan(snap, get_policy(a.one).schedule(snap))
    walls, cpus, plain, plan = [], [], [], None
    for _ in range(a.repeat):
        if a.plain:  # the baseline, interleaved: the bare call without the frozen collector
            c0 = time.process_time()
            policy.schedule(snap)
            plain.append(time.process_time() - c0)
        w0, c0 = time.perf_counter(), time.process_time()
        plan = decide(policy, snap)  # as the daemon calls it
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return {"policy": a.one, "build_s": build_s, "wall_s": statistics.median(walls),
            "cpu_s": statistics.median(cpus), "first_cpu_s": cpus[0], "rss_mb": rss_mb,
            "plain_cpu_s": statistics.median(plain) if plain else None,
            "resizes": len(plan.resizes()),
            "starts": len(plan.starts()), "preempts": len(plan.preempts()),
            "shared_starts": sum(1 for s in plan.starts() if s.share_with),
            "free_gpus": len(snap.free_gpus)}


def _ratio(cpu: float, bare: float) -> str:
    """decide / bare, or "n/a" where the bare call took no measurable CPU time (a tiny
    state: ``time.process_time`` has a resolution)."""
    return f"{cpu / bare:.2f}" if bare > 0 else "n/a"


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
    ap.add_argument("--steady", action="store_true",
                    help="time the pass after the policy's own first pass took effect "
                         "(packed sets, resized shares) instead of the first pass")
    ap.add_argument("--plain", action="store_true",
                    help="also time the bare policy.schedule(snapshot), interleaved with the "
                         "daemon's call, and report its CPU and the ratio (the baseline of "
                         "gimbalctl.snapshot.decide)")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(a)))
        return 0
    from policies.registry import names

    pols = a.policies or names()
    print(f"{a.nodes} nodes x {a.gpus} GPUs, {a.running} running, {a.pending} pending; "
          f"median of {a.repeat}, each policy in its own process"
          + ("; steady state (after the policy's own first pass)" if a.steady else ""))
    print("| policy | decide wall (s) | decide CPU (s) | first call CPU (s) | peak RSS (MB) | "
          "starts (shared) | resizes | preempts | snapshot build (s) | "
          "target < 1 CPU-s, < 500 MB |" + (" bare call CPU (s) | decide / bare |" if a.plain else ""))
    print("|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if a.plain else ""))
    bad = 0
    for name in pols:
        cmd = [sys.executable, __file__, "--one", name, "--nodes", str(a.nodes), "--gpus",
               str(a.gpus), "--running", str(a.running), "--pending", str(a.pending),
               "--repeat", str(a.repeat)] + (["--steady"] if a.steady else []) + \
            (["--plain"] if a.plain else [])
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
        except subprocess.TimeoutExpired:
            print(f"| {name} | did not finish in {a.timeout:.0f} s (process, incl. build) "
                  f"| | | | | | | | NO |" + (" | |" if a.plain else ""), flush=True)
            bad += 1
            continue
        if out.returncode:
            print(f"| {name} | failed: {out.stderr.strip().splitlines()[-1:]} |")
            bad += 1
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        ok = r["cpu_s"] < 1.0 and r["rss_mb"] < 500
        bad += not ok
        print(f"| {name} | {r['wall_s']:.3f} | {r['cpu_s']:.3f} | {r['first_cpu_s']:.3f} | "
              f"{r['rss_mb']:.0f} | {r['starts']} ({r['shared_starts']}) | {r['resizes']} | "
              f"{r['preempts']} | {r['build_s']:.2f} | {'yes' if ok else 'NO'} |"
              + (f" {r['plain_cpu_s']:.3f} | {_ratio(r['cpu_s'], r['plain_cpu_s'])} |"
                 if a.plain else ""), flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
