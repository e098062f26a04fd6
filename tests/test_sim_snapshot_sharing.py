"""The simulator reuses the last snapshot's job map in place when nothing kept it (no
full copy per call) and copies it when a policy kept the snapshot or its ``jobs``."""
from __future__ import annotations

import numpy as np
import pytest

import policies
from gimbalctl.cluster import parse_cluster
from gimbalctl.profiles import APPS, default_models
from gimbalctl.sim import SimConfig
from gimbalctl.sim.engine import Simulator
from policies.model import Job

MODELS = default_models()


def _jobs(n=80):
    rng = np.random.default_rng(11)
    out = []
    for i in range(n):
        app = APPS[int(rng.integers(len(APPS)))]
        g = int(rng.choice([1, 2, 4]))
        out.append(Job(id=f"j{i}", submit_time=float(rng.uniform(0, 5000)), num_gpus=g, app=app,
                       global_batch=MODELS.iters_table[app][0][0] * g,
                       total_iters=float(rng.uniform(100, 20000))))
    return out


class Probe:
    def __init__(self, name, keep):
        self.inner = policies.get_policy(name)
        self.name, self.preemptive = self.inner.name, self.inner.preemptive
        self.keep, self.kept, self.sim = keep, [], None
        self.reused = 0
        self.last_id = None

    def schedule(self, snap):
        assert dict(snap.jobs) == self.sim.views  # same content as a fresh copy
        assert list(snap.jobs) == list(self.sim.views)  # and the same order
        self.reused += self.sim.snap_jobs is not None and id(self.sim.snap_jobs) == self.last_id
        self.last_id = id(self.sim.snap_jobs)
        if self.keep == "snapshot":
            self.kept.append((snap, dict(snap.jobs)))
        elif self.keep == "jobs":
            self.kept.append((snap.jobs, dict(snap.jobs)))
        return self.inner.schedule(snap)


@pytest.mark.parametrize("name,keep", [("fifo", None), ("tiresias", None), ("sjf-bsbf", None),
                                       ("tiresias", "snapshot"), ("sjf-bsbf", "jobs")])
def test_snapshot_job_map_shared_only_when_unobserved(name, keep):
    probe = Probe(name, keep)
    sim = Simulator(_jobs(), parse_cluster("2x4"), probe, MODELS, SimConfig(interval=120.0))
    probe.sim = sim
    res = sim.run()
    assert res.jobs.end.notna().all()
    calls = res.summary["policy_calls"]
    if keep is None:
        assert probe.reused >= calls - 2  # in place from the second call on
    else:
        assert probe.reused == 0
        for held, content in probe.kept:  # what a policy kept never changed
            jobs = held.jobs if keep == "snapshot" else held
            assert dict(jobs) == content
