"""``opt-exact``: the proven optimum of configuration choice and placement together.

It solves the counting model (:mod:`~synergy_opt.formulations.counting`, matrix fast path
:mod:`~synergy_opt.formulations.counting_fast`) over TUNE's runnable set: whole GPUs per
server, whole cores, the split penalty and every job's fair-share floor, aggregated over
identical jobs so that 128- and 512-GPU rounds are proven in seconds.  TUNE's and ``opt``'s
allocations are its MIP starts.

Where a job may spread at a split penalty the counting LP is loose (a whole job sits
fractionally on several servers without paying the penalty): there branch-and-price over
server patterns (:mod:`~synergy_opt.formulations.branch_price`: column generation's bound,
branching on the spread decisions) runs first, for at most :data:`BOUND_SHARE` of the time
left; if it has not proven its answer by then, the counting model runs for the rest of the
time from the best answer so far, and the smaller bound of the two is kept.  There ``opt``
gets at most :data:`PATTERN_OPT_CAP_S` first, so that a longer limit starts the search as a
10-s one does, and its full share only after an unproven search (then a second search);
where the limit is too short for that and the clock cut ``opt``, ``opt`` runs again with the
time the first search leaves (:data:`LATE_OPT_RESERVE`).  On two cores or more, where
``opt``'s first answer misses its bound, ``opt`` runs again in a child process beside the
search (:data:`OPT_BESIDE`) and its answer floors the result.  Where a spread job's
floor depends on its split, branch-and-price runs first on the restriction that keeps
every floor (its answers), then, from its answer, the exact search where the pattern
master states the split, else the relaxation (its bound) (:data:`FLOOR_PAIR`).

``upper_bound`` is the smallest proven bound for the runnable set: the model's dual bound,
the pattern bound, the super-machine optimum, and ``opt``'s bound.  The answer is never
below TUNE nor below ``opt``; an unproven answer (time limit) says so in ``notes``.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from synergy_opt.check import check_allocation
from synergy_opt.deadline import (
    Child,
    ChildFailed,
    DeadlineExceeded,
    PendingChild,
    guard_available,
    start_child,
    usable_cores,
    warm_up,
)
from synergy_opt.formulations.branch_price import branch_and_price
from synergy_opt.formulations.counting_fast import (
    CountingResult,
    proven_within,
    solve_counting,
    solve_counting_call,
)
from synergy_opt.formulations.patterns_fast import pattern_search
from synergy_opt.mechanisms.base import MechanismOptions, make_mechanism, register
from synergy_opt.mechanisms.opt import Opt, better_of, bound_for, tune_fallback
from synergy_opt.mechanisms.opt.context import RoundingError, time_notes
from synergy_opt.mechanisms.opt.packing_route import (
    FULL_SERVER_POINTS,
    bound_points,
    load_packing_solver,
    packing_plan,
)
from synergy_opt.mechanisms.opt.pattern_dive import PATTERN_DIVE
from synergy_opt.mechanisms.opt.points import deploy_plan
from synergy_opt.mechanisms.opt.search import SPREAD_PATTERN_BOUND
from synergy_opt.mechanisms.opt.stranded import runnable_at_floors, with_passed_over
from synergy_opt.mechanisms.packing import select_runnable
from synergy_opt.solve import TerminationStatus, guard_deadline
from synergy_opt.types import (
    THROUGHPUT_EPS,
    Allocation,
    Job,
    PlacementPart,
    RoundInstance,
    build_allocation,
)

log = logging.getLogger(__name__)

#: ``opt-exact`` without ``--time-limit`` stops after this many seconds (it is exponential
#: in the worst case; 128-GPU rounds of every family are meant to close within 10 s).
EXACT_DEFAULT_TIME_LIMIT_S: float = 60.0
#: ``opt`` (the warm start, and the answer's floor) gets this share of the time limit.
OPT_SHARE: float = 1 / 4
#: The same where branch-and-price runs (split penalties): the search finds its own
#: allocations, and on split-penalty 128-GPU rounds ``opt``'s extra time went mostly to
#: a restricted counting MIP that found nothing (seed 2: 2.3 s of its 2.5 s); with a
#: tenth, opt-exact at 10 s proved seeds 0, 1, 4 in 6.3, 3.3, 4.4 s instead of 7.2, 5.6,
#: 6.3 s (side by side, load 3-4), the same answers.  The trade-off: on seed 5 that MIP
#: is what finds the optimum within 2.5 s (not within 1 s), so the search has to dive
#: for it and seed 5 is proven in 2.6-3.4 s instead of 1.6-2.7 s.
PATTERN_OPT_SHARE: float = 1 / 10
#: ... and at most this many seconds there, whatever the limit: ``opt``'s answer seeds the
#: search's pattern pool, so with a share alone a longer limit starts the search from
#: another pool and other duals (split-penalty 128 seed 2: proven at 10 s with ``opt`` at
#: 1 s, not at 60 s with ``opt`` at 6 s, whose root dive leaf's reach MIP did not finish).
#: Capped, every limit of at least 10 s starts the search as the 10-s run does.
PATTERN_OPT_CAP_S: float = 1.0
#: Branch-and-price's cap, as a share of the time left after TUNE and ``opt`` (it stops
#: earlier once proven, or when a leaf stalls).  The counting model keeps the rest: on
#: rounds whose leaves stay loose its own branching sometimes closes a 128-GPU round late.
BOUND_SHARE: float = 0.85
#: Where a spread job's floor depends on its split (mixed shapes under per-server fair
#: shares, fractional cores per GPU) the counting MIP alone is weak at 128 GPUs with split
#: penalties (mixed shapes 8x8:24:500, 4x8:32:256, 8x4:12:200 seed 0 at 10 s: 53.70, gap
#: 6.3 %, below ``opt``'s 55.04).  There branch-and-price runs twice
#: (:data:`~.branch_price.FLOOR_MODES`): on the restriction that keeps every slot point
#: above its highest floor, for this share of the time left (its allocations keep every
#: floor; at 128 GPUs it finds them sooner than the exact search started cold: seed 3 at
#: 10 s, 58.38 against 56.47), then from its answer, for :data:`PAIR_LOW_SHARE` of the
#: rest, the exact search where the pattern master states the split
#: (:func:`~.patterns_fast.pattern_search` "split"), else the relaxation above the lowest
#: floor (its bound bounds every allocation); the counting model gets what is left.
FLOOR_PAIR: bool = True
PAIR_HIGH_SHARE: float = 0.5
PAIR_LOW_SHARE: float = 0.8
#: Where branch-and-price would run (split penalties) on a cluster of at most
#: ``PROBE_MAX_SERVERS`` servers, the counting MIP first gets this many seconds (0: none):
#: a round of a few servers it mostly proves at once, where the search's column generation
#: and leaves take seconds.  Random rounds of 2-5 mixed-shape servers with split penalties
#: (``tests/test_split_master.py``'s ``small_split_round``, seeds 0-299 whose floors depend
#: on the split): the counting MIP proves 102 of 106 within 0.5 s (median 0.06 s), where
#: ``opt-exact`` at 10 s took 8.5 s and 10 s through the search on seeds 128 and 208.
#: Not on larger clusters: on split penalties at 128 GPUs (16 servers) it proves none in
#: that time and cost 9 s over seeds 0-23 at 10 s (85.6 s against 76.7 s, the same 21
#: proven); at 32 GPUs (4-5 servers) it proves most rounds in 0.01-0.6 s.
COUNTING_PROBE_S: float = 0.5
PROBE_MAX_SERVERS: int = 8
#: Where the cap held ``opt`` back and the first search (a 10-s run's) did not prove its
#: answer, ``opt`` runs again with its full share and a second search with the rest, from
#: both answers, when at least this share of the time after TUNE and the first ``opt`` is
#: still left (split-penalty 128 seed 4 at 60 s: proven 58.467 from ``opt``'s 58.2069).
RETRY_SHARE: float = 0.5
#: Where the clock cut ``opt`` below its own bound and that bound comes from the
#: full-server super-machine (a job fills every server it fits on, so the pooled points,
#: the ones ``opt``'s cheap routes and the search's first bound aim at, are out of reach),
#: the packing of its points (``opt``'s late route, :mod:`~.opt.packing_route`, with its
#: deterministic budget) runs on its own, first, with at most this share of the time left:
#: where it packs them, its answer is that super-machine's optimum, a bound, so the round
#: is proven there and then.  Split penalties 128 GPUs seed 4 at 10 s: ``opt`` at 1 s stops
#: at 56.73 and the search at 57.94 (0.90 % gap); the packing (1.17 deterministic s) proves
#: 58.467 in 3.0 s.  Run on every round cut below its bound, a packing that found none
#: cost the search 1.5 s or more: on a machine running slower, seed 3 then ended at 56.23
#: (5.3 % gap) instead of 58.86, so pooled-point rounds are left to the search.  The share
#: only matters on a slow machine (the deterministic budget ends the packing first): at 0.3
#: seed 4's packing was cut there.
PACKING_SHARE: float = 0.5
#: Where the clock cut the first ``opt`` and that retry does not run (limits up to about
#: 15 s), the first search stops with this share of the time after TUNE and ``opt`` still
#: to go, and ``opt`` runs again with all of it (if that is more than it had): the answer
#: is then never below an ``opt`` given that much time.  Split penalties 128 GPUs seed 3 at
#: 10 s: ``opt`` needs 2.2 s for 58.8648 (55.53 when cut at 1 or 2 s); the search alone
#: returned 57.94-58.36.  At 0.3 the late ``opt`` had about 2.7 s and its counting route found
#: 58.8648 about 2.1 s in, so on a slower run it did not: 57.61 in 2 runs of 3 (2026-12-02,
#: quiet machine); at 0.4, 58.8648 in 3 of 3, with seed 2 unchanged (58.8921, 3 of 3) and
#: seeds 0, 1, 4, 5 proven as fast (1.5-3.4 s, two runs each).  Only limits up to about
#: 12 s are affected (above, the first search's own budget is the smaller).
LATE_OPT_RESERVE: float = 0.4
#: Where ``opt``'s first answer does not meet its bound and the machine has two cores or
#: more, ``opt`` runs again in a child process beside the search (the packing, branch-and-
#: price or the counting model), with this share of the time left, and its answer floors
#: the result: the search mostly proves bounds, and on split-penalty 128-GPU rounds it
#: left unproven at 10 s its answers were below ``opt``'s own 10-s answers (seeds 7, 8,
#: 9, 11: 57.74 / 79.10 / 53.94 / 65.68 against 58.11 / 79.28 / 54.34 / 67.38).  The child
#: is stopped as soon as the search proves its answer.
OPT_BESIDE: bool = True
BESIDE_OPT_SHARE: float = 0.9
#: The least time the ``opt`` beside the search is given (seconds).
BESIDE_MIN_S: float = 0.1
#: Keep the late ``opt`` (and the search's reserve for it) while ``opt`` runs beside: off,
#: since the child already runs ``opt`` longer; the search's extra time proved split
#: penalties 128 seed 14 at 10 s (6.7 s) and took seed 11 from 3.09 % to 0.20 %.
LATE_OPT_BESIDE: bool = False
#: ``opt``'s steps left out where ``opt-exact`` runs ``opt``: ``pattern-dive`` runs the
#: first steps of the branch-and-price search that ``opt-exact`` runs whole after it, and
#: the split-penalty pattern bound is that search's root bound (in ``opt``'s share of 1 s
#: at 128 GPUs it would take the search's time for a bound the root computes anyway).
EXACT_ROUTES_OFF: frozenset[str] = frozenset({PATTERN_DIVE, SPREAD_PATTERN_BOUND})
#: How long past the limit the answer waits for that child (``opt`` can overrun its
#: clock by a fraction of a second) before it is killed.
BESIDE_GRACE_S: float = 0.5
#: Where the counting MIP runs while ``opt`` runs beside it, it runs in a child process
#: of its own, asked this often whether ``opt`` has met its own bound (then it is killed
#: and ``opt``'s answer, proven by that bound, returned at once).
STOP_POLL_S: float = 0.05
#: Where the counting MIP is the search (no pattern search serves the round) and the
#: machine has two cores, the MIP starts in a child while ``opt``'s first run goes on, from
#: TUNE's answer, instead of after it from ``opt``'s: a first run the clock cuts is then no
#: longer time the MIP waits out (where ``opt`` ends on its own the child is killed, and a
#: MIP still needed starts from ``opt``'s answer).
EARLY_COUNTING: bool = True
#: ... after this many seconds: ``opt`` alone proves most rounds within them, and then the
#: child is never started (nor waited for at exit).
EARLY_DELAY_S: float = 0.5


@register("opt-exact", keeps_fair_share=True, exact=True, uses_solver=True, doc="proven optimum")
class OptExact:
    """The counting MIP (configuration + integral placement); never below TUNE or ``opt``."""

    name = "opt-exact"

    def __init__(self, options: MechanismOptions | None = None) -> None:
        self.options = options or MechanismOptions()
        load_packing_solver()  # its opt and packing: now, not on the time limit's clock

    def allocate(self, inst: RoundInstance) -> Allocation:
        """Solve the counting model over TUNE's runnable set, started from TUNE and ``opt``."""
        t0 = time.perf_counter()
        warm_up()  # the guarded solves' process server starts while TUNE and opt run
        tune = make_mechanism("tune", self.options).allocate(inst)
        runnable, passed = runnable_at_floors(inst, select_runnable(inst))
        out = self._allocate_on(inst, runnable, tune, t0)
        # as opt passes them over (the counting model has no solution with them)
        return with_passed_over(out, passed) if passed else out

    def _allocate_on(
        self, inst: RoundInstance, runnable: Sequence[Job], tune: Allocation, t0: float
    ) -> Allocation:
        """:meth:`allocate` on ``runnable`` (the jobs that may hold their floors): ``opt``'s
        answer first (:meth:`_start`), proven at once where it meets its bound; else the
        exact search (:meth:`_search_stages`) and the best proven or checked answer of
        both (:meth:`_conclude`)."""
        if not runnable:
            solver = self.options.solver
            return tune_fallback(inst, tune, self.name, solver, 0.0, [], t0, runnable=runnable)
        limit = self.options.time_limit_s or EXACT_DEFAULT_TIME_LIMIT_S
        search = pattern_search(inst, runnable)
        start = self._start(inst, runnable, tune, t0, limit, search)
        if _at_bound(start.heuristic, runnable):
            # opt's answer reaches opt's bound (a super-machine's optimum, or the counting
            # LP's): proven without a search.
            for child in (start.beside, start.early):
                if child is not None:
                    child.kill()
            log.info("opt-exact on %s: opt's answer meets its bound", inst.name)
            mine = _relabelled(inst, start.heuristic, start.heuristic.upper_bound, [], runnable)
            return better_of(inst, mine, tune, self.name, t0, runnable=runnable)
        res, probe, heuristic = self._search_stages(inst, runnable, tune, t0, limit, search, start)
        beside = start.beside
        if res is None:  # stopped: opt beside it met its own bound, a proof of its answer
            assert beside is not None
            got = _with_beside(inst, heuristic, beside, t0 + limit, runnable)
            if _meets(got, got.upper_bound, runnable):
                log.info("opt-exact on %s: opt beside the counting MIP meets its bound", inst.name)
                mine = _relabelled(inst, got, got.upper_bound, [], runnable)
                return better_of(inst, mine, tune, self.name, t0, runnable=runnable)
            res = _no_answer(self.options.solver, 0.0)  # pragma: no cover - it stops at it
        if probe is not None and res is not probe:
            res = _merge(probe, res)  # its bound can be the smaller
        if beside is not None:
            # proven already (by the search's bound or opt's): the child is not waited for
            if _proven_with(res, _below_incumbent(res, heuristic.upper_bound)):
                beside.kill()
            else:
                heuristic = _with_beside(inst, heuristic, beside, t0 + limit, runnable)
        mine = self._conclude(inst, runnable, res, heuristic)
        return better_of(inst, mine, tune, self.name, t0, runnable=runnable)

    def _start(
        self,
        inst: RoundInstance,
        runnable: Sequence[Job],
        tune: Allocation,
        t0: float,
        limit: float,
        search: str | None,
    ) -> _Start:
        """``opt``'s first answer, with a share of the limit that depends on the search
        (:data:`OPT_SHARE`, or :data:`PATTERN_OPT_SHARE` up to :data:`PATTERN_OPT_CAP_S`
        where a pattern search follows); the counting MIP started early beside it where
        that MIP is the search; a second ``opt`` beside the search where the first missed
        its bound; and, where the clock cut the first, the packing on its own."""
        staged = search == "exact"
        pair = FLOOR_PAIR and search in ("pair", "split")
        opt_s = (
            min(limit * PATTERN_OPT_SHARE, PATTERN_OPT_CAP_S)
            if staged or pair
            else limit * OPT_SHARE
        )
        early = (
            None
            if staged or pair
            else _early_counting(
                inst, runnable, self.options, max(limit - (time.perf_counter() - t0), 1e-3), tune
            )
        )
        heuristic = _run_opt(inst, dataclasses.replace(self.options, time_limit_s=opt_s))
        opt_cut = bool(time_notes(heuristic.notes))
        if early is not None and not opt_cut:
            # opt ended on its own: a MIP from its answer (often the optimum) proves sooner
            # than one started from TUNE's (single-GPU 128 seeds 103, 108, 110: 0.55-0.7 s
            # against 0.8-1.4 s)
            early.kill()
            early = None
        before_packing = max(limit - (time.perf_counter() - t0), 1e-3)
        missed = not _at_bound(heuristic, runnable)
        beside = _opt_beside(inst, self.options, before_packing) if missed else None
        if opt_cut and missed:
            packed = _packed(inst, self.options, before_packing * PACKING_SHARE)
            if packed is not None and packed.total_throughput > heuristic.total_throughput:
                heuristic = dataclasses.replace(packed, upper_bound=heuristic.upper_bound)
        return _Start(heuristic, staged, pair, opt_s, opt_cut, early, beside, before_packing)

    def _search_stages(
        self,
        inst: RoundInstance,
        runnable: Sequence[Job],
        tune: Allocation,
        t0: float,
        limit: float,
        search: str | None,
        start: _Start,
    ) -> tuple[CountingResult | None, CountingResult | None, Allocation]:
        """The exact search from ``start``: on small clusters a short counting probe; the
        pattern search (:func:`_pattern_stage`) or the pair of floor models
        (:func:`_floor_pair_stage`) where they serve the round; else, or where they give
        nothing, the counting MIP (:func:`_counting_until`).  Returns its result (``None``:
        stopped because ``opt`` beside it met its bound), the probe's, and ``opt``'s best
        answer (a later ``opt`` of the pattern stage may beat the first)."""
        solver = self.options.solver
        heuristic, beside = start.heuristic, start.beside
        staged, pair = start.staged, start.pair  # a proving probe turns both off
        starts = _starts_of((heuristic, tune), runnable)
        left = max(limit - (time.perf_counter() - t0), 1e-3)
        res = None
        probe = None
        if (
            (staged or pair)
            and COUNTING_PROBE_S > 0
            and len(inst.cluster.servers) <= PROBE_MAX_SERVERS
        ):
            probe = solve_counting(
                inst,
                runnable,
                solver=solver,
                time_limit=min(COUNTING_PROBE_S, left),
                threads=self.options.threads,
                warm_start=starts,
            )
            log.info("opt-exact on %s: counting probe %s", inst.name, probe.status)
            if probe.proven:
                res, staged, pair = probe, False, False
            elif probe.placements:
                starts = [probe.placements, *starts]
            left = max(limit - (time.perf_counter() - t0), 1e-3)
        if staged:
            retry = None
            if (
                limit * PATTERN_OPT_SHARE > start.opt_s
            ):  # the cap held opt back: its full share later
                retry_opt = dataclasses.replace(
                    self.options, time_limit_s=limit * PATTERN_OPT_SHARE
                )

                def retry() -> Allocation:
                    return _run_opt(inst, retry_opt)

            # the first search gets what it gets at the limit where the cap begins to bind
            spent = time.perf_counter() - t0
            first_left = max(min(limit, PATTERN_OPT_CAP_S / PATTERN_OPT_SHARE) - spent, 1e-3)
            late_opt = None
            if start.opt_cut and (beside is None or LATE_OPT_BESIDE):

                def late_opt(seconds: float) -> Allocation:
                    again = dataclasses.replace(self.options, time_limit_s=seconds)
                    return _run_opt(inst, again)

            staged_res = _pattern_stage(
                inst,
                runnable,
                starts,
                left,
                self.options,
                retry,
                min(first_left, left),
                late_opt=late_opt,
                opt_seconds=start.opt_s,
                reserve_of=start.before_packing,
                stop=lambda: _beside_at_bound(beside, runnable),
            )
            if staged_res is not None:
                res, later = staged_res
                for again in later:  # a later opt's better answer floors the answer
                    if again.total_throughput > heuristic.total_throughput + THROUGHPUT_EPS:
                        heuristic = again
        if pair:
            res = _floor_pair_stage(
                inst,
                runnable,
                starts,
                left,
                self.options,
                lambda: _beside_at_bound(beside, runnable),
                exact=search == "split",
            )
        if res is None:
            res = _counting_until(
                inst,
                runnable,
                self.options,
                left,
                starts,
                None if beside is None else lambda: _beside_at_bound(beside, runnable),
                start.early,
            )
        return res, probe, heuristic

    def _conclude(
        self,
        inst: RoundInstance,
        runnable: Sequence[Job],
        res: CountingResult,
        heuristic: Allocation,
    ) -> Allocation:
        """The search's answer or ``opt``'s, whichever is higher and passes the check, with
        the smaller proven bound, and notes where neither is proven optimal."""
        solver = self.options.solver
        # opt's bound (the super-machine; on typed rounds the typed one, whose floors are the
        # lowest any split allows: typed_fast.lowest_fair_share) bounds the same runnable set;
        # one below the counting model's incumbent is no bound (the per-server floors of a
        # spread job can be lower than the plain super-machine's) and is left out, said.
        theirs = _below_incumbent(res, heuristic.upper_bound)
        notes: list[str] = []
        if theirs is None and heuristic.upper_bound is not None:
            notes.append(
                f"opt's bound {heuristic.upper_bound:.6g} is below the incumbent "
                f"{res.objective:.6g}"
            )
            log.warning("opt-exact on %s: %s", inst.name, notes[-1])
        bounds = [b for b in (res.dual_bound, theirs) if b is not None]
        upper = min(bounds) if bounds else None
        # opt's bound can prove the counting incumbent when the MIP's own dual bound cannot.
        proven_by_bound = _proven_with(res, theirs)
        incumbent = -math.inf if res.objective is None else res.objective
        # opt's answer (the first, a late one or the one beside the search) where it beats
        # the counting incumbent and passes the check
        opt_wins = heuristic.total_throughput > incumbent + THROUGHPUT_EPS and not check_allocation(
            inst, heuristic, fair_share=True
        )
        # ... and, scheduling the runnable set within the proof gap of the bound, is the
        # proven optimum whatever the search reached (split penalties 128 GPUs seed 25 at
        # 10 s: opt beside the search 67.204, the bound 67.204, the search's 65.17)
        opt_proven = opt_wins and _meets(heuristic, upper, runnable)
        if not proven_by_bound and not opt_proven:
            notes.append(
                f"counting model not proven optimal: {res.status} ({res.solver}"
                f"{'; ' + res.detail if res.detail else ''}), "
                f"incumbent {res.objective}, bound {res.dual_bound}"
            )
            log.warning("opt-exact on %s: %s", inst.name, notes[-1])
        if res.placements:
            mine = build_allocation(
                inst, self.name, res.placements, solver=solver, upper_bound=upper, notes=notes
            )
        else:
            notes.append("no counting-model solution; returned opt's allocation")
            log.warning("opt-exact on %s: %s", inst.name, notes[-1])
            mine = _relabelled(inst, heuristic, upper, notes, runnable)
        if opt_wins and heuristic.total_throughput > mine.total_throughput + THROUGHPUT_EPS:
            note = "returned opt's allocation: it beats the counting model's incumbent"
            if opt_proven:
                note += f" and meets the bound {upper:.6g} (proven)"
            log.warning("opt-exact on %s: %s", inst.name, note)
            mine = _relabelled(inst, heuristic, upper, [*notes, note], runnable)
        return mine


