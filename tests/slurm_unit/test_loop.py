"""``gimbalctl.daemon.loop`` without Slurm: a failing cycle does not end the loop; a signal
during a cycle lets it finish and ends the loop with status 0 (the real-process test against
the 22.05 cluster is tests/slurm/test_daemon_loop.py)."""
import os
import signal

from gimbalctl.config import Config
from gimbalctl.daemon import Exit, loop


def test_failed_cycles_are_retried_and_sigterm_stops_after_the_cycle():
    calls = []

    def cycle():
        calls.append(len(calls) + 1)
        if len(calls) == 1:
            raise RuntimeError("boom")  # an unexpected error in one cycle
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGTERM)  # arrives mid-cycle
            calls.append("after signal")  # ... and the cycle still runs to its end
            return Exit.PARTIAL
        return Exit.SLURM_UNAVAILABLE
    before = signal.getsignal(signal.SIGTERM)
    rc = loop(Config(interval=0.01), cycle)
    assert rc == Exit.OK
    assert calls == [1, 2, 3, "after signal"]
    assert signal.getsignal(signal.SIGTERM) == before  # handlers restored


def test_max_cycles_returns_the_last_status():
    seen = []
    assert loop(Config(interval=0.01), lambda: seen.append(1) or Exit.PARTIAL,
                max_cycles=2) == Exit.PARTIAL
    assert len(seen) == 2
