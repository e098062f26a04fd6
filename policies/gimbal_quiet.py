"""How long a GIMBAL search's decisions stay as they are (issue #13: with the walks kept,
``lucid+gimbal`` at 64x8 still ran the search of every packing set at every 30 s round, about
six sets a round, nearly always to find the configuration the set already runs).

What the host policies read of a set's search (:func:`policies.gimbal_walk.walk_best`) is a
function of the outcomes of a few comparisons along the kept walk: the split (lines 3-4,
``prio(subset2) < prio(subset1)``, which moves with the clock for "deadline" and "makespan")
and each step's ``v < best_v * (1 - 1e-9)``.  Each compared quantity is built from the jobs'
remaining steps r_j (and, for "deadline", their deadline distances d_j = deadline - now) with
fixed coefficients (the kept step times).  While a set's record is kept, a job's view does
not change, so between a round at ``t`` and a later one at ``τ``:

* r_j(τ) = max(0, total - (done + rate x max(0, τ - as_of - restore))) lies in
  [max(0, r_j(t) - rate x (τ - t)), r_j(t)] (both max() are 1-Lipschitz and nondecreasing in
  the elapsed time), and d_j(τ) = d_j(t) - (τ - t);
* so each quantity moves by at most ``L x (τ - t)``: a mean of terms r_j x t_j (eq. 1) by
  the mean of their moves (t_j x rate_j; for a step's comparison v - f x best, whose terms
  are r_j x (t_j - f x b_j), by the mean of |t_j - f x b_j| x rate_j); a max of terms r_j x t_j
  (eq. 5) or of max(0, r_j x t_j - d_j) (eq. 3) by at most the largest move of its terms
  (t_j x rate_j, plus 1 for a finite deadline): max() and max(0, .) are 1-Lipschitz; a
  difference of two by the sum of their bounds; the split's mean priorities likewise.

:func:`horizon` returns the largest H such that, for every compared quantity q with
computed value q(t), |q(t)| - 2M > L x H, M a bound on what floating point can make of it
(1e-12 of the operands' magnitude and of the progress fields' magnitude: ten thousand times
the rounding of the few operations involved).  For τ in [t, t + H] every comparison then has
the same sign, exactly and in floating point, hence the same outcomes, the same steps taken,
the same best configuration.  A set whose best configuration is the one it runs (no
resizes: nothing for the host to read) is not searched again until its record changes or the
clock passes t + H; a set with resizes is searched at every round (its values are read).

Two longer rooms, each sure on its own, the larger taken (issue #13, third pass: at
gavel+gimbal most horizons were a few seconds: the split's two mean priorities fall at
nearly the same speed, and a step that leaves the slowest job as it is compares equal
values): :func:`affine_slopes` (a job past its restore falls at exactly its rate until it
could finish, so a difference of such terms moves at a slope known to within float error:
:func:`split_room`'s second room) and :func:`no_gain_room` (the terms' order)."""
from __future__ import annotations

import math
from typing import Optional

from .gimbal_coord import MAX_ATTEMPTS, MAX_FAILS

REL = 1e-12  # the float margin, relative to the magnitudes involved
QUIET_CAP = 1e7  # seconds: the longest horizon used (keeps the clock's own rounding in REL)


def _terms(objective, rems, dls, rates, errs, sts, derr=0.0, extra=None):
    """(value, L: time-Lipschitz bound, E: the error bound of the value); ``derr``: the error
    bound of a deadline distance (deadline - now); ``extra``: seconds added to each job's
    remaining time (constants: the bound L does not change, E grows by their rounding)."""
    if extra is not None:
        v = charged_value(objective, rems, dls, sts, extra)
        _, a, e = _terms(objective, rems, dls, rates, errs, sts, derr)
        return v, a, e + REL * (abs(v) + sum(extra))
    if objective == "jct":
        v = sum([r * t for r, t in zip(rems, sts)]) / len(sts)
        a = sum([t * q for t, q in zip(sts, rates)])
        e = sum([t * x for t, x in zip(sts, errs)]) + REL * abs(v)
        return v, a, e
    if objective == "makespan":  # a max moves by at most its terms' largest move
        v = max([r * t for r, t in zip(rems, sts)])
        a = max([t * q for t, q in zip(sts, rates)])
        e = sum([t * x for t, x in zip(sts, errs)]) + REL * abs(v)
        return v, a, e
    if objective == "deadline":
        v = max(max(0.0, r * t - d) for r, t, d in zip(rems, sts, dls))
        a = max([t * q + (0.0 if math.isinf(d) else 1.0) for t, q, d in zip(sts, rates, dls)])
        e = (sum([t * x for t, x in zip(sts, errs)]) + REL * abs(v)
             + sum([REL * (abs(d) + abs(r * t)) + derr for r, t, d in zip(rems, sts, dls)
                    if not math.isinf(d)]))
        return v, a, e
    raise ValueError(f"unknown objective {objective!r}")


