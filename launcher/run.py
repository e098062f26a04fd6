"""``gimbal-run``: start torchrun inside a Slurm allocation (or standalone)
with the scheduler's decision applied, forward signals, pass the training's
exit code through, and relaunch after a checkpoint exit (squeeze/swell).

Slurm usage (one launcher task per node; torchrun starts the GPU workers)::

    srun --ntasks-per-node=1 gimbal-run [options] -- train.py --lr 0.1

Standalone (no Slurm)::

    gimbal-run --standalone --nproc 2 -- train.py

The command it runs (``--dry-run`` prints it with the variables it sets)::

    python -m torch.distributed.run --nnodes=N --nproc-per-node=G \
        --rdzv-backend=c10d --rdzv-endpoint=<first host>:<10000 + jobid % 20000> \
        --rdzv-id=<jobid> --rdzv-conf=is_host=<1 on node 0 else 0> --max-restarts=0 \
        -m launcher.worker train.py ...

See ``docs/launcher.md`` for the protocol details (decision file, reports,
checkpoint exit code 75, signals).
"""
from __future__ import annotations

import json
import logging
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional

import click

from . import envvars as ev
from .checkpoint import EXIT_CHECKPOINT
from .decision import DecisionError, LauncherDecision, decision_path, read_decision, state_dir
from .jobmeta import BatchCheck, JobMeta, check_batch, read_job_meta
from .mps import THREAD_VAR as MPS_THREAD_VAR, MPSConfigError, mps_env, parse_thread_pct
from . import slurm as _slurm
from .slurm import SlurmEnvError, count_visible_gpus, in_slurm, parse_allocation

log = logging.getLogger("gimbal.run")
EXIT_USAGE = 2
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR2)
_PKG_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class LaunchError(Exception):
    """Bad configuration detected before starting anything (exit status 2)."""


@dataclass
class Options:
    script: str
    script_args: List[str]
    standalone: bool = False
    nproc: Optional[int] = None
    job_id: Optional[str] = None
    state_dir: Optional[str] = None
    decision_file: Optional[str] = None
    checkpoint_dir: Optional[str] = None
    overrides: Dict[str, object] = field(default_factory=dict)
    python: str = sys.executable
    torchrun_args: List[str] = field(default_factory=list)
    # the job's metadata (read once from Slurm; None outside a Slurm job) and what the last
    # plan did with the decision's global batch (launcher.jobmeta)
    job_meta: object = None
    batch_check: Optional[BatchCheck] = None


@dataclass
class LaunchPlan:
    mode: str
    argv: List[str]
    env: Dict[str, str]
    job_id: str
    nnodes: int
    node_rank: int
    nproc_per_node: int
    rdzv_endpoint: Optional[str]
    rdzv_id: Optional[str]
    is_host: bool
    decision_file: str
    decision: Optional[LauncherDecision]
    run_dir: str
    batch: Optional[BatchCheck] = None

    def to_json(self) -> Dict[str, object]:
        return {
            "mode": self.mode, "argv": self.argv, "command": shlex.join(self.argv),
            "env": self.env, "job_id": self.job_id, "nnodes": self.nnodes,
            "node_rank": self.node_rank, "nproc_per_node": self.nproc_per_node,
            "rdzv_endpoint": self.rdzv_endpoint, "rdzv_id": self.rdzv_id,
            "is_host": self.is_host, "decision_file": self.decision_file,
            "decision": self.decision.to_dict() if self.decision else None,
            "run_dir": self.run_dir,
            "batch": self.batch.to_json() if self.batch else None,
        }


def load_decision(path: str, job_id: str) -> Optional[LauncherDecision]:
    """The daemon's decision for this job, ``None`` when there is none yet."""
    try:
        dec = read_decision(path)
    except FileNotFoundError:
        return None
    if dec.job_id != str(job_id):
        raise DecisionError(f"{path}: field 'job_id' is {dec.job_id!r}, expected {job_id!r}")
    return dec


_NO_META = object()


def job_meta(opts: Options, job_id: str, env: Optional[Mapping[str, str]] = None
             ) -> Optional[JobMeta]:
    """The job's gimbal metadata from Slurm (read once, then kept); ``None`` when gimbal-run
    does not run inside a Slurm job (no ``SLURM_JOB_ID``)."""
    if opts.job_meta is None:
        env = os.environ if env is None else env
        opts.job_meta = read_job_meta(str(job_id), env) if in_slurm(env) else _NO_META
        if isinstance(opts.job_meta, JobMeta) and opts.job_meta.error:
            log.warning("job %s: cannot read the job's gimbal metadata: %s", job_id,
                        opts.job_meta.error)
    return opts.job_meta if isinstance(opts.job_meta, JobMeta) else None


