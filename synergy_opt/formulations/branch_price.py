"""Branch-and-price over server patterns: proving split-penalty rounds (beyond the paper).

The pattern master's LP (:mod:`~synergy_opt.formulations.patterns_fast`) bounds the
counting optimum within 1-2 % on 128-GPU split-penalty rounds, but it leaves the spread
decisions fractional: a slot (a spread job) half used, or used at a mix of points.  Those
few decisions are what the counting MIP's branching on 16 identical servers cannot close.
This module branches on them, nothing else:

1. slot (k, i) used or not (sum_q y[k, i, q] = 1 or 0); a slot set unused has no parts,
   so its parts leave the pricing problem;
2. for a used slot, its point: one point q (y[k, i, q] = 1) or every other point.

Each node's bound is the Lagrangian bound of column generation on the node's master
(valid whenever it stops); nodes are explored best bound first and pruned against the
incumbent.  A node whose spread decisions are all fixed is a *leaf*: the counting MIP
with those decisions fixed (``y`` bounds) settles it; it is far smaller to prove than the
whole round, because what remains is packing known jobs and known spread points onto
identical servers.  Every real allocation sits in exactly one leaf (slots relabelled in
class order), so the search is exact: when it ends, the incumbent is optimal.

Allocations come from dives in the master (:func:`_dive_to_leaf`, :func:`_pack_leaf`):
down the LP's lean to a leaf, then servers fixed to patterns one at a time while the
leaf's LP value holds, then the leaf MIP with those servers held.  Where 128-GPU
split-penalty rounds stalled (seeds 2-4) the leaf bound was right and the allocation
missing: seed 2's stalled leaf has LP value 59.6041, and HiGHS needs 50-63 s over the
whole round to find an allocation worth that.

Where a leaf's LP puts every job at one point and the jobs do not pack there, no LP of
this search sees it (the servers are fractional) and the leaf MIP, branching over
identical servers, does not settle it: the leaf's points are made the node's own
(:func:`_fix_points`) and the packing's arc flow (:mod:`.packing_flow`), whole servers
as paths, refutes the node where it can (split penalties 128 GPUs seed 9: five leaves,
0.2-0.4 s each, proven where no limit proved it before).

``formulations/patterns.md`` ("Branch-and-price") states the node master's extra pieces;
the rest is the pattern master and pricing problem unchanged.

Public API::

    branch_and_price(inst, jobs, *, time_limit, warm_start, incumbent) -> BranchResult
    Node, BranchResult        # frozen dataclasses
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from synergy_opt.formulations.counting import Point, _model_data
from synergy_opt.formulations.counting_fast import (
    EXACT_REL_GAP,
    CountingMatrix,
    build_counting_matrix,
    placements_from_values,
    start_from_placements,
)
from synergy_opt.formulations.packing_data import PackingData, packing_data
from synergy_opt.formulations.packing_flow import Choice, refute_by_flow
from synergy_opt.formulations.packing_lp import refute_packing
from synergy_opt.formulations.patterns import (
    SHORT_PENALTY,
    Pattern,
    PatternCut,
    Prices,
    full_gpu_floor,
    pricing_costs,
    server_shapes,
)
from synergy_opt.formulations.patterns_fast import (
    PATTERNS_PER_PRICING,
    PRICE_EPS,
    _highs,
    _pattern,
    _prices,
    _seed_patterns,
    _server_cuts,
    _zero_prices,
    build_master_matrix,
    build_pricing_matrix,
    strengthened_counting,
)
from synergy_opt.formulations.pricing_enum import PRICING_METHODS, TableSolve
from synergy_opt.formulations.pricing_grid import GridPricer
from synergy_opt.matrix import MatrixModel
from synergy_opt.solve import TerminationStatus, solve_matrix
from synergy_opt.types import Job, PlacementPart, RoundInstance

log = logging.getLogger(__name__)

Slot = tuple[int, int]
#: A packing question: (job, point, spread) for every job (:func:`_points_key`).
_PointsKey = frozenset[tuple[str, Point, bool]]

#: How pricing problems are solved (:data:`~synergy_opt.formulations.pricing_enum.PRICING_METHODS`).
PRICING: str = "enumeration"
#: Classes priced by the MIP try the grid program first (``formulations/branch_price.md``,
#: "Heuristic pricing"): the MIP then runs only where it finds no improving pattern.
HEURISTIC_PRICING: bool = True
#: Column generation rounds per node (a guard: the node's bound is valid whenever it stops).
NODE_ITERATIONS: int = 200
#: The first time slice of a leaf's counting MIP; an unsettled leaf goes back into the
#: queue (with the MIP's bound) and gets twice the time when it is next the best node, so
#: one hard leaf cannot hold up the leaf that holds the optimum.  Slices alternate between
#: the plain leaf MIP and the one with the node's pattern rows: neither is always faster
#: (split-penalty 128 seed 0's optimal leaf: 4.9 s plain, 1.6 s with the rows; seed 1's:
#: 0.5 s plain, 6.8 s with them).
LEAF_SLICE_S: float = 1.0
#: A leaf not settled by slices up to this long ends the search (unproven, with its bound).
MAX_LEAF_SLICE_S: float = 4.0
#: Time for the integer master over the root's patterns (a quick incumbent).
ROOT_IP_S: float = 1.0
#: Where a known allocation seeded the pool, the root's second integer master, over the
#: patterns of column generation from nothing (:func:`_plain_root_ip`), gets at most this
#: share of the search's time.  The two pools lead HiGHS to different allocations:
#: split-penalty 128 seed 8's seeded master finds 78.76 in 1 s (its bound already the
#: optimum), the plain one the optimum, 82.8872, in 0.2 s after 1.5-2.2 s of pricing.
PLAIN_ROOT_SHARE: float = 0.3
#: The same at a leaf, before its counting MIP.
LEAF_IP_S: float = 0.5
#: The root's dive (down to one leaf and its packing) gets at most this share of the
#: search's time; each leaf's packing (:func:`_pack_leaf`) at most ``LEAF_DIVE_SHARE``.
ROOT_DIVE_SHARE: float = 0.3
LEAF_DIVE_SHARE: float = 0.2
#: A leaf's packing MIPs keep these shares of the dive's fixed servers, in turn.
RESIDUAL_KEEP: tuple[float, ...] = (1.0, 1 / 2)
#: Time for each of those MIPs (a restriction: it only looks for an allocation).
RESIDUAL_S: float = 2.0
#: A dive tries at most this many patterns to round up at each step before it goes back
#: a step, and prices at most ``DIVE_SOLVES`` times in all.
DIVE_TRIES: int = 6
DIVE_SOLVES: int = 12
#: Reduced-cost fixing (:func:`_rc_caps`) widens its gap by this (relative) for the
#: duals' tolerances.
RC_SLACK: float = 1e-6
#: The root's dive leaf is packed first by its MIP over only the servers within the
#: proof tolerance of the pricing optimum (:func:`_reach`: an allocation worth the leaf's
#: bound has no others): at most this many branch-and-bound nodes (the same answer on
#: every machine), this long as a guard.
REACH_NODES: int = 1000
REACH_S: float = 4.0
#: A master value is integral within this.
INT_EPS: float = 1e-6
#: A leaf whose LP puts every job at one point (how many of each class at each point, and
#: each used slot's point, all integral) is packed at those points first
#: (:func:`_pack_points`), as ``opt``'s packing route does a super-machine's: the pattern
#: LP of that packing, then the whole jobs where its integral solutions put them and the
#: spread jobs around them (at most ``POINT_ATTEMPTS`` solutions, CP-SAT
#: ``POINT_SPREAD_S`` units each).  A packing is worth the leaf's LP value, its bound.
#: Split penalties 128 GPUs seed 2: the leaf that stalls (59.6041, the optimum; its MIP
#: and dives found 59.1041 in 60 s) packs at its LP's points at the first attempt, 0.14 s.
PACK_POINTS: bool = True
POINT_ATTEMPTS: int = 6
POINT_SPREAD_S: float = 0.2
#: Where such a leaf does not pack there, its points are made the node's own
#: (:func:`_fix_points`: each one-member class's whole point in turn, "only this point"
#: against "any other") and the node that allows no other points is refuted, where it can
#: be, by the packing's arc flow (:mod:`~synergy_opt.formulations.packing_flow`), which sees
#: whole servers where the pattern LP does not: refuted, the node has no allocation.  Each
#: refutation gets at most ``FLOW_SHARE`` of the search's time.  The leaves that held
#: split-penalty 128-GPU seeds 3, 7, 9 and 17 open (``formulations/branch_price.md``) are
#: refuted in 5.6, 2.9, 0.27 and 5.8 s.
FLOW_REFUTE: bool = True
FLOW_SHARE: float = 0.25
#: The root's dive leaf, where its points do not pack (:func:`_pack_points`), is asked the
#: arc flow too (at most ``DIVE_FLOW_NODES`` branch-and-bound nodes, ``DIVE_FLOW_COLS``
#: columns and ``DIVE_FLOW_SHARE`` of the search's time: seed 7's dive leaf, 10 s, ran
#: 4.5 s to no verdict before the share): refuted, no allocation has those points,
#: so the two packings that look for one worth the leaf's bound (:func:`_reach`,
#: :func:`_pack_leaf`) are skipped and the search refutes its leaves.  Split penalties
#: 128 GPUs seed 9 (branch-and-price alone, 30 s from TUNE): they took 4.1 and 4.3 s
#: of the 15 s to the proof and found 53.939, below the optimum 54.3377 a leaf packs later;
#: without them the proof takes 6.1 s.
DIVE_FLOW: bool = True
DIVE_FLOW_NODES: int = 100
DIVE_FLOW_COLS: int = 20_000
DIVE_FLOW_SHARE: float = 0.15


@dataclass(frozen=True, slots=True, order=True)
class Node:
    """Decisions fixed on the way down: slots unused, slots used, their points left out,
    and whole-job points (k, p) left out (one-member classes, below the spread decisions)."""

    off: frozenset[Slot] = frozenset()
    on: frozenset[Slot] = frozenset()
    banned: frozenset[tuple[int, int, int]] = frozenset()
    xbanned: frozenset[tuple[int, int]] = frozenset()


@dataclass(frozen=True, slots=True)
class BranchResult:
    """The search's outcome: best allocation found, its value, and the proven bound.

    ``bound`` is the largest node bound still open when the search stopped (the incumbent's
    value when it finished: then ``proven``); ``placements`` is the best allocation known
    (the best warm start if the search found none better; empty without either).
    """

    objective: float | None
    bound: float | None
    placements: Mapping[str, tuple[PlacementPart, ...]]
    nodes: int
    leaves: int
    proven: bool
    runtime_s: float
    #: which step found ``placements``: "warm start", "master", "restricted IP", "dive"
    #: (the root's), "leaf IP", "leaf dive" (:func:`_pack_leaf`) or "leaf" (leaf MIP)
    source: str = "none"
    #: why the search ended, in words for a note (:data:`STOP_PROVEN` and the others): a
    #: user reading an unproven answer learns what holds the bound
    stop: str = ""
    #: nodes whose points the packing's arc flow proved unpackable (:data:`FLOW_REFUTE`)
    refuted: int = 0


#: Why a search ended (:attr:`BranchResult.stop`).
STOP_PROVEN = "every node settled"
STOP_TIME = "time limit"
STOP_HALTED = "stopped by the caller"
STOP_DIVE = "the root and its dive only"
#: A leaf's MIP slices ran out (:data:`MAX_LEAF_SLICE_S`).  Where its LP fixes every job's
#: point the bound is the value of those points and what is open is whether the jobs pack
#: there (``formulations/branch_price.md``, "What the open rounds' top leaves lack").
STOP_LEAF_POINTS = "a leaf stalls whose LP fixes every job's point; open: do the jobs pack there"
STOP_LEAF = "a leaf stalls whose LP mixes points"


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
    (GPUs, cores, GB from nowhere at -SHORT_PENALTY each) that keep it feasible before
    patterns carry the slot's parts (they only relax it, so every bound stays valid).
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
        prices = _prices(data, names, duals)
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


def _fits(
    data: Mapping[str, Any],
    node: Node,
    fixed: Mapping[Pattern, int],
    shapes: tuple[tuple[int, ...], ...],
) -> bool:
    """Whether the servers fixed in a dive can be part of an allocation at all: no more
    of them than their class (``shapes``) has, no more whole class-k jobs than its
    members not spread, no more GPUs in a used slot's parts than the job has."""
    servers: dict[int, int] = {}
    whole: dict[int, int] = {}
    gpus: dict[Slot, int] = {}
    for p, n in fixed.items():
        servers[p.shape] = servers.get(p.shape, 0) + n
        for (k, _), cnt in p.whole:
            whole[k] = whole.get(k, 0) + n * cnt
        for ki, a, _, _ in p.parts:
            gpus[ki] = gpus.get(ki, 0) + n * a
    spread = {k: sum(1 for kk, _ in node.on if kk == k) for k in whole}
    return (
        all(n <= len(shapes[c]) for c, n in servers.items())
        and all(n <= data["n"][k] - spread[k] for k, n in whole.items())
        and all(a <= data["g"][ki[0]] for ki, a in gpus.items())
    )


