"""Slurm through pyslurm (25.11.x API), used when it imports and the libslurm it
was built against has the running Slurm release (``check_compatible``).

Verified against Slurm 26.05.5 with pyslurm 25.11.2 built with the header shim
(``tests/slurm/bringup-26.05.sh``).  Two gaps of pyslurm there are filled from
the CLI backend, read-only: GPU indices of running jobs (pyslurm exposes no GRES
detail; ``Job.get_resource_layout_per_node`` crashes the interpreter on 26.05)
and the site factor (only ``sprio`` shows it).  Every mutation goes through
pyslurm.  pyslurm calls block in libslurm; the ``timeout`` applies to the CLI
reads, libslurm's own ``MessageTimeout`` to the rest.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

from .backend import Backend
from .cli import CliBackend
from .errors import SlurmError, SlurmUnavailable, SlurmVersionError, is_unavailable
from .meta import parse_meta
from .parse import gres_gpu_type, parse_gres_spec
from .sanitize import clean, printable
from .types import SlurmJob, SlurmNode

import pyslurm  # noqa: E402  (ImportError -> select.py falls back to the CLI)


def _err(e: Exception, what: str) -> SlurmError:
    msg = f"pyslurm {what}: {e}"
    return SlurmUnavailable(msg) if is_unavailable(str(e)) else SlurmError(msg)


class PyslurmBackend(Backend):
    name = "pyslurm"

    def __init__(self, timeout: float = 20.0, partition: Optional[str] = None,
                 cli: Optional[CliBackend] = None):
        super().__init__()
        self.cli = cli or CliBackend(timeout=timeout, partition=partition)
        self.partition = partition

    def check_compatible(self, cli: Optional[CliBackend] = None) -> None:
        """Raise :class:`SlurmVersionError` unless libslurm (as linked by pyslurm)
        and the Slurm tools have the same major.minor release."""
        lib = tuple(pyslurm.slurm_api_version())[:2]
        run = (cli or self.cli).version()[:2]
        if lib != run:
            raise SlurmVersionError(
                f"pyslurm {pyslurm.version.__version__} is linked against Slurm "
                f"{lib[0]}.{lib[1]:02d}, but the running Slurm is {run[0]}.{run[1]:02d}")

    def _version(self) -> tuple[int, int, int]:
        return self.cli.version()

    def cluster_name(self) -> str:
        return self.cli.cluster_name()

    # ---- reads ------------------------------------------------------------
    def finished_jobs(self, since, until=None, max_rows=100_000, timeout=None):
        """The accounting history through ``sacct`` (pyslurm's ``db`` API needs slurmdbd
        headers this build does not exercise): the CLI backend's read."""
        try:
            return self.cli.finished_jobs(since, until, max_rows, timeout)
        finally:
            self.history_warnings = self.cli.history_warnings
            self.history_format = self.cli.history_format

    def _load_jobs(self, job_ids: Optional[Sequence[str]] = None) -> list[SlurmJob]:
        try:
            jobs = pyslurm.Jobs.load()
        except UnicodeDecodeError as e:
            # pyslurm decodes every C string as strict UTF-8: one job named b"a\xff" makes
            # Jobs.load() fail for all.  Read this cycle's jobs through the CLI (tolerant).
            self.read_warnings.append(
                f"pyslurm Jobs.load() cannot decode a job's text ({e.reason} at byte "
                f"{e.start}); jobs read with squeue --json this cycle")
            self.cli.read_warnings = self.read_warnings
            return self.cli._load_jobs(job_ids)
        except Exception as e:  # pyslurm raises RPCError and friends
            raise _err(e, "Jobs.load()") from None
        pyjobs = [j for jid, j in jobs.items() if not job_ids or str(jid) in job_ids]
        self.cli.read_warnings = self.read_warnings
        alloc: dict[str, Any] = {}
        if any(j.state == "RUNNING" for j in pyjobs):
            alloc = {j.job_id: j.gres_alloc for j in self.cli._load_jobs(job_ids)}
        sf = self.cli.site_factors() if any(j.state == "PENDING" for j in pyjobs) else {}
        out = []
        cli_jobs: Optional[dict[str, SlurmJob]] = None
        for j in pyjobs:
            try:
                out.append(self._convert(j, alloc, sf))
            except UnicodeDecodeError:
                # pyslurm decodes a job's strings strictly (and lazily, here): read this job
                # through the tolerant CLI backend instead
                if cli_jobs is None:
                    cli_jobs = {c.job_id: c for c in self.cli._load_jobs(job_ids)}
                jid = str(getattr(j, "id", "?"))
                if jid in cli_jobs:
                    out.append(cli_jobs[jid])
                elif not _ended(j):
                    self.read_warnings.append(f"pyslurm job {jid} skipped: its text is not "
                                              f"UTF-8 and squeue does not list it")
                # (an ended job squeue no longer lists is out of the queue: as with the CLI
                # backend, it is left out without a warning)
            except (SlurmError, TypeError, ValueError, AttributeError, OverflowError) as e:
                self.read_warnings.append(f"pyslurm job {getattr(j, 'id', '?')} skipped: "
                                          f"{printable(e, 200)}")
        return out

    @staticmethod
    def _convert(j, alloc: dict, sf: dict) -> SlurmJob:
        jid = str(int(j.id))
        probs: list[str] = []

        def txt(v, fld, default=""):
            t, p = clean(v, fld)
            probs.extend(p)
            return t or default

        gres, gtype = {}, None
        for k, v in (j.gres_per_node or {}).items():
            gres.update(parse_gres_spec(f"{k}:{v}"))
            gtype = gtype or gres_gpu_type(f"{k}:{v}")
        limit = j.time_limit
        comment = txt(j.comment, "comment").strip()
        admin = txt(j.admin_comment, "admin_comment").strip()
        state = txt(j.state, "state", "UNKNOWN").upper()
        nodes = _expand(j.allocated_nodes) if state != "PENDING" else ()
        return SlurmJob(
            job_id=jid, name=txt(j.name, "name"), user=txt(j.user_name, "user"), state=state,
            reason=txt(j.state_reason, "reason", "None"), priority=int(j.priority or 0),
            nice=int(j.nice or 0), submit_time=float(j.submit_time or 0),
            start_time=float(j.start_time) if j.start_time and state != "PENDING" else None,
            time_limit_s=float(limit) * 60.0 if isinstance(limit, (int, float)) and limit else None,
            partition=txt(j.partition, "partition"), num_nodes=int(j.num_nodes or 1), nodes=nodes,
            req_nodes=_expand(j.required_nodes), gres_req=gres,
            gres_alloc=tuple(alloc.get(jid, ())), comment=comment, admin_comment=admin,
            restarts=int(j.requeue_count or 0), site_factor=sf.get(jid),
            eligible_time=_epoch(getattr(j, "eligible_time", None)),
            meta=parse_meta(admin), warnings=tuple(probs), gpu_type_req=gtype)

    def _load_nodes(self) -> list[SlurmNode]:
        try:
            nodes = pyslurm.Nodes.load()
        except Exception as e:
            raise _err(e, "Nodes.load()") from None
        out = []
        for name, n in nodes.items():
            parts = tuple(n.partitions or ())
            if self.partition and parts and self.partition not in parts:
                continue
            gres, gtype = {}, None
            for k, v in (n.configured_gres or {}).items():
                gres.update(parse_gres_spec(f"{k}:{v}"))
                gtype = gtype or gres_gpu_type(f"{k}:{v}")
            out.append(SlurmNode(str(name), str(n.state or "").lower(), gres, parts,
                                 gtype.lower() if gtype else None, gtype))
        return sorted(out, key=lambda x: x.name)

    # ---- mutations --------------------------------------------------------
    def describe(self, job_id: str, field: str, value: Any) -> tuple[str, ...]:
        call = {"priority": f"modify(priority={int(value)})" if field == "priority" else "",
                }.get(field)
        if field in ("priority", "site_factor", "nice"):
            call = f"modify(JobSubmitDescription({field}={int(value)}))"
        elif field == "gres":
            call = f"modify(JobSubmitDescription(gres_per_node={_gres_dict(value)!r}))"
        elif field == "req_nodes":
            call = f"modify(JobSubmitDescription(required_nodes={value!r}))"
        elif field == "hold":
            call = "hold()" if value else "release()"
        elif field == "release":
            call = "release()" if value else "hold()"
        elif field == "requeue_hold":
            call = "requeue(hold=True)"
        elif field == "signal":
            call = f"send_signal({_signame(value)!r}, steps='all')"
        elif field == "begin_time":
            call = f"modify(JobSubmitDescription(begin_time={str(value)!r}))"
        else:
            raise ValueError(f"unknown job field {field!r}")
        return ("pyslurm", f"Job({job_id})", call)

    def _do(self, job_id: str, field: str, value: Any) -> tuple[str, ...]:
        job = pyslurm.Job(int(job_id))
        try:
            if field in ("priority", "site_factor", "nice"):
                job.modify(pyslurm.JobSubmitDescription(**{field: int(value)}))
            elif field == "gres":
                job.modify(pyslurm.JobSubmitDescription(gres_per_node=_gres_dict(value)))
            elif field == "req_nodes":
                job.modify(pyslurm.JobSubmitDescription(required_nodes=value or ""))
            elif field in ("hold", "release"):
                (job.hold if (field == "hold") == bool(value) else job.release)()
            elif field == "requeue_hold":
                job.requeue(hold=True)
            elif field == "signal":
                # pyslurm wants "SIGUSR2"; steps="all" includes the batch step, like
                # `scancel --full` (its default, "children", leaves the batch script out)
                job.send_signal(_signame(value), steps="all")
            elif field == "begin_time":
                job.modify(pyslurm.JobSubmitDescription(begin_time=str(value)))
        except Exception as e:
            raise _err(e, f"Job({job_id}) {field}={value!r}") from None
        return self.describe(job_id, field, value)


