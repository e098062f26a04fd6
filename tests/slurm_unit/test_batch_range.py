"""``gsbatch --allow-batch-change``: the AdminComment key ``batchrange`` -> ``Job.batch_range``
-> a seed-002 ``gpu_ngpu_bs`` plan -> the launcher decision carries an overridden global batch
only for a job whose metadata allows it.  The user's own Comment never grants it."""
import pytest

from gimbalctl.daemon import _decision_for, batch_allowed
from gimbalctl.profiles import default_models
from gimbalctl.slurm.meta import GimbalMeta, parse_meta
from gimbalctl.slurm.types import SlurmJob, SlurmNode
from gimbalctl.snapshot import build_snapshot
from policies.model import Gpu
from policies.plan import StartJob
from policies.registry import get_policy

NOW = 1_800_000_000.0
NODES = [SlurmNode("h1", "idle", {"gpu": 2}, ("gpu",), "k80"),
         SlurmNode("h2", "idle", {"gpu": 2}, ("gpu",), "v100")]


@pytest.mark.parametrize("admin,want,warned", [
    ("gimbal:v1;app=cifar10;batch=64;batchrange=32:512", (32, 512), False),
    ("gimbal:app=cifar10,batch=64,batchrange=64:64", (64, 64), False),   # admin's unversioned form
    ("gimbal:v1;app=cifar10;batch=64", None, False),                     # not allowed
    ("gimbal:v1;app=cifar10;batchrange=32:512", None, True),             # no batch: dropped
    ("gimbal:v1;app=cifar10;batch=8;batchrange=32:512", None, True),     # batch outside
    ("gimbal:v1;app=cifar10;batch=64;batchrange=512:32", None, True),
    ("gimbal:v1;app=cifar10;batch=64;batchrange=0:64", None, True),
    ("gimbal:v1;app=cifar10;batch=64;batchrange=32:99999999", None, True),
    ("gimbal:v1;app=cifar10;batch=64;batchrange=32-512", None, True),
    ("", None, False),
])
def test_parse_batchrange(admin, want, warned):
    m = parse_meta(admin)
    assert m.batch_range == want
    assert bool([w for w in m.warnings if "batchrange" in w]) == warned
    assert GimbalMeta.from_state(m.as_dict()).batch_range == (want if m.tagged else None)


def sjob(jid, admin, comment="", gres=None):
    return SlurmJob(jid, f"j{jid}", "alice", "PENDING", "JobHeldUser", 0, 0, NOW - 100 + int(jid),
                    None, 3600.0, "gpu", 1, (), (), gres or {}, (), comment, admin,
                    meta=parse_meta(admin))


ALLOWED = "gimbal:v1;app=cifar10;batch=64;gate=1;gpus=1;batchrange=32:512"
FIXED = "gimbal:v1;app=cifar10;batch=64;gate=1;gpus=1"


def snap(*jobs):
    return build_snapshot(list(jobs), NODES, default_models(), now=NOW)


def test_snapshot_gives_batch_range_only_from_the_admin_comment():
    res = snap(sjob("1", ALLOWED), sjob("2", FIXED),
               # a user writing the key into their own Comment (job_submit.lua ignored it: it
               # does not start with gimbal:) gains nothing
               sjob("3", "", comment="note gimbal:app=cifar10,batch=64,batchrange=1:65536",
                    gres={"gpu": 1}))
    jobs = res.snapshot.jobs
    assert jobs["1"].batch_range == (32, 512) and res.inputs["1"]["batch_range"] == [32, 512]
    assert jobs["2"].batch_range is None and jobs["3"].batch_range is None
    assert res.inputs["3"]["meta_source"] is None


def test_similarity_bs_changes_only_the_allowed_jobs_batch_and_the_decision_carries_it():
    res = snap(sjob("1", ALLOWED), sjob("2", FIXED))
    pol = get_policy("similarity", decide="gpu_ngpu_bs", cd=False, jp=False)
    starts = {a.job_id: a for a in pol.schedule(res.snapshot).starts()}
    assert set(starts) == {"1", "2"}
    g1 = starts["1"].global_batch
    assert g1 is not None and g1 != 64 and 32 <= g1 <= 512   # Alg. 2 chose another batch
    assert starts["2"].global_batch in (None, 64)            # fixed: never changed
    d1 = _decision_for(starts["1"], res.slurm_jobs["1"], res, "similarity")
    d2 = _decision_for(starts["2"], res.slurm_jobs["2"], res, "similarity")
    assert d1.global_batch == g1 and sum(w["share"] for w in d1.workers) == g1
    assert d2.global_batch == 64 and sum(w["share"] for w in d2.workers) == 64


def test_decision_never_carries_a_batch_the_metadata_does_not_allow():
    """A plan that overrides a fixed job's batch (a policy bug) or goes outside the range:
    the decision keeps the submitted batch, split evenly over the planned GPUs."""
    res = snap(sjob("1", ALLOWED), sjob("2", FIXED))
    gpus = (Gpu("h2", 0), Gpu("h2", 1))
    for jid, gb, want in (("2", 256, 64), ("1", 1024, 64), ("1", 256, 256), ("1", 32, 32)):
        job = res.snapshot.jobs[jid]
        assert batch_allowed(job, gb) == (want == gb)
        d = _decision_for(StartJob(jid, gpus, 128, 1, global_batch=gb), res.slurm_jobs[jid],
                          res, "similarity")
        assert d.global_batch == want
        assert [w["share"] for w in d.workers] == [want // 2, want // 2]
        assert d.sub_batch <= want