def effective_decision(opts: Options, job_id: str, path: str,
                       env: Optional[Mapping[str, str]] = None) -> Optional[LauncherDecision]:
    """The daemon's decision with the batch check applied (an overridden global batch only
    when the job's metadata allows it, :func:`launcher.jobmeta.check_batch`), then the
    command-line flags (the job's own choice) on top."""
    dec = load_decision(path, job_id)
    if dec is not None and dec.global_batch is not None:
        dec, check = check_batch(dec, job_meta(opts, job_id, env))
    else:
        check = BatchCheck("none", None)
    overrides = {k: v for k, v in opts.overrides.items() if v is not None}
    if overrides.get("global_batch") is not None:
        check = BatchCheck("user", overrides["global_batch"], check.requested, check.submitted,
                           check.allowed, why="gimbal-run --global-batch (the job's own flag)")
    if check.status == "refused" and (opts.batch_check is None or opts.batch_check != check):
        log.warning("job %s: the scheduler's global batch %s is not applied: %s; running %s",
                    job_id, check.requested, check.why,
                    f"the submitted batch {check.global_batch}" if check.global_batch
                    else "the training's own batch")
    opts.batch_check = check
    if dec is None and not overrides:
        return None
    base = dec or LauncherDecision(job_id=str(job_id))
    return base.merged(**overrides)  # CLI flags win


def decision_env(dec: Optional[LauncherDecision], nproc: int, inherited: Mapping[str, str]) -> Dict[str, str]:
    out: Dict[str, str] = {}
    if dec is None:
        return out
    for var, val in ((ev.SUB_BATCH, dec.sub_batch), (ev.ACCUM_STEPS, dec.accum_steps),
                     (ev.GLOBAL_BATCH, dec.global_batch)):
        if val is not None:
            out[var] = str(val)
    if dec.stealing is not None:
        out[ev.STEALING] = "1" if dec.stealing else "0"
    out.update(mps_env(dec.mps_thread_pct, dec.mps_mem_limit_mb, nproc, inherited))
    if dec.workers:
        out[ev.WORKERS] = json.dumps(applied_workers(dec.workers, out.get(MPS_THREAD_VAR)
                                                     or inherited.get(MPS_THREAD_VAR)),
                                     sort_keys=True)
    return out


def _thread_pct_or_none(raw: Optional[str]) -> Optional[float]:
    """An MPS thread percentage from the environment, or None when unset or unreadable
    (then nothing is capped by it)."""
    raw = (raw or "").strip()
    if not raw:
        return None
    try:
        return parse_thread_pct(raw)
    except MPSConfigError:
        return None


def applied_workers(workers, job_pct: Optional[str]) -> list:
    """The decision's worker records with each MPS share as it will run: never above the
    job-level limit (the decision's share, or Slurm's gres/mps units when tighter, as
    :func:`launcher.mps.mps_env` applies it); a worker without a share runs at that limit.
    rank 0's reports echo these records, so the daemon's snapshot reads the applied share."""
    recs = [dict(w) for w in workers]
    pct = _thread_pct_or_none(job_pct)
    if pct is None:
        return recs
    cap = max(1, int(pct))
    for r in recs:
        pct = r.get("mps_pct")
        r["mps_pct"] = cap if pct is None else min(int(pct), cap)
    return recs


