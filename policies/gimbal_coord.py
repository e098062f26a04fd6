"""GIMBAL worker coordination (seed 004, Yang, Cui et al.): packing sets, local objectives,
Algorithm 1.  Pure: a :class:`~policies.model.ClusterSnapshot` (or hand-built job sets) in,
per-worker allocation records out.  Not a registered policy: the host schedulers
(``policies/lucid.py``, ``gandiva.py``, ``gavel_pack.py``) call :func:`coordinate` every round
(through :class:`policies.gimbal_walk.CoordKept`, which keeps the walks, packing sets and
per-set records between rounds and gives the same answer; this module's path is the oracle).

* §5.1 packing constraints — :func:`packing_sets` groups running jobs that share GPUs into
  packing sets; :func:`packing_violations` lists what breaks the rules: at most two workers per
  GPU; in each set one job J_max with the largest world size, every other job co-located with
  J_max only, on GPUs of J_max (jobs of equal world size only in balanced co-location, i.e. on
  the same GPUs).  :func:`placement_ok` asks the same for a candidate placement.
* §5.2 local objectives and priorities — eq. 1/2 (JCT), eq. 3/4 (deadline), eq. 5/6
  (makespan): :func:`local_objective`, :func:`job_priority`.
* §5.2 Algorithm 1 — :func:`coordination_search`: J_max against the rest (lines 1-4), swell the
  high-priority subset (line 5), GeneratePrimitives (lines 11-20) mapped to LGRR (10 % MPS
  steps) and LISS (sample stealing inside a job, global batch exact) as §4.2 maps them, the
  runtime information of line 8 taken from the throughput model, early exit after three
  consecutive attempts without gain (lines 9-10).

Choices where the paper is open or inconsistent (ours, documented):

* **Priority direction.** Algorithm 1 line 3 makes the subset with the larger Priority value the
  high-priority one.  Eq. 2 (−Utilization) agrees with its prose (low-utilisation jobs are
  swelled).  Eq. 4 (Deadline − Remaining/Throughput, the slack) and eq. 6 (−duration) as printed
  would swell the jobs with the most slack and the shortest jobs, while their prose says the
  opposite ("jobs closer to their deadlines have higher priority"; "shorter jobs are squeezed to
  speed up the completion of longer jobs").  We return the equations' values unchanged
  (:func:`job_priority`) and rank by the prose: importance = eq. 2 value, −eq. 4 value,
  −eq. 6 value (:func:`importance`).  A subset's priority is the mean importance of its jobs.
* **Eq. 3** as printed, max(0, Deadline − Remaining/Throughput), is the positive slack; the prose
  says "minimize the maximum duration of jobs that exceed their deadlines".  We use the overrun
  max(0, Remaining/Throughput − (Deadline − now)).  Jobs without a deadline never overrun and
  have infinite slack (lowest deadline priority).
* **Utilization** (eq. 2) is ``snap.predictors["gpu_util"][app]`` when given (a measured GPU
  utilisation in [0, 1]), else the compute fraction of the job's iteration alone
  (t_comp / t_iter, seed 000 eq. 3/7): communication leaves the GPU idle.
* **Runtime information** (line 8) is the throughput model: a worker's iteration time is the
  seed 000 eq. 7 time of its sample share, times ξ = ``interference.ratio(app, other, mps,
  other_mps)`` when another job's worker shares its GPU, else ``interference.mps_alone(app,
  mps)``; a job's step time is its slowest worker's (synchronous data parallelism).
* **The walk.** Line 5 (swell the high-priority subset) is applied as written, without a gain
  test: it is what lets a job squeezed earlier recover once it has become high priority (with
  the min-max objectives, eq. 3 and 5, a swell of a job that is not the worst one never
  "improves" the objective and would otherwise never be kept).  Every later attempt is kept
  only if it beats the best configuration seen; an attempt without gain is not undone before
  the next (undoing would regenerate the same attempt): the search walks on and stops after
  three consecutive attempts that do not beat the best — the concave-curve argument of §5.2.
* **Stragglers.** A worker is slow when its iteration time exceeds the fastest worker's of the
  same job by more than ``straggler_tol`` (5 %).  A LISS step re-splits a job's global batch in
  proportion to its workers' current sample rates (LB-BSP's rule), integer shares by largest
  remainder, at least one sample per worker; micro-batches stay, accumulation covers the share.
* **Switching cost** (ours; the paper's search is live and takes minutes, §7.4, so it never
  restarts every few seconds).  Run at every round from the configuration the set runs, the
  search as written can return a configuration worse than that one by its own objective (the
  swell of line 5 is kept without a gain test), and under the min-max objectives two jobs
  whose remaining times are nearly equal trade places at every round: on the first 10,000
  Philly jobs at 64x8, gavel+gimbal switched one job's MPS share 60 -> 70 -> 60 % 14,499
  times, and 102,621 of its 246,855 coordination resizes made the objective worse; each
  switch is a context change in the paper (3.6 s) and a checkpoint and relaunch on Slurm
  (docs/gimbal.md, 19 s measured on an H100).  With ``switch_cost`` > 0 the best
  configuration is applied only when its objective, each job whose MPS share it changes
  charged ``switch_cost`` seconds more remaining time, is not above the start's (float
  tolerance 1e-9); else the set keeps its start (``SearchResult.declined``).  Ties apply, so a
  swell that costs the objective nothing (a deadline set with no job late) still lets a
  squeezed job recover.  LISS changes are free (§5.2: "the switch involves only parameter
  changes").  ``switch_cost=0`` is Algorithm 1 as above; the hosts charge
  :data:`LGRR_SWITCH_S`.
* **Ablations.** ``lgrr=False``: no MPS changes; the J_max-high-priority branch then balances
  J_max's own workers by LISS instead.  ``liss=False``: no share changes; the J_max-low-priority
  branch then swells/squeezes J_max's slow/fast workers by LGRR instead.

Our addition for Slurm (not in the paper, whose runtime sets any share): **a worker's MPS
ceiling** ``WorkerAlloc.mps_cap``.  On Slurm a job's ``gres/mps`` units fix its
``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` for the life of the job and gimbal-run never loosens it,
so no share above them can take effect.  Every LGRR step (the swell of line 5, the swell of
J_max's slow workers in lines 15-17, the squeezes of lines 12-13 and 19-20) is taken as
min(step, ceiling): a swell that would pass the ceiling is no option (a worker at its ceiling
stays), and the start configuration, a worker alone on its GPU and a restored job run at the
ceiling, not at 100 %.  Without ceilings (``None``, the simulator) nothing changes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping, Optional

from .model import ClusterSnapshot, Gpu, Job, SUBMIT_ORDER, WorkerAlloc, identity_memo
from .plan import ResizeJob
from .records import any_shared_gpu

OBJECTIVES = ("jct", "deadline", "makespan")
LGRR_STEP = 10  # percent of the GPU per LGRR step (§4.1, §7.4); same grid as launcher.mps
LGRR_FLOOR = 10
MAX_FAILS = 3  # early exit (Algorithm 1 line 9)
MAX_ATTEMPTS = 40  # a guard; §5.2 bounds the search by 10 x (M - 1) LGRR steps
# seconds one LGRR switch costs the switched job (§7.4: "the average overhead for switching
# once is 3.6 seconds", with the paper's CUDA context pool): what the hosts charge a search's
# result for each job whose MPS share it changes (module doc, "Switching cost")
LGRR_SWITCH_S = 3.6


def lgrr_squeeze(pct: Optional[int], step: int = LGRR_STEP) -> int:
    """One LGRR squeeze on the 10 % grid, never below 10 % (None = 100 %)."""
    p = 100 if pct is None else int(pct)
    return max(LGRR_FLOOR, (p - 1) // step * step if p % step else p - step)


def lgrr_swell(pct: Optional[int], step: int = LGRR_STEP) -> int:
    p = 100 if pct is None else int(pct)
    return min(100, (p // step + 1) * step)


def capped(w: WorkerAlloc, pct: int) -> int:
    """``pct`` within the worker's MPS ceiling (Slurm's gres/mps units; module doc)."""
    return pct if w.mps_cap is None else min(pct, w.mps_cap)


# ---------------------------------------------------------------- §5.1 packing sets
@dataclass(frozen=True)
class PackingSet:
    """A set of packed jobs: ``jmax`` (largest world size) and the others, all on its GPUs."""

    jmax: str
    members: tuple[str, ...]  # jmax first, then the others in id order

    @property
    def others(self) -> tuple[str, ...]:
        return self.members[1:]


def _components(gpu_jobs: Mapping[Gpu, tuple[str, ...]]) -> list[set[str]]:
    parent: dict[str, str] = {}

    def find(x):
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for ids in gpu_jobs.values():
        for a in ids:
            find(a)
        for a, b in zip(ids, ids[1:]):
            parent[find(a)] = find(b)
    comps: dict[str, set[str]] = {}
    for x in list(parent):
        comps.setdefault(find(x), set()).add(x)
    return list(comps.values())


def _jmax(ids: Iterable[str], world: Mapping[str, int],
          since: Optional[Mapping[str, float]] = None) -> str:
    """Largest world size; ties (balanced co-location, the paper is silent) go to the job
    that started first (``since``: job id -> start time), then by id."""
    since = since or {}
    return min(ids, key=lambda j: (-world[j], since.get(j, 0.0), j))


def _breaches(gpu_jobs: Mapping[Gpu, tuple[str, ...]],
              job_gpus: Mapping[str, tuple[Gpu, ...]]) -> Iterator[str]:
    """What breaks §5.1 in a placement, one message at a time (lazily: a caller that stops at
    the first one formats no other)."""
    world = {j: len(g) for j, g in job_gpus.items()}
    for g, ids in gpu_jobs.items():
        if len(ids) > 2:
            yield f"GPU {g.node}:{g.index} holds {len(ids)} workers (at most 2)"
    for comp in _components(gpu_jobs):
        if len(comp) < 2:
            continue
        jm = _jmax(comp, world)
        mine = set(job_gpus[jm])
        for j in sorted(comp - {jm}):
            if not set(job_gpus[j]) <= mine:
                yield f"job {j} is packed outside the GPUs of its set's J_max {jm}"
            if world[j] == world[jm] and set(job_gpus[j]) != mine:
                yield (f"jobs {j} and {jm} have the same world size but are not "
                       "co-located on the same GPUs")
            for g in job_gpus[j]:
                others = set(gpu_jobs.get(g, ())) - {j, jm}
                if others:
                    yield (f"job {j} is co-located with {sorted(others)}, not only with "
                           f"J_max {jm}")


def packing_violations(gpu_jobs: Mapping[Gpu, tuple[str, ...]],
                       job_gpus: Mapping[str, tuple[Gpu, ...]]) -> list[str]:
    """What breaks §5.1 in a placement (empty list: none).  ``gpu_jobs``: GPU -> job ids on it;
    ``job_gpus``: job id -> its GPUs (the world size is their number)."""
    return list(_breaches(gpu_jobs, job_gpus))


def packing_ok(gpu_jobs: Mapping[Gpu, tuple[str, ...]],
               job_gpus: Mapping[str, tuple[Gpu, ...]]) -> bool:
    """``not packing_violations(gpu_jobs, job_gpus)``, stopping at the first breach."""
    return next(_breaches(gpu_jobs, job_gpus), None) is None


def placement_ok(snap: ClusterSnapshot, job: Job, gpus: tuple[Gpu, ...]) -> bool:
    """Would placing ``job`` on ``gpus`` keep §5.1?  (The Fig. 7 rule: a new job packs only
    inside one set's J_max, on GPUs that hold J_max alone.)"""
    gj = {g: tuple(ids) for g, ids in snap.gpu_jobs.items()}
    jg = {j.id: j.allocation.gpus for j in snap.jobs.values() if j.running}
    for g in gpus:
        gj[g] = gj.get(g, ()) + (job.id,)
    jg[job.id] = tuple(gpus)
    return not packing_violations(gj, jg)


def packing_sets(snap: ClusterSnapshot) -> tuple[PackingSet, ...]:
    """Packing sets (two or more running jobs sharing GPUs) that keep §5.1, by J_max id.  A
    set breaking the rules is left out: GIMBAL does not coordinate it (§5: it would run such
    jobs one after the other)."""
    if not any_shared_gpu(snap):
        return ()  # no GPU holds two jobs: no set (the walk below would find none)
    jg = {j.id: j.allocation.gpus for j in snap.jobs.values()
          if j.running and j.allocation is not None}
    gj = {g: tuple(i for i in ids if i in jg) for g, ids in snap.gpu_jobs.items()}
    world = {j: len(g) for j, g in jg.items()}
    out = []
    comps = _components(gj)
    where = {j: k for k, comp in enumerate(comps) for j in comp}
    per_comp: dict[int, dict] = {}  # the GPUs of each component, one pass over the cluster
    for g, ids in gj.items():
        if ids:
            per_comp.setdefault(where[ids[0]], {})[g] = ids
    for k, comp in enumerate(comps):
        if len(comp) < 2:
            continue
        sub_gj = per_comp.get(k, {})
        if packing_violations(sub_gj, {j: jg[j] for j in comp}):
            continue
        since = {j: snap.jobs[j].start_time or 0.0 for j in comp}
        jm = _jmax(comp, world, since)
        out.append(PackingSet(jm, (jm,) + tuple(sorted(comp - {jm}))))
    return tuple(sorted(out, key=lambda s: s.jmax))


# ---------------------------------------------------------------- the throughput model
@dataclass(frozen=True)
class JobInfo:
    """What the coordinator knows of one job of a set (the runtime monitor's view)."""

    job: Job
    remaining_steps: float
    deadline_left: float = math.inf  # Deadline_j - now (s)
    utilization: float = 1.0  # eq. 2
    num_nodes: int = 1


Config = Mapping[str, tuple[WorkerAlloc, ...]]


class RateModel:
    """Per-worker iteration times from the snapshot's fitted models (see module doc).  The
    model's answers are pure functions of their arguments and are memoised per instance
    (one :func:`coordinate` call, or a host's whole run through
    :class:`policies.gimbal_walk.CoordKept`): ``_t`` and ``_xi`` hold the iteration time and
    the interference factor, ``_w`` their product per worker, keyed by every field the product
    reads (the job's application, GPU count and node count; the worker's share, micro-batch,
    accumulation steps and MPS share; the partner): a hit is the float a miss computes.
    ``_w`` is emptied when it passes ``W_CAP`` entries (a memo: nothing but its size changes)."""

    W_CAP = 1 << 18

    def __init__(self, profiles, interference):
        self.profiles = profiles
        self.interference = interference
        self._t: dict = {}
        self._xi: dict = {}
        self._w: dict = {}

    def _product(self, info: JobInfo, w: WorkerAlloc,
                 partner: Optional[tuple[str, Optional[int]]]) -> float:
        app = info.job.app
        k = info.job.num_gpus
        accum = max(w.accum_steps, -(-w.share // max(w.micro_batch, 1)))
        tk = (app, max(w.share, 0), k, info.num_nodes, accum)
        t = self._t.get(tk)
        if t is None:
            t = self._t[tk] = self.profiles[app].iter_time(max(w.share, 0), k, info.num_nodes,
                                                            accum)
        xk = (app, w.mps_pct) if partner is None else (app, w.mps_pct, partner[0], partner[1])
        xi = self._xi.get(xk)
        if xi is None:
            xi = self._xi[xk] = (self.interference.mps_alone(app, w.mps_pct) if partner is None
                                 else self.interference.ratio(app, partner[0], w.mps_pct,
                                                              partner[1]))
        return t * xi

    def _miss(self, key, info, w, partner) -> float:
        memo = self._w
        if len(memo) >= self.W_CAP:
            memo.clear()
        t = memo[key] = self._product(info, w, partner)
        return t

    def worker_time(self, info: JobInfo, w: WorkerAlloc,
                    partner: Optional[tuple[str, Optional[int]]]) -> float:
        job = info.job
        key = (job.app, job.num_gpus, info.num_nodes, w.share, w.micro_batch, w.accum_steps,
               w.mps_pct, partner)
        t = self._w.get(key)
        return self._miss(key, info, w, partner) if t is None else t

    def _job(self, info: JobInfo, ws, first) -> tuple[float, ...]:
        """The times of a job's workers ``ws``, ``first``: GPU -> its partner (or absent)."""
        job = info.job
        app, k, n = job.app, job.num_gpus, info.num_nodes
        get = self._w.get
        out = []
        for w in ws:
            p = first.get(w.gpu)
            key = (app, k, n, w.share, w.micro_batch, w.accum_steps, w.mps_pct, p)
            t = get(key)
            out.append(self._miss(key, info, w, p) if t is None else t)
        return tuple(out)

    def times(self, infos: Mapping[str, JobInfo], cfg: Config) -> dict[str, tuple[float, ...]]:
        on_gpu: dict[Gpu, list[tuple[str, Optional[int]]]] = {}
        for jid, ws in cfg.items():
            for w in ws:
                lst = on_gpu.get(w.gpu)
                if lst is None:
                    on_gpu[w.gpu] = [(jid, w.mps_pct)]
                else:
                    lst.append((jid, w.mps_pct))
        out = {}
        for jid, ws in cfg.items():
            first = {}
            for w in ws:
                for o, p in on_gpu[w.gpu]:  # the first other job's worker on this GPU
                    if o != jid:
                        first[w.gpu] = (infos[o].job.app, p)
                        break
            out[jid] = self._job(infos[jid], ws, first)
        return out

    def job_times(self, infos: Mapping[str, JobInfo], cfg: Config, jid: str) -> tuple[float, ...]:
        """``times(infos, cfg)[jid]`` without the other jobs' times."""
        ws = cfg[jid]
        mine = {w.gpu for w in ws}
        first: dict[Gpu, tuple[str, Optional[int]]] = {}  # first other job on each GPU
        for o, ows in cfg.items():
            if o == jid:
                continue
            for w in ows:
                if w.gpu in mine and w.gpu not in first:
                    first[w.gpu] = (infos[o].job.app, w.mps_pct)
        return self._job(infos[jid], ws, first)


def step_times(model: RateModel, infos: Mapping[str, JobInfo], cfg: Config) -> dict[str, float]:
    """Seconds per optimizer step of each job: its slowest worker's time."""
    return {j: max(ts) for j, ts in model.times(infos, cfg).items()}


# ---------------------------------------------------------------- §5.2 eq. 1-6
def local_objective(objective: str, infos: Mapping[str, JobInfo],
                    step_time: Mapping[str, float],
                    extra: Optional[Mapping[str, float]] = None) -> float:
    """Eq. 1 (JCT: mean remaining time), eq. 3 (deadline: largest overrun, see module doc),
    eq. 5 (makespan: largest remaining time).  Remaining time = RemainingSteps / Throughput
    with Throughput = 1 / step time, plus ``extra[j]`` seconds where given (a switch's cost)."""
    rem = {j: infos[j].remaining_steps * step_time[j] for j in infos}
    if extra:
        rem = {j: r + extra.get(j, 0.0) for j, r in rem.items()}
    if objective == "jct":
        return sum(rem.values()) / len(rem)
    if objective == "deadline":
        return max(max(0.0, rem[j] - infos[j].deadline_left) for j in infos)
    if objective == "makespan":
        return max(rem.values())
    raise ValueError(f"unknown objective {objective!r}; valid: {', '.join(OBJECTIVES)}")


def job_priority(objective: str, info: JobInfo, step_time: float) -> float:
    """Eq. 2 (−Utilization), eq. 4 (Deadline − Remaining/Throughput, relative to now),
    eq. 6 (−Remaining/Throughput), as printed."""
    rem = info.remaining_steps * step_time
    if objective == "jct":
        return -info.utilization
    if objective == "deadline":
        return info.deadline_left - rem
    if objective == "makespan":
        return -rem
    raise ValueError(f"unknown objective {objective!r}; valid: {', '.join(OBJECTIVES)}")


def importance(objective: str, info: JobInfo, step_time: float) -> float:
    """Larger = higher priority (swelled), by each equation's prose (module doc)."""
    p = job_priority(objective, info, step_time)
    return p if objective == "jct" else -p


# ---------------------------------------------------------------- Algorithm 1
@dataclass(frozen=True)
class Attempt:
    primitive: str  # what GeneratePrimitives did (text)
    objective: float
    gain: bool


@dataclass(frozen=True)
class SearchResult:
    config: Mapping[str, tuple[WorkerAlloc, ...]]  # best configuration (start if no gain)
    objective_before: float
    objective_after: float
    attempts: tuple[Attempt, ...]
    high: tuple[str, ...]  # subset2 (swelled)
    low: tuple[str, ...]  # subset1 (squeezed)
    exit: str  # "early-exit", "no-primitive" or "limit"
    # the walk's best did not pay for its LGRR switches: ``config`` is the start (module doc)
    declined: bool = False

    def changed(self, start: Config) -> tuple[str, ...]:
        return tuple(j for j in sorted(self.config) if tuple(self.config[j]) != tuple(start[j]))


def _shares_by_rate(ws: tuple[WorkerAlloc, ...], times: tuple[float, ...]) -> tuple[int, ...]:
    """LISS: split the job's global batch in proportion to the workers' sample rates."""
    total = sum(w.share for w in ws)
    rates = [max(w.share, 1) / max(t, 1e-12) for w, t in zip(ws, times)]
    k = len(ws)
    free = total - k  # one sample each, the rest by rate
    if free < 0:
        return tuple(w.share for w in ws)
    raw = [free * r / sum(rates) for r in rates]
    base = [int(math.floor(x)) for x in raw]
    left = free - sum(base)
    order = sorted(range(k), key=lambda i: (-(raw[i] - base[i]), i))
    for i in order[:left]:
        base[i] += 1
    return tuple(b + 1 for b in base)


def _with_mps(w: WorkerAlloc, pct) -> WorkerAlloc:
    """``dataclasses.replace(w, mps_pct=pct)`` by the constructor (the same record)."""
    return WorkerAlloc(w.gpu, w.share, w.micro_batch, w.accum_steps, pct, w.mem_limit_mb,
                       w.stage, w.mps_cap)


def _with_share(w: WorkerAlloc, share: int) -> WorkerAlloc:
    # the constructor, not dataclasses.replace (same record, a fraction of the cost)
    return WorkerAlloc(w.gpu, share, w.micro_batch, max(1, -(-share // max(w.micro_batch, 1))),
                       w.mps_pct, w.mem_limit_mb, w.stage, w.mps_cap)


def set_mps(cfg, picks: Iterable[tuple[str, int]], fn) -> dict:
    """A copy of ``cfg`` with each picked worker's MPS share set to ``fn`` of it."""
    cfg = dict(cfg)
    for jid, i in picks:
        ws = list(cfg[jid])
        w = ws[i]
        # never past the worker's ceiling (Slurm's gres/mps units; module doc)
        ws[i] = WorkerAlloc(w.gpu, w.share, w.micro_batch, w.accum_steps,
                            capped(w, fn(w.mps_pct)), w.mem_limit_mb, w.stage, w.mps_cap)
        cfg[jid] = tuple(ws)
    return cfg


class _Search:
    def __init__(self, objective, infos, model, jmax, straggler_tol, lgrr, liss):
        self.obj, self.infos, self.model, self.jmax = objective, infos, model, jmax
        self.tol, self.use_lgrr, self.use_liss = straggler_tol, lgrr, liss

    def value(self, cfg) -> float:
        return local_objective(self.obj, self.infos, step_times(self.model, self.infos, cfg))

    def stragglers(self, cfg, jid, ts=None) -> tuple[list[int], list[int]]:
        ts = self.model.job_times(self.infos, cfg, jid) if ts is None else ts
        fastest = min(ts)
        slow = [i for i, t in enumerate(ts) if t > fastest * (1 + self.tol)]
        return slow, [i for i in range(len(ts)) if i not in slow]

    def steal(self, cfg, jids) -> dict:
        """One LISS step on each job of ``jids`` with stragglers (global batch exact)."""
        cfg = dict(cfg)
        for jid in jids:
            ts = self.model.job_times(self.infos, cfg, jid)
            slow, _ = self.stragglers(cfg, jid, ts)
            if not slow:
                continue
            ws = cfg[jid]
            shares = _shares_by_rate(ws, ts)
            cfg[jid] = tuple(_with_share(w, s) for w, s in zip(ws, shares))
        return cfg

    def set_mps(self, cfg, picks: Iterable[tuple[str, int]], fn) -> dict:
        return set_mps(cfg, picks, fn)

    def generate(self, cfg, subset1) -> tuple[Optional[dict], str]:
        """GeneratePrimitives (lines 11-20) mapped to mechanisms (§4.2)."""
        jm = self.jmax
        slow, fast = self.stragglers(cfg, jm)
        if not slow:  # lines 12-13: squeeze(subset1)
            if not self.use_lgrr:
                return None, "squeeze(subset1): LGRR off"
            picks = [(j, i) for j in subset1 for i in range(len(cfg[j]))]
            new = self.set_mps(cfg, picks, lgrr_squeeze)
            new = self.steal(new, subset1) if self.use_liss else new
            return new, f"squeeze({','.join(subset1)}) by LGRR"
        if jm in subset1:  # lines 15-17: swell slow workers, squeeze fast ones (LISS, §4.2)
            if self.use_liss:
                return self.steal(cfg, [jm]), f"LISS: {jm} workers {slow} steal-from"
            new = self.set_mps(cfg, [(jm, i) for i in slow], lgrr_swell)
            new = self.set_mps(new, [(jm, i) for i in fast], lgrr_squeeze)
            return new, f"LGRR: swell {jm} workers {slow}, squeeze {fast}"
        # lines 19-20: squeeze the workers co-located with J_max's slow workers
        slow_gpus = {cfg[jm][i].gpu for i in slow}
        picks = [(j, i) for j in subset1 for i, w in enumerate(cfg[j]) if w.gpu in slow_gpus]
        if not self.use_lgrr or not picks:
            if self.use_liss:
                return self.steal(cfg, [jm]), f"LISS on {jm} (co-located squeeze unavailable)"
            return None, "no mechanism"
        new = self.set_mps(cfg, picks, lgrr_squeeze)
        new = self.steal(new, sorted({j for j, _ in picks})) if self.use_liss else new
        return new, "squeeze " + ",".join(f"{j}[{i}]" for j, i in picks) + " by LGRR"


def mps_switched(start: Config, cfg: Config) -> frozenset:
    """The jobs of ``cfg`` with a worker whose MPS share differs from ``start``'s."""
    return frozenset(j for j, ws in cfg.items()
                     if any(a.mps_pct != b.mps_pct for a, b in zip(ws, start[j])))


def declines(before: float, charged: float) -> bool:
    """Whether a result whose objective with its switches charged is ``charged`` is not worth
    applying over the start's ``before`` (module doc, "Switching cost")."""
    return charged > before * (1 + 1e-9)


def coordination_search(objective: str, infos: Mapping[str, JobInfo], start: Config,
                        model: RateModel, *, lgrr: bool = True, liss: bool = True,
                        straggler_tol: float = 0.05, max_fails: int = MAX_FAILS,
                        max_attempts: int = MAX_ATTEMPTS,
                        switch_cost: float = 0.0) -> SearchResult:
    """Algorithm 1 CoordinationSearch over one packing set (``infos``: its jobs, ``start``:
    their current workers).  Returns the best configuration found and the audit trail;
    ``switch_cost``: seconds charged per job whose MPS share the result changes (module doc,
    "Switching cost"; 0: none)."""
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; valid: {', '.join(OBJECTIVES)}")
    world = {j: len(start[j]) for j in infos}
    since = {j: infos[j].job.start_time or 0.0 for j in infos}
    jm = _jmax(infos, world, since)  # line 1
    s = _Search(objective, infos, model, jm, straggler_tol, lgrr, liss)
    st = step_times(model, infos, start)
    subset1, subset2 = [jm], sorted(j for j in infos if j != jm)  # line 2

    def prio(sub):
        return sum(importance(objective, infos[j], st[j]) for j in sub) / len(sub)

    if prio(subset2) < prio(subset1):  # lines 3-4
        subset1, subset2 = subset2, subset1
    before = local_objective(objective, infos, st)  # = s.value(start)
    cur = dict(start)
    attempts: list[Attempt] = []
    best_v = before
    if lgrr:  # line 5: swell(subset2), applied as the pseudo-code does (no gain test)
        cur = s.set_mps(cur, [(j, i) for j in subset2 for i in range(len(cur[j]))], lgrr_swell)
        if cur != start:
            best_v = s.value(cur)
            attempts.append(Attempt(f"swell({','.join(subset2)}) by LGRR", best_v, True))
    best = dict(cur)
    fails = 0
    exit_ = "limit"
    while len(attempts) < max_attempts:  # line 6
        new, what = s.generate(cur, subset1)  # line 7
        if new is None or new == cur:
            exit_ = "no-primitive"
            break
        v = s.value(new)  # line 8
        gain = v < best_v * (1 - 1e-9)
        attempts.append(Attempt(what, v, gain))
        cur = new
        if gain:
            best, best_v, fails = dict(new), v, 0
        else:
            fails += 1
        if fails >= max_fails:  # lines 9-10
            exit_ = "early-exit"
            break
    declined = False
    if switch_cost > 0:
        sw = mps_switched(start, best)
        if sw and declines(before, local_objective(
                objective, infos, step_times(model, infos, best), dict.fromkeys(sw, switch_cost))):
            best, best_v, declined = dict(start), before, True
    return SearchResult(best, before, best_v, tuple(attempts), tuple(subset2), tuple(subset1),
                        exit_, declined)


# ---------------------------------------------------------------- on a snapshot
def utilization(snap: ClusterSnapshot, job: Job) -> float:
    util = snap.predictors.get("gpu_util") if snap.predictors else None
    if util is not None and job.app in util:
        return float(util[job.app])
    prof = snap.profiles.get(job.app)
    if prof is None:
        return 1.0
    k = job.num_gpus
    local = max(1.0, job.global_batch / k)
    nodes = job.allocation.num_nodes if job.allocation else 1
    t = prof.iter_time(local, k, nodes, 1)
    return min(1.0, prof.t_comp(local) / t) if t > 0 else 1.0


def job_info(snap: ClusterSnapshot, job: Job) -> JobInfo:
    rem = snap.remaining_iters(job)
    if rem is None:  # length unknown: remaining time estimate in exclusive steps, else 1
        rt = snap.remaining_time(job)
        rem = rt / snap.exclusive_iter_time(job) if rt is not None else 1.0
    dl = math.inf if job.deadline is None else job.deadline - snap.now
    nodes = job.allocation.num_nodes if job.allocation else 1
    return JobInfo(job, rem, dl, utilization(snap, job), nodes)


@dataclass(frozen=True)
class Coordination:
    """One packing set's outcome: the resizes to apply and the audit record."""

    jmax: str
    members: tuple[str, ...]
    result: SearchResult
    resizes: tuple[ResizeJob, ...]


def _restored(ws: tuple[WorkerAlloc, ...], batch: int) -> tuple[WorkerAlloc, ...]:
    """Workers of a job that shares no GPU any more: MPS back to 100 % (its ceiling), even split."""
    base, extra = divmod(int(batch), len(ws))
    return tuple(_with_mps(_with_share(w, base + (1 if i < extra else 0)), capped(w, 100))
                 for i, w in enumerate(ws))


def start_config(job: Job) -> tuple[WorkerAlloc, ...]:
    """A running job's workers as the coordinator starts from (unset MPS share = 100 %, or the
    worker's ceiling).  When
    the record's shares do not add up to the global batch (an allocation built from sub-batch x
    accumulation only), they are re-derived as the launcher's even split of the batch."""
    alloc = job.allocation
    batch = alloc.global_batch or job.global_batch
    ws = alloc.workers
    if sum(w.share for w in ws) != batch:
        base, extra = divmod(int(batch), len(ws))
        ws = tuple(_with_share(w, base + (1 if i < extra else 0)) for i, w in enumerate(ws))
    return tuple(_with_mps(w, capped(w, 100 if w.mps_pct is None else w.mps_pct))
                 for w in ws)


_BELOW: dict[int, tuple] = {}  # id(allocation) -> (allocation, a worker below its ceiling?)


def _below_ceiling(alloc) -> bool:
    """Whether a worker of ``alloc`` runs below its MPS ceiling, memoised by the allocation's
    identity (a pure function of the frozen record; the simulator and the daemon hand the
    same record in every snapshot while the job keeps it, and GIMBAL asks it of every running
    job at every 30 s round)."""
    return identity_memo(_BELOW, alloc, lambda a: any(
        w.mps_pct is not None and w.mps_pct < capped(w, 100) for w in a.workers), 65536)


def coordinate(snap: ClusterSnapshot, objective: str, *, lgrr: bool = True, liss: bool = True,
               skip: Iterable[str] = (), kept=None,
               switch_cost: float = 0.0) -> tuple[Coordination, ...]:
    """Run Algorithm 1 on every packing set of the snapshot (sets with a job in ``skip``, e.g.
    one the host plan touches this round, are left alone).  Emits a ResizeJob with the new
    per-worker record (same GPUs; MPS % and sample shares; shares sum to the global batch) for
    each job whose record changed.  ``kept``: a :class:`policies.gimbal_walk.CoordKept` the
    caller keeps across calls; the same answer from walks, packing sets and per-set records
    kept between rounds (the host policies pass theirs; None: everything computed here);
    ``switch_cost``: :func:`coordination_search`'s."""
    if kept is not None:
        return kept.coordinate(snap, objective, lgrr=lgrr, liss=liss, skip=skip,
                               switch_cost=switch_cost)
    model = RateModel(snap.profiles, snap.interference)
    skip = set(skip)
    out = []
    sets = packing_sets(snap)
    in_sets = {m for ps in sets for m in ps.members}
    # a job whose partners have left keeps no GIMBAL limit: full GPU, even split.  Only jobs
    # with a worker below its ceiling can need that; they are taken in snap.running() order
    memo = _BELOW
    below = []
    for j in snap.jobs.values():  # the memo read inline: this walk runs at every round
        a = j.allocation
        if a is None:
            continue
        hit = memo.get(id(a))
        if (hit[1] if hit is not None and hit[0] is a else _below_ceiling(a)) and j.running:
            below.append(j)
    below.sort(key=SUBMIT_ORDER)
    for job in below:
        if job.id in in_sets or job.id in skip:
            continue
        if any(snap.gpu_jobs.get(g, ()) != (job.id,) for g in job.allocation.gpus):
            continue
        new = _restored(job.allocation.workers, job.allocation.global_batch or job.global_batch)
        none = Attempt("restore: no partner left", 0.0, True)
        res = SearchResult({job.id: new}, 0.0, 0.0, (none,), (job.id,), (), "no-primitive")
        out.append(Coordination(job.id, (job.id,), res, (ResizeJob(
            job.id, tuple(w.gpu for w in new), max(w.micro_batch for w in new),
            max(w.accum_steps for w in new), min(w.mps_pct for w in new), new,
            job.allocation.global_batch),)))
    for ps in sets:
        if skip & set(ps.members):
            continue
        jobs = [snap.jobs[j] for j in ps.members]
        if any(j.app not in snap.profiles for j in jobs):
            continue
        infos = {j.id: job_info(snap, j) for j in jobs}
        actual = {j.id: start_config(j) for j in jobs}
        # a worker whose GPU holds only its own job has no partner to yield to: 100 % (or its
        # ceiling)
        start = {jid: tuple(w if len(snap.gpu_jobs.get(w.gpu, ())) > 1
                            else _with_mps(w, capped(w, 100)) for w in ws)
                 for jid, ws in actual.items()}
        res = coordination_search(objective, infos, start, model, lgrr=lgrr, liss=liss,
                                  switch_cost=switch_cost)
        resizes = []
        for jid in res.changed(actual):
            ws = tuple(res.config[jid])
            j = snap.jobs[jid]
            mps = min(w.mps_pct for w in ws)
            resizes.append(ResizeJob(jid, tuple(w.gpu for w in ws), max(w.micro_batch for w in ws),
                                     max(w.accum_steps for w in ws), mps, ws,
                                     j.allocation.global_batch))
        out.append(Coordination(ps.jmax, ps.members, res, tuple(resizes)))
    return tuple(out)
