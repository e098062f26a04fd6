"""AFS share computation (seed 001 §3.2-3.3, Algorithm 1), shared by AFS-L and AFS-P.

Inequality (3), the Apathetic Future Share rule for the two-job case: with ``j_a``
the job that finishes first under the current shares and ``j_b`` the other one,
the extra GPU goes to ``j_b`` iff

    (p'_b - p_b) / p'_b  >  (p'_a - p_a) / p_a                                  (3)

where ``p`` is a job's throughput on its current count ``cnt`` and ``p'`` on
``cnt + 1``.  :func:`ineq3_sides` returns the two sides.

Algorithm 1 (lines cited in the code): ``TOPPRIORITY`` walks the jobs once,
keeping a current winner ``j*``; two jobs both at count 0 compare lengths on one GPU
(lines 5-7), otherwise the shorter one (length ``len(cnt)`` = remaining iterations /
throughput, infinite at count 0) is ``j_a`` and (3) decides (lines 9-12).  AFS-L
(lines 14-23) repeats it ``M`` times, one GPU each.

The relation (3) defines is not transitive in general (three jobs with fractional
gains p'/p = 1.3, 1.4, 1.5 and increasing lengths form a cycle; Appendix C proves
only one chain), so the single pass depends on the order of the walk: ours is
submit order (ties by id), and line 2's "any job" is the first job of that order.
The paper starts "by picking two jobs at random"; a fixed order keeps the policy
deterministic.

Two exact shortcuts keep a call at O(n log n) when there are more jobs than GPUs:
while every job holding a GPU would gain less than 100 % from one more, (3) always
prefers a job at count 0 (its left side is 1), so the pass picks the count-0 job
with the smallest ``len(1)`` (ties: the last in walk order, line 7's ``else``) —
stage one is a sort.  Stage two (every job holds a GPU, GPUs left) walks the jobs
as written, one walk per GPU, O(M·n) with n < M; each walk resumes at the job whose
state the last GPU changed (the walk's stars before it are unchanged: :func:`_hand_out`),
and passes over whole blocks of jobs that the star is known to win from the blocks'
bounds on (3)'s sides and lengths (:func:`_stays`, :func:`_stays_l`): the same
comparisons' outcome without making them.
If some job would gain 100 % or more, the whole computation falls back to the plain walk.

Choices (ours): a job only takes part in a walk while one more GPU raises its
throughput (:func:`~policies.elastic.useful_share`, the regime of Appendix B) and
its share is below its cap; when no job takes part, the remaining GPUs stay idle.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from functools import lru_cache
from operator import attrgetter
from typing import Callable, Optional, Sequence

INF = math.inf


@dataclass
class Cand:
    """A job's state during one share computation."""

    id: str
    rem: float  # remaining iterations (inf: unknown)
    rate: Callable[[int], float]  # iterations/s on k GPUs
    cap: int  # largest share
    cnt: int = 0
    pick: int = -1  # step at which it got its first GPU
    _p: Optional[list] = None  # memo of p(k)

    def p(self, k: int) -> float:
        memo = self._p
        if memo is not None and k < len(memo):
            return memo[k]
        if memo is None:
            memo = self._p = [0.0]
        while len(memo) <= k:
            memo.append(self.rate(len(memo)))
        return memo[k]

    def length(self, k: int) -> float:
        """``len(k)``: seconds to finish on ``k`` GPUs; infinite at 0 (Alg. 1 text)."""
        if k <= 0:
            return INF
        r = self.p(k)
        return self.rem / r if r > 0 else INF

    def can_grow(self) -> bool:
        return self.cnt < self.cap and self.p(self.cnt + 1) > self.p(self.cnt) * (1 + 1e-9)

    def doubles_at_one(self) -> bool:
        """A second GPU would at least double its throughput: (3) may then prefer it
        to a job at count 0, so the stage-one shortcuts do not apply."""
        return self.cap > 1 and self.p(2) >= 2 * self.p(1)


