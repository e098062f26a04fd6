"""Untrusted text from Slurm, made safe to keep, print and store.

Everything Slurm reports about a job (name, comment, user, partition, paths, reasons) is
text a user chose, and Slurm passes it on byte for byte: a job name of ``a\\xff\\xfeb\\xc3``
comes back from ``squeue --json`` as invalid UTF-8, a ``--comment`` may hold newlines, a
name may be a megabyte long.  The CLI backend decodes Slurm's output with
``errors="replace"`` (so decoding never fails; bad bytes become U+FFFD); :func:`clean`
then turns any value into a bounded, printable, UTF-8-encodable string and says whether it
had to change it, so the caller can warn once, naming the job.
"""
from __future__ import annotations

import unicodedata
from typing import Any

# longest kept value per field (Slurm's own limits are larger or absent)
LIMITS = {"name": 256, "user": 128, "partition": 128, "reason": 256, "comment": 4096,
          "admin_comment": 4096, "node": 256}
DEFAULT_LIMIT = 1024


def decode(data: bytes) -> str:
    """Bytes from a Slurm command -> str; never raises (invalid UTF-8 becomes U+FFFD)."""
    return data.decode("utf-8", errors="replace")


def _bad(ch: str) -> bool:
    cat = unicodedata.category(ch)
    # C0/C1 controls, lone surrogates (from JSON "\ud800" escapes), private/unassigned stay
    # printable enough; U+FFFD marks bytes that were not UTF-8
    return cat in ("Cc", "Cs") or ch == "\ufffd"


def clean(value: Any, field: str = "", limit: int | None = None) -> tuple[str, list[str]]:
    """(safe text, problems): ``value`` as str with control characters, lone surrogates and
    undecodable bytes replaced by ``?``, cut to ``limit`` characters.  ``problems`` names
    what was wrong (empty when the value was already clean)."""
    if value is None:
        return "", []
    text = value if isinstance(value, str) else str(value)
    problems: list[str] = []
    lim = limit if limit is not None else LIMITS.get(field, DEFAULT_LIMIT)
    if len(text) > lim:
        problems.append(f"{field or 'value'} of {len(text)} characters cut to {lim}")
        text = text[:lim]
    if any(_bad(c) for c in text):
        n_bad = sum(1 for c in text if _bad(c))
        problems.append(f"{field or 'value'} has {n_bad} non-UTF-8 byte(s) or control "
                        f"character(s), shown as '?'")
        text = "".join("?" if _bad(c) else c for c in text)
    return text, problems


def printable(value: Any, limit: int = 200) -> str:
    """``value`` for a log line or error message: clean and short."""
    return clean(value, limit=limit)[0]
