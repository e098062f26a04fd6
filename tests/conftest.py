"""Shared test setup.

* The repo root is importable without installing, and so are the shared job generators of
  tests/policies (``random_jobs``) and the benchmarks' state builders (bench/, e.g.
  ``daemon_pass``) from every test.
* ``GIMBAL_FAIL_ON_SKIP=1`` (set by .ci/run) turns any skipped test into a
  failed run: in CI the real Slurm, PostgreSQL and torchrun tests must run.
* ``tests/gpu`` needs an NVIDIA GPU.  On a machine without one (CI's) those tests are
  deselected, not skipped, and the run ends with one line saying how many and why; the
  same code paths run there against the fakes of tests/launcher and tests/hooks.
"""
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT, ROOT / "tests" / "policies", ROOT / "tests" / "gpu", ROOT / "bench"):
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


_GPU_DIR = ROOT / "tests" / "gpu"
_gpu_deselected: list = []


def pytest_collection_modifyitems(config, items):
    gpu = [it for it in items if _GPU_DIR in Path(str(it.fspath)).parents]
    if not gpu:
        return
    from gpu_env import gpu_missing
    why = gpu_missing()
    if why:
        _gpu_deselected[:] = [len(gpu), why]
        config.hook.pytest_deselected(items=gpu)
        ids = {id(it) for it in gpu}
        items[:] = [it for it in items if id(it) not in ids]


def pytest_terminal_summary(terminalreporter):
    if _gpu_deselected:
        n, why = _gpu_deselected
        terminalreporter.write_line(f"tests/gpu: {n} GPU test(s) not run on this machine ({why}); "
                                    "they run where an NVIDIA GPU is (docs/launcher.md)")
