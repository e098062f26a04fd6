"""AFS-L elastic shares on a real cluster (seed 001 on Slurm, gate mode).

The daemon runs in this process (``run_cycle``: snapshot -> policy ``afs-l`` -> plan -> apply
-> audit) against a partition of one 2-GPU node (``mps1``, made for the test with ``scontrol
create partition``, so the policy sees 2 GPUs).  A long training job starts alone on both
GPUs; a short gate job arrives, and Algorithm 1 gives each job one GPU: the daemon shrinks
the long job (USR2: gimbal-run checkpoints; ``gate.preempt_grace``; ``scontrol requeuehold``)
and starts the short one; the next cycle restarts the long job on one GPU (new GRES, new
launcher decision).  When the short job has finished, the long one would get both GPUs
back, but its last resize is younger than ``gate.min_resize_interval``: the resize is
deferred (the plan's reason says so); after the interval it is grown back to 2 GPUs the
same way.

22.05 (host): the long job is a real training (gimbal-run + torchrun, CPU/gloo ranks, one per
allocated GPU, ``examples/train_mnistlike.py``); its reports show each launch resuming at the
step of the previous launch's checkpoint with global batch 64 on 2, 1 and 2 ranks.
26.05 (chroot, no torch there): the same flow through ``gimbalctl daemon --once`` (CLI and
pyslurm backends, settings from a config file) with a batch script that traps USR2 and
records ``SLURM_GPUS_ON_NODE`` at each start.
"""
from __future__ import annotations

import json
import os
import sys
import time

import pytest

from gimbalctl.config import Config
from gimbalctl.daemon import RESIZE_REASON, run_cycle
from gimbalctl.slurm.cli import CliBackend
from gimbalctl.store import Store
from policies.registry import get_policy
from tests.slurm.cluster import REPO
from tests.slurm.test_daemon_ordering import Gimbal

pytestmark = pytest.mark.slurm

PART = "gimbal_elastic"
INTERVAL = 60.0  # gate.min_resize_interval of the test (s)

TRAIN = """#!/bin/bash
export GIMBAL_STATE_DIR={inner}/state PYTHONPATH={repo} OMP_NUM_THREADS=1
echo "start restart=${{SLURM_RESTART_COUNT:-0}} gpus=${{SLURM_GPUS_ON_NODE:-}}" >> {inner}/marker-$SLURM_JOB_ID
# --standalone: the fake nodes' names do not resolve, so torchrun rendezvous on localhost;
# one rank per allocated GPU (gimbal-run counts SLURM_GPUS_ON_NODE)
exec {py} -m launcher.run --standalone --job-id $SLURM_JOB_ID --poll-interval 0.5 \\
  --checkpoint-dir {inner}/ckpt-$SLURM_JOB_ID \\
  -- {repo}/examples/train_mnistlike.py --steps 100000 --samples 512 --global-batch 64 \\
  --hidden 16 --step-sleep 0.05
"""

STANDIN = """#!/bin/bash
M={inner}/marker-$SLURM_JOB_ID
echo "start restart=${{SLURM_RESTART_COUNT:-0}} gpus=${{SLURM_GPUS_ON_NODE:-}}" >> "$M"
trap 'echo "usr2 restart=${{SLURM_RESTART_COUNT:-0}}" >> "$M"' USR2
while true; do sleep 0.2 & wait $!; done
"""


def gsbatch(c, *args) -> str:
    py = "python" if c.in_chroot else sys.executable
    out = c.run([py, str(REPO / "slurm_hooks" / "gsbatch"), *args], check=True)
    return out.stdout.strip().split(";")[0].split()[-1]


def wait_for(pred, timeout, what, poll=0.3):
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > end:
            raise TimeoutError(f"{what} not within {timeout}s")
        time.sleep(poll)


def launches(g, job) -> list[list[dict]]:
    """The job's launcher reports split into launches (each launch's first report is
    marked ``warmup``)."""
    p = g.host_dir / "state" / "reports" / f"{job}.jsonl"
    recs = [json.loads(x) for x in p.read_text().splitlines() if x.strip()] if p.exists() else []
    out: list[list[dict]] = []
    for r in recs:
        if r.get("warmup") or not out:
            out.append([])
        out[-1].append(r)
    return out


def alloc_gpus(c, job) -> int:
    """GPUs Slurm allocated to the running job (``scontrol -d show job``: GRES=gpu:N(IDX:..))."""
    out = c.run(["scontrol", "-d", "show", "job", str(job)], check=True).stdout
    for tok in out.split():
        if tok.startswith("GRES=gpu:"):
            return int(tok.split(":")[1].split("(")[0])
    return 0


