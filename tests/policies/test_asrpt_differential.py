"""A-SRPT's incremental instance Ã1 (memoised facts and history items, the window kept
across calls from the simulator's change records and re-simulated only around what
changed: policies.asrpt_window.A1Window) returns exactly the
Plans of the straightforward implementation kept in reference_asrpt.py: same actions, order,
infeasible list and every reason's code, text and numbers, on every policy call of simulator
runs (history before the run, random-forest refits, A-SRPT-Perfect, a loaded cluster with
communication-heavy delays) and on random snapshot sequences with and without change
records (hypothesis); and the kept window alone equals virtual_srpt on random edit
sequences."""
from __future__ import annotations

import dataclasses
import random
from collections import Counter
from types import MappingProxyType

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import policies
from gimbalctl.cluster import parse_cluster
from gimbalctl.predictor import refitter
from gimbalctl.profiles import default_models
from gimbalctl.sim import SimConfig, simulate
from policies.asrpt_core import virtual_srpt
from policies.asrpt_window import A1Window
from policies.model import ClusterSnapshot, FinishedJob, Frozen, Job, JobChanges, WaitingQueue
from policies.pipeline import MODELS, configurations
from reference_asrpt import RefASrpt, RefASrptPerfect

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
        self.calls, self.codes, self.window = 0, Counter(), 0

    def schedule(self, snap):
        plan = self.inner.schedule(snap)
        self.window += len(self.inner._win)
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
    win = pol.inner._win
    assert win.updates > pol.calls // 2  # most calls bring the kept window up to date
    assert win.simulated < pol.window / 3  # ... re-simulating a part of it
    assert pol.inner.sorted_calls <= pol.inner.full_calls + 1  # the kept waiting order
    print(name, cluster, pol.calls, "calls", pol.inner.full_calls, "full", win.updates,
          "updates", win.simulated, "items re-simulated", win.built, "built", pol.window, "window items")
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


