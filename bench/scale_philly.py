"""Scale benchmark: the simulator on the Philly trace (82,247 jobs) for every policy.

    python bench/scale_philly.py [--clusters 300x8 64x8] [--policies NAME ...]
                                 [--sizes 5000 20000 0] [--timeout 120] [--min-run 0]
                                 [--predictor rf|mean|median|perfect] [--refit 3600]
                                 [--digest] [--migrations]

For each cluster and trace size (``0`` = the whole trace) every policy runs in its
own process (its peak RSS is its own; the trace is loaded there too, with the
cluster's node shape) under a wall-clock ``--timeout``.  Reported per run: wall
and CPU seconds of the simulation alone (trace loading excluded), peak RSS of the
process, policy calls, average JCT, first-start queueing and total waiting,
pre-emptions, and the cost per job (CPU ms / job) so its growth with trace size
shows.  A same-run baseline is the bare event loop over the same jobs (heap of
arrivals and completions with fixed run times, no policy, no model): "x bare" is
the simulator's cost relative to merely walking the events.

``--predictor`` fits that job-length predictor on the jobs finished so far every
``--refit`` seconds of simulated time and hands it to the policies, as ``gimbalctl
simulate --predictor`` does (seed 003's A-SRPT and §V-A baselines order by it; without
one they see no length — the simulator reveals lengths only to policies that declare
they need them — and fall back to the user's time limit, absent in this trace, so
their orders are submit order).

``--digest`` adds a column: a sha256 of the run's per-job records, sampled timeline and
summary, so a change meant to keep the decisions can be checked run against run (the
same digest before and after).  ``--migrations`` adds another: how many times the plans
resized a job onto GPUs none of which it held (a checkpoint-requeue on Slurm).

Target (issue #13): < 60 s per policy on the whole trace at 300x8 and 64x8.
"""
from __future__ import annotations

import argparse
import hashlib
import heapq
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# the shared traces folder sits beside the checkout (or beside its worktrees folder)
TRACE = next((p / "shared/traces/philly/philly.csv" for p in (ROOT.parent, ROOT.parent.parent)
              if (p / "shared/traces/philly/philly.csv").exists()),
             ROOT.parent / "shared/traces/philly/philly.csv")


def bare_event_loop(jobs, models) -> float:
    t0 = time.process_time()
    ev = [(j.submit_time, 0, j.id, j) for j in jobs]
    heapq.heapify(ev)
    done = 0
    while ev:
        t, kind, jid, j = heapq.heappop(ev)
        if kind == 0:
            dur = j.total_iters * models.profiles[j.app].iter_time(j.global_batch / j.num_gpus,
                                                                    j.num_gpus, 1, 1)
            heapq.heappush(ev, (t + dur, 1, jid, j))
        else:
            done += 1
    assert done == len(jobs)
    return time.process_time() - t0