def check_gpu_count(nproc: int, env: Mapping[str, str]) -> None:
    """Refuse more processes per node than the GPUs they may use.

    Only on a node that has NVIDIA GPUs (:func:`launcher.slurm.physical_gpu_count`): the
    visible count is ``SLURM_GPUS_ON_NODE`` / ``CUDA_VISIBLE_DEVICES`` when set, else all of
    the node's GPUs.  Training script ``cuda:LOCAL_RANK`` would otherwise crash the extra
    ranks ("invalid device ordinal").  ``CUDA_VISIBLE_DEVICES=""`` (no GPU visible) runs
    any number of CPU processes; a node without GPUs is never checked."""
    physical = _slurm.physical_gpu_count()
    if physical <= 0:
        return
    visible = count_visible_gpus(env)
    if visible is None:
        visible = physical
    if visible >= 1 and nproc > visible:
        cvd = env.get("CUDA_VISIBLE_DEVICES")
        where = (f"SLURM_GPUS_ON_NODE={env['SLURM_GPUS_ON_NODE']}"
                 if env.get("SLURM_GPUS_ON_NODE", "").strip() else
                 f"CUDA_VISIBLE_DEVICES={cvd!r}" if cvd is not None else
                 f"the node has {physical}")
        raise LaunchError(
            f"--nproc-per-node {nproc} exceeds the {visible} GPU(s) visible on this node "
            f"({where}): each process needs its own GPU; use --nproc-per-node {visible} or fewer "
            f"(or CUDA_VISIBLE_DEVICES= to train on the CPU)")


_READ = object()  # build_plan: read the decision file


def build_plan(opts: Options, env: Optional[Mapping[str, str]] = None,
               restart_count: int = 0, pid: Optional[int] = None,
               decision: object = _READ) -> LaunchPlan:
    """Work out the torchrun command line and environment (no side effects).

    ``decision``: use this (effective) decision instead of reading the file
    (a relaunch keeps the one in force when the file has become invalid)."""
    env = dict(os.environ if env is None else env)
    pid = os.getpid() if pid is None else pid
    if opts.standalone:
        mode = "standalone"
        job_id = opts.job_id or env.get("SLURM_JOB_ID") or "standalone"
        nnodes, node_rank, is_host = 1, 0, True
        gpus = count_visible_gpus(env)
        nproc = opts.nproc if opts.nproc is not None else (gpus or 1)
        rdzv_endpoint = rdzv_id = None
    else:
        if not in_slurm(env):
            raise SlurmEnvError("SLURM_JOB_ID", "is not set: not inside a Slurm allocation "
                                                "(use --standalone to run without Slurm)")
        alloc = parse_allocation(env)
        mode = "slurm"
        job_id = alloc.job_id
        if opts.job_id and opts.job_id != job_id:
            raise LaunchError(f"--job-id {opts.job_id} contradicts SLURM_JOB_ID={job_id}")
        nnodes, node_rank, is_host = alloc.nnodes, alloc.node_rank, alloc.is_host
        if opts.nproc is not None:
            nproc = opts.nproc
        elif alloc.gpus_on_node:
            nproc = alloc.gpus_on_node
        else:
            log.warning("no GPUs in the allocation (SLURM_GPUS_ON_NODE/CUDA_VISIBLE_DEVICES); "
                        "starting 1 process per node (use --nproc-per-node to change)")
            nproc = 1
        rdzv_endpoint = f"{alloc.rdzv_host}:{alloc.rdzv_port}"
        rdzv_id = job_id if restart_count == 0 else f"{job_id}-r{restart_count}"
    if nproc < 1:
        raise LaunchError(f"--nproc-per-node must be >= 1, got {nproc}")
    check_gpu_count(nproc, env)

    sdir = opts.state_dir or state_dir(env)
    dpath = opts.decision_file or decision_path(job_id, sdir)
    dec = effective_decision(opts, job_id, dpath, env) if decision is _READ else decision
    ckpt = opts.checkpoint_dir or env.get(ev.CHECKPOINT_DIR) or os.path.join(sdir, "checkpoints", str(job_id))
    run_dir = os.path.join(tempfile.gettempdir(), f"gimbal-run.{job_id}.{node_rank}.{pid}.{restart_count}")

    set_env: Dict[str, str] = {
        "PYTHONUNBUFFERED": "1",
        ev.JOB_ID: str(job_id),
        ev.STATE_DIR: sdir,
        ev.REPORT_PATH: os.path.join(sdir, "reports", f"{job_id}.jsonl"),
        ev.CHECKPOINT_DIR: ckpt,
        ev.RESTART_COUNT: str(restart_count),
        ev.RUN_DIR: run_dir,
    }
    set_env.update(decision_env(dec, nproc, env))
    check = opts.batch_check
    if check is not None and check.status != "none":
        set_env[ev.BATCH_SOURCE] = check.status
    # the workers run ``-m launcher.worker``: make this package importable
    pp = env.get("PYTHONPATH", "")
    if _PKG_ROOT not in pp.split(os.pathsep):
        set_env["PYTHONPATH"] = _PKG_ROOT + (os.pathsep + pp if pp else "")

    argv = [opts.python, "-m", "torch.distributed.run"]
    if mode == "standalone":
        argv += ["--standalone", "--nnodes=1", f"--nproc-per-node={nproc}"]
    else:
        argv += [f"--nnodes={nnodes}", f"--nproc-per-node={nproc}", "--rdzv-backend=c10d",
                 f"--rdzv-endpoint={rdzv_endpoint}", f"--rdzv-id={rdzv_id}",
                 f"--rdzv-conf=is_host={1 if is_host else 0}"]
    argv += ["--max-restarts=0", *opts.torchrun_args, "-m", "launcher.worker",
             opts.script, *opts.script_args]
    return LaunchPlan(mode=mode, argv=argv, env=set_env, job_id=str(job_id), nnodes=nnodes,
                      node_rank=node_rank, nproc_per_node=nproc, rdzv_endpoint=rdzv_endpoint,
                      rdzv_id=rdzv_id, is_host=is_host, decision_file=dpath, decision=dec,
                      run_dir=run_dir, batch=check)


