"""Helpers shared by the launcher tests (imported by name; tests/launcher is on sys.path)."""
import os
import socket

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(REPO, "examples", "train_mnistlike.py")


def subprocess_env(extra=None):
    """os.environ without Slurm/gimbal variables, with the repo importable."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM", "GIMBAL_", "CUDA_MPS"))}
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra or {})
    return env


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
