import pytest

from gimbalctl.cluster import ClusterSpecError, parse_cluster
from gimbalctl.profiles import default_models
from gimbalctl.sim import PlanError, SimConfig, Simulator, simulate
from policies import get_policy
from policies.base import Policy
from policies.model import Gpu, Job
from policies.plan import StartJob, make_plan

M = default_models()


def job(i, t, g, iters, app="cifar10", batch=None):
    return Job(id=f"j{i}", submit_time=t, num_gpus=g, app=app,
               global_batch=batch or 128 * g, total_iters=iters)


def t_iter(app, batch, g, nodes=1, s=1):
    return M.profiles[app].iter_time(batch / g, g, nodes, s)


def test_single_job_exact_jct():
    j = job(0, 10.0, 2, 1000)
    res = simulate([j], parse_cluster("1x4"), get_policy("fifo"), M)
    row = res.jobs.iloc[0]
    assert row.start == 10.0
    assert row.jct == pytest.approx(1000 * t_iter("cifar10", 256, 2))


def test_fifo_strict_order_blocks_and_queueing():
    jobs = [job(0, 0, 4, 2000), job(1, 1, 4, 100), job(2, 2, 1, 100)]
    res = simulate(jobs, parse_cluster("1x4"), get_policy("fifo"), M).jobs.set_index("id")
    end0 = res.loc["j0", "end"]
    assert res.loc["j1", "start"] == pytest.approx(end0)
    assert res.loc["j2", "start"] >= res.loc["j1", "end"] - 1e-9  # strict FIFO: no backfill
    bf = simulate(jobs, parse_cluster("1x4"), get_policy("fifo", backfill=True), M).jobs.set_index("id")
    assert bf.loc["j2", "start"] >= end0 - 1e-9  # still needs a free GPU


class ShareBoth(Policy):
    """Puts every job on GPU n0000:0 (tests co-location slowdown)."""

    name = "share-both"

    def schedule(self, snap):
        acts = []
        g = Gpu(snap.nodes[0].name, 0)
        for j in snap.pending():
            mine = snap.gpu_jobs.get(g, ())
            acts.append(StartJob(j.id, (g,), j.global_batch, 1, tuple(mine)))
        return make_plan(self.name, acts, [], {})


def test_colocation_slowdown_is_xi():
    a, b = job(0, 0, 1, 1000, "cifar10", 128), job(1, 0, 1, 1000, "ncf", 256)
    xi_a, xi_b = M.interference.ratio("cifar10", "ncf"), M.interference.ratio("ncf", "cifar10")
    res = simulate([a, b], parse_cluster("1x1"), ShareBoth(), M).jobs.set_index("id")
    ta, tb = t_iter("cifar10", 128, 1) * 1000, t_iter("ncf", 256, 1) * 1000
    first, second = sorted([(ta * xi_a, "j0", ta, xi_a), (tb * xi_b, "j1", tb, xi_b)])[:2]
    assert res.loc[first[1], "jct"] == pytest.approx(first[0])
    # after the first ends, the other runs alone for its remaining work
    done_frac = first[0] / second[0]
    assert res.loc[second[1], "jct"] == pytest.approx(first[0] + (1 - done_frac) * second[2])


def test_xi_override_applies():
    a, b = job(0, 0, 1, 1000, "cifar10", 128), job(1, 0, 1, 1000, "cifar10", 128)
    res = simulate([a, b], parse_cluster("1x1"), ShareBoth(), M, SimConfig(xi=2.0)).jobs
    assert res.jct.max() == pytest.approx(2.0 * 1000 * t_iter("cifar10", 128, 1))


def test_preemption_cost_delays_resumed_job():
    jobs = [job(0, 0, 4, 20000), job(1, 100, 4, 50)]
    base = simulate(jobs, parse_cluster("1x4"), get_policy("srtf"), M, SimConfig(preempt_cost=0))
    cost = simulate(jobs, parse_cluster("1x4"), get_policy("srtf"), M, SimConfig(preempt_cost=120))
    b, c = base.jobs.set_index("id"), cost.jobs.set_index("id")
    assert b.loc["j0", "preemptions"] == 1
    assert c.loc["j0", "end"] == pytest.approx(b.loc["j0", "end"] + 120)


class Bad(Policy):
    name = "bad"

    def __init__(self, gpus):
        self.gpus = gpus

    def schedule(self, snap):
        j = snap.pending()[0]
        return make_plan(self.name, [StartJob(j.id, self.gpus, 128)], [], {})


