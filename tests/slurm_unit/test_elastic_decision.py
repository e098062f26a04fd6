"""Seed 001 on Slurm: the launcher decision the daemon writes when an elastic policy starts a
job on k GPUs keeps the global batch exact on every k (accumulation steps chosen so that
sub-batch × steps covers each GPU's share and the shares add up to the global batch), and
gimbal-run's training side applies it as written (``launcher.config`` from the decision's
environment, ``launcher.accum.micro_batch_sizes``)."""
from types import SimpleNamespace

import pytest

from gimbalctl.daemon import _decision_for
from gimbalctl.profiles import default_models
from launcher import config as launcher_config
from launcher.accum import micro_batch_sizes
from launcher.run import decision_env
from policies.base import exclusive_steps
from policies.model import Gpu
from policies.plan import StartJob


@pytest.mark.parametrize("gb", [64, 60, 256])
@pytest.mark.parametrize("k", [1, 2, 4])
@pytest.mark.parametrize("mem_limit_mb", [None, 2000.0])  # 2000 MB: accumulation needed
def test_decision_keeps_the_global_batch_on_any_gpu_count(gb, k, mem_limit_mb):
    m = default_models()
    local = -(-gb // k)
    sub, steps = exclusive_steps(local, m.profiles["cifar10"], m.memory["cifar10"], mem_limit_mb)
    gpus = tuple(Gpu("n1", i) for i in range(k))
    snap = SimpleNamespace(snapshot=SimpleNamespace(jobs={"7": SimpleNamespace(global_batch=gb)}))
    dec = _decision_for(StartJob("7", gpus, sub, steps), SimpleNamespace(job_id="7"), snap, "afs-l")
    assert dec.global_batch == gb and len(dec.workers) == k
    shares = [w["share"] for w in dec.workers]
    assert sum(shares) == gb and max(shares) - min(shares) <= 1
    if gb % k == 0 and local % steps == 0:  # the paper's identity, exactly
        assert sub * steps * k == gb
    # the training side: each rank's micro-batches cover its share in at most `steps` parts
    env = decision_env(dec, k, {})
    cfg = launcher_config(env)
    gbl, sb = cfg.resolve_batch(999, world_size=k)
    assert gbl == gb and cfg.shares(k) == shares
    for rank in range(k):
        mine = cfg.worker(rank, k)
        micro = min(mine["micro_batch"], gbl)
        parts = micro_batch_sizes(shares[rank], micro)
        assert sum(parts) == shares[rank] and len(parts) <= steps
    if mem_limit_mb is not None and gb == 256 and k == 1:
        assert steps > 1  # the case that needs accumulation is exercised
