"""Sim-to-real parity: a recorded Slurm state through the snapshot builder gives the same Plan
as the same jobs and placements run through the simulator's own snapshot path, for every
registered policy.

The recorded state (tests/fixtures/slurm, record.sh) has whole-GPU jobs, two shard jobs
co-located on one GPU and pending/held jobs.  What Slurm does not know comes, as on the
cluster, from rank 0's launcher reports: the per-worker records (unequal shares, MPS shares,
accumulation) and the measured progress.  The simulator places the running jobs with the same
records (``StartJob.workers``) and the live snapshot is taken at the simulator's clock with
the same start times and measured rates, so any difference in the Plan is a difference in how
the two paths build the snapshot."""
from __future__ import annotations

import dataclasses
import json

import pytest

from gimbalctl.profiles import default_models
from gimbalctl.records import workers_to_wire
from gimbalctl.sim.engine import SimConfig, Simulator
from gimbalctl.snapshot import build_snapshot
from policies import registry
from policies.model import JobState, WorkerAlloc
from policies.plan import StartJob, make_plan

from tests.slurm_unit.replay import jobs_of

NOW = 1_800_000_000.0


class _Done(Exception):
    pass


class _Rep:
    """A launcher report as the store returns it (``ReportRow`` fields the snapshot reads)."""

    def __init__(self, step, step_time_s, extra):
        self.step, self.step_time_s, self.extra, self.samples_per_s = step, step_time_s, extra, None


def _records(snap, ids):
    """Records the launchers of the running jobs report: r1 unequal shares with accumulation,
    the co-located shard jobs r2/r3 under MPS shares 60/40 with accumulation."""
    out = {}
    r1 = snap.jobs[ids["r1"]]
    g = r1.allocation.gpus
    out[ids["r1"]] = (WorkerAlloc(g[0], 40, 8, 5), WorkerAlloc(g[1], 24, 8, 3))
    for key, pct, micro in (("r2", 60, 32), ("r3", 40, 64)):
        j = snap.jobs[ids[key]]
        (gpu,) = j.allocation.gpus
        out[j.id] = (WorkerAlloc(gpu, j.global_batch, micro, -(-j.global_batch // micro), pct),)
    return out


@pytest.mark.parametrize("policy", registry.names())
def test_recorded_state_same_plan_as_simulator(release, replay, policy):
    _, be = replay
    ids = jobs_of(release)
    models = default_models()
    sjobs, nodes = be.jobs(), be.nodes()
    first = build_snapshot(sjobs, nodes, models, now=NOW).snapshot
    recs = _records(first, ids)
    reports0 = {j: _Rep(0, None, {"workers": workers_to_wire(w)}) for j, w in recs.items()}
    snap = build_snapshot(sjobs, nodes, models, now=NOW, reports=reports0).snapshot
    for j, w in recs.items():
        assert snap.jobs[j].allocation.workers == w  # the snapshot took the reported record
    shared = [g for g, js in snap.gpu_jobs.items() if len(js) == 2]
    assert shared and {a for g in shared for a in snap.gpu_jobs[g]} == {ids["r2"], ids["r3"]}

    # the same jobs as simulator specs (pending, lengths hidden like in Slurm)
    specs = [dataclasses.replace(j, state=JobState.PENDING, allocation=None, start_time=None,
                                 total_iters=j.total_iters or 1e9, as_of=j.submit_time,
                                 completed_iters=0.0, attained_service=0.0, executed_time=0.0,
                                 iter_rate=0.0, preemptions=0)
             for j in snap.jobs.values()]
    running = [j for j in snap.jobs.values() if j.running]
    pending_ids = {j.id for j in snap.jobs.values() if not j.running}
    out = {}

    class Replay:
        """First: place the running jobs where Slurm has them, with their records; then
        stop at the next call and keep that snapshot."""
        name = "replay"
        preemptive = True
        needs_lengths = False

        def schedule(self, s):
            if len(s.jobs) < len(specs):
                return make_plan("replay", [], [], {})
            if not any(j.running for j in s.jobs.values()):
                out["t0"] = s.now
                acts = []
                for j in running:
                    a = j.allocation
                    others = tuple(x for x in dict.fromkeys(
                        y for g in a.gpus for y in snap.gpu_jobs[g]) if x != j.id and x in out)
                    acts.append(StartJob(j.id, a.gpus, a.sub_batch, a.accum_steps, others,
                                         a.mps_pct, a.workers, a.global_batch))
                    out[j.id] = True
                return make_plan("replay", acts, [], {})
            out["sim"] = s
            raise _Done

    sim = Simulator(specs, snap.nodes, Replay(), models,
                    SimConfig(reveal_lengths=False, interval=1.0))
    with pytest.raises(_Done):
        sim.run()
    s = out["sim"]
    assert dict(s.gpu_jobs) == dict(snap.gpu_jobs) and set(s.free_gpus) == set(snap.free_gpus)
    assert {j for j, x in s.jobs.items() if not x.running} == pending_ids
    for j in running:
        assert s.jobs[j.id].allocation == snap.jobs[j.id].allocation

    # the live snapshot at the simulator's clock: same start times, measured rate = the
    # modelled one, progress reported up to now; lengths hidden as in the simulator
    reports, live_jobs = {}, []
    for sj in sjobs:
        if sj.job_id in s.jobs and s.jobs[sj.job_id].running:
            v = s.jobs[sj.job_id]
            extra = reports0[sj.job_id].extra if sj.job_id in reports0 else None
            reports[sj.job_id] = _Rep(s.completed(v), 1.0 / v.iter_rate, extra)
            sj = dataclasses.replace(sj, start_time=out["t0"])
        live_jobs.append(sj)
    real = build_snapshot(live_jobs, nodes, models, now=s.now, reports=reports).snapshot
    real = dataclasses.replace(real, jobs={k: dataclasses.replace(j, total_iters=None)
                                           for k, j in real.jobs.items()})
    pol = registry.get_policy(policy)
    real_plan = pol.schedule(real).as_dict()
    sim_plan = registry.get_policy(policy).schedule(s).as_dict()
    # an elastic policy may give every job a share (empty queue) but then acts
    assert real_plan["order"] or (pol.elastic and real_plan["actions"])
    same = lambda a, b: json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)  # noqa: E731 (NaN == NaN)
    diff = {k: (real_plan[k], sim_plan[k]) for k in real_plan if not same(real_plan[k], sim_plan[k])}
    if "reasons" in diff:
        r, m = diff["reasons"]
        diff["reasons"] = {j: (r.get(j), m.get(j)) for j in set(r) | set(m)
                           if not same(r.get(j), m.get(j))}
    assert not diff, f"live path != simulator path: {diff}"
