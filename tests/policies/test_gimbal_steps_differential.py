"""The kept per-worker times of GIMBAL's coordination (policies/gimbal_steps.py, the one-level
memo of policies.gimbal_coord.RateModel, the times each kept Walk carries) against a fresh
computation: the times of the reference oracle (tests/policies/reference_gimbal_coord.py: the
module as it was before any memo, and before MPS ceilings) under the package's plain
``_Search`` / ``coordination_search`` (whose ``generate`` the kept walks replace).

Hypothesis: a packing set (test_gimbal_walk_differential.packed_set), then

* the memoised RateModel (one instance over all examples, and one emptied every few entries)
  gives the reference's times for the start, for random MPS/share perturbations of it and for
  every configuration of both walks (``times`` and every job's ``job_times``);
* each step of a kept Walk (configuration, attempt text, step times) is what the reference's
  ``generate`` and ``step_times`` give from the previous configuration, and the times a walk
  carries (``Walk.last``) are the fresh times of its last configuration;
* ``TimedSteps.generate`` from a perturbed configuration and its fresh times gives the
  reference generate's configuration and text, and the fresh times of it;
* the whole search (plain with the memo, kept) equals the plain search on fresh times, and
  the reference's coordination_search where no worker has a ceiling.
"""
from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, given, settings, strategies as st

import reference_gimbal_coord as ref
from gimbalctl.profiles import default_models
from policies.gimbal_coord import RateModel, coordination_search, _Search
from policies.gimbal_steps import TimedSteps
from policies.gimbal_walk import KeptSearch

from test_gimbal_walk_differential import packed_set

MODELS = default_models()
SHARED = RateModel(MODELS.profiles, MODELS.interference)  # memo hits across examples


class RefModel(ref.RateModel):
    """The reference's times (no memo) with the job_times the package's _Search asks."""

    def job_times(self, infos, cfg, jid):
        return self.times(infos, cfg)[jid]


def _ref_model():
    return RefModel(MODELS.profiles, MODELS.interference)


def _tiny():
    m = RateModel(MODELS.profiles, MODELS.interference)
    m.W_CAP = 3  # emptied every few entries: misses and hits mixed
    return m


def _fresh_times(infos, cfg):
    return _ref_model().times(infos, cfg)


