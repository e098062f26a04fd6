"""Ticks and rounds answered without a call (``Policy.quiet_until``, gimbalctl/sim/engine.py):
each policy that gives a time (the ``Policy.tick_invariant`` ones, and the packing hosts with
and without GIMBAL), called at every tick the simulator answers so, has no action there, and
a run that answers them is the run that calls the policy at every tick (the same records,
timeline and summary, the policy calls counted alike)."""
from __future__ import annotations

import hashlib
import math

import pytest

import policies
from gimbalctl.cluster import parse_cluster
from gimbalctl.predictor import refitter
from gimbalctl.profiles import default_models
from gimbalctl.sim import SimConfig
from gimbalctl.sim.engine import Simulator
from random_jobs import plain_jobs, random_jobs

MODELS = default_models()
DECLARED = {"fifo", "similarity", "sjf", "sjf-ffs", "spjf", "spwf", "wcs-duration",
            "wcs-subtime", "wcs-workload"}
# the packing hosts: starts by fixed keys; with GIMBAL the coordinator's quiet window
HOSTS = {"gandiva", "gandiva+gimbal", "lucid", "lucid+gimbal", "gavel", "gavel+gimbal"}
# the pre-emptive policies with a quiet-call record (policies/quiet_calls.py)
KEYED = {"srtf", "srsf", "tiresias"}
# A-SRPT: Ã1's next completion, a delayed head's end (policies/a_srpt.py)
ASRPT = {"a-srpt", "a-srpt-perfect"}
# SJF-BSBF: inf when every wait is robust, its bounded marks' time, else -inf (sjf_bsbf.py)
BSBF = {"sjf-bsbf"}


class Checking(Simulator):
    """Calls the policy at every tick; where the simulator would answer without a call, checks
    that the call starts nothing."""

    checked = 0
    late = 0  # calls after a finite time given had passed, nothing else changed
    late_actions = 0  # of those, calls with an action

    def _schedule(self):
        same = self.last_idle and self._unchanged()
        quiet = same and self.now <= self.quiet_until
        if not quiet:
            if same and self.quiet_until > -math.inf:
                self.late += 1
                n = self.policy_calls
                super()._schedule()
                assert self.policy_calls == n + 1
                self.late_actions += not self.last_idle
                return None
            return super()._schedule()
        snap = self.snapshot()
        plan = self.policy.schedule(snap)
        assert not plan.actions, (self.now, plan.actions[:3])
        self.checked += 1
        self.policy_calls += 1
        self.last_idle = True
        self.quiet_until = self.quiet_hint(snap)
        self.apply(plan)


def digest(res) -> str:
    s = res.summary
    return hashlib.sha256(repr((res._rows, res._samples, sorted(s.items()))).encode()).hexdigest()


def test_the_declaring_policies():
    got = {n for n in policies.names() if getattr(policies.get_policy(n), "tick_invariant", False)}
    assert got == DECLARED


def test_the_policies_that_give_a_time():
    """The packing hosts, the keyed pre-emptive policies, A-SRPT and SJF-BSBF (SJF-FFS
    inherits its method and answers ``inf``) override the base's answer (``inf`` for a
    tick-invariant policy, ``-inf``: never, for the others)."""
    from policies.base import Policy
    got = {n for n in policies.names()
           if type(policies.get_policy(n)).quiet_until is not Policy.quiet_until
           and n != "sjf-ffs"}
    assert got == HOSTS | KEYED | ASRPT | BSBF


def _run(cls, name, refit=None, answer=True):
    jobs = plain_jobs(160, 7, gpus=(1, 2, 4, 8), span=6000.0)
    kw = dict(refit=refitter("mean"), refit_every=900.0) if refit else {}
    sim = cls(jobs, parse_cluster("2x4"), policies.get_policy(name), MODELS,
              SimConfig(interval=60.0, sample_every=300.0), **kw)
    if not answer:
        sim.answer_quiet = False
    return sim, sim.run()