# --------------------------------------------------------------------------- running

def _read_int_files(run_dir: str, suffix: str) -> Dict[int, int]:
    out: Dict[int, int] = {}
    try:
        names = os.listdir(run_dir)
    except OSError:
        return out
    for name in names:
        parts = name.split(".")
        if len(parts) == 3 and parts[0] == "worker" and parts[2] == suffix and parts[1].isdigit():
            try:
                with open(os.path.join(run_dir, name)) as fh:
                    out[int(parts[1])] = int(fh.read().strip())
            except (OSError, ValueError):
                pass
    return out


def classify_exit(torchrun_rc: int, worker_codes: Dict[int, int], terminated_by: Optional[int],
                  local_ranks: Optional[int] = None) -> int:
    """Exit status of gimbal-run for one launch.

    0 when torchrun succeeded; :data:`EXIT_CHECKPOINT` when some worker exited
    with 75 and none failed otherwise; else the first failing worker's own
    code (rank order); else 128+signal when gimbal-run was told to stop;
    0 when each of this node's ``local_ranks`` workers recorded that its script
    ended with 0 (a crash after that, in the interpreter's teardown — e.g. a
    communication library's threads aborting at exit — does not undo finished
    training; :func:`teardown_crash` says so in the log); else torchrun's status."""
    if torchrun_rc == 0:
        return 0
    failing = {r: c for r, c in worker_codes.items() if c != 0}
    if failing and all(c == EXIT_CHECKPOINT for c in failing.values()):
        return EXIT_CHECKPOINT
    real = [failing[r] for r in sorted(failing) if failing[r] != EXIT_CHECKPOINT]
    if real:
        return real[0]
    if terminated_by is not None:
        return 128 + int(terminated_by)
    if teardown_crash(torchrun_rc, worker_codes, local_ranks):
        return 0
    return torchrun_rc if torchrun_rc > 0 else 128 + (-torchrun_rc)


def teardown_crash(torchrun_rc: int, worker_codes: Dict[int, int],
                   local_ranks: Optional[int]) -> bool:
    """True when torchrun failed although every one of this node's ``local_ranks``
    workers recorded exit 0 (``launcher.worker`` writes the record when the script
    returns, before the interpreter's teardown)."""
    return (torchrun_rc != 0 and local_ranks is not None and local_ranks > 0
            and len(worker_codes) == local_ranks
            and all(c == 0 for c in worker_codes.values()))


