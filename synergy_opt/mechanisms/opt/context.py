"""The frozen round context every OPT rounding route reads, and the plan type they return.

One object instead of padded signatures: a route needs some of the round, TUNE's answer, the
super-machine's classes and points, the fragmentation cap and the solver options; it takes
what it needs from here and returns a :data:`GpuPlan`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

import numpy as np

from synergy_opt.check import fair_share_floor
from synergy_opt.formulations.fast import DemandClass, JobClass
from synergy_opt.matrix import MatrixModel
from synergy_opt.mechanisms.base import MechanismOptions
from synergy_opt.mechanisms.packing import max_single_server_gpus
from synergy_opt.mechanisms.tune import TuneAnswer
from synergy_opt.solve import DEFAULT_REL_GAP, SolveResult, TerminationStatus, solve_matrix
from synergy_opt.types import (
    Allocation,
    Job,
    PlacementPart,
    RoundInstance,
    ThroughputMatrix,
    lowest_matrix,
)

if TYPE_CHECKING:
    from synergy_opt.formulations.counting_fast import CountingMatrix
    from synergy_opt.mechanisms.opt.full_servers import FullServerOptimum

Point = tuple[int, float, float]  # (cpus, mem_gb, throughput)
#: HiGHS options for OPT's MIPs.  HiGHS's feasibility-jump heuristic costs about 3 ms per
#: MIP even where the root LP is integral: 128-GPU single-GPU super-machines (26 columns
#: after presolve) took 3.8 ms with it, 0.8 ms without, 512-GPU multi-GPU ones 4.8 -> 1.8
#: ms, the same optima on every round measured.
OPT_HIGHS_OPTIONS: Mapping[str, bool | int | float | str] = MappingProxyType(
    {"mip_heuristic_run_feasibility_jump": False}
)
#: How every note of an answer decided against the clock begins (docs/formats.md, general
#: rules): passes that replace an answer's notes carry these over (:func:`time_notes`).
TIME_NOTE_PREFIX = "time limit reached in "


def time_note(stops: Sequence[str]) -> str:
    """The note of an answer some of whose solves (named by model) stopped at the time
    limit: such an answer may differ between runs and machines."""
    names = ", ".join(sorted(set(stops)))
    return (
        f"{TIME_NOTE_PREFIX}{len(stops)} solve(s) ({names}): the answer depends on "
        "the machine's speed (without a time limit it is reproducible)"
    )


def time_notes(notes: Sequence[str]) -> list[str]:
    """The time-limit notes among ``notes``."""
    return [n for n in notes if n.startswith(TIME_NOTE_PREFIX)]


#: Whole GPUs per server for every job: job id -> ((server index, GPUs), ...), server order.
GpuPlan = Mapping[str, tuple[tuple[int, int], ...]]
#: A plan as a set, for remembering plans (dict order is not part of a plan).
PlanKey = frozenset[tuple[str, tuple[tuple[int, int], ...]]]


def plan_key(plan: GpuPlan) -> PlanKey:
    """``plan`` as a hashable set of (job, parts)."""
    return frozenset(plan.items())


def spreads_at_penalty(ctx: RoundContext) -> bool:
    """Whether some runnable job may spread at a split penalty (where the cheaper routes
    miss the spreads that pay, and the penalised routes earn a larger model and more
    nodes)."""
    return any(j.gpus >= 2 and j.split_penalty < 1.0 for j in ctx.runnable)


def gpu_parts(inst: RoundInstance, gpus: Sequence[tuple[int, int]]) -> list[PlacementPart]:
    """(server index, GPUs) pairs as placement parts, for reading floors (cores and memory
    do not enter one: under the per-server rule it is read at the sum of the servers'
    shares)."""
    servers = inst.cluster.servers
    return [PlacementPart(servers[s].name, k, 0, 0.0) for s, k in gpus]


def gpu_plan(inst: RoundInstance, placements: Mapping[str, Sequence[PlacementPart]]) -> GpuPlan:
    """An allocation's placements as a :data:`GpuPlan` (cores and memory dropped: the
    mechanism decides them again on the plan), each job's parts in server order."""
    index = {server.name: i for i, server in enumerate(inst.cluster.servers)}
    return {
        jid: tuple(sorted((index[p.server], p.gpus) for p in parts))
        for jid, parts in placements.items()
    }


