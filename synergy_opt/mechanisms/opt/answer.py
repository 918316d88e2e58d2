"""The answer a round returns: ``opt``'s own, checked and compared with TUNE's, or TUNE's
relabelled, with the bound only where it applies and every fallback said in the notes.

Shared by ``opt`` and ``opt-exact``: both promise never to return less than TUNE, never an
answer the independent checker refuses, and a bound only for the whole runnable set.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence

from synergy_opt.check import check_allocation
from synergy_opt.mechanisms.packing import max_single_server_gpus, select_runnable
from synergy_opt.mechanisms.tune import TuneAnswer
from synergy_opt.types import THROUGHPUT_EPS, Allocation, Job, RoundInstance, build_allocation

log = logging.getLogger(__name__)


def tune_fallback(
    inst: RoundInstance,
    tune: Allocation | TuneAnswer,
    name: str,
    solver: str,
    upper: float | None,
    notes: Sequence[str],
    t0: float,
    *,
    runnable: Sequence[Job] | None = None,
    level: int = logging.WARNING,
) -> Allocation:
    """TUNE's allocation relabelled as ``name``, with the bound and the reasons.

    The bound covers the runnable set; if TUNE left part of it unscheduled the bound does
    not apply to TUNE's smaller set (a job's fair-share floor can cost others more than the
    job adds), so it is dropped and the note says why.
    """
    if not isinstance(tune, Allocation):
        tune = tune.allocation()
    upper, notes = bound_for(inst, tune, upper, notes, runnable=runnable)
    for n in notes:
        log.log(level, "%s on %s: %s", name, inst.name, n)
    return dataclasses.replace(
        tune,
        mechanism=name,
        solver=solver,
        upper_bound=upper,
        notes=tuple(notes),
        solve_seconds=time.perf_counter() - t0,
    )


def bound_for(
    inst: RoundInstance,
    alloc: Allocation,
    upper: float | None,
    notes: Sequence[str],
    *,
    runnable: Sequence[Job] | None = None,
) -> tuple[float | None, list[str]]:
    """The runnable set's bound if ``alloc`` schedules exactly that set, else none (and why).

    ``runnable``: ``select_runnable(inst)`` when the caller has it already."""
    if runnable is None:
        runnable = select_runnable(inst)
    if upper is not None and {j.id for j in alloc.jobs} != {j.id for j in runnable}:
        return None, [*notes, "no upper bound: only part of the runnable set is scheduled"]
    return upper, list(notes)


def better_of(
    inst: RoundInstance,
    mine: Allocation,
    tune: Allocation | TuneAnswer,
    name: str,
    t0: float,
    *,
    checked: bool = False,
    runnable: Sequence[Job] | None = None,
    level: int = logging.WARNING,
    tune_bound: float | None = None,
) -> Allocation:
    """Return ``mine`` unless it breaks a rule or TUNE's total is higher.

    ``tune``: TUNE's allocation, or its round (:class:`~synergy_opt.mechanisms.tune.TuneAnswer`:
    the allocation built only if it is returned, TUNE itself perhaps not run yet).

    ``tune_bound``: a bound on any allocation of part of the runnable set
    (:func:`~.bounds.subset_bound`); where ``mine`` reaches it TUNE cannot beat ``mine``
    and its total is not read (so TUNE need not run).

    ``checked``: ``mine`` relabels an answer the checker already passed for a round with
    the same cluster and job classes (same capacities, floors and demands), so the check
    is not repeated.

    The bound covers the runnable set, so it is dropped (and the notes say why) from an
    answer that schedules less *before* the check: the checker refuses a total above the
    claimed bound, and such an answer can exceed it (fuzz seed 174: ``opt``'s 2.7418 on
    part of the runnable set against the whole set's bound 2.1418 was refused, and TUNE's
    0.5418 returned).
    """
    claimed = mine.upper_bound  # the runnable set's bound: TUNE's answer may schedule it
    upper, notes = bound_for(inst, mine, claimed, mine.notes, runnable=runnable)
    mine = dataclasses.replace(mine, upper_bound=upper)
    bad = [] if checked else check_allocation(inst, mine, fair_share=True)
    note = None
    if bad:
        note = f"fell back to tune: rounded solution failed the check ({bad[0]})"
    elif (
        tune_bound is None or mine.total_throughput + THROUGHPUT_EPS < tune_bound
    ) and tune.total_throughput > mine.total_throughput + THROUGHPUT_EPS:
        note = (
            f"returned tune's allocation: total {tune.total_throughput:.6g} beats the rounded "
            f"{name} solution's {mine.total_throughput:.6g}"
        )
    if note is not None:
        return tune_fallback(
            inst,
            tune,
            name,
            mine.solver or "",
            claimed,
            [note],
            t0,
            runnable=runnable,
            level=level,
        )
    for n in notes[len(mine.notes) :]:
        log.log(level, "%s on %s: %s", name, inst.name, n)
    return dataclasses.replace(mine, notes=tuple(notes), solve_seconds=time.perf_counter() - t0)


def capped(
    inst: RoundInstance, out: Allocation, cap: int, level: int = logging.WARNING
) -> Allocation:
    """``out`` within ``--max-fragmented`` ``cap``: the user's cap is a constraint, kept
    "at a known cost" even where every route failed it and the answer is a fallback
    (TUNE's, or ``tune-typed``'s on typed rounds, which spread as they need).  Spread jobs
    beyond the cap, least important first, are left waiting; jobs larger than every server
    they may use are not counted (they cannot run otherwise).  Found by
    bench/fuzz_rounds.py: a typed 4-server round whose eight runnable jobs need one spread,
    ``--max-fragmented 0``, answered with that spread and no note."""
    servers = inst.cluster.servers
    jobs = {j.id: j for j in inst.jobs}
    spread = [
        ja
        for ja in out.jobs
        if len(ja.placement) > 1
        and jobs[ja.id].gpus <= max_single_server_gpus(servers, jobs[ja.id])
    ]
    if len(spread) <= cap:
        return out
    order = {j.id: i for i, j in enumerate(inst.jobs)}
    dropped = [ja.id for ja in sorted(spread, key=lambda ja: order[ja.id])[cap:]]
    waiting = set(dropped)
    note = (
        f"--max-fragmented {cap}: left {', '.join(dropped)} waiting (every plan within the "
        f"cap failed, and the fallback spread {len(spread)} jobs)"
    )
    log.log(level, "%s on %s: %s", out.mechanism, inst.name, note)
    keep = {ja.id: ja.placement for ja in out.jobs if ja.id not in waiting}
    return build_allocation(
        inst,
        out.mechanism,
        keep,
        solver=out.solver,
        upper_bound=None,  # a bound covers the runnable set, which this no longer schedules
        solve_seconds=out.solve_seconds,
        notes=(*out.notes, note, "no upper bound: only part of the runnable set is scheduled"),
    )
