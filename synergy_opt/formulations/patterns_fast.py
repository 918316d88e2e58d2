"""Server patterns on the fast path: column generation, the bound, and the cut counting MIP.

:mod:`~synergy_opt.formulations.patterns` states the pricing problem, the master and the
extra counting rows in Pyomo (the reference); this module builds the same models as
matrices (same column and row order and names; tests prove equal optima) and runs column
generation:

1. The master LP over the patterns so far (seeded with the servers of known allocations)
   gives prices; per class of identical servers a one-server pricing MIP finds the best
   pattern.  Whatever the prices, master value + sum_c N_c max(0, pricing bound_c - mu_c)
   bounds the counting optimum (a Lagrangian bound), so the loop may stop at any time.
2. Each server's pricing optimum is a valid row of the counting model
   (``pat_dual_cut[s]``); with these rows and ``pat_full_gpus`` its LP is as tight as the
   best bound found, and the counting MIP can run from there (``solve_with_patterns``).
   ``opt-exact`` does not run that MIP over the whole round (with the rows HiGHS's
   branching was not reliably faster on 128-GPU rounds, formulations/patterns.md): its
   branch-and-price (:mod:`~synergy_opt.formulations.branch_price`) prices with this module
   at every node and adds the rows only to its leaves' MIPs.

Public API::

    pattern_bound(data, *, time_limit, seeds, target) -> PatternBound
    round_bound(inst, jobs, *, time_limit, warm_start) -> (PatternBound, CountingMatrix, starts)
    pattern_search(inst, jobs) -> str | None
    patterns_apply(inst, jobs) -> bool
    build_pricing_matrix(data, s, prices) -> tuple[MatrixModel, list[ColKey], list[str]]
    build_master_matrix(data, patterns) -> tuple[MatrixModel, list[ColKey], list[str]]
    solve_with_patterns(inst, jobs, *, solver, time_limit, threads, warm_start) -> CountingResult
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from synergy_opt.formulations.counting import _model_data, part_bounds
from synergy_opt.formulations.counting_fast import (
    EXACT_REL_GAP,
    ColKey,
    CountingMatrix,
    CountingResult,
    _result,
    build_counting_matrix,
    start_from_placements,
)
from synergy_opt.formulations.patterns import (
    SHORT_PENALTY,
    Pattern,
    PatternCut,
    Prices,
    full_gpu_floor,
    gpu_slack,
    master_split_rows,
    one_role_classes,
    pricing_costs,
    server_columns,
    server_shapes,
    share_class_of,
)
from synergy_opt.matrix import MatrixModel, triplet_model
from synergy_opt.solve import SolveResult, TerminationStatus, set_highs_options, solve_matrix
from synergy_opt.types import Job, PlacementPart, RoundInstance

log = logging.getLogger(__name__)

#: A pattern enters the master when its reduced value exceeds this.
PRICE_EPS: float = 1e-6
#: Column generation stops after this many rounds of pricing (a guard; the bound is valid
#: whenever it stops).
MAX_ITERATIONS: int = 400
#: At most this many of a pricing solve's improving solutions enter the master per round.
PATTERNS_PER_PRICING: int = 8
#: Where a spread job's floor depends on its split, the master states the split
#: (``patterns.md``, "Floors that depend on the split") and branch-and-price is exact
#: there; off, such rounds get the restriction / relaxation pair as before (for
#: ``bench/bench_floor_pair.py``, side by side).
SPLIT_MASTER: bool = True


@dataclass(frozen=True, slots=True)
class PatternBound:
    """Column generation's outcome: the best Lagrangian bound and the rows it proves.

    ``bound`` bounds every allocation of the round's jobs that keeps the floors (None when
    no pricing round finished); ``converged`` says no pattern was left to add, so
    ``bound`` is the master LP optimum (the Dantzig-Wolfe bound).
    """

    bound: float | None
    master_value: float | None
    iterations: int
    patterns: tuple[Pattern, ...]
    converged: bool
    runtime_s: float
    cuts: tuple[PatternCut, ...]


class _Rows:
    """Named rows as (row, column, value) triplets."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.lower: list[float] = []
        self.upper: list[float] = []
        self.trip: list[tuple[int, int, float]] = []

    def add(self, name: str, terms: Sequence[tuple[int, float]], lo: float, hi: float) -> None:
        row = len(self.names)
        self.names.append(name)
        self.lower.append(lo)
        self.upper.append(hi)
        merged: dict[int, float] = {}
        for c, v in terms:  # a pattern may hold one class at two points: one entry
            merged[c] = merged.get(c, 0.0) + v
        self.trip += [(row, c, v) for c, v in merged.items()]


