"""slurm_hooks' MPS path with the REAL nvidia-cuda-mps-control on a real GPU (tests/hooks runs the
same hooks against a fake).  As slurmd would: the Prolog (root) starts a per-job MPS control
daemon as the job's user, the TaskProlog points the job's CUDA clients at it, a client of the
job's user runs under the job's thread percentage, and the Epilog stops the daemon and removes
its directory.  The job's user is ``nobody``."""
from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from gpu_env import mps_missing

HOOKS = Path(__file__).resolve().parents[2] / "slurm_hooks"
PY = os.environ.get("GIMBAL_GPU_PYTHON", shutil.which("python3") or "python3")

CLIENT = """
import torch
n = torch.cuda.get_device_properties(0).multi_processor_count
x = torch.ones(1 << 20, device="cuda")
torch.cuda.synchronize()
print("sms", n, "sum", int(x.sum().item()))
"""


def _events(log_dir: Path):
    f = log_dir / "events.log"
    return [dict(kv.split("=", 1) for kv in line.split()) for line in f.read_text().splitlines()]


def _daemons(pipe: Path):
    """(pid, uid) of each nvidia-cuda-mps-control process whose environment names ``pipe``."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if (d / "comm").read_text().strip() != "nvidia-cuda-mps":
                continue
            env = (d / "environ").read_bytes().split(b"\0")
            uid = int(next(l for l in (d / "status").read_text().splitlines()
                           if l.startswith("Uid:")).split()[1])
        except (OSError, StopIteration):
            continue
        if f"CUDA_MPS_PIPE_DIRECTORY={pipe}".encode() in env:
            found.append((int(d.name), uid))
    return found


def _client(env, as_user):
    cmd = ["setpriv", f"--reuid={as_user.pw_uid}", f"--regid={as_user.pw_gid}", "--clear-groups",
           PY, "-c", CLIENT]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, cwd="/")
    assert p.returncode == 0, p.stderr[-2000:]
    line = p.stdout.split()
    return int(line[line.index("sms") + 1])


@pytest.fixture
def job():
    why = mps_missing()
    if why:
        pytest.skip(why)
    nobody = pwd.getpwnam("nobody")
    base = Path(tempfile.mkdtemp(prefix="gimbal-gpu-mps-"))
    base.chmod(0o755)  # the job's user reaches its own MPS dir below
    env = {
        "PATH": os.environ["PATH"],
        "SLURM_JOB_ID": "4242", "SLURMD_NODENAME": "gpu1", "SLURM_CLUSTER_NAME": "gputest",
        "SLURM_JOB_UID": str(nobody.pw_uid), "SLURM_JOB_GID": str(nobody.pw_gid),
        "CUDA_VISIBLE_DEVICES": "0",
        "GIMBAL_HOOKS_CONF": str(base / "none.conf"),
        "GIMBAL_HOOK_LOG_DIR": str(base / "log"),
        "GIMBAL_MPS_DIR": str(base / "mps"),
    }
    yield base, env, nobody
    jobdir = base / "mps" / "job4242-gpu1"
    if jobdir.exists():  # a failed test: stop the daemon it left
        subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", text=True, timeout=30,
                       env=dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=str(jobdir / "pipe")))
    shutil.rmtree(base, ignore_errors=True)


def test_prolog_starts_a_real_mps_daemon_as_the_job_user_and_epilog_stops_it(job):
    base, env, nobody = job
    jobdir = base / "mps" / "job4242-gpu1"
    full = _client(dict(env, HOME="/"), nobody)  # no MPS yet: the whole GPU

    env_mps = dict(env, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="50")
    p = subprocess.run([str(HOOKS / "prolog.sh")], env=env_mps, capture_output=True, text=True,
                       timeout=60, cwd="/")
    assert p.returncode == 0
    assert _events(base / "log")[-1]["mps"] == "started"
    daemons = _daemons(jobdir / "pipe")
    assert daemons and all(uid == nobody.pw_uid for _, uid in daemons), daemons
    assert jobdir.stat().st_uid == nobody.pw_uid

    # TaskProlog (as the job's user) exports the daemon's dirs; a client under the job's
    # thread percentage connects through them and gets about half of the SMs
    t = subprocess.run(["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}",
                        "--clear-groups", str(HOOKS / "task_prolog.sh")],
                       env=env, capture_output=True, text=True, timeout=30, cwd="/")
    exports = dict(l.removeprefix("export ").split("=", 1) for l in t.stdout.splitlines())
    assert exports == {"CUDA_MPS_PIPE_DIRECTORY": f"{jobdir}/pipe",
                       "CUDA_MPS_LOG_DIRECTORY": f"{jobdir}/log"}
    limited = _client(dict(env_mps, HOME="/", **exports), nobody)
    assert 0 < limited < full and abs(limited - full / 2) <= 0.1 * full, (limited, full)
    servers = subprocess.run(["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}",
                              "--clear-groups", "nvidia-cuda-mps-control"],
                             input="get_server_list\n", capture_output=True, text=True,
                             timeout=30, env=dict(env, **exports))
    assert servers.stdout.split() and all(s.isdigit() for s in servers.stdout.split()), servers

    p = subprocess.run([str(HOOKS / "epilog.sh")], env=env, capture_output=True, text=True,
                       timeout=60, cwd="/")
    assert p.returncode == 0
    assert _events(base / "log")[-1]["mps"] == "stopped"
    assert not jobdir.exists()
    deadline = time.monotonic() + 20
    while _daemons(jobdir / "pipe") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _daemons(jobdir / "pipe")
