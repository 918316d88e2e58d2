"""The counting model when a job class has no column at all.

``tiny_round(3)`` (tests/test_exact_typed.py) has a 3-GPU job on servers of at most 2 GPUs:
it must spread, and under the per-server rule the restricted data without split rows
(``exact_splits=False``, ``spread_floor="high"``) gives it no spread slot whose points keep
the highest floor any split faces.
Its class-cover row (4) then has no terms, 0 = n_k.  The matrix fast path keeps that row
and the solver reports the model infeasible; the Pyomo builder used to raise
``InvalidConstraintError`` (the row resolved to a plain ``False``).  The relaxed data
(``spread_floor="low"``) of the same round has the slots, and both builders agree on it;
so has the default data, which holds each split to its own floor (here they agree).
"""

from __future__ import annotations

from typing import Any

import pytest

from synergy_opt.formulations import counting, counting_fast
from synergy_opt.mechanisms.packing import select_runnable
from synergy_opt.solve import TerminationStatus, pyomo_to_matrix, solve_matrix, solve_pyomo
from tests.test_exact_typed import tiny_round

ABS_TOL = REL_TOL = 1e-6


def _empty_classes(data: dict[str, Any]) -> list[int]:
    """Classes with neither a whole-job column nor a spread slot."""
    whole = {k for _, k, _ in data["x_index"]}
    spread = {k for k, _ in data["slots"]}
    return [k for k in data["g"] if k not in whole and k not in spread]


def _both(data: dict[str, Any], relax: bool, backend: str) -> tuple[Any, Any]:
    """The Pyomo and fast-path models of ``data``, checked row for row, each solved."""
    import pyomo.environ as pyo

    model = counting.build_from_data(data, relax=relax)
    cm = counting_fast.build_counting_matrix(data, relax=relax)
    rows = [c.name for c in model.component_data_objects(pyo.Constraint, active=True)]
    assert rows == list(cm.row_names)
    assert pyomo_to_matrix(model)[0].num_rows == cm.matrix.num_rows
    return solve_pyomo(model, backend, time_limit=30), solve_matrix(
        cm.matrix, backend, time_limit=30
    )


@pytest.mark.parametrize("backend", ["highs", "ortools"])
@pytest.mark.parametrize("relax", [False, True])
def test_class_without_columns_is_infeasible_in_both_builders(relax: bool, backend: str) -> None:
    inst = tiny_round(3)
    data = counting._model_data(inst, select_runnable(inst), exact_splits=False)
    empty = _empty_classes(data)
    assert empty and all(data["n"][k] >= 1 for k in empty)
    ref, fast = _both(data, relax, backend)
    assert fast.status is TerminationStatus.INFEASIBLE
    assert ref.status is TerminationStatus.INFEASIBLE
    assert ref.objective is None and fast.objective is None


def test_same_round_with_relaxed_floors_has_the_slots_and_one_optimum() -> None:
    inst = tiny_round(3)
    data = counting._model_data(inst, select_runnable(inst), spread_floor="low")
    assert _empty_classes(data) == []
    ref, fast = _both(data, relax=False, backend="highs")
    assert ref.status is TerminationStatus.OPTIMAL and fast.status is TerminationStatus.OPTIMAL
    assert fast.objective == pytest.approx(ref.objective, rel=REL_TOL, abs=ABS_TOL)
    # The staged solve takes this answer when the restricted data has none (the checker
    # accepts it): the empty class costs nothing but the restricted model.
    res = counting_fast.solve_counting(inst, select_runnable(inst), time_limit=20)
    assert res.objective == pytest.approx(ref.objective, rel=REL_TOL, abs=ABS_TOL)
    # The default data states each split's floor: the class has its slots there too.
    exact = counting._model_data(inst, select_runnable(inst))
    assert _empty_classes(exact) == [] and not exact["floor_gap"]
    ref_x, fast_x = _both(exact, relax=False, backend="highs")
    assert fast_x.objective == pytest.approx(ref.objective, rel=REL_TOL, abs=ABS_TOL)
    assert ref_x.objective == pytest.approx(ref.objective, rel=REL_TOL, abs=ABS_TOL)
