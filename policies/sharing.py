"""Pure math of GPU sharing from seed 000 (Luo et al.), §IV-A and §V.

* :func:`pair_avg_jct` — average JCT of a running job A and a new job B when B
  is inserted at time κ (generalises eq. 18–25 to any κ ∈ [0, t_A·i_A]).
* :func:`theorem1` — Theorem 1: the best κ is 0 (share now, full overlap, both
  slowed by ξ, eq. 5–6 / 16–17) or t_A·i_A (run B after A); the two cases of
  the proof (Case 1: t̂_A·i_A ≥ t̂_B·i_B, eq. 18–21; Case 2 otherwise, eq.
  22–25) give the share-now value, the sequential value is common to both.
* :func:`sub_batch_candidates` — the sub-batch sizes B, B/2, …, 1 that
  Algorithm 2 searches (lines 1, 5, 12), with their accumulation steps (eq. 7).
* :func:`algorithm2` — Algorithm 2 (batch-size scaling with best sharing
  benefit): for each sub-batch that fits in GPU memory beside the running job,
  evaluate Theorem 1 and keep the best (SF, b, t).

Notation (the proof's): A is the job already running, with ``i_a`` remaining
iterations at ``t_a`` s/iteration alone; B is the candidate with ``i_b``
iterations at ``t_b`` s/iteration alone *with the chosen sub-batch*.  ξ_A, ξ_B
are the interference ratios (eq. 5–6).  All times are measured from "now"
(B's arrival offset is a constant that does not change the argmin).

The paper's statement names the *new* job A, but its proof (κ = t_A·i_A is
"sequential", A's remaining work shrinks with κ) treats A as the running job;
we follow the proof.  Eq. 22 as printed reads ``T_A = κ + t̂_A(i_A − κ/t̂_A)``;
A runs alone (at t_A) before κ, so the consistent form is ``κ + t̂_A(i_A −
κ/t_A)``, which is what eq. 25 (derived from it) actually uses — we implement
eq. 25, and the tests check it against a direct simulation of both jobs.

Our one addition (documented choice): ``t_b_seq`` — the iteration time B has
when it runs *after* A.  Alone, B needs no memory room beside A, so it can use
its exclusive configuration; sharing may force a smaller sub-batch (more
accumulation, eq. 7).  Default ``t_b_seq = t_b`` is the paper's formula
exactly.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Callable, Iterable, Optional, Sequence


@dataclass(frozen=True)
class PairDecision:
    """Result of Theorem 1 for one (running A, candidate B) pair.

    ``share`` is the flag SF (start B now, κ = 0); ``t_share`` / ``t_seq`` are
    the average JCTs (s, from now) of the pair for κ = 0 / κ = t_A·i_A;
    ``case`` is 1 or 2 as in the proof; ``t`` the better of the two.
    """

    share: bool
    t_share: float
    t_seq: float
    case: int

    @property
    def t(self) -> float:
        return min(self.t_share, self.t_seq)


def pair_avg_jct(kappa: float, t_a: float, i_a: float, t_b: float, i_b: float,
                 xi_a: float, xi_b: float) -> float:
    """Average JCT (from now) of A and B when B starts at ``kappa`` (closed form).

    A runs alone until κ (κ/t_A iterations), then both run slowed (t̂ = ξ·t,
    eq. 16–17) until one ends; the survivor finishes alone.  With
    D = t̂_A·(i_A − κ/t_A) the shared time A still needs:

    * D ≥ t̂_B·i_B (B ends first; at κ = 0 this is Case 1, eq. 18–21):
      T_B = κ + t̂_B·i_B, T_A = t_A·i_A + t̂_B·i_B·(1 − 1/ξ_A);
    * D < t̂_B·i_B (A ends first; Case 2, eq. 22–25):
      T_A = κ + D, T_B = κ + D + t_B·(i_B − D/t̂_B), i.e. eq. 25.

    ``kappa`` is clipped to [0, t_A·i_A] (κ = t_A·i_A is sequential execution).
    """
    ta_ia = t_a * i_a
    kappa = min(max(kappa, 0.0), ta_ia)
    ha, hb = xi_a * t_a, xi_b * t_b
    d = ha * (i_a - kappa / t_a) if t_a > 0 else 0.0
    if d >= hb * i_b:
        total = kappa + hb * i_b + ta_ia + hb * i_b * (1.0 - 1.0 / xi_a)
    else:
        total = 2.0 * kappa + d * (2.0 - 1.0 / xi_b) + t_b * i_b
    return total / 2.0


def theorem1(t_a: float, i_a: float, t_b: float, i_b: float, xi_a: float, xi_b: float,
             t_b_seq: Optional[float] = None) -> PairDecision:
    """Theorem 1 (seed 000 §V-A): compare κ = 0 with κ = t_A·i_A.

    Share-now value, by the proof's cases:

    * Case 1, t̂_A·i_A ≥ t̂_B·i_B — eq. 21:
      T̄ = t̂_B·i_B + t_A·i_A/2 − t̂_B·i_B/(2ξ_A);
    * Case 2, t̂_A·i_A < t̂_B·i_B — eq. 25 at κ = 0:
      T̄ = (1 − 1/(2ξ_B))·t̂_A·i_A + t_B·i_B/2.

    Sequential value (eq. 25 at κ = t_A·i_A, valid in both cases):
    T̄ = t_A·i_A + t_B·i_B/2 (with ``t_b_seq`` in place of t_B if given).

    Between the two ends the average JCT is piecewise linear in κ with a
    rising first piece (slope 1/2 while B would end first) and a second piece
    of slope (2ξ_B + ξ_A − 2ξ_Aξ_B)/(2ξ_B) (eq. 25), so no interior κ beats
    both ends.  SF = share only when it is strictly better (ties: run after,
    no interference risk).
    """
    if min(t_a, t_b, xi_a, xi_b) <= 0 or i_a < 0 or i_b < 0:
        raise ValueError("times and ratios must be positive, iterations non-negative")
    t_share, t_seq, case = _theorem1_numbers(t_a, i_a, t_b, i_b, xi_a, xi_b,
                                             t_b if t_b_seq is None else t_b_seq)
    return PairDecision(t_share < t_seq, t_share, t_seq, case)


def _theorem1_numbers(t_a: float, i_a: float, t_b: float, i_b: float, xi_a: float,
                      xi_b: float, tb_seq: float) -> tuple[float, float, int]:
    """(t_share, t_seq, case) of :func:`theorem1` (inputs already checked)."""
    ha, hb = xi_a * t_a, xi_b * t_b
    if ha * i_a >= hb * i_b:  # Case 1
        return hb * i_b + t_a * i_a / 2.0 - hb * i_b / (2.0 * xi_a), \
            t_a * i_a + tb_seq * i_b / 2.0, 1
    # Case 2
    return (1.0 - 1.0 / (2.0 * xi_b)) * ha * i_a + t_b * i_b / 2.0, \
        t_a * i_a + tb_seq * i_b / 2.0, 2


def sub_batch_candidates(local_batch: int) -> list[tuple[int, int]]:
    """Algorithm 2 lines 1, 5, 12: b = B, B/2, …, 1 as (sub_batch, accum_steps).

    ``local_batch`` B is the per-GPU share of the global batch.  For B not a
    power of two we use b = ⌈B/s⌉ with s = 1, 2, 4, … (so b·s ≥ B, the global
    batch is kept), stopping after b = 1.
    """
    out = []
    s = 1
    b_prev = None
    while True:
        b = -(-max(int(local_batch), 1) // s)
        if b != b_prev:
            out.append((b, s))
        b_prev = b
        if b <= 1:
            return out
        s *= 2


@dataclass(frozen=True)
class ShareChoice:
    """Algorithm 2's output (SF̄, b̄, t̄) plus the numbers behind it.

    ``fits`` is False when no candidate sub-batch fits in memory beside the
    running job (then ``share`` is False, ``t = t_seq``, and ``sub_batch`` is
    B, line 2's default).
    """

    share: bool
    sub_batch: int
    accum_steps: int
    t: float
    t_share: float
    t_seq: float
    case: int
    xi_run: float
    xi_new: float
    fits: bool


_FIELDS = tuple(f.name for f in fields(ShareChoice))
_new = object.__new__


def share_choice(*values) -> ShareChoice:
    """``ShareChoice(*values)`` (every field, in order), made without the frozen dataclass's
    ``__init__``: the same object (no ``__post_init__``: it is its attribute dict, fields in
    order) written into its dict at once instead of one ``object.__setattr__`` per field,
    about a third of the cost; sjf-bsbf makes one per exact evaluation."""
    c = _new(ShareChoice)
    c.__dict__.update(zip(_FIELDS, values))
    return c


def algorithm2(candidates: Iterable[tuple[int, int]], iter_time: Callable[[int, int], float],
               fits: Callable[[int], bool], t_run: float, i_run: float, i_new: float,
               xi_run: float, xi_new: float, t_new_seq: Optional[float] = None) -> ShareChoice:
    """Algorithm 2 (seed 000 §V-B.3): batch-size scaling with best sharing benefit.

    ``candidates`` are the (b, s) pairs of :func:`sub_batch_candidates`
    (lines 1, 5, 12); ``iter_time(b, s)`` is B's eq. 7 iteration time alone with
    sub-batch b and s accumulation steps; ``fits(b)`` says whether B's worker
    with micro-batch b fits in GPU memory beside the running job (sub-batches
    that do not are skipped — the paper's "not exceeds the GPU memory size").
    For each remaining b, Theorem 1 gives SF and the pair's JCT (line 6); the
    best (lowest t) is kept (lines 7–11).

    Deviation: line 7 compares with ``≤``; we use ``<`` so that among equal
    JCTs the larger sub-batch (fewer accumulation steps) wins.  The pair's JCT
    t of a configuration is min(t_share, t_seq) — "the JCT of the best sharing
    configuration" (input description of Alg. 2).
    """
    first_b = None
    checked = min(t_run, xi_run, xi_new) > 0 and i_run >= 0 and i_new >= 0
    fitted = []
    for b, s in candidates:
        if first_b is None:
            first_b = (b, s)
        if not fits(b):
            continue
        t_b = iter_time(b, s)
        if not checked or t_b <= 0:
            theorem1(t_run, i_run, t_b, i_new, xi_run, xi_new, t_new_seq)  # raises
        fitted.append((b, s, t_b))
    best = _best_fitting(fitted, t_run, i_run, i_new, xi_run, xi_new, t_new_seq)
    if best is not None:
        return best
    b0, s0 = first_b if first_b is not None else (1, 1)
    t_seq = t_run * i_run + (t_new_seq if t_new_seq is not None else iter_time(b0, s0)) * i_new / 2.0
    return ShareChoice(False, b0, s0, t_seq, float("inf"), t_seq, 0, xi_run, xi_new, False)


def _best_fitting(fitted: Iterable[tuple[int, int, float]], t_run: float, i_run: float,
                  i_new: float, xi_run: float, xi_new: float,
                  t_new_seq: Optional[float]) -> Optional[ShareChoice]:
    """Algorithm 2 lines 6–11 over the fitting (b, s, t_b) in search order: Theorem 1 for
    each (B's run-after time ``t_new_seq``, or t_b where None), the lowest pair JCT kept
    (strict ``<``: ties to the earlier, larger sub-batch); None when none fits."""
    best = None  # (t, b, s, t_share, t_seq, case)
    for b, s, t_b in fitted:
        t_share, t_seq, case = _theorem1_numbers(t_run, i_run, t_b, i_new, xi_run, xi_new,
                                                 t_b if t_new_seq is None else t_new_seq)
        t = min(t_share, t_seq)
        if best is None or t < best[0]:
            best = (t, b, s, t_share, t_seq, case)
    if best is None:
        return None
    t, b, s, t_share, t_seq, case = best
    return share_choice(t_share < t_seq, b, s, t, t_share, t_seq, case, xi_run, xi_new, True)


def _best_fitting_seq(fitted: Iterable[tuple[int, int, float]], t_run: float, i_run: float,
                      i_new: float, xi_run: float, xi_new: float,
                      t_new_seq: float) -> Optional[ShareChoice]:
    """:func:`_best_fitting` (Algorithm 2 lines 6–11) where B's run-after time is given:
    Theorem 1's numbers (Case 1 eq. 21, Case 2 eq. 25 at κ = 0) as
    :func:`_theorem1_numbers` makes them, with what does not depend on t_b computed once
    (t_seq, ξ_A·t_A·i_A, t_A·i_A/2, 2ξ_A and Case 2's first term): each product is the
    same floating-point operation on the same operands, so the same ShareChoice; the
    lowest pair JCT ``min(t_share, t_seq)`` kept with the strict ``<`` (ties to the
    earlier, larger sub-batch)."""
    ha = xi_run * t_run
    haia = ha * i_run
    half_a = t_run * i_run / 2.0
    two_xa = 2.0 * xi_run
    p2 = (1.0 - 1.0 / (2.0 * xi_new)) * ha * i_run
    t_seq = t_run * i_run + t_new_seq * i_new / 2.0
    best_t = best = None
    for b, s, t_b in fitted:
        hbib = xi_new * t_b * i_new
        if haia >= hbib:  # Case 1
            t_share = hbib + half_a - hbib / two_xa
            case = 1
        else:  # Case 2
            t_share = p2 + t_b * i_new / 2.0
            case = 2
        t = t_seq if t_seq < t_share else t_share  # min(t_share, t_seq)
        if best is None or t < best_t:
            best_t, best = t, (b, s, t_share, case)
    if best is None:
        return None
    b, s, t_share, case = best
    return share_choice(t_share < t_seq, b, s, best_t, t_share, t_seq, case, xi_run, xi_new,
                        True)


def algorithm2_fitted(fitted: Sequence[tuple[int, int, float]], first: tuple[int, int],
                      t_run: float, i_run: float, i_new: float, xi_run: float, xi_new: float,
                      t_new_seq: float, positive: bool = False) -> Optional[ShareChoice]:
    """:func:`algorithm2` where the fitting candidates are known: ``fitted`` the (b, s, t_b)
    of those of the search order that fit beside the running job (t_b = ``iter_time(b,
    s)``), ``first`` the search order's first (b, s), ``t_new_seq`` given.  The same
    arithmetic in the same order, so the same ShareChoice; None where :func:`algorithm2`
    would raise (an input its checks refuse): the caller runs it for its error.
    ``positive``: the caller knows every t_b of ``fitted`` is > 0 (not checked again)."""
    if not (min(t_run, xi_run, xi_new) > 0 and i_run >= 0 and i_new >= 0) \
            or (not positive and any(t_b <= 0 for _, _, t_b in fitted)):
        return None
    best = _best_fitting_seq(fitted, t_run, i_run, i_new, xi_run, xi_new, t_new_seq)
    if best is not None:
        return best
    t_seq = t_run * i_run + t_new_seq * i_new / 2.0
    return share_choice(False, first[0], first[1], t_seq, float("inf"), t_seq, 0, xi_run,
                        xi_new, False)