@dataclass(frozen=True)
class _Start:
    """What ``opt-exact``'s search starts from (:meth:`OptExact._start`)."""

    #: ``opt``'s answer (or the packing's, where it is higher).
    heuristic: Allocation
    #: Whether the pattern search serves the round (``pattern_search`` said "exact").
    staged: bool
    #: Whether the pair of floor models serves it (:data:`FLOOR_PAIR`, "pair" or "split").
    pair: bool
    #: The seconds ``opt`` was given.
    opt_s: float
    #: Whether the clock cut ``opt`` (its notes say so).
    opt_cut: bool
    #: The counting MIP started early beside ``opt``, where it still runs.
    early: PendingChild | None
    #: The second ``opt`` beside the search, where the first missed its bound.
    beside: Child | None
    #: Seconds left when ``opt`` ended (before the packing).
    before_packing: float


def _run_opt(inst: RoundInstance, options: MechanismOptions) -> Allocation:
    """``opt`` as one of ``opt-exact``'s candidates: its notes are logged at INFO (they
    belong to an answer ``opt-exact`` may not return; it logs its own answer's), and the
    steps of :data:`EXACT_ROUTES_OFF` are left out."""
    mech = make_mechanism("opt", options)
    if isinstance(mech, Opt):
        return Opt(options, routes_off=EXACT_ROUTES_OFF)._allocate(inst, quiet=True)
    return mech.allocate(inst)


