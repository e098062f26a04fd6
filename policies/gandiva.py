"""Gandiva-style packing host (seed 004 §7.1's deadline baseline, after Gandiva, OSDI'18),
with and without GIMBAL.

* Order: first come, first served, extended to deadlines as §7.1 says ("we extend it to
  support the deadline-aware feature"; the extension is ours): jobs with a deadline go by
  earliest deadline, then the rest by submit time.
* Greedy packing: when no GPUs are free, the job packs beside the running job with the
  highest profiled combined progress 1/ξ_a + 1/ξ_b, provided it is at least 1.0 (packing
  must not lose throughput).  The runtime profile (*measured* speed: ``iter_rate`` x
  exclusive iteration time) enters the score with weight 10^-3 (:meth:`Gandiva.score_from`):
  it only separates hosts whose pair progress lies within 10^-3, the slower host first.
* Introspection: every call, a packed pair whose measured combined progress is below the
  packing threshold is undone: the job packed later is pre-empted back to the queue; a job that was pre-empted
  never packs again (it waits for free GPUs), so nothing oscillates.
* ``gandiva+gimbal``: threshold 0.9, unequal packing under §5.1, coordination with the deadline
  objective (eq. 3/4) every 30 s.
"""
from __future__ import annotations

from typing import Optional

from .model import ClusterSnapshot, Job
from .records import gpu_record, job_record
from .packing_host import PackingHost
from .base import keep_running_segment
from .plan import Plan, PreemptJob, ReasonCode, make_plan, reason
from .registry import register


def measured_progress(snap: ClusterSnapshot, job: Job) -> Optional[float]:
    """Runtime profile: current speed relative to the job alone (1.0 = unslowed); ``None``
    while no speed has been measured (on the cluster: before the job's first report)."""
    if not job.running or job.iter_rate <= 0 or job.app not in snap.profiles:
        return None
    return job.iter_rate * snap.exclusive_iter_time(job)


