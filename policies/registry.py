"""Name → policy registry.  ``get_policy`` on an unknown name raises an error
listing the valid ones."""
from __future__ import annotations

import importlib
from typing import Callable

_REGISTRY: dict[str, type] = {}

# One module per policy; importing a module registers its policy.
_MODULES = (
    "policies.fifo", "policies.sjf", "policies.srtf", "policies.srsf",
    "policies.tiresias", "policies.sjf_bsbf", "policies.sjf_ffs",
    "policies.a_srpt", "policies.a_srpt_perfect", "policies.spjf", "policies.spwf",
    "policies.wcs_duration", "policies.wcs_workload", "policies.wcs_subtime",
    "policies.afs_l", "policies.afs_p", "policies.max_min", "policies.themis",
    "policies.optimus",
    "policies.lucid", "policies.gandiva", "policies.gavel_pack",
    "policies.similarity", "policies.gavel_mtd", "policies.isolation",
)


class UnknownPolicyError(KeyError):
    def __init__(self, name: str, valid: list[str]):
        self.name, self.valid = name, valid
        super().__init__(name)

    def __str__(self) -> str:
        return f"unknown policy {self.name!r}; valid policies: {', '.join(self.valid)}"


def register(name: str) -> Callable[[type], type]:
    def deco(cls: type) -> type:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"policy name {name!r} registered twice")
        cls.name = name
        _REGISTRY[name] = cls
        return cls
    return deco


class PolicyImportError(ImportError):
    """A policy module listed in ``_MODULES`` failed to import (message names it)."""


def _load_all() -> None:
    for mod in _MODULES:
        _import(mod)


def names() -> list[str]:
    _load_all()
    return sorted(_REGISTRY)


def describe() -> dict[str, str]:
    """Policy name → one-line description (first docstring line)."""
    _load_all()
    return {n: (c.__doc__ or "").strip().splitlines()[0] for n, c in sorted(_REGISTRY.items())}


def _import(mod: str) -> None:
    try:
        importlib.import_module(mod)
    except Exception as e:  # never skipped: a listed module must load
        raise PolicyImportError(f"policy module {mod} failed to import: "
                                f"{type(e).__name__}: {e}") from e


def get_policy(name: str, **options):
    """The policy ``name`` built with ``options``.  A policy whose module is named after
    it (``sjf-ffs`` in ``policies.sjf_ffs``) is found by importing that module only (the
    CLI's start-up, docs/scale.md §6); any other name loads every policy module."""
    cls = _REGISTRY.get(name)
    mod = "policies." + name.replace("-", "_")
    if cls is None and mod in _MODULES:
        _import(mod)
        cls = _REGISTRY.get(name)
    if cls is None:
        _load_all()
        cls = _REGISTRY.get(name)
    if cls is None:
        raise UnknownPolicyError(name, sorted(_REGISTRY))
    return cls(**options)
