"""One node of branch-and-price (:mod:`.branch_price`): its pattern master, column
generation and its children.

The node master is the pattern master (:mod:`.patterns_fast`) with the node's spread decisions
fixed; its Lagrangian bound is valid whenever column generation stops, which is what lets the
search prune.  ``formulations/branch_price.md`` states the branching.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from synergy_opt.formulations.patterns import (
    SHORT_PENALTY,
    Pattern,
    PatternCut,
    Prices,
    master_split_rows,
    pricing_costs,
    server_shapes,
)
from synergy_opt.formulations.patterns_fast import (
    PATTERNS_PER_PRICING,
    PRICE_EPS,
    _highs,
    _pattern,
    _prices,
    _server_cuts,
    _zero_prices,
    build_master_matrix,
    build_pricing_matrix,
)
from synergy_opt.formulations.pricing_enum import PRICING_METHODS, TableSolve
from synergy_opt.formulations.pricing_grid import GridPricer
from synergy_opt.matrix import MatrixModel

log = logging.getLogger(__name__)

Slot = tuple[int, int]

#: How pricing problems are solved (:data:`~synergy_opt.formulations.pricing_enum.PRICING_METHODS`).
PRICING: str = "enumeration"
#: Classes priced by the MIP try the grid program first (``formulations/branch_price.md``,
#: "Heuristic pricing"): the MIP then runs only where it finds no improving pattern.
HEURISTIC_PRICING: bool = True
#: Column generation rounds per node (a guard: the node's bound is valid whenever it stops).
NODE_ITERATIONS: int = 200
#: A master value is integral within this.
INT_EPS: float = 1e-6


@dataclass(frozen=True, slots=True, order=True)
class Node:
    """Decisions fixed on the way down: slots unused, slots used, their points left out,
    and whole-job points (k, p) left out (one-member classes, below the spread decisions)."""

    off: frozenset[Slot] = frozenset()
    on: frozenset[Slot] = frozenset()
    banned: frozenset[tuple[int, int, int]] = frozenset()
    xbanned: frozenset[tuple[int, int]] = frozenset()


@dataclass(frozen=True, slots=True)
class _NodeLP:
    bound: float | None
    value: float
    y: dict[tuple[int, int, int], float]
    z: dict[int, float]
    patterns: tuple[Pattern, ...]
    artificial: float
    converged: bool
    cuts: tuple[tuple[int, np.ndarray, float], ...] = ()  # pricing (class, costs, bound)
    prices: Prices | None = None  # the duals of the LP whose solution this is


def _points(data: Mapping[str, Any], ki: Slot, node: Node) -> list[int]:
    """The points slot ``ki`` may still take at ``node``."""
    if ki in node.off:
        return []
    return [q for q in range(len(data["slot_points"][ki])) if (*ki, q) not in node.banned]


def node_master(
    data: Mapping[str, Any],
    patterns: Sequence[Pattern],
    node: Node,
    fixed: Mapping[Pattern, tuple[int, float]] | None = None,
    *,
    shapes: tuple[tuple[int, ...], ...] | None = None,
) -> tuple[MatrixModel, list[tuple[str, tuple[int, ...]]], list[str]]:
    """The pattern master at ``node``: banned and switched-off points fixed to 0, a used
    slot's ``cnt_one_point`` row at equality, and per used slot three ``bp_ghost`` columns
    (GPUs, cores, GB from nowhere at -SHORT_PENALTY each; one more per share class where
    its floor depends on the split) that keep it feasible before patterns carry the
    slot's parts (they only relax it, so every bound stays valid).
    ``fixed`` (a dive, :func:`_dive`; never a node of the search): bounds (lower, upper)
    on how many servers take each of these patterns (their ``z``).  ``shapes``: the
    round's server classes, when the caller has them."""
    mm, cols, names = build_master_matrix(data, patterns, shapes=shapes)
    col_upper = mm.col_upper.copy()
    col_lower = mm.col_lower.copy()
    for c, (name, idx) in enumerate(cols):
        if name == "y" and (idx[:2] in node.off or idx in node.banned):
            col_upper[c] = 0.0
        elif name == "z" and fixed and patterns[idx[0]] in fixed:
            lo, hi = fixed[patterns[idx[0]]]
            col_lower[c], col_upper[c] = float(lo), min(float(hi), col_upper[c])
    row_lower = mm.row_lower.copy()
    row_of = {n: r for r, n in enumerate(names)}
    ghosts: list[tuple[int, int]] = []
    for ki in sorted(node.on):
        row_lower[row_of[f"cnt_one_point[{ki[0]},{ki[1]}]"]] = 1.0
        for r, base in enumerate(("pat_spread_gpus", "pat_spread_cpus", "pat_spread_mem")):
            ghosts.append((row_of[f"{base}[{ki[0]},{ki[1]}]"], len(cols)))
            cols.append(("bp_ghost", (*ki, r)))
    for (k, i, c), _ in master_split_rows(data)[1] if node.on else ():
        if (k, i) in node.on:  # its GPUs per share class from nowhere, too
            ghosts.append((row_of[f"pat_split_gpus[{k},{i},{c}]"], len(cols)))
            cols.append(("bp_ghost", (k, i, 3 + c)))
    if not ghosts:
        out = dataclasses.replace(mm, col_lower=col_lower, col_upper=col_upper, row_lower=row_lower)
        return out, cols, names
    n = len(ghosts)
    start = np.concatenate([mm.a_start, mm.a_start[-1] + np.arange(1, n + 1)]).astype(np.int32)
    out = dataclasses.replace(
        mm,
        cost=np.concatenate([mm.cost, np.full(n, -SHORT_PENALTY)]),
        col_lower=np.concatenate([col_lower, np.zeros(n)]),
        col_upper=np.concatenate([col_upper, np.full(n, math.inf)]),
        integer=np.concatenate([mm.integer, np.zeros(n, dtype=bool)]),
        row_lower=row_lower,
        a_start=start,
        a_index=np.concatenate([mm.a_index, [r for r, _ in ghosts]]).astype(np.int32),
        a_value=np.concatenate([mm.a_value, np.ones(n)]),
    )
    return out, cols, names


