import json
import os
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from launcher.checkpoint import EXIT_CHECKPOINT
from launcher.decision import LauncherDecision, decision_path, write_decision
from launcher.run import Options, build_plan, classify_exit, cli
from launcher_testutil import EXAMPLE, REPO, fake_squeue_env, subprocess_env


def _invoke(args, env):
    clean = {k: None for k in os.environ if k.startswith(("SLURM", "GIMBAL_", "CUDA_"))}
    clean.update(env)
    return CliRunner().invoke(cli, args, env=clean)


def test_dry_run_two_node_fixture(slurm_env_2node, tmp_path):
    sd = str(tmp_path)
    write_decision(decision_path("48213", sd), LauncherDecision(
        job_id="48213", sub_batch=16, global_batch=64, mps_thread_pct=50, mps_mem_limit_mb=8000,
        stealing=True))
    # the job's AdminComment (read back through a FAKE squeue) names the decision's batch
    env = dict(slurm_env_2node, **fake_squeue_env(tmp_path, "gimbal:v1;app=bert;batch=64"))
    res = _invoke(["--dry-run", "--json", "--state-dir", sd, "--sub-batch", "8", "--",
                   "train.py", "--lr", "0.1"], env)
    assert res.exit_code == 0, res.output
    plan = json.loads(res.output)
    argv = plan["argv"]
    assert argv[1:3] == ["-m", "torch.distributed.run"]
    for a in ["--nnodes=2", "--nproc-per-node=4", "--rdzv-backend=c10d",
              "--rdzv-endpoint=gpu07:18213", "--rdzv-id=48213", "--rdzv-conf=is_host=1",
              "--max-restarts=0"]:
        assert a in argv
    assert argv[argv.index("launcher.worker") + 1:] == ["train.py", "--lr", "0.1"]
    env = plan["env"]
    assert env["PYTHONUNBUFFERED"] == "1" and env["GIMBAL_JOB_ID"] == "48213"
    assert env["GIMBAL_SUB_BATCH"] == "8"  # the flag wins over the decision's 16
    assert env["GIMBAL_GLOBAL_BATCH"] == "64" and env["GIMBAL_STEALING"] == "1"
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=8000M,1=8000M,2=8000M,3=8000M"
    assert env["GIMBAL_REPORT_PATH"] == os.path.join(sd, "reports", "48213.jsonl")


def test_dry_run_second_node_text(slurm_env_2node, tmp_path):
    env = dict(slurm_env_2node, SLURM_NODEID="1", SLURMD_NODENAME="gpu08",
               CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="30")
    res = _invoke(["--dry-run", "--state-dir", str(tmp_path), "--mps-thread-pct", "60", "--",
                   "train.py"], env)
    assert res.exit_code == 0, res.output
    assert "--rdzv-conf=is_host=0" in res.output and "--rdzv-endpoint=gpu07:18213" in res.output
    assert "export CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30" in res.output  # never loosened
    assert "export PYTHONUNBUFFERED=1" in res.output


@pytest.mark.parametrize("change,var", [
    ({"SLURM_JOB_ID": None, "SLURM_JOBID": None}, "SLURM_JOB_ID"),
    ({"SLURM_JOB_NODELIST": None, "SLURM_NODELIST": None}, "SLURM_JOB_NODELIST"),
    ({"SLURM_JOB_NUM_NODES": "x"}, "SLURM_JOB_NUM_NODES"),
    ({"SLURM_NTASKS_PER_NODE": "4"}, "SLURM_NTASKS_PER_NODE"),
    ({"SLURM_GPUS_ON_NODE": "-1"}, "SLURM_GPUS_ON_NODE"),
])
def test_bad_slurm_env_exit_2(slurm_env_2node, tmp_path, change, var):
    env = dict(slurm_env_2node)
    for k, v in change.items():
        if v is None:
            env.pop(k)
        else:
            env[k] = v
    res = _invoke(["--dry-run", "--state-dir", str(tmp_path), "--", "train.py"], env)
    assert res.exit_code == 2 and var in res.output, res.output


