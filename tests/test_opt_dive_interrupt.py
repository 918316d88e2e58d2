"""The neighbourhood search gives way to the pattern dive's answer (``search._late``).

Under a time limit on split-penalty rounds the dive runs beside the routes
(:mod:`synergy_opt.mechanisms.opt.pattern_dive`).  Where it answered only during the
search from the late routes' best plan, its plan used to wait until that search had
spent the clock: split penalties 128 GPUs seed 2011 at 20 s climbed from TUNE's 58.71 to
61.53 while the dive's 63.477 waited, and ``opt`` returned 63.477 unsearched (0.973 of
the optimum 65.2484).  Now the search takes the dive's plan between neighbourhoods once
the dive has answered, and stops to search from it where it is higher than the search's
state; otherwise the search goes on undisturbed (stopped and resumed, it took other
neighbourhoods and ended lower on seed 7).

The dive here is a stand-in (its answer is another plan of the round, or none), so the
tests do not depend on the machine's speed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from synergy_opt.check import check_allocation
from synergy_opt.generate import family_round
from synergy_opt.io import allocation_to_dict, dumps
from synergy_opt.mechanisms.opt import Opt
from synergy_opt.mechanisms.opt import mechanism as opt_mechanism
from synergy_opt.mechanisms.opt import neighbourhood as nb
from synergy_opt.mechanisms.opt import search as opt_search
from synergy_opt.mechanisms.opt.configure import reoptimise
from synergy_opt.mechanisms.opt.context import RoundContext, gpu_plan
from synergy_opt.mechanisms.opt.neighbourhood import State, improve, total_of
from synergy_opt.mechanisms.opt.pattern_dive import PATTERN_DIVE
from synergy_opt.mechanisms.tune import Tune
from synergy_opt.types import Allocation, RoundInstance

#: A round whose answer comes from the neighbourhood search after the late routes (split
#: penalties 32 GPUs, 4 servers: the late routes reach 14.08, the search 14.5399).
ROUND: tuple[str, int, int] = ("split-penalty", 32, 28)


class _StandIn:
    """A dive child that has not answered for the first ``silent`` polls, then has."""

    def __init__(self, silent: int) -> None:
        self.silent = silent
        self.polls = 0
        self.killed = False

    def ready(self) -> bool:
        self.polls += 1
        return self.polls > self.silent

    def kill(self) -> None:
        self.killed = True


def _bytes(a: Allocation) -> str:
    return dumps(allocation_to_dict(dataclasses.replace(a, solve_seconds=0.0)))


def _inst() -> RoundInstance:
    return family_round(*ROUND)


def _state_of(ctx: RoundContext, alloc: Allocation) -> State:
    """``alloc``'s GPUs per job as the search's state, its points re-optimised."""
    plan = gpu_plan(ctx.inst, {ja.id: ja.placement for ja in alloc.jobs})
    points, parts = reoptimise(ctx, plan)
    return State(plan, points, total_of(ctx, plan, points), parts)


def _spy_searches(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, bool, float]]:
    """Each ``search_from`` call: (its start's total, whether it had an interrupt, the
    total it returned)."""
    calls: list[tuple[float, bool, float]] = []
    real = opt_search.search_from

    def spy(
        ctx: RoundContext,
        state: State,
        target: float,
        interrupt: Callable[[State], bool] | None = None,
    ) -> State:
        out = real(ctx, state, target, interrupt)
        calls.append((state.total, interrupt is not None, out.total))
        return out

    monkeypatch.setattr(opt_search, "search_from", spy)
    return calls


def _with_stand_in(
    monkeypatch: pytest.MonkeyPatch, dive: _StandIn, answer: Callable[[RoundContext], State | None]
) -> None:
    monkeypatch.setattr(opt_mechanism, "start_dive", lambda ctx: dive)

    def dived(
        ctx: RoundContext, child: object, keep: Callable[..., State]
    ) -> tuple[State | None, None]:
        assert child is dive
        got = answer(ctx)
        if got is None:
            return None, None
        return keep(PATTERN_DIVE, got.plan, got.points, got.parts), None  # as the real one

    monkeypatch.setattr(opt_search, "dived", dived)


def test_improve_stops_before_its_next_neighbourhood() -> None:
    inst = _inst()
    ctx = Opt().context(inst)
    assert ctx is not None
    start = _state_of(ctx, Tune().allocate(inst))
    solved: list[int] = []
    real = nb._solve_hood

    def counting(*args: object, **kwargs: object) -> State | None:
        solved.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as m:
        m.setattr(nb, "_solve_hood", counting)
        assert improve(ctx, start, ctx.optimum, lambda state: True) is start
        assert solved == []
        full = improve(ctx, start, ctx.optimum)
        n_full = len(solved)
        solved.clear()
        # asked to stop once past the start: after the first neighbourhood that gains
        first = improve(ctx, start, ctx.optimum, lambda state: state.total > start.total)
    assert full.total > start.total  # the search does gain here
    assert start.total < first.total <= full.total
    assert 1 <= len(solved) <= n_full


def test_a_better_dive_plan_cuts_the_search_and_is_searched_from(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    inst = _inst()
    plain = Opt().allocate(inst)  # no limit, no dive: the search's own answer
    dive = _StandIn(silent=1)  # not ready when the late routes end, ready at once after
    _with_stand_in(monkeypatch, dive, lambda ctx: _state_of(ctx, plain))
    calls = _spy_searches(monkeypatch)
    got = Opt().allocate(inst)
    # the first search had the interrupt and stopped before any neighbourhood: the spread
    # move alone cannot reach the dive's plan here
    assert calls[0][1] and calls[0][2] < plain.total_throughput - 1e-6
    # the next one starts from the dive's plan, without an interrupt
    assert calls[1][0] == pytest.approx(plain.total_throughput, abs=1e-9) and not calls[1][1]
    assert got.total_throughput >= plain.total_throughput - 1e-9
    assert check_allocation(inst, got, fair_share=True) == []
    assert dive.killed


@pytest.mark.parametrize("answer", ["none", "lower"])
def test_a_dive_plan_no_higher_leaves_the_search_alone(
    monkeypatch: pytest.MonkeyPatch, answer: str
) -> None:
    """The dive answers at once with no plan, or with one below the search's (TUNE's
    GPUs): the search is not stopped and ends where it ends without the dive."""
    inst = _inst()
    plain = Opt().allocate(inst)
    dive = _StandIn(silent=1)
    tune = Tune().allocate(inst)
    assert tune.total_throughput < plain.total_throughput - 0.1
    _with_stand_in(
        monkeypatch, dive, lambda ctx: None if answer == "none" else _state_of(ctx, tune)
    )
    calls = _spy_searches(monkeypatch)
    got = Opt().allocate(inst)
    assert dive.polls >= 2  # it was asked during the search
    assert calls[0][1]  # that search had the interrupt ...
    assert calls[0][2] == pytest.approx(plain.total_throughput, abs=1e-9)  # ... and ran out
    assert got.total_throughput == pytest.approx(plain.total_throughput, abs=1e-9)
    if answer == "none":  # nothing taken from the dive: the same bytes
        assert _bytes(got) == _bytes(plain)
    assert check_allocation(inst, got, fair_share=True) == []


def test_a_dive_that_never_answers_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    inst = _inst()
    plain = Opt().allocate(inst)
    dive = _StandIn(silent=10**9)
    _with_stand_in(monkeypatch, dive, lambda ctx: pytest.fail("the dive never answered"))
    got = Opt().allocate(inst)
    assert dive.polls >= 2  # asked after the late routes and between neighbourhoods
    assert _bytes(got) == _bytes(plain)
