"""gsbatch: sbatch with gimbal metadata.

    gsbatch [gimbal options] [sbatch options] script.sh [script args]

gimbal options (they must come first; the first other argument ends them):

  --app NAME          application/model name, [a-z0-9_-]{1,32} (required with any other option)
  --batch N           global batch size
  --iters N           iterations to run
  --est DURATION      estimated run time: seconds, 90s/45m/2h/1d, MM:SS, H:MM:SS or D-H:MM:SS
  --share/--no-share  the job may / may not run on a shared GPU (shard, mps)
  --deadline WHEN     Unix seconds or an ISO 8601 time (no zone = local time)
  --gate              gate mode: submit held (sbatch --hold); gimbal's daemon releases it
  --gpus N            GPUs the job needs (1..1024), written only into the comment: a gate job
                      stays without GRES until the daemon sets gpu:N (or shards) at its start.
                      Not combinable with sbatch's own --gres/--gpus/-G (one GPU count only)
  --allow-batch-change[=MIN:MAX]
                      the scheduler may change the job's global batch (seed 002 Alg. 2/3),
                      within MIN..MAX (default: batch/4 .. batch*4); needs --batch. Without
                      this option gimbal never changes the batch (gimbal-run refuses it)
  --dry-run           print the sbatch command instead of running it
  --sbatch PATH       sbatch to run (default: $GSBATCH_SBATCH or "sbatch" on PATH)

The metadata goes into ``--comment gimbal:app=...,batch=...`` (the format job_submit.lua
validates, see docs/slurm.md); everything else is passed to sbatch unchanged, as an argument
list (no shell). Python standard library only.
"""
from __future__ import annotations

import datetime as _dt
import os
import re
import shlex
import sys
from typing import Dict, List, Optional, Sequence, Tuple

ORDER = ("app", "batch", "iters", "est", "share", "deadline", "gate", "gpus", "batchrange")
MAX_GPUS = 1024
MAX_BATCH = 1048576  # as job_submit.lua
BATCH_FACTOR = 4     # --allow-batch-change without a range: batch/4 .. batch*4 (gimbal's choice)
_RANGE = re.compile(r"([0-9]{1,7}):([0-9]{1,7})")
_APP = re.compile(r"[a-z0-9_-]{1,32}")
_VALUE_OPTS = {"--app": "app", "--batch": "batch", "--iters": "iters", "--est": "est",
               "--deadline": "deadline", "--gpus": "gpus", "--sbatch": "sbatch"}
_FLAG_OPTS = {"--share", "--no-share", "--gate", "--dry-run"}
# gimbal options that sbatch does not have: seen after the gimbal block, they are a mistake
# (--gpus is not here: after the gimbal block it is sbatch's own --gpus)
_MISPLACED = {"--app", "--iters", "--est", "--share", "--no-share", "--deadline", "--gate",
              "--allow-batch-change"}
USAGE = "usage: gsbatch [--app NAME] [--batch N] [--iters N] [--est DURATION] " \
        "[--share|--no-share] [--deadline WHEN] [--gate] [--gpus N] " \
        "[--allow-batch-change[=MIN:MAX]] [--dry-run] [sbatch args...]"


class UsageError(ValueError):
    pass


def _pos_int(name: str, raw: str) -> int:
    if not re.fullmatch(r"[0-9]{1,12}", raw) or int(raw) <= 0:
        raise UsageError(f"--{name} must be an integer > 0 (got {raw!r})")
    return int(raw)


def parse_duration(raw: str) -> int:
    """Seconds from '3600', '90s', '45m', '2h', '1d', 'MM:SS', 'H:MM:SS' or 'D-H:MM:SS'."""
    s = raw.strip().lower()
    m = re.fullmatch(r"(\d+)\s*([smhd]?)", s)
    if m:
        secs = int(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
    else:
        m = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d{1,2})", s)
        if not m:
            raise UsageError(f"--est: cannot read duration {raw!r} "
                             "(use seconds, 45m, 2h, 1d, MM:SS, H:MM:SS or D-H:MM:SS)")
        d, h, mi, se = (int(x) if x else 0 for x in m.groups())
        secs = ((d * 24 + h) * 60 + mi) * 60 + se
    if secs <= 0 or secs >= 10 ** 12:
        raise UsageError(f"--est must be > 0 seconds (got {raw!r})")
    return secs


def parse_deadline(raw: str) -> int:
    if re.fullmatch(r"[0-9]{1,12}", raw):
        return _pos_int("deadline", raw)
    try:
        when = _dt.datetime.fromisoformat(raw)
    except ValueError:
        raise UsageError(f"--deadline: {raw!r} is neither Unix seconds nor an ISO 8601 time") \
            from None
    ts = int(when.timestamp())      # naive = local time
    if ts <= 0:
        raise UsageError(f"--deadline must be after 1970 (got {raw!r})")
    return ts