@register("gandiva")
class Gandiva(PackingHost):
    """Gandiva-style: FCFS with deadlines first, greedy packing by pair progress, unpacks bad pairs."""

    preemptive = True
    objective = "deadline"
    threshold = 1.0
    gimbal_threshold = 0.9

    def order_key(self, snap: ClusterSnapshot):
        return lambda j: (j.deadline is None, j.deadline if j.deadline is not None else 0.0,
                          j.submit_time, j.id)

    def score_from(self, progress, snap, host):
        # pair progress first; the measured speed (runtime profile) separates near-ties only,
        # the slower (under-used) host first
        return progress - 1e-3 * self._measured(snap, host)

    def _measured(self, snap: ClusterSnapshot, host: Job) -> float:
        """:func:`measured_progress` (1.0 while unmeasured), memoised per job view (a
        function of the view, the profile table and the node tuple)."""
        memo = self.__dict__.get("_speeds")
        if memo is None or memo[0] is not snap.profiles or memo[1] is not snap.nodes:
            memo = self._speeds = (snap.profiles, snap.nodes, {})
        seen = memo[2]
        hit = seen.get(host.id)
        if hit is not None and hit[0] is host:
            return hit[1]
        m = measured_progress(snap, host)
        m = 1.0 if m is None else m
        if len(seen) > 65536:
            seen.clear()
        seen[host.id] = (host, m)
        return m

    def may_pack(self, job):
        return not job.preemptions  # a job unpacked by introspection waits for free GPUs

    def _slow_pair(self, snap: ClusterSnapshot, a: Job, b: Job) -> Optional[str]:
        """The job introspection unpacks from the packed pair ``a``, ``b`` (the later one),
        or ``None``."""
        if not (a.running and b.running) or a.restore_left > 0 or b.restore_left > 0:
            return None
        thr = self.gimbal_threshold if self.gimbal else self.threshold
        ma, mb = measured_progress(snap, a), measured_progress(snap, b)
        if ma is not None and mb is not None and ma + mb < thr - 1e-9:
            return max((a, b), key=lambda j: (j.start_time or 0.0, j.id)).id
        return None

    def _packed_pairs(self, snap: ClusterSnapshot):
        """The distinct pairs of job ids that share a GPU (the ``gpu_jobs`` values of length
        2), each with its number of GPUs, and the pairs that may have come or gone since the
        last call (``None``: built anew).  Kept across calls from the simulator's GPU change
        record (issue #13: the scan of every GPU at every call was a fifth of Gandiva's
        64x8 time): only the GPUs logged since the last call are looked at; built from
        ``gpu_jobs`` without a usable record (the daemon's snapshots)."""
        gj, glog = snap.gpu_jobs, gpu_record(snap)
        kept = self.__dict__.get("_packed")
        if glog is not None and kept is not None and glog.extends(kept[0]):
            _, on, count = kept
            touched = set()
            for g in set(glog[len(kept[0]):]):
                old = on.pop(g, None)
                if old is not None:
                    touched.add(old)
                    if count[old] == 1:
                        del count[old]
                    else:
                        count[old] -= 1
                ids = gj.get(g, ())
                if len(ids) == 2:
                    on[g] = ids
                    count[ids] = count.get(ids, 0) + 1
                    touched.add(ids)
        else:
            on = {g: ids for g, ids in gj.items() if len(ids) == 2}
            count = {}
            for ids in on.values():
                count[ids] = count.get(ids, 0) + 1
            touched = None
        self._packed = (glog, on, count) if glog is not None else None
        return count, touched

    def _slow_pairs(self, snap: ClusterSnapshot, pairs: dict, touched) -> set:
        """The jobs introspection unpacks: of each packed pair, :meth:`_slow_pair`.  A pair's
        verdict is a function of the two views, the profile table, the node tuple and the
        threshold only, so it is memoised while both jobs keep their views; with the
        simulator's records (``touched``: the pairs that may have come or gone since the
        last call, the job record: the jobs with new views) only those pairs and the pairs
        of the jobs with new views are looked at, and the slow ones are kept, instead of
        every packed pair at every call."""
        ctx = (snap.profiles, snap.nodes, self.gimbal_threshold if self.gimbal
               else self.threshold)
        memo = self.__dict__.get("_pairs")  # (ctx, pair -> (a, b, verdict), slow, job log)
        jobs, jlog = snap.jobs, job_record(snap)
        if (memo is None or memo[0][0] is not ctx[0] or memo[0][1] is not ctx[1]
                or memo[0][2] != ctx[2]):
            memo = (ctx, {}, {}, None)
        seen, slow, last = memo[1], memo[2], memo[3]
        if (touched is not None and jlog is not None and last is not None
                and jlog.extends(last) and len(jlog) - len(last) < 4 * len(pairs)):
            # (with more new views than packed pairs the pass over every pair is cheaper)
            on = self._packed[1]
            look = touched
            for jid in set(jlog[len(last):]):
                j = jobs.get(jid)
                if j is not None and j.allocation is not None:
                    for g in j.allocation.gpus:
                        ids = on.get(g)
                        if ids is not None:
                            look.add(ids)
            for ids in look:
                if ids not in pairs:
                    seen.pop(ids, None)
                    slow.pop(ids, None)
                    continue
                a, b = jobs[ids[0]], jobs[ids[1]]
                hit = seen.get(ids)
                if hit is None or hit[0] is not a or hit[1] is not b:
                    hit = seen[ids] = (a, b, self._slow_pair(snap, a, b))
                if hit[2] is not None:
                    slow[ids] = hit[2]
                else:
                    slow.pop(ids, None)
        else:  # every pair (its verdict memoised while both jobs keep their views)
            fresh, slow = {}, {}
            for ids in pairs:
                a, b = jobs[ids[0]], jobs[ids[1]]
                hit = seen.get(ids)
                if hit is None or hit[0] is not a or hit[1] is not b:
                    hit = (a, b, self._slow_pair(snap, a, b))
                fresh[ids] = hit
                if hit[2] is not None:
                    slow[ids] = hit[2]
            seen = fresh
        self._pairs = (ctx, seen, slow, jlog if self._packed is not None else None)
        return set(slow.values())

    def schedule(self, snap: ClusterSnapshot) -> Plan:
        pairs, touched = self._packed_pairs(snap)
        # no two jobs share a GPU: nothing to introspect (the kept verdicts still follow)
        unpack = self._slow_pairs(snap, pairs, touched)
        if not unpack:
            return super().schedule(snap)
        # an introspection call only unpacks; the next call places jobs on what it freed
        reasons = {jid: reason(ReasonCode.PREEMPTED, "introspection: the packed pair runs slower "
                               "than its two jobs one after the other") for jid in unpack}
        order = self.order_ids(snap)
        # the waiting jobs and the other running ones: shared reasons, resolved when read
        segments = [(order, reason(ReasonCode.WAIT_ORDER, "this call unpacks a slow pair first")),
                    keep_running_segment(snap)]
        return make_plan(self.name, [PreemptJob(j) for j in sorted(unpack)], order, reasons, [],
                         segments)


@register("gandiva+gimbal")
class GandivaGimbal(Gandiva):
    """Gandiva-style with GIMBAL: threshold 0.9, unequal packing, deadline coordination every 30 s."""

    def __init__(self, gimbal: bool = True, **kw):
        super().__init__(gimbal=gimbal, **kw)
