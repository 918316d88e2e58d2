"""The ``pattern-root`` late route (opt): branch-and-price's root and dive on rounds of
one-GPU jobs, in the counting route's place.

Single-GPU 128-GPU rounds 1 and 27: the counting route's node-limited MIP left ``opt`` at
167.15 and 170.70; the route reaches 167.68 (optimum 167.87) and 170.89, the proven
optimum.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from synergy_opt.check import check_allocation
from synergy_opt.generate import family_round
from synergy_opt.io import allocation_to_dict
from synergy_opt.mechanisms import make_mechanism
from synergy_opt.mechanisms.opt import Opt, pattern_route
from synergy_opt.mechanisms.opt.context import Clock, RoundingError
from synergy_opt.mechanisms.opt.pattern_route import (
    PATTERN_ROOT_TIME_SHARE,
    ROUTE_PRICING,
    pattern_root,
)
from synergy_opt.mechanisms.opt.points import deploy_plan
from synergy_opt.types import build_allocation
from tests.conftest import assert_plan_on_whole_gpus

ABS_TOL: float = 1e-6


@pytest.mark.parametrize(
    ("seed", "before", "after"),
    [(1, 167.15, 167.68), (27, 170.70, 170.89)],
)
def test_opt_on_one_gpu_rounds_gains_over_the_counting_route(
    monkeypatch: pytest.MonkeyPatch, seed: int, before: float, after: float
) -> None:
    inst = family_round("single-gpu", 128, seed)
    got = make_mechanism("opt").allocate(inst)
    assert got.total_throughput == pytest.approx(after, abs=ABS_TOL)
    assert check_allocation(inst, got, fair_share=True) == []
    assert got.upper_bound is not None and got.total_throughput <= got.upper_bound + ABS_TOL
    assert got.total_throughput >= make_mechanism("tune").allocate(inst).total_throughput
    monkeypatch.setattr(pattern_route, "PATTERN_ROOT_ROUTE", False)  # the code before
    old = make_mechanism("opt").allocate(inst)
    assert old.total_throughput == pytest.approx(before, abs=ABS_TOL)


def test_route_plan_puts_every_runnable_job_whole_on_one_server() -> None:
    ctx = Opt().context(family_round("cpu-scarce", 128, 10))
    assert ctx is not None
    plan = pattern_root(ctx)
    assert_plan_on_whole_gpus(ctx, plan)
    assert all(len(parts) == 1 for parts in plan.values())


@pytest.mark.parametrize("family", ["single-gpu", "cpu-scarce", "mem-scarce"])
@pytest.mark.parametrize("seed", range(4))
def test_route_plan_deploys_to_a_checked_allocation_within_the_bound(
    family: str, seed: int
) -> None:
    """Wherever the route gives a plan, its points (as they are or re-optimised) make an
    allocation the checker accepts, fair share kept, at most the super-machine's optimum."""
    inst = family_round(family, 32, seed)
    ctx = Opt().context(inst)
    assert ctx is not None
    plan = pattern_root(ctx)
    assert_plan_on_whole_gpus(ctx, plan)
    _, placements = deploy_plan(ctx, plan)
    alloc = build_allocation(inst, "opt", placements)
    assert check_allocation(inst, alloc, fair_share=True) == []
    assert alloc.total_throughput <= ctx.optimum + ABS_TOL
    assert len(alloc.jobs) == len(ctx.runnable)


def test_same_round_same_bytes() -> None:
    """Every stop of the route is a count: two fresh ``opt``s give the same answer."""
    inst = family_round("single-gpu", 128, 38)

    def run() -> dict[str, Any]:
        d = allocation_to_dict(make_mechanism("opt").allocate(inst))
        d.pop("solve_seconds", None)
        return d

    assert run() == run()


@pytest.mark.parametrize(
    ("family", "gpus", "why"),
    [
        ("multi-gpu", 32, "several GPUs"),
        ("split-penalty", 32, "several GPUs"),
    ],
)
def test_route_declines_rounds_where_a_job_asks_for_several_gpus(
    family: str, gpus: int, why: str
) -> None:
    ctx = Opt().context(family_round(family, gpus, 0))
    assert ctx is not None
    with pytest.raises(RoundingError, match=why):
        pattern_root(ctx)


def test_route_declines_when_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = Opt().context(family_round("single-gpu", 32, 0))
    assert ctx is not None
    monkeypatch.setattr(pattern_route, "PATTERN_ROOT_ROUTE", False)
    with pytest.raises(RoundingError, match="switched off"):
        pattern_root(ctx)


def test_route_passes_counts_without_a_limit_and_its_share_under_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ctx = Opt().context(family_round("single-gpu", 128, 1))
    assert ctx is not None
    seen: list[dict[str, Any]] = []
    real = pattern_route.branch_and_price

    def recorded(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(pattern_route, "branch_and_price", recorded)
    pattern_root(ctx)
    pattern_root(dataclasses.replace(ctx, clock=Clock.started(100.0)))
    assert [k["time_limit"] for k in seen][0] == math.inf
    assert 0 < seen[1]["time_limit"] <= PATTERN_ROOT_TIME_SHARE * 100.0
    for k in seen:
        assert k["dive_only"] and k["root_ip_nodes"] > 0 and k["pricing"] == ROUTE_PRICING
