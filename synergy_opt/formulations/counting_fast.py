"""The counting model as a matrix (fast path), its solve, and the bounds built on it.

:mod:`~synergy_opt.formulations.counting` states the model in Pyomo (the reference).  This
module builds the same columns and rows, in the same order and under the same names
(``("x", (s, k, p))``, ``"eq2_cpu_capacity[3]"``), straight into a
:class:`~synergy_opt.formulations.fast.MatrixModel` with numpy, so a 512-GPU round is built
in milliseconds instead of Pyomo's seconds; tests prove both optima equal.  Row names let
infeasibility reports and duals be traced back to equations.

Public API (stable; ``opt`` and ``opt-exact`` build on it):

* :func:`solve_counting` ``(inst, jobs, *, solver, time_limit, rel_gap, threads)`` ->
  :class:`CountingResult`: placements per job id, objective, proven dual bound, status.
* :func:`counting_bound` ``(inst, jobs, *, solver)`` -> float: the smaller of the counting
  model's LP relaxation and the super-machine optimum, both valid upper bounds on any
  allocation of exactly ``jobs`` that keeps every fair-share floor.
* :func:`build_counting_matrix` ``(data, relax=False)`` -> :class:`CountingMatrix`;
  :func:`relaxed_matrix` ``(cm)`` its relaxation without a second build.
* :func:`placements_from_values` turns a solution (by variable name and index) into
  per-job placement parts; used for both the Pyomo and the matrix solution.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from synergy_opt.formulations.counting import (
    _model_data,
    index_groups,
    part_bounds,
    part_index,
    restrict_points,
    share_core_bound,
    share_core_parts,
    slot_pairs,
    split_core_rows,
    split_rows,
    sym_pairs,
    variant_parts,
    variant_rows,
)
from synergy_opt.formulations.fast import KnapsackModel, build_knapsack, make_classes
from synergy_opt.formulations.typed_fast import (
    TypedKnapsackModel,
    build_typed_super_machine_fast,
    is_typed_round,
    lowest_fair_share,
)
from synergy_opt.matrix import MatrixModel, triplet_model
from synergy_opt.solve import SolveResult, TerminationStatus, solve_matrix
from synergy_opt.types import THROUGHPUT_EPS, Job, PlacementPart, RoundInstance

log = logging.getLogger(__name__)

#: ``opt-exact``'s target: a relative gap this small counts as proven optimal (issue 10).
EXACT_REL_GAP: float = 1e-4

ColKey = tuple[str, tuple[int, ...]]


@dataclass(frozen=True, slots=True, eq=False)
class CountingMatrix:
    """The counting model as a matrix, with the name of every column and row."""

    matrix: MatrixModel
    columns: tuple[ColKey, ...]
    row_names: tuple[str, ...]
    data: Mapping[str, Any]

    def values(self, x: np.ndarray) -> dict[ColKey, float]:
        """A solution vector as {(variable, index): value}, the Pyomo result's keys."""
        return {key: float(v) for key, v in zip(self.columns, x, strict=True)}