def charged_value(objective, rems, dls, sts, extra) -> float:
    """:func:`~policies.gimbal_coord.local_objective` with ``extra`` seconds added to each job's
    remaining time, on sequences in the jobs' order (the same float;
    policies.gimbal_walk.objective_value with ``extra``)."""
    rt = [r * t + x for r, t, x in zip(rems, sts, extra)]
    if objective == "jct":
        return sum(rt) / len(rt)
    if objective == "deadline":
        return max(max(0.0, v - d) for v, d in zip(rt, dls))
    if objective == "makespan":
        return max(rt)
    raise ValueError(f"unknown objective {objective!r}")


def _room(q: float, a: float, e: float) -> float:
    """Seconds the sign of a quantity of computed value ``q`` (time-Lipschitz ``a``, error
    bound ``e``) is sure to keep: 0 when it is within twice its error of 0."""
    room = abs(q) - 2.0 * e
    if not room > 0.0:
        return 0.0
    return math.inf if a <= 0.0 else room / a


def affine_slopes(prog, now: float, rems, errs) -> tuple[list, float]:
    """(For each job an interval (lo, hi) holding the slope of its remaining steps in the
    clock, a time ``cap``) valid over [now, now + cap].  A job whose restore is over by more
    than a second (or that has none), with nonnegative ``rate`` and remaining steps clear of
    their error bound, loses exactly ``rate`` steps a second (r = total - (done + rate x
    (tau - as_of - restore)), the max(0, .) of the elapsed time inactive from now on) until
    its remaining steps could reach 0 (``cap``, from below: r(now) - 2 x err over the rate);
    any other job's slope lies in [-rate, 0] (the module doc's bound)."""
    per = []
    cap = math.inf
    for (total, done, as_of, restore, rate), r, err in zip(prog, rems, errs):
        if rate >= 0.0 and (not restore or (now - as_of) - restore > 1.0) and r > 2.0 * err:
            per.append((-rate, -rate))
            if rate > 0.0:
                c = (r - 2.0 * err) / rate * (1.0 - 1e-9)
                if c < cap:
                    cap = c
        else:
            per.append((min(0.0, -rate), max(0.0, -rate)))
    return per, cap


def _room_between(q: float, lo: float, hi: float, e: float) -> float:
    """Seconds the sign of a quantity of computed value ``q`` (error bound ``e``) whose exact
    value moves at a slope in [lo, hi] is sure to keep: its distance from 0 less twice the
    error, over its worst speed towards 0."""
    room = abs(q) - 2.0 * e
    if not room > 0.0:
        return 0.0
    speed = -lo if q > 0.0 else hi
    return math.inf if speed <= 0.0 else room / speed


def split_room(objective: str, rems, dls, rates, errs, kept, derr: float = 0.0,
               slopes: Optional[tuple] = None) -> float:
    """Seconds from now for which the split (lines 3-4) is sure to stay (inf for "jct": the
    utilisations do not move).  ``slopes``: :func:`affine_slopes`' answer: then also the
    room from the priorities' slope interval (a difference of means of r_j x t_j, or of
    r_j x t_j - d_j whose d_j fall at exactly 1 a second: the same in both means) up to
    ``cap``; the larger of the two rooms (each is sure)."""
    if objective == "jct":
        return math.inf
    st0 = kept.st0
    s1, s2 = kept.subsets

    def prio(sub):
        tot = lip = err = 0.0
        for i in sub:
            x = rems[i] * st0[i]
            lip += st0[i] * rates[i]
            err += st0[i] * errs[i] + REL * abs(x)
            if objective == "deadline":
                if math.isinf(dls[i]):
                    # -(inf - x): the subset's priority is -inf while the job has no
                    # deadline, whatever the clock: the comparison's outcome is fixed
                    return None
                tot += -(dls[i] - x)
                lip += 1.0
                err += REL * abs(dls[i]) + derr
            else:
                tot += x
        return tot / len(sub), lip, err

    p1, p2 = prio(s1), prio(s2)
    if p1 is None or p2 is None:
        return math.inf
    q = p2[0] - p1[0]
    e = p2[2] + p1[2] + REL * (abs(p1[0]) + abs(p2[0]))
    h = _room(q, p2[1] + p1[1], e)
    if slopes is None:
        return h
    per, cap = slopes

    def slope(sub):  # the interval of the subset's mean r_j x t_j's slope, and its magnitude
        # ("deadline": each mean of -d_j rises at exactly 1 a second; in q they cancel)
        lo = hi = mag = 0.0
        for i in sub:
            a, b = per[i]
            lo += st0[i] * a
            hi += st0[i] * b
            mag += abs(st0[i] * a) + abs(st0[i] * b)
        return lo / len(sub), hi / len(sub), mag

    l1, h1, m1 = slope(s1)
    l2, h2, m2 = slope(s2)
    eps = REL * (m1 + m2 + 1.0)  # the float error of the slope bounds, generously
    return max(h, min(_room_between(q, l2 - h1 - eps, h2 - l1 + eps, e), cap))


