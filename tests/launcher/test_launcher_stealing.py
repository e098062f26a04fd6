import os
import random

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from launcher_testutil import end_gloo_worker

from launcher.accum import GradientAccumulator
from launcher.stealing import (Rebalancer, StealingBatchSampler, StealingController,
                               empty_safe_collate, liss_loss, split_shares)


# ---------------------------------------------------------------- shares
def test_split_shares():
    assert split_shares(32, [3, 1]) == [24, 8]
    assert split_shares(10, [1, 1, 1]) == [4, 3, 3]
    assert split_shares(5, [0, 0]) == [3, 2]
    assert split_shares(10, [1, 0, 0], min_share=1) == [8, 1, 1]
    assert sum(split_shares(7, [0.2, float("nan"), 5.0])) == 7


# ---------------------------------------------------------------- sampler
def _lockstep_epoch(n, gb, world, share_seq, epoch=0, seed=3):
    samplers = [StealingBatchSampler(n, gb, r, world, seed=seed) for r in range(world)]
    for s in samplers:
        s.set_epoch(epoch)
    its = [iter(s) for s in samplers]
    seen, step = [], 0
    while True:
        shares = share_seq[step % len(share_seq)]
        for s in samplers:
            s.set_shares(shares)
        batches = [next(it, None) for it in its]
        if batches[0] is None:
            assert all(b is None for b in batches)
            return seen
        for b in batches:
            seen.extend(b)
        step += 1


@settings(max_examples=120, deadline=None)
@given(st.integers(1, 6), st.integers(1, 24), st.integers(0, 120), st.integers(0, 5),
       st.lists(st.lists(st.floats(0, 10), min_size=6, max_size=6), min_size=1, max_size=6))
def test_every_sample_exactly_once(world, gb, n, epoch, weight_seq):
    share_seq = [split_shares(gb, w[:world]) for w in weight_seq]
    seen = _lockstep_epoch(n, gb, world, share_seq, epoch)
    assert sorted(seen) == list(range(n))


def test_shuffle_depends_on_seed_and_epoch():
    a = list(StealingBatchSampler(64, 8, 0, 1, seed=1))
    b = list(StealingBatchSampler(64, 8, 0, 1, seed=1))
    s = StealingBatchSampler(64, 8, 0, 1, seed=1)
    s.set_epoch(1)
    assert a == b and list(s) != a


def test_shares_are_contiguous_slices():
    r0 = StealingBatchSampler(32, 32, 0, 2, shares=[24, 8], shuffle=False)
    r1 = StealingBatchSampler(32, 32, 1, 2, shares=[24, 8], shuffle=False)
    assert list(r0) == [list(range(24))] and list(r1) == [list(range(24, 32))]


def test_resume_from_epoch_step():
    def run(sampler, steps_shares):
        out = []
        it = iter(sampler)
        for sh in steps_shares:
            sampler.set_shares(sh)
            out.append(next(it))
        return out
    n, gb = 100, 8
    plan = [split_shares(gb, [random.Random(i).random() for _ in range(3)]) for i in range(13)]
    ref = StealingBatchSampler(n, gb, 1, 3, seed=5)
    ref.set_epoch(2)
    full = run(ref, plan)
    a = StealingBatchSampler(n, gb, 1, 3, seed=5)
    a.set_epoch(2)
    first = run(a, plan[:6])
    state = a.state_dict()
    assert (state["epoch"], state["step"]) == (2, 6)
    b = StealingBatchSampler(n, gb, 1, 3, seed=5)
    b.load_state_dict(state)
    b.set_epoch(2)  # the usual per-epoch call must not reset a resumed step
    assert first + run(b, plan[6:]) == full
    with pytest.raises(ValueError):
        StealingBatchSampler(n, 16, 1, 3, seed=5).load_state_dict(state)


def test_empty_share_collate():
    ds = torch.utils.data.TensorDataset(torch.randn(10, 3), torch.arange(10))
    s = StealingBatchSampler(10, 10, 1, 2, shares=[10, 0])
    dl = torch.utils.data.DataLoader(ds, batch_sampler=s, collate_fn=empty_safe_collate(ds))
    (x, y), = list(dl)
    assert x.shape == (0, 3) and y.shape == (0,)


