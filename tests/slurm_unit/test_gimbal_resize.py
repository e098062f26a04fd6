"""GIMBAL squeeze/swell through the daemon (recorded 22.05/26.05 state): a ResizeJob that keeps
a running gate job on its GPUs rewrites only the launcher decision (new MPS share, stealing on
for uneven shares; batch unchanged) with an audit row; onto other GPUs it is still a requeue."""
import dataclasses

from gimbalctl.config import Config
from gimbalctl.daemon import gate_targets, run_cycle
from gimbalctl.slurm.cli import CliBackend
from gimbalctl.slurm.meta import parse_meta
from gimbalctl.store import Store
from launcher.decision import LauncherDecision, decision_path, read_decision, write_decision
from policies.model import Gpu, WorkerAlloc
from policies.plan import ResizeJob, make_plan, reason, ReasonCode

from tests.slurm_unit.replay import Replay, jobs_of

NOW = 1_800_000_000.0


def _gated(sj):
    admin = "gimbal:v1;app=bert;batch=64;gate=1"
    return dataclasses.replace(sj, admin_comment=admin, meta=parse_meta(admin))


def test_same_gpu_resize_rewrites_the_decision(release, tmp_path):
    runner = Replay(release)
    be = CliBackend(runner=runner)
    r1 = jobs_of(release)["r1"]  # running on 2 whole GPUs
    real = be._load_jobs
    be._load_jobs = lambda ids=None: [_gated(j) if j.job_id == r1 else j for j in real(ids)]
    state = tmp_path / "state"
    path = decision_path(r1, root=str(state))
    write_decision(path, LauncherDecision(job_id=r1, policy="lucid+gimbal", sub_batch=32,
                                          accum_steps=1, global_batch=64, share_with="77"))
    seen = {}

    class Squeeze:
        name = "stub"

        def schedule(self, snap):
            gpus = snap.jobs[r1].allocation.gpus
            seen["gpus"] = gpus
            # every daemon cycle is a round: a +gimbal host coordinates at each
            assert snap.round_call
            ws = (WorkerAlloc(gpus[0], 24, 32, 1, 30), WorkerAlloc(gpus[1], 40, 32, 2, 30))
            rz = ResizeJob(r1, gpus, 32, 2, 30, ws)
            why = reason(ReasonCode.RESIZED, "GIMBAL", objective_before=10.0, objective_after=8.0)
            return make_plan("stub", [rz], [], {r1: why})

    st = Store(str(tmp_path / "g.db"))
    st.upgrade()
    res = run_cycle(Config(mode="gate", state_dir=str(state)), be, st, Squeeze(), now=NOW)
    assert res.status == "done", res.warnings
    assert [t.field for t in res.targets if t.job_id == r1] == ["decision"]
    mine = [m for m in runner.mutations() if f"JobId={r1}" in m or r1 in m[1:]]
    assert not mine  # no signal, no requeue, no GRES change
    d = read_decision(path)
    assert (d.mps_thread_pct, d.stealing) == (30, True)
    assert (d.sub_batch, d.accum_steps, d.global_batch, d.share_with) == (32, 1, 64, "77")
    (row,) = st.audit_rows(job_id=r1)
    assert (row.field, row.status) == ("decision", "applied")
    assert '"mps_thread_pct": 30' in row.after and "mps_thread_pct" not in (row.before or "")
    # the audit row itself names the squeeze/swell and the local objective before and after
    assert row.reason == "plan: squeeze/swell on the same GPUs (local objective 10 -> 8)"
    plan = res.plan.as_dict()
    assert plan["reasons"][r1]["numbers"] == {"objective_before": 10.0, "objective_after": 8.0}
    # the next cycle with the same decision changes nothing
    res2 = run_cycle(Config(mode="gate", state_dir=str(state)), be, st, Squeeze(), now=NOW)
    assert not [c for c in res2.changes if c.job_id == r1]
    # a resize onto other GPUs is still USR2 + requeue-hold
    other = (Gpu("elsewhere", 0), Gpu("elsewhere", 1))
    sj = {j.job_id: j for j in be.jobs()}
    ts = gate_targets(Config(mode="gate"), make_plan("stub", [ResizeJob(r1, other, 32)], [], {}),
                      sj, {}, [], now=NOW, held_gpus={r1: seen["gpus"]})
    assert [t.field for t in ts] == ["signal", "requeue_hold"]


def test_decision_mps_is_the_largest_worker_share():
    """Unequal per-worker MPS shares: the decision's job-level share is their ceiling (the
    launcher lowers each rank to its own record value), not the smallest for every rank."""
    from gimbalctl.daemon import _mps_ceiling
    g = (Gpu("n", 0), Gpu("n", 1))
    ws = (WorkerAlloc(g[0], 32, 32, 1, 70), WorkerAlloc(g[1], 32, 32, 1, 30))
    assert _mps_ceiling(ws, 30) == 70
    assert _mps_ceiling((WorkerAlloc(g[0], 32, 32, 1, None), ws[1]), 30) is None
    assert _mps_ceiling((WorkerAlloc(g[0], 64, 64, 1, None),), 50) == 50
    assert _mps_ceiling((), 40) == 40


def test_no_packing_beside_a_whole_gres_gpu_job():
    """Slurm gives a GPU whole (gres/gpu) or in mps/shard units, never both: a packed start
    beside a job that holds the GPU whole is not applied (a warning names the partner), while
    packing beside an mps holder goes ahead."""
    from gimbalctl.slurm.meta import parse_meta
    from gimbalctl.slurm.types import GresUse, SlurmJob, SlurmNode
    from policies.plan import StartJob

    def job(jid, state, alloc=(), meta="gimbal:gate=1,gpus=1", reason=""):
        return SlurmJob(jid, jid, "alice", state, reason, 100, 0, NOW - 100,
                        NOW - 10 if state == "RUNNING" else None, 3600.0, "gpu", 1,
                        ("m1",) if alloc else (), (), {} if state == "PENDING" else {"gpu": 1},
                        tuple(alloc), "", meta, meta=parse_meta(meta))

    whole = job("10", "RUNNING", [GresUse("m1", "gpu", 1, {0: 1})])
    mps = job("11", "RUNNING", [GresUse("m1", "mps", 50, {1: 50})])
    new = job("12", "PENDING", reason="JobHeldUser")
    sjobs = {j.job_id: j for j in (whole, mps, new)}
    nodes = {"m1": SlurmNode("m1", "mixed", {"gpu": 2, "mps": 200})}
    for partner, gpu, started in (("10", 0, False), ("11", 1, True)):
        warnings = []
        a = StartJob("12", (Gpu("m1", gpu),), 32, share_with=(partner,))
        ts = gate_targets(Config(mode="gate"), make_plan("stub", [a], [], {}), sjobs, nodes,
                          warnings, now=NOW)
        assert bool([t for t in ts if t.field == "release"]) is started
        assert bool(warnings) is not started
        if not started:
            assert "10 (m1:0)" in warnings[0] and "whole gres/gpu" in warnings[0]