def _name(base: str, idx: tuple[int, ...]) -> str:
    return f"{base}[{','.join(str(i) for i in idx)}]" if idx else base


def _matrix(
    name: str,
    cost: Sequence[float],
    upper: Sequence[float],
    integer: Sequence[bool],
    rows: _Rows,
) -> MatrixModel:
    return triplet_model(
        [t[0] for t in rows.trip],
        [t[1] for t in rows.trip],
        [t[2] for t in rows.trip],
        cost,
        upper,
        integer,
        rows.lower,
        rows.upper,
        name=name,
        row_names=rows.names,
    )


# --------------------------------------------------------------------------- pricing


def build_pricing_matrix(
    data: Mapping[str, Any], s: int, prices: Prices
) -> tuple[MatrixModel, list[ColKey], list[str]]:
    """The pricing MIP of :func:`~synergy_opt.formulations.patterns.build_pricing` as a
    matrix: columns x[k, p], then a, u, cp, mp per slot; the same rows in the same order."""
    xs, slots = server_columns(data, s)
    wx, wp = pricing_costs(data, s, prices)
    g, xpt, inf = data["g"], data["x_point"], math.inf
    cols: list[ColKey] = [("x", kp) for kp in xs]
    cost = [wx[kp] for kp in xs]
    upper = [float(data["x_upper"][s, k, p]) for k, p in xs]
    integer = [True] * len(xs)
    bnd = {ki: part_bounds(dict(data), *ki, s) for ki in slots}
    pos: dict[tuple[str, tuple[int, int]], int] = {}
    for name, ub, is_int in (("a", 0, True), ("u", None, True), ("cp", 1, True), ("mp", 2, False)):
        for ki in slots:
            pos[name, ki] = len(cols)
            cols.append((name, ki))
            cost.append(wp[name, ki])
            upper.append(1.0 if ub is None else float(bnd[ki][ub]))
            integer.append(is_int)
    rows = _Rows()
    full = full_gpu_floor(data, s)
    for base, var, cap, lo in (
        ("cnt_gpu_capacity", "a", data["G"][s], full),
        ("eq2_cpu_capacity", "cp", data["C"][s], -inf),
        ("eq3_mem_capacity", "mp", data["M"][s], -inf),
    ):
        coef = {"cnt_gpu_capacity": 0, "eq2_cpu_capacity": 1, "eq3_mem_capacity": 2}[base]
        terms = [
            (j, float(g[k] if coef == 0 else xpt[s, k, p][coef - 1])) for j, (k, p) in enumerate(xs)
        ]
        terms += [(pos[var, ki], 1.0) for ki in slots]
        rows.add(base, terms, lo, float(cap))
    for k in one_role_classes(data, s):
        terms = [(j, 1.0) for j, (kk, _) in enumerate(xs) if kk == k]
        terms += [(pos["u", ki], 1.0) for ki in slots if ki[0] == k]
        rows.add(_name("pat_one_role", (k,)), terms, -inf, float(data["n"][k]))
    for ki in slots:
        rows.add(_name("cnt_part_has_gpu", ki), [(pos["a", ki], 1.0), (pos["u", ki], -1.0)], 0, inf)
    for base, var, b in (
        ("cnt_gpus_only_on_used", "a", 0),
        ("cnt_cpus_only_on_used", "cp", 1),
        ("cnt_mem_only_on_used", "mp", 2),
    ):
        for ki in slots:
            terms = [(pos[var, ki], 1.0), (pos["u", ki], -float(bnd[ki][b]))]
            rows.add(_name(base, ki), terms, -inf, 0.0)
    return _matrix("pattern_pricing", cost, upper, integer, rows), cols, rows.names


# --------------------------------------------------------------------------- master


