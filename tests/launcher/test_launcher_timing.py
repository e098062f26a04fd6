"""launcher.timing (one timer interface, CUDA events on a GPU) and the host-sync behaviour of
the accumulator.  Every test runs on a CPU-only machine; where CUDA is available the same
tests also check the GPU path (no skips)."""
import time

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from launcher.accum import GradientAccumulator
from launcher.stealing import StealingBatchSampler, StealingController
from launcher.timing import CudaEventTimer, WallTimer, make_timer

CUDA = torch.cuda.is_available()


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_wall_timer_sums_intervals_and_resets():
    c = Clock()
    t = WallTimer(clock=c)
    for dt in (0.5, 0.25):
        t.start()
        c.t += dt
        t.stop()
        c.t += 10.0  # time outside an interval does not count
    assert t.take() == pytest.approx(0.75) and t.take() == 0.0
    t.stop()  # stop without start is ignored
    assert t.take() == 0.0


def test_make_timer_picks_by_device():
    assert isinstance(make_timer("cpu"), WallTimer)
    assert isinstance(make_timer(torch.device("cpu")), WallTimer)
    if CUDA:
        assert isinstance(make_timer("cuda:0"), CudaEventTimer)
    else:  # no CUDA in this process: the default is the wall clock
        assert isinstance(make_timer(), WallTimer)


def _gpu_work(n=2048, reps=20):
    a = torch.randn(n, n, device="cuda")
    for _ in range(reps):
        a = torch.tanh(a @ a)
    return a


def test_controller_timer_measures_the_work_not_the_launch():
    """CPU: the controller's latency is the wall time of the measured block.  CUDA: it is the
    GPU time (close to a synchronised wall measurement), not the host's launch time."""
    sampler = StealingBatchSampler(64, 8, 0, 1)
    ctl = StealingController(sampler, device="cpu")
    with ctl.measure():
        time.sleep(0.05)
    assert ctl.timer.take() >= 0.045
    if CUDA:
        _gpu_work(reps=2)
        torch.cuda.synchronize()
        gctl = StealingController(sampler, device="cuda:0")
        assert gctl.timer.kind == "cuda"
        t0 = time.perf_counter()
        with gctl.measure():
            _gpu_work()
        launch = time.perf_counter() - t0
        torch.cuda.synchronize()
        synced = time.perf_counter() - t0
        gpu = gctl.timer.take()
        assert gpu == pytest.approx(synced, rel=0.3), (gpu, synced, launch)
        assert gpu > launch


def test_end_step_reads_the_timer_once_per_window():
    c = Clock()
    sampler = StealingBatchSampler(64, 8, 0, 1)
    ctl = StealingController(sampler, interval=2, timer=WallTimer(clock=c))
    for _ in range(2):
        with ctl.measure():
            c.t += 0.1
        out = ctl.end_step(8)
    assert out == [8] and ctl.rebalancer.speed == [pytest.approx(16 / 0.2)]
    off = StealingController(sampler, enabled=False, timer=WallTimer(clock=c))
    with off.measure():
        c.t += 1.0
    assert off.timer.take() == 0.0  # disabled: nothing is timed


def _acc(device, accum_steps=4):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    acc = GradientAccumulator(model, opt, lambda o, t: F.cross_entropy(o, t), accum_steps=accum_steps)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(32, 6, generator=g), torch.randint(0, 3, (32,), generator=g)
    return acc, x.to(device), y.to(device)


def test_accumulator_does_not_sync_the_host_per_micro_batch(monkeypatch):
    """``step(sync=False)`` reads no tensor value on the host; ``step()`` reads one per step
    (not one per micro-batch).  On CUDA, torch's sync debug mode 'error' proves it."""
    calls = []
    real_float, real_item = torch.Tensor.__float__, torch.Tensor.item
    monkeypatch.setattr(torch.Tensor, "__float__", lambda t: calls.append("f") or real_float(t))
    monkeypatch.setattr(torch.Tensor, "item", lambda t: calls.append("i") or real_item(t))
    acc, x, y = _acc("cpu")
    lazy = acc.step(x, y, sync=False)
    assert calls == [] and isinstance(lazy, torch.Tensor) and lazy.dim() == 0
    eager = acc.step(x, y)
    assert calls == ["f"] and isinstance(eager, float)
    monkeypatch.undo()
    if CUDA:
        acc, x, y = _acc("cuda:0")
        acc.step(x, y, sync=False)  # warm-up (lazy CUDA initialisation may sync)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            out = acc.step(x, y, sync=False)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        assert out.device.type == "cuda"


def test_lazy_and_eager_losses_agree():
    a, x, y = _acc("cpu")
    b, _, _ = _acc("cpu")
    assert float(a.step(x, y, sync=False)) == pytest.approx(b.step(x, y))
