"""OPT on typed rounds: the typed super-machine picks each job's GPU type.

OPT's routes place jobs by one matrix each.  On a round whose jobs carry per-type matrices
the typed super-machine (``formulations/super_machine.md``, "GPU types") chooses a type and
a grid point per job together; fixing each job to its chosen type (``gpu_types`` = that
type, matrix = its matrix there) gives a round the routes handle as they are, and its
placements are re-valued on the original round.  A job the model spans across types keeps
its usable types and is read by its pointwise-lowest matrix (what spanning guarantees).
The answer is checked on the original round and kept only if it beats OPT's plain answer
and ``tune-typed``'s (never below either).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import cast

from synergy_opt.check import check_allocation
from synergy_opt.errors import ValidationError
from synergy_opt.formulations.typed_fast import (
    ACROSS,
    UNTYPED,
    TypedKnapsackModel,
    build_typed_super_machine_fast,
    gpu_pools,
)
from synergy_opt.mechanisms.base import MechanismOptions, make_mechanism
from synergy_opt.mechanisms.opt.context import time_note, time_notes
from synergy_opt.solve import DEFAULT_REL_GAP, TerminationStatus, solve_matrix
from synergy_opt.types import (
    THROUGHPUT_EPS,
    Allocation,
    Job,
    RoundInstance,
    build_allocation,
    lowest_matrix,
)

log = logging.getLogger(__name__)


def fix_types(
    inst: RoundInstance, ksm: TypedKnapsackModel, picks: Sequence[Sequence[tuple]]
) -> RoundInstance | None:
    """The round with each runnable job fixed to its picked type (``None`` if invalid).

    Within a class, higher-priority jobs take the higher-valued picks (as OPT's demand
    classes do).  A job the model spans across types (its rows are only the whole
    cluster's, so the model is free to span where one type would do) is fixed, in priority
    order, to the usable type with GPUs left after the whole-type picks where its matrix
    is highest at its point; failing that it keeps its usable types, read by its lowest
    matrix, as do jobs outside the model.  No job keeps per-type matrices."""
    pools = gpu_pools(inst)
    free = {p.label: p.gpus for p in pools}
    chosen: dict[str, str | None] = {}
    point: dict[str, tuple[int, float]] = {}
    for cl, pk in zip(ksm.classes, picks, strict=True):
        members = list(cl.members)
        for pool, (c, m, _), n in sorted(pk, key=lambda p: (-p[1][2], p[0])):
            take, members = members[:n], members[n:]
            for job in take:
                point[job.id] = (c, m)
                chosen[job.id] = None if pool.startswith(ACROSS) or pool == UNTYPED else pool
                if chosen[job.id] is not None:
                    free[pool] -= job.gpus
    for job in inst.jobs:  # spanning picks, priority order
        if job.id not in chosen or chosen[job.id] is not None:
            continue
        c, m = point[job.id]
        fits = [
            p.label
            for p in pools
            if p.label != UNTYPED
            and free[p.label] >= job.gpus
            and (job.gpu_types is None or p.label in job.gpu_types)
        ]
        if fits:
            best = max(fits, key=lambda t: job.matrix_for(t).lookup(c, m))
            chosen[job.id] = best
            free[best] -= job.gpus
    jobs = tuple(
        _spanning(inst, j)
        if chosen.get(j.id) is None
        else dataclasses.replace(
            j,
            sensitivity=j.matrix_for(chosen[j.id]),
            sensitivity_by_type=None,
            gpu_types=(cast(str, chosen[j.id]),),
        )
        for j in inst.jobs
    )
    try:
        return RoundInstance(inst.name, inst.cluster, jobs, inst.fair_share_rule)
    except ValidationError as exc:  # pragma: no cover - pools hold each whole pick's GPUs
        log.info("typed type choice skipped: %s", exc)
        return None


def _spanning(inst: RoundInstance, job: Job) -> Job:
    if job.sensitivity_by_type is None:
        return job
    low = lowest_matrix(inst.usable_matrices(job))
    return dataclasses.replace(job, sensitivity=low, sensitivity_by_type=None)


def choose_types(
    inst: RoundInstance,
    runnable: Sequence[Job],
    name: str,
    tune: Allocation,
    options: MechanismOptions,
    solve_fixed: Callable[[RoundInstance], Allocation],
    solve_plain: Callable[[], Allocation],
    *,
    plain_always: bool = False,
) -> Allocation:
    """The best checked allocation of: OPT on the round with types fixed by the typed
    super-machine (``solve_fixed``), TUNE's (``tune``) and ``tune-typed``'s, labelled
    ``name``.

    OPT's plain pass (``solve_plain``: its routes on each job's reference matrix, floored
    by TUNE) runs only where the fixed round gives no checked answer of the whole runnable
    set (``plain_always``: on every round, to measure it).  It used to run first on every
    typed round: on 84 generated typed rounds of 2-8 servers it won once (a fixed round
    whose answer left jobs waiting), it fell back to TUNE on every 16-server round with
    split penalties and cost most of OPT's time there (13.6 of 14.1 s on one).

    Every time-limit note of the candidates (and the typed super-machine's own stop) is
    kept on the answer whichever wins: the choice among them was made against the clock
    too, so the answer may differ between runs (docs/formats.md, general rules)."""
    clocked: list[str] = []
    ksm = build_typed_super_machine_fast(inst, runnable)
    res = solve_matrix(
        ksm.matrix,
        options.solver,
        time_limit=options.time_limit_s,
        threads=options.threads,
        rel_gap=DEFAULT_REL_GAP,
    )
    if res.status is TerminationStatus.TIME_LIMIT:
        clocked.append(time_note([ksm.matrix.name]))
    fixed: Allocation | None = None
    if res.x is not None:
        mod = fix_types(inst, ksm, ksm.picks(res.x))
        if mod is not None:
            sub = solve_fixed(mod)
            clocked += time_notes(sub.notes)
            placements = {ja.id: ja.placement for ja in sub.jobs}
            got = build_allocation(inst, name, placements, solver=sub.solver)
            bad = check_allocation(inst, got, fair_share=True)
            if bad:
                log.info(
                    "%s on %s: the fixed-type answer failed the check (%s)", name, inst.name, bad[0]
                )
            else:
                fixed = got
    bounds = [] if res.dual_bound is None else [res.dual_bound]
    cands: list[tuple[Allocation, str]] = [] if fixed is None else [(fixed, "")]
    plain: Allocation | None = None
    everyone = {j.id for j in runnable}
    if plain_always or fixed is None or {j.id for j in fixed.jobs} != everyone:
        # Checked and floored by TUNE, with its own bound (on the runnable set).
        plain = solve_plain()
        clocked += time_notes(plain.notes)
        cands.append((plain, ""))
        if plain.upper_bound is not None:
            bounds.append(plain.upper_bound)
    tt = make_mechanism("tune-typed", options).allocate(inst)
    cands += [
        (tune, "returned tune's allocation: its total beats opt's"),
        (tt, "returned tune-typed's allocation: its total beats opt's"),
    ]
    best, note = cands[0]
    for alloc, why in cands[1:]:
        if alloc.total_throughput <= best.total_throughput + THROUGHPUT_EPS:
            continue
        bad = check_allocation(inst, alloc, fair_share=True)
        if bad:
            log.info("%s on %s: a typed candidate failed the check (%s)", name, inst.name, bad[0])
            continue
        best, note = alloc, why
    notes = [note] if note else []
    if best is plain:
        notes += plain.notes
    notes += [n for n in dict.fromkeys(clocked) if n not in notes]
    # The bounds cover the runnable set: claimed only when the answer schedules exactly
    # that set (as for every OPT bound).
    upper = min(bounds) if bounds else None
    lost = "no upper bound: only part of the runnable set is scheduled"
    if {j.id for j in best.jobs} != everyone:
        upper = None
        if bounds and lost not in notes:
            notes.append(lost)
    return dataclasses.replace(
        best,
        mechanism=name,
        solver=cands[0][0].solver or options.solver,
        upper_bound=upper,
        notes=tuple(notes),
    )
