"""Guarded solves: a call in a child process, killed at a hard deadline (synergy_opt.deadline).

HiGHS does not check its time limit everywhere (a presolve loop inside a sub-MIP heuristic
ran for ten minutes under a 20-s limit), so long exact solves run in a child that is killed
if it outlives its limit.  These tests pin the three outcomes (answer, killed, failed) and
that a guarded solve answers exactly what the in-process one does.
"""

from __future__ import annotations

import operator
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import synergy_opt.solve as solve_mod
from synergy_opt.deadline import (
    ChildFailed,
    DeadlineExceeded,
    guard_available,
    run_with_deadline,
    start_child,
    usable_cores,
)
from synergy_opt.matrix import matrix_model
from synergy_opt.solve import TerminationStatus, guard_deadline, solve_matrix

pytestmark = pytest.mark.skipif(not guard_available(), reason="no forkserver on this platform")


def _knapsack(n: int = 30, seed: int = 3):
    """A small multi-row knapsack MIP (maximise value under two capacities)."""
    rng = np.random.default_rng(seed)
    w1, w2 = rng.integers(1, 20, n), rng.integers(1, 20, n)
    cols = [[(0, float(w1[i])), (1, float(w2[i]))] for i in range(n)]
    return matrix_model(
        cols,
        rng.integers(1, 30, n).astype(float),
        [1.0] * n,
        [True] * n,
        [0.0, 0.0],
        [float(w1.sum() // 3), float(w2.sum() // 3)],
        ["cap1", "cap2"],
        maximize=True,
        name="knapsack",
    )


def test_child_answers() -> None:
    assert run_with_deadline(operator.add, (2, 3), 30.0) == 5


def test_child_is_killed_at_its_deadline() -> None:
    t0 = time.perf_counter()
    with pytest.raises(DeadlineExceeded, match="after 0.5 s"):
        run_with_deadline(time.sleep, (60,), 0.5)
    assert time.perf_counter() - t0 < 20  # killed, not waited for


def test_child_exception_is_raised_as_in_process() -> None:
    with pytest.raises(ValueError, match="invalid literal"):
        run_with_deadline(int, ("x",), 30.0)


def test_child_that_dies_without_answer_fails() -> None:
    with pytest.raises(ChildFailed, match="exited with code 3"):
        run_with_deadline(os._exit, (3,), 30.0)


def test_guarded_solve_equals_in_process() -> None:
    mm = _knapsack()
    plain = solve_matrix(mm, time_limit=30.0)
    guarded = solve_matrix(mm, time_limit=30.0, guard=True)
    assert guarded.status is TerminationStatus.OPTIMAL
    assert guarded.objective == plain.objective
    assert guarded.x is not None and plain.x is not None
    assert np.array_equal(guarded.x, plain.x)


def test_killed_solve_is_a_time_limit_without_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(solve_mod, "guard_deadline", lambda limit: 0.0)
    res = solve_matrix(_knapsack(), time_limit=30.0, guard=True)
    assert res.status is TerminationStatus.TIME_LIMIT
    assert res.objective is None and res.dual_bound is None and res.x is None
    assert "ran past its 30.0-s time limit" in res.message


def test_refused_option_is_a_value_error_in_the_child_too() -> None:
    with pytest.raises(ValueError, match="HiGHS option no_such_option"):
        solve_matrix(_knapsack(), time_limit=5.0, guard=True, highs_options={"no_such_option": 1})


def test_deadline_leaves_room_past_the_limit() -> None:
    assert guard_deadline(20.0) >= 20.0 + 5.0
    assert guard_deadline(0.0) > 0.0


def test_a_script_without_main_guard_is_not_re_run(tmp_path) -> None:
    """multiprocessing re-imports the main script in each child unless told otherwise: a
    user's unguarded experiment script would run again (and recurse) in every guarded solve."""
    script = tmp_path / "experiment.py"
    script.write_text(
        "import operator\n"
        "from synergy_opt.deadline import run_with_deadline, warm_up\n"
        "warm_up()\n"
        "print('ran', run_with_deadline(operator.add, (2, 3), 60.0), flush=True)\n"
        "print('again', run_with_deadline(operator.mul, (2, 3), 60.0), flush=True)\n"
    )
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["ran 5", "again 6"]


def test_started_child_runs_beside_the_caller() -> None:
    """start_child returns at once; the answer comes when asked for (opt-exact's opt beside
    its search)."""
    t0 = time.perf_counter()
    child = start_child(time.sleep, (0.5,))
    assert time.perf_counter() - t0 < 0.45  # not waited for
    assert child.result(30.0) is None
    assert time.perf_counter() - t0 >= 0.5
    assert start_child(operator.mul, (6, 7)).result(30.0) == 42


def test_killed_child_is_gone_at_once() -> None:
    import multiprocessing as mp

    child = start_child(time.sleep, (60,))
    t0 = time.perf_counter()
    child.kill()
    child.kill()  # idempotent
    assert time.perf_counter() - t0 < 5.0
    assert not mp.active_children()


def test_started_child_raises_as_in_process() -> None:
    with pytest.raises(ValueError):
        start_child(int, ("x",)).result(30.0)
    with pytest.raises(DeadlineExceeded):
        start_child(time.sleep, (60,)).result(0.3)


def test_usable_cores_is_at_least_one() -> None:
    assert usable_cores() >= 1


def test_ready_says_when_the_answer_is_there() -> None:
    """``ready`` never blocks: False while the child runs, True once it answered (then
    ``result`` returns at once, as often as asked), False once killed unanswered."""
    slow = start_child(time.sleep, (60,))
    assert not slow.ready()
    slow.kill()
    assert not slow.ready()
    quick = start_child(operator.mul, (6, 7))
    t0 = time.perf_counter()
    while not quick.ready():
        assert time.perf_counter() - t0 < 30, "the child never answered"
        time.sleep(0.01)
    assert quick.result(0.0) == 42
    assert quick.ready()
    assert quick.result(0.0) == 42


def test_pending_child_answers_like_a_started_one() -> None:
    """``PendingChild`` starts its child on a thread: the caller goes on at once and gets
    the child (and its answer) when it asks."""
    from synergy_opt.deadline import PendingChild

    t0 = time.perf_counter()
    pending = PendingChild(operator.mul, (6, 7))
    assert time.perf_counter() - t0 < 0.45
    assert pending.child().result(30.0) == 42


def test_pending_child_killed_at_once_leaves_no_process() -> None:
    """``kill`` does not wait for the start; a child killed while being started is killed by
    the thread that starts it, one killed before is never started."""
    import multiprocessing as mp

    from synergy_opt.deadline import ChildFailed, PendingChild

    pending = PendingChild(time.sleep, (60,))
    pending.kill()
    pending.kill()  # idempotent
    try:
        assert not pending.child().ready()
    except ChildFailed:
        pass  # killed before its start
    t0 = time.perf_counter()
    while mp.active_children():
        assert time.perf_counter() - t0 < 5.0, "the child outlived its kill"
        time.sleep(0.01)


def test_pending_child_killed_within_its_delay_never_starts() -> None:
    """Killed within ``delay_s``, no child is started and the thread ends at once."""
    import multiprocessing as mp

    from synergy_opt.deadline import ChildFailed, PendingChild

    t0 = time.perf_counter()
    pending = PendingChild(operator.mul, (6, 7), delay_s=30.0)
    pending.kill()
    with pytest.raises(ChildFailed, match="killed before it started"):
        pending.child()
    assert time.perf_counter() - t0 < 5.0
    assert not mp.active_children()
    late = PendingChild(operator.mul, (6, 7), delay_s=0.2)
    assert late.child().result(30.0) == 42
