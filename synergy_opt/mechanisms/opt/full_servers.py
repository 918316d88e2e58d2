"""The full-server super-machine: a job that fills every server it fits on strands the rest.

The split-aware super-machine (:func:`~synergy_opt.formulations.fast.build_super_machine_split`)
pools every server's cores and memory.  A job whose GPUs fill each server it can run on whole
(an 8-GPU job on 8-GPU servers) leaves that server's other cores and memory to nobody: every
other job, and every part of a spread job, needs a GPU there.  On
``family_round("split-penalty", 128, 1139)`` four such jobs use 8 of their servers' 24 cores,
so 64 of the 384 pooled cores do not exist for anyone else; the pooled optimum (74.325) spreads
a 6-GPU job over four servers at 36 cores, which no allocation can afford, and every route's
plan then lands at 0.976 of the proven optimum 70.28.

Charging each whole column of such a job its server's cores and memory (the smallest among
the servers it fits on) gives a super-machine whose optimum is 70.345 there, and whose points
are the optimum's but for one job.  It is still a relaxation (each such job, whole, blocks a
whole server; charging the smallest server's capacity only undercharges), so its dual bound
bounds every allocation when it is built on floors no split of a job's GPUs goes below.
Only the late route :func:`~.counting_route.counting_full_servers_route` and the mechanism's
late stage (its target and the reported bound) use it: it is built only on rounds that missed
the target, and it changes nothing where no job fills its servers.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping, Sequence

from synergy_opt.check import fair_share_floor, forced_split_factor
from synergy_opt.formulations.fast import (
    JobClass,
    SplitKnapsackModel,
    build_super_machine_split,
    class_key,
)
from synergy_opt.formulations.typed_fast import lowest_fair_share
from synergy_opt.mechanisms.opt.context import Point, RoundContext
from synergy_opt.solve import DEFAULT_REL_GAP, SolveResult, TerminationStatus
from synergy_opt.types import Job, RoundInstance

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class FullServerOptimum:
    """The full-server super-machine's solve: its points per job, optimum and dual bound."""

    points: Mapping[str, Point]
    spread_ids: frozenset[str]
    optimum: float
    dual_bound: float


def filling_classes(
    inst: RoundInstance, classes: Sequence[JobClass]
) -> dict[int, tuple[int, float]]:
    """Per class (index) whose jobs, whole, take every GPU of each server they fit on: the
    cores and GB charged for one of them (the smallest such server's)."""
    out: dict[int, tuple[int, float]] = {}
    for k, cl in enumerate(classes):
        job = cl.members[0]
        fits = [srv for srv in inst.cluster.servers if job.may_use(srv) and srv.gpus >= job.gpus]
        if fits and all(srv.gpus == job.gpus for srv in fits):
            out[k] = (min(srv.cpus for srv in fits), min(srv.mem_gb for srv in fits))
    return out


def charge_full_servers(inst: RoundInstance, ksm: SplitKnapsackModel) -> SplitKnapsackModel | None:
    """``ksm`` with each whole column of a filling class (:func:`filling_classes`) charged
    its server's cores and GB in the pooled rows ``eq2[pool]``, ``eq3[pool]``; ``None``
    when no class fills its servers (the model would not change)."""
    full = filling_classes(inst, ksm.classes)
    if not full:
        return None
    mm = ksm.matrix
    r_c, r_m = len(ksm.classes), len(ksm.classes) + 1
    value = mm.a_value.copy()
    for col, (k, _, spread) in enumerate(ksm.columns):
        if spread or k not in full:
            continue
        for e in range(int(mm.a_start[col]), int(mm.a_start[col + 1])):
            row = int(mm.a_index[e])
            if row == r_c:
                value[e] = float(full[k][0])
            elif row == r_m:
                value[e] = float(full[k][1])
    return dataclasses.replace(
        ksm, matrix=dataclasses.replace(mm, a_value=value, name="super_machine_full_servers")
    )


def _floors(inst: RoundInstance, runnable: Sequence[Job], *, lowest: bool) -> dict[str, float]:
    """Required throughput per job: the checker's floor as placed, or (``lowest``) the
    smallest floor any split of its GPUs allows, so the model's optimum is a bound."""
    by_class: dict[tuple[object, ...], float] = {}
    out: dict[str, float] = {}
    for job in runnable:
        key = class_key(job)
        if key not in by_class:
            floor = fair_share_floor(inst, job)[1]
            if lowest:
                floor = min(floor, lowest_fair_share(inst, job) * forced_split_factor(inst, job))
            by_class[key] = floor
        out[job.id] = by_class[key]
    return out


def full_server_optimum(ctx: RoundContext, *, bound: bool = False) -> FullServerOptimum | None:
    """The full-server super-machine over ``ctx``'s runnable jobs (``None``: no job fills
    its servers, a job has per-GPU-type matrices, or the solve found no optimum).

    ``bound``: built on the lowest floors, so its dual bound bounds every allocation that
    keeps the checker's floors; otherwise on the floors as placed (the guiding points).
    Solved once per round and flag (``ctx.full_servers``), and once for both where the two
    flags' floors agree (then the two models are one: multi-GPU 128 GPUs seed 7 solved it
    twice, 34 ms each, in a 630-ms round)."""
    if bound not in ctx.full_servers:
        ctx.full_servers[bound] = _solve_full_servers(ctx, bound)
    return ctx.full_servers[bound]


def _solve_full_servers(ctx: RoundContext, bound: bool) -> FullServerOptimum | None:
    """:func:`full_server_optimum` without its memo (but the other flag's, where the floors
    are the same)."""
    runnable = ctx.runnable
    if any(j.sensitivity_by_type is not None for j in runnable):
        return None  # the split model reads reference matrices: no bound on typed rounds
    if not filling_classes(ctx.inst, ctx.classes):  # the super-machine's own classes
        return None  # decided before building anything
    floors = _floors(ctx.inst, runnable, lowest=bound)
    other = not bound
    if other in ctx.full_servers and floors == _floors(ctx.inst, runnable, lowest=other):
        return ctx.full_servers[other]  # the same model
    ksm = build_super_machine_split(ctx.inst, runnable, floors)
    charged = charge_full_servers(ctx.inst, ksm)
    if charged is None:
        return None
    res: SolveResult = ctx.solve(charged.matrix, rel_gap=DEFAULT_REL_GAP)
    if res.status is not TerminationStatus.OPTIMAL or res.x is None or res.dual_bound is None:
        log.info("full-server super-machine ended %s", res.status)
        return None
    points: dict[str, Point] = {}
    spread: set[str] = set()
    for cl, picks in zip(charged.classes, charged.picks(res.x), strict=True):
        members = list(cl.members)  # priority order: higher-throughput points first
        credit = cl.members[0].split_penalty
        for (c, m, w), n, is_spread in sorted(
            picks, key=lambda p: (-p[0][2] * (credit if p[2] else 1.0), p[0][0], p[0][1], p[2])
        ):
            take, members = members[:n], members[n:]
            for job in take:
                points[job.id] = (c, m, w)
                if is_spread:
                    spread.add(job.id)
    log.info(
        "full-server super-machine optimum %.6g (pooled %.6g)", res.objective or 0.0, ctx.optimum
    )
    return FullServerOptimum(points, frozenset(spread), res.objective or 0.0, res.dual_bound)


def full_server_bound(ctx: RoundContext) -> float:
    """The full-server super-machine's dual bound on ``ctx``'s runnable set (infinity where
    it does not apply): never above the pooled split-aware one on the same floors."""
    got = full_server_optimum(ctx, bound=True)
    return math.inf if got is None else got.dual_bound
