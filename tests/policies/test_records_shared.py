"""``policies.records.any_shared_gpu`` (kept across calls from the simulator's GPU record)
answers as a scan of the snapshot's whole GPU map does: at every call of simulator runs of
policies that put two jobs on one GPU and of elastic ones, with two runs interleaved (the
kept answer belongs to one run's record), and on snapshots without a usable record."""
from __future__ import annotations

import dataclasses
from types import MappingProxyType

import pytest

import policies
from gimbalctl.cluster import parse_cluster
from gimbalctl.sim.engine import Simulator
from gimbalctl.sim import SimConfig
from policies.records import any_shared_gpu, gpu_record

from tests.test_sim_kept_free import MODELS, _jobs
from policy_probe import PolicyProbe


def scan(snap) -> bool:
    return any(len(on) > 1 for on in snap.gpu_jobs.values())


class Probe(PolicyProbe):
    def __init__(self, name):
        super().__init__(name)
        self.answers = []

    def schedule(self, snap):
        assert gpu_record(snap) is not None
        got = any_shared_gpu(snap)
        assert got == scan(snap)
        # the same GPU map without its record: the full scan's answer
        copy = dataclasses.replace(snap, gpu_jobs=MappingProxyType(dict(snap.gpu_jobs)))
        assert gpu_record(copy) is None and any_shared_gpu(copy) == got
        self.answers.append(got)
        return self.inner.schedule(snap)


@pytest.mark.parametrize("name", ["gandiva", "lucid", "max-min"])
def test_any_shared_gpu_at_every_call(name):
    probe = Probe(name)
    sim = Simulator(_jobs(60), parse_cluster("2x4"), probe, MODELS, SimConfig(interval=60.0))
    sim.run()
    assert len(probe.answers) > 20
    if name != "max-min":  # the packing policies share GPUs at some calls, not at others
        assert set(probe.answers) == {True, False}


def test_two_runs_interleaved():
    """Between two calls of one run, another run's snapshot is asked: its record does not
    extend the first run's (nor the first's it), so the kept set is rebuilt each time, and
    every answer is still the scan's."""
    other = Simulator(_jobs(30), parse_cluster("4x2"), policies.get_policy("fifo"), MODELS,
                      SimConfig(interval=60.0))
    probe = Probe("gandiva")
    calls = []

    def schedule(snap, inner=probe.schedule):
        o = other.snapshot()
        assert gpu_record(o) is not None and any_shared_gpu(o) == scan(o) is False
        calls.append(1)
        return inner(snap)
    probe.schedule = schedule
    Simulator(_jobs(60), parse_cluster("2x4"), probe, MODELS, SimConfig(interval=60.0)).run()
    assert len(calls) > 20 and set(probe.answers) == {True, False}
