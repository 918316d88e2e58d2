"""``opt`` beside ``opt-exact``'s search (mechanisms/opt_exact.py, OPT_BESIDE): its answer
floors the result where the search does not prove one, its child is stopped when it does."""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import time
from typing import Any

import pytest

import synergy_opt.mechanisms.opt_exact as opt_exact
from synergy_opt.check import check_allocation
from synergy_opt.deadline import ChildFailed, guard_available, usable_cores, warm_up
from synergy_opt.generate import family_round
from synergy_opt.mechanisms import make_mechanism
from synergy_opt.mechanisms.base import MechanismOptions
from synergy_opt.mechanisms.packing import select_runnable
from synergy_opt.types import Allocation


class _Stub:
    """A finished child: ``result`` gives ``value`` (or raises it)."""

    def __init__(self, value: Any) -> None:
        self.value = value
        self.killed = False

    def result(self, timeout_s: float) -> Any:
        if isinstance(self.value, BaseException):
            raise self.value
        return self.value

    def kill(self) -> None:
        self.killed = True


def _answers() -> tuple[Any, Allocation, Allocation]:
    inst = family_round("split-penalty", 32, 4)
    tune = make_mechanism("tune", MechanismOptions()).allocate(inst)
    opt = make_mechanism("opt", MechanismOptions()).allocate(inst)
    assert opt.total_throughput > tune.total_throughput
    return inst, tune, opt


def test_the_better_answer_and_the_smaller_bound_are_kept() -> None:
    inst, tune, opt = _answers()
    runnable = select_runnable(inst)
    assert opt.upper_bound is not None
    low = dataclasses.replace(tune, upper_bound=opt.upper_bound + 5.0)
    got = opt_exact._with_beside(inst, low, _Stub(opt), 0.0, runnable)  # type: ignore[arg-type]
    assert got.total_throughput == opt.total_throughput
    assert got.upper_bound == opt.upper_bound
    # the search's answer stays where the child's is lower, with the smaller bound
    high = dataclasses.replace(opt, upper_bound=opt.upper_bound - 1e-3)
    kept = opt_exact._with_beside(inst, high, _Stub(tune), 0.0, runnable)  # type: ignore[arg-type]
    assert kept.total_throughput == opt.total_throughput
    assert kept.upper_bound == opt.upper_bound - 1e-3


def test_a_failed_child_changes_nothing() -> None:
    inst, tune, _ = _answers()
    got = opt_exact._with_beside(
        inst,
        tune,
        _Stub(ChildFailed("died")),
        0.0,
        select_runnable(inst),  # type: ignore[arg-type]
    )
    assert got is tune


def test_no_child_on_one_core_or_when_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    inst = family_round("split-penalty", 32, 4)
    monkeypatch.setattr(opt_exact, "usable_cores", lambda: 1)
    assert opt_exact._opt_beside(inst, MechanismOptions(), 5.0) is None
    monkeypatch.setattr(opt_exact, "usable_cores", lambda: 2)
    monkeypatch.setattr(opt_exact, "OPT_BESIDE", False)
    assert opt_exact._opt_beside(inst, MechanismOptions(), 5.0) is None


def test_the_child_has_the_time_left_until_its_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """The child's ``opt`` gets what is left of its share when it starts, not the whole
    share again: its start (a fork, unpickling, imports) is on the same clock."""
    limits: list[float | None] = []

    def recorded(inst: Any, options: MechanismOptions) -> Any:
        limits.append(options.time_limit_s)
        return None

    monkeypatch.setattr(opt_exact, "_run_opt", recorded)
    inst = family_round("split-penalty", 32, 4)
    until = time.time() + 5.0
    time.sleep(0.5)
    opt_exact._run_opt_until(inst, MechanismOptions(), until)
    assert limits[0] is not None and 4.0 < limits[0] <= 4.5
    opt_exact._run_opt_until(inst, MechanismOptions(), time.time() - 1.0)  # already past
    assert limits[1] == opt_exact.BESIDE_MIN_S


