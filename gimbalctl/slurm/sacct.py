"""Pure parsers of ``sacct`` output: the finished-job history (seed 003 A-SRPT's predictor).

Two shapes, both read with every field untrusted (the rules of docs/security.md and
:mod:`.sanitize`):

* ``sacct --json`` — 22.05 (openapi dbv0.0.38: ``state.current`` a string, plain numbers) and
  26.05 (data_parser v0.0.45: ``state.current`` a list, numbers as ``{"set", "infinite",
  "number"}``).  JSON escapes every byte a user chose, so a job name cannot forge a record.
* ``sacct -P`` (the fallback where ``--json`` is unavailable) — read in two calls, because a job
  name or comment may hold a newline and forge a whole line of ``-P`` output (recorded:
  ``tests/fixtures/slurm/22.05/sacct-P.txt``): the records from fields no user writes
  (``JobID,User,Submit,Start,End,State,AllocTRES,AdminComment``), then ``JobID,JobName``
  alone.  A name line for a job id the first call did not list counts for nothing; a job id
  with two name lines (a forged one among them) is left out of the history with a warning;
  a line that does not start with a job id continues the name before it.  The user's Comment
  is not read in this mode.

A record that cannot describe a finished job (no job id, times missing or out of order, a
field of the wrong type) is left out with one message naming it; the others are kept.
"""
from __future__ import annotations

import math
import re
import time
from typing import Any, Iterable, Mapping, Optional

from .errors import SlurmParseError
from .meta import parse_meta
from .parse import num
from .sanitize import clean, printable
from .types import SlurmFinishedJob

# no job of the history ends before 2000-01-01 or after 9999: anything else is not a time
MIN_EPOCH, MAX_EPOCH = 946684800.0, 253402300799.0
MAX_GPUS = 1 << 20
# fields of the -P fallback's two reads (see the module docstring)
SAFE_FIELDS = ("JobID", "User", "Submit", "Start", "End", "State", "AllocTRES", "AdminComment")
NAME_FIELDS = ("JobID", "JobName")
_GPU_TRES = re.compile(r"(?:^|,)gres/gpu=(\d+)(?:,|$)")
_JOBID = re.compile(r"^(\d{1,12})$")


def _epoch(v: Any, what: str) -> float:
    x = num(v)
    if x is None or isinstance(x, bool) or not isinstance(x, (int, float)):
        raise SlurmParseError(f"{what} {printable(v, 40)!s} is not a time")
    x = float(x)
    if not math.isfinite(x) or not MIN_EPOCH <= x <= MAX_EPOCH:
        raise SlurmParseError(f"{what} {printable(v, 40)!s} is not a time")
    return x


def _text(v: Any, field: str, probs: list[str]) -> str:
    if v is None:
        return ""
    if isinstance(v, (dict, list, tuple)):
        probs.append(f"{field} is a {type(v).__name__}, not text; ignored")
        return ""
    text, p = clean(v, field)
    probs.extend(p)
    return text


def _state(v: Any) -> str:
    if isinstance(v, Mapping):
        v = v.get("current")
    if isinstance(v, (list, tuple)):
        v = v[0] if v else ""
    if not isinstance(v, str):
        raise SlurmParseError(f"state {printable(v, 40)!s} is not a job state")
    return clean(v.split(" ")[0].upper(), "state", 32)[0]


def _gpus_from_tres_list(alloc: Any) -> int:
    """``tres.allocated`` of a JSON record -> GPU count (``gres``/``gpu``; typed entries such
    as ``gpu:a100`` only when there is no untyped one)."""
    if alloc is None:
        return 0
    if not isinstance(alloc, (list, tuple)):
        raise SlurmParseError("tres.allocated is not a list")
    plain, typed = None, 0
    for t in alloc:
        if not isinstance(t, Mapping) or t.get("type") != "gres":
            continue
        name = t.get("name")
        cnt = num(t.get("count"))
        if cnt is None:
            continue
        if isinstance(cnt, bool) or not isinstance(cnt, (int, float)) or not 0 <= cnt <= MAX_GPUS:
            raise SlurmParseError(f"gres/{printable(name, 40)} count {printable(cnt, 40)} out of range")
        if name == "gpu":
            plain = int(cnt)
        elif isinstance(name, str) and name.startswith("gpu:"):
            typed += int(cnt)
    return plain if plain is not None else typed


def gpus_from_tres(text: str) -> int:
    """``billing=1,cpu=1,gres/gpu=2,mem=500M`` -> 2 (0 without GPUs)."""
    m = _GPU_TRES.search(text or "")
    if not m:
        return 0
    if len(m.group(1)) > 7 or int(m.group(1)) > MAX_GPUS:
        raise SlurmParseError(f"gres/gpu={printable(m.group(1), 20)} out of range")
    return int(m.group(1))


def _finished(job_id: str, name: str, user: str, state: str, sub: float, st: float, en: float,
              gpus: int, comment: str, admin: str, probs: list[str]) -> SlurmFinishedJob:
    if en < st:
        raise SlurmParseError(f"ends ({en:.0f}) before it starts ({st:.0f})")
    if sub > st:
        probs.append(f"submitted ({sub:.0f}) after it started ({st:.0f}); using the start")
        sub = st
    return SlurmFinishedJob(job_id, name, user, state, sub, st, en, gpus, comment, admin,
                            parse_meta(admin), tuple(probs))


