"""Issue #14 items 1, 2, 5, 6 and 12 on recorded Slurm state (the real-cluster attacks by an
unprivileged user are in tests/slurm/test_hostile_users.py)."""
from __future__ import annotations

import dataclasses
import json
import subprocess

import pytest

from gimbalctl.config import Config, ConfigError, load
from gimbalctl.daemon import own_hold, run_cycle
from gimbalctl.profiles import default_models
from gimbalctl.slurm.cli import CliBackend
from gimbalctl.slurm.meta import parse_meta
from gimbalctl.slurm.types import GresUse, SlurmJob, SlurmNode
from gimbalctl.snapshot import build_snapshot, duration_estimate
from gimbalctl.store import Store
from policies.model import Gpu
from policies.registry import get_policy

from tests.slurm_unit.replay import FIX, Replay, jobs_of

NOW = 1_800_000_000.0


@pytest.fixture
def store(tmp_path):
    st = Store(str(tmp_path / "g.db"))
    st.upgrade()
    return st


class Edited(Replay):
    """Replay whose ``squeue --json`` text is edited (bytes, as Slurm prints them)."""

    def __init__(self, release, edit):
        super().__init__(release)
        self.edit = edit

    def __call__(self, argv, timeout):
        if tuple(argv[:2]) == ("squeue", "--json"):
            self.calls.append(tuple(argv))
            raw = self.edit((self.dir / "squeue.json").read_bytes())
            return subprocess.CompletedProcess(argv, 0, raw.decode("utf-8", "replace"), "")
        return super().__call__(argv, timeout)


# ------------------------------------------------------------------ item 1
def test_undecodable_job_name_makes_the_cycle_partial_not_failed(release, store, tmp_path):
    """squeue 22.05 prints a job name's invalid UTF-8 as is; the strict decode made every
    cycle fail.  Now: the job is kept with a repaired name, the cycle is ``partial`` and its
    error names the job."""
    ids = jobs_of(release)
    victim = ids["p"][1]
    doc = json.loads((FIX / release / "squeue.json").read_text())
    name = next(j["name"] for j in doc["jobs"] if str(j["job_id"]).strip() == victim
                or (isinstance(j["job_id"], dict) and str(j["job_id"].get("number")) == victim))
    bad = b"a\xff\xfeb\xc3"
    runner = Edited(release, lambda raw: raw.replace(f'"name": "{name}"'.encode(),
                                                     b'"name": "' + bad + b'"'))
    be = CliBackend(runner=runner, partition="gpu")
    res = run_cycle(Config(policy="sjf", state_dir=str(tmp_path)), be, store,
                    get_policy("sjf"), now=NOW)
    assert res.status == "partial"
    row = store.cycles()[0]
    assert row.status == "partial" and f"job {victim}: name has" in row.error
    assert sum(f"job {victim}:" in w for w in res.warnings) == 1
    assert store.job_rows()[victim].name.startswith("a??b?")
    assert victim in res.queue


def test_one_unreadable_record_is_skipped_with_one_warning(release, store, tmp_path):
    ids = jobs_of(release)
    victim = ids["p"][2]

    def edit(raw):
        doc = json.loads(raw)
        for j in doc["jobs"]:
            jid = j["job_id"]["number"] if isinstance(j["job_id"], dict) else j["job_id"]
            if str(jid) == victim:
                j["gres_detail"] = {"not": "a list"}
                j["nodes"] = "gpu[1-"  # not a host list
                j["job_state"] = "RUNNING" if isinstance(j["job_state"], str) else ["RUNNING"]
        return json.dumps(doc).encode()
    be = CliBackend(runner=Edited(release, edit), partition="gpu")
    res = run_cycle(Config(policy="sjf", state_dir=str(tmp_path)), be, store,
                    get_policy("sjf"), now=NOW)
    assert res.status == "partial" and victim not in res.queue
    assert [w for w in res.warnings if f"job {victim}" in w] == \
        [w for w in res.warnings if "skipped" in w] != []
    assert len(res.queue) == len(ids["p"]) + 1  # the others (p5 + g1 pending) still ordered


