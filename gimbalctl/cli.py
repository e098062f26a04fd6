"""``gimbalctl`` command line (click)."""
from __future__ import annotations

import json
import sys
import time
from importlib import resources
from pathlib import Path

import click

import policies
from policies.registry import UnknownPolicyError

from .cli_predictor import register as register_predictor
from .cluster import ClusterSpecError, parse_cluster
from .trace_kinds import REQUIRED, TraceError

DEMO_POLICIES = ("fifo", "sjf", "tiresias", "sjf-ffs", "sjf-bsbf")


def bundled_trace(name: str = "pollux/workload-1.csv") -> Path:
    return Path(str(resources.files("gimbalctl").joinpath("data/traces/" + name)))


class LazyGroup(click.Group):
    """A click group whose Slurm-side commands (daemon, queue, explain, revert, db, audit,
    cycles) are imported when one of them runs or help lists them, so ``simulate`` does not
    load the daemon, the Slurm backend and the state store."""

    lazy: dict[str, str] = {}  # command name -> "module:attribute"

    def list_commands(self, ctx):
        return sorted(set(super().list_commands(ctx)) | set(self.lazy))

    def get_command(self, ctx, name):
        cmd = super().get_command(ctx, name)
        if cmd is None and name in self.lazy:
            import importlib
            mod, _, attr = self.lazy[name].partition(":")
            cmd = getattr(importlib.import_module(mod), attr)
            self.add_command(cmd, name)
        return cmd


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gimbal", message="gimbal %(version)s")
def main() -> None:
    """gimbal: deep-learning-aware scheduling for Slurm GPU clusters."""


@main.command("policies")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def list_policies(as_json: bool) -> None:
    """List the scheduling policies."""
    desc = policies.describe()
    if as_json:
        click.echo(json.dumps(desc, indent=1))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("policy", "description")
    for name, d in desc.items():
        table.add_row(name, d)
    Console().print(table)


def _parse_options(items: tuple[str, ...]) -> tuple[dict, dict[str, dict]]:
    """``--option [POLICY:]KEY=VALUE`` items as policy keyword arguments: ``(for every
    policy, {policy name: for that policy only})``.  VALUE is read as a TOML value
    (``decide=gpu_ngpu``, ``cd=true``, ``threshold=0.9``, ``decide="gpu"``), as the
    ``[policy_options]`` table of gimbal.toml; a bare word is a string."""
    if not items:
        return {}, {}  # no --option: tomllib (~4 ms of a plain simulate's start-up) not imported
    import tomllib

    common: dict = {}
    scoped: dict[str, dict] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        scope, colon, key = key.partition(":")
        if not colon:
            scope, key = "", scope
        key, raw, scope = key.strip(), raw.strip(), scope.strip()
        if not sep or not key.isidentifier() or not raw or (colon and not scope):
            raise click.BadParameter(f"{item!r} is not [POLICY:]KEY=VALUE (KEY a Python name)",
                                     param_hint="--option")
        out = scoped.setdefault(scope, {}) if scope else common
        if key in out:
            raise click.BadParameter(f"{key!r} given twice" + (f" for {scope}" if scope else ""),
                                     param_hint="--option")
        try:
            out[key] = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            out[key] = raw
    return common, scoped


def _parse_policies(names: tuple[str, ...], min_run_s: float = 0.0,
                    options: dict | None = None, scoped: dict | None = None) -> list:
    """The named policies (else the demo set), each made with ``options`` and, over them,
    its own ``scoped[name]`` options (``--option NAME:KEY=VALUE``: the narrower wins)."""
    # policies.names() imports every policy module: only when none is named
    chosen = list(names) if names else [p for p in DEMO_POLICIES if p in policies.names()]
    stray = sorted(set(scoped or {}) - set(chosen))
    if stray:
        raise click.BadParameter(f"{', '.join(stray)}: not among the --policy names "
                                 f"({', '.join(chosen)})", param_hint="--option")
    out = []
    for n in chosen:
        opts = {**(options or {}), **(scoped or {}).get(n, {})}
        try:
            pol = policies.get_policy(n, **opts)
            if min_run_s and getattr(pol, "accepts_min_run", False):
                pol = policies.get_policy(n, min_run_s=min_run_s, **opts)
            out.append(pol)
        except UnknownPolicyError as e:
            raise click.BadParameter(str(e), param_hint="--policy") from None
        except (TypeError, ValueError) as e:
            raise click.BadParameter(f"policy {n!r} with {opts}: {e}",
                                     param_hint="--option") from None
    return out


@main.command()
@click.option("--trace", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="trace CSV (default: the bundled Pollux workload-1, 160 jobs)")
@click.option("--kind", type=click.Choice(sorted(REQUIRED)), default=None,
              help="trace format (default: detected from the header)")
@click.option("--map", "column_map", multiple=True, metavar="COLUMN=FIELD",
              help="rename a trace column before loading (repeatable), e.g. --map jid=id")