def one(a) -> dict:
    from gimbalctl.cluster import parse_cluster
    from gimbalctl.profiles import default_models
    from gimbalctl.sim import SimConfig, simulate
    from gimbalctl.traces import load_trace
    from policies import get_policy

    models = default_models()
    nodes = parse_cluster(a.cluster)
    jobs = load_trace(a.trace, models=models, limit=a.limit or None, nodes=nodes)
    pol = get_policy(a.one)
    if a.min_run and getattr(pol, "accepts_min_run", False):
        pol = get_policy(a.one, min_run_s=a.min_run)
    moves = [0]
    if a.migrations:  # count each Plan's resizes onto GPUs none of which the job held
        inner = pol.schedule

        def counted(snap):
            plan = inner(snap)
            for r in plan.resizes():
                if not set(snap.jobs[r.job_id].allocation.gpus) & set(r.gpus):
                    moves[0] += 1
            return plan
        pol.schedule = counted
    kw = {}
    if a.predictor:
        from gimbalctl.predictor import refitter
        kw = dict(refit=refitter(a.predictor, 0), refit_every=a.refit)
    bare = bare_event_loop(jobs, models)
    w0, c0 = time.perf_counter(), time.process_time()
    res = simulate(jobs, nodes, pol, models, SimConfig(), **kw)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    s = res.summary
    # the run's results (every job's record, the sampled timeline, the summary): two runs of
    # one setting with the same digest decided the same
    digest = hashlib.sha256(repr((res._rows, res._samples, sorted(s.items()))).encode())
    return {"digest": digest.hexdigest()[:16], "jobs": len(jobs), "wall_s": wall, "cpu_s": cpu, "bare_s": bare,
            "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
            "calls": s["policy_calls"], "avg_jct_h": s["avg_jct"] / 3600,
            "avg_queue_h": s["avg_queueing"] / 3600, "avg_wait_h": s["avg_wait_total"] / 3600,
            "preemptions": s["preemptions"], "migrations": moves[0] if a.migrations else None}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", type=Path, default=TRACE)
    ap.add_argument("--clusters", nargs="+", default=["300x8", "64x8"])
    ap.add_argument("--policies", nargs="*", default=None, help="default: every registered one")
    ap.add_argument("--sizes", nargs="+", type=int, default=[0],
                    help="first N jobs of the trace (0 = all), e.g. 5000 20000 0")
    ap.add_argument("--timeout", type=float, default=120.0, help="wall seconds per run")
    ap.add_argument("--min-run", type=float, default=0.0,
                    help="min_run_s for the pre-emptive policies that take it")
    ap.add_argument("--predictor", choices=["rf", "mean", "median", "perfect"], default=None,
                    help="refit this job-length predictor on the finished jobs (seed 003)")
    ap.add_argument("--refit", type=float, default=3600.0,
                    help="seconds of simulated time between refits (with --predictor)")
    ap.add_argument("--digest", action="store_true",
                    help="add a column: sha256 of the run's per-job records, timeline and "
                         "summary (equal digests: the same results)")
    ap.add_argument("--migrations", action="store_true",
                    help="add a column: jobs the plans resized onto GPUs none of which they held "
                         "(the counting wraps the policy, so its time is in the run's)")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--cluster", help=argparse.SUPPRESS)
    ap.add_argument("--limit", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.refit <= 0:  # the arguments first: their errors do not depend on the files
        ap.error(f"--refit must be > 0 seconds, got {a.refit}")
    if not a.trace.exists():
        print(f"error: {a.trace} not found (needs the shared traces folder; --trace FILE)",
              file=sys.stderr)
        return 2
    if a.one:
        print(json.dumps(one(a)))
        return 0
    from policies.registry import names

    pols = a.policies or names()
    print(f"trace {a.trace.name}; each run in its own process, timeout {a.timeout:.0f} s; "
          f"min_run_s {a.min_run:.0f}"
          + (f"; predictor {a.predictor}, refit every {a.refit:.0f} s" if a.predictor else ""))
    print("| cluster | jobs | policy | wall (s) | CPU (s) | x bare | CPU ms/job | peak RSS (MB) "
          "| calls | avg JCT (h) | avg queue (h) | avg wait (h) | pre-emptions | < 60 s |"
          + (" digest |" if a.digest else "") + (" migrations |" if a.migrations else ""))
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if a.digest else "")
          + ("---|" if a.migrations else ""))
    dig = (lambda r: (f" {r['digest']} |" if a.digest else "")
           + (f" {r['migrations']} |" if a.migrations else ""))
    for cluster in a.clusters:
        for size in a.sizes:
            for name in pols:
                cmd = [sys.executable, __file__, "--one", name, "--cluster", cluster,
                       "--limit", str(size), "--trace", str(a.trace), "--min-run", str(a.min_run)]
                if a.migrations:
                    cmd.append("--migrations")
                if a.predictor:
                    cmd += ["--predictor", a.predictor, "--refit", str(a.refit)]
                label = f"| {cluster} | {size or 'all'} | {name} |"
                try:
                    out = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
                except subprocess.TimeoutExpired:
                    print(f"{label} > {a.timeout:.0f} (killed) | | | | | | | | | | NO |", flush=True)
                    continue
                if out.returncode:
                    err = (out.stderr.strip().splitlines() or ["?"])[-1][:80]
                    print(f"{label} failed: {err} | | | | | | | | | | NO |", flush=True)
                    continue
                r = json.loads(out.stdout.strip().splitlines()[-1])
                print(f"| {cluster} | {r['jobs']} | {name} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | "
                      f"{r['cpu_s'] / max(r['bare_s'], 1e-9):.0f} | "
                      f"{1000 * r['cpu_s'] / r['jobs']:.2f} | {r['rss_mb']:.0f} | {r['calls']} | "
                      f"{r['avg_jct_h']:.2f} | {r['avg_queue_h']:.2f} | {r['avg_wait_h']:.2f} | "
                      f"{r['preemptions']} | {'yes' if r['wall_s'] < 60 else 'NO'} |" + dig(r),
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
