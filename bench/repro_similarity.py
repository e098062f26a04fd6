#!/usr/bin/env python
"""Reproduce seed 002 (Thanapol et al., Appl. Sci. 2024) §6 in the simulator.

    python bench/repro_similarity.py [--quick] [--out docs/similarity_results.md]
    python bench/repro_similarity.py --only themis --out docs/similarity_results.md
        # runs only the named policies in the main setting (all sizes, seeds, 3-min rounds)
        # and writes their rows into a generated section of the existing results file

Setting (§5, adapted to the GPU types gimbal has data for — K80, P100, V100 from Gavel's
measurements; the paper's six Grid'5000 types are not available):

* cluster ``1x4:v100,1x4:p100,2x4:k80`` (16 GPUs, several types, few GPUs each, as Table 2);
* workloads from :mod:`gimbalctl.hetero_workload`: 25/50/100/200 jobs drawn uniformly
  (model, batch, type, count), all arriving at 0 or evenly over 0-7 / 0-15 min, seeded;
* rounds of 3, 6, 12 and 30 min; every variant of Table 3 (``decide`` gpu / gpu_ngpu /
  gpu_ngpu_bs, each with and without re-scheduling ``cd`` and packing ``jp``) and the
  baselines fifo, isolation (DRF), gavel-mtd (min total duration), tiresias (max-min) and
  themis (finish-time fairness: seed 001's subset of Themis, type-unaware, ``--only themis``);
* Fig. 7: the ``_cd`` variants of Fig. 8 and every baseline (themis included) with the jobs
  arriving evenly over 0-7 and 0-15 min, every size, 3-min rounds;
* metrics eq. 4-7: makespan, average JCT, average waiting time (first start - arrival),
  GPU utilisation; mean over seeds (the paper repeats ten times; ``--seeds``).

Checkpoint/restore cost on re-allocation: 10 s (§4.2: "a few seconds each time").
Nothing here is tuned to the paper's numbers.
"""
from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CLUSTER = "1x4:v100,1x4:p100,2x4:k80"
PREEMPT_COST = 10.0
DECIDES = ("gpu", "gpu_ngpu", "gpu_ngpu_bs")
BASELINES = ("fifo", "isolation", "gavel-mtd", "tiresias")
FIG7_SPANS = (420.0, 900.0)  # Fig. 7's other two arrival scenarios (0-7 and 0-15 min)
# paper §6.1 (25 jobs, all at once, 3-min rounds): makespan -33 % (gpu_ngpu) and -29 %
# (gpu_ngpu_bs) with re-scheduling; packing a further -16 % makespan at 200 jobs
# (gpu_ngpu_bs_cd_jp vs _cd), -5 % in the abstract.
PAPER = {"cd_makespan": "-33 % (gpu_ngpu), -29 % (gpu_ngpu_bs), 25 jobs",
         "jp_makespan": "-5 % (abstract) to -16 % (200 jobs, gpu_ngpu_bs)"}


def variant_name(decide, cd, jp):
    return f"similarity_{decide}" + ("_cd" if cd else "") + ("_jp" if jp else "")


