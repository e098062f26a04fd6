"""Shared test setup.

* The repo root is importable without installing, and so are the shared job generators of
  tests/policies (``random_jobs``) and the benchmarks' state builders (bench/, e.g.
  ``daemon_pass``) from every test.
* ``GIMBAL_FAIL_ON_SKIP=1`` (set by .ci/run) turns any skipped test into a
  failed run: in CI the real Slurm, PostgreSQL and torchrun tests must run.
"""
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT, ROOT / "tests" / "policies", ROOT / "bench"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))


def pytest_sessionfinish(session, exitstatus):
    if os.environ.get("GIMBAL_FAIL_ON_SKIP") != "1":
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter else []
    if skipped:
        for rep in skipped:
            reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else rep.longrepr
            print(f"\nSKIPPED (not allowed in CI): {rep.nodeid}: {reason}", file=sys.stderr)
        session.exitstatus = 1