def _dive_to_leaf(
    data: Mapping[str, Any], pricer: _Pricer, pool: list[Pattern], node: Node, *, deadline: float
) -> tuple[Node, _NodeLP | None]:
    """From ``node``, the children the LP leans to (:func:`_lean`) down to a leaf, and the
    leaf's LP (None when no child has a feasible, converged master)."""
    lp = solve_node(data, pricer, pool, node, prune_at=None, deadline=deadline)
    while lp is not None and lp.converged:
        kids = _children(data, node, lp)
        if kids is None:
            break
        first = _lean(data, node, lp, kids)
        lp = None
        for kid in (first, *(k for k in kids if k != first)):
            lp = solve_node(data, pricer, pool, kid, prune_at=None, deadline=deadline)
            if lp is not None and lp.converged and lp.artificial <= INT_EPS:
                node = kid
                break
            lp = None
    log.debug("dive: leaf %s lp %s", node, lp and (lp.value, lp.converged, lp.artificial))
    return node, lp


def _nearest(p: Pattern, z: float) -> tuple[float, ...]:
    """Nearest to its next whole count first."""
    return (math.ceil(z) - z,)


def _whole_first(p: Pattern, z: float) -> tuple[float, ...]:
    """Servers of whole jobs only first, then by fewest spread parts, nearest first."""
    return (float(len(p.parts)), math.ceil(z) - z)


