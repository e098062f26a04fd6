"""Slurm's gres/mps units in the allocation record (recorded 22.05 state): a packed pair started
with ``mps:50`` each shows 50/50 in the live snapshot (ceiling ``mps_cap`` 50, the share applied,
not the decision's 100), the coordinator (Algorithm 1) plans within the ceiling, and what it
decides comes back unchanged in the next snapshot, read from the decision file and from the
launcher's report."""
import json
import shutil

from hypothesis import given, settings, strategies as st

from gimbalctl.config import Config
from gimbalctl.daemon import run_cycle
from gimbalctl.profiles import default_models
from gimbalctl.records import workers_to_wire
from gimbalctl.slurm.cli import CliBackend
from gimbalctl.snapshot import build_snapshot
from gimbalctl.store import Store
from gimbalctl.store.models import ReportRow
from launcher.decision import LauncherDecision, decision_path, read_decision, write_decision
from launcher.mps import THREAD_VAR
from launcher.run import decision_env
from policies.gimbal_coord import coordinate, coordination_search, job_info, start_config
from policies.gimbal_coord import RateModel
from policies.model import Gpu, WorkerAlloc
from policies.plan import ReasonCode, make_plan, reason

from tests.slurm_unit.replay import FIX, Replay

NOW = 1_800_000_000.0
A, B = "23", "24"  # in the recording: two shard jobs sharing gpu1:3
GPU = Gpu("mps1", 0)


def _recording(tmp_path):
    """The 22.05 recording with jobs 23 and 24 moved onto GPU 0 of the mps-only node ``mps1``
    (``gres_detail`` as 22.05 prints an ``--gres=mps:50`` job) as gated cifar10 jobs (23 short, 24
long, no time limit), and job
    22 (which held both of mps1's GPUs whole) gone."""
    d = tmp_path / "rec"
    shutil.copytree(FIX / "22.05", d)
    data = json.loads((d / "squeue.json").read_text())
    jobs = []
    for j in data["jobs"]:
        if str(j["job_id"]) == "22":
            continue
        if str(j["job_id"]) in (A, B):
            iters = 2000 if str(j["job_id"]) == A else 200000  # A short, B long
            j.update(nodes="mps1", gres_detail=["mps:50(IDX:0)"], tres_per_node="gres:mps:50",
                     admin_comment=f"gimbal:v1;app=cifar10;batch=64;gate=1;iters={iters}",
                     time_limit=0)
        jobs.append(j)
    data["jobs"] = jobs
    (d / "squeue.json").write_text(json.dumps(data))
    runner = Replay("22.05")
    runner.dir = d
    return runner


def _decision(jid, pct):
    """The decision of a packed start (the host plans free competition: 100 %)."""
    ws = (WorkerAlloc(GPU, 64, 64, 1, pct),)
    return LauncherDecision(job_id=jid, policy="lucid+gimbal", sub_batch=64, accum_steps=1,
                            global_batch=64, mps_thread_pct=pct, workers=tuple(workers_to_wire(ws)))


def _snap(be, state, reports=None):
    jobs, nodes = be.jobs(), be.nodes()
    from gimbalctl.daemon import read_decisions
    return build_snapshot(jobs, nodes, default_models(), now=NOW,
                          decisions=read_decisions(str(state), jobs), reports=reports or {},
                          estimates="bounded")


def test_packed_pair_started_with_mps50_shows_50_50_and_the_plan_stays_within(tmp_path):
    be = CliBackend(runner=_recording(tmp_path))
    state = tmp_path / "state"
    for jid in (A, B):
        write_decision(decision_path(jid, root=str(state)), _decision(jid, 100))
    res = _snap(be, state)
    snap = res.snapshot
    for jid in (A, B):
        (w,) = snap.jobs[jid].allocation.workers
        assert (w.gpu, w.mps_pct, w.mps_cap) == (GPU, 50, 50), w
        assert snap.jobs[jid].allocation.mps_pct == 50
    assert snap.gpu_jobs[GPU] == (A, B)
    # a job on whole GPUs has no ceiling
    assert all(w.mps_cap is None for w in snap.jobs["20"].allocation.workers)

    coords = coordinate(snap, "jct")
    (co,) = [c for c in coords if set(c.members) == {A, B}]
    assert co.result.objective_after < co.result.objective_before  # it does plan something
    planned = {rz.job_id: rz for rz in co.resizes}
    assert planned
    for jid, ws in co.result.config.items():
        assert all(w.mps_pct <= 50 and w.mps_cap == 50 for w in ws), ws
    # the swell of line 5 does not pass the ceiling: the high-priority job keeps its 50 %
    for jid in co.result.high:
        assert jid not in planned and co.result.config[jid] == snap.jobs[jid].allocation.workers

    class Coord:
        name = "stub"

        def schedule(self, s):
            (c,) = [c for c in coordinate(s, "jct") if set(c.members) == {A, B}]
            why = {rz.job_id: reason(ReasonCode.RESIZED, "GIMBAL",
                                     objective_before=c.result.objective_before,
                                     objective_after=c.result.objective_after)
                   for rz in c.resizes}
            return make_plan("stub", list(c.resizes), [], why)

    st_ = Store(str(tmp_path / "g.db"))
    st_.upgrade()
    cyc = run_cycle(Config(mode="gate", state_dir=str(state), estimates="bounded"), be, st_, Coord(), now=NOW)
    assert cyc.status == "done", cyc.warnings
    decided = {a.job_id: a.workers for a in cyc.plan.resizes()}
    assert set(decided) == set(planned)
    # the next snapshot, from the rewritten decision files, shows exactly what was decided
    nxt = _snap(be, state).snapshot
    for jid, ws in decided.items():
        assert nxt.jobs[jid].allocation.workers == ws
    # ... and from the launcher's reports: gimbal-run under Slurm's limit (50) puts the applied
    # records in GIMBAL_WORKERS, which rank 0's reports echo
    reps = {}
    for jid in (A, B):
        env = decision_env(read_decision(decision_path(jid, root=str(state))), 1, {THREAD_VAR: "50"})
        reps[jid] = ReportRow(job_id=jid, ts=NOW, step=10, samples_per_s=640.0, step_time_s=0.1,
                              gpu_util=None, mem_used_mb=None, extra={
                                  "workers": json.loads(env["GIMBAL_WORKERS"]),
                                  "global_batch": 64})
        assert int(float(env[THREAD_VAR])) <= 50
    from_reports = _snap(be, state, reps).snapshot
    for jid in (A, B):
        want = decided.get(jid, snap.jobs[jid].allocation.workers)
        assert from_reports.jobs[jid].allocation.workers == want
    # and the coordinator, given what runs now, plans nothing past the ceiling again
    for c in coordinate(nxt, "jct"):
        for ws in c.result.config.values():
            assert all(w.mps_cap is None or w.mps_pct <= w.mps_cap for w in ws)


