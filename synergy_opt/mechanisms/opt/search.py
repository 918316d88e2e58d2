"""One ``opt`` round's search for a deployable plan: the rounding routes in registry order,
the swap repair, the re-optimisation of the plans that missed, the late routes, and the
neighbourhood search from the best plan.

Why a module of its own: :mod:`.mechanism` decides *what* a round is (caches, warm start,
typed passes, TUNE's floor); this decides *how* one round's super-machine points become
whole-GPU placements.  The names tests and benches replace (:data:`ROUTES`, :data:`REPAIR`,
:func:`repair`, :func:`solve_points`, :func:`run_late_routes`, ...) are read here, at the
call.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from synergy_opt.deadline import Child
from synergy_opt.formulations.counting_fast import EXACT_REL_GAP
from synergy_opt.mechanisms.opt import points as plan_points
from synergy_opt.mechanisms.opt.bounds import (
    PATTERN_BOUND_ITERATIONS,
    PATTERN_SPREAD_ITERATIONS,
    PATTERN_SPREAD_MAX_SERVERS,
    pattern_lp_bound,
)
from synergy_opt.mechanisms.opt.configure import (
    PointModel,
    point_model,
    relaxation_bound,
    solve_points,
)
from synergy_opt.mechanisms.opt.context import (
    BEST_SO_FAR,
    BEST_SO_FAR_MIN_SHARE,
    GpuPlan,
    PlanKey,
    Point,
    RoundContext,
    RoundingError,
    plan_key,
    spreads_at_penalty,
)
from synergy_opt.mechanisms.opt.full_servers import full_server_bound
from synergy_opt.mechanisms.opt.gather_move import gather_move
from synergy_opt.mechanisms.opt.neighbourhood import State, improve, placements, total_of
from synergy_opt.mechanisms.opt.packing_route import PACKING_ROUTE
from synergy_opt.mechanisms.opt.pattern_dive import PATTERN_DIVE, dive_plan
from synergy_opt.mechanisms.opt.pattern_route import one_gpu_jobs
from synergy_opt.mechanisms.opt.repair import repair
from synergy_opt.mechanisms.opt.routes import (
    ROUTES,
    RouteBound,
    RoutePlan,
    balanced_from,
    late_routes,
)
from synergy_opt.mechanisms.opt.spread_move import spread_move
from synergy_opt.mechanisms.opt.transport import overcommitment
from synergy_opt.types import Allocation, PlacementPart, build_allocation

log = logging.getLogger(__name__)

#: The search ends once a plan is within this fraction of the split-aware super-machine
#: bound (so within it of the optimum too): the last 0.2% costs seconds of neighbourhood
#: search per round at 128 GPUs.
TARGET_GAP: float = 2e-3
#: Where no job may spread, the gap below the pattern LP's bound at which the late routes
#: stop being tried (the proof gap: a plan there is proven optimal; ``pattern-root`` often
#: gets there, single-GPU 128 seed 27 at 170.89 where the earlier routes left 170.70) ...
PATTERN_TARGET_GAP: float = EXACT_REL_GAP
#: ... and the one at which the neighbourhood search after them stops: ``TARGET_GAP``, as
#: below the super-machine's bound.  With the proof gap there the search spent 0.9-1.2 s
#: on CPU-scarce 128 seed 15 without a gain (147.66, bound 147.675) and 0.3 s on
#: single-GPU seed 12 for its 0.16 % (166.86 -> 167.13, the optimum); on single-GPU and
#: CPU-scarce 128 seeds 0-39 no other answer changed.
PATTERN_SEARCH_GAP: float = TARGET_GAP
#: Where the search from the best plan ends below the target, it runs again from the other
#: late plans and from the plan the late routes displaced, but only from those within this
#: fraction of the best answer so far.  Split penalties 128 GPUs seeds 0-23 (no limit):
#: the 12 searches from plans 0.7-9.6 % below the best (seeds 2, 7, 8, 11, 13, 17, 21)
#: gained nothing and took 4.6-61 s each (seed 7: 61 of its 102 s, from 53.2 to 58.08
#: where the answer was 58.7186); the one that gained started 0.19 % below (seed 1195:
#: 55.4432 -> 55.841, the optimum, where the best plan's search stayed at 55.547).
OTHER_START_GAP: float = 5e-3
#: Plans re-optimised per round (a MIP each) when no plan deploys the super-machine points
#: as they are: those that over-commit cores and memory least.
REOPTIMISED_PLANS: int = 3
#: A re-optimised plan is skipped when its LP bound is below the best total found by more
#: than this fraction (solver tolerance: such a plan cannot beat it).
PRUNE_EPS: float = 1e-7
#: Swap repair (:mod:`.repair`) of each route plan on which the super-machine points do not
#: deploy, before any re-optimisation MIP.  Off only to measure it (bench table 3's
#: "no-repair" column and the tests set this module attribute).
REPAIR: bool = True
#: Where the routes miss the target and no job may spread, the pattern LP's bound
#: (:func:`.bounds.pattern_lp_bound`) lowers the target to itself and is reported where
#: smaller.  Off only to measure it (the tests set this module attribute).
PATTERN_BOUND: bool = True
#: The same where a job may spread at a split penalty (:meth:`RoundSearch._pattern_target`).
#: Off only to measure it.
PATTERN_SPREAD_BOUND: bool = True
#: That step's name, for callers that switch it off (``opt-exact``, whose branch-and-price
#: runs the same column generation at its root, gives ``opt``'s short share to the search).
SPREAD_PATTERN_BOUND: str = "spread-pattern-bound"
#: On rounds of one-GPU jobs that the routes leave below the target but near the pooled
#: optimum (at least :data:`~.context.BEST_SO_FAR_MIN_SHARE` of it), the packing of the
#: pooled super-machine's points (the late route
#: :data:`~.packing_route.PACKING_ROUTE`) runs before the pattern bound is computed
#: rather than after: where it packs them, its answer is that optimum, a bound, and the
#: pattern LP (55 ms of a 150-ms round on single-GPU 128 GPUs seed 7) is
#: not needed; where it does not, the same steps run as before, in another order (the
#: packing reads neither the target nor that bound).  Far below that optimum (memory-scarce
#: rounds: 14 against a pooled 20.5) the pattern bound mostly proves the plan the routes
#: found, and the packing would be asked for nothing.
PACK_FIRST: bool = True
#: The name the warm-start plan goes by in logs and notes.
WARM_START: str = "previous-round"

#: Records a plan found (route name, plan, points, deployed parts) and returns its state.
Keep = Callable[..., State]


def search_from(
    ctx: RoundContext,
    state: State,
    target: float,
    interrupt: Callable[[State], bool] | None = None,
) -> State:
    """The spread move, the neighbourhood search, then the gather move, each only while
    below ``target``; the neighbourhood search and the gather move not once
    ``interrupt(state)`` says so (checked between neighbourhoods)."""
    if state.total < target:
        state = spread_move(ctx, state, target)
    if state.total < target:
        state = improve(ctx, state, target, interrupt)
    if state.total < target and (interrupt is None or not interrupt(state)):
        state = gather_move(ctx, state, target)
    return state


def round_target(ctx: RoundContext) -> float:
    """What the search aims at: :data:`TARGET_GAP` below the super-machine's optimum."""
    return ctx.optimum - max(TARGET_GAP * abs(ctx.optimum), 1e-9)


