"""Snapshot builder, plan -> Slurm targets, dry run, audit and reconcile on recorded state."""

import pytest

from gimbalctl.config import Config, ConfigError, load
from gimbalctl.daemon import queue_order, reconcile, run_cycle
from gimbalctl.profiles import default_models
from gimbalctl.slurm.cli import CliBackend
from gimbalctl.snapshot import build_snapshot
from gimbalctl.store import Store
from policies.model import Gpu, JobState
from policies.registry import get_policy

from tests.slurm_unit.replay import Replay, jobs_of

NOW = 1_800_000_000.0


def snap_of(be, **kw):
    return build_snapshot(be.jobs(), be.nodes(), default_models(), now=NOW, **kw)


def test_snapshot_from_recorded_state(release, replay):
    _, be = replay
    ids = jobs_of(release)
    res = snap_of(be)
    s = res.snapshot
    # nodes and GPU counts from gres
    assert {n.name: n.num_gpus for n in s.nodes}["gpu1"] == 4
    # co-location: both shard jobs on the same GPU index
    shared = [g for g, js in s.gpu_jobs.items() if set(js) == {ids["r2"], ids["r3"]}]
    assert shared == [Gpu("gpu1", 3)]
    assert Gpu("gpu2", 2) in s.free_gpus and Gpu("gpu2", 0) not in s.free_gpus
    # durations: the Slurm time limit; the user's est only under the site rule "bounded"
    p = [s.jobs[j] for j in ids["p"]]
    assert [j.duration_estimate for j in p] == [2400, 600, 1800, 1200]
    assert s.jobs[ids["g1"]].duration_estimate == 1500 and s.jobs[ids["g1"]].app == "yolov3"
    assert res.inputs[ids["g1"]]["meta_est"] == 900
    bounded = snap_of(be, estimates="bounded")
    assert bounded.snapshot.jobs[ids["g1"]].duration_estimate == 900
    assert bounded.inputs[ids["g1"]]["duration_source"] == "meta.est"
    # malformed metadata: defaults plus warnings naming the job
    p5 = s.jobs[ids["p5"]]
    assert p5.app == "bert" and p5.global_batch == 128 and p5.total_iters is None
    assert any(ids["p5"] in w and "batch" in w for w in res.warnings)
    # iters=2000 is a length claim too: by default the job's length is its time limit
    r1 = s.jobs[ids["r1"]]
    assert r1.state is JobState.RUNNING and res.inputs[ids["r1"]]["meta_iters"] == 2000
    assert r1.total_iters * s.exclusive_iter_time(r1) == \
        pytest.approx(res.inputs[ids["r1"]]["time_limit_s"])


def test_sjf_order_becomes_priorities(release, replay, tmp_path):
    runner, be = replay
    ids = jobs_of(release)
    st = Store(str(tmp_path / "g.db"))
    st.upgrade()
    cfg = Config(policy="sjf", state_dir=str(tmp_path / "state"))
    res = run_cycle(cfg, be, st, get_policy("sjf"), now=NOW)
    p = ids["p"]
    # by time limit (g1: 25 min, its est=900 s is not trusted by default)
    assert res.queue == [p[1], ids["p5"], p[3], ids["g1"], p[2], p[0]]
    # the site rule "bounded" uses min(est, limit): g1 moves ahead of p20
    cfg_b = Config(policy="sjf", state_dir=str(tmp_path / "state"), estimates="bounded")
    res_b = run_cycle(cfg_b, be, st, get_policy("sjf"), now=NOW, dry_run=True)
    assert res_b.queue == [p[1], ids["p5"], ids["g1"], p[3], p[2], p[0]]
    upd = {c[2]: c[3] for c in runner.mutations()}
    # the held gate job is not touched in ordering mode; the others get descending priorities
    assert ids["g1"] not in [c[2].split("=")[1] for c in runner.mutations()]
    prios = [int(upd[f"JobId={j}"].split("=")[1]) for j in (p[1], ids["p5"], p[3], p[2], p[0])]
    assert prios == sorted(prios, reverse=True) and len(set(prios)) == 5
    rows = st.audit_rows()
    assert len(rows) == 5 and all(r.status == "applied" for r in rows)
    assert st.cycles()[0].status == "done"


