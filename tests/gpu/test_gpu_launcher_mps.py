"""gimbal-run's MPS limits (seed 004 LGRR, launcher/mps.py) reaching a real CUDA client through
a REAL MPS control daemon: the decided thread share caps the SMs the worker sees, a tighter
inherited share (Slurm's gres/mps) is never loosened, and the memory limit caps the device
memory the worker sees.  tests/launcher checks the same variables on CPU workers."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from gpu_env import mps_missing

REPO = Path(__file__).resolve().parents[2]

WORKER = """
import json, os, sys, torch
p = torch.cuda.get_device_properties(0)
x = torch.ones(1 << 20, device="cuda")
torch.cuda.synchronize()
free, total = torch.cuda.mem_get_info()
json.dump({"sms": p.multi_processor_count, "free_mb": free / 2**20,
           "thread": os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"),
           "mem": os.environ.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")}, open(sys.argv[1], "w"))
"""


@pytest.fixture(scope="module")
def mps_daemon():
    why = mps_missing()
    if why:
        pytest.skip(why)
    base = Path(tempfile.mkdtemp(prefix="gimbal-gpu-run-mps-"))
    env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=str(base / "pipe"),
               CUDA_MPS_LOG_DIRECTORY=str(base / "log"))
    (base / "pipe").mkdir()
    (base / "log").mkdir()
    subprocess.run(["nvidia-cuda-mps-control", "-d"], env=env, check=True, timeout=30)
    yield env
    subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", text=True, env=env, timeout=30)
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def full_sms():
    """The GPU's SMs, read by a client outside MPS (a subprocess: this process keeps no
    CUDA context beside the MPS server)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_MPS_")}
    p = subprocess.run([sys.executable, "-c", "import torch; "
                        "print(torch.cuda.get_device_properties(0).multi_processor_count)"],
                       env=env, capture_output=True, text=True, timeout=120, check=True)
    return int(p.stdout.split()[-1])


def _run(tmp_path, env, *opts):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    out = tmp_path / "seen.json"
    p = subprocess.run([sys.executable, "-m", "launcher.run", "--standalone", "--nproc", "1",
                        "--state-dir", str(tmp_path / "state"), *opts, "--", str(script), str(out)],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    return json.loads(out.read_text())


def test_decided_thread_share_caps_the_workers_sms(tmp_path, mps_daemon, full_sms):
    env = {k: v for k, v in mps_daemon.items() if k != "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"}
    seen = _run(tmp_path, env, "--mps-thread-pct", "30")
    assert seen["thread"] == "30"
    assert abs(seen["sms"] - 0.3 * full_sms) <= 0.1 * full_sms, (seen, full_sms)


def test_a_tighter_inherited_share_is_kept(tmp_path, mps_daemon, full_sms):
    env = dict(mps_daemon, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="30")  # as Slurm's gres/mps sets it
    seen = _run(tmp_path, env, "--mps-thread-pct", "60")
    assert seen["thread"] == "30"
    assert abs(seen["sms"] - 0.3 * full_sms) <= 0.1 * full_sms, (seen, full_sms)


def test_memory_limit_caps_what_the_worker_sees(tmp_path, mps_daemon):
    env = {k: v for k, v in mps_daemon.items() if k != "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"}
    seen = _run(tmp_path, env, "--mps-mem-limit-mb", "2000")
    assert seen["mem"] == "0=2000M"
    assert seen["free_mb"] <= 2000, seen
