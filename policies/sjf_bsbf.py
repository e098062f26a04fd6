"""SJF-BSBF: shortest job first with best sharing benefit first (seed 000 Alg. 1).

Non-preemptive, gang-scheduled, no migration.  Each scheduling round walks the
pending jobs in SJF order and, per job (Algorithm 1):

* lines 1–2 — sort pending jobs by L_k ascending (``snap.job_length``: the
  exclusive duration t_iter·I_k; ties by submit time, then id);
* lines 4–5 — G_free (GPUs holding no job) and G_OJ (GPUs holding exactly one
  job) are recomputed for every job, so starts made earlier in the same round
  count;
* lines 6–7 — enough free GPUs: take them, consolidated on as few nodes as
  possible (:func:`policies.base.pick_consolidated`), exclusive configuration
  (:func:`policies.base.exclusive_config`);
* lines 9–13 — otherwise, if |G_free| + |G_OJ| ≥ G_k, for each job J holding
  GPUs of G_OJ run Algorithm 2 (:func:`policies.sharing.algorithm2`) and keep
  J in J_share when SF is true;
* line 14 — sort J_share by the pair JCT t ascending;
* lines 15–17 — take J's single-occupied GPUs in that order until the request
  is met.  At most two jobs per GPU (eq. 9 with C = 2): only GPUs holding one
  job are ever shared.

Choices where the paper is silent (ours):

* **Passing.** Algorithm 1's loop has no break: a job that cannot start (no
  GPUs, or SF false everywhere) waits and later, shorter-or-not jobs in the
  SJF order are still tried (it is a backfilling SJF).
* **Candidates are jobs, not GPUs.** Line 10 loops over GPUs, but Algorithm 2
  depends on the GPU only through the job on it, so it is evaluated once per
  running job; the job's GPUs that hold only it form its candidate group.
  Jobs started earlier in the same round are candidates too (they hold one
  job per GPU from now on).
* **Running job's numbers.** t_A is the eq. 7 iteration time of A alone in its
  current allocation (GPUs, nodes, sub-batch, accumulation steps); i_A is A's
  true remaining iterations ``snap.remaining_iters`` (the same oracle SJF's
  L_k uses), else its remaining-time estimate / t_A; a job with neither is
  never shared with.
* **Candidate job's numbers.** t_B(b) is B's eq. 7 time alone with sub-batch b
  on G_k GPUs packed on as few nodes as possible; i_B = its total iterations.
  The sequential alternative uses B's exclusive configuration (it runs alone
  after A, no memory room to leave) — see :mod:`policies.sharing`.  Without
  B's length (``--unknown-lengths``) Theorem 1 cannot be evaluated: B never
  shares, and the policy is a backfilling FIFO (L_k unknown ties by submit).
* **Memory.** b fits beside A on GPU g when mem_B(b) + mem_A(A's sub-batch) ≤
  gpu_mem_mb of g's node and b ≤ B's profiled maximum (MemoryProfile; a job
  without a memory profile is assumed to fit).
* **Multi-job groups.** If B takes GPUs of several jobs it runs with the
  smallest of their chosen sub-batches (so it fits beside each of them);
  ``share_with`` lists them all, the reason's numbers are those of the first
  (best) partner.  If the beneficial groups do not cover G_k, free GPUs make
  up the rest (the paper takes shared GPUs "not the free GPUs at first";
  using free ones after them is our reading).  A request that still cannot
  be met waits: WAIT_NO_SHARE_BENEFIT when GPUs whose Theorem 1 says "run
  after" would have covered it, else WAIT_MEMORY.
* **ξ** is ``snap.xi(A, B)`` / ``snap.xi(B, A)`` — the fitted table, its
  default for unknown pairs, or the ``--xi`` override.
"""
from __future__ import annotations

import heapq
import math
from itertools import islice

from operator import itemgetter

from .base import Policy, _running_ids, node_order
from .bsbf_marks import RunRef, bounded_until, kept_marks_of
from .kept_order import kept_order_of
from .model import ClusterSnapshot, Frozen, Joined
from .plan import Plan, ReasonCode, make_plan, reason, start_job
from .registry import register
from .share_index import (REL, Candidate, Lin, Round, evaluate, fitted, rejected, runs,
                          share_keep_of, x_now)
from .single_gpus import single_gpus_of

_INF = float("inf")
_FIRST = itemgetter(0)
_KEEP = reason(ReasonCode.KEEP_RUNNING)
_NAN = float("nan")
_WINDOW = 1024.0  # i_B range a signature's mark covers (SjfBsbf._share)


def _nums(length_s: float) -> dict:
    """The numbers every reason of the walk carries (L_k; -1 where unknown), made only for
    a job the walk looks at alone."""
    return {"length_s": length_s if length_s != _INF else -1.0}


