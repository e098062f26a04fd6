"""Ticks answered without a call (``Policy.tick_invariant``, gimbalctl/sim/engine.py): each
declaring policy, called at every tick the simulator answers so, starts nothing there, and
a run that answers them is the run that calls the policy at every tick (the same records,
timeline and summary, the policy calls counted alike)."""
from __future__ import annotations

import hashlib

import pytest

import policies
from gimbalctl.cluster import parse_cluster
from gimbalctl.predictor import refitter
from gimbalctl.profiles import default_models
from gimbalctl.sim import SimConfig
from gimbalctl.sim.engine import Simulator
from random_jobs import plain_jobs

MODELS = default_models()
DECLARED = {"fifo", "sjf", "spjf", "spwf", "wcs-duration", "wcs-subtime", "wcs-workload"}


class Checking(Simulator):
    """Calls the policy at every tick; where the simulator would answer without a call, checks
    that the call starts nothing."""

    checked = 0

    def _schedule(self):
        quiet = self.last_idle and self._unchanged()
        if not quiet:
            return super()._schedule()
        snap = self.snapshot()
        plan = self.policy.schedule(snap)
        assert not plan.actions, (self.now, plan.actions[:3])
        self.checked += 1
        self.policy_calls += 1
        self.last_idle = True
        self.apply(plan)


def digest(res) -> str:
    s = res.summary
    return hashlib.sha256(repr((res._rows, res._samples, sorted(s.items()))).encode()).hexdigest()


def test_the_declaring_policies():
    got = {n for n in policies.names() if getattr(policies.get_policy(n), "tick_invariant", False)}
    assert got == DECLARED


def _run(cls, name, refit=None, answer=True):
    jobs = plain_jobs(160, 7, gpus=(1, 2, 4, 8), span=6000.0)
    kw = dict(refit=refitter("mean"), refit_every=900.0) if refit else {}
    sim = cls(jobs, parse_cluster("2x4"), policies.get_policy(name), MODELS,
              SimConfig(interval=60.0, sample_every=300.0), **kw)
    if not answer:
        sim.tick_invariant = False
    return sim, sim.run()


@pytest.mark.parametrize("name", sorted(DECLARED))
def test_answered_ticks_start_nothing_and_change_no_result(name):
    checking, slow = _run(Checking, name, answer=False)
    sim, fast = _run(Simulator, name)
    assert checking.checked == sim.quiet_ticks > 100  # (the overloaded 2x4: jobs wait long)
    assert fast.summary["policy_calls"] == slow.summary["policy_calls"]
    assert digest(fast) == digest(slow)
    calls = fast.summary["policy_calls"]
    assert sim.quiet_ticks > calls // 3  # most of a waiting queue's ticks change nothing


@pytest.mark.parametrize("name", ["spjf", "wcs-duration"])
def test_a_refit_due_is_a_call(name):
    """With the predictor refit every 900 s a tick at which a refit is due is a call (the
    predictors it hands the policy are new), and the runs are the same."""
    checking, slow = _run(Checking, name, refit=True, answer=False)
    sim, fast = _run(Simulator, name, refit=True)
    assert checking.checked == sim.quiet_ticks > 50
    assert digest(fast) == digest(slow)


def test_an_undeclared_policy_is_called_at_every_tick():
    """srtf ranks by the running jobs' remaining work, which moves with the time: not
    declared, called at every tick."""
    sim, _ = _run(Simulator, "srtf")
    assert not sim.tick_invariant and sim.quiet_ticks == 0