def ineq3_sides(a: Cand, b: Cand) -> tuple[float, float]:
    """(left, right) of (3) for ``a`` finishing first and ``b`` the other job."""
    pb, pb1 = b.p(b.cnt), b.p(b.cnt + 1)
    pa, pa1 = a.p(a.cnt), a.p(a.cnt + 1)
    left = (pb1 - pb) / pb1 if pb1 > 0 else 0.0
    right = (pa1 - pa) / pa if pa > 0 else INF
    return left, right


def ineq3(a: Cand, b: Cand) -> bool:
    """True: ``b`` (the longer job) gets the extra GPU (seed 001 inequality (3))."""
    left, right = ineq3_sides(a, b)
    return left > right


def top_priority_l(jobs: Sequence[Cand]) -> Cand:
    """Algorithm 1, TOPPRIORITY (lines 1-13), lengths known."""
    star = jobs[0]  # line 2
    for j in jobs:  # line 3
        a, b = star, j  # line 4
        if a.cnt == 0 and b.cnt == 0:  # line 5
            star = a if a.length(1) < b.length(1) else b  # lines 6-7
        else:
            if a.length(a.cnt) >= b.length(b.cnt):  # line 9
                a, b = b, a  # line 10
            star = b if ineq3(a, b) else a  # lines 11-12
    return star  # line 13


def coin(seed: int, x: str, y: str) -> bool:
    """A fair, reproducible coin for the pair (x, y) (same answer for (y, x))."""
    lo, hi = sorted((x, y))
    h = hashlib.blake2b(f"{seed}|{lo}|{hi}".encode(), digest_size=2).digest()
    return (h[0] & 1) == (x == lo)


# :func:`coin`, memoised (a pure function of its arguments; functools' bounded cache, so it
# stays bounded over a long simulation)
_coin = lru_cache(maxsize=1 << 20)(coin)


def top_priority_p(jobs: Sequence[Cand], seed: int) -> Cand:
    """TOPPRIORITY without lengths (§3.3 "Handling unknown job lengths"): (3) is tried
    both ways; when it holds in neither, a coin decides."""
    star = jobs[0]
    for j in jobs:
        if j is star:
            continue
        if ineq3(star, j):  # j_a = j*, j_b = j
            star = j
        elif ineq3(j, star):  # j_a = j, j_b = j*
            pass
        elif coin(seed, star.id, j.id):
            star = j
    return star


def _fast_stage_one(jobs: list[Cand], m: int) -> Optional[int]:
    """Stage one as a sort (exact while every picked job gains < 100 %, see module doc).
    Returns the GPUs left, or None when the shortcut does not apply."""
    zero = [(c.length(1), -i, c) for i, c in enumerate(jobs)]
    if any(x[0] == INF for x in zero):
        return None
    # by (length, -i): the tuples themselves, whose second items are distinct, so the
    # third is never compared (the same comparisons as a (length, -i) key, without a key
    # tuple per job)
    zero.sort()
    step = 0
    for _, _, c in zero:
        if m == 0:
            break
        if c.doubles_at_one():
            return None
        c.cnt, c.pick = 1, step
        step += 1
        m -= 1
    return m


_PICK = attrgetter("pick")


def pick_order(cands: Sequence[Cand]) -> list[Cand]:
    """``cands`` sorted by (pick < 0, pick): the picked ones in pick order, then the rest
    by pick (two stable sorts with a C-level key, the same order as one stable sort by
    that key, without a key tuple per job)."""
    out = sorted((c for c in cands if c.pick >= 0), key=_PICK)
    out.extend(sorted((c for c in cands if c.pick < 0), key=_PICK))
    return out


def _reset(jobs: Sequence[Cand]) -> None:
    for c in jobs:
        c.cnt, c.pick = 0, -1


def _state(c: Cand) -> tuple:
    """What one comparison reads of a job: (count is 0, len(1), len(cnt), its (3) side as
    the longer job (p'-p)/p', its side as the shorter job (p'-p)/p)."""
    p, p1 = c.p(c.cnt), c.p(c.cnt + 1)
    return (c.cnt == 0, c.length(1) if c.cnt == 0 else 0.0, c.length(c.cnt),
            (p1 - p) / p1 if p1 > 0 else 0.0, (p1 - p) / p if p > 0 else INF)


BLOCK = 32  # positions per block of the hand-out's walks (:func:`_hand_out`)