def _resources_reason(snap: ClusterSnapshot, nfree: int, n_one: int, can_share: bool):
    """The WAIT_RESOURCES reason of a waiting job in a blocked tail (made on first use,
    the same as the walk's: ``nfree`` free and ``n_one`` single-occupied GPUs)."""
    def why(jid):
        job = snap.jobs[jid]
        length = snap.job_length(job)
        length = _INF if length is None else length
        return reason(ReasonCode.WAIT_RESOURCES,
                      f"needs {job.num_gpus} GPUs, {nfree} free and "
                      f"{n_one if can_share else 0} shareable",
                      free_gpus=nfree, shareable_gpus=n_one,
                      length_s=length if length != _INF else -1.0)
    return why


def _expanded(entries):
    """The deferred entries in walk order, each run of :meth:`SjfBsbf._skip_run`
    expanded into its skipped jobs' entries ``(job, None, nfree, length_s)``."""
    for entry in entries:
        if entry[0] is not None:
            yield entry
            continue
        _, jobs, keys, fits, nfree = entry
        for j, key in zip(jobs, keys):
            if j.num_gpus <= fits:
                yield (j, None, nfree, key[0])


@register("sjf-bsbf")
class SjfBsbf(Policy):
    """SJF-BSBF: SJF order; share a GPU only when Theorem 1 says it lowers the pair's JCT."""

    needs_lengths = True
    preemptive = False
    per_gpu_groups = False  # SJF-FFS: one candidate per GPU
    marks_signatures = True  # SJF-FFS never marks (its _share): nothing to keep

    def quiet_until(self, snap: ClusterSnapshot) -> float:
        """(:meth:`policies.base.Policy.quiet_until`.)  After a walk that started nothing:
        ``inf`` when every job it reached waits for a reason the time cannot end while the
        GPU map and the queue stay as they are: counts (line 9: free and single-occupied
        GPUs short; a job asking more than the cluster), or a robust mark — its own or its
        signature's, kept or made this call (:mod:`policies.bsbf_marks`: every group it
        does not share with is memory-blocked, not evaluable, or a bounds "F" class whose
        D(X) stays above the margin for every X from 0 up, and X = t_A·i_A only falls); the
        time up to which the walk's bounded marks hold (each constrained job's X above its
        low, :func:`policies.bsbf_marks.bounded_until`) where it passed jobs on such marks
        too; else ``-inf`` (a job that waited without a sure, robust or bounded mark: an
        exactly evaluated group, a bounds "F" class whose D may fall, a length unknown).
        Made when asked (the daemon never asks), from what the last call kept."""
        if self.tick_invariant:  # (SJF-FFS)
            return math.inf
        q = self.__dict__.get("_quiet")
        if q is None or q[0] != snap.now:
            return -math.inf
        if len(q) > 2:  # what the walk kept (schedule): the time, once
            q = self._quiet = (q[0], self._quiet_time(q[1], snap, q[2], q[3]))
        return q[1]

    @staticmethod
    def _quiet_time(timed: bool, snap: ClusterSnapshot, keep, bounded: dict) -> float:
        """(:meth:`quiet_until`) Of a walk that started nothing on ``snap``: ``-inf`` when
        one of its waits may end as X falls (``timed``: a job waited without a robust or
        bounded mark of its own, or was passed on a mark that is neither), else the time
        its bounded marks hold to (:func:`policies.bsbf_marks.bounded_until`; ``inf``
        without any)."""
        if timed:
            return -math.inf
        return bounded_until(snap, keep, bounded) if bounded else math.inf

    @staticmethod
    def _passed_on_kept(rnd: Round) -> bool:
        """Whether every mark of the walk (those it passed jobs on among them) is robust or
        bounded: the one :mod:`policies.bsbf_marks` keeps for its signature."""
        robust, bounded = rnd.robust, rnd.bounded
        for sid, mark in rnd.fails.items():
            if robust.get(sid) is not mark:
                b = bounded.get(sid)
                if b is None or b[0] is not mark:
                    return False
        return True

    # ------------------------------------------------------------------ round
    def schedule(self, snap: ClusterSnapshot) -> Plan:
        sig_ids = self.__dict__.get("_sig_ids")
        if sig_ids is None:
            sig_ids = self._sig_ids = {}

        # L_k = total iterations × the exclusive iteration time, which depends on the job's
        # (application, global batch, GPUs) only: asked once per signature this call, unless
        # the snapshot class computes lengths its own way
        plain = (type(snap).job_length is ClusterSnapshot.job_length
                 and type(snap).exclusive_iter_time is ClusterSnapshot.exclusive_iter_time)
        xit: dict = {}

        def key(j):
            # (L_k, submit, id) orders (ids are unique: what follows is never compared);
            # then what the walk reads per job: its GPUs, its signature's number and i_B
            # (NaN when unknown: no window holds it)
            ib = j.total_iters
            sig = (j.app, j.global_batch, j.num_gpus)
            if plain and ib is not None:
                t = xit.get(sig)
                if t is None:
                    t = xit[sig] = snap.exclusive_iter_time(j)
                length = ib * t  # ClusterSnapshot.job_length's product
            else:
                length = snap.job_length(j)
            return (_INF if length is None else length, j.submit_time, j.id, j.num_gpus,
                    sig_ids.setdefault(sig, len(sig_ids)), _NAN if ib is None else ib)

        # Alg. 1 line 1: a waiting job's L_k is fixed while it waits, so the SJF order is
        # kept across calls from the snapshot's change record (policies.kept_order), else
        # sorted afresh (the daemon's snapshots)
        kept = kept_order_of(self).update(snap, key)
        if kept is not None:
            pending, keys, ids = kept.jobs, kept.keys, kept.ids
            gmin, gmax = min(kept.gpus, default=0), max(kept.gpus, default=0)
        else:
            pairs = sorted(((key(j), j) for j in snap.pending()), key=_FIRST)
            keys = [k for k, _ in pairs]
            pending = [j for _, j in pairs]
            ids = [j.id for j in pending]
            gmin = min((j.num_gpus for j in pending), default=0)
            gmax = max((j.num_gpus for j in pending), default=0)

        # memos and the running jobs' groups kept across calls while the snapshot's
        # tables and nodes are the same objects (policies.share_index.ShareKeep)
        keep = share_keep_of(self)
        keep.check(snap, REL)
        rnd = Round(snap, keep, single_gpus_of(self))
        # the robust marks the last call left standing, while the GPU map is the same or
        # changed by that call's starts only (policies.bsbf_marks): the first job of each
        # such signature is passed too
        marks = kept_marks_of(self) if self.marks_signatures else None
        carried = marks.take(snap, keep.valid, self.per_gpu_groups) if marks else None
        if carried:
            rnd.fails.update(carried)
            rnd.robust.update(carried)
        if marks is not None and marks.pending:  # marks held while X stays above bounds
            held = marks.take_bounded(lambda jid: x_now(snap, keep, jid))
            for sid, (mark, cons) in held.items():
                rnd.fails[sid] = mark
                rnd.bounded[sid] = (mark, cons)
        can_share = snap.max_jobs_per_gpu >= 2
        total = snap.total_gpus
        norder = node_order(snap)
        self._timed = False  # a wait of this call's walk may end as X falls (quiet_until)

        actions, reasons, waiting, infeasible = [], {}, [], []
        # signature number -> the i_B window of a job that could not start (see _share)
        fails = rnd.fails
        tail = None
        passed: list = []  # runs of jobs passed over as one lazy segment each
        n_pending = len(pending)
        k = -1
        while k + 1 < n_pending:  # Alg. 1 line 2 (no break: later jobs may pass)
            k += 1
            job = pending[k]
            if rnd.n_free < gmin and gmax <= total:
                # no job from here on fits in the free GPUs; if G_free + G_OJ is short for
                # every one of them too, nothing more starts this round: each waits for
                # resources with the same counts (one lazy segment, no per-job work)
                if not rnd.counted:
                    rnd.count_shared()
                if not can_share or rnd.n_free + rnd.n_one < gmin:
                    tail = k
                    break
            kk = keys[k]  # (L_k, ..., signature number, i_B): see key
            if job.num_gpus > total:
                nums = _nums(kk[0])
                infeasible.append(job.id)
                reasons[job.id] = reason(ReasonCode.INFEASIBLE,
                                         f"asks {job.num_gpus} GPUs, cluster has {total}", **nums)
                continue
            need = job.num_gpus
            nfree = rnd.n_free  # line 4: |G_free|
            if nfree >= need:  # lines 6-7
                nums = _nums(kk[0])
                gpus = rnd.free.pick(need)
                b, s = rnd.exclusive(job)
                actions.append(start_job(job.id, gpus, b, s))
                reasons[job.id] = reason(ReasonCode.STARTED, f"{need} GPUs free, exclusive",
                                         sub_batch=b, accum_steps=s, free_gpus=nfree, **nums)
                self._take_free(rnd, gpus)
                self._flush(rnd, reasons)
                rnd.occupy(job, gpus, b, s, list(gpus))
                continue
            if not rnd.counted:  # the count only: the groups wait for a job that may share
                rnd.count_shared()
            n_one = rnd.n_one  # line 5: |G_OJ|
            if not can_share or nfree + n_one < need:  # line 9 fails
                # so it does for the run of jobs behind that ask more than the GPUs free
                # (and shareable) and no more than the cluster: nothing changes while the
                # walk passes them, each waits with the same counts (one lazy segment)
                k = self._pass_run(snap, keys, ids, k, nfree + n_one if can_share else nfree,
                                   nfree, n_one, can_share, waiting, passed)
                continue
            mark = fails.get(kk[4]) if fails else None
            if mark is not None and mark[0] <= kk[5] <= mark[1]:
                # a job of the same signature with fewer iterations could not start since
                # the last start, every group it did not share with surely: neither can
                # this one (:meth:`_share`), nor the run behind it of such jobs and of jobs
                # asking more than the GPUs free and shareable; reasons made as the walk
                # would make them
                k = self._skip_run(snap, pending, ids, keys, k, fails, nfree, n_one, waiting,
                                   passed, rnd.deferred)
                continue
            if not rnd.shared_ready:
                rnd.build_shared(self.per_gpu_groups)
            cand = Candidate(rnd, job)
            nums = _nums(kk[0])
            started = self._share(rnd, job, cand, nfree, norder, nums, actions, reasons)
            if started is None:
                waiting.append(job.id)
                continue
            gpus, b, s, extra = started
            self._flush(rnd, reasons)
            rnd.occupy(job, gpus, b, s, extra)

        if marks is not None:
            marks.save(snap, keep.valid, self.per_gpu_groups, rnd.robust, actions,
                       rnd.bounded)
        # (quiet_until) whether every wait holds while only the time moves, asked after:
        # neither the snapshot nor the round is held (the simulator reuses a job map in
        # place only where nothing else holds it)
        self._quiet = None if actions else (
            snap.now, self._timed or not self._passed_on_kept(rnd), keep, rnd.bounded)
        shared = [*passed, (lambda: _running_ids(snap), _KEEP)]
        if rnd.deferred:  # rejected after the round's last start: reasons made on first use
            shared.append(self._deferred_segment(rnd))
        if tail is None:
            return make_plan(self.name, actions, waiting, reasons, infeasible, shared)
        rest = Frozen(ids, tail) if kept is not None else tuple(ids[tail:])
        why = _resources_reason(snap, rnd.n_free, rnd.n_one, can_share)
        order = Joined(tuple(waiting), rest) if kept is not None else (*waiting, *rest)
        return make_plan(self.name, actions, order, reasons, infeasible, [(rest, why), *shared])

    @staticmethod
    def _pass_run(snap, keys, ids, k, fits, nfree, n_one, can_share, waiting, passed) -> int:
        """Pass over the job at position ``k``, which cannot start (it asks more than
        ``fits`` GPUs), and the jobs right behind it that ask more than ``fits`` and at
        most the cluster: their ids join ``waiting``, their WAIT_RESOURCES reason (the
        walk's, ``nfree`` free and ``n_one`` single-occupied GPUs) is one segment in
        ``passed``, made on first use.  Returns the run's last position."""
        total = snap.total_gpus
        end = k + 1
        # a job's GPUs are its key's 4th item (see schedule's key)
        for _, _, _, need, _, _ in islice(keys, end, len(ids)):
            if not fits < need <= total:
                break
            end += 1
        run = ids[k:end]
        waiting.extend(run)
        passed.append((run, _resources_reason(snap, nfree, n_one, can_share)))
        return end - 1

    @staticmethod
    def _skip_run(snap, pending, ids, keys, k, fails, nfree, n_one, waiting, passed,
                  deferred) -> int:
        """From position ``k`` (a job of a signature in ``fails`` within its window, see
        :meth:`_share`) the run of jobs that are such jobs too or ask more than the
        ``nfree + n_one`` GPUs free and shareable (and at most the cluster): nothing
        changes while the walk passes them.  Their ids join ``waiting``; the former are
        deferred (one entry for the run, ``(None, jobs, keys, fits, nfree)``, expanded by
        :func:`_expanded` into ``(job, None, nfree, length_s)`` per job, reason made by
        :meth:`_rest_reason`), the latter wait for resources in one lazy segment of
        ``passed``.  Returns the run's last position."""
        total = snap.total_gpus
        fits = nfree + n_one
        n = len(pending)
        end = k
        over = False
        get = fails.get
        # (..., GPUs, signature number, i_B): see schedule's key
        for _, _, _, need, sid, ib in islice(keys, k, n):
            if need > fits:
                if need > total:
                    break
                over = True
            else:
                mark = get(sid)
                if mark is None or not mark[0] <= ib <= mark[1]:
                    break
            end += 1
        waiting.extend(ids[k:end])
        jobs = pending[k:end]
        deferred.append((None, jobs, keys[k:end], fits, nfree))
        if over:
            passed.append((lambda: [j.id for j in jobs if j.num_gpus > fits],
                           _resources_reason(snap, nfree, n_one, True)))
        return end - 1

    # ------------------------------------------------- deferred wait reasons
    # A job Theorem 1 rejects everywhere waits with the numbers of the rejected pair closest
    # to sharing (:meth:`_best_rest`), which costs more than the decision.  The decision is
    # made in the walk; the numbers are computed from the round's state as it stood then:
    # before the next start changes that state (:meth:`_flush`), or, for the jobs after the
    # round's last start (the state no longer changes), only when the reason is looked up.
    # Only jobs whose reason reads no per-group choice made during their own walk step
    # (no exactly-evaluated rejected group) are deferred.
    # A job skipped as one of a signature that could not start (entry ``(job, None, nfree,
    # length_s)``) is deferred the same way: its reason is what :meth:`_share` says for it on
    # the same state.
    def _flush(self, rnd: Round, reasons: dict) -> None:
        """Make the deferred reasons: the round's state changes next (a start), so the
        signatures that could not start may start now (``rnd.fails`` is emptied)."""
        for entry in _expanded(rnd.deferred):
            reasons[entry[0].id] = self._rest_reason(rnd, entry)
        rnd.deferred.clear()
        rnd.fails.clear()
        rnd.robust.clear()
        rnd.bounded.clear()

    def _rest_reason(self, rnd: Round, entry: tuple):
        if entry[1] is None:  # skipped: the walk's step for it, on the same state
            job, _, nfree, length_s = entry
            if not rnd.shared_ready:  # passed on a mark kept from the last call
                rnd.build_shared(self.per_gpu_groups)
            nums = {"length_s": length_s if length_s != _INF else -1.0}
            saved, rnd.deferred = rnd.deferred, []
            out: dict = {}
            started = self._share(rnd, job, Candidate(rnd, job), nfree, None, nums, None, out)
            assert started is None, "a longer job of a signature that could not start"
            why = self._rest_reason(rnd, rnd.deferred[0]) if rnd.deferred else out[job.id]
            rnd.deferred = saved
            return why
        job, cand, nfree, shareable, nobenefit, blocked, f_runs, slack, nums = entry
        best = self._best_rest(rnd, cand, f_runs, [], slack)
        out: dict = {}
        self._wait_reason(job, nfree, shareable, nobenefit, blocked, best, nums, out)
        return out[job.id]

    def _deferred_segment(self, rnd: Round) -> tuple:
        entries, rnd.deferred = rnd.deferred, []
        by_id: dict = {}  # made on first use, as the reasons

        def why(jid):
            if not by_id:
                by_id.update((entry[0].id, entry) for entry in _expanded(entries))
            return self._rest_reason(rnd, by_id[jid])
        return (lambda: [entry[0].id for entry in _expanded(entries)], why)

    # --------------------------------------------------------------- helpers
    @staticmethod
    def _take_free(rnd: Round, gpus) -> None:
        rnd.free.take(gpus)
        rnd.n_free -= len(gpus)

    @staticmethod
    def _fit(rnd: Round, cand: Candidate, cls) -> tuple:
        """What Algorithm 2 needs of B beside a class, memoised per (app, batch, GPUs):
        the fitting (b, s) in search order, t_B of the first and of the fastest
        (smallest t_B) of them, the class's ξ pair, and the per-iteration constants
        of the closed-form bounds (:class:`policies.share_index.Lin`, divided by i_B)."""
        job = cand.job
        sig = (job.app, job.global_batch, job.num_gpus)
        v = cls.memo.get(sig)
        if v is None:
            if cand.prof is not None:  # the fitting sub-batches and their t_B, as evaluate's
                fl = fitted(cand, cls)
                fit, ts = [(b, s) for b, s, _ in fl], [t for _, _, t in fl]
            else:
                fit = [(b, s) for b, s in cand.cands if cand.fits_beside(b, cls.a_mb, cls.cap)]
            xi_a, xi_b = rnd.xi_pair(cls.app, job.app)
            consts = None
            if fit and cand.prof is not None:
                t0, tmin = ts[0], min(ts)
                if xi_a > 0.5 and xi_b > 0.5:
                    half = cand.t_excl / 2.0  # S / i_B
                    consts = (xi_b * tmin / xi_a,  # c / i_B
                              xi_b * tmin * (1.0 - 1.0 / (2.0 * xi_a)) - half,  # (k1 − S) / i_B
                              tmin / 2.0 - half,  # (k2 − S) / i_B
                              (1.0 - 1.0 / (2.0 * xi_b)) * xi_a - 1.0,  # slope below c
                              REL * (1.0 + xi_a),  # margin per unit of X
                              REL * ((1.0 + xi_b) * max(t0, tmin) + half))  # ... per i_B
                v = (fit, t0, tmin, xi_a, xi_b, consts)
            else:
                v = (fit, None, None, xi_a, xi_b, None)
            cls.memo[sig] = v
        return v

    def _share(self, rnd: Round, job, cand: Candidate, nfree, norder, nums, actions, reasons):
        """Lines 9–17 for one job: label every group by Theorem 1 (bounds, exact near
        a sign change), then take the best-t shared GPUs or explain the wait.

        A job that waits with every group it does not share with surely not shared with
        (memory, not evaluable, or a bounds 'F' run of a class whose D(X) = t_share − t_seq
        grows with i_B: both closed-form coefficients per i_B ≥ 0, D continuous at the case
        break) marks its signature with its i_B in ``rnd.fails``: until the next start a
        job of that signature with i_B' in [i_B, _WINDOW i_B] has D ≥ D(i_B) > the margin
        at those groups, so it shares only where this one does and waits too (the bounded
        factor keeps the float error of its D, a few ulp of ~_WINDOW·t_B·i_B, far below
        the margin REL·t_B·i_B: 1024 · 1e-16 ≪ 1e-9)."""
        need = job.num_gpus
        t_runs, f_runs, u_true, u_false = [], [], [], []
        # shareable / nobenefit: GPUs, except that a run split by the bounds (``split``:
        # (class, lo, hi, is a "T" run)) counts its groups (each holds ≥ 1 GPU) until the
        # exact count is needed: a start needs only shareable ≥ 1 and shareable + nfree ≥
        # need, which the lower bound proves where it holds
        split = []
        shareable = nobenefit = blocked = 0
        margin_max = 0.0
        sure = cand.usable  # every group not shared with is surely not (see above)
        robust = True  # ... and stays so while only time moves (policies.bsbf_marks)
        lows = []  # ... while each (class, low)'s smallest X is ≥ low
        usable = cand.usable
        ib = cand.iters
        sig = (job.app, job.global_batch, job.num_gpus)
        for cls in rnd.classes.values():
            if not cls.total:
                continue
            v = cls.memo.get(sig) or self._fit(rnd, cand, cls)
            fit = v[0]
            if not fit:
                blocked += cls.total
                continue
            if not (usable and cls.usable):
                nobenefit += cls.total
                continue
            consts = v[5]
            if consts is None:  # bounds assume ξ > 1/2: evaluate every group
                for gr in cls.groups:
                    gr.choice = evaluate(rnd, cand, gr)
                    if gr.choice.share:
                        u_true.append(gr)
                        shareable += len(gr.gpus)
                    else:
                        u_false.append(gr)
                        nobenefit += len(gr.gpus)
                        sure = False
                continue
            xs = cls.xs
            xa, xb = xs[0], xs[-1]
            cc, p1, p2, q, w1, w2 = consts
            c, p1, p2 = cc * ib, p1 * ib, p2 * ib
            margin = w1 * xb + w2 * ib + REL
            if margin > margin_max:
                margin_max = margin
            # D(X) = t_share − t_seq of the fastest fitting b: p1 − X/2 (X ≥ c), p2 + qX below
            da = p1 - xa / 2.0 if xa >= c else p2 + q * xa
            db = p1 - xb / 2.0 if xb >= c else p2 + q * xb
            lo_d, hi_d = (da, db) if da < db else (db, da)
            if xa < c < xb:
                dc = p1 - c / 2.0
                lo_d, hi_d = min(lo_d, dc), max(hi_d, dc)
            if hi_d < -margin:
                t_runs.append((cls, 0, len(xs), v))
                shareable += cls.total
                continue
            if lo_d > margin:
                f_runs.append((cls, 0, len(xs), v))
                nobenefit += cls.total
                if sure and (consts[1] < 0.0 or consts[2] < 0.0):
                    sure = False
                elif robust:  # X only falls: D above the margin on all of [0, xb]?
                    lo_r = p1 if c <= 0.0 else p2  # D(0)
                    if db < lo_r:
                        lo_r = db
                    if 0.0 < c < xb and p1 - c / 2.0 < lo_r:
                        lo_r = p1 - c / 2.0
                    if not lo_r > margin:
                        # D(0) = p2 is not (c > 0, D above it at min(c, xb)): on [0, c)
                        # D = p2 + qX rises with X, so D ≥ 2·margin for X ≥ low, and
                        # on [c, xb] D ≥ D(xb) > margin: the mark holds while the
                        # class's smallest X is ≥ low (policies.bsbf_marks)
                        low = (2.0 * margin - p2) / q if q > 0.0 and c > 0.0 else xa + 1.0
                        if low <= xa:
                            lows.append((cls, low))
                        else:
                            robust = False
                continue
            s_half = cand.t_excl * ib / 2.0
            for label, lo, hi in runs(xs, Lin(v[2], ib, v[3], v[4], s_half), margin):
                if label == "T":
                    t_runs.append((cls, lo, hi, v))
                    shareable += hi - lo  # its groups; their GPUs counted when needed
                    split.append((cls, lo, hi, True))
                elif label == "F":
                    f_runs.append((cls, lo, hi, v))
                    nobenefit += hi - lo  # as above
                    split.append((cls, lo, hi, False))
                    if sure and (consts[1] < 0.0 or consts[2] < 0.0):
                        sure = False
                    elif robust:  # as a whole "F" class, over [0, the run's largest X]
                        robust = self._run_holds(cls, lo, hi, c, p1, p2, q, margin, lows)
                else:
                    for gr in cls.groups[lo:hi]:
                        gr.choice = evaluate(rnd, cand, gr)
                        if gr.choice.share:
                            u_true.append(gr)
                            shareable += len(gr.gpus)
                        else:
                            u_false.append(gr)
                            nobenefit += len(gr.gpus)
                            sure = False
        if split and not (shareable >= 1 and shareable + nfree >= need):
            # the lower bounds do not decide the start: the split runs' GPUs, exactly
            for cls, lo, hi, is_t in split:
                extra = cls.gpus_in(lo, hi) - (hi - lo)
                if is_t:
                    shareable += extra
                else:
                    nobenefit += extra
        if shareable >= 1 and shareable + nfree >= need:
            chosen = self._best_t(rnd, cand, need, t_runs, u_true, 2.0 * margin_max)
            return self._start(rnd, job, chosen, nfree, norder, nums, actions, reasons)
        if sure:
            sid = self._sig_ids[sig]  # every waiting job's signature is numbered
            mark = rnd.fails[sid] = (ib, _WINDOW * ib)
            if robust:
                if not lows:
                    rnd.robust[sid] = mark
                elif sid not in rnd.robust:
                    rnd.bounded[sid] = (mark, lows)
        if not (sure and robust) and actions is not None:
            self._timed = True  # this wait may end as X falls (a walk's step, not a reason's)
        best = None
        if nfree + shareable + nobenefit >= need:
            if not u_false:
                rnd.deferred.append((job, cand, nfree, shareable, nobenefit, blocked, f_runs,
                                     2.0 * margin_max, nums))
                return None
            best = self._best_rest(rnd, cand, f_runs, u_false, 2.0 * margin_max)
        self._wait_reason(job, nfree, shareable, nobenefit, blocked, best, nums, reasons)
        return None

    @staticmethod
    def _run_holds(cls, lo, hi, c, p1, p2, q, margin, lows) -> bool:
        """Whether a bounds "F" run ``[lo, hi)`` of a class whose other groups are shared
        with or evaluated keeps the mark robust: D = t_share − t_seq stays above the margin
        for every X in [0, the run's largest X] (X only falls while the GPU map is the
        same; D is piecewise linear with one break at ``c``, so its least value there is
        at 0, at ``c`` or at the run's largest X), or, when q > 0 and c > 0 (D rises
        below c and falls above it: only D(0) = p2 is not), above it for X ≥ low =
        (2·margin − p2)/q ≤ the run's least X while each of the run's jobs' X is ≥ low
        (appended to ``lows`` as (the run, low): :class:`policies.bsbf_marks.RunRef`, the
        run's job ids once the mark is kept); else False.  The class's groups
        outside its "F" runs (each checked so) are shared with, by the bounds or exactly
        (an exact "no" makes no mark): as X falls they count at most what they count now,
        so the job still cannot start (policies.bsbf_marks)."""
        xs = cls.xs
        xh = xs[hi - 1]
        lo_r = p1 if c <= 0.0 else p2  # D(0)
        dh = p1 - xh / 2.0 if xh >= c else p2 + q * xh
        if dh < lo_r:
            lo_r = dh
        if 0.0 < c < xh and p1 - c / 2.0 < lo_r:
            lo_r = p1 - c / 2.0
        if lo_r > margin:
            return True
        if not (q > 0.0 and c > 0.0 and dh > margin):
            return False
        # D rises to 2·margin at low (below c) and falls above c, to D(xh) > margin
        low = (2.0 * margin - p2) / q
        if low > xs[lo]:
            return False  # a job of the run is below low already
        lows.append((RunRef(cls, lo, hi), low))
        return True

    @staticmethod
    def _best_t(rnd, cand, need, t_runs, u_true, slack) -> list:
        """Line 14: the shared groups in ascending pair JCT t (ties: GPU order), as many
        as the request needs.  Within a run t grows with X, so runs are merged lazily."""
        s_half = cand.t_excl * cand.iters / 2.0 if cand.usable else 0.0
        ib = cand.iters
        heap = []
        for n, (cls, lo, hi, v) in enumerate(t_runs):
            # Lin(v[2], i_B, v[3], v[4], ·).t(X) of the run's first group, the same
            # operations (the run's Lin is made only when the walk goes past it)
            t_b, xi_a, xi_b = v[2], v[3], v[4]
            hbib = xi_b * t_b * ib
            x = cls.xs[lo]
            key = (hbib * (1.0 - 1.0 / (2.0 * xi_a)) + x / 2.0 if x >= hbib / xi_a
                   else t_b * ib / 2.0 + (1.0 - 1.0 / (2.0 * xi_b)) * xi_a * x)
            heap.append((key, cls.groups[lo].first, n, lo))
        lins: dict = {}
        for gr in u_true:
            heap.append((gr.choice.t, gr.first, -1, gr))
        heapq.heapify(heap)
        picked, got, limit = [], 0, None
        while heap:
            key, first, n, at = heapq.heappop(heap)
            if limit is not None and key > limit:
                break
            if n < 0:
                gr = at
            else:
                cls, lo, hi, v = t_runs[n]
                gr = cls.groups[at]
                gr.choice = evaluate(rnd, cand, gr)
                if at + 1 < hi:
                    lin = lins.get(n)
                    if lin is None:
                        lin = lins[n] = Lin(v[2], ib, v[3], v[4], s_half)
                    heapq.heappush(heap, (lin.t(cls.xs[at + 1]), cls.groups[at + 1].first,
                                          n, at + 1))
            assert gr.choice.share, "bounds said Theorem 1 shares"
            picked.append(gr)
            if limit is None:
                got += len(gr.gpus)
                if got >= need:
                    limit = key + slack
        picked.sort(key=lambda gr: (gr.choice.t, gr.first))
        return picked

    @staticmethod
    def _best_rest(rnd, cand, f_runs, u_false, slack):
        """The rejected pair closest to sharing (min t_share − t_seq, ties: GPU order).
        Over a run the difference is concave or decreasing in X: its smallest values
        lie at the run's two ends."""
        ends = [gr.choice.t_share - gr.choice.t_seq for gr in u_false]
        if not f_runs and not ends:
            return None
        s_half = cand.t_excl * cand.iters / 2.0
        f_runs = [(cls, lo, hi, Lin(v[1], cand.iters, v[3], v[4], s_half), (v[1], v[0][0]))
                  for cls, lo, hi, v in f_runs]
        for cls, lo, hi, lin, _ in f_runs:
            ends.append(lin.d(cls.xs[lo]))
            ends.append(lin.d(cls.xs[hi - 1]))
        if not ends:
            return None
        theta = min(ends) + slack
        cands = [gr for gr in u_false if gr.choice.t_share - gr.choice.t_seq <= theta]
        for cls, lo, hi, lin, first in f_runs:
            i = lo
            while i < hi and lin.d(cls.xs[i]) <= theta:
                cands.append(cls.groups[i])
                rejected(rnd, cand, cls.groups[i], *first)
                i += 1
            j = hi - 1
            while j >= i and lin.d(cls.xs[j]) <= theta:
                cands.append(cls.groups[j])
                rejected(rnd, cand, cls.groups[j], *first)
                j -= 1
        for gr in cands:
            assert not gr.choice.share, "bounds said Theorem 1 runs after"
        return min(cands, key=lambda gr: (gr.choice.t_share - gr.choice.t_seq, gr.first))

    def _start(self, rnd, job, chosen, nfree, norder, nums, actions, reasons):
        need = job.num_gpus
        taken: list = []
        partners: list = []
        for gr in chosen:  # lines 15-17
            if len(taken) >= need:
                break
            k = min(need - len(taken), len(gr.gpus))
            taken.extend(gr.gpus[:k])
            partners.append(gr)
        n_shared = len(taken)
        extra: list = []
        if n_shared < need:
            extra = list(rnd.free.pick(need - n_shared))
            self._take_free(rnd, extra)
            taken.extend(extra)
        # B fits beside every partner with the smallest chosen sub-batch (the first such
        # partner's accumulation steps, as min() picks)
        first = partners[0].choice
        b, s = first.sub_batch, first.accum_steps
        for gr in partners[1:]:
            c = gr.choice
            if c.sub_batch < b:
                b, s = c.sub_batch, c.accum_steps
        share_with = (tuple(dict.fromkeys(gr.occ.job.id for gr in partners))
                      if len(partners) > 1 else (partners[0].occ.job.id,))
        actions.append(start_job(job.id, tuple(taken), b, s, share_with))
        reasons[job.id] = reason(
            ReasonCode.STARTED_SHARED,
            f"shares {n_shared} GPU(s) with {', '.join(share_with)}, sub-batch {b} x {s} "
            f"accumulation steps; pair avg JCT {first.t_share:.0f}s shared vs "
            f"{first.t_seq:.0f}s sequential",
            sub_batch=b, accum_steps=s, t_share=first.t_share, t_seq=first.t_seq,
            xi_run=first.xi_run, xi_new=first.xi_new, case=first.case,
            shared_gpus=n_shared, free_gpus_used=need - n_shared, partners=len(partners), **nums)
        return tuple(taken), b, s, extra

    @staticmethod
    def _wait_reason(job, nfree, shareable_ok, nobenefit, blocked, best_rest, nums, reasons):
        need = job.num_gpus
        if nfree + shareable_ok + nobenefit >= need and best_rest is None:
            reasons[job.id] = reason(
                ReasonCode.WAIT_NO_SHARE_BENEFIT,
                "Theorem 1 cannot be evaluated (job length unknown): no sharing",
                free_gpus=nfree, beneficial_gpus=shareable_ok, **nums)
        elif nfree + shareable_ok + nobenefit >= need:
            c = best_rest.choice
            reasons[job.id] = reason(
                ReasonCode.WAIT_NO_SHARE_BENEFIT,
                f"Theorem 1: sharing with {best_rest.occ.job.id} gives avg JCT "
                f"{c.t_share:.0f}s vs {c.t_seq:.0f}s if run after it",
                t_share=c.t_share, t_seq=c.t_seq, xi_run=c.xi_run, xi_new=c.xi_new,
                case=c.case, sub_batch=c.sub_batch, accum_steps=c.accum_steps,
                free_gpus=nfree, beneficial_gpus=shareable_ok, **nums)
        else:
            reasons[job.id] = reason(
                ReasonCode.WAIT_MEMORY,
                f"needs {need} GPUs: {nfree} free, {shareable_ok} shareable with "
                f"benefit; no sub-batch fits beside the others",
                free_gpus=nfree, beneficial_gpus=shareable_ok,
                memory_blocked_gpus=blocked, **nums)