# ---------------------------------------------------------------- rebalancer
@pytest.mark.parametrize("noise", [0.0, 0.05])
def test_rebalancer_converges(noise):
    rng = random.Random(0)
    per_sample, overhead, gb = [0.001, 0.003], 0.0005, 32
    limit = gb / sum(1 / c for c in per_sample)  # both ranks finish together
    reb, shares, times = Rebalancer(gb, 2), [16, 16], []
    for _ in range(15):
        lat = [overhead + s * c * (1 + rng.uniform(-noise, noise)) for s, c in zip(shares, per_sample)]
        shares = reb.update(shares, lat)
        times.append(Rebalancer.predicted_step_time(shares, per_sample))
    assert Rebalancer.predicted_step_time([16, 16], per_sample) / limit > 1.4
    assert all(t / limit <= 1.10 for t in times[4:]), times
    assert abs(shares[0] - 24) <= 1


# ---------------------------------------------------------------- 2-process equivalence
def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 12), nn.Tanh(), nn.Linear(12, 4))


def _data(n=32):
    g = torch.Generator().manual_seed(7)
    return torch.randn(n, 5, generator=g), torch.randint(0, 4, (n,), generator=g)


def _liss_worker(rank, world, init_file, out_dir, share_list):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    torch.set_num_threads(1)
    x, y = _data()
    for shares in share_list:
        ddp = nn.parallel.DistributedDataParallel(_model())
        opt = torch.optim.SGD(ddp.parameters(), lr=0.5)
        sampler = StealingBatchSampler(32, 32, rank, world, shares=shares, seed=1)
        idx = next(iter(sampler))
        opt.zero_grad()
        loss = liss_loss(F.cross_entropy(ddp(x[idx]), y[idx], reduction="sum"), 32, world)
        loss.backward()
        opt.step()
        # the same through the accumulator (sub-batch 5 -> uneven micro-batches)
        ddp2 = nn.parallel.DistributedDataParallel(_model())
        opt2 = torch.optim.SGD(ddp2.parameters(), lr=0.5)
        GradientAccumulator(ddp2, opt2, lambda o, t: F.cross_entropy(o, t, reduction="sum"),
                            sub_batch=5).step(x[idx], y[idx], normalizer=world / 32)
        torch.save({"plain": [p.detach() for p in ddp.module.parameters()],
                    "accum": [p.detach() for p in ddp2.module.parameters()], "n": len(idx)},
                   os.path.join(out_dir, f"{shares[0]}_{shares[1]}_r{rank}.pt"))
    end_gloo_worker()


def test_uneven_shares_equal_uniform_update(tmp_path):
    share_list = [[16, 16], [24, 8], [30, 2], [32, 0]]
    mp.spawn(_liss_worker, args=(2, str(tmp_path / "init"), str(tmp_path), share_list), nprocs=2)
    x, y = _data()
    ref = _model()
    opt = torch.optim.SGD(ref.parameters(), lr=0.5)
    F.cross_entropy(ref(x), y).backward()
    opt.step()
    init = list(_model().parameters())
    for sh in share_list:
        for r in range(2):
            got = torch.load(tmp_path / f"{sh[0]}_{sh[1]}_r{r}.pt")
            assert got["n"] == sh[r]
            for key in ("plain", "accum"):
                for a, b, p0 in zip(got[key], ref.parameters(), init):
                    assert not torch.equal(a, p0)
                    assert torch.allclose(a, b, atol=1e-6, rtol=0), (sh, key, (a - b).abs().max())


def _controller_worker(rank, world, init_file, out_dir):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    sampler = StealingBatchSampler(10_000, 32, rank, world)
    ctl = StealingController(sampler, Rebalancer(32, world, smoothing=1.0))
    it = iter(sampler)
    hist = []
    for _ in range(3):
        idx = next(it)
        ctl.add_latency(len(idx) * (0.003 if rank == 1 else 0.001))  # synthetic: rank 1 3x slower
        hist.append(ctl.end_step(len(idx)))
    torch.save(hist, os.path.join(out_dir, f"h{rank}.pt"))
    end_gloo_worker()


def test_controller_broadcasts_rank0_decision(tmp_path):
    mp.spawn(_controller_worker, args=(2, str(tmp_path / "init"), str(tmp_path)), nprocs=2)
    h0, h1 = torch.load(tmp_path / "h0.pt"), torch.load(tmp_path / "h1.pt")
    assert h0 == h1 and h0[-1] == [24, 8]
