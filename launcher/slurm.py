"""Slurm allocation parsing for ``gimbal-run`` (pure Python, no ``scontrol``).

gimbal-run is started once per node (``srun --ntasks-per-node=1 gimbal-run ...``)
and derives the torchrun rendezvous from the allocation:

* node list: ``SLURM_JOB_NODELIST`` (fallback ``SLURM_NODELIST``), expanded by
  :func:`expand_hostlist`; the first host is the c10d rendezvous host;
* ``--nnodes``: ``SLURM_JOB_NUM_NODES`` (fallback ``SLURM_NNODES``), checked
  against the node list length;
* rendezvous port: ``10000 + job_id % 20000`` (:func:`rendezvous_port`), i.e.
  in 10000..29999 (below Linux's default ephemeral range, 32768-60999), so that two jobs sharing a first node only collide when
  their ids are congruent modulo 20000;
* rendezvous id: the job id;
* this node is the rendezvous host when ``SLURM_NODEID == 0`` (fallback: the
  node name ``SLURMD_NODENAME`` equals the first host).

Every problem raises :class:`SlurmEnvError` naming the variable, which the CLI
turns into exit status 2 (never a hang).
"""
from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass
from typing import Iterable, List, Mapping, Optional

PORT_BASE = 10000
PORT_SPAN = 20000


class SlurmEnvError(ValueError):
    """A Slurm environment variable is missing or malformed."""

    def __init__(self, variable: str, message: str):
        self.variable = variable
        super().__init__(f"{variable}: {message}")


class HostlistError(ValueError):
    """A Slurm hostlist expression could not be parsed."""


def _split_top_level(expr: str) -> List[str]:
    """Split on commas that are not inside brackets."""
    parts, depth, cur = [], 0, []
    for ch in expr:
        if ch == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"nested brackets in hostlist {expr!r}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' in hostlist {expr!r}")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise HostlistError(f"unbalanced '[' in hostlist {expr!r}")
    parts.append("".join(cur))
    return parts


def _expand_range_set(body: str, expr: str) -> List[str]:
    out: List[str] = []
    for item in body.split(","):
        item = item.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", item)
        if not m:
            raise HostlistError(f"bad range {item!r} in hostlist {expr!r}")
        lo_s, hi_s = m.group(1), m.group(2)
        if hi_s is None:
            out.append(lo_s)
            continue
        lo, hi = int(lo_s), int(hi_s)
        if hi < lo:
            raise HostlistError(f"descending range {item!r} in hostlist {expr!r}")
        if hi - lo > 100000:
            raise HostlistError(f"range {item!r} too large in hostlist {expr!r}")
        width = len(lo_s)  # Slurm keeps the zero padding of the lower bound
        out.extend(str(i).zfill(width) for i in range(lo, hi + 1))
    return out


def _expand_one(piece: str, expr: str) -> List[str]:
    m = re.search(r"\[([^\]]*)\]", piece)
    if not m:
        if "[" in piece or "]" in piece:
            raise HostlistError(f"bad brackets in hostlist {expr!r}")
        return [piece]
    prefix, rest = piece[: m.start()], piece[m.end():]
    tails = _expand_one(rest, expr)
    return [prefix + v + t for v in _expand_range_set(m.group(1), expr) for t in tails]


def expand_hostlist(expr: str) -> List[str]:
    """Expand a Slurm hostlist, e.g. ``node[01-03,7],gpu5`` ->
    ``[node01, node02, node03, node7, gpu5]``.  Several bracket groups in one
    name (``r[1-2]n[1-2]``) expand as a cartesian product, leftmost slowest.
    Order is preserved; duplicates are kept (Slurm never produces them)."""
    expr = (expr or "").strip()
    if not expr:
        raise HostlistError("empty hostlist")
    hosts: List[str] = []
    for piece in _split_top_level(expr):
        piece = piece.strip()
        if not piece:
            raise HostlistError(f"empty host name in hostlist {expr!r}")
        hosts.extend(_expand_one(piece, expr))
    return hosts


def rendezvous_port(job_id: int) -> int:
    """Port of the c10d rendezvous store: ``10000 + job_id % 20000``."""
    return PORT_BASE + int(job_id) % PORT_SPAN


def _int_var(env: Mapping[str, str], name: str, minimum: int = 0) -> int:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        raise SlurmEnvError(name, "is not set")
    # Slurm sometimes appends a repetition suffix, e.g. SLURM_TASKS_PER_NODE=2(x3)
    m = re.fullmatch(r"\s*(\d+)(\(x\d+\))?\s*", raw)
    if not m:
        raise SlurmEnvError(name, f"expected an integer, got {raw!r}")
    val = int(m.group(1))
    if val < minimum:
        raise SlurmEnvError(name, f"must be >= {minimum}, got {val}")
    return val


