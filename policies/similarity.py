"""Model-similarity round-based scheduling with job packing (seed 002, Thanapol et al.,
Appl. Sci. 2024) on heterogeneous GPU types.

* **Algorithm 1 / eq. 3** — a job is the vector of its model's characteristics; its
  closest reference is the recorded model ``ff`` with the largest cosine similarity
  ``j·ff / (‖j‖‖ff‖)``.  Feature scaling (the paper leaves it open; our choice): every
  characteristic is taken as ``log(1 + x)`` so that parameter counts in the millions do not
  swamp layer counts; ties between equally similar references break by name.
* **Algorithm 2** — at every round (``round_length``, §5.2: 3, 6, 12 or 30 min) the queue
  is walked in order (with re-scheduling, ``cd``: unfinished jobs of earlier rounds first,
  then new ones, each by arrival — §4.2; without it running jobs keep their allocation and
  only waiting jobs are walked).  For each job the closest reference's recorded
  performance gives suggestions ``sch_m`` (GPU type, GPU count, batch) in descending
  throughput (§4.1); the first whose GPU count fits the type's remaining GPUs is taken
  (lines 7-13).  A job none of whose suggestions fits stays queued and the walk goes on
  with the next job (the listing would loop on it; our reading).
* **Algorithm 3** (``jp``) — while jobs are still queued, every scheduled job alone on one
  GPU may take one partner from the queue (arrival order relaxed), if the two fit the
  GPU's memory — the partner's batch overridden to fit when the job allows it (§4.3) —
  chosen to maximise first the scheduled job's packed throughput, then the pair's
  combined throughput (line 6).  At most two jobs per GPU.

The decision variables follow §5.2's experiments (``decide``): ``gpu`` (type only; count
and batch as submitted), ``gpu_ngpu`` (type and count; the count only within
``Job.gpu_range``), ``gpu_ngpu_bs`` (and the global batch within ``Job.batch_range``).

"Recorded performance" is the reference application's throughput model on each type
(``snapshot.profiles`` × ``snapshot.gpu_types``): what profiling a reference job on the
cluster records.  Suggestions are ranked by samples per second: with a fixed batch this is
the paper's iterations per second (eq. 2); across batch sizes (``gpu_ngpu_bs``) the paper's
eq. 2 would favour small batches that lengthen training in samples, so we rank by samples
per second (our choice, stated).  Co-located throughput divides by ξ (seed 000 eq. 5-6,
``snapshot.interference``) of the two references.

Decisions are made only at round boundaries, as the paper's rounds (GPUs freed mid-round
stay idle until the next round, §6.1): the policy sets ``rounds_only``, so the simulator
calls it only at multiples of ``round_length`` and the daemon at each cycle (one cycle =
one round: run the daemon with the round length as its period).  Pure: the reference database is
``snapshot.predictors["similarity"]`` (a :class:`SimilarityDB`), built in ``gimbalctl``.
"""
from __future__ import annotations

import dataclasses
import math
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain
from typing import Mapping, Optional

from .base import Policy, exclusive_config, keep_running_reasons
from .model import ClusterSnapshot, Job, SUBMIT_ORDER
from .plan import ReasonCode, make_plan, reason
from .registry import register
from .similarity_kept import SimilarityState, kept_schedule
from .typed_rounds import apply_decisions, node_maps, start_on, type_capacity

DECIDE = ("gpu", "gpu_ngpu", "gpu_ngpu_bs")
# model characteristics, in vector order: layers by kind, parameters (M), forward GFLOPs
# and activation MiB per sample (gimbalctl/zoo/features.py measures them)
FEATURES = ("conv", "linear", "norm", "activation", "pool", "recurrent", "attention",
            "embedding", "params_m", "gflops", "act_mb")
BATCHES = (32, 64, 128, 256, 512, 1024, 2048, 4096)  # candidate global batches (§5.1 uses 32..512)


def cosine(a, b) -> float:
    """Seed 002 eq. 3: cos θ = Σ a_i b_i / (√Σ a_i² √Σ b_i²); 0 for a zero vector."""
    dot = sum(x * y for x, y in zip(a, b))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    if na == 0.0 or nb == 0.0:
        return 0.0
    return dot / (na * nb)


def scaled(v) -> tuple[float, ...]:
    """Feature scaling before eq. 3 (our choice, see module doc): log(1 + x)."""
    return tuple(math.log1p(max(0.0, float(x))) for x in v)


