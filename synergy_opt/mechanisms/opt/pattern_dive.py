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
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from synergy_opt.deadline import (
    Child,
    ChildFailed,
    DeadlineExceeded,
    guard_available,
    start_child,
    usable_cores,
)
from synergy_opt.formulations.branch_price import branch_and_price
from synergy_opt.mechanisms.opt.context import GpuPlan, RoundContext
from synergy_opt.mechanisms.opt.counting_route import _penalised
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
    if not _penalised(ctx) or not any(ctx.may_spread(j) for j in ctx.runnable):
        return "no job may spread at a split penalty"
    left = ctx.clock.left()
    if left is None:
        return "no time limit (column generation stops on the clock)"
    if left * DIVE_TIME_SHARE < DIVE_MIN_S:
        return f"{left * DIVE_TIME_SHARE:.3g} s is too little"
    if usable_cores() < 2 or not guard_available():
        return "one core (it runs beside the routes, not instead of them)"
    return None


def _dive(
    inst: RoundInstance,
    runnable: Sequence[Job],
    until: float,
    solver: str,
) -> dict[str, tuple[PlacementPart, ...]] | None:
    """Branch-and-price's root, its dive and the leaf packed at its points, until
    ``until`` (wall clock, shared with the parent: the child's start counts against it):
    the allocation found, or ``None`` (none found)."""
    budget = until - time.time()
    if budget <= 0:
        return None
    res = branch_and_price(
        inst, runnable, time_limit=budget, warm_start=[], solver=solver, dive_only=True
    )
    if res is None or res.objective is None or not res.placements:
        return None
    log.info("%s: %.6g by %s in %.3g s", PATTERN_DIVE, res.objective, res.source, res.runtime_s)
    return {jid: tuple(parts) for jid, parts in res.placements.items()}


def dive_plan(ctx: RoundContext, child: Child, wait_s: float = 0.0) -> GpuPlan | None:
    """The dive's GPUs per job, if it has answered (waiting at most ``wait_s``) with an
    allocation of the whole runnable set; ``None`` otherwise.  The child is stopped
    either way."""
    try:
        got = child.result(wait_s)
    except (DeadlineExceeded, ChildFailed) as e:
        log.info("opt on %s: %s gave nothing: %s", ctx.inst.name, PATTERN_DIVE, e)
        return None
    if got is None or len(got) != len(ctx.runnable):
        log.info("opt on %s: %s: no allocation beyond TUNE's", ctx.inst.name, PATTERN_DIVE)
        return None
    index = {server.name: i for i, server in enumerate(ctx.inst.cluster.servers)}
    return {jid: tuple(sorted((index[p.server], p.gpus) for p in got[jid])) for jid in got}