def build_master_matrix(
    data: Mapping[str, Any],
    patterns: Sequence[Pattern],
    *,
    relax: bool = True,
    shapes: tuple[tuple[int, ...], ...] | None = None,
) -> tuple[MatrixModel, list[ColKey], list[str]]:
    """The master of :func:`~synergy_opt.formulations.patterns.build_master` as a matrix:
    columns z[j], y[k, i, q], v[k, i, j], short[k]; rows in the Pyomo model's order.
    ``shapes``: :func:`server_shapes` of ``data``, when the caller has it (column
    generation builds the master hundreds of times)."""
    shapes = server_shapes(data) if shapes is None else shapes
    spts, g, inf = data["slot_points"], data["g"], math.inf
    slots = list(data["slots"])
    classes = sorted(g)
    n_pat = len(patterns)
    v_index, split_gpu_rows, split_floor_rows = master_split_rows(data)
    split_slots = list(dict.fromkeys((k, i) for k, i, _ in v_index))
    # rows: eq4_class_cover per class, pat_server_count per shape, then per slot
    # cnt_one_point, pat_spread_gpus, pat_spread_cpus, pat_spread_mem (each family in
    # slot order); then cnt_split_one per split slot, pat_split_gpus, cnt_split_floor
    cover_row = {k: r for r, k in enumerate(classes)}
    count_row = len(classes)
    slot_no = {ki: t for t, ki in enumerate(slots)}
    one_row = count_row + len(shapes)
    spread_row = [one_row + len(slots) * (f + 1) for f in range(3)]
    split_one_row = {ki: one_row + 4 * len(slots) + t for t, ki in enumerate(split_slots)}
    split_gpu_row = {
        idx: one_row + 4 * len(slots) + len(split_slots) + t
        for t, (idx, _) in enumerate(split_gpu_rows)
    }
    first_floor_row = one_row + 4 * len(slots) + len(split_slots) + len(split_gpu_rows)
    # a pattern's parts on a split slot count in the row of its servers' share class
    share_row: dict[tuple[int, tuple[int, int]], int] = {}
    for (k, i, c), _ in split_gpu_rows:
        for shape, run in enumerate(shapes):
            if share_class_of(data, (k, i), run[0]) == c:
                share_row[shape, (k, i)] = split_gpu_row[k, i, c]
    trip_r: list[int] = []
    trip_c: list[int] = []
    trip_v: list[float] = []
    for j, p in enumerate(patterns):
        merged: dict[int, float] = {}
        for (k, _), c in p.whole:  # a pattern may hold one class at two points: one entry
            merged[cover_row[k]] = merged.get(cover_row[k], 0.0) + c
        merged[count_row + p.shape] = 1.0
        for ki, a, cp, mp in p.parts:
            t = slot_no[ki]
            for f, v in enumerate((a, cp, mp)):
                merged[spread_row[f] + t] = float(v)
            if (p.shape, ki) in share_row:
                merged[share_row[p.shape, ki]] = float(a)
        for r in sorted(merged):
            trip_r.append(r)
            trip_c.append(j)
            trip_v.append(merged[r])
    cols: list[ColKey] = [("z", (j,)) for j in range(n_pat)]
    cost = [p.value for p in patterns]
    # no column bound: pat_server_count alone holds z to N_c, so its dual is the class's
    # price mu_c that the Lagrangian bound charges (patterns.md, ``z``)
    upper = [inf] * n_pat
    # cnt_split_floor entries of the v and y columns
    v_floor: dict[tuple[int, int, int], list[tuple[int, float]]] = {}
    y_floor: dict[tuple[int, int, int], list[tuple[int, float]]] = {}
    for t, ((k, i, _), js, qs) in enumerate(split_floor_rows):
        for jj in js:
            v_floor.setdefault((k, i, jj), []).append((first_floor_row + t, 1.0))
        for q in qs:
            y_floor.setdefault((k, i, q), []).append((first_floor_row + t, -1.0))

    def column(key: ColKey, value: float, entries: Sequence[tuple[int, float]]) -> None:
        for r, v in entries:
            trip_r.append(r)
            trip_c.append(len(cols))
            trip_v.append(v)
        cols.append(key)
        cost.append(value)
        upper.append(1.0)

    for k, i in slots:
        t = slot_no[k, i]
        for q, (cq, mq, wq) in enumerate(spts[k, i]):
            entries = [
                (cover_row[k], 1.0),
                (one_row + t, 1.0),
                (spread_row[0] + t, -float(g[k])),
                (spread_row[1] + t, -float(cq)),
                (spread_row[2] + t, -float(mq)),
            ]
            if (k, i) in split_one_row:
                entries.append((split_one_row[k, i], -1.0))
            column(("y", (k, i, q)), wq, entries + y_floor.get((k, i, q), []))
    gpu_coef = dict(split_gpu_rows)
    for k, i, jj in v_index:
        entries = [(split_one_row[k, i], 1.0)]
        for c in range(len(data["share_classes"][k, i])):
            coefs = gpu_coef.get((k, i, c))
            if coefs is not None and coefs[jj]:
                entries.append((split_gpu_row[k, i, c], -float(coefs[jj])))
        column(("v", (k, i, jj)), 0.0, entries + v_floor.get((k, i, jj), []))
    for k in classes:
        trip_r.append(cover_row[k])
        trip_c.append(len(cols))
        trip_v.append(1.0)
        cols.append(("short", (k,)))
        cost.append(-SHORT_PENALTY)
        upper.append(inf)
    integer = [not relax] * (len(cols) - len(classes)) + [False] * len(classes)
    names = [_name("eq4_class_cover", (k,)) for k in classes]
    lower = [float(data["n"][k]) for k in classes]
    upper_row = list(lower)
    names += [_name("pat_server_count", (c,)) for c in range(len(shapes))]
    lower += [-inf] * len(shapes)
    upper_row += [float(len(run)) for run in shapes]
    names += [_name("cnt_one_point", ki) for ki in slots]
    lower += [-inf] * len(slots)
    upper_row += [1.0] * len(slots)
    for f, base in enumerate(("pat_spread_gpus", "pat_spread_cpus", "pat_spread_mem")):
        names += [_name(base, ki) for ki in slots]
        lower += [0.0] * len(slots)
        upper_row += [0.0 if f == 0 else inf] * len(slots)
    names += [_name("cnt_split_one", ki) for ki in split_slots]
    names += [_name("pat_split_gpus", idx) for idx, _ in split_gpu_rows]
    lower += [0.0] * (len(split_slots) + len(split_gpu_rows))
    upper_row += [0.0] * (len(split_slots) + len(split_gpu_rows))
    names += [_name("cnt_split_floor", idx) for idx, _, _ in split_floor_rows]
    lower += [-inf] * len(split_floor_rows)
    upper_row += [0.0] * len(split_floor_rows)
    mm = triplet_model(
        trip_r,
        trip_c,
        trip_v,
        cost,
        upper,
        integer,
        lower,
        upper_row,
        name="pattern_master",
        row_names=names,
    )
    return mm, cols, names


