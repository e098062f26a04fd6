"""GPU types in gate mode (seed 002 on Slurm): the GRES a start sets per release.

26.05 (and releases from 23.02, :data:`gimbalctl.daemon.TYPED_GRES_FROM`) changes the GRES type
of a pending or requeue-held job, so a start names the chosen nodes' type; 22.05 accepts such
an update but the job then never runs (``BadConstraints``, docs/slurm.md), so it keeps the job's
own type (or none) and pins the nodes, and never starts a typed job on another type."""
import pytest

from gimbalctl.config import Config
from gimbalctl.daemon import gate_gres, gate_targets, target_gpu_type
from gimbalctl.slurm.backend import FIELDS, _same, gres_str
from gimbalctl.slurm.meta import parse_meta
from gimbalctl.slurm.parse import gres_gpu_type, nodes_from_json, parse_gpu_type
from gimbalctl.slurm.types import SlurmJob, SlurmNode
from policies.model import Gpu
from policies.plan import StartJob, make_plan

NODES = {"h1": SlurmNode("h1", "idle", {"gpu": 2}, ("gpu",), "k80", "K80"),
         "h2": SlurmNode("h2", "idle", {"gpu": 2}, ("gpu",), "v100", "V100")}


def sjob(jid, gres=None, gtype=None, admin="gimbal:v1;app=cifar10;batch=128;gate=1;gpus=1"):
    return SlurmJob(jid, "j", "alice", "PENDING", "JobHeldUser", 0, 0, 0.0, None, 3600.0, "gpu",
                    1, (), (), gres or {}, (), "", admin, meta=parse_meta(admin),
                    gpu_type_req=gtype)


def start(jid, node, n=1):
    return StartJob(jid, tuple(Gpu(node, i) for i in range(n)), 128, 1)


def test_gres_type_is_kept_as_slurm_spells_it():
    assert gres_gpu_type("gres/gpu:V100:1") == "V100" and parse_gpu_type("gres/gpu:V100:1") == "v100"
    assert gres_gpu_type("gres:gpu:k80:2(IDX:0-1)") == "k80" and gres_gpu_type("gpu:4") is None
    (n,) = nodes_from_json({"nodes": [{"name": "a", "state": "idle", "gres": "gpu:A100:8"}]})
    assert (n.gpu_type, n.gres_type) == ("a100", "A100")
    assert gres_str({"gpu": 1}, "k80") == "gpu:k80:1" and gres_str({"gpu": 1, "shard": 2}) == "gpu:1,shard:2"
    assert FIELDS["gres"](sjob("1", {"gpu": 1}, "k80")) == "gpu:k80:1"


@pytest.mark.parametrize("old,new,same", [
    ("gpu:k80:1", "gpu:k80:1", True), ("gres/gpu:k80:1", "gpu:k80:1", True),
    ("gpu:k80:1", "gpu:v100:1", False), ("gpu:1", "gpu:v100:1", False),
    ("gpu:k80:1", "gpu:1", False), ("gpu:1", "gpu:2", False), ("", "gpu:1", False)])
def test_a_type_change_is_a_change(old, new, same):
    assert _same("gres", old, new) is same


@pytest.mark.parametrize("typed,job,node,want", [
    (True, sjob("1"), "h2", "gpu:V100:1"),                      # 26.05: the chosen type
    (True, sjob("1", {"gpu": 1}, "K80"), "h2", "gpu:V100:1"),   # ... also from another type
    (False, sjob("1"), "h2", "gpu:1"),                          # 22.05: untyped, node pinned
    (False, sjob("1", {"gpu": 1}, "V100"), "h2", "gpu:V100:1"),  # ... the job's own type kept
])
def test_gate_gres_per_release(typed, job, node, want):
    w: list = []
    assert gate_gres(start(job.job_id, node), job, NODES, Config(mode="gate"), w, typed=typed) == want
    assert target_gpu_type(start("1", node), NODES) == NODES[node].gres_type


def _targets(typed, *jobs_and_nodes):
    jobs = {j.job_id: j for j, _ in jobs_and_nodes}
    plan = make_plan("similarity", [start(j.job_id, n) for j, n in jobs_and_nodes], [], {})
    w: list = []
    ts = gate_targets(Config(mode="gate"), plan, jobs, NODES, w, now=0.0, typed_gres=typed)
    return {(t.job_id, t.field): t.value for t in ts}, w


def test_22_05_never_starts_a_typed_job_on_another_type():
    typed_k80 = sjob("1", {"gpu": 1}, "K80")
    t, w = _targets(False, (typed_k80, "h2"), (sjob("2"), "h2"))
    assert not [k for k in t if k[0] == "1"]  # left held: its GRES would never run on h2
    assert "cannot change the type" in w[0] and "'K80'" in w[0]
    assert t[("2", "gres")] == "gpu:1" and t[("2", "req_nodes")] == "h2" and t[("2", "release")]
    # on its own type it starts as usual
    t, w = _targets(False, (typed_k80, "h1"))
    assert t[("1", "gres")] == "gpu:K80:1" and t[("1", "req_nodes")] == "h1" and not w


def test_26_05_moves_a_typed_job_by_changing_its_type():
    t, w = _targets(True, (sjob("1", {"gpu": 1}, "K80"), "h2"))
    assert t[("1", "gres")] == "gpu:V100:1" and t[("1", "req_nodes")] == "h2" and not w
