"""A leaf whose LP puts every job at one point: those points, packed (an allocation worth
the leaf's bound) or made the node's own so that the packing's arc flow can refute them.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from synergy_opt.formulations.branch_node import INT_EPS, Node, _NodeLP, _split_point
from synergy_opt.formulations.counting import Point
from synergy_opt.formulations.packing_data import PackingData, packing_data, with_free
from synergy_opt.formulations.packing_flow import Choice
from synergy_opt.formulations.packing_lp import refute_packing
from synergy_opt.solve import TerminationStatus
from synergy_opt.types import Job, PlacementPart, RoundInstance

if TYPE_CHECKING:  # OR-Tools is imported where a packing is solved
    from synergy_opt.formulations.packing_cp import AroundKey, PackingResult

log = logging.getLogger(__name__)

#: A packing question: (job, point, spread) for every job (:func:`_points_key`).
_PointsKey = frozenset[tuple[str, Point, bool]]
#: A leaf packed at its points (:func:`_pack_points`) tries at most this many integral
#: solutions of the packing's pattern LP, placing the spread jobs around each one's whole
#: jobs with CP-SAT for at most ``POINT_SPREAD_S`` deterministic units.
POINT_ATTEMPTS: int = 6
POINT_SPREAD_S: float = 0.2
#: A leaf with free classes is packed by CP-SAT (:func:`_pack_free`): a first packing
#: above the target in at most ``FREE_FIRST_S`` deterministic units (maximising from the
#: start found none in 5 s on split penalties 128 GPUs seed 17, where this finds one in
#: 2 s), a better one from it in ``FREE_PACK_S``, the relaxed model's bound in
#: ``FREE_BOUND_S``.
FREE_FIRST_S: float = 2.0
FREE_PACK_S: float = 1.0
FREE_BOUND_S: float = 1.0


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
        members = self.free_jobs(jobs, data)
        taken = {j.id for js in members.values() for j in js}
        kept = [j for j in jobs if j.id not in taken]
        pdata = packing_data(inst, kept, self.points, self.spread)
        if not members:
            return pdata, (), None
        options: dict[int, set[tuple[int, float]]] = {k: set() for k in members}
        for (_, k, _), (c, _, w) in data["x_point"].items():
            if k in members:
                options[k].add((int(c), float(w)))
        choices = tuple(
            Choice(len(js), data["g"][k], tuple(sorted(options[k]))) for k, js in members.items()
        )
        fixed = math.fsum(self.points[j.id][2] for j in kept)
        return pdata, choices, floor - fixed

    def free_jobs(self, jobs: Sequence[Job], data: Mapping[str, Any]) -> dict[int, list[Job]]:
        """Per free class (in class order), its jobs of ``jobs`` that are whole: those whose
        point the packing picks."""
        members: dict[int, list[Job]] = {k: [] for k in sorted(self.free)}
        k_of = {jid: k for k, ids in enumerate(data["classes"]) for jid in ids}
        for j in jobs:
            if j.id not in self.spread and k_of[j.id] in members:
                members[k_of[j.id]].append(j)
        return members


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
    refuted: set[AroundKey] | None = None,
) -> dict[str, list[PlacementPart]] | None:
    """An allocation worth the node LP's value, packed at the points the LP gives every
    job (:data:`PACK_POINTS`), or ``None``: the LP does not fix every point, the packing's
    pattern LP refutes them, or no integral solution of it leaves the spread jobs room.
    ``refuted``: the search's spread-placement questions proven to have no answer
    (:func:`~.packing_cp.pack_from_contents`), shared by all its leaves."""
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
        refuted=refuted,
    )
    if found is None:
        log.debug("leaf points: no packing from the LP's integral contents")
        return None
    res, attempt = found
    log.debug("leaf points: packed at attempt %d in %.3f s", attempt, res.seconds)
    return _placements(data, res.plan, res.resources, points, spread)


def _points_key(points: Mapping[str, Point], spread: frozenset[str]) -> _PointsKey:
    """Every job's point and whether it is spread: one packing question."""
    return frozenset((jid, pt, jid in spread) for jid, pt in points.items())


@dataclass(frozen=True, slots=True)
class FreeVerdict:
    """What CP-SAT says of a leaf whose free classes pick their points (:func:`_pack_free`):
    its best allocation found (or ``None``), and a proven bound on every allocation of the
    leaf worth more than the target (``-inf``: none is; ``None``: out of budget)."""

    placements: dict[str, list[PlacementPart]] | None
    bound: float | None


