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

from operator import itemgetter

from .registry import register
from .share_index import Candidate, Round
from .sharing import ShareChoice, _theorem1_numbers, share_choice, theorem1
from .sjf_bsbf import SjfBsbf

_HEAD = itemgetter(0)  # a group's position (unique)


@register("sjf-ffs")
class SjfFfs(SjfBsbf):
    """SJF-FFS: SJF order; share GPUs holding one job first-fit, no benefit test."""

    per_gpu_groups = True  # first fit works GPU by GPU: one candidate per GPU of G_OJ
    marks_signatures = False  # no benefit test, no signature that surely cannot share
    # (base.Policy) unlike SJF-BSBF, whose Theorem 1 reads the running jobs' remaining time
    # X at ``now`` and which keeps marks across calls: the SJF order's keys are fixed while
    # a job waits, first fit takes the groups in GPU order (X is 0 for every per-GPU
    # group, policies/share_index.py) and only memory decides; Theorem 1's numbers enter
    # the reasons only
    tick_invariant = True

    @staticmethod
    def _first_fit_choice(rnd: Round, cand: Candidate, gr, fit) -> ShareChoice:
        """The largest sub-batch that fits beside the GPU's job; Theorem 1's numbers
        are reported, never used."""
        a = gr.occ
        xi_run, xi_new = rnd.xi_pair(a.job.app, cand.job.app)  # snap.xi both ways, memoised
        b, s = fit[0]  # largest sub-batch first
        t_share = t_seq = float("nan")
        case = 0
        if cand.prof is not None and cand.iters is not None and a.usable:
            t_a, i_a, t_b, i_b = a.t_iter, a.rem_iters, cand.iter_time(b, s), cand.iters
            if min(t_a, t_b, xi_run, xi_new) <= 0 or i_a < 0 or i_b < 0:
                theorem1(t_a, i_a, t_b, i_b, xi_run, xi_new, cand.t_excl)  # raises its error
            # theorem1's numbers without its result object
            t_share, t_seq, case = _theorem1_numbers(t_a, i_a, t_b, i_b, xi_run, xi_new,
                                                     cand.t_excl)
        return share_choice(True, b, s, t_share, t_share, t_seq, case, xi_run, xi_new, True)

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
            # first fit: the ``need`` groups first in GPU order over the fitting classes,
            # each class's groups already in that order, so they are among each class's
            # first ``need`` (positions are unique: one group per GPU)
            heads = [(gr.first, n, gr) for n, (cls, _) in enumerate(fitting)
                     for gr in cls.groups[:need]]
            heads.sort(key=_HEAD)
            chosen = []
            for _, n, gr in heads[:need]:
                gr.choice = self._first_fit_choice(rnd, cand, gr, fitting[n][1])
                chosen.append(gr)
            return self._start(rnd, job, chosen, nfree, norder, nums, actions, reasons)
        self._wait_reason(job, nfree, shareable, 0, blocked, None, nums, reasons)
        return None

