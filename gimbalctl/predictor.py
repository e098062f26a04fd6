"""Job-length predictors of seed 003 §IV-C 3): fitted here, carried by the snapshot.

* :class:`TablePredictor` — the fitted object a policy sees as
  ``snapshot.predictors["iterations"]``: a pure ``predict(job) -> float`` (and
  ``source(job) -> str``) answered from a table computed at fit time, so a policy call costs a
  dict lookup per job.
* :func:`fit_rf` — the paper's model: scikit-learn ``RandomForestRegressor`` with 100 trees and
  mean-squared-error splits on two features, the recurrence key (``group id``) and the user,
  both ordinally encoded in order of first appearance.  **A job of a group never seen predicts
  0** (§IV-C 3: "We predict 0 iterations for unseen jobs, treating them as immediately complete
  in Ã1"); a seen group with an unseen user is predicted with the user code -1.
* :func:`fit_group_stat` — the mean- and median-of-group baselines of Fig. 9 (0 for unseen).
* :class:`PerfectPredictor` — the true length (A-SRPT-Perfect's knowledge as a predictor).

The target is the job's iteration count when every history record has one (simulation,
gimbal's own launcher reports), else its run time in seconds (``sacct`` history); the
predictor's ``unit`` says which, and A-SRPT converts (``ñ·α̂^min`` or seconds directly).

Group key (:func:`group_of`): the record's own ``group_id`` when the trace has one, else
``hash(user, job name or else application, GPUs, global batch)`` — :mod:`gimbalctl.traces`
says which fields each loader has.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional, Sequence


from policies.model import FinishedJob

from .groups import group_key  # the trace readers use it without importing this module




def group_of(job) -> str:
    """A job's (or history record's) recurrence key."""
    gid = getattr(job, "group_id", None)
    if gid:
        return str(gid)
    return group_key(getattr(job, "user", ""), getattr(job, "name", "") or getattr(job, "app", ""),
                     getattr(job, "num_gpus", 0), getattr(job, "global_batch", None))


def target_unit(history: Sequence[FinishedJob]) -> str:
    return "iterations" if history and all(f.iterations is not None for f in history) else "seconds"


def target_of(f: FinishedJob, unit: str) -> float:
    return float(f.iterations) if unit == "iterations" else float(f.duration)


@dataclass(frozen=True)
class TablePredictor:
    """Answers from ``table[(group, user)]``, then ``table[(group, None)]``, else (a group
    never seen) 0 — the paper's rule — or, with ``unseen="fallback"``, ``None``: the policy
    then uses the job's time limit (:func:`policies.asrpt_core.prediction`).  The daemon
    uses the fallback: a job name is the user's choice, and predicting 0 for a name never
    seen would let any user jump the queue by renaming a job (docs/security.md)."""

    kind: str
    unit: str
    table: Mapping[tuple, float]
    unseen: str = "zero"  # zero | fallback

    def predict(self, job) -> Optional[float]:
        g = group_of(job)
        v = self.table.get((g, getattr(job, "user", None)))
        if v is None:
            v = self.table.get((g, None))
        if v is None:
            return None if self.unseen == "fallback" else 0.0
        return v

    def source(self, job) -> str:
        return self.kind if (group_of(job), None) in self.table else "unseen-group"


@dataclass(frozen=True)
class PerfectPredictor:
    """The true length (``Job.total_iters``); 0 when the job does not carry it."""

    kind: str = "perfect"
    unit: str = "iterations"

    def predict(self, job) -> float:
        v = getattr(job, "total_iters", None)
        if v is None:
            v = getattr(job, "iterations", None)
        return 0.0 if v is None else float(v)

    def source(self, job) -> str:
        return self.kind


def _encode(values: Iterable) -> dict:
    out: dict = {}
    for v in values:
        if v not in out:
            out[v] = len(out)
    return out


def fit_rf(history: Sequence[FinishedJob], seed: int = 0, n_estimators: int = 100,
           unit: Optional[str] = None, n_jobs: int = 1) -> TablePredictor:
    """The paper's random forest (100 trees, MSE splits; features group id and user)."""
    import numpy as np  # lazily: the snapshot builder imports this module

    from sklearn.ensemble import RandomForestRegressor

    unit = unit or target_unit(history)
    rows = [f for f in history if unit == "seconds" or f.iterations is not None]
    if not rows:
        return TablePredictor("rf", unit, {})
    groups = [group_of(f) for f in rows]
    users = [f.user for f in rows]
    gcode, ucode = _encode(groups), _encode(users)
    X = np.array([[gcode[g], ucode[u]] for g, u in zip(groups, users)], dtype=float)
    y = np.array([target_of(f, unit) for f in rows])
    rf = RandomForestRegressor(n_estimators=n_estimators, criterion="squared_error",
                               random_state=seed, n_jobs=n_jobs)
    rf.fit(X, y)
    keys = list(dict.fromkeys(zip(groups, users))) + [(g, None) for g in gcode]
    Q = np.array([[gcode[g], ucode[u] if u is not None else -1] for g, u in keys], dtype=float)
    pred = np.maximum(rf.predict(Q), 0.0)
    return TablePredictor("rf", unit, dict(zip(keys, map(float, pred))))


