"""Reference copy (test oracle) of the straightforward packing hosts: policies/packing_host.py,
lucid.py, gandiva.py, gavel_pack.py and policies/gimbal_coord.py's packing_sets / coordinate
as they were before the index-based round (policies/pack_index.py).  Not registered; each
class carries the registry name of the policy it mirrors (``Plan.policy``).  Do not edit:
tests/policies/test_pack_differential.py compares the package's Plans with these."""
from __future__ import annotations

from typing import Iterable, Optional

from policies.base import (Policy, exclusive_config, keep_running_reasons, node_order,
                           pick_consolidated, take_gpus)
from reference_gimbal_coord import (Attempt, Coordination, PackingSet, RateModel, SearchResult,
                                   _components, _jmax, _restored, coordination_search, job_info,
                                   packing_violations, placement_ok, start_config)
from policies.model import ClusterSnapshot, Gpu, Job
from policies.plan import Plan, PreemptJob, ReasonCode, ResizeJob, StartJob, make_plan, reason
from dataclasses import replace


# ---- policies/gimbal_coord.py (packing_sets, coordinate)
def packing_sets(snap: ClusterSnapshot) -> tuple[PackingSet, ...]:
    """Packing sets (two or more running jobs sharing GPUs) that keep §5.1, by J_max id.  A
    set breaking the rules is left out: GIMBAL does not coordinate it (§5: it would run such
    jobs one after the other)."""
    jg = {j.id: j.allocation.gpus for j in snap.jobs.values()
          if j.running and j.allocation is not None}
    gj = {g: tuple(i for i in ids if i in jg) for g, ids in snap.gpu_jobs.items()}
    world = {j: len(g) for j, g in jg.items()}
    out = []
    for comp in _components(gj):
        if len(comp) < 2:
            continue
        sub_gj = {g: ids for g, ids in gj.items() if set(ids) & comp}
        if packing_violations(sub_gj, {j: jg[j] for j in comp}):
            continue
        since = {j: snap.jobs[j].start_time or 0.0 for j in comp}
        jm = _jmax(comp, world, since)
        out.append(PackingSet(jm, (jm,) + tuple(sorted(comp - {jm}))))
    return tuple(sorted(out, key=lambda s: s.jmax))


def coordinate(snap: ClusterSnapshot, objective: str, *, lgrr: bool = True, liss: bool = True,
               skip: Iterable[str] = (), switch_cost: float = 0.0) -> tuple[Coordination, ...]:
    """Run Algorithm 1 on every packing set of the snapshot (sets with a job in ``skip``, e.g.
    one the host plan touches this round, are left alone).  Emits a ResizeJob with the new
    per-worker record (same GPUs; MPS % and sample shares; shares sum to the global batch) for
    each job whose record changed."""
    model = RateModel(snap.profiles, snap.interference)
    skip = set(skip)
    out = []
    sets = packing_sets(snap)
    in_sets = {m for ps in sets for m in ps.members}
    for job in snap.running():
        # a job whose partners have left keeps no GIMBAL limit: full GPU, even split
        if job.id in in_sets or job.id in skip or job.allocation is None:
            continue
        if any(snap.gpu_jobs.get(g, ()) != (job.id,) for g in job.allocation.gpus):
            continue
        ws = job.allocation.workers
        if any(w.mps_pct is not None and w.mps_pct < 100 for w in ws):
            new = _restored(ws, job.allocation.global_batch or job.global_batch)
            none = Attempt("restore: no partner left", 0.0, True)
            res = SearchResult({job.id: new}, 0.0, 0.0, (none,), (job.id,), (), "no-primitive")
            out.append(Coordination(job.id, (job.id,), res, (ResizeJob(
                job.id, tuple(w.gpu for w in new), max(w.micro_batch for w in new),
                max(w.accum_steps for w in new), 100, new, job.allocation.global_batch),)))
    for ps in sets:
        if skip & set(ps.members):
            continue
        jobs = [snap.jobs[j] for j in ps.members]
        if any(j.app not in snap.profiles for j in jobs):
            continue
        infos = {j.id: job_info(snap, j) for j in jobs}
        actual = {j.id: start_config(j) for j in jobs}
        # a worker whose GPU holds only its own job has no partner to yield to: 100 %
        start = {jid: tuple(w if len(snap.gpu_jobs.get(w.gpu, ())) > 1
                            else replace(w, mps_pct=100) for w in ws)
                 for jid, ws in actual.items()}
        res = coordination_search(objective, infos, start, model, lgrr=lgrr, liss=liss,
                                  switch_cost=switch_cost)
        resizes = []
        for jid in res.changed(actual):
            ws = tuple(res.config[jid])
            j = snap.jobs[jid]
            mps = min(w.mps_pct for w in ws)
            resizes.append(ResizeJob(jid, tuple(w.gpu for w in ws), max(w.micro_batch for w in ws),
                                     max(w.accum_steps for w in ws), mps, ws,
                                     j.allocation.global_batch))
        out.append(Coordination(ps.jmax, ps.members, res, tuple(resizes)))
    return tuple(out)