def _opt_beside(inst: RoundInstance, options: MechanismOptions, left: float) -> Child | None:
    """``opt`` with :data:`BESIDE_OPT_SHARE` of the time ``left``, started in a child
    process beside the search (``None`` on one core, without children, or with
    :data:`OPT_BESIDE` off)."""
    if not OPT_BESIDE or usable_cores() < 2 or not guard_available():
        return None
    seconds = max(left * BESIDE_OPT_SHARE, BESIDE_MIN_S)
    return start_child(_run_opt_until, (inst, options, time.time() + seconds))


def _run_opt_until(inst: RoundInstance, options: MechanismOptions, until: float) -> Allocation:
    """:func:`_run_opt` with the time left until ``until`` (wall clock, shared by parent
    and child): the child's start (a fork, unpickling the round, any import the process
    server has not done) counts against its share, so that its answer is there by the
    time the parent waits for it.  Split penalties 128 GPUs seeds 7, 8, 9, 11 at 10 s: the
    child imported the mechanisms for 1.3-1.5 s before ``opt``'s clock started, answered
    after the parent's grace, and its answers (56.35-57.74 on seed 7) were lost."""
    left = max(until - time.time(), BESIDE_MIN_S)
    return _run_opt(inst, dataclasses.replace(options, time_limit_s=left))


