"""Solver back-ends behind one typed result: HiGHS and OR-Tools, for Pyomo and matrix models.

* :func:`solve_pyomo` solves a Pyomo model: HiGHS through Pyomo's (new) HiGHS interface, or
  OR-Tools (SCIP for MIPs, GLOP for LPs) after translating the model's linear rows.
* :func:`solve_matrix` solves a :class:`~synergy_opt.matrix.MatrixModel` (the
  fast path) with highspy directly or OR-Tools.

Both return :class:`SolveResult`; nothing is stored on the model.  A time limit is honoured
and a non-optimal outcome is a status, never an exception, unless the caller asks for
optimality with :func:`require_optimal` (which raises :class:`NotOptimalError`).  Pyomo is
imported lazily so the fast path does not pay its start-up cost.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from synergy_opt.matrix import MatrixModel, csc_columns

log = logging.getLogger(__name__)

#: Relative MIP gap used when the caller does not give one: tight, so "optimal" means the
#: optimum to well within the 1e-6 the tests compare at.
DEFAULT_REL_GAP: float = 1e-9
#: SCIP's infinity: a bound of this size means "none yet", not a number to report.
SCIP_INFINITY: float = 1e20
BACKENDS: tuple[str, ...] = ("highs", "ortools")


class TerminationStatus(StrEnum):
    """How a solve ended (solver-neutral)."""

    OPTIMAL = "optimal"
    TIME_LIMIT = "time_limit"
    INFEASIBLE = "infeasible"
    UNBOUNDED = "unbounded"
    INFEASIBLE_OR_UNBOUNDED = "infeasible_or_unbounded"
    #: Stopped at a node, iteration or solution limit: a deliberate stop, like a time limit
    #: (HiGHS reports its ``mip_max_nodes`` as "Solution limit reached").
    LIMIT = "limit"
    ERROR = "error"


class NotOptimalError(RuntimeError):
    """A solve that had to be optimal was not; carries the :class:`SolveResult`."""

    def __init__(self, what: str, result: SolveResult) -> None:
        super().__init__(f"{what}: {result.solver} ended with status {result.status}")
        self.result = result


@dataclass(frozen=True, slots=True, eq=False)
class SolveResult:
    """One solve's outcome.

    ``values`` maps ``(component name, index)`` to a value for Pyomo models; ``x`` holds the
    column values for matrix models.  ``dual_bound`` is the solver's proven bound (for an
    optimal LP, the objective); for a maximisation it is never below the true optimum.
    """

    status: TerminationStatus
    objective: float | None
    dual_bound: float | None
    mip_gap: float | None
    runtime_s: float
    solver: str
    values: Mapping[tuple[str, Any], float] = field(default_factory=dict)
    x: np.ndarray | None = None
    message: str = ""
    #: Row duals of an optimal LP (HiGHS; ``None`` otherwise), in HiGHS's sign: for a
    #: maximisation, how much the objective rises per unit a row's bound is raised.
    row_dual: np.ndarray | None = None
    #: Where ``lp_first`` solved the LP relaxation, found its vertex fractional and ran the
    #: MIP: the relaxation's optimum and row duals (as ``row_dual``), else ``None``.  A
    #: caller can bound the MIP with other right-hand sides from them.
    relaxation_objective: float | None = None
    relaxation_row_dual: np.ndarray | None = None

    @property
    def has_solution(self) -> bool:
        """Whether a feasible point (optimal or incumbent) came back."""
        return self.objective is not None and (self.x is not None or bool(self.values))


def require_optimal(result: SolveResult, what: str) -> SolveResult:
    """Return ``result`` if optimal, else raise :class:`NotOptimalError`."""
    if result.status is not TerminationStatus.OPTIMAL or not result.has_solution:
        raise NotOptimalError(what, result)
    return result


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"unknown solver {backend!r}; known: {', '.join(BACKENDS)}")


# --------------------------------------------------------------------------- highspy

_banner_lock = threading.Lock()
_banner_done = False


def _new_highs() -> Any:
    """A silent ``highspy.Highs``; the first one's licence banner is kept off standard output.

    HiGHS prints its banner from C++ on the first construction in a process, which would
    corrupt JSON written to standard output by ``synergy-opt solve``.
    """
    global _banner_done
    import highspy

    with _banner_lock:
        if not _banner_done:
            try:
                saved = os.dup(1)
            except OSError:  # no usable fd 1 (embedded use): nothing to protect
                saved = -1
            if saved >= 0:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, 1)
                try:
                    h = highspy.Highs()
                finally:
                    os.dup2(saved, 1)
                    os.close(saved)
                    os.close(devnull)
            else:
                h = highspy.Highs()
            _banner_done = True
        else:
            h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    return h


def highs_holding(mm: MatrixModel) -> Any:
    """A silent ``highspy.Highs`` holding ``mm``, passed as arrays.

    Why arrays: assigning numpy arrays to a ``HighsLp``'s vector fields converts them
    element by element (about 0.25 ms for the 256-column placement LP of a 128-GPU round,
    a quarter of its solve); the array form of ``passModel`` reads their buffers.  The
    model HiGHS gets is the same (equal solution vectors on the rounds compared).
    """
    import highspy

    h = _new_highs()
    status = h.passModel(
        mm.num_cols,
        mm.num_rows,
        len(mm.a_value),
        int(highspy.MatrixFormat.kColwise),
        int(highspy.ObjSense.kMaximize if mm.maximize else highspy.ObjSense.kMinimize),
        0.0,
        np.ascontiguousarray(mm.cost, dtype=np.float64),
        np.ascontiguousarray(mm.col_lower, dtype=np.float64),
        np.ascontiguousarray(mm.col_upper, dtype=np.float64),
        np.ascontiguousarray(mm.row_lower, dtype=np.float64),
        np.ascontiguousarray(mm.row_upper, dtype=np.float64),
        np.ascontiguousarray(mm.a_start, dtype=np.int32),
        np.ascontiguousarray(mm.a_index, dtype=np.int32),
        np.ascontiguousarray(mm.a_value, dtype=np.float64),
        # 1 integer, 0 continuous (HighsVarType); an LP's zeros leave it an LP.
        np.ascontiguousarray(mm.integer, dtype=np.int32),
    )
    if status == highspy.HighsStatus.kError:
        raise ValueError(f"HiGHS refused model {mm.name!r} ({mm.num_cols} columns)")
    return h


def set_highs_options(h: Any, options: Mapping[str, bool | int | float | str]) -> None:
    """Set each option on ``h``; one HiGHS refuses (a misspelt name, a wrong type) is an
    error, not a silent default."""
    import highspy

    for key, value in options.items():
        if h.setOptionValue(key, value) != highspy.HighsStatus.kOk:
            raise ValueError(f"HiGHS option {key}={value!r} was refused")


_threads_in_use: int | None = None


def _highs_threads(h: Any, threads: int | None) -> None:
    """Set HiGHS's thread count; its scheduler is process-wide, so a change needs a reset.

    Without the reset a second solve asking for a different count fails with an error.
    """
    global _threads_in_use
    if threads is None:
        return
    with _banner_lock:
        if _threads_in_use != threads:  # also the first time: a default-sized one may exist
            h.resetGlobalScheduler(True)
        _threads_in_use = int(threads)
    h.setOptionValue("threads", int(threads))


def _highs_matrix(
    mm: MatrixModel,
    time_limit: float | None,
    rel_gap: float,
    threads: int | None,
    simplex: bool,
    node_limit: int | None = None,
    start: np.ndarray | None = None,
    options: Mapping[str, bool | int | float | str] | None = None,
    stop_past: float | None = None,
) -> SolveResult:
    import highspy

    try:
        h = highs_holding(mm)
    except ValueError as e:  # as a refused model ran before: an error status, no answer
        return SolveResult(TerminationStatus.ERROR, None, None, None, 0.0, "highs", message=str(e))
    if start is not None:
        sol = highspy.HighsSolution()
        sol.col_value = np.asarray(start, dtype=np.float64)
        sol.value_valid = True
        h.setSolution(sol)
    if time_limit is not None:
        h.setOptionValue("time_limit", float(max(time_limit, 1e-3)))
    h.setOptionValue("mip_rel_gap", float(rel_gap))
    h.setOptionValue("mip_abs_gap", 1e-9)
    _highs_threads(h, threads)
    if node_limit is not None:
        h.setOptionValue("mip_max_nodes", int(node_limit))
    if simplex and not mm.is_mip:
        h.setOptionValue("solver", "simplex")
    set_highs_options(h, options or {})
    if stop_past is not None and mm.is_mip:
        _stop_past(h, stop_past, mm.maximize)
    t0 = time.perf_counter()
    h.run()
    runtime = time.perf_counter() - t0
    ms = h.getModelStatus()
    info = h.getInfo()
    S = highspy.HighsModelStatus
    status = {
        S.kOptimal: TerminationStatus.OPTIMAL,
        S.kTimeLimit: TerminationStatus.TIME_LIMIT,
        S.kInfeasible: TerminationStatus.INFEASIBLE,
        S.kUnbounded: TerminationStatus.UNBOUNDED,
        S.kUnboundedOrInfeasible: TerminationStatus.INFEASIBLE_OR_UNBOUNDED,
        S.kSolutionLimit: TerminationStatus.LIMIT,
        S.kIterationLimit: TerminationStatus.LIMIT,
        S.kInterrupt: TerminationStatus.LIMIT,  # stop_past
    }.get(ms, TerminationStatus.ERROR)
    has_sol = info.primal_solution_status == 2  # kSolutionStatusFeasible
    got = h.getSolution() if has_sol else None
    x = np.asarray(got.col_value, dtype=np.float64) if got is not None else None
    objective = float(info.objective_function_value) if has_sol else None
    if mm.is_mip:
        bound = float(info.mip_dual_bound)
        dual_bound = bound if math.isfinite(bound) else None
        gap = float(info.mip_gap) if has_sol and math.isfinite(info.mip_gap) else None
    else:
        dual_bound = objective if status is TerminationStatus.OPTIMAL else None
        gap = 0.0 if status is TerminationStatus.OPTIMAL else None
    row_dual = None
    if got is not None and not mm.is_mip and status is TerminationStatus.OPTIMAL and got.dual_valid:
        row_dual = np.asarray(got.row_dual, dtype=np.float64)
    return SolveResult(
        status,
        objective,
        dual_bound,
        gap,
        runtime,
        "highs",
        x=x,
        message=h.modelStatusToString(ms),
        row_dual=row_dual,
    )


def _stop_past(h: Any, level: float, maximize: bool) -> None:
    """Interrupt ``h``'s branch-and-bound once it has an incumbent and its dual bound says
    no solution reaches ``level`` (below it when maximising, above it when minimising).
    HiGHS calls back at the same points of its search on every run, so where it stops does
    not depend on the machine."""
    import highspy

    def check(_kind: int, _message: str, out: Any, answer: Any, _data: Any) -> None:
        if not math.isfinite(out.mip_primal_bound):
            return
        bound = out.mip_dual_bound
        if (bound < level) if maximize else (bound > level):
            answer.user_interrupt = True

    h.setCallback(check, None)
    h.startCallback(highspy.cb.HighsCallbackType.kCallbackMipInterrupt)


#: A guarded solve is killed this long after its time limit (plus the share below): HiGHS
#: stops within a second of its limit when it checks it at all.
GUARD_GRACE_S: float = 5.0
GUARD_SHARE: float = 0.25


def guard_deadline(time_limit: float) -> float:
    """When a guarded solve with ``time_limit`` is killed (seconds after its start)."""
    return time_limit * (1.0 + GUARD_SHARE) + GUARD_GRACE_S


def _guarded_highs(
    mm: MatrixModel,
    time_limit: float,
    rel_gap: float,
    threads: int | None,
    simplex: bool,
    node_limit: int | None,
    start: np.ndarray | None,
    options: Mapping[str, bool | int | float | str] | None,
) -> SolveResult:
    """:func:`_highs_matrix` in a child process, killed at :func:`guard_deadline`."""
    from synergy_opt.deadline import ChildFailed, DeadlineExceeded, run_with_deadline

    args = (mm, time_limit, rel_gap, threads, simplex, node_limit, start, dict(options or {}))
    t0 = time.perf_counter()
    try:
        return run_with_deadline(_highs_matrix, args, guard_deadline(time_limit))
    except DeadlineExceeded as e:
        message = f"HiGHS ran past its {time_limit:.1f}-s time limit and was stopped ({e})"
        status = TerminationStatus.TIME_LIMIT
    except ChildFailed as e:  # the child's own exceptions (a refused option) are raised
        message = f"HiGHS's child process failed: {e}"
        status = TerminationStatus.ERROR
    log.warning("%s: %s", mm.name, message)
    return SolveResult(status, None, None, None, time.perf_counter() - t0, "highs", message=message)


#: An LP value this close to an integer counts as integral for :func:`_highs_lp_first`
#: (HiGHS's own MIP feasibility tolerance is 1e-6; its LP vertices of integral problems sit
#: within 1e-9 of the integers on the rounds measured).
LP_FIRST_INTEGRALITY_TOL: float = 1e-7


def _highs_lp_first(
    mm: MatrixModel, time_limit: float | None, threads: int | None
) -> tuple[SolveResult | None, SolveResult | None]:
    """The MIP ``mm`` solved as its LP relaxation, when the relaxation's vertex is integral
    (else ``None``: the caller then runs the MIP), and, where it is fractional, the
    relaxation's own solve (else ``None``: an integral vertex carries its duals itself).

    Why: the super-machine MIPs of OPT's rounds count jobs per (class, grid point) and their
    LP vertex is integral on most rounds (6 of 8 multi-GPU 128-GPU rounds); HiGHS's MIP
    machinery (presolve, clique table, root heuristics) costs about ten times the LP there
    (48 rounds: MIP median 2.5 ms; primal simplex without presolve mean 0.29 ms).
    An integral optimal vertex of the relaxation is an optimal MIP solution and its objective
    a proven bound with no gap; it may be a different optimum from the one the MIP returns.
    """
    relaxed = dataclasses.replace(mm, integer=np.zeros_like(mm.integer))
    # Without presolve a small LP solves in a third of the time; primal simplex from the
    # slack basis lands on the vertex the MIP returns more often than dual simplex (29 of
    # 39 integral super-machines against 14): fewer answers move.
    res = _highs_matrix(
        relaxed,
        time_limit,
        DEFAULT_REL_GAP,
        threads,
        simplex=True,
        options={"presolve": "off", "simplex_strategy": 4},
    )
    x = res.x
    if res.status is not TerminationStatus.OPTIMAL or x is None or res.objective is None:
        return None, None
    if not np.all(np.isfinite(x)):  # NaN would pass the integrality test below
        return None, None
    ints = np.asarray(mm.integer, dtype=bool)
    rounded = np.round(x[ints])
    if np.any(np.abs(x[ints] - rounded) > LP_FIRST_INTEGRALITY_TOL):
        return None, res
    x[ints] = rounded
    objective = float(np.dot(mm.cost, x))
    bound = max(objective, res.objective) if mm.maximize else min(objective, res.objective)
    integral = dataclasses.replace(
        res, objective=objective, dual_bound=bound, x=x, message="Optimal (integral LP relaxation)"
    )
    return integral, None


# --------------------------------------------------------------------------- OR-Tools


def _ortools_matrix(
    mm: MatrixModel,
    time_limit: float | None,
    rel_gap: float,
    threads: int | None,
    node_limit: int | None = None,
    start: np.ndarray | None = None,
) -> SolveResult:
    from ortools.linear_solver import pywraplp

    solver = pywraplp.Solver.CreateSolver("SCIP" if mm.is_mip else "GLOP")
    if solver is None:  # pragma: no cover - depends on the OR-Tools build
        return SolveResult(
            TerminationStatus.ERROR,
            None,
            None,
            None,
            0.0,
            "ortools",
            message="OR-Tools has no SCIP/GLOP",
        )
    inf = solver.infinity()

    def fin(v: float) -> float:
        return v if math.isfinite(v) else (inf if v > 0 else -inf)

    xs = [
        (solver.IntVar if mm.integer[i] else solver.NumVar)(
            fin(float(mm.col_lower[i])), fin(float(mm.col_upper[i])), f"x{i}"
        )
        for i in range(mm.num_cols)
    ]
    for r, row in enumerate(mm.rows()):
        ct = solver.RowConstraint(fin(float(mm.row_lower[r])), fin(float(mm.row_upper[r])), f"r{r}")
        for col, v in row:
            ct.SetCoefficient(xs[col], v)
    obj = solver.Objective()
    for i in range(mm.num_cols):
        if mm.cost[i]:
            obj.SetCoefficient(xs[i], float(mm.cost[i]))
    if mm.maximize:
        obj.SetMaximization()
    else:
        obj.SetMinimization()
    if start is not None and mm.is_mip:
        solver.SetHint(xs, [float(v) for v in start])
    if time_limit is not None:
        solver.SetTimeLimit(int(max(time_limit, 1e-3) * 1000))
    if threads is not None:
        solver.SetNumThreads(int(threads))
    if node_limit is not None and mm.is_mip:
        solver.SetSolverSpecificParametersAsString(f"limits/nodes = {int(node_limit)}\n")
    params = pywraplp.MPSolverParameters()
    if mm.is_mip:
        params.SetDoubleParam(params.RELATIVE_MIP_GAP, float(rel_gap))
    t0 = time.perf_counter()
    code = solver.Solve(params)
    runtime = time.perf_counter() - t0
    P = pywraplp.Solver
    if code == P.OPTIMAL:
        status = TerminationStatus.OPTIMAL
    elif code == P.FEASIBLE:
        status = TerminationStatus.TIME_LIMIT
    elif code == P.INFEASIBLE:
        status = TerminationStatus.INFEASIBLE
    elif code == P.UNBOUNDED:
        status = TerminationStatus.UNBOUNDED
    elif code == P.NOT_SOLVED and time_limit is not None and runtime >= time_limit * 0.95:
        status = TerminationStatus.TIME_LIMIT
    else:
        status = TerminationStatus.ERROR
    has_sol = code in (P.OPTIMAL, P.FEASIBLE)
    x = np.array([v.solution_value() for v in xs], dtype=np.float64) if has_sol else None
    objective = float(obj.Value()) if has_sol else None
    if mm.is_mip:
        # BestBound() is only meaningful once SCIP has a solution (it reads 0 for a solve
        # stopped before any); a bound is never worse than the incumbent it bounds.
        bound = float(obj.BestBound()) if has_sol else math.nan
        # SCIP reports its infinity (1e20) for "no bound yet", a finite float.
        dual_bound = bound if math.isfinite(bound) and abs(bound) < SCIP_INFINITY else None
        if dual_bound is not None and objective is not None:
            dual_bound = max(dual_bound, objective) if mm.maximize else min(dual_bound, objective)
        gap = (
            abs(dual_bound - objective) / max(abs(objective), 1e-10)
            if objective is not None and dual_bound is not None
            else None
        )
    else:
        dual_bound = objective if status is TerminationStatus.OPTIMAL else None
        gap = 0.0 if status is TerminationStatus.OPTIMAL else None
    name = "ortools-scip" if mm.is_mip else "ortools-glop"
    return SolveResult(status, objective, dual_bound, gap, runtime, name, x=x)


# --------------------------------------------------------------------------- public API


def _finite(mm: MatrixModel, res: SolveResult) -> SolveResult:
    """``res``, or an error result where the solver handed back non-finite numbers.

    HiGHS 1.16 has reported "optimal" with NaN in two of 132 columns and a NaN objective
    (``opt``'s neighbourhood MIP on a generated 6-20-server round, bench/fuzz_rounds.py):
    such a point is no solution and its bound is not to be trusted, so callers see a
    solve that ended in error and take their fallback."""
    bad_x = res.x is not None and not bool(np.isfinite(res.x).all())
    bad_obj = res.objective is not None and not math.isfinite(res.objective)
    if not (bad_x or bad_obj):
        return res
    log.warning(
        "%s %s: %s with a non-finite solution (objective %s); treated as an error",
        mm.name,
        res.solver,
        res.status,
        res.objective,
    )
    return SolveResult(
        TerminationStatus.ERROR,
        None,
        None,
        None,
        res.runtime_s,
        res.solver,
        message=f"non-finite solution ({res.message or res.status})",
    )


def solve_matrix(
    mm: MatrixModel,
    backend: str = "highs",
    *,
    time_limit: float | None = None,
    rel_gap: float = DEFAULT_REL_GAP,
    threads: int | None = None,
    vertex: bool = True,
    node_limit: int | None = None,
    start: np.ndarray | None = None,
    highs_options: Mapping[str, bool | int | float | str] | None = None,
    guard: bool = False,
    lp_first: bool = False,
    stop_past: float | None = None,
) -> SolveResult:
    """Solve a matrix model; ``vertex`` asks LPs for a basic solution (simplex).

    ``node_limit`` caps branch-and-bound nodes: unlike a time limit it stops at the same
    incumbent on every run, so callers that need deterministic output use it.  ``start``
    (one value per column) is a MIP start: HiGHS keeps it as its first incumbent if it is
    feasible, OR-Tools takes it as a hint; it never changes the optimum.  ``highs_options``
    are set on HiGHS last (names as in HiGHS's option list; a refused one is a
    ``ValueError``); OR-Tools ignores them.

    ``guard`` (HiGHS MIPs with a time limit) runs the solve in a child process that is
    killed :func:`guard_deadline` seconds in: HiGHS does not check its limit everywhere
    (:mod:`synergy_opt.deadline`).  A killed solve is a time-limit result with no solution
    and no bound.  Meant for long exact solves: a child costs about 30 ms.

    ``lp_first`` (HiGHS MIPs, unguarded): solve the LP relaxation first and return its
    vertex when it is integral (:func:`_highs_lp_first`), else run the MIP in the time left.
    Meant for small MIPs solved many times whose relaxations are mostly integral;
    ``highs_options`` and ``start`` then apply to the MIP only.

    ``stop_past`` (HiGHS MIPs, unguarded): stop (status LIMIT, the incumbent kept) once an
    incumbent exists and the dual bound is below this level (above it when minimising): for
    a caller that only needs solutions reaching it.  OR-Tools and guarded solves ignore it.
    """
    _check_backend(backend)
    t_entry = time.perf_counter()
    res: SolveResult | None = None
    relaxation: SolveResult | None = None
    if backend == "highs" and lp_first and mm.is_mip and not guard:
        res, relaxation = _highs_lp_first(mm, time_limit, threads)
        if res is None and time_limit is not None:
            time_limit = max(time_limit - (time.perf_counter() - t_entry), 1e-3)
    if res is None:  # else the LP relaxation's integral vertex: the MIP's optimum
        if backend == "highs" and guard and mm.is_mip and time_limit is not None:
            res = _guarded_highs(
                mm, time_limit, rel_gap, threads, vertex, node_limit, start, highs_options
            )
        elif backend == "highs":
            res = _highs_matrix(
                mm,
                time_limit,
                rel_gap,
                threads,
                vertex,
                node_limit,
                start,
                highs_options,
                stop_past,
            )
        else:
            res = _ortools_matrix(mm, time_limit, rel_gap, threads, node_limit, start)
        if relaxation is not None and relaxation.row_dual is not None:
            res = dataclasses.replace(
                res,
                relaxation_objective=relaxation.objective,
                relaxation_row_dual=relaxation.row_dual,
            )
    res = _finite(mm, res)
    log.debug(
        "%s %s: %s obj=%s bound=%s in %.3fs",
        mm.name,
        res.solver,
        res.status,
        res.objective,
        res.dual_bound,
        res.runtime_s,
    )
    return res


def pyomo_to_matrix(model: Any) -> tuple[MatrixModel, list[Any]]:
    """Translate a linear Pyomo model into a :class:`MatrixModel` (and its variable list)."""
    import pyomo.environ as pyo
    from pyomo.repn import generate_standard_repn

    variables = list(model.component_data_objects(pyo.Var, active=True, descend_into=True))
    pos = {id(v): i for i, v in enumerate(variables)}
    cols: list[list[tuple[int, float]]] = [[] for _ in variables]
    rl: list[float] = []
    ru: list[float] = []
    for con in model.component_data_objects(pyo.Constraint, active=True, descend_into=True):
        repn = generate_standard_repn(con.body, quadratic=False)
        if not repn.is_linear():
            raise ValueError(f"{con.name}: only linear constraints can go to OR-Tools")
        r = len(rl)
        for v, coef in zip(repn.linear_vars, repn.linear_coefs, strict=True):
            cols[pos[id(v)]].append((r, float(coef)))
        const = float(repn.constant)
        lb, ub = con.lb, con.ub
        rl.append(-math.inf if lb is None else float(lb) - const)
        ru.append(math.inf if ub is None else float(ub) - const)
    objs = list(model.component_data_objects(pyo.Objective, active=True, descend_into=True))
    if len(objs) != 1:
        raise ValueError(f"expected one active objective, found {len(objs)}")
    orepn = generate_standard_repn(objs[0].expr, quadratic=False)
    cost = np.zeros(len(variables))
    for v, coef in zip(orepn.linear_vars, orepn.linear_coefs, strict=True):
        cost[pos[id(v)]] += float(coef)
    start, idx, val = csc_columns(cols)
    lower = np.array([-math.inf if v.lb is None else float(v.lb) for v in variables])
    upper = np.array([math.inf if v.ub is None else float(v.ub) for v in variables])
    integer = np.array([bool(v.is_integer()) for v in variables], dtype=bool)
    mm = MatrixModel(
        cost,
        lower,
        upper,
        integer,
        np.array(rl),
        np.array(ru),
        start,
        idx,
        val,
        maximize=objs[0].sense == pyo.maximize,
        name=model.name,
    )
    return mm, variables


def _key(v: Any) -> tuple[str, Any]:
    return (v.parent_component().local_name, v.index())


def _objective_constant(model: Any) -> float:
    import pyomo.environ as pyo
    from pyomo.repn import generate_standard_repn

    obj = next(iter(model.component_data_objects(pyo.Objective, active=True)))
    return float(generate_standard_repn(obj.expr, quadratic=False).constant)


def solve_pyomo(
    model: Any,
    backend: str = "highs",
    *,
    time_limit: float | None = None,
    rel_gap: float = DEFAULT_REL_GAP,
    threads: int | None = None,
    vertex: bool = True,
) -> SolveResult:
    """Solve a Pyomo model with HiGHS (Pyomo's interface) or OR-Tools; values by (name, index)."""
    _check_backend(backend)
    if backend == "ortools":
        mm, variables = pyomo_to_matrix(model)
        res = _ortools_matrix(mm, time_limit, rel_gap, threads)
        const = _objective_constant(model)
        values = (
            {}
            if res.x is None
            else {_key(v): float(x) for v, x in zip(variables, res.x, strict=True)}
        )
        return SolveResult(
            res.status,
            None if res.objective is None else res.objective + const,
            None if res.dual_bound is None else res.dual_bound + const,
            res.mip_gap,
            res.runtime_s,
            res.solver,
            values,
        )
    return _highs_pyomo(model, time_limit, rel_gap, threads, vertex)


def _highs_pyomo(
    model: Any, time_limit: float | None, rel_gap: float, threads: int | None, vertex: bool
) -> SolveResult:
    import pyomo.environ as pyo
    from pyomo.contrib.solver.common.factory import SolverFactory
    from pyomo.contrib.solver.common.results import SolutionStatus, TerminationCondition

    opt = SolverFactory("highs")
    is_mip = any(v.is_integer() for v in model.component_data_objects(pyo.Var, active=True))
    options: dict[str, Any] = {"mip_abs_gap": 1e-9}
    if vertex and not is_mip:
        options["solver"] = "simplex"
    kwargs: dict[str, Any] = {
        "rel_gap": rel_gap,
        "solver_options": options,
        "raise_exception_on_nonoptimal_result": False,
        "load_solutions": False,
    }
    if time_limit is not None:
        kwargs["time_limit"] = float(max(time_limit, 1e-3))
    if threads is not None:
        _highs_threads(_new_highs(), threads)  # reset the shared scheduler if the count changes
        kwargs["threads"] = int(threads)
    t0 = time.perf_counter()
    res = opt.solve(model, **kwargs)
    runtime = time.perf_counter() - t0
    TC = TerminationCondition
    status = {
        TC.convergenceCriteriaSatisfied: TerminationStatus.OPTIMAL,
        TC.maxTimeLimit: TerminationStatus.TIME_LIMIT,
        TC.provenInfeasible: TerminationStatus.INFEASIBLE,
        TC.locallyInfeasible: TerminationStatus.INFEASIBLE,
        TC.unbounded: TerminationStatus.UNBOUNDED,
        TC.infeasibleOrUnbounded: TerminationStatus.INFEASIBLE_OR_UNBOUNDED,
    }.get(res.termination_condition, TerminationStatus.ERROR)
    has_sol = res.solution_status in (SolutionStatus.optimal, SolutionStatus.feasible)
    values: dict[tuple[str, Any], float] = {}
    if has_sol:
        values = {_key(v): float(x) for v, x in res.solution_loader.get_vars().items()}
    objective = (
        float(res.incumbent_objective) if has_sol and res.incumbent_objective is not None else None
    )
    bound = res.objective_bound
    dual_bound = float(bound) if bound is not None and math.isfinite(bound) else None
    if not is_mip and status is TerminationStatus.OPTIMAL:
        dual_bound = objective
    gap = None
    if objective is not None and dual_bound is not None:
        gap = abs(dual_bound - objective) / max(abs(objective), 1e-10)
    return SolveResult(status, objective, dual_bound, gap, runtime, "highs", values)
