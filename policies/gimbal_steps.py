"""Algorithm 1's GeneratePrimitives with the workers' times carried along (issue #13: the kept
walks of :mod:`policies.gimbal_walk` spent most of their time computing the same per-worker
times again: ``generate`` asked J_max's times of the configuration whose times the walk had
just computed, LISS asked them again, and every new configuration's times were computed for
all jobs).

:class:`TimedSteps` does what :meth:`policies.gimbal_coord._Search.generate` does (the same
configurations, the same attempt texts; that method stays the plain path's and the oracle)
and returns the new configuration's per-job worker times too, from the current
configuration's, computing again only what can differ.  Why that is exact:

* A job's worker times (:meth:`~policies.gimbal_coord.RateModel.times`) are a pure function of
  its own workers and, on each of its GPUs, of the first other job in the configuration's
  order with a worker there: that job's application and that worker's MPS share.  The
  configurations of a walk all come from its start by ``dict(cfg)`` and assignments to keys
  already there (``set_mps``, ``steal``), so they list the jobs in the same order, and no step
  moves a worker to another GPU: which jobs meet on which GPU (``near``) is the start's.
  So when a job's workers tuple is the very object it was and no job meeting it on a GPU got
  another tuple, its times are the ones it had (:meth:`TimedSteps.retime`; a job whose tuple
  was rebuilt with the same values is computed again, which costs time, not exactness).
* LISS (``steal``) changes only sample shares, which no other job's times read (a partner is
  its application and MPS share); so the times ``steal`` reads of each of its jobs are the
  ones its input configuration has, and afterwards only the jobs it re-split are computed
  again.
"""
from __future__ import annotations

from typing import Optional

from .gimbal_coord import _Search, _shares_by_rate, _with_share, lgrr_squeeze, lgrr_swell


class TimedSteps:
    """``generate`` of a :class:`~policies.gimbal_coord._Search` with times (module doc).
    ``start``: the walk's start configuration (its jobs' GPUs are every step's)."""

    __slots__ = ("s", "near")

    def __init__(self, search: _Search, start):
        self.s = search
        on: dict = {}
        for jid, ws in start.items():
            for w in ws:
                on.setdefault(w.gpu, set()).add(jid)
        self.near = {jid: frozenset(o for w in ws for o in on[w.gpu]) for jid, ws in start.items()}

    def times(self, cfg) -> dict:
        s = self.s
        return s.model.times(s.infos, cfg)

    def retime(self, new, old, ot) -> dict:
        """``times(new)`` from ``old`` (the configuration ``new`` was made from) and its times
        ``ot`` (module doc)."""
        changed = {j for j, ws in new.items() if ws is not old[j]}
        if not changed:
            return ot
        near = self.near
        dirty = [j for j in new if not near[j].isdisjoint(changed)]
        if len(dirty) == len(new):
            return self.times(new)
        s = self.s
        nt = dict(ot)
        for j in dirty:
            nt[j] = s.model.job_times(s.infos, new, j)
        return nt

    def steal(self, cfg, ct, jids) -> tuple[dict, dict]:
        """``_Search.steal`` and the times of its result (``ct``: those of ``cfg``)."""
        s = self.s
        cfg = dict(cfg)
        nt = None
        for jid in jids:
            ts = ct[jid]  # the same as on the updated cfg: only shares changed (module doc)
            slow, _ = s.stragglers(cfg, jid, ts)
            if not slow:
                continue
            ws = cfg[jid]
            shares = _shares_by_rate(ws, ts)
            cfg[jid] = tuple(_with_share(w, sh) for w, sh in zip(ws, shares))
            if nt is None:
                nt = dict(ct)
            nt[jid] = s.model.job_times(s.infos, cfg, jid)
        return cfg, (ct if nt is None else nt)

    def generate(self, cfg, ct, subset1) -> tuple[Optional[dict], str, Optional[dict]]:
        """``_Search.generate(cfg, subset1)`` (same branches, same order) with the new
        configuration's times; ``ct``: the times of ``cfg``."""
        s = self.s
        jm = s.jmax
        slow, fast = s.stragglers(cfg, jm, ct[jm])
        if not slow:  # lines 12-13: squeeze(subset1)
            if not s.use_lgrr:
                return None, "squeeze(subset1): LGRR off", None
            picks = [(j, i) for j in subset1 for i in range(len(cfg[j]))]
            new = s.set_mps(cfg, picks, lgrr_squeeze)
            nt = self.retime(new, cfg, ct)
            if s.use_liss:
                new, nt = self.steal(new, nt, subset1)
            return new, f"squeeze({','.join(subset1)}) by LGRR", nt
        if jm in subset1:  # lines 15-17
            if s.use_liss:
                new, nt = self.steal(cfg, ct, [jm])
                return new, f"LISS: {jm} workers {slow} steal-from", nt
            new = s.set_mps(cfg, [(jm, i) for i in slow], lgrr_swell)
            new = s.set_mps(new, [(jm, i) for i in fast], lgrr_squeeze)
            return new, f"LGRR: swell {jm} workers {slow}, squeeze {fast}", \
                self.retime(new, cfg, ct)
        # lines 19-20
        slow_gpus = {cfg[jm][i].gpu for i in slow}
        picks = [(j, i) for j in subset1 for i, w in enumerate(cfg[j]) if w.gpu in slow_gpus]
        if not s.use_lgrr or not picks:
            if s.use_liss:
                new, nt = self.steal(cfg, ct, [jm])
                return new, f"LISS on {jm} (co-located squeeze unavailable)", nt
            return None, "no mechanism", None
        new = s.set_mps(cfg, picks, lgrr_squeeze)
        nt = self.retime(new, cfg, ct)
        if s.use_liss:
            new, nt = self.steal(new, nt, sorted({j for j, _ in picks}))
        return new, "squeeze " + ",".join(f"{j}[{i}]" for j, i in picks) + " by LGRR", nt
