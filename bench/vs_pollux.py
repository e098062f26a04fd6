"""gimbal's simulator against the Pollux simulator: whole-process time and average JCT.

    python bench/vs_pollux.py --pollux PATH [--workloads 1 2 ... 8] [--cluster 16x4]

``PATH`` is a checkout of the Pollux artifact (petuum/adaptdl, its ``simulator/``
folder: ``simulator.py`` and ``workloads/workload-K.csv``); it must run with the
Python given by ``--pollux-python`` (its own requirements).  Without a checkout
the benchmark prints why and exits 0 (skipped): nothing is downloaded.

For each workload, interleaved (the order alternates per workload so a
machine-load drift hits both sides alike), both simulators run the same trace
with the same policy (Tiresias), 16 nodes x 4 GPUs, 60 s scheduling interval, as
whole processes (start-up, imports and trace loading included):

* Pollux: ``python simulator.py workloads/workload-K.csv --policy tiresias
  --min-nodes 16 --num-gpus 4 --interval 60``; its average JCT is the last
  ``Average JCT:`` line it prints;
* gimbal: ``python -m gimbalctl.cli simulate --trace workload-K.csv --policy
  tiresias --cluster 16x4 --interval 60 --json``.

Reported: per-workload wall seconds of each process, their ratio, the ratio of
the sums (target: gimbal >= 50x faster, issue #13), and both average JCTs.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _sim_dir(path: Path) -> Path | None:
    for cand in (path, path / "simulator"):
        if (cand / "simulator.py").exists() and (cand / "workloads").is_dir():
            return cand
    return None


def run_pollux(sim: Path, workload: Path, py: str, nodes: int, gpus: int, interval: int):
    cmd = [py, "simulator.py", str(workload), "--policy", "tiresias", "--min-nodes", str(nodes),
           "--num-gpus", str(gpus), "--interval", str(interval)]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=sim, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if out.returncode:
        raise RuntimeError(f"Pollux simulator failed on {workload.name}: "
                           f"{out.stderr.strip().splitlines()[-1:]}")
    avgs = re.findall(r"Average JCT:\s*([0-9.eE+-]+)", out.stdout)
    return wall, float(avgs[-1]) if avgs else float("nan")


def run_gimbal(workload: Path, cluster: str, interval: int):
    cmd = [sys.executable, "-m", "gimbalctl.cli", "simulate", "--trace", str(workload),
           "--policy", "tiresias", "--cluster", cluster, "--interval", str(interval), "--json"]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if out.returncode:
        raise RuntimeError(f"gimbal failed on {workload.name}: {out.stderr.strip()[-300:]}")
    return wall, json.loads(out.stdout)["results"]["tiresias"]["avg_jct"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pollux", type=Path, default=None,
                    help="Pollux artifact checkout (the folder holding simulator/simulator.py)")
    ap.add_argument("--pollux-python", default=sys.executable)
    ap.add_argument("--workloads", nargs="+", type=int, default=list(range(1, 9)))
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--gpus", type=int, default=4)
    ap.add_argument("--interval", type=int, default=60)
    a = ap.parse_args()
    sim = _sim_dir(a.pollux) if a.pollux is not None else None
    if sim is None:
        print(f"skipped: no Pollux simulator checkout at {a.pollux} (pass --pollux PATH to a "
              "checkout of petuum/adaptdl's simulator/ with simulator.py and workloads/)")
        return 0
    cluster = f"{a.nodes}x{a.gpus}"
    print(f"Tiresias, {cluster}, interval {a.interval} s, whole processes, interleaved")
    print("| workload | Pollux wall (s) | gimbal wall (s) | speed-up | Pollux avg JCT (h) | "
          "gimbal avg JCT (h) |")
    print("|---|---|---|---|---|---|")
    tot_p = tot_g = 0.0
    for n, k in enumerate(a.workloads):
        w = sim / "workloads" / f"workload-{k}.csv"
        runs = [("p", lambda: run_pollux(sim, w, a.pollux_python, a.nodes, a.gpus, a.interval)),
                ("g", lambda: run_gimbal(w, cluster, a.interval))]
        res = dict((name, fn()) for name, fn in (runs if n % 2 == 0 else runs[::-1]))
        (wp, jp), (wg, jg) = res["p"], res["g"]
        tot_p += wp
        tot_g += wg
        print(f"| {k} | {wp:.2f} | {wg:.2f} | {wp / wg:.0f}x | {jp / 3600:.2f} | {jg / 3600:.2f} |",
              flush=True)
    ratio = tot_p / tot_g
    print(f"\nsum: Pollux {tot_p:.1f} s, gimbal {tot_g:.1f} s: {ratio:.0f}x "
          f"({'meets' if ratio >= 50 else 'misses'} the 50x target)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
