"""A-SRPT on a real cluster with accounting (seed 003 §IV-C; issue: A-SRPT acceptance).

On the 22.05 cluster "gimbaldbd" (slurmdbd + MariaDB): two unprivileged users run jobs with
recurring names to completion, so sacct holds their history; the same names are submitted
again behind a full cluster, with time limits that contradict the history.  The daemon under
``a-srpt`` reads the history from sacct through the Slurm backend (``[predictor] history =
"slurm"``, no file), fits the random forest and orders the pending jobs by their Ã1 completion
(predicted remaining work × GPUs / G); Slurm's priorities follow, and ``explain`` shows the
predicted length, its source and the virtual-SRPT position.
"""
from __future__ import annotations

import json
import time
import uuid

import pytest

from tests.slurm.test_daemon_ordering import Gimbal, pending_by_priority

pytestmark = pytest.mark.slurm

# (user, name) -> run time of the history jobs (s); 2 GPUs each, twice per group.  Ã1 gives
# a pending 2-GPU job p = 2/8 x predicted seconds: 0.75, 2.5, 4.25, 6 s, far enough apart
# that submitting them within a second or two cannot change the SRPT order.
RUNS = {("alice", "rn"): 3, ("alice", "bt"): 10, ("bob", "bt"): 17, ("bob", "rn"): 24}
APP = {"rn": "gimbal:app=imagenet,batch=256", "bt": "gimbal:app=bert,batch=64"}


def _sacct_done(c, ids, timeout=60.0):
    """Wait until sacct (slurmdbd) lists every job in ``ids`` COMPLETED with an end time."""
    want = {str(i) for i in ids}
    deadline = time.monotonic() + timeout
    while True:
        out = c.run(["sacct", "-a", "-X", "-n", "-P", "-j", ",".join(sorted(want)),
                     "--format=JobID,State,End"]).stdout
        done = {ln.split("|")[0] for ln in out.splitlines()
                if ln.count("|") == 2 and ln.split("|")[1] == "COMPLETED"
                and ln.split("|")[2] not in ("", "Unknown")}
        if want <= done:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"sacct lists {sorted(done)} of {sorted(want)} completed:\n{out}")
        time.sleep(0.5)


def test_asrpt_orders_by_predicted_work_from_sacct(slurm_2205_dbd, clean_slurm, tmp_path):
    c = slurm_2205_dbd
    tag = uuid.uuid4().hex[:6]  # names of this run only: earlier runs' history stays apart
    name = {k: f"{k}{tag}" for k in ("rn", "bt")}
    # 1. history: each (user, name) twice, run to completion
    hist = []
    for _ in range(2):
        for (user, k), secs in RUNS.items():
            hist.append(c.submit(["--gres=gpu:2", "-t", "5", "-J", name[k], "--comment", APP[k],
                                  "--wrap", f"sleep {secs}"], user=user))
    for j in hist:
        c.wait_state(j, "COMPLETED", timeout=120)
    _sacct_done(c, hist)
    # 2. a full cluster, then the same names again, submitted longest-predicted first, with
    #    time limits in the opposite order (shortest-limit-first would reverse the history's
    #    order); plus a name nobody ran: its time limit stands in (not 0: no queue jumping)
    blockers = [c.submit(["--gres=gpu:4", "-w", n, "-t", "60", "-J", f"blk{tag}"]) for n in c.nodes]
    for j in blockers:
        c.wait_state(j, "RUNNING", timeout=30)
    limits = {("bob", "rn"): 2, ("bob", "bt"): 4, ("alice", "bt"): 6, ("alice", "rn"): 8}
    pend = {}
    for (user, k), lim in limits.items():
        pend[(user, k)] = str(c.submit(["--gres=gpu:2", "-t", str(lim), "-J", name[k],
                                        "--comment", APP[k]], user=user))
    new = str(c.submit(["--gres=gpu:2", "-t", "3", "-J", f"new{tag}", "--comment", APP["bt"]],
                       user="alice"))
    # 3. the daemon under A-SRPT, history from sacct through the backend
    g = Gimbal(c)
    cfg = tmp_path / "gimbal.toml"
    cfg.write_text('[predictor]\nhistory = "slurm"\nhistory_days = 1\nkind = "rf"\n')
    r = g("daemon", "--once", "--config", str(cfg), "--policy", "a-srpt", "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    expect = [pend[("alice", "rn")], pend[("alice", "bt")], pend[("bob", "bt")],
              pend[("bob", "rn")], new]
    assert [j for j in res["queue"] if j in expect] == expect, (res["queue"], r.stderr)
    order, prio = pending_by_priority(c)
    assert [j for j in order if j in expect] == expect, prio  # Slurm's own order follows
    # 4. explain: predicted length, its source, the virtual-SRPT position
    ex = g("explain", pend[("alice", "rn")], "--json")
    assert ex.returncode == 0, ex.stderr
    out = json.loads(ex.stdout)
    inp, nums = out["inputs"], out["reason"]["numbers"]
    assert inp["prediction_source"] == "rf" and inp["predicted_unit"] == "seconds"
    assert 2 <= inp["predicted"] <= 8  # ~3 s runs
    assert inp["history_jobs"] >= len(hist)
    assert nums["virtual_pos"] < nums_of(g, pend[("bob", "rn")])["virtual_pos"]
    long_ = g("explain", pend[("bob", "rn")], "--json")
    assert 18 <= json.loads(long_.stdout)["inputs"]["predicted"] <= 30  # ~24 s runs
    text = g("explain", new)
    assert text.returncode == 0, text.stderr
    assert "predicted length: 180 seconds (unseen-group, time-limit" in text.stdout
    assert "virtual-SRPT position" in text.stdout
    text = g("explain", pend[("alice", "bt")])
    assert "(rf; history of" in text.stdout and "virtual-SRPT position" in text.stdout
    # 5. the same history for the predictor's error report (Fig. 4 analogue), no file
    ev = g("predictor", "eval", "--slurm", "--days", "1", "--json")
    assert ev.returncode == 0, ev.stderr
    rep = json.loads(ev.stdout)
    assert rep["unit"] == "seconds" and rep["train"] + rep["test"] >= len(hist)


