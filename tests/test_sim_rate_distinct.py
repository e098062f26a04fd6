"""The simulator times an evenly split job from one worker per distinct set of jobs on its
GPUs (``Simulator._distinct``): at every rate the engine computes in simulator runs of
sharing policies, the rate equals the one from every worker, bit for bit."""
from __future__ import annotations

import pytest

from gimbalctl.sim import SimConfig
from gimbalctl.sim.engine import Simulator
from policies.model import Node

from tests.test_sim_kept_free import MODELS, _jobs
from tests.test_sim_records import Probe


class Checked(Simulator):
    """Computes every rate twice: through ``_distinct`` and over every worker."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.rates = self.fewer = 0

    def _rate(self, rec):
        fast = super()._rate(rec)
        seen = []
        orig = Simulator._distinct

        def every(rec_, workers):
            seen.append(len(list(orig(self, rec_, workers))) < len(workers))
            return workers

        self._distinct = every  # the instance attribute shadows the method
        try:
            full = super()._rate(rec)
        finally:
            del self._distinct
        assert fast == full, (rec.spec.id, fast, full)
        self.rates += 1
        self.fewer += any(seen)
        return fast


@pytest.mark.parametrize("name,n", [("sjf-bsbf", 70), ("gandiva", 70), ("gavel", 70),
                                    ("gandiva+gimbal", 40)])
def test_rate_from_distinct_workers_equals_every_worker(name, n):
    # gavel and gandiva+gimbal start jobs with MPS shares; the others time-slice
    nodes = (Node("b", 8), Node("a", 4), Node("d", 8))
    sim = Checked(_jobs(n), nodes, Probe(name), MODELS, SimConfig(interval=120.0))
    res = sim.run()
    assert res.jobs.end.notna().all()
    assert sim.rates > 40 and sim.fewer > 5  # the shortcut was taken, and checked


def test_uneven_partner_or_two_types_time_every_worker():
    nodes = (Node("a", 4), Node("b", 4))
    sim = Simulator(_jobs(4), nodes, Probe("fifo"), MODELS, SimConfig())
    rec, other = (sim.recs[j.id] for j in _jobs(4)[:2])
    ws = tuple(range(4))
    rec.partners = frozenset({other.spec.id})
    other.uniform = False
    assert sim._distinct(rec, ws) is ws  # an uneven partner: its shares differ by GPU
    other.uniform = True
    sim.types = {"x", "y"}
    assert sim._distinct(rec, ws) is ws  # two GPU types: speeds differ by GPU
