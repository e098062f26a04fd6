"""The packing hosts' waiting queue kept in the host's order and by *class* (issue #13).

A packing host (``policies/packing_host.py``) walks every waiting job in its order: a job
starts on free GPUs when it asks at most as many as are free (:meth:`FreeGpus.pick` then
always answers), else the round looks for a host to pack it beside
(:meth:`policies.pack_index.PackRound.target`).  Within one call the free GPUs and the
round's alone GPUs only shrink, and the answer depends on the waiting job only through its
**class** ``(num_gpus, app, worker memory, may_pack)``: the host lists are per application
and worker memory, the GPU-count tests and the consolidated pick (``None`` exactly when
fewer GPUs than asked remain) per count, and §5.1's check of a placement on a host's alone
GPUs depends on the host and the count only (the new job is the set's J_max only when it
takes all of the host's GPUs, and then both ways pass).  So once a job of a class neither
fits in the free GPUs nor finds a host, every later job of its class waits too.

With the queue kept per class, sorted by the host's key, a call merges the classes' heads
in that key order and drops a class at its first waiting job: it visits the started jobs
plus at most one job per class, instead of every waiting job (16,000 at once on the Philly
trace at 64x8).  The rest wait, their reasons given lazily by position (the free-GPU count
they would have been told only changes where a job started on free GPUs).

The queue is brought up to date across calls from the simulator's change record
(:attr:`WaitingQueue.changes`, as :mod:`policies.kept_order` does for SJF), and rebuilt by a
fresh sort without one (the daemon's snapshots), for another run, profile table, node tuple
or memory table, or when a count disagrees with the snapshot's queue."""
from __future__ import annotations

import sys
from bisect import bisect_left
from typing import Callable, Optional

from .base import exclusive_config
from .model import ClusterSnapshot, Frozen, Job
from .records import queue_record


def worker_mb(snap: ClusterSnapshot, job: Job) -> float:
    """GPU memory of one worker of ``job`` run alone (its exclusive sub-batch), 0 without a
    memory model: what a packing host's memory test reads of the waiting job."""
    b, _ = exclusive_config(snap, job)
    mem = snap.memory.get(job.app)
    return mem.mem_mb(b) if mem else 0.0


def _has_nan(key: tuple) -> bool:
    return any(x != x for x in key)


class PackQueue:
    """Waiting jobs sorted by a static key (``keys`` and ``ids`` aligned) and per class
    (``classes``: class -> (keys, jobs), each sorted)."""

    def __init__(self):
        self.clear()

    def clear(self) -> None:
        self._seen: Optional[Frozen] = None
        self._ctx: Optional[tuple] = None
        self.keys: list = []
        self.ids: list[str] = []
        self.key_of: dict[str, tuple] = {}
        self.class_of: dict[str, tuple] = {}
        self.classes: dict[tuple, tuple[list, list]] = {}
        self.rebuilds = 0  # how often the queue was sorted afresh (tests)

    def update(self, snap: ClusterSnapshot, key: Callable[[Job], tuple],
               klass: Callable[[Job], tuple]) -> bool:
        """Bring the queue up to the waiting jobs of ``snap``; False when a key holds a NaN
        (no place in a sorted order: the caller walks the literal way)."""
        q, log = snap.queue, queue_record(snap)
        ctx = self._ctx
        ok = False
        if (log is not None and self._seen is not None and ctx is not None
                and ctx[0] is snap.profiles and ctx[1] is snap.nodes and ctx[2] is snap.memory
                and log.extends(self._seen)):
            changed = dict.fromkeys(log[len(self._seen):])
            ok = (len(changed) <= len(q.ids) + len(self.ids)
                  and self._apply(snap.jobs, changed, key, klass)
                  and len(self.ids) == len(q.ids))
        if not ok and not self._rebuild(snap.pending(), key, klass):
            self.clear()
            return False
        self._seen, self._ctx = log, (snap.profiles, snap.nodes, snap.memory)
        return True

    def _own(self) -> None:
        """Copy ``ids`` before changing it while a view of it is held (a plan's order or
        reason segments), so that view never changes."""
        if sys.getrefcount(self.ids) > 2:  # the attribute and getrefcount's argument
            self.ids = list(self.ids)

    def _apply(self, jobs, changed, key, klass) -> bool:
        self._own()
        keys, ids, key_of, class_of, classes = (self.keys, self.ids, self.key_of,
                                                self.class_of, self.classes)
        for jid in changed:
            old = key_of.pop(jid, None)
            if old is not None:
                i = bisect_left(keys, old)
                if i == len(keys) or keys[i] != old:
                    return False
                del keys[i], ids[i]
                c = class_of.pop(jid)
                ck, cj = classes[c]
                i = bisect_left(ck, old)
                if i == len(ck) or ck[i] != old:
                    return False
                del ck[i], cj[i]
                if not ck:
                    del classes[c]
            view = jobs.get(jid)
            if view is not None and view.waiting:
                k = key(view)
                if _has_nan(k):
                    return False
                i = bisect_left(keys, k)
                keys.insert(i, k)
                ids.insert(i, jid)
                key_of[jid] = k
                c = class_of[jid] = klass(view)
                ck, cj = classes.setdefault(c, ([], []))
                i = bisect_left(ck, k)
                ck.insert(i, k)
                cj.insert(i, view)
        return True

    def _rebuild(self, waiting, key, klass) -> bool:
        self.rebuilds += 1
        pairs = sorted(((key(j), j) for j in waiting), key=lambda e: e[0])
        if any(_has_nan(k) for k, _ in pairs):
            return False
        self.keys = [k for k, _ in pairs]
        self.ids = [j.id for _, j in pairs]
        self.key_of = dict(zip(self.ids, self.keys))
        self.class_of = {}
        self.classes = {}
        for k, j in pairs:
            c = self.class_of[j.id] = klass(j)
            ck, cj = self.classes.setdefault(c, ([], []))
            ck.append(k)
            cj.append(j)
        return True


def pack_queue_of(pol) -> PackQueue:
    """The policy instance's kept queue (``pol._pack_queue``), made on first use."""
    pq = pol.__dict__.get("_pack_queue")
    if pq is None:
        pq = pol._pack_queue = PackQueue()
    return pq
