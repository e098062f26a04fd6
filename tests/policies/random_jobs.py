"""Random generic-trace jobs for the tests (one definition each): ``random_jobs`` for the
packing-host differential tests (test_pack_differential.py, test_gimbal_walk_differential.py,
test_pack_misses.py), ``plain_jobs`` for the simulator tests (tests/conftest.py makes this
module importable from every test)."""
from __future__ import annotations

from gimbalctl.profiles import APPS, default_models
from policies.model import Job

MODELS = default_models()


def random_jobs(n, seed, gpus=(1, 1, 1, 2, 2, 4, 8)):
    """``n`` jobs submitted in [0, 3000) s with random apps, GPU counts from ``gpus``, lengths
    of 50-5000 iterations and, for two jobs in three, a deadline 1-4 x their length away."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        app = APPS[int(rng.integers(len(APPS)))]
        g = int(gpus[int(rng.integers(len(gpus)))])
        t = float(rng.uniform(0, 3000))
        it = float(rng.uniform(50, 5000))
        out.append(Job(id=f"j{i}", submit_time=t, num_gpus=g, app=app,
                       global_batch=MODELS.iters_table[app][0][0] * g, total_iters=it,
                       deadline=(t + float(rng.uniform(1, 4)) * it) if i % 3 else None))
    return out


def plain_jobs(n, seed, gpus=(1, 2, 4, 8), span=4000.0, iters=(100.0, 20000.0)):
    """``n`` jobs without deadlines submitted in [0, ``span``) s with random apps, GPU counts
    drawn from ``gpus`` and lengths in ``iters``."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        app = APPS[int(rng.integers(len(APPS)))]
        g = int(rng.choice(list(gpus)))
        out.append(Job(id=f"j{i}", submit_time=float(rng.uniform(0, span)), num_gpus=g, app=app,
                       global_batch=MODELS.iters_table[app][0][0] * g,
                       total_iters=float(rng.uniform(*iters))))
    return out
