"""GIMBAL's packing sets kept across calls from the simulator's change records (issue #13:
after the walks were kept, :func:`policies.gimbal_coord.packing_sets` at every call that
followed a change, a pass over every GPU and every job, was a third of ``lucid+gimbal``'s time).

:func:`~policies.gimbal_coord.packing_sets` links the running jobs on each GPU (of
``gpu_jobs``, ids of jobs not running or without an allocation left out); a component of two
or more jobs is a set unless it breaks §5.1.  Only GPUs holding two or more ids can link jobs,
so :class:`KeptSets` keeps those GPUs (``multi``: GPU -> ids), for each job the kept GPUs it
is on (``on``), and each component of two or more jobs with its verdict (a
:class:`~policies.gimbal_coord.PackingSet`, or None when it breaks §5.1).  At a call:

* the GPUs logged since the last call (``snap.gpu_changes``) are read again; the jobs on them
  before and after are *seeds*; so are the jobs with a new view (``snap.job_changes``) that
  are on a kept GPU (a job's running state, allocation and start time are in its view; a job
  on no kept GPU is in no component and cannot link without a GPU change);
* the components holding a seed are dropped, their jobs become seeds, and the components
  through the seeds are found again over the kept GPUs (a component reached that was not
  dropped is dropped and found again whole);
* each new component is judged as ``packing_sets`` judges it: the same tests as
  :func:`~policies.gimbal_coord.packing_violations` (:func:`~policies.gimbal_coord.packing_ok`)
  on the component's GPUs (those of its jobs' allocations: the simulator places a job on
  exactly its allocation's GPUs, so these are the GPUs whose first running id is in the
  component) and the same J_max.

A new view of a job on a kept GPU with the same facts (:func:`_facts`: running or not, its
allocation's GPUs, its start time: all the search and the verdict read of it) and a logged
GPU that holds the same jobs as before (in another order: a job resized in place is taken
off and put back) link nothing new: their jobs are ``touched`` but not seeds, and no
component is found again for them (issue #13: at gavel+gimbal, 10,000 Philly jobs at 64x8,
nearly every update followed such resizes; a job's facts are recorded when its component is
found, and a job whose facts changed since is a seed).

No change that concerns a kept GPU or a job on one: the last answer, reported unchanged
(``same``).  Without usable records (the daemon's snapshots, another run): built from all of
``gpu_jobs``.  The answer is the tuple ``packing_sets`` returns (sorted by J_max id)."""
from __future__ import annotations

from bisect import bisect_left
from typing import Optional

from .gimbal_coord import PackingSet, _jmax, packing_ok
from .model import ClusterSnapshot
from .records import records_usable


