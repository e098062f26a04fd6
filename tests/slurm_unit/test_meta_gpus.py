"""The ``gpus=N`` metadata key: parser bounds, the snapshot's GPU count of GRES-less gate jobs,
and the GRES the daemon sets when it starts such a job (recorded 22.05/26.05 state)."""
import dataclasses

import pytest

from gimbalctl.config import Config
from gimbalctl.daemon import run_cycle
from gimbalctl.profiles import default_models
from gimbalctl.slurm.cli import CliBackend
from gimbalctl.slurm.meta import parse_meta
from gimbalctl.snapshot import build_snapshot
from gimbalctl.store import Store
from policies.model import Gpu
from policies.plan import StartJob, make_plan

from tests.slurm_unit.replay import Replay, jobs_of

NOW = 1_800_000_000.0


@pytest.mark.parametrize("admin,comment,want,warned", [
    ("gimbal:v1;app=bert;gate=1;gpus=2", "", 2, False),
    ("", "gimbal:app=bert,gate=1,gpus=16", None, False),  # the user Comment is never read
    ("gimbal:v1;app=bert;gpus=1024", "", 1024, False),
    ("gimbal:v1;app=bert;gpus=1025", "", None, True),
    ("gimbal:v1;app=bert;gpus=0", "", None, True),
    ("gimbal:v1;app=bert;gpus=two", "", None, True),
])
def test_parse_gpus(admin, comment, want, warned):
    m = parse_meta(admin)
    assert m.gpus == want
    assert bool([w for w in m.warnings if "gpus" in w]) == warned


def _with_meta(sj, admin):
    return dataclasses.replace(sj, admin_comment=admin, meta=parse_meta(admin))


def test_snapshot_counts_gpus_of_gateless_gres_jobs(release, replay):
    """A held gate job without GRES counts ``gpus=N`` GPUs (1 without the key, or when the
    value is out of range); a job's own GRES request wins over the key."""
    _, be = replay
    ids = jobs_of(release)
    jobs = {j.job_id: j for j in be.jobs()}
    g1 = jobs[ids["g1"]]
    assert g1.gres_req == {} and g1.held and g1.gated  # the recorded GRES-less gate job
    p0 = jobs[ids["p"][0]]
    assert p0.gres_req.get("gpu")  # a pending job with its own GRES
    cases = {
        "a": (_with_meta(g1, "gimbal:v1;app=bert;gate=1;gpus=3"), 3),
        "b": (_with_meta(g1, "gimbal:v1;app=bert;gate=1"), 1),
        "c": (_with_meta(g1, "gimbal:v1;app=bert;gate=1;gpus=5000"), 1),
        "d": (_with_meta(p0, "gimbal:v1;app=bert;gpus=8"), p0.gpus_per_node * max(p0.num_nodes, 1)),
    }
    for key, (sj, want) in cases.items():
        others = [j for jid, j in jobs.items() if jid != sj.job_id]
        res = build_snapshot(others + [sj], be.nodes(), default_models(), now=NOW)
        assert res.snapshot.jobs[sj.job_id].num_gpus == want, key
        assert res.inputs[sj.job_id]["num_gpus"] == want, key
        if key == "c":
            assert any(sj.job_id in w and "gpus" in w for w in res.warnings)


def test_gate_start_of_gpus_job_sets_gres_gpu_n(release, tmp_path):
    """The daemon turns the plan's 2 GPUs of a ``gpus=2`` gate job into ``gpu:2`` on the
    planned node, then releases it."""
    runner = Replay(release)
    be = CliBackend(runner=runner)
    g1 = jobs_of(release)["g1"]
    real_jobs = be._load_jobs

    def load(job_ids=None):
        return [_with_meta(j, "gimbal:v1;app=bert;batch=64;gate=1;gpus=2") if j.job_id == g1 else j
                for j in real_jobs(job_ids)]
    be._load_jobs = load
    seen = {}

    class TwoGpus:
        name = "stub"

        def schedule(self, snap):
            seen["num_gpus"] = snap.jobs[g1].num_gpus
            return make_plan("stub", [StartJob(g1, (Gpu("gpu2", 2), Gpu("gpu2", 3)), 32)], [], {})
    st = Store(str(tmp_path / "g.db"))
    st.upgrade()
    res = run_cycle(Config(mode="gate", state_dir=str(tmp_path / "state")), be, st, TwoGpus(),
                    now=NOW)
    assert res.status == "done" and seen["num_gpus"] == 2
    muts = [m for m in runner.mutations() if g1 in (m[-1], m[2]) or m[2] == f"JobId={g1}"]
    want_gres = "Gres=gpu:2" if release == "22.05" else "TresPerNode=gres/gpu:2"
    assert muts == [("scontrol", "update", f"JobId={g1}", want_gres),
                    ("scontrol", "update", f"JobId={g1}", "ReqNodeList=gpu2"),
                    ("scontrol", "release", g1)]
