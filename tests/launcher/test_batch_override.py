"""gimbal-run applies the scheduler's global batch only when the job's metadata allows it
(``gsbatch --allow-batch-change``, seed 002), and says what it ran (launcher.jobmeta)."""
import json
import os

import pytest
from click.testing import CliRunner

from launcher.decision import LauncherDecision, decision_path, write_decision
from launcher.envvars import config
from launcher.jobmeta import JobMeta, check_batch, read_job_meta
from launcher.run import cli
from launcher_testutil import fake_squeue_env

W2 = ({"gpu": "n1:0", "share": 128, "micro_batch": 64, "accum_steps": 2},
      {"gpu": "n1:1", "share": 128, "micro_batch": 64, "accum_steps": 2})


def dec(gb=256, workers=W2, sub=64):
    return LauncherDecision(job_id="77", global_batch=gb, sub_batch=sub, accum_steps=2,
                            mps_thread_pct=50, workers=workers)


ALLOWED = JobMeta(batch=64, batch_range=(32, 512), tagged=True)
FIXED = JobMeta(batch=64, tagged=True)


@pytest.mark.parametrize("meta,status,runs", [
    (ALLOWED, "applied", 256),
    (JobMeta(batch=256, tagged=True), "submitted", 256),   # the submitted batch: no override
    (FIXED, "refused", 64),                                # no --allow-batch-change
    (JobMeta(batch=64, batch_range=(32, 128), tagged=True), "refused", 64),  # outside it
    (JobMeta(tagged=False), "refused", None),              # untagged: names no batch
    (JobMeta(error="squeue: timed out"), "refused", None),  # unreadable: fail closed
    (None, "unchecked", 256),                              # not inside a Slurm job
])
def test_check_batch(meta, status, runs):
    d, chk = check_batch(dec(), meta)
    assert (chk.status, chk.global_batch, chk.requested) == (status, runs, 256)
    assert d.global_batch == runs
    assert d.mps_thread_pct == 50 and d.accum_steps == 2  # the rest of the decision stays
    if status == "refused":
        assert chk.why
    if runs == 64:  # the submitted batch, split evenly, micro-batch = share / accumulation
        assert [(w["share"], w["micro_batch"], w["accum_steps"]) for w in d.workers] == \
            [(32, 16, 2), (32, 16, 2)]
        assert d.sub_batch == 64
    if runs is None:  # the training's own batch: no global batch, no shares of 256
        assert d.workers is None and d.sub_batch == 64


