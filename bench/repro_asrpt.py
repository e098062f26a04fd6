"""Seed 003 §V-B reproduction on Philly windows -> docs/asrpt_results.md.

    PYTHONPATH=. nice python bench/repro_asrpt.py [--jobs 1500] [--windows 2] [--fig9]

Setting (§V-B 1-a/1-b, scaled to what this machine can run; see docs/asrpt.md):

* trace: the Philly job list (``../shared/traces/philly``); windows of consecutive jobs
  (start drawn with ``numpy.random.default_rng(seed)``); arrivals as in the trace;
* groups: Philly has no user, job name or group id; the recurrence key is
  ``hash(VC, GPUs)`` (:func:`gimbalctl.predictor.group_key`, the VC standing in for the user);
* job types (§V-B 1-b): each group gets a Table I model and one of its configurations
  (:mod:`policies.pipeline`) — a single-GPU group a model that trains on one GPU, a multi-GPU
  group a random model that fits and one of its stage counts; iterations = trace duration /
  ``α̂^min`` of the type;
* predictor: history = every Philly job submitted before the window (finished by then),
  plus the window's jobs as they finish; refit every ``--refit`` hours (the paper: hourly or
  daily); random forest, group mean, group median;
* clusters: 250 x 8 GPUs (§V-B 1-a) and a smaller cluster with the same per-GPU offered load
  as the paper's sampled windows would put on it (see the doc); NVLink 300 GB/s, 10 Gbps NICs;
* metric: total job completion time (sum of completion - arrival), makespan.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import policies  # noqa: E402
from gimbalctl.cluster import parse_cluster  # noqa: E402
from gimbalctl.predictor import evaluate, group_key, plot_error_cdf, refitter  # noqa: E402
from gimbalctl.profiles import default_models  # noqa: E402
from gimbalctl.sim import SimConfig, simulate  # noqa: E402
from gimbalctl.pipeline_jobs import alpha_min as pipeline_alpha_min, assign_table1  # noqa: E402
from policies.model import FinishedJob, Job  # noqa: E402
from policies.pipeline import MODELS, Network, pipeline_spec  # noqa: E402

PHILLY = ROOT.parent / "shared" / "traces" / "philly" / "philly.csv"
if not PHILLY.exists():
    PHILLY = Path("/work/shared/traces/philly/philly.csv")
NET = Network()
BASELINES = ("spjf", "spwf", "wcs-duration", "wcs-workload", "wcs-subtime")
PAPER = {"range": "31-91 %", "perfect_gap": "14 %", "errors": "RF 369 < median 563 < mean 593"}


def load_philly(path=PHILLY) -> pd.DataFrame:
    df = pd.read_csv(path)
    df["t"] = (pd.to_datetime(df.timestamp) - pd.to_datetime(df.timestamp).min()).dt.total_seconds()
    df = df.sort_values(["t"], kind="stable").reset_index(drop=True)
    df["group"] = [group_key(c, "", g, None) for c, g in zip(df.cluster, df.num_gpus)]
    return df


def share_list(text: str) -> str:
    """argparse type of ``--single-gpu-share``: comma-separated numbers within [0, 1] (the
    text itself is kept for the run's command line); anything else is a usage error."""
    for x in (t.strip() for t in text.split(",")) if text else ():
        try:
            v = float(x)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{x!r} is not a number (e.g. 0.8,0.6,0)") from None
        if not 0.0 <= v <= 1.0:
            raise argparse.ArgumentTypeError(f"{x!r}: a share must be within [0, 1]")
    return text


def set_single_gpu_share(df: pd.DataFrame, share: float, seed: int) -> pd.DataFrame:
    """§V-B 2-b (Fig. 7): each job is set single-GPU with probability ``share``, otherwise
    distributed, independently per job ("jobs randomly set for single-GPU or distributed
    training").  What the paper leaves open, our choices: a distributed job that was
    multi-GPU in the trace keeps its GPU count, a single-GPU job made distributed draws one
    from the trace's multi-GPU jobs (their empirical distribution); every job keeps its trace
    duration (so its iterations follow its new type, and the offered GPU-time grows as the
    share falls); the recurrence group is recomputed from VC and the new GPU count, as
    :func:`load_philly` defines it.  The draw uses its own ``default_rng(seed)``."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"single-GPU share {share!r}: must be within [0, 1]")
    rng = np.random.default_rng(seed)
    gpus = df.num_gpus.to_numpy()
    multi = gpus[gpus > 1]
    if not len(multi) and share < 1.0:
        raise ValueError("the trace has no multi-GPU job to draw distributed GPU counts from")
    single = rng.random(len(df)) < share
    drawn = multi[rng.integers(len(multi), size=len(df))] if len(multi) else gpus
    out = df.copy()
    out["num_gpus"] = np.where(single, 1, np.where(gpus > 1, gpus, drawn)).astype(int)
    out["group"] = [group_key(c, "", g, None) for c, g in zip(out.cluster, out.num_gpus)]
    return out


def assign_types(df: pd.DataFrame, g: int, seed: int) -> dict:
    """§V-B 1-b: group -> (model, stages) (:func:`gimbalctl.pipeline_jobs.assign_table1`)."""
    return assign_table1(dict(df.groupby("group", sort=True).num_gpus.first().items()), seed)


def alpha_min(model, stages, gpus, g, net=NET):
    return pipeline_alpha_min(model, stages, gpus, g, net)


def build(df, types, lo, hi, g):
    jobs, hist = [], []
    t0 = df.t.iloc[lo]
    cols = df[["t", "duration", "num_gpus", "cluster", "group"]].to_numpy()
    for i in range(hi):
        t, dur, gpus, vc, grp = cols[i]
        model, st = types[grp]
        iters = max(float(dur) / alpha_min(model, st, int(gpus), g), 1.0)
        if i < lo:
            if t + dur <= t0:  # finished before the window opens: history
                hist.append(FinishedJob(f"h{i}", str(vc), t - t0, t - t0, t + dur - t0, int(gpus),
                                        model, "", grp, iters, MODELS[model].batch))
            continue
        jobs.append(Job(f"p{i}", float(t - t0), int(gpus), model, MODELS[model].batch,
                        user=str(vc), total_iters=iters, group_id=grp, stages=st))
    return jobs, hist


def run_one(policy, jobs, hist, nodes, predictor, refit_h, seed, nic=10.0, tau=None):
    opts = {} if tau is None or not policy.startswith("a-srpt") else {"tau": tau}
    pol = policies.get_policy(policy, inter_gbits=nic, **opts)
    kw = {}
    if predictor is not None:
        kw = dict(prior_history=hist, refit=refitter(predictor, seed), refit_every=refit_h * 3600)
    t = time.perf_counter()
    cfg = SimConfig(interval=60.0, seed=seed, network=Network.from_units(300.0, nic))
    res = simulate(jobs, nodes, pol, default_models(), cfg, **kw)
    df = res.jobs.set_index("id")
    g = nodes[0].num_gpus
    net = Network.from_units(300.0, nic)
    ideal = pd.Series({j.id: j.total_iters * alpha_min(j.app, j.stages, j.num_gpus, g, net)
                       for j in jobs})
    slow = (df.run_time / ideal.reindex(df.index)) > 1.5
    return {"total_jct_h": float((df.end - df.submit).sum() / 3600),
            "median_jct_h": float((df.end - df.submit).median() / 3600),
            "queue_h": float((df.start - df.submit).sum() / 3600),
            "makespan_h": float((df.end.max() - df.submit.min()) / 3600),
            "slowed": int(slow.sum()), "wall_s": time.perf_counter() - t}


def table2(seed=0, cases=20):
    """Table II analogue: Heavy-Edge vs the exact ILP (gimbalctl.placement_ilp) on 20 cases of
    random GPU availability per server (8-GPU servers): per-iteration training time (eq. 7)
    and placement computation time.  GPT-175B (128 replicas) is too large for scipy's solver
    here; GPT-6.7B with 5 stages x 2 replicas stands in for the uniform-structure case."""
    from gimbalctl.placement_ilp import exact_min_cut
    from policies.asrpt_core import _graph, _stage_counts
    from policies.heavy_edge import heavy_edge
    from policies.pipeline import iter_time

    rng = np.random.default_rng(seed)
    out = []
    for model, stages, gpus in (("vgg19", 2, 8), ("gpt_6.7b", 5, 10)):
        spec = pipeline_spec(model, stages, gpus)
        adj = _graph(spec)
        pitt_he, pitt_ilp, pct_he, pct_ilp = [], [], [], []
        for _ in range(cases):
            caps, left = [], gpus
            while left:
                c = int(rng.integers(1, min(left, 6) + 1))
                caps.append(c)
                left -= c
            servers = [(f"m{i}", c) for i, c in enumerate(caps)]
            gpn = {m: 8 for m, _ in servers}
            t = time.perf_counter()
            he = heavy_edge(adj, servers)
            pct_he.append(time.perf_counter() - t)
            t = time.perf_counter()
            _, opt = exact_min_cut(adj, servers)
            pct_ilp.append(time.perf_counter() - t)
            pitt_he.append(iter_time(spec, _stage_counts(spec, he), gpn, NET))
            pitt_ilp.append(iter_time(spec, _stage_counts(spec, opt), gpn, NET))
        out.append((model, stages, gpus, 1e3 * np.mean(pitt_he), 1e3 * np.mean(pct_he),
                    1e3 * np.mean(pitt_ilp), 1e3 * np.mean(pct_ilp)))
    lines = ["| model (stages x GPUs) | Heavy-Edge PITT (ms) | Heavy-Edge PCT (ms) | ILP PITT (ms) "
             "| ILP PCT (ms) | PITT ratio |", "|---|---|---|---|---|---|"]
    for m, st, g, a, b, c, d in out:
        lines.append(f"| {m} ({st} x {g}) | {a:.2f} | {b:.2f} | {c:.2f} | {d:.1f} | {a / c:.3f} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1500)
    ap.add_argument("--windows", type=int, default=2)
    ap.add_argument("--clusters", default="250x8,24x8")
    ap.add_argument("--refit", type=float, default=24.0, help="hours between refits")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--history", type=int, default=20000, help="history rows before a window")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "asrpt_results.md")
    ap.add_argument("--fig9", action="store_true", help="also A-SRPT with mean/median predictors")
    ap.add_argument("--cdf", type=Path, default=ROOT / "docs" / "asrpt_error_cdf.png",
                    help="Fig. 4 analogue: CDF of the prediction error on window 0")
    ap.add_argument("--cdf-only", action="store_true", help="only the error CDF, no simulation")
    ap.add_argument("--table2", action="store_true", help="only Table II (Heavy-Edge vs ILP)")
    ap.add_argument("--nic", default="10", help="NIC bandwidths in Gbps, comma-separated (Fig. 8)")
    ap.add_argument("--policies", default="", help="comma-separated subset of the runs")
    ap.add_argument("--single-gpu-share", default="", type=share_list,
                    help="Fig. 7 (§V-B 2-b): comma-separated shares of single-GPU jobs, e.g. "
                         "0.8,0.6,0.4,0.2,0 (each job redrawn, see set_single_gpu_share)")
    ap.add_argument("--tau", type=float, default=None,
                    help="A-SRPT's delay factor tau (Algorithm 1 line 16; the paper gives no value "
                         "for its simulations; default: the policy's, 1.0)")
    ap.add_argument("--fig7-plot", type=Path, default=None,
                    help="with --single-gpu-share: write the Fig. 7 analogue plot here")
    a = ap.parse_args(argv)
    if a.table2:
        print(table2(a.seed))
        return
    base = load_philly()
    rng = np.random.default_rng(a.seed)
    rows, errs = [], []
    starts = sorted(int(x) for x in rng.integers(a.history, len(base) - a.jobs, a.windows))
    shares = [float(x) for x in a.single_gpu_share.split(",")] if a.single_gpu_share else [None]  # checked by share_list
    for w, lo in enumerate(starts):
        for share in shares:
            df = base if share is None else set_single_gpu_share(base, share, a.seed + w)
            for cl in a.clusters.split(","):
                nodes = parse_cluster(cl)
                g = nodes[0].num_gpus
                types = assign_types(df, g, a.seed + w)
                sub = df.iloc[lo - a.history: lo + a.jobs].reset_index(drop=True)
                jobs, hist = build(sub, types, a.history, len(sub), g)
                if cl == a.clusters.split(",")[0]:
                    # predictor error on the window (trained on the history before it, as run)
                    fin = hist + [FinishedJob(j.id, j.user, j.submit_time, j.submit_time, j.submit_time,
                                              j.num_gpus, j.app, "", j.group_id, j.total_iters,
                                              j.global_batch) for j in jobs]
                    ev = evaluate(fin, train_frac=len(hist) / len(fin), seed=a.seed)
                    if w == 0 and a.cdf is not None and share in (None, shares[0]):
                        plot_error_cdf(ev, a.cdf)  # Fig. 4 analogue
                    if a.cdf_only:
                        return
                    errs.append({"window": w, "share": share, **{k: v["mean_abs_error"] for k, v in ev["summary"].items()},
                                 "unseen": ev["summary"]["rf"]["unseen_group"]})
                runs = [("a-srpt", "rf"), ("a-srpt-perfect", None)] + [(b, "rf") for b in BASELINES]
                if a.fig9:
                    runs += [("a-srpt", "mean"), ("a-srpt", "median")]
                if a.policies:
                    runs = [r for r in runs if r[0] in a.policies.split(",")]
                for nic in (float(x) for x in a.nic.split(",")):
                    where = cl if a.nic == "10" else f"{cl} @ {nic:g} Gbps"
                    if share is not None:
                        where += f", {100 * share:g} % single-GPU jobs"
                    for pol, pred in runs:
                        r = run_one(pol, jobs, hist, nodes, pred, a.refit, a.seed, nic, a.tau)
                        label = pol if pred in (None, "rf") else f"{pol} ({pred})"
                        rows.append({"window": w, "start": lo, "cluster": where, "policy": label,
                                     "share": share, **r})
                        print(f"window {w} {where} {label:22s} total JCT {r['total_jct_h']:.0f} h, queueing "
                              f"{r['queue_h']:.0f} h, {r['slowed']} jobs > 1.5x alpha_min "
                              f"(sim {r['wall_s']:.0f} s)", flush=True)
                        # rewritten after every run: a long run stopped early keeps what it got
                        write_doc(a, pd.DataFrame(rows), pd.DataFrame(errs), a.out)


def fig7(res, plot=None):
    """Fig. 7 analogue: total JCT per share of single-GPU jobs (mean over windows), and
    A-SRPT's reduction against the best and the worst baseline at each share."""
    d = res[res.share.notna()]
    piv = d.pivot_table(index="share", columns="policy", values="total_jct_h").sort_index(
        ascending=False)
    cols = [c for c in ("a-srpt", "a-srpt-perfect", *BASELINES) if c in piv.columns]
    base = [c for c in BASELINES if c in piv.columns]
    lines = ["### Fig. 7 analogue: total JCT (hours) by share of single-GPU jobs", "",
             "| single-GPU share | " + " | ".join(cols)
             + " | A-SRPT vs best baseline | A-SRPT vs worst baseline |",
             "|---" * (len(cols) + 3) + "|"]
    for sh, row in piv.iterrows():
        cells = " | ".join("" if pd.isna(row.get(c)) else f"{row[c]:,.0f}" for c in cols)
        vs = ["", ""]
        if "a-srpt" in row and base and not row[base].isna().all():
            vs = [f"{100 * (1 - row['a-srpt'] / row[base].min()):+.0f} %",
                  f"{100 * (1 - row['a-srpt'] / row[base].max()):+.0f} %"]
        lines.append(f"| {100 * sh:g} % | {cells} | {vs[0]} | {vs[1]} |")
    lines += ["", "A positive reduction means A-SRPT's total is the smaller (the paper: 16 % to 57 % "
              "lower as the share falls from 80 % to 0 %).", ""]
    if plot is not None and len(piv):
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(6, 3.5))
        x = np.arange(len(piv))
        w = 0.8 / len(cols)
        for k, c in enumerate(cols):
            ax.bar(x + k * w, piv[c].to_numpy(), w, label=c)
        ax.set_xticks(x + 0.4 - w / 2, [f"{100 * s:g} %" for s in piv.index])
        ax.set_xlabel("share of single-GPU jobs")
        ax.set_ylabel("total JCT (hours, log scale)")
        ax.set_yscale("log")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(plot, dpi=120)
        plt.close(fig)
    return lines


