"""Bounds ``opt`` reports beside its answer, each valid for every allocation of the
runnable set that keeps the floors: the split-aware super-machine's where no split lowers
a floor below the one it used, else the same model at the lowest floors any split allows;
the typed super-machine's on typed rounds; on small rounds the LP relaxation of the
per-server counting model, which is often far tighter than the pooled super-machine; and,
where the routes miss the target and no job may spread, or one may at a split penalty on
at most :data:`PATTERN_SPREAD_MAX_SERVERS` servers, the pattern LP's (column generation
over whole servers' contents, :func:`pattern_lp_bound`).

One more, :func:`subset_bound`, is valid for allocations of *part* of the runnable set too:
``opt`` uses it to skip TUNE, whose answer may leave jobs waiting."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from synergy_opt.check import forced_split_factor
from synergy_opt.formulations.fast import build_super_machine_split, class_key
from synergy_opt.formulations.typed_fast import lowest_fair_share, super_machine_matrix
from synergy_opt.matrix import MatrixModel
from synergy_opt.mechanisms.base import MechanismOptions
from synergy_opt.mechanisms.opt.context import OPT_HIGHS_OPTIONS, Clock
from synergy_opt.solve import DEFAULT_REL_GAP, SolveResult, TerminationStatus, solve_matrix
from synergy_opt.types import THROUGHPUT_EPS, Job, PlacementPart, RoundInstance

if TYPE_CHECKING:
    from synergy_opt.formulations.counting_fast import CountingMatrix

log = logging.getLogger(__name__)

#: The counting model's LP bound is computed on rounds of at most this many servers (128
#: GPUs of 8-GPU servers): 0.1 s there, seconds at 512 GPUs of the multi-GPU mix.
COUNTING_BOUND_MAX_SERVERS: int = 16
#: A count row's dual at or above minus this counts as non-negative (HiGHS's dual
#: feasibility tolerance is 1e-7).
SUBSET_DUAL_TOL: float = 1e-9
#: Added (relative) to the strict-subset bound read from a fractional relaxation's duals:
#: they are optimal only to HiGHS's tolerances (1e-7), so the bound is taken that much
#: higher (a higher bound only runs TUNE where it might not have been needed).
SUBSET_LP_MARGIN: float = 1e-7
#: Rounds of pricing of ``opt``'s pattern bound (:func:`pattern_lp_bound`): a count, not a
#: time, so that the bound and the search it ends are the same on every machine.  The
#: memory-scarce rounds of ``family_round`` converge in 9-11 (128 and 512 GPUs).
PATTERN_BOUND_ITERATIONS: int = 40
#: The same count where a job may spread at a split penalty: there the master's spread slots
#: take longer to converge (split penalties 128 GPUs seeds 0-23: 19-112 rounds, 0.2-4.8 s),
#: and a bound cut short of convergence (the Lagrangian one) is far above the round's
#: (seeds 0, 1, 2, 3, 7, 8, 11 at 40 rounds from TUNE's answer: 59-103 against best
#: known answers of 56-83).
PATTERN_SPREAD_ITERATIONS: int = 150
#: ... and only on rounds of at most this many servers: at 512 GPUs (64 servers) the
#: pattern LP took 139-273 rounds and 15-53 s and was never below the split-aware
#: super-machine (seeds 0-2), where at 128 GPUs it is below it on 12 of seeds 0-23, by up
#: to 1.1 % (seed 11: 68.54 against 69.26, the optimum 68.27).
PATTERN_SPREAD_MAX_SERVERS: int = 16
#: Under a time limit, the share of what is left that the pattern bound may take.
PATTERN_BOUND_SHARE: float = 0.25


def split_floor_bound(
    inst: RoundInstance,
    runnable: Sequence[Job],
    upper: float,
    clock: Clock,
    options: MechanismOptions,
    used: dict[tuple[object, ...], float],
    lowest: dict[tuple[object, ...], float],
) -> float | None:
    """The split-aware super-machine's bound with the floors no split goes below.

    Under the per-server rule a spread job's floor is read at its servers' summed whole
    cores, which can fall below every whole job's (two 1-GPU parts at 3.5 cores per GPU
    hold 6 cores, one 2-GPU part 7): the points the guiding model drops there may carry
    the optimum, so its value bounds nothing.  Where no job's lowest floor
    (:func:`~synergy_opt.formulations.typed_fast.lowest_fair_share`) is below the one
    the model used (``used``, per job class), ``upper`` stands; otherwise the model is
    solved again on those.  ``lowest``: the per-class memo of lowest floors (filled here)."""
    for job in runnable:  # floors depend only on the class (and the cluster and rule)
        key = class_key(job)
        if key not in lowest:
            lowest[key] = lowest_fair_share(inst, job) * forced_split_factor(inst, job)
    if all(lowest[k] >= used[k] - THROUGHPUT_EPS for k in {class_key(j) for j in runnable}):
        return upper
    low = {j.id: lowest[class_key(j)] for j in runnable}
    res = solve_matrix(
        build_super_machine_split(inst, runnable, low).matrix,
        options.solver,
        time_limit=clock.left(),
        threads=options.threads,
        rel_gap=DEFAULT_REL_GAP,
    )
    log.info("split-floor super-machine bound %s (%s)", res.dual_bound, res.status)
    return res.dual_bound if res.status is TerminationStatus.OPTIMAL else None


def typed_bound(
    inst: RoundInstance, runnable: Sequence[Job], clock: Clock, options: MechanismOptions
) -> float | None:
    """The typed super-machine's dual bound over the runnable set (one GPU-type choice
    per job, ``formulations/super_machine.md``), ``None`` when the solve gives none."""
    res = solve_matrix(
        super_machine_matrix(inst, runnable),
        options.solver,
        time_limit=clock.left(),
        threads=options.threads,
        rel_gap=DEFAULT_REL_GAP,
        highs_options=OPT_HIGHS_OPTIONS,
    )
    log.info("typed super-machine bound %s (%s)", res.dual_bound, res.status)
    return res.dual_bound


def counting_lp_bound(
    inst: RoundInstance,
    runnable: Sequence[Job],
    upper: float,
    solve: Callable[[MatrixModel], SolveResult],
    counting: Callable[[], CountingMatrix] | None = None,
) -> float:
    """min(``upper``, LP relaxation of the per-server counting model) on rounds of at most
    :data:`COUNTING_BOUND_MAX_SERVERS` servers (beyond, the LP costs seconds).
    ``counting``: gives the counting model with exact floors, built once for the round;
    used where every job asks for one GPU (no floor depends on a split, so its data are
    the relaxation's).

    It bounds every allocation of the runnable set that keeps each job's floor, typed
    rounds included, because it relaxes the exact per-server model
    (:mod:`synergy_opt.formulations.counting`)."""
    if len(inst.cluster.servers) > COUNTING_BOUND_MAX_SERVERS:
        return upper
    from synergy_opt.formulations.counting import counting_data
    from synergy_opt.formulations.counting_fast import build_counting_matrix, relaxed_matrix

    if counting is not None and all(j.gpus == 1 for j in runnable):
        cm = counting()
    else:
        # The relaxation's spread floors (the lowest a split allows) make it a bound.
        cm = build_counting_matrix(counting_data(inst, runnable, spread_floor="low"))
    if not cm.data["bound_valid"]:
        return upper
    lp = solve(relaxed_matrix(cm))
    if lp.status is TerminationStatus.OPTIMAL and lp.dual_bound is not None:
        return min(upper, lp.dual_bound)
    return upper


def subset_bound(mm: MatrixModel, res: SolveResult) -> float | None:
    """A bound on every allocation of the runnable set *or part of it* (each scheduled job
    at or above its floor) from the super-machine's solve, else ``None``.

    ``res``: the super-machine's LP-first solve (``solve_matrix(..., lp_first=True)``).
    An allocation of part of the set is a solution of the same model with the count rows
    (4) at ``m_k <= n_k`` instead of ``n_k``.  Any dual solution of the LP relaxation stays
    feasible for every right-hand side, so with count-row duals ``u`` (and LP optimum
    ``z_LP``) such a solution is worth at most ``z_LP - sum_k u_k (n_k - m_k)``:

    - an integral LP vertex (``res.row_dual``): where every ``u_k >= 0`` no subset beats
      ``z_LP``, the optimum itself;
    - a fractional one (the MIP ran after it; ``res.relaxation_row_dual``): the whole set
      is bounded by the MIP's proven bound and, where every ``u_k >= 0``, a strict subset
      (some ``m_k <= n_k - 1``) by ``z_LP - min_k u_k``; the larger of the two.  On the
      multi-GPU 128-GPU rounds whose vertex is fractional that is usually the MIP's optimum
      (seed 0: 84.755 - 0.1 against 84.68).

    Where some ``u_k < 0`` dropping a job of class k may pay (fuzz seed 174: a subset beat
    the whole set's bound), so there is no claim.  Only for the pooled super-machine of
    :func:`~.super_machine.split_super_machine` under the cluster-wide shares; the caller
    checks that (per-server shares and typed rounds use other bounds).
    """
    if res.status is not TerminationStatus.OPTIMAL:
        return None
    if res.objective is None or res.dual_bound is None:
        return None
    rows = [i for i, name in enumerate(mm.row_names) if name.startswith("eq4[")]
    if not rows:
        return None
    if res.row_dual is not None:
        duals = _count_duals(mm, res.row_dual, rows)
        return None if duals is None else res.dual_bound
    if res.relaxation_row_dual is None or res.relaxation_objective is None:
        return None
    duals = _count_duals(mm, res.relaxation_row_dual, rows)
    if duals is None:
        return None
    z_lp = res.relaxation_objective
    strict = z_lp - float(duals.min()) + SUBSET_LP_MARGIN * max(1.0, abs(z_lp))
    return max(res.dual_bound, strict)


def _count_duals(mm: MatrixModel, row_dual: np.ndarray, rows: list[int]) -> np.ndarray | None:
    """The count rows' duals, or ``None`` where one is negative (beyond the tolerance) or
    not finite; those within the tolerance below 0 count as 0."""
    if len(row_dual) != mm.num_rows:
        return None
    duals = row_dual[rows]
    if not bool(np.all(np.isfinite(duals))) or float(duals.min()) < -SUBSET_DUAL_TOL:
        return None
    return np.maximum(duals, 0.0)


def pattern_lp_bound(
    inst: RoundInstance,
    runnable: Sequence[Job],
    best: Mapping[str, Sequence[PlacementPart]],
    clock: Clock,
    max_iterations: int = PATTERN_BOUND_ITERATIONS,
    ceiling: float | None = None,
    counting: CountingMatrix | None = None,
) -> tuple[float | None, bool]:
    """The pattern LP's bound on allocations of ``runnable`` (column generation over each
    server's integral contents, ``formulations/patterns.md``), started from ``best`` (an
    allocation's placements) and stopped once it proves ``best`` optimal, after
    ``max_iterations`` rounds of pricing, where it cannot come below ``ceiling`` (a
    bound known already), or at :data:`PATTERN_BOUND_SHARE`
    of the clock's time left; ``None`` where the model does not state the round (typed
    matrices) or no round of pricing finished.  Also whether the clock stopped it (the
    bound then depends on the machine's speed).

    Why: where memory or cores are scarce per server the pooled super-machine is loose
    (memory-scarce 128 GPUs seed 0: 122.6 against the optimum 97.4, which ``opt`` finds at
    once), and ``opt`` spent 200 ms of neighbourhood search failing to close that gap and
    then reported it; the pattern bound proves 97.4 in about 60 ms."""
    from synergy_opt.formulations.patterns_fast import round_bound

    left = clock.left()
    limit = None if left is None else left * PATTERN_BOUND_SHARE
    got = round_bound(
        inst,
        runnable,
        time_limit=limit,
        warm_start=[best],
        max_iterations=max_iterations,
        ceiling=ceiling,
        counting=counting,
    )
    if got is None:
        return None, False
    pb = got[0]
    cut = limit is not None and not pb.converged and pb.runtime_s >= limit
    log.debug(
        "pattern bound %s after %d rounds (%.3f s, converged %s)",
        pb.bound,
        pb.iterations,
        pb.runtime_s,
        pb.converged,
    )
    return pb.bound, cut
