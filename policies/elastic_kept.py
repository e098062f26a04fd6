"""The elastic plan's kept jobs, kept across policy calls (issue #13, docs/scale.md §2).

At 300x8 on the Philly trace about 1.2 of ~120 jobs change GPUs per call of an elastic
policy; the others keep theirs, yet :func:`policies.elastic.elastic_plan` looked at each of
them twice per call: once in the reduced placement's pass over every share
(:func:`policies.elastic_reduced.place_reduced`) and once in the plan's pass over the order.

:class:`KeptJobs` remembers the jobs that the last calls *kept*: a running job whose share
was the count it holds on a shape the placement's shortcuts keep
(``place_reduced``'s test), which the reduced placement answered for, and which got no
action (KEEP_RUNNING: its GPUs and its configuration as they were).  At the next call such
a job is kept again, with no pass over it, while

* its view is the same object (the snapshot's job change record names every job whose view
  changed; those leave the set first): the same allocation, the same state;
* its decided share is the same count (the caller drops the others);
* the node tuple and the configuration memo (``Rates.config``'s, a pure function of
  application, global batch and count) are the same objects;

because then ``place_reduced``'s loop would put it among the kept jobs with the same GPUs
and nodes (its shortcut test is a function of the allocation record and the node tuple),
and the plan's loop would find the same GPUs and configuration and add no action.  Whether
the whole rule keeps every kept job is then ``place_reduced``'s argument, made for this call
on the jobs that are not kept; where it gives up the whole rule runs and the set is emptied
(it fills again at the next calls).  Without a usable record (the daemon's snapshots,
hand-built ones) there is no set and every call takes the full path.
tests/policies/test_elastic_kept.py compares every call of whole simulations of the five
elastic policies with the plan made without the set.
"""
from __future__ import annotations

from typing import Optional

from .model import ClusterSnapshot
from .records import job_record


class KeptJobs:
    """The kept jobs: ``share`` (id -> count), ``gpus`` (id -> the GPU tuple the placement
    gives it), ``on`` (id -> its nodes), ``node_count`` (node -> kept jobs on it) and
    ``held`` (the GPUs they hold)."""

    def __init__(self):
        self.clear()

    def clear(self) -> None:
        self._seen = None
        self._ctx: Optional[tuple] = None
        self.empty()

    def empty(self) -> None:
        """Forget the kept jobs (the record read so far stays)."""
        self.share: dict[str, int] = {}
        self.gpus: dict[str, tuple] = {}
        self.on: dict[str, tuple] = {}
        self.node_count: dict[str, int] = {}
        self.held = 0

    def drop(self, jid: str) -> None:
        k = self.share.pop(jid, None)
        if k is None:
            return
        del self.gpus[jid]
        self.held -= k
        count = self.node_count
        for x in self.on.pop(jid):
            c = count[x] - 1
            if c:
                count[x] = c
            else:
                del count[x]

    def add(self, jid: str, k: int, kind: tuple) -> None:
        """Keep ``jid`` at share ``k`` with ``place_reduced``'s shortcut answer ``kind``
        (its GPU tuple ``kind[4]`` on its nodes ``kind[3]``)."""
        self.share[jid] = k
        self.gpus[jid] = kind[4]
        self.on[jid] = kind[3]
        self.held += k
        count = self.node_count
        for x in kind[3]:
            count[x] = count.get(x, 0) + 1

    def update(self, snap: ClusterSnapshot, accum: dict) -> bool:
        """Drop the jobs whose view changed since the last call (the job change record);
        False (and nothing kept) without a usable record, and an empty set for another
        run, node tuple or configuration memo."""
        log = job_record(snap)
        if log is None:
            self.clear()
            return False
        ctx = self._ctx
        if (ctx is not None and ctx[0] is snap.nodes and ctx[1] is accum
                and self._seen is not None and log.extends(self._seen)):
            if self.share:
                for jid in set(log[len(self._seen):]):
                    self.drop(jid)
        else:
            self.empty()
            self._ctx = (snap.nodes, accum)
        self._seen = log
        return True


_KEPT: dict = {}  # (policy name, packing) -> its KeptJobs


def kept_jobs(policy: str, packing: bool, snap: ClusterSnapshot, accum: dict
              ) -> Optional[KeptJobs]:
    """The policy's kept jobs brought up to ``snap`` (``None``: no usable record)."""
    kp = _KEPT.get((policy, packing))
    if kp is None:
        kp = _KEPT[(policy, packing)] = KeptJobs()
    return kp if kp.update(snap, accum) else None