def _with_beside(
    inst: RoundInstance,
    heuristic: Allocation,
    beside: Child,
    deadline: float,
    runnable: Sequence[Job],
) -> Allocation:
    """The better of ``heuristic`` and the ``opt`` beside the search (waited for until
    :data:`BESIDE_GRACE_S` past ``deadline``), with the smaller of their bounds (each
    bounds the runnable set where it is given)."""
    try:
        got = beside.result(deadline + BESIDE_GRACE_S - time.perf_counter())
    except (DeadlineExceeded, ChildFailed) as e:
        log.info("opt-exact on %s: opt beside the search gave nothing: %s", inst.name, e)
        return heuristic
    log.info("opt-exact on %s: opt beside the search: %.6g", inst.name, got.total_throughput)
    # a bound covers the runnable set: an answer of part of it has none (bound_for)
    bounds = [
        b
        for a in (heuristic, got)
        if (b := bound_for(inst, a, a.upper_bound, [], runnable=runnable)[0]) is not None
    ]
    upper = min(bounds) if bounds else heuristic.upper_bound
    if got.total_throughput > heuristic.total_throughput + THROUGHPUT_EPS:
        return dataclasses.replace(got, upper_bound=upper)
    return dataclasses.replace(heuristic, upper_bound=upper)


def _beside_at_bound(beside: Child | None, runnable: Sequence[Job]) -> bool:
    """Whether the ``opt`` beside the search has answered at its own bound (then nothing
    the search finds can beat it: split penalties 128 GPUs seeds 25 and 30 at 10 s, where
    ``opt`` reaches its bound in 1.1 and 3.1 s and the search used all 10)."""
    if beside is None or not beside.ready():
        return False
    try:
        got = beside.result(0.0)
    except (DeadlineExceeded, ChildFailed):
        return False
    # a time-limit note says how it was found, not that its bound does not apply
    return (
        isinstance(got, Allocation)
        and len(time_notes(got.notes)) == len(got.notes)
        and _meets(got, got.upper_bound, runnable)
    )


