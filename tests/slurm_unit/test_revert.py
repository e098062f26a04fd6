"""``revert`` on a stateful fake backend: what it restores, and in which order.

The fake keeps jobs in memory and applies every change (like Slurm would), so a
sequence daemon change -> revert -> revert / daemon change -> revert can be checked.
"""
from __future__ import annotations

import dataclasses

import pytest

from gimbalctl.daemon import revert
from gimbalctl.slurm.backend import Backend
from gimbalctl.slurm.meta import parse_meta
from gimbalctl.slurm.types import SlurmJob
from gimbalctl.store import Store


def _job(jid: str, **kw) -> SlurmJob:
    base = dict(job_id=jid, name="j", user="u", state="PENDING", reason="Priority",
                priority=1000, nice=0, submit_time=1.0, start_time=None, time_limit_s=600.0,
                partition="gpu", num_nodes=1, nodes=(), req_nodes=(), gres_req={"gpu": 1},
                gres_alloc=(), comment="", admin_comment="", site_factor=0)
    base.update(kw)
    return SlurmJob(**base)


class FakeSlurm(Backend):
    name = "fake"

    def __init__(self, jobs):
        super().__init__()
        self.j = {j.job_id: j for j in jobs}
        self.calls: list[tuple] = []

    def _version(self):
        return (22, 5, 8)

    def _load_jobs(self, job_ids=None):
        return [j for j in self.j.values() if not job_ids or j.job_id in job_ids]

    def _load_nodes(self):
        return []

    def describe(self, job_id, field, value):
        return ("fake", job_id, field, str(value))

    def _do(self, job_id, field, value):
        self.calls.append((job_id, field, value))
        j = self.j[job_id]
        if field in ("priority", "site_factor", "nice"):
            j = dataclasses.replace(j, **{field: int(value)})
        elif field == "gres":
            from gimbalctl.slurm.parse import parse_gres_spec
            j = dataclasses.replace(j, gres_req=parse_gres_spec(value))
        elif field == "req_nodes":
            j = dataclasses.replace(j, req_nodes=tuple(filter(None, str(value).split(","))))
        elif (field, bool(value)) in (("hold", True), ("release", False)):
            j = dataclasses.replace(j, reason="JobHeldAdmin")
        elif (field, bool(value)) in (("release", True), ("hold", False)):
            j = dataclasses.replace(j, reason="Priority")
        self.j[job_id] = j
        return self.describe(job_id, field, value)


@pytest.fixture
def store(tmp_path):
    st = Store(str(tmp_path / "g.db"))
    st.upgrade()
    return st


def _daemon_change(store, be, jid, field, value):
    """What apply_targets does for one change: intent, change, result."""
    cyc = store.begin_cycle(policy="sjf", mode="ordering", knob="site_factor", backend="fake",
                            release="22.05", dry_run=False, jobs=[], plan={}, inputs={},
                            job_decisions=[])
    sj = be.job(jid)
    from gimbalctl.slurm.backend import FIELDS
    aid = store.audit_intent(cyc, jid, field, FIELDS[field](sj), value, [])
    ch = be.change(jid, field, value, before=sj, force=True)
    store.audit_result(aid, "applied", ch.read_back)
    store.finish_cycle(cyc, "done", n_changes=1)


def test_revert_twice_keeps_the_original_site_factor(store):
    be = FakeSlurm([_job("7", site_factor=5)])
    _daemon_change(store, be, "7", "site_factor", 3000)
    revert(be, store)
    assert be.j["7"].site_factor == 5
    revert(be, store)  # nothing left to undo: must not re-apply gimbal's value
    assert be.j["7"].site_factor == 5


def test_revert_after_a_new_cycle_restores_the_value_before_that_cycle(store):
    be = FakeSlurm([_job("7", site_factor=5)])
    _daemon_change(store, be, "7", "site_factor", 3000)
    revert(be, store)
    _daemon_change(store, be, "7", "site_factor", 2000)
    revert(be, store)
    assert be.j["7"].site_factor == 5


def test_revert_twice_keeps_gate_gres_and_nodes_cleared(store):
    be = FakeSlurm([_job("8", gres_req={}, reason="JobHeldUser",
                         admin_comment="gimbal:v1;app=bert;gate=1",
                         meta=parse_meta("gimbal:v1;app=bert;gate=1"))])
    _daemon_change(store, be, "8", "gres", "gpu:2")
    _daemon_change(store, be, "8", "req_nodes", "gpu1")
    _daemon_change(store, be, "8", "release", True)
    revert(be, store)
    assert be.j["8"].held and dict(be.j["8"].gres_req) == {} and be.j["8"].req_nodes == ()
    revert(be, store)
    assert be.j["8"].held and dict(be.j["8"].gres_req) == {} and be.j["8"].req_nodes == ()


def test_revert_holds_a_released_gate_job_before_clearing_its_gres(store):
    """Clearing GRES/ReqNodeList of a released, still pending gate job first would let Slurm
    start it without GPUs before the hold lands."""
    be = FakeSlurm([_job("8", gres_req={}, reason="JobHeldUser",
                         meta=parse_meta("gimbal:v1;app=bert;gate=1"))])
    _daemon_change(store, be, "8", "gres", "gpu:2")
    _daemon_change(store, be, "8", "req_nodes", "gpu1")
    _daemon_change(store, be, "8", "release", True)
    be.calls.clear()
    revert(be, store)
    fields = [f for _, f, _ in be.calls]
    assert fields[0] == "hold", fields
    assert set(fields) == {"hold", "gres", "req_nodes"}
