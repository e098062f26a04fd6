"""Per-rank shim that torchrun starts: ``python -m launcher.worker script.py args``.

torchrun starts each worker in a new session and exits with 1 whenever a
worker fails, so gimbal-run cannot reach the workers through a process group
nor see their exit codes.  This shim, before running the user script as
``__main__``:

* writes ``$GIMBAL_RUN_DIR/worker.<RANK>.pid`` so gimbal-run can forward
  SIGUSR2 (checkpoint notice) directly to the training processes;
* installs the checkpoint flag handler for SIGUSR2 (``launcher.checkpoint``);
* sets this rank's own MPS limits from the per-worker record ``GIMBAL_WORKERS``
  (:func:`launcher.mps.rank_mps_env`), before the script can create a CUDA context;
* records the script's exit status in ``$GIMBAL_RUN_DIR/worker.<RANK>.exit``
  so gimbal-run can pass the training's real exit code through and detect
  the checkpoint exit code (75).
"""
from __future__ import annotations

import os
import runpy
import sys
import traceback

from . import checkpoint


def _write(path: str, text: str) -> None:
    try:
        tmp = path + ".tmp"
        with open(tmp, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except OSError:
        pass


def _code_of(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    return 1  # sys.exit("message") prints the message and exits 1


def _apply_rank_mps(rank: str) -> None:
    """Per-rank MPS share (seed 004 LGRR per worker).  gimbal-run validated the record before
    starting torchrun; a problem here is reported and the job-level limits stay in force."""
    from . import envvars as ev
    from .mps import rank_mps_env
    try:
        workers = ev._workers(os.environ)
        nloc = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
        os.environ.update(rank_mps_env(workers, int(rank), nloc, os.environ))
    except (ValueError, TypeError) as exc:
        print(f"gimbal worker {rank}: per-rank MPS limits not applied: {exc}", file=sys.stderr)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        print("usage: python -m launcher.worker script.py [args...]", file=sys.stderr)
        return 2
    script = argv[0]
    run_dir = os.environ.get("GIMBAL_RUN_DIR")
    rank = os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0"))
    stem = os.path.join(run_dir, f"worker.{rank}") if run_dir else None
    if stem:
        _write(stem + ".pid", str(os.getpid()))
    checkpoint.install_handler()
    _apply_rank_mps(rank)

    sys.argv = argv
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = _code_of(exc)
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
    except KeyboardInterrupt:
        code = 130
        traceback.print_exc()
    except BaseException:
        code = 1
        traceback.print_exc()
    if stem:
        _write(stem + ".exit", str(code))
    sys.stdout.flush()
    sys.stderr.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
