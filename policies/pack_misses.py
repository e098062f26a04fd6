"""Packing misses kept across calls (issue #13, docs/scale.md §2).

At 64x8 a packing host's round (:class:`policies.pack_index.PackRound`) asks
:meth:`~policies.pack_index.PackRound.target` for the head of every waiting class that finds
no free GPUs, and 96 % of those asks find no host (gandiva, the first 40,000 Philly jobs:
384,867 of 400,471).  Each ask brings the class's host lists up to date, works out the
job's worker memory and walks every listed host: over the whole trace that was 41 % of
gandiva's time, for the answer of the last call most of the time.

For **equal packing** (``unequal`` off: gandiva, gavel, lucid; a host is listed only while
every GPU of its allocation holds it alone) a miss of the class (application ``app``,
worker memory ``job_mb``, ``n`` GPUs) is a function of:

* the hosts listed for ``app`` and ``job_mb`` with ``n`` GPUs
  (:meth:`~policies.pack_hosts.HostState.lists_for`; equal packing looks at ``n`` only):
  each is rejected for its alone GPUs, its node memory or §5.1 on its own GPUs, and with
  all its GPUs alone its packing component is itself, so §5.1 reads only its view, its
  GPUs and the job's (the job's id only breaks a tie of J_max between two equal GPU sets,
  with the same verdict either way: :meth:`policies.pack_index.Placement.ok`);
* whether the snapshot holds a GPU with more than two workers or a component that breaks
  §5.1 (``blocked``: then every placement fails).

A host's list entry, alone GPUs and view change only when
:meth:`~policies.pack_hosts.HostState.advance` redoes it (its log of touched hosts).  So a
miss recorded at the round's start (no GPU taken yet this round) holds at a later
generation of the same host state while ``blocked`` is the same and no host touched since
could now be listed for the class: a running host with ``n`` GPUs whose pair with ``app``
passes the threshold (a superset of those that are; it takes in every host listed at the
miss that still runs: a host that left can only take a candidate away).  Within a round
the alone GPUs only get fewer and the §5.1 index stays, so a miss at the round's start is a
miss at any later point of it.  The verdict is then the one
the full ask gives (tests/policies/test_pack_misses.py compares both at every ask).
**Unequal packing** (the ``+gimbal`` hosts) lists a host with ``k >= n`` GPUs while any of
them holds it alone, so a listed host may share GPUs and belong to a component whose other
members can change without it being touched: a miss after walking listed hosts is not kept.
A miss with **no host listed** for the class (no running host with ``n`` or more GPUs whose
pair passes the threshold has an alone GPU a worker of ``job_mb`` fits beside) is kept: no
component is read, and it holds while no host touched since could now be listed, read with
"``n`` or more GPUs" (:meth:`KeptMisses.sync` with ``unequal``).  At 64x8 on the Philly
trace they answer 2.5M of gandiva+gimbal's 3.0M asks; of its walked misses in the first
40,000 jobs, every one (13,147) had a listed host sharing a GPU."""
from __future__ import annotations

from typing import Callable

MAX_ENTRIES = 1024  # classes kept before the memo is cleared


class KeptMisses:
    """Per host state (:class:`~policies.pack_hosts.HostState`, which is rebuilt when the
    tables, nodes or knobs change): class key (application, worker memory, GPUs) ->
    ``blocked`` at the miss, for the misses that still hold at
    generation ``gen``; :meth:`sync` brings them to the host state's generation once per
    round."""

    __slots__ = ("entries", "gen", "hits", "recorded", "dropped")

    def __init__(self):
        self.entries: dict[tuple, bool] = {}
        self.gen = 0
        self.hits = 0  # asks answered from the memo (tests)
        self.recorded = 0
        self.dropped = 0  # misses dropped by the log (tests)

    def sync(self, hs, pp: Callable[[str, str], float], thr: float,
             unequal: bool = False) -> None:
        """Drop the misses a host touched since ``gen`` (``hs.log``) may change: those of
        the classes with its GPU count (``unequal``: at most its GPU count) whose
        application's pair with it (``pp``) passes the threshold ``thr`` while it runs; all
        of them when the log since ``gen`` was dropped."""
        if self.gen == hs.gen:
            return
        entries = self.entries
        if self.gen < hs.log0 or self.gen > hs.gen:
            self.dropped += len(entries)
            entries.clear()
        elif entries:
            views = hs.views
            for touched in hs.log[self.gen - hs.log0:]:
                for t in touched:
                    h = views.get(t)
                    if h is None:
                        continue
                    n, app = h.num_gpus, h.app
                    drop = [key for key in entries if (key[2] <= n if unequal else key[2] == n)
                            and pp(key[0], app) >= thr]
                    for key in drop:
                        del entries[key]
                    self.dropped += len(drop)
                    if not entries:
                        break
        self.gen = hs.gen

    def holds(self, key: tuple, blocked: bool) -> bool:
        """Whether a miss of ``key`` holds (the memo synced to the round's generation)."""
        if self.entries.get(key) is blocked:
            self.hits += 1
            return True
        return False

    def record(self, hs, key: tuple, blocked: bool) -> None:
        """A miss of ``key`` at the start of a round at ``hs``'s generation (the memo synced
        to it)."""
        assert self.gen == hs.gen
        if len(self.entries) >= MAX_ENTRIES:
            self.entries.clear()
        self.entries[key] = blocked
        self.recorded += 1