def far_below(start: State, best: State) -> bool:
    """Whether ``start`` is more than :data:`OTHER_START_GAP` below ``best``: the search
    is not run again from there."""
    return start.total < best.total - OTHER_START_GAP * max(1.0, abs(best.total))


def replaying(outcome: GpuPlan | RoundingError) -> RoutePlan:
    """A route giving a plan computed earlier, or raising its error again (a deferred
    route's, :meth:`RoundSearch._deferred`)."""

    def plan_of(_: RoundContext) -> GpuPlan:
        if isinstance(outcome, RoundingError):
            raise outcome
        return outcome

    return plan_of


def skipped(ctx: RoundContext, any_spreads: bool, spread_only: bool, one_gpu_only: bool) -> bool:
    """Whether a route so flagged (:class:`.routes.Route`) sits this round out: a
    spread-only route where nothing may spread (it would only repeat a packing), a
    one-GPU-only route where a job asks for several GPUs."""
    return (spread_only and not any_spreads) or (one_gpu_only and not one_gpu_jobs(ctx))


def run_late_routes(
    ctx: RoundContext,
    state: State | None,
    target: float,
    any_spreads: bool,
    keep: Keep,
    errors: list[str],
    found_plans: list[State] | None = None,
    only: frozenset[str] | None = None,
    skip: frozenset[str] = frozenset(),
) -> State | None:
    """The late routes (:class:`.routes.Route`), in registry order, once the other
    routes' plans, re-optimised, missed the target: each plan at the super-machine
    points if they deploy on it, else re-optimised; the best of those and ``state``
    (``found_plans`` receives each late route's state).  ``only`` (all by default) and
    ``skip``: which routes run, by name.
    They run before the neighbourhood search: on mixed-shape rounds where it is needed
    it is cheaper than the search and reaches the optimum where the search stops short
    (mixed shapes 128 GPUs seed 1191: 103.57 in 5.8 s CPU, where the search alone
    gets 103.50 in 20 s)."""
    for r in late_routes():
        if (only is not None and r.name not in only) or r.name in skip:
            continue
        if skipped(ctx, any_spreads, r.spread_only, r.one_gpu_only):
            continue
        if state is not None and state.total >= BEST_SO_FAR_MIN_SHARE * ctx.optimum:
            ctx.memo[BEST_SO_FAR] = state.plan
        try:
            plan = r.plan(ctx)
            points, deployed = plan_points.late_points(ctx, plan)
        except RoundingError as e:
            errors.append(f"{r.name}: {e}")
            log.info("opt on %s: %s: %s", ctx.inst.name, r.name, e)
            continue
        found = keep(r.name, plan, points, deployed)
        if found_plans is not None:
            found_plans.append(found)
        if state is None or found.total > state.total + PRUNE_EPS * max(1.0, state.total):
            state = found
        if state.total >= target:
            break
    return state