# ---- policies/packing_host.py

PACK_MPS = 100  # packed workers start under MPS at 100 % (free competition)


def pair_progress(snap: ClusterSnapshot, a: str, b: str) -> float:
    """Combined normalised progress of two applications packed at MPS 100/100:
    1/ξ_a + 1/ξ_b (> 1: packing beats running one after the other)."""
    it = snap.interference
    return 1.0 / it.ratio(a, b, PACK_MPS, PACK_MPS) + 1.0 / it.ratio(b, a, PACK_MPS, PACK_MPS)


class PackingHost(Policy):
    """Base of the packing hosts (see module doc)."""

    objective = "jct"  # seed 004 eq. 1/3/5 local objective GIMBAL coordinates for
    threshold = 1.0  # conservative pair threshold (host-specific meaning)
    gimbal_threshold = 1.0  # GIMBAL's relaxed one

    def __init__(self, gimbal: bool = False, lgrr: bool = True, liss: bool = True,
                 unequal: Optional[bool] = None, round_length: Optional[float] = None,
                 switch_cost: float = 3.6):
        self.gimbal = bool(gimbal)
        self.switch_cost = switch_cost
        self.lgrr, self.liss = bool(lgrr), bool(liss)
        self.unequal = self.gimbal if unequal is None else bool(unequal)
        if self.gimbal:  # eq. 1-6 need RemainingSteps: GIMBAL reads the jobs' lengths
            self.needs_lengths = True
        if round_length is not None:
            self.round_length = float(round_length)
        elif self.gimbal:
            self.round_length = 30.0  # §6: GIMBAL monitors every 30 s
        if self.round_length is not None and self.round_length <= 0:
            raise ValueError(f"round_length must be > 0 s, got {round_length}")

    # ---- host-specific hooks
    def order(self, snap: ClusterSnapshot) -> list[Job]:
        return list(snap.pending())

    def score(self, snap: ClusterSnapshot, job: Job, host: Job) -> float:
        """Sharing score of packing ``job`` beside ``host`` (larger = better)."""
        return pair_progress(snap, job.app, host.app)

    def pair_ok(self, snap: ClusterSnapshot, job: Job, host: Job) -> bool:
        thr = self.gimbal_threshold if self.gimbal else self.threshold
        return self.score(snap, job, host) >= thr

    def numbers(self, snap: ClusterSnapshot, job: Job) -> dict:
        return {}

    # ---- the round
    def _pack_target(self, snap, job, taken: set, by_node) -> Optional[tuple[tuple[Gpu, ...], Job]]:
        """GPUs of a running job to pack ``job`` on, the best-scoring host first."""
        best = None
        for host in snap.running():
            if host.id == job.id or host.allocation is None:
                continue
            n, k = job.num_gpus, host.num_gpus
            if n > k or (n < k and not self.unequal):
                continue
            alone = [g for g in host.allocation.gpus
                     if snap.gpu_jobs.get(g, ()) == (host.id,) and g not in taken]
            if len(alone) < n or (n == k and len(alone) < k):
                continue
            if not self.pair_ok(snap, job, host):
                continue
            gpus = self._fit(snap, job, host, alone, by_node)
            if gpus is None or not placement_ok(snap, job, gpus):
                continue
            key = (-self.score(snap, job, host), host.submit_time, host.id)
            if best is None or key < best[0]:
                best = (key, gpus, host)
        return None if best is None else (best[1], best[2])

    def _fit(self, snap, job, host, alone, by_node) -> Optional[tuple[Gpu, ...]]:
        """``job.num_gpus`` of ``alone`` on as few nodes as possible where memory fits."""
        b, _ = exclusive_config(snap, job)
        mem, hmem = snap.memory.get(job.app), snap.memory.get(host.app)
        need = (mem.mem_mb(b) if mem else 0.0) + (
            hmem.mem_mb(host.allocation.sub_batch) if hmem else 0.0)
        ok = [g for g in alone if need <= snap.node(g.node).gpu_mem_mb]
        grouped: dict[str, list[Gpu]] = {}
        for g in ok:
            grouped.setdefault(g.node, []).append(g)
        return pick_consolidated((), job.num_gpus, node_order(snap), grouped)

    def schedule(self, snap: ClusterSnapshot) -> Plan:
        by_node = snap.free_by_node()
        nfree = sum(len(v) for v in by_node.values())
        total = snap.total_gpus
        actions, reasons, order, infeasible = [], {}, [], []
        taken: set[Gpu] = set()  # running jobs' GPUs packed this round
        touched: set[str] = set()
        for job in self.order(snap):
            nums = self.numbers(snap, job)
            if job.num_gpus > total:
                infeasible.append(job.id)
                reasons[job.id] = reason(ReasonCode.INFEASIBLE,
                                         f"asks {job.num_gpus} GPUs, cluster has {total}", **nums)
                continue
            gpus = pick_consolidated((), job.num_gpus, node_order(snap), by_node) \
                if job.num_gpus <= nfree else None
            if gpus is not None:
                take_gpus(by_node, gpus)
                nfree -= len(gpus)
                b, s = exclusive_config(snap, job)
                actions.append(StartJob(job.id, gpus, b, s))
                reasons[job.id] = reason(ReasonCode.STARTED, f"{job.num_gpus} GPUs free", **nums)
                continue
            target = self._pack_target(snap, job, taken, by_node)
            if target is None:
                order.append(job.id)
                reasons[job.id] = reason(ReasonCode.WAIT_RESOURCES,
                                         f"needs {job.num_gpus} GPUs, {nfree} free, no pair "
                                         "passes the packing rule", free_gpus=nfree, **nums)
                continue
            gpus, host = target
            taken.update(gpus)
            touched.update((job.id, host.id))
            b, s = exclusive_config(snap, job)
            actions.append(StartJob(job.id, gpus, b, s, share_with=(host.id,), mps_pct=PACK_MPS))
            reasons[job.id] = reason(ReasonCode.STARTED_SHARED, f"packed beside {host.id}",
                                     score=self.score(snap, job, host), **nums)
        if self.gimbal and snap.round_call:  # §6: the coordinator acts at monitoring rounds
            for c in coordinate(snap, self.objective, lgrr=self.lgrr, liss=self.liss,
                                skip=touched, switch_cost=self.switch_cost):
                for rz in c.resizes:
                    actions.append(rz)
                    reasons[rz.job_id] = reason(
                        ReasonCode.RESIZED, f"GIMBAL coordination of the set of {c.jmax}",
                        objective_before=c.result.objective_before,
                        objective_after=c.result.objective_after)
        keep_running_reasons(snap, reasons)
        return make_plan(self.name, actions, order, reasons, infeasible)


