"""Packing misses kept across calls (policies/pack_misses.py): every ask the memo answers is
asked again in full (the memo switched off) on the same round, and must miss too; the
simulator's results are those of a run with the memo switched off everywhere.

The runs are loaded (many more GPUs asked than the cluster has, so classes wait behind
packed hosts call after call) on the three equal-packing hosts, with the fitted MPS
interference table and with the Gavel table (other pairs pass the threshold)."""
from __future__ import annotations

import dataclasses

import pytest

import policies
from gimbalctl.cluster import parse_cluster
from gimbalctl.profiles import default_models
from gimbalctl.sim import SimConfig, simulate
from policies import pack_hosts, pack_index
from policies.pack_misses import KeptMisses

from random_jobs import random_jobs

MODELS = default_models()
GAVEL_ONLY = dataclasses.replace(MODELS.interference, mps=None)
EQUAL = ["gandiva", "gavel", "lucid"]
UNEQUAL = ["gandiva+gimbal", "gavel+gimbal", "lucid+gimbal"]


class _Checked:
    """PackRound.target wrapped: an ask answered from the memo is compared with the full ask."""

    def __init__(self, monkeypatch):
        self.hits = self.asks = self.recorded = 0
        orig = pack_index.PackRound.target
        checker = self

        def target(rnd, job, job_mb=None):
            hs = rnd._state
            misses = hs.misses
            before = misses.hits if misses is not None else 0
            out = orig(rnd, job, job_mb)
            checker.asks += 1
            if misses is not None and misses.hits > before:
                checker.hits += 1
                hs.misses = None  # the full ask on the same round
                try:
                    full = orig(rnd, job, job_mb)
                finally:
                    hs.misses = misses
                assert out is None
                assert full is None, (job.id, job.app, job.num_gpus, full)
            return out

        monkeypatch.setattr(pack_index.PackRound, "target", target)


def _run(name, jobs, cluster, models, **cfg):
    return simulate(jobs, parse_cluster(cluster), policies.get_policy(name), models,
                    SimConfig(**cfg))


def _rows(res):
    return res._rows, res._samples, sorted(res.summary.items())


@pytest.mark.parametrize("name", EQUAL + UNEQUAL)
@pytest.mark.parametrize("table,seed,cluster", [("mps", 1, "2x4"), ("gavel", 2, "2x4"),
                                                ("mps", 3, "1x8")])
def test_kept_misses_are_misses(name, table, seed, cluster, monkeypatch):
    models = MODELS if table == "mps" else dataclasses.replace(MODELS, interference=GAVEL_ONLY)
    jobs = random_jobs(160, seed)
    checked = _Checked(monkeypatch)
    res = _run(name, jobs, cluster, models)
    assert checked.hits > 20, (checked.hits, checked.asks)  # the memo answered, and was checked
    monkeypatch.undo()
    # the same run with the memo switched off (every host state without one)
    monkeypatch.setattr(pack_hosts, "KeptMisses", lambda: None)
    off = _run(name, jobs, cluster, models)
    assert _rows(res) == _rows(off)


@pytest.mark.parametrize("name", UNEQUAL)
def test_unequal_hosts_keep_only_misses_with_no_host_listed(name, monkeypatch):
    """The +gimbal hosts pack unequally: a miss after walking listed hosts is not kept (a
    listed host's component may change without it), one with no host listed is kept and
    answered (each answer is checked against the full ask above)."""
    walked = []
    monkeypatch.setattr(pack_index.PackRound, "_record_miss", lambda *a: walked.append(a))
    recorded = []
    orig = KeptMisses.record
    monkeypatch.setattr(KeptMisses, "record", lambda *a: recorded.append(a) or orig(*a))
    _run(name, random_jobs(160, 1), "2x4", MODELS)
    assert walked == [] and len(recorded) > 5, len(recorded)