#: How a dive orders the fractional patterns it may round up, by name (smallest key
#: first).  Why two: a dive that fixes servers holding spread parts early can leave the
#: rest unpackable at the leaf's value where fixing the whole-job servers first does
#: not (split-penalty 128 seed 2 from TUNE's start, 8 s: 58.7141 with "nearest" alone,
#: proven 59.6041 in 4.4 s with "whole first" first), and either dive costs a few tenths
#: of a second now that pricing is fast.
DIVE_ORDERS: dict[str, Callable[[Pattern, float], tuple[float, ...]]] = {
    "nearest": _nearest,
    "whole first": _whole_first,
}
#: The dives a leaf's packing runs, in turn, until one reaches an integral master.
PACK_DIVES: tuple[str, ...] = ("whole first", "nearest")


def _dive_order(lp: _NodeLP, how: str = "nearest") -> list[int]:
    """The fractional patterns of a master solution in the order a dive rounds them up
    (:data:`DIVE_ORDERS`)."""
    key = DIVE_ORDERS[how]
    frac = [(key(lp.patterns[j], v), j) for j, v in lp.z.items() if v - math.floor(v) > INT_EPS]
    return [j for _, j in sorted(frac)]


def _fix_servers(
    data: Mapping[str, Any],
    pricer: _Pricer,
    pool: list[Pattern],
    node: Node,
    lp: _NodeLP,
    *,
    deadline: float,
    how: str = "nearest",
) -> tuple[_NodeLP | None, list[Pattern]]:
    """Diving in a leaf's master (a primal heuristic): fix servers to patterns one at a
    time (the fractional pattern nearest to its next whole count is rounded up, as a lower
    bound on its ``z``; at most :data:`DIVE_TRIES` of them per step, a step whose tries
    all fail sending the dive back one step; :data:`DIVE_SOLVES` pricing rounds in all)
    and price again, keeping only steps that keep the leaf's LP value (within
    :data:`EXACT_REL_GAP`): an allocation found so proves the leaf.  Returns the integral
    master if it gets there, else None and the deepest dive's servers in the order fixed
    (one pattern per server), which :func:`_leaf_matrix` holds in the leaf MIP.  Why:
    what stays fractional in a leaf is how patterns pack the servers, which the leaf
    MIP's branching over identical servers finds slowly (split-penalty 128 seed 2: HiGHS
    needs about 50 s for 59.6041 over the whole round, the leaf's LP value); with some
    servers fixed its search is smaller."""
    target = lp.value - EXACT_REL_GAP * max(1.0, abs(lp.value))

    def steps(lp: _NodeLP, fixed: dict[Pattern, int]) -> Iterator[dict[Pattern, int]]:
        trials = [{**fixed, lp.patterns[j]: math.ceil(lp.z[j])} for j in _dive_order(lp, how)]
        return iter([t for t in trials if _fits(data, node, t, pricer.shapes)][:DIVE_TRIES])

    # depth first: a level whose tries all lose the value sends the dive back one level
    stack: list[tuple[_NodeLP, dict[Pattern, int], list[Pattern], Iterator[dict[Pattern, int]]]]
    stack = [(lp, {}, [], steps(lp, {}))]
    deepest: list[Pattern] = []
    solves = 0
    while stack:
        here, fixed, order, tries = stack[-1]
        if _master_values(data, here) is not None:
            return here, order
        trial = next(tries, None)
        if trial is None:
            stack.pop()
            continue
        if solves >= DIVE_SOLVES or time.perf_counter() >= deadline:
            break
        solves += 1
        bounds = {p: (n, math.inf) for p, n in trial.items()}
        got = solve_node(data, pricer, pool, node, prune_at=None, deadline=deadline, fixed=bounds)
        if got is None or not got.converged or got.artificial > INT_EPS or got.value < target:
            continue
        more = [p for p in trial for _ in range(trial[p] - fixed.get(p, 0))]
        stack.append((got, trial, order + more, steps(got, trial)))
        if len(order) + len(more) > len(deepest):
            deepest = order + more
        log.debug("dive: %d servers fixed (%d solves)", len(order) + len(more), solves)
    return None, deepest


def _pack_leaf(
    data: Mapping[str, Any],
    cm: CountingMatrix,
    pricer: _Pricer,
    pool: list[Pattern],
    node: Node,
    lp: _NodeLP,
    deadline: float,
    solver: str,
) -> Iterator[dict[str, list[PlacementPart]]]:
    """Allocations of a leaf, best effort, from its dive (:func:`_fix_servers`): the
    integral master if the dive gets there, else the leaf MIP with the dive's first
    servers fixed, fewer of them each time (:data:`RESIDUAL_KEEP`), for at most
    :data:`RESIDUAL_S` each.  A dive that runs into a dead end has fixed a server it
    should not have, and which one is unknown; keeping a prefix keeps the LP value
    (each step kept it) and leaves a smaller search than the whole leaf.  Only
    allocations come out of here (the restricted MIPs bound nothing); the caller stops
    drawing once its incumbent settles the leaf."""
    order: list[Pattern] = []
    for how in PACK_DIVES:
        got, deepest = _fix_servers(data, pricer, pool, node, lp, deadline=deadline, how=how)
        if got is not None:
            values = _master_values(data, got)
            if values is not None:
                yield placements_from_values(data, values)
                return
        order = order or deepest
    tried: set[int] = set()
    for share in RESIDUAL_KEEP:
        n = int(len(order) * share)
        left = deadline - time.perf_counter()
        if n in tried or left <= 0:
            continue
        tried.add(n)
        res = solve_matrix(
            _leaf_matrix(cm, node, (), order[:n]),
            solver,
            time_limit=max(min(RESIDUAL_S, left), 1e-3),
            rel_gap=EXACT_REL_GAP,
            guard=True,
        )
        log.debug("leaf packing with %d servers fixed: %s %s", n, res.status, res.objective)
        if res.x is not None:
            yield placements_from_values(data, cm.values(res.x[: cm.matrix.num_cols]))


