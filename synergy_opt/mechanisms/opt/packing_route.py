"""The ``packing`` late route: the tightest super-machine's points, packed by CP-SAT.

The super-machine's optimum is a bound; an allocation reaches it exactly when the jobs fit
the real servers at the points it chose.  Whether they do is a packing question that the
LP-based routes answer poorly when nearly every GPU is spoken for: the LP bound is tight at
the root and gives no direction.  CP-SAT answers it directly
(:mod:`~synergy_opt.formulations.packing_cp`, ``formulations/packing.md``).  The points are
the full-server super-machine's where a job fills every server it fits on and that model is
below the pooled one (:mod:`.full_servers`), otherwise the pooled ones; jobs the
super-machine spreads, and multi-GPU jobs that spread for free (split penalty 1), may take
GPUs on several servers, every other job stays whole.

It is a late route: it runs only after the cheaper routes and their re-optimised plans
missed the target, after ``counting-relax-fix`` (which declines at once off mixed shapes and
where it applies is cheaper: mixed shapes 128 GPUs seed 0, the bound in 0.8 s, where this
route spent 2.7 s finding no packing first) and before the other counting routes.
Measured (``opt``, no time limit): split penalties 128 GPUs seed 4, 58.296 after 24 s (the
counting routes and the search) -> 58.467, the proven optimum, in about 2 s; multi-GPU 128
GPUs seed 7, 92.17 -> 92.67, the bound.  A packing with fewer parts is then sought, since
a first packing spreads free jobs freely: its whole jobs kept where they are, its spread
jobs' spare parts dropped while max-flows still carry them (:mod:`.fewer_parts`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from synergy_opt.formulations.packing_data import PackingData, packing_data
from synergy_opt.formulations.packing_flow import FlowVerdict, refute_by_flow
from synergy_opt.formulations.packing_lp import PatternListing, refute_packing
from synergy_opt.matrix import MatrixModel
from synergy_opt.mechanisms.opt.context import (
    BEST_SO_FAR,
    GpuPlan,
    Point,
    RoundContext,
    RoundingError,
    placed_floor,
)
from synergy_opt.mechanisms.opt.fewer_parts import fewer_parts
from synergy_opt.mechanisms.opt.full_servers import full_server_optimum
from synergy_opt.mechanisms.opt.routes import route
from synergy_opt.solve import TerminationStatus
from synergy_opt.types import THROUGHPUT_EPS, Job

if TYPE_CHECKING:
    from synergy_opt.formulations.packing_cp import PackingResult

log = logging.getLogger(__name__)

#: CP-SAT's deterministic budget for a first packing (about a second of one core at 128
#: GPUs; one worker, so the answer does not depend on the machine).  On the 51
#: split-penalty rounds at 96-128 GPUs (seeds 1000-1199) whose points pack, 45 pack within
#: 1.4 units and 46 within 2.0 (the slowest 3.1); a failed packing costs the whole budget,
#: 1.5 units is 1.5-4.5 s at 128-512 GPUs.
PACKING_DETERMINISTIC_S: float = 1.5
#: Where the first packing ran out of its budget, try once more within the same budget,
#: started (CP-SAT's hint) from the best plan the routes before found.  A hint near a
#: packing is what CP-SAT lacks on mixed shapes: at the pooled points of 96 GPUs seeds 1086
#: and 1006 and 128 GPUs seed 1299 it finds none within 20, 20 and 6 units from scratch,
#: and one within 0.8, 3.0 and 2.6 units from ``opt``'s answer at 3 s.  Run only where the
#: unhinted packing hit its limit, so every packing found or refuted before stays as it was,
#: and only from a plan near the bound (``context.BEST_SO_FAR_MIN_SHARE``).
HINTED_PACKING: bool = True
#: The extra budget for a packing with fewer parts, started from the first one (a complete
#: hint: its GPUs, cores and memory) with its whole jobs kept where they are, so that only
#: the spread jobs are placed again.  On the whole model, from the first packing's GPUs
#: alone, 0.5 units found no packing with fewer parts on multi-GPU 128 GPUs seeds 7, 18
#: and 72 (no packing at all on 7 and 72) and took 0.6-1.0 s of the round's 1.3-1.7 s; from
#: a complete hint the whole model still kept the first packing.  With the whole jobs kept,
#: 0.2 units took 0.4 s and cut the parts 108 -> 89, 119 -> 97 and 101 -> 88 (fragmented
#: jobs 19 -> 14, 16 -> 13, 20 -> 14); 0.1 units 92, 99 and 98, 0.5 units 86, 94 and 87.
#: (Seed 72's first packing there was the quick try's; with :data:`CONTENTS_FIRST` it is
#: the contents', 115 parts, which 0.2 units cut to 93, 17 fragmented.)
FEWER_PARTS_DETERMINISTIC_S: float = 0.2
#: The packing with fewer parts is found by dropping the first packing's spare parts, each
#: drop checked by three max-flows (:mod:`.fewer_parts`), instead of CP-SAT within
#: :data:`FEWER_PARTS_DETERMINISTIC_S`: on multi-GPU 128 GPUs seeds 7, 18 and 72 it takes
#: 35-82 ms where CP-SAT took 0.5-0.9 s (half of ``opt``'s round), and ``opt``'s answers
#: have 10, 12 and 16 fragmented jobs where they had 14, 13 and 17 (the same totals).
#: Over the 21 packings of multi-GPU, mixed-shape and split-penalty rounds of 32-128 GPUs
#: that reached this step, 212 fragmented jobs against CP-SAT's 236, and the route's time
#: summed 6.2 s against 15.9 s (``bench/bench_packing_steps.py``).  Off only to measure it.
FEWER_PARTS_BY_FLOWS: bool = True
#: Under a time limit, the share of what is left that each CP-SAT solve may use.
PACKING_TIME_SHARE: float = 0.25
#: The route declines rounds whose spread jobs have more (job, server) pairs than this: on
#: the 512-GPU multi-GPU round seed 7 (5312 pairs, free-to-spread jobs over 64 servers) the
#: packing spent 4.5 s of CPU and its whole budget finding none, where ``opt`` took 0.5 s
#: without it; 128-GPU rounds have up to about 600 (multi-GPU seed 7: 304, the bound found).
PACKING_MAX_SPREAD_PAIRS: int = 1500
#: Before CP-SAT, the packing's pattern LP (:mod:`~synergy_opt.formulations.packing_lp`)
#: tries to prove in milliseconds that no packing exists.  CP-SAT proves that slowly: of
#: the 28 unpackable full-server points of split-penalty 128-GPU rounds (seeds 0-23,
#: 1000-1029, 3000-3007) it refuted 7 and spent its whole budget on 21 (3.6-5.9 s each on
#: two shared cores); the LP refutes 17 of the 28, in 6-32 ms each.
PACKING_LP: bool = True
#: Where the LP does not refute the packing, its integral solutions are tried first: the
#: whole jobs as one solution puts them (a small IP over the listed contents), then the
#: spread jobs placed around them by CP-SAT (:func:`_by_contents`), at most this many
#: solutions.  CP-SAT alone finds packings slowly where a spread job's cores must sit next
#: to its own GPUs: of the 11 full-server points it ran out of budget on (split penalties
#: 128 GPUs seeds 0-23, 1000-1029, 3000-3007), this packs 9, after 1-6 solutions.
CONTENT_ATTEMPTS: int = 12
#: Where neither CP-SAT's quick try nor the integral contents pack, the packing's arc flow
#: (:mod:`~synergy_opt.formulations.packing_flow`, whole servers, memory dropped) tries to
#: refute it before CP-SAT's whole budget runs: the three points of split-penalty 128-GPU
#: rounds (seeds 0-23, 1000-1029, 3000-3007) that stayed unsettled (seeds 9, 3004, 3005)
#: are refuted in 0.06-0.8 s, where CP-SAT then spent its whole budget: ``pack`` on them
#: 0.7-1.7 s instead of 2.6-3.3 s (``bench/bench_packing_lp.py``: seed 9, 0.41 s against
#: CP-SAT's 1.91 s).  At most
#: :data:`FLOW_NODES` branch-and-bound nodes (the same verdict on every machine; those
#: three are refuted at the root) and the solves' share of the clock.
PACKING_FLOW: bool = True
FLOW_NODES: int = 100
#: ... and at most this many columns (those three have 1,900-5,200; building the graph of
#: a 512-GPU split-penalty round's points up to the flow's own limit took 0.7 s).
FLOW_COLS: int = 20_000
#: CP-SAT's budget for placing the spread jobs around fixed whole jobs (a few variables).
SPREAD_DETERMINISTIC_S: float = 0.2
#: ... but CP-SAT on the whole packing runs first within this budget: most packings it
#: finds take less (split penalties 128 GPUs: 0.03-0.22 units on seeds 0, 5, 6, 10, 16,
#: 18), and there an integral solution whose spread jobs do not fit costs more (seed 16:
#: ``opt-exact`` at 10 s proven in 4.5 s instead of 1.2 s, its 1-s ``opt`` no longer
#: packing).  Where the budget runs out, the integral contents are tried, and then CP-SAT
#: again with its whole budget.
QUICK_DETERMINISTIC_S: float = 0.25
#: Where every job the packing may spread spreads for free (split penalty 1, the multi-GPU
#: mix), or none spreads (rounds of one-GPU jobs: there an integral solution of the contents
#: is itself a packing), the integral contents come before CP-SAT's quick try: no penalised
#: spread job makes an integral solution whose spread jobs do not fit costly there.  The
#: quick try spent its whole budget for nothing on multi-GPU 128 GPUs seeds 7 and 18
#: (0.5-0.75 s), where the first contents pack in 0.06-0.1 s, and on six single-GPU 512-GPU
#: rounds of seeds 0-39 (``opt`` 0.53-0.70 s -> 0.14-0.22 s, the same answers).  Off only
#: to measure it.
CONTENTS_FIRST: bool = True
#: The route's name in the registry (``opt``'s search runs it early on some rounds).
PACKING_ROUTE: str = "packing"
#: :attr:`BoundPoints.name` of the full-server super-machine's points.
FULL_SERVER_POINTS: str = "full-server"
#: The full-server super-machine's points are packed where its optimum is below the pooled
#: one by more than this (solver tolerance); otherwise its points are the pooled ones.
FULL_SERVER_GAP: float = 1e-6


@dataclass(frozen=True, slots=True)
class BoundPoints:
    """A super-machine's points, the jobs it spreads, and its optimum."""

    name: str
    points: Mapping[str, Point]
    spread: frozenset[str]
    value: float


