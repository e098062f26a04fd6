"""Waiting orders kept across policy calls by a key that does not change while a job
waits (issue #13, docs/scale.md §2).

SJF ranks waiting jobs by (exclusive length, submit time, id) (seed 000 §VI), SRTF and
SRSF by (remaining exclusive time [x GPUs], submit time, id) (seed 001 §5), Tiresias by
(queue of its attained service, submit time, id) (Gu et al., NSDI'19; without the
promote knob).  A waiting job makes no progress, so its key is fixed while it waits
(for a given throughput profile table and node size).  Sorting every waiting job per
call by a Python key cost 16,000 key evaluations per call on the Philly trace at 64x8.

:class:`KeptOrder` keeps the waiting jobs sorted by such a key across calls and brings
the order up to date from the snapshot's change record (:attr:`WaitingQueue.changes`:
the ids of the jobs that entered or left the waiting order, or got a new view in it,
since the order began): O(changes) key evaluations and binary-search insertions per
call.  The order is a pure function of the snapshot — the one a fresh sort of
``snap.pending()`` gives — under the change record's contract (every change of the
waiting set is recorded); without a record (the daemon's snapshots, hand-built ones), a
record of another run, an older snapshot than the last one, another profile table or
node tuple, or counts that disagree with the snapshot's queue, it is rebuilt by that
fresh sort (or the caller takes its old path).

:func:`schedule_preemptive_kept` is :func:`policies.base.schedule_preemptive` over such
an order: it re-ranks only the running jobs (their keys change with time), merges them
with the kept waiting order and stops walking once nothing more fits; the Plan is the
same (tests/policies/test_queue_differential.py against verbatim copies of the old
code)."""
from __future__ import annotations

import sys
from bisect import bisect_left
from itertools import accumulate
from math import isfinite
from operator import attrgetter, itemgetter, ne
from typing import Callable, Optional

from .base import free_gpus_of, keep_running_segment, start_admitted
from .model import ClusterSnapshot, Frozen, Job, Joined, SUBMIT_ORDER, WaitingQueue
from .plan import Plan, PreemptJob, ReasonCode, make_plan, reason
from .quiet_calls import QuietCalls, quiet_calls_of
from .records import queue_record
from .running_keys import Horizon, Rekey, RunningKeys, running_keys_of

_FIRST = itemgetter(0)
_GPUS = attrgetter("num_gpus")
_ID = attrgetter("id")
_RUNNING = attrgetter("running")