def _stays(s: tuple, blk: int, blocks: tuple) -> bool:
    """The star ``s`` wins every comparison of block ``blk`` in both walks: its left side
    of (3) beats every job's right side (``blocks[0][blk]``: the block's largest, NaN
    counted as infinite).  Then (3) keeps it where it is the longer job; where it is the
    shorter one, a job's left side is below its own right side, below ``s``'s left side,
    below ``s``'s right side (``(p'-p)/p' < (p'-p)/p``), so (3) keeps it too; no tie is
    reached (AFS-P's coin) and the count-0 branch (lines 5-7) is not taken (``s`` holds a
    GPU)."""
    return not s[0] and s[3] > blocks[0][blk]


def _stays_l(s: tuple, blk: int, blocks: tuple) -> bool:
    """:func:`_stays`, or (AFS-L's walk, lengths known) ``s`` is shorter than every job of
    the block (``blocks[2][blk]``: their least length, NaN counted as infinite: line 9's
    test fails for it too) and no job's left side beats its right side (``blocks[1][blk]``:
    their largest, NaN, which beats nothing, as -inf): line 9 makes each job ``j_b`` and
    (3) keeps ``s``."""
    return not s[0] and (s[3] > blocks[0][blk]
                         or (s[2] < blocks[2][blk] and blocks[1][blk] <= s[4]))


def _walk_l_from(st: list, k0: int, k_star: int, traj: list, blocks=None) -> int:
    """:func:`top_priority_l` on precomputed states (same decisions, no calls per pair),
    resumed at position ``k0`` with ``k_star`` the star before it; ``traj[k]`` is set to
    the star after position ``k`` (the resumption point of a later walk).  With
    ``blocks`` (:func:`_hand_out`), a whole block of :data:`BLOCK` positions the star
    wins (:func:`_stays_l`) is passed over without its comparisons (:func:`_walk`)."""
    return _walk(st, k0, k_star, traj, blocks, None, 0)


def _walk_p_from(st: list, ids: list, seed: int, k0: int, k_star: int, traj: list,
                 blocks=None) -> int:
    """:func:`top_priority_p` on precomputed states, resumed (and passing over the blocks
    the star wins: :func:`_stays`) as :func:`_walk_l_from`."""
    return _walk(st, k0, k_star, traj, blocks, ids, seed)


def _walk(st: list, k: int, k_star: int, traj: list, blocks, ids, seed: int) -> int:
    """The walk of AFS-L (``ids`` None) or of AFS-P (the tie coin's ``ids`` and ``seed``)
    from position ``k``.  With ``blocks``, a block the star wins is passed over and the star
    after each of its positions written once for the block (``blocks[-1][b]``; ``None``
    where ``traj`` holds them: :func:`_star_before`)."""
    n = len(st)
    s = st[k_star]
    stays = _stays_l if ids is None else _stays
    coin_ = _coin
    while k < n:
        if blocks is None:
            e = n
        else:
            b = k // BLOCK
            lo = b * BLOCK
            e = min(n, lo + BLOCK)
            if k == lo and stays(s, b, blocks):
                blocks[-1][b] = k_star
                k = e
                continue
            was = blocks[-1][b]
            if was is not None:  # (its positions' stars from a pass: written out)
                if k > lo:
                    traj[lo:k] = [was] * (k - lo)
                blocks[-1][b] = None
        if ids is None:  # top_priority_l
            for k in range(k, e):
                r = st[k]
                if s[0] and r[0]:  # lines 5-7
                    if not s[1] < r[1]:
                        k_star, s = k, r
                elif s[2] >= r[2]:  # line 9: j_a = j, j_b = j*; (3) keeps j*, else j
                    if not s[3] > r[4]:
                        k_star, s = k, r
                elif r[3] > s[4]:  # j_a = j*, j_b = j; (3) gives j
                    k_star, s = k, r
                traj[k] = k_star
        else:  # top_priority_p
            for k in range(k, e):
                if k != k_star:
                    r = st[k]
                    if r[3] > s[4]:  # (3) with j_a = j*, j_b = j
                        k_star, s = k, r
                    elif s[3] > r[4]:  # (3) with j_a = j, j_b = j*
                        pass
                    elif coin_(seed, ids[k_star], ids[k]):
                        k_star, s = k, r
                traj[k] = k_star
        k = e
    return k_star