@lru_cache(maxsize=4096)
def _closest(v, refs) -> Optional[tuple[str, float]]:
    """The most similar of ``refs`` ((name, vector or None) in name order) to vector ``v``
    (eq. 3 on scaled features; a later reference wins only by more than 1e-12)."""
    sv = scaled(v)
    best = None
    for ff, fv in refs:
        if fv is None:
            continue
        s = cosine(sv, scaled(fv))
        if best is None or s > best[1] + 1e-12:
            best = (ff, s)
    return best


@dataclass(frozen=True)
class SimilarityDB:
    """The reference database: each model's raw characteristics (``features``, keyed by the
    application name jobs use) and which of them are references with recorded
    performance (``references``)."""

    features: Mapping[str, tuple[float, ...]]
    references: tuple[str, ...]
    exclude_self: bool = False  # ablation: never match a job to its own model

    def closest(self, app: str) -> Optional[tuple[str, float]]:
        """Algorithm 1: similarity of ``app`` to every reference; the most similar
        (ties by name), or ``None`` when ``app`` has no recorded characteristics.

        The answer is a pure function of ``app``'s vector and the references' (name,
        vector) pairs; with tuple vectors it is memoised by those values
        (:func:`_closest`), as a round-based policy asks it for every job at every round."""
        v = self.features.get(app)
        if v is None:
            return None
        refs = tuple((ff, self.features.get(ff)) for ff in sorted(self.references)
                     if not (self.exclude_self and ff == app))
        try:
            return _closest(v, refs)
        except TypeError:  # an unhashable vector (a list): computed without the memo
            return _closest.__wrapped__(v, refs)


@dataclass(frozen=True)
class Option:
    """One suggestion of ``sch_m``: run on ``ngpu`` GPUs of ``gpu_type`` with global batch
    ``batch``; ``tput`` = estimated samples/s from the reference."""

    gpu_type: str
    ngpu: int
    batch: int
    tput: float


