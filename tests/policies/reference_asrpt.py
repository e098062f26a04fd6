"""Reference copy (test oracle) of A-SRPT's instance Ã1 before the incremental version.

Verbatim: ``ASrpt._fact``, ``ASrpt._history_since`` and ``ASrpt.virtual`` of
policies/a_srpt.py and ``virtual_srpt`` of policies/asrpt_core.py as they were before Ã1 was
made incremental (per-call token check per job, every history record through ``_fact``, the
whole window re-simulated), and ``ASrpt.schedule`` as it was before the waiting order was
kept across calls (commit c1452dc: both lists sorted per call, a reason made for every
waiting and running job).  :class:`RefASrpt` is the package's A-SRPT with these methods,
so its Plans are the reference for tests/policies/test_asrpt_differential.py.
"""
from __future__ import annotations

import bisect
import heapq
import math
from typing import Any, Iterable

from policies.a_srpt import ASrpt
from policies.a_srpt_perfect import ASrptPerfect
from policies.asrpt_core import EPS, Placer, alpha_bounds, prediction, predicted_seconds
from policies.base import exclusive_config, keep_running_reasons
from policies.plan import ReasonCode, StartJob, make_plan, reason


def virtual_srpt(items: Iterable[tuple[Any, float, float]]) -> dict[Any, float]:
    """Completion times of the single-machine preemptive SRPT schedule of
    ``(key, release, processing)`` items (§IV-C instance Ã1).  Ties: smallest remaining,
    then earlier release, then key.  A job with 0 processing completes at its release."""
    its = sorted(items, key=lambda x: (x[1], x[0]))
    done: dict[Any, float] = {}
    heap: list = []
    t, i, n = -math.inf, 0, len(its)
    while i < n or heap:
        if not heap:
            t = max(t, its[i][1])
        while i < n and its[i][1] <= t:
            k, r, p = its[i]
            heapq.heappush(heap, (max(p, 0.0), r, k))
            i += 1
        rem, r, k = heap[0]
        nxt = its[i][1] if i < n else math.inf
        if t + rem <= nxt:
            heapq.heappop(heap)
            t += rem
            done[k] = t
        else:
            heapq.heapreplace(heap, (rem - (nxt - t), r, k))
            t = nxt
    return done


