"""Pure parsers for what Slurm prints (22.05 and 26.05 shapes).

No subprocess here: every function takes text or decoded JSON, so unit tests
run on the recorded fixtures in ``tests/fixtures/slurm/<release>/``.

Shapes handled:

* ``squeue --json``: 22.05 (data parser v0.0.38; plain numbers, ``job_state``
  a string, ``nice`` null when 0, filters ignored) and 26.05 (v0.0.45;
  numbers as ``{"set", "infinite", "number"}``, ``job_state`` a list);
* GRES detail: 22.05 ``gpu:2(IDX:0-1)``, ``shard:2(IDX:2)``; 26.05 per-GPU
  ``shard:2(2/4,0/4,0/4,0/4)``;
* ``tres_per_node``: ``gres:gpu:2`` (22.05) and ``gres/gpu:2`` (26.05);
* node lists from ``sinfo --json`` (22.05) / ``scontrol --json show nodes``;
* ``sprio -h -o %i|%Y|%S|%N`` and ``sinfo -V``.
"""
from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Optional

from launcher.slurm import HostlistError, expand_hostlist

from .errors import SlurmParseError
from .meta import parse_meta
from .types import GresUse, SlurmJob, SlurmNode

INFINITE32 = 0xFFFFFFFE  # NO_VAL / INFINITE and above