def _highs(mm: MatrixModel) -> Any:
    """A silent HiGHS holding ``mm`` (fixed random seed: same model, same run)."""
    from synergy_opt.solve import highs_holding

    h = highs_holding(mm)
    h.setOptionValue("random_seed", 0)
    return h


def _lp_duals(mm: MatrixModel) -> tuple[float, np.ndarray] | None:
    """Optimal value and row duals of an LP (HiGHS simplex); None unless optimal."""
    import highspy

    h = _highs(mm)
    h.setOptionValue("solver", "simplex")
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None
    return float(h.getInfo().objective_function_value), np.asarray(h.getSolution().row_dual)


#: HiGHS options of the pricing MIP, a one-server knapsack of about 100 columns solved
#: hundreds of times per round, to optimality.  Presolve costs more than it saves (101
#: pricing solves of split-penalty 128 seed 2: 6.1 s of CPU with it, 4.3 s without).  Its
#: time goes into the root node, not branching (one node: 44 of 55 ms a call on split-
#: penalty 128 seed 8), mostly primal heuristics, which find nothing the proof needs here,
#: and the cut pool: with the heuristics off, a small pool and no restart, the 109 calls
#: of that round's root column generation took 20 instead of 61 ms each (same optima;
#: more improving solutions saved, 409 against 325).
PRICING_HIGHS_OPTIONS: Mapping[str, bool | int | float | str] = MappingProxyType(
    {
        "presolve": "off",
        "mip_heuristic_run_root_reduced_cost": False,
        "mip_heuristic_run_zi_round": False,
        "mip_heuristic_run_shifting": False,
        "mip_heuristic_run_rins": False,
        "mip_heuristic_run_rens": False,
        "mip_heuristic_run_feasibility_jump": False,
        "mip_pool_soft_limit": 10,
        "mip_allow_restart": False,
    }
)