def test_site_factor_knob(release, replay, tmp_path):
    runner, be = replay
    ids = jobs_of(release)
    st = Store(str(tmp_path / "g.db"))
    st.upgrade()
    cfg = Config(policy="sjf", knob="site_factor", state_dir=str(tmp_path))
    run_cycle(cfg, be, st, get_policy("sjf"), now=NOW)
    sf = {c[2].split("=")[1]: int(c[3].split("=")[1]) for c in runner.mutations()}
    p = ids["p"]
    # final priority = own priority (minus current site factor) + new site factor, strictly ordered
    jobs = {j.job_id: j for j in be.jobs()}
    total = [jobs[j].priority - (jobs[j].site_factor or 0) + sf.get(j, jobs[j].site_factor or 0)
             for j in (p[1], ids["p5"], p[3], p[2], p[0])]
    assert total == sorted(total, reverse=True) and len(set(total)) == 5


def test_dry_run_changes_nothing(release, replay, tmp_path):
    runner, be = replay
    st = Store(str(tmp_path / "g.db"))
    st.upgrade()
    res = run_cycle(Config(policy="sjf", state_dir=str(tmp_path)), be, st, get_policy("sjf"),
                    dry_run=True, now=NOW)
    assert runner.mutations() == []
    assert res.changes and all(c.argv[:2] == ("scontrol", "update") for c in res.changes)
    assert st.cycles() == [] and st.audit_rows() == []


def test_gate_start_sets_gres_nodes_decision_release(release, tmp_path):
    from launcher.decision import decision_path, read_decision
    from policies.plan import StartJob, make_plan
    runner = Replay(release)
    be = CliBackend(runner=runner)
    ids = jobs_of(release)
    g1 = ids["g1"]

    class Stub:
        name = "stub"

        def schedule(self, snap):
            return make_plan("stub", [StartJob(g1, (Gpu("gpu1", 3),), 32, 2, share_with=(ids["r2"],),
                                               mps_pct=None)], [], {})
    st = Store(str(tmp_path / "g.db"))
    st.upgrade()
    cfg = Config(mode="gate", state_dir=str(tmp_path / "state"))
    res = run_cycle(cfg, be, st, Stub(), now=NOW)
    assert res.status == "done", res.warnings
    muts = runner.mutations()
    gres = [c for c in muts if c[-1].startswith(("Gres=", "TresPerNode="))]
    assert gres and gres[0][-1] in ("Gres=shard:2", "TresPerNode=gres/shard:2")
    assert ("scontrol", "update", f"JobId={g1}", "ReqNodeList=gpu1") in muts
    assert ("scontrol", "release", g1) in muts and muts.index(("scontrol", "release", g1)) > muts.index(gres[0])
    d = read_decision(decision_path(g1, root=cfg.state_dir))
    assert (d.sub_batch, d.accum_steps, d.share_with, d.global_batch) == (32, 2, ids["r2"], 64)
    fields = [r.field for r in st.audit_rows(job_id=g1)]
    assert fields == ["gres", "req_nodes", "decision", "release"]


def test_failed_gres_update_keeps_job_held(release, tmp_path):
    from policies.plan import StartJob, make_plan
    runner = Replay(release, fail_update=True)
    be = CliBackend(runner=runner)
    g1 = jobs_of(release)["g1"]

    class Stub:
        def schedule(self, snap):
            return make_plan("stub", [StartJob(g1, (Gpu("gpu2", 2),), 64)], [], {})
    st = Store(str(tmp_path / "g.db"))
    st.upgrade()
    res = run_cycle(Config(mode="gate", state_dir=str(tmp_path)), be, st, Stub(), now=NOW)
    assert res.status == "partial"
    assert not any(c[:2] == ("scontrol", "release") for c in runner.calls)
    assert [r.status for r in st.audit_rows(job_id=g1)] == ["failed"]


