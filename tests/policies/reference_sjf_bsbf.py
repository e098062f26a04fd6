"""Reference copy (test oracle) of the straightforward SJF-BSBF implementation.

The package's :mod:`policies.sjf_bsbf` must return exactly the same Plans; this copy is
kept only for tests/policies/test_sjf_differential.py.  Original docstring:

SJF-BSBF: shortest job first with best sharing benefit first (seed 000 Alg. 1).

Non-preemptive, gang-scheduled, no migration.  Each scheduling round walks the
pending jobs in SJF order and, per job (Algorithm 1):

* lines 1–2 — sort pending jobs by L_k ascending (``snap.job_length``: the
  exclusive duration t_iter·I_k; ties by submit time, then id);
* lines 4–5 — G_free (GPUs holding no job) and G_OJ (GPUs holding exactly one
  job) are recomputed for every job, so starts made earlier in the same round
  count;
* lines 6–7 — enough free GPUs: take them, consolidated on as few nodes as
  possible (:func:`policies.base.pick_consolidated`), exclusive configuration
  (:func:`policies.base.exclusive_config`);
* lines 9–13 — otherwise, if |G_free| + |G_OJ| ≥ G_k, for each job J holding
  GPUs of G_OJ run Algorithm 2 (:func:`policies.sharing.algorithm2`) and keep
  J in J_share when SF is true;
* line 14 — sort J_share by the pair JCT t ascending;
* lines 15–17 — take J's single-occupied GPUs in that order until the request
  is met.  At most two jobs per GPU (eq. 9 with C = 2): only GPUs holding one
  job are ever shared.

Choices where the paper is silent (ours):

* **Passing.** Algorithm 1's loop has no break: a job that cannot start (no
  GPUs, or SF false everywhere) waits and later, shorter-or-not jobs in the
  SJF order are still tried (it is a backfilling SJF).
* **Candidates are jobs, not GPUs.** Line 10 loops over GPUs, but Algorithm 2
  depends on the GPU only through the job on it, so it is evaluated once per
  running job; the job's GPUs that hold only it form its candidate group.
  Jobs started earlier in the same round are candidates too (they hold one
  job per GPU from now on).
* **Running job's numbers.** t_A is the eq. 7 iteration time of A alone in its
  current allocation (GPUs, nodes, sub-batch, accumulation steps); i_A is A's
  true remaining iterations ``snap.remaining_iters`` (the same oracle SJF's
  L_k uses), else its remaining-time estimate / t_A; a job with neither is
  never shared with.
* **Candidate job's numbers.** t_B(b) is B's eq. 7 time alone with sub-batch b
  on G_k GPUs packed on as few nodes as possible; i_B = its total iterations.
  The sequential alternative uses B's exclusive configuration (it runs alone
  after A, no memory room to leave) — see :mod:`policies.sharing`.  Without
  B's length (``--unknown-lengths``) Theorem 1 cannot be evaluated: B never
  shares, and the policy is a backfilling FIFO (L_k unknown ties by submit).
* **Memory.** b fits beside A on GPU g when mem_B(b) + mem_A(A's sub-batch) ≤
  gpu_mem_mb of g's node and b ≤ B's profiled maximum (MemoryProfile; a job
  without a memory profile is assumed to fit).
* **Multi-job groups.** If B takes GPUs of several jobs it runs with the
  smallest of their chosen sub-batches (so it fits beside each of them);
  ``share_with`` lists them all, the reason's numbers are those of the first
  (best) partner.  If the beneficial groups do not cover G_k, free GPUs make
  up the rest (the paper takes shared GPUs "not the free GPUs at first";
  using free ones after them is our reading).  A request that still cannot
  be met waits: WAIT_NO_SHARE_BENEFIT when GPUs whose Theorem 1 says "run
  after" would have covered it, else WAIT_MEMORY.
* **ξ** is ``snap.xi(A, B)`` / ``snap.xi(B, A)`` — the fitted table, its
  default for unknown pairs, or the ``--xi`` override.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from policies.base import Policy, exclusive_config, node_order, pick_consolidated
from policies.model import ClusterSnapshot, Gpu, Job
from policies.plan import Plan, ReasonCode, StartJob, make_plan, reason
from policies.sharing import ShareChoice, algorithm2, sub_batch_candidates


@dataclass
class _Occupant:
    """A job holding GPUs this round (running, or started earlier in the round)."""

    job: Job
    gpus: tuple[Gpu, ...]
    sub_batch: int
    t_iter: float  # s/iteration alone in its configuration (eq. 7)
    rem_iters: Optional[float]  # None: unknown


@dataclass
class _Group:
    """Candidate for sharing: one occupant and its GPUs that hold only it."""

    occ: _Occupant
    gpus: list[Gpu]
    choice: Optional[ShareChoice] = None


class _Candidate:
    """Per-round precomputation for one pending job B (Algorithm 2 inputs)."""

    def __init__(self, snap: ClusterSnapshot, job: Job):
        self.job = job
        self.prof = snap.profiles.get(job.app)
        self.mem = snap.memory.get(job.app)
        per_node = max((n.num_gpus for n in snap.nodes), default=job.num_gpus)
        self.nodes = -(-job.num_gpus // max(per_node, 1))
        self.local = -(-job.global_batch // max(job.num_gpus, 1))
        self.cands = sub_batch_candidates(self.local)
        self._t: dict[tuple[int, int], float] = {}
        self.excl = exclusive_config(snap, job)
        self.t_excl = self.iter_time(*self.excl) if self.prof is not None else None
        self.iters = job.total_iters

    def iter_time(self, b: int, s: int) -> float:
        """Eq. 7 with s accumulation steps of the per-GPU share B = global/G_k
        (micro-batch ⌈B/s⌉ = b; the simulator's rate uses the same form)."""
        key = (b, s)
        t = self._t.get(key)
        if t is None:
            k = self.job.num_gpus
            t = self.prof.iter_time(self.job.global_batch / k, k, self.nodes, s)
            self._t[key] = t
        return t

    def mem_mb(self, b: int) -> float:
        return 0.0 if self.mem is None else self.mem.mem_mb(b)

    def fits_beside(self, b: int, other_mb: float, gpu_mem_mb: float) -> bool:
        if self.prof is not None and b > self.prof.max_local_batch:
            return False
        return self.mem_mb(b) + other_mb <= gpu_mem_mb


def _occupant_from_job(snap: ClusterSnapshot, job: Job) -> Optional[_Occupant]:
    alloc = job.allocation
    if alloc is None or not alloc.gpus:
        return None
    prof = snap.profiles.get(job.app)
    k = len(alloc.gpus)
    t = (prof.iter_time(job.global_batch / k, k, alloc.num_nodes, alloc.accum_steps)
         if prof is not None else None)
    rem = snap.remaining_iters(job)
    if rem is None and t is not None:  # length-unaware: estimate / exclusive s-per-iteration
        rt = snap.remaining_time(job)
        if rt is not None:
            rem = rt / snap.exclusive_iter_time(job)
    return _Occupant(job, alloc.gpus, alloc.sub_batch, t if t is not None else float("nan"), rem)


class RefSjfBsbf(Policy):
    """SJF-BSBF: SJF order; share a GPU only when Theorem 1 says it lowers the pair's JCT."""

    name = "sjf-bsbf"
    needs_lengths = True
    preemptive = False
    shares_by_benefit = True

    # ------------------------------------------------------------------ round
    def schedule(self, snap: ClusterSnapshot) -> Plan:
        order_key = {}
        for j in snap.pending():
            length = snap.job_length(j)
            order_key[j.id] = (float("inf") if length is None else length, j.submit_time, j.id)
        pending = sorted(snap.pending(), key=lambda j: order_key[j.id])  # Alg. 1 line 1

        all_gpus = [g for n in snap.nodes for g in n.gpus()]
        gpu_pos = {g: i for i, g in enumerate(all_gpus)}
        mem_of = {n.name: n.gpu_mem_mb for n in snap.nodes}
        occ: dict[Gpu, list[str]] = {g: list(snap.gpu_jobs.get(g, ())) for g in all_gpus}
        occupants: dict[str, _Occupant] = {}
        for j in snap.running():
            o = _occupant_from_job(snap, j)
            if o is not None:
                occupants[j.id] = o
        can_share = snap.max_jobs_per_gpu >= 2
        total = snap.total_gpus
        norder = node_order(snap)

        actions, reasons, waiting, infeasible = [], {}, [], []
        for job in pending:  # Alg. 1 line 2 (no break: later jobs may pass)
            length_s = order_key[job.id][0]
            nums = {"length_s": length_s if length_s != float("inf") else -1.0}
            if job.num_gpus > total:
                infeasible.append(job.id)
                reasons[job.id] = reason(ReasonCode.INFEASIBLE,
                                         f"asks {job.num_gpus} GPUs, cluster has {total}", **nums)
                continue
            free = [g for g in all_gpus if not occ[g]]  # line 4
            one = [g for g in all_gpus if len(occ[g]) == 1]  # line 5
            need = job.num_gpus
            if len(free) >= need:  # lines 6-7
                gpus = pick_consolidated(free, need, norder)
                b, s = exclusive_config(snap, job)
                actions.append(StartJob(job.id, gpus, b, s))
                reasons[job.id] = reason(ReasonCode.STARTED, f"{need} GPUs free, exclusive",
                                         sub_batch=b, accum_steps=s, free_gpus=len(free), **nums)
                self._occupy(snap, occ, occupants, job, gpus, b, s)
                continue
            if not can_share or len(free) + len(one) < need:  # line 9 fails
                waiting.append(job.id)
                reasons[job.id] = reason(ReasonCode.WAIT_RESOURCES,
                                         f"needs {need} GPUs, {len(free)} free and "
                                         f"{len(one) if can_share else 0} shareable",
                                         free_gpus=len(free), shareable_gpus=len(one), **nums)
                continue
            groups = self._groups(one, occ, occupants, gpu_pos)
            cand = _Candidate(snap, job)
            started = self._try_share(snap, job, cand, groups, free, mem_of, norder, nums,
                                      actions, reasons)
            if started is None:
                waiting.append(job.id)
                continue
            gpus, b, s = started
            self._occupy(snap, occ, occupants, job, gpus, b, s)

        for j in snap.running():
            reasons.setdefault(j.id, reason(ReasonCode.KEEP_RUNNING))
        return make_plan(self.name, actions, waiting, reasons, infeasible)

    # --------------------------------------------------------------- helpers
    @staticmethod
    def _occupy(snap, occ, occupants, job, gpus, b, s) -> None:
        for g in gpus:
            occ[g].append(job.id)
        prof = snap.profiles.get(job.app)
        nodes = len({g.node for g in gpus})
        k = len(gpus)
        t = prof.iter_time(job.global_batch / k, k, nodes, s) if prof is not None else float("nan")
        rem = job.total_iters - job.completed_iters if job.total_iters is not None else None
        occupants[job.id] = _Occupant(job, tuple(gpus), b, t, rem)

    @staticmethod
    def _groups(one, occ, occupants, gpu_pos) -> list[_Group]:
        """Line 10: GPUs of G_OJ grouped by the job on them, in node/GPU order."""
        groups: dict[str, _Group] = {}
        for g in one:
            jid = occ[g][0]
            o = occupants.get(jid)
            if o is None:  # a job the snapshot places but we cannot model
                continue
            groups.setdefault(jid, _Group(o, [])).gpus.append(g)
        return sorted(groups.values(), key=lambda gr: gpu_pos[gr.gpus[0]])

    def _evaluate(self, snap, cand: _Candidate, gr: _Group, mem_of) -> ShareChoice:
        """Line 11: Algorithm 2 for candidate B beside the group's job A."""
        a = gr.occ
        xi_run = snap.xi(a.job.app, cand.job.app)
        xi_new = snap.xi(cand.job.app, a.job.app)
        a_mem = snap.memory.get(a.job.app)
        a_mb = 0.0 if a_mem is None else a_mem.mem_mb(a.sub_batch)
        cap = min(mem_of[g.node] for g in gr.gpus)
        fits = lambda b: cand.fits_beside(b, a_mb, cap)  # noqa: E731
        usable = (cand.prof is not None and cand.iters is not None and a.rem_iters is not None
                  and a.t_iter == a.t_iter and a.t_iter > 0)
        if not usable:  # cannot evaluate Theorem 1: never share (SF false)
            b0, s0 = cand.cands[0]
            ok = any(fits(b) for b, _ in cand.cands)
            return ShareChoice(False, b0, s0, float("inf"), float("inf"), float("inf"), 0,
                               xi_run, xi_new, ok)
        return algorithm2(cand.cands, cand.iter_time, fits, a.t_iter, a.rem_iters,
                          cand.iters, xi_run, xi_new, cand.t_excl)

    def _select(self, snap, cand: _Candidate, groups: list[_Group], mem_of):
        """Lines 10–14: evaluate every group, keep SF true, sort by t.

        Returns (selected groups in order, the rest with their choices)."""
        chosen, rest = [], []
        for gr in groups:
            gr.choice = self._evaluate(snap, cand, gr, mem_of)
            (chosen if gr.choice.share else rest).append(gr)
        chosen.sort(key=lambda gr: gr.choice.t)  # stable: ties keep node order
        return chosen, rest

    def _try_share(self, snap, job, cand, groups, free, mem_of, norder, nums, actions, reasons):
        need = job.num_gpus
        chosen, rest = self._select(snap, cand, groups, mem_of)
        taken: list[Gpu] = []
        partners: list[_Group] = []
        for gr in chosen:  # lines 15-17
            if len(taken) >= need:
                break
            k = min(need - len(taken), len(gr.gpus))
            taken.extend(gr.gpus[:k])
            partners.append(gr)
        n_shared = len(taken)
        if n_shared < need and len(free) >= need - n_shared and partners:
            extra = pick_consolidated(free, need - n_shared, norder)
            taken.extend(extra)
        if len(taken) < need or not partners:
            nobenefit = sum(len(gr.gpus) for gr in rest if gr.choice.fits)
            shareable_ok = sum(len(gr.gpus) for gr in chosen)
            evaluable = [gr for gr in rest if gr.choice.fits and gr.choice.t_seq < float("inf")]
            best_rest = min(evaluable, key=lambda gr: gr.choice.t_share - gr.choice.t_seq,
                            default=None)
            if len(free) + shareable_ok + nobenefit >= need and best_rest is None:
                reasons[job.id] = reason(
                    ReasonCode.WAIT_NO_SHARE_BENEFIT,
                    "Theorem 1 cannot be evaluated (job length unknown): no sharing",
                    free_gpus=len(free), beneficial_gpus=shareable_ok, **nums)
            elif len(free) + shareable_ok + nobenefit >= need:
                c = best_rest.choice
                reasons[job.id] = reason(
                    ReasonCode.WAIT_NO_SHARE_BENEFIT,
                    f"Theorem 1: sharing with {best_rest.occ.job.id} gives avg JCT "
                    f"{c.t_share:.0f}s vs {c.t_seq:.0f}s if run after it",
                    t_share=c.t_share, t_seq=c.t_seq, xi_run=c.xi_run, xi_new=c.xi_new,
                    case=c.case, sub_batch=c.sub_batch, accum_steps=c.accum_steps,
                    free_gpus=len(free), beneficial_gpus=shareable_ok, **nums)
            else:
                reasons[job.id] = reason(
                    ReasonCode.WAIT_MEMORY,
                    f"needs {need} GPUs: {len(free)} free, {shareable_ok} shareable with "
                    f"benefit; no sub-batch fits beside the others",
                    free_gpus=len(free), beneficial_gpus=shareable_ok,
                    memory_blocked_gpus=sum(len(gr.gpus) for gr in rest if not gr.choice.fits),
                    **nums)
            return None
        # B fits beside every partner with the smallest chosen sub-batch.
        b, s = min(((gr.choice.sub_batch, gr.choice.accum_steps) for gr in partners),
                   key=lambda x: x[0])
        first = partners[0].choice
        share_with = tuple(dict.fromkeys(gr.occ.job.id for gr in partners))
        actions.append(StartJob(job.id, tuple(taken), b, s, share_with=share_with))
        reasons[job.id] = reason(
            ReasonCode.STARTED_SHARED,
            f"shares {n_shared} GPU(s) with {', '.join(share_with)}, sub-batch {b} x {s} "
            f"accumulation steps; pair avg JCT {first.t_share:.0f}s shared vs "
            f"{first.t_seq:.0f}s sequential",
            sub_batch=b, accum_steps=s, t_share=first.t_share, t_seq=first.t_seq,
            xi_run=first.xi_run, xi_new=first.xi_new, case=first.case,
            shared_gpus=n_shared, free_gpus_used=need - n_shared, partners=len(partners), **nums)
        return tuple(taken), b, s
