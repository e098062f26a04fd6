"""``linprog(c, A_ub=A, b_ub=b, bounds=B, method="highs")`` without linprog's wrapping, for
callers that already hold the arrays linprog's HiGHS path would hand to HiGHS.

What ``linprog(method="highs")`` does in scipy 1.17.1 (``scipy/optimize/_linprog.py``,
``_linprog_util.py``, ``_linprog_highs.py``), and what is kept here:

* ``_parse_linprog`` / ``_clean_inputs``: checks (c, A_ub, b_ub finite, shapes), c and b_ub
  as float64 copies, A_ub (sparse) as a float COO copy, ``bounds`` as an (n, 2) float array
  with ``None`` -> ±inf.  Not done here: the caller passes arrays of that form and checks
  finiteness itself (it falls back to linprog otherwise, which raises linprog's error).
* ``_linprog_highs``: row bounds lhs = -inf (-> ``_replace_inf``), rhs = b_ub; A_ub stacked
  on an empty A_eq and converted to CSC (the caller passes that CSC's indptr / indices /
  data: the differential test compares them with linprog's, dtype and byte for byte); the
  options dict built below from ``_linprog_highs``'s own defaults (checked against its
  signature at first use); then **the same** ``_highs_wrapper`` (looked up on the
  ``_linprog_highs`` module at each call, so a test that records that module's calls sees
  both paths), scipy's own ``_highs_to_scipy_status_message`` and ``_check_result`` (tol
  1e-9, ``lp.bounds`` with inf, no integrality) for the status and message.
* Left out: what only builds the rest of linprog's OptimizeResult (marginals, residuals).

Exactness: HiGHS receives the same model (same arrays), the same options and the same
``Highs`` run as under linprog, so it returns the same x; the status comes from scipy's own
functions.  The fast entry is used only on the scipy versions in ``VERIFIED`` and when
every private name below exists with the expected defaults; otherwise ``entry()`` is
``None`` and callers use linprog (scipy >= 1.10 keeps working).
"""
from __future__ import annotations

VERIFIED = ("1.17.1",)

# _linprog_highs's keyword defaults the options below assume (checked at first use)
_DEFAULTS = {"time_limit": None, "presolve": True, "disp": False, "maxiter": None,
             "dual_feasibility_tolerance": None, "primal_feasibility_tolerance": None,
             "ipm_optimality_tolerance": None, "simplex_dual_edge_weight_strategy": None,
             "mip_rel_gap": None, "mip_max_nodes": None}

_entry = None  # None: not looked up yet; False: unavailable; else the _Entry


class _Entry:
    """The private scipy functions and the options linprog(method="highs") passes."""

    def __init__(self):
        import inspect

        import numpy as np
        import scipy
        import scipy.optimize._linprog_highs as lh
        from scipy.optimize._linprog_util import _check_result

        if scipy.__version__ not in VERIFIED:
            raise ImportError(f"scipy {scipy.__version__}: fast HiGHS entry not verified")
        sig = inspect.signature(lh._linprog_highs).parameters
        for k, v in _DEFAULTS.items():
            if k not in sig or sig[k].default != v or type(sig[k].default) is not type(v):
                raise ImportError(f"_linprog_highs default {k} changed")
        s_c = lh.s_c
        # as _linprog_highs builds it with every keyword at its default and solver=None
        # (method "highs"); _convert_to_highs_enum(None, ...) is None
        self.options = {
            'presolve': True,
            'sense': lh.ObjSense.kMinimize,
            'solver': None,
            'time_limit': None,
            'highs_debug_level': lh.HighsDebugLevel.kHighsDebugLevelNone,
            'dual_feasibility_tolerance': None,
            'ipm_optimality_tolerance': None,
            'log_to_console': False,
            'mip_max_nodes': None,
            'output_flag': False,
            'primal_feasibility_tolerance': None,
            'simplex_dual_edge_weight_strategy': None,
            'simplex_strategy': s_c.SimplexStrategy.kSimplexStrategyDual,
            'ipm_iteration_limit': None,
            'simplex_iteration_limit': None,
            'mip_rel_gap': None,
        }
        self.module = lh
        self.replace_inf = lh._replace_inf
        self.status_message = lh._highs_to_scipy_status_message
        self.check_result = _check_result
        self.np = np
        lh._highs_wrapper  # noqa: B018 (must exist)

    def solve(self, c, indptr, indices, data, b_ub, bounds):
        """(status, message, x) as linprog's result has them.  ``bounds``: (n, 2) float64
        with inf where unbounded (linprog's ``lp.bounds``); c, b_ub float64 1-D."""
        np = self.np
        lb, ub = bounds.T.copy()
        b_eq = np.array([], dtype=float)
        with np.errstate(invalid="ignore"):
            lhs_ub = -np.ones_like(b_ub) * np.inf
        lhs = self.replace_inf(np.concatenate((lhs_ub, b_eq)))
        rhs = self.replace_inf(np.concatenate((b_ub, b_eq)))
        lb = self.replace_inf(lb)
        ub = self.replace_inf(ub)
        res = self.module._highs_wrapper(c, indptr, indices, data, lhs, rhs, lb, ub,
                                         np.empty(0).astype(np.uint8), dict(self.options))
        if 'slack' in res:
            slack = res['slack']
            con = np.array(slack[len(b_ub):])
            slack = np.array(slack[:len(b_ub)])
        else:
            slack, con = None, None
        status, message = self.status_message(res.get('status', None), res.get('message', None))
        x = res['x']
        status, message = self.check_result(x, res.get('fun'), status, slack, con, bounds,
                                            1e-9, message, None)
        return status, message, x


def entry():
    """The fast entry, or None where it is unavailable (other scipy, missing names)."""
    global _entry
    if _entry is None:
        try:
            _entry = _Entry()
        except Exception:  # any missing/changed private piece: use linprog
            _entry = False
    return _entry or None
