"""Isolation's round (issue #13, docs/scale.md §2): the Plan of
``gavel_rounds.run_round`` over isolation's shares, computed without its per-job Python.

On the Philly trace at 64x8 a round holds a few hundred jobs and pre-empts and starts
about two hundred of them (Gavel's priority ``X / received`` turns isolation into processor
sharing): the reference walked every job several times per call, built a Reason object
per waiting and per started or pre-empted job and an allocation mapping per job.  What is
done here instead, each step giving what the reference gives:

* shares per GPU count, not per job: isolation's ``X[j]`` depends only on ``n_j`` (and
  the demand of the call), so a count's mapping, its total, its types by decreasing share
  and its reasons are made once per count and call;
* priority keys ``(-X/got, submit, id)`` built in one pass with the reference's
  arithmetic (``got = executed / age``, ``executed`` as ``ClusterSnapshot.executed_time``
  adds it up), sorted once; ids are unique, so the order is the reference's whatever
  order the jobs come in;
* the pick walk stops once no type has room for the smallest GPU count in the system
  (every later job would be passed over: caps only go down);
* ``apply_decisions``' passes (kept / pre-empted running jobs in (submit time, id) order,
  starts in priority order on the free GPUs of their type, picked as ``FreeGpus.pick``
  then ``take`` pick them, the best fit on one node in one step) are the reference's,
  walking the decided jobs instead of every job;
* reasons that do not depend on the job are shared immutable objects: a pre-empted job's
  (two texts), a waiting job's, and a started / kept job's per (count, type, code);
  ``PreemptJob`` per job id and ``exclusive_config`` per (app, batch, count) are memoised
  (immutable results, pure functions of what the memo is keyed by); a StartJob is built
  as its attribute dict (:func:`policies.plan.start_job`).

What it does not change: the simulator's work per start and pre-emption (about 4.5M of
each over the whole trace at 64x8), which is most of that run's time.

Plans are compared with the reference at every call of simulator runs and on random
rounds in tests/policies/test_isolation_differential.py."""
from __future__ import annotations

from bisect import insort
from math import inf
from operator import attrgetter
from typing import Optional

from .base import FreeGpus, exclusive_steps, keep_running_reasons, min_gpu_mem
from .model import ClusterSnapshot, Gpu, Job, JobState, SUBMIT_ORDER
from .plan import PreemptJob, ReasonCode, make_plan, reason, start_job
from .typed_rounds import (TYPES_MEMO, all_of_type, node_memo, free_of_type, start_on,
                           type_capacity)

_GPUS = attrgetter("num_gpus")
_RUN = JobState.RUNNING
_KEEP = ReasonCode.KEEP_RUNNING


class _Pool(FreeGpus):
    """:class:`FreeGpus` with :meth:`pick_take`: ``pick`` then ``take`` in one step when one
    node holds the job (the best fit), the same GPUs and the same index afterwards."""

    def pick_take(self, n: int):
        if n > self.total:
            return None
        buckets = self.buckets
        for c in range(n, self.top + 1):  # = the smallest non-empty bucket >= n
            b = buckets.get(c)
            if b:
                x = b[0][1]
                have = sorted(self.by_node[x])
                gpus = tuple(have[:n])
                # take(gpus): the node's GPUs less the first n of them (all distinct)
                rest = tuple(have[n:]) if len(set(have)) == len(have) else None
                if rest is None:
                    break
                k = b[0]
                del b[0]  # = bisect_left(b, k): k is the smallest item
                if rest:
                    insort(buckets.setdefault(len(rest), []), k)
                    self.by_node[x] = rest
                else:
                    del self.by_node[x]
                self.total -= n
                return gpus
        gpus = self.pick(n)
        if gpus is not None:
            self.take(gpus)
        return gpus


_PREEMPT_NOT_CHOSEN = reason(ReasonCode.PREEMPTED, "not chosen for this round")
_PREEMPT_REALLOC = reason(ReasonCode.PREEMPTED, "re-allocated at this round")


