"""Handles on gimbal's real Slurm test clusters (brought up by the scripts next to this file).

Five clusters, all on one host, loopback only, so they can run at the same time:

========== ======= ================================ ============ ==========================
key        release SLURM_CONF                       slurmctld    nodes
========== ======= ================================ ============ ==========================
``2205``   22.05   /etc/slurm-gimbal/slurm.conf     6837         gpu1-3 (gpu:4, shard:16),
                                                                 mps1 (gpu:2, mps:200)
``2205mps``22.05   /etc/slurm-gimbal-mps/slurm.conf 6847         m1, m2 (gpu:2, mps:200; no
                                                                 shard, see docs/slurm.md)
``2205het``22.05   /etc/slurm-gimbal-het/slurm.conf 6857         h1 (gpu:k80:2), h2
                                                                 (gpu:v100:2): GPU types
``2205dbd``22.05   /etc/slurm-gimbal-dbd/slurm.conf 6867         d1, d2 (gpu:4); accounting:
                                                                 slurmdbd 127.0.0.1:6869 +
                                                                 MariaDB (sacct history)
``2605``   26.05   /etc/slurm-gimbal/slurm.conf     6937         like 2205; in the Debian sid
                   (inside the chroot)                           chroot, commands run through
                                                                 ``in-chroot.sh``
``2605het``26.05   /etc/slurm-gimbal-het/slurm.conf 6947         like 2205het, in the chroot
========== ======= ================================ ============ ==========================

:func:`ensure_cluster` brings one up (as root, idempotently) and returns a
:class:`SlurmCluster`, or raises :class:`ClusterUnavailable` with the reason.
The pytest fixtures live in ``tests/slurm/conftest.py``.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Union

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SID_ROOT = Path(os.environ.get("GIMBAL_SID_ROOT", "/var/lib/gimbal-test/sid"))
IN_CHROOT = os.environ.get("GIMBAL_IN_CHROOT") == "1"
HOOK_LOG_DIR = "/var/log/gimbal/hooks"

# job states after which a job no longer holds resources
FINISHED = frozenset({"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                      "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "REVOKED"})


class ClusterUnavailable(RuntimeError):
    """The cluster cannot be used here (not root, packages missing, bring-up failed)."""


class ClusterNotApplicable(ClusterUnavailable):
    """The cluster does not exist from here by design (a host cluster seen from inside the
    chroot): always a skip, even with GIMBAL_REQUIRE_SLURM=1."""


@dataclass(frozen=True)
class ClusterSpec:
    key: str
    release: str
    name: str
    slurm_conf: str
    nodes: tuple
    bringup: tuple          # argv (relative to the repo) + extra env
    bringup_env: tuple = ()
    chroot: bool = False
    bringup_timeout: int = 300
    instance: str = "gimbal"  # clusterctl INSTANCE (in the chroot: GIMBAL_CHROOT_INSTANCE)


SPECS: Dict[str, ClusterSpec] = {
    "2205": ClusterSpec("2205", "22.05", "gimbal", "/etc/slurm-gimbal/slurm.conf",
                        ("gpu1", "gpu2", "gpu3", "mps1"), ("tests/slurm/bringup-22.05.sh",)),
    "2205mps": ClusterSpec("2205mps", "22.05", "gimbalmps", "/etc/slurm-gimbal-mps/slurm.conf",
                           ("m1", "m2"), ("tests/slurm/bringup-22.05.sh",),
                           bringup_env=(("VARIANT", "mps"),)),
    "2205het": ClusterSpec("2205het", "22.05", "gimbalhet", "/etc/slurm-gimbal-het/slurm.conf",
                           ("h1", "h2"), ("tests/slurm/bringup-22.05.sh",),
                           bringup_env=(("VARIANT", "het"),)),
    "2205dbd": ClusterSpec("2205dbd", "22.05", "gimbaldbd", "/etc/slurm-gimbal-dbd/slurm.conf",
                           ("d1", "d2"), ("tests/slurm/bringup-22.05.sh",),
                           bringup_env=(("VARIANT", "dbd"),)),
    "2605": ClusterSpec("2605", "26.05", "gimbal26", "/etc/slurm-gimbal/slurm.conf",
                        ("gpu1", "gpu2", "gpu3", "mps1"), ("tests/slurm/bringup-26.05.sh",),
                        chroot=True, bringup_timeout=1500),
    "2605het": ClusterSpec("2605het", "26.05", "gimbal26het", "/etc/slurm-gimbal-het/slurm.conf",
                           ("h1", "h2"), ("tests/slurm/bringup-26.05.sh",),
                           bringup_env=(("VARIANT", "het"),), chroot=True, bringup_timeout=1500,
                           instance="gimbal-het"),
}


@dataclass
class SlurmCluster:
    """A running test cluster. Commands go through :meth:`run` (which adds the chroot wrapper
    for 26.05 when needed); ``env`` is the environment to use for your own subprocesses on the
    host for 22.05 (it carries ``SLURM_CONF``)."""

    spec: ClusterSpec
    env: Dict[str, str]
    prefix: List[str] = field(default_factory=list)

    @property
    def release(self) -> str:
        return self.spec.release

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def nodes(self) -> List[str]:
        return list(self.spec.nodes)

    @property
    def slurm_conf(self) -> str:
        """Path of slurm.conf as seen by the Slurm commands (inside the chroot for 26.05)."""
        return self.spec.slurm_conf

    @property
    def in_chroot(self) -> bool:
        """True when commands run through tests/slurm/in-chroot.sh."""
        return bool(self.prefix)

    @property
    def hook_log_dir(self) -> Path:
        """Where slurm_hooks/prolog.sh + epilog.sh write events.log, as a path on this machine."""
        if self.prefix:
            return SID_ROOT / HOOK_LOG_DIR.lstrip("/")
        return Path(HOOK_LOG_DIR)

    # -- commands -------------------------------------------------------------------------
    def cmd(self, args: Sequence[str], user: Optional[str] = None) -> List[str]:
        """Full argv for a Slurm command (``["squeue", "--json"]``), optionally as ``user``."""
        argv = [str(a) for a in args]
        if user is not None:
            argv = ["runuser", "-u", user, "--"] + argv
        return self.prefix + argv

    def run(self, args: Sequence[str], *, check: bool = False, timeout: float = 60,
            user: Optional[str] = None, input: Optional[str] = None
            ) -> subprocess.CompletedProcess:
        """Run a command against this cluster; text output captured. Never a shell."""
        proc = subprocess.run(self.cmd(args, user), env=self.env, capture_output=True,
                              text=True, timeout=timeout, input=input,
                              cwd=str(REPO) if self.prefix else "/tmp")
        if check and proc.returncode != 0:
            raise subprocess.CalledProcessError(proc.returncode, proc.args, proc.stdout,
                                                proc.stderr)
        return proc

    def submit(self, args: Sequence[str] = (), *, script: Optional[str] = None,
               user: Optional[str] = None, hold: bool = False) -> int:
        """``sbatch --parsable`` and return the job id.

        Without ``--wrap``/``script`` the job runs ``sleep 600``. Unless given, output goes to
        /dev/null and the working directory is /tmp (so nothing lands in the repo).
        ``script`` is passed on stdin (``#!/bin/bash`` added if missing). Raises
        ``subprocess.CalledProcessError`` (with sbatch's stderr) when sbatch fails."""
        argv = ["sbatch", "--parsable"]
        a = [str(x) for x in args]
        if not any(x in ("-o", "--output") or x.startswith("--output=") for x in a):
            argv.append("--output=/dev/null")
        if not any(x in ("-D", "--chdir") or x.startswith("--chdir=") for x in a):
            argv.append("--chdir=/tmp")
        if hold:
            argv.append("--hold")
        argv += a
        if script is None and not any(x == "--wrap" or x.startswith("--wrap=") for x in a):
            argv += ["--wrap", "sleep 600"]
        if script is not None and not script.startswith("#!"):
            script = "#!/bin/bash\n" + script
        proc = self.run(argv, user=user, input=script, check=True)
        out = proc.stdout.strip().splitlines()
        if not out:
            raise subprocess.CalledProcessError(proc.returncode, proc.args, proc.stdout,
                                                proc.stderr)
        return int(out[-1].split(";")[0])

    def show_job(self, job: Union[int, str]) -> Optional[Dict[str, str]]:
        """``scontrol -o show job`` as a dict (None if Slurm no longer knows the job)."""
        proc = self.run(["scontrol", "-o", "show", "job", str(job)])
        if proc.returncode != 0 or not proc.stdout.strip():
            return None
        return parse_scontrol_line(proc.stdout.strip().splitlines()[0])

    def job_state(self, job: Union[int, str]) -> Optional[str]:
        info = self.show_job(job)
        return None if info is None else info.get("JobState")

    def wait_state(self, job: Union[int, str], state: Union[str, Iterable[str]],
                   timeout: float = 30, poll: float = 0.25) -> str:
        """Wait until the job is in ``state`` (one name or several); return the state seen.
        Raises TimeoutError (with the last ``scontrol show job`` line) otherwise."""
        wanted = {state} if isinstance(state, str) else set(state)
        deadline = time.monotonic() + timeout
        last: Optional[Dict[str, str]] = None
        while True:
            last = self.show_job(job)
            cur = None if last is None else last.get("JobState")
            if cur in wanted:
                return cur
            if time.monotonic() >= deadline:
                detail = "unknown job" if last is None else " ".join(
                    f"{k}={last.get(k)}" for k in ("JobState", "Reason", "NodeList", "TresPerNode",
                                                   "Comment") if k in last)
                raise TimeoutError(f"job {job} on {self.name} ({self.release}) not in "
                                   f"{sorted(wanted)} after {timeout}s: {detail}")
            time.sleep(poll)

    def job_ids(self, states: str = "all") -> List[int]:
        """Ids of jobs Slurm lists (``squeue -t <states>``)."""
        proc = self.run(["squeue", "-h", "-t", states, "-o", "%i"])
        ids = []
        for tok in proc.stdout.split():
            m = re.match(r"^(\d+)", tok)
            if m:
                ids.append(int(m.group(1)))
        return ids

    def cancel_all(self, timeout: float = 20) -> None:
        """Cancel every pending/running job and wait until none holds resources."""
        ids = self.job_ids("PD,R,S,CG,CF,RQ,RH,RS,SE,SI,SO,ST")
        if ids:
            self.run(["scancel"] + [str(i) for i in ids])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.job_ids("PD,R,S,CG,CF,RQ,RH,RS,SE,SI,SO,ST"):
                return
            time.sleep(0.25)
        raise TimeoutError(f"jobs left on {self.name} after scancel: "
                           f"{self.run(['squeue']).stdout}")

    def nodes_idle(self) -> bool:
        proc = self.run(["sinfo", "-h", "-N", "-p", "gpu", "-o", "%N %t"])
        states = dict(line.split()[:2] for line in proc.stdout.splitlines() if line.strip())
        # up and schedulable; "-" = planned by backfill, "*" (not responding) etc. are not OK
        return proc.returncode == 0 and all(
            (states.get(n) or "").rstrip("-") in ("idle", "mix", "alloc") for n in self.spec.nodes)

    def hook_events(self) -> List[Dict[str, str]]:
        """All lines of the hooks' events.log (this cluster's only) as dicts."""
        path = self.hook_log_dir / "events.log"
        out = []
        try:
            text = path.read_text(errors="replace")
        except OSError:
            return out
        for line in text.splitlines():
            ev = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
            if ev.get("cluster") == self.name:
                out.append(ev)
        return out

    def wait_hook_event(self, job: int, event: str, timeout: float = 20,
                        since: Optional[float] = None) -> Dict[str, str]:
        """Wait for a ``prolog``/``epilog`` line of ``job`` (job ids restart after a FRESH
        bring-up: pass ``since``, a time.time() taken before submitting)."""
        deadline = time.monotonic() + timeout
        floor = int(since) - 1 if since is not None else 0
        while True:
            for ev in self.hook_events():
                if (ev.get("job") == str(job) and ev.get("event") == event
                        and int(ev.get("ts", "0") or 0) >= floor):
                    return ev
            if time.monotonic() >= deadline:
                raise TimeoutError(f"no {event} event for job {job} in "
                                   f"{self.hook_log_dir}/events.log")
            time.sleep(0.25)

    def __repr__(self) -> str:  # pragma: no cover - cosmetic
        return f"<SlurmCluster {self.name} {self.release} {self.slurm_conf}>"


def parse_scontrol_line(line: str) -> Dict[str, str]:
    """``Key=Value Key2=Value with spaces ...`` (scontrol -o) -> dict. Values may contain
    spaces (e.g. Comment): a token without ``=`` belongs to the previous value."""
    out: Dict[str, str] = {}
    key = None
    for tok in line.split(" "):
        m = re.match(r"^([A-Za-z][A-Za-z0-9_:/]*)=(.*)$", tok)
        if m:
            key = m.group(1)
            out[key] = m.group(2)
        elif key is not None and tok:
            out[key] += " " + tok
    return out


def _make(spec: ClusterSpec) -> SlurmCluster:
    env = dict(os.environ)
    prefix: List[str] = []
    env.pop("GIMBAL_CHROOT_INSTANCE", None)
    if spec.chroot and not IN_CHROOT:
        prefix = [str(HERE / "in-chroot.sh")]
        env.pop("SLURM_CONF", None)      # in-chroot.sh sets the chroot's own
        if spec.instance != "gimbal":
            env["GIMBAL_CHROOT_INSTANCE"] = spec.instance
    else:
        env["SLURM_CONF"] = spec.slurm_conf
    return SlurmCluster(spec=spec, env=env, prefix=prefix)


def _is_up(c: SlurmCluster) -> bool:
    try:
        if c.spec.chroot and not IN_CHROOT and not (SID_ROOT / "usr/bin/env").exists():
            return False
        if not c.spec.chroot and not Path(c.slurm_conf).exists():
            return False
        ping = c.run(["scontrol", "ping"], timeout=20)
        return "UP" in ping.stdout and c.nodes_idle()
    except (OSError, subprocess.SubprocessError):
        return False


def ensure_cluster(key: str, bringup: Optional[bool] = None) -> SlurmCluster:
    """Return a running cluster ``key`` ("2205", "2205mps", "2205het", "2605", "2605het").

    As root (and unless GIMBAL_SLURM_NO_BRINGUP=1) the bring-up script is run first; it is
    idempotent and also re-installs the repo's hooks. Otherwise an already running cluster is
    used. Raises ClusterUnavailable with the reason."""
    spec = SPECS[key]
    c = _make(spec)
    if spec.chroot and IN_CHROOT:
        bringup = False                   # inside the chroot: use what runs there
    if spec.chroot is False and IN_CHROOT:
        raise ClusterNotApplicable(f"Slurm {spec.release} runs on the host, not in the chroot")
    if bringup is None:
        bringup = os.geteuid() == 0 and os.environ.get("GIMBAL_SLURM_NO_BRINGUP") != "1"
    if bringup:
        env = dict(os.environ)
        env.update(dict(spec.bringup_env))
        argv = ["bash", str(REPO / spec.bringup[0])]
        try:
            proc = subprocess.run(argv, env=env, capture_output=True, text=True,
                                  timeout=spec.bringup_timeout, cwd=str(REPO))
        except subprocess.TimeoutExpired as e:
            raise ClusterUnavailable(f"{shlex.join(argv)} timed out after "
                                     f"{spec.bringup_timeout}s") from e
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-30:])
            raise ClusterUnavailable(f"Slurm {spec.release} bring-up failed "
                                     f"({shlex.join(argv)}, rc={proc.returncode}):\n{tail}")
    if not _is_up(c):
        why = ("bring-up finished but the cluster does not answer / nodes not idle" if bringup
               else f"Slurm {spec.release} test cluster not running and cannot bring it up "
                    f"(needs root: sudo bash {spec.bringup[0]})")
        raise ClusterUnavailable(why)
    return c