def gimbal_comment(meta: Dict[str, object]) -> str:
    """{'app': 'bert', 'batch': 64, ...} -> 'gimbal:app=bert,batch=64,...' (fixed key order)."""
    return "gimbal:" + ",".join(f"{k}={meta[k]}" for k in ORDER if k in meta)


def parse_args(argv: Sequence[str]) -> Tuple[Dict[str, object], Dict[str, object], List[str]]:
    """-> (gimbal metadata, gsbatch settings, sbatch args)."""
    meta: Dict[str, object] = {}
    opts: Dict[str, object] = {"dry_run": False, "sbatch": None, "gate": False}
    args = list(argv)
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-h", "--help") and not meta and i == 0:
            raise UsageError(__doc__ or USAGE)
        name, eq, val = a.partition("=")
        if name in _VALUE_OPTS:
            if not eq:
                if i + 1 >= len(args):
                    raise UsageError(f"{name} needs a value")
                val = args[i + 1]
                i += 1
            key = _VALUE_OPTS[name]
            if key in meta or (key == "sbatch" and opts["sbatch"] is not None):
                raise UsageError(f"{name} given twice")
            if key == "app":
                if not _APP.fullmatch(val):
                    raise UsageError(f"--app must be 1-32 characters of a-z 0-9 _ - (got {val!r})")
                meta["app"] = val
            elif key in ("batch", "iters"):
                meta[key] = _pos_int(key, val)
            elif key == "gpus":
                n = _pos_int(key, val)
                if n > MAX_GPUS:
                    raise UsageError(f"--gpus must be an integer from 1 to {MAX_GPUS} (got {val!r})")
                meta["gpus"] = n
            elif key == "est":
                meta["est"] = parse_duration(val)
            elif key == "deadline":
                meta["deadline"] = parse_deadline(val)
            else:
                opts["sbatch"] = val
        elif name == "--allow-batch-change":
            if "batchrange" in meta:
                raise UsageError("--allow-batch-change given twice")
            if not eq and i + 1 < len(args) and _RANGE.fullmatch(args[i + 1]):
                val, eq = args[i + 1], "="
                i += 1
            meta["batchrange"] = parse_batch_range(val) if eq else True
        elif a in _FLAG_OPTS:
            if a in ("--share", "--no-share"):
                if "share" in meta:
                    raise UsageError("--share/--no-share given twice")
                meta["share"] = "yes" if a == "--share" else "no"
            elif a == "--gate":
                opts["gate"] = True
                meta["gate"] = 1
            else:
                opts["dry_run"] = True
        else:
            break
        i += 1
    rest = args[i:]
    for pos, a in enumerate(rest):
        # stop at "--", --wrap or what looks like the batch script: later words are its args
        if a == "--" or a.startswith("--wrap") or (not a.startswith("-") and (
                os.path.isfile(a) or a.endswith((".sh", ".bash", ".py", ".sbatch")))):
            break
        if a.partition("=")[0] in _MISPLACED:
            raise UsageError(f"{a.partition('=')[0]}: gimbal options must come before sbatch "
                             "options and the script")
        if a.partition("=")[0] == "--comment" and meta:
            raise UsageError("--comment cannot be combined with gimbal options (gsbatch "
                             "writes the comment)")
        if "gpus" in meta and _asks_gpus(a, rest[pos + 1] if pos + 1 < len(rest) else ""):
            raise UsageError(f"--gpus cannot be combined with sbatch's {a.partition('=')[0]} "
                             "(give the GPU count once: gsbatch --gpus N, or GRES for sbatch)")
    if meta and "app" not in meta:
        raise UsageError("--app is required with gimbal options")
    if "batchrange" in meta:
        meta["batchrange"] = _batch_range(meta)
    return meta, opts, rest


def parse_batch_range(raw: str) -> Tuple[int, int]:
    m = _RANGE.fullmatch(raw)
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)) <= MAX_BATCH:
        raise UsageError(f"--allow-batch-change: expected MIN:MAX with 1 <= MIN <= MAX <= "
                         f"{MAX_BATCH} (got {raw!r})")
    return int(m.group(1)), int(m.group(2))


