"""A-SRPT (seed 003 §IV-C, Algorithm 1): prediction-assisted SRPT with Heavy-Edge placement.

Instance Ã1 (§IV-C, Fig. 3 ①②): the cluster is one virtual machine; job ``i`` arrives at
``r_i`` with processing time ``p̃_i = (g_i/G)·ñ_i·α̂_i^min`` (predicted iterations ×
minimal per-iteration time × GPUs / G; :mod:`policies.asrpt_core`).  Ã1 is scheduled by
preemptive SRPT; a job joins ``pending_queue`` when it completes in Ã1 (line 2), in Ã1
completion order.  Then, per Algorithm 1 (③):

* line 5 / 25: the head of ``pending_queue`` starts only if its ``g_i`` GPUs are free in the
  cluster; otherwise nothing behind it starts (strict order, time advances);
* line 8: communication-heavy when ``α^max/α̂^min ≥ COMM_HEAVY`` (1.5, §IV-C);
* lines 9–13: heavy jobs take the servers with most free GPUs, Heavy-Edge maps the
  replicas, and the job starts if ``α/α̂^min ≤ COMM_HEAVY``;
* lines 14–20: otherwise ``κ = α`` and the job is delayed for at most
  ``τ·p̃_i`` (line 16), re-placing it at every later call; it starts as soon as ``α < κ``
  (line 18) or when the delay is over (line 20).  While the loop of lines 16–19 runs, the
  algorithm schedules nothing else: jobs behind the delayed head wait (as written);
* lines 21–23: other jobs take the servers with *fewest* free GPUs (fragmentation-aware)
  and start at once.

Non-preemptive: running jobs are never stopped.

Our choices where the paper is open (documented):

* Ã1 is a function of the snapshot alone (stateless in its results): it holds the active jobs
  and the finished jobs of ``snapshot.history`` submitted since the earliest active job
  (earlier finished jobs are treated as done in Ã1 too).  Predictions come from
  ``snapshot.predictors["iterations"]`` (a fitted object from :mod:`gimbalctl.predictor`;
  unseen groups predict 0, i.e. complete on arrival in Ã1 — the paper's rule); without a
  predictor the exact length (simulator) or the time limit is used.
* The delay of lines 14–20 needs ``κ`` and its start time: they are the only state the
  policy object keeps that changes decisions (``job id -> (t0, κ)``); a fresh object (a
  restarted daemon) starts the delay anew.  The other memos (per-job ``α`` bounds and
  predictions while the predictor object is the same, each history record's Ã1 item, an
  index of the history by submit time, and Ã1's window itself kept across calls from the
  simulator's change records in :class:`~policies.asrpt_window.A1Window`, re-simulated
  only around what changed) only save work: Ã1's completion times equal a fresh
  :func:`~policies.asrpt_core.virtual_srpt` of the window
  (tests/policies/test_asrpt_differential.py).
* τ (the delay factor) is not given for the simulations; default 1.0, an option.
"""
from __future__ import annotations

import bisect
import heapq
import math
import operator

from .asrpt_core import (EPS, Placer, alpha_bounds, prediction, predicted_seconds,
                         virtual_srpt)
from .asrpt_window import A1Window
from .base import Policy, exclusive_config, keep_running_segment
from .kept_order import KeptOrder
from .pipeline import Network
from .model import Frozen, Joined
from .records import job_record
from .plan import ReasonCode, StartJob, make_plan, reason
from .registry import register

COMM_HEAVY = 1.5
_FIRST, _SECOND, _ID = operator.itemgetter(0), operator.itemgetter(1), operator.attrgetter("id")
_GONE = (None, None)


class _Kept:
    """Ã1's inputs as of the last call: the job change record seen, the active jobs'
    facts and items, a heap of their (submit time, id) (stale entries skipped), ``t0``."""

    __slots__ = ("seen", "facts", "act", "subs", "t0")

    def __init__(self, seen, facts, act, subs, t0):
        self.seen, self.facts, self.act, self.subs, self.t0 = seen, facts, act, subs, t0


