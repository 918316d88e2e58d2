"""Exact pricing by enumeration (pricing_enum.py) against the pricing MIP, its reference.

Column generation's bounds are only valid if each pricing value is the problem's true
optimum, so the enumeration is compared with HiGHS on many random prices and node
restrictions (slots switched off, whole points left out), and every solution it returns
must be a feasible point of the MIP worth exactly what it claims.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from synergy_opt.formulations import branch_node as bnode
from synergy_opt.formulations import counting
from synergy_opt.formulations.patterns import Prices, pricing_costs, server_shapes
from synergy_opt.formulations.patterns_fast import (
    _pricing_solve,
    _zero_prices,
    build_pricing_matrix,
)
from synergy_opt.formulations.pricing_enum import PRICING_METHODS, PatternTable, SlotSide
from synergy_opt.generate import family_round
from synergy_opt.matrix import MatrixModel
from synergy_opt.mechanisms.packing import select_runnable

#: The MIP runs with a 1e-9 gap; both are exact beyond that.
REL_TOL = 1e-6
#: A solution meets the MIP's rows and bounds within this.
FEAS_TOL = 1e-7


def _data(gpus: int, seed: int) -> dict[str, Any]:
    inst = family_round("split-penalty", gpus, seed)
    return counting._model_data(inst, select_runnable(inst))


def _random_costs(
    data: dict[str, Any], s: int, pcols: list[Any], rng: np.random.Generator
) -> np.ndarray:
    """Pricing costs of random prices: cover prices near a job's GPUs, slot prices of
    either sign and of several scales (cores and GB prices often zero, as in practice)."""
    slots = list(data["slots"])
    scale = rng.choice([0.0, 0.05, 0.3, 1.0])
    prices = Prices(
        {k: rng.normal(1.0, 0.5) * data["g"][k] for k in data["g"]},
        {},
        {ki: rng.normal(0.0, 1.0) for ki in slots},
        {ki: rng.normal(0.0, scale) for ki in slots},
        {ki: rng.normal(0.0, scale / 20) for ki in slots},
    )
    wx, wp = pricing_costs(data, s, prices)
    return np.asarray([wx[idx] if n == "x" else wp[n, idx] for n, idx in pcols])


def _node_upper(pm: MatrixModel, pcols: list[Any], rng: np.random.Generator) -> np.ndarray:
    """Column bounds of a random node: some slots switched off, some whole points left out."""
    slots = sorted({idx for n, idx in pcols if n != "x"})
    upper = pm.col_upper.copy()
    off = {ki for ki in slots if rng.random() < 0.4}
    for j, (n, idx) in enumerate(pcols):
        if (n != "x" and idx in off) or (n == "x" and rng.random() < 0.15):
            upper[j] = 0.0
    return upper


def _violation(mm: MatrixModel, x: np.ndarray) -> float:
    """The largest row or bound violation of ``x`` in ``mm`` (integrality included)."""
    act = np.zeros(mm.num_rows)
    for c in range(mm.num_cols):
        seg = slice(int(mm.a_start[c]), int(mm.a_start[c + 1]))
        act[mm.a_index[seg]] += mm.a_value[seg] * x[c]
    frac = np.abs(x - np.round(x))[np.asarray(mm.integer, dtype=bool)]
    return float(
        max(
            np.max(mm.row_lower - act, initial=0.0),
            np.max(act - mm.row_upper, initial=0.0),
            np.max(mm.col_lower - x, initial=0.0),
            np.max(x - mm.col_upper, initial=0.0),
            np.max(frac, initial=0.0),
        )
    )


@pytest.mark.parametrize(("gpus", "seed", "trials"), [(32, 0, 60), (32, 4, 60), (128, 2, 40)])
def test_enumeration_equals_the_pricing_mip(gpus: int, seed: int, trials: int) -> None:
    """Same optimum as HiGHS on random prices, with and without node restrictions; each
    returned solution is feasible for the MIP and worth what it claims, best first."""
    data = _data(gpus, seed)
    rng = np.random.default_rng(seed)
    restricted = 0
    for run in server_shapes(data):
        s = run[0]
        table = PatternTable.build(data, s)
        assert table is not None and table.rows > 1
        pm, pcols, _ = build_pricing_matrix(data, s, _zero_prices(data))
        for trial in range(trials):
            cost = _random_costs(data, s, pcols, rng)
            upper = pm.col_upper.copy()
            if trial % 2:  # a node
                upper = _node_upper(pm, pcols, rng)
                restricted += 1
            mm = dataclasses.replace(pm, cost=cost, col_upper=upper)
            mine, sols = table.solve(cost, upper)
            ref, _ = _pricing_solve(mm, None)
            assert (mine is None) == (ref is None)
            if ref is None:
                continue
            assert mine == pytest.approx(ref, rel=REL_TOL, abs=REL_TOL)
            assert sols, "the optimum comes with its solution"
            values = [float(cost @ x) for x in sols]
            assert values[0] == pytest.approx(mine, rel=1e-9, abs=1e-9)
            assert all(a >= b - 1e-9 for a, b in zip(values, values[1:], strict=False))
            for x in sols:
                assert _violation(mm, x) <= FEAS_TOL
    assert restricted > 0


def test_slot_sets_respect_one_role_and_gpus() -> None:
    """The sets of slots tried together never hold more slots of a class than it has jobs
    (``pat_one_role``) nor more parts than the server has GPUs."""
    data = _data(128, 2)
    s = server_shapes(data)[0][0]
    side = SlotSide.build(data, s)
    assert side is not None
    per_class = side.sets.astype(int) @ np.eye(len(side.class_cap), dtype=int)[side.slot_class]
    assert np.all(per_class <= side.class_cap)
    assert np.all(side.sets.sum(1) <= side.G)
    assert side.sets.shape[0] > 1 and not side.sets[0].any()  # the empty set first


def test_too_long_a_table_falls_back_to_the_mip() -> None:
    """A class whose whole-job contents exceed the row cap is priced by the MIP: the
    enumeration method then hands back the MIP's solve function itself."""
    data = _data(32, 0)
    s = server_shapes(data)[0][0]
    assert PatternTable.build(data, s, max_rows=10) is None
    assert PRICING_METHODS["mip"](data, s) is _pricing_solve
    assert PRICING_METHODS["enumeration"](data, s) is not _pricing_solve


