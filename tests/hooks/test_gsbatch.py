"""slurm_hooks/gsbatch: argument handling with a fake sbatch, and one real submission."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_hooks import gsbatch  # the repo root is on the path (tests/conftest.py)

REPO = Path(__file__).resolve().parents[2]

FAKE_SBATCH = """#!/usr/bin/env python3
# FAKE sbatch for gsbatch tests: prints its argv as JSON
import json, sys
print(json.dumps(sys.argv[1:]))
"""


def cmd(*argv):
    return gsbatch.build_command(list(argv), env={})


def test_metadata_goes_into_comment_in_fixed_order():
    c, dry = cmd("--deadline", "1767225600", "--share", "--est", "2h", "--iters", "1000",
                 "--batch=64", "--app", "bert", "-p", "gpu", "--gres=gpu:2", "job.sh", "--lr", "3")
    assert not dry
    assert c == ["sbatch", "--comment=gimbal:app=bert,batch=64,iters=1000,est=7200,share=yes,"
                 "deadline=1767225600", "-p", "gpu", "--gres=gpu:2", "job.sh", "--lr", "3"]


def test_gate_submits_held():
    c, _ = cmd("--app", "x", "--gate", "--no-share", "job.sh")
    assert c == ["sbatch", "--hold", "--comment=gimbal:app=x,share=no,gate=1", "job.sh"]


def test_gpus_goes_only_into_the_comment():
    """--gpus N: the count is metadata; the gate job gets no GRES (the daemon sets it)."""
    c, _ = cmd("--app", "bert", "--gate", "--gpus", "2", "-p", "gpu", "job.sh")
    assert c == ["sbatch", "--hold", "--comment=gimbal:app=bert,gate=1,gpus=2", "-p", "gpu", "job.sh"]
    assert not any(a.startswith(("--gres", "--gpus", "-G")) for a in c[1:])
    c, _ = cmd("--gpus=1024", "--app", "x", "job.sh")
    assert c[1] == "--comment=gimbal:app=x,gpus=1024"
    # after the gimbal block --gpus is sbatch's own option; words after the script are its args
    c, _ = cmd("--app", "x", "-p", "gpu", "--gpus", "2", "job.sh")
    assert c[-3:] == ["--gpus", "2", "job.sh"] and "gpus=" not in c[1]
    c, _ = cmd("--app", "x", "--gpus", "2", "--gres=nvme:1", "job.sh", "--gpus", "4")
    assert c == ["sbatch", "--comment=gimbal:app=x,gpus=2", "--gres=nvme:1", "job.sh", "--gpus", "4"]


def test_no_gimbal_options_is_plain_sbatch():
    assert cmd("-p", "gpu", "job.sh") == (["sbatch", "-p", "gpu", "job.sh"], False)


def test_script_args_are_not_parsed():
    c, _ = cmd("--app", "x", "train.py", "--app", "y", "--gate")
    assert c[-4:] == ["train.py", "--app", "y", "--gate"] and "--hold" not in c


@pytest.mark.parametrize("raw,secs", [("3600", 3600), ("90s", 90), ("45m", 2700), ("2h", 7200),
                                      ("1d", 86400), ("10:00", 600), ("1:30:00", 5400),
                                      ("1-00:00:01", 86401)])
def test_durations(raw, secs):
    assert gsbatch.parse_duration(raw) == secs


def test_iso_deadline():
    assert gsbatch.parse_deadline("2026-01-01T00:00:00+00:00") == 1767225600


@pytest.mark.parametrize("argv,needle", [
    (["--batch", "3", "j.sh"], "--app is required"),
    (["--app", "Bert", "j.sh"], "--app must be"),
    (["--app", "x", "--batch", "0", "j.sh"], "--batch must be an integer > 0"),
    (["--app", "x", "--iters", "1e3"], "--iters must be"),
    (["--app", "x", "--est", "soon"], "--est: cannot read"),
    (["--app", "x", "--est", "0"], "--est must be > 0"),
    (["--app", "x", "--deadline", "tomorrow"], "--deadline"),
    (["--app", "x", "--app", "y"], "given twice"),
    (["--app", "x", "--share", "--no-share"], "given twice"),
    (["--app"], "needs a value"),
    (["-p", "gpu", "--app", "x", "j.sh"], "must come before sbatch options"),
    (["--app", "x", "--comment", "hi", "j.sh"], "--comment cannot be combined"),
    (["--app", "x", "--gpus", "0", "j.sh"], "--gpus must be an integer > 0"),
    (["--app", "x", "--gpus", "1025", "j.sh"], "--gpus must be an integer from 1 to 1024"),
    (["--app", "x", "--gpus", "two", "j.sh"], "--gpus must be"),
    (["--app", "x", "--gpus", "2", "--gpus", "3", "j.sh"], "given twice"),
    (["--gpus", "2", "j.sh"], "--app is required"),
    (["--app", "x", "--gpus", "2", "--gres=gpu:2", "j.sh"], "--gpus cannot be combined with sbatch's --gres"),
    (["--app", "x", "--gpus", "2", "--gres", "shard:4", "j.sh"], "--gpus cannot be combined"),
    (["--app", "x", "--gpus", "2", "-G", "2", "j.sh"], "--gpus cannot be combined"),
    (["--app", "x", "--gpus", "2", "--gpus-per-node=2", "j.sh"], "--gpus cannot be combined"),
])
def test_usage_errors(argv, needle):
    with pytest.raises(gsbatch.UsageError, match=None) as ei:
        gsbatch.build_command(argv, env={})
    assert needle in str(ei.value)


def test_cli_dry_run_and_exec_of_fake_sbatch(tmp_path):
    fake = tmp_path / "fake-sbatch"
    fake.write_text(FAKE_SBATCH)
    fake.chmod(0o755)
    env = dict(os.environ, GSBATCH_SBATCH=str(fake))
    tool = [sys.executable, str(REPO / "slurm_hooks" / "gsbatch")]
    # an argument with shell metacharacters stays one argument, never interpreted
    weird = "$(touch " + str(tmp_path / "pwned") + "); echo hi"
    p = subprocess.run(tool + ["--app", "bert", "--est", "5m", "--wrap", weird], env=env,
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == ["--comment=gimbal:app=bert,est=300", "--wrap", weird]
    assert not (tmp_path / "pwned").exists()
    p = subprocess.run(tool + ["--app", "bert", "--dry-run", "--wrap", "a b"], env=env,
                       capture_output=True, text=True, timeout=30)
    assert p.stdout.strip() == f"{fake} --comment=gimbal:app=bert --wrap 'a b'"
    p = subprocess.run(tool + ["--app", "BAD"], env=env, capture_output=True, text=True)
    assert p.returncode == 2 and "gsbatch: --app must be" in p.stderr



def test_warns_on_past_deadline_and_estimate_above_time_limit(tmp_path):
    """issue #14 item 11: a deadline in the past and ``--est`` above ``--time`` warn on stderr
    (the job is still submitted, the comment unchanged)."""
    fake = tmp_path / "fake-sbatch"
    fake.write_text(FAKE_SBATCH)
    fake.chmod(0o755)
    env = dict(os.environ, GSBATCH_SBATCH=str(fake))
    tool = [sys.executable, str(REPO / "slurm_hooks" / "gsbatch")]
    p = subprocess.run(tool + ["--app", "bert", "--est", "10h", "--deadline", "1000000000",
                               "--time=1:00:00", "--wrap", "true"],
                       env=env, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)[0] == "--comment=gimbal:app=bert,est=36000,deadline=1000000000"
    warn = [l for l in p.stderr.splitlines() if l.startswith("gsbatch: warning:")]
    assert len(warn) == 2, p.stderr
    assert "--deadline 2001-09-09" in warn[0] and "in the past" in warn[0]
    assert "--est 10:00:00 is above the job's time limit --time=1:00:00 (01:00:00)" in warn[1]
    # plausible values: no warning
    p = subprocess.run(tool + ["--app", "bert", "--est", "30m", "--deadline", "4102444800",
                               "-t", "60", "--wrap", "true"],
                       env=env, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and p.stderr == "", p.stderr


@pytest.mark.parametrize("raw,secs", [("90", 5400), ("5:30", 330), ("1:00:00", 3600),
                                      ("2-0", 172800), ("1-2:03", 93780), ("1-0:0:5", 86405),
                                      ("UNLIMITED", None), ("bogus", None)])
def test_slurm_time_limit_formats(raw, secs):
    assert gsbatch.slurm_time_limit(raw) == secs


@pytest.mark.parametrize("args,limit", [(["-t", "5"], "5"), (["-t5"], "5"), (["--time", "7"], "7"),
                                        (["--time=1-0", "job.sh", "-t", "9"], "1-0")])
def test_time_arg_found_before_the_script_only(args, limit):
    assert gsbatch._time_arg(args) == limit


def test_allow_batch_change_writes_batchrange():
    c, _ = cmd("--app", "x", "--batch", "64", "--allow-batch-change", "32:512", "-p", "gpu", "j.sh")
    assert c == ["sbatch", "--comment=gimbal:app=x,batch=64,batchrange=32:512", "-p", "gpu", "j.sh"]
    c, _ = cmd("--app", "x", "--allow-batch-change=64:64", "--batch=64", "j.sh")
    assert c[1] == "--comment=gimbal:app=x,batch=64,batchrange=64:64"
    # without a range: batch/4 .. batch*4; a following non-range word is not taken as one
    c, _ = cmd("--app", "x", "--batch", "64", "--allow-batch-change", "j.sh", "7:9")
    assert c == ["sbatch", "--comment=gimbal:app=x,batch=64,batchrange=16:256", "j.sh", "7:9"]


@pytest.mark.parametrize("argv,needle", [
    (["--app", "x", "--allow-batch-change", "j.sh"], "needs --batch"),
    (["--app", "x", "--batch", "8", "--allow-batch-change=16:64", "j.sh"], "outside"),
    (["--app", "x", "--batch", "8", "--allow-batch-change=0:64", "j.sh"], "expected MIN:MAX"),
    (["--app", "x", "--batch", "8", "--allow-batch-change=9:1", "j.sh"], "expected MIN:MAX"),
    (["--app", "x", "--batch", "8", "--allow-batch-change", "--allow-batch-change", "j.sh"],
     "given twice"),
    (["--app", "x", "--batch", "8", "-p", "g", "--allow-batch-change", "j.sh"], "must come before"),
    (["--batch", "8", "--allow-batch-change", "j.sh"], "--app is required"),
])
def test_allow_batch_change_usage_errors(argv, needle):
    with pytest.raises(gsbatch.UsageError) as ei:
        gsbatch.build_command(argv, env={})
    assert needle in str(ei.value)
