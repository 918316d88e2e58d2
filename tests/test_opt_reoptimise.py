"""Re-optimised plans ranked by their LP bound (opt): skipped only when they cannot win.

On cold 512-GPU multi-GPU rounds no route's plan deploys the super-machine points as they
are, so up to three plans get a per-server MIP (10-200 ms each).  Their LP relaxations (a
few ms) bound what each can reach: solved best-first, a plan whose bound is below the best
total found is skipped.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from synergy_opt.check import check_allocation
from synergy_opt.generate import family_round
from synergy_opt.mechanisms import make_mechanism
from synergy_opt.mechanisms.opt import ROUTES, Opt, search
from synergy_opt.mechanisms.opt.configure import (
    point_model,
    relaxation_bound,
    reoptimise,
    solve_points,
    start_vector,
)
from synergy_opt.mechanisms.opt.context import RoundingError, plan_key
from synergy_opt.mechanisms.opt.neighbourhood import total_of
from synergy_opt.mechanisms.opt.pattern_route import pattern_root
from synergy_opt.mechanisms.opt.points import deploy_plan
from synergy_opt.types import realised_throughput


def test_lp_bound_is_never_below_the_plans_reoptimised_total() -> None:
    ctx = Opt().context(family_round("multi-gpu", 128, 7))
    assert ctx is not None
    checked = 0
    for r in ROUTES.values():
        try:
            plan = r.plan(ctx)
            model = point_model(ctx, plan)
        except RoundingError:
            continue
        bound = relaxation_bound(ctx, model)
        points, parts = solve_points(ctx, model)
        assert set(parts) == set(plan)
        assert bound is not None
        assert bound >= total_of(ctx, plan, points) - 1e-6
        checked += 1
    assert checked >= 3


def test_pruned_plans_give_the_same_answer_with_fewer_mips(monkeypatch: pytest.MonkeyPatch) -> None:
    inst = family_round("multi-gpu", 512, 4)
    # The swap repair deploys this round's points without any MIP: off, the plans go to
    # the re-optimisation this test is about.
    monkeypatch.setattr(search, "REPAIR", False)
    # So does the bridged plan: without that route, the plans go to the re-optimisation.
    routes = {k: r for k, r in search.ROUTES.items() if not k.startswith("balanced-bridges")}
    monkeypatch.setattr(search, "ROUTES", routes)
    calls = {"n": 0}
    real = search.solve_points

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(search, "solve_points", counted)
    ranked = make_mechanism("opt").allocate(inst)
    with_bound = calls["n"]
    assert check_allocation(inst, ranked, fair_share=True) == []
    # Without bounds every chosen plan is solved (no bound: nothing can be skipped).
    monkeypatch.setattr(search, "relaxation_bound", lambda *_: None)
    calls["n"] = 0
    plain = make_mechanism("opt").allocate(inst)
    assert calls["n"] == search.REOPTIMISED_PLANS
    assert with_bound < calls["n"]  # 1 of 3 when measured
    assert ranked.total_throughput == pytest.approx(plain.total_throughput, abs=1e-9)


def _row_activity(mm: Any, x: np.ndarray) -> np.ndarray:
    """A x of a column-wise model."""
    act = np.zeros(mm.num_rows)
    for j in range(mm.num_cols):
        lo, hi = mm.a_start[j], mm.a_start[j + 1]
        act[mm.a_index[lo:hi]] += mm.a_value[lo:hi] * x[j]
    return act


@pytest.mark.parametrize(("family", "seed"), [("split-penalty", 0), ("multi-gpu", 7)])
def test_a_deployed_allocation_is_a_solution_the_reoptimisation_starts_from(
    family: str, seed: int
) -> None:
    """Every route's deployed plan, spread jobs included, read as a start: it keeps every
    row and bound, is integral where the model is, is worth at least the plan's total, and
    the MIP started from it ends no lower."""
    ctx = Opt().context(family_round(family, 128, seed))
    assert ctx is not None
    spread_plans = 0
    for r in ROUTES.values():
        try:
            plan = r.plan(ctx)
            points, parts = deploy_plan(ctx, plan)
        except RoundingError:
            continue
        model = point_model(ctx, plan)
        x = start_vector(ctx, model, parts)
        assert x is not None, r.name
        mm = model.matrix
        act = _row_activity(mm, x)
        assert np.all(act <= mm.row_upper + 1e-6) and np.all(act >= mm.row_lower - 1e-6), r.name
        assert np.all(x >= mm.col_lower - 1e-9) and np.all(x <= mm.col_upper + 1e-9)
        assert np.all(np.abs(x[mm.integer] - np.round(x[mm.integer])) < 1e-9)
        total = total_of(ctx, plan, points)
        assert float(mm.cost @ x) >= total - 1e-6
        better, _ = solve_points(ctx, model, x)
        assert total_of(ctx, plan, better) >= float(mm.cost @ x) - 1e-6
        spread_plans += any(len(p) > 1 for p in plan.values())
    assert spread_plans >= 3


def test_a_start_missing_a_job_or_holding_too_little_is_refused() -> None:
    ctx = Opt().context(family_round("split-penalty", 128, 0))
    assert ctx is not None
    plan = ROUTES["placement-lp"].plan(ctx)
    _, parts = deploy_plan(ctx, plan)
    model = point_model(ctx, plan)
    jid = next(iter(parts))
    assert start_vector(ctx, model, {k: v for k, v in parts.items() if k != jid}) is None
    starved = [dataclasses.replace(p, cpus=0, mem_gb=0.0) for p in parts[jid]]
    assert start_vector(ctx, model, {**parts, jid: starved}) is None


def test_the_pattern_root_routes_own_points_start_its_reoptimisation() -> None:
    """Single-GPU 128 GPUs seed 12: the route's integer master found 166.86; the plan's
    MIP on its own stops within its 1e-4 gap at 166.85, from the route's points at 166.86."""
    inst = family_round("single-gpu", 128, 12)
    ctx = Opt().context(inst)
    assert ctx is not None
    plan = pattern_root(ctx)
    found = ctx.found_with[plan_key(plan)]
    jobs = {j.id: j for j in ctx.runnable}
    route_total = sum(realised_throughput(jobs[jid], parts) for jid, parts in found.items())
    points, _ = reoptimise(ctx, plan)
    assert total_of(ctx, plan, points) >= route_total - 1e-9
    alone, _ = solve_points(ctx, point_model(ctx, plan))
    assert total_of(ctx, plan, alone) < route_total - 1e-3