@register("a-srpt")
class ASrpt(Policy):
    """A-SRPT (seed 003 Alg. 1): virtual single-machine SRPT order on predicted lengths, Heavy-Edge placement."""

    pipeline_models = True  # Table I jobs timed by eq. 4-7 (asrpt_core)

    perfect = False  # A-SRPT-Perfect: the true length instead of the prediction

    def __init__(self, comm_heavy: float = COMM_HEAVY, tau: float = 1.0,
                 intra_gbytes: float = 300.0, inter_gbits: float = 10.0):
        if comm_heavy < 1 or tau < 0:
            raise ValueError("a-srpt: comm_heavy must be >= 1 and tau >= 0")
        self.comm_heavy, self.tau = float(comm_heavy), float(tau)
        self.net = Network.from_units(intra_gbytes, inter_gbits)
        self._delay: dict[str, tuple[float, float]] = {}
        self._quiet = None  # (now, time) of the last call when it had no action (quiet_until)
        # memo only (results are a pure function of the snapshot): per-job facts, history index
        self._token, self._facts, self._hidx, self._hitems, self._hobj = None, {}, None, {}, {}
        self._win = A1Window()
        self._kept = None  # _Kept: Ã1's inputs as of the last call (simulator snapshots)
        self._hrec, self._hdup, self._hseen = None, False, (0, None)
        self.full_calls = 0  # calls that built Ã1 from the whole window
        self._gen = 0  # counts the full builds: the kept order's keys are stale after one
        self._korder = KeptOrder()
        self.sorted_calls = 0  # calls that sorted the waiting jobs afresh

    # ---------------------------------------------------------------- Ã1
    def _check_token(self, snap, G):
        """Drop the memos when the predictor object, G, the server size or the profiles
        change (once per call; the inputs of every job's facts)."""
        token = (snap.predictors.get("iterations"), G, snap.max_gpus_per_node, snap.profiles)
        if self._token is None or any(x is not y for x, y in zip(token, self._token)) \
                or token[1:3] != self._token[1:3]:
            self._token, self._facts, self._hitems, self._hobj = token, {}, {}, {}
            self._kept = None

    def _fact(self, snap, j, G):
        """(α̂min, αmax, ñ, unit, source, p̃) of a job; memoised per job id while the
        predictor object, G and the server size are the same (:meth:`_check_token`)."""
        hit = self._facts.get(j.id)
        if hit is not None and hit[0] is j:
            return hit[1]
        amin, amax = alpha_bounds(snap, j, self.net)
        val, unit, src = prediction(snap, j, self.perfect)
        fact = (amin, amax, val, unit, src, j.num_gpus / G * predicted_seconds(val, unit, amin))
        if len(self._facts) > 200_000:
            self._facts.clear()
        self._facts[j.id] = (j, fact)
        return fact

    def _history_since(self, history, t0):
        """Indices of the history records submitted at or after ``t0`` (index by submit
        time, extended incrementally as the simulator appends finished jobs)."""
        idx = self._hidx
        if idx is None or len(history) < idx[1] or (idx[1] and history[idx[1] - 1] is not idx[2]):
            subs = sorted((f.submit_time, i) for i, f in enumerate(history))
            self._hitems, self._hobj = {}, {}
        else:
            subs = idx[3]
            for i in range(idx[1], len(history)):
                bisect.insort(subs, (history[i].submit_time, i))
        self._hidx = (None, len(history), history[-1] if history else None, subs)
        k = bisect.bisect_left(subs, (t0, -1))
        return list(map(_SECOND, subs[k:]))

    def _new_records(self, history):
        """The history records appended since the last call, with the id -> record map
        (``_hrec``) brought up to date; ``None`` when the history is not the last call's
        plus appended records (then the map is dropped) or no map is kept yet."""
        n, last = self._hseen
        self._hseen = (len(history), history[-1] if history else None)
        if self._hrec is None:
            return None
        if len(history) < n or (n and history[n - 1] is not last):
            self._hrec, self._hdup = None, False
            return None
        new = list(history[n:]) if len(history) > n else []
        hrec = self._hrec
        for f in new:
            if f.id in hrec:
                self._hdup = True
            hrec[f.id] = f
        return new

    def virtual(self, snap):
        """(per-job facts, Ã1 completion times) for the active jobs (and recent history).

        Ã1 holds the active jobs and the history records submitted since the earliest
        active job (``t0``).  With the simulator's change records (``snap.job_changes``,
        the append-only history) the window is brought up to date from the jobs named
        since the last call and the records appended since, and :class:`A1Window`
        re-simulates only around the items that changed; otherwise (the daemon, a refit,
        the front moving back, two history records of one id) it is built from the whole
        window (:meth:`_virtual_full`).  Either way the completion times equal a fresh
        :func:`virtual_srpt` of the window (tests/policies/test_asrpt_differential.py)."""
        G = max(snap.total_gpus, 1)
        self._check_token(snap, G)
        new = self._new_records(snap.history)
        log, kept, jobs = job_record(snap), self._kept, snap.jobs
        if (kept is None or new is None or self._hdup or not self._win.valid or log is None
                or not log.extends(kept.seen)):
            return self._virtual_full(snap, G)
        facts, act, subs = kept.facts, kept.act, kept.subs
        ups, left = {}, []
        for jid in dict.fromkeys(log[len(kept.seen):]):
            j = jobs.get(jid)
            if j is None:
                if act.pop(jid, None) is not None:
                    del facts[jid]
                    left.append(jid)
                continue
            fact = facts[jid] = self._fact(snap, j, G)
            item = (jid, j.submit_time, fact[5])
            if act.get(jid) != item:
                act[jid] = ups[jid] = item
                heapq.heappush(subs, (j.submit_time, jid))
        while subs and act.get(subs[0][1], _GONE)[1] != subs[0][0]:
            heapq.heappop(subs)  # stale: the job left or its submit time changed
        if not subs:
            self._kept = None
            return facts, {}
        t0 = subs[0][0]
        if t0 < kept.t0:  # the front moves back: records before it re-enter
            return self._virtual_full(snap, G)
        if len(subs) > 4 * len(act) + 1024:
            kept.subs = subs = [(x[1], x[0]) for x in act.values()]
            heapq.heapify(subs)
        hrec, removed = self._hrec, []
        for jid in left:  # its history record (if any) replaces the active job's item
            f = hrec.get(jid)
            if f is not None and f.submit_time >= t0:
                ups[jid] = (jid, f.submit_time, self._fact(snap, f, G)[5])
            else:
                removed.append(jid)
        for f in new:  # records of jobs not seen active (active jobs' records wait)
            if f.id not in act and f.id not in ups and f.submit_time >= t0 \
                    and f.id not in removed:
                ups[f.id] = (f.id, f.submit_time, self._fact(snap, f, G)[5])
        done = self._win.update(t0, removed, ups)
        kept.seen, kept.t0 = log, t0
        return facts, done

    def _virtual_full(self, snap, G):
        """Ã1 from the whole window: the active jobs' facts and items, the history
        records submitted since the earliest active job; keeps the inputs for the next
        call when the snapshot has a job change record."""
        self.full_calls += 1
        self._gen += 1
        self._kept = None
        facts, items = {}, []
        active = list(snap.jobs.values())
        for j in active:
            fact = self._fact(snap, j, G)
            facts[j.id] = fact
            items.append((j.id, j.submit_time, fact[5]))
        nact = len(items)
        if active and snap.history:
            t0 = min(j.submit_time for j in active)
            history, hitems, hobj = snap.history, self._hitems, self._hobj
            idxs = self._history_since(history, t0)
            if isinstance(history, (list, tuple)) or not idxs:
                objs = list(map(history.__getitem__, idxs))
            else:  # a view (Frozen): copy only the part past the window's first record
                off = min(idxs)
                tail = list(history[off:])
                objs = list(map(tail.__getitem__, map(off.__rsub__, idxs)))
            if not all(map(operator.is_, map(hobj.get, idxs), objs)):
                for i, f in zip(idxs, objs):  # records not seen yet: their Ã1 item
                    if hobj.get(i) is not f and f.id not in facts:
                        hobj[i] = f
                        hitems[i] = (f.id, f.submit_time, self._fact(snap, f, G)[5])
            if facts.keys().isdisjoint(map(_ID, objs)):
                items.extend(map(hitems.__getitem__, idxs))
            else:  # a record whose id is active: the active job's item only
                items.extend(hitems[i] for i, f in zip(idxs, objs) if f.id not in facts)
        done = self._win.reset(items)
        if done is None:  # two items of one key (history records of one id)
            return facts, virtual_srpt(items)
        log = job_record(snap)
        if active and log is not None:
            if self._hrec is None:  # the id -> record map, kept from now on
                hrec = self._hrec = {}
                for f in snap.history:
                    if f.id in hrec:
                        self._hdup = True
                    hrec[f.id] = f
            if not self._hdup:
                act = {x[0]: x for x in items[:nact]}
                subs = [(x[1], x[0]) for x in items[:nact]]
                heapq.heapify(subs)
                self._kept = _Kept(log, dict(facts), act, subs, subs[0][0])
        return facts, done

    # ---------------------------------------------------------------- Alg. 1
    def _ordered(self, snap, facts, done):
        """The waiting jobs sorted by (Ã1 completion, submit time, id): ``keys`` (that
        tuple plus the job's facts), ``jobs`` and ``ids`` aligned, and whether a job asks
        more GPUs than the cluster has.  From a :class:`KeptOrder` brought up to date from
        the snapshot's queue record and the jobs whose Ã1 completion time changed since
        the last call (simulator), else a fresh sort."""
        def key(j):
            return (done[j.id], j.submit_time, j.id, facts[j.id])

        kept = self._korder.update(snap, key, (self._gen,))
        if kept is not None and self._win.changed:
            key_of = kept.key_of
            if not kept.rekey(snap, [k for k in self._win.changed if k in key_of], key):
                kept = None
        if kept is not None:
            return kept.keys, kept.jobs, kept.ids, max(kept.gpus, default=0) > snap.total_gpus
        self.sorted_calls += 1
        pairs = sorted(((key(j), j) for j in snap.pending()), key=_FIRST)
        keys = [k for k, _ in pairs]
        return keys, [j for _, j in pairs], [k[2] for k in keys], \
            any(j.num_gpus > snap.total_gpus for _, j in pairs)

    def quiet_until(self, snap):
        """(``Policy.quiet_until``.)  After a call that started nothing, what changes the Plan
        with the time alone: the next job to complete in Ã1 (line 2: it joins
        ``pending_queue``; Ã1's completion times do not read the time), or a delayed head's
        ``t0 + τ·p̃`` (line 20).  A head that waits for GPUs (line 25) waits while they
        stay as they are (the queue only grows behind it): no time."""
        q = self._quiet
        return q[1] if q is not None and q[0] == snap.now else -math.inf

    def schedule(self, snap):
        now = snap.now
        facts, done = self.virtual(snap)
        keys, jobs, ids, over = self._ordered(snap, facts, done)
        split = bisect.bisect_left(keys, (now + EPS, math.inf))  # line 2: complete in Ã1
        self._delay = {k: v for k, v in self._delay.items() if k in snap.jobs}
        placer = Placer(snap, self.net)  # built when the first job is placed
        nfree = len(snap.free_gpus)
        total = snap.total_gpus
        actions, reasons, order, infeasible = [], {}, [], []
        comm_heavy, tau = self.comm_heavy, self.tau

        def nums(i, **extra):
            done_i, _, _, (amin, amax, val, unit, src, p) = keys[i]
            return dict(predicted=val, alpha_min=amin, alpha_max=amax, virtual_p=p,
                        virtual_done=done_i, virtual_pos=i, **extra)

        blocked, i = None, 0
        until = math.inf  # (quiet_until) while no action: up to when none comes
        while i < split:  # lines 3-25, pending_queue in order
            j = jobs[i]
            amin, amax, val, unit, src, p = keys[i][3]
            src_text = f"predicted {val:.0f} {unit} ({src})"
            if j.num_gpus > total:
                infeasible.append(j.id)
                reasons[j.id] = reason(ReasonCode.INFEASIBLE,
                                       f"asks {j.num_gpus} GPUs, cluster has {total}", **nums(i))
                i += 1
                continue
            if j.num_gpus > nfree:  # line 25
                blocked = f"head of pending_queue {j.id} waits for {j.num_gpus} GPUs"
                order.append(j.id)
                reasons[j.id] = reason(ReasonCode.WAIT_RESOURCES,
                                       f"needs {j.num_gpus} GPUs, {nfree} free; " + src_text,
                                       **nums(i, free_gpus=nfree))
                i += 1
                break  # (the same head blocks while the GPUs stay: ``until`` inf)
            heavy = amax / amin >= comm_heavy  # line 8
            servers, gpus, workers, alpha = placer.place(j, heavy)  # lines 9-10 / 22-23
            why = "non-communication-heavy: fewest-free servers (line 22)"
            if heavy and alpha / amin > comm_heavy + EPS:  # line 12 fails
                t0, kappa = self._delay.setdefault(j.id, (now, alpha))  # line 15
                if now > t0 + EPS and alpha < kappa - EPS:  # line 18
                    why = "communication-heavy: placement improved during the delay (line 18)"
                elif now >= t0 + tau * p - EPS:  # line 20
                    why = "communication-heavy: delay tau*p over (line 20)"
                else:  # lines 16-17: keep waiting; the loop holds the scheduler
                    blocked = f"communication-heavy head {j.id} delayed for a better placement"
                    order.append(j.id)
                    reasons[j.id] = reason(
                        ReasonCode.WAIT_RESOURCES,
                        f"communication-heavy, alpha/alpha_min {alpha / amin:.2f} > "
                        f"{comm_heavy}; delayed until {t0 + tau * p:.0f} s; " + src_text,
                        **nums(i, alpha=alpha, kappa=kappa, delay_until=t0 + tau * p))
                    # line 20 holds from t0 + tau*p - EPS on (line 18 not before the
                    # placement changes): the last time before it
                    until = math.nextafter(t0 + tau * p - EPS, -math.inf)
                    i += 1
                    break
            elif heavy:
                why = "communication-heavy: most-free servers, alpha within COMM_HEAVY (line 13)"
            placer.take(servers, gpus)
            nfree -= len(gpus)
            self._delay.pop(j.id, None)
            b, s = exclusive_config(snap, j, placer.mem)
            actions.append(StartJob(j.id, gpus, b, s, workers=workers))
            reasons[j.id] = reason(ReasonCode.STARTED, why + "; " + src_text,
                                   **nums(i, alpha=alpha, servers=len(servers)))
            i += 1
        if not actions and blocked is None and split < len(keys):  # line 2: next done in Ã1
            until = _last_before(keys[split][0])
        self._quiet = (now, until) if not actions else None
        if over:  # a job asks more than the cluster: the rest one by one, as written
            for i in range(i, len(keys)):
                j = jobs[i]
                if j.num_gpus > total and not (blocked is not None and i < split):
                    infeasible.append(j.id)
                    reasons[j.id] = reason(ReasonCode.INFEASIBLE,
                                           f"asks {j.num_gpus} GPUs, cluster has {total}",
                                           **nums(i))
                else:
                    order.append(j.id)
                    reasons[j.id] = _waiting(keys[i], i, split, blocked)
            return make_plan(self.name, actions, order, reasons, infeasible,
                             [keep_running_segment(snap)])
        # the rest (blocked behind the head, or not yet complete in Ã1) waits as it stands
        # their keys from position i on (the list itself: a kept order copies its lists
        # before changing them while a plan still holds them): reasons made on demand
        tail = Frozen(ids, i)
        return make_plan(self.name, actions, Joined(tuple(order), tail), reasons, infeasible,
                         [(tail, _Waiting(keys, i, split, blocked)),
                          keep_running_segment(snap)])