def _below_incumbent(res: CountingResult, theirs: float | None) -> float | None:
    """``opt``'s bound ``theirs``, or ``None`` where it is below the counting incumbent
    (then no bound: a spread job's per-server floors can be lower than the plain
    super-machine's)."""
    if theirs is not None and res.objective is not None and theirs < res.objective - 1e-9:
        return None
    return theirs


def _proven_with(res: CountingResult, theirs: float | None) -> bool:
    """Whether ``res``'s incumbent is proven by the smaller of its bound and ``theirs``."""
    bounds = [b for b in (res.dual_bound, theirs) if b is not None]
    return dataclasses.replace(res, dual_bound=min(bounds) if bounds else None).proven


def _meets(a: Allocation, bound: float | None, runnable: Sequence[Job]) -> bool:
    """Whether ``a`` schedules the runnable set within the proof gap of ``bound`` (a bound of
    that set): then it is the proven optimum."""
    return (
        bound is not None
        and {ja.id for ja in a.jobs} == {j.id for j in runnable}
        and proven_within(a.total_throughput, bound)
    )


def _at_bound(a: Allocation, runnable: Sequence[Job]) -> bool:
    """Whether ``a`` meets its own ``upper_bound`` (:func:`_meets`) with no note (a note says
    it was cut or its bound does not apply)."""
    return not a.notes and _meets(a, a.upper_bound, runnable)


