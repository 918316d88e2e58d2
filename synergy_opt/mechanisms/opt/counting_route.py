"""The ``counting`` rounding route: the exact model restricted to the super-machine's points.

The consolidating routes place each class's GPUs by a rule; when the rule strands cores or
memory, the super-machine points no longer deploy, and the neighbourhood search that follows
costs seconds at 128 GPUs and can stop short of the optimum (0.989 of it on the single-GPU
round ``family_round("single-gpu", 128, 1059)``).  The counting model
(:mod:`synergy_opt.formulations.counting`) restricted to the grid points the super-machine
picked is small on such rounds (128 columns there, 40 ms) and, when an allocation at those
points exists, finds it exactly.  It runs after the other routes (registry order), only on
rounds of at most :data:`COUNTING_ROUTE_MAX_COLUMNS` columns, with a node limit so that the
answer does not depend on the machine's speed.

Where jobs may spread at a split penalty the super-machine's points often cannot all be
realised: on ``family_round("split-penalty", 96, 1182)`` the restricted model is infeasible,
every route's plan left ``opt`` at 0.949 of the proven optimum, and the optimum keeps all but
three jobs at their super-machine points, each of those one grid step lower.  The
``counting-near`` route, a late route (it runs only once the other routes' plans,
re-optimised, missed the target) and only where the ``counting`` route found no allocation,
offers each job its super-machine point and the :data:`NEAR_POINTS` best points
below it, and solves that model by relax-and-fix (whole-job counts first, then the spread
slots), each step node-limited.

Where a job fills every server it fits on, the pooled points are out of reach for a reason
the super-machine can see (:mod:`.full_servers`): the ``counting`` route then stands aside
and the late ``counting-full-servers`` route, tried before ``counting-near``, solves the
counting model over the full-server super-machine's points the same way.  On other
penalised rounds the ``counting`` route solves its model by relax-and-fix and runs its MIP
only where that finds nothing.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from synergy_opt.formulations.counting import counting_data, restrict_points
from synergy_opt.formulations.counting_fast import (
    CountingMatrix,
    build_counting_matrix,
    placements_from_values,
    relax_and_fix,
)
from synergy_opt.matrix import MatrixModel
from synergy_opt.mechanisms.opt import pattern_route
from synergy_opt.mechanisms.opt.context import (
    GpuPlan,
    Point,
    RoundContext,
    RoundingError,
    spreads_at_penalty,
)
from synergy_opt.mechanisms.opt.full_servers import full_server_bound, full_server_optimum
from synergy_opt.mechanisms.opt.pattern_route import PATTERN_ROOT
from synergy_opt.mechanisms.opt.routes import route
from synergy_opt.solve import SolveResult, TerminationStatus
from synergy_opt.types import PlacementPart

log = logging.getLogger(__name__)

#: Restricted models above this many columns are skipped: multi-GPU rounds with spread
#: slots spend seconds at the root (818 columns, 2.0 s on a 96-GPU multi-GPU round).
COUNTING_ROUTE_MAX_COLUMNS: int = 1000
#: The cap where a job may spread at a penalty: there the cheaper routes miss spreads that
#: pay (a 200-round split-penalty pass found 96- and 128-GPU rounds at 0.969-0.985 of the
#: proven optimum, with 1100-1650 columns); this route reaches the optimum on two of them
#: (96 GPUs seed 1150: 0.976 -> 1.0 in 1.4 s instead of 9.1; 128 GPUs seed 1007: 0.976 -> 1.0).
COUNTING_ROUTE_MAX_COLUMNS_PENALISED: int = 2500
#: Branch-and-bound nodes: a deterministic stop, unlike a time limit.
COUNTING_ROUTE_NODES: int = 50
#: Nodes where a job may spread at a penalty: on the 96-GPU seeds 1038 and 1106 and 128-GPU
#: seed 1119 split-penalty rounds 50 or 200 nodes found no solution (the round then stayed at
#: 0.980-0.985 of the optimum after 5-8 s of neighbourhood search); 1000 reach the optimum,
#: in 1.9-3.0 s for the whole mechanism.
COUNTING_ROUTE_NODES_PENALISED: int = 1000
#: Nodes of each relax-and-fix step the counting route tries first where a job may spread
#: at a penalty (whole-job counts with the slots as LP, then the slots); the MIP runs only
#: where that finds nothing.  5, 20 and 50 nodes gave the same answers on ten rounds, in
#: about the same time (most of it at the root).
COUNTING_ROUTE_RELAX_FIX_NODES: int = 50
#: The counting route is skipped where the full-server super-machine's bound is below the
#: pooled optimum by more than this (solver tolerance): the pooled points, with the pooled
#: model's spreads, cannot all be realised there.  With the mechanism's target gap (2e-3)
#: instead, split penalties 128 GPUs seed 1031 (bound 67.336, the optimum, against
#: 67.396) spent 13 s of its 20 in this route's MIP proving its model infeasible and
#: returned 0.84 of the optimum.
FULL_SERVERS_SKIP_GAP: float = 1e-6
#: Under a time limit, the share of what is left that each of this route's solves (the two
#: relax-and-fix steps, then the MIP) may use, so that the cheap re-optimisations of the
#: other routes' plans still run after it (together at most 1 - 0.75^3 = 58 % of the time).
#: With the whole rest, split penalties 128 GPUs seed 8 at a 1-s or 3-s limit spent it all
#: here without a solution and fell back to TUNE's 70.43, where re-optimising ``balanced``'s
#: plan takes 10 ms and reaches 78.75 (without a limit opt reaches 82.89 in 55 s).
COUNTING_TIME_SHARE: float = 0.25


@route("counting", spreads=True, spread_only=False)
def counting_route(ctx: RoundContext) -> GpuPlan:
    """The counting model over the super-machine's points (exact where those points deploy).

    It spreads a job where the exact model gains from it after the split penalty.  On
    rounds of one-GPU jobs it stands aside for the ``pattern-root`` late route
    (:mod:`.pattern_route`), which answers them faster and better.
    """
    if any(j.sensitivity_by_type is not None for j in ctx.runnable):
        raise RoundingError("skipped: per-GPU-type matrices (the typed pass handles them)")
    if pattern_route.PATTERN_ROOT_ROUTE and pattern_route.one_gpu_jobs(ctx):
        raise RoundingError(f"skipped: one-GPU jobs only (the {PATTERN_ROOT} route takes them)")
    penalised = spreads_at_penalty(ctx)
    cap = COUNTING_ROUTE_MAX_COLUMNS_PENALISED if penalised else COUNTING_ROUTE_MAX_COLUMNS
    estimate = _column_estimate(ctx)
    if estimate > cap:  # decided before building anything
        raise RoundingError(f"skipped: ~{estimate} columns > {cap}")
    if penalised and full_server_bound(ctx) < ctx.optimum * (1 - FULL_SERVERS_SKIP_GAP):
        # No allocation reaches the pooled points' value: the late full-server route
        # takes the round (split penalties 128 GPUs seed 1139: 11 s CPU to prove this
        # model infeasible).
        raise RoundingError("skipped: a job filling its servers puts the points out of reach")
    data = counting_data(ctx.inst, ctx.runnable)
    if not data["feasible"]:
        raise RoundingError("skipped: the counting data cannot keep every floor as placed")
    classes: Sequence[Sequence[str]] = data["classes"]
    cm = super_machine_model(ctx, data)
    if cm.matrix.num_cols > cap:
        raise RoundingError(f"skipped: {cm.matrix.num_cols} columns > {cap}")
    nodes = COUNTING_ROUTE_NODES_PENALISED if penalised else COUNTING_ROUTE_NODES
    x = _relax_and_fix_first(ctx, cm) if penalised else None
    if x is None:
        res = ctx.solve(cm.matrix, node_limit=nodes, time_share=COUNTING_TIME_SHARE)
        if res.x is None:
            raise RoundingError(f"restricted counting model: {res.status} without a solution")
        if res.status is not TerminationStatus.OPTIMAL:
            log.info("counting route: %s after %d nodes", res.status, nodes)
        x = res.x
    got = placements_from_values(data, cm.values(x))
    if len(got) != len(ctx.runnable):
        raise RoundingError("restricted counting model left a runnable job out")
    index = {name: i for i, name in enumerate(data["server_names"])}
    plan = _plan_by_point(ctx, classes, got, index, ctx.points)
    ctx.memo["counting"] = plan  # the super-machine's points deploy: counting-near skips
    return plan


def _relax_and_fix_first(ctx: RoundContext, cm: CountingMatrix) -> np.ndarray | None:
    """A solution of the restricted model by relax-and-fix
    (:data:`COUNTING_ROUTE_RELAX_FIX_NODES` per step), ``None`` if a step found nothing
    (the route's MIP then runs).  Measured on split-penalty rounds: on 128 GPUs seed 1107
    the MIP's 1000 nodes (11.7 s CPU) found 59.25 where relax-and-fix reaches the
    super-machine's 60.1575 in 1.6 s; on 12 other rounds where both found a solution the
    MIP (from scratch, or started from this one) found nothing better, in 0.7-25 s more;
    where relax-and-fix finds nothing the MIP sometimes does (96 GPUs seed 1102: 43.247,
    the bound)."""

    def solve(mm: MatrixModel) -> SolveResult:
        return ctx.solve(
            mm, node_limit=COUNTING_ROUTE_RELAX_FIX_NODES, time_share=COUNTING_TIME_SHARE
        )

    counts, res = relax_and_fix(cm, solve, solve)
    if counts.status is TerminationStatus.INFEASIBLE:  # a relaxation of the whole MIP
        raise RoundingError("restricted counting model: infeasible (whole-job counts)")
    if res is None or res.x is None:
        log.info("counting route: relax-and-fix found nothing (counts %s)", counts.status)
        return None
    log.info(
        "counting route: relax-and-fix %.6g (counts %s, bound %s)",
        res.objective or 0.0,
        counts.status,
        counts.dual_bound,
    )
    return res.x


def super_machine_model(ctx: RoundContext, data: Mapping[str, Any]) -> CountingMatrix:
    """The counting model restricted to the grid points the super-machine gave each class's
    members (the ``counting`` and ``counting-relax-fix`` routes)."""
    return build_counting_matrix(restrict_points(data, point_sets(data, ctx.points)))


def point_sets(
    data: Mapping[str, Any], points: Mapping[str, Point]
) -> dict[int, set[tuple[int, float]]]:
    """Per counting class (index), the (cores, GB) points its members are guided to."""
    return {k: {points[jid][:2] for jid in ids} for k, ids in enumerate(data["classes"])}


def _column_estimate(ctx: RoundContext) -> int:
    """About the restricted model's columns, from the context alone: per class and
    super-machine point one whole-job column per server, and per job that may spread a
    slot's four columns (GPUs, part, cores, memory) per server (slightly high: columns
    that cannot fit are not built)."""
    servers = len(ctx.inst.cluster.servers)
    pairs = {(i, ctx.points[j.id][:2]) for i, jc in enumerate(ctx.classes) for j in jc.members}
    spreadable = sum(1 for j in ctx.runnable if j.gpus >= 2 and servers >= 2)
    return servers * (len(pairs) + 4 * spreadable)


def _plan_by_point(
    ctx: RoundContext,
    classes: Sequence[Sequence[str]],
    got: Mapping[str, Sequence[PlacementPart]],
    server_index: Mapping[str, int],
    points: Mapping[str, Point],
) -> GpuPlan:
    """Hand each class's placements to members whose guiding point (``points``: the
    super-machine's, or the full-server one's) they were solved at, so the mechanism's
    max-flow deploys those very points; the rest in class order."""
    plan: dict[str, tuple[tuple[int, int], ...]] = {}
    for ids in classes:
        by_point: dict[tuple[int, float], list[tuple[tuple[int, int], ...]]] = defaultdict(list)
        for jid in ids:
            parts = got[jid]
            point = (sum(p.cpus for p in parts), sum(p.mem_gb for p in parts))
            gpus = tuple(sorted((server_index[p.server], p.gpus) for p in parts))
            by_point[_rounded(point)].append(gpus)
        rest: list[str] = []
        for jid in ids:
            pt: Point = points[jid]
            queue = by_point.get(_rounded(pt[:2]))
            if queue:
                plan[jid] = queue.pop(0)
            else:
                rest.append(jid)
        spare = [g for key in sorted(by_point) for g in by_point[key]]
        for jid, gpus in zip(rest, spare, strict=True):
            plan[jid] = gpus
    return plan


def _rounded(point: tuple[int, float]) -> tuple[int, float]:
    """A point as a key: memory parts of a spread job sum with round-off."""
    return int(point[0]), round(float(point[1]), 6)


#: Nodes of each relax-and-fix step of the ``counting-full-servers`` route.
FULL_SERVERS_NODES: int = 50


@route("counting-full-servers", spreads=True, spread_only=True, late=True, late_rank=2)
def counting_full_servers_route(ctx: RoundContext) -> GpuPlan:
    """The counting model over the full-server super-machine's points, by relax-and-fix.

    Where a job fills every server it fits on, the pooled super-machine counts cores and
    memory no other job can reach (:mod:`.full_servers`) and its points cannot all be
    realised; the full-server super-machine's can, or nearly (split penalties 128 GPUs seed
    1139: 70.28, the proven optimum, in 1.8 s CPU, where every other route's plan and the
    search stopped at 68.6 in 20 s).  Late, and only where a job may spread at a penalty
    and that model's optimum is below the pooled one (otherwise its points are the same).
    """
    if any(j.sensitivity_by_type is not None for j in ctx.runnable):
        raise RoundingError("skipped: per-GPU-type matrices (the typed pass handles them)")
    if not spreads_at_penalty(ctx):
        raise RoundingError("skipped: no job may spread at a split penalty")
    full = full_server_optimum(ctx)
    if full is None:
        raise RoundingError("skipped: no job fills every server it fits on")
    if full.optimum >= ctx.optimum - 1e-9 * max(1.0, abs(ctx.optimum)):
        raise RoundingError("skipped: the full-server super-machine keeps the pooled optimum")
    return _late_plan(
        ctx,
        lambda data: point_sets(data, full.points),
        FULL_SERVERS_NODES,
        "counting-full-servers",
        full.points,
    )


#: Points below each job's super-machine point the ``counting-near`` route also offers
#: (by throughput, among those using no more cores and memory).  Measured on split-penalty
#: rounds (``opt``, no time limit): with 2 points and 100 nodes 128 GPUs seed 1111 reached
#: 0.991 of the optimum and seed 1039 fell 0.6 % below the code without the route (its plan
#: led the neighbourhood search elsewhere); with 3 points and 200 nodes 1111 reaches the
#: optimum and 1039 stays as it was; 3 points with 100 nodes left 96 GPUs seed 1174 at 0.985.
NEAR_POINTS: int = 3
#: Branch-and-bound nodes of each of its two steps (whole-job counts, then spread slots).
NEAR_NODES: int = 200
#: Under a time limit, the share of what is left that each of the two steps may use, so
#: that the re-optimisations and the search after the routes keep time: with the whole
#: rest, 128 GPUs seed 1019 at 20 s on a loaded machine (4.5 s of CPU) spent it all here
#: and returned 0.928 of the optimum, where the code without the route returned 0.989.
NEAR_TIME_SHARE: float = 0.25


@route("counting-near", spreads=True, spread_only=True, late=True, late_rank=2)
def counting_near_route(ctx: RoundContext) -> GpuPlan:
    """The counting model over each job's super-machine point and the points just below it.

    Where the super-machine's points cannot all be realised (the ``counting`` route's model
    is infeasible), the optimum mostly keeps them and lowers a few jobs one step.  Solved by
    relax-and-fix with node limits: whole-job counts integral (spread slots as LP), then
    the slots integral with those counts fixed.  Skipped where the ``counting`` route found
    an allocation at the super-machine's points (128 GPUs seed 1: there this plan could not
    beat it and cost 3 s CPU) and on rounds where no job may spread at a penalty.
    """
    if any(j.sensitivity_by_type is not None for j in ctx.runnable):
        raise RoundingError("skipped: per-GPU-type matrices (the typed pass handles them)")
    if not spreads_at_penalty(ctx):
        raise RoundingError("skipped: no job may spread at a split penalty")
    if "counting" in ctx.memo:
        raise RoundingError("skipped: the counting route realised the super-machine's points")
    return _late_plan(
        ctx, lambda data: _near_points(ctx, data, NEAR_POINTS), NEAR_NODES, "counting-near"
    )


def _late_plan(
    ctx: RoundContext,
    keep_of: Callable[[Mapping[str, Any]], Mapping[int, set[tuple[int, float]]]],
    nodes: int,
    name: str,
    points: Mapping[str, Point] | None = None,
) -> GpuPlan:
    """The penalised late routes' common tail: the counting model over the points
    ``keep_of(data)`` offers each class, by relax-and-fix with ``nodes`` per step and
    :data:`NEAR_TIME_SHARE` of the time left each (``points``: the guiding points, as in
    :func:`relax_and_fix_plan`)."""
    data = counting_data(ctx.inst, ctx.runnable)
    if not data["feasible"]:
        raise RoundingError("skipped: the counting data cannot keep every floor as placed")
    cm = build_counting_matrix(restrict_points(data, keep_of(data)))
    if cm.matrix.num_cols > COUNTING_ROUTE_MAX_COLUMNS_PENALISED:
        raise RoundingError(f"skipped: {cm.matrix.num_cols} columns")
    return relax_and_fix_plan(
        ctx,
        data,
        cm,
        lambda mm: ctx.solve(mm, node_limit=nodes, time_share=NEAR_TIME_SHARE),
        name,
        points,
    )


def relax_and_fix_plan(
    ctx: RoundContext,
    data: Mapping[str, Any],
    cm: CountingMatrix,
    solve: Callable[[MatrixModel], SolveResult],
    name: str,
    points: Mapping[str, Point] | None = None,
) -> GpuPlan:
    """The plan of a restricted counting model ``cm`` solved by relax-and-fix: whole-job
    counts integral with the spread slots as LP, then the slots integral with those counts
    fixed (:func:`~synergy_opt.formulations.counting_fast.relax_and_fix`; ``solve`` runs
    each step, with the route's node limit; ``points``: the model's guiding points, by
    default the super-machine's)."""
    counts, res = relax_and_fix(cm, solve, solve)
    if res is None:
        raise RoundingError(f"{name} (counts): {counts.status} without a solution")
    if res.x is None:
        raise RoundingError(f"{name} (slots): {res.status} without a solution")
    got = placements_from_values(data, cm.values(res.x))
    if len(got) != len(ctx.runnable):
        raise RoundingError(f"{name} left a runnable job out")
    log.info(
        "%s: %.6g (%d columns, counts step %s)",
        name,
        res.objective or 0.0,
        cm.matrix.num_cols,
        counts.status,
    )
    index = {server: i for i, server in enumerate(data["server_names"])}
    return _plan_by_point(
        ctx, data["classes"], got, index, ctx.points if points is None else points
    )


def _near_points(
    ctx: RoundContext, data: Mapping[str, Any], n: int
) -> dict[int, set[tuple[int, float]]]:
    """Per class: its members' super-machine points and, below each, the ``n`` best points
    (by throughput) of the class's menu that use no more cores and no more memory."""
    jobs = {j.id: j for j in ctx.runnable}
    menu: dict[int, set[tuple[int, float]]] = defaultdict(set)
    for idx in data["x_index"]:
        c, m, _ = data["x_point"][idx]
        menu[idx[1]].add((c, m))
    for k, i in data["slots"]:
        menu[k].update((c, m) for c, m, _ in data["slot_points"][k, i])
    keep: dict[int, set[tuple[int, float]]] = {}
    for k, ids in enumerate(data["classes"]):
        out: set[tuple[int, float]] = set()
        for jid in ids:
            c, m, _ = ctx.points[jid]
            out.add((c, m))
            w = jobs[jid].sensitivity
            below = sorted(
                (p for p in menu[k] if p[0] <= c and p[1] <= m + 1e-9 and p != (c, m)),
                key=lambda p: (-w.lookup(p[0], p[1]), p),
            )
            out.update(below[:n])
        keep[k] = out
    return keep