def test_crash_leftovers_are_reconciled(release, replay, tmp_path):
    _, be = replay
    ids = jobs_of(release)
    st = Store(str(tmp_path / "g.db"))
    st.upgrade()
    sjobs = {j.job_id: j for j in be.jobs()}
    cid = st.begin_cycle(policy="sjf", mode="ordering", knob="priority", backend="cli", release=release,
                         dry_run=False, jobs=[], plan={}, inputs={}, job_decisions=[])
    p1 = ids["p"][1]
    done = st.audit_intent(cid, p1, "priority", 100, sjobs[p1].priority, [])  # Slurm has it
    lost = st.audit_intent(cid, ids["p"][0], "priority", 100, 99999, [])  # never applied
    counts = reconcile(st, be, sjobs, str(tmp_path))
    assert counts == {"reconciled": 1, "abandoned": 1, "cycles": 1}
    status = {r.id: r.status for r in st.audit_rows()}
    assert status == {done: "reconciled", lost: "abandoned"}
    assert st.cycles()[0].status == "interrupted"


def test_queue_order_puts_starts_first():
    from policies.plan import StartJob, make_plan
    plan = make_plan("x", [StartJob("b", (Gpu("n", 0),), 1)], ["c", "a"], {}, ["z"])
    assert queue_order(plan, ["a", "b", "c", "d", "z"]) == ["b", "c", "a", "d", "z"]


def test_config_file_and_errors(tmp_path):
    f = tmp_path / "g.toml"
    f.write_text('[daemon]\npolicy = "sjf"\nknob = "site_factor"\n[ordering]\npriority_step = 5\n')
    cfg = load(str(f), {"knob": "priority"})
    assert (cfg.policy, cfg.knob, cfg.priority_step) == ("sjf", "priority", 5)
    f.write_text('[daemon]\nmode = "sideways"\n')
    with pytest.raises(ConfigError, match="mode 'sideways'"):
        load(str(f))
    f.write_text('[daemon]\ncolour = 1\n')
    with pytest.raises(ConfigError, match="daemon.colour"):
        load(str(f))
    with pytest.raises(ConfigError, match="not found"):
        load(str(tmp_path / "missing.toml"))


def test_decide_is_schedule_with_the_collector_kept_off_the_snapshot(release, replay):
    """``decide`` (the daemon's and ``gimbalctl plan``'s call) gives the Plan
    ``schedule`` gives; during the call the objects alive before it are frozen out of the
    collector (a collection then walks only what the policy made) and afterwards they are
    not, also when the policy raises; a process that froze objects itself keeps them so."""
    import gc

    from gimbalctl.snapshot import decide

    _, be = replay
    snap = snap_of(be).snapshot
    seen = []

    class Probe:
        def __init__(self, inner, fail=False):
            self.inner, self.fail = inner, fail

        def schedule(self, s):
            seen.append(gc.get_freeze_count())
            if self.fail:
                raise RuntimeError("policy failed")
            return self.inner.schedule(s)

    assert gc.get_freeze_count() == 0
    for name in ("sjf", "afs-l", "gandiva"):
        assert decide(Probe(get_policy(name)), snap) == get_policy(name).schedule(snap)
    assert seen[-1] > 0 and gc.get_freeze_count() == 0
    with pytest.raises(RuntimeError, match="policy failed"):
        decide(Probe(get_policy("sjf"), fail=True), snap)
    assert seen[-1] > 0 and gc.get_freeze_count() == 0
    gc.freeze()  # someone else's freeze: left as it is, the call runs plainly
    try:
        frozen = gc.get_freeze_count()
        decide(Probe(get_policy("sjf")), snap)
        assert seen[-1] == frozen and gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
