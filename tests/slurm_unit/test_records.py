"""The allocation record on the live path: decision-file and environment validation,
GPU types from Slurm GRES, and how build_snapshot picks the record of a running job."""
import json

import pytest

from gimbalctl.daemon import _decision_for, apply_targets, Target
from gimbalctl.config import Config
from gimbalctl.profiles import default_models
from gimbalctl.records import RecordError, workers_from_wire, workers_to_wire
from gimbalctl.slurm.meta import parse_meta
from gimbalctl.slurm.parse import nodes_from_json, parse_gpu_type
from gimbalctl.slurm.types import GresUse, SlurmJob, SlurmNode
from gimbalctl.snapshot import build_snapshot
from launcher.decision import DecisionError, LauncherDecision
from launcher.envvars import ConfigError, config
from policies.model import Gpu, WorkerAlloc, uniform_workers
from policies.plan import StartJob

NOW = 1_800_000_000.0
G = (Gpu("n1", 0), Gpu("n1", 2))
REC = (WorkerAlloc(G[0], 48, 16, 3, 50, 4000, 0), WorkerAlloc(G[1], 16, 16, 1, 50, None, 0))


def _job(state="RUNNING", batch=64, gpus=(0, 2)):
    c = f"gimbal:app=cifar10,batch={batch}"
    alloc = (GresUse("n1", "gpu", len(gpus), {i: 1 for i in gpus}),) if state == "RUNNING" else ()
    return SlurmJob("7", "j", "u", state, "", 1, 0, NOW - 50, NOW - 10 if alloc else None, None,
                    "gpu", 1, ("n1",) if alloc else (), (), {"gpu": len(gpus)}, alloc, c, "",
                    meta=parse_meta("", c))


NODES = [SlurmNode("n1", "mixed", {"gpu": 4}, (), "k80")]


class _Rep:
    def __init__(self, extra, step=10):
        self.extra, self.step, self.step_time_s, self.samples_per_s = extra, step, 0.5, None


def test_wire_form_round_trips_and_names_bad_fields():
    assert workers_from_wire(workers_to_wire(REC)) == REC
    with pytest.raises(RecordError, match=r"workers\[1\]: field 'micro_batch'"):
        workers_from_wire([workers_to_wire(REC)[0], {"gpu": "n1:2", "share": 3}])
    with pytest.raises(RecordError, match="node:index"):
        workers_from_wire([{"gpu": "n1", "share": 1, "micro_batch": 1}])


@pytest.mark.parametrize("workers,msg", [
    ([{"gpu": "n1:0", "share": 40, "micro_batch": 16}], "does not cover share 40"),
    ([{"gpu": "n1:0", "share": 10, "micro_batch": 16}], "sum to 10, not 'global_batch' \\(64\\)"),
    ([{"gpu": "x", "share": 64, "micro_batch": 64}], "'gpu' must be 'node:index'"),
    ([{"gpu": "n1:0", "share": 64, "micro_batch": 64, "mps_pct": 120}], "mps_pct"),
    ([{"gpu": "n1:0", "share": 64, "micro_batch": 64, "colour": 1}], "unknown field"),
    ("n1:0", "non-empty list"),
])
def test_decision_workers_are_validated(workers, msg):
    with pytest.raises(DecisionError, match=msg):
        LauncherDecision.from_dict({"version": 1, "job_id": "7", "global_batch": 64,
                                    "workers": workers}, where="d.json")


def test_environment_record_applies_only_to_its_world_size():
    recs = workers_to_wire(REC)
    cfg = config({"GIMBAL_WORKERS": json.dumps(recs)})
    assert cfg.worker(1, 2)["micro_batch"] == 16 and cfg.shares(2) == [48, 16]
    assert cfg.worker(0, 3) is None and cfg.shares(3) is None  # another world size: even split
    rf = cfg.report_fields(2, 64, [40, 24])
    assert [w["share"] for w in rf["workers"]] == [40, 24] and rf["global_batch"] == 64
    with pytest.raises(ConfigError, match="GIMBAL_WORKERS"):
        config({"GIMBAL_WORKERS": "[{"})


