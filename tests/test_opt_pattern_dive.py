"""The ``pattern-dive`` step (opt): branch-and-price's root and its dive to one packed
leaf, beside the late routes, under a time limit, on split-penalty rounds.

On ``family_round("split-penalty", 128, 13)`` every older route and the neighbourhood
search left ``opt`` at 54.6621 after 20 s (0.9889 of the proven optimum 55.2767,
``opt-exact``); the dive finds the optimum in 2-3 s.
"""

from __future__ import annotations

import time

import pytest

from synergy_opt.check import check_allocation
from synergy_opt.deadline import guard_available, usable_cores
from synergy_opt.formulations import branch_price as bp
from synergy_opt.formulations.branch_price import branch_and_price
from synergy_opt.generate import family_round
from synergy_opt.mechanisms import MechanismOptions, make_mechanism
from synergy_opt.mechanisms import opt_exact as exact_module
from synergy_opt.mechanisms.opt import Opt, pattern_dive
from synergy_opt.mechanisms.opt.configure import reoptimise
from synergy_opt.mechanisms.opt.context import RoundContext
from synergy_opt.mechanisms.opt.neighbourhood import total_of
from synergy_opt.mechanisms.opt.pattern_dive import PATTERN_DIVE, dive_plan, start_dive
from synergy_opt.mechanisms.packing import select_runnable
from synergy_opt.types import Allocation, RoundInstance, build_allocation
from tests.conftest import assert_plan_on_whole_gpus

#: opt-exact's proven optimum (relative gap <= 1e-4) of split penalties 128 GPUs seed 13.
OPTIMUM_SEED13: float = 55.2767
#: ... and of seed 8.
OPTIMUM_SEED8: float = 82.8872
#: ``opt``'s answer there at a 20-s limit before the step (every older route and the
#: neighbourhood search).
BEFORE_SEED13: float = 54.6621

needs_two_cores = pytest.mark.skipif(
    usable_cores() < 2 or not guard_available(),
    reason="the dive runs beside the routes: two cores and child processes",
)


def _context(
    seed: int, limit: float | None, routes_off: frozenset[str] = frozenset()
) -> RoundContext:
    inst = family_round("split-penalty", 128, seed)
    opt = Opt(MechanismOptions(time_limit_s=limit), routes_off=routes_off)
    ctx = opt.context(inst, time_limit_s=limit)
    assert ctx is not None
    return ctx


def test_the_dive_finds_seed_13s_optimum() -> None:
    """The dive (run in-process here) returns an allocation of the whole runnable set
    worth the proven optimum that the other routes and 20 s of search missed; it passes
    the checker with fair shares."""
    ctx = _context(13, None)
    got = pattern_dive._dive(ctx.inst, ctx.runnable, time.time() + 30.0, "highs")
    assert got is not None and got.placements is not None
    assert set(got.placements) == {j.id for j in ctx.runnable}
    alloc = build_allocation(ctx.inst, "opt", got.placements)
    assert check_allocation(ctx.inst, alloc, fair_share=True) == []
    assert alloc.total_throughput >= OPTIMUM_SEED13 - 1e-4 > BEFORE_SEED13
    # the root's bound: at or above the optimum, below the super-machine's 55.479
    assert got.bound is not None
    assert OPTIMUM_SEED13 - 1e-6 <= got.bound < ctx.optimum - 0.1


