"""``solve_matrix(..., lp_first=True)``: an integral LP vertex is returned as the MIP's
optimum, a fractional one falls back to the MIP, and the optimum is the MIP's either way."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synergy_opt.generate import family_round
from synergy_opt.matrix import MatrixModel, csc_columns
from synergy_opt.mechanisms.opt.super_machine import split_super_machine
from synergy_opt.mechanisms.packing import select_runnable
from synergy_opt.solve import TerminationStatus, solve_matrix


def _mip(
    cost: list[float], upper: list[float], rows: list[list[float]], cap: list[float]
) -> MatrixModel:
    """max cost @ x, rows @ x <= cap, 0 <= x <= upper, x integer."""
    cols = [[(r, row[i]) for r, row in enumerate(rows) if row[i]] for i in range(len(cost))]
    start, idx, val = csc_columns(cols)
    n = len(cost)
    return MatrixModel(
        np.asarray(cost, dtype=float),
        np.zeros(n),
        np.asarray(upper, dtype=float),
        np.ones(n, dtype=bool),
        np.full(len(rows), -np.inf),
        np.asarray(cap, dtype=float),
        start,
        idx,
        val,
        maximize=True,
        name="toy",
    )


def test_integral_relaxation_is_returned_without_the_mip() -> None:
    # max 3a + 2b, a + b <= 4, a <= 3: the LP vertex (3, 1) is integral.
    res = solve_matrix(_mip([3, 2], [3, 10], [[1, 1]], [4]), lp_first=True)
    assert res.status is TerminationStatus.OPTIMAL
    assert "integral LP relaxation" in res.message
    assert res.objective == 11.0 and res.dual_bound == 11.0 and res.mip_gap == 0.0
    assert res.x is not None and list(res.x) == [3.0, 1.0]


def test_fractional_relaxation_falls_back_to_the_mip() -> None:
    # max 5a + 4b, 6a + 4b <= 9, a, b <= 2: the LP takes b = 2 and a = 1/6 (8.83); the
    # MIP's optimum is b = 2 (8).
    mm = _mip([5, 4], [2, 2], [[6, 4]], [9])
    res = solve_matrix(mm, lp_first=True)
    plain = solve_matrix(mm)
    assert "integral LP relaxation" not in res.message
    assert res.status is TerminationStatus.OPTIMAL
    assert res.objective == pytest.approx(8.0) == plain.objective
    assert res.dual_bound == pytest.approx(8.0)


def test_lp_first_is_ignored_by_ortools() -> None:
    mm = _mip([3, 2], [3, 10], [[1, 1]], [4])
    res = solve_matrix(mm, "ortools", lp_first=True)
    assert res.solver.startswith("ortools") and res.objective == pytest.approx(11.0)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(2, 5).flatmap(
        lambda n: st.tuples(
            st.lists(st.integers(0, 9), min_size=n, max_size=n),
            st.lists(st.integers(0, 4), min_size=n, max_size=n),
            st.lists(st.lists(st.integers(0, 7), min_size=n, max_size=n), min_size=1, max_size=3),
            st.lists(st.integers(0, 20), min_size=3, max_size=3),
        )
    )
)
def test_lp_first_finds_the_mip_optimum(
    case: tuple[list[int], list[int], list[list[int]], list[int]],
) -> None:
    cost, upper, rows, cap = case
    mm = _mip([float(c) for c in cost], [float(u) for u in upper], rows, cap[: len(rows)])
    res = solve_matrix(mm, lp_first=True)
    plain = solve_matrix(mm)
    assert res.status is TerminationStatus.OPTIMAL
    assert res.objective == pytest.approx(plain.objective, abs=1e-6)
    assert res.dual_bound is not None and res.dual_bound >= res.objective - 1e-9
    assert res.x is not None
    assert np.all(res.x == np.round(res.x))  # integer columns come back as integers
    dense = np.zeros((len(rows), len(cost)))
    for i in range(len(cost)):
        for k in range(mm.a_start[i], mm.a_start[i + 1]):
            dense[mm.a_index[k], i] = mm.a_value[k]
    assert np.all(dense @ res.x <= np.asarray(cap[: len(rows)]) + 1e-6)


@pytest.mark.parametrize(
    ("family", "gpus", "seed"),
    [
        (f, g, s)
        for f in ("multi-gpu", "single-gpu", "split-penalty", "mixed-shapes")
        for g in (32, 128)
        for s in (0, 7)
    ],
)
def test_super_machine_optimum_unchanged(family: str, gpus: int, seed: int) -> None:
    """OPT's super-machine (the MIP it solves LP-first) has the MIP's optimum and bound."""
    inst = family_round(family, gpus, seed)
    mm = split_super_machine(inst, select_runnable(inst)).matrix
    fast = solve_matrix(mm, lp_first=True)
    plain = solve_matrix(mm)
    assert fast.objective == pytest.approx(plain.objective, rel=1e-7)
    assert fast.dual_bound is not None and plain.dual_bound is not None
    assert fast.dual_bound <= plain.dual_bound + 1e-7 * abs(plain.dual_bound)
    assert fast.dual_bound >= fast.objective


def test_a_non_finite_vertex_is_not_taken_for_integral(monkeypatch: pytest.MonkeyPatch) -> None:
    """NaN passes ``abs(x - round(x)) > tol`` as integral; the LP-first path must refuse it."""
    import highspy

    real = highspy.Highs.getSolution

    def nan_solution(self: highspy.Highs) -> highspy.HighsSolution:
        sol = real(self)
        sol.col_value = [float("nan")] * len(sol.col_value)
        return sol

    mm = _mip([3, 2], [3, 10], [[1, 1]], [4])
    monkeypatch.setattr(highspy.Highs, "getSolution", nan_solution)
    res = solve_matrix(mm, lp_first=True)
    assert "integral LP relaxation" not in res.message
    assert not res.has_solution  # the MIP's NaN answer is refused too, as before
