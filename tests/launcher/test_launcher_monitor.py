import logging
import types

import pytest

from launcher import monitor
from launcher.monitor import FakeNVML, GPUSample, NVMLReader, ThroughputMonitor
from launcher.report import ReportWriter, read_reports


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_monitor_reports_with_fake_nvml(tmp_path):
    fake = FakeNVML([[GPUSample(0, 80.0, 4000.0, 16000.0, {1: 100.0})],
                     [GPUSample(1, 60.0, 2000.0, 16000.0, {})]])
    path = str(tmp_path / "5.jsonl")
    mon = ThroughputMonitor(ReportWriter(path, "5"), nvml=fake, every_steps=4)
    recs = [mon.step_done(64, 0.1) for _ in range(8)]
    assert recs[:3] == [None] * 3 and recs[3] is not None
    assert recs[3]["samples_per_s"] == pytest.approx(640.0)
    assert recs[3]["gpu_util"] == 70.0 and recs[3]["mem_used_mb"] == 6000.0
    mon.close()
    got = read_reports(path)
    assert [r["step"] for r in got] == [4, 8] and got[1]["step_time_s"] == pytest.approx(0.1)
    assert fake.closed


def test_monitor_time_based_without_nvml():
    clock = Clock()
    mon = ThroughputMonitor(None, nvml=None, every_s=30.0, clock=clock)
    clock.t = 10.0
    assert mon.step_done(10, 1.0) is None
    clock.t = 31.0
    rec = mon.step_done(10, 1.0)
    assert rec["samples_per_s"] == pytest.approx(10.0) and "gpu_util" not in rec


def test_open_nvml_absent_logs_once(monkeypatch, caplog):
    def fail():
        raise RuntimeError("NVML Shared Library Not Found")
    monkeypatch.setattr(monitor, "NVMLReader", fail)
    monkeypatch.setattr(monitor, "_nvml_warned", False)
    with caplog.at_level(logging.WARNING, logger="gimbal.monitor"):
        assert monitor.open_nvml() is None and monitor.open_nvml() is None
    assert len([r for r in caplog.records if "GPU monitoring disabled" in r.message]) == 1


def test_real_reader_code_path_with_stub_pynvml(monkeypatch):
    """Drives NVMLReader's real code against a stand-in pynvml module."""
    class NVMLError(Exception):
        pass
    calls = []
    stub = types.SimpleNamespace(
        NVMLError=NVMLError,
        nvmlInit=lambda: calls.append("init"),
        nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: ("h", i),
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=55, memory=10),
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=2 * 2**30, total=16 * 2**30),
        nvmlDeviceGetComputeRunningProcesses=lambda h: [types.SimpleNamespace(pid=42, usedGpuMemory=2**29),
                                                        types.SimpleNamespace(pid=43, usedGpuMemory=None)],
    )
    monkeypatch.setitem(__import__("sys").modules, "pynvml", stub)
    r = NVMLReader()
    s = r.sample(0)
    assert (s.util_pct, s.mem_used_mb, s.mem_total_mb) == (55.0, 2048.0, 16384.0)
    assert s.processes == {42: 512.0, 43: 0.0} and r.device_count() == 1
    r.close()
    r.close()
    assert calls == ["init", "shutdown"]


def test_real_nvml_unavailable_here_raises_runtime_error():
    try:
        NVMLReader().close()
    except RuntimeError as exc:
        assert "NVML" in str(exc) or "pynvml" in str(exc)