class KeptOrder:
    """The waiting jobs of the last snapshot sorted by a static key (``keys``, ``jobs``
    and ``ids`` aligned), the GPUs they ask in all (``asked``) and per count."""

    def __init__(self):
        self.clear()

    def clear(self) -> None:
        self._seen: Optional[Frozen] = None  # the change record applied so far
        self._ctx: Optional[tuple] = None  # (profiles, nodes, context) the keys were made with
        self.keys: list = []
        self.jobs: list[Job] = []
        self.ids: list[str] = []
        self.key_of: dict[str, tuple] = {}
        self.gpus: dict[int, int] = {}  # GPU count -> waiting jobs asking it
        self.asked = 0

    # ------------------------------------------------------------------ upkeep
    def update(self, snap: ClusterSnapshot, key: Callable[[Job], tuple],
               context: tuple = ()) -> Optional["KeptOrder"]:
        """Bring the order up to the waiting jobs of ``snap`` (``key``: the policy's key,
        fixed while a job waits; ``context``: the policy's own parameters the key reads).
        ``None`` when the snapshot carries no kept queue with a change record (the caller
        sorts as before) or a key is NaN (a NaN key has no place in a sorted order)."""
        q, log = snap.queue, queue_record(snap)
        if log is None:
            self.clear()
            return None
        ctx = self._ctx
        same = (ctx is not None and ctx[0] is snap.profiles and ctx[1] is snap.nodes
                and ctx[2] == context and self._seen is not None and log.extends(self._seen))
        ok = False
        if same:
            changed = dict.fromkeys(log[len(self._seen):])
            ok = len(changed) <= len(q.ids) and self._apply(snap.jobs, changed, key)
        if ok:  # cheap cross-checks against the snapshot's own queue
            ok = len(self.ids) == len(q.ids) and max(self.gpus, default=0) == q.max_gpus
        if not ok and not self._rebuild(q.jobs, key):
            self.clear()
            return None
        self._seen, self._ctx = log, (snap.profiles, snap.nodes, context)
        return self

    def _own(self) -> None:
        """Copy the lists handed out as views before changing them if a view is still
        held (a plan's order or reasons), so that view never changes."""
        # the attribute and getrefcount's argument: no view holds the list
        if sys.getrefcount(self.jobs) > 2 or sys.getrefcount(self.ids) > 2 \
                or sys.getrefcount(self.keys) > 2:
            self.jobs, self.ids, self.keys = list(self.jobs), list(self.ids), list(self.keys)

    def _apply(self, jobs, changed, key) -> bool:
        self._own()
        keys, kjobs, kids, key_of, gpus = self.keys, self.jobs, self.ids, self.key_of, self.gpus
        for jid in changed:
            old = key_of.pop(jid, None)
            if old is not None:
                i = bisect_left(keys, old)
                if i == len(keys) or keys[i] != old:
                    return False  # not where it was put: rebuild
                g = kjobs[i].num_gpus
                del keys[i], kjobs[i], kids[i]
                self.asked -= g
                if gpus[g] == 1:
                    del gpus[g]
                else:
                    gpus[g] -= 1
            view = jobs.get(jid)
            if view is not None and view.waiting:
                k = key(view)
                if k[0] != k[0]:
                    return False
                i = bisect_left(keys, k)
                keys.insert(i, k)
                kjobs.insert(i, view)
                kids.insert(i, jid)
                key_of[jid] = k
                self.asked += view.num_gpus
                gpus[view.num_gpus] = gpus.get(view.num_gpus, 0) + 1
        return True

    def _rebuild(self, waiting, key) -> bool:
        """The fresh sort of the waiting jobs (as the policies' old code sorts them)."""
        pairs = sorted(((key(j), j) for j in waiting), key=_FIRST)
        if any(k[0] != k[0] for k, _ in pairs):
            return False
        self.keys = [k for k, _ in pairs]
        self.jobs = [j for _, j in pairs]
        self.ids = [j.id for j in self.jobs]
        self.key_of = dict(zip(self.ids, self.keys))
        self.gpus = {}
        for j in self.jobs:
            self.gpus[j.num_gpus] = self.gpus.get(j.num_gpus, 0) + 1
        self.asked = sum(j.num_gpus for j in self.jobs)
        return True

    def rekey(self, snap: ClusterSnapshot, ids, key: Callable[[Job], tuple]) -> bool:
        """Key the waiting jobs of ``ids`` again after :meth:`update` (for a key that
        changes while a job waits, e.g. A-SRPT's Ã1 completion time: the caller names the
        jobs whose key changed); ``False`` when the order could not be kept (cleared)."""
        if ids and not self._apply(snap.jobs, ids, key) and not self._rebuild(snap.queue.jobs, key):
            self.clear()
            return False
        return True

    def queue(self, snap: ClusterSnapshot) -> WaitingQueue:
        """The order as a :class:`WaitingQueue` of views (for
        :func:`policies.base.schedule_nonpreemptive`'s blocked tail)."""
        return WaitingQueue(Frozen(self.jobs), Frozen(self.ids), max(self.gpus, default=0),
                            snap.jobs)