def test_bad_decision_file_exit_2(slurm_env_2node, tmp_path):
    p = decision_path("48213", str(tmp_path))
    os.makedirs(os.path.dirname(p))
    with open(p, "w") as fh:
        json.dump({"version": 1, "job_id": "48213", "mps_thread_pct": 500}, fh)
    res = _invoke(["--dry-run", "--state-dir", str(tmp_path), "--", "t.py"], slurm_env_2node)
    assert res.exit_code == 2 and "mps_thread_pct" in res.output and p in res.output


def test_relaunch_changes_rdzv_id(slurm_env_2node, tmp_path):
    opts = Options(script="t.py", script_args=[], state_dir=str(tmp_path))
    assert build_plan(opts, slurm_env_2node, restart_count=2).rdzv_id == "48213-r2"


def test_classify_exit():
    assert classify_exit(0, {}, None) == 0
    assert classify_exit(1, {0: 75, 1: 75}, None) == EXIT_CHECKPOINT
    assert classify_exit(1, {0: 75}, None) == EXIT_CHECKPOINT  # rank 1 killed by torchrun
    assert classify_exit(1, {0: 0, 1: 3}, None) == 3
    assert classify_exit(1, {0: 75, 1: 4}, None) == 4
    assert classify_exit(1, {}, signal.SIGTERM) == 143
    assert classify_exit(1, {}, None) == 1
    # every local worker's script ended with 0, then one crashed at interpreter teardown
    assert classify_exit(1, {0: 0, 1: 0}, None, local_ranks=2) == 0
    assert classify_exit(-6, {0: 0, 1: 0}, None, local_ranks=2) == 0
    assert classify_exit(1, {0: 0, 1: 0}, None) == 1  # rank count unknown
    assert classify_exit(1, {0: 0}, None, local_ranks=2) == 1  # rank 1 left no record
    assert classify_exit(1, {0: 0, 1: 0}, signal.SIGTERM, local_ranks=2) == 143


_TEARDOWN = """import os, signal, sys, time
def rank0_recorded():  # rank 1 acts only once rank 0's script has ended and been recorded
    while not os.path.exists(os.path.join(os.environ["GIMBAL_RUN_DIR"], "worker.0.exit")):
        time.sleep(0.05)
if os.environ["RANK"] == "1":
    if sys.argv[1] == "abort-at-exit":  # the script ends with 0, its interpreter then aborts
        import atexit
        atexit.register(lambda: (rank0_recorded(), os.abort()))
    else:  # killed before the script ends: no exit record
        rank0_recorded()
        os.kill(os.getpid(), signal.SIGKILL)
os.write(1, ("rank %s done\\n" % os.environ["RANK"]).encode())  # one write: ranks share the pipe
"""


@pytest.mark.parametrize("mode,rc", [("abort-at-exit", 0), ("killed", 1)])
def test_teardown_crash_after_finished_training(tmp_path, mode, rc):
    script = tmp_path / "teardown.py"
    script.write_text(_TEARDOWN)
    p = _gimbal_run(["--standalone", "--nproc", "2", "--state-dir", str(tmp_path), "--",
                     str(script), mode])
    out = p.communicate(timeout=120)[0]
    assert p.returncode == rc, out
    assert ("crashed while its interpreter shut down" in out) == (rc == 0), out
    assert "rank 0 done" in out


# ------------------------------------------------------------ end to end (real torchrun)
def _gimbal_run(args, env=None, gpu=False, **kw):
    """gimbal-run in a subprocess.  ``gpu=False`` hides the GPUs (``CUDA_VISIBLE_DEVICES=``):
    the multi-process tests run several CPU ranks, which gimbal-run would refuse on a node
    with fewer GPUs than processes; ``gpu=True`` leaves the node's GPUs visible."""
    base = {} if gpu else {"CUDA_VISIBLE_DEVICES": ""}
    return subprocess.Popen([sys.executable, "-m", "launcher.run", *args], cwd=REPO,
                            env=subprocess_env({**base, **(env or {})}), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, **kw)