def whole_share_floor(inst: RoundInstance, job: Job, server: int) -> float:
    """``job``'s fair-share throughput whole on ``server``: under the per-server rule on
    mixed shapes that server's share, not the smallest over the servers the job may use
    that the super-machine pools (the re-optimisation and the neighbourhood MIPs take it as
    a whole job's floor there)."""
    return inst.fair_share_throughput_on(job, gpu_parts(inst, ((server, job.gpus),)))


def placed_floor(inst: RoundInstance, job: Job, gpus: Sequence[tuple[int, int]]) -> float:
    """The checker's floor of ``job`` with ``gpus`` (server index, GPUs) pairs: under the
    per-server rule on mixed shapes a whole job's is its server's, a spread job's its
    split's (forced-split penalty included)."""
    return fair_share_floor(inst, job, gpu_parts(inst, gpus))[1]


def placed_matrix(inst: RoundInstance, job: Job, servers: Iterable[int]) -> ThroughputMatrix:
    """``job``'s matrix on ``servers`` (indices), as the checker reads it: its type's
    there, the pointwise-lowest where they hold several types (a job runs at its slowest
    worker's pace).  OPT's routes plan on the reference matrix; the moves that re-decide
    points on a plan read this one, so a point they keep is worth on the round what they
    counted (fuzz seed 10113: a 3-GPU job spread over P100 servers at a point chosen on
    its V100 matrix fell below its floor there)."""
    if job.sensitivity_by_type is None:
        return job.sensitivity
    return lowest_matrix(job.matrices_for(inst.cluster.servers[s].gpu_type for s in servers))


class RoundingError(RuntimeError):
    """A route could not turn the fractional solution into whole GPUs for every job."""


@dataclass(frozen=True, slots=True)
class Clock:
    """Start time and optional overall limit of one ``allocate`` call."""

    start: float
    limit: float | None

    @classmethod
    def started(cls, limit: float | None) -> Clock:
        """A clock starting now."""
        return cls(time.perf_counter(), limit)

    def left(self) -> float | None:
        """Seconds left of the limit (at least 1 ms), or ``None`` without a limit."""
        if self.limit is None:
            return None
        return max(self.limit - (time.perf_counter() - self.start), 1e-3)


#: :attr:`RoundContext.memo`'s key for the best deployed plan before each late route, kept
#: only where it is worth at least :data:`BEST_SO_FAR_MIN_SHARE` of the super-machine
#: optimum (the packing route starts a second try from it).
BEST_SO_FAR: str = "best so far"
#: A plan further from the bound is too far from a packing to guide one: on 9 mixed-shape
#: rounds at a 20-s limit (96-128 GPUs, seeds 1006-1298) whose first packing ran out of
#: budget, the try from the best plan so far found the bound's packing on all 6 where that
#: plan was at 0.971-0.994 of it (in 0.03-1.3 deterministic units) and on none of the 3 at
#: 0.955-0.964, each of which lost its full budget (2.3-3 s) to the search after it
#: (96 GPUs seed 1046: 89.09 -> 88.45 in two runs of three).
BEST_SO_FAR_MIN_SHARE: float = 0.97


