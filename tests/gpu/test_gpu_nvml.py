"""The launcher's NVML monitor against the REAL NVML on a real GPU (tests/launcher runs the same
monitor against FakeNVML and a stand-in pynvml module)."""
from __future__ import annotations

import os

import pytest

from launcher.monitor import NVMLReader, ThroughputMonitor, open_nvml, visible_device_indices
from launcher.report import ReportWriter, read_reports


def test_reader_sees_this_process_memory():
    torch = pytest.importorskip("torch")
    assert torch.cuda.is_available()
    r = NVMLReader()
    try:
        assert r.device_count() >= 1
        before = r.sample(0)
        assert before.mem_total_mb > 1000 and 0.0 <= before.util_pct <= 100.0
        x = torch.empty(1 << 28, dtype=torch.float32, device="cuda:0")  # 1 GiB
        torch.cuda.synchronize()
        after = r.sample(0)
        assert after.mem_used_mb >= before.mem_used_mb + 900
        assert after.processes.get(os.getpid(), 0.0) >= 1024, after.processes
        del x
    finally:
        r.close()
        r.close()  # idempotent


def test_monitor_reports_real_gpu_fields(tmp_path):
    torch = pytest.importorskip("torch")
    nvml = open_nvml()
    assert nvml is not None
    path = str(tmp_path / "7.jsonl")
    devices = visible_device_indices({"CUDA_VISIBLE_DEVICES": "0"})
    assert devices == [0]
    mon = ThroughputMonitor(ReportWriter(path, "7"), nvml=nvml, devices=devices, every_steps=5)
    a = torch.randn(4096, 4096, device="cuda:0")
    for _ in range(10):
        for _ in range(20):
            a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()
        mon.step_done(64, 0.05)
    mon.close()
    got = read_reports(path)
    assert [r["step"] for r in got] == [5, 10]
    for r in got:
        assert r["samples_per_s"] == pytest.approx(1280.0)
        assert r["mem_used_mb"] > 64 and 0.0 <= r["gpu_util"] <= 100.0
        assert r["proc_mem_mb"] > 64  # NVML's process list names this process's pid
    assert max(r["gpu_util"] for r in got) > 0  # the matmuls kept the GPU busy
