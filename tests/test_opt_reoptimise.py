"""Re-optimised plans ranked by their LP bound (opt): skipped only when they cannot win.

On cold 512-GPU multi-GPU rounds no route's plan deploys the super-machine points as they
are, so up to three plans get a per-server MIP (10-200 ms each).  Their LP relaxations (a
few ms) bound what each can reach: solved best-first, a plan whose bound is below the best
total found is skipped.
"""

from __future__ import annotations

from typing import Any

import pytest

from synergy_opt.check import check_allocation
from synergy_opt.generate import family_round
from synergy_opt.mechanisms import make_mechanism
from synergy_opt.mechanisms.opt import ROUTES, Opt, search
from synergy_opt.mechanisms.opt.configure import point_model, relaxation_bound, solve_points
from synergy_opt.mechanisms.opt.context import RoundingError
from synergy_opt.mechanisms.opt.neighbourhood import total_of


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
    routes = {k: r for k, r in search.ROUTES.items() if k != "balanced-bridges"}
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