def count_visible_gpus(env: Mapping[str, str]) -> Optional[int]:
    """GPUs visible to this node's task: ``SLURM_GPUS_ON_NODE``, else the
    length of ``CUDA_VISIBLE_DEVICES``; ``None`` when neither says."""
    if env.get("SLURM_GPUS_ON_NODE", "").strip():
        return _int_var(env, "SLURM_GPUS_ON_NODE")
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        cvd = cvd.strip()
        if cvd in ("", "NoDevFiles", "-1"):
            return 0
        return len([d for d in cvd.split(",") if d.strip()])
    return None


def physical_gpu_count() -> int:
    """NVIDIA GPUs this node has, whatever ``CUDA_VISIBLE_DEVICES`` says: the driver's
    ``/proc/driver/nvidia/gpus`` entries, else NVML; 0 when there is no NVIDIA driver.
    No CUDA context is created (the launcher never imports torch)."""
    try:
        n = len(os.listdir("/proc/driver/nvidia/gpus"))
        if n:
            return n
    except OSError:
        pass
    try:
        import pynvml
        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no package, no driver, no device: no GPU
        return 0


@dataclass(frozen=True)
class SlurmAllocation:
    job_id: str
    hosts: tuple
    nnodes: int
    node_rank: int
    gpus_on_node: Optional[int]

    @property
    def rdzv_host(self) -> str:
        return self.hosts[0]

    @property
    def rdzv_port(self) -> int:
        return rendezvous_port(int(self.job_id))

    @property
    def is_host(self) -> bool:
        return self.node_rank == 0


def in_slurm(env: Optional[Mapping[str, str]] = None) -> bool:
    env = os.environ if env is None else env
    return bool(env.get("SLURM_JOB_ID"))


def parse_allocation(env: Optional[Mapping[str, str]] = None,
                     hostname: Optional[str] = None) -> SlurmAllocation:
    """Read the allocation of the current job step from ``env``.

    Raises :class:`SlurmEnvError` naming the offending variable."""
    env = os.environ if env is None else env
    job_id = _int_var(env, "SLURM_JOB_ID", minimum=1)

    nl_var = "SLURM_JOB_NODELIST" if env.get("SLURM_JOB_NODELIST") else "SLURM_NODELIST"
    if not env.get(nl_var):
        raise SlurmEnvError("SLURM_JOB_NODELIST", "is not set")
    try:
        hosts = tuple(expand_hostlist(env[nl_var]))
    except HostlistError as exc:
        raise SlurmEnvError(nl_var, str(exc)) from None

    nn_var = "SLURM_JOB_NUM_NODES" if env.get("SLURM_JOB_NUM_NODES") else "SLURM_NNODES"
    if env.get(nn_var):
        nnodes = _int_var(env, nn_var, minimum=1)
        if nnodes != len(hosts):
            raise SlurmEnvError(nn_var, f"says {nnodes} nodes but {nl_var}={env[nl_var]!r} "
                                        f"lists {len(hosts)}")
    else:
        nnodes = len(hosts)
    # torchrun waits for --nnodes agents: a step on fewer nodes (srun -N1 in a
    # 2-node job) would hang in the rendezvous
    if env.get("SLURM_STEP_NUM_NODES", "").strip():
        step_nodes = _int_var(env, "SLURM_STEP_NUM_NODES", minimum=1)
        if step_nodes != nnodes:
            raise SlurmEnvError("SLURM_STEP_NUM_NODES",
                                f"is {step_nodes} but the job has {nnodes} nodes; run one "
                                f"gimbal-run on every node (srun --ntasks-per-node=1, no -N)")

    # one launcher task per node, otherwise several torchruns would fight
    # over the same GPUs and the rendezvous would wait forever
    if env.get("SLURM_NTASKS_PER_NODE"):
        tpn = _int_var(env, "SLURM_NTASKS_PER_NODE", minimum=1)
        if tpn != 1:
            raise SlurmEnvError("SLURM_NTASKS_PER_NODE",
                                f"is {tpn}; run gimbal-run with srun --ntasks-per-node=1")
    if env.get("SLURM_LOCALID"):
        if _int_var(env, "SLURM_LOCALID") != 0:
            raise SlurmEnvError("SLURM_LOCALID",
                                "is not 0; run gimbal-run with srun --ntasks-per-node=1")

    if env.get("SLURM_NODEID", "").strip():
        node_rank = _int_var(env, "SLURM_NODEID")
        if node_rank >= nnodes:
            raise SlurmEnvError("SLURM_NODEID", f"is {node_rank} but the job has {nnodes} nodes")
    else:
        name = env.get("SLURMD_NODENAME") or hostname or socket.gethostname()
        short = name.split(".")[0]
        matches = [i for i, h in enumerate(hosts) if h == name or h == short]
        if not matches:
            raise SlurmEnvError("SLURM_NODEID", f"is not set and node name {name!r} "
                                                f"is not in {nl_var}")
        node_rank = matches[0]

    return SlurmAllocation(job_id=str(job_id), hosts=hosts, nnodes=nnodes,
                           node_rank=node_rank, gpus_on_node=count_visible_gpus(env))


def iter_slurm_vars(env: Mapping[str, str]) -> Iterable[str]:
    return sorted(k for k in env if k.startswith("SLURM"))