@pytest.mark.skipif(
    not guard_available() or usable_cores() < 2, reason="no child beside on this machine"
)
def test_the_child_answers_within_its_share() -> None:
    """Split penalties 128 GPUs seed 7: ``opt`` there uses all the time it is given.  The
    child's answer is in by the time the parent waits for it (its share and the grace);
    it came 1.3-1.5 s late when the child's imports were not on its clock."""
    warm_up()
    inst = family_round("split-penalty", 128, 7)
    opt_exact._opt_beside(inst, MechanismOptions(), 0.5).result(30.0)  # the server is up
    left = 2.0
    t0 = time.perf_counter()
    child = opt_exact._opt_beside(inst, MechanismOptions(), left)
    assert child is not None
    got = child.result(left + opt_exact.BESIDE_GRACE_S + 0.5)
    assert time.perf_counter() - t0 < left + opt_exact.BESIDE_GRACE_S + 0.5
    assert check_allocation(inst, got, fair_share=True) == []


@pytest.mark.skipif(not guard_available(), reason="no forkserver on this platform")
def test_search_that_proves_stops_the_child(monkeypatch: pytest.MonkeyPatch) -> None:
    """Split penalties 32 GPUs seed 4: opt's first answer is not at its bound, so the child
    starts; the search proves 8.6 and the child is stopped, not waited for."""
    started: list[Any] = []
    real = opt_exact.start_child

    def spy(fn: Any, args: tuple[Any, ...]) -> Any:
        started.append(real(fn, args))
        return started[-1]

    monkeypatch.setattr(opt_exact, "usable_cores", lambda: 2)
    monkeypatch.setattr(opt_exact, "start_child", spy)
    inst = family_round("split-penalty", 32, 4)
    got = make_mechanism("opt-exact", MechanismOptions(time_limit_s=30)).allocate(inst)
    assert len(started) == 1
    assert got.solve_seconds is not None and got.solve_seconds < 20  # not the child's 27 s
    assert not mp.active_children()
    assert got.upper_bound is not None and abs(got.total_throughput - got.upper_bound) < 1e-6
    assert abs(got.total_throughput - 8.6) < 1e-6
    assert check_allocation(inst, got, fair_share=True) == []


class _Ready(_Stub):
    """A child that has (or has not yet) answered."""

    def __init__(self, value: Any, ready: bool = True) -> None:
        super().__init__(value)
        self.is_ready = ready

    def ready(self) -> bool:
        return self.is_ready


def test_beside_at_bound_reads_only_a_ready_answer_at_its_bound() -> None:
    """The search stops for the child's answer only where it schedules the runnable set
    within the proof gap of its own bound; a time-limit note does not matter, other notes
    (a fallback, a cut) and a failed child do."""
    inst, tune, opt = _answers()
    runnable = select_runnable(inst)
    assert opt.upper_bound is not None and opt.notes == ()
    at = dataclasses.replace(opt, upper_bound=opt.total_throughput)
    assert opt_exact._beside_at_bound(_Ready(at), runnable)  # type: ignore[arg-type]
    assert not opt_exact._beside_at_bound(_Ready(at, ready=False), runnable)  # type: ignore[arg-type]
    assert not opt_exact._beside_at_bound(None, runnable)
    above = dataclasses.replace(at, upper_bound=opt.total_throughput * 1.01)
    assert not opt_exact._beside_at_bound(_Ready(above), runnable)  # type: ignore[arg-type]
    timed = dataclasses.replace(at, notes=("time limit reached in 2 solve(s) (counting)",))
    assert opt_exact._beside_at_bound(_Ready(timed), runnable)  # type: ignore[arg-type]
    other = dataclasses.replace(at, notes=("fell back to tune",))
    assert not opt_exact._beside_at_bound(_Ready(other), runnable)  # type: ignore[arg-type]
    assert not opt_exact._beside_at_bound(_Ready(ChildFailed("died")), runnable)  # type: ignore[arg-type]
    part = dataclasses.replace(at, jobs=at.jobs[1:])
    assert not opt_exact._beside_at_bound(_Ready(part), runnable)  # type: ignore[arg-type]