def schedule_preemptive_kept(snap: ClusterSnapshot, policy: str,
                             priority: Callable[[Job], tuple], numbers: Callable[[Job], dict],
                             min_run_s: float, kept: KeptOrder,
                             runkeys: Optional[RunningKeys] = None,
                             horizon: Optional[Horizon] = None,
                             context: tuple = (), rekey: Optional[Rekey] = None,
                             quiet: Optional[QuietCalls] = None) -> Optional[Plan]:
    """:func:`policies.base.schedule_preemptive`'s Plan, with the waiting jobs taken from
    ``kept`` (sorted by ``priority``), or ``None`` where the old code should answer: every
    waiting job fits in the free GPUs (the old code then ranks only the waiting ones, at
    most as many as GPUs are free), a job asks more than the cluster (the infeasible list
    needs the whole walk), or the running jobs cannot be told from ``gpu_jobs``.

    The old code sorts every active job and admits greedily (a job that fits in the GPUs
    left is admitted, one that does not is skipped); here only the running jobs are sorted,
    merged with the kept order, and the walk stops once the GPUs left are fewer than any
    job asks: nothing after that point is admitted, so the waiting jobs from there on are
    the Plan's order as they stand in ``kept`` (a view, no per-job work).

    ``runkeys`` and ``horizon`` (:mod:`policies.running_keys`): the running jobs are found
    from the last call's and ranked from cached keys; those certainly ranked before the
    first waiting job are admitted without a key (only when the running jobs' GPUs fit in
    the cluster all together, as they do in the simulator: then all of them are admitted
    by the merge, in any order).  ``rekey``: the key of a running view as a function of
    ``now`` (:func:`policies.running_keys.remaining_time_rekey`; with a falling horizon).

    ``quiet`` (:mod:`policies.quiet_calls`; only without a minimum run time): a call at
    which nothing changed since the last one but that call's own Plan is answered with
    the Plan that starts and pre-empts nothing, without ranking any job."""
    total = snap.total_gpus
    if kept.asked <= len(snap.free_gpus) or max(kept.gpus, default=0) > total:
        if quiet is not None:
            quiet.clear()
        return None
    if quiet is not None:
        if min_run_s <= 0 and quiet.answer(snap, context, len(kept.ids), kept.key_of,
                                           priority, horizon or _exact_now(snap)):
            return _plan(snap, policy, [], {}, (), kept, 0, numbers)
        quiet.clear()  # made again below when this call's Plan is made
    jobs = snap.jobs
    first = kept.keys[0]
    found = None
    # a second threshold (the second waiting key): running jobs whose cached bound lies
    # between the two are deferred without a key (see ``prefix`` below)
    deferred: list = []
    theta = kept.keys[1] if len(kept.keys) > 1 and min_run_s <= 0 else None
    if runkeys is not None and horizon is not None:
        found = runkeys.collect(snap, len(kept.ids), first, priority, horizon, context, rekey,
                                theta, deferred)
    sure = rjobs = rkeys = None
    if found is not None:
        running, sure, rkeys, rjobs, until = found
    elif runkeys is not None and (running := runkeys.running(snap, len(kept.ids))) is not None:
        pass
    elif len(kept.ids) < len(snap.gpu_jobs):  # few waiting: scan the job map
        running = [j for j in jobs.values() if j.running]
    else:  # the jobs on GPUs (the simulator's gpu_jobs): cost by GPUs in use, not waiting
        rids = {j for ids in snap.gpu_jobs.values() for j in ids}
        if not rids <= jobs.keys():
            return None
        running = [jobs[i] for i in rids]
        if not all(map(_RUNNING, running)):
            return None
    if found is None:
        deferred = []  # (what ``collect`` put there before it gave up)
    # with the kept (waiting) jobs, these are every job: they are the running ones
    if len(running) + len(kept.ids) != len(jobs):
        return None
    rgpus = list(map(_GPUS, running))  # one pass: the largest, the sum and the smallest
    if running and max(rgpus) > total:
        if runkeys is not None:
            runkeys.remember(snap, running)
        return None
    held = sum(rgpus)
    keyed = (runkeys is not None and horizon is not None and held <= total
             and isfinite(snap.now))
    if keyed:
        if sure is None:
            sure, rkeys, rjobs, until = runkeys.split(snap, running, first, priority, horizon,
                                                      context, rekey)
    else:  # every running job ranked by its key (the sure ones from ``collect`` too)
        sure, rjobs, until = [], running, -float("inf")
        rkeys = list(map(priority, running))
        deferred = []  # ranked with the others
    # The first waiting job and every running job ranked before ``theta`` are all admitted
    # when the running jobs certainly ranked at or after ``theta`` hold at least the GPUs
    # the first waiting job asks beyond the free ones: every item before ``theta`` then
    # finds, at its turn, at least total - (held - after) - (the first job's GPUs, if it is
    # not the item) >= its GPUs.  Those after ``theta`` are the ranked ones with a key
    # not below it (the sure and the deferred ones are below).
    # Symmetrically, the first waiting job is skipped and every running job before
    # ``theta`` admitted when the GPUs left after the sure ones are fewer than it asks: no
    # waiting job comes before it, every running job before it is a sure one or a
    # deferred one ranked below ``first``, so at its turn at most those GPUs are left;
    # the running jobs before ``theta`` then all fit (no waiting job admitted, all running
    # jobs fit together).  The walk reaches it (its loop goes on while a job fits) when a
    # ranked job (its key is not below ``first``) or the free GPUs leave at least the
    # fewest GPUs any job asks.  Otherwise the deferred ones are ranked by their exact
    # keys too, as before.
    prefix = skip = False
    if deferred:
        block = _block(total, held, kept, rkeys, rjobs, rgpus, deferred, theta)
        if block == "prefix":
            prefix = True
        elif block == "skip":
            skip = True
        else:
            rkeys, rjobs = list(rkeys), list(rjobs)
            runkeys.exact(deferred, snap.now, priority, horizon, rekey, rkeys, rjobs)
            deferred = []
    if runkeys is not None:
        runkeys.remember(snap, running, sure, rjobs + deferred if deferred else rjobs, first,
                         until)
    firsts = list(map(_FIRST, rkeys))
    if any(map(ne, firsts, firsts)):  # a NaN key (NaN != NaN; C-level, no Python step)
        return None
    # the ranked jobs sorted by key (keys are unique: they end in the id), as aligned lists
    order = sorted(range(len(rkeys)), key=rkeys.__getitem__)
    skeys = list(map(rkeys.__getitem__, order))
    sjobs = list(map(rjobs.__getitem__, order))
    reasons: dict = {}
    admitted: set = set()
    capacity = total
    if min_run_s > 0:
        now = snap.now
        for j in running:
            if j.run_start is not None and now - j.run_start < min_run_s:
                admitted.add(j.id)
                capacity -= j.num_gpus
                reasons[j.id] = reason(
                    ReasonCode.KEEP_RUNNING,
                    f"within its minimum run time of {min_run_s:.0f} s: not pre-empted yet",
                    ran_s=now - j.run_start, **numbers(j))
    # the sure ones: ranked before every waiting job, and every running job fits (admitted;
    # not in ``admitted``, which only the ranked ones and the leased ones are looked up in)
    if admitted:
        capacity -= sum(j.num_gpus for j in sure if j.id not in admitted)
    elif sure:  # every running job is a sure one or a ranked one (``rjobs``), never both
        capacity -= held - sum(map(_GPUS, rjobs))
    smallest = min(min(kept.gpus, default=total + 1), min(rgpus, default=total + 1))
    wkeys, wjobs = kept.keys, kept.jobs
    nw, nr = len(wkeys), len(skeys)
    # cum[i]: the GPUs of the first i ranked jobs; without leased jobs a run of ranked jobs
    # before the next waiting one that fits in ``capacity`` as a whole is admitted in one
    # step (each of them fits at its turn, so the walk would admit every one)
    cum = [0, *accumulate(map(_GPUS, sjobs))] if nr else [0]
    whole = not admitted
    w = r = 0
    starts: list[Job] = []
    skipped: list[str] = []
    notin: list[Job] = []  # ranked jobs the walk reached and did not admit
    if prefix:  # the first waiting job starts, every running job before ``theta`` runs
        starts.append(wjobs[0])
        w, r = 1, bisect_left(skeys, theta)
        capacity = total - kept.jobs[0].num_gpus - (held - (cum[nr] - cum[r]))
    elif skip:  # the first waiting job is skipped, every running job before ``theta`` runs
        skipped.append(wjobs[0].id)
        w, r = 1, bisect_left(skeys, theta)
        capacity = total - (held - (cum[nr] - cum[r]))
    while capacity >= smallest and (w < nw or r < nr):
        if r < nr and (w == nw or skeys[r] < wkeys[w]):
            if whole:
                e = nr if w == nw else bisect_left(skeys, wkeys[w], r + 1)
                if cum[e] - cum[r] <= capacity:
                    capacity -= cum[e] - cum[r]
                    r = e
                    continue
            job = sjobs[r]
            r += 1
            if job.id in admitted:
                continue
            if job.num_gpus <= capacity:
                admitted.add(job.id)
                capacity -= job.num_gpus
            else:
                notin.append(job)
        else:
            job = wjobs[w]
            w += 1
            if job.num_gpus <= capacity:
                capacity -= job.num_gpus
                starts.append(job)
            else:
                skipped.append(job.id)
    actions: list = []
    free = free_gpus_of(snap)
    # not admitted: the ones the walk passed over and every one it did not reach
    out = notin + [j for j in sjobs[r:] if j.id not in admitted]
    for job in sorted(out, key=SUBMIT_ORDER):  # snap.running()'s order
        actions.append(PreemptJob(job.id))
        reasons[job.id] = reason(ReasonCode.PREEMPTED, "higher-priority jobs need its GPUs",
                                 **numbers(job))
        free.give(job.allocation.gpus)
    for job in starts:
        start_admitted(snap, free, job, actions, reasons, numbers)
    if quiet is not None and min_run_s <= 0:
        key_of = kept.key_of
        started = {j.id: key_of[j.id] for j in starts}
        preempted = {}
        if out:
            key = dict(zip(map(_ID, rjobs), rkeys))
            preempted = {j.id: key[j.id] for j in out}
        steady = snap.now  # no horizon known: the keys at this ``now`` only
        if keyed:
            steady = _steady(runkeys.cache, rjobs, until, snap.now)
        quiet.note(snap, context, running, started, preempted, steady)
    return _plan(snap, policy, actions, reasons, skipped, kept, w, numbers)


