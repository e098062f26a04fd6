#!/usr/bin/env python
"""One GIMBAL coordination step on a real GPU: two trainings under one MPS control daemon,
each through gimbal-run, then an LGRR squeeze decided by Algorithm 1 and applied through the
launcher decision file.  Measures both jobs' throughput before and after, and the time the
squeezed job spent switching (checkpoint, relaunch, first steady report).

    python bench/gpu_gimbal_step.py --out DIR [--phase-s 40] [--hidden 4096] [--batch 1024]

Both jobs run ``examples/train_mnistlike.py`` (an MLP; ``--hidden`` sets how much GPU work a
step is).  Job ``short`` has 1/10 of ``long``'s remaining steps (stated to the coordinator), so
with the JCT objective (eq. 1) the coordinator squeezes ``short``, the earlier-started J_max.
Without ``nvidia-cuda-mps-control`` (a CPU box) the same steps run without MPS: a smoke test.
Writes ``DIR/gpu_gimbal_step.json`` and prints it.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def reports(state: Path, job: str) -> list[dict]:
    p = state / "reports" / f"{job}.jsonl"
    if not p.exists():
        return []
    out = []
    for line in p.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def steady(recs: list[dict], since: float) -> list[dict]:
    return [r for r in recs if r.get("ts", 0) >= since and not r.get("warmup")
            and r.get("samples_per_s")]


def mean_rate(recs: list[dict]) -> float | None:
    xs = [r["samples_per_s"] for r in recs]
    return sum(xs) / len(xs) if xs else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--phase-s", type=float, default=40.0)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=1024)
    a = ap.parse_args(argv)
    from launcher.decision import LauncherDecision, decision_path, write_decision
    from gimbalctl.profiles import default_models
    from policies.gimbal_coord import JobInfo, RateModel, coordination_search
    from policies.model import Gpu, Job, WorkerAlloc

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path("/tmp/gimbal-gpu-step")
    shutil.rmtree(work, ignore_errors=True)
    state = work / "state"
    (state / "decisions").mkdir(parents=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="2")
    mps = shutil.which("nvidia-cuda-mps-control")
    if mps:
        env.update(CUDA_MPS_PIPE_DIRECTORY=str(work / "mps-pipe"),
                   CUDA_MPS_LOG_DIRECTORY=str(work / "mps-log"))
        for d in ("mps-pipe", "mps-log"):
            (work / d).mkdir()
        subprocess.run([mps, "-d"], env=env, check=True)
    jobs = {"short": 1_000, "long": 10_000}  # remaining steps stated to the coordinator
    procs = {}
    logs = {}
    for name in jobs:
        write_decision(decision_path(name, root=str(state)),
                       LauncherDecision(job_id=name, global_batch=a.batch, mps_thread_pct=100))
        logs[name] = open(out / f"{name}.log", "w")
        procs[name] = subprocess.Popen(
            [sys.executable, "-m", "launcher.run", "--standalone", "--job-id", name, "--nproc", "1",
             "--state-dir", str(state), "--checkpoint-dir", str(work / f"ckpt-{name}"),
             "--poll-interval", "0.5", "--", str(ROOT / "examples" / "train_mnistlike.py"),
             "--steps", "10000000", "--samples", str(16 * a.batch), "--global-batch", str(a.batch),
             "--hidden", str(a.hidden)], env=env, stdout=logs[name], stderr=subprocess.STDOUT,
            cwd=str(ROOT))
        time.sleep(2.0)  # "short" starts first: the J_max tie goes to it
    result: dict = {"mps_daemon": bool(mps), "hidden": a.hidden, "batch": a.batch}
    try:
        t_start = time.time()
        time.sleep(a.phase_s)
        t1 = time.time()
        half = t_start + a.phase_s / 3
        # Algorithm 1 on the packed pair, with the fitted MPS-split model (both as "cifar10":
        # the measured ResNet-18 row stands for a compute-bound job)
        models = default_models()
        g = Gpu("gpu", 0)
        infos, cfg = {}, {}
        for i, (n, rem) in enumerate(jobs.items()):
            job = Job(n, 0.0, 1, "cifar10", a.batch, start_time=float(i))
            infos[n] = JobInfo(job, rem)
            cfg[n] = (WorkerAlloc(g, a.batch, a.batch, 1, 100),)
        res = coordination_search("jct", infos, cfg, RateModel(models.profiles, models.interference))
        result["search"] = {"objective_before": res.objective_before,
                            "objective_after": res.objective_after, "exit": res.exit,
                            "attempts": [(x.primitive, x.objective, x.gain) for x in res.attempts],
                            "mps": {n: res.config[n][0].mps_pct for n in jobs}}
        squeezed = [n for n in jobs if res.config[n][0].mps_pct != 100]
        for n in squeezed:
            write_decision(decision_path(n, root=str(state)),
                           LauncherDecision(job_id=n, global_batch=a.batch,
                                            mps_thread_pct=res.config[n][0].mps_pct))
        t_dec = time.time()
        # the squeezed job's first steady report after its relaunch
        first = None
        while time.time() - t_dec < a.phase_s * 2:
            recs = [r for n in squeezed for r in steady(reports(state, n), t_dec)
                    if r.get("restart", 0) >= 1]
            if recs:
                first = min(r["ts"] for r in recs)
                break
            time.sleep(0.5)
        time.sleep(a.phase_s)
        t2 = time.time()
        time.sleep(3.0)  # the report writers flush in batches
        relaunched = [r for n in squeezed for r in reports(state, n)
                      if r.get("restart", 0) >= 1 and r.get("ts", 0) >= t_dec]
        first_any = min((r["ts"] for r in relaunched), default=None)  # warm-up report
        steady_after = [r["ts"] for r in relaunched if not r.get("warmup")]
        first = min(steady_after) if steady_after else None
        result["lgrr_first_report_s"] = None if first_any is None else first_any - t_dec
        result["lgrr_switch_s"] = None if first is None else first - t_dec
        result["times"] = {"start": t_start, "phase1_end": t1, "decision": t_dec, "end": t2}
        # steady windows: the last two thirds of phase 1; phase 2 from the squeezed job's first
        # steady report after its relaunch (else the last two thirds of phase 2)
        since2 = first if first is not None else t2 - 2 * a.phase_s / 3
        result["before_samples_per_s"] = {
            n: mean_rate([r for r in steady(reports(state, n), half) if r["ts"] <= t1])
            for n in jobs}
        result["after_samples_per_s"] = {
            n: mean_rate([r for r in steady(reports(state, n), since2) if r["ts"] <= t2])
            for n in jobs}
        result["squeezed"] = squeezed
        result["reported_mps"] = {n: sorted({str(r.get("mps_thread_pct")) for r in reports(state, n)})
                                  for n in jobs}
        result["global_batches"] = {n: sorted({r.get("global_batch") for r in reports(state, n)
                                               if r.get("global_batch")}) for n in jobs}
        result["restarts"] = {n: sorted({r.get("restart") for r in reports(state, n)}) for n in jobs}
        result["phase_s"] = [t1 - t_start, t2 - t_dec]
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs.values():
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
        for f in logs.values():
            f.close()
        if mps:
            subprocess.run([mps], input="quit\n", text=True, env=env)
        for n in jobs:
            src = state / "reports" / f"{n}.jsonl"
            if src.exists():
                shutil.copy(src, out / f"{n}.reports.jsonl")
    (out / "gpu_gimbal_step.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