# ---- policies/lucid.py
class Lucid(PackingHost):
    """Lucid-style: SJF, pack equal-size pairs whose profiled sharing score passes 1.25."""

    needs_lengths = True
    objective = "jct"
    threshold = 1.25
    gimbal_threshold = 1.0

    def order(self, snap: ClusterSnapshot) -> list[Job]:
        def key(j):
            n = snap.job_length(j)
            return (n is None, n if n is not None else 0.0, j.submit_time, j.id)
        return sorted(snap.pending(), key=key)

    def numbers(self, snap, job):
        n = snap.job_length(job)
        return {} if n is None else {"length_s": n}


class LucidGimbal(Lucid):
    """Lucid-style with GIMBAL: threshold 1.0, unequal packing, JCT coordination every 30 s."""

    def __init__(self, gimbal: bool = True, **kw):
        super().__init__(gimbal=gimbal, **kw)


# ---- policies/gandiva.py
def measured_progress(snap: ClusterSnapshot, job: Job) -> Optional[float]:
    """Runtime profile: current speed relative to the job alone (1.0 = unslowed); ``None``
    while no speed has been measured (on the cluster: before the job's first report)."""
    if not job.running or job.iter_rate <= 0 or job.app not in snap.profiles:
        return None
    return job.iter_rate * snap.exclusive_iter_time(job)


