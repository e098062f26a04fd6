"""An unprivileged user attacks gimbal on the real cluster (issue #14).

The attacker is ``mallory``, created here (``useradd``) when missing; the victims are
``alice`` (created by the bring-up) and root.  Each attack is made with ``runuser -u mallory
--``; then one real ``gimbalctl daemon --once`` cycle runs and :func:`sane` checks what
every attack must leave true: the cycle is ``done`` or ``partial`` with a reason, the audit
lists exactly the changes the cycle printed (all applied), no victim job changed except for
what that audit shows, and (where ranked) the attacker is not ahead of where its time limit
alone puts it.
"""
from __future__ import annotations

import json
import os
import pwd
import subprocess
import time

import pytest

from launcher.report import ReportWriter
from tests.slurm.cluster import REPO
from tests.slurm.test_daemon_ordering import Gimbal, fill_cluster

pytestmark = pytest.mark.slurm

ATTACKER = "mallory"
VICTIM = "alice"
# job fields a victim's job must keep whatever an attacker does (Priority is gimbal's to set)
KEPT = ("JobName", "UserId", "Comment", "AdminComment", "TimeLimit", "TresPerNode", "JobState",
        "ReqNodeList", "StdOut")


def ensure_user(c, name: str) -> None:
    """Create the unprivileged user (host, or the 26.05 chroot) when missing."""
    if c.run(["id", name]).returncode != 0:
        r = c.run(["useradd", "-m", "-s", "/bin/bash", name])
        assert r.returncode == 0, r.stderr


@pytest.fixture
def cluster_2205(slurm_2205, clean_slurm):
    for u in (ATTACKER, VICTIM):
        ensure_user(slurm_2205, u)
    return slurm_2205


@pytest.fixture
def any_cluster(slurm_cluster, clean_slurm):
    """22.05 and 26.05: for the attacks where slurmctld itself takes part (job_submit.lua on
    modify, AdminComment updates)."""
    for u in (ATTACKER, VICTIM):
        ensure_user(slurm_cluster, u)
    return slurm_cluster


def attack(c, args, **kw) -> int:
    return c.submit(args, user=ATTACKER, **kw)


def kept(c, ids) -> dict:
    return {j: {k: (c.show_job(j) or {}).get(k) for k in KEPT} for j in ids}


def write_config(g, text: str) -> str:
    path = g.host_dir / "gimbal.toml"
    path.write_text(text)
    return f"{g.inner}/gimbal.toml"


def cycle(g, *args, rc=(0, 5)):
    r = g("daemon", "--once", "--json", *args, timeout=400)
    assert r.returncode in rc, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    return json.loads(r.stdout.strip().splitlines()[-1]), r


def sane(g, res, victims_before=None, c=None):
    """What every attack must leave true after a cycle."""
    status, error = g.rows(f"select status, error from cycles where id={res['cycle_id']}")[0]
    assert status == "done" or (status == "partial" and error), (status, error)
    audit = g.rows(f"select job_id, field, status from audit where cycle_id={res['cycle_id']}")
    assert sorted((a, f) for a, f, _ in audit) == \
        sorted((ch["job_id"], ch["field"]) for ch in res["changes"])
    assert all(s == "applied" for *_, s in audit), audit
    if victims_before is not None:
        assert kept(c, list(victims_before)) == victims_before
    return status, error


def inputs_of(g, cycle_id) -> dict:
    return json.loads(g.rows(f"select inputs from decisions where cycle_id={cycle_id}")[0][0])


def not_ahead_of_limit(queue, attacker, limits: dict) -> None:
    """``limits``: job -> time limit (minutes) of every pending job in ``queue``."""
    pos = queue.index(attacker)
    ahead = [j for j in queue[:pos]]
    shorter = [j for j, m in limits.items() if j != attacker and m < limits[attacker]]
    assert set(shorter) <= set(ahead), (queue, limits)


# ------------------------------------------------------------------ item 1
BAD_NAME = "a\udcff\udcfeb\udcc3"  # the bytes a\xff\xfeb\xc3 (surrogateescape in argv)
CTRL = "a\nb\x01\x1b[31mc\x7f"


