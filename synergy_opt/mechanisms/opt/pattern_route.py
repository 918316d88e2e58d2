"""The ``pattern-root`` late route: branch-and-price's root and dive, in-process, on rounds
of one-GPU jobs.

Where every job asks for one GPU nothing can spread: a round is a packing of whole jobs,
at points the round chooses, onto a few classes of identical servers.  The pattern master
(``formulations/patterns.md``) states it exactly, its LP is tight, and its column
generation converges in a few rounds of pricing.  The counting route (the counting model
over the super-machine's points, :mod:`.counting_route`) answers the same question with a
MIP whose identical servers HiGHS branches over slowly: on single-GPU 128-GPU rounds whose
cheap routes missed, its node-limited MIP took 80-570 ms (seeds 1, 7, 12, 16) and often
found nothing better than ``balanced``.  Branch-and-price's root (column generation), its
integer master over the root's patterns and one dive to a leaf packed at its points
(``dive_only``) take 60-140 ms on the ten such rounds among seeds 0-39.  With it ``opt``
reaches the proven optima of seeds 12, 27 and 38 (it stopped 0.11-0.22 % short), the bound
on seed 18 (173.12 -> 173.25, after the packing, below) and raises seed 1 (167.15 ->
167.68, optimum 167.87); the other five end where they did.

So on such rounds this route takes the counting route's place (which then stands aside,
while :data:`PATTERN_ROOT_ROUTE` is on), as a late route: it runs only where the cheap
routes' plans, re-optimised, missed the target, and after the ``packing`` route, which
reaches the bound where the pooled points pack or refutes them in milliseconds (after it,
single-GPU 128 GPUs seeds 7, 18 and 35 and CPU-scarce seeds 7 and 10 end at the bound
instead of within the target gap below it; before it, none was higher, and the CPU time
was about the same: 1.63 s against 1.55 s on single-GPU seeds 0-39, 2.09 s against 2.27 s
on CPU-scarce seeds 0-19).  Every stop is a count (the root's
integer master has a node limit, the dive a number of pricing rounds, CP-SAT a
deterministic budget), so without a time limit the same round gives the same bytes; under
one, the route gets :data:`PATTERN_ROOT_TIME_SHARE` of what is left.
"""

from __future__ import annotations

import logging
import math

from synergy_opt.formulations.branch_price import branch_and_price
from synergy_opt.mechanisms.opt.context import (
    GpuPlan,
    RoundContext,
    RoundingError,
    gpu_plan,
    plan_key,
)
from synergy_opt.mechanisms.opt.routes import route

log = logging.getLogger(__name__)

#: The route's name.
PATTERN_ROOT: str = "pattern-root"
#: On: this route takes rounds of one-GPU jobs and the ``counting`` route stands aside
#: there.  Off only to measure it (the route then declines, and the counting route runs as
#: before it existed).
PATTERN_ROOT_ROUTE: bool = True
#: Branch-and-bound nodes of the root's integer master (a count, not a time: the same plan
#: on every machine; single-GPU 128-GPU rounds solve it in 4-19 ms).
ROOT_IP_NODES: int = 200
#: How its column generation prices (:data:`.pricing_enum.PRICING_METHODS`): the MIP (with
#: the grid program first), not the enumeration branch-and-price uses by default, whose
#: tables cost more to build than a dozen rounds of pricing save (CPU-scarce 128 GPUs
#: seeds 0, 3, 10, 15: 331-414 ms for the route with them, 56-95 ms without).
ROUTE_PRICING: str = "mip"
#: Under a time limit, the share of what is left that the route may use.
PATTERN_ROOT_TIME_SHARE: float = 0.5


def one_gpu_jobs(ctx: RoundContext) -> bool:
    """Whether every runnable job asks for one GPU (no job can spread, at a split penalty or
    for free)."""
    return all(j.gpus == 1 for j in ctx.runnable)


def applies(ctx: RoundContext) -> str | None:
    """Why the route does not apply to ``ctx`` (``None``: it does)."""
    if not PATTERN_ROOT_ROUTE:
        return "switched off"
    if not one_gpu_jobs(ctx):
        return "a job asks for several GPUs (the counting routes take such rounds)"
    if any(j.sensitivity_by_type is not None for j in ctx.runnable):
        return "per-GPU-type matrices (the pattern model is not stated for them)"
    return None


@route(PATTERN_ROOT, spreads=False, one_gpu_only=True, late=True, late_rank=1)
def pattern_root(ctx: RoundContext) -> GpuPlan:
    """Branch-and-price's root, its integer master and one dive, on rounds of one-GPU jobs."""
    why = applies(ctx)
    if why is not None:
        raise RoundingError(f"skipped: {why}")
    left = ctx.clock.left()
    limit = math.inf if left is None else left * PATTERN_ROOT_TIME_SHARE
    res = branch_and_price(
        ctx.inst,
        ctx.runnable,
        time_limit=limit,
        warm_start=[],
        solver=ctx.options.solver,
        dive_only=True,
        root_ip_nodes=ROOT_IP_NODES,
        pricing=ROUTE_PRICING,
        counting=ctx.counting_matrix(),
    )
    if res is None or res.objective is None or len(res.placements) != len(ctx.runnable):
        raise RoundingError("no allocation of the runnable set from the root or its dive")
    log.info("opt on %s: %s: %.6g by %s", ctx.inst.name, PATTERN_ROOT, res.objective, res.source)
    plan = gpu_plan(ctx.inst, res.placements)
    ctx.found_with[plan_key(plan)] = res.placements  # its points start the re-optimisation
    return plan