class _DiveWatch:
    """The pattern dive watched between the search's neighbourhoods: its plan taken
    (:func:`dived`) once it has answered, and the search asked to stop only where that
    plan is higher than the search's state, so that the search goes on from it.  A plan
    no higher leaves the search as it was: stopped and resumed it took other
    neighbourhoods and ended lower (split penalties 128 GPUs seed 7 under load, the dive
    with no allocation: 57.37 and 57.68 against 58.11)."""

    def __init__(self, ctx: RoundContext, dive: Child, keep: Keep) -> None:
        self.ctx, self.dive, self.keep = ctx, dive, keep
        self.taken = False
        self.plan: State | None = None
        self.bound: float | None = None

    def take(self) -> None:
        """Take the dive's answer if it has answered (once)."""
        if not self.taken and self.dive.ready():
            self.taken = True
            self.plan, self.bound = dived(self.ctx, self.dive, self.keep)

    def __call__(self, state: State) -> bool:
        self.take()
        return self.plan is not None and self.plan.total > state.total + PRUNE_EPS * max(
            1.0, abs(state.total)
        )


def dived(ctx: RoundContext, dive: Child, keep: Keep) -> tuple[State | None, float | None]:
    """The ``pattern-dive`` plan (:mod:`.pattern_dive`; the dive has answered),
    re-optimised as a late route's plan is (``None`` where it found none), and its
    root's bound on the round (``None`` where it gave none)."""
    plan, bound = dive_plan(ctx, dive)
    state = None
    if plan is not None:
        try:
            points, deployed = plan_points.late_points(ctx, plan)
        except RoundingError as e:
            log.info("opt on %s: %s: %s", ctx.inst.name, PATTERN_DIVE, e)
        else:
            state = keep(PATTERN_DIVE, plan, points, deployed)
    if state is not None or bound is not None:
        # taken: whether the dive had answered by now depends on the machine's speed
        ctx.time_stops.append(PATTERN_DIVE)
    return state, bound


@dataclass(frozen=True, slots=True)
class _Try:
    """A route as the search runs it (the warm start is one too)."""

    order: int
    name: str
    plan_of: RoutePlan
    spread_only: bool = False
    fast_only: bool = False
    bound_of: RouteBound | None = None
    one_gpu_only: bool = False


