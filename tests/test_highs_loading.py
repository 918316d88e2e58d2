"""HiGHS gets the matrix model as it is: the array form of ``passModel`` (solve.py)."""

from __future__ import annotations

import dataclasses

import numpy as np

from synergy_opt.matrix import MatrixModel, matrix_model
from synergy_opt.solve import TerminationStatus, _highs_matrix, highs_holding


def _model(*, maximize: bool) -> MatrixModel:
    # max/min x0 + 3 x1 + 0.5 x2, x0 integer; x0 + x1 <= 3, x1 + x2 in [1, 4].
    return matrix_model(
        [[(0, 1.0)], [(0, 1.0), (1, 1.0)], [(1, 1.0)]],
        [1.0, 3.0, 0.5],
        [5.0, 2.5, 1.0],
        [True, False, False],
        [-np.inf, 1.0],
        [3.0, 4.0],
        ["r0", "r1"],
        maximize=maximize,
        name="three",
    )


def test_held_model_is_the_matrix_model() -> None:
    for maximize in (True, False):
        mm = _model(maximize=maximize)
        lp = highs_holding(mm).getLp()
        assert (lp.num_col_, lp.num_row_) == (3, 2)
        assert list(lp.col_cost_) == [1.0, 3.0, 0.5]
        assert list(lp.col_lower_) == [0.0, 0.0, 0.0]
        assert list(lp.col_upper_) == [5.0, 2.5, 1.0]
        assert list(lp.row_lower_) == [-np.inf, 1.0]
        assert list(lp.row_upper_) == [3.0, 4.0]
        assert list(lp.a_matrix_.start_) == [0, 1, 3, 4]
        assert list(lp.a_matrix_.index_) == [0, 0, 1, 1]
        assert list(lp.a_matrix_.value_) == [1.0, 1.0, 1.0, 1.0]
        assert [int(v) for v in lp.integrality_] == [1, 0, 0]
        assert (int(lp.sense_) == -1) is maximize


def test_held_model_solves_to_its_optimum() -> None:
    best = _highs_matrix(_model(maximize=True), None, 1e-9, 1, True)
    assert best.status is TerminationStatus.OPTIMAL
    assert best.objective is not None and abs(best.objective - 8.0) < 1e-9  # x = (0, 2.5, 1)
    assert best.x is not None and abs(best.x[1] - 2.5) < 1e-9
    low = _highs_matrix(_model(maximize=False), None, 1e-9, 1, True)
    assert low.objective is not None and abs(low.objective - 0.5) < 1e-9  # x2 = 1 only


def test_a_refused_model_is_an_error_status_not_a_crash() -> None:
    bad = dataclasses.replace(_model(maximize=True), a_index=np.array([0, 0, 9, 1], np.int32))
    res = _highs_matrix(bad, None, 1e-4, 1, True)
    assert res.status is TerminationStatus.ERROR and res.x is None
    assert "refused model 'three'" in res.message
