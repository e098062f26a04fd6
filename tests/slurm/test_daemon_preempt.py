"""Pre-emption on a real cluster (gate mode, registered policy ``srtf``).

A long gate job runs; a short gate job arrives while the rest of the cluster is busy, so SRTF
pre-empts the long one: ``scancel --signal=USR2 --full`` (the batch script traps USR2 and
writes a marker, as gimbal-run would checkpoint), ``gate.preempt_grace``, ``scontrol
requeuehold``; the short job starts on the freed GPUs; once it has ended, a later cycle starts
the pre-empted job again through gate mode.  The audit has each change exactly once.
"""
from __future__ import annotations

import json
import sys
import time

import pytest

from tests.slurm.cluster import REPO
from tests.slurm.test_daemon_ordering import Gimbal

pytestmark = pytest.mark.slurm

# A training job stand-in: a marker line at each start and for each USR2 (the checkpoint
# signal); `sleep & wait` lets bash run the trap at once.
LONG_SCRIPT = """#!/bin/bash
M={dir}/marker-$SLURM_JOB_ID
echo "start ${{SLURM_RESTART_COUNT:-0}}" >> "$M"
trap 'echo "usr2 ${{SLURM_RESTART_COUNT:-0}}" >> "$M"' USR2
while true; do sleep 0.2 & wait $!; done
"""


def gsbatch(c, g, *args) -> str:
    """Submit through slurm_hooks/gsbatch (as the cluster's commands see paths); job id."""
    py = "python" if c.in_chroot else sys.executable
    out = c.run([py, str(REPO / "slurm_hooks" / "gsbatch"), *args], check=True)
    return out.stdout.strip().split(";")[0].split()[-1]


def cycle(g, cfg) -> dict:
    r = g("daemon", "--once", "--mode", "gate", "--policy", "srtf", "--config", cfg, "--json")
    assert r.returncode == 0, (r.returncode, r.stderr)
    return json.loads(r.stdout.strip().splitlines()[-1])


def wait_for(pred, timeout: float, what: str, poll: float = 0.2):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what} not within {timeout}s")
        time.sleep(poll)


def _preempt(c, backend="cli"):
    g = Gimbal(c, backend)
    (g.host_dir / "gimbal.toml").write_text("[gate]\npreempt_grace = 1\n")
    cfg = f"{g.inner}/gimbal.toml"
    (g.host_dir / "long.sh").write_text(LONG_SCRIPT.format(dir=g.inner))
    marker = lambda j: (g.host_dir / f"marker-{j}")  # noqa: E731
    lines = lambda j: marker(j).read_text().split() if marker(j).exists() else []  # noqa: E731
    # gpu1, gpu2 and mps1 busy with plain jobs (20 min limit): only gpu3's 4 GPUs are for gimbal
    blockers = [c.submit(["--gres=gpu:4", "-w", n, "-t", "20", "-J", "blocker"]) for n in ("gpu1", "gpu2")]
    blockers.append(c.submit(["--gres=gpu:2", "-w", "mps1", "-t", "20", "-J", "blocker"]))
    for b in blockers:
        c.wait_state(b, "RUNNING", timeout=30)
    # time limits as the estimates: by default only the limit ranks (docs/daemon.md)
    long_ = gsbatch(c, g, "--app", "bert", "--batch", "64", "--est", "3000", "--gate", "--gpus", "4",
                    "-t", "50", "--output=/dev/null", f"--chdir={g.inner}", f"{g.inner}/long.sh")
    assert c.show_job(long_).get("TresPerNode", "(null)") in ("(null)", "N/A", "")  # no GRES yet
    # cycle 1: the long job is the only one waiting and fits on gpu3
    r1 = cycle(g, cfg)
    c.wait_state(long_, "RUNNING", timeout=30)
    assert c.show_job(long_)["NodeList"] == "gpu3"
    wait_for(lambda: lines(long_) == ["start", "0"], 15, "long job start marker")
    # cycle 2: a short job arrives; SRTF pre-empts the long one and gives gpu3 to the short one
    short = gsbatch(c, g, "--app", "bert", "--batch", "64", "--est", "60", "--gate", "--gpus", "4",
                    "-t", "1", "--output=/dev/null", "--chdir=/tmp", "--wrap", "sleep 4")
    r2 = cycle(g, cfg)
    acts = {a["job_id"]: a for a in r2["plan"]["actions"]}
    assert acts[long_]["action"] == "PreemptJob"
    assert acts[short]["action"] == "StartJob" and all(x.startswith("gpu3:") for x in acts[short]["gpus"])
    assert [(ch["job_id"], ch["field"]) for ch in r2["changes"]][:2] == \
        [(long_, "signal"), (long_, "requeue_hold")]
    assert "usr2 0" in " ".join(marker(long_).read_text().splitlines())  # the trap ran
    info = c.show_job(long_)
    assert info["JobState"] == "PENDING" or info["JobState"] == "COMPLETING", info["JobState"]
    wait_for(lambda: c.show_job(long_)["JobState"] == "PENDING", 30, "pre-empted job pending")
    info = c.show_job(long_)
    # held (scontrol says "job_requeued_in_held_state"; squeue --json, which gimbal reads,
    # says JobHeldUser), requeued once
    assert info["Reason"] in ("JobHeldUser", "JobHeldAdmin", "job_requeued_in_held_state"), info
    assert info["Priority"] == "0" and int(info["Restarts"]) == 1
    c.wait_state(short, ("RUNNING", "COMPLETED"), timeout=30)
    assert c.show_job(short)["NodeList"] == "gpu3"
    # while the short job runs, the pre-empted one waits (held); after it ends, it restarts
    c.wait_state(short, "COMPLETED", timeout=30)
    r3 = cycle(g, cfg)
    acts = {a["job_id"]: a for a in r3["plan"]["actions"]}
    assert acts[long_]["action"] == "StartJob"
    c.wait_state(long_, "RUNNING", timeout=30)
    assert c.show_job(long_)["NodeList"] == "gpu3"
    wait_for(lambda: lines(long_)[-2:] == ["start", "1"], 15, "long job restart marker")
    assert " ".join(lines(long_)) == "start 0 usr2 0 start 1"  # USR2 exactly once
    # the audit: each change once, in the cycle that made it, all applied
    rows = g.rows("select cycle_id, job_id, field, status from audit order by id")
    assert all(s == "applied" for *_, s in rows), rows
    c1, c2, c3 = r1["cycle_id"], r2["cycle_id"], r3["cycle_id"]
    assert [(cy, f) for cy, j, f, _ in rows if j == long_] == [
        (c1, "gres"), (c1, "req_nodes"), (c1, "decision"), (c1, "release"),
        (c2, "signal"), (c2, "requeue_hold"),
        # GRES, nodes and decision are still right; the requeue's start delay (EligibleTime
        # ~2 min ahead) is cleared, then the job is released
        (c3, "begin_time"), (c3, "release")]
    assert [(cy, f) for cy, j, f, _ in rows if j == short] == [
        (c2, "gres"), (c2, "req_nodes"), (c2, "decision"), (c2, "release")]
    assert g.rows(f"select preemptions from jobs where job_id='{long_}'") == [(1,)]
    assert g.rows("select status from cycles order by id") == [("done",)] * 3


def test_preempt_requeue_and_restart_2205(slurm_2205, clean_slurm):
    _preempt(slurm_2205)


@pytest.mark.parametrize("backend", ["cli", "pyslurm"])
def test_preempt_requeue_and_restart_2605(slurm_2605, clean_slurm, backend):
    _preempt(slurm_2605, backend)