def _wait_for(path, proc, timeout=60):
    t0 = time.time()
    while not os.path.exists(path):
        assert proc.poll() is None, proc.communicate()[0]
        assert time.time() - t0 < timeout
        time.sleep(0.1)


def _reference_param_sum(monkeypatch, tmp_path, argv):
    """The same training in this process with world size 1 (one rank takes
    the whole global batch): 2-rank DDP must give the same parameters."""
    for k in list(os.environ):
        if k.startswith(("GIMBAL_", "SLURM", "WORLD_SIZE", "RANK", "LOCAL_RANK")):
            monkeypatch.delenv(k)
    import runpy
    mod = runpy.run_path(EXAMPLE)
    out = str(tmp_path / "ref.json")
    assert mod["main"]([*argv, "--out", out, "--device", "cpu"]) == 0
    return json.load(open(out))["param_sum"]


COMMON = ["--steps", "30", "--samples", "1024"]


def test_standalone_end_to_end(tmp_path, monkeypatch):
    sd = str(tmp_path / "state")
    p = _gimbal_run(["--standalone", "--nproc", "2", "--state-dir", sd, "--job-id", "e2e", "--",
                     EXAMPLE, *COMMON, "--out", str(tmp_path / "a.json")])
    out = p.communicate(timeout=120)[0]
    assert p.returncode == 0, out
    a = json.load(open(tmp_path / "a.json"))
    assert a["steps"] == 30 and a["world_size"] == 2 and a["restart_count"] == 0
    reports = [json.loads(line) for line in open(os.path.join(sd, "reports", "e2e.jsonl"))]
    assert [r["step"] for r in reports] == [10, 20, 30] and reports[0]["job_id"] == "e2e"
    assert all(r["samples_per_s"] > 0 for r in reports)
    assert a["param_sum"] == pytest.approx(_reference_param_sum(monkeypatch, tmp_path, COMMON), abs=1e-4)


def test_sigusr2_checkpoint_relaunch_resumes_exactly(tmp_path, monkeypatch):
    sd = str(tmp_path / "state")
    marker = str(tmp_path / "marker")
    p = _gimbal_run(["--standalone", "--nproc", "2", "--state-dir", sd, "--job-id", "sig", "--",
                     EXAMPLE, *COMMON, "--out", str(tmp_path / "b.json"), "--step-sleep", "0.1",
                     "--marker", marker])
    _wait_for(marker, p)
    p.send_signal(signal.SIGUSR2)  # reaches the workers through gimbal-run
    out = p.communicate(timeout=120)[0]
    assert p.returncode == 0, out
    assert "SIGUSR2" in out and "relaunching (1)" in out and "worker codes {0: 75, 1: 75}" in out
    b = json.load(open(tmp_path / "b.json"))
    assert b["restart_count"] == 1 and 0 < b["resumed_from"] < 30 and b["steps"] == 30
    assert os.path.exists(os.path.join(sd, "checkpoints", "sig", "checkpoint.pt"))
    # the resumed run ends where an uninterrupted one does
    assert b["param_sum"] == pytest.approx(_reference_param_sum(monkeypatch, tmp_path, COMMON), abs=1e-4)


def _reports(sd, job):
    return [json.loads(line) for line in open(os.path.join(sd, "reports", f"{job}.jsonl"))]


