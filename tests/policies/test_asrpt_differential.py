"""A-SRPT's incremental instance Ã1 (memoised facts and history items, busy periods of the
virtual SRPT reused across calls: policies.asrpt_core.IncrementalSrpt) returns exactly the
Plans of the straightforward implementation kept in reference_asrpt.py: same actions, order,
infeasible list and every reason's code, text and numbers, on every policy call of simulator
runs (history before the run, random-forest refits, A-SRPT-Perfect, a loaded cluster with
communication-heavy delays) and on random snapshot sequences (hypothesis); and the virtual
SRPT alone equals virtual_srpt on random call sequences."""
from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import policies
from gimbalctl.cluster import parse_cluster
from gimbalctl.predictor import refitter
from gimbalctl.profiles import default_models
from gimbalctl.sim import SimConfig, simulate
from policies.asrpt_core import IncrementalSrpt, virtual_srpt
from policies.model import ClusterSnapshot, FinishedJob, Job
from policies.pipeline import MODELS, configurations
from reference_asrpt import RefASrpt, RefASrptPerfect
from reference_asrpt import virtual_srpt as ref_virtual_srpt

MODELS_ = default_models()
REFS = {"a-srpt": RefASrpt, "a-srpt-perfect": RefASrptPerfect}


def assert_same(plan, ref):
    assert plan.policy == ref.policy
    assert plan.actions == ref.actions
    assert plan.order == ref.order
    assert plan.infeasible == ref.infeasible
    assert plan.reasons.keys() == ref.reasons.keys()
    for jid, r in ref.reasons.items():
        p = plan.reasons[jid]
        assert (p.code, p.text, p.numbers) == (r.code, r.text, r.numbers), jid


class Differential:
    """Runs the package's policy and the reference on every snapshot the simulator makes."""

    pipeline_models = True

    def __init__(self, name, **kw):
        self.inner, self.ref = policies.get_policy(name, **kw), REFS[name](**kw)
        self.name, self.preemptive = name, False
        self.needs_lengths = self.inner.needs_lengths
        self.calls, self.codes = 0, Counter()

    def schedule(self, snap):
        plan = self.inner.schedule(snap)
        assert_same(plan, self.ref.schedule(snap))
        self.calls += 1
        self.codes.update(r.code.value for r in plan.reasons.values())
        return plan


def _table1_jobs(n, seed, span, groups=12):
    """Table I jobs in recurring groups; a few very long ones keep Ã1's window open."""
    rng = np.random.default_rng(seed)
    kinds = []
    for g in range(groups):
        gpus = int(rng.choice([1, 1, 2, 4, 8, 16]))
        fits = [m for m in sorted(MODELS) if configurations(m, gpus)]
        model = fits[int(rng.integers(len(fits)))]
        cfg = configurations(model, gpus)
        kinds.append((f"g{g}", gpus, model, int(cfg[int(rng.integers(len(cfg)))])))
    jobs, hist = [], []
    for i in range(n):
        grp, gpus, model, stages = kinds[int(rng.integers(groups))]
        iters = float(rng.lognormal(6, 1.5)) * (50 if rng.random() < 0.03 else 1)
        t = float(rng.uniform(0, span))
        jobs.append(Job(f"j{i}", t, gpus, model, MODELS[model].batch, user=f"u{i % 3}",
                        total_iters=iters, group_id=grp, stages=stages))
        if i % 2 == 0:  # history: earlier runs of the same groups
            hist.append(FinishedJob(f"h{i}", f"u{i % 3}", -t - 10, -t - 10, -t + 500, gpus, model,
                                    "", grp, iters * float(rng.uniform(0.5, 1.5)),
                                    MODELS[model].batch))
    return jobs, hist


@pytest.mark.parametrize("name,cluster,pred,seed", [
    ("a-srpt", "4x8", "rf", 0),            # loaded: queueing, line-25 blocking, delays
    ("a-srpt", "16x8", "rf", 1),           # light: Ã1 waiting only, long busy periods reused
    ("a-srpt", "4x8", "mean", 2),
    ("a-srpt-perfect", "4x8", None, 3),
    ("a-srpt-perfect", "16x8", None, 4),
])
def test_recorded_simulator_snapshots(name, cluster, pred, seed):
    jobs, hist = _table1_jobs(160, seed, span=10_000 if cluster == "4x8" else 40_000)
    pol = Differential(name)
    kw = {}
    if pred is not None:
        kw = dict(prior_history=hist, refit=refitter(pred, seed), refit_every=3 * 3600)
    simulate(jobs, parse_cluster(cluster), pol, MODELS_, SimConfig(interval=60.0, seed=seed), **kw)
    assert pol.calls > 100
    assert pol.codes["started"] == len(jobs)
    assert pol.codes["wait_order"] > 0
    assert pol.inner._srpt.reused > 0  # the reuse path is exercised
    if cluster == "4x8":
        assert pol.codes["wait_resources"] > 0