@st.composite
def _changes(draw):
    """A run of snapshots with the simulator's change records: jobs arrive, get new
    views (other lengths or GPU counts), leave with or without a history record, leave a
    record and stay active (a requeue), come back under the same id, or appear late with
    an old submit time (the window's front moves back), records of jobs never seen active
    appear, new jobs arrive submitted long ago; refits now and then."""
    nodes = tuple(parse_cluster(draw(st.sampled_from(["2x8", "3x4", "1x8"]))))
    n = draw(st.integers(2, 12))
    apps = ["vgg19", "resnet152", "bert_large"]
    jobs = []
    for i in range(n):
        app = draw(st.sampled_from(apps))
        gpus = draw(st.sampled_from([1, 2, 4, 4, 16]))  # 16: more than any cluster here
        cfg = configurations(app, gpus) or (1,)
        jobs.append(Job(f"j{i}", float(draw(st.integers(0, 60))), gpus, app, MODELS[app].batch,
                        total_iters=float(draw(st.sampled_from([0, 5, 50, 500]))),
                        group_id=f"g{draw(st.integers(0, 3))}",
                        stages=int(draw(st.sampled_from(cfg)))))
    acts = st.sampled_from(["finish", "finish", "finish", "view", "vanish", "requeue", "back",
                            "late", "ghost", "old", "none"])
    steps = draw(st.lists(st.tuples(st.integers(0, 40), st.integers(0, n - 1), acts,
                                    st.sampled_from([None] * 8 + [0.0, 10.0]),
                                    st.sampled_from(["log"] * 8 + ["none", "other"]),
                                    st.booleans()), min_size=8, max_size=30))
    return nodes, jobs, steps


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_changes(), st.sampled_from(["a-srpt", "a-srpt-perfect"]))
def test_random_sequences_with_change_records(seq, name):
    """The kept window (change records, A1Window) gives the reference's Plans at every
    call, whatever changes between calls and whichever records the snapshot carries."""
    nodes, jobs, steps = seq
    inner, ref = policies.get_policy(name), REFS[name]()
    free = tuple(g for nd in nodes for g in nd.gpus())
    now, hist, pred, log, prev = 0.0, [], {}, [], {}
    active = {j.id: j for j in jobs}
    late = set()
    gone = {}
    for dt, k, act, scale, record, frozen in steps:
        now += dt
        jid = f"j{k}"
        j = active.get(jid)
        if act in ("finish", "vanish", "requeue") and j is not None:
            if act != "requeue":
                gone[jid] = active.pop(jid)
            if act != "vanish":  # a record; its length may differ from the job's
                hist.append(FinishedJob(jid, "u", j.submit_time, j.submit_time, now, j.num_gpus,
                                        j.app, "", j.group_id, (j.total_iters or 0) * 2,
                                        j.global_batch))
        elif act == "view" and j is not None:
            active[jid] = dataclasses.replace(j, total_iters=(j.total_iters or 0) + 7)
        elif act == "back" and jid in gone:
            active[jid] = gone.pop(jid)
        elif act == "late" and j is not None and jid not in late:
            late.add(jid)  # hidden until a later "late" step names it again
        elif act == "late" and jid in late:
            late.discard(jid)
        elif act == "ghost":  # a record of a job this policy never saw active
            g = jobs[k]
            hist.append(FinishedJob(f"x{len(hist)}", "u", max(0.0, now - 7 * k), now, now + 1,
                                    g.num_gpus, g.app, "", g.group_id, 40.0 * (k + 1),
                                    g.global_batch))
        elif act == "old":  # a new job, submitted long ago
            active[f"y{len(active)}-{now}"] = dataclasses.replace(
                jobs[k], id=f"y{len(active)}-{now}", submit_time=max(0.0, now - 90 - 10 * k))
        if scale is not None:
            pred = {"iterations": Fixed({f"g{g}": scale * (g + 1) for g in range(3)})}
        vis = {i: j for i, j in active.items() if j.submit_time <= now and i not in late}
        log.extend(sorted(i for i in vis.keys() | prev.keys() if vis.get(i) is not prev.get(i)))
        prev = vis
        jobs_map = MappingProxyType(vis)
        changes = {"log": JobChanges(Frozen(log), jobs_map), "none": None,
                   "other": JobChanges(Frozen(log), dict(vis))}[record]
        queue = WaitingQueue.of(jobs_map)  # every job here waits: the same ids changed
        if record == "log":
            queue = dataclasses.replace(queue, changes=Frozen(log))
        snap = ClusterSnapshot(now, nodes, jobs_map, {}, free, MODELS_.profiles, MODELS_.memory,
                               MODELS_.interference, predictors=pred, job_changes=changes,
                               history=Frozen(hist) if frozen else tuple(hist), queue=queue)
        assert_same(inner.schedule(snap), ref.schedule(snap))


def test_front_moving_back_brings_records_back():
    """A job submitted before every active one moves Ã1's front back: the history
    records between the new and the old front re-enter the window."""
    nodes = tuple(parse_cluster("1x8"))
    free = tuple(g for nd in nodes for g in nd.gpus())
    b = MODELS["vgg19"].batch
    a = Job("a", 100.0, 8, "vgg19", b, total_iters=5e4, group_id="g", stages=1)
    old = Job("b", 40.0, 8, "vgg19", b, total_iters=10.0, group_id="g", stages=1)
    hist = [FinishedJob("r", "u", 50.0, 50.0, 60.0, 8, "vgg19", "", "g", 1e6, b)]
    inner, ref = policies.get_policy("a-srpt-perfect"), REFS["a-srpt-perfect"]()
    log = []
    for now, vis in ((120.0, {"a": a}), (130.0, {"a": a, "b": old})):
        log.extend(sorted(vis.keys() - set(log)))
        jobs_map = MappingProxyType(vis)
        snap = ClusterSnapshot(now, nodes, jobs_map, {}, free, MODELS_.profiles, MODELS_.memory,
                               MODELS_.interference, job_changes=JobChanges(Frozen(log), jobs_map),
                               history=Frozen(hist))
        plan = inner.schedule(snap)
        assert_same(plan, ref.schedule(snap))
    assert set(inner._win.rel) == {"a", "b", "r"}
    assert inner.full_calls == 2  # the first call, and the front moving back