def test_relaunch_reported_step_never_decreases(tmp_path):
    """One rank on the node's device (the GPU where there is one): SIGUSR2 -> checkpoint ->
    relaunch; the reports' ``step`` is the training step, so it goes on from where the
    checkpoint was taken instead of restarting at 0, and each launch's first report is
    marked as warm-up."""
    sd = str(tmp_path / "state")
    marker = str(tmp_path / "marker")
    p = _gimbal_run(["--standalone", "--nproc", "1", "--state-dir", sd, "--job-id", "mono", "--",
                     EXAMPLE, "--steps", "60", "--samples", "1024", "--step-sleep", "0.05",
                     "--marker", marker, "--out", str(tmp_path / "m.json")], gpu=True)
    _wait_for(marker, p)
    time.sleep(1.2)  # a couple of reports in the first launch
    p.send_signal(signal.SIGUSR2)
    out = p.communicate(timeout=180)[0]
    assert p.returncode == 0, out
    m = json.load(open(tmp_path / "m.json"))
    assert m["restart_count"] == 1 and 0 < m["resumed_from"] < 60 and m["steps"] == 60
    reps = _reports(sd, "mono")
    steps = [r["step"] for r in reps]
    assert steps == sorted(steps) and len(set(steps)) == len(steps), steps
    assert steps[-1] == 60
    first = [r for r in reps if r.get("restart", 0) == 0]
    second = [r for r in reps if r.get("restart") == 1]
    assert first and second, reps
    assert all(r["step"] > m["resumed_from"] for r in second)
    assert second[0]["step"] <= m["resumed_from"] + 10  # not a per-launch counter
    # exactly the first report of each launch is marked warm-up
    assert [bool(r.get("warmup")) for r in first] == [True] + [False] * (len(first) - 1)
    assert [bool(r.get("warmup")) for r in second] == [True] + [False] * (len(second) - 1)


def test_example_trains_on_the_nodes_device(tmp_path):
    """With the node's GPUs visible, one rank trains on cuda:0 when CUDA is available (NCCL,
    CUDA-event timer), on the CPU otherwise (gloo, wall-clock timer)."""
    import torch
    sd = str(tmp_path / "state")
    p = _gimbal_run(["--standalone", "--nproc", "1", "--state-dir", sd, "--job-id", "dev", "--",
                     EXAMPLE, "--steps", "20", "--samples", "512", "--out", str(tmp_path / "d.json")],
                    gpu=True)
    out = p.communicate(timeout=120)[0]
    assert p.returncode == 0, out
    d = json.load(open(tmp_path / "d.json"))
    cuda = torch.cuda.is_available()
    assert d["device"] == ("cuda:0" if cuda else "cpu") and d["timer"] == ("cuda" if cuda else "wall")
    assert d["steps"] == 20 and d["train_loss_sum"] > 0
    reps = _reports(sd, "dev")
    assert [r["step"] for r in reps] == [10, 20] and reps[0]["warmup"] is True
    assert "warmup" not in reps[1] and reps[1]["samples_per_s"] > 0


def test_nproc_above_visible_gpus_is_refused(tmp_path, monkeypatch):
    """On a node with GPUs, more processes than visible GPUs exit 2 with a clear message;
    hiding the GPUs (CPU training) or a node without GPUs is not checked."""
    import launcher.slurm as ls
    monkeypatch.setattr(ls, "physical_gpu_count", lambda: 1)
    res = _invoke(["--dry-run", "--standalone", "--nproc", "2", "--state-dir", str(tmp_path), "--",
                   "t.py"], {})
    assert res.exit_code == 2
    assert "--nproc-per-node 2 exceeds the 1 GPU(s) visible on this node" in res.output
    monkeypatch.setattr(ls, "physical_gpu_count", lambda: 4)
    res = _invoke(["--dry-run", "--standalone", "--nproc", "3", "--state-dir", str(tmp_path), "--",
                   "t.py"], {"CUDA_VISIBLE_DEVICES": "0,1"})
    assert res.exit_code == 2 and "CUDA_VISIBLE_DEVICES='0,1'" in res.output
    for nproc, env in (("2", {"CUDA_VISIBLE_DEVICES": "0,1"}), ("4", {}),
                       ("3", {"CUDA_VISIBLE_DEVICES": ""})):
        res = _invoke(["--dry-run", "--standalone", "--nproc", nproc, "--state-dir", str(tmp_path),
                       "--", "t.py"], env)
        assert res.exit_code == 0, (nproc, env, res.output)
    monkeypatch.setattr(ls, "physical_gpu_count", lambda: 0)  # no GPU: CPU ranks, no check
    res = _invoke(["--dry-run", "--standalone", "--nproc", "8", "--state-dir", str(tmp_path), "--",
                   "t.py"], {})
    assert res.exit_code == 0, res.output