def job_from_sacct_json(j: Any) -> SlurmFinishedJob:
    """One element of ``sacct --json``'s ``jobs`` (22.05 or 26.05 shape) that has ended."""
    if not isinstance(j, Mapping):
        raise SlurmParseError(f"sacct JSON job record is a {type(j).__name__}, not an object")
    jid = num(j.get("job_id"))
    if isinstance(jid, bool) or not isinstance(jid, int) or not 0 < jid < 10 ** 12:
        raise SlurmParseError(f"sacct JSON job record with job_id "
                              f"{printable(j.get('job_id'), 40)!s}: not a job id")
    job_id = str(jid)
    probs: list[str] = []
    try:
        t = j.get("time")
        if not isinstance(t, Mapping):
            raise SlurmParseError("no 'time' object")
        sub = _epoch(t.get("submission"), "submission time")
        st = _epoch(t.get("start"), "start time")
        en = _epoch(t.get("end"), "end time")
        tres = j.get("tres")
        gpus = _gpus_from_tres_list(tres.get("allocated") if isinstance(tres, Mapping) else None)
        user = j.get("user")
        if not user and isinstance(j.get("association"), Mapping):
            user = j["association"].get("user")
        com = j.get("comment")
        com = com if isinstance(com, Mapping) else {}
        return _finished(job_id, _text(j.get("name"), "name", probs),
                         _text(user, "user", probs), _state(j.get("state")), sub, st, en, gpus,
                         _text(com.get("job"), "comment", probs).strip(),
                         _text(com.get("administrator"), "admin_comment", probs).strip(), probs)
    except SlurmParseError as e:
        raise SlurmParseError(f"sacct job {job_id} skipped: {e}") from None
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as e:
        raise SlurmParseError(f"sacct job {job_id} skipped: {e!r}") from None


def finished_from_sacct_json(doc: Any, warnings: Optional[list[str]] = None
                             ) -> list[SlurmFinishedJob]:
    """The ended jobs of a ``sacct --json`` document; a record that cannot be read is left
    out with a message in ``warnings`` (one bad job never hides the others)."""
    if not isinstance(doc, Mapping) or not isinstance(doc.get("jobs"), (list, tuple)):
        raise SlurmParseError("sacct JSON has no 'jobs' list")
    out = []
    for k, j in enumerate(doc["jobs"]):
        try:
            if isinstance(j, Mapping) and isinstance(j.get("time"), Mapping) and \
                    not num(j["time"].get("end")):
                continue  # still running / never started: not history
            out.append(job_from_sacct_json(j))
        except SlurmParseError as e:
            if warnings is not None:
                warnings.append(str(e) if "record is a" not in str(e) else f"{e} (record #{k})")
    return out


# ------------------------------------------------------------------ sacct -P
def _local(text: str, what: str) -> float:
    """``2026-11-23T00:51:07`` (sacct's default time format, local time) -> epoch."""
    try:
        return _epoch(time.mktime(time.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S")), what)
    except (ValueError, OverflowError):
        raise SlurmParseError(f"{what} {printable(text, 40)!r} is not a time") from None


def _lines(text: str) -> Iterable[str]:
    for line in (text or "").splitlines():
        if line.strip():
            yield line


def finished_from_sacct_parsable(safe: str, names: str, warnings: Optional[list[str]] = None
                                 ) -> list[SlurmFinishedJob]:
    """The ended jobs of the fallback's two ``sacct -P`` reads (module docstring): ``safe``
    with :data:`SAFE_FIELDS`, ``names`` with :data:`NAME_FIELDS` (headers optional)."""
    warn = warnings if warnings is not None else []
    rows: dict[str, list[str]] = {}
    order: list[str] = []
    for line in _lines(safe):
        bits = line.split("|")
        if bits[:len(SAFE_FIELDS)] == list(SAFE_FIELDS):
            continue  # header
        if len(bits) != len(SAFE_FIELDS) or not _JOBID.match(bits[0]):
            warn.append(f"sacct -P line {printable(line, 120)!r} skipped: not "
                        f"'{'|'.join(SAFE_FIELDS)}'")
            continue
        if bits[0] in rows:
            warn.append(f"sacct job {bits[0]} listed twice; skipped")
            rows[bits[0]] = []
            continue
        rows[bits[0]] = bits
        order.append(bits[0])
    name_of: dict[str, list[str]] = {}
    last: Optional[str] = None
    for line in (names or "").splitlines():
        jid, sep, rest = line.partition("|")
        if line.startswith("JobID|JobName") and last is None and not name_of:
            continue  # header
        if sep and _JOBID.match(jid):
            name_of.setdefault(jid, []).append(rest)
            last = jid
        elif last is not None:  # a newline inside the name before
            name_of[last][-1] += "\n" + line
    out = []
    for jid in order:
        bits = rows[jid]
        if not bits:
            continue
        probs: list[str] = []
        try:
            got = name_of.get(jid, [""])
            if len(got) > 1:
                raise SlurmParseError("its job name is ambiguous in sacct -P output (a job name "
                                      "with a newline forged a line)")
            _, user, sub, st, en, state, tres, admin = bits
            if en.strip() in ("Unknown", "None", "") or st.strip() in ("Unknown", "None", ""):
                continue  # not ended / never started
            out.append(_finished(
                jid, _text(got[0], "name", probs), _text(user, "user", probs),
                _state(state), _local(sub, "submit time"), _local(st, "start time"),
                _local(en, "end time"), gpus_from_tres(tres), "",
                _text(admin, "admin_comment", probs).strip(), probs))
        except SlurmParseError as e:
            warn.append(f"sacct job {jid} skipped: {e}")
    return out
