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
* each new component is judged as ``packing_sets`` judges it: the same
  :func:`~policies.gimbal_coord.packing_violations` on the component's GPUs (those of its
  jobs' allocations: the simulator places a job on exactly its allocation's GPUs, so these
  are the GPUs whose first running id is in the component) and the same J_max.

No change that concerns a kept GPU or a job on one: the last answer, reported unchanged
(``same``).  Without usable records (the daemon's snapshots, another run): built from all of
``gpu_jobs``.  The answer is the tuple ``packing_sets`` returns (sorted by J_max id)."""
from __future__ import annotations

from typing import Optional

from .gimbal_coord import PackingSet, _jmax, packing_violations
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
        seeds = {j for j in jnew if j in on}
        if not gnew and not seeds:
            self.touched = set()
            return self.sets, True
        multi, gj = self.multi, snap.gpu_jobs
        for g in set(gnew):
            old = multi.pop(g, None)
            if old is not None:
                for j in old:
                    s = on[j]
                    s.discard(g)
                    if not s:
                        del on[j]
                seeds.update(old)
            ids = gj.get(g, ())
            if len(ids) >= 2:
                multi[g] = ids
                for j in ids:
                    on.setdefault(j, set()).add(g)
                seeds.update(ids)
        self._refind(snap, seeds)
        self.touched = seeds
        return self.sets, False

    def _build(self, snap: ClusterSnapshot) -> None:
        self.multi = multi = {g: ids for g, ids in snap.gpu_jobs.items() if len(ids) >= 2}
        self.on = on = {}
        for g, ids in multi.items():
            for j in ids:
                on.setdefault(j, set()).add(g)
        self.comp_of, self.verdict = {}, {}
        self._refind(snap, set(on))

    def _drop(self, comp: frozenset, seeds: set) -> None:
        for m in comp:
            del self.comp_of[m]
        del self.verdict[comp]
        seeds.update(comp)

    def _refind(self, snap: ClusterSnapshot, seeds: set) -> None:
        comp_of, verdict, multi, on = self.comp_of, self.verdict, self.multi, self.on
        jobs = snap.jobs
        for j in list(seeds):
            c = comp_of.get(j)
            if c is not None:
                self._drop(c, seeds)

        done: set = set()
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
                    self._drop(c, set())
            fc = frozenset(comp)
            for m in fc:
                comp_of[m] = fc
            verdict[fc] = _judge(snap, fc)
        self.sets = tuple(sorted((v for v in verdict.values() if v is not None),
                                 key=lambda s: s.jmax))


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
    if packing_violations(sub_gj, jg):
        return None
    world = {j: len(g) for j, g in jg.items()}
    since = {j: jobs[j].start_time or 0.0 for j in comp}
    jm = _jmax(comp, world, since)
    return PackingSet(jm, (jm,) + tuple(sorted(comp - {jm})))


def _running(jobs, i) -> bool:
    job = jobs.get(i)
    return job is not None and job.running and job.allocation is not None
