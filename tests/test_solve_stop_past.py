"""``solve_matrix(..., stop_past=level)``: HiGHS's branch-and-bound stops, its incumbent
kept, once it has one and its dual bound says no solution reaches ``level``; where every
bound it meets reaches the level it solves as without.

The model: the server-class MIP of multi-GPU 64 GPUs seed 54 (``routes.server_class_mip``),
whose LP bound is 55.27 and whose root cuts bring the bound to 53.14 with an incumbent of
47.43 in about 0.3 s, where the node limit of 200 comes 2.6-3.3 s later at 51.69."""

from __future__ import annotations

import dataclasses
import math

import pytest

from synergy_opt.formulations.fast import build_server_classes
from synergy_opt.matrix import MatrixModel
from synergy_opt.mechanisms.opt import routes
from synergy_opt.solve import TerminationStatus, solve_matrix
from tests.conftest import family_context


@pytest.fixture(scope="module")
def class_mip() -> MatrixModel:
    ctx = family_context("multi-gpu", 64, 54)
    return build_server_classes(ctx.inst, ctx.classes, routes._class_allowed(ctx)).matrix


def test_a_level_no_solution_reaches_stops_at_the_first_incumbent(class_mip: MatrixModel) -> None:
    res = solve_matrix(class_mip, node_limit=200, stop_past=55.0)
    assert res.status is TerminationStatus.LIMIT
    assert res.objective is not None and res.x is not None  # the incumbent kept
    assert res.dual_bound is not None and res.dual_bound < 55.0
    assert res.objective <= res.dual_bound + 1e-9


def test_the_same_stop_minimising(class_mip: MatrixModel) -> None:
    """The model negated and minimised: the level is then a ceiling on the bound."""
    neg = dataclasses.replace(class_mip, cost=-class_mip.cost, maximize=False)
    down = solve_matrix(neg, node_limit=200, stop_past=-55.0)
    up = solve_matrix(class_mip, node_limit=200, stop_past=55.0)
    assert down.status is TerminationStatus.LIMIT
    assert down.objective == pytest.approx(-(up.objective or math.nan))
    assert down.dual_bound is not None and down.dual_bound > -55.0


def test_a_level_every_bound_reaches_changes_nothing() -> None:
    """Mixed shapes 32 GPUs seed 5's class MIP solved with and without a level below its
    optimum: the same status, answer and bound."""
    ctx = family_context("mixed-shapes", 32, 5)
    mm = build_server_classes(ctx.inst, ctx.classes, routes._class_allowed(ctx)).matrix
    plain = solve_matrix(mm, node_limit=200)
    assert plain.objective is not None
    low = solve_matrix(mm, node_limit=200, stop_past=plain.objective - 1.0)
    assert (low.status, low.objective, low.dual_bound) == (
        plain.status,
        plain.objective,
        plain.dual_bound,
    )
    assert low.x is not None and plain.x is not None and (low.x == plain.x).all()


def test_ortools_ignores_it() -> None:
    ctx = family_context("mixed-shapes", 32, 5)
    mm = build_server_classes(ctx.inst, ctx.classes, routes._class_allowed(ctx)).matrix
    res = solve_matrix(mm, "ortools", node_limit=200, stop_past=1e9)
    assert res.status is TerminationStatus.OPTIMAL
