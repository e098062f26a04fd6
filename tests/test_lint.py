"""The tree stays pyflakes-clean: no unused imports or variables, no undefined names, no
f-strings without placeholders (pyflakes is pinned in requirements-dev.txt)."""
import io
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DIRS = ("policies", "gimbalctl", "launcher", "slurm_hooks", "bench", "examples", "tests")


def test_pyflakes_clean():
    api = pytest.importorskip("pyflakes.api", reason="pyflakes is installed by requirements-dev.txt")
    from pyflakes.reporter import Reporter
    out, err = io.StringIO(), io.StringIO()
    n = api.checkRecursive([str(ROOT / d) for d in DIRS if (ROOT / d).is_dir()],
                           Reporter(out, err))
    assert n == 0 and not err.getvalue(), out.getvalue() + err.getvalue()