def parse_version(text: str) -> tuple[int, int, int]:
    """``slurm-wlm 22.05.8`` / ``slurm 26.05.5`` -> (22, 5, 8)."""
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    if not m:
        raise SlurmParseError(f"cannot read a Slurm version from {text!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def num(v: Any, unlimited: Any = None) -> Any:
    """A number from either JSON shape; ``unlimited`` for infinite/unset."""
    if isinstance(v, Mapping):
        if v.get("infinite"):
            return unlimited
        if not v.get("set", True):
            return None
        v = v.get("number")
    if v is None or isinstance(v, bool):
        return None if v is None else int(v)
    if isinstance(v, (int, float)) and v >= INFINITE32:
        return unlimited
    return v


def expand_nodes(expr: Any) -> tuple[str, ...]:
    if not expr:
        return ()
    if isinstance(expr, (list, tuple)):
        out: list[str] = []
        for e in expr:
            out.extend(expand_nodes(e))
        return tuple(out)
    expr = str(expr).strip()
    if expr in ("(null)", "None", ""):
        return ()
    try:
        return tuple(expand_hostlist(expr))
    except HostlistError as e:
        raise SlurmParseError(f"bad node list {expr!r}: {e}") from None


def parse_index_list(text: str) -> list[int]:
    """``0-1,3`` -> [0, 1, 3]; ``N/A`` -> []."""
    out: list[int] = []
    text = text.strip()
    if not text or text.upper() == "N/A":
        return out
    for part in text.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise SlurmParseError(f"bad GRES index list {text!r}")
        lo = int(m.group(1))
        hi = int(m.group(2) or lo)
        out.extend(range(lo, hi + 1))
    return out


_DETAIL = re.compile(r"([A-Za-z]+)(?::[^:(,]+)?:(\d+)\(([^)]*)\)")


def parse_gres_detail(text: str, node: str) -> list[GresUse]:
    """One node's GRES detail string -> uses.

    ``gpu:2(IDX:0-1)`` -> gpu {0:1, 1:1}; ``shard:2(IDX:2)`` -> shard {2:2};
    ``shard:2(2/4,0/4,0/4,0/4)`` (26.05 per-GPU form) -> shard {0:2}.
    """
    out = []
    for m in _DETAIL.finditer(text or ""):
        name, count, inner = m.group(1), int(m.group(2)), m.group(3)
        per: dict[int, int] = {}
        if inner.startswith("IDX:"):
            idx = parse_index_list(inner[4:])
            if name == "gpu":
                per = {i: 1 for i in idx}
            elif idx:
                share, extra = divmod(count, len(idx))
                per = {i: share + (1 if k < extra else 0) for k, i in enumerate(idx)}
        else:
            for i, cell in enumerate(inner.split(",")):
                cm = re.fullmatch(r"\s*(\d+)/(\d+)\s*", cell)
                if not cm:
                    raise SlurmParseError(f"bad per-GPU GRES detail {text!r} on {node}")
                if int(cm.group(1)):
                    per[i] = int(cm.group(1))
        out.append(GresUse(node, name, count, per))
    return out


_GPU_TYPE = re.compile(r"(?:^|[,\s])(?:gres[:/])?gpu:([A-Za-z][A-Za-z0-9_.-]{0,31}):\d")


def parse_gpu_type(text: Any) -> Optional[str]:
    """GPU type of a node's configured GRES (``gpu:v100:4`` -> ``v100``, lower case);
    ``None`` for untyped GPUs (``gpu:4``).  A node with several types gets the first."""
    m = _GPU_TYPE.search(str(text or ""))
    return m.group(1).lower() if m else None


def parse_gres_spec(text: Any) -> dict[str, int]:
    """``gres:gpu:2`` / ``gres/gpu:2`` / ``gpu:tesla:2(S:0)`` / ``gpu:4,shard:16`` -> {name: count}."""
    out: dict[str, int] = {}
    if not text or text in ("(null)", "N/A"):
        return out
    # split on commas outside parentheses
    depth, cur, parts = 0, [], []
    for ch in str(text):
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    for p in parts:
        p = re.sub(r"\(.*\)$", "", p.strip())
        if p.startswith("gres:") or p.startswith("gres/"):
            p = p[5:]
        if not p or p.startswith(("cpu", "mem", "node", "billing")):
            continue
        bits = p.split(":")
        name = bits[0]
        count = 1
        if len(bits) > 1 and bits[-1].isdigit():
            count = int(bits[-1])
        elif len(bits) > 1 and bits[-1] == "(null)" and len(bits) > 2 and bits[-2].isdigit():
            count = int(bits[-2])
        out[name] = out.get(name, 0) + count
    return out


def _state(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return str(v[0]).upper() if v else "UNKNOWN"
    return str(v or "UNKNOWN").upper()


def job_from_json(j: Mapping[str, Any], site_factors: Mapping[str, int] | None = None) -> SlurmJob:
    """One element of ``squeue --json``'s ``jobs`` (22.05 or 26.05 shape)."""
    try:
        job_id = str(num(j["job_id"]))
        nodes = expand_nodes(j.get("nodes") or "")
        state = _state(j.get("job_state"))
        details = j.get("gres_detail") or []
        alloc: list[GresUse] = []
        if state != "PENDING":
            for node, text in zip(nodes, details):
                alloc.extend(parse_gres_detail(text, node))
        limit_min = num(j.get("time_limit"), unlimited=None)
        start = num(j.get("start_time"))
        comment = (j.get("comment") or "").strip()
        admin = (j.get("admin_comment") or "").strip()
        tres = j.get("tres_per_node") or ""
        return SlurmJob(
            job_id=job_id,
            name=str(j.get("name") or ""),
            user=str(j.get("user_name") or j.get("user_id") or ""),
            state=state,
            reason=str(j.get("state_reason") or "None"),
            priority=int(num(j.get("priority")) or 0),
            nice=int(num(j.get("nice")) or 0),
            submit_time=float(num(j.get("submit_time")) or 0),
            start_time=float(start) if start and state != "PENDING" else None,
            time_limit_s=float(limit_min) * 60.0 if limit_min else None,
            partition=str(j.get("partition") or ""),
            num_nodes=int(num(j.get("node_count")) or 1),
            nodes=nodes if state != "PENDING" else (),
            req_nodes=expand_nodes(j.get("required_nodes") or ""),
            gres_req=parse_gres_spec(tres),
            gres_alloc=tuple(alloc),
            comment=comment,
            admin_comment=admin,
            restarts=int(num(j.get("restart_cnt")) or 0),
            site_factor=(site_factors or {}).get(job_id),
            eligible_time=float(num(j.get("eligible_time")) or 0) or None,
            meta=parse_meta(admin, comment),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise SlurmParseError(f"cannot parse squeue JSON job {j.get('job_id')!r}: {e!r}") from None


def jobs_from_squeue_json(doc: Mapping[str, Any], states: Iterable[str] | None = None,
                          site_factors: Mapping[str, int] | None = None,
                          job_ids: Iterable[str] | None = None) -> list[SlurmJob]:
    """All jobs of an ``squeue --json`` document, filtered here (22.05 ignores ``-t``)."""
    if not isinstance(doc, Mapping) or "jobs" not in doc:
        raise SlurmParseError("squeue JSON has no 'jobs' key")
    want = {s.upper() for s in states} if states else None
    ids = {str(i) for i in job_ids} if job_ids else None
    out = []
    for j in doc["jobs"]:
        job = job_from_json(j, site_factors)
        if want is not None and job.state not in want:
            continue
        if ids is not None and job.job_id not in ids:
            continue
        out.append(job)
    return out


def nodes_from_json(doc: Mapping[str, Any], partition: Optional[str] = None) -> list[SlurmNode]:
    """``sinfo --json`` (22.05) or ``scontrol --json show nodes`` -> nodes (each once)."""
    if not isinstance(doc, Mapping) or "nodes" not in doc:
        raise SlurmParseError("node JSON has no 'nodes' key")
    seen: dict[str, SlurmNode] = {}
    for n in doc["nodes"]:
        name = n.get("name") or n.get("hostname")
        if not name or name in seen:
            continue
        st = n.get("state")
        state = "+".join(s.lower() for s in st) if isinstance(st, list) else str(st or "").lower()
        flags = n.get("state_flags") or []
        if flags:
            state = "+".join([state] + [str(f).lower() for f in flags])
        parts = tuple(n.get("partitions") or ())
        if partition and parts and partition not in parts:
            continue
        gres = n.get("gres") or ""
        seen[name] = SlurmNode(name, state, parse_gres_spec(gres), parts, parse_gpu_type(gres))
    return sorted(seen.values(), key=lambda x: x.name)


def parse_sprio(text: str) -> dict[str, int]:
    """``sprio -h -o '%i|%Y|%S|%N'`` -> {job_id: site factor}."""
    out: dict[str, int] = {}
    for line in (text or "").splitlines():
        bits = [b.strip() for b in line.split("|")]
        if len(bits) < 3 or not bits[0]:
            continue
        try:
            out[bits[0]] = int(float(bits[2]))
        except ValueError:
            raise SlurmParseError(f"bad sprio line {line!r}") from None
    return out