def test_kept_window_used_on_change_records():
    """On a plain run of arrivals and completions the window is kept (few full builds)
    and re-simulates far fewer items than it holds."""
    rng = random.Random(7)
    jobs, _ = _table1_jobs(120, 5, span=20_000)
    inner = policies.get_policy("a-srpt-perfect")
    ref = REFS["a-srpt-perfect"]()
    nodes = tuple(parse_cluster("4x8"))
    free = tuple(g for nd in nodes for g in nd.gpus())
    hist, log, prev, calls, held = [], [], {}, 0, 0
    order = sorted(jobs, key=lambda j: j.submit_time)
    active = {}
    for now in sorted({j.submit_time for j in jobs} | {rng.uniform(0, 30_000) for _ in range(200)}):
        while order and order[0].submit_time <= now:
            j = order.pop(0)
            active[j.id] = j
        for jid in [i for i in active if rng.random() < 0.05 and i != min(active)]:
            j = active.pop(jid)
            hist.append(FinishedJob(jid, "u", j.submit_time, j.submit_time, now, j.num_gpus,
                                    j.app, "", j.group_id, j.total_iters, j.global_batch))
        log.extend(sorted(i for i in active.keys() | prev.keys() if active.get(i) is not prev.get(i)))
        prev = dict(active)
        jobs_map = MappingProxyType(prev)
        snap = ClusterSnapshot(now, nodes, jobs_map, {}, free, MODELS_.profiles, MODELS_.memory,
                               MODELS_.interference, job_changes=JobChanges(Frozen(log), jobs_map),
                               history=Frozen(hist))
        assert_same(inner.schedule(snap), ref.schedule(snap))
        calls += 1
        held += len(inner._win)
    assert calls > 250
    assert inner.full_calls <= 2
    assert inner._win.simulated < held / 4


def test_a1_window_equals_virtual_srpt_on_edit_sequences():
    """A1Window against virtual_srpt after every call of random edit sequences: the
    front moving on, items removed, inserted anywhere, replaced in place or moved, zero
    lengths, ties, float releases."""
    resim = full = 0
    for seed in range(600):
        rng = random.Random(seed)
        win, t0 = A1Window(), 0.0
        items = [(f"j{i}", float(rng.choice([rng.randint(0, 30), rng.random() * 30])),
                  float(rng.choice([0, rng.randint(0, 6), rng.random() * 5])))
                 for i in range(rng.randint(0, 12))]
        cur = {x[0]: x for x in items}
        assert win.reset(items) == virtual_srpt(items)
        for step in range(15):
            if rng.random() < 0.4:
                t0 += rng.choice([0, rng.randint(0, 6), rng.random() * 4])
            removed, ups = set(), {}
            for _ in range(rng.randint(0, 4)):
                k, c = f"j{rng.randint(0, 40)}", rng.random()
                if c < 0.3:
                    removed.add(k)
                    continue
                r = cur[k][1] if (k in cur and c < 0.5) else float(rng.choice(
                    [t0 + rng.randint(0, 30), t0 + rng.random() * 30, t0 + 40 + step, t0 - 1]))
                ups[k] = (k, r, float(rng.choice([0, rng.randint(0, 6), rng.random() * 5])))
            removed -= ups.keys()
            for k in removed:
                cur.pop(k, None)
            cur.update(ups)
            cur = {k: x for k, x in cur.items() if x[1] >= t0}
            assert win.update(t0, removed, ups) == virtual_srpt(list(cur.values())), (seed, step)
            assert win.items() == sorted(cur.values(), key=lambda x: (x[1], x[0]))
            full += len(cur)
        resim += win.simulated
    assert resim < full / 2
    # two items of one key: no window (the caller uses virtual_srpt)
    dup = [("a", 0.0, 3.0), ("a", 1.0, 1.0), ("b", 0.5, 2.0)]
    assert A1Window().reset(dup) is None