def _block(total: int, held: int, kept: KeptOrder, rkeys: list, rjobs: list, rgpus: list,
           deferred: list, theta: tuple) -> Optional[str]:
    """With running jobs deferred below ``theta`` (the second waiting key): "prefix" when
    the first waiting job and every running job before ``theta`` are admitted, "skip"
    when the first waiting job is skipped and every running job before ``theta``
    admitted, ``None`` when the deferred ones need their exact keys (see
    :func:`schedule_preemptive_kept`)."""
    g1 = kept.jobs[0].num_gpus
    if sum(j.num_gpus for k, j in zip(rkeys, rjobs) if not k < theta) >= g1 - (total - held):
        return "prefix"
    if (total - (held - sum(map(_GPUS, deferred)) - sum(map(_GPUS, rjobs))) < g1
            and (rjobs or total - held >= min(min(kept.gpus), min(rgpus)))):
        return "skip"
    return None


def _plan(snap: ClusterSnapshot, policy: str, actions: list, reasons: dict, skipped,
          kept: KeptOrder, w: int, numbers: Callable[[Job], dict]) -> Plan:
    """The Plan of :func:`schedule_preemptive_kept`: the waiting order is the jobs
    ``skipped`` by the walk, then the kept order from ``w`` on, all of them with the
    shared WAIT_RESOURCES reason (numbers made on first use), the running jobs without an
    explicit reason the shared KEEP_RUNNING one."""
    jobs = snap.jobs
    out_order = Joined(tuple(skipped), Frozen(kept.ids, w))
    waiting_why = (out_order, lambda jid: reason(
        ReasonCode.WAIT_RESOURCES, "higher-priority jobs hold the GPUs", **numbers(jobs[jid])))
    return make_plan(policy, actions, out_order, reasons, [],
                     [waiting_why, keep_running_segment(snap)])