def _pricing_solve(
    mm: MatrixModel, time_limit: float | None
) -> tuple[float | None, list[np.ndarray]]:
    """The pricing MIP's proven bound and its solutions, best first: the optimum and the
    improving ones HiGHS met on the way (several patterns per round of pricing)."""

    h = _highs(mm)
    set_highs_options(h, PRICING_HIGHS_OPTIONS)
    h.setOptionValue("mip_rel_gap", 1e-9)
    h.setOptionValue("mip_abs_gap", 1e-9)
    h.setOptionValue("mip_improving_solution_save", True)
    if time_limit is not None:
        h.setOptionValue("time_limit", float(max(time_limit, 1e-3)))
    h.run()
    info = h.getInfo()
    bound = float(info.mip_dual_bound)
    if not math.isfinite(bound):
        return None, []
    sols = [np.asarray(v.col_value, dtype=np.float64) for v in h.getSavedMipSolutions()]
    if info.primal_solution_status == 2:
        sols.append(np.asarray(h.getSolution().col_value, dtype=np.float64))
        bound = max(bound, float(info.objective_function_value))
    return bound, sols[::-1]


def _prices(
    data: Mapping[str, Any],
    names: Sequence[str],
    duals: np.ndarray,
    shapes: tuple[tuple[int, ...], ...] | None = None,
) -> Prices:
    """The master's duals by row (``shapes``: :func:`server_shapes` of ``data``, when the
    caller has it: column generation asks once per round of pricing)."""
    shapes = server_shapes(data) if shapes is None else shapes
    at = dict(zip(names, duals.tolist(), strict=True))
    slots = list(data["slots"])
    return Prices(
        cover={k: at[_name("eq4_class_cover", (k,))] for k in data["g"]},
        count={c: at[_name("pat_server_count", (c,))] for c in range(len(shapes))},
        gpus={ki: at[_name("pat_spread_gpus", ki)] for ki in slots},
        cpus={ki: at[_name("pat_spread_cpus", ki)] for ki in slots},
        mem={ki: at[_name("pat_spread_mem", ki)] for ki in slots},
        split={idx: at[_name("pat_split_gpus", idx)] for idx, _ in master_split_rows(data)[1]},
    )


def _pattern(
    data: Mapping[str, Any], c: int, s: int, values: Mapping[ColKey, float]
) -> Pattern | None:
    """The pattern of server s (shape c) in a solution keyed like the pricing columns."""
    whole = tuple(
        sorted(
            ((k, p), int(round(v)))
            for (name, (k, p)), v in values.items()
            if name == "x" and round(v) >= 1
        )
    )
    parts: list[tuple[Any, int, int, float]] = []  # ki: an "a" column's (k, i)
    for (name, ki), v in sorted(values.items()):
        if name == "a" and round(v) >= 1:
            parts.append(
                (ki, int(round(v)), int(round(values["cp", ki])), max(0.0, values["mp", ki]))
            )
    if not whole and not parts:
        return None
    value = math.fsum(data["x_point"][s, k, p][2] * n for (k, p), n in whole)
    return Pattern(c, whole, tuple(parts), value)


def _seed_patterns(
    data: Mapping[str, Any], cm: CountingMatrix, seeds: Sequence[np.ndarray]
) -> list[Pattern]:
    """Every server's contents in each known counting solution, once each."""
    shapes = server_shapes(data)
    shape_of = {s: c for c, run in enumerate(shapes) for s in run}
    out: dict[Pattern, None] = {}
    for vec in seeds:
        per: dict[int, dict[ColKey, float]] = {s: {} for s in data["G"]}
        for (name, idx), v in zip(cm.columns, vec, strict=True):
            if name == "x":
                per[idx[0]]["x", (idx[1], idx[2])] = float(v)
            elif name in ("a", "u", "cp", "mp"):
                per[idx[2]][name, (idx[0], idx[1])] = float(v)
        for s, values in per.items():
            p = _pattern(data, shape_of[s], s, values)
            if p is not None:
                out[p] = None
    return list(out)