def write_doc(a, res, errs, out):
    lines = ["# A-SRPT reproduction results (generated by bench/repro_asrpt.py)", "",
             "Setting and discussion: docs/asrpt.md.", "",
             f"Run: `PYTHONPATH=. nice python bench/repro_asrpt.py --jobs {a.jobs} --windows "
             f"{a.windows} --clusters {a.clusters} --refit {a.refit} --history {a.history}"
             + (" --fig9" if a.fig9 else "") + (f" --nic {a.nic}" if a.nic != "10" else "")
             + (f" --policies {a.policies}" if a.policies else "")
             + (f" --single-gpu-share {a.single_gpu_share}" if a.single_gpu_share else "")
             + (f" --tau {a.tau:g}" if a.tau is not None else "")
             + f"` (seed {a.seed}).", ""]
    if a.single_gpu_share:
        lines += fig7(res, a.fig7_plot)
    for cl, d in res.groupby("cluster", sort=False):
        piv = d.pivot_table(index="policy", columns="window", values="total_jct_h")
        piv["mean"] = piv.mean(axis=1)
        if "a-srpt" not in piv.index:
            continue
        a_srpt = piv.loc["a-srpt"]
        red = (1 - a_srpt / piv).mul(100)
        lines += [f"### Cluster {cl}: total JCT (hours) per window", "",
                  "| policy | " + " | ".join(f"window {c}" for c in piv.columns[:-1])
                  + " | mean | A-SRPT's reduction vs this policy (mean) |",
                  "|---" * (len(piv.columns) + 2) + "|"]
        for p, row in piv.sort_values("mean").iterrows():
            lines.append(f"| {p} | " + " | ".join(f"{v:,.0f}" for v in row.values)
                         + f" | {red.loc[p, 'mean']:+.0f} % |")
        lines.append("")
        det = d.groupby("policy")[["median_jct_h", "queue_h", "makespan_h", "slowed"]].mean()
        lines += [f"Cluster {cl}, means over windows: median JCT (h), total queueing (h), makespan "
                  "(h), jobs run slower than 1.5x their alpha_min (placement-induced)", "",
                  "| policy | median JCT | total queueing | makespan | slowed jobs |",
                  "|---|---|---|---|---|"]
        for p, row in det.sort_values("queue_h").iterrows():
            lines.append(f"| {p} | {row.median_jct_h:.2f} | {row.queue_h:,.0f} | "
                         f"{row.makespan_h:,.0f} | {row.slowed:.1f} |")
        lines.append("")
    if len(errs):
        lines += ["### Predictor error on the windows (mean |n - ñ|, iterations; eq. 9)", "",
                  "| window | single-GPU share | random forest | group mean | group median "
                  "| unseen groups |", "|---|---|---|---|---|---|"]
        for _, e in errs.iterrows():
            sh = "trace" if pd.isna(e.share) else f"{100 * e.share:g} %"
            lines.append(f"| {int(e.window)} | {sh} | {e.rf:,.0f} | {e['mean']:,.0f} | {e['median']:,.0f} | "
                         f"{100 * e.unseen:.1f} % |")
        lines.append("")
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
