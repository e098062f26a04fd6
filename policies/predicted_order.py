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

from collections import Counter
from itertools import islice
from operator import attrgetter

from .asrpt_core import Placer, alpha_bounds, prediction, predicted_seconds
from .base import Policy, exclusive_config, keep_running_segment
from .kept_order import kept_order_of
from .model import Frozen, Joined
from .pipeline import Network
from .plan import Plan, ReasonCode, StartJob, make_plan, reason

_GPUS = attrgetter("num_gpus")


class PredictedOrder(Policy):
    """Base of the §V-A baselines; subclasses set ``work_conserving`` and :meth:`key`."""

    pipeline_models = True  # Table I jobs timed by eq. 4-7 (asrpt_core)
    # (base.Policy) keys of the waiting jobs from their views and the predictors, no time
    tick_invariant = True

    work_conserving = False

    def __init__(self, intra_gbytes: float = 300.0, inter_gbits: float = 10.0):
        self.net = Network.from_units(intra_gbytes, inter_gbits)

    def key(self, job, duration: float) -> tuple:  # pragma: no cover
        raise NotImplementedError

    def schedule(self, snap):
        kept = self._kept(snap)
        if kept is not None:  # the simulator's snapshots: the order kept across calls
            return self._walk(snap, kept.jobs, kept.ids, dict(kept.gpus), self._fact)
        # no change record (the daemon's snapshots, hand-built ones) or a NaN key: sort
        facts = {j.id: _facts(snap, j, self.net) for j in snap.pending()}
        order_jobs = sorted(snap.pending(),
                            key=lambda j: self.key(j, facts[j.id][0]) + (j.submit_time, j.id))
        return self._walk(snap, order_jobs, [j.id for j in order_jobs],
                          dict(Counter(map(_GPUS, order_jobs))),
                          lambda snap, j: facts[j.id])

    # ------------------------------------------------------------------ kept order
    def _fact(self, snap, j) -> tuple:
        """:func:`_facts` of a waiting job, memoised by its view (a pure function of the
        view, the predictors, the profile table, the node tuple and ``self.net``;
        :meth:`_kept` empties the memo when any of the last three changes)."""
        hit = self._memo.get(j.id)
        if hit is not None and hit[0] is j:
            return hit[1]
        f = _facts(snap, j, self.net)
        self._memo[j.id] = (j, f)
        return f

    def _kept(self, snap):
        """The waiting order kept across calls (:mod:`policies.kept_order`), keyed by
        ``self.key(job, predicted seconds) + (submit time, id)`` — fixed while a job waits
        under the same predictors (a refit hands over new ones: then the order is sorted
        afresh, as before).  ``None``: the caller sorts."""
        ctx = (snap.predictors, snap.profiles, snap.nodes)
        seen = self.__dict__.get("_ctx")
        if seen is None or any(a is not b for a, b in zip(seen, ctx)):
            self._ctx, self._memo = ctx, {}
            self._version = self.__dict__.get("_version", 0) + 1
        if len(self._memo) > 2 * len(snap.waiting_ids or ()) + 4096:  # drop started jobs
            waiting = set(snap.waiting_ids or ())
            self._memo = {k: v for k, v in self._memo.items() if k in waiting}
        fact, key = self._fact, self.key
        return kept_order_of(self).update(
            snap, lambda j: key(j, fact(snap, j)[0]) + (j.submit_time, j.id),
            (self._version, self.net))

    # ------------------------------------------------------------------ the walk
    def _walk(self, snap, order_jobs, ids: list, left: dict, fact) -> Plan:
        """Start the jobs of ``order_jobs`` (``ids`` the list of their ids, ``left`` GPU count ->
        jobs asking it) that fit, in order: strict or work-conserving.  Once nothing behind
        a point can start — strict: a job ahead waits; work-conserving: fewer GPUs free than
        any job behind asks — and no job behind is infeasible, the rest share one lazy reason
        segment (each job's reason made from the snapshot when first asked); the jobs passed over
        before that point get theirs lazily too (work-conserving: a run of jobs that do not fit
        is passed over as one segment), so a call costs the jobs it starts plus a cheap step
        per job it passes, not a reason per waiting job."""
        placer = Placer(snap, self.net)
        nfree, total = len(snap.free_gpus), snap.total_gpus
        actions, reasons, order, infeasible = [], {}, [], []
        waits: dict = {}  # a job passed over: id -> (position, blocked, GPUs free then)
        shared: list = [(waits, self._wait_reason(snap, waits))]
        blocked, wc = False, self.work_conserving
        pos, n = 0, len(order_jobs)
        while pos < n:
            lo, hi = min(left), max(left)
            if (blocked or (wc and nfree < lo)) and hi <= total:
                tail = Frozen(ids, pos)  # a view: the kept order copies its list if held
                shared.append((tail, self._wait_reason(snap, None, tail, pos, blocked, nfree)))
                if not order:
                    order = tail
                elif len(order) == 1 and order[0] == ids[pos - 1]:
                    order = Frozen(ids, pos - 1)
                else:
                    order = Joined(tuple(order), tail)
                break
            j = order_jobs[pos]
            g = j.num_gpus
            if wc and g > nfree and hi <= total:
                # work-conserving, nothing infeasible: pass over the run of jobs that do not
                # fit up to the next one that does (one does: nfree >= lo), as one segment
                a = pos
                while order_jobs[pos].num_gpus > nfree:
                    pos += 1
                run = Frozen(ids, a, pos)
                shared.append((run, self._wait_reason(snap, None, run, a, False, nfree)))
                order.extend(run)
                for k, c in Counter(map(_GPUS, islice(order_jobs, a, pos))).items():
                    if left[k] == c:
                        del left[k]
                    else:
                        left[k] -= c
                continue
            pos += 1
            if left[g] == 1:
                del left[g]
            else:
                left[g] -= 1
            if g > total:
                dur, val, unit, src = fact(snap, j)
                infeasible.append(j.id)
                reasons[j.id] = reason(ReasonCode.INFEASIBLE,
                                       f"asks {j.num_gpus} GPUs, cluster has {total}",
                                       predicted=val, predicted_s=dur, pos=pos - 1)
            elif blocked or g > nfree:
                order.append(j.id)
                waits[j.id] = (pos - 1, blocked, nfree)  # its reason is made when asked
                blocked = blocked or not wc
            else:
                dur, val, unit, src = fact(snap, j)
                servers, gpus, workers, alpha = placer.place(j, "best-fit")
                placer.take(servers, gpus)
                nfree -= len(gpus)
                b, s = exclusive_config(snap, j, placer.mem)
                actions.append(StartJob(j.id, gpus, b, s, workers=workers))
                reasons[j.id] = reason(ReasonCode.STARTED, f"{j.num_gpus} GPUs free; "
                                       f"predicted {val:.0f} {unit} ({src})",
                                       alpha=alpha, predicted=val, predicted_s=dur, pos=pos - 1)
            if not left:
                break
        shared.append(keep_running_segment(snap))
        return make_plan(self.name, actions, order, reasons, infeasible, shared)

    def _wait_reason(self, snap, waits, tail=(), start: int = 0, blocked: bool = False,
                     nfree: int = 0):
        """``job id -> Reason`` of a waiting job the walk passed over, made from ``snap``
        when a consumer first asks: from ``waits`` (id -> (position, blocked, GPUs free
        then)), or every job of ``tail`` from position ``start`` with ``blocked`` and
        ``nfree``.  The reason the literal walk gives (its facts recomputed, same values)."""
        net, where = self.net, {}

        def why(jid):
            if waits is not None:
                pos, blk, free = waits[jid]
            else:
                if not where:
                    where.update((k, start + i) for i, k in enumerate(tail))
                pos, blk, free = where[jid], blocked, nfree
            j = snap.jobs[jid]
            dur, val, unit, src = _facts(snap, j, net)
            text = f"predicted {val:.0f} {unit} ({src})"
            if blk:
                return reason(ReasonCode.WAIT_ORDER, "a job ahead is waiting; " + text,
                              predicted=val, predicted_s=dur, pos=pos)
            return reason(ReasonCode.WAIT_RESOURCES,
                          f"needs {j.num_gpus} GPUs, {free} free; " + text,
                          predicted=val, predicted_s=dur, pos=pos)
        return why


def _facts(snap, j, net) -> tuple:
    """(predicted seconds ``ñ_i·α̂_i^min``, predicted value, unit, source) of a waiting job."""
    amin, _ = alpha_bounds(snap, j, net)
    val, unit, src = prediction(snap, j, False)
    return predicted_seconds(val, unit, amin), val, unit, src
