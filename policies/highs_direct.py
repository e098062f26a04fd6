"""``linprog(c, A_ub=A, b_ub=b, bounds=B, method="highs")`` without linprog's wrapping, for
callers that already hold the arrays linprog's HiGHS path would hand to HiGHS.

What ``linprog(method="highs")`` does in scipy 1.17.1 (``scipy/optimize/_linprog.py``,
``_linprog_util.py``, ``_linprog_highs.py``), and what is kept here:

* ``_parse_linprog`` / ``_clean_inputs``: checks (c, A_ub, b_ub finite, shapes), c and b_ub
  as float64 copies, A_ub (sparse) as a float COO copy, ``bounds`` as an (n, 2) float array
  with ``None`` -> ±inf.  Not done here: the caller passes arrays of that form and checks
  finiteness itself (it falls back to linprog otherwise, which raises linprog's error).
* ``_linprog_highs``: row bounds lhs = -inf, rhs = b_ub, each through ``_replace_inf``
  (±inf -> ±kHighsInf, written out here); A_ub stacked on an empty A_eq and converted to
  CSC (the caller passes that CSC's indptr / indices / data; the differential test compares
  them with linprog's: dtype int64, shape, bytes); the options dict, built below from
  ``_linprog_highs``'s own defaults (checked against its signature at first use).
* ``_highs_wrapper`` (scipy/optimize/_highspy/_highs_wrapper.py), LP path: a HighsLp with
  the fields set in its order, a fresh ``_Highs``, a HighsOptions holding what its option
  loop sets (that loop, with its own ``check_option``, is run once at first use instead of
  at every call: it builds six HighsOptionsManager objects per call, about 0.4 ms, for an
  answer that never changes), passOptions, passModel, run, getModelStatus, getInfo,
  getSolution: ``_run`` below.  Left out: getBasis and the per-column marginals loop
  (only for linprog's marginals).
* ``_check_result`` (tol 1e-9, ``lp.bounds`` with inf, no integrality): for an optimal
  answer its feasibility test, for this LP's shape (no A_eq, no integrality: x within
  bounds ± its tolerance, slack ≥ −tolerance, no NaN).
* Anything else — HiGHS answering other than "optimal", or that test failing — makes
  :meth:`_Entry.solve` return ``None`` and the caller runs ``linprog`` itself, whose status,
  message and error are then scipy's own (the rare path: this LP is feasible and bounded).
* Left out: what only builds the rest of linprog's OptimizeResult (marginals, residuals).

Exactness: HiGHS receives the same model (same vectors), the same option values and the
same sequence of calls on a fresh ``Highs`` as under linprog, so it returns the same x;
any other outcome is linprog's own.  tests/policies/test_gavel_mtd_differential.py
records what every ``Highs`` is handed (model, all option values) and returns, under both paths.  The fast
entry is used only on the scipy versions in ``VERIFIED`` and when every private name used
exists with the expected defaults and linprog's wrapper is scipy's own; otherwise
``entry()`` is ``None`` and callers use linprog (scipy >= 1.10 keeps working).
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
        import importlib
        import inspect

        import numpy as np
        import scipy
        import scipy.optimize._linprog_highs as lh

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
        self.np = np
        self.core = core = importlib.import_module("scipy.optimize._highspy._core")
        hw = importlib.import_module("scipy.optimize._highspy._highs_wrapper")
        if lh._highs_wrapper is not hw._highs_wrapper or hw._h is not core:
            raise ImportError("linprog's HiGHS entry is not the wrapper replicated here")
        self.optimal = core.HighsModelStatus.kOptimal
        self.error = core.HighsStatus.kError
        self.sets = self._options_set(hw)
        self.highs_options = core.HighsOptions()  # passOptions copies it (const &)
        for key, val in self.sets:
            setattr(self.highs_options, key, val)
        self.inf = float(core.kHighsInf)
        self.tol = np.sqrt(1e-9) * 10  # _check_result's, from linprog's default tol

    def _options_set(self, hw):
        """(name, value) that _highs_wrapper's option loop sets on its HighsOptions for
        ``self.options``, in its order: its own loop, run once here with its own checks
        (``check_option`` on a fresh Highs); any option it would skip with a warning makes
        the entry unavailable (never expected: these are linprog's own defaults)."""
        core = self.core
        mgr = hw.hopt.HighsOptionsManager()
        probe = core._Highs()
        sets = []
        for key, val in self.options.items():
            if val is None or key in ("sense",):
                continue
            opt_type = mgr.get_option_type(key)
            if opt_type == -1:
                raise ImportError(f"HiGHS option {key} unknown")
            if key in ("presolve", "parallel"):
                if not isinstance(val, bool):
                    raise ImportError(f"HiGHS option {key}: not a bool")
                val = "on" if val else "off"
            opt_type = core.HighsOptionType(opt_type)
            status, msg = hw.check_option(probe, key, val)
            if opt_type == core.HighsOptionType.kBool and not isinstance(val, bool):
                raise ImportError(f"HiGHS option {key}: not a bool")
            if status != 0:
                raise ImportError(f"HiGHS option {key}: {msg}")
            sets.append((key, val))
        return tuple(sets)

    def _run(self, c, indptr, indices, data, lhs, rhs, lb, ub):
        """_highs_wrapper's LP path (no integrality) up to its optimal result, minus what
        builds only the marginals (basis, per-column loop) and the per-call option checks
        (done once in :meth:`_options_set`): the same HighsLp fields set in the same
        order, a fresh Highs, the HighsOptions with the same options (built once: passOptions
        copies it), the same calls.
        None where the wrapper would not return an optimal solution: the caller then
        runs the wrapper itself for its exact answer."""
        core = self.core
        lp = core.HighsLp()
        lp.num_col_ = c.size
        lp.num_row_ = rhs.size
        lp.a_matrix_.num_col_ = c.size
        lp.a_matrix_.num_row_ = rhs.size
        lp.a_matrix_.format_ = core.MatrixFormat.kColwise
        lp.col_cost_ = c
        lp.col_lower_ = lb
        lp.col_upper_ = ub
        lp.row_lower_ = lhs
        lp.row_upper_ = rhs
        lp.a_matrix_.start_ = indptr
        lp.a_matrix_.index_ = indices
        lp.a_matrix_.value_ = data
        highs = core._Highs()
        if highs.passOptions(self.highs_options) == self.error:
            return None
        if highs.passModel(lp) == self.error:
            return None
        if highs.run() == self.error:
            return None
        model_status = highs.getModelStatus()
        info = highs.getInfo()
        if model_status != self.optimal:
            return None
        solution = highs.getSolution()
        return {"x": self.np.array(solution.col_value), "slack": rhs - solution.row_value,
                "fun": info.objective_function_value}

    def solve(self, c, indptr, indices, data, b_ub, bounds):
        """linprog's ``res.x`` where linprog would succeed with it (HiGHS optimal and the
        answer within ``_check_result``'s tolerance), else ``None`` (the caller runs
        linprog).  ``bounds``: (n, 2) float64 with inf where unbounded (linprog's
        ``lp.bounds``); c, b_ub float64 1-D, finite."""
        np = self.np
        inf = self.inf
        lb, ub = bounds.T.copy()
        # _linprog_highs: lhs = -inf (no A_eq), rhs = b_ub, then _replace_inf on each:
        # ±inf -> sign · kHighsInf (written out: its errstate block costs more than this)
        lhs = np.full(b_ub.size, -inf)
        rhs = b_ub.copy()
        for a in (rhs, lb, ub):
            k = np.isinf(a)
            if k.any():
                a[k] = np.sign(a[k]) * inf
        res = self._run(c, indptr, indices, data, lhs, rhs, lb, ub)
        if res is None:
            return None
        # _check_result's test of an optimal answer for this LP (no integrality, no A_eq)
        x, slack = res["x"], res["slack"]
        tol = self.tol
        if (np.isnan(x).any() or np.isnan(res["fun"]) or np.isnan(slack).any()
                or not ((x >= bounds[:, 0] - tol) & (x <= bounds[:, 1] + tol)).all()
                or (slack < -tol).any()):
            return None
        return x


def entry():
    """The fast entry, or None where it is unavailable (other scipy, missing names)."""
    global _entry
    if _entry is None:
        try:
            _entry = _Entry()
        except Exception:  # any missing/changed private piece: use linprog
            _entry = False
    return _entry or None
