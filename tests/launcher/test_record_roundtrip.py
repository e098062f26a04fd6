"""Round trip of the per-worker allocation record (issue #8): a policy's Plan -> the
daemon's launcher decision file -> gimbal-run (real torchrun, CPU gloo) applying the
unequal shares -> rank 0's throughput reports -> the state store -> build_snapshot gives
back exactly the plan's WorkerAlloc tuple."""
import json
import os
import subprocess
import sys

import pytest

from launcher.decision import decision_path, read_decision, write_decision
from launcher_testutil import EXAMPLE, REPO, subprocess_env

# the state store needs SQLAlchemy; a training node (e.g. a GPU machine with only torch) may
# run the launcher tests without it (CI has it, so this never skips there)
pytest.importorskip("sqlalchemy", reason="SQLAlchemy is not installed: the round trip "
                                         "goes through the state store")

from gimbalctl.daemon import _decision_for  # noqa: E402
from gimbalctl.profiles import default_models
from gimbalctl.slurm.meta import parse_meta
from gimbalctl.slurm.types import GresUse, SlurmJob, SlurmNode
from gimbalctl.snapshot import build_snapshot
from gimbalctl.store import Store
from policies.base import Policy
from policies.model import Gpu, WorkerAlloc
from policies.plan import StartJob, make_plan

JOB = "4242"
NOW = 1_800_000_000.0
G0, G1 = Gpu("node1", 1), Gpu("node1", 3)
# unequal shares (seed 004 LISS), different micro-batches and accumulation, one MPS share
WORKERS = (WorkerAlloc(G0, 40, 16, 3, 60, None, 0), WorkerAlloc(G1, 24, 24, 1, 60, None, 0))


class Uneven(Policy):
    """Starts the pending job on two GPUs with the record above."""

    name = "uneven"

    def schedule(self, snap):
        acts = [StartJob(j.id, (G0, G1), 16, 3, mps_pct=60, workers=WORKERS)
                for j in snap.pending()]
        return make_plan(self.name, acts, [], {})


def _job(state, gres_alloc=()):
    meta = parse_meta("", "gimbal:app=cifar10,batch=64,iters=100")
    return SlurmJob(JOB, "rt", "alice", state, "", 100, 0, NOW - 100, NOW - 10 if state == "RUNNING" else None,
                    3600.0, "gpu", 1, ("node1",) if gres_alloc else (), (), {"gpu": 2},
                    tuple(gres_alloc), "", "gimbal:app=cifar10,batch=64,iters=100", meta=meta)


NODES = [SlurmNode("node1", "mixed", {"gpu": 4})]


TRAIN = ["--steps", "20", "--samples", "640", "--global-batch", "64"]


def _reference_param_sum(monkeypatch, tmp_path):
    """The same training in this process on one rank (whole batch, no record)."""
    for k in list(os.environ):
        if k.startswith(("GIMBAL_", "SLURM", "WORLD_SIZE", "RANK", "LOCAL_RANK", "CUDA_MPS")):
            monkeypatch.delenv(k)
    import runpy
    mod = runpy.run_path(EXAMPLE)
    out = str(tmp_path / "ref.json")
    assert mod["main"]([*TRAIN, "--out", out, "--device", "cpu"]) == 0
    return json.load(open(out))["param_sum"]


def _run(sd, tmp_path):
    p = subprocess.run([sys.executable, "-m", "launcher.run", "--standalone", "--nproc", "2",
                        "--state-dir", sd, "--job-id", JOB, "--", EXAMPLE, *TRAIN,
                        "--out", str(tmp_path / "o.json")],
                       # two CPU ranks (gloo) also on a one-GPU node
                       cwd=REPO, env=subprocess_env({"CUDA_VISIBLE_DEVICES": ""}),
                       stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=180)
    assert p.returncode == 0, p.stdout
    return json.load(open(tmp_path / "o.json"))


def test_plan_decision_launcher_report_snapshot_round_trip(tmp_path, monkeypatch):
    sd = str(tmp_path / "state")
    pending = build_snapshot([_job("PENDING")], NODES, default_models(), now=NOW)
    meta = pending.slurm_jobs[JOB].meta
    assert meta.app == "cifar10" and meta.batch == 64
    plan = Uneven().schedule(pending.snapshot)
    act = plan.starts()[0]
    # the daemon writes the record into the launcher decision
    dec = _decision_for(act, pending.slurm_jobs[JOB], pending, "uneven")
    write_decision(decision_path(JOB, sd), dec)
    back = read_decision(decision_path(JOB, sd))
    assert back.workers == dec.workers and back.global_batch == 64 and back.mps_thread_pct == 60

    out = _run(sd, tmp_path)
    # the launcher applied the unequal split and rank 0's micro-batch
    assert out["shares"] == [40, 24] and out["sub_batch"] == 16 and out["steps"] == 20
    assert out["mps_thread_pct"] == "60"
    # the unequal split is lossless (LISS weighting): the same parameters as one rank
    assert out["param_sum"] == pytest.approx(_reference_param_sum(monkeypatch, tmp_path), abs=1e-4)

    store = Store(str(tmp_path / "g.db"))
    store.upgrade()
    store.ingest_reports(os.path.join(sd, "reports"))
    reports = store.latest_reports()
    assert reports[JOB].extra["workers"] == [dict(w) for w in dec.workers]

    running = _job("RUNNING", [GresUse("node1", "gpu", 2, {1: 1, 3: 1})])
    snap = build_snapshot([running], NODES, default_models(), now=NOW, reports=reports).snapshot
    alloc = snap.jobs[JOB].allocation
    assert alloc.workers == WORKERS
    assert (alloc.sub_batch, alloc.accum_steps, alloc.mps_pct) == (24, 3, 60)
    assert alloc.total_share == 64

    # without a report the decision file gives the same record back
    snap2 = build_snapshot([running], NODES, default_models(), now=NOW,
                           decisions={JOB: back}).snapshot
    assert snap2.jobs[JOB].allocation.workers == WORKERS
