"""bench/vs_pollux.py: its parsing, timing and path handling, against a named fake
Pollux checkout (the real one is not part of this repository)."""
from __future__ import annotations

import importlib.util
import math
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("vs_pollux", ROOT / "bench" / "vs_pollux.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


FAKE_POLLUX = '''\
# FAKE Pollux simulator.py for the bench test: reads the workload the way the real
# one does (a path relative to its own folder) and prints its output lines.
import sys
rows = open(sys.argv[1]).read().splitlines()[1:]
assert sys.argv[2:4] == ["--policy", "tiresias"], sys.argv
print("Average JCT: 0")
print("{'a-0': 1.0}")
print("Average JCT:", 1000.0 + len(rows))
'''


def _fake_checkout(base: Path) -> Path:
    sim = base / "pollux" / "simulator"
    (sim / "workloads").mkdir(parents=True)
    (sim / "simulator.py").write_text(FAKE_POLLUX)
    shutil.copy(ROOT / "gimbalctl" / "data" / "traces" / "pollux" / "workload-1.csv",
                sim / "workloads" / "workload-1.csv")
    return sim


def test_avg_jct_is_the_last_final_line():
    b = _bench()
    out = "Average JCT: 0\nCompleted jobs:\n{}\nAverage JCT: 2473.65\njob x demote to Q1\n"
    assert b.pollux_avg_jct(out) == 2473.65
    assert math.isnan(b.pollux_avg_jct("Completed jobs:\n"))


def test_timed_run_counts_child_cpu_not_waiting():
    b = _bench()
    busy = "import time\nwhile time.process_time() < 0.3: pass"
    _, wall, cpu = b.timed_run([sys.executable, "-c", busy], ROOT)
    assert cpu >= 0.3 and wall >= 0.3
    _, wall, cpu = b.timed_run([sys.executable, "-c", "import time; time.sleep(0.6)"], ROOT)
    assert wall >= 0.6 and cpu < 0.5


def test_skips_without_checkout(tmp_path, capsys):
    b = _bench()
    assert b.main([]) == 0
    assert b.main(["--pollux", str(tmp_path)]) == 0
    assert capsys.readouterr().out.count("skipped: no Pollux simulator checkout") == 2


def test_relative_checkout_path_runs_both_sides(tmp_path, monkeypatch, capsys):
    b = _bench()
    _fake_checkout(tmp_path)
    monkeypatch.chdir(tmp_path)
    # The folder above simulator/ and relative to the caller's directory, as a user passes it.
    assert b._sim_dir(Path("pollux")) == (tmp_path / "pollux" / "simulator").resolve()
    assert b.main(["--pollux", "pollux", "--workloads", "1",
                   "--pollux-python", sys.executable]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| 1 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert float(cells[7]) == 1160.0          # the fake's final line: 1000 + 160 jobs
    assert 0 < float(cells[8]) < 1e6          # gimbal's Tiresias average JCT, seconds
    assert "wall: gimbal" in out and "CPU: gimbal" in out and "load average" in out
    # both sides' own source byte-compiled before timing (as installed packages are)
    assert list((tmp_path / "pollux" / "simulator" / "__pycache__").glob("simulator.*.pyc"))
    assert list((ROOT / "gimbalctl" / "__pycache__").glob("traces.*.pyc"))
    assert "byte-compiled first" in out