def nums_of(g, job):
    r = g("explain", job, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["reason"]["numbers"]


def test_asrpt_gate_writes_the_stage_map_of_a_pipeline_job(slurm_2205_dbd, clean_slurm, tmp_path):
    """Gate mode, seed 003 issue item 6: a held VGG19 job with 2 pipeline stages on 4 GPUs is
    started where Heavy-Edge put it, and the launcher decision maps every GPU to its stage
    (what gimbal-run exports as GIMBAL_WORKERS for the training script's pipeline groups)."""
    from launcher.decision import decision_path, read_decision
    c = slurm_2205_dbd
    c.wait_state(c.submit(["--gres=gpu:4", "-w", "d2", "-t", "60"]), "RUNNING", timeout=30)
    j = str(c.submit(["-t", "10", "-J", f"pipe{uuid.uuid4().hex[:6]}", "--comment",
                      "gimbal:app=vgg19,batch=32,gate=1,gpus=4,stages=2"], user="alice",
                     hold=True))
    assert c.show_job(j)["AdminComment"] == "gimbal:v1;app=vgg19;batch=32;gate=1;gpus=4;stages=2"
    g = Gimbal(c)
    cfg = tmp_path / "gimbal.toml"  # the paper's rule for a name never seen: start it now
    cfg.write_text('[predictor]\nhistory = "slurm"\nhistory_days = 1\nunseen = "zero"\n')
    r = g("daemon", "--once", "--mode", "gate", "--config", str(cfg), "--policy", "a-srpt",
          "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    start = [a for a in res["plan"]["actions"] if a["job_id"] == j]
    assert start and sorted(start[0]["gpus"]) == ["d1:0", "d1:1", "d1:2", "d1:3"], res["plan"]
    c.wait_state(j, "RUNNING", timeout=30)
    assert c.show_job(j)["NodeList"] == "d1"
    d = read_decision(decision_path(j, root=str(g.host_dir / "state")))
    stage_of = {w["gpu"]: w["stage"] for w in d.workers}
    assert sorted(stage_of) == ["d1:0", "d1:1", "d1:2", "d1:3"]
    assert sorted(stage_of.values()) == [0, 0, 1, 1]  # 2 stages x 2 replicas
    for s in (0, 1):  # each stage's replicas carry the whole global batch between them
        assert sum(w["share"] for w in d.workers if w["stage"] == s) == d.global_batch == 32
    ex = json.loads(g("explain", j, "--json").stdout)
    assert ex["inputs"]["app"] == "vgg19" and ex["inputs"]["stages"] == 2
    assert g.rows(f"select field from audit where job_id='{j}' order by id") == \
        [("gres",), ("req_nodes",), ("decision",), ("release",)]