@pytest.mark.parametrize("which", ["2205-cli", "2605-cli", "2605-pyslurm"])
def test_undecodable_names_and_control_bytes_never_fail_a_cycle(which, request):
    """Item 1: a job named ``a\\xff\\xfeb\\xc3`` made every cycle and ``explain`` crash
    (UnicodeDecodeError); pyslurm (26.05) decodes strictly as well.  Now the cycle runs,
    is ``partial`` naming the job, and ``explain`` answers."""
    key, backend = which.split("-")
    c = request.getfixturevalue("slurm_2205" if key == "2205" else "slurm_2605")
    request.getfixturevalue("clean_slurm")
    for u in (ATTACKER, VICTIM):
        ensure_user(c, u)
    fill_cluster(c)
    v10 = str(c.submit(["--gres=gpu:4", "-t", "10", "-J", "v10"], user=VICTIM))
    v30 = str(c.submit(["--gres=gpu:4", "-t", "30", "-J", "v30"], user=VICTIM))
    bad = str(attack(c, ["--gres=gpu:4", "-t", "20", "-J", BAD_NAME]))
    ctrl = str(attack(c, ["--gres=gpu:4", "-t", "40", "-J", CTRL, f"--comment={CTRL}",
                          f"--output=/tmp/{CTRL}.out"]))
    before = kept(c, [v10, v30])
    g = Gimbal(c, backend)
    res, r = cycle(g, "--policy", "sjf", rc=(5,))  # 5: partial
    status, error = sane(g, res, before, c)
    assert status == "partial" and f"job {bad}:" in error and f"job {ctrl}:" in error
    assert f"job {bad}:" in r.stderr  # one warning naming the job
    assert res["queue"] == [v10, bad, v30, ctrl]  # ordered by time limit, nothing lost
    inp = inputs_of(g, res["cycle_id"])
    assert inp[bad]["num_gpus"] == 4
    name = g.rows(f"select name from jobs where job_id='{bad}'")[0][0]
    assert name == "a??b?" and "\n" not in g.rows(f"select name from jobs where job_id='{ctrl}'")[0][0]
    for j in (bad, ctrl):
        e = g("explain", j, "--json")
        assert e.returncode == 0, e.stderr
        json.loads(e.stdout)
    # the next cycle is the same (not a crash loop) and changes nothing more
    res2, _ = cycle(g, "--policy", "sjf", rc=(5,))
    sane(g, res2, before, c)
    assert res2["changes"] == []
    # once the job has ended it is out of the queue: no warning (pyslurm still lists it,
    # squeue does not, as for any ended job)
    c.run(["scancel", bad], check=True)
    for _ in range(100):  # (scontrol show job would print the undecodable name)
        if not c.run(["squeue", "-h", "-j", bad, "-o", "%T"]).stdout.strip():
            break
        time.sleep(0.2)
    res3, r3 = cycle(g, "--policy", "sjf")
    sane(g, res3, before, c)
    assert f"job {bad}" not in r3.stderr and bad not in res3["queue"], r3.stderr


def test_huge_and_hostile_fields(cluster_2205):
    """A 1 MB job name (Slurm refuses it at submission), a 1000-character one (cut to 256,
    with a warning), and newlines / control bytes in name, comment and output path."""
    c = cluster_2205
    big = "#!/bin/bash\n#SBATCH -J " + "n" * (1 << 20) + "\nsleep 600\n"
    with pytest.raises(subprocess.CalledProcessError) as e:
        attack(c, ["--gres=gpu:1"], script=big)
    assert "too long" in e.value.stderr
    fill_cluster(c)
    v = str(c.submit(["--gres=gpu:1", "-t", "10"], user=VICTIM))
    long_ = str(attack(c, ["--gres=gpu:1", "-t", "20", "-J", "L" * 1000]))
    before = kept(c, [v])
    g = Gimbal(c)
    res, r = cycle(g, "--policy", "sjf", rc=(5,))
    status, error = sane(g, res, before, c)
    assert f"job {long_}: name of 1000 characters cut to 256" in error
    assert res["queue"] == [v, long_]
    assert g.rows(f"select length(name) from jobs where job_id='{long_}'")[0][0] == 256


