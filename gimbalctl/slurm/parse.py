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
from .sanitize import clean, printable
from .types import GresUse, SlurmJob, SlurmNode

INFINITE32 = 0xFFFFFFFE  # NO_VAL / INFINITE and above
MAX_GRES_COUNT = 1 << 31  # no node or job has more units of one GRES
MAX_GPU_INDEX = 4096  # GRES indices per node beyond this are not a real node


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
        if hi < lo or hi >= MAX_GPU_INDEX or len(out) + hi - lo >= MAX_GPU_INDEX:
            raise SlurmParseError(f"GRES index list {printable(text, 80)!r} out of range")
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
    t = gres_gpu_type(text)
    return t.lower() if t else None


def gres_gpu_type(text: Any) -> Optional[str]:
    """The GPU type named in a GRES / TRES spec as Slurm spells it (``gres/gpu:V100:1`` ->
    ``V100``; ``gpu:4`` -> None): what ``scontrol update ... Gres=gpu:<type>:N`` must name."""
    m = _GPU_TYPE.search(str(text or ""))
    return m.group(1) if m else None


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
        if count > MAX_GRES_COUNT:
            raise SlurmParseError(f"GRES count {count} in {printable(text, 80)!r} out of range")
        out[name] = out.get(name, 0) + count
    return out


