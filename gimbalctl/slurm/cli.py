"""Slurm through its command-line tools (``squeue``, ``sinfo``, ``scontrol``, ``sprio``, ``scancel``).

Every call is an argument list (never a shell) with a timeout.  ``prefix`` is
prepended to every argv (e.g. ``chroot /srv/slurm-sid env -i PATH=...`` to
reach a cluster in a chroot); ``runner`` can be replaced (tests feed recorded
output through it).
"""
from __future__ import annotations

import json
import logging
import re
import subprocess
import time
from typing import Any, Callable, Optional, Sequence

from .backend import Backend
from .errors import (JobNotFound, SlurmCommandError, SlurmParseError, SlurmTimeout,
                     SlurmUnavailable, is_unavailable)
from .parse import jobs_from_squeue_json, nodes_from_json, parse_sprio, parse_version
from .sacct import (NAME_FIELDS, SAFE_FIELDS, finished_from_sacct_json,
                    finished_from_sacct_parsable)
from .types import SlurmFinishedJob, SlurmJob, SlurmNode

log = logging.getLogger("gimbal.slurm.cli")

Runner = Callable[[Sequence[str], float], "subprocess.CompletedProcess[str]"]


def subprocess_runner(argv: Sequence[str], timeout: float) -> "subprocess.CompletedProcess[str]":
    """Run ``argv``; its output is decoded as UTF-8 with ``errors="replace"``: Slurm passes
    user-chosen bytes (job names, comments) through unchanged, and one job named
    ``a\\xff\\xfe`` must not make every read fail (:mod:`.sanitize` cleans the fields)."""
    return subprocess.run(list(argv), capture_output=True, text=True, encoding="utf-8",
                          errors="replace", timeout=timeout, check=False,
                          stdin=subprocess.DEVNULL)