@dataclass
class RoundSearch:
    """One round's search (:meth:`run`); its fields are the search's running state.

    Route plans go in registry order; the first whose super-machine points deploy and
    reach the target ends the search.  A plan on which they do not deploy is first
    repaired by swapping whole jobs (:mod:`.repair`, no solver; with :data:`REPAIR`); if
    that deploys them, it ends the search the same way.  Otherwise the
    :data:`REOPTIMISED_PLANS` plans that over-commit least are re-optimised (a MIP each),
    the best (throughput, then fewer fragmented jobs) kept, and improved by exact
    re-decisions on neighbourhoods.

    With ``kept`` (the last round's GPUs of jobs still here), the warm start goes first:
    those jobs where they were, the new ones placed as ``balanced`` places them.  If the
    super-machine points deploy on it within the target gap, it is the answer; otherwise it
    is dropped and the cold search runs exactly as without it.

    With ``dive`` (the pattern dive running beside, :mod:`.pattern_dive`), its plan, if it
    has answered when the late routes end (else when the search from their best plan
    ends), is one more late plan; the caller stops the dive."""

    ctx: RoundContext
    kept: GpuPlan | None = None
    dive: Child | None = None
    #: Ranked (throughput, -fragmented) and the best state so far.
    best: tuple[tuple[float, int], State] | None = None
    errors: list[str] = field(default_factory=list)
    #: (order, name, plan) of the plans whose points did not deploy; ranked by
    #: over-commitment only when the search needs them (the rounds a fast route ends do
    #: not: 0.04 ms of a 3-ms multi-GPU round).
    pending: list[tuple[int, str, GpuPlan]] = field(default_factory=list)
    #: Plans put in ``pending``, by key: a deferred route's plan takes its place.
    pended: dict[PlanKey, int] = field(default_factory=dict)
    seen: set[PlanKey] = field(default_factory=set)
    #: The pattern LP's bound where the search computed it (:meth:`_pattern_target`).
    pattern_bound: float | None = None
    #: The pattern dive's root bound where it answered with one (:func:`dived`): the same
    #: master as the pattern bound's, computed beside the routes under a time limit.
    dive_bound: float | None = None

    def __post_init__(self) -> None:
        ctx = self.ctx
        self.target = round_target(ctx)
        self.any_spreads = any(ctx.may_spread(j) for j in ctx.runnable)

    def reached(self) -> bool:
        """Whether the best plan so far reaches the target."""
        return self.best is not None and self.best[1].total >= self.target

    def keep(
        self,
        name: str,
        plan: GpuPlan,
        points: dict[str, Point],
        parts: dict[str, list[PlacementPart]] | None = None,
    ) -> State:
        """Record a deployable plan; the best by (throughput, fewer fragmented) is kept."""
        state = State(plan, points, total_of(self.ctx, plan, points), parts or None)
        spread = sum(1 for parts in plan.values() if len(parts) > 1)
        log.info(
            "opt on %s: %s reaches %.6g (%d fragmented)",
            self.ctx.inst.name,
            name,
            state.total,
            spread,
        )
        rank = (round(state.total, 9), -spread)
        if self.best is None or rank > self.best[0]:
            self.best = (rank, state)
        return state

    def attempt(self, order: int, name: str, plan_of: RoutePlan, fast_only: bool) -> bool:
        """Try one route's plan; ``True`` when it reached the target (search ends)."""
        ctx = self.ctx
        try:
            plan = plan_of(ctx)
            key = plan_key(plan)
            if key in self.seen:
                return False
            self.seen.add(key)
            plan_points.within_cap(ctx, plan)
        except RoundingError as e:
            if name != WARM_START and not fast_only:  # a fast-only route only adds
                self.errors.append(f"{name}: {e}")
            log.info("opt on %s: %s: %s", ctx.inst.name, name, e)
            return False
        deployed: dict[str, list[PlacementPart]] = {}
        points = plan_points.direct_points(ctx, plan, deployed)
        if name == WARM_START:
            # Taken only at the target; otherwise dropped, and the cold search runs as
            # without it (a route finding the same plan still counts): as a mere
            # candidate it steered the search elsewhere (mixed-shapes 64 GPUs seed 1005
            # after seed 1003: 50.11 where the cold search finds 50.26).
            if points is not None and total_of(ctx, plan, points) >= self.target:
                self.keep(name, plan, points, deployed)
                return True
            self.seen.discard(key)
            return False
        if points is None and REPAIR:
            # Swaps of whole jobs until the points deploy (:mod:`.repair`).  Not on the
            # warm start: in table 3b's simulations it fired on 2-3 of 60 rounds, and its
            # failed attempts cost more than it saved (512 GPUs: 5.1x against 4.0x total
            # CPU of tune).
            fixed = repair(ctx, plan, ctx.points)
            if fixed is not None:
                points = plan_points.direct_points(ctx, fixed, deployed)
                if points is not None:
                    name, plan = f"{name}+repair", fixed
        if points is not None:
            return self.keep(name, plan, points, deployed).total >= self.target
        if fast_only:
            # Dropped as if never tried: a later route reaching the same plan still
            # counts, and the re-optimisation gets the plans it got without this one.
            log.info("opt on %s: %s: the points do not deploy (dropped)", ctx.inst.name, name)
            self.seen.discard(key)
            return False
        self.pended[key] = len(self.pending)
        self.pending.append((order, name, plan))
        return False

    def _tries(self) -> list[_Try]:
        """The warm start (if any), then the registry's routes that are not late."""
        out: list[_Try] = []
        kept = self.kept
        if kept:
            out.append(_Try(0, WARM_START, lambda c: balanced_from(c, kept)))
        out += [
            _Try(len(out) + i, r.name, r.plan, r.spread_only, r.fast_only, r.bound, r.one_gpu_only)
            for i, r in enumerate(r for r in ROUTES.values() if not r.late)
        ]
        return out

    def _routes(self) -> list[tuple[_Try, int]]:
        """Each route in turn until one reaches the target; returns the routes deferred
        because their bound says they cannot (:attr:`.routes.Route.bound`), each with
        where its errors go."""
        ctx, target = self.ctx, self.target
        deferred: list[tuple[_Try, int]] = []
        for t in self._tries():
            if skipped(ctx, self.any_spreads, t.spread_only, t.one_gpu_only):
                continue
            if t.bound_of is not None:
                bound = t.bound_of(ctx)
                if bound is not None and bound < target - 1e-9 * max(1.0, abs(target)):
                    log.info("opt on %s: %s deferred (bound %.6g)", ctx.inst.name, t.name, bound)
                    deferred.append((t, len(self.errors)))
                    continue
            if self.attempt(t.order, t.name, t.plan_of, t.fast_only):
                break
        return deferred

    def _deferred(self, deferred: list[tuple[_Try, int]]) -> None:
        """The deferred routes, as if run in their turn: they cannot have ended the search,
        so all they leave is their plan in ``pending`` (in its place, also where a later
        route pended the same plan, which it would then have skipped as seen) and their
        errors where they would have been."""
        errors = self.errors
        for t, at in deferred:
            tail = errors[at:]
            del errors[at:]
            outcome: GpuPlan | RoundingError
            try:
                outcome = t.plan_of(self.ctx)
            except RoundingError as e:
                outcome = e
            if (
                not isinstance(outcome, RoundingError)
                and (slot := self.pended.get(plan_key(outcome))) is not None
            ):
                self.pending[slot] = (t.order, t.name, outcome)
            else:
                self.attempt(t.order, t.name, replaying(outcome), t.fast_only)
            errors.extend(tail)

    def _reoptimise(self) -> None:
        """The :data:`REOPTIMISED_PLANS` pending plans that over-commit least, each
        re-optimised (a MIP), highest LP bound first, until one reaches the target."""
        ctx = self.ctx
        ranked = [(overcommitment(ctx.inst, p, ctx.points), o, n, p) for o, n, p in self.pending]
        chosen = sorted(ranked, key=lambda t: (t[0], t[1]))[:REOPTIMISED_PLANS]
        models: list[tuple[float, int, str, PointModel]] = []
        for _, order, name, plan in chosen:
            try:
                model = point_model(ctx, plan)
            except RoundingError as e:
                self.errors.append(f"{name}: {e}")
                log.info("opt on %s: %s: %s", ctx.inst.name, name, e)
                continue
            lp = relaxation_bound(ctx, model) if len(chosen) > 1 else None
            models.append((float("inf") if lp is None else lp, order, name, model))
        # Highest LP bound first; a plan whose bound is below the best total found cannot
        # beat it, and neither can any later one (saved 200 of 310 ms on the 512-GPU
        # multi-GPU round seed 4; the same answers).
        for lp, _, name, model in sorted(models, key=lambda t: (-t[0], t[1])):
            best = self.best
            if best is not None and lp < best[1].total - PRUNE_EPS * max(1.0, best[1].total):
                log.info(
                    "opt on %s: %s cannot beat %.6g (LP %.6g)",
                    ctx.inst.name,
                    name,
                    best[1].total,
                    lp,
                )
                break
            try:
                points, _ = solve_points(ctx, model)
            except RoundingError as e:
                self.errors.append(f"{name}: {e}")
                log.info("opt on %s: %s: %s", ctx.inst.name, name, e)
                continue
            if self.keep(name, model.plan, points).total >= self.target:
                break

    def _late(self, upper: float) -> State | None:
        """The late routes and the pattern dive's plan, then the neighbourhood search from
        the best plan (and from the others while below the target); the final state.
        ``upper``: the bound the caller reports unless the search proves a smaller one
        (the pattern bound's ceiling)."""
        ctx, keep = self.ctx, self.keep
        routed = self.best[1] if self.best is not None else None
        target = self.target
        start = routed
        if start is None or start.total < target:
            # Missed: a job filling its servers may make the pooled optimum unreachable.
            target = min(target, full_server_bound(ctx) * (1 - TARGET_GAP))
        late: list[State] = []
        early: frozenset[str] = frozenset()  # late routes run before the pattern bound
        if (
            PACK_FIRST
            and start is not None
            and BEST_SO_FAR_MIN_SHARE * ctx.optimum <= start.total < target
            and one_gpu_jobs(ctx)
        ):
            early = frozenset({PACKING_ROUTE})
            start = run_late_routes(
                ctx, start, target, self.any_spreads, keep, self.errors, late, early
            )
        if start is not None and start.total < target:
            target = min(target, self._pattern_target(start, min(upper, full_server_bound(ctx))))
        if start is None or start.total < target:
            start = run_late_routes(
                ctx, start, target, self.any_spreads, keep, self.errors, late, skip=early
            )
        dive = self.dive
        if dive is not None and (start is None or start.total < target) and dive.ready():
            # the dive beside the routes has answered: its plan is one more late plan (the
            # search starts from the best, then from the others)
            plan, self.dive_bound = dived(ctx, dive, keep)
            dive = None  # taken
            if plan is not None:
                late.append(plan)
                if start is None or plan.total > start.total + PRUNE_EPS * max(1.0, start.total):
                    start = plan
        if start is None:
            return None
        if self.pattern_bound is not None and not self.any_spreads:
            target = min(target, self.pattern_bound * (1 - PATTERN_SEARCH_GAP))
        # The dive watched during that search: where it answers with a higher plan the
        # search stops at its next neighbourhood and goes on from that plan (below, with
        # the other late plans).  Split penalties 128 GPUs seed 2011 at 20 s beside the CI
        # run: the dive's 63.477 had waited while the search climbed from TUNE's 58.71 to
        # 61.53, and came too late to be searched from.
        watch = None if dive is None else _DiveWatch(ctx, dive, keep)
        state = search_from(ctx, start, target, watch)
        if watch is not None:
            if state.total < target:
                watch.take()  # answered since: searched from below, with the others
            if watch.taken:
                self.dive_bound = watch.bound
                if watch.plan is not None:
                    late.append(watch.plan)
        for other_start in sorted((s for s in late if s is not start), key=lambda s: -s.total):
            # Another late plan can be the better start (split penalties 128 GPUs seed
            # 1195: from counting-full-servers' 55.547 the search gains nothing, from
            # counting-near's 55.4432 it reaches 55.841, the optimum).
            if state.total >= target or far_below(other_start, state):
                break
            other = search_from(ctx, other_start, target)
            if other.total > state.total + PRUNE_EPS * max(1.0, state.total):
                state = other
        if (
            routed is not None
            and start is not routed
            and state.total < target
            and not far_below(routed, state)
        ):
            # A late route's better plan can lead the search to a lower answer than the
            # plan it displaced (split penalties 96 GPUs seed 1062: 39.85 against 40.011,
            # the optimum): search from that one too and keep the better.
            other = search_from(ctx, routed, target)
            if other.total > state.total + PRUNE_EPS * max(1.0, state.total):
                state = other
        return state

    def _pattern_target(self, start: State, ceiling: float) -> float:
        """The pattern LP's bound (:func:`.bounds.pattern_lp_bound`, kept in
        :attr:`pattern_bound`; given up where it cannot come below ``ceiling``, the
        smallest bound known) as a target for the late routes and the search, on untyped
        rounds:

        - where no job may spread, the bound less the proof gap: there the LP is the exact
          per-server relaxation and a plan at its bound is proven optimal;
        - where a job may spread at a split penalty, on at most
          :data:`.bounds.PATTERN_SPREAD_MAX_SERVERS` servers and without a time limit,
          the bound less :data:`TARGET_GAP`, as for the super-machine's: the spread slots
          loosen it (split penalties 128 GPUs: 0-0.9 % above the optima of the 20 proven
          seeds among 0-23).
          Not under a time limit: there the pattern dive beside (:mod:`.pattern_dive`)
          computes the same master at its root, and the clock-bound search lost what the
          bound took (128 GPUs at 10 s: seed 21 57.86 against 58.49 without it);
        - elsewhere ``inf`` (free spreads, the multi-GPU mix: the pooled bound is the one
          the routes meet)."""
        ctx = self.ctx
        if not PATTERN_BOUND or any(j.sensitivity_by_type for j in ctx.runnable):
            return math.inf
        iterations, gap = PATTERN_BOUND_ITERATIONS, PATTERN_TARGET_GAP
        if self.any_spreads:
            if not (
                PATTERN_SPREAD_BOUND
                and SPREAD_PATTERN_BOUND not in ctx.routes_off
                and ctx.clock.left() is None
                and spreads_at_penalty(ctx)
                and len(ctx.inst.cluster.servers) <= PATTERN_SPREAD_MAX_SERVERS
            ):
                return math.inf
            iterations, gap = PATTERN_SPREAD_ITERATIONS, TARGET_GAP
        if len(start.plan) < len(ctx.runnable):
            # A plan of part of the set (TUNE's, where the whole set does not fit): the
            # bound covers the whole set only, and one of part of it can beat it (fuzz
            # seed 174: 2.7418 by a late route, against 2.1418 for the whole set)
            return math.inf
        parts = placements(ctx, start)
        if parts is None:  # pragma: no cover - every state is checked to deploy
            return math.inf
        bound, cut = pattern_lp_bound(
            ctx.inst, ctx.runnable, parts, ctx.clock, iterations, ceiling, ctx.counting_matrix()
        )
        if cut:
            ctx.time_stops.append("pattern bound")
        if bound is None:
            return math.inf
        # never below a plan that deploys (the LP's round-off: 365.2999999999998)
        bound = max(bound, start.total)
        self.pattern_bound = bound
        log.info("opt on %s: pattern bound %.6g", ctx.inst.name, bound)
        return bound - gap * max(1.0, abs(bound))

    def run(self, mechanism: str, upper: float | None) -> tuple[Allocation | None, list[str]]:
        """The search; the allocation (named ``mechanism``, ``upper`` its bound) or ``None``,
        and the routes' errors."""
        deferred = self._routes()
        if not self.reached():
            self._deferred(deferred)
        if not self.reached():
            self._reoptimise()
        state = self._late(math.inf if upper is None else upper)
        if state is None:
            return None, self.errors
        parts = placements(self.ctx, state)
        if parts is None:  # pragma: no cover - every state is checked to deploy
            return None, [*self.errors, "best plan does not deploy (numerical trouble)"]
        ctx = self.ctx
        for bound in (self.pattern_bound, self.dive_bound):
            if upper is not None and bound is not None:
                # never below the answer (an LP's round-off)
                upper = min(upper, max(bound, state.total))
        return build_allocation(
            ctx.inst, mechanism, parts, solver=ctx.options.solver, upper_bound=upper
        ), self.errors