def _batch_range(meta: Dict[str, object]) -> str:
    """The ``batchrange`` value: the given MIN:MAX, else batch/4 .. batch*4; the submitted
    batch must lie inside (job_submit.lua checks the same)."""
    b = meta.get("batch")
    if not isinstance(b, int):
        raise UsageError("--allow-batch-change needs --batch (the range is of that batch)")
    rng = meta["batchrange"]
    lo, hi = rng if isinstance(rng, tuple) else (max(1, b // BATCH_FACTOR),
                                                min(MAX_BATCH, b * BATCH_FACTOR))
    if not lo <= b <= hi:
        raise UsageError(f"--batch {b} is outside --allow-batch-change {lo}:{hi}")
    return f"{lo}:{hi}"


def _asks_gpus(arg: str, nxt: str) -> bool:
    """An sbatch argument that requests GPUs: ``--gpus[-per-*] N``, ``-G N``, or ``--gres``
    naming gpu/shard/mps (``nxt`` is the following argument, the value of ``--gres X``)."""
    name, eq, val = arg.partition("=")
    if name in ("--gpus", "--gpus-per-node", "--gpus-per-task", "--gpus-per-socket"):
        return True
    if arg.startswith("-G") and not arg.startswith("--"):
        return True
    if name == "--gres":
        return bool(re.search(r"(^|,)(gpu|shard|mps)\b", val if eq else nxt))
    return False


def slurm_time_limit(raw: str) -> Optional[int]:
    """Seconds of a Slurm ``--time`` value (``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``,
    ``D-H:M:S``); None for ``UNLIMITED``/``infinite`` or what sbatch would refuse anyway."""
    s = raw.strip().lower()
    if s in ("unlimited", "infinite", "-1"):
        return None
    m = re.fullmatch(r"(\d+)-(\d+)(?::(\d+))?(?::(\d+))?", s)
    if m:
        d, h, mi, se = (int(x) if x else 0 for x in m.groups())
        return ((d * 24 + h) * 60 + mi) * 60 + se
    parts = s.split(":")
    if not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        return None
    n = [int(p) for p in parts]
    if len(n) == 1:
        return n[0] * 60
    if len(n) == 2:
        return n[0] * 60 + n[1]
    return (n[0] * 60 + n[1]) * 60 + n[2]


def _time_arg(rest: Sequence[str]) -> Optional[str]:
    """The ``--time``/``-t`` value among the sbatch options (before the script), if any."""
    val = None
    for pos, a in enumerate(rest):
        if a == "--" or a.startswith("--wrap") or not a.startswith("-"):
            break
        nxt = rest[pos + 1] if pos + 1 < len(rest) else None
        if a.startswith("--time="):
            val = a.partition("=")[2]
        elif a in ("--time", "-t"):
            val = nxt
        elif a.startswith("-t") and not a.startswith("--"):
            val = a[2:]
    return val


def _fmt(secs: int) -> str:
    d, r = divmod(int(secs), 86400)
    h, r = divmod(r, 3600)
    return (f"{d}-" if d else "") + f"{h:02d}:{r // 60:02d}:{r % 60:02d}"


def check_warnings(meta: Dict[str, object], rest: Sequence[str],
                   now: Optional[float] = None) -> List[str]:
    """Plausibility warnings (the job is still submitted): a deadline already past, an
    estimate above the job's own time limit."""
    import time as _time
    now = _time.time() if now is None else now
    out = []
    dl = meta.get("deadline")
    if isinstance(dl, int) and dl <= now:
        out.append(f"--deadline {_dt.datetime.fromtimestamp(dl).isoformat(timespec='seconds')} "
                   f"is in the past ({_fmt(now - dl)} ago): the job cannot meet it")
    est = meta.get("est")
    raw = _time_arg(rest)
    limit = slurm_time_limit(raw) if raw is not None else None
    if isinstance(est, int) and limit is not None and est > limit:
        out.append(f"--est {_fmt(est)} is above the job's time limit --time={raw} "
                   f"({_fmt(limit)}): Slurm ends the job at its limit, and gimbal uses the "
                   f"smaller of the two")
    return out


def build_command(argv: Sequence[str], env: Optional[Dict[str, str]] = None,
                  warnings: Optional[List[str]] = None) -> Tuple[List[str], bool]:
    """-> (sbatch argv, dry_run); plausibility warnings are appended to ``warnings``."""
    env = os.environ if env is None else env
    meta, opts, rest = parse_args(argv)
    if warnings is not None:
        warnings.extend(check_warnings(meta, rest))
    sbatch = str(opts["sbatch"] or env.get("GSBATCH_SBATCH") or "sbatch")
    cmd = [sbatch]
    if opts["gate"]:
        cmd.append("--hold")
    if meta:
        cmd.append("--comment=" + gimbal_comment(meta))
    cmd += rest
    return cmd, bool(opts["dry_run"])


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    warns: List[str] = []
    try:
        cmd, dry = build_command(argv, warnings=warns)
    except UsageError as e:
        print(f"gsbatch: {e}" if not str(e).startswith("gsbatch:") and "\n" not in str(e)
              else str(e), file=sys.stderr)
        if "\n" not in str(e):
            print(USAGE, file=sys.stderr)
        return 2
    for w in warns:
        print(f"gsbatch: warning: {w}", file=sys.stderr)
    if dry:
        print(shlex.join(cmd))
        return 0
    sys.stdout.flush()
    try:
        os.execvp(cmd[0], cmd)      # an argument list: no shell ever sees user strings
    except OSError as e:
        print(f"gsbatch: cannot run {cmd[0]}: {e}", file=sys.stderr)
        return 127
    return 0  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