def load_packing_solver() -> None:
    """Import the CP-SAT packing (OR-Tools and the pandas it imports, about 0.45 s).  Not
    done by importing the mechanisms, which every command line call pays; done where an
    ``opt`` is made (:class:`~.mechanism.Opt`), so that it stays outside every round's
    clock: loaded at the first packing instead, it took a 1-s ``opt`` on split penalties
    128 GPUs seed 16 short of the neighbourhood step that reaches the optimum."""
    import synergy_opt.formulations.packing_cp  # noqa: F401


def bound_points(ctx: RoundContext) -> BoundPoints:
    """The tightest super-machine's points: the full-server one's where it applies and is
    below the pooled optimum, otherwise the pooled ones."""
    full = full_server_optimum(ctx)
    if full is not None and full.optimum < ctx.optimum - FULL_SERVER_GAP * max(1.0, ctx.optimum):
        return BoundPoints(FULL_SERVER_POINTS, full.points, full.spread_ids, full.optimum)
    return BoundPoints("pooled", ctx.points, ctx.spread_ids, ctx.optimum)


def route_packing_data(ctx: RoundContext, bp: BoundPoints) -> PackingData:
    """The packing the route asks about: the runnable jobs at ``bp``'s points, spread
    where the super-machine spreads them or where spreading is free (multi-GPU, split
    penalty 1), each on the servers its floor allows (:func:`_floor_servers`)."""
    free = {j.id for j in ctx.runnable if j.gpus >= 2 and j.split_penalty >= 1.0}
    return packing_data(
        ctx.inst, ctx.runnable, bp.points, bp.spread | free, _floor_servers(ctx, bp)
    )


