"""Verbatim copy of ``policies.predicted_order.PredictedOrder.schedule`` before the waiting
order was kept across calls (issue #13, docs/scale.md §2): every waiting job's ``α̂^min`` and
prediction evaluated and every waiting job sorted and given its own reason at every call.
Used only by tests/policies/test_predicted_order_differential.py."""
from __future__ import annotations

from policies.asrpt_core import Placer, alpha_bounds, prediction, predicted_seconds
from policies.base import exclusive_config, keep_running_reasons
from policies.plan import ReasonCode, StartJob, make_plan, reason


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
            reasons[j.id] = reason(code, ("a job ahead is waiting; " if blocked else
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