def fit_group_stat(history: Sequence[FinishedJob], stat: str = "mean",
                   unit: Optional[str] = None) -> TablePredictor:
    """Mean- or median-of-group baseline (Fig. 9), 0 for unseen groups."""
    import numpy as np  # lazily: the snapshot builder imports this module

    if stat not in ("mean", "median"):
        raise ValueError(f"stat must be mean or median, not {stat!r}")
    unit = unit or target_unit(history)
    by: dict[str, list[float]] = {}
    for f in history:
        if unit == "seconds" or f.iterations is not None:
            by.setdefault(group_of(f), []).append(target_of(f, unit))
    fn = np.mean if stat == "mean" else np.median
    return TablePredictor(stat, unit, {(g, None): float(fn(v)) for g, v in by.items()})


FITTERS = {"rf": fit_rf, "mean": lambda h, seed=0, unit=None: fit_group_stat(h, "mean", unit),
           "median": lambda h, seed=0, unit=None: fit_group_stat(h, "median", unit)}


class GroupStatRefit:
    """:func:`fit_group_stat` over a history that only grows (the simulator's append-only
    ``snapshot.history`` view, :meth:`policies.model.Frozen.extends`), brought up to date
    from the records added since the last call: the groups' target lists are extended and
    only the groups that got a record are summarised again (the same ``np.mean`` /
    ``np.median`` of the same list, so the same table).  Any other history — not a view of
    the same list, shorter, or one whose unit turns from iterations to seconds — is fitted
    from scratch.  A refit over the whole Philly trace made 2,279 passes over a history of
    up to 82k records (124 of 167 CPU-s of an SPJF run at 64x8, docs/scale.md §2)."""

    def __init__(self, stat: str = "mean"):
        if stat not in ("mean", "median"):
            raise ValueError(f"stat must be mean or median, not {stat!r}")
        self.stat = stat
        self.seen = None  # the history view fitted last
        self.unit: Optional[str] = None
        self.by: dict[str, list[float]] = {}
        self.table: dict[tuple, float] = {}

    def __call__(self, history: Sequence[FinishedJob]) -> TablePredictor:
        import numpy as np  # lazily: the snapshot builder imports this module

        from policies.model import Frozen

        new: Sequence[FinishedJob] = history
        if (self.seen is not None and len(self.seen) and isinstance(history, Frozen)
                and history.extends(self.seen)):  # (an empty one has unit seconds)
            new = history[len(self.seen):]
            unit = self.unit if self.unit == "seconds" or all(
                f.iterations is not None for f in new) else "seconds"
            if unit != self.unit:  # every target changes: fit from scratch
                new, self.by, self.table = history, {}, {}
        else:
            unit, self.by, self.table = target_unit(history), {}, {}
        by, touched = self.by, {}  # in order of first appearance, as fit_group_stat's table
        for f in new:
            if unit == "seconds" or f.iterations is not None:
                g = group_of(f)
                by.setdefault(g, []).append(target_of(f, unit))
                touched[g] = None
        fn = np.mean if self.stat == "mean" else np.median
        for g in touched:
            self.table[(g, None)] = float(fn(by[g]))
        self.seen = history if isinstance(history, Frozen) else None
        self.unit = unit
        return TablePredictor(self.stat, unit, dict(self.table))


def refitter(kind: str = "rf", seed: int = 0, min_rows: int = 1):
    """A simulator ``refit`` callable: fits ``kind`` on the jobs finished so far (§IV-C 3's
    periodic retraining); ``kind="perfect"`` returns the perfect predictor.  ``mean`` and
    ``median`` refit incrementally (:class:`GroupStatRefit`, the same tables)."""
    if kind == "perfect":
        return lambda history, now: {"iterations": PerfectPredictor()}
    if kind not in FITTERS:
        raise ValueError(f"unknown predictor {kind!r}; valid: rf, mean, median, perfect")
    fit = FITTERS[kind]
    if kind in ("mean", "median"):
        inc = GroupStatRefit(kind)
        fit = lambda history, seed=0: inc(history)  # noqa: E731

    def refit(history, now):
        if len(history) < min_rows:
            return {"iterations": TablePredictor(kind, target_unit(history), {})}
        return {"iterations": fit(history, seed=seed)}
    return refit