# ------------------------------------------------------------------ items 2-4
SJF_POLICIES = ["sjf", "sjf-bsbf"]


@pytest.mark.parametrize("policy", SJF_POLICIES)
def test_estimate_never_jumps_the_time_limit(cluster_2205, policy):
    """Item 2: ``est=1`` with a 7-day limit went to position 1 under sjf and sjf-bsbf.  By
    default the limit alone ranks; the site rule ``estimates.use = "bounded"`` uses
    min(est, limit)."""
    c = cluster_2205
    fill_cluster(c)
    v10 = str(c.submit(["--gres=gpu:4", "-t", "10"], user=VICTIM))
    v60 = str(c.submit(["--gres=gpu:4", "-t", "60"], user=VICTIM))
    a = str(attack(c, ["--gres=gpu:4", "-t", "7-00:00:00", "--comment=gimbal:app=bert,est=1"]))
    assert c.show_job(a)["AdminComment"] == "gimbal:v1;app=bert;est=1"
    before = kept(c, [v10, v60])
    g = Gimbal(c)
    res, _ = cycle(g, "--policy", policy)
    sane(g, res, before, c)
    assert res["queue"] == [v10, v60, a]
    inp = inputs_of(g, res["cycle_id"])[a]
    assert (inp["duration_estimate"], inp["duration_source"], inp["meta_est"]) == \
        (7 * 86400, "time_limit", 1)
    # the site rule: estimates bounded by the limit are trusted
    cfg = write_config(g, '[estimates]\nuse = "bounded"\n')
    res, _ = cycle(g, "--config", cfg, "--policy", policy)
    sane(g, res, None)
    assert res["queue"][0] == a


def test_user_comment_is_never_metadata(cluster_2205):
    """Item 3: job_submit.lua checks only comments that start with ``gimbal:``; the daemon
    used to search the whole Comment, so these ranked 1st and 3rd with no AdminComment."""
    c = cluster_2205
    fill_cluster(c)
    v10 = str(c.submit(["--gres=gpu:4", "-t", "10"], user=VICTIM))
    v30 = str(c.submit(["--gres=gpu:4", "-t", "30"], user=VICTIM))
    a1 = str(attack(c, ["--gres=gpu:4", "-t", "50", "--comment=x gimbal:app=BERT.v2,est=0.001,gpus=3"]))
    a2 = str(attack(c, ["--gres=gpu:4", "-t", "50", "--comment=hello\ngimbal:app=bert,est=7"]))
    for a in (a1, a2):
        assert c.show_job(a).get("AdminComment") in (None, "", "(null)")
    before = kept(c, [v10, v30])
    g = Gimbal(c)
    cfg = write_config(g, '[estimates]\nuse = "bounded"\n')  # even when estimates count
    res, _ = cycle(g, "--config", cfg, "--policy", "sjf")
    status, error = sane(g, res, before, c)
    assert status == "partial" and error == f"input: job {a2}: comment has 1 non-UTF-8 byte(s) " \
        f"or control character(s), shown as '?'"  # the newline
    assert res["queue"] == [v10, v30, a1, a2]
    inp = inputs_of(g, res["cycle_id"])
    for a in (a1, a2):
        assert inp[a]["meta_source"] is None and inp[a]["meta_est"] is None
        assert inp[a]["app"] == "cifar10" and inp[a]["num_gpus"] == 4