def pattern_bound(
    data: Mapping[str, Any],
    *,
    time_limit: float | None = None,
    seeds: Sequence[np.ndarray] = (),
    target: float | None = None,
    cm: CountingMatrix | None = None,
    max_iterations: int = MAX_ITERATIONS,
    ceiling: float | None = None,
) -> PatternBound:
    """Column generation over server patterns; stops when no pattern prices out, when the
    bound reaches ``target`` (a known allocation's value: then it is proven optimal), at
    ``time_limit``, after ``max_iterations`` rounds of pricing, or once the restricted
    master's value reaches ``ceiling`` (a bound known otherwise: the master over every
    pattern, and so every bound this could still give, is at least that value; split
    penalties 128 GPUs seed 0, from TUNE's answer: 32 of 51 rounds).  The bound is valid
    wherever it stops.  ``seeds``: counting-model solutions whose servers start the master.
    """
    t0 = time.perf_counter()
    cm = cm or build_counting_matrix(data)
    shapes = server_shapes(data)
    patterns = _seed_patterns(data, cm, seeds)
    known = set(patterns)
    pricing = {
        c: build_pricing_matrix(data, run[0], _zero_prices(data)) for c, run in enumerate(shapes)
    }
    best: float | None = None
    best_cuts: tuple[PatternCut, ...] = ()
    master_value: float | None = None
    converged = False
    it = 0
    while it < max_iterations:
        it += 1
        mm, _, names = build_master_matrix(data, patterns, shapes=shapes)
        solved = _lp_duals(mm)
        if solved is None:
            break
        master_value, duals = solved
        if ceiling is not None and master_value >= ceiling + 1e-9 * max(1.0, abs(ceiling)):
            log.debug("patterns: master %s at or above the ceiling %s", master_value, ceiling)
            break
        prices = _prices(data, names, duals, shapes)
        bound = master_value
        added = 0
        cuts: list[PatternCut] = []
        for c, run in enumerate(shapes):
            left = None if time_limit is None else time_limit - (time.perf_counter() - t0)
            if left is not None and left <= 0:
                return _done(best, best_cuts, master_value, it, patterns, False, t0)
            s = run[0]
            pm, pcols, _ = pricing[c]
            wx, wp = pricing_costs(data, s, prices)
            cost = np.asarray([wx[idx] if n == "x" else wp[n, idx] for n, idx in pcols])
            top, sols = _pricing_solve(dataclasses.replace(pm, cost=cost), left)
            if top is None:
                return _done(best, best_cuts, master_value, it, patterns, False, t0)
            bound += len(run) * max(0.0, top - prices.count[c])
            cuts += _server_cuts(data, run, pcols, cost, top)
            for x in sols[:PATTERNS_PER_PRICING]:
                if float(cost @ x) - prices.count[c] <= PRICE_EPS:
                    continue
                values = {key: float(v) for key, v in zip(pcols, x, strict=True)}
                p = _pattern(data, c, s, values)
                if p is not None and p not in known:
                    known.add(p)
                    patterns.append(p)
                    added += 1
        if best is None or bound < best:
            best, best_cuts = bound, tuple(cuts)
        tol = EXACT_REL_GAP * max(1.0, abs(best))
        if added == 0:
            converged = True
            break
        if target is not None and best - target <= tol:
            break
    return _done(best, best_cuts, master_value, it, patterns, converged, t0)


def _zero_prices(data: Mapping[str, Any]) -> Prices:
    zero = dict.fromkeys(data["slots"], 0.0)
    return Prices(dict.fromkeys(data["g"], 0.0), {}, zero, zero, zero)


def _server_cuts(
    data: Mapping[str, Any],
    run: Sequence[int],
    pcols: Sequence[ColKey],
    cost: np.ndarray,
    top: float,
) -> list[PatternCut]:
    """``pat_dual_cut[s]`` for every server of one class: priced columns <= pricing bound."""
    out = []
    rhs = top + 1e-6 * max(1.0, abs(top))
    for s in run:
        coef = []
        for (name, idx), v in zip(pcols, cost.tolist(), strict=True):
            if abs(v) <= 1e-12:
                continue
            key = (s, *idx) if name == "x" else (*idx, s)
            coef.append(((name, key), v))
        out.append(PatternCut(s, tuple(coef), rhs))
    return out


