"""Daemon configuration: defaults < config file (TOML) < CLI flags.

The config file is ``--config PATH``; without it ``$GIMBAL_CONFIG``; without that
``/etc/gimbal/gimbal.toml`` when it exists; else the built-in defaults.  Every command
(``daemon``, ``queue``, ``explain``, ``audit``, ``cycles``, ``revert``) resolves it the same
way, so a command run by hand sees the daemon's policy and state store.

Example ``etc/gimbal.toml``::

    [daemon]
    policy = "sjf"
    mode = "ordering"          # ordering | gate
    knob = "priority"          # priority | site_factor
    backend = "auto"           # auto | cli | pyslurm
    interval = 30              # seconds between cycles (loop mode)
    db = "/var/lib/gimbal/gimbal.db"   # or postgresql+psycopg2://...
    state_dir = "/var/spool/gimbal"
    lock_file = "/run/gimbal/daemon-{cluster}.lock"   # {cluster}: Slurm's ClusterName
    stale_after = 300          # queue/explain warn when the last cycle is older (seconds)

    [slurm]
    timeout = 20
    partition = "gpu"
    command_prefix = []        # e.g. ["chroot", "/srv/sid", "env", "-i", "PATH=/usr/bin:/bin"]

    [ordering]
    priority_base = 100000     # fixed priority of the last job in the plan's order
    priority_step = 10
    site_step = 0              # 0: derived from the spread of Slurm's own priorities

    [gate]
    preempt_grace = 10         # seconds between USR2 and requeue
    min_resize_interval = 600  # seconds between two requeue-resizes of one job (0: no limit)
    share_fraction = 0.5       # GPU share of a share=yes job started alone

    [estimates]                # users' duration estimates (metadata est=), docs/daemon.md
    use = "limit"              # limit: rank by the Slurm time limit only (est ignored);
                               # bounded: min(est, time limit) (a site rule: trusts users)
    penalty_s = 604800         # bounded: a user whose job outran its estimate has every
                               # estimate ignored for this long (0: no penalty)

    [defaults]                 # for jobs without (valid) gimbal metadata
    app = "cifar10"
    batch = 128

    [predictor]                # seed 003 A-SRPT job-length predictor (policy "a-srpt")
    history = "slurm"          # slurm: sacct through the Slurm backend (needs slurmdbd);
                               # none: no history (or a file, below)
    history_days = 30          # how far back sacct reads
    history_max_rows = 100000  # newest completed jobs kept
    history_timeout = 120      # seconds one sacct call may take
    # sacct = "/var/lib/gimbal/sacct.txt"  # instead of history: a file of sacct -a -X -P
    #                          # --format=JobID,JobName,User,Submit,Start,End,AllocTRES,
    #                          # Comment,AdminComment (refreshed by cron)
    kind = "rf"                # rf | mean | median
    refit = 3600               # seconds between refits (and whenever the file changes)
    unseen = "time-limit"      # a group never seen: time-limit (site rule) | zero (the paper)

    [gpu_types.a100]           # Slurm GRES type (gpu:a100:4) -> relative speed, memory
    speed = 2.2                # vs the reference type (v100 = 1.0; gimbalctl/gpu_types.py)
    memory_mb = 40960
"""
from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from policies.throughput import GpuTypeTable

DEFAULT_CONFIG = "/etc/gimbal/gimbal.toml"
CONFIG_ENV = "GIMBAL_CONFIG"
# ``scontrol update priority=N`` accepts 1 .. NO_VAL-1 (slurm.h: NO_VAL = 0xfffffffe;
# scontrol's parse_uint32 refuses N >= NO_VAL with "Invalid Priority value")
SLURM_PRIORITY_MAX = 0xfffffffd

MODES = ("ordering", "gate")
KNOBS = ("priority", "site_factor")
BACKENDS = ("auto", "cli", "pyslurm")
ESTIMATES = ("limit", "bounded")


class ConfigError(ValueError):
    """Bad configuration value (message names the file/flag and the key)."""