def _last_before(done: float) -> float:
    """The largest ``now`` for which line 2's ``bisect_left(keys, (now + EPS, inf))`` leaves
    out a job done in Ã1 at ``done``: ``now + EPS < done`` in floats (monotone in ``now``)."""
    t = done - EPS
    while t + EPS >= done:
        t = math.nextafter(t, -math.inf)
    return t


def _waiting(k, i, split, blocked):
    """The WAIT_ORDER reason of the waiting job at position ``i`` of the order (key ``k``)."""
    done_i, _, _, (amin, amax, val, unit, src, p) = k
    text = f"predicted {val:.0f} {unit} ({src})"
    if i < split:
        text = blocked + "; " + text
    else:
        text = f"not yet complete in the virtual SRPT (at {done_i:.0f} s); " + text
    return reason(ReasonCode.WAIT_ORDER, text, predicted=val, alpha_min=amin, alpha_max=amax,
                  virtual_p=p, virtual_done=done_i, virtual_pos=i)


class _Waiting:
    """The WAIT_ORDER reasons of the jobs from position ``start`` of the order on (the
    order's keys ``keys``, not changed while this is held), made when a consumer asks."""

    __slots__ = ("keys", "start", "split", "blocked", "index")

    def __init__(self, keys, start, split, blocked):
        self.keys, self.start, self.split, self.blocked = keys, start, split, blocked
        self.index = None

    def __call__(self, jid):
        if self.index is None:
            keys = self.keys
            self.index = {keys[i][2]: i for i in range(self.start, len(keys))}
        i = self.index[jid]
        return _waiting(self.keys[i], i, self.split, self.blocked)
