"""SJF-FFS: shortest job first with first-fit sharing (seed 000 §VI-A baseline 4).

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

import heapq

from .registry import register
from .share_index import Candidate, Round
from .sharing import ShareChoice, theorem1
from .sjf_bsbf import SjfBsbf


@register("sjf-ffs")
class SjfFfs(SjfBsbf):
    """SJF-FFS: SJF order; share GPUs holding one job first-fit, no benefit test."""

    per_gpu_groups = True  # first fit works GPU by GPU: one candidate per GPU of G_OJ
    marks_signatures = False  # no benefit test, no signature that surely cannot share

    @staticmethod
    def _first_fit_choice(rnd: Round, cand: Candidate, gr, fit) -> ShareChoice:
        """The largest sub-batch that fits beside the GPU's job; Theorem 1's numbers
        are reported, never used."""
        a = gr.occ
        snap = rnd.snap
        xi_run = snap.xi(a.job.app, cand.job.app)
        xi_new = snap.xi(cand.job.app, a.job.app)
        b, s = fit[0]  # largest sub-batch first
        t_share = t_seq = float("nan")
        case = 0
        if cand.prof is not None and cand.iters is not None and a.usable:
            d = theorem1(a.t_iter, a.rem_iters, cand.iter_time(b, s), cand.iters,
                         xi_run, xi_new, cand.t_excl)
            t_share, t_seq, case = d.t_share, d.t_seq, d.case
        return ShareChoice(True, b, s, t_share, t_share, t_seq, case, xi_run, xi_new, True)

    def _share(self, rnd, job, cand, nfree, norder, nums, actions, reasons):
        need = job.num_gpus
        shareable = blocked = 0
        fitting = []
        for cls in rnd.classes.values():
            if not cls.groups:
                continue
            fit = self._fit(rnd, cand, cls)[0]
            if fit:
                shareable += len(cls.groups)
                fitting.append((cls, fit))
            else:
                blocked += len(cls.groups)
        if shareable >= 1 and shareable + nfree >= need:
            chosen = []
            streams = [_stream(n, cls.groups) for n, (cls, _) in enumerate(fitting)]
            for _, n, gr in heapq.merge(*streams):  # first fit: GPU order
                gr.choice = self._first_fit_choice(rnd, cand, gr, fitting[n][1])
                chosen.append(gr)
                if len(chosen) >= need:
                    break
            return self._start(rnd, job, chosen, nfree, norder, nums, actions, reasons)
        self._wait_reason(job, nfree, shareable, 0, blocked, None, nums, reasons)
        return None


def _stream(n, groups):
    """(position, class number, group) of a class's groups, already in GPU order."""
    for gr in groups:
        yield gr.first, n, gr