def _lp(mm: MatrixModel) -> tuple[float, np.ndarray, np.ndarray] | None:
    """Optimal value, column values and row duals of an LP; None unless optimal."""
    import highspy

    h = _highs(mm)
    h.setOptionValue("solver", "simplex")
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None
    sol = h.getSolution()
    return (
        float(h.getInfo().objective_function_value),
        np.asarray(sol.col_value),
        np.asarray(sol.row_dual),
    )


class _Pricer:
    """One pricing matrix per server class; slots switched off at a node lose their parts.

    ``method`` names how each class's pricing problem is solved
    (:data:`~synergy_opt.formulations.pricing_enum.PRICING_METHODS`): by enumeration
    (exact, 5-10x faster than the MIP on split-penalty 128-GPU rounds) or by the MIP."""

    def __init__(
        self, data: Mapping[str, Any], method: str = PRICING, heuristic: bool = HEURISTIC_PRICING
    ) -> None:
        self.data = data
        self.shapes = server_shapes(data)
        zero = _zero_prices(data)
        self.models = [build_pricing_matrix(data, run[0], zero) for run in self.shapes]
        self.solvers = [PRICING_METHODS[method](data, run[0]) for run in self.shapes]
        # classes priced by the MIP first try the grid program: the MIP only proves
        self.quick = [
            GridPricer.build(data, run[0])
            if heuristic and not isinstance(solver, TableSolve)
            else None
            for run, solver in zip(self.shapes, self.solvers, strict=True)
        ]

    def quick_price(self, c: int, prices: Prices, node: Node) -> list[Pattern]:
        """Improving patterns of class c at ``node`` found by its grid program
        (:mod:`~synergy_opt.formulations.pricing_grid`): no bound; [] where the class has
        none or it finds none (then :meth:`price` proves)."""
        quick = self.quick[c]
        if quick is None:
            return []
        cost, upper = self._costs(c, prices, node)
        return self._improving(c, prices, cost, quick.solve(cost, upper, keep=PATTERNS_PER_PRICING))

    def price(
        self, c: int, prices: Prices, node: Node, time_limit: float | None
    ) -> tuple[float | None, list[Pattern], list[tuple[int, np.ndarray, float]]]:
        """The best reduced value of class c's patterns at ``node`` (a proven bound), the
        improving patterns found on the way, and what the class's ``pat_dual_cut`` rows are
        made of (:meth:`cuts`)."""
        mm = self.models[c][0]
        cost, upper = self._costs(c, prices, node)
        top, sols = self.solvers[c](dataclasses.replace(mm, cost=cost, col_upper=upper), time_limit)
        if top is None:
            return None, [], []
        return top, self._improving(c, prices, cost, sols), [(c, cost, top)]

    def _improving(
        self, c: int, prices: Prices, cost: np.ndarray, sols: Sequence[np.ndarray]
    ) -> list[Pattern]:
        """The first :data:`PATTERNS_PER_PRICING` pricing solutions of class c as patterns,
        those that price out (reduced value above the class's price) only."""
        s, pcols = self.shapes[c][0], self.models[c][1]
        out = []
        for x in sols[:PATTERNS_PER_PRICING]:
            if float(cost @ x) - prices.count.get(c, 0.0) <= PRICE_EPS:
                continue
            p = _pattern(self.data, c, s, {key: float(v) for key, v in zip(pcols, x, strict=True)})
            if p is not None:
                out.append(p)
        return out

    def within(
        self, c: int, prices: Prices, node: Node, delta: float
    ) -> tuple[float, np.ndarray] | None:
        """Class c's pricing optimum at ``node`` and, per whole-job column, the most copies
        on one server of any content within ``delta`` of it
        (:meth:`~synergy_opt.formulations.pricing_enum.PatternTable.within`); None where
        the class is priced by the MIP or nothing fits."""
        solver = self.solvers[c]
        if not isinstance(solver, TableSolve):
            return None
        cost, upper = self._costs(c, prices, node)
        top, caps = solver.table.within(cost, upper, delta)
        return None if top is None else (top, caps)

    def _costs(self, c: int, prices: Prices, node: Node) -> tuple[np.ndarray, np.ndarray]:
        """Class c's pricing costs at ``prices`` and column bounds at ``node``."""
        mm, pcols, _ = self.models[c]
        wx, wp = pricing_costs(self.data, self.shapes[c][0], prices)
        cost = np.asarray([wx[idx] if n == "x" else wp[n, idx] for n, idx in pcols])
        upper = mm.col_upper.copy()
        for j, (name, idx) in enumerate(pcols):
            if (name != "x" and idx in node.off) or (name == "x" and idx in node.xbanned):
                upper[j] = 0.0
        return cost, upper

    def cuts(self, made: Sequence[tuple[int, np.ndarray, float]]) -> tuple[PatternCut, ...]:
        """``pat_dual_cut`` per server from pricing's costs and bounds: valid for every
        allocation of the node priced (its switched-off slots have no parts)."""
        out: list[PatternCut] = []
        for c, cost, top in made:
            out += _server_cuts(self.data, self.shapes[c], self.models[c][1], cost, top)
        return tuple(out)


