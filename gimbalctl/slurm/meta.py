"""gimbal job metadata, read only from the job's ``AdminComment``.

``slurm_hooks/job_submit.lua`` validates what a user passes with ``--comment
gimbal:app=bert,batch=64,...`` (or ``gsbatch``) at submission and writes the normalized,
versioned tag into ``AdminComment``, which users cannot set::

    gimbal:v1;app=bert;batch=64;iters=1000;est=3600;share=yes;gate=1;gpus=2;stages=2

This is the only place gimbal reads metadata from.  The user's own ``Comment`` is free
text the user controls (and can change after submission, even when Slurm answers
"Access/permission denied" to the accompanying AdminComment change), so it is never read:
a ``gimbal:`` tag there that job_submit.lua did not copy counts for nothing.  An admin may
also write the tag (``scontrol update jobid=N admincomment=gimbal:v1;...``) or the
unversioned ``gimbal:k=v,k=v`` form by hand.

``stages`` (1..64) is the pipeline stage count of a seed 003 Table I model (A-SRPT).

``gpus`` (1..1024) is the GPU count of a job submitted without GRES (``gsbatch --gate
--gpus N``); a job's own GRES request, when it has one, wins (see ``SlurmJob.num_gpus``).

``batchrange=MIN:MAX`` (``gsbatch --allow-batch-change``) is the job's permission for the
scheduler to change its global batch within MIN..MAX (``batch_range``; ``None``: never
changed).  It counts only together with a ``batch`` inside the range (job_submit.lua
accepts nothing else); otherwise it is dropped with a warning.

An AdminComment that holds something else (a jobstats ``JS1:`` summary written by
``EpilogSlurmctld``, a site's own notes) is not gimbal's: it is ignored without a
warning (the daemon keeps the metadata it read earlier in its state store).  Text after
the tag (``;jsl:submitted`` appended by a site's lua, for example) is ignored.  Values
that cannot be parsed are dropped and reported in ``warnings``; the snapshot builder then
uses defaults.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

KNOWN = ("app", "batch", "iters", "est", "share", "gate", "gpus", "deadline", "stages",
         "batch_range")
MAX_STAGES = 64  # upper bound of ``stages`` (as in job_submit.lua)
MAX_BATCH = 1048576  # upper bound of a batchrange (as in job_submit.lua and gsbatch)
MAX_LEN = 1024  # longest AdminComment read as metadata (job_submit.lua writes <= 600)
MAX_GPUS = 1024  # upper bound of ``gpus`` (as in job_submit.lua and gsbatch)
_TRUE = ("1", "yes", "true", "on", "y")
_FALSE = ("0", "no", "false", "off", "n")
_TAG = re.compile(r"gimbal:(?:v(\d+))?")


@dataclass(frozen=True)
class GimbalMeta:
    app: Optional[str] = None
    batch: Optional[int] = None
    iters: Optional[float] = None
    est: Optional[float] = None  # expected duration, seconds
    share: Optional[bool] = None
    gate: bool = False
    gpus: Optional[int] = None  # GPUs wanted (gate jobs are submitted without GRES)
    deadline: Optional[float] = None  # epoch seconds
    stages: Optional[int] = None  # pipeline stages of a seed 003 Table I model (1..64)
    # gsbatch --allow-batch-change: the (min, max) global batch the scheduler may choose
    batch_range: Optional[tuple[int, int]] = None
    source: Optional[str] = None  # "admin_comment" | "state" (kept from an earlier cycle) | None
    warnings: tuple[str, ...] = ()

    @property
    def tagged(self) -> bool:
        return self.source is not None

    @classmethod
    def from_state(cls, d: Optional[dict]) -> "GimbalMeta":
        """The metadata gimbal kept in its state store (:meth:`as_dict`), source ``state``."""
        if not isinstance(d, dict) or not d.get("source"):
            return cls()
        keep = {k: d.get(k) for k in KNOWN}
        keep["gate"] = bool(keep.get("gate"))
        keep["batch_range"] = _range_from_state(keep.get("batch_range"), keep.get("batch"))
        return cls(**keep, source="state")

    def as_dict(self) -> dict:
        return {"app": self.app, "batch": self.batch, "iters": self.iters, "est": self.est,
                "share": self.share, "gate": self.gate, "gpus": self.gpus,
                "deadline": self.deadline, "stages": self.stages,
                "batch_range": list(self.batch_range) if self.batch_range else None,
                "source": self.source, "warnings": list(self.warnings)}


def _range_from_state(v, batch) -> Optional[tuple[int, int]]:
    """A stored ``batch_range`` back as a tuple (None unless it is a valid range of ``batch``)."""
    try:
        lo, hi = (int(x) for x in v)
    except (TypeError, ValueError):
        return None
    ok = isinstance(batch, int) and 1 <= lo <= batch <= hi <= MAX_BATCH
    return (lo, hi) if ok else None


def parse_range(v: str) -> tuple[int, int]:
    """``MIN:MAX`` -> (min, max), 1 <= min <= max <= MAX_BATCH; ValueError otherwise."""
    m = re.fullmatch(r"([0-9]{1,7}):([0-9]{1,7})", v)
    if not m:
        raise ValueError("not MIN:MAX")
    lo, hi = int(m.group(1)), int(m.group(2))
    if not 1 <= lo <= hi <= MAX_BATCH:
        raise ValueError(f"needs 1 <= MIN <= MAX <= {MAX_BATCH}")
    return lo, hi


def _extract(text: str) -> Optional[list[tuple[str, str]]]:
    """Key/value pairs following a ``gimbal:`` tag, or None without a tag."""
    if not text:
        return None
    m = _TAG.search(text)
    if not m:
        return None
    rest = text[m.end():]
    if m.group(1):  # admin form: gimbal:v1;k=v;k=v
        parts = [p for p in rest.split(";") if p.strip()]
    else:  # comment form: gimbal:k=v,k=v[;other tag]
        parts = [p for p in rest.split(";", 1)[0].split(",") if p.strip()]
    pairs = []
    for p in parts:
        if "=" not in p:
            if ":" in p:  # the next foreign tag (e.g. jsl:submitted)
                break
            pairs.append((p.strip(), ""))
            continue
        k, v = p.split("=", 1)
        pairs.append((k.strip().lower(), v.strip()))
    return pairs


def parse_meta(admin_comment: str = "") -> GimbalMeta:
    """Parse gimbal metadata from a job's AdminComment (never from its user Comment)."""
    for source, text in (("admin_comment", admin_comment),):
        if not isinstance(text, str) or len(text) > MAX_LEN:
            continue  # not something job_submit.lua wrote (its tag is at most 512 characters)
        pairs = _extract(text or "")
        if pairs is None:
            continue
        vals: dict = {}
        warns: list[str] = []
        for k, v in pairs:
            try:
                if k == "app":
                    if not re.fullmatch(r"[A-Za-z0-9_.-]+", v):
                        raise ValueError("not a name")
                    vals["app"] = v
                elif k in ("batch", "gpus", "stages"):
                    b = int(v)
                    if b < 1:
                        raise ValueError("must be >= 1")
                    if k == "gpus" and b > MAX_GPUS:
                        raise ValueError(f"must be <= {MAX_GPUS}")
                    if k == "stages" and b > MAX_STAGES:
                        raise ValueError(f"must be <= {MAX_STAGES}")
                    vals[k] = b
                elif k in ("iters", "est", "deadline"):
                    x = float(v)
                    if not x > 0 or x == float("inf"):
                        raise ValueError("must be > 0")
                    vals[k] = x
                elif k == "batchrange":
                    vals["batch_range"] = parse_range(v)
                elif k in ("share", "gate"):
                    if v.lower() in _TRUE:
                        vals[k] = True
                    elif v.lower() in _FALSE:
                        vals[k] = False
                    else:
                        raise ValueError("must be yes/no")
                else:
                    warns.append(f"{source}: unknown gimbal key {k[:40]!r} ignored")
            except (ValueError, OverflowError) as e:
                warns.append(f"{source}: bad value {k[:40]}={v[:40]!r} ({e}); using the default")
        rng = vals.get("batch_range")
        if rng is not None and not (vals.get("batch") and rng[0] <= vals["batch"] <= rng[1]):
            warns.append(f"{source}: batchrange {rng[0]}:{rng[1]} without a batch inside it "
                         f"(batch={vals.get('batch')}); the batch is not changed")
            rng = None
        return GimbalMeta(app=vals.get("app"), batch=vals.get("batch"), iters=vals.get("iters"),
                          est=vals.get("est"), share=vals.get("share"),
                          gate=bool(vals.get("gate", False)), gpus=vals.get("gpus"),
                          deadline=vals.get("deadline"), stages=vals.get("stages"),
                          batch_range=rng,
                          source=source,
                          warnings=tuple(warns))
    return GimbalMeta()
