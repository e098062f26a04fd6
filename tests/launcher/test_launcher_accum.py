import os
import warnings

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn

from launcher_testutil import end_gloo_worker

from launcher.accum import GradientAccumulator, micro_batch_sizes


def _model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))


def _data(n, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 6, generator=g), torch.randint(0, 3, (n,), generator=g)


def _full_step(x, y, lr=0.1, momentum=0.9):
    m = _model()
    opt = torch.optim.SGD(m.parameters(), lr=lr, momentum=momentum)
    opt.zero_grad()
    F.cross_entropy(m(x), y).backward()
    opt.step()
    return m


def test_micro_batch_sizes():
    assert micro_batch_sizes(10, sub_batch=4) == [4, 4, 2]
    assert micro_batch_sizes(8, sub_batch=4) == [4, 4]
    assert micro_batch_sizes(10, accum_steps=4) == [3, 3, 2, 2]
    assert micro_batch_sizes(3, accum_steps=5) == [1, 1, 1]
    assert micro_batch_sizes(7) == [7]
    with pytest.raises(ValueError):
        micro_batch_sizes(4, sub_batch=2, accum_steps=2)


@pytest.mark.parametrize("kw", [dict(sub_batch=5), dict(sub_batch=7), dict(accum_steps=3),
                                dict(sub_batch=1), dict(accum_steps=1)])
def test_accumulation_equals_full_batch(kw):
    x, y = _data(20)
    ref = _full_step(x, y)
    m = _model()
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    acc = GradientAccumulator(m, opt, F.cross_entropy, lr_scheduler=sched, **kw)
    acc.step(x, y)
    for a, b in zip(m.parameters(), ref.parameters()):
        assert torch.allclose(a, b, atol=1e-6, rtol=0), (a - b).abs().max()
    assert sched.last_epoch == 1 and opt.param_groups[0]["lr"] == pytest.approx(0.05)


def test_accumulation_differs_without_scaling():
    """Sanity check that the test above can fail: summing unscaled micro-batch
    mean losses gives a different update."""
    x, y = _data(20)
    ref = _full_step(x, y)
    m = _model()
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    GradientAccumulator(m, opt, lambda o, t: F.cross_entropy(o, t) * 3, sub_batch=7).step(x, y)
    assert not all(torch.allclose(a, b, atol=1e-6) for a, b in zip(m.parameters(), ref.parameters()))


def test_batchnorm_warns_once():
    m = nn.Sequential(nn.Linear(6, 4), nn.BatchNorm1d(4))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    with pytest.warns(RuntimeWarning, match="BatchNorm"):
        acc = GradientAccumulator(m, opt, F.mse_loss, sub_batch=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x = torch.randn(6, 6)
        acc.step(x, torch.zeros(6, 4))
        acc.step(x, torch.zeros(6, 4))


def _ddp_worker(rank, world, init_file, out_dir, local_n, sub_batch):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    torch.set_num_threads(1)
    x, y = _data(local_n * world)
    ddp = nn.parallel.DistributedDataParallel(_model())
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    calls = []
    orig = ddp.no_sync

    def counting_no_sync():
        calls.append(1)
        return orig()
    ddp.no_sync = counting_no_sync
    acc = GradientAccumulator(ddp, opt, F.cross_entropy, sub_batch=sub_batch)
    sl = slice(rank * local_n, (rank + 1) * local_n)
    acc.step(x[sl], y[sl])
    torch.save({"params": [p.detach() for p in ddp.module.parameters()], "no_sync": len(calls)},
               os.path.join(out_dir, f"r{rank}.pt"))
    end_gloo_worker()


def test_accumulation_under_ddp(tmp_path):
    local_n, sub_batch, world = 10, 4, 2  # micro-batches 4, 4, 2 on each rank
    mp.spawn(_ddp_worker, args=(world, str(tmp_path / "init"), str(tmp_path), local_n, sub_batch),
             nprocs=world, join=True)
    x, y = _data(local_n * world)
    ref = list(_full_step(x, y).parameters())
    for r in range(world):
        got = torch.load(tmp_path / f"r{r}.pt")
        assert got["no_sync"] == 2  # all micro-batches but the last
        for a, b in zip(got["params"], ref):
            assert torch.allclose(a, b, atol=1e-6, rtol=0), (a - b).abs().max()