class KeptSets:
    """The packing sets of the last call and what they were made from (module doc)."""

    def __init__(self):
        self.logs: Optional[tuple] = None  # (gpu log, job log) of the last call
        self.multi: dict = {}  # GPU -> ids, the GPUs holding two or more ids
        self.on: dict = {}  # job id -> set of its GPUs in ``multi``
        self.comp_of: dict = {}  # job id -> its component (frozenset, two or more jobs)
        self.verdict: dict = {}  # component -> PackingSet or None (breaks §5.1)
        self.sets: tuple = ()
        # the sets (verdicts that are PackingSets) sorted by J_max id, and those ids: kept in
        # step with ``verdict`` (a set is put in or taken out where its J_max sorts), so
        # ``sets`` is read off them instead of sorted again
        self._order: list = []
        self._keys: list = []
        self.facts: dict = {}  # job id in ``on`` -> its facts (_facts) when last looked at
        # the jobs whose components the last update looked at again (None: built anew); a
        # set with none of them has the same member views on GPUs holding the same jobs
        self.touched: Optional[set] = None

    def update(self, snap: ClusterSnapshot) -> tuple[tuple[PackingSet, ...], bool]:
        """(``packing_sets(snap)``, whether it is the last call's answer with nothing it
        depends on changed)."""
        gr, jr = snap.gpu_changes, snap.job_changes
        usable = records_usable(snap)
        logs = self.logs
        if not (usable and logs is not None and gr.log.extends(logs[0])
                and jr.log.extends(logs[1])):
            self._build(snap)
            self.logs = (gr.log, jr.log) if usable else None
            self.touched = None
            return self.sets, False
        gnew, jnew = gr.log[len(logs[0]):], jr.log[len(logs[1]):]
        self.logs = (gr.log, jr.log)
        on = self.on
        changed = {j for j in jnew if j in on}
        if not gnew and not changed:
            self.touched = set()
            return self.sets, True
        multi, gj, jobs, facts = self.multi, snap.gpu_jobs, snap.jobs, self.facts
        # a new view with the same facts links nothing new (module doc): touched, no seed
        seeds = {j for j in changed if _facts(jobs, j) != facts.get(j)}
        touched = changed
        for g in set(gnew):
            ids = gj.get(g, ())
            old = multi.get(g)
            if old is not None and len(ids) == len(old) and set(ids) == set(old):
                multi[g] = ids  # the same jobs (in another order): the same links
                touched.update(ids)
                continue
            if old is not None:
                del multi[g]
                for j in old:
                    s = on[j]
                    s.discard(g)
                    if not s:
                        del on[j]
                        facts.pop(j, None)
                seeds.update(old)
            if len(ids) >= 2:
                multi[g] = ids
                for j in ids:
                    on.setdefault(j, set()).add(g)
                seeds.update(ids)
        if seeds:
            touched |= self._refind(snap, seeds)
            touched |= seeds
        self.touched = touched
        # none touched: the GPUs logged held fewer than two ids before and after, and no job
        # on a kept GPU has a new view: no set, member view or member GPU's count changed
        return self.sets, not touched

    def _build(self, snap: ClusterSnapshot) -> None:
        self.multi = multi = {g: ids for g, ids in snap.gpu_jobs.items() if len(ids) >= 2}
        self.on = on = {}
        for g, ids in multi.items():
            for j in ids:
                on.setdefault(j, set()).add(g)
        self.comp_of, self.verdict, self.facts = {}, {}, {}
        self._order, self._keys = [], []
        self._refind(snap, set(on))

    def set_of(self, job_id: str) -> Optional[PackingSet]:
        """The set ``job_id`` is a member of in the last answer, None if none."""
        c = self.comp_of.get(job_id)
        return None if c is None else self.verdict[c]

    def _drop(self, comp: frozenset, seeds: set) -> None:
        for m in comp:
            del self.comp_of[m]
        ps = self.verdict.pop(comp)
        if ps is not None:
            i = bisect_left(self._keys, ps.jmax)
            del self._keys[i], self._order[i]
        seeds.update(comp)

    def _refind(self, snap: ClusterSnapshot, seeds: set) -> set:
        """Find the components through ``seeds`` again (``seeds`` grows by the members of the
        components dropped for them); returns the members of the kept components a new one
        took in (looked at again as well, though not seeds)."""
        comp_of, verdict, multi, on = self.comp_of, self.verdict, self.multi, self.on
        jobs = snap.jobs
        for j in list(seeds):
            c = comp_of.get(j)
            if c is not None:
                self._drop(c, seeds)

        done: set = set()
        merged: set = set()  # members of kept components that a new one took in
        for s in seeds:
            if s in done or not _running(jobs, s):
                continue
            comp, stack = {s}, [s]
            while stack:
                j = stack.pop()
                for g in on.get(j, ()):
                    for i in multi[g]:
                        if i not in comp and _running(jobs, i):
                            comp.add(i)
                            stack.append(i)
            done |= comp
            if len(comp) < 2:
                continue
            for m in comp:  # a component reached that was kept: it is part of this one now
                c = comp_of.get(m)
                if c is not None:
                    self._drop(c, merged)
            fc = frozenset(comp)
            for m in fc:
                comp_of[m] = fc
            ps = verdict[fc] = _judge(snap, fc)
            if ps is not None:
                i = bisect_left(self._keys, ps.jmax)
                self._keys.insert(i, ps.jmax)
                self._order.insert(i, ps)
        self.sets = tuple(self._order)
        facts = self.facts
        for j in seeds:
            if j in on:
                facts[j] = _facts(jobs, j)
        return merged


def _judge(snap: ClusterSnapshot, comp: frozenset) -> Optional[PackingSet]:
    """``packing_sets``' verdict on one component: its PackingSet, None if it breaks §5.1."""
    jobs, gj = snap.jobs, snap.gpu_jobs
    jg = {j: jobs[j].allocation.gpus for j in comp}
    sub_gj = {}
    for gs in jg.values():
        for g in gs:
            if g not in sub_gj:
                ids = tuple(i for i in gj.get(g, ()) if _running(jobs, i))
                if ids:
                    sub_gj[g] = ids
    if not packing_ok(sub_gj, jg):
        return None
    world = {j: len(g) for j, g in jg.items()}
    since = {j: jobs[j].start_time or 0.0 for j in comp}
    jm = _jmax(comp, world, since)
    return PackingSet(jm, (jm,) + tuple(sorted(comp - {jm})))


def _facts(jobs, i) -> tuple:
    """All that :meth:`KeptSets._refind` and :func:`_judge` read of a job's view: whether it
    counts as running (:func:`_running`), its allocation's GPUs, its start time."""
    job = jobs.get(i)
    if job is None:
        return (False, None, None)
    a = job.allocation
    return (job.running and a is not None, None if a is None else a.gpus, job.start_time)


def _running(jobs, i) -> bool:
    job = jobs.get(i)
    return job is not None and job.running and job.allocation is not None
