"""A PostgreSQL server for tests: ``ensure_postgres() -> url``.

    from tests.services.pg import ensure_postgres
    url = ensure_postgres()          # "postgresql://gimbal@127.0.0.1:55432/gimbal_test"

As root it runs tests/services/postgres.sh (installs postgresql with apt if needed, starts a
private server on 127.0.0.1:55432, creates the database; idempotent, a few seconds). Not root:
uses GIMBAL_PG_URL if set, else a server already answering on that port. If there is none, the
calling test is skipped with the reason; with GIMBAL_REQUIRE_PG=1 (CI) it fails instead.
Needs a driver in the test environment for SQLAlchemy (psycopg2, extra ``postgres``).
"""
from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path
from typing import Optional

SCRIPT = Path(__file__).resolve().parent / "postgres.sh"
_cached: Optional[str] = None
_failed: Optional[str] = None


def _unavailable(reason: str):
    import pytest
    if os.environ.get("GIMBAL_REQUIRE_PG") == "1":
        pytest.fail(f"GIMBAL_REQUIRE_PG=1 but PostgreSQL is unavailable: {reason}", pytrace=False)
    pytest.skip(f"PostgreSQL unavailable: {reason}")


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def start_postgres(timeout: float = 300) -> str:
    """Run postgres.sh and return the URL (raises RuntimeError with the reason)."""
    if os.geteuid() != 0:
        raise RuntimeError("not root: cannot start PostgreSQL (set GIMBAL_PG_URL, or run "
                           f"sudo bash {SCRIPT})")
    try:
        proc = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{SCRIPT} timed out after {timeout}s") from None
    url = proc.stdout.strip().splitlines()[-1:] if proc.stdout.strip() else []
    if proc.returncode != 0 or not url or not url[0].startswith("postgresql://"):
        raise RuntimeError(f"{SCRIPT} failed (rc={proc.returncode}): "
                           f"{(proc.stderr or proc.stdout).strip()[-2000:]}")
    return url[0]


def ensure_postgres() -> str:
    """URL of a running test PostgreSQL; skip (or fail with GIMBAL_REQUIRE_PG=1) otherwise.
    Call it from a test or fixture."""
    global _cached, _failed
    if _cached:
        return _cached
    if os.environ.get("GIMBAL_PG_URL"):
        _cached = os.environ["GIMBAL_PG_URL"]
        return _cached
    if _failed:
        _unavailable(_failed)
    port = int(os.environ.get("GIMBAL_PG_PORT", "55432"))
    try:
        _cached = start_postgres()
    except RuntimeError as e:
        if _port_open(port):
            _cached = f"postgresql://gimbal@127.0.0.1:{port}/" \
                      f"{os.environ.get('GIMBAL_PG_DB', 'gimbal_test')}"
            return _cached
        _failed = str(e)
        _unavailable(_failed)
    return _cached