def pack(
    ctx: RoundContext,
    bp: BoundPoints,
    share: float = PACKING_TIME_SHARE,
    hint: GpuPlan | None = None,
) -> PackingResult:
    """A packing of the runnable jobs at ``bp``'s points (then one with fewer parts, its
    whole jobs kept: :data:`FEWER_PARTS_BY_FLOWS`), each solve with ``share``
    of what is left of the clock; a solve the clock cut is recorded in ``ctx.time_stops``.
    First the pattern LP (:data:`PACKING_LP`): a refutation ends it; else (the contents
    first where :data:`CONTENTS_FIRST` applies) CP-SAT within
    :data:`QUICK_DETERMINISTIC_S`, the LP's integral contents (:func:`_by_contents`), and
    CP-SAT within :data:`PACKING_DETERMINISTIC_S` (without the LP: that last one alone).
    Where the budget ran out with no packing and ``hint`` (a plan of every runnable job) is
    given, once more within the same budget from that plan (:data:`HINTED_PACKING`).
    Raises :class:`RoundingError` above :data:`PACKING_MAX_SPREAD_PAIRS`."""
    from synergy_opt.formulations import packing_cp  # loaded by load_packing_solver

    data = route_packing_data(ctx, bp)
    pairs = sum(len(sj.servers) for sj in data.spread)
    if pairs > PACKING_MAX_SPREAD_PAIRS:
        raise RoundingError(
            f"skipped: {pairs} (spread job, server) pairs > {PACKING_MAX_SPREAD_PAIRS}"
        )

    listing: PatternListing | None = None
    lp: MatrixModel | None = None
    if PACKING_LP:
        verdict = refute_packing(data)
        if verdict.refuted:
            log.info(
                "packing at the %s points: the pattern LP refutes it (shortfall %.4g, "
                "%d contents, %.3f s)",
                bp.name,
                verdict.shortfall,
                verdict.contents,
                verdict.seconds,
            )
            return packing_cp.PackingResult(
                TerminationStatus.INFEASIBLE, None, verdict.seconds, 0.0
            )
        listing, lp = verdict.listing, verdict.matrix

    def solve(budget: float, **options: Any) -> PackingResult:
        """One CP-SAT solve with ``share`` of what is left (``options``: the rest of
        :func:`~synergy_opt.formulations.packing_cp.solve_packing`'s); a cut by the clock
        recorded."""
        left = ctx.clock.left()
        res = packing_cp.solve_packing(
            data,
            deterministic_s=budget,
            time_limit=None if left is None else left * share,
            **options,
        )
        if res.status is TerminationStatus.TIME_LIMIT:
            ctx.time_stops.append("packing")
        return res

    if listing is None:
        res = solve(PACKING_DETERMINISTIC_S)
    else:  # CP-SAT's quick packings first, then the LP's integral contents, then CP-SAT
        first = CONTENTS_FIRST and all(sj.job.split_penalty >= 1.0 for sj in data.spread)
        found = _by_contents(ctx, data, listing, share, lp) if first else None
        res = found if found is not None else solve(QUICK_DETERMINISTIC_S)
        if res.status is TerminationStatus.LIMIT:
            if not first:
                found = _by_contents(ctx, data, listing, share, lp)
            if found is None and PACKING_FLOW and _flow_refutes(ctx, bp, data, share):
                return packing_cp.PackingResult(TerminationStatus.INFEASIBLE, None, 0.0, 0.0)
            res = found if found is not None else solve(PACKING_DETERMINISTIC_S)
    if (
        HINTED_PACKING
        and res.status is TerminationStatus.LIMIT
        and hint is not None
        and all(j.id in hint for j in ctx.runnable)
    ):
        res = solve(PACKING_DETERMINISTIC_S, hint=hint)
        log.info(
            "packing from the best plan so far: %s in %.3f s (%.3f deterministic)",
            res.status,
            res.seconds,
            res.deterministic_s,
        )
    if res.plan is None or not data.spread:
        return res
    if FEWER_PARTS_BY_FLOWS:
        return _dropping_parts(ctx, data, res, share)
    fewer = solve(  # from the first packing, whole and complete, its whole jobs kept
        FEWER_PARTS_DETERMINISTIC_S,
        fewest_parts=True,
        hint=res.plan,
        hint_points=res.points,
        hint_resources=res.resources,
        whole=packing_cp.whole_counts(data, res.plan),
    )
    if fewer.plan is not None and _parts(fewer.plan) < _parts(res.plan):
        return fewer
    return res