def test_refused_batch_is_split_per_pipeline_stage():
    ws = tuple(dict(w, gpu=f"n1:{i}", stage=i // 2, share=100, micro_batch=100, accum_steps=1)
               for i, w in enumerate(W2 + W2))
    d, chk = check_batch(dec(gb=200, workers=ws, sub=None), FIXED)
    assert chk.status == "refused"
    by_stage = {}
    for w in d.workers:
        by_stage.setdefault(w["stage"], []).append(w["share"])
    assert by_stage == {0: [32, 32], 1: [32, 32]}


def test_decision_without_a_batch_is_left_alone():
    d0 = LauncherDecision(job_id="77", mps_thread_pct=40)
    d, chk = check_batch(d0, FIXED)
    assert d is d0 and chk.status == "none"


def _runner(stdout, rc=0):
    calls = []

    def run(argv, **kw):
        calls.append(argv)

        class P:
            returncode, stderr = rc, "boom"
        P.stdout = stdout
        return P
    return run, calls


def test_read_job_meta_reads_only_the_admin_comment():
    out = json.dumps({"jobs": [{"job_id": 77, "admin_comment": "gimbal:v1;app=x;batch=64;batchrange=32:512",
                                "comment": "gimbal:app=x,batch=64,batchrange=1:99999"}]})
    run, calls = _runner(out)
    m = read_job_meta("77", {}, run=run)
    assert calls == [["squeue", "--json", "--jobs=77"]]
    assert (m.batch, m.batch_range, m.error) == (64, (32, 512), None)
    # the key only in the user's Comment (job_submit.lua did not copy it): no permission
    run, _ = _runner(json.dumps({"jobs": [{"job_id": 77, "admin_comment": "",
                                           "comment": "x gimbal:app=x,batch=64,batchrange=1:99999"}]}))
    m = read_job_meta("77", {}, run=run)
    assert (m.batch, m.batch_range, m.tagged) == (None, None, False)


def test_read_job_meta_survives_another_jobs_invalid_utf8():
    """22.05 squeue --json ignores --jobs: the output lists every job, and a hostile job name
    may be invalid UTF-8 (gimbal-run crashed on it with UnicodeDecodeError)."""
    import subprocess
    import sys
    raw = (b'{"jobs": [{"job_id": 1, "name": "\xff\xfe"}, '
           b'{"job_id": 77, "admin_comment": "gimbal:v1;app=x;batch=64;batchrange=32:512"}]}')

    def run(argv, **kw):
        return subprocess.run([sys.executable, "-c", "import sys; sys.stdout.buffer.write("
                               + repr(raw) + ")"], **kw)
    m = read_job_meta("77", {}, run=run)
    assert (m.batch, m.batch_range, m.error) == (64, (32, 512), None)


@pytest.mark.parametrize("stdout,rc,needle", [
    ("", 1, "failed (rc 1)"), ("not json", 0, "unreadable output"),
    (json.dumps({"jobs": [{"job_id": 78}]}), 0, "does not list job 77")])
def test_read_job_meta_errors_name_the_problem(stdout, rc, needle):
    run, _ = _runner(stdout, rc)
    m = read_job_meta("77", {}, run=run)
    assert needle in m.error and m.batch_range is None
    assert "not a Slurm job id" in read_job_meta("77; rm -rf /", {}).error


@pytest.mark.parametrize("admin,status,gb", [
    ("gimbal:v1;app=cifar10;batch=64;batchrange=32:512", "applied", "256"),
    ("gimbal:v1;app=cifar10;batch=64", "refused", "64"),
])
def test_gimbal_run_applies_or_refuses_the_decision_batch(tmp_path, admin, status, gb):
    """The CLI inside a (fake) Slurm job: squeue answers with the job's AdminComment."""
    sd = str(tmp_path / "state")
    write_decision(decision_path("77", sd), dec())
    env = {k: None for k in os.environ if k.startswith(("SLURM", "GIMBAL_", "CUDA_"))}
    env.update(SLURM_JOB_ID="77", SLURM_JOB_NODELIST="localhost", SLURM_JOB_NUM_NODES="1",
               SLURM_NODEID="0", SLURM_NTASKS_PER_NODE="1", CUDA_VISIBLE_DEVICES="",
               **fake_squeue_env(tmp_path, admin))
    res = CliRunner().invoke(cli, ["--dry-run", "--json", "--standalone", "--nproc", "2",
                                   "--state-dir", sd, "--job-id", "77", "--", "t.py"], env=env)
    assert res.exit_code == 0, res.output
    plan = json.loads(res.output[res.output.index("{"):])
    assert plan["batch"]["status"] == status and plan["env"]["GIMBAL_GLOBAL_BATCH"] == gb
    assert plan["env"]["GIMBAL_BATCH_SOURCE"] == status
    shares = [w["share"] for w in json.loads(plan["env"]["GIMBAL_WORKERS"])]
    assert sum(shares) == int(gb)
    # the training's reports carry the batch it runs and where it came from
    cfg = config(plan["env"])
    assert cfg.report_fields(2, int(gb))["global_batch"] == int(gb)
    assert cfg.report_fields(2, int(gb))["batch_source"] == status


def test_the_jobs_own_flag_wins_and_is_reported_as_such(tmp_path):
    sd = str(tmp_path / "state")
    write_decision(decision_path("77", sd), dec(workers=None))
    env = {k: None for k in os.environ if k.startswith(("SLURM", "GIMBAL_", "CUDA_"))}
    res = CliRunner().invoke(cli, ["--dry-run", "--json", "--standalone", "--nproc", "2",
                                   "--global-batch", "96", "--state-dir", sd, "--job-id", "77",
                                   "--", "t.py"], env=dict(env, CUDA_VISIBLE_DEVICES=""))
    assert res.exit_code == 0, res.output
    plan = json.loads(res.output[res.output.index("{"):])
    assert plan["batch"]["status"] == "user" and plan["env"]["GIMBAL_GLOBAL_BATCH"] == "96"