class RoundMemo:
    """What an :class:`~policies.isolation.Isolation` keeps across calls: immutable
    results of pure functions, keyed by what they depend on."""

    def __init__(self):
        self.preempt: dict[str, PreemptJob] = {}  # job id -> PreemptJob(job id)
        self.config: dict[tuple, tuple] = {}  # (app, batch, GPUs) -> (sub_batch, accum)
        self.config_ctx: Optional[tuple] = None  # (profiles, memory, nodes) of ``config``
        self.wait = {}  # label -> the shared WAIT_RESOURCES reason

    def preempt_job(self, jid: str) -> PreemptJob:
        p = self.preempt.get(jid)
        if p is None:
            if len(self.preempt) > 65536:
                self.preempt.clear()
            p = self.preempt[jid] = PreemptJob(jid)
        return p

    def steps(self, snap: ClusterSnapshot, job: Job, n: int) -> tuple[int, int]:
        """``exclusive_config(snap, job, num_gpus=n)``, memoised per (app, global batch,
        n) for the profile table, memory table and node tuple it was computed with."""
        ctx = self.config_ctx
        if ctx is None or ctx[0] is not snap.profiles or ctx[1] is not snap.memory \
                or ctx[2] is not snap.nodes:
            self.config.clear()
            self.config_ctx = (snap.profiles, snap.memory, snap.nodes)
        key = (job.app, job.global_batch, n)
        hit = self.config.get(key)
        if hit is None:
            local = -(-job.global_batch // max(n or job.num_gpus, 1))
            mem_limit = min_gpu_mem(snap.nodes) if snap.nodes else None
            hit = self.config[key] = exclusive_steps(local, snap.profiles.get(job.app),
                                                     snap.memory.get(job.app), mem_limit)
        return hit


class _Pick:
    __slots__ = ("gpu_type", "ngpu", "batch")

    def __init__(self, t, n, b):
        self.gpu_type, self.ngpu, self.batch = t, n, b


def isolation_round(snap: ClusterSnapshot, name: str, memo: RoundMemo,
                    label: str = "isolation"):
    """The Plan ``run_round(snap, name, jobs, alloc, label)`` returns for isolation's
    ``alloc`` (see :mod:`policies.isolation`)."""
    types = type_capacity(snap)
    jobs = list(snap.jobs.values())
    demand = sum(map(_GPUS, jobs)) or 1
    # per GPU count: its mapping (as Isolation.schedule builds it) and total share
    xs_of: dict[int, dict] = {}
    x_of: dict[int, float] = {}
    for c in set(map(_GPUS, jobs)):
        xs = {t: v[0] / demand for t, v in types.items() if c <= v[0]}
        tot = sum(xs.values())
        if tot > 1.0:
            xs = {t: x / tot for t, x in xs.items()}
        xs_of[c] = xs
        x_of[c] = sum(xs.values())

    now = snap.now
    # Gavel's priority: (-x/got, submit, id); got <= 0 -> -inf; no share -> +inf
    keyed = []
    append = keyed.append
    running = []
    for j in jobs:
        x = x_of[j.num_gpus]
        run = j.state is _RUN  # Job.running
        if run:
            running.append(j)
        if x > 1e-9:
            age = now - j.submit_time
            if run:
                e = j.executed_time + (now - j.as_of)
            else:
                e = j.executed_time
            got = e / age if age > 0 else 0.0
            k = -inf if got <= 0 else -(x / got)
        else:
            k = inf
        append((k, j.submit_time, j.id, j))
    keyed.sort()

    cap = {t: v[0] for t, v in types.items()}
    smallest = min(x_of) if x_of else 0
    room = max(cap.values(), default=0) >= smallest
    decided: dict[str, _Pick] = {}
    job_of: dict[str, Job] = {}
    # per count: the types it may run on, by decreasing share (then name), share > 1e-9
    choices = {c: [t for t in sorted(xs, key=lambda t: (-xs[t], t)) if xs[t] > 1e-9]
               for c, xs in xs_of.items()}
    if room:
        for item in keyed:
            j = item[3]
            c = j.num_gpus
            for t in choices[c]:
                if cap[t] >= c:
                    decided[item[2]] = _Pick(t, c, j.global_batch)
                    job_of[item[2]] = j
                    left = cap[t] = cap[t] - c
                    if left < smallest and max(cap.values()) < smallest:
                        room = False
                    break
            if not room:
                break

    def nums(xs, t):
        return {f"x_{u}": v for u, v in sorted(xs.items())} | {"gpu_type_x": xs.get(t, 0.0)}

    shared_why: dict[tuple, object] = {}

    def why(code, c, t):
        key = (code, c, t)
        r = shared_why.get(key)
        if r is None:
            if code is ReasonCode.KEEP_RUNNING:
                r = reason(code, f"still within its {label} share", **nums(xs_of[c], t))
            else:
                r = reason(code, f"{c} x {t}: highest {label} priority", **nums(xs_of[c], t))
            shared_why[key] = r
        return r

    # apply_decisions(snap, ordered, decided, True, started, kept)
    _, gtype_of, of_type, _ = node_memo(snap.nodes)
    running.sort(key=SUBMIT_ORDER)  # snap.running()'s order
    reasons: dict = {}
    preempted: dict[str, PreemptJob] = {}
    kept: dict[str, tuple[Gpu, ...]] = {}
    types_of = TYPES_MEMO
    for job in running:
        alloc, opt = job.allocation, decided.get(job.id)
        if opt is None or len(alloc.gpus) != opt.ngpu or (
                (alloc.global_batch if alloc is not None else None)
                or job.global_batch) != opt.batch:  # (the batch: typed_rounds.current_batch)
            same = False
        else:  # typed_rounds.all_of_type, its memo hit inlined
            hit = types_of.get(id(alloc))
            if hit is not None and hit[0] is alloc and hit[1] is gtype_of:
                ts = hit[2]
                same = not ts or (len(ts) == 1 and opt.gpu_type in ts)
            else:
                same = all_of_type(alloc, gtype_of, opt.gpu_type)
        if same:
            kept[job.id] = alloc.gpus
            r = shared_why.get((_KEEP, job.num_gpus, opt.gpu_type))
            reasons[job.id] = r if r is not None else why(_KEEP, job.num_gpus, opt.gpu_type)
        else:
            preempted[job.id] = memo.preempt_job(job.id)
            reasons[job.id] = _PREEMPT_REALLOC if opt is not None else _PREEMPT_NOT_CHOSEN
    held: set = set()
    held_nodes: set = set()

    rank = snap.node_rank
    placed = set(kept)
    starts: list = []
    free: dict[str, FreeGpus] = {}
    for jid, opt in decided.items():  # in priority order, as the reference walks them
        if jid in kept:
            continue
        job = job_of[jid]
        pool = free.get(opt.gpu_type)
        if pool is None:
            pool = free[opt.gpu_type] = _Pool(
                free_of_type(of_type, opt.gpu_type, kept, held, held_nodes), rank)
            pool.top = max(pool.buckets, default=0)  # no bucket grows past it (no give)
        gpus = pool.pick_take(opt.ngpu)
        if gpus is None:
            raise AssertionError(f"no {opt.ngpu} free {opt.gpu_type} GPUs for {jid}: "
                                 "the caller counted capacity wrongly")
        placed.add(jid)
        if opt.batch == job.global_batch and gpus:
            b, s = memo.steps(snap, job, len(gpus))
            starts.append(start_job(jid, tuple(gpus), b, s))
        else:  # not reached for isolation (its batch is the job's): the general form
            starts.append(start_on(snap, job, gpus, opt.batch))
        code = ReasonCode.RESUMED if job.start_time is not None else ReasonCode.STARTED
        reasons[jid] = why(code, opt.ngpu, opt.gpu_type)

    wait = memo.wait.get(label)
    if wait is None:
        wait = memo.wait[label] = reason(ReasonCode.WAIT_RESOURCES,
                                         f"lower {label} priority this round")
    order = [item[2] for item in keyed if item[2] not in placed]
    for jid in order:
        if jid not in reasons:
            reasons[jid] = wait
    keep_running_reasons(snap, reasons)
    return make_plan(name, list(preempted.values()) + starts, order, reasons)
