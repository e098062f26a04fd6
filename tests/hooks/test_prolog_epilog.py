"""slurm_hooks/prolog.sh, epilog.sh, task_prolog.sh with a fake Slurm environment.

The MPS path uses a FAKE nvidia-cuda-mps-control (a shell script written into a temp
"fake-bin" dir, first on PATH) that records how it was called."""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

HOOKS = Path(__file__).resolve().parents[2] / "slurm_hooks"

FAKE_MPS = """#!/bin/sh
# FAKE nvidia-cuda-mps-control for gimbal's hook tests: records argv, env and stdin.
{
  echo "argv=$*"
  echo "pipe=$CUDA_MPS_PIPE_DIRECTORY"
  echo "logdir=$CUDA_MPS_LOG_DIRECTORY"
  echo "cvd=$CUDA_VISIBLE_DEVICES"
  if [ "$1" != "-d" ]; then echo "stdin=$(cat)"; fi
} >> "$FAKE_MPS_LOG"
case "${FAKE_MPS_MODE:-ok}" in
  fail) exit 1 ;;
  hang) sleep 30 ;;
esac
exit 0
"""


@pytest.fixture
def hookenv(tmp_path):
    fake_bin = tmp_path / "fake-bin"
    fake_bin.mkdir()
    env = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "SLURM_JOB_ID": "42", "SLURMD_NODENAME": "n1", "SLURM_CLUSTER_NAME": "test",
        "SLURM_JOB_UID": str(os.getuid()), "SLURM_JOB_GID": str(os.getgid()),
        "CUDA_VISIBLE_DEVICES": "0,1",
        "GIMBAL_HOOKS_CONF": str(tmp_path / "none.conf"),
        "GIMBAL_HOOK_LOG_DIR": str(tmp_path / "log"),
        "GIMBAL_MPS_DIR": str(tmp_path / "mps"),
        "FAKE_MPS_LOG": str(tmp_path / "fake-mps.log"),
    }
    return tmp_path, fake_bin, env


def with_fake_mps(env, fake_bin):
    f = fake_bin / "nvidia-cuda-mps-control"
    f.write_text(FAKE_MPS)
    f.chmod(0o755)
    return dict(env, PATH=f"{fake_bin}:{env['PATH']}")


def run_hook(name, env, timeout=20):
    t0 = time.monotonic()
    p = subprocess.run([str(HOOKS / name)], env=env, capture_output=True, text=True,
                       timeout=timeout, cwd="/")
    return p, time.monotonic() - t0


def events(tmp_path):
    f = tmp_path / "log" / "events.log"
    if not f.exists():
        return []
    return [dict(kv.split("=", 1) for kv in line.split()) for line in f.read_text().splitlines()]


def test_plain_job_recorded_no_mps(hookenv):
    tmp, fake_bin, env = hookenv
    env = with_fake_mps(env, fake_bin)
    for h in ("prolog.sh", "epilog.sh"):
        p, _ = run_hook(h, dict(env, SLURM_JOB_EXIT_CODE2="0:0"))
        assert p.returncode == 0 and p.stdout == "" and p.stderr == ""
    ev = events(tmp)
    assert [e["event"] for e in ev] == ["prolog", "epilog"]
    assert ev[0]["job"] == "42" and ev[0]["node"] == "n1" and ev[0]["cluster"] == "test"
    assert ev[0]["gpus"] == "0,1" and ev[0]["mps"] == "no"
    assert ev[1]["exit"] == "0:0"
    assert not (tmp / "fake-mps.log").exists()          # never called for a non-MPS job


def without_mps_binary(env, tmp_path):
    """``env`` with a PATH of links to every command of its PATH but nvidia-cuda-mps-control
    (a GPU machine has the real one in /usr/bin too)."""
    d = tmp_path / "no-mps-bin"
    d.mkdir()
    for part in env["PATH"].split(":"):
        for f in sorted(Path(part).iterdir()) if Path(part).is_dir() else ():
            if f.name != "nvidia-cuda-mps-control" and not os.path.lexists(d / f.name):
                (d / f.name).symlink_to(f.resolve())
    return dict(env, PATH=str(d))


def test_mps_job_without_mps_binary(hookenv):
    tmp, _, env = hookenv
    env = without_mps_binary(env, tmp)
    env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = "50"
    p, _ = run_hook("prolog.sh", env)
    assert p.returncode == 0
    assert events(tmp)[0]["mps"] == "absent" and events(tmp)[0]["mps_pct"] == "50"
    assert not (tmp / "mps").exists()
    p, _ = run_hook("task_prolog.sh", env)
    assert p.returncode == 0 and p.stdout == ""


