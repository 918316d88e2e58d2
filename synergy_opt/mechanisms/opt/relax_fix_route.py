"""The ``counting-relax-fix`` route: the counting route's model, by relax-and-fix, on rounds
too large for the counting route's single MIP.

On mixed-shape clusters (jobs may spread at no penalty, their floors depend on how their
GPUs split over server shapes) the restricted counting model has 2000-3000 columns at 128
GPUs, above the counting route's cap, and the cheaper routes can miss the spreads the
optimum needs: a 200-round pass left ``family_round("mixed-shapes", 128, 1003)`` at 0.984 of
its proven optimum (two 4- and 2-GPU jobs that spread over three server shapes in the
optimum got 0.5 and 0.89 less). ``opt-exact`` meets the super-machine bound there by
relax-and-fix in about 2 s (:func:`synergy_opt.formulations.counting_fast.solve_counting`);
this route does the same with node limits, so its answer does not depend on the machine's
speed. It runs only when every earlier route, the packing at the super-machine's points
included, missed the target (the mechanism stops at the
first plan that reaches it) and only where relax-and-fix pays: the counting model has slots
that carry split rows, or every job that may spread does so at no penalty.  It also takes
smaller models, within the counting route's cap, where that route's single MIP found no plan
within its node limit.
"""

from __future__ import annotations

from synergy_opt.formulations.counting import counting_data
from synergy_opt.mechanisms.opt.context import (
    GpuPlan,
    RoundContext,
    RoundingError,
    spreads_at_penalty,
)
from synergy_opt.mechanisms.opt.counting_route import (
    COUNTING_ROUTE_MAX_COLUMNS,
    _column_estimate,
    relax_and_fix_plan,
    super_machine_model,
)
from synergy_opt.mechanisms.opt.routes import route

#: Largest restricted model this route takes (the counting route takes up to
#: :data:`COUNTING_ROUTE_MAX_COLUMNS`; below that it has run already).
RELAX_FIX_MAX_COLUMNS: int = 6000
#: Branch-and-bound nodes of each step (whole-job counts, then the slots): a deterministic
#: stop, unlike a time limit.
RELAX_FIX_NODES: int = 50


#: After the packing (its ``late_rank`` 0): where the super-machine's points pack, the
#: packing reaches the bound in about a second, and this route's counts step can take far
#: longer with nothing better to find (mixed shapes 128 GPUs seed 2103: 13.5 s to 110.82,
#: then the packing 111.8, the optimum, in 0.7 s; ``opt`` at 20 s 15.6 -> 2.0 s).
@route("counting-relax-fix", spreads=True, spread_only=True, late=True, late_rank=1)
def relax_fix_route(ctx: RoundContext) -> GpuPlan:
    """The counting model over the super-machine's points by relax-and-fix: whole-job counts
    integral with the spread slots as LP, then the slots integral with those counts fixed."""
    if any(j.sensitivity_by_type is not None for j in ctx.runnable):
        raise RoundingError("skipped: per-GPU-type matrices (the typed pass handles them)")
    if not ctx.inst.per_server_shares:  # decided before building anything (16 ms at 128 GPUs)
        raise RoundingError("skipped: no floor depends on how a job's GPUs split (one share)")
    estimate = _column_estimate(ctx)
    taken = "counting" in ctx.memo or spreads_at_penalty(ctx)
    if estimate <= COUNTING_ROUTE_MAX_COLUMNS and taken:
        # The counting route took this model whole and found a plan, or ran relax-and-fix
        # itself (it does so first where a job spreads at a penalty).  Where its one MIP
        # found nothing within its nodes, relax-and-fix is what is left (mixed shapes 64 GPUs
        # seed 1209: 62.8 at a 20-s limit, 0.980 of the optimum, and 63.84 after 28 s of
        # neighbourhood search; relax-and-fix reaches the optimum 64.15 in 3 s).
        raise RoundingError("skipped: the counting route took this round whole")
    if estimate > RELAX_FIX_MAX_COLUMNS:
        raise RoundingError(f"skipped: ~{estimate} columns > {RELAX_FIX_MAX_COLUMNS}")
    data = counting_data(ctx.inst, ctx.runnable)
    if not data["feasible"]:
        raise RoundingError("skipped: the counting data cannot keep every floor as placed")
    if not data["slot_splits"]:
        raise RoundingError("skipped: no floor depends on how a job's GPUs split")
    return relax_and_fix_plan(
        ctx,
        data,
        super_machine_model(ctx, data),
        lambda mm: ctx.solve(mm, node_limit=RELAX_FIX_NODES),
        "counting-relax-fix",
    )