def _state(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return str(v[0]).upper() if v else "UNKNOWN"
    return str(v or "UNKNOWN").upper()


def _num_field(j: Mapping[str, Any], key: str, probs: list[str], default: Any = 0,
               unlimited: Any = None, kind=int) -> Any:
    """A numeric field of a job record; a value of the wrong type or out of range becomes
    ``default`` and is named in ``probs``."""
    raw = j.get(key)
    try:
        v = num(raw, unlimited=unlimited)
        if v is None or v is unlimited:
            return default if v is None else v
        if isinstance(v, str) or not isinstance(v, (int, float)):
            raise TypeError(type(v).__name__)
        v = kind(v)
        if v != v or abs(v) > 2 ** 53:  # NaN or beyond any Slurm value
            raise ValueError(v)
        return v
    except (TypeError, ValueError, OverflowError):
        probs.append(f"{key}={printable(raw, 40)!s} is not a number; using {default!r}")
        return default


def _text_field(j: Mapping[str, Any], key: str, probs: list[str], field: str = "",
                default: str = "") -> str:
    raw = j.get(key)
    if raw is None or raw == "":
        return default
    if isinstance(raw, (dict, list, tuple)):
        probs.append(f"{key} is a {type(raw).__name__}, not text; using {default!r}")
        return default
    text, p = clean(raw, field or key)
    probs.extend(p)
    return text


def _job_id(j: Mapping[str, Any]) -> str:
    v = num(j.get("job_id"))
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise SlurmParseError(f"squeue JSON job record with job_id "
                              f"{printable(j.get('job_id'), 40)!s} skipped: not a job id")
    return str(v)


def job_from_json(j: Mapping[str, Any], site_factors: Mapping[str, int] | None = None) -> SlurmJob:
    """One element of ``squeue --json``'s ``jobs`` (22.05 or 26.05 shape).

    Text fields are cleaned (:func:`sanitize.clean`); a field of the wrong type gets its
    default.  Both are listed in ``SlurmJob.warnings``.  A record that cannot describe a
    job at all (no usable id, state, node list or GRES detail) raises
    :class:`SlurmParseError` naming the job."""
    if not isinstance(j, Mapping):
        raise SlurmParseError(f"squeue JSON job record is a {type(j).__name__}, not an object")
    job_id = _job_id(j)
    probs: list[str] = []
    try:
        st = j.get("job_state")
        if not isinstance(st, (str, list, tuple, type(None))):
            raise SlurmParseError(f"job_state {printable(st, 40)} is not a state")
        state = clean(_state(st), "state", 32)[0]
        nodes = expand_nodes(_text_field(j, "nodes", probs, "node", ""))
        details = j.get("gres_detail") or []
        if not isinstance(details, (list, tuple)):
            raise SlurmParseError("gres_detail is not a list")
        alloc: list[GresUse] = []
        if state != "PENDING":
            for node, text in zip(nodes, details):
                alloc.extend(parse_gres_detail(clean(text, "gres_detail")[0], node))
        limit_min = _num_field(j, "time_limit", probs, default=None, kind=float)
        if limit_min is not None and limit_min < 0:
            probs.append(f"time_limit={limit_min} is negative; using unlimited")
            limit_min = None
        start = _num_field(j, "start_time", probs, default=None, kind=float)
        comment = _text_field(j, "comment", probs).strip()
        admin = _text_field(j, "admin_comment", probs).strip()
        tres = _text_field(j, "tres_per_node", probs, "tres_per_node")
        user = _text_field(j, "user_name", probs, "user") or \
            str(_num_field(j, "user_id", probs, default=""))
        return SlurmJob(
            job_id=job_id,
            name=_text_field(j, "name", probs),
            user=user,
            state=state,
            reason=_text_field(j, "state_reason", probs, "reason", "None"),
            priority=_num_field(j, "priority", probs),
            nice=_num_field(j, "nice", probs),
            submit_time=_num_field(j, "submit_time", probs, default=0.0, kind=float),
            start_time=float(start) if start and state != "PENDING" else None,
            time_limit_s=float(limit_min) * 60.0 if limit_min else None,
            partition=_text_field(j, "partition", probs),
            num_nodes=max(1, _num_field(j, "node_count", probs, default=1)),
            nodes=nodes if state != "PENDING" else (),
            req_nodes=expand_nodes(_text_field(j, "required_nodes", probs, "node", "")),
            gres_req=parse_gres_spec(tres),
            gpu_type_req=gres_gpu_type(tres),
            gres_alloc=tuple(alloc),
            comment=comment,
            admin_comment=admin,
            restarts=_num_field(j, "restart_cnt", probs),
            site_factor=(site_factors or {}).get(job_id),
            eligible_time=_num_field(j, "eligible_time", probs, default=0.0, kind=float) or None,
            meta=parse_meta(admin),
            warnings=tuple(probs),
        )
    except SlurmParseError as e:
        raise SlurmParseError(f"squeue JSON job {job_id} skipped: {e}") from None
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as e:
        raise SlurmParseError(f"squeue JSON job {job_id} skipped: {e!r}") from None


def jobs_from_squeue_json(doc: Mapping[str, Any], states: Iterable[str] | None = None,
                          site_factors: Mapping[str, int] | None = None,
                          job_ids: Iterable[str] | None = None,
                          warnings: Optional[list[str]] = None) -> list[SlurmJob]:
    """All jobs of an ``squeue --json`` document, filtered here (22.05 ignores ``-t``).

    A record that cannot be read is left out with one message in ``warnings`` naming it;
    one bad job never hides the others."""
    if not isinstance(doc, Mapping) or "jobs" not in doc:
        raise SlurmParseError("squeue JSON has no 'jobs' key")
    if not isinstance(doc["jobs"], (list, tuple)):
        raise SlurmParseError("squeue JSON 'jobs' is not a list")
    want = {s.upper() for s in states} if states else None
    ids = {str(i) for i in job_ids} if job_ids else None
    out = []
    for k, j in enumerate(doc["jobs"]):
        try:
            job = job_from_json(j, site_factors)
        except SlurmParseError as e:
            msg = str(e) if "job record is a" not in str(e) else f"{e} (record #{k}); skipped"
            if warnings is not None:
                warnings.append(msg)
            continue
        if want is not None and job.state not in want:
            continue
        if ids is not None and job.job_id not in ids:
            continue
        out.append(job)
    return out


def nodes_from_json(doc: Mapping[str, Any], partition: Optional[str] = None,
                    warnings: Optional[list[str]] = None) -> list[SlurmNode]:
    """``sinfo --json`` (22.05) or ``scontrol --json show nodes`` -> nodes (each once).

    A node record that cannot be read is left out with a message in ``warnings``."""
    if not isinstance(doc, Mapping) or "nodes" not in doc:
        raise SlurmParseError("node JSON has no 'nodes' key")
    if not isinstance(doc["nodes"], (list, tuple)):
        raise SlurmParseError("node JSON 'nodes' is not a list")
    seen: dict[str, SlurmNode] = {}
    for k, n in enumerate(doc["nodes"]):
        try:
            node = _node(n)
        except (SlurmParseError, TypeError, ValueError, AttributeError) as e:
            if warnings is not None:
                warnings.append(f"node record #{k} skipped: {printable(e, 200)}")
            continue
        if node is None or node.name in seen:
            continue
        if partition and node.partitions and partition not in node.partitions:
            continue
        seen[node.name] = node
    return sorted(seen.values(), key=lambda x: x.name)


def _node(n: Any) -> Optional[SlurmNode]:
    if not isinstance(n, Mapping):
        raise SlurmParseError(f"a {type(n).__name__}, not an object")
    name = n.get("name") or n.get("hostname")
    if not name:
        return None
    if not isinstance(name, str) or clean(name, "node")[1]:
        raise SlurmParseError(f"node name {printable(name, 60)!r} is not a host name")
    st = n.get("state")
    state = "+".join(str(s).lower() for s in st) if isinstance(st, (list, tuple)) \
        else str(st or "").lower()
    flags = n.get("state_flags") or []
    if isinstance(flags, (list, tuple)) and flags:
        state = "+".join([state] + [str(f).lower() for f in flags])
    parts_raw = n.get("partitions") or ()
    if isinstance(parts_raw, str):
        parts_raw = parts_raw.split(",")
    if not isinstance(parts_raw, (list, tuple)):
        raise SlurmParseError(f"node {name}: partitions is not a list")
    parts = tuple(clean(p, "partition")[0] for p in parts_raw)
    gres = n.get("gres") or ""
    if not isinstance(gres, str):
        raise SlurmParseError(f"node {name}: gres is not text")
    return SlurmNode(name, clean(state, "state", 128)[0], parse_gres_spec(gres), parts,
                     parse_gpu_type(gres), gres_gpu_type(gres))


def parse_sprio(text: str, warnings: Optional[list[str]] = None) -> dict[str, int]:
    """``sprio -h -o '%i|%Y|%S|%N'`` -> {job_id: site factor}; a line that cannot be read is
    left out with a message in ``warnings``."""
    out: dict[str, int] = {}
    for line in (text or "").splitlines():
        bits = [b.strip() for b in line.split("|")]
        if len(bits) < 3 or not bits[0]:
            continue
        try:
            if not bits[0].isdigit():
                raise ValueError("job id")
            v = float(bits[2])
            if v != v or abs(v) > 2 ** 53:
                raise ValueError("site factor")
            out[bits[0]] = int(v)
        except (ValueError, OverflowError):
            if warnings is not None:
                warnings.append(f"sprio line {printable(line, 120)!r} skipped: not "
                                f"'job id|priority|site factor|...'")
    return out
