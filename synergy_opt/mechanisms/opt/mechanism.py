"""The ``opt`` mechanism: super-machine optimum, rounding routes, deployment, TUNE floor."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import OrderedDict
from collections.abc import Sequence

from synergy_opt.deadline import warm_up
from synergy_opt.formulations.fast import SplitKnapsackModel, class_key
from synergy_opt.formulations.typed_fast import is_typed_round
from synergy_opt.matrix import MatrixModel
from synergy_opt.mechanisms.base import MechanismOptions, register
from synergy_opt.mechanisms.opt.answer import better_of, capped, tune_fallback
from synergy_opt.mechanisms.opt.bounds import (
    counting_lp_bound,
    split_floor_bound,
    subset_bound,
    typed_bound,
)
from synergy_opt.mechanisms.opt.context import (
    OPT_HIGHS_OPTIONS,
    Clock,
    GpuPlan,
    RoundContext,
    time_note,
)
from synergy_opt.mechanisms.opt.full_servers import (
    full_server_bound,
)
from synergy_opt.mechanisms.opt.packing_route import load_packing_solver
from synergy_opt.mechanisms.opt.pattern_dive import start_dive
from synergy_opt.mechanisms.opt.round_cache import (
    ROUND_CACHE_SIZE,
    CachedRound,
    RoundKey,
    round_key,
)
from synergy_opt.mechanisms.opt.search import RoundSearch
from synergy_opt.mechanisms.opt.stranded import StrandMemo, runnable_at_floors, with_passed_over
from synergy_opt.mechanisms.opt.super_machine import (
    demand_classes,
    point_value,
    split_super_machine,
)
from synergy_opt.mechanisms.opt.typed import choose_types
from synergy_opt.mechanisms.packing import select_runnable
from synergy_opt.mechanisms.tune import Tune, TuneAnswer, TuneLater
from synergy_opt.solve import DEFAULT_REL_GAP, SolveResult, TerminationStatus, solve_matrix
from synergy_opt.types import (
    Allocation,
    Cluster,
    Job,
    RoundInstance,
)

log = logging.getLogger(__name__)

#: Solver threads when the options leave them open: OPT's MIPs are small (tens to a few
#: thousand columns), where HiGHS's parallel scheduler costs more than it saves (measured on
#: 128-GPU single-GPU super-machines: 8-17 ms CPU and 30-90 ms wall per solve with the
#: default scheduler, 1.5-4 ms with one thread, same optima).
OPT_THREADS: int = 1
#: On typed rounds, run the plain pass (routes on each job's reference matrix) on every
#: round, as before 2026-12, not only where the round with types fixed gives no checked
#: answer of the whole runnable set.  Off only to measure it (bench table 4).
PLAIN_PASS_ALWAYS: bool = False

#: Per job id of the last round: its class key and its GPUs per server (server index, GPUs).
Previous = dict[str, tuple[tuple[object, ...], tuple[tuple[int, int], ...]]]


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
            mine, errors = RoundSearch(ctx, self._kept(ctx), dive).run(self.name, upper)
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
        # mine's bound: upper, or the search's pattern bound where that is smaller (and
        # then often mine's total: no other bound is sought)
        bound = mine.upper_bound
        if bound is not None and mine.total_throughput < bound - 1e-9 * max(1.0, bound):
            upper = min(self._tighter_bound(ctx, bound), full_server_bound(ctx))
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
        return counting_lp_bound(ctx.inst, ctx.runnable, upper, ctx.solve, ctx.counting_matrix)

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