# ------------------------------------------------------------------ evaluation
def evaluate(history: Sequence[FinishedJob], train_frac: float = 0.8, seed: int = 0,
             kinds: Sequence[str] = ("rf", "mean", "median")) -> dict:
    """Chronological split (§V-A 1-c: the first 80 % of jobs train, the rest test); per
    model the absolute errors ``|n - ñ|`` (eq. 9) of the test jobs."""
    import numpy as np  # lazily: the snapshot builder imports this module

    hist = sorted(history, key=lambda f: (f.submit_time, f.id))
    if len(hist) < 2:
        raise ValueError("need at least two finished jobs to evaluate a predictor")
    cut = min(max(1, int(math.floor(len(hist) * train_frac))), len(hist) - 1)
    train, test = hist[:cut], hist[cut:]
    unit = target_unit(hist)
    truth = np.array([target_of(f, unit) for f in test])
    out = {"unit": unit, "train": len(train), "test": len(test), "errors": {}, "summary": {}}
    for k in kinds:
        p = FITTERS[k](train, seed=seed, unit=unit)
        pred = np.array([p.predict(f) for f in test])
        err = np.abs(truth - pred)
        out["errors"][k] = err
        rel = err / np.maximum(truth, 1e-9)
        out["summary"][k] = {"mean_abs_error": float(err.mean()),
                             "median_abs_error": float(np.median(err)),
                             "within_10pct": float((rel <= 0.10).mean()),
                             "unseen_group": float(np.mean([p.source(f) == "unseen-group"
                                                            for f in test]))}
    return out


def plot_error_cdf(result: dict, path) -> None:
    """Fig. 4 analogue: CDF of the absolute prediction error per model."""
    import numpy as np  # lazily: the snapshot builder imports this module

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for k, err in result["errors"].items():
        xs = np.sort(err)
        ax.step(xs, np.arange(1, len(xs) + 1) / len(xs), where="post", label=k)
    ax.set_xscale("symlog")
    ax.set_xlabel(f"absolute prediction error ({result['unit']})")
    ax.set_ylabel("fraction of jobs")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ------------------------------------------------------------------ sacct history
def history_from_sacct(path) -> list[FinishedJob]:
    """Finished GPU jobs of ``sacct -a -X -P --format=JobID,JobName,User,Submit,Start,End,
    AllocTRES,Comment,AdminComment`` (``JobName`` optional) as history records.  Group key:
    user + job name (else gimbal's ``app``) + GPUs + gimbal ``batch``; target: run time."""
    import pandas as pd

    from .slurm.meta import parse_meta
    from .traces import _GPU_TRES, TraceError

    try:
        df = pd.read_csv(path, sep="|", dtype=str, keep_default_na=False, index_col=False,
                         encoding_errors="replace")  # a job name in another encoding: kept
    except FileNotFoundError:
        raise TraceError(path, None, None, "file not found") from None
    except OSError as e:
        raise TraceError(path, None, None, f"cannot read ({e.strerror or e})") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise TraceError(path, None, None, f"not readable sacct output ({e})") from None
    for col in ("JobID", "Submit", "Start", "End"):
        if col not in df:
            raise TraceError(path, 1, col, "missing column for sacct history")
    tres = "AllocTRES" if "AllocTRES" in df else ("ReqTRES" if "ReqTRES" in df else None)
    if tres is None:
        raise TraceError(path, 1, "AllocTRES", "sacct history needs AllocTRES or ReqTRES")
    ts = {c: pd.to_datetime(df[c], errors="coerce", format="%Y-%m-%dT%H:%M:%S")
          for c in ("Submit", "Start", "End")}
    out = []
    for i in range(len(df)):
        jid = str(df.JobID.iloc[i]).strip()
        if not jid or "." in jid:
            continue
        m = _GPU_TRES.search(str(df[tres].iloc[i]))
        gpus = int(m.group(1)) if m else 0
        sub, st, en = ts["Submit"].iloc[i], ts["Start"].iloc[i], ts["End"].iloc[i]
        if gpus <= 0 or pd.isna(sub) or pd.isna(st) or pd.isna(en) or en < st:
            continue
        # AdminComment first; a finished job's user Comment only as a grouping hint for the
        # history (lengths come from Start/End, which Slurm recorded)
        meta = parse_meta(str(df.AdminComment.iloc[i]) if "AdminComment" in df else "")
        if not meta.tagged and "Comment" in df and str(df.Comment.iloc[i]).startswith("gimbal:"):
            meta = parse_meta(str(df.Comment.iloc[i]))
        user = str(df.User.iloc[i]) if "User" in df else ""
        name = str(df.JobName.iloc[i]) if "JobName" in df else ""
        app = meta.app or ""
        out.append(FinishedJob(jid, user, sub.timestamp(), st.timestamp(), en.timestamp(), gpus,
                               app, name, group_key(user, name or app, gpus, meta.batch),
                               None, meta.batch))
    if not out:
        raise TraceError(path, None, None, "no finished GPU jobs in the sacct output")
    return out