@pytest.mark.parametrize("gpus,msg", [
    ((Gpu("n0000", 0), Gpu("n0000", 1)), "gang violation"),
    ((Gpu("nope", 0),), "no such GPU"),
])
def test_invalid_plans_rejected(gpus, msg):
    with pytest.raises(PlanError, match=msg):
        simulate([job(0, 0, 1, 10)], parse_cluster("1x4"), Bad(gpus), M)


def test_third_job_on_gpu_rejected():
    jobs = [job(i, 0, 1, 10_000, "ncf", 256) for i in range(3)]
    with pytest.raises(PlanError, match="already holds 2 jobs"):
        simulate(jobs, parse_cluster("1x1"), ShareBoth(), M)


def test_memory_over_capacity_rejected():
    jobs = [job(i, 0, 1, 10_000, "bert", 12) for i in range(2)]
    with pytest.raises(PlanError, match="memory over capacity"):
        simulate(jobs, parse_cluster("1x1"), ShareBoth(), M)


def test_utilisation_and_makespan():
    jobs = [job(0, 0, 2, 1000)]
    res = simulate(jobs, parse_cluster("1x4"), get_policy("fifo"), M)
    assert res.summary["gpu_utilization"] == pytest.approx(0.5)
    assert res.summary["makespan"] == pytest.approx(res.jobs.jct.iloc[0])


def test_cost_grows_with_events_not_seconds():
    short = [job(0, 0, 1, 10), job(1, 5, 1, 10)]
    long_ = [job(0, 0, 1, 10_000_000), job(1, 5e6, 1, 10_000_000)]
    a = Simulator(short, parse_cluster("1x4"), get_policy("fifo"), M)
    b = Simulator(long_, parse_cluster("1x4"), get_policy("fifo"), M)
    assert a.run().summary["policy_calls"] == b.run().summary["policy_calls"]


def test_cluster_spec_errors():
    assert len(parse_cluster("2x4,1x8:t4:8192")) == 3
    assert parse_cluster("1x8:t4:8192")[0].gpu_mem_mb == 8192
    for bad in ("16", "0x4", "4x", "axb"):
        with pytest.raises(ClusterSpecError, match="--cluster"):
            parse_cluster(bad)


class _SeesProgress(Policy):
    """SRTF that records, at every call, what the snapshot says each running job
    has done next to what the simulator itself has settled."""

    name = "sees-progress"
    preemptive = True
    needs_lengths = True

    def __init__(self):
        self.inner = get_policy("srtf")
        self.sim = None
        self.seen = []

    def schedule(self, snap):
        for j in snap.jobs.values():
            if j.running:
                r = self.sim.recs[j.id]
                dt = snap.now - r.as_of
                truth = r.done_iters + r.rate * (dt - min(r.overhead, dt))
                self.seen.append((snap.now, j.id, snap.completed(j), truth))
        return self.inner.schedule(snap)


def test_snapshot_progress_excludes_restore_time():
    # j0 is pre-empted by the short j1 and resumes with 120 s of restore; the long
    # j3 then waits, so the policy keeps looking at j0 during and after the restore
    jobs = [job(0, 0, 4, 20000), job(1, 100, 4, 50), job(3, 150, 1, 10**8)]
    pol = _SeesProgress()
    sim = Simulator(jobs, parse_cluster("1x4"), pol, M, SimConfig(preempt_cost=120))
    pol.sim = sim
    sim.run()
    after_resume = [s for s in pol.seen if s[0] > 150 and s[1] == "j0"]
    assert len(after_resume) > 3
    for now, jid, seen, truth in after_resume:
        assert seen == pytest.approx(truth), (now, jid)


def test_job_larger_than_cluster_is_an_error_not_a_hang():
    # before: the 8-GPU job waited for ever and the ticks never stopped
    with pytest.raises(ValueError, match="j1 asks 8 GPUs, the cluster has 4"):
        Simulator([job(0, 0, 1, 10), job(1, 5, 8, 10)], parse_cluster("1x4"),
                  get_policy("fifo"), M)


class NeverStarts(Policy):
    name = "never-starts"

    def schedule(self, snap):
        return make_plan(self.name, [], [j.id for j in snap.pending()], {})