class Gandiva(PackingHost):
    """Gandiva-style: FCFS with deadlines first, greedy packing on under-used GPUs, unpacks bad pairs."""

    preemptive = True
    objective = "deadline"
    threshold = 1.0
    gimbal_threshold = 0.9

    def order(self, snap: ClusterSnapshot) -> list[Job]:
        return sorted(snap.pending(), key=lambda j: (
            j.deadline is None, j.deadline if j.deadline is not None else 0.0,
            j.submit_time, j.id))

    def score(self, snap, job, host):
        # greedy on under-used GPUs: lower measured progress of the host first (tie: pair score)
        m = measured_progress(snap, host)
        return super().score(snap, job, host) - 1e-3 * (1.0 if m is None else m)

    def pair_ok(self, snap, job, host):
        if job.preemptions:
            return False
        thr = self.gimbal_threshold if self.gimbal else self.threshold
        return super().score(snap, job, host) >= thr

    def schedule(self, snap: ClusterSnapshot) -> Plan:
        thr = self.gimbal_threshold if self.gimbal else self.threshold
        unpack: set[str] = set()
        for ids in snap.gpu_jobs.values():
            if len(ids) != 2:
                continue
            a, b = (snap.jobs[i] for i in ids)
            if not (a.running and b.running) or a.restore_left > 0 or b.restore_left > 0:
                continue
            ma, mb = measured_progress(snap, a), measured_progress(snap, b)
            if ma is not None and mb is not None and ma + mb < thr - 1e-9:
                unpack.add(max((a, b), key=lambda j: (j.start_time or 0.0, j.id)).id)
        if not unpack:
            return super().schedule(snap)
        # an introspection call only unpacks; the next call places jobs on what it freed
        reasons = {jid: reason(ReasonCode.PREEMPTED, "introspection: the packed pair runs slower "
                               "than its two jobs one after the other") for jid in unpack}
        order = [j.id for j in self.order(snap)]
        reasons.update(dict.fromkeys(order, reason(ReasonCode.WAIT_ORDER,
                                                   "this call unpacks a slow pair first")))
        keep_running_reasons(snap, reasons)
        return make_plan(self.name, [PreemptJob(j) for j in sorted(unpack)], order, reasons)


class GandivaGimbal(Gandiva):
    """Gandiva-style with GIMBAL: threshold 0.9, unequal packing, deadline coordination every 30 s."""

    def __init__(self, gimbal: bool = True, **kw):
        super().__init__(gimbal=gimbal, **kw)


# ---- policies/gavel_pack.py
class GavelPack(PackingHost):
    """Gavel-style makespan: rounds, longest remaining first, highest-throughput pairs packed."""

    needs_lengths = True
    objective = "makespan"
    threshold = 1.0
    gimbal_threshold = 0.9
    round_length = 360.0

    def order(self, snap: ClusterSnapshot) -> list[Job]:
        def key(j):
            r = snap.remaining_time(j)
            return (r is None, -(r or 0.0), j.submit_time, j.id)
        return sorted(snap.pending(), key=key)

    def numbers(self, snap, job):
        r = snap.remaining_time(job)
        return {} if r is None else {"remaining_s": r}


class GavelPackGimbal(GavelPack):
    """Gavel-style with GIMBAL: threshold 0.9, unequal packing, makespan coordination every 30 s."""

    def __init__(self, gimbal: bool = True, **kw):
        super().__init__(gimbal=gimbal, **kw)


for _cls, _name in ((Lucid, "lucid"), (LucidGimbal, "lucid+gimbal"), (Gandiva, "gandiva"),
                    (GandivaGimbal, "gandiva+gimbal"), (GavelPack, "gavel"),
                    (GavelPackGimbal, "gavel+gimbal")):
    _cls.name = _name
REFS = {c.name: c for c in (Lucid, LucidGimbal, Gandiva, GandivaGimbal, GavelPack,
                            GavelPackGimbal)}
