"""bench/scale_philly.py: one run with and without a refitted predictor on the bundled
Pollux workload (the Philly trace itself lives outside the repository), and its check of
``--refit``."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench" / "scale_philly.py"
TRACE = ROOT / "gimbalctl" / "data" / "traces" / "pollux" / "workload-1.csv"


def _one(*extra):
    out = subprocess.run([sys.executable, str(BENCH), "--one", "spjf", "--cluster", "4x8",
                          "--trace", str(TRACE), *extra], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_predictor_changes_what_spjf_sees():
    plain, fitted = _one(), _one("--predictor", "mean", "--refit", "600")
    assert plain["jobs"] == fitted["jobs"] == 160
    assert plain["calls"] > 0 and fitted["calls"] > 0
    # without a predictor SPJF sees no lengths (submit order); the fitted means reorder it
    assert plain["avg_jct_h"] != fitted["avg_jct_h"]


def test_refit_must_be_positive():
    """Checked before the trace is looked for: the same error in a checkout without the
    shared traces folder beside it (the default trace)."""
    out = subprocess.run([sys.executable, str(BENCH), "--refit", "0", "--one", "spjf"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--refit must be > 0 seconds, got 0.0" in out.stderr


def test_a_missing_trace_is_named(tmp_path):
    missing = tmp_path / "nope.csv"
    out = subprocess.run([sys.executable, str(BENCH), "--one", "spjf", "--trace", str(missing)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and f"{missing} not found" in out.stderr


def test_digest_names_the_results():
    """Two runs of one setting give one digest; another setting (the predictor reorders
    SPJF) another."""
    a, b, c = _one(), _one(), _one("--predictor", "mean", "--refit", "600")
    assert len(a["digest"]) == 16 and int(a["digest"], 16) >= 0
    assert a["digest"] == b["digest"] != c["digest"]


def test_migrations_are_counted_for_an_elastic_policy():
    """``--migrations`` counts resizes onto none of the old GPUs: a number for max-min on the
    bundled workload (4x8), the same results as the run without the count, and 0 for a policy
    that never resizes."""
    def run(name, *extra):
        out = subprocess.run([sys.executable, str(BENCH), "--one", name, "--cluster", "4x8",
                              "--trace", str(TRACE), "--limit", "60", "--digest", *extra],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout.strip().splitlines()[-1])
    counted, plain = run("max-min", "--migrations"), run("max-min")
    assert isinstance(counted["migrations"], int) and counted["migrations"] > 0
    assert plain["migrations"] is None
    assert counted["digest"] == plain["digest"]
    assert run("spjf", "--migrations")["migrations"] == 0
