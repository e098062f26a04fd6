"""Small builders shared by core tests."""
from __future__ import annotations

from policies.model import Job


def make_jobs(specs, app="cifar10", batch=128):
    """specs: iterable of (submit_time, num_gpus, iterations)."""
    return [Job(id=f"j{i}", submit_time=float(t), num_gpus=int(g), app=app,
                global_batch=batch * int(g), total_iters=float(it))
            for i, (t, g, it) in enumerate(specs)]