class Supervisor:
    """Runs one torchrun at a time, forwards signals, watches the decision file."""

    def __init__(self, opts: Options, max_relaunches: int = 10, poll_interval: float = 5.0,
                 kill_timeout: float = 60.0, requeue_wait: float = 60.0,
                 env: Optional[Mapping[str, str]] = None):
        self.opts = opts
        self.requeue_wait = requeue_wait
        # inside a Slurm job a SIGUSR2 from outside is gimbal's pre-emption / resize notice
        # (``scancel --signal=USR2``, then ``scontrol requeue``): the checkpoint is followed
        # by the requeue's SIGTERM, so relaunching in this allocation would only redo steps
        # that the requeue throws away
        self.in_slurm_job = in_slurm(os.environ if env is None else env)
        self.external_usr2 = False
        self.max_relaunches = max_relaunches
        self.poll_interval = poll_interval
        self.kill_timeout = kill_timeout
        self.proc: Optional[subprocess.Popen] = None
        self.terminated_by: Optional[int] = None
        self.term_time: Optional[float] = None
        self.usr2_pending = False
        self.usr2_sent: set = set()
        self.plan: Optional[LaunchPlan] = None
        self.restart = 0

    # signal handlers run in the main thread between bytecodes
    def _on_signal(self, signum, frame) -> None:
        if signum == signal.SIGUSR2:
            log.info("SIGUSR2: asking the training to checkpoint")
            self.external_usr2 = True
            self.usr2_pending = True
            self._deliver_usr2()
            return
        if self.terminated_by is None:
            self.terminated_by = signum
            self.term_time = time.monotonic()
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signum)
            except ProcessLookupError:
                pass

    def _deliver_usr2(self) -> None:
        if not self.usr2_pending or self.plan is None:
            return
        done = _read_int_files(self.plan.run_dir, "exit")
        for rank, pid in _read_int_files(self.plan.run_dir, "pid").items():
            if rank in self.usr2_sent or rank in done:
                continue
            try:
                os.kill(pid, signal.SIGUSR2)
                self.usr2_sent.add(rank)
            except ProcessLookupError:
                pass

    def _mps_of(self, dec: Optional[LauncherDecision]):
        """The MPS thread limits a decision would apply, job-level and per worker (a CUDA
        client reads them when it creates its context, so any change needs a relaunch), and
        its memory limits.  Thread shares are taken as applied: never above the limit the
        inherited environment carries (Slurm's gres/mps units; :func:`launcher.mps.mps_env`
        never loosens it), and a worker's never above the job-level one, so a decision
        change that cannot change what runs (e.g. a swell past Slurm's units) costs no
        relaunch."""
        if not dec:
            return (None, None, ())
        ceiling = _thread_pct_or_none(os.environ.get(MPS_THREAD_VAR))

        def applied(pct, cap):
            if pct is None:
                return cap
            return float(pct) if cap is None else min(float(pct), cap)

        job = applied(dec.mps_thread_pct, ceiling)
        per_rank = tuple((applied(w.get("mps_pct"), job), w.get("mem_limit_mb"))
                         for w in dec.workers or ())
        return (job, dec.mps_mem_limit_mb, per_rank)

    def _check_decision(self, state: dict) -> None:
        plan = self.plan
        try:
            st = os.stat(plan.decision_file)
            sig = (st.st_mtime_ns, st.st_size)
        except OSError:
            sig = None
        if sig == state.get("sig"):
            return
        state["sig"] = sig
        try:
            new = effective_decision(self.opts, plan.job_id, plan.decision_file)
        except Exception as exc:  # never let a bad file kill the supervisor (torchrun would be orphaned)
            log.warning("ignoring unreadable decision update: %s", exc)
            return
        if self._mps_of(new) != self._mps_of(plan.decision) and not self.usr2_pending:
            if self.restart >= self.max_relaunches:
                # a checkpoint exit could not be relaunched: it would end the job
                log.warning("MPS share changed %s -> %s but --max-relaunches=%d is reached: "
                            "keeping the current share", self._mps_of(plan.decision),
                            self._mps_of(new), self.max_relaunches)
                return
            log.info("MPS share changed %s -> %s: checkpoint and relaunch",
                     self._mps_of(plan.decision), self._mps_of(new))
            self.usr2_pending = True

    def _launch_once(self, restart_count: int) -> int:
        try:
            plan = build_plan(self.opts, restart_count=restart_count)
        except DecisionError as exc:
            if restart_count == 0 or self.plan is None:
                raise
            # the training has checkpointed: a bad decision file must not end the job
            log.warning("ignoring invalid decision file at relaunch, keeping the decision in "
                        "force: %s", exc)
            plan = build_plan(self.opts, restart_count=restart_count, decision=self.plan.decision)
        self.plan = plan
        os.makedirs(plan.run_dir, exist_ok=True)
        self.usr2_pending, self.usr2_sent = False, set()
        env = dict(os.environ)
        env.update(plan.env)
        log.info("launch %d: %s", restart_count, shlex.join(plan.argv))
        if plan.batch is not None and plan.batch.status != "none":
            b = plan.batch
            log.info("global batch %s (%s%s)", b.global_batch or "of the training", b.status,
                     f": {b.why}" if b.why else "")

        def _child_setup():  # torchrun must not die of SIGUSR2 (default action)
            signal.signal(signal.SIGUSR2, signal.SIG_IGN)

        self.proc = subprocess.Popen(plan.argv, env=env, start_new_session=True,
                                     preexec_fn=_child_setup)
        if self.terminated_by is not None:  # SIGTERM/SIGINT arrived while starting
            try:
                os.kill(self.proc.pid, self.terminated_by)
            except ProcessLookupError:
                pass
        dstate: dict = {}
        try:
            st = os.stat(plan.decision_file)
            dstate["sig"] = (st.st_mtime_ns, st.st_size)
        except OSError:
            dstate["sig"] = None
        next_poll = time.monotonic() + self.poll_interval
        while True:
            try:
                rc = self.proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            if self.poll_interval > 0 and now >= next_poll and self.terminated_by is None:
                next_poll = now + self.poll_interval
                self._check_decision(dstate)
            self._deliver_usr2()
            if self.term_time is not None and now - self.term_time > self.kill_timeout:
                log.warning("training did not stop %.0fs after signal %d: killing it",
                            self.kill_timeout, self.terminated_by)
                for pid in list(_read_int_files(plan.run_dir, "pid").values()) + [self.proc.pid]:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                self.term_time = None
        codes = _read_int_files(plan.run_dir, "exit")
        self.proc = None
        result = classify_exit(rc, codes, self.terminated_by, plan.nproc_per_node)
        if self.terminated_by is None and teardown_crash(rc, codes, plan.nproc_per_node):
            log.warning("torchrun exited %d after every worker's script ended with 0: a worker "
                        "crashed while its interpreter shut down (see its stderr above); the "
                        "training itself finished, so gimbal-run exits 0", rc)
        log.info("torchrun exited %d, worker codes %s -> %d", rc, codes, result)
        _cleanup(plan.run_dir)
        return result

    def run(self) -> int:
        old = {s: signal.signal(s, self._on_signal) for s in FORWARDED}
        try:
            restart = 0
            while True:
                self.restart = restart
                code = self._launch_once(restart)
                if code != EXIT_CHECKPOINT or self.terminated_by is not None:
                    return code
                if restart >= self.max_relaunches:
                    log.warning("checkpoint exit but --max-relaunches=%d reached", self.max_relaunches)
                    return code
                if self.external_usr2 and self.in_slurm_job and self._await_requeue():
                    return code
                self.external_usr2 = False
                restart += 1
                log.info("training checkpointed (exit %d): relaunching (%d)", code, restart)
        finally:
            for s, h in old.items():
                signal.signal(s, h)


    def _await_requeue(self) -> bool:
        """After a checkpoint asked for by SIGUSR2 from outside in a Slurm job: wait up to
        ``requeue_wait`` s for the SIGTERM of the requeue that follows (gimbal's gate mode:
        USR2, ``gate.preempt_grace``, ``scontrol requeuehold``).  True when it came (exit
        75 then; the job restarts from the checkpoint, on the GPUs of its new allocation),
        False after the wait (a checkpoint request only: relaunch here)."""
        if self.requeue_wait <= 0:
            return False
        log.info("checkpointed on SIGUSR2: waiting up to %.0f s for the requeue before "
                 "relaunching", self.requeue_wait)
        end = time.monotonic() + self.requeue_wait
        while self.terminated_by is None and time.monotonic() < end:
            time.sleep(0.1)
        return self.terminated_by is not None