def _done(
    best: float | None,
    cuts: tuple[PatternCut, ...],
    master: float | None,
    it: int,
    patterns: Sequence[Pattern],
    converged: bool,
    t0: float,
) -> PatternBound:
    out = PatternBound(best, master, it, tuple(patterns), converged, time.perf_counter() - t0, cuts)
    log.debug(
        "patterns: bound %s (master %s) after %d rounds, %d patterns, %.2fs",
        best,
        master,
        it,
        len(patterns),
        out.runtime_s,
    )
    return out


# --------------------------------------------------------------------------- counting + rows


def strengthened_counting(
    data: Mapping[str, Any], cuts: Sequence[PatternCut], floors: Sequence[PatternCut] = ()
) -> CountingMatrix:
    """The counting matrix with ``pat_full_gpus`` and ``pat_dual_cut`` rows appended (the
    order of :func:`~synergy_opt.formulations.patterns.add_pattern_rows`), then per
    cut of ``floors`` a ``bp_rc_floor`` row: the cut's sum at least its ``rhs``
    (branch-and-price's reduced-cost fixing, ``formulations/branch_price.md``)."""
    cm = build_counting_matrix(data)
    mm = cm.matrix
    pos = {key: c for c, key in enumerate(cm.columns)}
    d = gpu_slack(data)
    extra = _Rows()
    x_at: dict[int, list[int]] = {s: [] for s in data["G"]}
    for c, (name, idx) in enumerate(cm.columns):
        if name == "x":
            x_at[idx[0]].append(c)
        elif name == "a":
            x_at[idx[2]].append(c)
    for s in sorted(data["G"]):
        if d >= data["G"][s] or not x_at[s]:
            continue
        terms = [
            (c, float(data["g"][cm.columns[c][1][1]]) if cm.columns[c][0] == "x" else 1.0)
            for c in x_at[s]
        ]
        extra.add(_name("pat_full_gpus", (s,)), terms, full_gpu_floor(data, s), math.inf)
    for cut in sorted(cuts, key=lambda c: c.server):
        terms = [(pos[key], v) for key, v in cut.coef]
        extra.add(_name("pat_dual_cut", (cut.server,)), terms, -math.inf, cut.rhs)
    for cut in sorted(floors, key=lambda c: c.server):
        terms = [(pos[key], v) for key, v in cut.coef]
        extra.add(_name("bp_rc_floor", (cut.server,)), terms, cut.rhs, math.inf)
    base = mm.num_rows
    cols: list[list[tuple[int, float]]] = [[] for _ in range(mm.num_cols)]
    for r, c, v in extra.trip:
        cols[c].append((base + r, v))
    starts = [0]
    index: list[int] = []
    value: list[float] = []
    for c in range(mm.num_cols):
        seg = slice(int(mm.a_start[c]), int(mm.a_start[c + 1]))
        index += mm.a_index[seg].tolist() + [r for r, _ in cols[c]]
        value += mm.a_value[seg].tolist() + [v for _, v in cols[c]]
        starts.append(len(index))
    out = dataclasses.replace(
        mm,
        row_lower=np.concatenate([mm.row_lower, np.asarray(extra.lower, dtype=np.float64)]),
        row_upper=np.concatenate([mm.row_upper, np.asarray(extra.upper, dtype=np.float64)]),
        a_start=np.asarray(starts, dtype=np.int32),
        a_index=np.asarray(index, dtype=np.int32),
        a_value=np.asarray(value, dtype=np.float64),
        name="counting_patterns",
    )
    return CountingMatrix(out, cm.columns, (*cm.row_names, *extra.names), cm.data)


def pattern_search(inst: RoundInstance, jobs: Sequence[Job]) -> str | None:
    """Which pattern search serves this round, where some job may spread at a penalty (the
    counting LP is loose) and no job has per-type matrices: "exact" where no floor depends
    on the split; "split" where one does and the master states it (the split rows), so the
    exact search follows the restriction; "pair" where it does not (a split's share of
    cores rounded down part by part, or more splits than :data:`~.counting.MAX_SPLITS`;
    also every such round with :data:`SPLIT_MASTER` off): the restriction, then the
    relaxation (``formulations/branch_price.md``); None elsewhere."""
    if any(j.sensitivity_by_type is not None for j in jobs):
        return None
    if not any(j.gpus >= 2 and j.split_penalty < 1.0 for j in jobs):
        return None
    data = _model_data(inst, jobs)
    if data["exact"]:
        return "exact"
    return "split" if SPLIT_MASTER and data["patterns"] else "pair"


