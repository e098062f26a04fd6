"""Parsers and the CLI backend on recorded 22.05 / 26.05 output."""

import pytest

from gimbalctl.slurm.errors import SlurmParseError
from gimbalctl.slurm.meta import parse_meta
from gimbalctl.slurm.parse import (jobs_from_squeue_json, parse_gres_detail, parse_gres_spec,
                                   parse_sprio, parse_version)

from tests.slurm_unit.replay import FIX, jobs_of


def test_version(release, replay):
    _, be = replay
    assert be.release == release
    assert parse_version("slurm-wlm 22.05.8") == (22, 5, 8)
    with pytest.raises(SlurmParseError, match="version"):
        parse_version("no version here")


def test_gres_detail_forms():
    assert parse_gres_detail("gpu:2(IDX:0-1)", "n")[0].per_gpu == {0: 1, 1: 1}
    assert parse_gres_detail("shard:2(IDX:3)", "n")[0].per_gpu == {3: 2}
    assert parse_gres_detail("shard:2(0/4,0/4,0/4,2/4)", "n")[0].per_gpu == {3: 2}
    assert parse_gres_detail("gpu:tesla:2(IDX:0,2)", "n")[0].indices == (0, 2)
    with pytest.raises(SlurmParseError):
        parse_gres_detail("shard:2(x/4)", "n")


def test_gres_spec_forms():
    assert parse_gres_spec("gres:gpu:2") == {"gpu": 2}
    assert parse_gres_spec("gres/shard:2") == {"shard": 2}
    assert parse_gres_spec("gpu:4,shard:16") == {"gpu": 4, "shard": 16}
    assert parse_gres_spec("gpu:4(S:0),mps:200") == {"gpu": 4, "mps": 200}
    assert parse_gres_spec("") == {}


def test_jobs_from_fixture(release, replay):
    _, be = replay
    ids = jobs_of(release)
    jobs = {j.job_id: j for j in be.jobs()}
    # the filter is ours: 22.05 squeue --json also returns ended jobs
    assert all(j.state in ("PENDING", "RUNNING") for j in be.jobs(["PENDING", "RUNNING"]))
    r1 = jobs[ids["r1"]]
    assert r1.running and r1.gres_req == {"gpu": 2} and r1.nodes == ("gpu2",)
    assert r1.gres_alloc[0].indices == (0, 1)
    assert r1.meta.app == "bert" and r1.meta.iters == 2000 and r1.time_limit_s == 3600
    # the two shard jobs report the same GPU index (co-location)
    r2, r3 = jobs[ids["r2"]], jobs[ids["r3"]]
    assert r2.gres_alloc[0].name == "shard" and r2.gres_alloc[0].indices == r3.gres_alloc[0].indices
    limits = [jobs[p].time_limit_s for p in ids["p"]]
    assert limits == [2400, 600, 1800, 1200]
    assert all(jobs[p].pending and jobs[p].gres_req == {"gpu": 4} for p in ids["p"])
    assert jobs[ids["p"][1]].site_factor == 500 and jobs[ids["p"][1]].priority == 600
    g1 = jobs[ids["g1"]]
    assert g1.held and g1.gated and g1.gres_req == {} and g1.num_gpus == 1
    p5 = jobs[ids["p5"]]
    assert p5.meta.app == "bert" and p5.meta.batch is None and len(p5.meta.warnings) == 2


def test_squeue_json_garbage():
    with pytest.raises(SlurmParseError, match="jobs"):
        jobs_from_squeue_json({"meta": {}})


def test_nodes(release, replay):
    _, be = replay
    nodes = {n.name: n for n in be.nodes()}
    assert nodes["gpu1"].gres == {"gpu": 4, "shard": 16} and nodes["gpu1"].shares_per_gpu == {"shard": 4}
    assert nodes["mps1"].shares_per_gpu == {"mps": 100}
    assert all(n.usable for n in nodes.values())
    assert ("gpu3" in nodes) == (release == "26.05")


def test_sprio_and_meta():
    assert parse_sprio("12|600|500|0\n13|100|0|0\n") == {"12": 500, "13": 0}
    m = parse_meta("gimbal:v1;app=bert;batch=64;iters=1000;est=3600;share=yes;gate=1")
    assert (m.app, m.batch, m.iters, m.est, m.share, m.gate, m.source) == \
        ("bert", 64, 1000, 3600, True, True, "admin_comment")
    m = parse_meta("gimbal:app=bert,batch=64;jsl:submitted")  # hand-written admin form
    assert m.source == "admin_comment" and m.batch == 64 and not m.warnings
    m = parse_meta("gimbal:app=bert,batch=-1,share=maybe,color=red")
    assert m.batch is None and m.share is None and len(m.warnings) == 3
    assert not parse_meta("just a comment").tagged


def test_json_errors_mean_unavailable():
    """22.05 squeue --json exits 0 with an errors list when slurmctld is down (recorded)."""
    import subprocess
    from gimbalctl.slurm.cli import CliBackend
    from gimbalctl.slurm.errors import SlurmUnavailable
    text = (FIX / "22.05" / "squeue-unreachable.json").read_text()
    be = CliBackend(runner=lambda argv, t: subprocess.CompletedProcess(argv, 0, text, ""))
    with pytest.raises(SlurmUnavailable, match="Failed while looking for jobs"):
        be.run_json("squeue", "--json")


def test_timeout_and_missing_tools():
    import subprocess
    from gimbalctl.slurm.cli import CliBackend
    from gimbalctl.slurm.errors import SlurmCommandError, SlurmTimeout, SlurmUnavailable

    def slow(argv, t):
        raise subprocess.TimeoutExpired(argv, t)
    with pytest.raises(SlurmTimeout, match="did not answer within 2 s"):
        CliBackend(runner=slow, timeout=2).run("squeue")
    with pytest.raises(SlurmUnavailable, match="command not found"):
        CliBackend(prefix=("/nonexistent/bin",)).run("squeue")
    fail = lambda argv, t: subprocess.CompletedProcess(argv, 1, "", "Access/permission denied")
    with pytest.raises(SlurmCommandError, match="permission denied"):
        CliBackend(runner=fail).run("scontrol", "update", "JobId=1", "Priority=5")