# ------------------------------------------------------------------ item 2
def test_estimate_rule():
    # default: the limit only, whatever the estimate
    assert duration_estimate(1.0, 7 * 86400.0, rule="limit") == (7 * 86400.0, "time_limit", False)
    assert duration_estimate(1.0, None, rule="limit") == (None, None, False)
    # site rule: min(est, limit)
    assert duration_estimate(60.0, 600.0, rule="bounded") == (60.0, "meta.est", False)
    assert duration_estimate(6000.0, 600.0, rule="bounded")[0] == 600.0
    # a job that ran past its estimate is re-estimated from its limit
    assert duration_estimate(60.0, 600.0, rule="bounded", executed_s=61.0) == \
        (600.0, "time_limit (outran meta.est)", True)
    assert duration_estimate(60.0, 600.0, rule="bounded", penalised=True)[0] == 600.0
    with pytest.raises(ConfigError, match="estimates.use"):
        Config(estimates="always").validate()


def _job(jid, user, limit_s, est, state="PENDING", start=None, gres=None, nodes=(), alloc=()):
    admin = f"gimbal:v1;app=bert;est={est}" if est else ""
    return SlurmJob(job_id=jid, name=jid, user=user, state=state, reason="Priority",
                    priority=100, nice=0, submit_time=NOW - 1000 + int(jid), start_time=start,
                    time_limit_s=limit_s, partition="gpu", num_nodes=1, nodes=tuple(nodes),
                    req_nodes=(), gres_req=gres if gres is not None else {"gpu": 1},
                    gres_alloc=tuple(alloc), comment="", admin_comment=admin,
                    meta=parse_meta(admin))


class Fixed:
    """A backend answering with fixed jobs and nodes (no mutations expected)."""

    name = "fixed"
    release = "22.05"

    def __init__(self, jobs, nodes):
        self._jobs, self._nodes = jobs, nodes
        self.read_warnings, self.node_warnings = [], []

    def version(self):
        return (22, 5, 8)

    def jobs(self):
        return list(self._jobs)

    def nodes(self):
        return list(self._nodes)

    def describe(self, job_id, field, value):
        return ("scontrol", "update", f"JobId={job_id}", f"{field}={value}")

    def change(self, job_id, field, value, before=None, dry_run=False, force=False):
        from gimbalctl.slurm.types import Change
        return Change(job_id, field, None, value, self.describe(job_id, field, value),
                      applied=not dry_run)


NODES = [SlurmNode(f"gpu{i}", "idle", {"gpu": 4}, ("gpu",)) for i in (1, 2)]


def test_outrunning_an_estimate_penalises_the_users_next_jobs(store, tmp_path):
    cfg = Config(policy="sjf", state_dir=str(tmp_path), estimates="bounded",
                 estimate_penalty_s=3600)
    ran = _job("1", "mallory", 36000.0, 60, state="RUNNING", start=NOW - 120,
               nodes=("gpu1",), alloc=[GresUse("gpu1", "gpu", 1, {0: 1})])
    first = run_cycle(cfg, Fixed([ran], NODES), store, get_policy("sjf"), now=NOW)
    assert first.snapshot.inputs["1"]["duration_source"] == "time_limit (outran meta.est)"
    assert store.job_rows()["1"].est_outran == 1
    # mallory's next job: its est is ignored; alice's is used
    nxt = [_job("2", "mallory", 7200.0, 1), _job("3", "alice", 3600.0, 1800)]
    res = run_cycle(cfg, Fixed([ran] + nxt, NODES + [SlurmNode("gpu3", "idle", {"gpu": 4})]),
                    store, get_policy("sjf"), now=NOW, dry_run=True)
    assert res.snapshot.inputs["2"]["duration_source"] == "time_limit (user penalised)"
    assert res.snapshot.inputs["2"]["duration_estimate"] == 7200.0
    assert res.snapshot.inputs["3"]["duration_estimate"] == 1800.0


# ------------------------------------------------------------------ item 5
def test_gate_releases_only_its_own_holds():
    gated = _job("9", "mallory", 600.0, None, gres={})
    gated = dataclasses.replace(gated, reason="JobHeldUser", meta=parse_meta(
        "gimbal:v1;app=bert;gate=1"))
    assert own_hold(gated, None)  # the gsbatch --gate submission hold
    assert own_hold(gated, "requeue_hold")  # gimbal's pre-emption
    assert not own_hold(gated, "release")  # held again after gimbal released it
    assert not own_hold(dataclasses.replace(gated, reason="JobHeldAdmin"), None)
    assert not own_hold(dataclasses.replace(gated, reason="JobHeldAdmin"), "requeue_hold")


