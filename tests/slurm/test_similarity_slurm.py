"""Seed 002 on a real cluster with two GPU types: the daemon under ``similarity`` (decide =
gpu) places a gate job on the type its closest reference says is fastest."""
from __future__ import annotations

import json
from time import sleep

import pytest

from gimbalctl.daemon import REQUEUE_SETTLE_S
from tests.slurm.test_daemon_gate import gsbatch
from tests.slurm.test_daemon_ordering import Gimbal

pytestmark = pytest.mark.slurm


def gsbatch_script(c, *args, output="/dev/null", chdir="/tmp") -> str:
    """Submit through slurm_hooks/gsbatch with a batch script (its path as the jobs see it)."""
    import sys
    from tests.slurm.cluster import REPO
    out = c.run([sys.executable if not c.in_chroot else "python",
                 str(REPO / "slurm_hooks" / "gsbatch"), *args[:-1], f"--output={output}",
                 f"--chdir={chdir}", args[-1]], check=True)
    return out.stdout.strip().split(";")[0].split()[-1]


def _config(g: Gimbal, options: str) -> str:
    path = g.host_dir / "gimbal.toml"
    path.write_text('[daemon]\npolicy = "similarity"\nmode = "gate"\n'
                    f'[policy_options]\n{options}\n')
    return f"{g.inner}/gimbal.toml"


