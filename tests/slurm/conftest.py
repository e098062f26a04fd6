"""pytest fixtures for gimbal's real Slurm test clusters (see cluster.py, docs/slurm.md).

Fixtures
  slurm_2205      session: Slurm 22.05 cluster "gimbal" on the host (gpu1-3 gpu+shard, mps1 mps)
  slurm_2205_mps  session: Slurm 22.05 cluster "gimbalmps" (m1, m2: gpu+mps, no shard)
  slurm_2205_het  session: Slurm 22.05 cluster "gimbalhet" (h1: gpu:k80:2, h2: gpu:v100:2)
  slurm_2205_dbd  session: Slurm 22.05 cluster "gimbaldbd" (d1, d2: gpu:4) with slurmdbd + MariaDB
                  (sacct history; users alice and bob have associations)
  slurm_2605      session: Slurm 26.05 cluster "gimbal26" in the sid chroot (pyslurm available
                  there; commands run through tests/slurm/in-chroot.sh)
  slurm_2605_het  session: Slurm 26.05 cluster "gimbal26het" in the same chroot (h1: gpu:k80:2,
                  h2: gpu:v100:2)
  slurm_cluster   session, parametrized over 22.05 and 26.05
  clean_slurm     function: cancels leftover jobs on every cluster this session has brought up,
                  before and after the test

Each cluster fixture brings its cluster up when running as root (idempotent), else uses a
running one. If that is impossible the test is skipped with the reason; with
GIMBAL_REQUIRE_SLURM=1 (CI) it fails instead. Inside the 26.05 chroot (tests/slurm/in-chroot.sh)
the 22.05 fixtures always skip: those clusters live on the host.
"""
from __future__ import annotations

import os
from typing import Dict

import pytest

from tests.slurm.cluster import (ClusterNotApplicable, ClusterUnavailable, SlurmCluster,
                                 ensure_cluster)

_ACTIVE: Dict[str, SlurmCluster] = {}
_LOCK = None  # filelock held for the whole pytest session once a cluster is used
_FAILED: Dict[str, str] = {}
_NA: Dict[str, str] = {}


def slurm_unavailable(reason: str) -> None:
    """Skip, or fail when GIMBAL_REQUIRE_SLURM=1."""
    if os.environ.get("GIMBAL_REQUIRE_SLURM") == "1":
        pytest.fail(f"GIMBAL_REQUIRE_SLURM=1 but the Slurm test cluster is unavailable: "
                    f"{reason}", pytrace=False)
    pytest.skip(f"Slurm test cluster unavailable: {reason}")


def _hold_machine_lock() -> None:
    """The test clusters are machine-wide (fixed ports, shared spool): two pytest sessions
    using them at once cancel each other's jobs.  The first session to use a cluster holds
    /tmp/gimbal-slurm-tests.lock until it exits; others wait for it, saying so."""
    global _LOCK
    if _LOCK is not None:
        return
    from filelock import FileLock, Timeout
    lock = FileLock(os.environ.get("GIMBAL_SLURM_LOCK", "/tmp/gimbal-slurm-tests.lock"))
    try:
        lock.acquire(timeout=1)
    except Timeout:
        print("\n[tests/slurm] another pytest session is using the Slurm test clusters; "
              "waiting for /tmp/gimbal-slurm-tests.lock", flush=True)
        lock.acquire(timeout=3600)
    _LOCK = lock


def _get(key: str) -> SlurmCluster:
    _hold_machine_lock()
    if key in _NA:
        pytest.skip(_NA[key])
    if key in _FAILED:
        slurm_unavailable(_FAILED[key])
    if key not in _ACTIVE:
        try:
            c = ensure_cluster(key)
            c.cancel_all()
        except ClusterNotApplicable as e:
            _NA[key] = str(e)
            pytest.skip(str(e))
        except (ClusterUnavailable, TimeoutError, OSError) as e:
            _FAILED[key] = str(e)
            print(f"\n[tests/slurm] cluster {key} unavailable: {e}")
            slurm_unavailable(str(e))
        _ACTIVE[key] = c
    return _ACTIVE[key]


@pytest.fixture(scope="session")
def slurm_2205() -> SlurmCluster:
    return _get("2205")


@pytest.fixture(scope="session")
def slurm_2205_mps() -> SlurmCluster:
    return _get("2205mps")


@pytest.fixture(scope="session")
def slurm_2205_het() -> SlurmCluster:
    return _get("2205het")


@pytest.fixture(scope="session")
def slurm_2205_dbd() -> SlurmCluster:
    return _get("2205dbd")


@pytest.fixture(scope="session")
def slurm_2605() -> SlurmCluster:
    return _get("2605")


@pytest.fixture(scope="session")
def slurm_2605_het() -> SlurmCluster:
    return _get("2605het")


@pytest.fixture(scope="session", params=["22.05", "26.05"])
def slurm_cluster(request) -> SlurmCluster:
    return _get({"22.05": "2205", "26.05": "2605"}[request.param])


@pytest.fixture
def clean_slurm():
    """Cancel leftover jobs (before and after the test) on every cluster brought up so far.
    Request it after the cluster fixture: ``def test_x(slurm_2205, clean_slurm)``."""
    for c in list(_ACTIVE.values()):
        c.cancel_all()
    yield
    for c in list(_ACTIVE.values()):
        try:
            c.cancel_all()
        except TimeoutError as e:  # pragma: no cover - reported, not fatal for the next test
            print(f"\n[tests/slurm] cleanup on {c.name}: {e}")