@dataclass(frozen=True, slots=True)
class RcFixing:
    """Reduced-cost fixing at a node (:func:`_rc_caps`): what every allocation of the
    node worth more than ``floor`` satisfies.

    ``caps`` per server class: the most copies of each whole-job column (k, p) on one
    server; ``floors``: per server, its reduced value at the node LP's duals is at least
    the pricing optimum less the gap (``bp_rc_floor`` rows; only where every server is
    used, or the row holds for an empty one); ``bound``: the duals' Lagrangian bound L.
    """

    caps: Mapping[int, Mapping[tuple[int, int], int]]
    floors: tuple[PatternCut, ...]
    bound: float
    floor: float


def _rc_caps(
    data: Mapping[str, Any],
    pricer: _Pricer,
    node: Node,
    lp: _NodeLP,
    *,
    target: float | None = None,
    gap: float | None = None,
) -> RcFixing | None:
    """Reduced-cost fixing at ``node`` for allocations worth at least ``target`` (or at
    least L - ``gap``), L the Lagrangian bound of the node LP's duals (``lp.prices``).

    Any allocation of the node is worth at most L minus, per used server, the gap
    between the pricing optimum and that server's reduced value, so in one worth at least
    ``target`` no server is further than L - ``target`` from the optimum: its whole jobs
    are within :meth:`_Pricer.within`'s caps and its reduced value within the gap.
    None where a class is priced by the MIP or the LP has no duals."""
    if lp.prices is None:
        return None
    tops: list[float] = []
    bound = lp.value
    for c, run in enumerate(pricer.shapes):
        got = pricer.within(c, lp.prices, node, 0.0)
        if got is None:
            return None
        tops.append(got[0])
        bound += len(run) * max(0.0, got[0] - lp.prices.count.get(c, 0.0))
    delta = max(bound - target if target is not None else gap or 0.0, 0.0)
    floor = bound - delta
    # the duals are optimal within HiGHS's tolerances: a little slack keeps this valid
    delta += RC_SLACK * max(1.0, abs(bound))
    caps: dict[int, dict[tuple[int, int], int]] = {}
    floors: list[PatternCut] = []
    for c, run in enumerate(pricer.shapes):
        got = pricer.within(c, lp.prices, node, delta)
        if got is None:
            return None
        pcols = pricer.models[c][1]
        xs = [idx for name, idx in pcols if name == "x"]
        caps[c] = {kp: int(n) for kp, n in zip(xs, got[1].tolist(), strict=True)}  # type: ignore[misc]
        if tops[c] - delta <= 0.0 or full_gpu_floor(data, run[0]) >= 1.0:
            cost = pricer._costs(c, lp.prices, node)[0]
            floors += [
                PatternCut(cut.server, cut.coef, tops[c] - delta)
                for cut in _server_cuts(data, run, pcols, cost, tops[c])
            ]
    return RcFixing(caps, tuple(floors), bound, floor)


def _reach(
    cm: CountingMatrix,
    pricer: _Pricer,
    node: Node,
    lp: _NodeLP,
    deadline: float,
    solver: str,
    threads: int | None,
) -> tuple[dict[str, list[PlacementPart]] | None, float | None] | None:
    """The leaf MIP of ``node`` over only the server contents that an allocation worth
    the node's bound (within :data:`EXACT_REL_GAP`) can have (:func:`_rc_caps`): the
    packing a leaf needs, without the columns that make the plain leaf MIP slow
    (split-penalty 128 seed 2's optimal leaf: 59.6041 proven in 2.8 s with 560 of 944
    whole-job columns fixed to 0; the plain leaf MIP finds no more than 57.77 in 10 s).
    Returns the allocation found (or None) and a bound of the node when the MIP settled
    its question (every allocation above the fixing's floor is in it), else None; None
    where the fixing does not apply."""
    fixing = _rc_caps(cm.data, pricer, node, lp, gap=EXACT_REL_GAP * max(1.0, abs(lp.value)))
    if fixing is None:
        return None
    top, floor = fixing.bound, fixing.floor
    res = solve_matrix(
        _leaf_matrix(cm, node, (), caps=fixing.caps, floors=fixing.floors),
        solver,
        time_limit=max(min(REACH_S, deadline - time.perf_counter()), 1e-3),
        rel_gap=EXACT_REL_GAP,
        threads=threads,
        node_limit=REACH_NODES,
        guard=True,
    )
    log.debug("reach: %s %s (L %.6g, floor %.6g)", res.status, res.objective, top, floor)
    found = None
    if res.x is not None:
        found = placements_from_values(cm.data, cm.values(res.x[: cm.matrix.num_cols]))
    settled = res.status in (TerminationStatus.OPTIMAL, TerminationStatus.INFEASIBLE)
    bound = max(floor, res.objective or -math.inf) if settled else None
    return found, bound


def _master_values(
    data: Mapping[str, Any], lp: _NodeLP
) -> dict[tuple[str, tuple[int, ...]], float] | None:
    """The counting-model values of an integral master solution (None if it is not one):
    patterns handed to servers of their class in order, spread parts trimmed to the point."""
    if lp.artificial > INT_EPS:
        return None
    if any(min(v, 1 - v) > INT_EPS for v in lp.y.values()):
        return None
    if any(abs(v - round(v)) > INT_EPS for v in lp.z.values()):
        return None
    shapes = server_shapes(data)
    free = {c: list(run) for c, run in enumerate(shapes)}
    values: dict[tuple[str, tuple[int, ...]], float] = {}
    parts: dict[Slot, list[list[Any]]] = {}
    for j in sorted(lp.z):
        p = lp.patterns[j]
        for _ in range(int(round(lp.z[j]))):
            s = free[p.shape].pop(0)
            for (k, pt), cnt in p.whole:
                key = ("x", (s, k, pt))
                values[key] = values.get(key, 0.0) + cnt
            for ki, a, cp, mp in p.parts:
                parts.setdefault(ki, []).append([s, a, cp, mp])
    for (k, i, q), v in lp.y.items():
        if v < 0.5:
            continue
        values["y", (k, i, q)] = 1.0
        c_left, m_left = data["slot_points"][k, i][q][:2]
        for s, a, cp, mp in parts.get((k, i), []):
            values["a", (k, i, s)] = float(a)
            values["u", (k, i, s)] = 1.0
            values["cp", (k, i, s)] = float(min(cp, c_left))
            values["mp", (k, i, s)] = float(min(mp, m_left))
            c_left -= min(cp, c_left)
            m_left -= min(mp, m_left)
    return values