def patterns_apply(inst: RoundInstance, jobs: Sequence[Job]) -> bool:
    """Whether the pattern stage serves this round (:func:`pattern_search` "exact": no
    floor depends on the split)."""
    return pattern_search(inst, jobs) == "exact"


def round_bound(
    inst: RoundInstance,
    jobs: Sequence[Job],
    *,
    time_limit: float | None = None,
    warm_start: Sequence[Mapping[str, Sequence[PlacementPart]]] = (),
    max_iterations: int = MAX_ITERATIONS,
    ceiling: float | None = None,
    counting: CountingMatrix | None = None,
) -> tuple[PatternBound, CountingMatrix, list[np.ndarray]] | None:
    """The pattern bound of a round's jobs, seeded with known allocations (best first), at
    most ``max_iterations`` rounds of pricing, given up where it cannot come below
    ``ceiling`` (:func:`pattern_bound`).

    Returns the bound, the counting matrix and the warm starts as its vectors (best first);
    None where the rows are not stated (per-type matrices, splits with rounded-down cores).
    ``counting``: the counting model of these jobs, built already.
    """
    if any(j.sensitivity_by_type is not None for j in jobs):
        return None
    data = _model_data(inst, jobs) if counting is None else counting.data
    if not data["patterns"]:
        return None
    cm = counting or build_counting_matrix(data)
    vectors = [v for v in (start_from_placements(cm, p) for p in warm_start) if v is not None]
    vectors.sort(key=lambda v: -float(cm.matrix.cost @ v))
    target = float(cm.matrix.cost @ vectors[0]) if vectors else None
    pb = pattern_bound(
        data,
        time_limit=time_limit,
        seeds=vectors,
        target=target,
        cm=cm,
        max_iterations=max_iterations,
        ceiling=ceiling,
    )
    return pb, cm, vectors


def solve_with_patterns(
    inst: RoundInstance,
    jobs: Sequence[Job],
    *,
    solver: str = "highs",
    time_limit: float | None = None,
    threads: int | None = None,
    warm_start: Sequence[Mapping[str, Sequence[PlacementPart]]] = (),
    bound_share: float = 0.5,
) -> CountingResult | None:
    """The counting MIP strengthened by the pattern bound's rows, from the best start.

    Column generation gets ``bound_share`` of the time; a start that meets its bound is
    returned at once (proven).  None when the round is not one the rows are stated for
    (per-type matrices, splits with rounded-down cores).
    """
    t0 = time.perf_counter()
    share = None if time_limit is None else time_limit * bound_share
    found = round_bound(inst, jobs, time_limit=share, warm_start=warm_start)
    if found is None:
        return None
    pb, cm, vectors = found
    target = float(cm.matrix.cost @ vectors[0]) if vectors else None
    scm = strengthened_counting(cm.data, pb.cuts)
    start = vectors[0] if vectors else None
    left = None if time_limit is None else max(time_limit - (time.perf_counter() - t0), 1e-3)
    if start is not None and pb.bound is not None and target is not None:
        if pb.bound - target <= EXACT_REL_GAP * max(1.0, abs(target)):
            res = SolveResult(
                TerminationStatus.OPTIMAL, target, pb.bound, 0.0, 0.0, "highs", x=start
            )
            return dataclasses.replace(
                _result(scm, res, time.perf_counter() - t0), runtime_s=time.perf_counter() - t0
            )
    res = solve_matrix(
        scm.matrix,
        solver,
        time_limit=left,
        rel_gap=EXACT_REL_GAP,
        threads=threads,
        start=start,
        guard=True,
    )
    out = _result(scm, res, time.perf_counter() - t0)
    if pb.bound is not None and out.dual_bound is not None and pb.bound < out.dual_bound:
        out = dataclasses.replace(out, dual_bound=pb.bound)
    log.debug(
        "patterns: bound %s in %.2fs; counting with rows: %s %s",
        pb.bound,
        pb.runtime_s,
        out.status,
        out.objective,
    )
    return dataclasses.replace(out, runtime_s=time.perf_counter() - t0)