def _busy_edit_sequence(seed, every):
    """Edits shaped like a loaded simulation's Ã1: arrivals at the window's end with no
    work yet (unknown length), some of them long; items in the middle getting their work
    when their job finishes (0 -> p, far back in the window); the front moving on; now and
    then an item removed or moved.  Long items keep the machine busy across many
    arrivals, so checkpoints (not idle marks) are where re-simulations start and stop."""
    rng = random.Random(seed)
    win = A1Window()
    win.every = every
    t, t0, cur, nxt = 0.0, 0.0, {}, 0
    for i in range(rng.randint(5, 40)):
        t += rng.choice([0.0, rng.random() * 3, float(rng.randint(0, 4))])
        p = float(rng.choice([0, 0, rng.random() * 4, rng.randint(20, 80)]))
        cur[f"j{nxt}"] = (f"j{nxt}", t, p)
        nxt += 1
    items = list(cur.values())
    assert win.reset(items) == virtual_srpt(items)
    for step in range(40):
        removed, ups = set(), {}
        c = rng.random()
        if c < 0.45:  # arrivals at the end
            for _ in range(rng.randint(1, 3)):
                t += rng.choice([0.0, rng.random() * 3, float(rng.randint(0, 4))])
                ups[f"j{nxt}"] = (f"j{nxt}", t, float(rng.choice([0, 0, rng.randint(20, 80)])))
                nxt += 1
        elif c < 0.85 and cur:  # jobs finish: their items get their work
            for k in rng.sample(sorted(cur), min(len(cur), rng.randint(1, 2))):
                ups[k] = (k, cur[k][1], float(rng.choice([rng.random() * 4, rng.randint(1, 30)])))
        elif c < 0.93 and cur:
            k = rng.choice(sorted(cur))
            if rng.random() < 0.5:
                removed.add(k)
            else:  # moved
                ups[k] = (k, cur[k][1] + rng.choice([-2.0, 1.5, 7.0]), cur[k][2])
        else:
            t0 = rng.choice([t0, t0 + rng.random() * 5, t0 + rng.randint(0, 15)])
        before = dict(win.done)
        removed -= ups.keys()
        for k in removed:
            cur.pop(k, None)
        cur.update(ups)
        cur = {k: x for k, x in cur.items() if x[1] >= t0}
        got = win.update(t0, removed, ups)
        want = virtual_srpt(list(cur.values()))
        assert got == want, (seed, step)
        assert win.items() == sorted(cur.values(), key=lambda x: (x[1], x[0]))
        # every key whose completion time moved is named (a moved item may be named anyway)
        assert set(win.changed) >= {k for k, v in want.items() if before.get(k) != v}, (seed, step)
        assert set(win.cks) == {x[0] for i, x in enumerate(win.its) if win.ck[i] and i >= win.lo}
    return win


@pytest.mark.parametrize("every", [1, 3, 16])
def test_a1_window_checkpoints_start_and_stop_exactly(every):
    """Checkpoints (the state before an item's push) as start and stop points: equal to
    virtual_srpt after every edit, ``changed`` naming every key whose completion time
    moved, the checkpoint map in step with its marks; both uses happen, and re-simulate
    fewer items than the idle marks alone."""
    starts = stops = with_ck = without = 0
    for seed in range(150):
        a = _busy_edit_sequence(seed, every)
        b = _busy_edit_sequence(seed, 10 ** 9)  # no checkpoint is ever recorded
        assert b.ck_starts == b.ck_stops == 0
        starts, stops = starts + a.ck_starts, stops + a.ck_stops
        with_ck, without = with_ck + a.simulated, without + b.simulated
    assert starts > 200 and stops > 50, (starts, stops)
    assert with_ck < 0.7 * without, (with_ck, without)


class Held(Differential):
    """Keeps every plan without reading its reasons; they are read after the run, when
    later calls have changed the kept waiting order the lazy reasons point into."""

    def __init__(self, name):
        super().__init__(name)
        self.held = []

    def schedule(self, snap):
        plan = self.inner.schedule(snap)
        self.held.append((plan, self.ref.schedule(snap)))
        self.calls += 1
        return plan


@pytest.mark.parametrize("name", ["a-srpt", "a-srpt-perfect"])
def test_plans_held_across_calls_keep_their_reasons(name):
    """A plan's waiting reasons are made on demand from the kept order's key list; a plan
    still held when the order changes keeps the reasons of its own call (the kept order
    copies its lists first)."""
    jobs, _ = _table1_jobs(160, 3, span=10_000)
    pol = Held(name)
    simulate(jobs, parse_cluster("4x8"), pol, MODELS_, SimConfig(interval=60.0, seed=3))
    assert pol.calls > 100 and pol.inner.sorted_calls <= pol.inner.full_calls + 1
    waiting = 0
    for plan, ref in pol.held:
        assert_same(plan, ref)
        waiting += sum(r.code.value == "wait_order" for r in ref.reasons.values())
    assert waiting > 100
