"""Gate mode on a real cluster: gsbatch --gate jobs start only when and where the plan says;
a co-location plan puts two jobs on one GPU (checked from Slurm's GRES indices)."""
from __future__ import annotations

import json
import sys

import pytest

from gimbalctl.config import Config
from gimbalctl.daemon import run_cycle
from gimbalctl.slurm.cli import CliBackend
from gimbalctl.store import Store
from policies.model import Gpu
from policies.plan import StartJob, make_plan
from tests.slurm.cluster import REPO
from tests.slurm.test_daemon_ordering import Gimbal

pytestmark = pytest.mark.slurm


def gsbatch(c, *args):
    out = c.run([sys.executable if not c.in_chroot else "python", str(REPO / "slurm_hooks" / "gsbatch"),
                 *args, "--output=/dev/null", "--chdir=/tmp", "--wrap", "sleep 600"], check=True)
    return out.stdout.strip().split(";")[0].split()[-1]


def backend_for(c):
    return CliBackend(prefix=c.prefix, timeout=60) if c.in_chroot else _host_backend(c)


def _host_backend(c):
    import os
    os.environ["SLURM_CONF"] = c.env["SLURM_CONF"]
    return CliBackend(timeout=60)


def test_gate_jobs_start_where_the_plan_says(slurm_cluster, clean_slurm):
    c = slurm_cluster
    # everything busy except gpu3: the plan can only put the gate job there
    for n in ("gpu1", "gpu2"):
        c.wait_state(c.submit(["--gres=gpu:4", "-w", n]), "RUNNING", timeout=30)
    c.wait_state(c.submit(["--gres=gpu:2", "-w", "mps1"]), "RUNNING", timeout=30)
    a = gsbatch(c, "--app", "bert", "--batch", "64", "--est", "600", "--gate", "--gres=gpu:2")
    b = gsbatch(c, "--app", "bert", "--batch", "64", "--est", "900", "--gate", "--gres=gpu:4")
    assert c.job_state(a) == "PENDING" and c.show_job(a)["Reason"] == "JobHeldUser"
    g = Gimbal(c)
    r = g("daemon", "--once", "--mode", "gate", "--policy", "fifo", "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    start = [x for x in res["plan"]["actions"] if x["job_id"] == a]
    assert start and all(gpu.startswith("gpu3:") for gpu in start[0]["gpus"])
    c.wait_state(a, "RUNNING", timeout=30)
    assert c.show_job(a)["NodeList"] == "gpu3"
    # b does not fit (FIFO strict): it stays held
    assert c.show_job(b)["Reason"] == "JobHeldUser"
    assert g.rows(f"select field from audit where job_id='{a}' order by id") == \
        [("req_nodes",), ("decision",), ("release",)]


def test_colocation_two_jobs_one_gpu(slurm_cluster, clean_slurm, tmp_path):
    from launcher.decision import decision_path, read_decision
    c = slurm_cluster
    be = backend_for(c)
    k = gsbatch(c, "--app", "cifar10", "--batch", "64", "--share", "--gate")
    j = gsbatch(c, "--app", "ncf", "--batch", "128", "--share", "--gate")
    plans = iter([
        make_plan("stub", [StartJob(k, (Gpu("mps1", 0),), 64)], [j], {}),
        make_plan("stub", [StartJob(j, (Gpu("mps1", 0),), 64, 2, share_with=(k,), mps_pct=50)], [], {}),
    ])

    class Stub:
        def schedule(self, snap):
            return next(plans)
    st = Store(str(tmp_path / "g.db"))
    st.upgrade()
    state = tmp_path / "state"
    cfg = Config(mode="gate", state_dir=str(state))
    run_cycle(cfg, be, st, Stub())
    c.wait_state(k, "RUNNING", timeout=30)
    res = run_cycle(cfg, be, st, Stub())
    assert res.status == "done", [ch.as_dict() for ch in res.changes]
    c.wait_state(j, "RUNNING", timeout=30)
    jobs = {x.job_id: x for x in be.jobs(["RUNNING"])}
    uk, uj = jobs[k].gres_alloc, jobs[j].gres_alloc
    assert uk[0].name == uj[0].name == "mps" and uk[0].node == uj[0].node == "mps1"
    assert uk[0].indices == uj[0].indices  # the same GPU, as Slurm reports it
    d = read_decision(decision_path(j, root=str(state)))
    assert (d.share_with, d.mps_thread_pct, d.sub_batch, d.accum_steps) == (k, 50, 64, 2)


def test_gate_job_with_gpus_key_starts_with_that_many_gpus(slurm_2205, clean_slurm):
    """``gsbatch --gate --gpus 2`` submits without GRES; the daemon starts it with ``gpu:2`` on
    the node the plan chose (without the key it would count, and get, 1 GPU)."""
    c = slurm_2205
    j = gsbatch(c, "--app", "bert", "--batch", "64", "--est", "600", "--gate", "--gpus", "2")
    info = c.show_job(j)
    assert info["AdminComment"].endswith(";gate=1;gpus=2")  # normalized by job_submit.lua
    assert info.get("TresPerNode", "(null)") in ("(null)", "N/A", "")  # no GRES yet
    g = Gimbal(c)
    r = g("daemon", "--once", "--mode", "gate", "--policy", "fifo", "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    start = [a for a in res["plan"]["actions"] if a["job_id"] == j]
    assert start and len(start[0]["gpus"]) == 2
    node = start[0]["gpus"][0].split(":")[0]
    c.wait_state(j, "RUNNING", timeout=30)
    sj = {x.job_id: x for x in _host_backend(c).jobs(["RUNNING"])}[j]
    assert sj.nodes == (node,) and sj.gres_req == {"gpu": 2}
    assert [(u.node, u.name, len(u.indices)) for u in sj.gres_alloc] == [(node, "gpu", 2)]
    assert g.rows(f"select field, after from audit where job_id='{j}' order by id")[:2] == \
        [("gres", '"gpu:2"'), ("req_nodes", f'"{node}"')]