def _both(jobs, shape, policy):
    """The checking run (the policy called at every tick, answered ones checked) and the
    answering one, each with fresh jobs (``jobs()``) and policy (``policy()``) on ``shape``:
    ((checking, its result), (simulator, its result))."""
    runs = []
    for cls, answer in ((Checking, False), (Simulator, True)):
        sim = cls(jobs(), parse_cluster(shape), policy(), MODELS,
                  SimConfig(interval=60.0, sample_every=300.0))
        sim.answer_quiet = answer
        runs.append((sim, sim.run()))
    return runs


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
    """A policy that neither declares itself tick-invariant nor gives a time (isolation:
    Gavel's rounds rank by the time each job has received) is called at every round."""
    sim, res = _run(Simulator, "isolation")
    assert sim.quiet_until == -math.inf and sim.quiet_ticks == 0
    assert res.summary["policy_calls"] > 2 * 160  # rounds, not only arrivals and completions


@pytest.mark.parametrize("make,seed,shape", [(plain_jobs, 7, "2x4"), (random_jobs, 3, "2x4"),
                                             (plain_jobs, 11, "4x4"), (random_jobs, 5, "2x8")])
def test_sjf_bsbf_answered_has_no_action_and_changes_no_result(make, seed, shape):
    """SJF-BSBF's Theorem 1 reads the running jobs' remaining time X, and it carries marks
    across calls.  After a walk that started nothing it gives ``inf`` when every wait is
    robust (counts, or marks that hold for every X below the one now), the time its bounded
    marks hold to, else ``-inf``.  Called at every answered tick it starts nothing, and the
    runs are the same."""
    (checking, slow), (sim, fast) = _both(
        lambda: (make(160, seed, gpus=(1, 2, 4, 8), span=6000.0) if make is plain_jobs
                 else make(160, seed)), shape, lambda: policies.get_policy("sjf-bsbf"))
    assert checking.checked == sim.quiet_ticks > 300
    assert fast.summary["policy_calls"] == slow.summary["policy_calls"]
    assert digest(fast) == digest(slow)


def _constrained(ref) -> list:
    """The job ids a bounded mark's constraint names (policies/bsbf_marks.py)."""
    from policies.bsbf_marks import RunRef
    if isinstance(ref, tuple):
        return list(ref)
    if isinstance(ref, RunRef):
        return [gr.occ.job.id for gr in ref.cls.groups[ref.lo:ref.hi]]
    return [gr.occ.job.id for gr in ref.groups]


@pytest.mark.parametrize("make,seed,shape", [(random_jobs, 9, "4x8"), (plain_jobs, 2, "4x8"),
                                             (plain_jobs, 7, "2x4")])
def test_sjf_bsbf_time_given_holds_on_a_fresh_walk(make, seed, shape):
    """After each walk that started nothing, the time SJF-BSBF gives is checked against a
    fresh instance (no order, marks or groups kept) walking the same snapshot at later
    times: no action up to the time given (at half the wait and at its end; for ``inf``, a
    minute, a day and a year on, the running jobs' X down to 0).  Where the time is finite
    it is that of the bounded marks: every constrained job's X (``x_now``, what the next
    call's marks read) is still at least its low there, and at 1.25 times the wait (X falls
    at a rate the snapshot gives) some X is below it: neither late nor far too early."""
    import dataclasses
    from policies.share_index import x_now
    from policies.sjf_bsbf import SjfBsbf

    seen = {"finite": 0, "tight": 0, "inf": 0, "walks": 0}

    def fresh_idle(snap, t):
        seen["walks"] += 1
        plan = SjfBsbf().schedule(dataclasses.replace(snap, now=t))
        assert not plan.actions, (snap.now, t, plan.actions[:2])

    class Recording(SjfBsbf):
        @staticmethod
        def _quiet_time(timed, snap, keep, bounded):
            until = SjfBsbf._quiet_time(timed, snap, keep, bounded)
            if until == math.inf:
                seen["inf"] += 1
                for dt in (60.0, 86400.0, 3.2e7):
                    fresh_idle(snap, snap.now + dt)
            elif until > -math.inf:
                seen["finite"] += 1
                assert until > snap.now and bounded
                fresh_idle(snap, (snap.now + until) / 2.0)
                fresh_idle(snap, until)
                at = dataclasses.replace(snap, now=until)
                later = dataclasses.replace(snap, now=snap.now + 1.25 * (until - snap.now) + 1.0)
                below = False
                for _, cons in bounded.values():
                    for ref, low in cons:
                        for jid in _constrained(ref):
                            x = x_now(at, keep, jid)
                            assert x is not None and x >= low, (snap.now, until, jid, x, low)
                            y = x_now(later, keep, jid)
                            below = below or y is None or y < low
                seen["tight"] += below
            return until

    jobs = make(300, seed, gpus=(1, 2, 4, 8), span=6000.0) if make is plain_jobs \
        else make(300, seed)
    pol = Recording()
    pol.name = "sjf-bsbf"
    sim = Simulator(jobs, parse_cluster(shape), pol, MODELS,
                    SimConfig(interval=60.0, sample_every=300.0))
    sim.run()
    print(seen)
    assert seen["finite"] > 50 and seen["inf"] > 50
    assert seen["tight"] == seen["finite"]


