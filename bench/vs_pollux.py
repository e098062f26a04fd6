"""gimbal's simulator against the Pollux simulator: whole-process time and average JCT.

    python bench/vs_pollux.py --pollux PATH [--pollux-python PY] [--workloads 1 2 ... 8]

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

Before timing, each simulator's own source is byte-compiled (``python -m compileall``
on gimbal's ``gimbalctl/`` and ``policies/`` and on the Pollux ``simulator/`` folder,
each with its own Python), as an installed package is: otherwise, where
``PYTHONDONTWRITEBYTECODE`` is set or the folder is read-only, every process compiles
its modules from source again (for gimbal 0.01–0.06 CPU-s of a 0.4–0.5 CPU-s process here;
docs/scale.md §7).  The libraries of both (numpy, pandas, …) come compiled with their
installs.

Reported: per-workload wall seconds and CPU seconds (user + system of the child
process, from ``getrusage(RUSAGE_CHILDREN)``, which a loaded machine disturbs far
less than wall time) of each process, their ratios, the ratios of the sums
(target: gimbal >= 50x faster, issue #13), both average JCTs, and the load
average before and after the run.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = 50.0


def _sim_dir(path: Path) -> Path | None:
    """The folder holding ``simulator.py`` and ``workloads/`` (absolute), or None.

    Absolute because the Pollux process runs with that folder as its working
    directory and gimbal's with the repository root: a relative path would name
    different files for the two."""
    for cand in (path, path / "simulator"):
        if (cand / "simulator.py").exists() and (cand / "workloads").is_dir():
            return cand.resolve()
    return None


def pollux_avg_jct(stdout: str) -> float:
    """The Pollux simulator's final average JCT (s): the last ``Average JCT:`` line."""
    avgs = re.findall(r"^Average JCT:\s*([0-9.eE+-]+)\s*$", stdout, flags=re.M)
    return float(avgs[-1]) if avgs else math.nan


def timed_run(cmd: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess, float, float]:
    """Run ``cmd`` to completion: (result, wall s, CPU s of the child and its children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return out, wall, cpu


def run_pollux(sim: Path, workload: Path, py: str, nodes: int, gpus: int, interval: int):
    cmd = [py, "simulator.py", str(workload), "--policy", "tiresias", "--min-nodes", str(nodes),
           "--num-gpus", str(gpus), "--interval", str(interval)]
    out, wall, cpu = timed_run(cmd, sim)
    if out.returncode:
        raise RuntimeError(f"Pollux simulator failed on {workload.name}: "
                           f"{out.stderr.strip().splitlines()[-1:]}")
    return wall, cpu, pollux_avg_jct(out.stdout)


def run_gimbal(workload: Path, cluster: str, interval: int):
    cmd = [sys.executable, "-m", "gimbalctl.cli", "simulate", "--trace", str(workload),
           "--policy", "tiresias", "--cluster", cluster, "--interval", str(interval), "--json"]
    out, wall, cpu = timed_run(cmd, ROOT)
    if out.returncode:
        raise RuntimeError(f"gimbal failed on {workload.name}: {out.stderr.strip()[-300:]}")
    return wall, cpu, json.loads(out.stdout)["results"]["tiresias"]["avg_jct"]


def precompile(py: str, *dirs: Path, recurse: bool = True) -> None:
    """Byte-compile ``dirs`` with ``py`` (``-l``: the folder only, not its sub-folders)."""
    cmd = [py, "-m", "compileall", "-q"] + ([] if recurse else ["-l"]) + [str(d) for d in dirs]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"compileall failed: {out.stdout.strip()[-300:]} {out.stderr.strip()[-300:]}")


def _load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pollux", type=Path, default=None,
                    help="Pollux artifact checkout (the folder holding simulator/simulator.py)")
    ap.add_argument("--pollux-python", default=sys.executable)
    ap.add_argument("--workloads", nargs="+", type=int, default=list(range(1, 9)))
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--gpus", type=int, default=4)
    ap.add_argument("--interval", type=int, default=60)
    a = ap.parse_args(argv)
    sim = _sim_dir(a.pollux) if a.pollux is not None else None
    if sim is None:
        print(f"skipped: no Pollux simulator checkout at {a.pollux} (pass --pollux PATH to a "
              "checkout of petuum/adaptdl's simulator/ with simulator.py and workloads/)")
        return 0
    cluster = f"{a.nodes}x{a.gpus}"
    precompile(sys.executable, ROOT / "gimbalctl", ROOT / "policies")
    precompile(a.pollux_python, sim, recurse=False)
    print(f"Tiresias, {cluster}, interval {a.interval} s, whole processes, interleaved, "
          f"sources byte-compiled first; {os.cpu_count()} CPUs, {_load()} before")
    print("| workload | Pollux wall (s) | gimbal wall (s) | wall ratio | Pollux CPU (s) | "
          "gimbal CPU (s) | CPU ratio | Pollux avg JCT (s) | gimbal avg JCT (s) |")
    print("|---|---|---|---|---|---|---|---|---|")
    tot = {"pw": 0.0, "gw": 0.0, "pc": 0.0, "gc": 0.0}
    jcts: list[tuple[float, float]] = []
    for n, k in enumerate(a.workloads):
        w = sim / "workloads" / f"workload-{k}.csv"
        runs = [("p", lambda: run_pollux(sim, w, a.pollux_python, a.nodes, a.gpus, a.interval)),
                ("g", lambda: run_gimbal(w, cluster, a.interval))]
        res = dict((name, fn()) for name, fn in (runs if n % 2 == 0 else runs[::-1]))
        (wp, cp, jp), (wg, cg, jg) = res["p"], res["g"]
        tot["pw"] += wp
        tot["gw"] += wg
        tot["pc"] += cp
        tot["gc"] += cg
        jcts.append((jp, jg))
        print(f"| {k} | {wp:.2f} | {wg:.2f} | {wp / wg:.1f}x | {cp:.2f} | {cg:.2f} | "
              f"{cp / cg:.1f}x | {jp:.1f} | {jg:.1f} |", flush=True)
    mp = sum(j[0] for j in jcts) / len(jcts)
    mg = sum(j[1] for j in jcts) / len(jcts)
    print(f"| sum / mean | {tot['pw']:.1f} | {tot['gw']:.1f} | {tot['pw'] / tot['gw']:.1f}x | "
          f"{tot['pc']:.1f} | {tot['gc']:.1f} | {tot['pc'] / tot['gc']:.1f}x | {mp:.1f} | {mg:.1f} |")
    for what, ratio in (("wall", tot["pw"] / tot["gw"]), ("CPU", tot["pc"] / tot["gc"])):
        print(f"{what}: gimbal {ratio:.1f}x faster ({'meets' if ratio >= TARGET else 'misses'} "
              f"the {TARGET:.0f}x target)")
    print(f"{_load()} after")
    return 0


if __name__ == "__main__":
    sys.exit(main())