def test_fake_one_node_slurm_env_decision_and_exit_code(tmp_path):
    sd = str(tmp_path / "state")
    write_decision(decision_path("4242", sd), LauncherDecision(
        job_id="4242", sub_batch=16, global_batch=64, stealing=True, mps_thread_pct=50))
    env = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "localhost", "SLURM_JOB_NUM_NODES": "1",
           "SLURM_NODEID": "0", "SLURM_NTASKS_PER_NODE": "1", "SLURM_GPUS_ON_NODE": "2",
           **fake_squeue_env(tmp_path, "gimbal:v1;app=cifar10;batch=64")}
    p = _gimbal_run(["--state-dir", sd, "--", EXAMPLE, "--steps", "12", "--samples", "512",
                     "--out", str(tmp_path / "o.json"), "--exit-code", "3"], env)
    out = p.communicate(timeout=120)[0]
    assert p.returncode == 3, out  # the training's own exit code passes through torchrun
    o = json.load(open(tmp_path / "o.json"))
    assert o["world_size"] == 2 and o["steps"] == 12
    assert (o["sub_batch"], o["global_batch"], o["stealing"], o["mps_thread_pct"]) == (16, 64, True, "50")
    assert sum(o["shares"]) == 64
    assert "--rdzv-endpoint=localhost:14242" in out and "--rdzv-id=4242" in out


def test_decision_mps_change_relaunches_with_new_limit(tmp_path):
    sd = str(tmp_path / "state")
    dpath = decision_path("mps1", sd)
    write_decision(dpath, LauncherDecision(job_id="mps1", mps_thread_pct=50))
    marker = str(tmp_path / "marker")
    p = _gimbal_run(["--standalone", "--nproc", "2", "--state-dir", sd, "--job-id", "mps1",
                     "--poll-interval", "0.3", "--", EXAMPLE, "--steps", "30", "--samples", "512",
                     "--step-sleep", "0.05", "--marker", marker, "--out", str(tmp_path / "o.json")])
    _wait_for(marker, p)
    write_decision(dpath, LauncherDecision(job_id="mps1", mps_thread_pct=30))  # LGRR squeeze
    out = p.communicate(timeout=120)[0]
    assert p.returncode == 0, out
    o = json.load(open(tmp_path / "o.json"))
    assert o["restart_count"] == 1 and o["mps_thread_pct"] == "30" and o["steps"] == 30


def test_sigterm_is_forwarded(tmp_path):
    marker = str(tmp_path / "marker")
    p = _gimbal_run(["--standalone", "--nproc", "2", "--state-dir", str(tmp_path), "--", EXAMPLE,
                     "--steps", "1000", "--step-sleep", "0.1", "--marker", marker])
    _wait_for(marker, p)
    t0 = time.time()
    p.send_signal(signal.SIGTERM)
    out = p.communicate(timeout=60)[0]
    assert p.returncode == 143, out
    assert time.time() - t0 < 30


# ------------------------------------------------------------ supervisor decisions (no torchrun)
def _supervisor_with_plan(tmp_path, max_relaunches, restart):
    from launcher.run import Supervisor
    sd = str(tmp_path / "state")
    dpath = decision_path("sv", sd)
    write_decision(dpath, LauncherDecision(job_id="sv", mps_thread_pct=50))
    opts = Options(script="t.py", script_args=[], standalone=True, nproc=1, job_id="sv", state_dir=sd)
    sup = Supervisor(opts, max_relaunches=max_relaunches)
    sup.plan = build_plan(opts, env={}, restart_count=restart)
    sup.restart = restart
    write_decision(dpath, LauncherDecision(job_id="sv", mps_thread_pct=30, policy="x"))
    return sup, dpath