def _hand_out(jobs: Sequence[Cand], m: int, step: int, walk, lengths: bool = False) -> None:
    """Lines 18-21: ``m`` GPUs, one at a time, to the job TOPPRIORITY names among the jobs
    one more GPU helps.  With no GPU left (more jobs than GPUs after stage one) nothing is
    handed out, so the states are not built.

    ``walk(st, ids, k0, k_star, traj, blocks)`` is :func:`_walk_l_from` or :func:`_walk_p_from`.
    A step changes the state of one job only, the winner at position ``kw`` (or removes it
    when one more GPU no longer helps it).  The walk's comparisons at positions before
    ``kw`` read only the states of jobs before ``kw``, so its stars there are the previous
    walk's (``traj``): the next walk resumes at ``kw`` with ``traj[kw - 1]`` as the star
    and makes every comparison the whole walk would make from there, in the same order
    (so the same tie coins); only the unchanged prefix is not walked again.  Same winner
    at every step as the walk from the first job (tests/policies/
    test_afs_handout_differential.py against reference_afs_handout.py)."""
    if m <= 0:
        return
    live = [c for c in jobs if c.can_grow()]
    if _to_stops(live, m):
        return
    st = [_state(c) for c in live]
    ids = [c.id for c in live]
    traj = [0] * len(live)
    # each block's bounds for :func:`_stays` (and :func:`_stays_l` with ``lengths``),
    # where the walks are long enough for whole blocks to be passed over and no state has
    # a NaN (a job that leaves is then marked DEAD in place: no position moves)
    blk = None
    if len(live) >= 4 * BLOCK and all(map(_clean, st)):
        blk = _Blocks(st, lengths)
    blocks = None if blk is None else blk.view
    alive = len(live)
    k0 = 0  # first position whose star must be recomputed
    while m > 0 and alive:
        k = walk(st, ids, k0, _star_before(k0, traj, blocks), traj, blocks)  # line 19
        c = live[k]
        c.cnt += 1  # line 20
        if c.pick < 0:
            c.pick = step
        step += 1
        m -= 1  # line 21
        k0 = k
        if c.can_grow():
            x = st[k] = _state(c)
            if blk is None:
                continue
            if _clean(x):
                blk.put(k, x)
            else:  # (the DEAD marks out, no blocks from here: walk again from the start)
                keep = [i for i, y in enumerate(st) if y is not DEAD]
                live, st, ids = ([v[i] for i in keep] for v in (live, st, ids))
                traj = [0] * len(live)
                blk = blocks = None
                k0 = 0
        elif blk is not None:
            st[k] = DEAD
            blk.kill(k)
            alive -= 1
        else:
            del live[k], st[k], ids[k], traj[k]
            alive -= 1