def _perturb(data, start):
    """Another configuration on the same GPUs: some MPS shares and sample shares moved."""
    cfg = {}
    for jid, ws in start.items():
        out = []
        for w in ws:
            if data.draw(st.booleans()):
                w = dataclasses.replace(w, mps_pct=data.draw(st.sampled_from([10, 20, 60, 100])))
            if data.draw(st.booleans()):
                sh = max(1, w.share + data.draw(st.integers(-3, 3)))
                w = dataclasses.replace(w, share=sh, accum_steps=max(1, -(-sh // w.micro_batch)))
            if data.draw(st.booleans()):  # more or fewer micro-steps than the share needs
                w = dataclasses.replace(w, accum_steps=data.draw(
                    st.integers(1, w.accum_steps + 3)), micro_batch=data.draw(
                    st.sampled_from([w.micro_batch, max(1, w.micro_batch // 2)])))
            out.append(w)
        cfg[jid] = tuple(out)
    return cfg


def _check_model(model, infos, cfg):
    want = _fresh_times(infos, cfg)
    assert model.times(infos, cfg) == want
    for jid in cfg:
        assert model.job_times(infos, cfg, jid) == want[jid]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_kept_times_equal_fresh_times(data):
    infos, start = data.draw(packed_set())
    lgrr, liss = data.draw(st.sampled_from([(True, True), (True, True), (False, True),
                                            (True, False)]))
    tiny = _tiny()
    for model in (SHARED, tiny):
        _check_model(model, infos, start)
    # the walks of both splits, step by step against the reference's generate
    kept = KeptSearch(infos, start, SHARED if data.draw(st.booleans()) else tiny, lgrr=lgrr,
                      liss=liss)
    rs = _Search("jct", infos, _ref_model(), kept.jm, 0.05, lgrr, liss)  # the plain path
    for swap in (False, True):
        walk = kept.walk(swap)
        order = walk.order
        if walk.swell is not None:
            st_ = ref.step_times(rs.model, infos, walk.head)
            assert walk.swell[1] == tuple(st_[j] for j in order)
        assert walk.last == _fresh_times(infos, walk.head)
        cur = walk.head
        for i in range(12):
            step = walk.step(i)
            new, what = rs.generate(cur, walk.subset1)
            if new is None or new == cur:
                assert step is None
                break
            assert step[0] == new and step[1] == what
            st_ = ref.step_times(rs.model, infos, new)
            assert step[2] == tuple(st_[j] for j in order)
            if len(walk.steps) == i + 1:
                assert walk.last == _fresh_times(infos, new)
            for model in (SHARED, tiny):
                _check_model(model, infos, new)
            cur = new
    # one generate from a perturbed configuration
    cfg = _perturb(data, start)
    for model in (SHARED, tiny):
        _check_model(model, infos, cfg)
    s = _Search("jct", infos, tiny, kept.jm, 0.05, lgrr, liss)
    ts = TimedSteps(s, start)
    subset1 = data.draw(st.sampled_from([[kept.jm], sorted(j for j in infos if j != kept.jm)]))
    new, what, nt = ts.generate(cfg, _fresh_times(infos, cfg), subset1)
    want, wwhat = rs.generate(cfg, subset1)
    assert (new, what) == (want, wwhat)
    if new is not None:
        assert nt == _fresh_times(infos, new)


def _plain(res):
    return (dict(res.config), res.objective_before, res.objective_after,
            [(a.primitive, a.objective, a.gain) for a in res.attempts], res.high, res.low,
            res.exit, res.declined)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_search_equals_reference_search(data):
    infos0, start = data.draw(packed_set())
    objective = data.draw(st.sampled_from(["jct", "deadline", "makespan"]))
    lgrr, liss = data.draw(st.sampled_from([(True, True), (False, True), (True, False)]))
    infos = {j: dataclasses.replace(i, remaining_steps=data.draw(st.floats(0.0, 1e5)))
             for j, i in infos0.items()}
    # the switching cost (gimbal_coord, "Switching cost"): none, the hosts', large ones
    kw = dict(lgrr=lgrr, liss=liss,
              switch_cost=data.draw(st.sampled_from([0.0, 0.0, 3.6, 50.0, 1e4, 1e6])))
    want = coordination_search(objective, infos, start, _ref_model(), **kw)
    if all(w.mps_cap is None for ws in start.values() for w in ws):  # the reference has none
        assert _plain(ref.coordination_search(objective, infos, start, ref.RateModel(
            MODELS.profiles, MODELS.interference), **kw)) == _plain(want)
    got = coordination_search(objective, infos, start, SHARED, **kw)
    assert _plain(got) == _plain(want)
    kept = KeptSearch(infos, start, _tiny(), lgrr=lgrr, liss=liss)
    assert _plain(kept.run(objective, infos, kw["switch_cost"])) == _plain(want)


# ---------------------------------------------------------------- searches shared by content
def _signature(kept):
    """Everything a kept search answers with: J_max, subsets, start step times, both walks."""
    out = [kept.jm, kept.subsets, kept.st0]
    for swap in (False, True):
        walk = kept.walk(swap)
        i = 0
        while walk.step(i) is not None and i < 40:
            i += 1
        out.append((walk.head, walk.swell, [(dict(c), w, t) for c, w, t in walk.steps]))
    return out


def _key_and_search(infos, start, lgrr, liss, model):
    from policies.gimbal_walk import search_key

    static = [(i.job, i.utilization, i.num_nodes) for i in infos.values()]
    return (search_key(static, start, lgrr, liss),
            KeptSearch(infos, start, model, lgrr=lgrr, liss=liss))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_equal_search_keys_give_equal_searches(data):
    """A set and a variant of it (one thing a search may read changed, or something it does
    not read: utilisation, remaining steps): whenever their search_key is equal, their kept
    searches answer the same (so sharing a search by key is exact); the key tells the
    variants that change what the search reads apart."""
    infos, start = data.draw(packed_set())
    lgrr, liss = data.draw(st.sampled_from([(True, True), (False, True), (True, False)]))
    jid = data.draw(st.sampled_from(sorted(infos)))
    what = data.draw(st.sampled_from(["start_time", "nodes", "app", "worker", "mem", "stage",
                                      "util", "rem", "ablation", "order"]))
    infos2, start2, lgrr2, liss2 = dict(infos), dict(start), lgrr, liss
    info = infos[jid]
    job = info.job
    if what == "start_time":
        infos2[jid] = dataclasses.replace(info, job=dataclasses.replace(
            job, start_time=(job.start_time or 0.0) + 5.0))
    elif what == "nodes":
        infos2[jid] = dataclasses.replace(info, num_nodes=info.num_nodes % 2 + 1)
    elif what == "app":
        from gimbalctl.profiles import APPS
        infos2[jid] = dataclasses.replace(info, job=dataclasses.replace(
            job, app=data.draw(st.sampled_from([a for a in APPS if a != job.app]))))
    elif what in ("worker", "mem", "stage"):
        ws = list(start[jid])
        w = ws[0]
        ws[0] = (dataclasses.replace(w, mps_pct=10 if w.mps_pct != 10 else 20)
                 if what == "worker" else dataclasses.replace(w, mem_limit_mb=1000)
                 if what == "mem" else dataclasses.replace(w, stage=1))
        start2[jid] = tuple(ws)
    elif what == "util":
        infos2[jid] = dataclasses.replace(info, utilization=info.utilization / 2)
    elif what == "rem":
        infos2[jid] = dataclasses.replace(info, remaining_steps=123.0)
    elif what == "ablation":
        lgrr2, liss2 = (not lgrr, liss) if liss else (lgrr, not liss)
    elif what == "order":  # the same jobs listed in another order
        keys = list(infos)[::-1]
        infos2 = {j: infos[j] for j in keys}
        start2 = {j: start[j] for j in keys}
    k1, s1 = _key_and_search(infos, start, lgrr, liss, _tiny())
    k2, s2 = _key_and_search(infos2, start2, lgrr2, liss2, _tiny())
    if k1 == k2:
        assert _signature(s1) == _signature(s2)
    assert (k1 == k2) == (what in ("util", "rem") or what == "order" and len(infos) == 1)


def test_job_static_memo_equals_fresh():
    """job_static's memo by allocation identity answers what utilization / start_config
    answer now: the same allocation under another global batch, GPU count or application is
    computed again, as is an equal allocation that is another object."""
    from types import SimpleNamespace

    from gimbalctl.profiles import APPS
    from policies.gimbal_coord import start_config, utilization
    from policies.gimbal_walk import job_static
    from policies.model import Allocation, Gpu, Job, JobState, WorkerAlloc

    snap = SimpleNamespace(profiles=MODELS.profiles, predictors=None)
    gpus = (Gpu("n0", 0), Gpu("n0", 1))
    micro = MODELS.iters_table[APPS[0]][0][0]
    ws = tuple(WorkerAlloc(g, micro, micro, 1, 50) for g in gpus)
    alloc = Allocation(gpus, micro, workers=ws)  # no global batch: the job's is read
    memo: dict = {}
    seen = set()
    for app, k, batch, a in [(APPS[0], 2, 2 * micro, alloc), (APPS[0], 2, 2 * micro, alloc),
                             (APPS[0], 2, 4 * micro, alloc), (APPS[1], 2, 4 * micro, alloc),
                             (APPS[1], 1, 4 * micro, alloc),
                             (APPS[1], 1, 4 * micro, dataclasses.replace(alloc, sub_batch=1))]:
        job = Job("j", 0.0, k, app, batch, total_iters=1e6, state=JobState.RUNNING,
                  allocation=a, start_time=0.0)
        got = job_static(memo, snap, job)
        assert got == (utilization(snap, job), start_config(job))
        seen.add(got)
    assert len(seen) >= 4