def _restricted_ip(
    data: Mapping[str, Any], pool: Sequence[Pattern], node: Node, time_limit: float
) -> _NodeLP | None:
    """The master over the patterns so far as an integer program (no jobs left out): a
    quick allocation from known patterns (price-and-branch's heuristic), or None."""
    pats = [p for p in pool if _allowed(p, node)]
    mm, cols, _ = node_master(data, pats, node)
    keep = [c for c, (n, _) in enumerate(cols) if n != "bp_ghost"]
    mm = dataclasses.replace(
        mm,
        cost=mm.cost[keep],
        col_lower=mm.col_lower[keep],
        col_upper=np.where([cols[c][0] == "short" for c in keep], 0.0, mm.col_upper[keep]),
        integer=np.asarray([cols[c][0] in ("z", "y") for c in keep]),
        a_start=mm.a_start[: len(keep) + 1],
        a_index=mm.a_index[: int(mm.a_start[len(keep)])],
        a_value=mm.a_value[: int(mm.a_start[len(keep)])],
    )
    res = solve_matrix(mm, "highs", time_limit=max(time_limit, 1e-3), rel_gap=EXACT_REL_GAP)
    log.debug("restricted IP: %s %s bound %s", res.status, res.objective, res.dual_bound)
    if res.x is None:
        return None
    x = res.x
    return _NodeLP(
        float(res.objective or 0.0),
        float(res.objective or 0.0),
        {idx: float(v) for (n, idx), v in zip(cols, x, strict=False) if n == "y"},  # type: ignore[misc]
        {
            idx[0]: float(round(v))
            for (n, idx), v in zip(cols, x, strict=False)
            if n == "z" and v > 0.5
        },
        tuple(pats),
        0.0,
        True,
    )


def _plain_root_ip(
    data: Mapping[str, Any], pricer: _Pricer, deadline: float
) -> dict[str, list[PlacementPart]] | None:
    """The root's column generation again from no known allocation, and the integer master
    over its patterns: an allocation, or None (not converged by ``deadline``, or no integral
    master).  Its patterns stay out of the search's pool, which therefore runs as without
    it but for the incumbent."""
    plain: list[Pattern] = []
    lp = solve_node(data, pricer, plain, Node(), prune_at=None, deadline=deadline)
    if lp is None or not lp.converged:
        return None
    left = min(ROOT_IP_S, deadline - time.perf_counter())
    ip = _restricted_ip(data, plain, Node(), left)
    values = None if ip is None else _master_values(data, ip)
    log.debug("plain root IP: %s", None if ip is None else ip.value)
    return None if values is None else placements_from_values(data, values)


def _leaf_points(
    data: Mapping[str, Any], lp: _NodeLP
) -> tuple[dict[str, tuple[int, float, float]], frozenset[str]] | None:
    """Every job's point where the node LP fixes them all (whole jobs per class and point,
    and each used slot's point, integral): members handed out as in
    :func:`placements_from_values`, slots first; ``None`` otherwise."""
    if lp.artificial > INT_EPS or any(min(v, 1 - v) > INT_EPS for v in lp.y.values()):
        return None
    totals: dict[tuple[int, int], float] = {}
    for j, z in lp.z.items():
        for kp, cnt in lp.patterns[j].whole:
            totals[kp] = totals.get(kp, 0.0) + z * cnt
    if any(abs(v - round(v)) > INT_EPS for v in totals.values()):
        return None
    point: dict[tuple[int, int], tuple[int, float, float]] = {}
    for (_, k, p), pt in data["x_point"].items():
        if point.setdefault((k, p), pt) != pt:
            return None  # a point whose resources differ by server: not one point
    pool = {k: list(ids) for k, ids in enumerate(data["classes"])}
    points: dict[str, tuple[int, float, float]] = {}
    spread: set[str] = set()
    for (k, i, q), v in sorted(lp.y.items()):
        if v > 0.5:
            jid = pool[k].pop(0)
            points[jid] = data["slot_points"][k, i][q]
            spread.add(jid)
    for kp, v in sorted(totals.items()):
        for _ in range(int(round(v))):
            points[pool[kp[0]].pop(0)] = point[kp]
    if any(pool.values()):
        return None
    return points, frozenset(spread)


@dataclass(frozen=True, slots=True)
class _LeafPoints:
    """Every job's point at a leaf whose LP fixes them all (:func:`_fix_points`)."""

    points: dict[str, Point]
    spread: frozenset[str]
    #: children that make these points the node's own ([]: it allows no others)
    kids: list[Node]
    #: classes of several jobs whose whole jobs the node lets take more than one point
    free: tuple[int, ...]

    def refutation(
        self, inst: RoundInstance, jobs: Sequence[Job], data: Mapping[str, Any], floor: float
    ) -> tuple[PackingData, tuple[Choice, ...], float | None]:
        """What the arc flow is asked: the packing of the jobs whose point the node fixes,
        and for each free class its whole jobs at points of their choice, worth at least
        ``floor`` in all (``None`` without free classes: then no packing at all)."""
        free = set(self.free)
        k_of = {jid: k for k, ids in enumerate(data["classes"]) for jid in ids}
        kept = [j for j in jobs if j.id in self.spread or k_of[j.id] not in free]
        pdata = packing_data(inst, kept, self.points, self.spread)
        if not free:
            return pdata, (), None
        options: dict[int, set[tuple[int, float]]] = {k: set() for k in free}
        for (_, k, _), (c, _, w) in data["x_point"].items():
            if k in free:
                options[k].add((int(c), float(w)))
        counts = {k: 0 for k in free}
        for j in jobs:
            if j.id not in self.spread and k_of[j.id] in free:
                counts[k_of[j.id]] += 1
        choices = tuple(
            Choice(counts[k], data["g"][k], tuple(sorted(options[k]))) for k in sorted(free)
        )
        fixed = math.fsum(self.points[j.id][2] for j in kept)
        return pdata, choices, floor - fixed


def _fix_points(data: Mapping[str, Any], node: Node, lp: _NodeLP) -> _LeafPoints | None:
    """Where the leaf's LP fixes every job's point (:func:`_leaf_points`): those points
    and the children that make them the node's own, or [] where the node already allows no
    others but those of its free classes (several jobs whole at more than one allowed
    point: their counts per point are the LP's, not the node's, so the arc flow lets them
    choose).  ``None`` where the LP mixes points.

    The children split a one-member class's whole point p, the first still open in class
    order, into "only p" (the LP's solution stays, and so does the bound) and "any other"
    (p left out): as in :func:`_point_children`, they split the node's allocations."""
    got = _leaf_points(data, lp)
    if got is None:
        return None
    points, spread = got
    allowed: dict[int, set[int]] = {}
    for _, k, p in data["x_index"]:
        if (k, p) not in node.xbanned:
            allowed.setdefault(k, set()).add(p)
    free = tuple(sorted(k for k, ps in allowed.items() if data["n"][k] > 1 and len(ps) > 1))
    at: dict[int, int] = {}
    for j, z in lp.z.items():
        for (k, p), _ in lp.patterns[j].whole:
            if z > INT_EPS and data["n"][k] == 1:
                at[k] = p
    for k in sorted(at):
        if len(allowed.get(k, ())) > 1:
            return _LeafPoints(points, spread, _split_point(data, node, k, at[k]), free)
    return _LeafPoints(points, spread, [], free)


