"""Daemon cycles ingest launcher reports exactly once and ``explain`` shows the measured
throughput (recorded 22.05/26.05 state; the real-cluster loop test is in tests/slurm)."""
import json
import subprocess
import sys
from pathlib import Path

from gimbalctl.config import Config
from gimbalctl.daemon import run_cycle
from gimbalctl.store import Store
from gimbalctl.store.models import ReportRow
from policies.registry import get_policy

from tests.slurm_unit.replay import jobs_of

REPO = Path(__file__).resolve().parents[2]
NOW = 1_800_000_000.0


def test_cycles_ingest_reports_once_and_explain_shows_measured(release, replay, tmp_path):
    _, be = replay
    r1 = jobs_of(release)["r1"]  # running: app bert on 2 whole GPUs
    state = tmp_path / "state"
    (state / "reports").mkdir(parents=True)
    rep = state / "reports" / f"{r1}.jsonl"
    rep.write_text("".join(json.dumps({"job_id": r1, "ts": 100.0 + i, "step": 10 * i,
                                       "samples_per_s": 100.0 * i, "step_time_s": 0.25}) + "\n"
                           for i in (1, 2, 3)))
    db = str(tmp_path / "g.db")
    st = Store(db)
    st.upgrade()
    cfg = Config(policy="sjf", state_dir=str(state))
    run_cycle(cfg, be, st, get_policy("sjf"), now=NOW)
    run_cycle(cfg, be, st, get_policy("sjf"), now=NOW)  # nothing new: nothing twice
    assert st.count(ReportRow) == 3
    m = st.profiles()["bert"].measured["2"]
    assert (m["n"], m["samples_per_s"], m["jobs"]) == (3, 200.0, [r1])
    with open(rep, "a") as fh:
        fh.write(json.dumps({"job_id": r1, "ts": 104.0, "step": 40, "samples_per_s": 600.0}) + "\n")
    run_cycle(cfg, be, st, get_policy("sjf"), now=NOW)
    assert st.count(ReportRow) == 4
    assert st.profiles()["bert"].measured["2"]["samples_per_s"] == 300.0
    # explain (from the last cycle in the DB) shows the app's measured throughput and the job's
    r = subprocess.run([sys.executable, "-m", "gimbalctl.cli", "explain", r1, "--db", db],
                       capture_output=True, text=True, timeout=60, cwd=str(REPO))
    assert r.returncode == 0, r.stderr
    assert ("measured: bert on 2 GPU(s): 300.0 samples/s (mean of 4 report(s) from 1 job(s)); "
            "this job: 600.0 samples/s at step 40") in r.stdout
    r = subprocess.run([sys.executable, "-m", "gimbalctl.cli", "explain", r1, "--db", db, "--json"],
                       capture_output=True, text=True, timeout=60, cwd=str(REPO))
    meas = json.loads(r.stdout)["inputs"]["measured"]
    assert (meas["samples_per_s"], meas["reports"], meas["gpus"]) == (300.0, 4, "2")