@dataclass(frozen=True, slots=True)
class RoundContext:
    """Everything a rounding route may read about one round (never mutated)."""

    inst: RoundInstance
    runnable: tuple[Job, ...]
    #: TUNE's answer to the round (run, and its allocation built, only if read).
    tune_round: TuneAnswer
    classes: tuple[JobClass, ...]
    demands: tuple[DemandClass, ...]
    #: The super-machine's grid point per runnable job (priority order inside a class).
    points: Mapping[str, Point]
    #: Jobs the split-aware super-machine spreads (their points may exceed one server).
    spread_ids: frozenset[str]
    #: The super-machine optimum (the value a route's plan reaches if the points deploy).
    optimum: float
    #: Most jobs that may span servers: min(--max-fragmented, 3s).
    max_fragmented: int
    options: MechanismOptions
    clock: Clock
    #: Steps the caller switched off, by name (``opt-exact`` runs the whole search the
    #: ``pattern-dive`` step runs the first part of, so its ``opt`` leaves that step out).
    routes_off: frozenset[str] = frozenset()
    #: Plans a route shares with another (the placement LP's, used by two routes; the best
    #: deployed plan so far, :data:`BEST_SO_FAR`, which the late routes may start from).
    memo: dict[str, GpuPlan] = field(default_factory=dict, compare=False, repr=False)
    #: Allocations a route found together with its plan, by plan (the ``pattern-root``
    #: route's integer master chooses points as well as servers): the plan's
    #: re-optimisation starts from them, so it never ends below what the route found
    #: (single-GPU 128 GPUs seed 12: the route found 166.86, the re-optimisation, stopping
    #: within its 1e-4 gap, 166.85, and the neighbourhood search then took 0.35 s).
    found_with: dict[PlanKey, Mapping[str, Sequence[PlacementPart]]] = field(
        default_factory=dict, compare=False, repr=False
    )
    #: The full-server super-machine's solve, per ``bound`` flag (:mod:`.full_servers`): the
    #: counting route, the late target and the reported bound each ask for it, one MIP.
    full_servers: dict[bool, FullServerOptimum | None] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )
    #: The counting model of the runnable jobs (exact floors), built where first asked
    #: (:meth:`counting_matrix`).
    _counting: list[CountingMatrix] = field(
        default_factory=list, init=False, compare=False, repr=False
    )
    #: Gather moves already tried this round (:mod:`.gather_move`), as (plan, servers
    #: re-decided): the search runs from several starts, which often lead to the same
    #: plans, and a try is deterministic in them.
    gathers_tried: set[object] = field(default_factory=set, compare=False, repr=False)
    #: Models whose solve stopped at the round's time limit: the answer then depends on the
    #: machine's speed, which the answer's notes say (without a limit every stop is a node
    #: limit, and the same inputs give the same bytes).
    time_stops: list[str] = field(default_factory=list, compare=False, repr=False)
    #: Most GPUs one allowed server has, per GPU-type restriction (``must_spread`` asks for
    #: every job, often per route and per job: a scan of all servers each time was 0.5 ms
    #: of a 512-GPU round's placement-LP route alone).
    _largest: dict[tuple[str, ...] | None, int] = field(
        default_factory=dict, compare=False, repr=False
    )

    def solve(
        self,
        mm: MatrixModel,
        *,
        rel_gap: float = DEFAULT_REL_GAP,
        vertex: bool = True,
        node_limit: int | None = None,
        start: np.ndarray | None = None,
        highs_options: Mapping[str, bool | int | float | str] | None = None,
        time_share: float = 1.0,
        stop_past: float | None = None,
    ) -> SolveResult:
        """Solve ``mm`` with the round's solver options and ``time_share`` of what is left of
        its time (``start``: a feasible solution the MIP starts from; ``highs_options``: set
        on HiGHS after :data:`OPT_HIGHS_OPTIONS`; ``stop_past``: as
        :func:`~synergy_opt.solve.solve_matrix`'s)."""
        options = {**OPT_HIGHS_OPTIONS, **(highs_options or {})}
        left = self.clock.left()
        res = solve_matrix(
            mm,
            self.options.solver,
            time_limit=None if left is None else left * time_share,
            threads=self.options.threads,
            rel_gap=rel_gap,
            vertex=vertex,
            node_limit=node_limit,
            start=start,
            highs_options=options,
            stop_past=stop_past,
        )
        if left is not None and res.status is TerminationStatus.TIME_LIMIT:
            self.time_stops.append(mm.name)
        return res

    def counting_matrix(self) -> CountingMatrix:
        """The counting model of the runnable jobs with exact floors, built once a round:
        on one-GPU rounds the ``pattern-root`` route, the pattern bound and the counting
        LP's bound each asked for it (its data and matrix took 7 ms of each on single-GPU
        128 GPUs rounds, 30 ms at 512)."""
        if not self._counting:
            from synergy_opt.formulations.counting import counting_data
            from synergy_opt.formulations.counting_fast import build_counting_matrix

            self._counting.append(build_counting_matrix(counting_data(self.inst, self.runnable)))
        return self._counting[0]

    @property
    def tune(self) -> Allocation:
        """TUNE's allocation of the round."""
        return self.tune_round.allocation()

    def must_spread(self, job: Job) -> bool:
        """Whether no single server the job may use has its GPUs."""
        types = job.gpu_types
        largest = self._largest.get(types)
        if largest is None:
            largest = self._largest[types] = max_single_server_gpus(self.inst.cluster.servers, job)
        return job.gpus > largest

    def may_spread(self, job: Job) -> bool:
        """Whether ``job`` may spread: spreading costs it nothing, the super-machine spreads
        it (its gain beats the split penalty), or it has to."""
        return job.gpus >= 2 and (
            job.split_penalty >= 1.0 or job.id in self.spread_ids or self.must_spread(job)
        )