class _RefVirtual:
    def _fact(self, snap, j, G):
        """(α̂min, αmax, ñ, unit, source, p̃) of a job; memoised per job id while the
        predictor object, G and the server size are the same (the inputs do not change)."""
        token = (snap.predictors.get("iterations"), G, snap.max_gpus_per_node, snap.profiles)
        if self._token is None or any(x is not y for x, y in zip(token, self._token)) \
                or token[1:3] != self._token[1:3]:
            self._token, self._facts = token, {}
        hit = self._facts.get(j.id)
        if hit is not None and hit[0] is j:
            return hit[1]
        amin, amax = alpha_bounds(snap, j, self.net)
        val, unit, src = prediction(snap, j, self.perfect)
        fact = (amin, amax, val, unit, src, j.num_gpus / G * predicted_seconds(val, unit, amin))
        if len(self._facts) > 200_000:
            self._facts.clear()
        self._facts[j.id] = (j, fact)
        return fact

    def _history_since(self, history, t0):
        """History records submitted at or after ``t0`` (index by submit time, extended
        incrementally as the simulator appends finished jobs)."""
        idx = self._hidx
        if idx is None or len(history) < idx[1] or (idx[1] and history[idx[1] - 1] is not idx[2]):
            subs = sorted((f.submit_time, i) for i, f in enumerate(history))
        else:
            subs = idx[3]
            for i in range(idx[1], len(history)):
                bisect.insort(subs, (history[i].submit_time, i))
        self._hidx = (None, len(history), history[-1] if history else None, subs)
        k = bisect.bisect_left(subs, (t0, -1))
        return [history[i] for _, i in subs[k:]]

    def virtual(self, snap):
        """(per-job facts, Ã1 completion times) for the active jobs (and recent history)."""
        G = max(snap.total_gpus, 1)
        facts, items = {}, []
        active = list(snap.jobs.values())
        for j in active:
            fact = self._fact(snap, j, G)
            facts[j.id] = fact
            items.append((j.id, j.submit_time, fact[5]))
        if active and snap.history:
            t0 = min(j.submit_time for j in active)
            for f in self._history_since(snap.history, t0):
                if f.id not in facts:
                    items.append((f.id, f.submit_time, self._fact(snap, f, G)[5]))
        return facts, virtual_srpt(items)

    def schedule(self, snap):
        now = snap.now
        facts, done = self.virtual(snap)
        pending = snap.pending()
        key = lambda j: (done[j.id], j.submit_time, j.id)  # noqa: E731
        queue = sorted((j for j in pending if done[j.id] <= now + EPS), key=key)  # line 2
        later = sorted((j for j in pending if done[j.id] > now + EPS), key=key)
        self._delay = {k: v for k, v in self._delay.items() if k in snap.jobs}
        placer = Placer(snap, self.net)  # built when the first job is placed
        nfree = len(snap.free_gpus)
        total = snap.total_gpus
        actions, reasons, order, infeasible = [], {}, [], []
        pos = {j.id: i for i, j in enumerate(queue + later)}

        def nums(j, **extra):
            amin, amax, val, unit, src, p = facts[j.id]
            return dict(predicted=val, alpha_min=amin, alpha_max=amax, virtual_p=p,
                        virtual_done=done[j.id], virtual_pos=pos[j.id], **extra)

        def src_text(j):
            amin, amax, val, unit, src, p = facts[j.id]
            return f"predicted {val:.0f} {unit} ({src})"

        blocked = None
        for j in queue:  # lines 3-25
            if blocked is not None:
                order.append(j.id)
                reasons[j.id] = reason(ReasonCode.WAIT_ORDER, blocked + "; " + src_text(j), **nums(j))
                continue
            if j.num_gpus > total:
                infeasible.append(j.id)
                reasons[j.id] = reason(ReasonCode.INFEASIBLE,
                                       f"asks {j.num_gpus} GPUs, cluster has {total}", **nums(j))
                continue
            if j.num_gpus > nfree:  # line 25
                blocked = f"head of pending_queue {j.id} waits for {j.num_gpus} GPUs"
                order.append(j.id)
                reasons[j.id] = reason(ReasonCode.WAIT_RESOURCES,
                                       f"needs {j.num_gpus} GPUs, {nfree} free; " + src_text(j),
                                       **nums(j, free_gpus=nfree))
                continue
            amin, amax, val, unit, src, p = facts[j.id]
            heavy = amax / amin >= self.comm_heavy  # line 8
            servers, gpus, workers, alpha = placer.place(j, heavy)  # lines 9-10 / 22-23
            why = "non-communication-heavy: fewest-free servers (line 22)"
            if heavy and alpha / amin > self.comm_heavy + EPS:  # line 12 fails
                t0, kappa = self._delay.setdefault(j.id, (now, alpha))  # line 15
                if now > t0 + EPS and alpha < kappa - EPS:  # line 18
                    why = "communication-heavy: placement improved during the delay (line 18)"
                elif now >= t0 + self.tau * p - EPS:  # line 20
                    why = "communication-heavy: delay tau*p over (line 20)"
                else:  # lines 16-17: keep waiting; the loop holds the scheduler
                    blocked = f"communication-heavy head {j.id} delayed for a better placement"
                    order.append(j.id)
                    reasons[j.id] = reason(
                        ReasonCode.WAIT_RESOURCES,
                        f"communication-heavy, alpha/alpha_min {alpha / amin:.2f} > "
                        f"{self.comm_heavy}; delayed until {t0 + self.tau * p:.0f} s; " + src_text(j),
                        **nums(j, alpha=alpha, kappa=kappa, delay_until=t0 + self.tau * p))
                    continue
            elif heavy:
                why = "communication-heavy: most-free servers, alpha within COMM_HEAVY (line 13)"
            placer.take(servers, gpus)
            nfree -= len(gpus)
            self._delay.pop(j.id, None)
            b, s = exclusive_config(snap, j, placer.mem)
            actions.append(StartJob(j.id, gpus, b, s, workers=workers))
            reasons[j.id] = reason(ReasonCode.STARTED, why + "; " + src_text(j),
                                   **nums(j, alpha=alpha, servers=len(servers)))
        for j in later:
            order.append(j.id)
            if j.num_gpus > total:
                infeasible.append(j.id)
                order.pop()
                reasons[j.id] = reason(ReasonCode.INFEASIBLE,
                                       f"asks {j.num_gpus} GPUs, cluster has {total}", **nums(j))
                continue
            reasons[j.id] = reason(ReasonCode.WAIT_ORDER,
                                   f"not yet complete in the virtual SRPT (at {done[j.id]:.0f} s); "
                                   + src_text(j), **nums(j))
        keep_running_reasons(snap, reasons)
        return make_plan(self.name, actions, order, reasons, infeasible)


class RefASrpt(_RefVirtual, ASrpt):
    """A-SRPT with the reference Ã1."""


class RefASrptPerfect(_RefVirtual, ASrptPerfect):
    """A-SRPT-Perfect with the reference Ã1."""