def no_gain_room(objective: str, rems, sts, bst, errs, slopes) -> float:
    """Seconds from now for which a step of step times ``sts`` is sure not to beat the best
    configuration's ``bst`` (0.0 where this is not shown), from the terms' order rather than
    the values' distance (a step that leaves the slowest job as it is has the best's value,
    and the distance it keeps is the 1e-9 of the gain test).  With finite remaining steps
    r_j >= 0 (a max(0, .)) and finite step times:

    * every t_j >= b_j: each term r_j x t_j >= r_j x b_j in floating point too (a correctly
      rounded product is monotone, and so are the subtraction of d_j, max(0, .), the sum in
      the same order, the division by the count and max()), so the value is at least the
      best's, which is at least best x (1 - 1e-9) (a value >= 0): no gain at any time;
    * "makespan", D = {j: t_j >= b_j} not empty: with k the job of D with the largest
      r_k x b_k, while r_k x b_k > r_j x b_j for every j outside D the best's value is a term
      of D, at most the step's term of that job: no gain.  Each r_k x b_k - r_j x b_j moves at
      a slope within ``slopes``' intervals (:func:`affine_slopes`, up to its cap): the least
      room of their signs."""
    n = len(sts)
    fin = math.isfinite
    if not (all(map(fin, sts)) and all(map(fin, bst)) and all(map(fin, rems))):
        return 0.0
    dom = [i for i in range(n) if sts[i] >= bst[i]]
    if len(dom) == n:
        return math.inf
    if objective != "makespan" or not dom or slopes is None:
        return 0.0
    per, cap = slopes
    k = max(dom, key=lambda i: rems[i] * bst[i])
    bk = bst[k]
    xk = rems[k] * bk
    lk, hk = per[k]
    h = cap
    for j in range(n):
        if sts[j] >= bst[j]:
            continue
        bj = bst[j]
        xj = rems[j] * bj
        y = xk - xj
        if not y > 0.0:
            return 0.0
        lj, hj = per[j]
        e = bk * errs[k] + bj * errs[j] + REL * (abs(xk) + abs(xj))
        eps = REL * (abs(bk * lk) + abs(bk * hk) + abs(bj * lj) + abs(bj * hj) + 1.0)
        h = min(h, _room_between(y, bk * lk - bj * hj - eps, bk * hk - bj * lj + eps, e))
        if h <= 0.0:
            return 0.0
    return h


def horizon(objective: str, rems, dls, rates, errs, kept, walk, derr: float = 0.0,
            max_fails: int = MAX_FAILS, max_attempts: int = MAX_ATTEMPTS,
            slopes: Optional[tuple] = None, switch_cost: float = 0.0) -> float:
    """Seconds from now for which :func:`policies.gimbal_walk.walk_best` of this set on
    ``kept``'s ``walk`` (with ``switch_cost``) takes the same decisions (module doc).
    ``rates``: each job's iterations per second, ``errs``: the error bound of each job's
    remaining steps; ``dls``: deadline distances (None unless "deadline"), ``derr`` their
    error bound; ``slopes``: :func:`affine_slopes` for the split's room.  With a
    ``switch_cost``, the switching-cost test on the walk's best (charged value against the
    start's, :func:`~policies.gimbal_coord.declines`) is one more compared quantity."""
    h = split_room(objective, rems, dls, rates, errs, kept, derr, slopes)
    if h <= 0.0:
        return 0.0
    f = 1 - 1e-9
    bst = kept.st0
    best = start = _terms(objective, rems, dls, rates, errs, bst, derr)
    bcfg = walk.head
    n = 0
    if walk.swell is not None:
        bst = walk.swell[1]
        best = _terms(objective, rems, dls, rates, errs, bst, derr)
        n = 1
    fails = 0
    i = 0
    while n < max_attempts:
        step = walk.step(i)
        if step is None:
            break
        i += 1
        n += 1
        sts = step[2]
        v = _terms(objective, rems, dls, rates, errs, sts, derr)
        if sts != bst:  # (the same step times: v == best, never below best x f: no gain)
            if objective == "jct":  # linear in r: the coefficients' own differences
                lip = sum([abs(t - f * b) * q for t, b, q in zip(sts, bst, rates)]) / len(sts)
            else:
                lip = v[1] + best[1]
            q = v[0] - best[0] * f
            room = _room(q, lip, v[2] + best[2] + REL * (abs(v[0]) + abs(best[0])))
            if room < h and not v[0] < best[0] * f:  # no gain now: is it sure to stay?
                room = max(room, no_gain_room(objective, rems, sts, bst, errs, slopes))
            h = min(h, room)
            if h <= 0.0:
                return 0.0
        if v[0] < best[0] * f:
            best, bst, bcfg, fails = v, sts, step[0], 0
        else:
            fails += 1
        if fails >= max_fails:
            break
    if switch_cost > 0:
        extra = walk.switch_costs(bcfg, switch_cost)
        if extra is not None:  # declines(): charged > before x g
            g = 1 + 1e-9
            c = _terms(objective, rems, dls, rates, errs, bst, derr, extra)
            if objective == "jct":
                lip = sum([abs(b - g * t) * q for b, t, q in zip(bst, kept.st0, rates)]) / len(bst)
            else:
                lip = c[1] + start[1]
            h = min(h, _room(c[0] - start[0] * g, lip,
                             c[2] + start[2] + REL * (abs(c[0]) + abs(start[0]))))
    return h