def _unknown(found: Sequence[Pattern], known: set[Pattern]) -> list[Pattern]:
    """The patterns of ``found`` not in ``known``, each once, in order."""
    return [p for p in dict.fromkeys(found) if p not in known]


def _allowed(p: Pattern, node: Node) -> bool:
    return not any(part[0] in node.off for part in p.parts) and not any(
        kp in node.xbanned for kp, _ in p.whole
    )


def solve_node(
    data: Mapping[str, Any],
    pricer: _Pricer,
    pool: list[Pattern],
    node: Node,
    *,
    prune_at: float | None,
    deadline: float,
    fixed: Mapping[Pattern, tuple[int, float]] | None = None,
) -> _NodeLP | None:
    """Column generation at ``node``; new patterns join ``pool`` (shared by every node).

    Stops when no pattern prices out, when the bound falls to ``prune_at`` (the node
    cannot beat the incumbent), or at ``deadline``.  None when no bound was found.
    With ``fixed`` (a dive) the returned bound is no bound of the node: only the search's
    own calls, without it, give bounds.
    """
    known = set(pool)
    best: float | None = None
    best_cuts: tuple[tuple[int, np.ndarray, float], ...] = ()
    last: _NodeLP | None = None
    for _ in range(NODE_ITERATIONS):
        pats = [p for p in pool if _allowed(p, node)]
        mm, cols, names = node_master(data, pats, node, fixed, shapes=pricer.shapes)
        solved = _lp(mm)
        if solved is None:
            return None
        value, x, duals = solved
        prices = _prices(data, names, duals, pricer.shapes)
        bound: float | None = value
        added = 0
        cuts: list[tuple[int, np.ndarray, float]] = []
        for c, run in enumerate(pricer.shapes):
            left = deadline - time.perf_counter()
            if left <= 0:
                return last and dataclasses.replace(last, bound=best, converged=False)
            new = _unknown(pricer.quick_price(c, prices, node), known)
            if new:  # improving patterns without the MIP: this round proves no bound
                bound = None
            else:
                top, found, rows = pricer.price(c, prices, node, left)
                if top is None:
                    return last and dataclasses.replace(last, bound=best, converged=False)
                if bound is not None:
                    bound += len(run) * max(0.0, top - prices.count[c])
                cuts += rows
                new = _unknown(found, known)
            known.update(new)
            pool.extend(new)
            added += len(new)
        if bound is not None and (best is None or bound < best):
            best, best_cuts = bound, tuple(cuts)
        art = sum(float(v) for (n, _), v in zip(cols, x, strict=True) if n in ("short", "bp_ghost"))
        last = _NodeLP(
            best,
            value,
            {idx: float(v) for (n, idx), v in zip(cols, x, strict=True) if n == "y"},  # type: ignore[misc]
            {
                idx[0]: float(v)
                for (n, idx), v in zip(cols, x, strict=True)
                if n == "z" and v > INT_EPS
            },
            tuple(pats),
            art,
            added == 0,
            best_cuts,
            prices,
        )
        if added == 0:
            break
        if prune_at is not None and best is not None and best <= prune_at:
            break
    return last