class Fixed:
    unit, kind = "iterations", "fixed"

    def __init__(self, table):
        self.table = table

    def predict(self, job):
        return self.table.get(job.group_id, 0.0)

    def source(self, job):
        return "rf" if job.group_id in self.table else "unseen-group"


@st.composite
def _sequence(draw):
    """A run of snapshots: jobs arrive, start, finish into the history; the predictor
    object changes now and then (a refit)."""
    nodes = tuple(parse_cluster(draw(st.sampled_from(["2x8", "3x4", "1x8"]))))
    n = draw(st.integers(1, 14))
    apps = ["vgg19", "resnet152", "bert_large", "gpt_6.7b"]
    jobs = []
    for i in range(n):
        app = draw(st.sampled_from(apps))
        gpus = draw(st.sampled_from([1, 2, 4, 8]))
        cfg = configurations(app, gpus) or (1,)
        jobs.append(Job(f"j{i}", float(draw(st.integers(0, 40))) * draw(st.sampled_from([1, 10])),
                        gpus, app, MODELS[app].batch,
                        total_iters=float(draw(st.sampled_from([0, 1, 5, 50, 500]))),
                        group_id=f"g{draw(st.integers(0, 3))}",
                        stages=int(draw(st.sampled_from(cfg)))))
    steps = draw(st.lists(st.tuples(st.integers(0, 300), st.integers(0, n - 1), st.booleans(),
                                    st.sampled_from([None, 0.0, 10.0, 1e3])), min_size=1, max_size=12))
    return nodes, jobs, steps


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_sequence(), st.sampled_from(["a-srpt", "a-srpt-perfect"]))
def test_random_snapshot_sequences(seq, name):
    nodes, jobs, steps = seq
    inner, ref = policies.get_policy(name), REFS[name]()
    free = tuple(g for nd in nodes for g in nd.gpus())
    now, hist, pred = 0.0, [], {}
    active = {j.id: j for j in jobs}
    for dt, k, finish, scale in steps:
        now += dt
        jid = f"j{k}"
        if finish and jid in active:  # the job leaves for the history (a new record object)
            j = active.pop(jid)
            hist.append(FinishedJob(j.id, "u", j.submit_time, j.submit_time, now, j.num_gpus,
                                    j.app, "", j.group_id, j.total_iters, j.global_batch))
        if scale is not None:  # a refit: a new predictor object
            pred = {"iterations": Fixed({f"g{g}": scale * (g + 1) for g in range(3)})}
        vis = {i: j for i, j in active.items() if j.submit_time <= now}
        snap = ClusterSnapshot(now, nodes, vis, {}, free, MODELS_.profiles, MODELS_.memory,
                               MODELS_.interference, history=tuple(hist), predictors=pred)
        assert_same(inner.schedule(snap), ref.schedule(snap))


def test_incremental_srpt_equals_virtual_srpt_on_call_sequences():
    """Items added, removed and changed between calls (zero lengths, ties, float
    releases), as Ã1's window changes from call to call."""
    reused = 0
    for seed in range(400):
        rng = random.Random(seed)
        inc, cur = IncrementalSrpt(), []
        for _ in range(15):
            for _ in range(rng.randint(0, 5)):
                k = f"j{rng.randint(0, 40)}"
                cur = [x for x in cur if x[0] != k]
                cur.append((k, float(rng.choice([rng.randint(0, 30), rng.random() * 30])),
                            float(rng.choice([0, rng.randint(0, 6), rng.random() * 5]))))
            if cur and rng.random() < 0.5:
                cur.pop(rng.randrange(len(cur)))
            items = list(cur)
            rng.shuffle(items)
            assert inc(items) == ref_virtual_srpt(items) == virtual_srpt(items)
        reused += inc.reused
    assert reused > 1000
    # duplicate keys (two history records with one id): the plain loop, same result
    dup = [("a", 0.0, 3.0), ("a", 1.0, 1.0), ("b", 0.5, 2.0)]
    assert IncrementalSrpt()(dup) == virtual_srpt(dup)