def run_one(args):
    n, span, rnd, seed, pol = args
    from gimbalctl.cluster import parse_cluster
    from gimbalctl.hetero_workload import generate, jobs_from_rows
    from gimbalctl.profiles import default_models
    from gimbalctl.sim.engine import SimConfig, simulate
    import policies

    models = default_models()
    nodes = parse_cluster(CLUSTER)
    jobs = jobs_from_rows(generate(n, nodes, span_s=span, seed=seed, models=models))
    if pol.startswith("similarity_"):
        parts = pol[len("similarity_"):].split("_")
        cd, jp = "cd" in parts, "jp" in parts
        decide = "_".join(p for p in parts if p not in ("cd", "jp"))
        policy = policies.get_policy("similarity", decide=decide, cd=cd, jp=jp, round_length=rnd)
    elif pol in ("isolation", "gavel-mtd"):
        policy = policies.get_policy(pol, round_length=rnd)
    else:
        policy = policies.get_policy(pol)
    cfg = SimConfig(interval=rnd, seed=seed, preempt_cost=PREEMPT_COST)
    t0 = time.process_time()
    res = simulate(jobs, nodes, policy, models, cfg)
    s = res.summary
    return (n, span, rnd, seed, pol, s["makespan"], s["avg_jct"], s["avg_queueing"],
            s["gpu_utilization"], s["preemptions"], s["shared_jobs"], time.process_time() - t0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="25/100 jobs, 1 seed, 3/30-min rounds")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--only", default=None,
                    help="comma-separated policies: run only these in the main setting and write "
                         "their rows into a section of the existing --out file")
    a = ap.parse_args(argv)
    import pandas as pd
    if a.only:
        return run_only(a, [p.strip() for p in a.only.split(",") if p.strip()])

    sizes = (25, 100) if a.quick else (25, 50, 100, 200)
    seeds = range(1 if a.quick else a.seeds)
    variants = [variant_name(d, cd, jp) for d in DECIDES for cd in (False, True) for jp in (False, True)]
    main_runs = [(n, 0.0, 180.0, s, p) for n in sizes for s in seeds for p in variants + list(BASELINES)]
    rounds = (180.0, 1800.0) if a.quick else (180.0, 360.0, 720.0, 1800.0)
    sweep_pols = ["similarity_gpu_ngpu_bs", "similarity_gpu_ngpu_bs_cd", "similarity_gpu_ngpu_bs_cd_jp"]
    sweep_runs = [(50, span, r, s, p) for span in (0.0, 420.0, 900.0) for r in rounds
                  for s in seeds for p in sweep_pols]
    # Fig. 7: makespan against the baselines with arrivals spread over 7 and 15 minutes
    fig7_pols = ["similarity_gpu_ngpu_cd", "similarity_gpu_ngpu_bs_cd",
                 "similarity_gpu_ngpu_bs_cd_jp", *BASELINES, "themis"]
    fig7_runs = [(n, span, 180.0, s, p) for n in sizes for span in FIG7_SPANS for s in seeds
                 for p in fig7_pols]
    runs = list(dict.fromkeys(main_runs + sweep_runs + fig7_runs))
    t0 = time.time()
    with ProcessPoolExecutor(a.workers) as ex:
        rows = list(ex.map(run_one, runs, chunksize=1))
    cols = ["jobs", "span_s", "round_s", "seed", "policy", "makespan", "avg_jct", "avg_wait",
            "utilisation", "preemptions", "shared_jobs", "cpu_s"]
    df = pd.DataFrame(rows, columns=cols)
    out = render(df, time.time() - t0, a)
    if a.out:
        a.out.write_text(out)
    print(out)
    return 0


ONLY_BEGIN = "<!-- begin: generated by bench/repro_similarity.py --only; do not edit -->"
ONLY_END = "<!-- end: --only -->"