def test_pattern_stage_halts_when_the_child_is_at_its_bound() -> None:
    """Told to stop, the pattern stage solves no node and runs nothing after its search
    (no second opt, no counting model); not told, the same call solves the root."""
    inst = family_round("split-penalty", 32, 4)
    runnable = select_runnable(inst)
    called: list[str] = []

    def retry() -> Allocation:
        called.append("retry")
        return make_mechanism("opt", MechanismOptions()).allocate(inst)

    halted = opt_exact._pattern_stage(
        inst, runnable, [], 30.0, MechanismOptions(), retry, stop=lambda: True
    )
    assert halted is not None
    res, later = halted
    assert later == [] and called == []
    assert res.dual_bound is None and res.objective is None
    free = opt_exact._pattern_stage(inst, runnable, [], 30.0, MechanismOptions())
    assert free is not None
    assert free[0].dual_bound is not None and free[0].objective is not None


@pytest.mark.skipif(not guard_available(), reason="no child processes on this platform")
def test_the_counting_mip_stops_when_the_child_is_at_its_bound() -> None:
    """``_counting_until``: told to stop, the MIP's child is killed and nothing comes back;
    not told, the child's answer is the in-process solve's."""
    from synergy_opt.formulations.counting_fast import solve_counting

    inst = family_round("mixed-shapes", 32, 0)
    runnable = select_runnable(inst)
    options = MechanismOptions()
    asked: list[float] = []

    def stop_now() -> bool:
        asked.append(time.perf_counter())
        return True

    assert opt_exact._counting_until(inst, runnable, options, 30.0, [], stop_now) is None
    assert asked  # it was asked before the MIP answered
    got = opt_exact._counting_until(inst, runnable, options, 30.0, [], lambda: False)
    ref = solve_counting(inst, runnable, time_limit=30.0)
    assert got is not None and got.proven and ref.proven
    assert got.objective == pytest.approx(ref.objective, rel=1e-9)


@pytest.mark.skipif(not guard_available(), reason="no child processes on this platform")
def test_opt_exact_returns_the_childs_answer_once_it_meets_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where the first ``opt`` misses its bound, ``opt`` beside the counting MIP meets its
    own: the MIP is stopped and the child's answer comes back proven, with no note."""
    inst = family_round("mixed-shapes", 32, 0)
    runnable = select_runnable(inst)
    proven = make_mechanism("opt-exact", MechanismOptions(time_limit_s=30)).allocate(inst)
    at = dataclasses.replace(proven, upper_bound=proven.total_throughput, notes=())
    weak = make_mechanism("tune", MechanismOptions()).allocate(inst)
    monkeypatch.setattr(opt_exact, "_run_opt", lambda *a, **k: weak)  # misses any bound
    monkeypatch.setattr(opt_exact, "usable_cores", lambda: 2)
    monkeypatch.setattr(opt_exact, "_opt_beside", lambda *a, **k: _Ready(at))
    stopped: list[bool] = []
    real = opt_exact._counting_until

    def spy(*args: Any, **kwargs: Any) -> Any:
        got = real(*args, **kwargs)
        stopped.append(got is None)
        return got

    monkeypatch.setattr(opt_exact, "_counting_until", spy)
    got = make_mechanism("opt-exact", MechanismOptions(time_limit_s=30)).allocate(inst)
    assert stopped == [True]
    assert got.notes == () and got.mechanism == "opt-exact"
    assert got.total_throughput == pytest.approx(at.total_throughput)
    assert got.upper_bound == pytest.approx(at.total_throughput)
    assert check_allocation(inst, got, fair_share=True) == []
    assert {ja.id for ja in got.jobs} == {j.id for j in runnable}