def test_the_search_prices_by_enumeration_with_the_mips_bounds() -> None:
    """Branch-and-price's pricer uses the enumeration by default, and a node's column
    generation reaches the same bound with either method (the columns may differ)."""
    data = _data(32, 4)
    fast, ref = bnode._Pricer(data), bnode._Pricer(data, "mip")
    assert all(f is not _pricing_solve for f in fast.solvers)
    bounds = []
    for pricer in (fast, ref):
        lp = bnode.solve_node(data, pricer, [], bnode.Node(), prune_at=None, deadline=float("inf"))
        assert lp is not None and lp.converged and lp.bound is not None
        bounds.append(lp.bound)
    assert bounds[0] == pytest.approx(bounds[1], rel=1e-6)


def test_the_quick_count_bounds_the_table() -> None:
    """The GPU-and-core count that skips hopeless listings never counts fewer rows than
    the table lists (else a class that fits could be sent to the MIP)."""
    from synergy_opt.formulations import pricing_enum

    for gpus, seed in ((32, 0), (128, 2)):
        data = _data(gpus, seed)
        s = server_shapes(data)[0][0]
        table = PatternTable.build(data, s)
        assert table is not None
        xs, _ = pricing_enum.server_columns(data, s)
        items = [
            (
                int(data["g"][k]),
                int(data["x_point"][s, k, p][0]),
                float(data["x_point"][s, k, p][1]),
                int(data["x_upper"][s, k, p]),
            )
            for k, p in xs
        ]
        bound = pricing_enum._row_bound(items, table.G, table.C)
        assert table.rows <= bound < 10 * table.rows