def test_the_dives_root_master_finds_seed_8s_optimum(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seed 8 (priced by the MIP and the grid): the root's integer master over the plain
    pool finds the proven optimum 82.8872; the dive's leaf alone gave 82.1605, and with
    TUNE's patterns in the pool the master finds 78.76.  What the master holds is the
    claim, not how fast HiGHS finds it: its 1-s slice (``ROOT_IP_S``) is lifted here,
    since on a slower machine the IP found it in 1.3-1.7 s and stopped at 81.0982 at 1 s
    (2026-12-07; the test failed there on the code it was written for)."""
    monkeypatch.setattr(bp, "ROOT_IP_S", 20.0)
    ctx = _context(8, None)
    got = pattern_dive._dive(ctx.inst, ctx.runnable, time.time() + 30.0, "highs")
    assert got is not None and got.placements is not None
    assert set(got.placements) == {j.id for j in ctx.runnable}
    alloc = build_allocation(ctx.inst, "opt", got.placements)
    assert check_allocation(ctx.inst, alloc, fair_share=True) == []
    assert alloc.total_throughput >= OPTIMUM_SEED8 - 1e-4


@needs_two_cores
def test_the_dive_beside_gives_a_plan_worth_the_optimum() -> None:
    """Started in a child beside the caller, its plan (GPUs per job) re-optimised as the
    mechanism does is worth the optimum, on whole GPUs."""
    ctx = _context(13, 60.0)
    child = start_dive(ctx)
    assert child is not None
    plan, bound = dive_plan(ctx, child, wait_s=60.0)
    assert plan is not None and bound is not None
    assert bound >= OPTIMUM_SEED13 - 1e-6
    assert_plan_on_whole_gpus(ctx, plan)
    points, parts = reoptimise(ctx, plan)
    assert total_of(ctx, plan, points) >= OPTIMUM_SEED13 - 1e-4
    alloc = build_allocation(ctx.inst, "opt", parts)
    assert check_allocation(ctx.inst, alloc, fair_share=True) == []


@needs_two_cores
def test_opt_under_a_limit_reaches_seed_13s_optimum() -> None:
    """Issue 10's open case: ``opt`` at a 20-s limit was 0.9889 of the optimum (now the
    optimum, measured).  Tested at 30 s: the late routes take about 9 of 20 s here and the
    dive's plan is taken when they end, so a machine half as fast would fail a 20-s test
    for want of time, not of the step.  The answer says that it depends on the machine's
    speed (whether the dive had answered when the routes ended)."""
    inst = family_round("split-penalty", 128, 13)
    got = make_mechanism("opt", MechanismOptions(time_limit_s=30.0)).allocate(inst)
    assert got.total_throughput >= 0.99 * OPTIMUM_SEED13
    assert check_allocation(inst, got, fair_share=True) == []
    assert any(PATTERN_DIVE in note for note in got.notes)
    # the bound reported is the dive root's (55.33), not the super-machine's 55.479
    assert got.upper_bound is not None
    assert OPTIMUM_SEED13 - 1e-6 <= got.upper_bound < 55.479 - 0.1


def test_the_step_stands_aside_without_a_limit() -> None:
    """Column generation stops on the clock: without a limit ``opt`` keeps to node limits
    (the same inputs give the same bytes), so the dive does not start."""
    ctx = _context(13, None)
    assert "no time limit" in (pattern_dive._why_not(ctx) or "")
    assert start_dive(ctx) is None


def test_the_step_needs_a_split_penalty() -> None:
    inst = family_round("multi-gpu", 128, 0)
    ctx = Opt(MechanismOptions(time_limit_s=20.0)).context(inst, time_limit_s=20.0)
    assert ctx is not None
    assert "split penalty" in (pattern_dive._why_not(ctx) or "")


def test_the_step_needs_two_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process it took 2-5 s from the routes and the search (seeds 7, 21, 1463 ended
    0.3-1.4 % lower at 20 s where the dive found nothing): on one core it does not run."""
    monkeypatch.setattr(pattern_dive, "usable_cores", lambda: 1)
    ctx = _context(13, 20.0)
    assert "one core" in (pattern_dive._why_not(ctx) or "")
    assert start_dive(ctx) is None


def test_a_caller_switches_the_step_off() -> None:
    ctx = _context(13, 30.0, routes_off=frozenset({PATTERN_DIVE}))
    assert "switched off" in (pattern_dive._why_not(ctx) or "")


def test_opt_exact_runs_opt_without_the_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """``opt-exact`` runs the whole search itself: the ``opt`` it runs leaves the dive out
    (its first steps would be done twice)."""
    seen: list[frozenset[str]] = []

    def record(self: Opt, inst: RoundInstance, *, quiet: bool = False) -> Allocation:
        seen.append(self.routes_off)
        raise RuntimeError("stop here")

    monkeypatch.setattr(Opt, "_allocate", record)
    with pytest.raises(RuntimeError, match="stop here"):
        exact_module._run_opt(family_round("split-penalty", 32, 0), MechanismOptions())
    assert seen == [exact_module.EXACT_ROUTES_OFF]
    assert PATTERN_DIVE in exact_module.EXACT_ROUTES_OFF


def test_dive_only_stops_after_the_root() -> None:
    """``dive_only``: one node (the root, its dive and the leaf packed at its points), the
    root's bound above the allocation it returns, which passes the checker."""
    inst = family_round("split-penalty", 128, 13)
    runnable = select_runnable(inst)
    tune = make_mechanism("tune").allocate(inst)
    res = branch_and_price(
        inst,
        runnable,
        time_limit=30.0,
        warm_start=[{ja.id: ja.placement for ja in tune.jobs}],
        dive_only=True,
    )
    assert res is not None and res.objective is not None and res.bound is not None
    assert res.nodes == 1 and res.leaves == 0
    assert res.source == "dive points"
    assert res.objective > tune.total_throughput
    assert res.bound >= OPTIMUM_SEED13 - 1e-6 >= res.objective - 1e-6
    got = build_allocation(inst, "x", res.placements)
    assert check_allocation(inst, got, fair_share=True) == []
