"""The ``pattern-dive`` step: the exact search's first allocation, beside ``opt``'s routes.

On split-penalty rounds the counting routes fix each job's point before they place it,
and where a job fills every server it fits on the points they offer cannot all be
realised; the neighbourhood search then climbs from their plans for the rest of the time.
``opt-exact``'s branch-and-price (:mod:`synergy_opt.formulations.branch_price`) reaches
such rounds' optima differently: the root's column generation prices whole servers, a
dive fixes patterns down to one leaf, and the leaf's points are packed onto the servers
(split penalties 128 GPUs seed 13: the proven optimum 55.2767 in 2-3 s, where ``opt``
stopped at 54.6621 after 20 s, 0.9889 of it).  This step runs that much of the search
and nothing more (``dive_only``: the root's integer master over its patterns, then no leaf
MIPs, no branching) and hands its GPUs per job to the mechanism, which re-optimises the
points on them and searches from them as from a late route's plan.  The search starts
from no allocation: seeded with TUNE's patterns, the root's integer master on seed 8
finds 78.76, from the plain pool the optimum 82.8872 (0.6 s; branch-and-price's
``PLAIN_ROOT_SHARE`` says the same), and ``opt`` at 20 s returns it instead of 82.16.

It runs in a child process beside the routes, from the round's start
(:mod:`synergy_opt.deadline`), so the routes and the search keep all their time: run
in-process after the counting routes it took 2-5 s from them, and where the dive found
nothing (seeds 7, 21 and 1463 at 20 s) the search then stopped 0.3-1.4 % lower; started
only with the late routes, it had not answered when they ended on seed 19 (the routes
before them took 10 of its 20 s).  Its plan is taken where it has answered when the late
routes end, or else after the search from their best plan.  Hence only on two cores or
more, only under a time limit (column generation stops on the clock; without a limit
every stop of ``opt`` is a node limit and the same inputs give the same bytes), only
where a job may spread at a split penalty, and not where the caller switched it off
(``opt-exact`` runs the whole search itself:
:data:`synergy_opt.mechanisms.opt_exact.EXACT_ROUTES_OFF`).

Its root's bound comes back with the allocation (:class:`DiveAnswer`): the pattern master
with spread slots, the bound ``opt`` computes itself only without a time limit
(:meth:`.search.RoundSearch._pattern_target`); where the dive has answered, ``opt``
reports it where it is the smallest (split penalties 128 GPUs seed 13: 55.33 where the
super-machine says 55.479).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from synergy_opt.deadline import (
    Child,
    ChildFailed,
    DeadlineExceeded,
    guard_available,
    start_child,
    usable_cores,
)
from synergy_opt.formulations.branch_price import branch_and_price
from synergy_opt.mechanisms.opt.context import (
    GpuPlan,
    RoundContext,
    gpu_plan,
    plan_key,
    spreads_at_penalty,
)
from synergy_opt.types import Job, PlacementPart, RoundInstance

log = logging.getLogger(__name__)

#: The step's name (``opt-exact`` switches it off by name; plans found by it carry it).
PATTERN_DIVE: str = "pattern-dive"
#: Share of the round's time limit that the dive may use.  Split penalties 128 GPUs at
#: 20 s: the dive needs 1-6 s after about a second of start-up (imports in the child); the
#: search from its plan needs the rest.
DIVE_TIME_SHARE: float = 0.6
#: Below this many seconds for the dive the step does not start (the root's column
#: generation alone takes 1-5 s at 128 GPUs).
DIVE_MIN_S: float = 1.0


def start_dive(ctx: RoundContext) -> Child | None:
    """The dive started beside the caller, or ``None`` where it does not apply (the
    reason logged)."""
    why = _why_not(ctx)
    if why is not None:
        log.info("opt on %s: %s: %s", ctx.inst.name, PATTERN_DIVE, why)
        return None
    left = ctx.clock.left()
    assert left is not None
    until = time.time() + left * DIVE_TIME_SHARE
    args = (ctx.inst, ctx.runnable, until, ctx.options.solver)
    return start_child(_dive, args)


def _why_not(ctx: RoundContext) -> str | None:
    if PATTERN_DIVE in ctx.routes_off:
        return "switched off by the caller"
    if any(j.sensitivity_by_type is not None for j in ctx.runnable):
        return "per-GPU-type matrices (the pattern model is not stated for them)"
    if not spreads_at_penalty(ctx) or not any(ctx.may_spread(j) for j in ctx.runnable):
        return "no job may spread at a split penalty"
    left = ctx.clock.left()
    if left is None:
        return "no time limit (column generation stops on the clock)"
    if left * DIVE_TIME_SHARE < DIVE_MIN_S:
        return f"{left * DIVE_TIME_SHARE:.3g} s is too little"
    if usable_cores() < 2 or not guard_available():
        return "one core (it runs beside the routes, not instead of them)"
    return None


@dataclass(frozen=True)
class DiveAnswer:
    """What the dive hands back: the allocation it found (``None``: none) and the root's
    bound, valid for every allocation of the runnable set (the column generation's, at
    whatever round of pricing the clock stopped it; ``None`` where there is none)."""

    placements: dict[str, tuple[PlacementPart, ...]] | None
    bound: float | None


def _dive(
    inst: RoundInstance,
    runnable: Sequence[Job],
    until: float,
    solver: str,
) -> DiveAnswer | None:
    """Branch-and-price's root, its dive and the leaf packed at its points, until
    ``until`` (wall clock, shared with the parent: the child's start counts against it);
    ``None`` where the search did not run."""
    budget = until - time.time()
    if budget <= 0:
        return None
    res = branch_and_price(
        inst, runnable, time_limit=budget, warm_start=[], solver=solver, dive_only=True
    )
    if res is None:
        return None
    bound = res.bound if res.bound is not None and math.isfinite(res.bound) else None
    if res.objective is None or not res.placements:
        return DiveAnswer(None, bound)
    log.info("%s: %.6g by %s in %.3g s", PATTERN_DIVE, res.objective, res.source, res.runtime_s)
    return DiveAnswer({jid: tuple(parts) for jid, parts in res.placements.items()}, bound)


def dive_plan(
    ctx: RoundContext, child: Child, wait_s: float = 0.0
) -> tuple[GpuPlan | None, float | None]:
    """The dive's GPUs per job, if it has answered (waiting at most ``wait_s``) with an
    allocation of the whole runnable set (else ``None``), and its root's bound where it
    has answered with one.  The child is stopped either way."""
    try:
        got = child.result(wait_s)
    except (DeadlineExceeded, ChildFailed) as e:
        log.info("opt on %s: %s gave nothing: %s", ctx.inst.name, PATTERN_DIVE, e)
        return None, None
    bound = None if got is None else got.bound
    if got is None or got.placements is None or len(got.placements) != len(ctx.runnable):
        log.info("opt on %s: %s: no allocation beyond TUNE's", ctx.inst.name, PATTERN_DIVE)
        return None, bound
    plan = gpu_plan(ctx.inst, got.placements)
    ctx.found_with[plan_key(plan)] = got.placements  # its points start the re-optimisation
    return plan, bound