def _children(data: Mapping[str, Any], node: Node, lp: _NodeLP) -> list[Node] | None:
    """The two children of ``node`` on its first undecided spread decision; None at a leaf.

    Order: a slot whose use is fractional (most fractional first), then any undecided slot
    (the LP's most used first), then a used slot's point (the LP's heaviest point against
    the rest).  Slots of a class are decided in class order so that only the canonical
    labelling (slots used in order, as ``sym_slot_order`` asks) is ever built.
    """
    slots = list(data["slots"])
    use = {ki: sum(lp.y.get((*ki, q), 0.0) for q in _points(data, ki, node)) for ki in slots}
    open_ = [ki for ki in slots if ki not in node.on and ki not in node.off]
    frac = [ki for ki in open_ if INT_EPS < use[ki] < 1 - INT_EPS]
    pick = None
    if frac:
        pick = min(frac, key=lambda ki: (abs(use[ki] - 0.5), ki))
    elif open_:
        pick = max(open_, key=lambda ki: (use[ki], -ki[0], -ki[1]))
    if pick is not None:
        k, i = pick
        same = [ki for ki in slots if ki[0] == k]
        on = dataclasses.replace(node, on=node.on | {ki for ki in same if ki[1] <= i})
        off = dataclasses.replace(node, off=node.off | {ki for ki in same if ki[1] >= i})
        return [c for c in (on, off) if not (c.on & c.off)]
    for ki in sorted(node.on):
        pts = _points(data, ki, node)
        if len(pts) > 1:
            q = max(pts, key=lambda q: (lp.y.get((*ki, q), 0.0), -q))
            only = node.banned | {(*ki, r) for r in pts if r != q}
            return [
                dataclasses.replace(node, banned=only),
                dataclasses.replace(node, banned=node.banned | {(*ki, q)}),
            ]
    return _point_children(data, node, lp)


def _point_children(data: Mapping[str, Any], node: Node, lp: _NodeLP) -> list[Node] | None:
    """With every spread decision fixed: the whole point of a one-member class whose use
    is fractional in the LP (the most fractional), into "only that point" and "any other".
    A one-member class's job is whole (its slot is off) or spread (no whole use at all), so
    the two children split the node's allocations.  None when no such point is fractional:
    a leaf."""
    use: dict[tuple[int, int], float] = {}
    for j, v in lp.z.items():
        for (k, p), cnt in lp.patterns[j].whole:
            if data["n"][k] == 1:
                use[k, p] = use.get((k, p), 0.0) + cnt * v
    frac = [kp for kp, v in use.items() if INT_EPS < v < 1 - INT_EPS]
    if not frac:
        return None
    return _split_point(data, node, *min(frac, key=lambda kp: (abs(use[kp] - 0.5), kp)))


def _split_point(data: Mapping[str, Any], node: Node, k: int, p: int) -> list[Node]:
    """One-member class k's whole point p: "only p" (every other point of k left out) and
    "not p"."""
    others = {(kk, q) for _, kk, q in data["x_index"] if kk == k and q != p}
    return [
        dataclasses.replace(node, xbanned=node.xbanned | others),
        dataclasses.replace(node, xbanned=node.xbanned | {(k, p)}),
    ]


def _lean(data: Mapping[str, Any], node: Node, lp: _NodeLP, kids: Sequence[Node]) -> Node:
    """The child whose new decisions the node's LP solution breaks least (a dive's way
    down): slots switched on count their missing use, slots switched off and points
    left out their use."""
    whole: dict[tuple[int, int], float] = {}
    for j, v in lp.z.items():
        for kp, cnt in lp.patterns[j].whole:
            whole[kp] = whole.get(kp, 0.0) + cnt * v

    def use(ki: Slot) -> float:
        return sum(lp.y.get((*ki, q), 0.0) for q in _points(data, ki, node))

    def broken(kid: Node) -> float:
        return (
            sum(1.0 - use(ki) for ki in kid.on - node.on)
            + sum(use(ki) for ki in kid.off - node.off)
            + sum(lp.y.get(kiq, 0.0) for kiq in kid.banned - node.banned)
            + sum(whole.get(kp, 0.0) for kp in kid.xbanned - node.xbanned)
        )

    return min(kids, key=broken)
