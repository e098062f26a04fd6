"""Scale benchmark: ``gimbalctl simulate`` on the full Philly trace (82k jobs).

    python bench/scale_philly.py [--cluster 300x8] [--policies fifo srtf] [--limit N]

Reports wall time per policy (target: < 60 s each on one core) and, as a
same-run baseline, the ratio to a bare event loop over the same jobs (heap of
arrivals and completions with fixed run times, no policy, no model): how much
the simulator's scheduling work costs on top of merely walking the events.
"""
from __future__ import annotations

import argparse
import heapq
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gimbalctl.cluster import parse_cluster  # noqa: E402
from gimbalctl.profiles import default_models  # noqa: E402
from gimbalctl.sim import SimConfig, simulate  # noqa: E402
from gimbalctl.traces import load_trace  # noqa: E402
from policies import get_policy  # noqa: E402


def bare_event_loop(jobs, models) -> float:
    t0 = time.perf_counter()
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
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", type=Path, default=ROOT.parent / "shared/traces/philly/philly.csv")
    ap.add_argument("--cluster", default="300x8")
    ap.add_argument("--policies", nargs="+", default=["fifo", "srtf"])
    ap.add_argument("--limit", type=int, default=None)
    a = ap.parse_args()
    if not a.trace.exists():
        print(f"error: {a.trace} not found (needs the shared traces folder; --trace FILE)",
              file=sys.stderr)
        return 2
    models = default_models()
    t0 = time.perf_counter()
    jobs = load_trace(a.trace, models=models, limit=a.limit)
    load_s = time.perf_counter() - t0
    base = bare_event_loop(jobs, models)
    print(f"{len(jobs)} jobs, cluster {a.cluster}; trace load {load_s:.1f} s; "
          f"bare event loop {base:.2f} s")
    print("| policy | wall (s) | × bare loop | policy calls | avg JCT (h) | avg queue (h) | target < 60 s |")
    print("|---|---|---|---|---|---|---|")
    for name in a.policies:
        t0 = time.perf_counter()
        res = simulate(jobs, parse_cluster(a.cluster), get_policy(name), models, SimConfig())
        wall = time.perf_counter() - t0
        s = res.summary
        print(f"| {name} | {wall:.1f} | {wall / base:.0f} | {s['policy_calls']} | "
              f"{s['avg_jct'] / 3600:.2f} | {s['avg_queueing'] / 3600:.2f} | "
              f"{'yes' if wall < 60 else 'NO'} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