def run_only(a, pols) -> int:
    """The main setting (all jobs at 0, 3-min rounds, every size and seed) for ``pols`` only,
    rendered as a section that replaces the previous one in ``--out`` (or is appended)."""
    import pandas as pd
    sizes = (25, 100) if a.quick else (25, 50, 100, 200)
    seeds = range(1 if a.quick else a.seeds)
    runs = [(n, 0.0, 180.0, s, p) for n in sizes for s in seeds for p in pols]
    t0 = time.time()
    with ProcessPoolExecutor(a.workers) as ex:
        rows = list(ex.map(run_one, runs, chunksize=1))
    df = pd.DataFrame(rows, columns=["jobs", "span_s", "round_s", "seed", "policy", "makespan",
                                     "avg_jct", "avg_wait", "utilisation", "preemptions",
                                     "shared_jobs", "cpu_s"])
    g = df.groupby(["jobs", "policy"]).mean(numeric_only=True).reset_index()
    lines = [ONLY_BEGIN, "", f"## Further baselines, same setting as the first table "
             f"(`--only {','.join(pols)}`, {time.time() - t0:.0f} s wall, "
             f"{df.seed.nunique()} seed(s))", "",
             "| jobs | policy | makespan h | avg JCT h | avg wait h | utilisation | pre-emptions | packed jobs |",
             "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for _, r in g.sort_values(["jobs", "makespan"]).iterrows():
        lines.append(f"| {r.jobs:.0f} | {r.policy} | {_h(r.makespan)} | {_h(r.avg_jct)} | "
                     f"{_h(r.avg_wait)} | {r.utilisation:.2f} | {r.preemptions:.0f} | "
                     f"{r.shared_jobs:.0f} |")
    lines += ["", ONLY_END]
    section = "\n".join(lines) + "\n"
    if a.out:
        old = a.out.read_text() if a.out.exists() else ""
        if ONLY_BEGIN in old and ONLY_END in old:
            head, rest = old.split(ONLY_BEGIN, 1)
            tail = rest.split(ONLY_END, 1)[1].lstrip("\n")
            new = head + section + (("\n" + tail) if tail else "")
        else:
            new = old.rstrip("\n") + "\n\n" + section
        a.out.write_text(new)
    print(section)
    return 0


def _h(x):
    return f"{x / 3600:.2f}"


def render(df, wall, a) -> str:
    lines = [f"<!-- generated by bench/repro_similarity.py {'--quick' if a.quick else ''}"
             f" in {wall:.0f} s wall; do not edit -->", "",
             f"Cluster `{CLUSTER}` (16 GPUs), restore cost {PREEMPT_COST:.0f} s, "
             f"{df.seed.nunique()} seed(s) per cell (mean shown).", ""]
    main = df[(df.span_s == 0) & (df.round_s == 180)]
    g = main.groupby(["jobs", "policy"]).mean(numeric_only=True).reset_index()
    lines += ["## All jobs at time 0, 3-min rounds (§6.1, Fig. 6-8)", "",
              "| jobs | policy | makespan h | avg JCT h | avg wait h | utilisation | pre-emptions | packed jobs |",
              "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for _, r in g.sort_values(["jobs", "makespan"]).iterrows():
        lines.append(f"| {r.jobs:.0f} | {r.policy} | {_h(r.makespan)} | {_h(r.avg_jct)} | {_h(r.avg_wait)} | "
                     f"{r.utilisation:.2f} | {r.preemptions:.0f} | {r.shared_jobs:.0f} |")
    lines += ["", "## Reductions next to the paper's", "",
              "| jobs | comparison | makespan | avg JCT | avg wait | paper |", "|---:|---|---:|---:|---:|---|"]
    piv = g.set_index(["jobs", "policy"])

    def red(n, a_, b_, col):
        try:
            x, y = piv.loc[(n, a_), col], piv.loc[(n, b_), col]
        except KeyError:
            return "n/a"
        return f"{(x - y) / y * 100:+.1f} %"
    for n in sorted(g.jobs.unique()):
        for d in ("gpu_ngpu", "gpu_ngpu_bs"):
            base, cd = f"similarity_{d}", f"similarity_{d}_cd"
            lines.append(f"| {n:.0f} | {cd} vs {base} (re-scheduling) | {red(n, cd, base, 'makespan')} | "
                         f"{red(n, cd, base, 'avg_jct')} | {red(n, cd, base, 'avg_wait')} | "
                         f"{PAPER['cd_makespan'] if n == 25 else ''} |")
            jp = cd + "_jp"
            lines.append(f"| {n:.0f} | {jp} vs {cd} (packing) | {red(n, jp, cd, 'makespan')} | "
                         f"{red(n, jp, cd, 'avg_jct')} | {red(n, jp, cd, 'avg_wait')} | "
                         f"{PAPER['jp_makespan'] if n == 200 and d == 'gpu_ngpu_bs' else ''} |")
    sw = df[df.jobs == 50].groupby(["span_s", "round_s", "policy"]).mean(numeric_only=True).reset_index()
    lines += ["", "## Round length and arrival span (50 jobs; Fig. 5)", "",
              "| arrivals over | round | policy | makespan h | avg JCT h | avg wait h | utilisation |",
              "|---:|---:|---|---:|---:|---:|---:|"]
    for _, r in sw[sw.policy.str.startswith("similarity_gpu_ngpu_bs")].iterrows():
        lines.append(f"| {r.span_s / 60:.0f} min | {r.round_s / 60:.0f} min | {r.policy} | {_h(r.makespan)} | "
                     f"{_h(r.avg_jct)} | {_h(r.avg_wait)} | {r.utilisation:.2f} |")
    f7 = df[(df.span_s > 0) & (df.round_s == 180) & ~df.policy.isin(
        [p for p in df.policy.unique() if p.startswith("similarity_") and "_cd" not in p])]
    f7 = f7.groupby(["span_s", "jobs", "policy"]).mean(numeric_only=True).reset_index()
    f7 = f7[f7.groupby(["span_s", "jobs"]).policy.transform("count") > 3]
    if len(f7):
        lines += ["", "## Against the baselines with arrivals over time (3-min rounds; Fig. 7)", "",
                  "Makespan h (avg JCT h) per policy; `themis` is seed 001's subset of Themis.", ""]
        pols = sorted(f7.policy.unique(), key=lambda p: (not p.startswith("similarity"), p))
        lines += ["| arrivals over | jobs | " + " | ".join(pols) + " |",
                  "|---:|---:|" + "---:|" * len(pols)]
        for (span, n), grp in f7.groupby(["span_s", "jobs"]):
            cell = {r.policy: f"{_h(r.makespan)} ({_h(r.avg_jct)})" for _, r in grp.iterrows()}
            lines.append(f"| {span / 60:.0f} min | {n:.0f} | " +
                         " | ".join(cell.get(p, "") for p in pols) + " |")
    lines += ["", f"Simulation CPU time: {df.cpu_s.sum():.0f} s over {len(df)} runs "
              f"(max {df.cpu_s.max():.1f} s, {df.loc[df.cpu_s.idxmax(), 'policy']})."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
