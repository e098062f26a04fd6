"""bench/daemon_pass.py on a small state: the daemon's call (``decide``) and, with
``--plain``, the bare ``schedule`` beside it, in the table the benchmark prints."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench" / "daemon_pass.py"


def _run(*extra):
    out = subprocess.run([sys.executable, str(BENCH), "--nodes", "4", "--running", "6",
                          "--pending", "12", "--repeat", "1", "--policies", "fifo", "sjf-bsbf",
                          *extra], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr + out.stdout
    return [ln for ln in out.stdout.splitlines() if ln.startswith("| ")]


def test_plain_adds_the_bare_call_and_its_ratio():
    head, *rows = _run("--plain")
    assert head.endswith("| bare call CPU (s) | decide / bare |")
    rows = [r for r in rows if not r.startswith("|---")]
    assert [r.split("|")[1].strip() for r in rows] == ["fifo", "sjf-bsbf"]
    for r in rows:
        cells = [c.strip() for c in r.strip("|").split("|")]
        assert len(cells) == 12 and cells[9] == "yes"
        # a tiny state's calls may take no measurable CPU time (the bare one: no ratio,
        # "n/a", not a crash); the ratio is what the two CPU times give
        assert float(cells[10]) >= 0
        assert cells[11] == "n/a" or float(cells[11]) >= 0
    head, *rows = _run()
    assert head.endswith("| target < 1 CPU-s, < 500 MB |")
    assert all(len(r.strip("|").split("|")) == 10 for r in rows if not r.startswith("|---"))