def test_denied_comment_update_counts_for_nothing(any_cluster):
    """Item 4: a user's ``scontrol update jobid=N comment=gimbal:...`` was denied for the
    AdminComment but changed the Comment, which the daemon read.  Now the whole update is
    refused; also when it races a cycle (the cycle pauses between plan and apply)."""
    c = any_cluster
    fill_cluster(c)
    v10 = str(c.submit(["--gres=gpu:4", "-t", "10"], user=VICTIM))
    v30 = str(c.submit(["--gres=gpu:4", "-t", "30"], user=VICTIM))
    a = str(attack(c, ["--gres=gpu:4", "-t", "50", "--comment=gimbal:app=bert,est=3000"]))
    info = c.show_job(a)
    before = kept(c, [v10, v30])
    g = Gimbal(c)
    cfg = write_config(g, '[estimates]\nuse = "bounded"\n')
    argv = c.cmd(["python3" if not c.in_chroot else "python", "-m", "gimbalctl.cli", "daemon",
                  "--once", "--json", "--config", cfg, "--policy", "sjf", "--db", g.db,
                  "--backend", "cli"])
    env = dict(c.env, GIMBAL_STATE_DIR=f"{g.inner}/state", PYTHONPATH=str(REPO),
               GIMBAL_TEST_PAUSE="applying:4")
    proc = subprocess.Popen(argv, env=env, cwd=str(REPO), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    time.sleep(2)
    upd = c.run(["scontrol", "update", f"jobid={a}", "comment=gimbal:app=bert,est=1"],
                user=ATTACKER)
    out, err = proc.communicate(timeout=400)
    assert proc.returncode == 0, err
    assert upd.returncode != 0, upd.stdout
    now = c.show_job(a)
    assert (now["Comment"], now["AdminComment"]) == (info["Comment"], info["AdminComment"])
    res = json.loads(out.strip().splitlines()[-1])
    sane(g, res, before, c)
    res, _ = cycle(g, "--config", cfg, "--policy", "sjf")
    sane(g, res, before, c)
    assert res["queue"] == [v10, v30, a]
    inp = inputs_of(g, res["cycle_id"])[a]
    assert (inp["meta_source"], inp["meta_est"], inp["duration_estimate"]) == \
        ("admin_comment", 3000, 3000)


def test_foreign_keys_and_out_of_range_gpus(cluster_2205):
    """Another user's job id in metadata and ``gpus=`` beyond the limit are refused at
    submission; ``gpus=1024`` (the maximum) makes a gate job infeasible, not early."""
    c = cluster_2205
    v = str(c.submit(["--gres=gpu:1", "-t", "10", "--hold"], user=VICTIM))
    for comment in (f"gimbal:app=bert,job={v}", "gimbal:app=bert,gate=1,gpus=100000",
                    f"gimbal:app=bert,gpus={v}0000"):
        with pytest.raises(subprocess.CalledProcessError) as e:
            attack(c, ["-t", "5", f"--comment={comment}"], hold=True)
        assert "gimbal: invalid job comment" in e.value.stderr
    a = str(attack(c, ["-t", "5", "-J", v, "--comment=gimbal:app=bert,gate=1,gpus=1024"],
                   hold=True))
    before = kept(c, [v])
    g = Gimbal(c)
    res, _ = cycle(g, "--mode", "gate", "--policy", "sjf")
    sane(g, res, before, c)
    assert a in res["plan"]["infeasible"]
    assert c.show_job(a)["Reason"] == "JobHeldUser" and c.job_state(v) == "PENDING"


# ------------------------------------------------------------------ item 5
def test_gate_never_releases_an_admin_hold(cluster_2205):
    """Item 5: an admin's ``scontrol hold`` on a gated job was released by gate mode."""
    c = cluster_2205
    a = str(attack(c, ["-t", "10", "--comment=gimbal:app=bert,gate=1,gpus=1"], hold=True))
    b = str(attack(c, ["-t", "10", "--comment=gimbal:app=bert,gate=1,gpus=1"], hold=True))
    assert c.run(["scontrol", "hold", a]).returncode == 0  # the admin
    assert c.show_job(a)["Reason"] == "JobHeldAdmin"
    g = Gimbal(c)
    res, r = cycle(g, "--mode", "gate", "--policy", "fifo")
    sane(g, res)
    assert f"job {a}: held by an admin" in r.stderr
    assert c.show_job(a)["Reason"] == "JobHeldAdmin" and c.job_state(a) == "PENDING"
    assert g.rows(f"select count(*) from audit where job_id='{a}'")[0][0] == 0
    c.wait_state(b, "RUNNING", timeout=30)  # the other gate job is gimbal's to release


# ------------------------------------------------------------------ item 6
def test_gpu_occupancy_comes_from_allocated_gres(cluster_2205):
    """Item 6: ``--exclusive`` jobs hold every GPU of their node without asking for GRES;
    explain said "4 GPUs free" and gate mode pinned a job to a full node.  Exclusive,
    whole-node (all CPUs), shard and mps jobs now count as holding what Slurm allocated."""
    c = cluster_2205
    cpus = c.run(["scontrol", "show", "node", "gpu2"]).stdout.split("CPUTot=")[1].split()[0]
    ex = str(c.submit(["--exclusive", "-w", "gpu1"], user=VICTIM))
    whole = str(c.submit(["-w", "gpu2", "-c", cpus], user=VICTIM))
    shard = str(c.submit(["--gres=shard:3", "-w", "gpu3"], user=VICTIM))
    mps = str(c.submit(["--gres=mps:50", "-w", "mps1"], user=VICTIM))
    for j in (ex, whole, shard, mps):
        c.wait_state(j, "RUNNING", timeout=30)
    big = str(attack(c, ["-t", "10", "--comment=gimbal:app=bert,gate=1,gpus=4"], hold=True))
    g = Gimbal(c)
    res, _ = cycle(g, "--mode", "gate", "--policy", "fifo")
    sane(g, res)
    inp = inputs_of(g, res["cycle_id"])
    assert inp[ex]["gpus"] == [f"gpu1:{i}" for i in range(4)]
    assert inp[whole]["gpus"] == [f"gpu2:{i}" for i in range(4)]
    assert len(inp[shard]["gpus"]) == 1 and inp[shard]["gpus"][0].startswith("gpu3:")
    assert len(inp[mps]["gpus"]) == 1 and inp[mps]["gpus"][0].startswith("mps1:")
    # nothing is placed on a GPU Slurm allocated (before: the 4-GPU job went to gpu1, "4 GPUs
    # free"); Slurm 22.05 itself gives a gpu:1 job mps1's GPU 0 next to the MPS job, so only
    # the GPUs gimbal places on are checked here
    placed = [gpu for x in res["plan"]["actions"] for gpu in x.get("gpus", [])]
    assert placed and not [gpu for gpu in placed if gpu.split(":")[0] in ("gpu1", "gpu2")]
    assert not set(placed) & {inp[shard]["gpus"][0], inp[mps]["gpus"][0]}
    e = g("explain", big, "--json")
    assert e.returncode == 0 and set(json.loads(e.stdout)["action"]["gpus"]) == set(placed)
    c.run(["scancel", big])
    c.wait_state(big, ("CANCELLED",), timeout=30)
    small = str(attack(c, ["-t", "10", "--comment=gimbal:app=bert,gate=1,gpus=2"], hold=True))
    res, _ = cycle(g, "--mode", "gate", "--policy", "fifo")
    sane(g, res)
    c.wait_state(small, "RUNNING", timeout=30)
    assert c.show_job(small)["NodeList"] == "gpu3"


# ------------------------------------------------------------------ item 12
JS1 = "JS1:H4sIAAAAAAAAA6tWKkktLlGyUlAqS8wpTtVRKi1OLUrNS05VslIqS8wpTgUA"


def test_jobstats_admin_comment_is_kept_and_ignored(any_cluster):
    """Item 12: jobstats' EpilogSlurmctld writes a ``JS1:`` summary into AdminComment.  gimbal
    never overwrites it, never warns about it, and keeps the metadata it read before."""
    c = any_cluster
    run = str(c.submit(["--gres=gpu:1", "-t", "30", "--comment=gimbal:app=bert,batch=64"],
                       user=VICTIM))
    fin = str(c.submit(["--gres=gpu:1", "-t", "30", "--comment=gimbal:app=bert,batch=32"],
                       user=VICTIM))
    for j in (run, fin):
        c.wait_state(j, "RUNNING", timeout=30)
    g = Gimbal(c)
    res, _ = cycle(g, "--policy", "sjf")
    sane(g, res)
    assert inputs_of(g, res["cycle_id"])[run]["meta_source"] == "admin_comment"
    for j in (run, fin):  # what jobstats does (as SlurmUser/root)
        assert c.run(["scontrol", "update", f"jobid={j}", f"admincomment={JS1}"]).returncode == 0
    c.run(["scancel", fin])
    c.wait_state(fin, ("CANCELLED", "COMPLETED"), timeout=30)
    # root renewing gimbal metadata over a JS1 summary is refused by job_submit.lua
    r = c.run(["scontrol", "update", f"jobid={run}", "comment=gimbal:app=gpt2"])
    assert r.returncode != 0, r.stdout
    res, r = cycle(g, "--policy", "sjf")
    status, _ = sane(g, res)
    assert status == "done" and f"job {run}:" not in r.stderr and f"job {fin}:" not in r.stderr
    inp = inputs_of(g, res["cycle_id"])[run]
    assert (inp["app"], inp["batch"], inp["meta_source"]) == ("bert", 64, "state")
    for j in (run, fin):
        assert c.show_job(j)["AdminComment"] == JS1


def test_reports_speak_only_for_their_owners_job(cluster_2205):
    """The reports directory is writable by every user (1733): mallory creates the report file
    of alice's job before alice's launcher does, and appends records naming alice's other job
    to her own file.  The daemon reads a file only when its owner is the job's user and only
    the records of the job the file is named after: alice's own report counts, mallory's
    forgeries do not, mallory's report of her own job does."""
    c = cluster_2205
    v1 = str(c.submit(["--gres=gpu:1", "-t", "30"], user=VICTIM))
    v2 = str(c.submit(["--gres=gpu:1", "-t", "30"], user=VICTIM))
    a = str(attack(c, ["--gres=gpu:1", "-t", "30"]))
    for j in (v1, v2, a):
        c.wait_state(j, "RUNNING", timeout=30)
    g = Gimbal(c)
    res, _ = cycle(g, "--policy", "fifo")  # the first real cycle creates the state dirs
    sane(g, res)
    reports = f"{g.inner}/state/reports"
    assert oct((g.host_dir / "state" / "reports").stat().st_mode & 0o7777) == "0o1733"

    def rec(job, sps):
        return json.dumps({"job_id": job, "ts": time.time(), "step": 10, "samples_per_s": sps,
                           "step_time_s": 0.5}) + "\n"

    def append(user, job_file, text):
        r = c.run(["tee", "-a", f"{reports}/{job_file}.jsonl"], user=user, input=text)
        assert r.returncode == 0, r.stderr

    append(ATTACKER, v1, rec(v1, 1e9))  # alice's file, created by mallory
    append(ATTACKER, a, rec(a, 7.0) + rec(v2, 1e9))  # her own file, naming alice's job too
    append(VICTIM, v2, rec(v2, 42.0))  # alice's genuine report
    res, _ = cycle(g, "--policy", "fifo")
    sane(g, res)
    got = {j: [s for (s,) in g.rows(f"select samples_per_s from reports where job_id='{j}'")]
           for j in (v1, v2, a)}
    assert got == {v1: [], v2: [42.0], a: [7.0]}, got
    # alice's launcher for v1 finds mallory's file there: it reports to a file of its own
    # (launcher.report), which the daemon reads; mallory's stays unread
    assert not c.in_chroot
    user = pwd.getpwnam(VICTIM)
    pid = os.fork()
    if pid == 0:  # the launcher's writer, as alice
        code = 1
        try:
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)
            with ReportWriter(str(g.host_dir / "state" / "reports" / f"{v1}.jsonl"), v1) as w:
                w.write(10, samples_per_s=5.0, step_time_s=0.5)
            code = 0 if (w.written, w.dropped) == (1, 0) else 2
        finally:
            os._exit(code)
    assert os.waitpid(pid, 0)[1] == 0
    res, _ = cycle(g, "--policy", "fifo")
    sane(g, res)
    got = [s for (s,) in g.rows(f"select samples_per_s from reports where job_id='{v1}'")]
    assert got == [5.0], got