class CliBackend(Backend):
    name = "cli"

    def __init__(self, timeout: float = 20.0, prefix: Sequence[str] = (),
                 runner: Optional[Runner] = None, partition: Optional[str] = None):
        super().__init__()
        self.timeout = float(timeout)
        self.prefix = tuple(prefix)
        self.runner = runner or subprocess_runner
        self.partition = partition

    # ---- plumbing ---------------------------------------------------------
    def run(self, *argv: str, timeout: Optional[float] = None) -> str:
        full = self.prefix + tuple(argv)
        t = self.timeout if timeout is None else timeout
        try:
            cp = self.runner(full, t)
        except subprocess.TimeoutExpired:
            raise SlurmTimeout(f"{' '.join(argv)} did not answer within {t:g} s") from None
        except FileNotFoundError:
            raise SlurmUnavailable(f"{full[0]}: command not found (are the Slurm client "
                                   f"tools installed and on PATH?)") from None
        if cp.returncode != 0:
            if is_unavailable(cp.stderr):
                raise SlurmUnavailable(f"Slurm controller unreachable ({' '.join(argv)}): "
                                       f"{cp.stderr.strip()}")
            if "Invalid job id" in (cp.stderr or ""):
                raise JobNotFound(argv[-1], cp.stderr.strip())
            raise SlurmCommandError(full, cp.returncode, cp.stderr)
        return cp.stdout

    def run_json(self, *argv: str, timeout: Optional[float] = None) -> Any:
        out = self.run(*argv, timeout=timeout)
        try:
            # strict=False: a raw control character inside a string (a user's comment)
            # is not a reason to drop the whole document
            doc = json.loads(out, strict=False)
        except (json.JSONDecodeError, RecursionError) as e:
            raise SlurmParseError(f"{' '.join(argv)} printed invalid JSON: {e}") from None
        # 22.05 squeue/sinfo --json exit 0 with an "errors" list when the controller is down
        errs = doc.get("errors") if isinstance(doc, dict) else None
        if errs:
            errs = errs if isinstance(errs, list) else [errs]
            text = "; ".join(str(e.get("description") or e.get("error") or e) if isinstance(e, dict)
                             else str(e) for e in errs)
            raise SlurmUnavailable(f"{' '.join(argv)} reported errors: {text}")
        return doc

    # ---- reads ------------------------------------------------------------
    def cluster_name(self) -> str:
        """``ClusterName`` from ``scontrol show config`` (cached; "default" if not set)."""
        if getattr(self, "_cluster", None) is None:
            out = self.run("scontrol", "show", "config")
            m = re.search(r"^ClusterName\s*=\s*(\S+)", out, re.M)
            self._cluster = m.group(1) if m else "default"
        return self._cluster

    def _version(self) -> tuple[int, int, int]:
        return parse_version(self.run("sinfo", "-V"))

    def site_factors(self) -> dict[str, int]:
        """Site factor per pending job (``sprio``; only pending jobs are listed)."""
        try:
            return parse_sprio(self.run("sprio", "-h", "-o", "%i|%Y|%S|%N"), self.read_warnings)
        except SlurmCommandError as e:  # "Unable to find jobs" with no pending job
            if "Unable to find" in e.stderr or "No job" in e.stderr:
                return {}
            raise

    def _load_jobs(self, job_ids: Optional[Sequence[str]] = None) -> list[SlurmJob]:
        # 22.05 ignores -t/-j together with --json, so take everything and filter here
        doc = self.run_json("squeue", "--json")
        jobs = doc.get("jobs") if isinstance(doc, dict) else None
        sf = self.site_factors() if isinstance(jobs, list) and any(
            _is_pending(j) for j in jobs) else {}
        return jobs_from_squeue_json(doc, site_factors=sf, job_ids=job_ids,
                                     warnings=self.read_warnings)

    def _load_nodes(self) -> list[SlurmNode]:
        if self.version() >= (23, 2, 0):
            doc = self.run_json("scontrol", "--json", "show", "nodes")
        else:
            doc = self.run_json("sinfo", "--json")
        return nodes_from_json(doc, self.partition, warnings=self.node_warnings)

    def finished_jobs(self, since: float, until: Optional[float] = None,
                      max_rows: int = 100_000, timeout: Optional[float] = None
                      ) -> list[SlurmFinishedJob]:
        """``sacct --json -a -X --state=CD -S .. -E ..``; where ``--json`` is unavailable
        (an older sacct, no serializer plugin) the two ``sacct -P`` reads of
        :mod:`.sacct`.  An unreachable slurmdbd raises :class:`SlurmUnavailable`."""
        self.history_warnings = []
        fmt = "%Y-%m-%dT%H:%M:%S"
        win = ("-S", time.strftime(fmt, time.localtime(since)),
               "-E", time.strftime(fmt, time.localtime(until)) if until else "now")
        base = ("sacct", "-a", "-X", "--state=CD") + win
        try:
            doc = self.run_json(*base, "--json", timeout=timeout)
            jobs = finished_from_sacct_json(doc, self.history_warnings)
            self.history_format = "json"
        except (SlurmCommandError, SlurmParseError) as e:
            log.info("sacct --json unusable (%s); reading sacct -P", e)
            safe = self.run(*base, "-P", "-n", "--format=" + ",".join(SAFE_FIELDS),
                            timeout=timeout)
            names = self.run(*base, "-P", "-n", "--format=" + ",".join(NAME_FIELDS),
                             timeout=timeout)
            jobs = finished_from_sacct_parsable(safe, names, self.history_warnings)
            self.history_format = "parsable"
        jobs = [j for j in jobs if j.state == "COMPLETED"]
        if len(jobs) > max_rows:
            self.history_warnings.append(
                f"sacct listed {len(jobs)} completed jobs; kept the newest {max_rows} "
                f"(predictor.history_max_rows)")
            jobs = sorted(jobs, key=lambda j: (j.end_time, j.job_id))[-max_rows:]
        return jobs

    # ---- mutations --------------------------------------------------------
    def describe(self, job_id: str, field: str, value: Any) -> tuple[str, ...]:
        upd = ("scontrol", "update", f"JobId={job_id}")
        if field == "priority":
            return upd + (f"Priority={int(value)}",)
        if field == "site_factor":
            return upd + (f"SiteFactor={int(value)}",)
        if field == "nice":
            return upd + (f"Nice={int(value)}",)
        if field == "gres":
            if self.version() >= (23, 2, 0):
                spec = ",".join(f"gres/{p}" for p in str(value).split(",")) if value else ""
                return upd + (f"TresPerNode={spec}",)
            return upd + (f"Gres={value}",)
        if field == "req_nodes":
            return upd + (f"ReqNodeList={value}",)
        if field == "hold":
            return ("scontrol", "hold" if value else "release", job_id)
        if field == "release":
            return ("scontrol", "release" if value else "hold", job_id)
        if field == "requeue_hold":
            return ("scontrol", "requeuehold", job_id)
        if field == "signal":
            return ("scancel", f"--signal={value}", "--full", job_id)
        if field == "begin_time":
            return upd + (f"StartTime={value}",)
        raise ValueError(f"unknown job field {field!r}")

    def _do(self, job_id: str, field: str, value: Any) -> tuple[str, ...]:
        argv = self.describe(job_id, field, value)
        self.run(*argv)
        return argv


def _is_pending(j: Any) -> bool:
    if not isinstance(j, dict):
        return False
    st = j.get("job_state")
    if isinstance(st, list):
        return "PENDING" in st
    return st == "PENDING"
