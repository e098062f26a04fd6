"""GIMBAL squeeze on a real cluster (the mps-only 22.05 test cluster, ``GresTypes=gpu,mps``).

Two gate jobs run real trainings through gimbal-run (``examples/train_mnistlike.py`` on CPU).
The daemon with ``lucid+gimbal`` starts the first alone (``mps:50`` on the only free GPU), packs
the second beside it (``mps:50``, the same GPU), then the coordinator (Algorithm 1, JCT) squeezes
the short job: its decision's MPS share drops and nothing else changes in Slurm.  That job's
gimbal-run checkpoints and relaunches with ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` at the new share
(read from its own reports), resumes at the step it reached, with the same global batch; the
other job runs on undisturbed at Slurm's 50 %.  The audit has the decision change and the plan
the objective before and after the search.

The throughput model the daemon is given here is a stated MPS-split model (every job wants the
whole GPU; a worker runs at the speed of its MPS share, slowed by its partner's share:
time = (1 + other) / own, both as fractions; with the estimates below one squeeze step, 50 ->
40 %, gains and the next does not while the long job has 3.75 to 6.25 times the short one's
remaining time), so the squeeze is decided by the model, not by
CPU timings that fake GPUs cannot give.  The live snapshot shows the split Slurm runs: 50/50
(each worker's ceiling ``mps_cap`` = its ``mps:50`` units) before the squeeze, the applied share
and the same ceilings after it, and the coordinator never plans past the ceiling.
"""
from __future__ import annotations

import dataclasses
import json
import sys
import time

import pytest

from gimbalctl.config import Config
from gimbalctl.daemon import run_cycle
from gimbalctl.profiles import default_models
from gimbalctl.store import Store
from policies.registry import get_policy
from policies.throughput import InterferenceTable
from tests.slurm.cluster import REPO
from tests.slurm.test_daemon_gate import backend_for
from tests.slurm.test_daemon_ordering import Gimbal

pytestmark = pytest.mark.slurm

JOB = """#!/bin/bash
export GIMBAL_STATE_DIR={inner}/state PYTHONPATH={repo} OMP_NUM_THREADS=1
# --standalone: the fake nodes' names do not resolve, so torchrun rendezvous on localhost
exec {py} -m launcher.run --standalone --job-id $SLURM_JOB_ID --nproc 1 --poll-interval 0.3 \\
  --checkpoint-dir {inner}/ckpt-$SLURM_JOB_ID \\
  -- {repo}/examples/train_mnistlike.py --steps 100000 --samples 512 --global-batch 64 \\
  --hidden 16 --step-sleep 0.05
"""


@dataclasses.dataclass(frozen=True)
class SplitTable(InterferenceTable):
    def ratio(self, app, other, mps_pct=None, other_mps_pct=None):
        a, b = (mps_pct or 100) / 100, (other_mps_pct or 100) / 100
        return (1 + b) / a

    def mps_alone(self, app, mps_pct):
        return 100 / (mps_pct or 100)


def gsbatch(c, *args) -> str:
    py = "python" if c.in_chroot else sys.executable
    out = c.run([py, str(REPO / "slurm_hooks" / "gsbatch"), *args], check=True)
    return out.stdout.strip().split(";")[0].split()[-1]


def reports(g, job) -> list[dict]:
    p = g.host_dir / "state" / "reports" / f"{job}.jsonl"
    if not p.exists():
        return []
    return [json.loads(x) for x in p.read_text().splitlines() if x.strip()]


def wait_for(pred, timeout, what, poll=0.3):
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > end:
            raise TimeoutError(f"{what} not within {timeout}s")
        time.sleep(poll)


