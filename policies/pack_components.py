"""The packing components of §5.1 kept across calls from the simulator's GPU change record
(issue #13: at 64x8 rebuilding them for every packing round was a third of lucid's time).

:class:`policies.pack_index.Placement` judges a placement on a host's alone GPUs by the
snapshot's *packing components* (jobs joined by GPUs they share, seed 004 §5.1: a packing
set has one J_max whose GPUs hold every other member's) and each component's verdict (it
breaks §5.1 or not).  Both are functions of ``gpu_jobs`` and the members' allocations, and a
GPU that did not change hands keeps its workers, so between two snapshots only the
components that hold a job found on a changed GPU (before or after the change), or a job
with a new view, can differ.  :meth:`Components.advance` removes those components and
rebuilds the part of the cluster they and the changed GPUs' jobs cover; the rest is taken
over as it is.  From an empty state with every occupied GPU changed it is the full build."""
from __future__ import annotations

from typing import Callable, Iterable

from .model import ClusterSnapshot

MEMO_MAX = 65536  # verdicts memoised per member views before the memo is cleared


class Components:
    """Packing components of one snapshot (``root``: job -> its component's key,
    ``members``: key -> member ids, ``bad``: keys of the components that break §5.1,
    ``nover``: GPUs holding more than two workers), kept in place by :meth:`advance`."""

    def __init__(self):
        self.shared: dict = {}  # GPU -> its job ids, GPUs with two or more workers
        self.on: dict[str, set] = {}  # job -> its GPUs in ``shared``
        self.root: dict[str, str] = {}
        self.members: dict[str, list[str]] = {}
        self.bad: set[str] = set()
        self.gpus: dict[str, tuple] = {}  # member -> its allocation's GPUs at its verdict
        self.held: dict = {}  # GPU -> the members it is one of the ``gpus`` of
        self.nover = 0
        self.rebuilt = 0  # jobs whose component was rebuilt by the last advance (tests)

    def advance(self, snap: ClusterSnapshot, changed: Iterable, fresh: Iterable[str],
                memo: dict, set_ok: Callable[[list, None, tuple], bool]) -> bool:
        """Bring the components to ``snap``: ``changed`` holds every GPU whose workers may
        differ from the last state's snapshot (every occupied GPU from an empty state),
        ``fresh`` the jobs that may have a new view.  ``set_ok(members, None, ())``:
        §5.1 inside a component of ``snap``.  False when the state is found inconsistent
        (then it must be dropped)."""
        gj, jobs = snap.gpu_jobs, snap.jobs
        shared, on, root, members, held = (self.shared, self.on, self.root, self.members,
                                           self.held)
        seeds: set[str] = set()
        for g in changed:
            ids = gj.get(g, ())
            seeds.update(ids)
            m = held.get(g)
            if m:
                seeds.update(m)
            old = shared.pop(g, None)
            if old is not None:  # its workers were members holding ``g``: seeded above
                self.nover -= len(old) > 2
                for x in old:
                    s = on[x]
                    s.discard(g)
                    if not s:
                        del on[x]
            if len(ids) >= 2:
                shared[g] = ids
                self.nover += len(ids) > 2
                for x in ids:
                    on.setdefault(x, set()).add(g)
        for x in fresh:
            if x in root:
                seeds.add(x)
        redo: set[str] = set()
        for x in seeds:
            r = root.get(x)
            if r is None:
                redo.add(x)
            elif r in members:
                redo.update(members.pop(r))
                self.bad.discard(r)
        for x in redo:
            root.pop(x, None)
            for g in self.gpus.pop(x, ()):
                s = held[g]
                s.discard(x)
                if not s:
                    del held[g]
        self.rebuilt = len(redo)
        for x in redo:
            if x in root or x not in on:
                continue
            comp = [x]
            root[x] = x
            i = 0
            while i < len(comp):
                for g in on[comp[i]]:
                    for y in shared[g]:
                        r = root.get(y)
                        if r is None:
                            root[y] = x
                            comp.append(y)
                        elif r != x:  # a component left standing reaches a rebuilt one
                            return False
                i += 1
            members[x] = comp
            for y in comp:
                a = jobs[y].allocation
                gs = self.gpus[y] = a.gpus if a is not None else ()
                for g in gs:
                    held.setdefault(g, set()).add(y)
            key = tuple(sorted(comp))
            views = tuple(jobs[j] for j in key)
            hit = memo.get(key)
            if hit is None or any(a is not b for a, b in zip(hit[0], views)):
                if len(memo) > MEMO_MAX:
                    memo.clear()
                hit = memo[key] = (views, set_ok(comp, None, ()))
            if not hit[1]:
                self.bad.add(x)
        return True
