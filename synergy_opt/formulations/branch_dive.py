"""Allocations from a node's master (branch-and-price's primal side): dives down to a
leaf, servers fixed to patterns one at a time, and integer masters over known patterns.

Nothing here bounds anything: each function only finds allocations, which the search
(:mod:`.branch_price`) offers as incumbents.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from synergy_opt.formulations.branch_leaf import _leaf_matrix
from synergy_opt.formulations.branch_node import (
    INT_EPS,
    Node,
    Slot,
    _allowed,
    _children,
    _lean,
    _NodeLP,
    _Pricer,
    node_master,
    solve_node,
)
from synergy_opt.formulations.counting_fast import (
    EXACT_REL_GAP,
    CountingMatrix,
    placements_from_values,
)
from synergy_opt.formulations.patterns import (
    Pattern,
    server_shapes,
)
from synergy_opt.solve import solve_matrix
from synergy_opt.types import PlacementPart

log = logging.getLogger(__name__)

#: Time for the integer master over the root's patterns (a quick incumbent).
ROOT_IP_S: float = 1.0
#: A leaf's packing MIPs keep these shares of the dive's fixed servers, in turn.
RESIDUAL_KEEP: tuple[float, ...] = (1.0, 1 / 2)
#: Time for each of those MIPs (a restriction: it only looks for an allocation).
RESIDUAL_S: float = 2.0
#: A dive tries at most this many patterns to round up at each step before it goes back
#: a step, and prices at most ``DIVE_SOLVES`` times in all.
DIVE_TRIES: int = 6
DIVE_SOLVES: int = 12


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
    data: Mapping[str, Any],
    pool: Sequence[Pattern],
    node: Node,
    time_limit: float,
    node_limit: int | None = None,
) -> _NodeLP | None:
    """The master over the patterns so far as an integer program (no jobs left out): a
    quick allocation from known patterns (price-and-branch's heuristic), or None.
    ``node_limit``: also stop after that many nodes (the same answer on every machine)."""
    pats = [p for p in pool if _allowed(p, node)]
    mm, cols, _ = node_master(data, pats, node)
    keep = [c for c, (n, _) in enumerate(cols) if n != "bp_ghost"]
    mm = dataclasses.replace(
        mm,
        cost=mm.cost[keep],
        col_lower=mm.col_lower[keep],
        col_upper=np.where([cols[c][0] == "short" for c in keep], 0.0, mm.col_upper[keep]),
        integer=np.asarray([cols[c][0] in ("z", "y", "v") for c in keep]),
        a_start=mm.a_start[: len(keep) + 1],
        a_index=mm.a_index[: int(mm.a_start[len(keep)])],
        a_value=mm.a_value[: int(mm.a_start[len(keep)])],
    )
    res = solve_matrix(
        mm,
        "highs",
        time_limit=max(time_limit, 1e-3),
        rel_gap=EXACT_REL_GAP,
        node_limit=node_limit,
    )
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
