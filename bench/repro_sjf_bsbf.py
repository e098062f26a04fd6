#!/usr/bin/env python
"""Reproduce seed 000 (Luo et al.) Tables III/IV and Figure 6(b) in the simulator.

    python bench/repro_sjf_bsbf.py [--quick] [--out docs/sjf_bsbf_results.md] [--jobs N]

Setting (paper §VI-A): 16 nodes × 4 GPUs, 60 s scheduling interval, policies
FIFO, SJF, Tiresias, SJF-FFS, SJF-BSBF (Pollux is not implemented here).

Workloads:

* **240 jobs** — the eight 240-job Pollux workloads
  ``traces/pollux/workloads-1.5/workload-{1..8}.csv`` (Philly busiest-period
  arrivals annotated with Pollux's six applications, GPUs and batch sizes;
  iterations from Pollux's validation profiles via ``load_trace``).
* **480 jobs** — the paper's Table IV doubles the job count over the same
  period.  We build workload k of it by merging 240-job workloads k and
  k mod 8 + 1 (ids prefixed ``a-``/``b-``): same arrival window, twice the
  arrival rate, the same six applications and GPU/batch distribution.

Metrics per the paper's tables: average JCT and average queueing time (first
start − submit), and ours beside them: average total waiting (JCT − run time,
including the waits after pre-emptions; the paper does not report it), in hours over all, large (> 4 GPUs) and small (≤ 4 GPUs)
jobs, pooled over the workloads (each workload has the same job count, so
this equals the mean of per-workload means).  ξ sweep (Fig. 6(b)): every
co-located pair's ξ overridden to 1.0 … 2.0 (``SimConfig.xi``) on the 240-job
workloads, SJF-FFS vs SJF-BSBF (SJF as the no-sharing reference).

``--quick`` uses workload 1 only (480: 1+2) and ξ ∈ {1.0, 1.5, 2.0}.
Needs the shared data directory (``../shared`` from the repo root, or
``$GIMBAL_SHARED``); exits with an error naming the path if it is missing.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# key -> (registry name, options).  "sjf-bf" (SJF with backfilling, not in the
# paper) is SJF-BSBF with sharing switched off: same order, same passing rule.
POLICY_SPECS = {"fifo": ("fifo", {}), "sjf": ("sjf", {}), "sjf-bf": ("sjf", {"backfill": True}),
                "tiresias": ("tiresias", {}), "sjf-ffs": ("sjf-ffs", {}),
                "sjf-bsbf": ("sjf-bsbf", {})}
POLICIES = list(POLICY_SPECS)
SHARING = ("sjf-ffs", "sjf-bsbf")
LABEL = {"fifo": "FIFO", "sjf": "SJF", "sjf-bf": "SJF+backfill (ours)", "tiresias": "Tiresias",
         "sjf-ffs": "SJF-FFS", "sjf-bsbf": "SJF-BSBF"}
XI_FULL = [1.0, 1.1, 1.25, 1.4, 1.5, 1.6, 1.75, 2.0]
XI_QUICK = [1.0, 1.5, 2.0]
CLUSTER = "16x4"
INTERVAL = 60.0
PREEMPT_COST = 30.0  # s, Tiresias restore cost (gimbalctl simulate's default)

# Paper numbers (hours) for side-by-side display: Table III (240) and IV (480).
PAPER = {
    240: {"fifo": (2.34, 3.92, 2.13, 1.65, 2.17, 1.58), "sjf": (1.25, 3.50, 0.94, 0.56, 1.76, 0.39),
          "tiresias": (1.51, 3.48, 1.23, 0.81, 1.73, 0.68),
          "sjf-ffs": (1.23, 4.29, 0.81, 0.18, 0.98, 0.07),
          "sjf-bsbf": (1.01, 3.38, 0.68, 0.14, 0.89, 0.03)},
    480: {"fifo": (7.52, 10.06, 7.08, 0.73, 4.06, 0.21), "sjf": (2.55, 7.00, 1.90, 1.87, 5.35, 1.35),
          "tiresias": (5.09, 8.25, 4.59, 4.41, 6.60, 4.04),
          "sjf-ffs": (1.89, 8.12, 0.99, 0.73, 4.06, 0.21),
          "sjf-bsbf": (1.57, 6.13, 0.88, 0.69, 3.62, 0.21)},
}


def shared_dir() -> Path:
    p = Path(os.environ.get("GIMBAL_SHARED", ROOT.parent / "shared"))
    w = p / "traces" / "pollux" / "workloads-1.5"
    if not w.is_dir():
        sys.exit(f"repro_sjf_bsbf: data not found: {w} (set GIMBAL_SHARED to the shared "
                 f"directory holding traces/pollux/workloads-1.5)")
    return p


def load_workload(size: int, k: int):
    from gimbalctl.profiles import default_models
    from gimbalctl.traces import load_trace

    d = shared_dir() / "traces" / "pollux" / "workloads-1.5"
    models = default_models()
    a = load_trace(d / f"workload-{k}.csv", kind="pollux", models=models)
    if size == 240:
        return a
    k2 = k % 8 + 1
    b = load_trace(d / f"workload-{k2}.csv", kind="pollux", models=models)
    jobs = [replace(j, id=f"a-{j.id}") for j in a] + [replace(j, id=f"b-{j.id}") for j in b]
    return sorted(jobs, key=lambda j: (j.submit_time, j.id))


class _Recorder:
    """Passes plans through; records how shared starts were configured."""

    def __init__(self, inner):
        self.inner, self.name, self.preemptive = inner, inner.name, inner.preemptive
        self.shared_accum: list[int] = []
        self.shared_nodes: list[int] = []
        self.no_benefit: set[str] = set()

    def schedule(self, snap):
        plan = self.inner.schedule(snap)
        for a in plan.starts():
            if a.share_with:
                self.shared_accum.append(a.accum_steps)
                self.shared_nodes.append(len({g.node for g in a.gpus}))
        for jid, r in plan.reasons.items():
            if r.code.value == "wait_no_share_benefit":
                self.no_benefit.add(jid)
        return plan


def run_one(task):
    """(size, workload, policy key, xi) -> per-job frame, sharing stats, wall time."""
    size, k, key, xi = task
    import policies
    from gimbalctl.cluster import parse_cluster
    from gimbalctl.profiles import default_models
    from gimbalctl.sim import SimConfig, simulate

    jobs = load_workload(size, k)
    cfg = SimConfig(interval=INTERVAL, seed=0, xi=xi, preempt_cost=PREEMPT_COST)
    name, opts = POLICY_SPECS[key]
    pol = _Recorder(policies.get_policy(name, **opts))
    t0 = time.perf_counter()
    res = simulate(jobs, parse_cluster(CLUSTER), pol, default_models(), cfg)
    wall = time.perf_counter() - t0
    df = res.jobs[["id", "num_gpus", "jct", "queueing", "wait_total", "shared"]].copy()
    df["workload"] = k
    stats = {"accum": pol.shared_accum, "nodes": pol.shared_nodes,
             "no_benefit_jobs": len(pol.no_benefit), "util": res.summary.get("gpu_utilization")}
    return task, df, stats, wall


def table(frames: dict, size: int) -> str:
    import pandas as pd

    lines = [f"### {size} jobs (hours; measured, paper in parentheses)", "",
             "| Metric | Policy | All | Large (>4 GPUs) | Small (≤4 GPUs) | shared jobs |",
             "|---|---|---|---|---|---|"]
    for metric, col, off in (("Average JCT", "jct", 0), ("Average queueing", "queueing", 3),
                             ("Average total waiting (ours)", "wait_total", None)):
        for pol in POLICIES:
            df = frames[pol]
            large = df.num_gpus > 4
            vals = [df[col].mean(), df[col][large].mean(), df[col][~large].mean()]
            paper = PAPER[size].get(pol) if off is not None else None
            cells = [f"{v / 3600:.2f} ({p:.2f})" if paper else f"{v / 3600:.2f} (—)"
                     for v, p in zip(vals, paper[off:off + 3] if paper else vals)]
            lines.append(f"| {metric} | {LABEL[pol]} | " + " | ".join(cells)
                         + f" | {df.shared.mean() * 100:.0f}% |")
    nwl = frames[POLICIES[0]].workload.nunique()
    lines.append("")
    lines.append(f"Pooled over {nwl} workload(s), {len(frames[POLICIES[0]]) // nwl} jobs each.")
    per = pd.DataFrame({LABEL[p]: frames[p].groupby("workload").jct.mean() / 3600 for p in POLICIES})
    lines += ["", f"Average JCT per workload ({size} jobs, hours):", "",
              "| workload | " + " | ".join(per.columns) + " |",
              "|---|" + "---|" * len(per.columns)]
    for k, row in per.iterrows():
        lines.append(f"| {k} | " + " | ".join(f"{v:.2f}" for v in row) + " |")
    return "\n".join(lines)


def sharing_table(stats: dict, sizes) -> str:
    """How the sharing policies configured their shared starts (table ξ)."""
    lines = ["### Sharing decisions (fitted ξ table)", "",
             "| jobs | policy | shared starts | mean accum. steps | starts with ≥ 8 steps | "
             "mean nodes spanned | jobs ever refused by Thm 1 |",
             "|---|---|---|---|---|---|---|"]
    for size in sizes:
        for pol in SHARING:
            acc = [a for st in stats[(size, pol)] for a in st["accum"]]
            nodes = [n for st in stats[(size, pol)] for n in st["nodes"]]
            nb = sum(st["no_benefit_jobs"] for st in stats[(size, pol)])
            n = max(len(acc), 1)
            lines.append(f"| {size} | {LABEL[pol]} | {len(acc)} | {sum(acc) / n:.1f} | "
                         f"{sum(a >= 8 for a in acc) / n * 100:.0f}% | {sum(nodes) / n:.1f} | {nb} |")
    return "\n".join(lines)


def xi_table(frames: dict, xis) -> str:
    lines = ["### ξ sweep (240 jobs; all co-located pairs forced to ξ; avg JCT in hours)", "",
             "SJF+backfill does not share, so its value does not depend on ξ.", "",
             "| ξ | SJF+backfill | SJF-FFS | SJF-BSBF | BSBF vs FFS | FFS shared | BSBF shared |",
             "|---|---|---|---|---|---|---|"]
    for xi in xis:
        s = frames[("sjf-bf", xi)].jct.mean() / 3600
        f = frames[("sjf-ffs", xi)].jct.mean() / 3600
        b = frames[("sjf-bsbf", xi)].jct.mean() / 3600
        lines.append(f"| {xi:.2f} | {s:.2f} | {f:.2f} | {b:.2f} | {(b - f) / f * 100:+.1f}% | "
                     f"{frames[('sjf-ffs', xi)].shared.mean() * 100:.0f}% | "
                     f"{frames[('sjf-bsbf', xi)].shared.mean() * 100:.0f}% |")
    return "\n".join(lines)


def main(argv=None) -> int:
    import pandas as pd

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="workload 1 only, 3 ξ points")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "sjf_bsbf_results.md")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                    help="worker processes")
    args = ap.parse_args(argv)
    shared_dir()
    wls = [1] if args.quick else list(range(1, 9))
    xis = XI_QUICK if args.quick else XI_FULL
    tasks = [(size, k, p, None) for size in (240, 480) for k in wls for p in POLICIES]
    tasks += [(240, k, p, xi) for xi in xis for k in wls for p in SHARING]
    t0 = time.perf_counter()
    results, walls, stats = {}, {}, {}
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as ex:
        for task, df, st, wall in ex.map(run_one, tasks):
            results[task] = df
            walls[task] = wall
            if task[3] is None:
                stats.setdefault((task[0], task[2]), []).append(st)
            print(f"  {task[0]} jobs wl{task[1]} {task[2]:9s} xi={task[3]}: "
                  f"avg JCT {df.jct.mean() / 3600:.2f} h ({wall:.1f}s)", file=sys.stderr)
    total = time.perf_counter() - t0

    def pooled(size, pol, xi=None):
        if pol not in SHARING:
            xi = None  # no co-location: ξ plays no part
        return pd.concat([results[(size, k, pol, xi)] for k in wls], ignore_index=True)

    parts = ["# SJF-BSBF reproduction: generated results", "",
             f"Generated by `python bench/repro_sjf_bsbf.py{' --quick' if args.quick else ''}` "
             f"({len(tasks)} simulations, {total:.0f} s wall on {args.jobs} worker(s)).  "
             f"Cluster {CLUSTER}, interval {INTERVAL:.0f} s, Tiresias restore cost "
             f"{PREEMPT_COST:.0f} s, ξ from the fitted Gavel table (default 1.5 for "
             f"unknown pairs) unless swept.  Workloads: {wls}.", ""]
    for size in (240, 480):
        parts += [table({p: pooled(size, p) for p in POLICIES}, size), ""]
    parts += [sharing_table(stats, (240, 480)), ""]
    parts += [xi_table({(p, xi): pooled(240, p, xi) for xi in xis
                        for p in ("sjf-bf", "sjf-ffs", "sjf-bsbf")}, xis), ""]
    sim_wall = {p: sum(w for t, w in walls.items() if t[2] == p and t[3] is None) for p in POLICIES}
    parts += ["Simulation wall time per policy (s, tables only): "
              + ", ".join(f"{LABEL[p]} {w:.1f}" for p, w in sim_wall.items()), ""]
    text = "\n".join(parts)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    print(f"\nwrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
