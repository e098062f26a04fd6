"""Reports of simulation results: per-job CSV, timeline CSV, summary JSON and
matplotlib plots (JCT CDF, waiting-time CDF, queue length over time, and QL / CE / BI
over time per policy as seed 001's Fig. 2).

Two waiting times are reported everywhere: *queueing* (first start − submit) and
*total waiting* (JCT − run time: every second a job is not running, including the
time it waits again after each pre-emption)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np

from .sim.result import SimResult


def write_outputs(results: Sequence[SimResult], out: Path) -> list[Path]:
    """Write every result's files under ``out``; returns the paths written."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for r in results:
        p = out / f"jobs-{r.policy}.csv"
        r.jobs.to_csv(p, index=False)
        written.append(p)
        p = out / f"timeline-{r.policy}.csv"
        r.timeline.to_csv(p, index=False)
        written.append(p)
    p = out / "summary.json"
    p.write_text(json.dumps({r.policy: r.summary for r in results}, indent=1) + "\n")
    written.append(p)
    written += plot(results, out)
    return written


def plot(results: Sequence[SimResult], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    fig, ax = plt.subplots(figsize=(6, 4))
    for r in results:
        jct = np.sort(r.jobs.jct.to_numpy(float)) / 3600.0
        ax.plot(jct, np.arange(1, len(jct) + 1) / len(jct), label=r.policy)
    ax.set_xscale("log")
    ax.set_xlabel("JCT (hours, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title("JCT CDF")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    paths.append(out / "jct_cdf.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    for r in results:
        line = None
        for col, style, what in (("wait_total", "-", "total waiting"),
                                 ("queueing", ":", "first-start queueing")):
            w = np.sort(np.maximum(r.jobs[col].to_numpy(float), 0.0)) / 3600.0
            kw = {"color": line.get_color()} if line is not None else {}
            (ln,) = ax.plot(w, np.arange(1, len(w) + 1) / max(len(w), 1), style,
                            label=f"{r.policy}: {what}", **kw)
            line = line or ln
    ax.set_xscale("symlog", linthresh=0.01)
    ax.set_xlabel("hours not running (symlog)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title("Waiting time CDF (solid: total, dotted: before first start)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
    fig.tight_layout()
    paths.append(out / "waiting_cdf.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    for r in results:
        tl = r.timeline
        ax.step(tl.t / 3600.0, tl.queue_length, where="post", label=r.policy)
    ax.set_xlabel("time (hours)")
    ax.set_ylabel("waiting jobs (QL)")
    ax.set_title("Queue length over time")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    paths.append(out / "queue_length.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    paths.append(plot_ql_ce_bi(results, out / "ql_ce_bi.png"))
    return paths


def plot_ql_ce_bi(results: Sequence[SimResult], path: Path) -> Path:
    """Seed 001 Fig. 2: queue length (QL), cluster efficiency (CE) and blocking index
    (BI, log scale) against time, one line per policy, one panel per metric."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(7, 7.5), sharex=True)
    panels = (("queue_length", "QL (waiting jobs)", False), ("ce", "CE", False),
              ("bi", "BI (log scale)", True))
    for ax, (col, label, log) in zip(axes, panels):
        for r in results:
            tl = r.timeline
            if not len(tl):
                continue
            y = tl[col].to_numpy(float)
            if log:
                y = np.where(y > 0, y, np.nan)  # BI is 0 while nothing waits
            ax.step(tl.t / 3600.0, y, where="post", label=r.policy, lw=1.0)
        if log and ax.has_data():
            ax.set_yscale("log")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="small", ncol=min(len(results), 4))
    axes[0].set_title("QL, CE and BI over time (seed 001 Fig. 2)")
    axes[-1].set_xlabel("time (hours)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