def _pack_free(
    inst: RoundInstance,
    jobs: Sequence[Job],
    data: Mapping[str, Any],
    fixed: _LeafPoints,
    target: float,
    deadline: float,
) -> FreeVerdict:
    """The leaf's packing with its free classes' whole jobs at points of CP-SAT's choice,
    worth at least ``target`` in all, the free jobs' throughput maximised.

    The arc flow (:func:`.packing_flow.refute_by_flow`) drops memory and only refutes; where
    it finds a flow, the leaf MIP can stall on whether the jobs pack (split penalties 128
    GPUs seed 17: bound 70.2143 for 4 s of slices with no allocation, where CP-SAT finds one
    worth above the incumbent in 2 s).  A first packing (CP-SAT finds one sooner than it
    finds one while maximising), a better one from it, then the relaxed model
    (:func:`.packing_cp.build_packing_cp`, ``relax``) from that one for a bound; where the
    first finds none, the relaxed one's verdict refutes the leaf."""
    from synergy_opt.formulations import packing_cp  # OR-Tools: loaded by opt's packing

    pdata, _, floor = fixed.refutation(inst, jobs, data, target)
    if floor is None:
        return FreeVerdict(None, None)
    free = []
    for k, members in fixed.free_jobs(jobs, data).items():
        options = [
            (s, int(c), float(m), float(w))
            for (s, kk, _), (c, m, w) in data["x_point"].items()
            if kk == k
        ]
        free.append((members, options))
    fdata = with_free(pdata, free, floor)
    fixed_worth = target - floor

    def solve(budget: float, **kw: Any) -> PackingResult | None:
        left = deadline - time.perf_counter()
        if left <= 0:
            return None
        got = packing_cp.solve_packing(fdata, deterministic_s=budget, time_limit=left, **kw)
        log.debug(
            "leaf free points%s%s: %s (worth bound %s) in %.2fs",
            " most" if kw.get("most_worth") else "",
            " relaxed" if kw.get("relax") else "",
            got.status.value,
            got.worth_bound,
            got.seconds,
        )
        return got

    first = solve(FREE_FIRST_S)
    if first is None or first.status is not TerminationStatus.OPTIMAL:
        if first is None or first.status is not TerminationStatus.INFEASIBLE:
            return FreeVerdict(None, None)
        proof = solve(FREE_BOUND_S, relax=True)  # none in GB units: none at all?
        ok = proof is not None and proof.status is TerminationStatus.INFEASIBLE
        return FreeVerdict(None, -math.inf if ok else None)
    assert first.plan is not None and first.points is not None
    best = solve(FREE_PACK_S, most_worth=True, hint=first.plan, hint_points=first.points)
    if best is None or best.plan is None or best.points is None:
        best = first
    assert best.plan is not None and best.points is not None
    placements = _placements(
        data, best.plan, best.resources, {**fixed.points, **best.points}, fixed.spread
    )
    # CP-SAT's bound on the relaxed model holds for every real packing above the target
    proof = solve(
        FREE_BOUND_S, most_worth=True, relax=True, hint=best.plan, hint_points=best.points
    )
    wb = None if proof is None else proof.worth_bound
    bound = fixed_worth + wb if wb is not None and math.isfinite(wb) else None
    return FreeVerdict(placements, bound)


def _placements(
    data: Mapping[str, Any],
    plan: Mapping[str, tuple[tuple[int, int], ...]] | None,
    resources: Mapping[str, tuple[tuple[int, int, float], ...]] | None,
    points: Mapping[str, Point],
    spread: frozenset[str],
) -> dict[str, list[PlacementPart]]:
    """A packing (CP-SAT's, or the exact program's) as placements: whole jobs at their
    points, spread jobs with the cores and GB drawn from each server."""
    assert plan is not None and resources is not None
    names = data["server_names"]
    out: dict[str, list[PlacementPart]] = {}
    for jid, parts in plan.items():
        c, m, _ = points[jid]
        if jid not in spread:
            ((s, g),) = parts
            out[jid] = [PlacementPart(names[s], g, c, m)]
            continue
        drawn = {s: (cp, gb) for s, cp, gb in resources.get(jid, ())}
        out[jid] = [PlacementPart(names[s], g, *drawn.get(s, (0, 0.0))) for s, g in parts]
    return out