def _keyed(name, **kw):
    return policies.get_policy(name, **kw) if kw else policies.get_policy(name)


@pytest.mark.parametrize("name,kw", [("srtf", {}), ("srsf", {}), ("tiresias", {}),
                                     ("tiresias", {"thresholds": (300.0, 3000.0)})])
def test_a_keyed_policy_answered_has_no_action_and_changes_no_result(name, kw):
    """SRTF, SRSF and Tiresias give the time up to which their quiet-call record answers (no
    running key rises before it): called there, nothing starts or is pre-empted, and the
    runs are the same.  With Tiresias's thresholds low enough to be crossed the time is
    finite: calls after it, nothing else changed, are made, and some of them pre-empt."""
    (checking, slow), (sim, fast) = _both(
        lambda: plain_jobs(160, 7, gpus=(1, 2, 4, 8), span=6000.0), "2x4",
        lambda: _keyed(name, **kw))
    print(name, kw, checking.checked, checking.late, checking.late_actions,
          fast.summary["policy_calls"])
    assert checking.checked == sim.quiet_ticks > 100
    assert fast.summary["policy_calls"] == slow.summary["policy_calls"]
    assert digest(fast) == digest(slow)
    if kw:
        assert checking.late_actions > 0


def test_a_minimum_run_time_gives_no_time():
    """With a minimum run time the keyed policies keep no quiet-call record: every tick is a
    call."""
    sim = Simulator(plain_jobs(60, 7, span=3000.0), parse_cluster("2x4"),
                    policies.get_policy("srtf", min_run_s=600.0), MODELS,
                    SimConfig(interval=60.0, sample_every=300.0))
    sim.run()
    assert sim.quiet_ticks == 0


@pytest.mark.parametrize("name", sorted(HOSTS))
def test_a_host_answered_has_no_action_and_changes_no_result(name):
    """The packing hosts on an overloaded 2x4 (jobs pack and wait; two jobs in three have a
    deadline, which Gandiva's coordination objective reads): the answered ticks and rounds
    have no action when called, and the runs are the same.  With GIMBAL the time given is
    its coordinator's quiet window: calls after it ran out, nothing else changed, are
    made, and some of them resize."""
    (checking, slow), (sim, fast) = _both(lambda: random_jobs(160, 3), "2x4",
                                          lambda: policies.get_policy(name))
    assert checking.checked == sim.quiet_ticks > 1000
    assert fast.summary["policy_calls"] == slow.summary["policy_calls"]
    assert digest(fast) == digest(slow)
    if name.endswith("+gimbal"):
        assert checking.late_actions > 0
    else:  # no window: every call at which nothing changed is answered
        assert checking.late == 0


@pytest.mark.parametrize("name", sorted(ASRPT))
def test_a_srpt_answered_has_no_action_and_changes_no_result(name):
    """A-SRPT gives the time of Ã1's next completion (line 2) or a delayed head's end (line
    20); a head waiting for GPUs gives none.  Called at every answered tick it starts
    nothing, and the runs are the same; with the true lengths (a-srpt-perfect) the times
    are finite and calls after them start jobs."""
    checking, slow = _run(Checking, name, answer=False)
    sim, fast = _run(Simulator, name)
    assert checking.checked == sim.quiet_ticks > 1000
    assert fast.summary["policy_calls"] == slow.summary["policy_calls"]
    assert digest(fast) == digest(slow)
    if name == "a-srpt-perfect":
        assert checking.late_actions > 0
