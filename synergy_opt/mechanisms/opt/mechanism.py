"""The ``opt`` mechanism: super-machine optimum, rounding routes, deployment, TUNE floor."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

from synergy_opt.deadline import Child, warm_up
from synergy_opt.formulations.fast import SplitKnapsackModel, class_key
from synergy_opt.formulations.typed_fast import is_typed_round
from synergy_opt.matrix import MatrixModel
from synergy_opt.mechanisms.base import MechanismOptions, register
from synergy_opt.mechanisms.opt import points as plan_points
from synergy_opt.mechanisms.opt.answer import better_of, capped, tune_fallback
from synergy_opt.mechanisms.opt.bounds import (
    counting_lp_bound,
    split_floor_bound,
    subset_bound,
    typed_bound,
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
    OPT_HIGHS_OPTIONS,
    Clock,
    GpuPlan,
    Point,
    RoundContext,
    RoundingError,
    time_note,
)
from synergy_opt.mechanisms.opt.full_servers import (
    full_server_bound,
)
from synergy_opt.mechanisms.opt.gather_move import gather_move
from synergy_opt.mechanisms.opt.neighbourhood import State, improve, placements, total_of
from synergy_opt.mechanisms.opt.packing_route import load_packing_solver
from synergy_opt.mechanisms.opt.pattern_dive import PATTERN_DIVE, dive_plan, start_dive
from synergy_opt.mechanisms.opt.repair import repair
from synergy_opt.mechanisms.opt.round_cache import (
    ROUND_CACHE_SIZE,
    CachedRound,
    RoundKey,
    round_key,
)
from synergy_opt.mechanisms.opt.routes import (
    ROUTES,
    RouteBound,
    RoutePlan,
    balanced_from,
    late_routes,
)
from synergy_opt.mechanisms.opt.spread_move import spread_move
from synergy_opt.mechanisms.opt.stranded import StrandMemo, runnable_at_floors, with_passed_over
from synergy_opt.mechanisms.opt.super_machine import (
    demand_classes,
    point_value,
    split_super_machine,
)
from synergy_opt.mechanisms.opt.transport import overcommitment
from synergy_opt.mechanisms.opt.typed import choose_types
from synergy_opt.mechanisms.packing import select_runnable
from synergy_opt.mechanisms.tune import Tune, TuneAnswer, TuneLater
from synergy_opt.solve import DEFAULT_REL_GAP, SolveResult, TerminationStatus, solve_matrix
from synergy_opt.types import (
    Allocation,
    Cluster,
    Job,
    PlacementPart,
    RoundInstance,
    build_allocation,
)

log = logging.getLogger(__name__)

#: The search ends once a plan is within this fraction of the split-aware super-machine
#: bound (so within it of the optimum too): the last 0.2% costs seconds of neighbourhood
#: search per round at 128 GPUs.
TARGET_GAP: float = 2e-3
#: Plans re-optimised per round (a MIP each) when no plan deploys the super-machine points
#: as they are: those that over-commit cores and memory least.
REOPTIMISED_PLANS: int = 3
#: A re-optimised plan is skipped when its LP bound is below the best total found by more
#: than this fraction (solver tolerance: such a plan cannot beat it).
PRUNE_EPS: float = 1e-7
#: Solver threads when the options leave them open: OPT's MIPs are small (tens to a few
#: thousand columns), where HiGHS's parallel scheduler costs more than it saves (measured on
#: 128-GPU single-GPU super-machines: 8-17 ms CPU and 30-90 ms wall per solve with the
#: default scheduler, 1.5-4 ms with one thread, same optima).
OPT_THREADS: int = 1
#: Swap repair (:mod:`.repair`) of each route plan on which the super-machine points do not
#: deploy, before any re-optimisation MIP.  Off only to measure it (bench table 3's
#: "no-repair" column and the tests set this module attribute).
REPAIR: bool = True
#: On typed rounds, run the plain pass (routes on each job's reference matrix) on every
#: round, as before 2026-12, not only where the round with types fixed gives no checked
#: answer of the whole runnable set.  Off only to measure it (bench table 4).
PLAIN_PASS_ALWAYS: bool = False

#: Per job id of the last round: its class key and its GPUs per server (server index, GPUs).
Previous = dict[str, tuple[tuple[object, ...], tuple[tuple[int, int], ...]]]
#: The name the warm-start plan goes by in logs and notes.
WARM_START: str = "previous-round"


def _search(ctx: RoundContext, state: State, target: float) -> State:
    """The spread move, the neighbourhood search, then the gather move, each only while
    below ``target``."""
    if state.total < target:
        state = spread_move(ctx, state, target)
    if state.total < target:
        state = improve(ctx, state, target)
    if state.total < target:
        state = gather_move(ctx, state, target)
    return state


def _replaying(outcome: GpuPlan | RoundingError) -> RoutePlan:
    """A route giving a plan computed earlier, or raising its error again (a deferred
    route's, :meth:`Opt._round`)."""

    def plan_of(_: RoundContext) -> GpuPlan:
        if isinstance(outcome, RoundingError):
            raise outcome
        return outcome

    return plan_of


@register(
    "opt",
    keeps_fair_share=True,
    exact=False,
    uses_solver=True,
    doc="super-machine optimum deployed on whole GPUs, spreading jobs the paper's way",
)
class Opt:
    """Synergy-OPT: super-machine optimum, rounding routes, max-flow deployment, TUNE floor."""

    name = "opt"

    def __init__(
        self, options: MechanismOptions | None = None, *, routes_off: frozenset[str] = frozenset()
    ) -> None:
        self.options = options or MechanismOptions()
        #: Steps left out by name (a caller that runs their work itself: ``opt-exact``
        #: leaves out the pattern dive, :mod:`.pattern_dive`).
        self.routes_off = routes_off
        if self.options.threads is None:
            self.options = dataclasses.replace(self.options, threads=OPT_THREADS)
        self._cache: OrderedDict[RoundKey, CachedRound] = OrderedDict()
        #: The last answer's cluster and GPUs per job: the warm start of the next round.
        self._previous: tuple[Cluster, Previous] | None = None
        #: TUNE, kept across rounds (its demand caches are pure memos: same answers).  Its
        #: allocation is assembled only when returned or read by a route (25 % of TUNE's
        #: time; most rounds need only its total).
        self._tune = Tune(self.options)
        #: Required throughput per job class on ``_floors_of`` (cluster, fair-share rule).
        self._floors: dict[tuple[object, ...], float] = {}
        #: The lowest floor any GPU split allows, per job class, on the same cluster and rule.
        self._lowest_floors: dict[tuple[object, ...], float] = {}
        #: Job classes no placement holds at their floor (:mod:`.stranded`), likewise.
        self._stranded: StrandMemo = {}
        self._floors_of: tuple[Cluster, str] | None = None
        load_packing_solver()  # now, not on a round's clock
        if self.options.time_limit_s is not None:
            warm_up()  # the pattern dive's child process server (0.25 s), likewise

    def allocate(self, inst: RoundInstance) -> Allocation:
        """Allocate one round (see the package docstring for the steps)."""
        return self._allocate(inst)

    def _allocate(self, inst: RoundInstance, *, quiet: bool = False) -> Allocation:
        """:meth:`allocate`; ``quiet``: the notes are logged at INFO, not WARNING (a
        candidate of a caller that picks among answers and logs what it keeps).

        On a typed round the passes are such candidates too (:meth:`_typed`): their notes
        (a fallback to TUNE, say) are logged at INFO and only the answer the type-choice
        pass keeps has its notes logged as warnings."""
        t0 = time.perf_counter()
        runnable = select_runnable(inst)
        # the tune mechanism's round, opt >= it: run when read (not on rounds where a
        # bound proves opt's answer at least as good, :func:`.bounds.subset_bound`)
        tune = TuneLater(self._tune, inst, runnable)
        level = logging.INFO if quiet else logging.WARNING
        self._class_floors(inst)  # empties the memos of another cluster or rule
        runnable, passed = runnable_at_floors(inst, runnable, self._stranded)
        out = self._allocate_on(inst, runnable, tune, t0, level)
        return with_passed_over(out, passed, level) if passed else out

    def _allocate_on(
        self,
        inst: RoundInstance,
        runnable: Sequence[Job],
        tune: TuneAnswer,
        t0: float,
        level: int,
    ) -> Allocation:
        """:meth:`_allocate` on ``runnable`` (the jobs that may hold their floors)."""
        solver = self.options.solver
        if not runnable:
            return tune_fallback(
                inst, tune, self.name, solver, 0.0, [], t0, runnable=runnable, level=level
            )
        key = round_key(inst, runnable)
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            mine = hit.replay(inst, runnable, self.name, solver)
            log.info("opt on %s: replayed the answer of an identical earlier round", inst.name)
            out = better_of(
                inst, mine, tune, self.name, t0, checked=True, runnable=runnable, level=level
            )
            self._remember(inst, runnable, out)
            return out
        typed = any(j.sensitivity_by_type for j in runnable) and is_typed_round(inst, runnable)
        if typed:
            out = self._typed(inst, runnable, tune, t0)
            for n in out.notes:
                log.log(level, "%s on %s: %s", self.name, inst.name, n)
        else:
            out = self._solve(inst, runnable, tune, t0, level)
        if self.options.max_fragmented is not None:
            out = capped(inst, out, self.options.max_fragmented, level)
        if not out.notes and out.upper_bound is not None:
            self._cache[key] = CachedRound.of(inst, runnable, out)
            while len(self._cache) > ROUND_CACHE_SIZE:
                self._cache.popitem(last=False)
        self._remember(inst, runnable, out)
        return out

    def _remember(self, inst: RoundInstance, runnable: Sequence[Job], out: Allocation) -> None:
        """Keep ``out``'s GPUs per job (with each job's class) for the next round's warm start."""
        index = {srv.name: s for s, srv in enumerate(inst.cluster.servers)}
        jobs = {j.id: j for j in runnable}
        self._previous = (
            inst.cluster,
            {
                ja.id: (
                    class_key(jobs[ja.id]),
                    tuple((index[p.server], p.gpus) for p in ja.placement),
                )
                for ja in out.jobs
                if ja.id in jobs
            },
        )

    def _class_floors(self, inst: RoundInstance) -> dict[tuple[object, ...], float]:
        """The per-class floor memo, emptied when the cluster or the fair-share rule changes
        (a floor before placement depends only on them and the job's class)."""
        of = self._floors_of
        if (
            of is None
            or of[1] != inst.fair_share_mode
            or not (of[0] is inst.cluster or of[0] == inst.cluster)
        ):
            self._floors = {}
            self._lowest_floors = {}
            self._stranded = {}
            self._floors_of = (inst.cluster, inst.fair_share_mode)
        return self._floors

    def forget_rounds(self) -> None:
        """Forget the remembered rounds and the warm start, the only state that makes an
        answer depend on earlier rounds; the pure memos (class floors, TUNE's demand
        points) stay.  The next round is solved cold, with the same bytes as by a fresh
        ``opt`` (bench table 3 times cold rounds this way)."""
        self._cache.clear()
        self._previous = None

    def _kept(self, ctx: RoundContext) -> GpuPlan:
        """The jobs of the last round still runnable here, with their last GPUs per server.

        A job keeps its place only if it is the same job (same class), the cluster is the
        same, its servers still have the GPUs (jobs in priority order claim first) and, if
        it was spread, it may spread now (within the fragmentation cap).  Depends only on the
        sequence of rounds this instance saw, so a replayed simulation is the same.
        """
        prev = self._previous
        if prev is None or not (prev[0] is ctx.inst.cluster or prev[0] == ctx.inst.cluster):
            return {}
        last = prev[1]
        servers = ctx.inst.cluster.servers
        free = [srv.gpus for srv in servers]
        frag = 0
        kept: dict[str, tuple[tuple[int, int], ...]] = {}
        for job in ctx.runnable:
            got = last.get(job.id)
            if got is None or got[0] != class_key(job):
                continue
            parts = got[1]
            if sum(k for _, k in parts) != job.gpus or any(
                s >= len(servers) or free[s] < k or not job.may_use(servers[s]) for s, k in parts
            ):
                continue
            if len(parts) > 1 and not ctx.must_spread(job):
                if not ctx.may_spread(job) or frag >= ctx.max_fragmented:
                    continue
                frag += 1
            for s, k in parts:
                free[s] -= k
            kept[job.id] = parts
        return kept

    def _typed(
        self, inst: RoundInstance, runnable: Sequence[Job], tune: TuneAnswer, t0: float
    ) -> Allocation:
        """The type-choice pass (:func:`~.typed.choose_types`); the plain pass only where
        it finds no checked answer.  Every pass's notes are logged at INFO: the caller
        logs the kept answer's."""

        def left() -> float | None:  # each pass gets what is left (at least 1 s)
            limit = self.options.time_limit_s
            return None if limit is None else max(1.0, limit - (time.perf_counter() - t0))

        sub = dataclasses.replace(self.options, time_limit_s=left())

        def fixed(mod: RoundInstance) -> Allocation:
            return Opt(sub, routes_off=self.routes_off)._allocate(mod, quiet=True)

        def plain() -> Allocation:
            return self._solve(inst, runnable, tune, t0, logging.INFO, time_limit_s=left())

        out = choose_types(
            inst,
            runnable,
            self.name,
            tune.allocation(),
            sub,
            fixed,
            plain,
            plain_always=PLAIN_PASS_ALWAYS,
        )
        upper = out.upper_bound
        if upper is not None and out.total_throughput < upper - 1e-9 * max(1.0, upper):

            def solve(mm: MatrixModel) -> SolveResult:
                return solve_matrix(
                    mm,
                    self.options.solver,
                    time_limit=left(),
                    threads=self.options.threads,
                    rel_gap=DEFAULT_REL_GAP,
                    highs_options=OPT_HIGHS_OPTIONS,
                )

            upper = counting_lp_bound(inst, runnable, upper, solve)
        return dataclasses.replace(out, upper_bound=upper, solve_seconds=time.perf_counter() - t0)

    def _solve(
        self,
        inst: RoundInstance,
        runnable: Sequence[Job],
        tune: TuneAnswer,
        t0: float,
        level: int = logging.WARNING,
        *,
        time_limit_s: float | None = None,
    ) -> Allocation:
        """The plain pass: super-machine, routes, TUNE's floor (``time_limit_s``: the
        clock, by default the options')."""
        clock = Clock.started(self.options.time_limit_s if time_limit_s is None else time_limit_s)
        solver = self.options.solver
        ksm = split_super_machine(inst, runnable, self._class_floors(inst))
        res = solve_matrix(
            ksm.matrix,
            solver,
            time_limit=clock.left(),
            threads=self.options.threads,
            rel_gap=DEFAULT_REL_GAP,
            highs_options=OPT_HIGHS_OPTIONS,
            lp_first=True,
        )
        upper = res.dual_bound
        if upper is not None and inst.per_server_shares:
            used = self._class_floors(inst)  # filled by this round's split_super_machine
            upper = split_floor_bound(
                inst, runnable, upper, clock, self.options, used, self._lowest_floors
            )
        if any(j.sensitivity_by_type for j in runnable):
            # The split-aware super-machine reads each job's reference matrix; on a faster
            # GPU type a job may realise more, so its optimum is no bound there (its points
            # still guide): the typed super-machine's is.
            upper = typed_bound(inst, runnable, clock, self.options)
        if res.status is not TerminationStatus.OPTIMAL or res.x is None:
            note = f"fell back to tune: super-machine solve ended {res.status} ({res.solver})"
            return tune_fallback(
                inst, tune, self.name, solver, upper, [note], t0, runnable=runnable, level=level
            )
        log.info(
            "super-machine optimum %.6g (%d columns, %.3fs)",
            res.objective or 0.0,
            ksm.matrix.num_cols,
            res.runtime_s,
        )
        ctx = self._context(inst, runnable, tune, ksm, res, clock)
        # the pattern dive runs beside the routes from the start (:mod:`.pattern_dive`)
        dive = start_dive(ctx)
        try:
            mine, errors = self._round(ctx, upper, self._kept(ctx), dive)
        finally:
            if dive is not None:
                dive.kill()
        if mine is None:
            notes = [f"fell back to tune: {'; '.join(errors)}"]
            if ctx.time_stops:  # a route the clock cut may be why every route failed
                notes.append(time_note(ctx.time_stops))
            return tune_fallback(
                inst, tune, self.name, solver, upper, notes, t0, runnable=runnable, level=level
            )
        if upper is not None and mine.total_throughput < upper - 1e-9 * max(1.0, upper):
            upper = min(self._tighter_bound(ctx, upper), full_server_bound(ctx))
            mine = dataclasses.replace(mine, upper_bound=upper)
        # TUNE is not run where the super-machine's optimum also bounds allocations of
        # part of the set (TUNE's may be one) and the answer reaches it
        tune_bound = (
            subset_bound(ksm.matrix, res)
            if not inst.per_server_shares and not any(j.sensitivity_by_type for j in runnable)
            else None
        )
        out = better_of(
            inst, mine, tune, self.name, t0, runnable=runnable, level=level, tune_bound=tune_bound
        )
        if ctx.time_stops:  # also where TUNE won: that too was decided against the clock
            out = dataclasses.replace(out, notes=(*out.notes, time_note(ctx.time_stops)))
        return out

    def _tighter_bound(self, ctx: RoundContext, upper: float) -> float:
        """:func:`counting_lp_bound` with the round's clock."""
        return counting_lp_bound(ctx.inst, ctx.runnable, upper, ctx.solve)

    def context(
        self, inst: RoundInstance, *, time_limit_s: float | None = None
    ) -> RoundContext | None:
        """The round context the routes read (``None``: nothing runnable or no optimum);
        its clock starts now, with ``time_limit_s``."""
        clock = Clock.started(time_limit_s)
        runnable, _ = runnable_at_floors(inst, select_runnable(inst))  # as allocate's
        if not runnable:
            return None
        ksm = split_super_machine(inst, runnable)
        res = solve_matrix(
            ksm.matrix,
            self.options.solver,
            threads=self.options.threads,
            highs_options=OPT_HIGHS_OPTIONS,
        )
        if res.x is None:
            return None
        tune = Tune(self.options).tune_round(inst)
        return self._context(inst, runnable, tune, ksm, res, clock)

    def _context(
        self,
        inst: RoundInstance,
        runnable: Sequence[Job],
        tune: TuneAnswer,
        ksm: SplitKnapsackModel,
        res: SolveResult,
        clock: Clock,
    ) -> RoundContext:
        assert res.x is not None
        demands = demand_classes(inst, ksm.classes, ksm.picks(res.x))
        cap = 3 * len(inst.cluster.servers)
        if self.options.max_fragmented is not None:
            cap = min(cap, self.options.max_fragmented)
        return RoundContext(
            inst=inst,
            runnable=tuple(runnable),
            tune_round=tune,
            classes=tuple(ksm.classes),
            demands=tuple(demands),
            points={
                job.id: point
                for dc in demands
                for point in [(dc.cpus, dc.mem_gb, point_value(dc))]
                for job in dc.jobs
            },
            spread_ids=frozenset(job.id for dc in demands if dc.spread for job in dc.jobs),
            optimum=res.objective or 0.0,
            max_fragmented=cap,
            options=self.options,
            clock=clock,
            routes_off=self.routes_off,
        )

    def _round(
        self,
        ctx: RoundContext,
        upper: float | None,
        kept: GpuPlan | None = None,
        dive: Child | None = None,
    ) -> tuple[Allocation | None, list[str]]:
        """Route plans in registry order; the first whose super-machine points deploy and
        reach the target ends the search.  A plan on which they do not deploy is first
        repaired by swapping whole jobs (:mod:`.repair`, no solver; with :data:`REPAIR`);
        if that deploys them, it ends the search the same way.  Otherwise the
        :data:`REOPTIMISED_PLANS` plans that over-commit least are re-optimised (a MIP
        each), the best (throughput, then fewer fragmented jobs) kept, and improved by
        exact re-decisions on neighbourhoods.

        With ``kept`` (the last round's GPUs of jobs still here, :meth:`_kept`), the warm
        start goes first: those jobs where they were, the new ones placed as ``balanced``
        places them.  If the super-machine points deploy on it within the target gap, it is
        the answer; otherwise it is dropped and the cold search runs exactly as without it.

        With ``dive`` (the pattern dive running beside, :mod:`.pattern_dive`), its plan, if
        it has answered when the late routes end (else when the search from their best plan
        ends), is one more late plan; the caller stops the dive."""
        inst = ctx.inst
        target = ctx.optimum - max(TARGET_GAP * abs(ctx.optimum), 1e-9)
        best: tuple[tuple[float, int], State] | None = None
        errors: list[str] = []
        # (order, name, plan) of the plans whose points did not deploy; ranked by
        # over-commitment only when the search needs them (the rounds a fast route ends
        # do not: 0.04 ms of a 3-ms multi-GPU round).
        pending: list[tuple[int, str, GpuPlan]] = []
        any_spreads = any(ctx.may_spread(j) for j in ctx.runnable)
        # Plans tried, as sets of (job, parts): equal iff the plans are (no sort needed).
        seen: set[frozenset[tuple[str, tuple[tuple[int, int], ...]]]] = set()

        def keep(
            name: str,
            plan: GpuPlan,
            points: dict[str, Point],
            parts: dict[str, list[PlacementPart]] | None = None,
        ) -> State:
            nonlocal best
            state = State(plan, points, total_of(ctx, plan, points), parts or None)
            spread = sum(1 for parts in plan.values() if len(parts) > 1)
            log.info(
                "opt on %s: %s reaches %.6g (%d fragmented)", inst.name, name, state.total, spread
            )
            rank = (round(state.total, 9), -spread)
            if best is None or rank > best[0]:
                best = (rank, state)
            return state

        tries: list[tuple[str, RoutePlan, bool, bool, RouteBound | None]] = []
        if kept:
            tries.append((WARM_START, lambda c: balanced_from(c, kept), False, False, None))
        tries += [
            (r.name, r.plan, r.spread_only, r.fast_only, r.bound)
            for r in ROUTES.values()
            if not r.late
        ]
        #: Plans put in ``pending`` by route order: a deferred route's plan takes its place.
        pended: dict[frozenset[tuple[str, tuple[tuple[int, int], ...]]], int] = {}

        def attempt(order: int, name: str, plan_of: RoutePlan, fast_only: bool) -> bool:
            """Try one route's plan; ``True`` when it reached the target (search ends)."""
            try:
                plan = plan_of(ctx)
                key = frozenset(plan.items())
                if key in seen:
                    return False
                seen.add(key)
                plan_points.within_cap(ctx, plan)
            except RoundingError as e:
                if name != WARM_START and not fast_only:  # a fast-only route only adds
                    errors.append(f"{name}: {e}")
                log.info("opt on %s: %s: %s", inst.name, name, e)
                return False
            deployed: dict[str, list[PlacementPart]] = {}
            points = plan_points.direct_points(ctx, plan, deployed)
            if name == WARM_START:
                # Taken only at the target; otherwise dropped, and the cold search runs as
                # without it (a route finding the same plan still counts): as a mere
                # candidate it steered the search elsewhere (mixed-shapes 64 GPUs seed
                # 1005 after seed 1003: 50.11 where the cold search finds 50.26).
                if points is not None and total_of(ctx, plan, points) >= target:
                    keep(name, plan, points, deployed)
                    return True
                seen.discard(key)
                return False
            if points is None and REPAIR:
                # Swaps of whole jobs until the points deploy (:mod:`.repair`).  Not on the
                # warm start: in table 3b's simulations it fired on 2-3 of 60 rounds, and
                # its failed attempts cost more than it saved (512 GPUs: 5.1x against 4.0x
                # total CPU of tune).
                fixed = repair(ctx, plan, ctx.points)
                if fixed is not None:
                    points = plan_points.direct_points(ctx, fixed, deployed)
                    if points is not None:
                        name, plan = f"{name}+repair", fixed
            if points is not None:
                return keep(name, plan, points, deployed).total >= target
            if fast_only:
                # Dropped as if never tried: a later route reaching the same plan still
                # counts, and the re-optimisation gets the plans it got without this one.
                log.info("opt on %s: %s: the points do not deploy (dropped)", inst.name, name)
                seen.discard(key)
                return False
            pended[key] = len(pending)
            pending.append((order, name, plan))
            return False

        # (order, name, plan, fast-only, where its errors go): routes whose bound says
        # they cannot reach the target (:attr:`.routes.Route.bound`)
        deferred: list[tuple[int, str, RoutePlan, bool, int]] = []
        for order, (name, plan_of, spread_only, fast_only, bound_of) in enumerate(tries):
            if spread_only and not any_spreads:
                continue  # nothing may spread: the route would only repeat a packing
            if bound_of is not None:
                bound = bound_of(ctx)
                if bound is not None and bound < target - 1e-9 * max(1.0, abs(target)):
                    log.info("opt on %s: %s deferred (bound %.6g)", inst.name, name, bound)
                    deferred.append((order, name, plan_of, fast_only, len(errors)))
                    continue
            if attempt(order, name, plan_of, fast_only):
                break
        if best is None or best[1].total < target:
            # As if run in their turn: they cannot have ended the search, so all they
            # leave is their plan in ``pending`` (in its place, also where a later route
            # pended the same plan, which it would then have skipped as seen) and their
            # errors where they would have been.
            for order, name, plan_of, fast_only, at in deferred:
                tail = errors[at:]
                del errors[at:]
                outcome: GpuPlan | RoundingError
                try:
                    outcome = plan_of(ctx)
                except RoundingError as e:
                    outcome = e
                if (
                    not isinstance(outcome, RoundingError)
                    and (slot := pended.get(frozenset(outcome.items()))) is not None
                ):
                    pending[slot] = (order, name, outcome)
                else:
                    attempt(order, name, _replaying(outcome), fast_only)
                errors.extend(tail)
        if best is None or best[1].total < target:
            ranked = [(overcommitment(ctx.inst, p, ctx.points), o, n, p) for o, n, p in pending]
            chosen = sorted(ranked, key=lambda t: (t[0], t[1]))[:REOPTIMISED_PLANS]
            models: list[tuple[float, int, str, PointModel]] = []
            for _, order, name, plan in chosen:
                try:
                    model = point_model(ctx, plan)
                except RoundingError as e:
                    errors.append(f"{name}: {e}")
                    log.info("opt on %s: %s: %s", inst.name, name, e)
                    continue
                lp = relaxation_bound(ctx, model) if len(chosen) > 1 else None
                models.append((float("inf") if lp is None else lp, order, name, model))
            # Highest LP bound first; a plan whose bound is below the best total found
            # cannot beat it, and neither can any later one (saved 200 of 310 ms on the
            # 512-GPU multi-GPU round seed 4; the same answers).
            for lp, _, name, model in sorted(models, key=lambda t: (-t[0], t[1])):
                if best is not None and lp < best[1].total - PRUNE_EPS * max(1.0, best[1].total):
                    log.info(
                        "opt on %s: %s cannot beat %.6g (LP %.6g)",
                        inst.name,
                        name,
                        best[1].total,
                        lp,
                    )
                    break
                try:
                    points, _ = solve_points(ctx, model)
                except RoundingError as e:
                    errors.append(f"{name}: {e}")
                    log.info("opt on %s: %s: %s", inst.name, name, e)
                    continue
                if keep(name, model.plan, points).total >= target:
                    break
        routed = best[1] if best is not None else None
        start = routed
        if start is None or start.total < target:
            # Missed: a job filling its servers may make the pooled optimum unreachable.
            target = min(target, full_server_bound(ctx) * (1 - TARGET_GAP))
        late: list[State] = []
        if start is None or start.total < target:
            start = self._late_routes(ctx, start, target, any_spreads, keep, errors, late)
        if dive is not None and (start is None or start.total < target) and dive.ready():
            # the dive beside the routes has answered: its plan is one more late plan (the
            # search starts from the best, then from the others)
            dived = self._dived(ctx, dive, keep)
            dive = None  # taken
            if dived is not None:
                late.append(dived)
                if start is None or dived.total > start.total + PRUNE_EPS * max(1.0, start.total):
                    start = dived
        if start is None:
            return None, errors
        state = _search(ctx, start, target)
        if dive is not None and state.total < target and dive.ready():
            # answered during that search: searched from below, with the other late plans
            dived = self._dived(ctx, dive, keep)
            if dived is not None:
                late.append(dived)
        for other_start in sorted((s for s in late if s is not start), key=lambda s: -s.total):
            # Another late plan can be the better start (split penalties 128 GPUs seed
            # 1195: from counting-full-servers' 55.547 the search gains nothing, from
            # counting-near's 55.4432 it reaches 55.841, the optimum).
            if state.total >= target:
                break
            other = _search(ctx, other_start, target)
            if other.total > state.total + PRUNE_EPS * max(1.0, state.total):
                state = other
        if routed is not None and start is not routed and state.total < target:
            # A late route's better plan can lead the search to a lower answer than the
            # plan it displaced (split penalties 96 GPUs seed 1062: 39.85 against 40.011,
            # the optimum): search from that one too and keep the better.
            other = _search(ctx, routed, target)
            if other.total > state.total + PRUNE_EPS * max(1.0, state.total):
                state = other
        parts = placements(ctx, state)
        if parts is None:  # pragma: no cover - every state is checked to deploy
            return None, [*errors, "best plan does not deploy (numerical trouble)"]
        return build_allocation(
            inst, self.name, parts, solver=ctx.options.solver, upper_bound=upper
        ), errors

    @staticmethod
    def _dived(ctx: RoundContext, dive: Child, keep: Callable[..., State]) -> State | None:
        """The ``pattern-dive`` plan (:mod:`.pattern_dive`; the dive has answered),
        re-optimised as a late route's plan is; ``None`` where it found none."""
        plan = dive_plan(ctx, dive)
        if plan is None:
            return None
        try:
            points, deployed = plan_points.late_points(ctx, plan)
        except RoundingError as e:
            log.info("opt on %s: %s: %s", ctx.inst.name, PATTERN_DIVE, e)
            return None
        # taken: whether the dive had answered by now depends on the machine's speed
        ctx.time_stops.append(PATTERN_DIVE)
        return keep(PATTERN_DIVE, plan, points, deployed)

    @staticmethod
    def _late_routes(
        ctx: RoundContext,
        state: State | None,
        target: float,
        any_spreads: bool,
        keep: Callable[..., State],
        errors: list[str],
        found_plans: list[State] | None = None,
    ) -> State | None:
        """The late routes (:class:`.routes.Route`), in registry order, once the other
        routes' plans, re-optimised, missed the target: each plan at the super-machine
        points if they deploy on it, else re-optimised; the best of those and ``state``
        (``found_plans`` receives each late route's state).
        They run before the neighbourhood search: on mixed-shape rounds where it is needed
        it is cheaper than the search and reaches the optimum where the search stops short
        (mixed shapes 128 GPUs seed 1191: 103.57 in 5.8 s CPU, where the search alone
        gets 103.50 in 20 s)."""
        for r in late_routes():
            if r.spread_only and not any_spreads:
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