class _Rows:
    """Collects named rows and (row, column, value) triplets."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.lower: list[float] = []
        self.upper: list[float] = []
        self.r: list[int] = []
        self.c: list[int] = []
        self.v: list[float] = []

    def add(self, name: str, terms: Sequence[tuple[int, float]], lo: float, hi: float) -> None:
        row = len(self.names)
        self.names.append(name)
        self.lower.append(lo)
        self.upper.append(hi)
        for col, val in terms:
            self.r.append(row)
            self.c.append(col)
            self.v.append(val)


def _name(base: str, idx: tuple[int, ...]) -> str:
    return f"{base}[{','.join(str(i) for i in idx)}]"


def build_counting_matrix(  # noqa: C901 - one block per row family, as in the Pyomo model
    data: Mapping[str, Any], *, relax: bool = False
) -> CountingMatrix:
    """The matrix of :func:`~synergy_opt.formulations.counting.build_from_data`, same order."""
    xpt, spts, g = data["x_point"], data["slot_points"], data["g"]
    G, C, M = data["G"], data["C"], data["M"]
    parts = part_index(dict(data))
    cols: list[ColKey] = []
    cost: list[float] = []
    upper: list[float] = []
    integer: list[bool] = []

    def col(name: str, idx: tuple[int, ...], w: float, ub: float, is_int: bool) -> int:
        cols.append((name, idx))
        cost.append(w)
        upper.append(ub)
        integer.append(is_int and not relax)
        return len(cols) - 1

    xcol = {
        (s, k, p): col("x", (s, k, p), xpt[s, k, p][2], data["x_upper"][s, k, p], True)
        for s, k, p in data["x_index"]
    }
    ycol = {
        (k, i, p): col("y", (k, i, p), spts[k, i][p][2], 1.0, True)
        for k, i in data["slots"]
        for p in range(len(spts[k, i]))
    }
    bounds = {(k, i, s): part_bounds(dict(data), k, i, s) for k, i, s in parts}
    acol = {idx: col("a", idx, 0.0, bounds[idx][0], True) for idx in parts}
    ucol = {idx: col("u", idx, 0.0, 1.0, True) for idx in parts}
    ccol = {idx: col("cp", idx, 0.0, bounds[idx][1], True) for idx in parts}
    mcol = {idx: col("mp", idx, 0.0, bounds[idx][2], False) for idx in parts}
    v_index, split_gpu_rows, split_floor_rows = split_rows(data)
    vcol = {idx: col("v", idx, 0.0, 1.0, True) for idx in v_index}
    fcol = {
        idx: col("fc", idx, 0.0, float(share_core_bound(data, *idx)), True)
        for idx in share_core_parts(data)
    }

    rows = _Rows()
    inf = math.inf
    x_at, x_of, parts_at, parts_of = index_groups(data, parts)

    def used(
        k: int, i: int, coef: Callable[[int], float] = lambda p: 1.0
    ) -> list[tuple[int, float]]:
        return [(ycol[k, i, p], coef(p)) for p in range(len(spts[k, i]))]

    # Row order follows the Pyomo model's declaration order (constraints after the objective).
    for k in sorted(g):
        terms = [(xcol[idx], 1.0) for idx in x_of[k]]
        for kk, i in data["slots"]:
            if kk == k:
                terms += used(k, i)
        rows.add(_name("eq4_class_cover", (k,)), terms, data["n"][k], data["n"][k])
    for base, part, cap, coef in (
        ("cnt_gpu_capacity", acol, G, lambda idx: float(g[idx[1]])),
        ("eq2_cpu_capacity", ccol, C, lambda idx: float(xpt[idx][0])),
        ("eq3_mem_capacity", mcol, M, lambda idx: float(xpt[idx][1])),
    ):
        for s in sorted(G):
            terms = [(xcol[idx], coef(idx)) for idx in x_at[s]]
            terms += [(part[idx], 1.0) for idx in parts_at[s]]
            if terms:
                rows.add(_name(base, (s,)), terms, -inf, float(cap[s]))
    slots = list(data["slots"])
    for k, i in slots:
        rows.add(_name("cnt_one_point", (k, i)), used(k, i), -inf, 1.0)
    for k, i in slots:
        terms = [(acol[idx], 1.0) for idx in parts_of[k, i]]

        def neg_gpus(p: int, k: int = k) -> float:
            return -float(g[k])

        terms += used(k, i, neg_gpus)
        rows.add(_name("cnt_spread_gpus", (k, i)), terms, 0.0, 0.0)
    for k, i in slots:
        terms = [(ccol[idx], 1.0) for idx in parts_of[k, i]]

        def neg_cpus(p: int, k: int = k, i: int = i) -> float:
            return -float(spts[k, i][p][0])

        terms += used(k, i, neg_cpus)
        rows.add(_name("cnt_spread_cpus", (k, i)), terms, 0.0, 0.0)
    for k, i in slots:
        terms = [(mcol[idx], 1.0) for idx in parts_of[k, i]]

        def neg_mem(p: int, k: int = k, i: int = i) -> float:
            return -float(spts[k, i][p][1])

        terms += used(k, i, neg_mem)
        rows.add(_name("cnt_spread_mem", (k, i)), terms, 0.0, 0.0)
    for k, i in slots:
        terms = [(ucol[idx], 1.0) for idx in parts_of[k, i]] + used(k, i, lambda p: -2.0)
        rows.add(_name("cnt_spread_spans", (k, i)), terms, 0.0, inf)
    for idx in parts:
        rows.add(_name("cnt_part_has_gpu", idx), [(acol[idx], 1.0), (ucol[idx], -1.0)], 0.0, inf)

    for pos, (base, var) in enumerate(
        (
            ("cnt_gpus_only_on_used", acol),
            ("cnt_cpus_only_on_used", ccol),
            ("cnt_mem_only_on_used", mcol),
        )
    ):
        for idx in parts:
            ub = float(bounds[idx][pos])
            rows.add(_name(base, idx), [(var[idx], 1.0), (ucol[idx], -ub)], -inf, 0.0)
    for idx, ok in variant_parts(dict(data)):
        terms = [(ucol[idx], 1.0)] + [(ycol[(*idx[:2], p)], -1.0) for p in ok]
        rows.add(_name("cnt_part_in_variant", idx), terms, -inf, 0.0)
    beyond = variant_rows(dict(data))
    for base, var, vcoef in (
        ("cnt_variant_gpus", acol, lambda k, i, q: float(g[k])),
        ("cnt_variant_cpus", ccol, lambda k, i, q: float(spts[k, i][q][0])),
        ("cnt_variant_mem", mcol, lambda k, i, q: float(spts[k, i][q][1])),
    ):
        for (k, i, j), outside, qs in beyond:
            terms = [(var[k, i, s], 1.0) for s in outside]
            terms += [(ycol[k, i, q], -vcoef(k, i, q)) for q in qs]
            rows.add(_name(base, (k, i, j)), terms, -inf, 0.0)
    for k, i in dict.fromkeys((k, i) for k, i, _ in v_index):
        terms = [(vcol[k, i, j], 1.0) for j in range(len(data["slot_splits"][k, i]))]
        terms += used(k, i, lambda p: -1.0)
        rows.add(_name("cnt_split_one", (k, i)), terms, 0.0, 0.0)
    for (k, i, c), ss, coefs in split_gpu_rows:
        terms = [(acol[k, i, s], 1.0) for s in ss]
        terms += [(vcol[k, i, j], -float(q)) for j, q in enumerate(coefs) if q]
        rows.add(_name("cnt_split_gpus", (k, i, c)), terms, 0.0, 0.0)
    for (k, i, t), js, qs in split_floor_rows:
        terms = [(vcol[k, i, j], 1.0) for j in js] + [(ycol[k, i, q], -1.0) for q in qs]
        rows.add(_name("cnt_split_floor", (k, i, t)), terms, -inf, 0.0)
    for (k, i, s), fc in fcol.items():
        terms = [(acol[k, i, s], float(C[s])), (fc, -float(G[s]))]
        rows.add(_name("cnt_share_cores", (k, i, s)), terms, 0.0, float(G[s] - 1))
    for (k, i), frac, whole, cores in split_core_rows(data):
        terms = [(fcol[idx], 1.0) for idx in frac] + [(acol[idx], float(r)) for idx, r in whole]
        terms += [(vcol[k, i, j], -float(f)) for j, f in enumerate(cores) if f]
        rows.add(_name("cnt_split_cores", (k, i)), terms, 0.0, 0.0)
    for k, i in slot_pairs(dict(data)):
        terms = used(k, i - 1) + used(k, i, lambda p: -1.0)
        rows.add(_name("sym_slot_order", (k, i)), terms, 0.0, inf)
    for s, t in sym_pairs(dict(data)):
        terms = [(xcol[idx], xpt[idx][2]) for idx in x_at[s]]
        terms += [(xcol[idx], -xpt[idx][2]) for idx in x_at[t]]
        if terms:
            rows.add(_name("sym_server_order", (s, t)), terms, 0.0, inf)

    mm = triplet_model(
        rows.r,
        rows.c,
        rows.v,
        cost,
        upper,
        integer,
        rows.lower,
        rows.upper,
        name="counting_lp" if relax else "counting",
    )
    return CountingMatrix(mm, tuple(cols), tuple(rows.names), data)


def relaxed_matrix(cm: CountingMatrix) -> MatrixModel:
    """``build_counting_matrix(cm.data, relax=True).matrix`` from ``cm`` without building
    it again: the same rows and columns, none integral."""
    mm = cm.matrix
    return dataclasses.replace(mm, integer=np.zeros_like(mm.integer), name="counting_lp")


# --------------------------------------------------------------------------- solutions


def placements_from_values(
    data: Mapping[str, Any], values: Mapping[ColKey, float]
) -> dict[str, list[PlacementPart]]:
    """Per-job placement parts from a solution keyed by (variable name, index).

    Class members are handed out in priority order: first the spread slots in slot order,
    then whole jobs by server and point, so the same solution always gives the same bytes.
    A spread job's memory parts are made to sum exactly to its point (solver round-off
    otherwise could drop the floor look-up one column).
    """
    names = data["server_names"]
    spts = data["slot_points"]
    pool = {k: list(ids) for k, ids in enumerate(data["classes"])}
    out: dict[str, list[PlacementPart]] = {}
    for k, i in data["slots"]:
        chosen = [p for p in range(len(spts[k, i])) if values.get(("y", (k, i, p)), 0.0) > 0.5]
        if not chosen:
            continue
        _, m_pt, _ = spts[k, i][chosen[0]]
        parts = []
        for s in data["slot_servers"][k, i]:
            a = int(round(values.get(("a", (k, i, s)), 0.0)))
            if a >= 1:
                cp = int(round(values.get(("cp", (k, i, s)), 0.0)))
                mp = max(0.0, values.get(("mp", (k, i, s)), 0.0))
                parts.append([s, a, cp, mp])
        if parts:
            big = max(range(len(parts)), key=lambda q: parts[q][3])
            rest = math.fsum(p[3] for q, p in enumerate(parts) if q != big)
            parts[big][3] = max(0.0, m_pt - rest)
        out[pool[k].pop(0)] = [PlacementPart(names[s], a, cp, mp) for s, a, cp, mp in parts]
    for s, k, p in data["x_index"]:
        count = int(round(values.get(("x", (s, k, p)), 0.0)))
        c_pt, m_pt, _ = data["x_point"][s, k, p]
        for _ in range(count):
            out[pool[k].pop(0)] = [PlacementPart(names[s], data["g"][k], c_pt, m_pt)]
    return out


def start_from_placements(
    cm: CountingMatrix, placements: Mapping[str, Sequence[PlacementPart]]
) -> np.ndarray | None:
    """A MIP start from a known allocation; servers renamed into key order when the model
    breaks server symmetry (``sym_server_order``), so the start stays feasible."""
    x = _start_vector(cm, placements)
    pairs = sym_pairs(dict(cm.data))
    if x is None or not pairs:
        return x
    names = cm.data["server_names"]
    key = dict.fromkeys(range(len(names)), 0.0)
    for c, (var, idx) in enumerate(cm.columns):
        if var == "x":
            key[idx[0]] += float(cm.matrix.cost[c] * x[c])
    rename: dict[str, str] = {}
    for run in cm.data["server_classes"]:
        ordered = sorted(run, key=lambda s: (-key[s], s))
        rename.update({names[old]: names[new] for new, old in zip(run, ordered, strict=True)})
    moved = {
        jid: [
            PlacementPart(rename.get(p.server, p.server), p.gpus, p.cpus, p.mem_gb) for p in parts
        ]
        for jid, parts in placements.items()
    }
    return _start_vector(cm, moved)


def _start_vector(
    cm: CountingMatrix, placements: Mapping[str, Sequence[PlacementPart]]
) -> np.ndarray | None:
    """A MIP start (one value per column) from a known allocation of the model's jobs.

    Each whole job counts at the best useful point its cores and memory cover, each spread
    job fills the next free slot whose servers hold its parts, cores and memory trimmed
    part by part down to the chosen point.  ``None`` when the allocation is not a point of
    the model (a job missing, below its floor, or on servers no slot allows): the solve then
    simply starts without it.
    """
    data = cm.data
    pos = {key: c for c, key in enumerate(cm.columns)}
    x = np.zeros(len(cm.columns))
    index = {name: s for s, name in enumerate(data["server_names"])}
    cls = {jid: k for k, ids in enumerate(data["classes"]) for jid in ids}
    free = {ki: True for ki in data["slots"]}
    x_at: dict[tuple[int, int], list[int]] = {}
    for s, k, p in data["x_index"]:
        x_at.setdefault((s, k), []).append(p)
    for jid in data["job_ids"]:
        parts = placements.get(jid)
        if not parts:
            return None
        k = cls[jid]
        servers = [index[pt.server] for pt in parts]
        cores = sum(pt.cpus for pt in parts)
        mem = math.fsum(pt.mem_gb for pt in parts)
        if len(set(servers)) == 1:
            s = servers[0]
            fits = [
                p
                for p in x_at.get((s, k), [])
                if data["x_point"][s, k, p][0] <= cores
                and data["x_point"][s, k, p][1] <= mem + 1e-6
            ]
            if not fits:
                return None
            p = max(fits, key=lambda q: (data["x_point"][s, k, q][2], -q))
            x[pos["x", (s, k, p)]] += 1
            continue
        # The free slot and point (of a variant whose servers hold the parts) crediting the
        # most: the variant of exactly its GPU types, where the job has per-type matrices.
        best: tuple[float, int, tuple[int, int], int | None] | None = None
        for ki in data["slots"]:
            if ki[0] != k or not free[ki] or not set(servers) <= set(data["slot_servers"][ki]):
                continue
            split = _split_of(data, ki, parts, index)
            if split is False:
                continue  # a split the slot does not have
            floor = -math.inf if split is None else data["slot_splits"][ki][split][1]
            pss = data.get("point_servers", {}).get(ki)
            for v, (c, m, w) in enumerate(data["slot_points"][ki]):
                if pss is not None and not set(servers) <= set(pss[v]):
                    continue  # the point's variant does not have these servers' types
                if w < floor - THROUGHPUT_EPS:
                    continue  # below the floor of the job's split
                if c <= cores and m <= mem + 1e-6 and (best is None or w > best[0]):
                    best = (w, v, ki, split)
        if best is None:
            return None
        _, q, slot, split = best
        pts = data["slot_points"][slot]
        free[slot] = False
        x[pos["y", (*slot, q)]] = 1.0
        if split is not None:
            x[pos["v", (*slot, split)]] = 1.0
            for s in set(servers):
                if ("fc", (*slot, s)) in pos:
                    held = sum(pt.gpus for pt, t in zip(parts, servers, strict=True) if t == s)
                    x[pos["fc", (*slot, s)]] = (held * data["C"][s]) // data["G"][s]
        c_left, m_left = pts[q][0], pts[q][1]
        for pt, s in zip(parts, servers, strict=True):
            idx = (*slot, s)
            cp = min(pt.cpus, c_left)
            mp = min(pt.mem_gb, m_left)
            c_left -= cp
            m_left -= mp
            x[pos["a", idx]] += pt.gpus
            x[pos["u", idx]] = 1.0
            x[pos["cp", idx]] += cp
            x[pos["mp", idx]] += mp
    return x


def _split_of(
    data: Mapping[str, Any],
    ki: tuple[int, int],
    parts: Sequence[PlacementPart],
    index: Mapping[str, int],
) -> int | None | bool:
    """Which split j of slot ``ki`` the parts have (GPUs per share class); None when the
    slot has no split rows, False when the parts' split is not one of the slot's."""
    splits = data.get("slot_splits", {}).get(ki)
    if splits is None:
        return None
    classes = data["share_classes"][ki]
    sigma = tuple(sum(pt.gpus for pt in parts if index[pt.server] in c) for c in classes)
    cores = data.get("slot_split_cores", {}).get(ki)
    share = None if cores is None else _share_cores(data, parts, index)
    for j, (sj, _) in enumerate(splits):
        if sj == sigma and (cores is None or cores[j] == share):
            return j
    return False


def _share_cores(
    data: Mapping[str, Any], parts: Sequence[PlacementPart], index: Mapping[str, int]
) -> int:
    """A spread job's share of cores under the per-server rule: floor(q C_s / G_s) summed
    over its servers (q its GPUs on s, parts on one server merged, as the checker does)."""
    on: dict[int, int] = {}
    for pt in parts:
        on[index[pt.server]] = on.get(index[pt.server], 0) + pt.gpus
    return sum((q * data["C"][s]) // data["G"][s] for s, q in on.items())


@dataclass(frozen=True, slots=True)
class CountingResult:
    """One counting-model solve: placements (job id -> parts), objective and proven bound.

    ``dual_bound`` is the solver's bound on the counting optimum (valid for any allocation
    of the same jobs that keeps the floors); None when the model's data is no relaxation
    (``bound_valid`` false: the restricted spread floors of ``_model_data``).
    ``placements`` is empty without a solution.
    """

    status: TerminationStatus
    objective: float | None
    dual_bound: float | None
    mip_gap: float | None
    runtime_s: float
    build_s: float
    solver: str
    columns: int
    rows: int
    placements: Mapping[str, tuple[PlacementPart, ...]]
    #: What the bound comes from where a search stood in for the MIP (branch-and-price's
    #: nodes and why it ended), for the answer's note; empty for the MIP itself.
    detail: str = ""

    @property
    def proven(self) -> bool:
        """Optimal within :data:`EXACT_REL_GAP`."""
        return (
            self.objective is not None
            and self.dual_bound is not None
            and proven_within(self.objective, self.dual_bound)
        )


def proven_within(objective: float, bound: float) -> bool:
    """Whether ``bound`` proves ``objective`` optimal within :data:`EXACT_REL_GAP` (the one
    rule for ``opt-exact``'s "proven")."""
    return bound - objective <= EXACT_REL_GAP * max(1.0, abs(objective)) + 1e-9


def _result(cm: CountingMatrix, res: SolveResult, build_s: float) -> CountingResult:
    placements: dict[str, tuple[PlacementPart, ...]] = {}
    if res.x is not None:
        placements = {
            jid: tuple(parts)
            for jid, parts in placements_from_values(cm.data, cm.values(res.x)).items()
        }
    return CountingResult(
        res.status,
        res.objective,
        res.dual_bound if cm.data["bound_valid"] else None,
        res.mip_gap,
        res.runtime_s,
        build_s,
        res.solver,
        cm.matrix.num_cols,
        cm.matrix.num_rows,
        placements,
    )


def solve_counting(
    inst: RoundInstance,
    jobs: Sequence[Job],
    *,
    solver: str = "highs",
    time_limit: float | None = None,
    rel_gap: float = EXACT_REL_GAP,
    threads: int | None = None,
    symmetry: bool = False,
    staged: bool = True,
    warm_start: Sequence[Mapping[str, Sequence[PlacementPart]]] = (),
) -> CountingResult:
    """Solve the counting MIP over ``jobs`` (every one must be scheduled) on the fast path.

    ``staged`` first solves the super-machine (its optimum B bounds the counting optimum)
    and then the counting model restricted to the grid points B's solution uses; that small
    MIP often reaches B, which proves it optimal at once.  Otherwise its answer is the MIP
    start of the full model, whose reported bound is min(its dual bound, B).
    ``warm_start``: known allocations (job id -> parts) of these jobs, e.g. TUNE's and
    ``opt``'s; the best one the model accepts is a start too.  Neither changes the optimum.
    """
    t0 = time.perf_counter()
    clock = _Deadline(time_limit, t0)
    data = _model_data(inst, jobs, symmetry=symmetry)
    if data["floor_gap"]:
        return _solve_between_floors(
            inst, jobs, data, solver, clock, rel_gap, threads, symmetry, warm_start, t0
        )
    return _solve_data(inst, jobs, data, solver, clock, rel_gap, threads, staged, warm_start, t0)


def solve_counting_call(
    inst: RoundInstance,
    jobs: Sequence[Job],
    solver: str,
    time_limit: float,
    threads: int | None,
    warm_start: Sequence[Mapping[str, Sequence[PlacementPart]]],
) -> CountingResult:
    """:func:`solve_counting` with positional arguments, for a child process
    (:func:`synergy_opt.deadline.start_child`): a function of this module, so the child
    imports only the counting model to run it (the forkserver preloads it)."""
    return solve_counting(
        inst, jobs, solver=solver, time_limit=time_limit, threads=threads, warm_start=warm_start
    )


def _solve_between_floors(
    inst: RoundInstance,
    jobs: Sequence[Job],
    high: dict[str, Any],
    solver: str,
    clock: _Deadline,
    rel_gap: float,
    threads: int | None,
    symmetry: bool,
    warm_start: Sequence[Mapping[str, Sequence[PlacementPart]]],
    t0: float,
) -> CountingResult:
    """Per-server shares with a spread floor that depends on the split: the relaxation (the
    lowest floors) gives the bound; its answer is the optimum if it keeps every floor as
    placed (the checker decides), else the restriction (the highest floors) gives the
    allocation, with the relaxation's bound."""
    from synergy_opt.check import check_allocation
    from synergy_opt.types import build_allocation

    low = _model_data(inst, jobs, symmetry=symmetry, spread_floor="low")
    relaxed = _solve_data(
        inst,
        jobs,
        low,
        solver,
        _Deadline(clock.left(0.5), time.perf_counter()),
        rel_gap,
        threads,
        True,
        warm_start,
        t0,
    )
    if relaxed.placements:
        alloc = build_allocation(inst, "counting", relaxed.placements)
        placed = {j.id for j in alloc.jobs} == {j.id for j in jobs}
        if placed and not check_allocation(inst, alloc, fair_share=True):
            return relaxed
    starts = [*warm_start]
    out = _solve_data(inst, jobs, high, solver, clock, rel_gap, threads, True, starts, t0)
    return dataclasses.replace(
        out, dual_bound=relaxed.dual_bound, runtime_s=time.perf_counter() - t0
    )


def _solve_data(
    inst: RoundInstance,
    jobs: Sequence[Job],
    data: dict[str, Any],
    solver: str,
    clock: _Deadline,
    rel_gap: float,
    threads: int | None,
    staged: bool,
    warm_start: Sequence[Mapping[str, Sequence[PlacementPart]]],
    t0: float,
) -> CountingResult:
    """The staged solve of one model's data (see :func:`solve_counting`)."""
    cm = build_counting_matrix(data)
    starts = list(warm_start)
    sm_bound: float | None = None
    if staged and jobs and data["bound_valid"]:
        sm_bound, keep = _super_machine_points(inst, jobs, data, solver, clock.left(), threads)
        if keep is not None:
            cm_r = build_counting_matrix(restrict_points(data, keep))
            if sm_bound is not None and _relax_and_fix_applies(cm_r.data, jobs):
                fixed = _relax_and_fix(cm_r, solver, clock, rel_gap, threads)
                if fixed is not None:
                    found = _result(cm_r, fixed, time.perf_counter() - t0)
                    if _meets(found, sm_bound, rel_gap):
                        log.debug("counting: relax-and-fix reaches the super-machine bound")
                        return _proven_by(found, sm_bound, cm, t0)
                    starts.insert(0, found.placements)
            res_r = solve_matrix(
                cm_r.matrix,
                solver,
                time_limit=clock.left(0.2),
                rel_gap=rel_gap,
                threads=threads,
                start=_best_start(cm_r, starts),
                guard=True,
            )
            if res_r.x is not None and sm_bound is not None:
                found = _result(cm_r, res_r, time.perf_counter() - t0)
                if _meets(found, sm_bound, rel_gap):
                    log.debug("counting: restricted model reaches the super-machine bound")
                    return _proven_by(found, sm_bound, cm, t0)
                starts.insert(0, found.placements)
    build_s = time.perf_counter() - t0
    res = solve_matrix(
        cm.matrix,
        solver,
        time_limit=clock.left(),
        rel_gap=rel_gap,
        threads=threads,
        start=_best_start(cm, starts),
        guard=True,  # HiGHS can run past its limit: synergy_opt.deadline
    )
    out = _result(cm, res, build_s)
    if sm_bound is not None and out.dual_bound is not None and sm_bound < out.dual_bound:
        out = dataclasses.replace(out, dual_bound=sm_bound)
    return dataclasses.replace(out, runtime_s=time.perf_counter() - t0)


def _relax_and_fix_applies(data: Mapping[str, Any], jobs: Sequence[Job]) -> bool:
    """Whether the staged solve tries :func:`_relax_and_fix` on the restricted model: where
    slots carry split rows, or where jobs spread at no penalty (then the super-machine bound
    is usually met, and meeting it proves the round).

    Measured with ``solve_counting`` alone (no warm start), 10-s limit, 128 GPUs: multi-GPU
    seeds 0-5 all proven in 0.2-1.3 s with it, 2 of 6 without (76.45 against 84.68 on
    seed 0); on split-penalty seeds 0-2 the bound is the loose one and it proved nothing,
    leaving incumbents equal or lower, so rounds with penalised spreads go without it.
    """
    if data["slot_splits"]:
        return True
    may_spread = [j for j in jobs if j.gpus >= 2]
    return bool(data["slots"]) and all(j.split_penalty >= 1.0 for j in may_spread)


def _meets(found: CountingResult, bound: float, rel_gap: float) -> bool:
    """Whether an answer of the restricted model reaches the super-machine bound."""
    return bound - (found.objective or 0.0) <= rel_gap * max(1.0, abs(bound))


def _proven_by(
    found: CountingResult, bound: float, cm: CountingMatrix, t0: float
) -> CountingResult:
    """A restricted answer that meets the super-machine bound, reported as the full model's
    optimum (the bound covers every allocation of the full model)."""
    return dataclasses.replace(
        found,
        status=TerminationStatus.OPTIMAL,
        dual_bound=bound,
        mip_gap=(bound - (found.objective or 0.0)) / max(1.0, bound),
        runtime_s=time.perf_counter() - t0,
        columns=cm.matrix.num_cols,
        rows=cm.matrix.num_rows,
    )


def _relax_and_fix(
    cm: CountingMatrix,
    solver: str,
    clock: _Deadline,
    rel_gap: float,
    threads: int | None,
) -> SolveResult | None:
    """A solution of ``cm`` by relax-and-fix: whole-job counts x first, spread slots
    relaxed to the LP (each slot a fluid that takes GPUs, cores and GB wherever the rows
    allow), then the slots integral with those counts fixed.  None if either step finds
    nothing (the fixed counts can leave the slots no integral room).

    Why: on mixed-shape rounds with split-dependent floors the restricted MIP's own
    heuristics found no solution at all in 40 s (mixed-shapes 128 seed 0; it took 70 s),
    while both steps here reach the super-machine bound in under 2 s on seeds 0-5.  The
    counts get 30 % of the time left, the slots 75 % of the rest (the step that proves;
    what follows keeps the warm starts): at opt-exact's 10-s limit on the loaded machine
    20 % each left seed 4 (98.44) unsolved once, and half left seed 7 at 96.0 against
    110.19, which the slots step reaches in 4.6 s.
    """

    def step(share: float) -> Callable[[MatrixModel], SolveResult]:
        return lambda mm: solve_matrix(
            mm, solver, time_limit=clock.left(share), rel_gap=rel_gap, threads=threads
        )

    _, slots = relax_and_fix(cm, step(0.3), step(0.75))
    return slots if slots is not None and slots.x is not None else None


def relax_and_fix(
    cm: CountingMatrix,
    solve_counts: Callable[[MatrixModel], SolveResult],
    solve_slots: Callable[[MatrixModel], SolveResult],
) -> tuple[SolveResult, SolveResult | None]:
    """The two steps of relax-and-fix on ``cm``: whole-job counts ``x`` integral with the
    spread slots as LP (``solve_counts``), then the slots integral with those counts fixed
    (``solve_slots``).  Both results; the second is None when the first found nothing.
    ``opt-exact``'s staged solve and ``opt``'s late routes run it with their own limits."""
    mm = cm.matrix
    is_x = np.array([name == "x" for name, _ in cm.columns], dtype=bool)
    counts = solve_counts(dataclasses.replace(mm, integer=mm.integer & is_x))
    if counts.x is None:
        return counts, None
    xs = np.round(counts.x)
    fixed = dataclasses.replace(
        mm,
        col_lower=np.where(is_x, xs, mm.col_lower),
        col_upper=np.where(is_x, xs, mm.col_upper),
    )
    return counts, solve_slots(fixed)


class _Deadline:
    """What is left of an optional time limit."""

    def __init__(self, limit: float | None, t0: float) -> None:
        self.limit, self.t0 = limit, t0

    def left(self, share: float = 1.0) -> float | None:
        if self.limit is None:
            return None
        return max((self.limit - (time.perf_counter() - self.t0)) * share, 1e-3)


def _best_start(
    cm: CountingMatrix, starts: Sequence[Mapping[str, Sequence[PlacementPart]]]
) -> np.ndarray | None:
    best = None
    for placements in starts:
        cand = start_from_placements(cm, placements)
        if cand is not None and (best is None or cm.matrix.cost @ cand > cm.matrix.cost @ best):
            best = cand
    return best


def _bounding_super_machine(
    inst: RoundInstance, jobs: Sequence[Job]
) -> KnapsackModel | TypedKnapsackModel:
    """The super-machine whose optimum bounds the counting model: typed on typed rounds,
    and either way with each job's lowest floor over every GPU split
    (:func:`~synergy_opt.formulations.typed_fast.lowest_fair_share`).

    Under the per-server rule a spread job's floor (the checker's) can be below every whole
    job's; with the whole-job floor the plain super-machine cut off a tiny mixed-shape
    round's optimum (3.89 < 3.91), and the staged solve then "proved" 3.89.
    """
    if is_typed_round(inst, jobs):
        return build_typed_super_machine_fast(inst, jobs)
    floors = {j.id: lowest_fair_share(inst, j) for j in jobs}
    cl = inst.cluster
    return build_knapsack(
        make_classes(inst, jobs, floors=floors), [(float(cl.total_cpus), cl.total_mem_gb)]
    )


def _super_machine_points(
    inst: RoundInstance,
    jobs: Sequence[Job],
    data: Mapping[str, Any],
    solver: str,
    time_limit: float | None,
    threads: int | None,
) -> tuple[float | None, dict[int, set[tuple[int, float]]] | None]:
    """The super-machine optimum (a bound) and, per counting class, the points it uses.

    On typed rounds the typed super-machine (its floors the lowest any split allows, so it
    bounds the counting optimum too) and the points of its picks on any GPU type."""
    typed = is_typed_round(inst, jobs)
    ksm = _bounding_super_machine(inst, jobs)
    sm = solve_matrix(ksm.matrix, solver, time_limit=time_limit, threads=threads)
    bound = sm.dual_bound if sm.status is TerminationStatus.OPTIMAL else None
    if sm.x is None or sm.status is not TerminationStatus.OPTIMAL:
        return bound, None
    cls = {jid: k for k, ids in enumerate(data["classes"]) for jid in ids}
    keep: dict[int, set[tuple[int, float]]] = {k: set() for k in data["g"]}
    picked: Sequence[Sequence[tuple[Any, ...]]] = ksm.picks(sm.x)
    for jc, picks in zip(ksm.classes, picked, strict=True):
        for pick in picks:
            c, m, _ = pick[1] if typed else pick[0]  # typed: (type, point, n)
            for job in jc.members:
                keep[cls[job.id]].add((c, m))
    return bound, keep


def counting_bound(
    inst: RoundInstance,
    jobs: Sequence[Job],
    *,
    solver: str = "highs",
    time_limit: float | None = None,
) -> float | None:
    """min(counting LP relaxation, super-machine optimum) for exactly ``jobs``; None if neither.

    Both bound every allocation of ``jobs`` that keeps each job's fair-share floor: the
    LP relaxes the exact model, and summing its per-server rows gives the super-machine.
    On typed rounds the super-machine is the typed one (``typed_fast``).
    """
    bounds: list[float] = []
    data = _model_data(inst, jobs, spread_floor="low")
    if not data["bound_valid"]:  # not a relaxation of every fair allocation: no bound
        return None
    lp = solve_matrix(
        build_counting_matrix(data, relax=True).matrix,
        solver,
        time_limit=time_limit,
    )
    if lp.status is TerminationStatus.OPTIMAL and lp.dual_bound is not None:
        bounds.append(lp.dual_bound)
    sm = solve_matrix(_bounding_super_machine(inst, jobs).matrix, solver, time_limit=time_limit)
    if sm.dual_bound is not None and sm.status in (
        TerminationStatus.OPTIMAL,
        TerminationStatus.TIME_LIMIT,
    ):
        bounds.append(sm.dual_bound)
    return min(bounds) if bounds else None
