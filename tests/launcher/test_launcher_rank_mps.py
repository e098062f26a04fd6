"""Per-rank MPS limits (seed 004 LGRR squeezes a worker, not a job): the per-worker record's
``mps_pct`` / ``mem_limit_mb`` reach each rank's own environment before its CUDA context
exists; the job-level value (gimbal-run's, or Slurm's gres/mps) stays the ceiling."""
import json
import os
import subprocess
import sys

from launcher.decision import LauncherDecision, decision_path, write_decision
from launcher.mps import MEM_VAR, THREAD_VAR, rank_mps_env
from launcher.run import Options, Supervisor, build_plan
from launcher_testutil import REPO, subprocess_env

RANK_ENV = os.path.join(os.path.dirname(__file__), "fixtures", "rank_env.py")


def _w(gpu, pct, mem=None, share=32):
    return {"gpu": gpu, "share": share, "micro_batch": share, "accum_steps": 1, "mps_pct": pct,
            "mem_limit_mb": mem, "stage": 0}


WORKERS = (_w("n1:0", 70, 9000), _w("n1:1", 30, 4000))


def test_each_rank_gets_its_own_share():
    assert rank_mps_env(WORKERS, 0, 2, {}) == {THREAD_VAR: "70", MEM_VAR: "0=9000M,1=9000M"}
    assert rank_mps_env(WORKERS, 1, 2, {}) == {THREAD_VAR: "30", MEM_VAR: "0=4000M,1=4000M"}


def test_job_level_limit_stays_the_ceiling():
    # Slurm's gres/mps (or gimbal-run's job-level value) gave 50 %: rank 0 may not exceed it
    inherited = {THREAD_VAR: "50", MEM_VAR: "0=6000M"}
    assert rank_mps_env(WORKERS, 0, 1, inherited) == {THREAD_VAR: "50", MEM_VAR: "0=6000M"}
    assert rank_mps_env(WORKERS, 1, 1, inherited) == {THREAD_VAR: "30", MEM_VAR: "0=4000M"}


def test_no_record_or_no_share_sets_nothing():
    assert rank_mps_env(None, 0, 1, {}) == {}
    assert rank_mps_env(WORKERS, 2, 1, {}) == {}  # a rank beyond the record
    assert rank_mps_env((_w("n1:0", None),), 0, 1, {THREAD_VAR: "40"}) == {}


def test_torchrun_ranks_run_with_their_record_shares(tmp_path):
    """Real torchrun, two CPU ranks: the decision's record 70 % / 30 % reaches rank 0 / 1."""
    sd = str(tmp_path / "state")
    write_decision(decision_path("rk", sd), LauncherDecision(
        job_id="rk", global_batch=64, sub_batch=32, mps_thread_pct=70, workers=WORKERS))
    out = tmp_path / "out"
    out.mkdir()
    p = subprocess.run([sys.executable, "-m", "launcher.run", "--standalone", "--nproc", "2",
                        "--state-dir", sd, "--job-id", "rk", "--", RANK_ENV, str(out)],
                       cwd=REPO, env=subprocess_env({"CUDA_VISIBLE_DEVICES": ""}),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=180)
    assert p.returncode == 0, p.stdout
    r0, r1 = (json.load(open(out / f"rank{r}.json")) for r in (0, 1))
    assert (r0[THREAD_VAR], r1[THREAD_VAR]) == ("70", "30")
    assert (r0[MEM_VAR], r1[MEM_VAR]) == ("0=9000M,1=9000M", "0=4000M,1=4000M")


def test_a_per_worker_share_change_relaunches(tmp_path):
    """Only one worker's share moves (the job-level ceiling stays 70): still a new CUDA
    context for that rank, so gimbal-run checkpoints and relaunches."""
    sd = str(tmp_path / "state")
    dpath = decision_path("sv", sd)
    write_decision(dpath, LauncherDecision(job_id="sv", global_batch=64, mps_thread_pct=70,
                                           workers=WORKERS))
    opts = Options(script="t.py", script_args=[], standalone=True, nproc=2, job_id="sv",
                   state_dir=sd)
    sup = Supervisor(opts, max_relaunches=3)
    # two CPU ranks: on a GPU node gimbal-run refuses more ranks than visible GPUs
    sup.plan = build_plan(opts, env={"CUDA_VISIBLE_DEVICES": ""}, restart_count=0)
    write_decision(dpath, LauncherDecision(job_id="sv", global_batch=64, mps_thread_pct=70,
                                           workers=(WORKERS[0], _w("n1:1", 40, 4000))))
    sup._check_decision({})
    assert sup.usr2_pending