def _packed(inst: RoundInstance, options: MechanismOptions, seconds: float) -> Allocation | None:
    """``opt``'s packing route on its own (:mod:`~.opt.packing_route`) at the full-server
    super-machine's points, deployed and checked, within ``seconds``; ``None`` where it
    finds no packing or the round's tightest super-machine is the pooled one."""
    opt = Opt(dataclasses.replace(options, time_limit_s=seconds))
    ctx = opt.context(inst, time_limit_s=seconds)
    # (typed rounds have no full-server super-machine: bound_points gives the pooled one)
    if ctx is None or bound_points(ctx).name != FULL_SERVER_POINTS:
        return None
    try:
        plan = packing_plan(ctx, share=1.0)
        _, parts = deploy_plan(ctx, plan)
    except RoundingError as e:
        log.info("opt-exact on %s: packing: %s", inst.name, e)
        return None
    got = build_allocation(inst, OptExact.name, parts, solver=options.solver)
    bad = check_allocation(inst, got, fair_share=True)
    if bad:  # pragma: no cover - every deployed plan keeps the floors the points carry
        log.warning("opt-exact on %s: packing failed the check (%s)", inst.name, bad[0])
        return None
    return got


def _relabelled(
    inst: RoundInstance,
    heuristic: Allocation,
    upper: float | None,
    notes: list[str],
    runnable: Sequence[Job],
) -> Allocation:
    """``opt``'s allocation as ``opt-exact``'s, with the runnable set's bound only if it
    schedules exactly that set (``opt`` may return a typed pass's answer over another set,
    whose total the runnable set's bound does not cover: tiny 3-type round 194, 1.865
    against a bound of 1.712, used to fail the check and fall back to TUNE's 0.2)."""
    upper, notes = bound_for(inst, heuristic, upper, notes, runnable=runnable)
    return dataclasses.replace(
        heuristic, mechanism=OptExact.name, upper_bound=upper, notes=tuple(notes)
    )