_ENDED = frozenset({"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                    "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY"})


def _ended(j) -> bool:
    """Whether pyslurm gives the job an ended state (read on its own: another field of the
    job may be the one that does not decode)."""
    try:
        return str(j.state).upper() in _ENDED
    except (UnicodeDecodeError, AttributeError, TypeError, ValueError):
        return False


def _signame(sig) -> str:
    """``USR2`` / ``SIGUSR2`` / ``12`` -> ``SIGUSR2`` (the form pyslurm accepts)."""
    s = str(sig).strip().upper()
    if s.isdigit():
        import signal as _sig
        return _sig.Signals(int(s)).name
    return s if s.startswith("SIG") else "SIG" + s


def _epoch(v) -> Optional[float]:
    """pyslurm time (int epoch, datetime or None) -> epoch seconds, None when unset."""
    if v is None:
        return None
    if hasattr(v, "timestamp"):
        return float(v.timestamp())
    try:
        return float(v) or None
    except (TypeError, ValueError):
        return None


def _gres_dict(spec: str) -> dict[str, int]:
    """``gpu:v100:2`` -> ``{"gpu:v100": 2}`` (pyslurm's typed form), ``shard:4`` ->
    ``{"shard": 4}``."""
    out = parse_gres_spec(spec)
    gtype = gres_gpu_type(spec)
    if gtype and "gpu" in out:
        out[f"gpu:{gtype}"] = out.pop("gpu")
    return out


def _expand(expr) -> tuple[str, ...]:
    from .parse import expand_nodes
    return expand_nodes(expr or "")