def test_mps_daemon_started_and_stopped(hookenv):
    tmp, fake_bin, env = hookenv
    env = with_fake_mps(env, fake_bin)
    env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = "25"
    jobdir = tmp / "mps" / "job42-n1"
    p, _ = run_hook("prolog.sh", env)
    assert p.returncode == 0
    assert events(tmp)[-1]["mps"] == "started"
    calls = (tmp / "fake-mps.log").read_text()
    assert "argv=-d\n" in calls
    assert f"pipe={jobdir}/pipe\n" in calls and f"logdir={jobdir}/log\n" in calls
    assert "cvd=0,1\n" in calls
    assert (jobdir / "pipe").is_dir() and oct(jobdir.stat().st_mode & 0o777) == "0o700"
    # TaskProlog points the job's CUDA clients at it
    p, _ = run_hook("task_prolog.sh", env)
    assert p.stdout.splitlines() == [f"export CUDA_MPS_PIPE_DIRECTORY={jobdir}/pipe",
                                     f"export CUDA_MPS_LOG_DIRECTORY={jobdir}/log"]
    # Epilog: "quit" on the same pipe dir, then the dir is gone (the env of the epilog need
    # not carry the MPS share: it goes by the dir the prolog made)
    env.pop("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
    p, _ = run_hook("epilog.sh", env)
    assert p.returncode == 0
    calls = (tmp / "fake-mps.log").read_text().split("argv=")
    assert calls[-1].startswith("\n") and "stdin=quit" in calls[-1]
    assert f"pipe={jobdir}/pipe" in calls[-1]
    assert not jobdir.exists()
    assert events(tmp)[-1]["event"] == "epilog" and events(tmp)[-1]["mps"] == "stopped"


def test_mps_gres_env_also_detected(hookenv):
    tmp, fake_bin, env = hookenv
    env = with_fake_mps(env, fake_bin)
    env["SLURM_JOB_GRES"] = "gres/mps:50"
    run_hook("prolog.sh", env)
    assert events(tmp)[-1]["mps"] == "started"


def test_mps_failure_and_hang_never_fail_the_hook(hookenv):
    tmp, fake_bin, env = hookenv
    env = with_fake_mps(env, fake_bin)
    env.update(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="50", FAKE_MPS_MODE="fail")
    p, _ = run_hook("prolog.sh", env)
    assert p.returncode == 0 and events(tmp)[-1]["mps"] == "start-failed"
    env.update(FAKE_MPS_MODE="hang", GIMBAL_HOOK_TIMEOUT="1", SLURM_JOB_ID="43")
    p, took = run_hook("prolog.sh", env)
    assert p.returncode == 0 and took < 6
    assert events(tmp)[-1]["mps"] == "start-failed"
    p, took = run_hook("epilog.sh", env)
    assert p.returncode == 0 and took < 6
    assert events(tmp)[-1]["mps"] == "stop-failed"
    assert not (tmp / "mps" / "job43-n1").exists()


def test_mps_off_setting(hookenv):
    tmp, fake_bin, env = hookenv
    env = with_fake_mps(env, fake_bin)
    env.update(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="50", GIMBAL_MPS="off")
    run_hook("prolog.sh", env)
    assert events(tmp)[-1]["mps"] == "disabled"
    assert not (tmp / "fake-mps.log").exists()


def test_unwritable_log_dir_still_exits_0(hookenv):
    tmp, _, env = hookenv
    (tmp / "file").write_text("x")
    env["GIMBAL_HOOK_LOG_DIR"] = str(tmp / "file" / "sub")   # cannot be created
    for h in ("prolog.sh", "epilog.sh", "task_prolog.sh"):
        p, _ = run_hook(h, env)
        assert p.returncode == 0


def test_hostile_values_are_not_executed(hookenv):
    tmp, fake_bin, env = hookenv
    env = with_fake_mps(env, fake_bin)
    pwned = tmp / "pwned"
    env.update(SLURM_JOB_ID=f"1;touch {pwned}", SLURMD_NODENAME=f"$(touch {pwned})",
               CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="50",
               SLURM_JOB_COMMENT=f"`touch {pwned}`", SLURM_CLUSTER_NAME="a b\nevent=fake",
               CUDA_VISIBLE_DEVICES=f"0 $(touch {pwned})")
    for h in ("prolog.sh", "epilog.sh", "task_prolog.sh"):
        p, _ = run_hook(h, env)
        assert p.returncode == 0
    assert not pwned.exists()
    ev = events(tmp)
    assert len(ev) == 2 and ev[0]["job"] == "-" and ev[0]["mps"] == "no-job-id"
    assert ev[0]["cluster"] == "a_b_event_fake"
    assert not (tmp / "fake-mps.log").exists()


def test_config_file_next_to_slurm_conf(hookenv):
    tmp, _, env = hookenv
    del env["GIMBAL_HOOKS_CONF"], env["GIMBAL_HOOK_LOG_DIR"]
    etc = tmp / "etc"
    etc.mkdir()
    pwned = tmp / "pwned"
    (etc / "gimbal-hooks.conf").write_text(
        "# comment\n"
        f"GIMBAL_HOOK_LOG_DIR=$(touch {pwned})\n"          # invalid: ignored, never run
        f"GIMBAL_HOOK_LOG_DIR={tmp}/fromconf\n"
        "GIMBAL_HOOK_TIMEOUT=abc\n")
    env["SLURM_CONF"] = str(etc / "slurm.conf")
    p, _ = run_hook("prolog.sh", env)
    assert p.returncode == 0
    assert (tmp / "fromconf" / "events.log").exists()
    assert not pwned.exists()