def _dropping_parts(
    ctx: RoundContext, data: PackingData, res: PackingResult, share: float
) -> PackingResult:
    """``res`` with its spread jobs' spare parts dropped (:func:`~.fewer_parts.fewer_parts`),
    within ``share`` of what is left of the clock; ``res`` itself where none could go."""
    assert res.plan is not None
    left = ctx.clock.left()
    t0 = time.perf_counter()
    got = fewer_parts(data, res.plan, None if left is None else t0 + left * share)
    seconds = time.perf_counter() - t0
    if got is None:  # pragma: no cover - a CP-SAT packing fits in its own units
        log.warning("packing: the first packing's spread jobs do not fit its units")
        return res
    if got.cut:
        ctx.time_stops.append("packing")
    log.info(
        "packing: %d of %d parts dropped in %.3f s (%d supports tried%s)",
        got.dropped,
        _parts(res.plan),
        seconds,
        got.checks,
        ", cut by the clock" if got.cut else "",
    )
    if not got.dropped:
        return res
    return dataclasses.replace(
        res, plan=got.plan, resources=got.resources, seconds=res.seconds + seconds
    )


def route_flow(data: PackingData, seconds: float) -> FlowVerdict:
    """The packing's arc flow as this route asks it: the packing model's parts (pk5), at
    most :data:`FLOW_NODES` nodes and :data:`FLOW_COLS` columns, within ``seconds``."""
    return refute_by_flow(data, seconds, one_server=True, node_limit=FLOW_NODES, max_cols=FLOW_COLS)