def test_gpu_type_from_gres():
    assert parse_gpu_type("gpu:v100:4,shard:16") == "v100"
    assert parse_gpu_type("gres/gpu:Tesla_T4:2(S:0)") == "tesla_t4"
    assert parse_gpu_type("gpu:4") is None and parse_gpu_type(None) is None
    nodes = nodes_from_json({"nodes": [{"name": "a", "state": "idle", "gres": "gpu:a100:8"},
                                       {"name": "b", "state": "idle", "gres": "gpu:2"}]})
    assert [n.gpu_type for n in nodes] == ["a100", None]


def test_snapshot_nodes_carry_type_memory_and_speed_table():
    s = build_snapshot([], NODES + [SlurmNode("n2", "idle", {"gpu": 2})], default_models(),
                       now=NOW).snapshot
    assert [(n.gpu_type, n.gpu_mem_mb) for n in s.nodes] == [("k80", 12288), ("gpu", 16384)]
    assert s.gpu_types.speed("cifar10", "k80") == default_models().gpu_types.speed("cifar10", "k80")


def test_running_allocation_prefers_report_then_decision_then_even_split():
    dec = LauncherDecision("7", global_batch=64, workers=tuple(workers_to_wire(REC)))
    rep = _Rep({"workers": workers_to_wire(REC), "global_batch": 64})
    a = build_snapshot([_job()], NODES, default_models(), now=NOW, reports={"7": rep}).snapshot
    assert a.jobs["7"].allocation.workers == REC
    b = build_snapshot([_job()], NODES, default_models(), now=NOW, decisions={"7": dec}).snapshot
    assert b.jobs["7"].allocation.workers == REC
    c = build_snapshot([_job()], NODES, default_models(), now=NOW).snapshot
    assert c.jobs["7"].allocation.workers == uniform_workers(G, 32, 1, None, 64)


def test_record_naming_other_gpus_is_not_used():
    other = [dict(w, gpu="n1:1") if i == 1 else w for i, w in enumerate(workers_to_wire(REC))]
    res = build_snapshot([_job()], NODES, default_models(), now=NOW,
                         reports={"7": _Rep({"workers": other})})
    assert res.snapshot.jobs["7"].allocation.workers == uniform_workers(G, 32, 1, None, 64)
    assert any("job 7" in w and "Slurm reports" in w for w in res.warnings)
    bad = build_snapshot([_job()], NODES, default_models(), now=NOW,
                         reports={"7": _Rep({"workers": [{"gpu": 3}]})})
    assert any("job 7 report workers[0].gpu" in w for w in bad.warnings)


def test_batch_override_counts_samples_on_the_live_path():
    rec = uniform_workers(G, 64, 1, None, 128)
    rep = _Rep({"workers": workers_to_wire(rec), "global_batch": 128}, step=10)
    job = build_snapshot([_job()], NODES, default_models(), now=NOW,
                         reports={"7": rep}).snapshot.jobs["7"]
    assert job.allocation.global_batch == 128 and job.completed_iters == 20  # 10 steps of 128


def test_decision_carries_the_record_or_the_even_split():
    pend = build_snapshot([_job("PENDING")], NODES, default_models(), now=NOW)
    sj = pend.slurm_jobs["7"]
    d = _decision_for(StartJob("7", G, 16, 3, workers=REC), sj, pend, "p")
    assert workers_from_wire(list(d.workers)) == REC and d.mps_thread_pct == 50
    e = _decision_for(StartJob("7", G, 32), sj, pend, "p")
    assert workers_from_wire(list(e.workers)) == uniform_workers(G, 32, 1, None, 64)


def test_an_invalid_record_fails_only_that_jobs_decision(tmp_path):
    pend = build_snapshot([_job("PENDING")], NODES, default_models(), now=NOW)
    bad = StartJob("7", G, 16, workers=(WorkerAlloc(G[0], 60, 16, 1), WorkerAlloc(G[1], 4, 4)))
    changes = apply_targets(Config(state_dir=str(tmp_path)), None, None, None,
                            [Target("7", "decision", bad, "plan: start")], pend, "p", False)
    assert len(changes) == 1 and "does not cover share 60" in changes[0].error