@click.option("--policy", "policy_names", multiple=True,
              help="policy to run (repeatable; default: " + ", ".join(DEMO_POLICIES) + ")")
@click.option("--cluster", default="16x4", show_default=True,
              help="NODESxGPUS[:TYPE[:MEM_MB]][,...], e.g. 4x4:v100,4x4:k80 (docs/architecture.md)")
@click.option("--gpu-types", "gpu_types_file", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="TOML file whose [gpu_types] adds or overrides GPU types "
                                 "(speed, memory_mb), as in gimbal.toml")
@click.option("--resize-cost", default=0.0, show_default=True, type=click.FloatRange(min=0),
              help="seconds without progress after a resize onto other GPUs")
@click.option("--mps-switch-cost", default=0.0, show_default=True,
              type=click.FloatRange(min=0, max=1e9),
              help="seconds without progress after a resize that changes a job's MPS share on "
                   "the same GPUs (GIMBAL's LGRR: 3.6 in the paper, ~19 with gimbal-run's "
                   "checkpoint and relaunch)")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0, 2**32 - 1),
              help="random seed (0 .. 2**32-1, numpy's range)")
@click.option("--interval", default=60.0, show_default=True, type=click.FloatRange(min=1e-3),
              help="seconds between scheduling rounds while jobs wait")
@click.option("--xi", type=click.FloatRange(min=1.0), default=None,
              help="override every co-location interference ratio ξ")
@click.option("--preempt-cost", default=30.0, show_default=True, type=click.FloatRange(min=0),
              help="seconds to checkpoint/restore on each pre-emption")
@click.option("--min-run", "min_run_s", default=0.0, show_default=True,
              type=click.FloatRange(min=0),
              help="seconds a (re)started job runs before a pre-emptive policy "
                   "(tiresias, srtf, srsf) may pre-empt it again; 0 = as published")
@click.option("--unknown-lengths", is_flag=True, help="hide job lengths from policies")
@click.option("--predictor", type=click.Choice(["rf", "mean", "median", "perfect"]), default=None,
              help="fit this job-length predictor on the jobs finished so far and give it to "
                   "the policies (seed 003 A-SRPT and its baselines use it)")
@click.option("--refit", default=3600.0, show_default=True, type=click.FloatRange(min=1),
              help="seconds of simulated time between predictor refits")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="first N jobs only")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="write per-job CSV, timeline, summary.json and plots here")
@click.option("--job-types", type=click.Choice(["trace", "table1"]), default="trace",
              show_default=True,
              help="table1: give each recurrence group a seed 003 Table I model-parallel job "
                   "type (§V-B 1-b; docs/asrpt.md), iterations from the trace durations")
@click.option("--option", "policy_option", multiple=True, metavar="[POLICY:]KEY=VALUE",
              help="policy option (repeatable; as [policy_options] in gimbal.toml) for every "
                   "--policy, or with POLICY: for that one only (it wins over an option for "
                   "every policy), e.g. --option decide=gpu_ngpu --option similarity:cd=true")