def _exact_now(snap: ClusterSnapshot) -> Horizon:
    """Without a horizon: a key is known at this ``now`` only."""
    now = snap.now
    return lambda job, key: (now, False)


def _steady(cache: dict, ranked: list, until: float, now: float):
    """For :class:`policies.quiet_calls.QuietCalls`: a callable giving the time up to which
    no running job's key rises: ``until`` for the ones admitted without a key (the
    horizon :class:`RunningKeys` gives them), and for the ranked ones ``ranked`` the
    horizon of their cache entries (never, for a falling key), made at this call."""
    def steady() -> float:
        t = until
        for j in ranked:
            e = cache.get(j.id)
            if e is None or e[0] is not j:
                return now
            if not e[4] and e[3] < t:
                t = e[3]
        return t

    return steady


def kept_order_of(pol) -> KeptOrder:
    """The policy instance's kept order (``pol._kept_order``), made on first use."""
    kept = pol.__dict__.get("_kept_order")
    if kept is None:
        kept = pol._kept_order = KeptOrder()
    return kept


def preemptive_with_kept_order(pol, snap: ClusterSnapshot, priority: Callable[[Job], tuple],
                               numbers: Callable[[Job], dict], min_run_s: float,
                               static: bool, context: tuple,
                               horizon: Optional[Horizon] = None,
                               rekey: Optional[Rekey] = None) -> Plan:
    """A pre-emptive policy's Plan: :func:`schedule_preemptive_kept` over the policy's
    kept order (``pol._kept_order``, made on first use) when its key is ``static`` for
    waiting jobs and the snapshot allows, else :func:`policies.base.schedule_preemptive`.
    ``horizon``: how long a running job's key stays exact or a bound
    (:mod:`policies.running_keys`; ``None``: every running job's key is evaluated);
    ``rekey``: a running view's key as a function of ``now`` (falling horizons only)."""
    from .base import schedule_preemptive

    if static:
        kept = kept_order_of(pol)
        quiet = quiet_calls_of(pol)
        if kept.update(snap, priority, context) is not None:
            plan = schedule_preemptive_kept(snap, pol.name, priority, numbers, min_run_s, kept,
                                            running_keys_of(pol), horizon, context, rekey,
                                            quiet)
            if plan is not None:
                return plan
        quiet.clear()
    return schedule_preemptive(snap, pol.name, priority, numbers, min_run_s)