def test_similarity_gpu_places_a_job_on_its_fastest_gpu_type(slurm_2205_het, clean_slurm):
    c = slurm_2205_het
    # cifar10 (ResNet-18): about 6x faster on V100 than on K80 (bundled Gavel-derived speeds)
    a = gsbatch(c, "--app", "cifar10", "--batch", "128", "--gate", "--gres=gpu:1")
    g = Gimbal(c)
    cfg = _config(g, 'decide = "gpu"\ncd = false\njp = false')
    r = g("daemon", "--once", "--config", cfg, "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    (start,) = [x for x in res["plan"]["actions"] if x["job_id"] == a]
    assert [gpu.split(":")[0] for gpu in start["gpus"]] == ["h2"]  # the V100 node
    c.wait_state(a, "RUNNING", timeout=30)
    assert c.show_job(a)["NodeList"] == "h2"
    why = res["plan"]["reasons"][a]
    assert why["code"] == "started" and why["numbers"]["similarity"] == pytest.approx(1.0)
    # the node types the policy saw came from the GRES types
    r = g("explain", a, "--json")
    assert r.returncode == 0, r.stderr


def test_similarity_takes_the_slower_type_when_the_fast_one_is_full(slurm_2205_het, clean_slurm):
    c = slurm_2205_het
    c.wait_state(c.submit(["--gres=gpu:2", "-w", "h2", "-J", "blocker"]), "RUNNING", timeout=30)
    a = gsbatch(c, "--app", "cifar10", "--batch", "128", "--gate", "--gres=gpu:1")
    g = Gimbal(c)
    cfg = _config(g, 'decide = "gpu"\ncd = false\njp = false')
    r = g("daemon", "--once", "--config", cfg, "--json")
    assert r.returncode == 0, r.stderr
    c.wait_state(a, "RUNNING", timeout=30)
    assert c.show_job(a)["NodeList"] == "h1"  # the K80 node: Alg. 2 takes the next suggestion


# gsbatch --allow-batch-change end to end: a training stand-in run by gimbal-run (CPU gloo);
# rank 0's throughput reports say which global batch ran and where it came from
TRAIN_JOB = """#!/bin/bash
export GIMBAL_STATE_DIR={inner}/state PYTHONPATH={repo} OMP_NUM_THREADS=1
# --standalone: the fake nodes' names do not resolve, so torchrun rendezvous on localhost
exec {py} -m launcher.run --standalone --job-id $SLURM_JOB_ID --nproc 1 --poll-interval 0 \\
  -- {repo}/examples/train_mnistlike.py --steps 25 --samples 1024 --global-batch 64 --hidden 16
"""


def _reports(g, job) -> list:
    p = g.host_dir / "state" / "reports" / f"{job}.jsonl"
    return [json.loads(x) for x in p.read_text().splitlines() if x.strip()] if p.exists() else []


def _train_script(g) -> str:
    import sys
    from tests.slurm.cluster import REPO
    (g.host_dir / "train.sh").write_text(TRAIN_JOB.format(
        inner=g.inner, repo=REPO, py="python" if g.c.in_chroot else sys.executable))
    return f"{g.inner}/train.sh"


def _ran(c, g, job, timeout=180) -> dict:
    """The newest report of a finished training job."""
    c.wait_state(job, ("COMPLETED", "FAILED"), timeout=timeout)
    out = g.host_dir / f"out-{job}"
    assert c.job_state(job) == "COMPLETED", out.read_text()[-3000:] if out.exists() else job
    reps = _reports(g, job)
    assert reps, f"no reports of job {job}"
    return reps[-1]


def test_batch_change_only_for_jobs_that_allow_it(slurm_2205_het, clean_slurm):
    """similarity_gpu_ngpu_bs (Alg. 2 with the batch as a decision variable): the daemon
    changes the global batch of the job submitted with ``gsbatch --allow-batch-change`` and
    not of the other; gimbal-run applies it and the training reports the batch it ran."""
    c = slurm_2205_het
    g = Gimbal(c)
    script = _train_script(g)
    common = ("--app", "cifar10", "--batch", "64")
    out = f"{g.inner}/out-%j"
    flex = gsbatch_script(c, *common, "--allow-batch-change", "32:512", "--gate", "--gpus", "1",
                          script, output=out, chdir=g.inner)
    # (the job's own directory: python -m puts the working directory first on sys.path)
    fixed = gsbatch_script(c, *common, "--gate", "--gpus", "1", script, output=out, chdir=g.inner)
    assert c.show_job(flex)["AdminComment"].endswith(";batchrange=32:512")
    cfg = _config(g, 'decide = "gpu_ngpu_bs"\ncd = false\njp = false')
    r = g("daemon", "--once", "--config", cfg, "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    acts = {a["job_id"]: a for a in res["plan"]["actions"]}
    assert acts[flex]["action"] == "StartJob" and acts[fixed]["action"] == "StartJob"
    chosen = acts[flex].get("global_batch")
    assert chosen is not None and chosen != 64 and 32 <= chosen <= 512
    assert acts[fixed].get("global_batch") in (None, 64)
    got_flex, got_fixed = _ran(c, g, flex), _ran(c, g, fixed)
    assert (got_flex["global_batch"], got_flex["batch_source"]) == (chosen, "applied")
    assert (got_fixed["global_batch"], got_fixed["batch_source"]) == (64, "submitted")


def test_batch_permission_cannot_be_forged_in_the_comment(slurm_2205_het, clean_slurm):
    """The key anywhere but where job_submit.lua puts it counts for nothing: in the middle of
    the user's Comment the daemon sees no ``batch_range``, and an override written for the job
    anyway (as a buggy or forged decision would) is refused by gimbal-run, which reads the
    AdminComment; a user's later ``scontrol update comment=...batchrange=...`` is refused."""
    from tests.slurm.test_hostile_users import ATTACKER, ensure_user
    c = slurm_2205_het
    ensure_user(c, ATTACKER)
    g = Gimbal(c)
    _train_script(g)  # writes train.sh, read below
    forged = c.submit(["--hold", "--gres=gpu:1", f"--output={g.inner}/out-%j", f"--chdir={g.inner}",
                       "--comment=x gimbal:app=cifar10,batch=64,batchrange=32:512"],
                      script=(g.host_dir / "train.sh").read_text())
    assert c.show_job(forged).get("AdminComment") in (None, "", "(null)")
    # the same from the unprivileged user, and a range job_submit.lua refuses (no batch)
    by_attacker = c.submit(["--hold", "--gres=gpu:1",
                            "--comment=x gimbal:app=cifar10,batch=64,batchrange=1:65536"],
                           user=ATTACKER)
    assert c.show_job(by_attacker).get("AdminComment") in (None, "", "(null)")
    import subprocess
    with pytest.raises(subprocess.CalledProcessError) as ei:
        c.submit(["--hold", "--comment=gimbal:app=cifar10,gate=1,batchrange=1:65536"], user=ATTACKER)
    assert "batchrange needs batch" in ei.value.stderr
    # the attacker's own, valid, fixed-batch gate job; then the metadata change after submission
    own = c.submit(["--hold", "--output=/dev/null", "--comment=gimbal:app=cifar10,batch=64,gate=1,gpus=1"],
                   user=ATTACKER)
    before = c.show_job(own)
    upd = c.run(["scontrol", "update", f"jobid={own}",
                 "comment=gimbal:app=cifar10,batch=64,gate=1,gpus=1,batchrange=1:4096"], user=ATTACKER)
    assert upd.returncode != 0
    after = c.show_job(own)
    assert (after["Comment"], after["AdminComment"]) == (before["Comment"], before["AdminComment"])
    assert "batchrange" not in after["AdminComment"]
    cfg = _config(g, 'decide = "gpu_ngpu_bs"\ncd = false\njp = false')
    r = g("daemon", "--once", "--config", cfg, "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    acts = {a["job_id"]: a for a in res["plan"]["actions"]}
    for j in (str(forged), str(own), str(by_attacker)):  # no permission: batch kept
        assert acts.get(j, {}).get("global_batch") in (None, 64, 128), acts.get(j)
    import sqlite3
    con = sqlite3.connect(g.host_db)
    inputs = json.loads(con.execute("select inputs from decisions order by id desc").fetchone()[0])
    con.close()
    for j in (str(forged), str(own), str(by_attacker)):
        assert inputs[j]["batch_range"] is None
    # an override for the forged job anyway: gimbal-run refuses it
    from launcher.decision import LauncherDecision, decision_path, write_decision
    write_decision(decision_path(str(forged), str(g.host_dir / "state")),
                   LauncherDecision(job_id=str(forged), global_batch=256, policy="forged"))
    c.run(["scontrol", "release", str(forged)], check=True)
    got = _ran(c, g, forged)
    assert (got["global_batch"], got["batch_source"]) == (64, "refused")


# A training stand-in that survives the checkpoint signal (gimbal-run would checkpoint on USR2;
# `scontrol requeuehold` then ends it) and says where it ran at each start
MOVE_JOB = """#!/bin/bash
echo "start ${{SLURM_RESTART_COUNT:-0}} $SLURMD_NODENAME" >> {inner}/starts-$SLURM_JOB_ID
trap 'true' USR2
while true; do sleep 0.2 & wait $!; done
"""


@pytest.mark.parametrize("release,backend", [("22.05", "cli"), ("26.05", "cli"),
                                             ("26.05", "pyslurm")])
def test_a_round_moves_a_job_between_gpu_types(release, backend, request, clean_slurm):
    """Alg. 2 with re-scheduling (``cd``): a job placed on the K80 node while the V100 node is
    busy is moved to the V100 node at a later round once it is free: checkpoint signal ->
    ``scontrol requeuehold`` -> started again on the other type.  26.05 changes the GRES type
    of the requeue-held job (``gpu:k80:1`` -> ``gpu:v100:1``) besides pinning the node; 22.05,
    which cannot change a pending job's type, keeps an untyped ``gpu:1`` and pins the node.
    On 26.05 also through the pyslurm backend (``gres_per_node={"gpu:v100": 1}``)."""
    c = request.getfixturevalue({"22.05": "slurm_2205_het", "26.05": "slurm_2605_het"}[release])
    c.cancel_all()
    g = Gimbal(c, backend)
    (g.host_dir / "move.sh").write_text(MOVE_JOB.format(inner=g.inner))
    (g.host_dir / "gimbal.toml").write_text(
        '[daemon]\npolicy = "similarity"\nmode = "gate"\n[gate]\npreempt_grace = 1\n'
        '[policy_options]\ndecide = "gpu"\ncd = true\njp = false\n')
    cfg = f"{g.inner}/gimbal.toml"
    blocker = c.submit(["--gres=gpu:2", "-w", "h2", "-J", "blocker"])
    c.wait_state(blocker, "RUNNING", timeout=30)
    job = gsbatch_script(c, "--app", "cifar10", "--batch", "128", "--gate", "--gpus", "1",
                         f"{g.inner}/move.sh")

    def cycle():
        r = g("daemon", "--once", "--config", cfg, "--json")
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout.strip().splitlines()[-1])

    def starts():
        p = g.host_dir / f"starts-{job}"
        return p.read_text().split("\n")[:-1] if p.exists() else []

    typed = release == "26.05"
    cycle()  # round 1: only the K80 node is free
    c.wait_state(job, "RUNNING", timeout=30)
    info = c.show_job(job)
    assert info["NodeList"] == "h1"
    assert info["TresPerNode"] == ("gres/gpu:k80:1" if typed else "gres:gpu:1")
    c.run(["scancel", str(blocker)], check=True)
    c.wait_state(blocker, ("CANCELLED", "COMPLETED"), timeout=30)
    res = cycle()  # round 2: re-scheduling moves it to the faster type
    acts = [a for a in res["plan"]["actions"] if a["job_id"] == job]
    assert {a["action"] for a in acts} & {"PreemptJob", "ResizeJob"}, acts
    assert all(g.startswith("h2:") for a in acts for g in a.get("gpus", ())), acts
    assert [(ch["field"]) for ch in res["changes"] if ch["job_id"] == job] == \
        ["signal", "requeue_hold"]
    c.wait_state(job, "PENDING", timeout=30)
    sleep(REQUEUE_SETTLE_S + 0.5)  # the daemon restarts a requeued job only after this
    res = cycle()  # round 3: the requeue-held job starts on the V100 node
    changed = {ch["field"]: ch for ch in res["changes"] if ch["job_id"] == job}
    assert ("gres" in changed) == typed, changed
    if typed:
        assert changed["gres"]["after"] == "gpu:v100:1"
    assert changed["req_nodes"]["after"] == "h2" and "release" in changed
    c.wait_state(job, "RUNNING", timeout=60)
    info = c.show_job(job)
    assert info["NodeList"] == "h2" and int(info["Restarts"]) == 1
    assert info["TresPerNode"] == ("gres/gpu:v100:1" if typed else "gres:gpu:1")
    import time
    deadline = time.monotonic() + 20
    while len(starts()) < 2 and time.monotonic() < deadline:
        time.sleep(0.3)
    assert starts() == ["start 0 h1", "start 1 h2"]


@pytest.mark.parametrize("release", ["22.05", "26.05"])
def test_a_job_that_names_a_gpu_type(release, request, clean_slurm):
    """A gate job submitted with its own typed GRES (``--gres=gpu:k80:1``) whose reference is
    fastest on V100: 26.05 starts it there with ``gpu:v100:1``; on 22.05 a type update is
    accepted but the job never runs (BadConstraints), so gimbal leaves it held and says why."""
    c = request.getfixturevalue({"22.05": "slurm_2205_het", "26.05": "slurm_2605_het"}[release])
    c.cancel_all()
    g = Gimbal(c)
    cfg = _config(g, 'decide = "gpu"\ncd = false\njp = false')
    job = gsbatch_script(c, "--app", "cifar10", "--batch", "128", "--gate", "--gres=gpu:k80:1",
                         "--wrap=sleep 600")
    r = g("daemon", "--once", "--config", cfg, "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    (act,) = [a for a in res["plan"]["actions"] if a["job_id"] == job]
    assert act["gpus"][0].startswith("h2:")  # the policy wants the V100 node
    if release == "26.05":
        c.wait_state(job, "RUNNING", timeout=30)
        info = c.show_job(job)
        assert (info["NodeList"], info["TresPerNode"]) == ("h2", "gres/gpu:v100:1")
    else:
        assert not [ch for ch in res["changes"] if ch["job_id"] == job]
        assert c.show_job(job)["Reason"] == "JobHeldUser"
        assert any("cannot change the type" in w for w in res.get("warnings", [])) or \
            "cannot change the type" in r.stderr, (res.get("warnings"), r.stderr[-500:])