def _pattern_stage(
    inst: RoundInstance,
    runnable: Sequence[Job],
    starts: Sequence[Mapping[str, Sequence[PlacementPart]]],
    left: float,
    options: MechanismOptions,
    retry: Callable[[], Allocation] | None = None,
    first_left: float | None = None,
    *,
    late_opt: Callable[[float], Allocation] | None = None,
    opt_seconds: float = 0.0,
    reserve_of: float | None = None,
    stop: Callable[[], bool] = lambda: False,
) -> tuple[CountingResult, list[Allocation]] | None:
    """Branch-and-price, then (unless it proved its answer) the counting model for the rest
    of the time from the best answer so far: the better answer with the smaller bound.
    None where branch-and-price does not apply (the counting model alone then).

    The first search gets ``first_left`` (default ``left``): where ``retry`` is given, what
    it gets at the limit where ``opt``'s cap begins to bind, so that it is that run's search.
    ``retry`` (``opt`` with the share its cap held back), where given and that search did not
    prove its answer with at least :data:`RETRY_SHARE` of ``left`` still to go, runs next, and
    a second search from the top runs with both answers among its starts (opt's incumbent,
    where better, prunes and tightens the reduced-cost fixing); its bound is valid too.

    ``late_opt`` (``opt`` with a given limit; where the clock cut the first ``opt``, which
    had ``opt_seconds``): where ``retry`` does not run, the first search keeps
    :data:`LATE_OPT_RESERVE` of ``left`` back, and if it did not prove its answer ``opt``
    runs again with all the time left, if that is more than it had (the counting model
    then does not run).  Returned with the search's result: the ``opt`` answers found
    here (the caller keeps the best).  The reserve is a share of ``reserve_of`` (default
    ``left``): the time left before the caller's packing step, so that a packing that finds
    nothing costs the search its time, not the late ``opt`` (split penalties 128 GPUs seed 3
    at 10 s: with the reserve taken after it, the late ``opt`` had less than the 2.2 s it
    needs for 58.8648 on one run of two, and the answer was the search's 57.61).

    ``stop`` (the ``opt`` beside the search answered at its bound) ends the searches early
    and skips what would follow them."""
    t0 = time.perf_counter()
    first_left = left if first_left is None else first_left
    budget = first_left * BOUND_SHARE
    if late_opt is not None:
        reserve = LATE_OPT_RESERVE * (left if reserve_of is None else reserve_of)
        budget = min(budget, max(left - reserve, left * (1 - LATE_OPT_RESERVE) / 2))
    first = _search(inst, runnable, starts, budget, options, stop)
    if first is None:
        return None
    later: list[Allocation] = []
    if stop():
        return first, later
    if (
        retry is not None
        and not first.proven
        and left - (time.perf_counter() - t0) > left * RETRY_SHARE
    ):
        more_opt = retry()
        later.append(more_opt)
        starts = [*_starts_of((more_opt,), runnable), *starts]
        rest = left - (time.perf_counter() - t0)
        second = _search(
            inst,
            runnable,
            [first.placements, *starts],
            rest * BOUND_SHARE,
            options,
            stop,
            plain_root=False,  # its plain root is the first search's: the same patterns
        )
        log.info(
            "opt-exact on %s: second search after opt's %.6g: %s",
            inst.name,
            more_opt.total_throughput,
            "none"
            if second is None
            else f"{second.objective} (bound {second.dual_bound}, "
            f"{second.status}; {second.detail})",
        )
        first = _merge(first, second)
    left -= time.perf_counter() - t0
    if first.proven or left <= 0.1 or stop():
        return first, later
    if late_opt is not None and not later:
        if left > opt_seconds:
            later.append(late_opt(left))
            log.info("opt-exact: opt again with %.3g s: %.6g", left, later[-1].total_throughput)
            return first, later
    return _counting_after(inst, runnable, first, starts, left, options), later


def _floor_pair_stage(
    inst: RoundInstance,
    runnable: Sequence[Job],
    starts: Sequence[Mapping[str, Sequence[PlacementPart]]],
    left: float,
    options: MechanismOptions,
    stop: Callable[[], bool],
    *,
    exact: bool = False,
) -> CountingResult | None:
    """Branch-and-price on the restriction, then on the relaxation from its answer
    (:data:`PAIR_HIGH_SHARE`), then the counting model for the rest from the best answer:
    the best allocation that keeps every floor, with the smallest valid bound.  With
    ``exact`` (the pattern master states the split) the second search is the exact one."""
    t0 = time.perf_counter()
    high = _search(inst, runnable, starts, left * PAIR_HIGH_SHARE, options, stop, floors="high")
    if high is None:
        return None
    best = high
    if not stop():
        rest = left - (time.perf_counter() - t0)
        low = _search(
            inst,
            runnable,
            [high.placements, *starts],
            rest * PAIR_LOW_SHARE,
            options,
            stop,
            floors="exact" if exact else "low",
        )
        best = _merge(high, low)
        log.info(
            "opt-exact: restriction %s, then the %s search: bound %s",
            high.objective,
            "exact" if exact else "relaxation's",
            best.dual_bound,
        )
    rest = left - (time.perf_counter() - t0)
    if best.proven or rest <= 0.1 or stop():
        return best
    return _counting_after(inst, runnable, best, starts, rest, options)


def _counting_until(
    inst: RoundInstance,
    runnable: Sequence[Job],
    options: MechanismOptions,
    left: float,
    starts: Sequence[Mapping[str, Sequence[PlacementPart]]],
    stop: Callable[[], bool] | None,
    early: PendingChild | None = None,
) -> CountingResult | None:
    """The counting MIP for ``left`` seconds from ``starts``; with ``stop`` (and a child
    process to run it in) it runs in a child polled every :data:`STOP_POLL_S`, killed and
    ``None`` returned once ``stop()`` holds.  Why: ``opt`` beside it can meet its own bound
    while the MIP still runs (mixed shapes 96 GPUs seed 1046 at 10 s: ``opt`` proves 90.09
    in 4.6 s, and the answer waited for the MIP's whole 10 s).  ``early``: the same MIP
    already running in a child (:func:`_early_counting`), waited for instead of a new one."""
    child = None
    if early is not None:
        try:
            child = early.child()
        except ChildFailed as e:  # pragma: no cover - a start that fails fails again below
            log.warning("opt-exact on %s: the early counting MIP: %s", inst.name, e)
    if child is None and (stop is None or not guard_available()):
        return solve_counting(
            inst,
            runnable,
            solver=options.solver,
            time_limit=left,
            threads=options.threads,
            warm_start=starts,
        )
    if child is None:
        child = start_child(
            solve_counting_call, _counting_args(inst, runnable, options, left, starts)
        )
    # the guard the MIP's own solves would have had (in the child they run unguarded)
    kill_at = time.perf_counter() + guard_deadline(left)
    while not child.ready():
        if stop is not None and stop():
            child.kill()
            return None
        if time.perf_counter() >= kill_at:
            break
        time.sleep(STOP_POLL_S)
    try:
        got: CountingResult = child.result(0.0)
        return got
    except (DeadlineExceeded, ChildFailed) as e:
        log.warning("opt-exact on %s: the counting MIP's child: %s", inst.name, e)
        return _no_answer(options.solver, left)