def test_daemon_squeezes_one_packed_job_through_its_launcher(slurm_2205_mps, clean_slurm):
    c = slurm_2205_mps
    g = Gimbal(c)
    (g.host_dir / "job.sh").write_text(JOB.format(inner=g.inner, repo=REPO, py=sys.executable))
    # m2 and one GPU of m1 busy: one GPU is left for the two gate jobs.  The blockers hold
    # whole GPUs (gres/gpu), which Slurm never shares; as bert at batch 64 per GPU they do not
    # leave memory for a partner either, so the policy does not try to pack beside them.
    for args in (["--gres=gpu:2", "-w", "m2"], ["--gres=gpu:1", "-w", "m1"]):
        c.wait_state(c.submit([*args, "-t", "20", "-J", "blocker",
                               "--comment=gimbal:app=bert,batch=128"]), "RUNNING", timeout=30)
    common = ["--app", "cifar10", "--batch", "64", "--gate", "--share", "--gpus", "1",
              f"--output={g.inner}/%j.out", f"--chdir={g.inner}", f"{g.inner}/job.sh"]
    short = gsbatch(c, "--est", "1200", *common)
    long_ = gsbatch(c, "--est", "6000", *common)
    be = backend_for(c)
    st = Store(str(g.host_db))
    st.upgrade()
    # the jobs' own estimates (1200 s, 6000 s) decide who is short: with the default rule only
    # the time limit counts, and Slurm 22.05 reports an unlimited job's limit as 365 days once
    # it runs, or as unset, depending on timing (docs/slurm.md), which made the squeeze flaky
    cfg = Config(mode="gate", state_dir=str(g.host_dir / "state"), estimates="bounded")
    models = dataclasses.replace(default_models(), interference=SplitTable())
    pol = get_policy("lucid+gimbal")

    def cycle():
        res = run_cycle(cfg, be, st, pol, models=models)
        assert res.status == "done", ([ch.as_dict() for ch in res.changes], res.warnings)
        return res

    cycle()  # the shorter job starts alone on the free GPU
    c.wait_state(short, "RUNNING", timeout=30)
    r2 = cycle()  # the longer one packs beside it
    start = [a for a in r2.plan.starts() if a.job_id == long_]
    assert start and start[0].share_with == (short,)
    c.wait_state(long_, "RUNNING", timeout=30)
    jobs = {x.job_id: x for x in be.jobs(["RUNNING"])}
    ua, ub = jobs[short].gres_alloc[0], jobs[long_].gres_alloc[0]
    assert ua.name == ub.name == "mps" and ua.node == ub.node == "m1" and ua.indices == ub.indices
    # both train and report under Slurm's MPS share
    for j in (short, long_):
        wait_for(lambda: len(reports(g, j)) >= 2, 120, f"reports of {j}")
        assert reports(g, j)[-1]["mps_thread_pct"] == "50"
    r3 = cycle()  # the coordinator squeezes the short, low-priority J_max (eq. 1, Algorithm 1)
    # it started from the split Slurm runs: 50/50, each at its ceiling (the mps:50 units), not
    # the decision's 100 %; no worker is planned past its ceiling
    for j in (short, long_):
        (w,) = r3.snapshot.snapshot.jobs[j].allocation.workers
        assert (w.mps_pct, w.mps_cap) == (50, 50), w
    resized = {a.job_id: a for a in r3.plan.resizes()}
    assert set(resized) == {short}, r3.plan.as_dict()
    assert all(w.mps_pct <= 50 and w.mps_cap == 50 for w in resized[short].workers)
    pct = resized[short].mps_pct
    assert pct < 50 and pct % 10 == 0
    why = r3.plan.reasons[short]
    assert why.numbers["objective_after"] < why.numbers["objective_before"]
    assert [t.field for t in r3.targets if t.job_id == short] == ["decision"]
    (row,) = st.audit_rows(job_id=short, cycle_id=r3.cycle_id)
    assert (row.field, row.status) == ("decision", "applied")
    assert json.loads(row.after)["mps_thread_pct"] == pct
    assert row.reason == ("plan: squeeze/swell on the same GPUs (local objective "
                          f"{why.numbers['objective_before']:.6g} -> "
                          f"{why.numbers['objective_after']:.6g})")
    # the short job's launcher checkpoints and relaunches with the new share; same global batch
    after = wait_for(lambda: [r for r in reports(g, short) if r.get("restart") == 1], 180,
                     "reports after the relaunch")
    before = [r for r in reports(g, short) if r.get("restart") == 0]
    assert after[-1]["mps_thread_pct"] == str(pct)
    assert {r["global_batch"] for r in before + after} == {64}
    assert c.show_job(short).get("Restarts", "0") == "0"  # relaunched inside its allocation
    # the long job was neither signalled nor relaunched, and its Slurm job is unchanged
    assert c.job_state(long_) == c.job_state(short) == "RUNNING"
    assert {r.get("restart") for r in reports(g, long_)} == {0}
    assert reports(g, long_)[-1]["mps_thread_pct"] == "50"
    # a further cycle leaves everything as it is (same search result, same decision)
    r4 = cycle()
    assert not [ch for ch in r4.changes if ch.job_id in (short, long_)]
    # the snapshot after the squeeze shows the shares applied (from the jobs' reports), which
    # are the ones decided: the short job at its new share, the long one at Slurm's 50 %
    jobs4 = r4.snapshot.snapshot.jobs
    assert jobs4[short].allocation.workers == resized[short].workers
    assert [(w.mps_pct, w.mps_cap) for w in jobs4[short].allocation.workers] == [(pct, 50)]
    assert [(w.mps_pct, w.mps_cap) for w in jobs4[long_].allocation.workers] == [(50, 50)]
