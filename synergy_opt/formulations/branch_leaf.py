"""A leaf of branch-and-price: the counting MIP with the node's decisions fixed, and
reduced-cost fixing, which keeps in it only the server contents an allocation worth the
node's bound (or the incumbent) can have.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from synergy_opt.formulations.branch_node import Node, _NodeLP, _points, _Pricer
from synergy_opt.formulations.counting_fast import (
    EXACT_REL_GAP,
    CountingMatrix,
    placements_from_values,
)
from synergy_opt.formulations.patterns import Pattern, PatternCut, full_gpu_floor, server_shapes
from synergy_opt.formulations.patterns_fast import _server_cuts, strengthened_counting
from synergy_opt.matrix import MatrixModel
from synergy_opt.solve import TerminationStatus, solve_matrix
from synergy_opt.types import PlacementPart

log = logging.getLogger(__name__)

#: Reduced-cost fixing (:func:`_rc_caps`) widens its gap by this (relative) for the
#: duals' tolerances.
RC_SLACK: float = 1e-6
#: The root's dive leaf is packed first by its MIP over only the servers within the
#: proof tolerance of the pricing optimum (:func:`_reach`: an allocation worth the leaf's
#: bound has no others): at most this many branch-and-bound nodes (the same answer on
#: every machine), this long as a guard.
REACH_NODES: int = 1000
REACH_S: float = 4.0


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
