"""Pricing by enumeration looks only at rows that can be returned (``pricing_sets.PRUNE``).

The pruning must change nothing but time: column generation's trajectory, and so every
bound and answer built on it, follows the patterns each call returns.  So each call is
solved with the pruning off and on and the two answers must be the same bytes, on a
root's real column generation (whose late prices leave most rows below the kept list)
and on random prices with node restrictions; and the pruning must look at fewer rows.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from synergy_opt.formulations import branch_node as bnode
from synergy_opt.formulations import pricing_enum, pricing_sets
from synergy_opt.formulations.patterns import server_shapes
from synergy_opt.formulations.patterns_fast import _zero_prices, build_pricing_matrix
from synergy_opt.formulations.pricing_enum import PatternTable
from tests.test_pricing_enum import _data, _node_upper, _random_costs


def _solved_both_ways(
    table: PatternTable, cost: np.ndarray, upper: np.ndarray, monkeypatch: pytest.MonkeyPatch
) -> tuple[Any, Any]:
    monkeypatch.setattr(pricing_sets, "PRUNE", False)
    off = table.solve(cost, upper, keep=8)
    monkeypatch.setattr(pricing_sets, "PRUNE", True)
    on = table.solve(cost, upper, keep=8)
    return off, on


def _random_calls(
    gpus: int, seed: int, trials: int, draw: int
) -> Iterator[tuple[int, PatternTable, np.ndarray, np.ndarray]]:
    """Per server class of split penalties ``gpus``/``seed``: ``trials`` calls of random
    prices of every scale, every other one at a random node (trial, table, cost, upper)."""
    data = _data(gpus, seed)
    rng = np.random.default_rng(draw)
    for run in server_shapes(data):
        table = PatternTable.build(data, run[0])
        assert table is not None
        pm, pcols, _ = build_pricing_matrix(data, run[0], _zero_prices(data))
        for trial in range(trials):
            cost = _random_costs(data, run[0], pcols, rng)
            upper = _node_upper(pm, pcols, rng) if trial % 2 else pm.col_upper.copy()
            yield trial, table, cost, upper


def _same(a: tuple[Any, list[np.ndarray]], b: tuple[Any, list[np.ndarray]]) -> bool:
    return (
        a[0] == b[0]
        and len(a[1]) == len(b[1])
        and all(x.tobytes() == y.tobytes() for x, y in zip(a[1], b[1], strict=True))
    )


@pytest.mark.parametrize(("gpus", "seed"), [(64, 3), (128, 2)])
def test_a_roots_column_generation_prices_the_same_bytes_with_fewer_rows(
    gpus: int, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every pricing call of a root's column generation, off and on: the same optimum and
    the same patterns in the same order; fewer rows valued with the pruning on."""
    data = _data(gpus, seed)
    rows = {False: 0, True: 0}
    calls = differ = 0
    set_values = pricing_sets.set_values
    solve = PatternTable.solve

    def counted(m: float, r: Any, chosen: np.ndarray, *rest: Any) -> np.ndarray:
        rows[pricing_sets.PRUNE] += len(chosen)
        return set_values(m, r, chosen, *rest)

    def both(self: PatternTable, cost: np.ndarray, upper: np.ndarray, *, keep: int = 8) -> Any:
        nonlocal calls, differ
        monkeypatch.setattr(pricing_sets, "PRUNE", False)
        off = solve(self, cost, upper, keep=keep)
        monkeypatch.setattr(pricing_sets, "PRUNE", True)
        on = solve(self, cost, upper, keep=keep)
        calls += 1
        differ += not _same(off, on)
        return on

    monkeypatch.setattr(pricing_sets, "set_values", counted)
    monkeypatch.setattr(PatternTable, "solve", both)
    pricer = bnode._Pricer(data)
    assert any(isinstance(s, pricing_enum.TableSolve) for s in pricer.solvers)
    lp = bnode.solve_node(data, pricer, [], bnode.Node(), prune_at=None, deadline=time.time() + 120)
    assert lp is not None and lp.bound is not None
    assert calls >= 10
    assert differ == 0
    assert rows[True] < rows[False]


@pytest.mark.parametrize(("gpus", "seed", "trials"), [(32, 4, 40), (128, 2, 20)])
def test_random_prices_and_nodes_price_the_same_bytes(
    gpus: int, seed: int, trials: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Random prices of every scale, half of them at a random node: off and on agree."""
    compared = 0
    for trial, table, cost, upper in _random_calls(gpus, seed, trials, seed + 100):
        off, on = _solved_both_ways(table, cost, upper, monkeypatch)
        assert _same(off, on), f"trial {trial}"
        compared += off[0] is not None
    assert compared > 0


def test_a_tie_at_the_kept_lists_edge_is_chosen_among_every_row() -> None:
    """Where the values left after pruning tie at the edge, the choice is numpy's over
    every row (None asks for it); without a tie the top values are one set."""
    assert pricing_sets.unique_best(np.array([5.0, 3.0, 3.0, 1.0]), 2) is None
    assert sorted(pricing_sets.unique_best(np.array([5.0, 4.0, 3.0, 3.0]), 2) or []) == [0, 1]
    got = pricing_sets.unique_best(np.array([2.0, -np.inf, -np.inf]), 2)
    assert got == [0]


def test_the_kept_list_reaches_only_when_full_and_pruning() -> None:
    kept = pricing_sets.Kept(2)
    kept.add(3.0)
    assert kept.reach() == -np.inf
    kept.add(1.0)
    kept.add(2.0)
    assert kept.reach() == pytest.approx(2.0, abs=1e-8) and kept.reach() < 2.0


@pytest.mark.parametrize(("gpus", "seed", "trials"), [(32, 4, 12), (128, 2, 6)])
def test_within_gives_the_same_optimum_and_caps_with_and_without_pruning(
    gpus: int, seed: int, trials: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reduced-cost fixing's caps (``PatternTable.within``) at gaps from none to wide:
    valuing only the rows a bound lets through gives the same optimum and caps."""
    nonzero = 0
    for _, table, cost, upper in _random_calls(gpus, seed, trials, seed + 200):
        for delta in (0.0, 0.05, 0.6, 5.0):
            monkeypatch.setattr(pricing_sets, "PRUNE", False)
            top_off, caps_off = table.within(cost, upper, delta)
            monkeypatch.setattr(pricing_sets, "PRUNE", True)
            top_on, caps_on = table.within(cost, upper, delta)
            assert top_on == top_off and caps_on.tobytes() == caps_off.tobytes()
            nonzero += int(caps_on.sum() > 0)
    assert nonzero > 0