@register("similarity")
class Similarity(Policy):
    """Model-similarity round-based scheduling with job packing (seed 002 Alg. 1-3)."""

    def __init__(self, decide: str = "gpu_ngpu_bs", cd: bool = True, jp: bool = True,
                 round_length: float = 180.0):
        if decide not in DECIDE:
            raise ValueError(f"similarity: decide must be one of {', '.join(DECIDE)}, not {decide!r}")
        if not round_length > 0:
            raise ValueError(f"similarity: round_length must be > 0 seconds, not {round_length!r}")
        self.decide, self.cd, self.jp = decide, bool(cd), bool(jp)
        self.round_length = float(round_length)
        self.preemptive = self.cd
        self._kept = SimilarityState()  # the queue kept across calls (policies.similarity_kept)

    rounds_only = True
    # (base.Policy) Algorithms 1-3 read the jobs' models, GPU counts and batches, the
    # GPUs, the reference database and the interference table, never the time: a round at
    # which nothing changed since a round that changed nothing is answered without a call
    tick_invariant = True

    # ------------------------------------------------------------------ helpers
    def _tput(self, snap, ref: str, gtype: str, ngpu: int, batch: int, per_node: int) -> float:
        prof = snap.profiles.get(ref)
        if prof is None:
            return 0.0
        local = batch / ngpu
        s = prof.min_accum_steps(local)
        nodes = -(-ngpu // max(per_node, 1))
        return snap.gpu_types.speed(ref, gtype) * batch / prof.iter_time(local, ngpu, nodes, s)

    def _counts(self, job: Job, total: int) -> list[int]:
        if self.decide == "gpu" or job.gpu_range is None:
            return [job.num_gpus]
        lo, hi = job.gpu_range
        out = {c for c in (1, 2, 4, 8, 16, 32, 64) if lo <= c <= hi}
        if lo <= job.num_gpus <= hi:
            out.add(job.num_gpus)
        return sorted(c for c in out if c <= total)

    def _batches(self, job: Job) -> list[int]:
        if self.decide != "gpu_ngpu_bs" or job.batch_range is None:
            return [job.global_batch]
        lo, hi = job.batch_range
        out = {b for b in BATCHES if lo <= b <= hi} | {job.global_batch}
        return sorted(out)

    def suggestions(self, snap, job: Job, ref: Optional[str], types) -> list[Option]:
        """``sch_m`` of §4.1: the reference's recorded configurations in descending
        throughput (ties: type name, fewer GPUs, submitted batch first)."""
        opts = []
        for gtype, (total, per_node, mem) in types.items():
            for n in self._counts(job, total):
                if n > total:
                    continue
                for b in self._batches(job):
                    tput = self._tput(snap, ref, gtype, n, b, per_node) if ref else 0.0
                    opts.append(Option(gtype, n, b, tput))
        opts.sort(key=lambda o: (-o.tput, o.gpu_type, o.ngpu, o.batch != job.global_batch, o.batch))
        return opts

    # ------------------------------------------------------------------ schedule
    def schedule(self, snap: ClusterSnapshot):
        plan = kept_schedule(self, snap, self._kept)
        if plan is not None:
            return plan
        db: Optional[SimilarityDB] = snap.predictors.get("similarity")
        waiting = snap.pending()
        reasons: dict = {}
        types = type_capacity(snap)
        cap = {t: v[0] for t, v in types.items()}
        gtype_of, _ = node_maps(snap)
        ref_cache: dict[str, Optional[tuple[str, float]]] = {}

        def ref_for(app):
            if app not in ref_cache:
                ref_cache[app] = db.closest(app) if db is not None else None
            return ref_cache[app]

        if self.cd:  # everything is re-allocated: all GPUs count, queue = started then new
            started = sorted((j for j in snap.jobs.values() if j.start_time is not None),
                             key=SUBMIT_ORDER)
            queue = started + [j for j in waiting if j.start_time is None]
        else:  # running jobs keep their GPUs: only free GPUs count
            queue = list(waiting)
            for g, occ in snap.gpu_jobs.items():
                if occ:
                    cap[gtype_of[g.node]] -= 1

        # ---- Algorithm 2: walk the queue, take the first suggestion that fits
        decided: dict[str, Option] = {}
        refs: dict[str, tuple] = {}
        sugg: dict[tuple, list[Option]] = {}
        for job in queue:
            if not any(c > 0 for c in cap.values()):
                break
            self._choose(snap, job, cap, types, ref_for, sugg, decided, refs)

        # ---- placement: keep exact matches, pre-empt the rest, start the decisions
        started_why, kept_why = self._why(refs)
        preempted, starts, placed, batch_of, why = apply_decisions(
            snap, queue, decided, self.cd, started_why, kept_why)
        reasons.update(why)

        # ---- Algorithm 3: pack queued jobs beside jobs alone on one GPU
        queued = [j for j in queue if j.id not in placed]
        if self.jp and queued:
            pool = _Pool(self, queued)
            self._pack(snap, queue, placed, preempted, starts, batch_of, pool, ref_for, reasons)
            queued = [j for j in queued if j.id not in pool.gone]
        actions = list(preempted.values()) + starts
        order = []
        for j in queued:
            order.append(j.id)
            if j.id not in reasons or reasons[j.id].code is not ReasonCode.PREEMPTED:
                reasons[j.id] = reason(ReasonCode.WAIT_RESOURCES,
                                       "no suggestion fits the GPUs left this round")
        keep_running_reasons(snap, reasons)
        return make_plan(self.name, actions, order, reasons)

    def _why(self, refs: dict):
        """(reason of a started job, reason of a kept one) for apply_decisions."""
        def started_why(job, opt):
            code = ReasonCode.RESUMED if job.start_time is not None else ReasonCode.STARTED
            return reason(code, f"{opt.ngpu} x {opt.gpu_type}, batch {opt.batch}: the fastest "
                          f"suggestion that fits", **self._nums(refs.get(job.id), opt))

        kept_reason: dict[tuple, object] = {}

        def kept_why(job, opt):  # one shared immutable reason per (reference match, option)
            m = refs.get(job.id)
            # by identity: ``refs`` and ``sugg`` hold both objects for the call, and jobs of
            # one class share them (hashing the Option dataclass cost more than the reason)
            key = (id(m), id(opt))
            r = kept_reason.get(key)
            if r is None:
                r = kept_reason[key] = reason(ReasonCode.KEEP_RUNNING,
                                              "same decision as last round",
                                              **self._nums(m, opt))
            return r
        return started_why, kept_why

    def _choose(self, snap, job: Job, cap: dict, types, ref_for, sugg: dict, decided: dict,
                refs: dict) -> None:
        """Algorithm 2 for one job: the first suggestion whose GPU count fits the type's
        remaining GPUs (``cap``, decreased), recorded in ``decided`` and ``refs``."""
        m = ref_for(job.app)
        ref = m[0] if m else None
        # sch_m depends on the job only through these fields: once per class and round
        cls = (ref, job.num_gpus, job.gpu_range, job.global_batch, job.batch_range)
        try:
            opts = sugg.get(cls)
        except TypeError:  # an unhashable range (a list): no memo for this job
            cls, opts = None, None
        if opts is None:
            opts = self.suggestions(snap, job, ref, types)
            if cls is not None:
                sugg[cls] = opts
        for opt in opts:
            if opt.ngpu <= cap[opt.gpu_type]:
                decided[job.id] = opt
                refs[job.id] = m
                cap[opt.gpu_type] -= opt.ngpu
                break

    def _pack(self, snap, walked, placed, preempted, starts, batch_of, pool, ref_for,
              reasons) -> None:
        """Algorithm 3 over ``pool`` (the queued jobs that may be packed): every job of
        ``walked`` (queue order) placed alone on one GPU may take one partner (in place:
        ``placed``, ``preempted``, ``starts``, ``reasons``; the pool's ``gone``)."""
        gtype_of, mem_of_node = node_maps(snap)
        # jobs placed per GPU (only the count is read: counted at C speed)
        on_gpu: Counter = Counter(chain.from_iterable(placed.values()))
        # jobs started by Alg. 2 this round (the partners Alg. 3 adds below come from the
        # queue, never from the hosts it walks)
        started_before = {x.job_id for x in starts}
        # hosts that found no partner, by what _partner reads of the host (application,
        # batch, GPU type and memory, micro-batch in force): a host alike finds none either
        # (the pool only loses jobs within a round, and a candidate's fit and score are
        # those of its class)
        none_for: set = set()
        pool.skips = 0  # hosts skipped so (tests/policies/test_similarity_kept_differential.py)
        for sj in [j for j in walked if j.id in placed and len(placed[j.id]) == 1]:
            if not pool.left:
                break
            g = placed[sj.id][0]
            if on_gpu[g] != 1:
                continue
            started_now = sj.id in preempted or sj.id in started_before
            kept = sj.allocation if sj.running and not started_now else None
            alike = (sj.app, batch_of[sj.id], gtype_of[g.node], mem_of_node[g.node],
                     kept is None, None if kept is None else kept.sub_batch)
            if alike in none_for:
                pool.skips += 1
                continue
            best = self._partner(snap, sj, batch_of[sj.id], gtype_of[g.node],
                                 mem_of_node[g.node], pool, ref_for, kept)
            if best is None:
                none_for.add(alike)
                continue
            job, b, score = best
            pool.take(job)
            placed[job.id] = (g,)
            on_gpu[g] += 1
            nums = dict(batch=b, host_tput=score[0], combined_tput=score[1])
            cur = job.allocation
            if (job.id in preempted and cur.gpus == (g,)
                    and (cur.global_batch or job.global_batch) == b):
                del preempted[job.id]  # packed again exactly where it runs
                reasons[job.id] = reason(ReasonCode.KEEP_RUNNING, f"packed again beside {sj.id}",
                                         **nums)
                continue
            starts.append(start_on(snap, job, (g,), b, (sj.id,)))
            reasons[job.id] = reason(ReasonCode.STARTED_SHARED,
                                     f"packed beside {sj.id} on {g.node}:{g.index} (Alg. 3)", **nums)

    @staticmethod
    def _nums(m, opt: Optional[Option]) -> dict:
        out = {}
        if m is not None:
            out["similarity"] = m[1]
        if opt is not None:
            out.update(ngpu=opt.ngpu, batch=opt.batch, est_samples_per_s=opt.tput)
        return out

    def _mem(self, snap, job: Job, ngpu: int, batch: int, memo: Optional[dict] = None) -> float:
        prof = snap.memory.get(job.app)
        if prof is None:
            return 0.0
        key = (job.app, ngpu, batch)
        if memo is not None and key in memo:
            return memo[key]
        view = dataclasses.replace(job, num_gpus=ngpu, global_batch=batch)
        b, _ = exclusive_config(snap, view)
        v = prof.mem_mb(b)
        if memo is not None:
            memo[key] = v
        return v

    def _candidate(self, snap, job: Job, used: float, gpu_mem: float, gtype: str, r_sj: str,
                   base_sj: float, ref_for, memo: dict):
        """(batch, key) of ``job`` as a partner (Alg. 3 line 6), ``None`` if nothing fits."""
        m = ref_for(job.app)
        r = m[0] if m else job.app
        fits = [b for b in sorted(self._batches(job), reverse=True)
                if used + self._mem(snap, job, 1, b, memo) <= gpu_mem]
        if not fits:
            return None
        b = job.global_batch if job.global_batch in fits else fits[0]
        mine = base_sj / snap.interference.ratio(r_sj, r)
        theirs = self._tput(snap, r, gtype, 1, b, 1) / snap.interference.ratio(r, r_sj)
        return b, (mine, mine + theirs)

    def _partner(self, snap, sj: Job, sj_batch: int, gtype: str, gpu_mem: float,
                 pool: "_Pool", ref_for, kept=None):
        """Alg. 3 line 6: the queued job that maximises (packed throughput of ``sj``,
        combined throughput), memory permitting; ties by arrival.  ``kept``: the allocation
        ``sj`` keeps running with (its memory is that of its micro-batch in force).

        Queued jobs of one class (application, batch, batch range) give the same
        candidate, so each class is evaluated once, for its earliest job.  When the classes'
        scores are apart by more than the 1e-12 tie tolerance (or exactly equal) the
        comparison is a strict order and the earliest job of the best class is the answer
        of the walk over the queue; otherwise the queue is walked as written."""
        m_sj = ref_for(sj.app)
        r_sj = m_sj[0] if m_sj else sj.app
        base_sj = self._tput(snap, r_sj, gtype, 1, sj_batch, 1)
        memo = pool.mem_memo
        used = self._mem(snap, sj, 1, sj_batch, memo)
        prof = snap.memory.get(sj.app)
        if kept is not None and prof is not None:  # sub_batch: the largest micro-batch
            used = max(used, prof.mem_mb(kept.sub_batch))
        by_class = {}
        firsts = []
        # a class's candidate is a function of the class and of these (the host's numbers):
        # kept for the round, as hosts alike ask every class again after each take
        cands, host = pool.cand_memo, (used, gpu_mem, gtype, r_sj, base_sj)
        for ck, (pos, job) in pool.firsts():
            c = cands.get((ck, host), _MISS)
            if c is _MISS:
                c = cands[ck, host] = self._candidate(snap, job, used, gpu_mem, gtype, r_sj,
                                                      base_sj, ref_for, memo)
            by_class[ck] = c
            if c is not None:
                firsts.append((pos, job, c))
        keys = [c[1] for _, _, c in firsts]
        if all(_apart(x, y) for i, x in enumerate(keys) for y in keys[i + 1:]):
            best = None
            for pos, job, (b, key) in firsts:
                if best is None or key > best[2] or (key == best[2] and pos < best[0]):
                    best = (pos, job, key, b)
            return None if best is None else (best[1], best[3], best[2])
        best, best_key = None, None
        for ck, job in pool.walk():
            c = by_class[ck]
            if c is None:
                continue
            b, key = c
            if best_key is None or key[0] > best_key[0] + 1e-12 or (
                    abs(key[0] - best_key[0]) <= 1e-12 and key[1] > best_key[1] + 1e-12):
                best, best_key = (job, b, key), key
        return best


_MISS = object()


def _apart(x: tuple, y: tuple) -> bool:
    """The tolerant comparison of :meth:`Similarity._partner` orders ``x`` and ``y`` as the
    exact lexicographic one does (no pair within the 1e-12 tolerance but unequal)."""
    if abs(x[0] - y[0]) > 1e-12:
        return True
    return x[0] == y[0] and (abs(x[1] - y[1]) > 1e-12 or x[1] == y[1])


class _Pool:
    """The queued jobs Algorithm 3 may pack, by class (application, batch, batch range) in
    queue order; taken jobs leave it."""

    def __init__(self, policy: Similarity, queued: list[Job]):
        self.classes: dict[tuple, list[tuple[int, Job]]] = {}
        self.cls_of: dict[str, tuple] = {}
        for pos, job in enumerate(queued):
            if policy.decide == "gpu" or job.gpu_range is None:
                if job.num_gpus != 1:
                    continue
            elif not job.gpu_range[0] <= 1:
                continue
            ck = (job.app, job.global_batch, job.batch_range)
            self.classes.setdefault(ck, []).append((pos, job))
            self.cls_of[job.id] = ck
        self.head = dict.fromkeys(self.classes, 0)
        self.gone: set[str] = set()
        self.left = len(queued)
        self.mem_memo: dict = {}
        self.cand_memo: dict = {}  # (class, host's numbers) -> candidate (Similarity._partner)

    def firsts(self) -> list[tuple[tuple, tuple[int, Job]]]:
        """(class, (queue position, job)) of each class's earliest remaining job."""
        out = []
        for ck, lst in self.classes.items():
            i = self.head[ck]
            while i < len(lst) and lst[i][1].id in self.gone:
                i += 1
            self.head[ck] = i
            if i < len(lst):
                out.append((ck, lst[i]))
        return out

    def walk(self):
        """(class, job) of every remaining candidate in queue order."""
        rest = [(pos, ck, job) for ck, lst in self.classes.items()
                for pos, job in lst[self.head[ck]:] if job.id not in self.gone]
        for _, ck, job in sorted(rest, key=lambda e: e[0]):
            yield ck, job

    def take(self, job: Job) -> None:
        self.gone.add(job.id)
        self.left -= 1
