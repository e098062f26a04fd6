"""``gate.min_resize_interval`` (seed 001 on Slurm, bounded churn): the daemon defers a
resize that would requeue a running gate job onto other GPUs within the interval after its
last resize, keeps the job on its GPUs, holds back what needed those GPUs, and says why in
the plan's reasons (recorded 22.05/26.05 state, stub policies)."""
import dataclasses
import time

from gimbalctl.config import Config, ConfigError, load
from gimbalctl.daemon import RESIZE_REASON, run_cycle
from gimbalctl.slurm.cli import CliBackend
from gimbalctl.slurm.meta import parse_meta
from gimbalctl.store import Store
from policies.model import Gpu
from policies.plan import ReasonCode, ResizeJob, StartJob, make_plan, reason

from tests.slurm_unit.replay import Replay, jobs_of

import pytest


def _gated(sj):
    admin = "gimbal:v1;app=bert;batch=64;gate=1"
    return dataclasses.replace(sj, admin_comment=admin, meta=parse_meta(admin))


class ShrinkAndStart:
    """Shrinks r1 (2 GPUs) to the first of its GPUs and starts p on the other one; moves
    r1 to ``elsewhere`` when ``move``."""
    name = "stub"

    def __init__(self, r1, p, move=False):
        self.r1, self.p, self.move = r1, p, move

    def schedule(self, snap):
        gpus = snap.jobs[self.r1].allocation.gpus
        new = (Gpu("nowhere", 0),) if self.move else gpus[:1]
        acts = [ResizeJob(self.r1, new, 64, 1), StartJob(self.p, gpus[1:], 64, 1)]
        why = {self.r1: reason(ReasonCode.RESIZED, "share 2 -> 1 GPUs", share=1.0,
                               ineq3_left=0.25, ineq3_right=0.5),
               self.p: reason(ReasonCode.STARTED, "share 1 GPUs", share=1.0)}
        return make_plan("stub", acts, [], why)


def _setup(release, tmp_path):
    runner = Replay(release)
    be = CliBackend(runner=runner)
    ids = jobs_of(release)
    r1, p = ids["r1"], ids["p"][0]
    real = be._load_jobs
    be._load_jobs = lambda jids=None: [_gated(j) if j.job_id in (r1, p) else j for j in real(jids)]
    st = Store(str(tmp_path / "g.db"))
    st.upgrade()
    return runner, be, st, r1, p


def test_resize_within_the_interval_is_deferred_and_explained(release, tmp_path):
    runner, be, st, r1, p = _setup(release, tmp_path)
    cfg = Config(mode="gate", state_dir=str(tmp_path / "state"), preempt_grace=0,
                 min_resize_interval=600)
    pol = ShrinkAndStart(r1, p)
    # the first resize of r1 is applied (no earlier resize): USR2 + requeue-hold, audited
    res1 = run_cycle(cfg, be, st, pol, now=time.time())
    assert [t.field for t in res1.targets if t.job_id == r1] == ["signal", "requeue_hold"]
    rows = [r for r in st.audit_rows(job_id=r1)]
    assert [(r.field, r.status) for r in rows] == [("signal", "applied"), ("requeue_hold", "applied")]
    assert rows[1].reason.startswith(RESIZE_REASON) and "2 -> 1 GPUs" in rows[1].reason
    # the recorded cluster still shows r1 running on 2 GPUs: a plan 100 s later that resizes
    # it again is deferred, and the start that needs r1's GPU waits
    mine = lambda: [m for m in runner.mutations() if {r1, p, f"JobId={r1}", f"JobId={p}"} & set(m)]  # noqa: E731
    n_mut = len(mine())
    res2 = run_cycle(cfg, be, st, pol, now=time.time() + 100)
    assert res2.status == "done"
    assert not [t for t in res2.targets if t.job_id in (r1, p)]
    assert len(mine()) == n_mut  # nothing sent to Slurm for either job
    assert not res2.plan.actions
    why = res2.plan.reasons[r1]
    assert why.code is ReasonCode.KEEP_RUNNING and "deferred" in why.text
    assert "gate.min_resize_interval is 600 s" in why.text
    assert why.numbers["held_gpus"] == 2.0 and 490 <= why.numbers["resize_wait_s"] <= 500
    assert why.numbers["ineq3_left"] == 0.25  # the policy's numbers are kept for explain
    wait = res2.plan.reasons[p]
    assert wait.code is ReasonCode.WAIT_RESOURCES and f"held by job(s) {r1}" in wait.text
    assert res2.plan.order[0] == p
    # the store has the filtered plan and the reasons (what explain prints)
    _, dec, _ = st.last_decision(r1)
    assert "deferred" in dec.reason_text
    # after the interval the resize goes through again
    res3 = run_cycle(cfg, be, st, pol, now=time.time() + 700)
    assert [t.field for t in res3.targets if t.job_id == r1] == ["signal", "requeue_hold"]
    assert {a.job_id for a in res3.plan.actions} == {r1, p}


def test_interval_zero_and_same_gpu_resizes_are_not_deferred(release, tmp_path):
    runner, be, st, r1, p = _setup(release, tmp_path)
    cfg = Config(mode="gate", state_dir=str(tmp_path / "state"), preempt_grace=0,
                 min_resize_interval=0)
    pol = ShrinkAndStart(r1, p)
    run_cycle(cfg, be, st, pol, now=time.time())
    res = run_cycle(cfg, be, st, pol, now=time.time() + 1)
    assert [t.field for t in res.targets if t.job_id == r1] == ["signal", "requeue_hold"]


def test_a_move_blocks_nothing_it_does_not_hold(release, tmp_path):
    """A deferred resize keeps only the job's own GPUs: the start on r1's second GPU waits,
    a later cycle without a plan for r1 is unaffected."""
    runner, be, st, r1, p = _setup(release, tmp_path)
    cfg = Config(mode="gate", state_dir=str(tmp_path / "state"), preempt_grace=0,
                 min_resize_interval=600)
    run_cycle(cfg, be, st, ShrinkAndStart(r1, p, move=True), now=time.time())
    res = run_cycle(cfg, be, st, ShrinkAndStart(r1, p, move=True), now=time.time() + 5)
    assert not res.plan.actions
    assert "deferred" in res.plan.reasons[r1].text and "deferred" in res.plan.reasons[p].text


def test_config_key(tmp_path):
    f = tmp_path / "g.toml"
    f.write_text("[gate]\nmin_resize_interval = 90\n")
    assert load(str(f)).min_resize_interval == 90.0
    assert Config().min_resize_interval == 600.0
    f.write_text("[gate]\nmin_resize_interval = -1\n")
    with pytest.raises(ConfigError, match="gate.min_resize_interval"):
        load(str(f)).validate(str(f))
