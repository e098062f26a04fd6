"""Themis's leftover GPUs handed out from keys kept across calls (issue #13, docs/scale.md §2).

:meth:`policies.themis.Themis.schedule` gives each leftover GPU to the job with the smallest
draw ``d(j, k)`` (a hash of the seed, the job id and its share ``k``; ties: the first in the
leftover list) among the jobs one more GPU helps, from a heap.  A job's draws and whether it
may grow depend on its own share only, so its heap entries are popped in the order of its
*steps*: the step from share ``k0 + t`` to ``k0 + t + 1`` (``k0`` its share after the first
hand-out) is taken when the running maximum ``E_t = max(d(k0), ..., d(k0 + t))`` is the
smallest key left (its entry at ``k0 + t`` reaches the top only after those before it,
each of which was the top, so nothing left is below the largest of them; the heap's
batching, "picked again at once while its next draw is <= e", is this argument).  The keys
never fall along a job, so the heap's pops are the merge of the jobs' step sequences by
``(E, position in the leftover list)``, and the steps taken are the first ``left`` of that
merge.  A job's steps end at its *stop* ``S``: the first share ``k >= k0`` with ``k = 0``,
``k >= cap`` or one more GPU not useful (the heap drops it there).

:class:`KeptLeftovers` keeps the steps ``(E_t, id, t)`` of the jobs of the last call's
leftover list in one sorted list, changed only for jobs that came, went, or whose ``k0`` or
``S`` moved; a call reads its first ``left`` entries.  Where two jobs' steps have the same
key at the cut (the ``left``-th and the next), the order between them is the leftover
list's, not the id's: :meth:`KeptLeftovers.hand_out` then gives ``None`` and the policy runs
its heap (with 8-byte draws, a tie needs a hash collision).  tests/policies/
test_themis_leftover.py checks the shares against the heap at every contended call of whole
simulations and on random cases.
"""
from __future__ import annotations

from bisect import bisect_left, insort
from typing import Callable, Optional


class KeptLeftovers:
    """The leftover steps of the jobs of the last call, sorted (``steps``), and for each job
    its ``(k0, S, keys)``."""

    def __init__(self, draw: Callable[[int, str, int], bytes]):
        self.draw = draw  # policies.themis._drawn (seed, id, share) -> bytes
        self.seed: Optional[int] = None
        self.steps: list = []  # (E, id, t), sorted
        self.of: dict[str, tuple] = {}  # id -> (k0, S, its keys E_0 .. E_{S-k0-1})

    def _drop(self, jid: str) -> None:
        k0, s, keys = self.of.pop(jid)
        steps = self.steps
        for t, e in enumerate(keys):
            del steps[bisect_left(steps, (e, jid, t))]

    def _put(self, jid: str, k0: int, s: int) -> None:
        draw, seed, steps = self.draw, self.seed, self.steps
        keys = []
        e = None
        for t, k in enumerate(range(k0, s)):
            d = draw(seed, jid, k)
            if e is None or d > e:
                e = d
            keys.append(e)
            insort(steps, (e, jid, t))
        self.of[jid] = (k0, s, keys)

    def hand_out(self, seed: int, leftover: list, shares: dict, left: int,
                 stop: Callable) -> Optional[dict[str, int]]:
        """The shares after ``left`` leftover GPUs (``stop(job, k0)``: its stop ``S``), for
        every job of ``leftover``; ``None`` where two jobs' keys tie at the cut."""
        if seed != self.seed:
            self.seed, self.steps, self.of = seed, [], {}
        of = self.of
        now: dict[str, int] = {}
        for j in leftover:
            jid = j.id
            k0 = shares[jid]
            s = stop(j, k0)
            now[jid] = k0
            had = of.get(jid)
            if had is not None:
                if had[0] == k0 and had[1] == s:
                    continue
                self._drop(jid)
            if s > k0:
                self._put(jid, k0, s)
            else:
                of[jid] = (k0, s, ())
        if len(of) != len(now):
            for jid in [q for q in of if q not in now]:
                self._drop(jid)
        steps = self.steps
        n = min(left, len(steps))
        if 0 < n < len(steps) and steps[n - 1][0] == steps[n][0]:
            # the steps with the key at the cut: of one job, they go in step order
            e, jid = steps[n][0], steps[n][1]
            lo, hi = n - 1, n + 1
            while lo >= 0 and steps[lo][0] == e:
                if steps[lo][1] != jid:
                    return None  # (the leftover list's order decides: the heap's)
                lo -= 1
            while hi < len(steps) and steps[hi][0] == e:
                if steps[hi][1] != jid:
                    return None
                hi += 1
        for _, jid, _ in steps[:n]:
            now[jid] += 1
        return now