def test_applied_share_in_the_launchers_records():
    """gimbal-run's GIMBAL_WORKERS (echoed by rank 0's reports) carries each worker's share as
    applied: the smaller of its record and the job-level limit (decision or Slurm's units)."""
    dec = _decision("7", 100)
    assert json.loads(decision_env(dec, 1, {THREAD_VAR: "50"})["GIMBAL_WORKERS"])[0]["mps_pct"] == 50
    assert json.loads(decision_env(dec, 1, {})["GIMBAL_WORKERS"])[0]["mps_pct"] == 100
    low = _decision("7", 30)
    assert json.loads(decision_env(low, 1, {THREAD_VAR: "50"})["GIMBAL_WORKERS"])[0]["mps_pct"] == 30


# ---------------------------------------------------------------- property: no plan past a cap
_G = (Gpu("n", 0), Gpu("n", 1))
_pct = st.integers(1, 10).map(lambda k: 10 * k)


@st.composite
def _pair(draw):
    """Two packed jobs (J_max on two GPUs, a partner on the first), random shares and caps."""
    def worker(g):
        cap = draw(st.one_of(st.none(), _pct))
        pct = draw(_pct)
        return WorkerAlloc(g, 32, 32, 1, pct if cap is None else min(pct, cap), mps_cap=cap)
    big = (worker(_G[0]), worker(_G[1]))
    small = (worker(_G[0]),)
    return big, small, draw(st.sampled_from(("jct", "deadline", "makespan"))), \
        draw(st.booleans()), draw(st.booleans()), draw(st.sampled_from(("resnet18", "cifar10")))


@settings(max_examples=60, deadline=None)
@given(_pair())
def test_no_plan_exceeds_a_ceiling(case):
    from policies.model import Allocation, ClusterSnapshot, Job, JobState, Node
    from types import MappingProxyType
    big, small, objective, lgrr, liss, app = case
    models = default_models()
    apps = [a for a in (app, "cifar10") if a in models.profiles]
    jobs = {}
    for jid, ws, start in (("1", big, 0.0), ("2", small, 10.0)):
        jobs[jid] = Job(jid, 0.0, len(ws), apps[0], 64 if len(ws) == 2 else 32,
                        total_iters=1000.0, state=JobState.RUNNING, start_time=start,
                        deadline=5000.0 if jid == "2" else None,
                        allocation=Allocation.from_workers(ws))
    snap = ClusterSnapshot(now=100.0, nodes=(Node("n", 2),), jobs=MappingProxyType(jobs),
                           gpu_jobs=MappingProxyType({_G[0]: ("1", "2"), _G[1]: ("1",)}),
                           free_gpus=(), profiles=models.profiles, memory=models.memory,
                           interference=models.interference)
    for c in coordinate(snap, objective, lgrr=lgrr, liss=liss):
        for rz in c.resizes:
            assert all(w.mps_cap is None or w.mps_pct <= w.mps_cap for w in rz.workers), rz
            assert rz.mps_pct <= 100
        for ws in c.result.config.values():
            assert all(w.mps_cap is None or w.mps_pct <= w.mps_cap for w in ws)
    # the search itself, from the start configuration
    infos = {j: job_info(snap, jobs[j]) for j in jobs}
    start = {j: start_config(jobs[j]) for j in jobs}
    res = coordination_search(objective, infos, start, RateModel(models.profiles,
                                                                 models.interference),
                              lgrr=lgrr, liss=liss)
    for ws in res.config.values():
        assert all(w.mps_cap is None or w.mps_pct <= w.mps_cap for w in ws)