def _early_round(monkeypatch: pytest.MonkeyPatch, first_opt: Allocation) -> list[Any]:
    """``opt-exact`` on two cores with ``first_opt`` as its first ``opt`` answer, no ``opt``
    beside and EARLY_COUNTING on; returns the list that records the early MIP handed to
    each ``_counting_until`` call."""
    monkeypatch.setattr(opt_exact, "_run_opt", lambda *a, **k: first_opt)
    monkeypatch.setattr(opt_exact, "usable_cores", lambda: 2)
    monkeypatch.setattr(opt_exact, "_opt_beside", lambda *a, **k: None)
    monkeypatch.setattr(opt_exact, "EARLY_COUNTING", True)
    passed: list[Any] = []
    real = opt_exact._counting_until

    def spy(*args: Any, **kwargs: Any) -> Any:
        passed.append(args[6] if len(args) > 6 else kwargs.get("early"))
        return real(*args, **kwargs)

    monkeypatch.setattr(opt_exact, "_counting_until", spy)
    return passed


@pytest.mark.skipif(not guard_available(), reason="no child processes on this platform")
def test_early_counting_mip_is_the_search_where_opt_is_cut(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where no pattern search serves the round, the counting MIP starts before ``opt``
    (EARLY_COUNTING); where the clock cuts ``opt``, that MIP is the one waited for, and its
    answer is the proven optimum."""
    inst = family_round("mixed-shapes", 32, 0)
    runnable = select_runnable(inst)
    proven = make_mechanism("opt-exact", MechanismOptions(time_limit_s=30)).allocate(inst)
    assert proven.upper_bound is not None
    assert proven.total_throughput == pytest.approx(proven.upper_bound, rel=1e-4)
    weak = make_mechanism("tune", MechanismOptions()).allocate(inst)
    cut = dataclasses.replace(weak, notes=("time limit reached in 1 solve(s) (counting)",))
    early = _early_round(monkeypatch, cut)
    got = make_mechanism("opt-exact", MechanismOptions(time_limit_s=30)).allocate(inst)
    assert len(early) == 1 and early[0] is not None
    assert got.total_throughput == pytest.approx(proven.total_throughput, rel=1e-4)
    assert got.upper_bound is not None
    assert got.total_throughput == pytest.approx(got.upper_bound, rel=1e-4)
    assert check_allocation(inst, got, fair_share=True) == []
    assert {ja.id for ja in got.jobs} == {j.id for j in runnable}


@pytest.mark.skipif(not guard_available(), reason="no child processes on this platform")
def test_early_counting_mip_is_killed_where_opt_ends_on_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``opt`` that ends uncut: the early MIP (from TUNE's answer) is killed and the MIP
    that runs is a new one from ``opt``'s answer; on a pattern-search round none starts."""
    inst = family_round("mixed-shapes", 32, 0)
    weak = make_mechanism("tune", MechanismOptions()).allocate(inst)
    passed = _early_round(monkeypatch, weak)
    made: list[Any] = []
    real_early = opt_exact._early_counting

    def spy_early(*args: Any, **kwargs: Any) -> Any:
        made.append(real_early(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(opt_exact, "_early_counting", spy_early)
    got = make_mechanism("opt-exact", MechanismOptions(time_limit_s=30)).allocate(inst)
    assert len(made) == 1 and made[0] is not None
    with pytest.raises(ChildFailed, match="killed before it started"):
        made[0].child()  # killed within its delay: never started
    assert passed == [None]
    assert got.upper_bound is not None
    assert got.total_throughput == pytest.approx(got.upper_bound, rel=1e-4)
    made.clear()
    split = family_round("split-penalty", 32, 4)
    make_mechanism("opt-exact", MechanismOptions(time_limit_s=30)).allocate(split)
    assert made == []