@click.option("--json", "as_json", is_flag=True, help="print machine-readable results")
def simulate(trace, kind, column_map, policy_names, cluster, gpu_types_file, resize_cost,
             mps_switch_cost, seed,
             interval, xi, preempt_cost, min_run_s, unknown_lengths, predictor, refit, limit, out,
             job_types, policy_option, as_json) -> None:
    """Run policies over a trace in the simulator and compare them."""
    from .profiles import default_models
    from .sim import SimConfig, simulate as run_sim
    from .traces import load_trace

    options, scoped = _parse_options(policy_option)
    if (options or scoped) and not policy_names:
        raise click.BadParameter("name the policies the options are for (--policy)",
                                 param_hint="--option")
    net_scoped = sorted(f"{p}:{k}" for p, o in scoped.items() for k in o
                        if k in ("intra_gbytes", "inter_gbits"))
    if net_scoped:
        raise click.BadParameter(f"{', '.join(net_scoped)}: the network is the simulated "
                                 "cluster's, the same for every policy (give it without POLICY:)",
                                 param_hint="--option")
    pols = _parse_policies(policy_names, min_run_s, options, scoped)
    models = default_models()
    if gpu_types_file is not None:
        from .config import ConfigError, load as load_config

        try:
            models = load_config(str(gpu_types_file)).models()
        except ConfigError as e:
            raise click.BadParameter(str(e), param_hint="--gpu-types") from None
    try:
        nodes = parse_cluster(cluster, type_mem_mb=models.gpu_types.memory_mb)
    except ClusterSpecError as e:
        raise click.BadParameter(str(e), param_hint="--cluster") from None
    trace = trace or bundled_trace()
    columns = {}
    for item in column_map:
        src, sep, dst = item.partition("=")
        if not sep or not src.strip() or not dst.strip():
            raise click.BadParameter(f"{item!r} is not COLUMN=FIELD", param_hint="--map")
        columns[src.strip()] = dst.strip()
    try:
        jobs = load_trace(trace, kind=kind, seed=seed, models=models, limit=limit, columns=columns,
                          nodes=nodes)
    except TraceError as e:
        raise click.ClickException(f"bad trace: {e}") from None
    if job_types == "table1":
        from .pipeline_jobs import table1_jobs, trace_durations

        try:
            jobs = table1_jobs(jobs, trace_durations(jobs, models, nodes),
                               max(n.num_gpus for n in nodes), seed)
        except ValueError as e:
            raise click.BadParameter(f"{trace}: {e}", param_hint="--job-types") from None
    net = {}
    if "intra_gbytes" in options or "inter_gbits" in options:
        # the policies' seed 003 bandwidths are the simulated cluster's too (eq. 5-6)
        from policies.pipeline import Network

        net = dict(network=Network.from_units(float(options.get("intra_gbytes", 300.0)),
                                              float(options.get("inter_gbits", 10.0))))
    cfg = SimConfig(interval=interval, seed=seed, xi=xi, preempt_cost=preempt_cost,
                    resize_cost=resize_cost, mps_switch_cost=mps_switch_cost,
                    reveal_lengths=not unknown_lengths, **net)
    results = []
    show_progress = not as_json and sys.stderr.isatty() and len(jobs) >= 1000
    for pol in pols:
        t0 = time.perf_counter()
        try:
            kw = {}
            if predictor is not None:
                from .predictor import refitter
                kw = dict(refit=refitter(predictor, seed), refit_every=refit)
            res = _run_one(run_sim, jobs, nodes, pol, models, cfg, show_progress, **kw)
        except ValueError as e:  # jobs the cluster cannot hold, or an invalid plan
            raise click.ClickException(f"{pol.name}: {e}") from None
        res.summary["wall_s"] = time.perf_counter() - t0
        results.append(res)
    written = []
    if out is not None:
        from .report import write_outputs

        written = write_outputs(results, out)
    if as_json:
        click.echo(json.dumps({"trace": str(trace), "cluster": cluster, "jobs": len(jobs),
                               "seed": seed, "results": {r.policy: r.summary for r in results},
                               "files": [str(p) for p in written]}, indent=1))
        return
    _print_table(results, trace, cluster, len(jobs))
    if written:
        click.echo(f"wrote {len(written)} files to {out}")


def _run_one(run_sim, jobs, nodes, pol, models, cfg, show_progress, **kw):
    if not show_progress:
        return run_sim(jobs, nodes, pol, models, cfg, **kw)
    from rich.progress import Progress

    with Progress(transient=True) as bar:
        task = bar.add_task(f"{pol.name}", total=len(jobs))
        return run_sim(jobs, nodes, pol, models, cfg,
                       progress=lambda done, total: bar.update(task, completed=done), **kw)


def _print_table(results, trace, cluster, njobs) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{njobs} jobs from {Path(trace).name} on {cluster}")
    for col in ("policy", "avg JCT (h)", "p50 JCT (h)", "p99 JCT (h)", "avg queue (h)",
                "avg wait (h)", "makespan (h)", "GPU util", "CE", "shared", "preempt", "wall (s)"):
        t.add_column(col, justify="right" if col != "policy" else "left")
    for r in results:
        s = r.summary
        t.add_row(r.policy, f"{s['avg_jct'] / 3600:.2f}", f"{s['median_jct'] / 3600:.2f}",
                  f"{s['p99_jct'] / 3600:.2f}", f"{s['avg_queueing'] / 3600:.2f}",
                  f"{s['avg_wait_total'] / 3600:.2f}",
                  f"{s['makespan'] / 3600:.1f}", f"{s['gpu_utilization']:.0%}",
                  f"{s['avg_ce']:.2f}", str(s["shared_jobs"]), str(s["preemptions"]),
                  f"{s['wall_s']:.1f}")
    console = Console()
    if not console.is_terminal:
        console = Console(width=150)
    console.print(t)


SLURM_COMMANDS = {"daemon": "cli_slurm:daemon_cmd", "queue": "cli_slurm:queue_cmd",
                  "explain": "cli_slurm:explain_cmd", "revert": "cli_slurm:revert_cmd",
                  "db": "cli_slurm:db_group", "audit": "cli_admin:audit_cmd",
                  "cycles": "cli_admin:cycles_cmd"}


def _register_optional() -> None:
    """Attach the Slurm-side commands that live in their own modules, imported on use."""
    import importlib.util

    if importlib.util.find_spec(f"{__package__}.cli_slurm") is None:
        return
    main.lazy = {k: f"{__package__}.{v}" for k, v in SLURM_COMMANDS.items()}


_register_optional()
register_predictor(main)

if __name__ == "__main__":  # pragma: no cover
    main()