@dataclass
class Config:
    policy: str = "fifo"
    mode: str = "ordering"
    knob: str = "priority"
    backend: str = "auto"
    interval: float = 30.0
    db: Optional[str] = None
    state_dir: str = field(default_factory=lambda: os.environ.get("GIMBAL_STATE_DIR", "/var/spool/gimbal"))
    lock_file: Optional[str] = None  # default: <state_dir>/daemon-{cluster}.lock
    stale_after: float = 300.0
    dry_run: bool = False
    # slurm
    timeout: float = 20.0
    partition: Optional[str] = None
    command_prefix: tuple[str, ...] = ()
    # ordering
    priority_base: int = 100000
    priority_step: int = 10
    site_step: int = 0
    # gate
    preempt_grace: float = 10.0
    min_resize_interval: float = 600.0
    share_fraction: float = 0.5
    # users' duration estimates
    estimates: str = "limit"
    estimate_penalty_s: float = 7 * 86400.0
    # defaults for jobs without metadata
    default_app: str = "cifar10"
    default_batch: int = 128
    policy_options: dict = field(default_factory=dict)
    # [predictor] (seed 003): sacct history file, model kind, refit period (s)
    predictor_sacct: Optional[str] = None
    predictor_kind: str = "rf"
    predictor_refit: float = 3600.0
    predictor_history: str = "none"  # none | slurm
    predictor_days: float = 30.0
    predictor_max_rows: int = 100_000
    predictor_timeout: float = 120.0
    predictor_unseen: str = "time-limit"  # time-limit | zero
    # where the settings came from: the config file's path, or "" for the built-in defaults
    source: str = field(default="", compare=False)
    # [gpu_types.<type>] tables: speed, memory_mb (see gimbalctl/gpu_types.py)
    gpu_types: dict = field(default_factory=dict)

    def models(self):
        """The bundled models with this site's ``[gpu_types]`` on top."""
        from .gpu_types import with_site_types
        from .profiles import default_models

        base = default_models()
        if not self.gpu_types:
            return base
        return base.with_gpu_types(with_site_types(base.gpu_types, self.gpu_types))

    @property
    def lock_path(self) -> str:
        """The lock file template; ``{cluster}`` is replaced by Slurm's ClusterName."""
        return self.lock_file or os.path.join(self.state_dir, "daemon-{cluster}.lock")

    def describe_source(self) -> str:
        return f"config {self.source}" if self.source else \
            f"built-in defaults (no --config, ${CONFIG_ENV} or {DEFAULT_CONFIG})"

    def validate(self, where: str = "config") -> "Config":
        if self.mode not in MODES:
            raise ConfigError(f"{where}: mode {self.mode!r} is not one of {', '.join(MODES)}")
        if self.knob not in KNOBS:
            raise ConfigError(f"{where}: knob {self.knob!r} is not one of {', '.join(KNOBS)}")
        if self.backend not in BACKENDS:
            raise ConfigError(f"{where}: backend {self.backend!r} is not one of {', '.join(BACKENDS)}")
        for name in ("interval", "timeout", "stale_after"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{where}: {name} must be > 0, got {getattr(self, name)!r}")
        if not self.min_resize_interval >= 0:
            raise ConfigError(f"{where}: gate.min_resize_interval must be >= 0 seconds, got "
                              f"{self.min_resize_interval!r}")
        if not 0 < self.share_fraction <= 1:
            raise ConfigError(f"{where}: gate.share_fraction must be in (0, 1], got {self.share_fraction!r}")
        if self.estimates not in ESTIMATES:
            raise ConfigError(f"{where}: estimates.use {self.estimates!r} is not one of "
                              f"{', '.join(ESTIMATES)}")
        if not self.estimate_penalty_s >= 0:
            raise ConfigError(f"{where}: estimates.penalty_s must be >= 0, got "
                              f"{self.estimate_penalty_s!r}")
        if self.default_batch < 1:
            raise ConfigError(f"{where}: defaults.batch must be >= 1, got {self.default_batch!r}")
        if self.predictor_kind not in ("rf", "mean", "median"):
            raise ConfigError(f"{where}: predictor.kind must be rf, mean or median, "
                              f"got {self.predictor_kind!r}")
        if not self.predictor_refit > 0:
            raise ConfigError(f"{where}: predictor.refit must be > 0, got {self.predictor_refit!r}")
        if self.predictor_history not in ("none", "slurm"):
            raise ConfigError(f"{where}: predictor.history must be slurm or none, got "
                              f"{self.predictor_history!r}")
        if self.predictor_history == "slurm" and self.predictor_sacct:
            raise ConfigError(f"{where}: predictor.history = \"slurm\" and predictor.sacct "
                              f"(a file) both given; choose one")
        if self.predictor_unseen not in ("time-limit", "zero"):
            raise ConfigError(f"{where}: predictor.unseen must be time-limit or zero, got "
                              f"{self.predictor_unseen!r}")
        if not 0 < self.predictor_days <= 3660:
            raise ConfigError(f"{where}: predictor.history_days must be in (0, 3660], got "
                              f"{self.predictor_days!r}")
        if not 1 <= self.predictor_max_rows <= 10_000_000:
            raise ConfigError(f"{where}: predictor.history_max_rows must be 1..10000000, got "
                              f"{self.predictor_max_rows!r}")
        if not self.predictor_timeout > 0:
            raise ConfigError(f"{where}: predictor.history_timeout must be > 0, got "
                              f"{self.predictor_timeout!r}")
        if self.priority_step < 1 or self.priority_base < 1:
            raise ConfigError(f"{where}: ordering.priority_base/priority_step must be >= 1")
        if self.priority_base > SLURM_PRIORITY_MAX - self.priority_step:
            raise ConfigError(
                f"{where}: ordering.priority_base = {self.priority_base} leaves no room in "
                f"Slurm's job priority range 1..{SLURM_PRIORITY_MAX} (scontrol refuses larger "
                f"values with \"Invalid Priority value\"); use at most "
                f"{SLURM_PRIORITY_MAX - self.priority_step}, far less for a long queue: the "
                f"first of n pending jobs gets priority_base + (n-1) * priority_step")
        return self


# TOML section.key -> Config attribute
_KEYS = {
    ("daemon", "policy"): "policy", ("daemon", "mode"): "mode", ("daemon", "knob"): "knob",
    ("daemon", "backend"): "backend", ("daemon", "interval"): "interval", ("daemon", "db"): "db",
    ("daemon", "state_dir"): "state_dir", ("daemon", "lock_file"): "lock_file",
    ("daemon", "stale_after"): "stale_after",
    ("slurm", "timeout"): "timeout", ("slurm", "partition"): "partition",
    ("slurm", "command_prefix"): "command_prefix",
    ("ordering", "priority_base"): "priority_base", ("ordering", "priority_step"): "priority_step",
    ("ordering", "site_step"): "site_step",
    ("gate", "preempt_grace"): "preempt_grace", ("gate", "share_fraction"): "share_fraction",
    ("gate", "min_resize_interval"): "min_resize_interval",
    ("estimates", "use"): "estimates", ("estimates", "penalty_s"): "estimate_penalty_s",
    ("defaults", "app"): "default_app", ("defaults", "batch"): "default_batch",
    ("predictor", "sacct"): "predictor_sacct", ("predictor", "kind"): "predictor_kind",
    ("predictor", "refit"): "predictor_refit",
    ("predictor", "history"): "predictor_history", ("predictor", "history_days"): "predictor_days",
    ("predictor", "history_max_rows"): "predictor_max_rows",
    ("predictor", "history_timeout"): "predictor_timeout", ("predictor", "unseen"): "predictor_unseen",
}


def _coerce(name: str, value: Any, where: str) -> Any:
    default = getattr(Config(), name)
    want = type(default) if default is not None else str
    if name == "command_prefix":
        if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
            raise ConfigError(f"{where}: slurm.command_prefix must be a list of strings")
        return tuple(value)
    if want is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if want is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if want is str and isinstance(value, str):
        return value
    raise ConfigError(f"{where}: {name} must be {want.__name__}, got {value!r}")


def config_path(path: Optional[str] = None) -> tuple[Optional[str], str]:
    """The config file to read and how it was chosen (for messages): ``--config``, then
    ``$GIMBAL_CONFIG``, then :data:`DEFAULT_CONFIG` if it exists; ``(None, "")`` for none."""
    if path:
        return path, "--config"
    env = os.environ.get(CONFIG_ENV)
    if env:
        return env, f"${CONFIG_ENV}"
    if os.path.exists(DEFAULT_CONFIG):
        return DEFAULT_CONFIG, "default config"
    return None, ""


def load(path: Optional[str] = None, overrides: Optional[Mapping[str, Any]] = None) -> Config:
    """Config from ``path`` (None: ``$GIMBAL_CONFIG``, else ``/etc/gimbal/gimbal.toml`` if it
    exists, else built-in defaults) with non-None ``overrides`` (CLI flags) on top."""
    cfg = Config()
    path, how = config_path(path)
    if path:
        try:
            with open(path, "rb") as fh:
                raw = fh.read()
        except FileNotFoundError:
            raise ConfigError(f"{how} {path}: file not found") from None
        except OSError as e:
            raise ConfigError(f"{how} {path}: cannot read ({e.strerror or e})") from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            line = raw[:e.start].count(b"\n") + 1
            raise ConfigError(f"{how} {path}: not UTF-8 text (byte 0x{raw[e.start]:02x} on line "
                              f"{line}); TOML files must be UTF-8") from None
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{how} {path}: invalid TOML ({e})") from None
        cfg.source = path
        for section, body in doc.items():
            if section == "policy_options" and isinstance(body, dict):
                cfg.policy_options = dict(body)
                continue
            if section == "gpu_types":
                from .gpu_types import GpuTypeError, with_site_types

                if not isinstance(body, dict):
                    raise ConfigError(f"{path}: gpu_types must be [gpu_types.<type>] tables")
                try:
                    with_site_types(GpuTypeTable(), body, f"{path}: [gpu_types]")
                except GpuTypeError as e:
                    raise ConfigError(str(e)) from None
                cfg.gpu_types = {str(k).strip().lower(): dict(v) for k, v in body.items()}
                continue
            if not isinstance(body, dict):
                raise ConfigError(f"{path}: top-level key {section!r} must be a [section]")
            for key, value in body.items():
                attr = _KEYS.get((section, key))
                if attr is None:
                    raise ConfigError(f"{path}: unknown setting {section}.{key}")
                setattr(cfg, attr, _coerce(attr, value, f"{path}: {section}.{key}"))
    for k, v in (overrides or {}).items():
        if v is None:
            continue
        if not hasattr(cfg, k):
            raise ConfigError(f"unknown setting {k!r}")
        setattr(cfg, k, v)
    return cfg.validate(path or "config")


def as_dict(cfg: Config) -> dict:
    return dataclasses.asdict(cfg)