def _elastic(c, real_training: bool, backend: str = "inproc"):
    g = Gimbal(c, backend if backend != "inproc" else "cli")
    script = (TRAIN if real_training else STANDIN).format(inner=g.inner, repo=REPO,
                                                         py=sys.executable)
    (g.host_dir / "job.sh").write_text(script)
    c.run(["scontrol", "delete", f"PartitionName={PART}"])
    c.run(["scontrol", "create", f"PartitionName={PART}", "Nodes=mps1", "MaxTime=INFINITE",
           "State=UP"], check=True)
    try:
        _flow(c, g, real_training, backend)
    finally:
        c.cancel_all()
        c.run(["scontrol", "delete", f"PartitionName={PART}"])


def _flow(c, g, real, backend):
    """``backend`` ``inproc``: ``run_cycle`` in this process (CLI backend); ``cli`` /
    ``pyslurm``: ``gimbalctl daemon --once`` as a process with that backend and the settings
    in a config file.  Either way each cycle is read as the daemon's JSON result."""
    st = Store(str(g.host_db))
    st.upgrade()
    (g.host_dir / "gimbal.toml").write_text(
        f"[gate]\npreempt_grace = 3\nmin_resize_interval = {INTERVAL}\n"
        f"[slurm]\npartition = \"{PART}\"\n")
    if backend == "inproc":
        if c.in_chroot:
            be = CliBackend(prefix=c.prefix, timeout=60, partition=PART)
        else:
            os.environ["SLURM_CONF"] = c.env["SLURM_CONF"]
            be = CliBackend(timeout=60, partition=PART)
        cfg = Config(mode="gate", state_dir=str(g.host_dir / "state"), preempt_grace=3,
                     min_resize_interval=INTERVAL, partition=PART)
        pol = get_policy("afs-l")
    marker = g.host_dir

    def cycle() -> dict:
        if backend == "inproc":
            res = run_cycle(cfg, be, st, pol)
            assert res.status == "done", (
                [(ch.job_id, ch.field, ch.error) for ch in res.changes], res.warnings)
            return res.as_dict()
        r = g("daemon", "--once", "--mode", "gate", "--policy", "afs-l",
              "--config", f"{g.inner}/gimbal.toml", "--json")
        assert r.returncode == 0, (r.returncode, r.stderr)
        res = json.loads(r.stdout.strip().splitlines()[-1])
        assert res["status"] == "done", res
        return res

    class Act:
        def __init__(self, d):
            self.kind, self.gpus = d["action"], d.get("gpus", [])

    def acts(res):
        return {a["job_id"]: Act(a) for a in res["plan"]["actions"]}

    def fields(res, job):
        return [ch["field"] for ch in res["changes"] if ch["job_id"] == job]

    def why(res, job):
        return res["plan"]["reasons"][job]

    def starts(job):
        p = marker / f"marker-{job}"
        return [ln for ln in p.read_text().splitlines() if ln.startswith("start")] if p.exists() else []

    common = ["--app", "cifar10", "--batch", "64", "--gate"]
    # gsbatch's own options first: the first sbatch option ends them (--gpus would be sbatch's)
    long_ = gsbatch(c, *common, "--gpus", "2", "-p", PART, "-t", "30", f"--output={g.inner}/%j.out",
                    f"--chdir={g.inner}", f"{g.inner}/job.sh")
    # 1: alone, the long job gets both GPUs (stage two: a second GPU raises its throughput)
    r1 = cycle()
    a = acts(r1)[long_]
    assert a.kind == "StartJob" and len(a.gpus) == 2, r1["plan"]
    c.wait_state(long_, "RUNNING", timeout=30)
    assert alloc_gpus(c, long_) == 2
    if real:
        wait_for(lambda: len(launches(g, long_)) == 1 and len(launches(g, long_)[0]) >= 2, 180,
                 "reports of the first launch")
    else:
        wait_for(lambda: starts(long_), 20, "start marker")
    # 2: a short job arrives: one GPU each (Algorithm 1 stage one); the long job is shrunk
    short = gsbatch(c, *common, "--gpus", "1", "-p", PART, "-t", "1", "--output=/dev/null",
                    "--chdir=/tmp", "--wrap", "sleep 12")
    r2 = cycle()
    a = acts(r2)
    assert a[long_].kind == "ResizeJob" and len(a[long_].gpus) == 1, r2["plan"]
    assert a[short].kind == "StartJob" and len(a[short].gpus) == 1
    assert fields(r2, long_) == ["signal", "requeue_hold"]
    assert why(r2, long_)["numbers"]["share"] == 1.0 and "ineq3_left" in why(r2, long_)["numbers"]
    wait_for(lambda: c.job_state(long_) == "PENDING", 60, "shrunk job requeued")
    time.sleep(4.5)  # the daemon restarts a requeued job 2-3 s after the requeue at the earliest
    # 3: the long job restarts on one GPU (new GRES and decision)
    r3 = cycle()
    assert acts(r3)[long_].kind == "StartJob" and len(acts(r3)[long_].gpus) == 1
    assert {"gres", "decision", "release"} <= set(fields(r3, long_))
    c.wait_state(long_, "RUNNING", timeout=60)
    assert alloc_gpus(c, long_) == 1
    dec = json.loads((g.host_dir / "state" / "decisions" / f"{long_}.json").read_text())
    assert dec["global_batch"] == 64 and len(dec["workers"]) == 1
    assert sum(w["share"] for w in dec["workers"]) == 64
    # 4: the short job ends; growing the long job back is deferred while its last resize is
    # younger than gate.min_resize_interval
    c.wait_state(short, "COMPLETED", timeout=90)
    (last,) = st.last_resizes([long_], RESIZE_REASON).values()
    assert time.time() - last < INTERVAL, "the test took too long to see the deferral"
    r4 = cycle()
    assert long_ not in acts(r4) and not fields(r4, long_)
    assert "deferred" in why(r4, long_)["text"], why(r4, long_)
    assert "gate.min_resize_interval" in why(r4, long_)["text"]
    if real:
        wait_for(lambda: len(launches(g, long_)) == 2 and len(launches(g, long_)[1]) >= 2, 180,
                 "reports of the launch on one GPU")
    else:
        wait_for(lambda: len(starts(long_)) == 2, 30, "restart marker")
    # 5: after the interval: grown back to both GPUs (checkpoint, requeue, restart)
    time.sleep(max(0.0, last + INTERVAL - time.time()) + 1)
    r5 = cycle()
    a = acts(r5)[long_]
    assert a.kind == "ResizeJob" and len(a.gpus) == 2, r5["plan"]
    assert fields(r5, long_) == ["signal", "requeue_hold"]
    wait_for(lambda: c.job_state(long_) == "PENDING", 60, "grown job requeued")
    time.sleep(4.5)
    r6 = cycle()
    assert acts(r6)[long_].kind == "StartJob" and len(acts(r6)[long_].gpus) == 2
    c.wait_state(long_, "RUNNING", timeout=60)
    assert alloc_gpus(c, long_) == 2
    if real:
        wait_for(lambda: len(launches(g, long_)) == 3 and len(launches(g, long_)[2]) >= 2, 180,
                 "reports of the launch on two GPUs again")
        ls = launches(g, long_)
        # one rank per GPU, the global batch identical on every size, split exactly
        assert [len(L[-1]["workers"]) for L in ls] == [2, 1, 2]
        for L in ls:
            for r in L:
                assert r["global_batch"] == 64
                assert sum(w["share"] for w in r["workers"]) == 64
                assert all(w["micro_batch"] * w["accum_steps"] >= w["share"] for w in r["workers"])
        # each launch resumes at the step the previous one checkpointed at (its last report)
        for prev, nxt in zip(ls, ls[1:]):
            assert nxt[0]["step"] - nxt[0]["steps"] == prev[-1]["step"] > 0
        # every launch ran only in its own Slurm run: gimbal-run waited for the requeue
        assert {r["restart"] for L in ls for r in L} == {0}
    else:
        # RUNNING comes before the stand-in script has written its line: wait for it
        wait_for(lambda: len(starts(long_)) >= 3, 60, "the stand-in's third start line")
        lines = starts(long_)
        assert lines == ["start restart=0 gpus=2", "start restart=1 gpus=1",
                         "start restart=2 gpus=2"], lines
    # the audit: both resizes, applied, with their reasons; each restart gated again
    rows = [r for r in st.audit_rows(job_id=long_) if r.field == "requeue_hold"]
    assert [(r.status, r.reason) for r in rows] == [
        ("applied", f"{RESIZE_REASON} (2 -> 1 GPUs)"), ("applied", f"{RESIZE_REASON} (1 -> 2 GPUs)")]
    gres = [json.loads(r.after) for r in st.audit_rows(job_id=long_) if r.field == "gres"]
    assert gres == ["gpu:2", "gpu:1", "gpu:2"]
    out = g("audit", "--job", long_, "--db", g.db)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("requeue_hold") == 2 and "2 -> 1 GPUs" in out.stdout \
        and "1 -> 2 GPUs" in out.stdout
    # explain: the job's share and both sides of inequality (3)
    ex = g("explain", long_)
    assert ex.returncode == 0, ex.stderr
    for key in ("share = ", "ineq3_left = ", "ineq3_right = "):
        assert key in ex.stdout, ex.stdout


def test_afs_l_shrinks_and_grows_a_training_job_2205(slurm_2205, clean_slurm):
    _elastic(slurm_2205, real_training=True)


@pytest.mark.parametrize("backend", ["cli", "pyslurm"])
def test_afs_l_shrinks_and_grows_a_job_2605(slurm_2605, clean_slurm, backend):
    _elastic(slurm_2605, real_training=False, backend=backend)
