"""Heuristic pricing on a grid (pricing_grid.py) against the pricing MIP.

The grid program only proposes patterns: column generation keeps using the MIP for every
bound.  So what must hold is that each proposed pattern is a feasible point of the MIP worth
exactly what it is ranked by, never more than the MIP's optimum, and that it is good enough
to spare most MIP calls (it finds the optimum on most random prices); and that column
generation with it converges to the same bound as without it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from synergy_opt.formulations import branch_node as bnode
from synergy_opt.formulations import pricing_grid
from synergy_opt.formulations.patterns import server_shapes
from synergy_opt.formulations.patterns_fast import (
    _pricing_solve,
    _zero_prices,
    build_pricing_matrix,
)
from synergy_opt.formulations.pricing_enum import PatternTable
from synergy_opt.formulations.pricing_grid import GridPricer
from tests.test_pricing_enum import (
    FEAS_TOL,
    REL_TOL,
    _data,
    _node_upper,
    _random_costs,
    _violation,
)


def _check_against_mip(data: dict[str, Any], s: int, trials: int, seed: int) -> tuple[int, int]:
    """(trials where the grid found the MIP's optimum, trials with an optimum); asserts
    every solution's feasibility, value and order on the way."""
    grid = GridPricer.build(data, s)
    assert grid is not None
    pm, pcols, _ = build_pricing_matrix(data, s, _zero_prices(data))
    rng = np.random.default_rng(seed)
    hits = total = 0
    for trial in range(trials):
        cost = _random_costs(data, s, pcols, rng)
        upper = _node_upper(pm, pcols, rng) if trial % 2 else pm.col_upper.copy()
        mm = dataclasses.replace(pm, cost=cost, col_upper=upper)
        sols = grid.solve(cost, upper, keep=8)
        ref, _ = _pricing_solve(mm, None)
        values = [float(cost @ x) for x in sols]
        assert all(a >= b for a, b in zip(values, values[1:], strict=False))
        assert len({x.tobytes() for x in sols}) == len(sols) <= 8
        for x in sols:
            assert _violation(mm, x) <= FEAS_TOL
        if ref is None:
            assert not sols
            continue
        total += 1
        if values:
            assert values[0] <= ref + REL_TOL * max(1.0, abs(ref))
            hits += values[0] >= ref - REL_TOL * max(1.0, abs(ref))
    return hits, total


@pytest.mark.parametrize(("gpus", "seed"), [(128, 8), (128, 7), (32, 4)])
def test_grid_patterns_are_feasible_and_mostly_optimal(gpus: int, seed: int) -> None:
    """128/8 and 128/7 are priced by the MIP (their tables would be too long); 128/7 has
    more classes with slots than :data:`MAX_SIGS` gives axes to, so some patterns are
    checked against ``pat_one_role`` when rebuilt.  The grid finds the MIP's optimum on at
    least 80 % of random prices (it found it on all of them when written)."""
    data = _data(gpus, seed)
    s = server_shapes(data)[0][0]
    if gpus == 128:
        assert PatternTable.build(data, s) is None  # the MIP prices this class
    hits, total = _check_against_mip(data, s, 30, seed)
    assert total >= 20 and hits >= 0.8 * total, (hits, total)


def test_more_slot_classes_than_axes_still_price() -> None:
    """On 128/7 (ten classes with slots) only some get an axis; the rest are plain stages."""
    data = _data(128, 7)
    grid = GridPricer.build(data, server_shapes(data)[0][0])
    assert grid is not None
    assert 0 < len(grid.axes) < grid.side.spread
    assert np.prod(grid.axes) <= pricing_grid.MAX_SIGS


def test_units_need_every_columns_gb_on_the_grid() -> None:
    """The GB unit is the coarsest that puts every column within the slack of a unit;
    none where a column's GB is off every grid up to :data:`MAX_UNITS`."""
    found = pricing_grid._units(np.asarray([20.83, 62.5, 124.98, 41.66]), 500.0)
    assert found is not None
    n, units = found
    assert n == 24 and units.tolist() == [1, 3, 6, 2]
    halves = pricing_grid._units(np.asarray([250.0, 500.0]), 500.0)
    assert halves is not None and halves[0] == 2 and halves[1].tolist() == [1, 2]
    assert pricing_grid._units(np.asarray([17.0, 23.0]), 500.0) is None  # no n <= 64 fits


def test_column_generation_with_the_grid_reaches_the_mips_bound() -> None:
    """The root's converged bound is the same with and without the grid (the MIP proves
    every bound), and with it the MIP runs on fewer rounds of pricing."""
    data = _data(32, 4)
    calls = {True: 0, False: 0}
    bounds = {}
    for quick in (True, False):
        pricer = bnode._Pricer(data, "mip", heuristic=quick)
        assert all(q is not None for q in pricer.quick) == quick
        price = pricer.price

        def counted(*args: Any, quick: bool = quick, price: Any = price, **kw: Any) -> Any:
            calls[quick] += 1
            return price(*args, **kw)

        pricer.price = counted  # type: ignore[method-assign]
        lp = bnode.solve_node(data, pricer, [], bnode.Node(), prune_at=None, deadline=float("inf"))
        assert lp is not None and lp.converged and lp.bound is not None
        bounds[quick] = lp.bound
    assert bounds[True] == pytest.approx(bounds[False], rel=1e-6)
    assert calls[True] < calls[False]


def test_too_many_multisets_leave_the_class_to_the_mip(monkeypatch: pytest.MonkeyPatch) -> None:
    """A class with more multisets of points than :data:`MAX_OPTIONS` gets no grid: column
    generation then prices it by the MIP alone, as before the grid."""
    data = _data(128, 8)
    s = server_shapes(data)[0][0]
    assert GridPricer.build(data, s) is not None
    monkeypatch.setattr(pricing_grid, "MAX_OPTIONS", 10)
    assert GridPricer.build(data, s) is None
    assert bnode._Pricer(data).quick == [None]


def test_multisets_are_the_listed_ones_in_the_listed_order() -> None:
    """The numpy enumeration gives the plain loop's count vectors in its order (which breaks
    the program's ties), its ``None`` past the cap, on random classes and servers."""
    rng = np.random.default_rng(7)
    compared = 0
    for _ in range(600):
        p = int(rng.integers(0, 6))
        args = (
            [int(u) for u in rng.integers(0, 5, p)],
            int(rng.integers(0, 9)),
            int(rng.integers(1, 3)),
            rng.integers(0, 6, p),
            rng.integers(0, 8, p),
            int(rng.integers(1, 9)),
            int(rng.integers(0, 25)),
            int(rng.integers(0, 30)),
        )
        fast = pricing_grid._multisets(*args)
        listed = pricing_grid._multisets_listed(*args)
        if listed is None:
            assert fast is None
            continue
        assert fast is not None and fast.dtype == listed.dtype
        assert fast.shape == listed.shape and np.array_equal(fast, listed)
        compared += len(listed) > 1
    assert compared > 300  # most draws have several options to order
    with pytest.MonkeyPatch.context() as mp:  # past the cap: neither lists
        mp.setattr(pricing_grid, "MAX_OPTIONS", 10)
        big = ([3, 3, 3], 8, 1, np.ones(3, int), np.ones(3, int), 8, 24, 24)
        assert (
            pricing_grid._multisets(*big) is None and pricing_grid._multisets_listed(*big) is None
        )
    # a real class: 128-GPU split-penalty server's, the program built either way alike
    data = _data(128, 8)
    s = server_shapes(data)[0][0]
    real = GridPricer.build(data, s)
    assert real is not None
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pricing_grid, "_multisets", pricing_grid._multisets_listed)
        listed_pricer = GridPricer.build(data, s)
    assert listed_pricer is not None
    classes = [
        (a, b) for a, b in zip(real.stages, listed_pricer.stages, strict=True) if not a.group
    ]
    assert classes  # classes with a pat_one_role row: their multisets of points
    for a, b in classes:
        assert np.array_equal(a.comp, b.comp) and np.array_equal(a.key, b.key)