def test_mps_change_checkpoints_while_relaunches_are_left(tmp_path):
    sup, _ = _supervisor_with_plan(tmp_path, max_relaunches=2, restart=1)
    sup._check_decision({})
    assert sup.usr2_pending


def test_mps_change_ignored_when_no_relaunch_is_left(tmp_path):
    # a checkpoint exit could not be relaunched: asking for one would end the job with 75
    sup, _ = _supervisor_with_plan(tmp_path, max_relaunches=1, restart=1)
    sup._check_decision({})
    assert not sup.usr2_pending


def _supervisor_between(tmp_path, first: dict, second: dict):
    """A supervisor launched under decision ``first`` that then finds ``second``."""
    from launcher.run import Supervisor
    sd = str(tmp_path / "state")
    dpath = decision_path("sv", sd)
    write_decision(dpath, LauncherDecision(job_id="sv", **first))
    opts = Options(script="t.py", script_args=[], standalone=True, nproc=2, job_id="sv", state_dir=sd)
    sup = Supervisor(opts, max_relaunches=5)
    # two CPU ranks: on a GPU node gimbal-run refuses more ranks than visible GPUs
    sup.plan = build_plan(opts, env={"CUDA_VISIBLE_DEVICES": ""}, restart_count=0)
    write_decision(dpath, LauncherDecision(job_id="sv", policy="x", **second))
    sup._check_decision({})
    return sup.usr2_pending


def _ws(*pcts):
    return tuple({"gpu": f"n:{i}", "share": 32, "micro_batch": 32, "accum_steps": 1,
                  "mps_pct": p} for i, p in enumerate(pcts))


def test_mps_change_past_slurms_units_costs_no_relaunch(tmp_path, monkeypatch):
    """Under Slurm's gres/mps (the job's environment carries its units, 50 %) a decision
    change that cannot change the applied share (gimbal-run never loosens Slurm's limit)
    does not checkpoint; one that lowers the applied share does, per worker too."""
    monkeypatch.setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "50")
    assert not _supervisor_between(tmp_path / "a", {"mps_thread_pct": 50}, {"mps_thread_pct": 60})
    assert not _supervisor_between(tmp_path / "b", {"mps_thread_pct": 100}, {"mps_thread_pct": 50})
    assert not _supervisor_between(tmp_path / "c", {}, {"mps_thread_pct": 70})
    assert _supervisor_between(tmp_path / "d", {"mps_thread_pct": 60}, {"mps_thread_pct": 40})
    assert _supervisor_between(tmp_path / "e", {"mps_thread_pct": 30}, {"mps_thread_pct": 60})
    # per worker: each rank's share is capped by the job-level one (the shim never loosens)
    assert not _supervisor_between(tmp_path / "f", {"mps_thread_pct": 60, "workers": _ws(50, 50)},
                                   {"mps_thread_pct": 70, "workers": _ws(70, 50)})
    assert _supervisor_between(tmp_path / "g", {"mps_thread_pct": 50, "workers": _ws(50, 50)},
                               {"mps_thread_pct": 50, "workers": _ws(50, 30)})
    # an unreadable Slurm value does not hide a change
    monkeypatch.setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "lots")
    assert _supervisor_between(tmp_path / "h", {"mps_thread_pct": 50}, {"mps_thread_pct": 60})