def _counting_args(
    inst: RoundInstance,
    runnable: Sequence[Job],
    options: MechanismOptions,
    left: float,
    starts: Sequence[Mapping[str, Sequence[PlacementPart]]],
) -> tuple[Any, ...]:
    """:func:`~.counting_fast.solve_counting_call`'s arguments: the MIP for ``left``
    seconds from ``starts``."""
    return (inst, runnable, options.solver, left, options.threads, starts)


def _starts_of(
    allocations: Sequence[Allocation], runnable: Sequence[Job]
) -> list[Mapping[str, Sequence[PlacementPart]]]:
    """The placements (job id -> parts) of those ``allocations`` that schedule exactly the
    runnable set, in their order: the MIP starts a search accepts."""
    ids = {j.id for j in runnable}
    return [
        {ja.id: ja.placement for ja in a.jobs}
        for a in allocations
        if {ja.id for ja in a.jobs} == ids
    ]


def _early_counting(
    inst: RoundInstance,
    runnable: Sequence[Job],
    options: MechanismOptions,
    left: float,
    tune: Allocation,
) -> PendingChild | None:
    """The counting MIP started in a child :data:`EARLY_DELAY_S` after ``opt``'s first run
    begins (from a thread: :class:`~synergy_opt.deadline.PendingChild`), from TUNE's answer,
    where the MIP is the search (no pattern search serves the round), the machine has two
    cores and :data:`EARLY_COUNTING` is on; None otherwise."""
    if not EARLY_COUNTING or usable_cores() < 2 or not guard_available():
        return None
    delay = min(EARLY_DELAY_S, left / 2)
    args = _counting_args(inst, runnable, options, left - delay, _starts_of((tune,), runnable))
    return PendingChild(solve_counting_call, args, delay)


def _no_answer(solver: str, seconds: float) -> CountingResult:
    """A counting solve that ended without an answer or a bound (its child failed or was
    killed)."""
    return CountingResult(
        TerminationStatus.TIME_LIMIT, None, None, None, seconds, 0.0, solver, 0, 0, {}
    )


def _counting_after(
    inst: RoundInstance,
    runnable: Sequence[Job],
    first: CountingResult,
    starts: Sequence[Mapping[str, Sequence[PlacementPart]]],
    left: float,
    options: MechanismOptions,
) -> CountingResult:
    """The counting model for the ``left`` seconds after a search, from the search's answer
    and ``starts``: the better answer of the two, with the smaller bound."""
    more = solve_counting(
        inst,
        runnable,
        solver=options.solver,
        time_limit=left,
        threads=options.threads,
        warm_start=[p for p in (first.placements, *starts) if p],
    )
    return _merge(first, more)


def _search(
    inst: RoundInstance,
    runnable: Sequence[Job],
    starts: Sequence[Mapping[str, Sequence[PlacementPart]]],
    time_limit: float,
    options: MechanismOptions,
    stop: Callable[[], bool] | None = None,
    *,
    plain_root: bool = True,
    floors: str = "exact",
) -> CountingResult | None:
    """One branch-and-price search as a :class:`CountingResult` (None where it does not
    apply); ``stop`` ends it early.  ``floors`` (:data:`~.branch_price.FLOOR_MODES`):
    "high" gives allocations and no bound, "low" a bound and only allocations that keep
    every floor."""
    found = branch_and_price(
        inst,
        runnable,
        time_limit=time_limit,
        warm_start=[p for p in starts if p],
        solver=options.solver,
        threads=options.threads,
        halt=stop,
        plain_root=plain_root,
        floors=floors,
    )
    if found is None:
        return None
    return CountingResult(
        TerminationStatus.OPTIMAL if found.proven else TerminationStatus.TIME_LIMIT,
        found.objective if found.placements else None,
        found.bound,
        None,
        found.runtime_s,
        0.0,
        "highs",
        0,
        0,
        found.placements,
        f"branch-and-price, {found.nodes} nodes"
        + (f", {found.refuted} leaves refuted by a packing proof" if found.refuted else "")
        + f": {found.stop}",
    )


def _merge(first: CountingResult, second: CountingResult | None) -> CountingResult:
    """The better answer of two solves of the same jobs, with the smaller of their bounds."""
    if second is None:
        return first
    better = second
    if first.objective is not None and (
        second.objective is None or first.objective > second.objective
    ):
        better = first
    bounds = [b for b in (first.dual_bound, second.dual_bound) if b is not None]
    # the note says where the bound reported comes from (the first's where the second's is
    # the same but for round-off: the MIP started from the search's answer)
    held = (
        second
        if first.dual_bound is None
        or (
            second.dual_bound is not None
            and second.dual_bound < first.dual_bound - 1e-9 * max(1.0, abs(first.dual_bound))
        )
        else first
    )
    return dataclasses.replace(
        better,
        dual_bound=min(bounds) if bounds else None,
        runtime_s=first.runtime_s + second.runtime_s,
        detail=held.detail,
    )
