"""The real test clusters work, on both Slurm releases, with gimbal's hooks loaded."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

GPU_NODES = {"gpu1", "gpu2", "gpu3"}
REPO = Path(__file__).resolve().parents[2]


def _show_d(c, job):
    return c.run(["scontrol", "-d", "show", "job", str(job)], check=True).stdout


def test_gpu_job_runs_on_a_gpu_node(slurm_cluster, clean_slurm):
    c = slurm_cluster
    assert c.nodes_idle()
    job = c.submit(["--gres=gpu:1", "--job-name=smoke-gpu"])
    c.wait_state(job, "RUNNING", timeout=30)
    info = c.show_job(job)
    assert info["NodeList"] in set(c.nodes)
    assert "gpu" in info.get("TresPerNode", "")
    detail = _show_d(c, job)
    assert "gpu:1(IDX:" in detail.replace("gpu:(null):1", "gpu:1"), detail


def test_shard_job_runs_on_a_shard_node(slurm_cluster, clean_slurm):
    c = slurm_cluster
    job = c.submit(["--gres=shard:2"])
    c.wait_state(job, "RUNNING", timeout=30)
    assert c.show_job(job)["NodeList"] in GPU_NODES
    assert "shard" in c.show_job(job).get("TresPerNode", "")


def test_job_submit_lua_rejects_malformed_gimbal_comment(slurm_cluster, clean_slurm):
    c = slurm_cluster
    with pytest.raises(subprocess.CalledProcessError) as ei:
        c.submit(["--comment", "gimbal:app=bert,batch=0"])
    err = ei.value.stderr
    assert "gimbal: invalid job comment: batch must be an integer > 0" in err, err
    assert "Invalid argument" in err, err           # error code 22 (EINVAL), see job_submit.lua
    with pytest.raises(subprocess.CalledProcessError) as ei:
        c.submit(["--comment", "gimbal:app=bert,colour=red"])
    assert "unknown gimbal option 'colour'" in ei.value.stderr


def test_job_submit_lua_tags_admin_comment(slurm_cluster, clean_slurm):
    c = slurm_cluster
    job = c.submit(["--comment", "gimbal:app=bert,batch=064,iters=1000,est=3600,share=yes"],
                   hold=True)
    info = c.show_job(job)
    assert info["AdminComment"] == "gimbal:v1;app=bert;batch=64;iters=1000;est=3600;share=yes"
    assert info["Comment"] == "gimbal:app=bert,batch=064,iters=1000,est=3600,share=yes"
    # modify: a new gimbal comment renews the tag, a bad one is refused
    c.run(["scontrol", "update", f"jobid={job}", "comment=gimbal:app=gpt2,iters=5"], check=True)
    assert c.show_job(job)["AdminComment"] == "gimbal:v1;app=gpt2;iters=5"
    bad = c.run(["scontrol", "update", f"jobid={job}", "comment=gimbal:app=Bad!"])
    assert bad.returncode != 0
    assert c.show_job(job)["AdminComment"] == "gimbal:v1;app=gpt2;iters=5"


def test_job_submit_lua_leaves_other_comments_alone(slurm_cluster, clean_slurm):
    c = slurm_cluster
    job = c.submit(["--comment", "just a note"], hold=True)
    info = c.show_job(job)
    assert info["Comment"] == "just a note"
    assert info.get("AdminComment", "(null)") in ("(null)", "")


def test_unprivileged_user_gets_tag(slurm_cluster, clean_slurm):
    c = slurm_cluster
    job = c.submit(["--comment", "gimbal:app=resnet50,est=600"], user="alice", hold=True)
    info = c.show_job(job)
    assert info["UserId"].startswith("alice(")
    assert info["AdminComment"] == "gimbal:v1;app=resnet50;est=600"


def test_prolog_and_epilog_record_the_job(slurm_cluster, clean_slurm):
    c = slurm_cluster
    t0 = time.time()
    job = c.submit(["--gres=gpu:2", "--wrap", "sleep 1"])
    pro = c.wait_hook_event(job, "prolog", since=t0)
    epi = c.wait_hook_event(job, "epilog", since=t0, timeout=30)
    assert pro["node"] in c.nodes and epi["node"] == pro["node"]
    assert len(pro["gpus"].split(",")) == 2
    assert pro["mps"] == "no"
    assert epi["exit"].split(":")[0] == "0"


def test_mps_job_sees_its_share_and_prolog_skips_absent_mps(slurm_2205_mps, clean_slurm):
    """On the mps-only variant the job gets its percentage; there is no MPS binary on a CI
    machine, so the Prolog records mps=absent and the job still runs."""
    c = slurm_2205_mps
    t0 = time.time()
    job = c.submit(["--gres=mps:50", "--wrap", "sleep 1"])
    pro = c.wait_hook_event(job, "prolog", since=t0)
    assert pro["mps_pct"] == "50"
    assert pro["mps"] in ("absent", "started")
    c.wait_hook_event(job, "epilog", since=t0, timeout=30)


def test_gsbatch_submission_tagged_and_held(slurm_2205, clean_slurm):
    """gsbatch -> real sbatch -> job_submit.lua: the tag lands in AdminComment, --gate holds."""
    c = slurm_2205
    p = subprocess.run([sys.executable, str(REPO / "slurm_hooks" / "gsbatch"), "--app", "bert",
                        "--batch", "32", "--est", "1h", "--gate", "--parsable", "-o", "/dev/null",
                        "--chdir=/tmp", "--wrap", "sleep 60"], env=c.env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    info = c.show_job(int(p.stdout.strip()))
    assert info["AdminComment"] == "gimbal:v1;app=bert;batch=32;est=3600;gate=1"
    assert info["JobState"] == "PENDING" and info["Reason"] == "JobHeldUser"