def _cleanup(run_dir: str) -> None:
    try:
        for name in os.listdir(run_dir):
            os.unlink(os.path.join(run_dir, name))
        os.rmdir(run_dir)
    except OSError:
        pass


def format_dry_run(plan: LaunchPlan) -> str:
    lines = [f"# gimbal-run {plan.mode}: node {plan.node_rank}/{plan.nnodes}"
             f"{' (rendezvous host)' if plan.is_host else ''}, {plan.nproc_per_node} processes"
             f", decision file {plan.decision_file}"
             f"{'' if plan.decision else ' (none)'}"]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in sorted(plan.env.items())]
    lines.append(shlex.join(plan.argv))
    return "\n".join(lines)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--standalone", is_flag=True, help="Run outside Slurm on this machine only.")
@click.option("--nproc", "--nproc-per-node", "nproc", type=click.IntRange(min=1), default=None,
              help="Processes per node (default: GPUs in the allocation, SLURM_GPUS_ON_NODE / "
                   "CUDA_VISIBLE_DEVICES, else 1).")
@click.option("--job-id", default=None, help="Job id in standalone mode (default SLURM_JOB_ID or 'standalone').")
@click.option("--state-dir", default=None, help="Default $GIMBAL_STATE_DIR or /var/spool/gimbal.")
@click.option("--decision-file", default=None, help="Default <state-dir>/decisions/<jobid>.json.")
@click.option("--checkpoint-dir", default=None, help="Default $GIMBAL_CHECKPOINT_DIR or <state-dir>/checkpoints/<jobid>.")
@click.option("--sub-batch", type=click.IntRange(min=1), default=None)
@click.option("--accum-steps", type=click.IntRange(min=1), default=None)
@click.option("--global-batch", type=click.IntRange(min=1), default=None)
@click.option("--mps-thread-pct", type=click.IntRange(1, 100), default=None)
@click.option("--mps-mem-limit-mb", type=click.IntRange(min=1), default=None)
@click.option("--stealing/--no-stealing", default=None, help="LISS input-sample stealing.")
@click.option("--max-relaunches", type=click.IntRange(min=0), default=10, show_default=True)
@click.option("--requeue-wait", type=float, default=60.0, show_default=True,
              help="In a Slurm job, after a checkpoint on SIGUSR2 from outside: seconds to "
                   "wait for the requeue's SIGTERM before relaunching (0: relaunch at once).")
