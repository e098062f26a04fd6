import os
import signal
import sys

import pytest

from launcher import checkpoint, worker


@pytest.fixture
def restore():
    old_argv, old_path = sys.argv[:], sys.path[:]
    old_sig = signal.getsignal(signal.SIGUSR2)
    yield
    sys.argv[:], sys.path[:] = old_argv, old_path
    signal.signal(signal.SIGUSR2, old_sig)
    checkpoint.clear()


@pytest.mark.parametrize("body,code", [
    ("import sys; sys.exit(5)", 5),
    ("raise RuntimeError('boom')", 1),
    ("import sys; sys.exit('fatal: message')", 1),
    ("x = 1", 0),
    ("import sys; sys.exit(75)", 75),
])
def test_worker_records_exit_code(tmp_path, monkeypatch, restore, body, code):
    script = tmp_path / "s.py"
    script.write_text(body + "\n")
    monkeypatch.setenv("GIMBAL_RUN_DIR", str(tmp_path))
    monkeypatch.setenv("RANK", "3")
    assert worker.main(["--", str(script)]) == code
    assert (tmp_path / "worker.3.exit").read_text() == str(code)
    assert (tmp_path / "worker.3.pid").read_text() == str(os.getpid())


def test_worker_runs_script_as_main_with_args_and_handler(tmp_path, monkeypatch, restore):
    out = tmp_path / "out.txt"
    script = tmp_path / "s.py"
    script.write_text(
        "import os, signal, sys\n"
        "from launcher import checkpoint\n"
        "os.kill(os.getpid(), signal.SIGUSR2)\n"  # must not kill us: the shim installed the flag handler
        f"open({str(out)!r}, 'w').write(__name__ + ' ' + ' '.join(sys.argv[1:]) + ' ' + "
        "str(checkpoint.checkpoint_requested()))\n")
    monkeypatch.delenv("GIMBAL_RUN_DIR", raising=False)
    assert worker.main([str(script), "--lr", "0.1"]) == 0
    assert out.read_text() == "__main__ --lr 0.1 True"
