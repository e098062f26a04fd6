"""Seed 001 §4.5 on the live path: a job naming an application without a fitted profile
reaches the policies as *unprofiled*, with the rates the launcher measured."""
from __future__ import annotations

from types import SimpleNamespace

from gimbalctl.profiles import default_models
from gimbalctl.slurm.meta import GimbalMeta
from gimbalctl.slurm.types import GresUse, SlurmJob, SlurmNode
from gimbalctl.snapshot import build_snapshot
from policies.elastic import MEASURED_RATES, UNPROFILED, Rates


def _job(jid, app, running=False):
    return SlurmJob(
        job_id=jid, name="t", user="u", state="RUNNING" if running else "PENDING", reason="",
        priority=1, nice=0, submit_time=0.0, start_time=0.0 if running else None,
        time_limit_s=3600.0, partition="gpu", num_nodes=1, nodes=("g1",) if running else (),
        req_nodes=(), gres_req={"gpu": 2},
        gres_alloc=(GresUse("g1", "gpu", 2, {0: 1, 1: 1}),) if running else (),
        comment="", admin_comment="", meta=GimbalMeta(app=app, batch=64, source="comment"))


def test_unknown_app_is_unprofiled_with_measured_rates():
    rows = {"mystery": SimpleNamespace(params=None, memory=None, measured={"1": {"step_time_s": 0.5},
                                                 "2:shared": {"step_time_s": 0.1},
                                                 "bad": {"step_time_s": 1.0},
                                                 "4": {"step_time_s": "x"}})}
    reports = {"2": SimpleNamespace(step=10, step_time_s=0.25, samples_per_s=None)}
    res = build_snapshot([_job("1", "mystery"), _job("2", "mystery", running=True),
                          _job("3", "bert")], [SlurmNode("g1", "idle", {"gpu": 4})],
                         default_models(), now=100.0, db_profiles=rows, reports=reports)
    snap = res.snapshot
    assert set(snap.predictors[UNPROFILED]) == {"1", "2"}
    assert dict(snap.predictors[MEASURED_RATES]["1"]) == {1: 2.0}  # shared/bad entries left out
    assert dict(snap.predictors[MEASURED_RATES]["2"]) == {1: 2.0, 2: 4.0}  # + its own report
    rates = Rates(snap)
    assert rates.rate(snap.jobs["1"], 2) == 4.0  # linear from the last measured count
    assert not rates.profiled(snap.jobs["1"]) and rates.profiled(snap.jobs["3"])


def test_explain_shows_each_jobs_share_and_both_sides_of_inequality3(release, replay, tmp_path):
    """A daemon cycle under AFS-L (ordering mode: resizes are planned, not applied) and
    ``explain`` of a running job: its share and the two sides of (3) (seed 001)."""
    import subprocess
    import sys
    from pathlib import Path

    from gimbalctl.config import Config
    from gimbalctl.daemon import run_cycle
    from gimbalctl.store import Store
    from policies.registry import get_policy
    from tests.slurm_unit.replay import jobs_of

    _, be = replay
    db = str(tmp_path / "g.db")
    st = Store(db)
    st.upgrade()
    res = run_cycle(Config(policy="afs-l", state_dir=str(tmp_path / "state")), be, st,
                    get_policy("afs-l"), now=1_800_000_000.0)
    assert res.status == "done"
    r1 = jobs_of(release)["r1"]  # running on 2 GPUs
    out = subprocess.run([sys.executable, "-m", "gimbalctl.cli", "explain", r1, "--db", db],
                         capture_output=True, text=True, timeout=60,
                         cwd=str(Path(__file__).resolve().parents[2]))
    assert out.returncode == 0, out.stderr
    for key in ("share = ", "decided_share = ", "ineq3_left = ", "ineq3_right = "):
        assert key in out.stdout
    assert "under policy afs-l" in out.stdout


def test_a_warmup_report_is_not_the_jobs_rate():
    """The first report of a launch (``"warmup": true``, e.g. right after a relaunch) includes
    CUDA start-up: the snapshot keeps its step (progress) but not its step time (rate)."""
    nodes = [SlurmNode("g1", "idle", {"gpu": 4})]
    for warm, rate in ((True, 0.0), (False, 4.0), (None, 4.0)):
        extra = {} if warm is None else {"warmup": warm}
        rep = {"2": SimpleNamespace(step=10, step_time_s=0.25, samples_per_s=None, extra=extra)}
        job = build_snapshot([_job("2", "bert", running=True)], nodes, default_models(),
                             now=100.0, reports=rep).snapshot.jobs["2"]
        assert job.iter_rate == rate and job.completed_iters == 10