def _star_before(k: int, traj: list, blocks) -> int:
    """The star after position ``k - 1`` (0 at ``k`` 0): its block's, where a walk passed
    over the block, else ``traj``'s."""
    if not k:
        return 0
    if blocks is not None:
        was = blocks[-1][(k - 1) // BLOCK]
        if was is not None:
            return was
    return traj[k - 1]


# the state of a job out of the hand-out where blocks are kept: it changes no star (a live
# star's left side and length are above -inf, so (3) keeps it; a DEAD star gives way to the
# next live job, whose left side is above -inf), as a job removed would not
DEAD = (False, 0.0, -INF, -INF, -INF)


def _clean(x: tuple) -> bool:
    """No NaN in a state's length and sides (where one is, DEAD is not neutral)."""
    return x[2] == x[2] and x[3] == x[3] and x[4] == x[4]


def _nan_as(x: float, v: float) -> float:
    return x if x == x else v


class _Blocks:
    """Per block of :data:`BLOCK` positions of the hand-out's states: the largest right
    side of (3) (NaN as infinite), and with ``lengths`` the largest left side (NaN as
    -inf) and the least length (NaN as infinite): ``agg`` (:func:`_stays`,
    :func:`_stays_l`), kept up to date as states change or are marked DEAD."""

    def __init__(self, st: list, lengths: bool):
        self.cols = [[_nan_as(x[4], INF) for x in st]]
        if lengths:
            self.cols.append([_nan_as(x[3], -INF) for x in st])
            self.cols.append([_nan_as(x[2], INF) for x in st])
        self.agg = tuple([(min if i == 2 else max)(col[j:j + BLOCK])
                          for j in range(0, len(col), BLOCK)]
                         for i, col in enumerate(self.cols))
        # the walks' view: the bounds, then per block the star after each of its positions
        # where the last walk over it passed it over (else None)
        self.view = self.agg + ([None] * len(self.agg[0]),)

    def put(self, k: int, x: tuple) -> None:
        """Position ``k``'s state is now ``x``."""
        cols, agg = self.cols, self.agg
        b = k // BLOCK
        lo = b * BLOCK
        cols[0][k] = r = _nan_as(x[4], INF)
        a = agg[0]
        if r >= a[b]:  # (a larger one: no pass over the block)
            a[b] = r
        else:
            a[b] = max(cols[0][lo:lo + BLOCK])
        if len(cols) > 1:
            cols[1][k] = _nan_as(x[3], -INF)
            cols[2][k] = _nan_as(x[2], INF)
            agg[1][b] = max(cols[1][lo:lo + BLOCK])
            agg[2][b] = min(cols[2][lo:lo + BLOCK])

    def kill(self, k: int) -> None:
        """Position ``k`` is DEAD: bounds that pass any star over it."""
        self.put(k, _DEAD_BOUNDS)


_DEAD_BOUNDS = (False, 0.0, INF, -INF, -INF)  # (what a DEAD position's bounds read)


def _to_stops(live: list[Cand], m: int) -> bool:
    """Lines 18-21 when the GPUs do not run out: every job of ``live`` already holds a GPU
    (so no step sets a ``pick``) and the counts at which each stops growing (its cap, or the
    first count one more GPU does not help: :meth:`Cand.can_grow`) need at most ``m`` GPUs
    in all.  Each step then adds one GPU to one job that can grow and drops it at its stop,
    and the GPUs last until every job is dropped: whichever job each walk names, every job
    ends at its stop.  Sets those counts and returns True; else changes nothing and returns
    False (ours: a shortcut, the same counts and picks as the walks;
    tests/policies/test_elastic_uncontended.py against reference_afs_handout.py)."""
    if not live or any(c.cnt == 0 for c in live):
        return False
    stops = []
    need = 0
    for c in live:
        k, cap, p = c.cnt, c.cap, c.p
        pk = p(k)
        while k < cap:  # can_grow at count k
            pk1 = p(k + 1)
            if not pk1 > pk * (1 + 1e-9):
                break
            k, pk = k + 1, pk1
            need += 1
            if need > m:
                return False
        stops.append(k)
    for c, k in zip(live, stops):
        c.cnt = k
    return True


def afs_l_shares(jobs: list[Cand], total: int) -> None:
    """Algorithm 1, procedure AFS-L (lines 14-23): sets ``cnt`` of every job."""
    _reset(jobs)  # lines 15-16
    m = total  # line 17
    left = _fast_stage_one(jobs, m) if jobs else 0
    if left is None:
        _reset(jobs)
    else:
        m = left
    _hand_out(jobs, m, total - m, lambda st, ids, k0, k_star, traj, blocks:
              _walk_l_from(st, k0, k_star, traj, blocks), lengths=True)


def afs_p_shares(jobs: list[Cand], total: int, seed: int) -> None:
    """AFS-P's stage for at most ``total`` jobs (§3.3): every job gets one GPU, the rest
    by the length-unaware TOPPRIORITY."""
    _reset(jobs)
    m = total
    step = 0
    if not any(c.doubles_at_one() for c in jobs):
        for c in jobs:  # count-0 jobs win every (3) test against jobs holding a GPU
            if m == 0:
                break
            c.cnt, c.pick = 1, step
            step += 1
            m -= 1
    _hand_out(jobs, m, step, lambda st, ids, k0, k_star, traj, blocks:
              _walk_p_from(st, ids, seed, k0, k_star, traj, blocks))
