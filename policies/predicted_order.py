"""Shared core of seed 003's §V-A 1-d baselines: order waiting jobs by a key computed from
the *predicted* duration ``ñ_i·α̂_i^min`` (:mod:`policies.asrpt_core`), place each with
Heavy-Edge (§V-A: "All baselines adopt the Heavy-Edge algorithm for GPU mapping") on
consolidated servers — the fullest server that holds the whole job, else the servers with
most free GPUs (our choice; the paper does not say which servers) — never pre-empt.

* strict (SPJF, SPWF): the first job that does not fit blocks every job behind it
  (§V-B 2-a: "If the shortest job does not fit, it will not schedule longer jobs");
* work-conserving (WCS-*, [46]): every job that fits starts, in order.

The thin modules :mod:`policies.spjf`, :mod:`policies.spwf`, :mod:`policies.wcs_duration`,
:mod:`policies.wcs_workload` and :mod:`policies.wcs_subtime` only choose the key and the mode.
"""
from __future__ import annotations

from .asrpt_core import Placer, alpha_bounds, prediction, predicted_seconds
from .base import Policy, exclusive_config, keep_running_reasons
from .pipeline import Network
from .plan import ReasonCode, StartJob, make_plan, reason


class PredictedOrder(Policy):
    """Base of the §V-A baselines; subclasses set ``work_conserving`` and :meth:`key`."""

    pipeline_models = True  # Table I jobs timed by eq. 4-7 (asrpt_core)

    work_conserving = False

    def __init__(self, intra_gbytes: float = 300.0, inter_gbits: float = 10.0):
        self.net = Network.from_units(intra_gbytes, inter_gbits)

    def key(self, job, duration: float) -> tuple:  # pragma: no cover
        raise NotImplementedError

    def schedule(self, snap):
        facts = {}
        for j in snap.pending():
            amin, _ = alpha_bounds(snap, j, self.net)
            val, unit, src = prediction(snap, j, False)
            facts[j.id] = (predicted_seconds(val, unit, amin), val, unit, src)
        order_jobs = sorted(snap.pending(), key=lambda j: self.key(j, facts[j.id][0]) + (j.submit_time, j.id))
        placer = Placer(snap, self.net)
        nfree, total = len(snap.free_gpus), snap.total_gpus
        actions, reasons, order, infeasible = [], {}, [], []
        blocked = False
        for pos, j in enumerate(order_jobs):
            dur, val, unit, src = facts[j.id]
            nums = dict(predicted=val, predicted_s=dur, pos=pos)
            text = f"predicted {val:.0f} {unit} ({src})"
            if j.num_gpus > total:
                infeasible.append(j.id)
                reasons[j.id] = reason(ReasonCode.INFEASIBLE,
                                       f"asks {j.num_gpus} GPUs, cluster has {total}", **nums)
                continue
            if blocked or j.num_gpus > nfree:
                order.append(j.id)
                code = ReasonCode.WAIT_ORDER if blocked else ReasonCode.WAIT_RESOURCES
                reasons[j.id] = reason(code, (f"a job ahead is waiting; " if blocked else
                                              f"needs {j.num_gpus} GPUs, {nfree} free; ") + text,
                                       **nums)
                blocked = blocked or not self.work_conserving
                continue
            servers, gpus, workers, alpha = placer.place(j, "best-fit")
            placer.take(servers, gpus)
            nfree -= len(gpus)
            b, s = exclusive_config(snap, j, placer.mem)
            actions.append(StartJob(j.id, gpus, b, s, workers=workers))
            reasons[j.id] = reason(ReasonCode.STARTED, f"{j.num_gpus} GPUs free; " + text,
                                   alpha=alpha, **nums)
        keep_running_reasons(snap, reasons)
        return make_plan(self.name, actions, order, reasons, infeasible)
