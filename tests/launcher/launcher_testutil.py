"""Helpers shared by the launcher tests (imported by name; tests/launcher is on sys.path)."""
import os
import socket
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(REPO, "examples", "train_mnistlike.py")


def subprocess_env(extra=None):
    """os.environ without Slurm/gimbal variables, with the repo importable."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM", "GIMBAL_", "CUDA_MPS"))}
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra or {})
    return env


def end_gloo_worker():
    """End an ``mp.spawn`` gloo worker: meet the other ranks, then leave with ``os._exit(0)``.

    The workers' files are written and closed before this is called; what is skipped is the
    teardown of the gloo group and of the interpreter.  A DistributedDataParallel model keeps
    its group alive past ``destroy_process_group`` (its sockets stay open), so the group was
    torn down at interpreter exit, racing the other rank's own exit: once in 320 runs
    (two 2-process spawns at once on 2 cores) a worker died there with "terminate called without an
    active exception" (SIGABRT), after every result had been written.  Nothing these tests
    check happens in that teardown."""
    import torch.distributed as dist
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


FAKE_SQUEUE = """#!/bin/sh
# FAKE squeue (the test has no Slurm job): the job named by --jobs=ID with the AdminComment in
# $FAKE_ADMIN, as `squeue --json --jobs=ID` lists it
printf '{"jobs": [{"job_id": %s, "admin_comment": "%s"}]}' "${2#--jobs=}" "$FAKE_ADMIN"
"""


def fake_squeue_env(tmp_path, admin):
    """PATH with a FAKE squeue first and FAKE_ADMIN = the job's AdminComment (gimbal-run
    reads the job's metadata from it, launcher.jobmeta)."""
    import stat
    sq = tmp_path / "fakebin" / "squeue"
    sq.parent.mkdir(exist_ok=True)
    sq.write_text(FAKE_SQUEUE)
    sq.chmod(sq.stat().st_mode | stat.S_IEXEC)
    return {"PATH": f"{sq.parent}{os.pathsep}{os.environ['PATH']}", "FAKE_ADMIN": admin}
