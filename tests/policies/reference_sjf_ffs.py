"""Reference copy (test oracle) of the straightforward SJF-FFS implementation.

SJF-FFS: shortest job first with first-fit sharing (seed 000 §VI-A baseline 4).

The same as SJF-BSBF (:mod:`policies.sjf_bsbf`, Algorithm 1) — SJF order,
free GPUs consolidated when there are enough, at most two jobs per GPU, no
pre-emption — except lines 10–17: instead of Algorithm 2's benefit test
(Theorem 1), the job takes GPUs that hold one job in *first-fit* order (node
order, then GPU index) with no benefit test, then free GPUs for the rest.

Our choices: memory is still respected (a GPU is skipped when no sub-batch
B, B/2, …, 1 fits beside its job — running out of GPU memory is not an
option for a real job); on each GPU the largest fitting sub-batch is used and
a multi-GPU job runs with the smallest of those over its GPUs.  Theorem 1's
numbers are still reported in the reason (for comparison with SJF-BSBF) but
never decide anything.
"""
from __future__ import annotations

from policies.sharing import ShareChoice, theorem1
from reference_sjf_bsbf import RefSjfBsbf, _Group


class RefSjfFfs(RefSjfBsbf):
    """SJF-FFS: SJF order; share GPUs holding one job first-fit, no benefit test."""

    name = "sjf-ffs"
    shares_by_benefit = False

    @staticmethod
    def _groups(one, occ, occupants, gpu_pos):
        """First fit works GPU by GPU: one group per GPU of G_OJ, in order."""
        out = []
        for g in sorted(one, key=gpu_pos.__getitem__):
            o = occupants.get(occ[g][0])
            if o is not None:
                out.append(_Group(o, [g]))
        return out

    def _first_fit_choice(self, snap, cand, gr, mem_of) -> ShareChoice:
        a = gr.occ
        xi_run = snap.xi(a.job.app, cand.job.app)
        xi_new = snap.xi(cand.job.app, a.job.app)
        a_mem = snap.memory.get(a.job.app)
        a_mb = 0.0 if a_mem is None else a_mem.mem_mb(a.sub_batch)
        cap = mem_of[gr.gpus[0].node]
        for b, s in cand.cands:  # largest sub-batch first
            if cand.fits_beside(b, a_mb, cap):
                t_share = t_seq = float("nan")
                case = 0
                if (cand.prof is not None and cand.iters is not None and a.rem_iters is not None
                        and a.t_iter == a.t_iter and a.t_iter > 0):
                    d = theorem1(a.t_iter, a.rem_iters, cand.iter_time(b, s), cand.iters,
                                 xi_run, xi_new, cand.t_excl)
                    t_share, t_seq, case = d.t_share, d.t_seq, d.case
                return ShareChoice(True, b, s, t_share, t_share, t_seq, case, xi_run, xi_new, True)
        b0, s0 = cand.cands[0]
        return ShareChoice(False, b0, s0, float("inf"), float("inf"), float("inf"), 0,
                           xi_run, xi_new, False)

    def _select(self, snap, cand, groups, mem_of):
        chosen, rest = [], []
        for gr in groups:
            gr.choice = self._first_fit_choice(snap, cand, gr, mem_of)
            (chosen if gr.choice.share else rest).append(gr)
        return chosen, rest  # first-fit: no sorting