def _pack_points(
    inst: RoundInstance,
    jobs: Sequence[Job],
    data: Mapping[str, Any],
    lp: _NodeLP,
    deadline: float,
) -> dict[str, list[PlacementPart]] | None:
    """An allocation worth the node LP's value, packed at the points the LP gives every
    job (:data:`PACK_POINTS`), or ``None``: the LP does not fix every point, the packing's
    pattern LP refutes them, or no integral solution of it leaves the spread jobs room."""
    from synergy_opt.formulations import packing_cp  # OR-Tools: loaded by opt's packing

    got = _leaf_points(data, lp)
    if got is None or time.perf_counter() >= deadline:
        return None
    points, spread = got
    pdata = packing_data(inst, jobs, points, spread)
    verdict = refute_packing(pdata)
    if verdict.refuted or verdict.listing is None:
        log.debug("leaf points: no packing (LP shortfall %s)", verdict.shortfall)
        return None
    found = packing_cp.pack_from_contents(
        pdata,
        verdict.listing,
        attempts=POINT_ATTEMPTS,
        deterministic_s=POINT_SPREAD_S,
        deadline=deadline,
        lp=verdict.matrix,
    )
    if found is None:
        log.debug("leaf points: no packing from the LP's integral contents")
        return None
    res, attempt = found
    assert res.plan is not None and res.resources is not None
    names = data["server_names"]
    out: dict[str, list[PlacementPart]] = {}
    for jid, parts in res.plan.items():
        c, m, _ = points[jid]
        if jid not in spread:
            ((s, g),) = parts
            out[jid] = [PlacementPart(names[s], g, c, m)]
            continue
        drawn = {s: (cp, gb) for s, cp, gb in res.resources.get(jid, ())}
        out[jid] = [PlacementPart(names[s], g, *drawn.get(s, (0, 0.0))) for s, g in parts]
    log.debug("leaf points: packed at attempt %d in %.3f s", attempt, res.seconds)
    return out


def _points_refuted(
    inst: RoundInstance,
    jobs: Sequence[Job],
    data: Mapping[str, Any],
    lp: _NodeLP,
    deadline: float,
    threads: int | None,
) -> _PointsKey | None:
    """Whether the arc flow proves that the jobs do not pack at the points the node LP
    gives every job (:data:`DIVE_FLOW`): those points (job, point, spread), or ``None``
    (not refuted, or the LP does not fix them all)."""
    got = _leaf_points(data, lp)
    if got is None:
        return None
    verdict = refute_by_flow(
        packing_data(inst, jobs, *got),
        max(deadline - time.perf_counter(), 1e-3),
        threads=threads,
        max_cols=DIVE_FLOW_COLS,
        node_limit=DIVE_FLOW_NODES,
    )
    log.debug("dive leaf points: arc flow %s in %.2fs", verdict.status, verdict.seconds)
    return _points_key(*got) if verdict.refuted else None


def _points_key(points: Mapping[str, Point], spread: frozenset[str]) -> _PointsKey:
    """Every job's point and whether it is spread: one packing question."""
    return frozenset((jid, pt, jid in spread) for jid, pt in points.items())


def _with_rows(slice_s: float) -> bool:
    """Whether the leaf slice of this length uses the pattern rows (every second one)."""
    return round(math.log2(slice_s / LEAF_SLICE_S)) % 2 == 1


def _held(
    data: Mapping[str, Any], servers: Sequence[Pattern]
) -> dict[int, dict[tuple[str, tuple[int, ...]], float]]:
    """Counting-model upper bounds of the servers a dive fixed: per server, its pattern's
    columns (x, a, u exact; cp, mp at most), the servers of each class taken in order."""
    shapes = server_shapes(data)
    free = {c: list(run) for c, run in enumerate(shapes)}
    out: dict[int, dict[tuple[str, tuple[int, ...]], float]] = {}
    for p in servers:
        if free[p.shape]:
            s = free[p.shape].pop(0)
            cols: dict[tuple[str, tuple[int, ...]], float] = {}
            for (k, pt), cnt in p.whole:
                cols["x", (s, k, pt)] = float(cnt)
            for (k, i), a, cp, mp in p.parts:
                cols["a", (k, i, s)] = float(a)
                cols["u", (k, i, s)] = 1.0
                cols["cp", (k, i, s)] = float(cp)
                cols["mp", (k, i, s)] = float(mp)
            out[s] = cols
    return out


def _leaf_matrix(
    cm: CountingMatrix,
    node: Node,
    cuts: Sequence[PatternCut],
    servers: Sequence[Pattern] = (),
    caps: Mapping[int, Mapping[tuple[int, int], int]] | None = None,
    floors: Sequence[PatternCut] = (),
) -> MatrixModel:
    """The counting MIP with the node's decisions fixed through ``y``'s and ``x``'s bounds and
    the node's pattern rows (``pat_full_gpus``, ``pat_dual_cut``): its LP is then at least
    as tight as the node's bound.  ``servers`` (a dive's, :func:`_fix_servers`) fixes that
    many servers of each pattern's class to the pattern (whole jobs and GPUs exact, a
    part's cores and GB at most the pattern's): a restriction, for allocations only, whose
    bound and infeasibility say nothing about the leaf.  ``caps`` (:func:`_rc_caps`, per
    server class): the most copies of each whole-job column per server; ``floors`` (its
    rows): each server's reduced value at least the pricing optimum less the fixing's
    gap."""
    data = cm.data
    cm = strengthened_counting(data, cuts, floors)
    lower = cm.matrix.col_lower.copy()
    upper = cm.matrix.col_upper.copy()
    held = _held(data, servers)
    shape_of = {s: c for c, run in enumerate(server_shapes(data)) for s in run}
    for c, (name, idx) in enumerate(cm.columns):
        if caps is not None and name == "x":
            upper[c] = min(upper[c], float(caps[shape_of[idx[0]]].get((idx[1], idx[2]), 0)))
        s = idx[0] if name == "x" else idx[2] if name in ("a", "u", "cp", "mp") else None
        if s in held:
            upper[c] = held[s].get((name, idx), 0.0)
            if name in ("x", "a", "u"):
                lower[c] = upper[c]
        if name == "x" and (idx[1], idx[2]) in node.xbanned:
            upper[c] = 0.0
        if name != "y":
            continue
        ki = (idx[0], idx[1])
        pts = _points(data, ki, node)
        if idx[2] not in pts:
            upper[c] = 0.0
        elif ki in node.on and len(pts) == 1:
            lower[c] = 1.0
    row_lower = cm.matrix.row_lower.copy()
    where = {name: r for r, name in enumerate(cm.row_names)}
    for ki in node.on:  # a used slot is used, at whichever of its points is left
        row_lower[where[f"cnt_one_point[{ki[0]},{ki[1]}]"]] = 1.0
    return dataclasses.replace(
        cm.matrix, col_lower=lower, col_upper=upper, row_lower=row_lower, name="counting_leaf"
    )