def _flow_refutes(ctx: RoundContext, bp: BoundPoints, data: PackingData, share: float) -> bool:
    """Whether the packing's arc flow proves, within ``share`` of what is left of the
    clock, that ``data`` has no packing (:func:`route_flow`)."""
    left = ctx.clock.left()
    verdict = route_flow(data, math.inf if left is None else left * share)
    log.info(
        "packing at the %s points: arc flow %s in %.3f s (%d columns)",
        bp.name,
        verdict.status,
        verdict.seconds,
        verdict.columns,
    )
    return verdict.refuted


def _by_contents(
    ctx: RoundContext,
    data: PackingData,
    lst: PatternListing,
    share: float,
    lp: MatrixModel | None = None,
) -> PackingResult | None:
    """A packing from the pattern LP's integral contents
    (:func:`~synergy_opt.formulations.packing_cp.pack_from_contents`), at most
    :data:`CONTENT_ATTEMPTS` of them, within ``share`` of what is left of the clock; or
    ``None``."""
    from synergy_opt.formulations import packing_cp  # loaded by load_packing_solver

    left = ctx.clock.left()
    deadline = None if left is None else time.perf_counter() + left * share
    found = packing_cp.pack_from_contents(
        data,
        lst,
        attempts=CONTENT_ATTEMPTS,
        deterministic_s=SPREAD_DETERMINISTIC_S,
        deadline=deadline,
        lp=lp,
    )
    if found is None:
        log.info("no packing from the pattern LP's integral contents")
        return None
    res, attempt = found
    log.info(
        "packing from the pattern LP's integral contents (attempt %d) in %.3f s",
        attempt,
        res.seconds,
    )
    return res


def _credited(job: Job, bp: BoundPoints) -> float:
    """What the super-machine credits ``job`` at its point (W, times the split penalty
    where it spreads the job)."""
    w = bp.points[job.id][2]
    return w * job.split_penalty if job.id in bp.spread else w


def _floor_servers(ctx: RoundContext, bp: BoundPoints) -> dict[str, tuple[int, ...]] | None:
    """Under the per-server share rule on mixed shapes, per job the servers it may use
    where its whole-job floor stays at or below what its point is credited (a whole job on
    a server of more cores or GB per GPU has a higher floor); ``None`` where floors do not
    depend on the placement.  Mixed shapes 64 GPUs seed 1021: without this a packing put a
    job worth 0.66 at its point on a server where its floor is 1, the checker refused the
    answer and ``opt`` fell back to TUNE's 40.3 (0.77 of the optimum)."""
    inst = ctx.inst
    if not inst.per_server_shares:
        return None
    out: dict[str, tuple[int, ...]] = {}
    for job in ctx.runnable:
        value = _credited(job, bp) + THROUGHPUT_EPS
        out[job.id] = tuple(
            s
            for s, srv in enumerate(inst.cluster.servers)
            if job.may_use(srv) and placed_floor(inst, job, ((s, job.gpus),)) <= value
        )
    return out


def _parts(plan: GpuPlan) -> int:
    return sum(len(parts) for parts in plan.values())


@route(PACKING_ROUTE, spreads=True, spread_only=False, late=True, late_rank=0)
def packing_route(ctx: RoundContext) -> GpuPlan:
    """The tightest super-machine's points packed onto the servers by CP-SAT."""
    return packing_plan(ctx)


def packing_plan(ctx: RoundContext, share: float = PACKING_TIME_SHARE) -> GpuPlan:
    """:func:`packing_route` with ``share`` of the clock per solve (``opt-exact`` runs it on
    its own, with all of its clock)."""
    if any(j.sensitivity_by_type is not None for j in ctx.runnable):
        raise RoundingError("skipped: per-GPU-type matrices (the typed pass handles them)")
    bp = bound_points(ctx)
    res = pack(ctx, bp, share, ctx.memo.get(BEST_SO_FAR))
    log.info(
        "packing at the %s points (%.6g): %s in %.3f s (%.3f deterministic)",
        bp.name,
        bp.value,
        res.status,
        res.seconds,
        res.deterministic_s,
    )
    if res.plan is None:
        raise RoundingError(f"no packing at the {bp.name} super-machine's points ({res.status})")
    # A split that raises a spread job's floor above its point is caught where the plan is
    # deployed (the mechanism's floor check; the plan is then re-optimised).
    return res.plan
