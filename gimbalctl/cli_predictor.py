"""``gimbalctl predictor fit|eval``: seed 003's job-length predictor on a site's sacct history
(a file with ``--sacct FILE``, or read through the Slurm backend with ``--slurm``)."""
from __future__ import annotations

import json
from pathlib import Path

import click

from .trace_kinds import TraceError  # not .traces: the CLI starts without pandas


def _history(sacct, slurm: bool = False, days: float = 30.0, config=None):
    """History from a sacct file, or (``slurm``) from sacct through the Slurm backend, as
    the daemon reads it (``[predictor] history = "slurm"``; gimbalctl/site_history.py)."""
    if slurm == (sacct is not None):
        raise click.UsageError("give exactly one of --sacct FILE and --slurm")
    if slurm:
        import time

        from .config import ConfigError, load
        from .site_history import history_from_slurm
        from .slurm import SlurmError, get_backend
        try:
            cfg = load(config)
            be = get_backend(cfg.backend, timeout=cfg.timeout, prefix=cfg.command_prefix,
                             partition=cfg.partition)
            recs = be.finished_jobs(time.time() - days * 86400.0, None, cfg.predictor_max_rows,
                                    cfg.predictor_timeout)
        except (ConfigError, SlurmError) as e:
            raise click.ClickException(f"--slurm: {e}") from None
        for w in be.history_warnings:
            click.echo(f"warning: {w}", err=True)
        hist = history_from_slurm(recs)
        if not hist:
            raise click.ClickException(f"--slurm: sacct lists no completed GPU job in the last "
                                       f"{days:g} days")
        return hist
    from .predictor import history_from_sacct

    try:
        return history_from_sacct(sacct)
    except TraceError as e:
        raise click.ClickException(str(e)) from None


def _source(f):
    f = click.option("--config", "config", type=click.Path(dir_okay=False), default=None,
                     help="gimbal config for --slurm (backend, timeout, history_max_rows)")(f)
    f = click.option("--days", type=click.FloatRange(min=0, min_open=True), default=30.0,
                     show_default=True, help="with --slurm: how far back sacct reads")(f)
    f = click.option("--slurm", is_flag=True,
                     help="read the history from sacct through the Slurm backend (slurmdbd)")(f)
    return f


def register(main: click.Group) -> None:
    @main.group("predictor")
    def predictor() -> None:
        """Job-length predictor of A-SRPT (seed 003 §IV-C): random forest on group and user."""

    @predictor.command("fit")
    @_source
    @click.option("--sacct", type=click.Path(path_type=Path), default=None,
                  help="sacct -a -X -P --format=JobID,JobName,User,Submit,Start,End,AllocTRES,"
                       "Comment,AdminComment output")
    @click.option("--kind", type=click.Choice(["rf", "mean", "median"]), default="rf")
    @click.option("--seed", type=int, default=0, show_default=True)
    @click.option("--out", type=click.Path(path_type=Path), required=True,
                  help="pickle of the fitted predictor")
    def fit(sacct, slurm, days, config, kind: str, seed: int, out: Path) -> None:
        """Fit on the whole history and save the predictor."""
        import pickle  # here: ``gimbalctl simulate`` loads this module, not pickle

        from .predictor import FITTERS

        hist = _history(sacct, slurm, days, config)
        pred = FITTERS[kind](hist, seed=seed)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(pickle.dumps(pred))
        groups = len({k[0] for k in pred.table})
        click.echo(f"fitted {kind} on {len(hist)} jobs ({groups} groups, target {pred.unit}) "
                   f"-> {out}")

    @predictor.command("eval")
    @_source
    @click.option("--sacct", type=click.Path(path_type=Path), default=None)
    @click.option("--train-frac", type=click.FloatRange(0.05, 0.95), default=0.8, show_default=True)
    @click.option("--seed", type=int, default=0, show_default=True)
    @click.option("--out", type=click.Path(path_type=Path), default=None,
                  help="directory for error_cdf.png (Fig. 4) and errors.csv")
    @click.option("--json", "as_json", is_flag=True)
    def evaluate_cmd(sacct, slurm, days, config, train_frac: float, seed: int, out,
                     as_json: bool) -> None:
        """Train on the first jobs, report the error on the rest (RF, group mean, median)."""
        import pandas as pd

        from .predictor import evaluate, plot_error_cdf

        hist = _history(sacct, slurm, days, config)
        try:
            res = evaluate(hist, train_frac, seed)
        except ValueError as e:
            raise click.ClickException(f"{sacct or 'sacct (--slurm)'}: {e}") from None
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
