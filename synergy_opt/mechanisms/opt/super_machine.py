"""The split-aware super-machine as ``opt`` solves it every round: floors read as the
checker reads them (memoised per job class), and its solution turned into demand classes
(jobs sharing a class, a grid point and whether they spread) for the routes."""

from __future__ import annotations

from collections.abc import Sequence

from synergy_opt.check import fair_share_floor
from synergy_opt.formulations.fast import (
    DemandClass,
    JobClass,
    SplitKnapsackModel,
    build_super_machine_split,
    class_key,
)
from synergy_opt.mechanisms.opt.context import Point, RoundingError
from synergy_opt.types import Job, RoundInstance


def point_value(dc: DemandClass) -> float:
    """W at the demand class's point (the super-machine's value for each of its jobs)."""
    return dc.jobs[0].sensitivity.lookup(dc.cpus, dc.mem_gb)


def split_super_machine(
    inst: RoundInstance,
    runnable: Sequence[Job],
    per_class: dict[tuple[object, ...], float] | None = None,
) -> SplitKnapsackModel:
    """The split-aware super-machine over the runnable set, floors as the checker's.

    ``per_class``: required throughput per class key already known for this cluster and
    fair-share rule (filled in here; an ``Opt`` keeps it across rounds on one cluster)."""
    per_class = {} if per_class is None else per_class
    required: dict[str, float] = {}
    # The round's classes by the ids of their matrices first: ``per_class`` holds earlier
    # rounds' matrix objects, which equal this round's value by value (a comparison of every
    # grid value per look-up), so each class looks there once, not once per job.
    local: dict[tuple[object, ...], float] = {}
    for job in runnable:  # the floor depends only on what class_key holds
        near = (
            id(job.sensitivity),
            job.gpus,
            job.split_penalty,
            job.gpu_types,
            id(job.sensitivity_by_type),
        )
        got = local.get(near)
        if got is None:
            key = class_key(job)
            got = per_class.get(key)
            if got is None:
                got = per_class[key] = fair_share_floor(inst, job)[1]
            local[near] = got
        required[job.id] = got
    return build_super_machine_split(inst, runnable, required)


def demand_classes(
    inst: RoundInstance,
    classes: Sequence[JobClass],
    picks: Sequence[Sequence[tuple[Point, int, bool]]],
) -> list[DemandClass]:
    """(class, point, spread?) groups; within a class, higher-priority jobs get the
    higher-throughput points."""
    servers = inst.cluster.servers
    out: list[DemandClass] = []
    # The allowed servers depend only on a job's GPU-type restriction (one scan each).
    by_types: dict[tuple[str, ...] | None, tuple[int, ...]] = {}
    for cl, pk in zip(classes, picks, strict=True):
        first = cl.members[0]
        allowed = by_types.get(first.gpu_types)
        if allowed is None:
            allowed = by_types[first.gpu_types] = tuple(
                s for s, srv in enumerate(servers) if first.may_use(srv)
            )
        members = list(cl.members)
        credit = cl.members[0].split_penalty
        for (c, m, _), n, spread in sorted(
            pk, key=lambda p: (-p[0][2] * (credit if p[2] else 1.0), p[0][0], p[0][1], p[2])
        ):
            take, members = members[:n], members[n:]
            out.append(DemandClass(tuple(take), take[0].gpus, c, m, allowed, spread))
        if members:  # pragma: no cover - (4) makes the counts add up
            raise RoundingError("super-machine solution does not cover every job")
    return out