def test_policy_that_never_starts_a_job_stops_the_run():
    with pytest.raises(RuntimeError, match="never-starts left 1 job"):
        simulate([job(0, 0, 1, 10)], parse_cluster("1x4"), NeverStarts(), M)


class StartsWith(Policy):
    """Starts the first pending job on GPU 0 with the given Allocation fields."""

    name = "starts-with"

    def __init__(self, **fields):
        self.fields = fields

    def schedule(self, snap):
        j = snap.pending()[0]
        kw = dict(sub_batch=j.global_batch, accum_steps=1)
        kw.update(self.fields)
        return make_plan(self.name, [StartJob(j.id, (Gpu(snap.nodes[0].name, 0),), **kw)], [], {})


@pytest.mark.parametrize("fields,msg", [
    # a micro-batch of 1 without accumulation would pass the memory check while
    # the rate model runs the whole batch
    (dict(sub_batch=1, accum_steps=1), "does not cover its global batch"),
    (dict(sub_batch=0, accum_steps=128), "does not cover its global batch"),
    # more than 100 % of a GPU would make the job faster than running alone
    (dict(mps_pct=200), "MPS share 200%"),
])
def test_plan_fields_validated(fields, msg):
    with pytest.raises(PlanError, match=msg):
        simulate([job(0, 0, 1, 10)], parse_cluster("1x4"), StartsWith(**fields), M)



def test_cluster_efficiency_is_zero_while_restoring():
    # j0 is pre-empted at 100 by j1, resumes when j1 ends and then restores for
    # 1000 s on all 4 GPUs: the cluster trains nothing, so CE (seed 001 §2.2) is 0
    jobs = [job(0, 0, 4, 20000), job(1, 100, 4, 50), job(2, 150, 1, 10**8)]
    res = simulate(jobs, parse_cluster("1x4"), get_policy("srtf"), M,
                   SimConfig(preempt_cost=1000, sample_every=1.0))
    resumed = res.jobs.set_index("id").loc["j1", "end"]
    during = res.timeline[(res.timeline.t > resumed + 1) & (res.timeline.t < resumed + 999)]
    assert len(during) > 5
    assert (during.ce == 0).all()


def test_timeline_averages_are_time_weighted():
    import pandas as pd

    from gimbalctl.sim.result import summarize

    jobs = pd.DataFrame(dict(jct=[100.0], queueing=[0.0], wait_total=[0.0], preemptions=[0],
                             shared=[False], deadline=[None], end=[100.0]))
    tl = pd.DataFrame(dict(t=[0.0, 90.0], queue_length=[10.0, 0.0], ce=[0.5, 1.0], bi=[2.0, 0.0],
                           gpu_busy=[1.0, 1.0]))
    s = summarize(jobs, tl, 100.0, 100.0, 1)
    assert s["avg_ql"] == pytest.approx(9.0)  # 10 for 90 s, 0 for 10 s (a plain mean says 5)
    assert s["avg_ce"] == pytest.approx(0.55)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 10, 160, 161])
def test_median_and_p99_jct_are_numpys(n):
    """summarize's median and percentiles (kept off np.median/np.percentile, which import
    numpy.ma at start-up) are numpy's values, bit for bit."""
    import numpy as np
    from gimbalctl.sim.result import _median, _percentile

    rng = np.random.default_rng(n)
    for scale in (1e-3, 1.0, 3.7e4):
        for x in (rng.uniform(0, 1e6, n) * scale, rng.integers(0, 50, n).astype(float)):
            assert _median(x) == float(np.median(x))
            for q in (99, 50, 90, 1, 0, 100):
                assert _percentile(x, q) == float(np.percentile(x, q)), (q, x)
    nan = np.array(([1.0, 2.0] * n)[:n] + [np.nan])
    assert np.isnan(_median(nan)) and np.isnan(_percentile(nan, 99))


def test_get_policy_builds_any_registered_name_alone():
    """get_policy finds a policy by importing only its own module when named after it,
    and every registered name (whatever its module) still resolves."""
    import ast
    import subprocess
    import sys

    code = ("import sys; from policies import get_policy; get_policy('tiresias'); "
            "print(sorted(m for m in sys.modules if m.startswith('policies.') and "
            "m.count('.') == 1))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = ast.literal_eval(out.stdout.strip())
    assert "policies.tiresias" in loaded and "policies.gandiva" not in loaded, loaded
    import policies
    for name in policies.names():
        assert get_policy(name).name == name