def branch_and_price(  # noqa: C901 - one best-first loop: nodes, leaves, incumbents
    inst: RoundInstance,
    jobs: Sequence[Job],
    *,
    time_limit: float,
    warm_start: Sequence[Mapping[str, Sequence[PlacementPart]]] = (),
    solver: str = "highs",
    threads: int | None = None,
    halt: Callable[[], bool] | None = None,
    plain_root: bool = True,
    dive_only: bool = False,
) -> BranchResult | None:
    """Prove (or improve) the best of ``warm_start`` by branching on spread decisions.

    Returns None where the pattern model is not stated (per-type matrices, split-dependent
    floors).  ``bound`` is valid whenever the search stops; ``proven`` when every node was
    settled within :data:`EXACT_REL_GAP` of the incumbent.  ``halt``, asked before each
    node, ends the search early (the caller has its answer elsewhere).  ``plain_root``:
    where a warm start seeded the pool, the root also runs :func:`_plain_root_ip`.
    ``dive_only``: the root's column generation, its integer master over the root's
    patterns, its dive and the dive leaf packed at its points, nothing else (no plain root,
    no leaf MIPs, no branching): an allocation quickly, for ``opt``'s ``pattern-dive``
    step; ``bound`` is then the root's.
    """
    t0 = time.perf_counter()
    deadline = t0 + time_limit
    data = _model_data(inst, jobs)
    if not data["exact"] or any(j.sensitivity_by_type is not None for j in jobs):
        return None
    cm = build_counting_matrix(data)
    starts = [(p, start_from_placements(cm, p)) for p in warm_start]
    known = sorted(
        ((p, v) for p, v in starts if v is not None), key=lambda pv: -float(cm.matrix.cost @ pv[1])
    )
    vectors = [v for _, v in known]
    inc = float(cm.matrix.cost @ vectors[0]) if vectors else -math.inf
    inc_vec = vectors[0] if vectors else None
    found = {jid: tuple(p) for jid, p in known[0][0].items()} if known else {}
    source = "warm start" if known else "none"
    nodes = leaves = count = refuted = 0
    ended = STOP_TIME
    packed_at: set[frozenset[tuple[str, Point]]] = set()  # points _pack_points has tried
    unpacked: set[_PointsKey] = set()  # points the arc flow refuted at the root's dive leaf

    def tol() -> float:
        return EXACT_REL_GAP * max(1.0, abs(inc)) if inc > -math.inf else 0.0

    def offer(placements: Mapping[str, Sequence[PlacementPart]], what: str) -> None:
        nonlocal inc, found, source, inc_vec
        vec = start_from_placements(cm, placements)
        if vec is not None and float(cm.matrix.cost @ vec) > inc + 1e-9:
            inc = float(cm.matrix.cost @ vec)
            inc_vec = vec
            found = {jid: tuple(p) for jid, p in placements.items()}
            source = what
            log.debug("branch-and-price: %s incumbent %.6g at node %d", what, inc, nodes)

    # leaves with free classes the arc flow has seen, and the incumbent it was given
    flowed_at: dict[Node, tuple[_LeafPoints, float]] = {}

    def refute(node: Node, fixed: _LeafPoints) -> bool:
        """Whether the arc flow proves that no allocation of ``node`` (which allows only
        ``fixed``'s points, but for its free classes) beats the incumbent."""
        nonlocal refuted
        if not fixed.free and _points_key(fixed.points, fixed.spread) in unpacked:
            refuted += 1  # the root's dive leaf had these points (DIVE_FLOW)
            return True
        pdata, choices, floor = fixed.refutation(inst, jobs, data, inc + tol())
        if choices:
            flowed_at[node] = (fixed, inc)
        left = min(FLOW_SHARE * time_limit, deadline - time.perf_counter())
        verdict = refute_by_flow(
            pdata,
            left,
            threads=threads,
            choices=choices,
            floor=None if floor is None or floor == -math.inf else floor,
        )
        log.debug(
            "leaf: arc flow %s in %.2fs (%d free classes)",
            verdict.status,
            verdict.seconds,
            len(choices),
        )
        refuted += verdict.refuted
        return verdict.refuted

    pricer = _Pricer(data)
    pool = _seed_patterns(data, cm, vectors)
    # (-bound, tie, node, leaf time slice; 0 while the node's master is not solved)
    heap: list[tuple[float, int, Node, float]] = [(-math.inf, 0, Node(), 0.0)]
    cuts_of: dict[Node, tuple[PatternCut, ...]] = {}
    lp_of: dict[Node, _NodeLP] = {}
    while heap and time.perf_counter() < deadline and not (halt is not None and halt()):
        key, tie, node, slice_s = heapq.heappop(heap)
        bound = -key
        if bound <= inc + tol():
            continue
        if slice_s <= 0:
            nodes += 1
            lp = solve_node(data, pricer, pool, node, prune_at=inc + tol(), deadline=deadline)
            if lp is None or lp.bound is None:
                if time.perf_counter() >= deadline:
                    heapq.heappush(heap, (key, tie, node, 0.0))
                    break
                continue  # an infeasible node master: no allocation lives here
            bound = min(bound, lp.bound)
            if bound <= inc + tol():
                continue
            if not lp.converged:  # out of time (a pruned node stops early, above)
                heapq.heappush(heap, (-bound, tie, node, 0.0))
                break
            values = _master_values(data, lp)
            if values is not None:
                offer(placements_from_values(data, values), "master")
                if lp.bound - lp.value <= tol():
                    continue
            if nodes == 1:
                log.debug(
                    "branch-and-price: root bound %.6g (LP %.6g, %d patterns) after %.2fs",
                    bound,
                    lp.value,
                    len(pool),
                    time.perf_counter() - t0,
                )
                left = min(ROOT_IP_S, deadline - time.perf_counter())
                ip = _restricted_ip(data, pool, node, left) if left > 0 else None
                values = None if ip is None else _master_values(data, ip)
                if values is not None:
                    offer(placements_from_values(data, values), "restricted IP")
                if plain_root and not dive_only and vectors and bound > inc + tol():
                    stop = min(deadline, time.perf_counter() + PLAIN_ROOT_SHARE * time_limit)
                    found_p = _plain_root_ip(data, pricer, stop)
                    if found_p is not None:
                        offer(found_p, "plain restricted IP")
                if bound <= inc + tol():
                    continue
                # a dive down to one leaf and its packing: an early incumbent to prune with
                share = 1.0 if dive_only else ROOT_DIVE_SHARE
                stop = min(deadline, time.perf_counter() + share * time_limit)
                leaf, leaf_lp = _dive_to_leaf(data, pricer, pool, node, deadline=stop)
                if (
                    PACK_POINTS
                    and leaf_lp is not None
                    and leaf_lp.converged
                    and leaf_lp.value > inc + tol()
                ):
                    found_p = _pack_points(inst, jobs, data, leaf_lp, deadline)
                    if found_p is not None:
                        offer(found_p, "dive points")
                    elif DIVE_FLOW and not dive_only:
                        stop = min(deadline, time.perf_counter() + DIVE_FLOW_SHARE * time_limit)
                        no = _points_refuted(inst, jobs, data, leaf_lp, stop, threads)
                        if no is not None:  # no allocation at its points: the search goes on
                            unpacked.add(no)
                            leaf_lp = None
                if dive_only:
                    heapq.heappush(heap, (-bound, tie, node, 0.0))  # open: its bound stands
                    ended = STOP_DIVE
                    break
                if leaf_lp is not None and leaf_lp.converged and leaf_lp.value > inc + tol():
                    # first the leaf MIP over the servers an allocation worth the leaf's
                    # bound can have (_reach); it may take more than the dive's share
                    reach = _reach(cm, pricer, leaf, leaf_lp, deadline, solver, threads)
                    if reach is not None and reach[0] is not None:
                        offer(reach[0], "dive reach")
                if leaf_lp is not None and leaf_lp.converged and leaf_lp.value > inc + tol():
                    stop = min(deadline, time.perf_counter() + ROOT_DIVE_SHARE * time_limit)
                    for found_p in _pack_leaf(data, cm, pricer, pool, leaf, leaf_lp, stop, solver):
                        offer(found_p, "dive")
                        if leaf_lp.value <= inc + tol():
                            break
                if bound <= inc + tol():
                    continue
            kids = _children(data, node, lp)
            if kids is not None:
                for kid in kids:
                    count += 1
                    heapq.heappush(heap, (-bound, count, kid, 0.0))
                continue
            cuts_of[node] = pricer.cuts(lp.cuts)
            lp_of[node] = lp
            # back into the queue at its own bound: its MIP runs when it is the best node
            heapq.heappush(heap, (-bound, tie, node, LEAF_SLICE_S))
            continue
        if slice_s > MAX_LEAF_SLICE_S:
            # the best node is a leaf whose MIP stalls: the pattern LP stays loose there
            # (the counting MIP over the whole round, which opt-exact runs next, sometimes
            # closes such rounds); stop with the bound, unless the incumbent has risen
            # since the arc flow last saw this leaf's free classes (a higher floor)
            again = flowed_at.get(node)
            if again is not None and inc > again[1] + tol() and refute(node, again[0]):
                continue
            heapq.heappush(heap, (key, tie, node, slice_s))
            log.debug("branch-and-price: a leaf stalls at bound %.6g", bound)
            ended = STOP_LEAF if _leaf_points(data, lp_of[node]) is None else STOP_LEAF_POINTS
            break
        fixed = _fix_points(data, node, lp_of[node]) if slice_s == LEAF_SLICE_S else None
        at = None if fixed is None else frozenset(fixed.points.items())
        if slice_s == LEAF_SLICE_S and PACK_POINTS and (at is None or at not in packed_at):
            if at is not None:
                packed_at.add(at)  # the children that fix these points ask it no more
            found_p = _pack_points(inst, jobs, data, lp_of[node], deadline)
            if found_p is not None:
                offer(found_p, "leaf points")
                if bound <= inc + tol():
                    continue
        if FLOW_REFUTE and fixed is not None:
            if fixed.kids:  # make the LP's points the node's own: it keeps its bound
                for kid in fixed.kids:
                    count += 1
                    heapq.heappush(heap, (-bound, count, kid, 0.0))
                continue
            if refute(node, fixed):
                continue
        if slice_s == LEAF_SLICE_S:
            # first the integer master over the patterns so far with the leaf's decisions:
            # where the leaf's bound is an allocation, it is often made of known patterns
            left = min(LEAF_IP_S, deadline - time.perf_counter())
            ip = _restricted_ip(data, pool, node, left)
            values = None if ip is None else _master_values(data, ip)
            if values is not None:
                offer(placements_from_values(data, values), "leaf IP")
                if bound <= inc + tol():
                    continue
            stop = min(deadline, time.perf_counter() + LEAF_DIVE_SHARE * time_limit)
            for found_p in _pack_leaf(data, cm, pricer, pool, node, lp_of[node], stop, solver):
                offer(found_p, "leaf dive")
                if bound <= inc + tol():
                    break
            if bound <= inc + tol():
                continue
        leaves += 1
        # reduced-cost fixing for allocations that beat the incumbent: the leaf unchanged
        fixing = _rc_caps(data, pricer, node, lp_of[node], target=inc + tol())
        res = solve_matrix(
            _leaf_matrix(
                cm,
                node,
                cuts_of[node] if _with_rows(slice_s) else (),
                caps=None if fixing is None else fixing.caps,
                floors=() if fixing is None else fixing.floors,
            ),
            solver,
            # the incumbent, where it lies in this leaf, starts HiGHS's improvement
            # heuristics (RINS and the like) from a packing the dive found
            start=inc_vec,
            time_limit=max(min(slice_s, deadline - time.perf_counter()), 1e-3),
            rel_gap=EXACT_REL_GAP,
            threads=threads,
            guard=True,  # HiGHS can run past its limit: synergy_opt.deadline
        )
        log.debug(
            "leaf (slice %.1fs): %s %s bound %s in %.2fs",
            slice_s,
            res.status,
            res.objective,
            res.dual_bound,
            res.runtime_s,
        )
        if res.x is not None:
            offer(placements_from_values(data, cm.values(res.x[: cm.matrix.num_cols])), "leaf")
        if res.status not in (TerminationStatus.OPTIMAL, TerminationStatus.INFEASIBLE):
            if res.dual_bound is not None:
                bound = min(bound, res.dual_bound)
            heapq.heappush(heap, (-bound, tie, node, 2 * slice_s))
    top = max([-k for k, *_ in heap if -k > inc + tol()], default=None)
    if top is None:
        ended = STOP_PROVEN
    elif ended == STOP_TIME and halt is not None and time.perf_counter() < deadline:
        ended = STOP_HALTED
    if top == math.inf:  # the root's master was not solved: no bound
        return BranchResult(
            None if inc == -math.inf else inc,
            None,
            found,
            nodes,
            leaves,
            False,
            time.perf_counter() - t0,
            source,
            ended,
            refuted,
        )
    runtime = time.perf_counter() - t0
    log.debug(
        "branch-and-price: %s bound %s after %d nodes, %d leaf solves, %d patterns, %.2fs (%s)",
        inc,
        top,
        nodes,
        leaves,
        len(pool),
        runtime,
        ended,
    )
    return BranchResult(
        None if inc == -math.inf else inc,
        None if inc == -math.inf and top is None else (inc if top is None else top),
        found,
        nodes,
        leaves,
        top is None,
        runtime,
        source,
        ended,
        refuted,
    )