def test_mps_change_without_an_inherited_limit_relaunches(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", raising=False)
    assert _supervisor_between(tmp_path / "a", {"mps_thread_pct": 50}, {"mps_thread_pct": 60})
    assert _supervisor_between(tmp_path / "b", {"mps_thread_pct": 50, "workers": _ws(50, 50)},
                               {"mps_thread_pct": 50, "workers": _ws(50, 40)})
    assert not _supervisor_between(tmp_path / "c", {"mps_thread_pct": 50, "workers": _ws(50, 50)},
                                   {"mps_thread_pct": 50, "workers": _ws(50, 50),
                                    "sub_batch": 16})


def test_unreadable_decision_update_never_raises(tmp_path):
    sup, dpath = _supervisor_with_plan(tmp_path, max_relaunches=5, restart=0)
    with open(dpath, "wb") as fh:
        fh.write(b"\xff\xfe not utf-8")
    sup._check_decision({})  # must not propagate (gimbal-run would die, torchrun orphaned)
    assert not sup.usr2_pending


def test_relaunch_keeps_decision_when_file_became_invalid(tmp_path, monkeypatch):
    import launcher.run as run_mod
    sup, dpath = _supervisor_with_plan(tmp_path, max_relaunches=5, restart=0)
    with open(dpath, "w") as fh:
        json.dump({"version": 1, "job_id": "sv", "mps_thread_pct": 500}, fh)
    launched = []

    class FakeProc:
        pid = 999999

        def __init__(self, argv, env=None, **kw):
            launched.append(env)

        def wait(self, timeout=None):
            return 0

        def poll(self):
            return 0
    monkeypatch.setattr(run_mod.subprocess, "Popen", FakeProc)
    assert sup._launch_once(1) == 0  # no DecisionError: the training had checkpointed
    assert launched[0]["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert sup.plan.decision.mps_thread_pct == 50


def test_usr2_in_a_slurm_job_waits_for_the_requeue_instead_of_relaunching(tmp_path):
    """Inside a Slurm job an outside SIGUSR2 is gimbal's pre-emption / resize notice: after
    the checkpoint gimbal-run waits for the requeue's SIGTERM (``--requeue-wait``) and exits
    75 without relaunching, so no step after the checkpoint is run and thrown away; the next
    launch (the requeued job) resumes at the checkpoint's step."""
    sd = str(tmp_path / "state")
    marker = str(tmp_path / "marker")
    p = _gimbal_run(["--standalone", "--nproc", "1", "--state-dir", sd, "--job-id", "4243",
                     "--requeue-wait", "60", "--", EXAMPLE, "--steps", "100000",
                     "--samples", "1024", "--step-sleep", "0.05", "--marker", marker],
                    env={"SLURM_JOB_ID": "4243"})
    _wait_for(marker, p)
    p.send_signal(signal.SIGUSR2)
    ckpt = os.path.join(sd, "checkpoints", "4243", "checkpoint.pt")
    _wait_for(ckpt, p)
    # torchrun has exited once gimbal-run removed the launch's run dir: it is waiting now
    import tempfile
    run_dir = os.path.join(tempfile.gettempdir(), f"gimbal-run.4243.0.{p.pid}.0")
    t0 = time.time()
    while os.path.exists(run_dir):
        assert p.poll() is None and time.time() - t0 < 120
        time.sleep(0.1)
    time.sleep(1.0)  # no relaunch while it waits
    assert p.poll() is None and not os.path.exists(run_dir[:-1] + "1")  # no launch 1
    p.send_signal(signal.SIGTERM)  # the requeue
    out = p.communicate(timeout=60)[0]
    assert p.returncode == 75, out
    assert "waiting up to 60 s for the requeue" in out and "relaunching (1)" not in out
    reps = _reports(sd, "4243")
    assert {r["restart"] for r in reps} == {0}
    import torch
    assert reps[-1]["step"] == torch.load(ckpt, weights_only=False)["step"]


def test_usr2_in_a_slurm_job_relaunches_when_no_requeue_follows(tmp_path):
    sd = str(tmp_path / "state")
    marker = str(tmp_path / "marker")
    p = _gimbal_run(["--standalone", "--nproc", "1", "--state-dir", sd, "--job-id", "4244",
                     "--requeue-wait", "1", "--", EXAMPLE, "--steps", "40", "--samples", "1024",
                     "--step-sleep", "0.02", "--marker", marker], env={"SLURM_JOB_ID": "4244"})
    _wait_for(marker, p)
    p.send_signal(signal.SIGUSR2)
    out = p.communicate(timeout=120)[0]
    assert p.returncode == 0, out
    assert "waiting up to 1 s for the requeue" in out and "relaunching (1)" in out