@pytest.mark.parametrize("delta", [0.05, 0.6])
def test_within_caps_are_the_mips_per_column_maxima(delta: float) -> None:
    """``PatternTable.within`` (reduced-cost fixing): per whole-job column, its cap c is
    the most copies any pattern worth more than optimum - delta holds, checked against the
    pricing MIP with the column's lower bound raised: at c copies such a pattern exists
    (worth more than optimum - delta), at c + 1 none does.  A cap one too small (an
    allocation's server fixed out) or too large (nothing fixed) fails here."""
    data = _data(32, 4)
    rng = np.random.default_rng(11)
    s = server_shapes(data)[0][0]
    table = PatternTable.build(data, s)
    assert table is not None
    pm, pcols, _ = build_pricing_matrix(data, s, _zero_prices(data))
    xs = [j for j, (n, _) in enumerate(pcols) if n == "x"]
    fixed = kept = 0
    for _ in range(2):
        cost = _random_costs(data, s, pcols, rng)
        upper = pm.col_upper.copy()
        top, caps = table.within(cost, upper, delta)
        ref, _ = _pricing_solve(dataclasses.replace(pm, cost=cost), None)
        assert top is not None and ref is not None
        assert top == pytest.approx(ref, rel=REL_TOL, abs=REL_TOL)
        for j in xs:
            c = int(caps[j])
            if c >= 1:
                lower = pm.col_lower.copy()
                lower[j] = c
                at, _ = _pricing_solve(dataclasses.replace(pm, cost=cost, col_lower=lower), None)
                assert at is not None and at > ref - delta - REL_TOL, (j, c)
                kept += 1
            if c + 1 <= upper[j]:
                lower = pm.col_lower.copy()
                lower[j] = c + 1
                over, _ = _pricing_solve(dataclasses.replace(pm, cost=cost, col_lower=lower), None)
                assert over is None or over <= ref - delta + REL_TOL, (j, c)
                fixed += c == 0
    assert kept > 0 and fixed > 0  # some columns kept, some fixed: not vacuous


def test_the_pricing_mips_options_keep_its_optimum() -> None:
    """The pricing MIP's options (heuristics off, a small cut pool, no restart: 3x faster
    on the rounds priced by the MIP) are all accepted by HiGHS, and they change no
    optimum: HiGHS with its defaults (presolve off, as before) proves the same values on
    random prices of a round whose table is too long for enumeration."""
    import highspy

    from synergy_opt.formulations.patterns_fast import PRICING_HIGHS_OPTIONS, _highs

    data = _data(128, 8)
    s = server_shapes(data)[0][0]
    assert PatternTable.build(data, s) is None  # this round is priced by the MIP
    pm, pcols, _ = build_pricing_matrix(data, s, _zero_prices(data))
    rng = np.random.default_rng(8)
    for _ in range(12):
        mm = dataclasses.replace(pm, cost=_random_costs(data, s, pcols, rng))
        mine, sols = _pricing_solve(mm, None)
        h = _highs(mm)
        for key, value in (("presolve", "off"), ("mip_rel_gap", 1e-9), ("mip_abs_gap", 1e-9)):
            h.setOptionValue(key, value)
        h.run()
        ref = h.getInfo().objective_function_value
        assert h.getModelStatus() == highspy.HighsModelStatus.kOptimal
        assert mine == pytest.approx(ref, rel=REL_TOL, abs=REL_TOL)
        assert float(mm.cost @ sols[0]) == pytest.approx(mine, rel=REL_TOL, abs=REL_TOL)
        assert _violation(mm, sols[0]) <= FEAS_TOL
    assert set(PRICING_HIGHS_OPTIONS) >= {"presolve", "mip_heuristic_run_rins"}
