"""Reference copy (test oracle) of A-SRPT's instance Ã1 before the incremental version.

Verbatim: ``ASrpt._fact``, ``ASrpt._history_since`` and ``ASrpt.virtual`` of
policies/a_srpt.py and ``virtual_srpt`` of policies/asrpt_core.py as they were before Ã1 was
made incremental (per-call token check per job, every history record through ``_fact``, the
whole window re-simulated).  :class:`RefASrpt` is the package's A-SRPT with these methods,
so its Plans are the reference for tests/policies/test_asrpt_differential.py.
"""
from __future__ import annotations

import bisect
import heapq
import math
from typing import Any, Iterable

from policies.a_srpt import ASrpt
from policies.a_srpt_perfect import ASrptPerfect
from policies.asrpt_core import alpha_bounds, prediction, predicted_seconds


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


class RefASrpt(_RefVirtual, ASrpt):
    """A-SRPT with the reference Ã1."""


class RefASrptPerfect(_RefVirtual, ASrptPerfect):
    """A-SRPT-Perfect with the reference Ã1."""