def test_sync_reads_the_log():
    """A kept miss is dropped when a running host of the class's GPU count whose pair
    passes the threshold was touched since; all are dropped when the log since was
    dropped; ``blocked`` must be the same; else it holds."""

    class HS:
        def __init__(self):
            self.gen, self.log0, self.log, self.views = 0, 0, [], {}

        def advance(self, touched, views=()):
            self.log.append(set(touched))
            self.views.update(views)
            self.gen += 1

    class View:
        def __init__(self, app, n):
            self.app, self.num_gpus = app, n

    pp = {("a", "b"): 1.2, ("a", "c"): 0.8}.__getitem__
    pp2 = lambda x, y: pp((x, y))  # noqa: E731
    hs, m = HS(), KeptMisses()
    key = ("a", 1.0, 1)
    m.record(hs, key, False)
    assert m.holds(key, False) and not m.holds(key, True)
    hs.advance({"x"})  # not a host now, not listed
    m.sync(hs, pp2, 1.0)
    assert m.holds(key, False)
    hs.advance({"c1", "b2"}, {"c1": View("c", 1), "b2": View("b", 2)})  # below thr / other n
    m.sync(hs, pp2, 1.0)
    assert m.holds(key, False)
    hs.advance({"b1"}, {"b1": View("b", 1)})  # a host that could be listed
    m.sync(hs, pp2, 1.0)
    assert not m.holds(key, False)
    m.record(hs, key, False)
    hs.advance({"b1"}, {"b1": View("b", 1)})  # listed at the miss, touched, still running
    m.sync(hs, pp2, 1.0)
    assert not m.holds(key, False)
    m.record(hs, key, False)
    del hs.views["b1"]
    hs.advance({"b1"})  # finished: no candidate more
    m.sync(hs, pp2, 1.0)
    assert m.holds(key, False)
    m.record(hs, key, False)
    hs.advance({"y"})
    hs.log0, hs.log = hs.gen, []  # the log up to now dropped
    m.sync(hs, pp2, 1.0)
    assert not m.holds(key, False) and m.gen == hs.gen
    # unequal packing lists hosts with n or more GPUs: a touched host with more drops it too
    m.record(hs, key, False)
    hs.advance({"b2"})
    m.sync(hs, pp2, 1.0)
    assert m.holds(key, False)  # equal packing: another GPU count
    m.sync(hs, pp2, 1.0, unequal=True)  # (already synced to this generation)
    assert m.holds(key, False)
    hs.advance({"b2"})
    m.sync(hs, pp2, 1.0, unequal=True)
    assert not m.holds(key, False)
    m.record(hs, ("a", 1.0, 4), False)
    hs.advance({"b2"})
    m.sync(hs, pp2, 1.0, unequal=True)  # a host with fewer GPUs than the class asks
    assert m.holds(("a", 1.0, 4), False)


@pytest.mark.parametrize("gimbal", [False, True])
@pytest.mark.parametrize("seed,cluster", [(5, "2x4"), (6, "1x8")])
def test_kept_slow_pairs(gimbal, seed, cluster):
    """Gandiva's introspection verdicts kept from the records (policies/gandiva.py
    ``_slow_pairs``): after every call the kept slow pairs are those a pass over every packed
    pair finds, and the kept path was taken.  (The packing rule passes pairs of a combined
    progress of 1.0 (0.9); introspection here unpacks those below 1.5, so that many do.)"""
    from policies.gandiva import Gandiva

    class Strict(Gandiva):
        name = "gandiva-strict"
        seen = {"kept": 0, "slow": 0, "calls": 0}

        def pair_threshold(self):
            return 0.9 if self.gimbal else 1.0

        def schedule(self, snap):
            before = self.__dict__.get("_pairs")
            plan = super().schedule(snap)
            ctx, verdicts, slow, _ = self._pairs
            pairs = {ids for ids in snap.gpu_jobs.values() if len(ids) == 2}
            want = {}
            for ids in pairs:
                v = self._slow_pair(snap, snap.jobs[ids[0]], snap.jobs[ids[1]])
                if v is not None:
                    want[ids] = v
            assert slow == want
            assert set(verdicts) == pairs
            self.seen["calls"] += 1
            self.seen["kept"] += before is not None and before[2] is slow
            self.seen["slow"] += bool(want)
            return plan

    pol = Strict(gimbal=gimbal)
    pol.threshold = pol.gimbal_threshold = 1.5
    simulate(random_jobs(160, seed), parse_cluster(cluster), pol, MODELS,
             SimConfig(preempt_cost=120.0))
    seen = pol.seen
    assert seen["kept"] > 100 and seen["calls"] - seen["kept"] > 100  # both paths taken
    assert seen["slow"] > 5, seen