# ------------------------------------------------------------------ item 6
def test_exclusive_and_whole_node_jobs_hold_their_gpus():
    ex = _job("1", "alice", 600.0, None, state="RUNNING", start=NOW - 10, gres={},
              nodes=("gpu1",), alloc=[GresUse("gpu1", "gpu", 4, {i: 1 for i in range(4)})])
    whole = _job("2", "alice", 600.0, None, state="RUNNING", start=NOW - 10, gres={},
                 nodes=("gpu2",))
    shard = _job("3", "alice", 600.0, None, state="RUNNING", start=NOW - 10,
                 gres={"shard": 3}, nodes=("gpu3",), alloc=[GresUse("gpu3", "shard", 3, {0: 3})])
    nodes = [SlurmNode("gpu1", "allocated", {"gpu": 4}), SlurmNode("gpu2", "allocated", {"gpu": 4}),
             SlurmNode("gpu3", "mixed", {"gpu": 4, "shard": 16})]
    res = build_snapshot([ex, whole, shard], nodes, default_models(), now=NOW)
    free = set(res.snapshot.free_gpus)
    assert free == {Gpu("gpu3", i) for i in (1, 2, 3)}
    assert res.inputs["1"]["gpus"] == [f"gpu1:{i}" for i in range(4)]
    assert res.inputs["2"]["gpus"] == [f"gpu2:{i}" for i in range(4)]
    assert res.snapshot.jobs["1"].num_gpus == 4


# ------------------------------------------------------------------ item 12
JS1 = "JS1:H4sIAAAAAAAAA6tWKkktLlGyUlAqS8wpTtVRKi1OLUrNS05VslIqS8wpTgUA"


def test_js1_admin_comment_keeps_the_metadata_read_before(store, tmp_path):
    cfg = Config(policy="sjf", state_dir=str(tmp_path))
    job = _job("5", "alice", 600.0, 300)
    job = dataclasses.replace(job, admin_comment="gimbal:v1;app=bert;batch=64;est=300",
                              meta=parse_meta("gimbal:v1;app=bert;batch=64;est=300"))
    run_cycle(cfg, Fixed([job], NODES), store, get_policy("sjf"), now=NOW)
    assert store.job_rows()["5"].meta["app"] == "bert"
    js = dataclasses.replace(job, admin_comment=JS1, meta=parse_meta(JS1))
    assert not js.meta.tagged and not js.meta.warnings
    res = run_cycle(cfg, Fixed([js], NODES), store, get_policy("sjf"), now=NOW)
    assert res.status == "done" and not [w for w in res.warnings if "job 5" in w]
    inp = res.snapshot.inputs["5"]
    assert (inp["app"], inp["batch"], inp["meta_source"]) == ("bert", 64, "state")
    assert store.job_rows()["5"].meta["source"] == "admin_comment"  # not overwritten


def test_config_file_estimates_section(tmp_path):
    p = tmp_path / "g.toml"
    p.write_text('[estimates]\nuse = "bounded"\npenalty_s = 0\n')
    cfg = load(str(p))
    assert (cfg.estimates, cfg.estimate_penalty_s) == ("bounded", 0.0)


def test_iters_claim_is_bounded_like_an_estimate(store, tmp_path):
    """``iters=1`` is a length claim (length = iters x iteration time): by default it ranks
    nothing (the limit does); under the site rule it is used, at most up to the limit."""
    def job(jid, user, limit_s, iters):
        admin = f"gimbal:v1;app=bert;batch=64;iters={iters}" if iters else "gimbal:v1;app=bert"
        return dataclasses.replace(_job(jid, user, limit_s, None), admin_comment=admin,
                                   meta=parse_meta(admin))
    jobs = [job("1", "alice", 600.0, None), job("2", "mallory", 7 * 86400.0, 1),
            job("3", "mallory", 300.0, 10 ** 9)]
    res = run_cycle(Config(policy="sjf", state_dir=str(tmp_path)), Fixed(jobs, []), store,
                    get_policy("sjf"), now=NOW, dry_run=True)
    assert res.queue == ["3", "1", "2"]  # by time limit only
    s = res.snapshot.snapshot
    assert s.job_length(s.jobs["2"]) == pytest.approx(7 * 86400.0)
    assert res.snapshot.inputs["2"]["iters_source"] == "time_limit"
    res = run_cycle(Config(policy="sjf", state_dir=str(tmp_path), estimates="bounded"),
                    Fixed(jobs, []), store, get_policy("sjf"), now=NOW, dry_run=True)
    assert res.queue[0] == "2"  # the site trusts claims ...
    s = res.snapshot.snapshot
    assert s.job_length(s.jobs["3"]) == pytest.approx(300.0)  # ... bounded by the limit
