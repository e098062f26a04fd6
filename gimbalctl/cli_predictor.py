"""``gimbalctl predictor fit|eval``: seed 003's job-length predictor on a site's sacct history."""
from __future__ import annotations

import json
import pickle
from pathlib import Path

import click

from .trace_kinds import TraceError  # not .traces: the CLI starts without pandas


def _history(sacct: Path):
    from .predictor import history_from_sacct

    try:
        return history_from_sacct(sacct)
    except TraceError as e:
        raise click.ClickException(str(e)) from None


def register(main: click.Group) -> None:
    @main.group("predictor")
    def predictor() -> None:
        """Job-length predictor of A-SRPT (seed 003 §IV-C): random forest on group and user."""

    @predictor.command("fit")
    @click.option("--sacct", type=click.Path(path_type=Path), required=True,
                  help="sacct -a -X -P --format=JobID,JobName,User,Submit,Start,End,AllocTRES,"
                       "Comment,AdminComment output")
    @click.option("--kind", type=click.Choice(["rf", "mean", "median"]), default="rf")
    @click.option("--seed", type=int, default=0, show_default=True)
    @click.option("--out", type=click.Path(path_type=Path), required=True,
                  help="pickle of the fitted predictor")
    def fit(sacct: Path, kind: str, seed: int, out: Path) -> None:
        """Fit on the whole history and save the predictor."""
        from .predictor import FITTERS

        hist = _history(sacct)
        pred = FITTERS[kind](hist, seed=seed)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(pickle.dumps(pred))
        groups = len({k[0] for k in pred.table})
        click.echo(f"fitted {kind} on {len(hist)} jobs ({groups} groups, target {pred.unit}) "
                   f"-> {out}")

    @predictor.command("eval")
    @click.option("--sacct", type=click.Path(path_type=Path), required=True)
    @click.option("--train-frac", type=click.FloatRange(0.05, 0.95), default=0.8, show_default=True)
    @click.option("--seed", type=int, default=0, show_default=True)
    @click.option("--out", type=click.Path(path_type=Path), default=None,
                  help="directory for error_cdf.png (Fig. 4) and errors.csv")
    @click.option("--json", "as_json", is_flag=True)
    def evaluate_cmd(sacct: Path, train_frac: float, seed: int, out, as_json: bool) -> None:
        """Train on the first jobs, report the error on the rest (RF, group mean, median)."""
        import pandas as pd

        from .predictor import evaluate, plot_error_cdf

        hist = _history(sacct)
        try:
            res = evaluate(hist, train_frac, seed)
        except ValueError as e:
            raise click.ClickException(f"{sacct}: {e}") from None
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            plot_error_cdf(res, out / "error_cdf.png")
            pd.DataFrame(res["errors"]).to_csv(out / "errors.csv", index=False)
        summary = {"unit": res["unit"], "train": res["train"], "test": res["test"],
                   "summary": res["summary"]}
        if as_json:
            click.echo(json.dumps(summary, indent=1))
            return
        click.echo(f"{res['train']} jobs train, {res['test']} test; error in {res['unit']}")
        for k, s in res["summary"].items():
            click.echo(f"  {k:7s} mean |n-ñ| {s['mean_abs_error']:.1f}  median "
                       f"{s['median_abs_error']:.1f}  within 10% {100 * s['within_10pct']:.0f}%  "
                       f"unseen groups {100 * s['unseen_group']:.0f}%")