@click.option("--poll-interval", type=float, default=5.0, show_default=True,
              help="Seconds between decision-file checks (0: never).")
@click.option("--kill-timeout", type=float, default=60.0, show_default=True,
              help="SIGKILL the training this long after forwarding SIGTERM/SIGINT.")
@click.option("--torchrun-arg", "torchrun_args", multiple=True, help="Extra torchrun argument (repeatable).")
@click.option("--dry-run", is_flag=True, help="Print the command and variables, run nothing.")
@click.option("--json", "as_json", is_flag=True, help="With --dry-run: print JSON.")
@click.option("-v", "--verbose", is_flag=True)
@click.argument("script")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
def cli(standalone, nproc, job_id, state_dir, decision_file, checkpoint_dir, sub_batch, accum_steps,
        global_batch, mps_thread_pct, mps_mem_limit_mb, stealing, max_relaunches, requeue_wait,
        poll_interval,
        kill_timeout, torchrun_args, dry_run, as_json, verbose, script, script_args):
    """Launch SCRIPT with torchrun under gimbal's scheduling decision.

    Use ``--`` before the script: gimbal-run [OPTIONS] -- script.py [ARGS]..."""
    logging.basicConfig(level=logging.INFO if verbose or not dry_run else logging.WARNING,
                        format="gimbal-run: %(message)s", stream=sys.stderr)
    opts = Options(script=script, script_args=list(script_args), standalone=standalone, nproc=nproc,
                   job_id=job_id, state_dir=state_dir, decision_file=decision_file,
                   checkpoint_dir=checkpoint_dir, torchrun_args=list(torchrun_args),
                   overrides=dict(sub_batch=sub_batch, accum_steps=accum_steps,
                                  global_batch=global_batch, mps_thread_pct=mps_thread_pct,
                                  mps_mem_limit_mb=mps_mem_limit_mb, stealing=stealing))
    try:
        plan = build_plan(opts)
    except (SlurmEnvError, DecisionError, MPSConfigError, LaunchError) as exc:
        click.echo(f"gimbal-run: error: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    if dry_run:
        click.echo(json.dumps(plan.to_json(), indent=2, sort_keys=True) if as_json else format_dry_run(plan))
        sys.exit(0)
    sup = Supervisor(opts, max_relaunches=max_relaunches, poll_interval=poll_interval,
                     kill_timeout=kill_timeout, requeue_wait=requeue_wait)
    try:
        code = sup.run()
    except (SlurmEnvError, DecisionError, MPSConfigError, LaunchError) as exc:
        click.echo(f"gimbal-run: error: {exc}", err=True)
        code = EXIT_USAGE
    sys.exit(code)


def main(argv: Optional[List[str]] = None) -> None:
    """Console-script entry point (``gimbal-run = launcher.run:main``)."""
    cli.main(args=argv, prog_name="gimbal-run")


if __name__ == "__main__":
    main()
