"""Branch-and-price on spread decisions (formulations/branch_price.md): exact, valid bounds.

The search must never cut off an allocation: every node's bound covers the best allocation
with that node's spread decisions, the answer equals the counting model's optimum, and an
integral master solution reads back as the allocation it stands for.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings

from synergy_opt.check import check_allocation
from synergy_opt.formulations import branch_dive as bdive
from synergy_opt.formulations import branch_leaf as bleaf
from synergy_opt.formulations import branch_node as bnode
from synergy_opt.formulations import branch_points as bpts
from synergy_opt.formulations import branch_price as bp
from synergy_opt.formulations import counting, counting_fast
from synergy_opt.formulations.packing_exact import refute_exactly
from synergy_opt.formulations.packing_flow import REFUTED, UNKNOWN, FlowVerdict
from synergy_opt.formulations.patterns import Pattern
from synergy_opt.formulations.patterns_fast import _seed_patterns
from synergy_opt.generate import family_round
from synergy_opt.mechanisms import make_mechanism, opt_exact
from synergy_opt.mechanisms.base import MechanismOptions
from synergy_opt.mechanisms.packing import select_runnable
from synergy_opt.solve import TerminationStatus, solve_matrix
from synergy_opt.types import build_allocation
from tests.strategies import round_instances

REL = 1e-4


def _optimum(inst: Any) -> tuple[Any, counting_fast.CountingResult]:
    run = select_runnable(inst)
    ref = counting_fast.solve_counting(inst, run, time_limit=60)
    assert ref.proven and ref.objective is not None
    return run, ref


@pytest.mark.parametrize("seed", [0, 3, 4, 6])
def test_equals_the_counting_optimum_on_32_gpu_rounds(seed: int) -> None:
    """From a cold start (no known allocation) the search proves the counting optimum on
    32-GPU split-penalty rounds that need branching and leaves; the allocation it returns
    is worth its objective and keeps every floor."""
    inst = family_round("split-penalty", 32, seed)
    run, ref = _optimum(inst)
    res = bp.branch_and_price(inst, run, time_limit=60)
    assert res is not None and res.proven
    assert res.objective == pytest.approx(ref.objective, rel=REL)
    assert res.bound == pytest.approx(res.objective)
    assert res.nodes > 1  # these rounds branch: the test covers children and leaves
    alloc = build_allocation(inst, "bp", res.placements)
    assert alloc.total_throughput == pytest.approx(res.objective, rel=1e-9)
    assert check_allocation(inst, alloc, fair_share=True) == []


def _leaf_nodes(data: dict[str, Any]) -> list[bnode.Node]:
    """Every full set of spread decisions (slots used in class order, one point each)."""
    slots = list(data["slots"])
    choices = [[-1, *range(len(data["slot_points"][ki]))] for ki in slots]
    out = []
    for pick in itertools.product(*choices):
        on = frozenset(ki for ki, q in zip(slots, pick, strict=True) if q >= 0)
        off = frozenset(ki for ki, q in zip(slots, pick, strict=True) if q < 0)
        if any((k, i - 1) in off for k, i in on):
            continue  # not the canonical labelling: sym_slot_order rules it out
        banned = frozenset(
            (*ki, r)
            for ki, q in zip(slots, pick, strict=True)
            if q >= 0
            for r in range(len(data["slot_points"][ki]))
            if r != q
        )
        out.append(bnode.Node(off, on, banned))
    return out


def test_every_leaf_bound_covers_its_leaf_optimum() -> None:
    """On a round small enough to enumerate every leaf: column generation's bound at the
    leaf (pricing with switched-off slots removed, ghost columns for used ones) is never
    below the best allocation with those spread decisions, and the leaves together hold
    the round's optimum (so the comparison is not vacuous: some leaf meets it)."""
    inst = family_round("split-penalty", 32, 4)
    run, ref = _optimum(inst)
    data = counting._model_data(inst, run)
    cm = counting_fast.build_counting_matrix(data)
    pricer = bnode._Pricer(data)
    pool: list[Any] = []
    best = -math.inf
    checked = 0
    for node in _leaf_nodes(data):
        lp = bnode.solve_node(data, pricer, pool, node, prune_at=None, deadline=math.inf)
        leaf = solve_matrix(bleaf._leaf_matrix(cm, node, ()), "highs", time_limit=60)
        if leaf.status is TerminationStatus.INFEASIBLE:
            continue
        assert leaf.status is TerminationStatus.OPTIMAL and leaf.objective is not None
        assert lp is not None and lp.bound is not None and lp.converged
        assert lp.bound >= leaf.objective - 1e-6 * max(1.0, leaf.objective), node
        # the node's pattern rows keep the leaf's optimum
        cut = solve_matrix(
            bleaf._leaf_matrix(cm, node, pricer.cuts(lp.cuts)), "highs", time_limit=60
        )
        assert cut.objective == pytest.approx(leaf.objective, abs=1e-5)
        best = max(best, leaf.objective)
        checked += 1
    assert checked >= 3
    assert best == pytest.approx(ref.objective, rel=REL)


def test_integral_master_reads_back_as_the_allocation() -> None:
    """A master solution made of the servers of the counting optimum (z = how many servers
    hold each pattern, y = the spread slots' points) reads back to an allocation worth the
    optimum: patterns go to servers, spread parts are trimmed to their point."""
    inst = family_round("split-penalty", 32, 0)
    run, ref = _optimum(inst)
    data = counting._model_data(inst, run)
    cm = counting_fast.build_counting_matrix(data)
    x = counting_fast.start_from_placements(cm, ref.placements)
    assert x is not None
    values = cm.values(x)
    pats = _seed_patterns(data, cm, [x])  # one pattern per distinct server content
    z: dict[int, float] = {}
    for s in data["G"]:
        one = _seed_patterns(data, cm, [_only_server(cm, x, s)])
        if one:
            z[pats.index(one[0])] = z.get(pats.index(one[0]), 0.0) + 1.0
    y = {key[1]: v for key, v in values.items() if key[0] == "y"}
    assert any(v > 0.5 for v in y.values())  # the optimum spreads a job here
    lp = bnode._NodeLP(ref.objective, ref.objective, y, z, tuple(pats), 0.0, True)
    got = bdive._master_values(data, lp)
    assert got is not None
    alloc = build_allocation(inst, "bp", counting_fast.placements_from_values(data, got))
    assert alloc.total_throughput == pytest.approx(ref.objective, rel=1e-9)
    assert check_allocation(inst, alloc, fair_share=True) == []
    half = bnode._NodeLP(0.0, 0.0, y, {j: v / 2 for j, v in z.items()}, lp.patterns, 0.0, True)
    assert bdive._master_values(data, half) is None  # fractional: no allocation


def _only_server(cm: counting_fast.CountingMatrix, x: Any, s: int) -> Any:
    """``x`` with every column that is not server s's zeroed."""
    out = x.copy()
    for c, (name, idx) in enumerate(cm.columns):
        mine = (name == "x" and idx[0] == s) or (name in ("a", "u", "cp", "mp") and idx[2] == s)
        if not mine:
            out[c] = 0.0
    return out


def test_a_short_limit_still_bounds() -> None:
    """Stopped early (root not converged, or nodes left open), the bound still covers the
    optimum and the answer is not claimed proven."""
    inst = family_round("split-penalty", 32, 3)
    run, ref = _optimum(inst)
    for limit in (0.05, 0.6):
        res = bp.branch_and_price(inst, run, time_limit=limit)
        assert res is not None
        if res.bound is not None:
            assert res.bound >= ref.objective - 1e-6
        if not res.proven:
            assert res.bound is None or res.bound > (res.objective or -math.inf)


@settings(max_examples=25, deadline=None)
@given(inst=round_instances(max_jobs=5, max_servers=3))
def test_property_equals_counting_on_tiny_rounds(inst: Any) -> None:
    """On random small rounds (split penalties, mixed shapes, random matrices): proven
    answers equal the counting optimum, and the bound never falls below it."""
    run = select_runnable(inst)
    data = counting._model_data(inst, run)
    res = bp.branch_and_price(inst, run, time_limit=20)
    if not data["patterns"]:
        assert res is None
        return
    plain = solve_matrix(counting_fast.build_counting_matrix(data).matrix, "highs", time_limit=20)
    if plain.status is not TerminationStatus.OPTIMAL or plain.objective is None:
        return
    assert res is not None
    if res.bound is not None:
        assert res.bound >= plain.objective - 1e-6 * max(1.0, plain.objective)
    if res.proven:
        assert res.objective == pytest.approx(plain.objective, rel=REL, abs=1e-6)


def _node_pool(data: dict[str, Any]) -> tuple[list[Any], list[bnode.Node]]:
    """Patterns from a few nodes' column generation, and nodes of every kind."""
    slots = list(data["slots"])
    assert len(slots) >= 2
    a, b = slots[0], slots[1]
    nodes = [
        bnode.Node(),
        bnode.Node(on=frozenset({a})),
        bnode.Node(off=frozenset({a}), on=frozenset({b}), banned=frozenset({(*b, 0)})),
    ]
    pricer = bnode._Pricer(data)
    pool: list[Any] = []
    for node in nodes:
        bnode.solve_node(data, pricer, pool, node, prune_at=None, deadline=math.inf)
    return pool, nodes


def test_node_master_pyomo_equals_matrix() -> None:
    """The node master's Pyomo reference (patterns.build_master with off/on/banned) and its
    matrix have the same LP optimum at nodes that switch slots off, on, and ban points."""
    import pyomo.environ as pyo

    from synergy_opt.formulations import patterns
    from synergy_opt.solve import pyomo_to_matrix

    inst = family_round("split-penalty", 32, 4)
    data = counting._model_data(inst, select_runnable(inst))
    pool, nodes = _node_pool(data)
    for node in nodes:
        mm, _, _ = bnode.node_master(data, pool, node)
        fast = solve_matrix(mm, "highs")
        ref = patterns.build_master(data, pool, off=node.off, on=node.on, banned=node.banned)
        rm, _ = pyomo_to_matrix(ref)
        slow = solve_matrix(rm, "highs")
        assert fast.status is TerminationStatus.OPTIMAL and slow.status is fast.status
        assert fast.objective == pytest.approx(slow.objective, abs=1e-6), node
        assert hasattr(ref, "bp_ghost") == bool(node.on)
        assert isinstance(ref, pyo.ConcreteModel)


def test_md_names_the_node_master_components() -> None:
    """branch_price.md has one heading per component the node master adds, and no other."""
    import re

    import pyomo.environ as pyo

    from synergy_opt.formulations import patterns
    from tests.conftest import ROOT

    inst = family_round("split-penalty", 32, 4)
    data = counting._model_data(inst, select_runnable(inst))
    pool, nodes = _node_pool(data)
    kinds = (pyo.Var, pyo.Constraint, pyo.Objective)

    def names(m: pyo.ConcreteModel) -> set[str]:
        return {c.local_name for c in m.component_objects(kinds, descend_into=False)}

    root = names(patterns.build_master(data, pool))
    node = names(patterns.build_master(data, pool, on=nodes[1].on))
    text = (ROOT / "formulations" / "branch_price.md").read_text(encoding="utf-8")
    assert set(re.findall(r"^### `(\w+)`", text, flags=re.MULTILINE)) == node - root


def test_whole_point_children_split_a_leaf_and_keep_valid_bounds() -> None:
    """Below the spread decisions, a one-member class's whole point splits a leaf into
    "only p" and "not p": each child's bound covers its own best allocation, and the
    better child holds the leaf's optimum (nothing is lost)."""
    _, data, cm, pricer = _search_model(4)
    pool: list[Any] = []
    points: dict[int, set[int]] = {}
    for _, k, p in data["x_index"]:
        if data["n"][k] == 1:
            points.setdefault(k, set()).add(p)
    k = min(kk for kk, ps in points.items() if len(ps) >= 2)
    p = min(points[k])
    parent = bnode.Node(off=frozenset(data["slots"]))  # every job whole
    lp = bnode._NodeLP(0.0, 0.0, {}, {0: 0.5}, (_pattern_with(k, p),), 0.0, True)
    kids = bnode._point_children(data, parent, lp)
    assert kids is not None and len(kids) == 2
    assert kids[1].xbanned == {(k, p)}
    assert kids[0].xbanned == {(k, q) for q in points[k] if q != p}

    def leaf(node: bnode.Node) -> float:
        res = solve_matrix(bleaf._leaf_matrix(cm, node, ()), "highs", time_limit=60)
        if res.status is TerminationStatus.INFEASIBLE:
            return -math.inf
        assert res.status is TerminationStatus.OPTIMAL and res.objective is not None
        return res.objective

    whole = leaf(parent)
    got = []
    for kid in kids:
        best = leaf(kid)
        node_lp = bnode.solve_node(data, pricer, pool, kid, prune_at=None, deadline=math.inf)
        if best > -math.inf:
            assert node_lp is not None and node_lp.bound is not None
            assert node_lp.bound >= best - 1e-6 * max(1.0, best), kid
        got.append(best)
    assert max(got) == pytest.approx(whole, rel=1e-9)


def _pattern_with(k: int, p: int) -> Any:
    """A pattern holding one class-k job whole at point p (nothing else)."""
    from synergy_opt.formulations.patterns import Pattern

    return Pattern(0, (((k, p), 1),), (), 1.0)


def _search_model(seed: int) -> tuple[Any, dict[str, Any], Any, Any]:
    """A 32-GPU split-penalty round, its counting data and matrix over the runnable set, and
    a pricer: what the search's pieces are tested on."""
    inst = family_round("split-penalty", 32, seed)
    data = counting._model_data(inst, select_runnable(inst))
    return inst, data, counting_fast.build_counting_matrix(data), bnode._Pricer(data)


def _dive_leaf(seed: int) -> tuple[Any, dict[str, Any], Any, Any, list[Any], bnode.Node, Any]:
    """A 32-GPU split-penalty round's dive down to a leaf from an empty pattern pool."""
    inst, data, cm, pricer = _search_model(seed)
    pool: list[Any] = []
    node, lp = bdive._dive_to_leaf(data, pricer, pool, bnode.Node(), deadline=math.inf)
    assert lp is not None and lp.converged
    assert bnode._children(data, node, lp) is None  # a leaf: no branching left
    return inst, data, cm, pricer, pool, node, lp


@pytest.mark.parametrize("solves", [bdive.DIVE_SOLVES, 1])
def test_leaf_packing_reaches_the_leaf_optimum(solves: int, monkeypatch: Any) -> None:
    """From the dive's leaf, fixing servers to patterns (all the way to an integral master
    with the default budget; cut short after one pricing round, then the leaf MIP with
    the fixed servers held) gives an allocation worth the leaf's LP value, which is the
    leaf MIP's optimum; it keeps every floor.  The restricted MIP holds its servers to
    their patterns."""
    monkeypatch.setattr(bdive, "DIVE_SOLVES", solves)
    assert _check_leaf_packing(5) is (solves > 1)  # integral master, or the MIP path


def _check_leaf_packing(seed: int) -> bool:
    inst, data, cm, pricer, pool, node, lp = _dive_leaf(seed)
    got, order = bdive._fix_servers(data, pricer, pool, node, lp, deadline=math.inf)
    assert order
    leaf = solve_matrix(bleaf._leaf_matrix(cm, node, ()), "highs", time_limit=60)
    assert leaf.status is TerminationStatus.OPTIMAL and leaf.objective is not None
    assert lp.value == pytest.approx(leaf.objective, rel=REL)
    first = next(bdive._pack_leaf(data, cm, pricer, pool, node, lp, math.inf, "highs"))
    alloc = build_allocation(inst, "bp", first)
    assert alloc.total_throughput == pytest.approx(leaf.objective, rel=REL)
    assert check_allocation(inst, alloc, fair_share=True) == []
    held = solve_matrix(bleaf._leaf_matrix(cm, node, (), order), "highs", time_limit=60)
    if held.x is None:  # every fixed server kept: the restriction may have no allocation
        return got is not None
    values = cm.values(held.x)
    fixed = bleaf._held(data, order)
    assert len(fixed) == len(order)  # one server per fixed pattern
    for s, cols in fixed.items():
        for (name, idx), v in cols.items():
            if name in ("x", "a", "u"):
                assert values[name, idx] == pytest.approx(v), (s, name, idx)
            else:
                assert values[name, idx] <= v + 1e-6, (s, name, idx)
        others = [
            c
            for c in values
            if c not in cols
            and c[0] in ("x", "a", "u")
            and (c[1][0] if c[0] == "x" else c[1][2]) == s
        ]
        assert all(values[c] == pytest.approx(0.0) for c in others), s
    return got is not None


def test_dive_bounds_on_patterns_hold_in_the_master() -> None:
    """``node_master``'s ``fixed`` bounds: a pattern held at >= 1 server is used, one held
    at 0 is not, and the master without them is at least as good (they only restrict)."""
    _, data, _, pricer, pool, node, lp = _dive_leaf(5)
    _, order = bdive._fix_servers(data, pricer, pool, node, lp, deadline=math.inf)
    mm, cols, _ = bnode.node_master(data, pool, node)
    free = solve_matrix(mm, "highs")
    assert free.x is not None and free.objective is not None
    on = order[0]  # the dive's first step: a feasible master keeps it
    off = next(
        pool[idx[0]]
        for c, (n, idx) in enumerate(cols)
        if n == "z" and free.x[c] > 1e-6 and pool[idx[0]] != on
    )
    mm, cols, _ = bnode.node_master(data, pool, node, {off: (0, 0), on: (1, math.inf)})
    res = solve_matrix(mm, "highs")
    assert res.x is not None and res.objective is not None
    z = {pool[idx[0]]: res.x[c] for c, (n, idx) in enumerate(cols) if n == "z"}
    assert z[off] == pytest.approx(0.0) and z[on] >= 1 - 1e-9
    assert res.objective <= free.objective + 1e-9


def test_the_search_takes_its_incumbent_from_a_dive(monkeypatch: Any) -> None:
    """Cold-started on 32-GPU seed 5, the optimum the search proves is the one its root
    dive packed (the dive is wired into the search, not only callable); reduced-cost
    fixing's packing, the packing at the leaf's points (with its free classes' points too,
    ``FREE_PACK``, which packs this optimum first) and the integer masters, which come
    first, are switched off here (tested on their own), and so is the leaf MIP's short
    try (``LEAF_QUICK_S``), which settles this round's leaves before their dives."""
    monkeypatch.setattr(bp, "LEAF_QUICK_S", 0.0)
    monkeypatch.setattr(bp, "FREE_PACK", False)
    monkeypatch.setattr(bp, "_reach", lambda *args: None)
    monkeypatch.setattr(bp, "PACK_POINTS", False)
    monkeypatch.setattr(bp, "_restricted_ip", lambda *a, **k: None)
    monkeypatch.setattr(bp, "_plain_root_ip", lambda *a, **k: None)
    inst = family_round("split-penalty", 32, 5)
    run, ref = _optimum(inst)
    res = bp.branch_and_price(inst, run, time_limit=60)
    assert res is not None and res.proven
    assert res.objective == pytest.approx(ref.objective, rel=REL)
    assert res.source in ("dive", "leaf dive")


def test_dive_orders_round_up_in_their_own_order() -> None:
    """ "nearest" rounds up the pattern closest to its next whole count first; "whole
    first" every pattern without spread parts before any with them (then nearest)."""
    _, _, _, _, _, _, lp = _dive_leaf(6)
    frac = {j: v for j, v in lp.z.items() if v - math.floor(v) > bnode.INT_EPS}
    assert len(frac) >= 2  # the leaf's master is fractional: something to order
    near = bdive._dive_order(lp, "nearest")
    assert sorted(near) == sorted(frac)
    gaps = [math.ceil(frac[j]) - frac[j] for j in near]
    assert gaps == sorted(gaps)
    whole = bdive._dive_order(lp, "whole first")
    assert sorted(whole) == sorted(frac)
    parts = [len(lp.patterns[j].parts) for j in whole]
    assert parts == sorted(parts)


def test_leaf_packing_tries_each_dive_until_one_is_integral(monkeypatch: Any) -> None:
    """``_pack_leaf`` runs the dives of ``PACK_DIVES`` in turn and stops at the first
    that reaches an integral master; when none does, the leaf MIP holds the first
    dive's servers."""
    inst, data, cm, pricer, pool, node, lp = _dive_leaf(3)
    tried: list[str] = []
    real = bdive._fix_servers

    def failing(*args: Any, how: str = "nearest", **kw: Any) -> Any:
        tried.append(how)
        _, order = real(*args, how=how, **kw)
        return None, order

    monkeypatch.setattr(bdive, "_fix_servers", failing)
    found = list(bdive._pack_leaf(data, cm, pricer, pool, node, lp, math.inf, "highs"))
    assert tried == list(bdive.PACK_DIVES) and len(set(tried)) >= 2
    assert found  # the leaf MIP with the held servers still packs the leaf
    tried.clear()
    monkeypatch.setattr(bdive, "_fix_servers", real)
    calls: list[str] = []

    def counted(*args: Any, how: str = "nearest", **kw: Any) -> Any:
        calls.append(how)
        return real(*args, how=how, **kw)

    monkeypatch.setattr(bdive, "_fix_servers", counted)
    first = next(bdive._pack_leaf(data, cm, pricer, pool, node, lp, math.inf, "highs"))
    alloc = build_allocation(inst, "bp", first)
    assert alloc.total_throughput == pytest.approx(lp.value, rel=REL)
    assert calls == [bdive.PACK_DIVES[0]]  # the first dive was integral: no second one


@pytest.mark.parametrize(
    ("family", "seconds"),
    [("split-penalty", opt_exact.PATTERN_OPT_CAP_S), ("single-gpu", 20.0 * opt_exact.OPT_SHARE)],
)
def test_opt_exact_gives_opt_its_share(family: str, seconds: float, monkeypatch: Any) -> None:
    """``opt`` (the warm start) gets a quarter of the limit elsewhere, and where
    branch-and-price runs a tenth but at most ``PATTERN_OPT_CAP_S``, so a longer limit
    starts the search as a 10-s one does; the answer is still proven (no retry then)."""
    seen: list[float | None] = []
    real = opt_exact.make_mechanism

    def recording(name: str, options: Any = None) -> Any:
        if name == "opt":
            seen.append(options.time_limit_s)
        return real(name, options)

    monkeypatch.setattr(opt_exact, "make_mechanism", recording)
    inst = family_round(family, 32, 1)
    alloc = opt_exact.OptExact(MechanismOptions(time_limit_s=20.0)).allocate(inst)
    assert seen == [pytest.approx(seconds)]
    assert 20.0 * opt_exact.PATTERN_OPT_SHARE > opt_exact.PATTERN_OPT_CAP_S  # the cap binds
    assert opt_exact.PATTERN_OPT_SHARE < opt_exact.OPT_SHARE
    assert alloc.upper_bound == pytest.approx(alloc.total_throughput, rel=REL)


def test_opt_exact_retries_from_opt_with_its_full_share(monkeypatch: Any) -> None:
    """Where the capped ``opt`` left the first search unproven, ``opt`` runs again with the
    share the cap held back, and a better answer of it starts a second search, which proves
    the counting optimum (no counting MIP after it); the first search has a 10-s run's time,
    and its answer is among the second's starts.  (The counting MIP's first try, which
    proves this 4-server round at once, is switched off: the search is what is tested.)"""
    monkeypatch.setattr(opt_exact, "COUNTING_PROBE_S", 0.0)
    inst = family_round("split-penalty", 32, 0)
    _, ref = _optimum(inst)
    limits: list[float | None] = []
    real_make = opt_exact.make_mechanism

    def first_opt_is_tune(name: str, options: Any = None) -> Any:
        if name == "opt":
            limits.append(options.time_limit_s)
            if len(limits) == 1:  # a weak first answer: the first search starts low
                return real_make("tune", options)
        return real_make(name, options)

    searches: list[tuple[float, list[Any]]] = []
    real_bp = opt_exact.branch_and_price

    def first_search_cut_short(*args: Any, time_limit: float, **kw: Any) -> Any:
        searches.append((time_limit, list(kw["warm_start"])))
        return real_bp(*args, time_limit=1e-3 if len(searches) == 1 else time_limit, **kw)

    counted: list[int] = []
    real_counting = opt_exact.solve_counting

    def counting(*args: Any, **kw: Any) -> Any:
        counted.append(1)
        return real_counting(*args, **kw)

    monkeypatch.setattr(opt_exact, "make_mechanism", first_opt_is_tune)
    monkeypatch.setattr(opt_exact, "branch_and_price", first_search_cut_short)
    monkeypatch.setattr(opt_exact, "solve_counting", counting)
    alloc = opt_exact.OptExact(MechanismOptions(time_limit_s=20.0)).allocate(inst)
    assert limits == [
        pytest.approx(opt_exact.PATTERN_OPT_CAP_S),
        pytest.approx(20.0 * opt_exact.PATTERN_OPT_SHARE),
    ]
    assert len(searches) == 2
    # the first search is a 10-s run's (where the cap begins to bind); the second has the rest
    at_cap = opt_exact.PATTERN_OPT_CAP_S / opt_exact.PATTERN_OPT_SHARE * opt_exact.BOUND_SHARE
    assert searches[0][0] <= at_cap < searches[1][0]
    assert len(searches[1][1]) == len(searches[0][1]) + 2  # opt's answer and the first's
    assert counted == []  # the second search proved it: no counting MIP after it
    assert alloc.total_throughput == pytest.approx(ref.objective, rel=REL)
    assert alloc.upper_bound == pytest.approx(alloc.total_throughput, rel=REL)
    assert check_allocation(inst, alloc, fair_share=True) == []


@pytest.mark.parametrize("beside", [False, True])
def test_opt_exact_runs_a_cut_opt_again_with_the_time_left(monkeypatch: Any, beside: bool) -> None:
    """At a limit where the full-share retry does not run (10 s), an ``opt`` the clock cut
    makes the first search keep ``LATE_OPT_RESERVE`` of the time back; unproven, ``opt``
    runs again with all that is left and its better answer is the floor (split penalties
    128 GPUs seed 3: 58.8648 where the search alone returned 57.94-58.36).  With ``opt``
    beside the search (two cores, a child process) there is no reserve and no late ``opt``:
    the search gets the time, and the child's answer is the floor.  (No counting-MIP
    first try: the search's paths are tested.)"""
    from synergy_opt.deadline import guard_available
    from synergy_opt.mechanisms.opt.context import time_note

    if beside and not guard_available():
        pytest.skip("no child processes on this platform")
    monkeypatch.setattr(opt_exact, "COUNTING_PROBE_S", 0.0)
    monkeypatch.setattr(opt_exact, "OPT_BESIDE", beside)
    monkeypatch.setattr(opt_exact, "usable_cores", lambda: 2)
    inst = family_round("split-penalty", 32, 0)
    limits: list[float | None] = []
    answers: list[float] = []
    real_make = opt_exact.make_mechanism

    def first_opt_cut(name: str, options: Any = None) -> Any:
        if name != "opt":
            return real_make(name, options)
        limits.append(options.time_limit_s)
        if len(limits) > 1:

            class Recorded:
                def allocate(self, inst: Any) -> Any:
                    a = real_make("opt", options).allocate(inst)
                    answers.append(a.total_throughput)
                    return a

            return Recorded()
        weak = real_make("tune", options)  # a weak first answer, said to be cut

        class Cut:
            def allocate(self, inst: Any) -> Any:
                a = weak.allocate(inst)
                return dataclasses.replace(a, notes=(time_note(["counting"]),))

        return Cut()

    budgets: list[float] = []
    real_bp = opt_exact.branch_and_price

    def search_cut_short(*args: Any, time_limit: float, **kw: Any) -> Any:
        budgets.append(time_limit)
        return real_bp(*args, time_limit=1e-3, **kw)

    counted: list[int] = []
    real_counting = opt_exact.solve_counting
    monkeypatch.setattr(opt_exact, "make_mechanism", first_opt_cut)
    monkeypatch.setattr(opt_exact, "branch_and_price", search_cut_short)

    def counting_cut_short(*a: Any, **kw: Any) -> Any:
        counted.append(1)
        return real_counting(*a, **{**kw, "time_limit": 0.05})

    monkeypatch.setattr(opt_exact, "solve_counting", counting_cut_short)
    alloc = opt_exact.OptExact(MechanismOptions(time_limit_s=10.0)).allocate(inst)
    if beside:
        assert len(budgets) == 1 and budgets[0] > 10.0 * (1 - opt_exact.LATE_OPT_RESERVE)
        assert len(limits) == 1  # no late opt here: it ran in the child
        # the searches were cut to nothing, the first opt was TUNE's; the child's opt
        # finds this round's optimum (14.55, proven by opt-exact unhindered)
        assert alloc.total_throughput == pytest.approx(14.55, rel=1e-6)
        assert check_allocation(inst, alloc, fair_share=True) == []
        return
    assert len(budgets) == 1 and budgets[0] <= 10.0 * (1 - opt_exact.LATE_OPT_RESERVE)
    assert len(limits) == 2 and limits[0] == pytest.approx(opt_exact.PATTERN_OPT_CAP_S)
    assert limits[1] is not None and limits[1] > 10.0 * opt_exact.LATE_OPT_RESERVE * 0.9
    assert counted == []  # the time left went to opt
    assert alloc.total_throughput >= answers[0] - 1e-9
    assert check_allocation(inst, alloc, fair_share=True) == []


def test_same_round_same_answer() -> None:
    """Run twice on a round it proves, the search returns the same allocation, value,
    bound and tree size (pricing by enumeration breaks ties in a fixed order)."""
    inst = family_round("split-penalty", 32, 3)
    run = select_runnable(inst)
    first, second = (bp.branch_and_price(inst, run, time_limit=60) for _ in range(2))
    assert first is not None and second is not None and first.proven
    assert (first.objective, first.bound, first.nodes, first.leaves, first.source) == (
        second.objective,
        second.bound,
        second.nodes,
        second.leaves,
        second.source,
    )
    assert dict(first.placements) == dict(second.placements)


def test_reduced_cost_fixing_keeps_every_leaf_optimum() -> None:
    """Reduced-cost fixing (``_rc_caps``) at every leaf of a round small enough to
    enumerate: the leaf MIP with the whole-job columns capped and each server's reduced
    value held near the pricing optimum (``bp_rc_floor``), for allocations worth at
    least the leaf's optimum, keeps that optimum (so the caps never cut an allocation they
    claim to keep), while capping something; ``_reach`` there finds an allocation no
    better than the leaf's optimum, and a bound it reports covers that optimum."""
    _, data, cm, pricer = _search_model(4)
    pool: list[Any] = []
    checked = capped = reached = 0
    for node in _leaf_nodes(data):
        lp = bnode.solve_node(data, pricer, pool, node, prune_at=None, deadline=math.inf)
        leaf = solve_matrix(bleaf._leaf_matrix(cm, node, ()), "highs", time_limit=60)
        if leaf.status is TerminationStatus.INFEASIBLE:
            continue
        assert lp is not None and lp.prices is not None and leaf.objective is not None
        fixing = bleaf._rc_caps(data, pricer, node, lp, target=leaf.objective - 1e-6)
        assert fixing is not None
        caps, top, floor = fixing.caps, fixing.bound, fixing.floor
        assert top >= leaf.objective - 1e-6 and floor <= leaf.objective
        assert fixing.floors  # every server is used here: the rows apply
        fixed = bleaf._leaf_matrix(cm, node, (), caps=caps, floors=fixing.floors)
        capped += int(np.sum(fixed.col_upper < bleaf._leaf_matrix(cm, node, ()).col_upper))
        got = solve_matrix(fixed, "highs", time_limit=60)
        assert got.objective == pytest.approx(leaf.objective, abs=1e-5), node
        found, bound = bleaf._reach(cm, pricer, node, lp, math.inf, "highs", None) or (None, None)
        if found is not None:
            vec = counting_fast.start_from_placements(cm, found)
            assert vec is not None and float(cm.matrix.cost @ vec) <= leaf.objective + 1e-6
            reached += float(cm.matrix.cost @ vec) >= leaf.objective - 1e-6
        if bound is not None:
            assert bound >= leaf.objective - 1e-6, node
        checked += 1
    assert checked >= 3 and capped > 0 and reached > 0


@pytest.mark.parametrize("seed", [0, 4])
def test_plain_root_ip_is_an_allocation_and_keeps_the_optimum(seed: int) -> None:
    """The root's second restricted IP (column generation from no known allocation) returns
    an allocation that keeps every floor and is at most the optimum; a search from a warm
    start proves the same optimum with it and without it."""
    inst = family_round("split-penalty", 32, seed)
    run, ref = _optimum(inst)
    data = counting.counting_data(inst, run)
    found = bdive._plain_root_ip(data, bnode._Pricer(data), deadline=math.inf)
    assert found is not None
    alloc = build_allocation(inst, "bp", found)
    assert check_allocation(inst, alloc, fair_share=True) == []
    assert alloc.total_throughput <= (ref.objective or 0.0) * (1 + 1e-9)
    tune = make_mechanism("tune", MechanismOptions()).allocate(inst)
    start = [{ja.id: ja.placement for ja in tune.jobs}]
    with_it, without = (
        bp.branch_and_price(inst, run, time_limit=60, warm_start=start, plain_root=p)
        for p in (True, False)
    )
    for res in (with_it, without):
        assert res is not None and res.proven
        assert res.objective == pytest.approx(ref.objective, rel=REL)


#: Split penalties 128 GPUs seed 2's optimum (proven; its stalled leaf's LP value).
OPTIMUM_SEED2: float = 59.6041


def test_a_leaf_is_packed_at_its_lp_points(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seed 2's leaf whose LP value is the optimum puts every job at one point; packed at
    those points (the packing's pattern LP, its integral contents, the spread jobs placed
    around them) it is an allocation worth that value: the search proves the round.  Before,
    the leaf's MIP slices and dives stalled at 59.1041 (60-s ``opt-exact``)."""
    inst = family_round("split-penalty", 128, 2)
    runnable = select_runnable(inst)
    packed: list[dict[str, Any]] = []
    real = bpts._pack_points

    def spy(*args: Any, **kwargs: Any) -> Any:
        got = real(*args, **kwargs)
        if got is not None:
            packed.append(got)
        return got

    monkeypatch.setattr(bp, "_pack_points", spy)
    res = bp.branch_and_price(inst, runnable, time_limit=60.0)
    assert res is not None and res.proven
    assert res.objective == pytest.approx(OPTIMUM_SEED2, abs=1e-6)
    assert packed, "no leaf was packed at its points"
    for placements in packed:  # every packing offered is an allocation that passes
        got = build_allocation(inst, "x", placements)
        assert check_allocation(inst, got, fair_share=True) == []
        assert {j.id for j in runnable} == set(placements)
    assert res.source in ("dive points", "leaf points")


def test_no_leaf_points_where_the_lp_splits_a_class_over_points() -> None:
    """A node LP whose whole-job counts are fractional fixes no point per job."""
    inst = family_round("split-penalty", 32, 1)
    data = counting._model_data(inst, select_runnable(inst))
    _, k, p = data["x_index"][0]
    pattern = Pattern(0, (((k, p), 1),), (), 1.0)
    half = bnode._NodeLP(1.0, 1.0, {}, {0: 0.5}, (pattern,), 0.0, True)
    assert bpts._leaf_points(data, half) is None
    whole = dataclasses.replace(half, z={0: 1.0})  # integral, but most jobs left out
    assert bpts._leaf_points(data, whole) is None


def test_the_result_says_why_the_search_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    """``stop`` names what ended the search: every node settled (proven), the clock, the
    caller, or a leaf whose MIP stalls, and then whether its LP fixes every job's point."""
    inst = family_round("split-penalty", 32, 8)
    run = select_runnable(inst)
    done = bp.branch_and_price(inst, run, time_limit=60)
    assert done is not None and done.proven and done.stop == bp.STOP_PROVEN
    short = bp.branch_and_price(inst, run, time_limit=0.01)
    assert short is not None and not short.proven and short.stop == bp.STOP_TIME
    halted = bp.branch_and_price(inst, run, time_limit=60, halt=lambda: True)
    assert halted is not None and not halted.proven and halted.stop == bp.STOP_HALTED
    # no allocation from anywhere but the leaf MIP, and no slice for it: the first leaf
    # that is the best node stalls the search
    monkeypatch.setattr(bp, "MAX_LEAF_SLICE_S", bp.LEAF_SLICE_S / 2)
    monkeypatch.setattr(bp, "PACK_POINTS", False)
    monkeypatch.setattr(bp, "_restricted_ip", lambda *a, **k: None)
    monkeypatch.setattr(bp, "_pack_leaf", lambda *a, **k: iter(()))
    monkeypatch.setattr(bp, "_reach", lambda *a, **k: None)
    monkeypatch.setattr(bp, "_plain_root_ip", lambda *a, **k: None)
    points: list[bool] = []
    real = bpts._leaf_points

    def spy(*args: Any) -> Any:
        got = real(*args)
        points.append(got is not None)
        return got

    monkeypatch.setattr(bp, "_leaf_points", spy)
    stalled = bp.branch_and_price(inst, run, time_limit=60)
    assert stalled is not None and not stalled.proven
    assert points, "the stalled leaf's points were not asked for"
    assert stalled.stop == (bp.STOP_LEAF_POINTS if points[-1] else bp.STOP_LEAF)


def test_opt_exact_notes_say_what_holds_the_bound() -> None:
    """The search's result carries its nodes and why it ended into ``opt-exact``'s note;
    merged with a later counting MIP, the note follows whichever bound is reported."""
    inst = family_round("split-penalty", 32, 3)
    run = select_runnable(inst)
    res = opt_exact._search(inst, run, [], 0.01, MechanismOptions())
    assert res is not None and res.detail.startswith("branch-and-price, ")
    assert res.detail.endswith(bp.STOP_TIME)
    searched = dataclasses.replace(res, dual_bound=10.0)
    mip = dataclasses.replace(res, dual_bound=None, detail="")
    assert opt_exact._merge(searched, mip).detail == res.detail  # no bound from the MIP
    looser = dataclasses.replace(mip, dual_bound=11.0)
    assert opt_exact._merge(searched, looser).detail == res.detail
    same = dataclasses.replace(mip, dual_bound=10.0 - 1e-12)  # round-off
    assert opt_exact._merge(searched, same).detail == res.detail
    tighter = dataclasses.replace(mip, dual_bound=9.0)
    assert opt_exact._merge(searched, tighter).detail == ""


def test_a_leaf_whose_points_do_not_pack_is_refuted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Split penalties 64 GPUs seed 3: leaves whose LP puts every job at one point where
    the jobs do not pack are made to allow only those points and refuted by the packing's
    arc flow; the search proves the optimum that the search without it proves (slower)."""
    inst = family_round("split-penalty", 64, 3)
    run = select_runnable(inst)
    asked: list[bool] = []
    real = bp.refute_by_flow

    def spy(*args: Any, **kwargs: Any) -> Any:
        verdict = real(*args, **kwargs)
        asked.append(verdict.refuted)
        return verdict

    monkeypatch.setattr(bp, "refute_by_flow", spy)
    got = bp.branch_and_price(inst, run, time_limit=120)
    assert got is not None and got.proven and got.stop == bp.STOP_PROVEN
    assert got.refuted >= 1 and got.refuted == sum(asked)
    assert (
        check_allocation(inst, build_allocation(inst, "bp", got.placements), fair_share=True) == []
    )
    searched = opt_exact._search(inst, run, [], 120, MechanismOptions())
    assert searched is not None and "leaves refuted by a packing proof" in searched.detail
    monkeypatch.setattr(bp, "FLOW_REFUTE", False)
    plain = bp.branch_and_price(inst, run, time_limit=120)
    # without the flow the search may or may not settle these leaves within its wall-clock
    # leaf slices (a cold process stalled once at 35.3565, bound 35.684): what must hold
    # whatever the clock did is that it refutes nothing, finds nothing above the proven
    # optimum, and its bound covers it
    assert plain is not None and plain.refuted == 0
    assert plain.objective is not None and plain.bound is not None
    assert plain.objective <= got.objective * (1 + 1e-9)
    assert plain.bound >= got.objective * (1 - 1e-9)
    if plain.proven:
        assert got.objective == pytest.approx(plain.objective, rel=1e-9)


def test_the_root_dive_leaf_refuted_by_the_arc_flow_skips_its_packings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Split penalties 128 GPUs seed 9 from TUNE: the root's dive ends at a leaf whose
    points do not pack; the arc flow refutes them, so the packings that look for an
    allocation worth that leaf's bound (the reach MIP, the leaf dive) never run, the
    search's leaf with the same points is refuted from that verdict without a second
    flow, and the search still proves the optimum (54.3377, proven in session 24 with
    both packings run)."""
    inst = family_round("split-penalty", 128, 9)
    run = select_runnable(inst)
    tune = make_mechanism("tune").allocate(inst)
    start = {ja.id: ja.placement for ja in tune.jobs}
    dive: list[tuple[object, object]] = []  # (the leaf's LP, the flow's verdict)
    flows: list[bool] = []
    real_points, real_flow, real_pack = bp._points_refuted, bp.refute_by_flow, bdive._pack_leaf

    def points_spy(*args: Any, **kwargs: Any) -> Any:
        dive.append((args[3], real_points(*args, **kwargs)))
        return dive[-1][1]

    def flow_spy(*args: Any, **kwargs: Any) -> Any:
        verdict = real_flow(*args, **kwargs)
        flows.append(verdict.refuted)
        return verdict

    def reach_spy(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the reach MIP ran on the refuted dive leaf")

    def pack_spy(*args: Any, **kwargs: Any) -> Any:
        assert all(args[5] is not lp for lp, _ in dive), "the refuted dive leaf was packed"
        return real_pack(*args, **kwargs)

    monkeypatch.setattr(bp, "_points_refuted", points_spy)
    monkeypatch.setattr(bp, "refute_by_flow", flow_spy)
    monkeypatch.setattr(bp, "_reach", reach_spy)
    monkeypatch.setattr(bp, "_pack_leaf", pack_spy)
    got = bp.branch_and_price(inst, run, time_limit=60, warm_start=[start])
    assert len(dive) == 1 and dive[0][1] is not None  # the dive leaf's points, refuted
    assert got is not None and got.proven and got.stop == bp.STOP_PROVEN
    assert got.objective == pytest.approx(54.3377, abs=1e-6)
    # every refuted leaf but one was the flow's own; the one is the dive leaf's verdict
    assert got.refuted == sum(flows[1:]) + 1
    assert (
        check_allocation(inst, build_allocation(inst, "bp", got.placements), fair_share=True) == []
    )


def test_a_leaf_whose_flow_ran_out_is_asked_again_when_it_stalls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Split penalties 64 GPUs seed 3 with every leaf's flow cut short (its share made
    tiny, the verdict 'unknown'): the leaves go on to their MIP slices, and where those
    stall the flow runs again with the time left and refutes them; the search proves the
    optimum (35.6705, as the search with its flows and without them proves).  Without the
    late flow the exact packing program refutes the stalled leaves (``EXACT_LATE``) and the
    search proves the same optimum; without either the first stalled leaf ends the search,
    unproven."""
    inst = family_round("split-penalty", 64, 3)
    run = select_runnable(inst)
    real = bp.refute_by_flow
    calls: list[tuple[float, str]] = []

    def cut_short(pdata: Any, seconds: float, **kwargs: Any) -> Any:
        verdict = (
            FlowVerdict(UNKNOWN, seconds, 0) if seconds < 1.0 else real(pdata, seconds, **kwargs)
        )
        calls.append((seconds, verdict.status))
        return verdict

    monkeypatch.setattr(bp, "refute_by_flow", cut_short)
    monkeypatch.setattr(bp, "FLOW_SHARE", 1e-4)
    monkeypatch.setattr(bp, "DIVE_FLOW", False)
    monkeypatch.setattr(bp, "MAX_LEAF_SLICE_S", bp.LEAF_SLICE_S)
    monkeypatch.setattr(bp, "EXACT_EARLY", False)  # it would refute these leaves first
    got = bp.branch_and_price(inst, run, time_limit=120)
    assert got is not None and got.proven and got.stop == bp.STOP_PROVEN
    assert got.objective == pytest.approx(35.6705, abs=1e-6)
    late = [status for seconds, status in calls if seconds >= 1.0]
    assert any(status == UNKNOWN for seconds, status in calls if seconds < 1.0)
    assert late and got.refuted == late.count(REFUTED) >= 1
    calls.clear()
    monkeypatch.setattr(bp, "FLOW_LATE", False)
    # the exact packing program, asked last (EXACT_LATE), refutes the stalled leaves instead
    asked: list[str] = []

    def exact(pdata: Any, seconds: float, limit: int) -> Any:
        verdict = refute_exactly(pdata, seconds, limit)
        asked.append(verdict.status)
        return verdict

    monkeypatch.setattr(bp, "refute_exactly", exact)
    by_exact = bp.branch_and_price(inst, run, time_limit=120)
    assert by_exact is not None and by_exact.proven
    assert by_exact.objective == pytest.approx(35.6705, abs=1e-6)
    assert "infeasible" in asked and by_exact.refuted == asked.count("infeasible")
    calls.clear()
    monkeypatch.setattr(bp, "EXACT_LATE", False)
    cut = bp.branch_and_price(inst, run, time_limit=120)
    assert cut is not None and not cut.proven and cut.stop == bp.STOP_LEAF_POINTS
    assert all(seconds < 1.0 for seconds, _ in calls) and cut.refuted == 0


def test_a_small_exact_packing_is_asked_after_the_first_full_slice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same round with the flows cut short, the late flow and the late exact step off:
    the exact program, small there, is asked when a leaf's first full MIP slice does not
    settle it (``EXACT_EARLY``, with its share of the time, not all that is left), refutes
    the leaves, and the search proves 35.6705; without it the first stalled leaf ends it."""
    inst = family_round("split-penalty", 64, 3)
    run = select_runnable(inst)
    real = bp.refute_by_flow

    def cut_short(pdata: Any, seconds: float, **kwargs: Any) -> Any:
        return FlowVerdict(UNKNOWN, seconds, 0) if seconds < 1.0 else real(pdata, seconds, **kwargs)

    asked: list[tuple[float, str]] = []

    def exact(pdata: Any, seconds: float, limit: int) -> Any:
        verdict = refute_exactly(pdata, seconds, limit)
        asked.append((seconds, verdict.status))
        return verdict

    monkeypatch.setattr(bp, "refute_by_flow", cut_short)
    monkeypatch.setattr(bp, "refute_exactly", exact)
    monkeypatch.setattr(bp, "FLOW_SHARE", 1e-4)
    monkeypatch.setattr(bp, "DIVE_FLOW", False)
    monkeypatch.setattr(bp, "MAX_LEAF_SLICE_S", bp.LEAF_SLICE_S)
    monkeypatch.setattr(bp, "FLOW_LATE", False)
    monkeypatch.setattr(bp, "EXACT_LATE", False)
    got = bp.branch_and_price(inst, run, time_limit=120)
    assert got is not None and got.proven
    assert got.objective == pytest.approx(35.6705, abs=1e-6)
    refuted = [seconds for seconds, status in asked if status == "infeasible"]
    assert refuted and got.refuted == len(refuted)
    assert all(seconds <= bp.EXACT_EARLY_SHARE * 120 + 1e-9 for seconds, _ in asked)
    monkeypatch.setattr(bp, "EXACT_EARLY", False)
    cut = bp.branch_and_price(inst, run, time_limit=120)
    assert cut is not None and not cut.proven and cut.stop == bp.STOP_LEAF_POINTS


def test_the_root_dive_packings_wait_for_a_short_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """Split penalties 128 GPUs seed 306 from TUNE: the root dive's reach MIP and leaf
    packings took 8.5 s and found 62.20, below the optimum that the search's 50 nodes
    reach in under a second (a node's points pack at 63.5671, EAGER_POINTS).  Deferred
    (DEFER_DIVE) until a leaf's own MIP would run, DEFER_NODES nodes or DEFER_SHARE of the
    time, they never run here and the search proves the optimum; with the switch off they
    run first."""
    inst = family_round("split-penalty", 128, 306)
    run = select_runnable(inst)
    tune = make_mechanism("tune").allocate(inst)
    start = {ja.id: ja.placement for ja in tune.jobs}
    reached: list[int] = []
    real_reach = bp._reach

    def reach_spy(*args: Any, **kwargs: Any) -> Any:
        reached.append(1)
        return real_reach(*args, **kwargs)

    monkeypatch.setattr(bp, "_reach", reach_spy)
    got = bp.branch_and_price(inst, run, time_limit=120, warm_start=[start])
    assert got is not None and got.proven and got.stop == bp.STOP_PROVEN
    assert got.objective == pytest.approx(63.5671, abs=1e-6)
    assert got.source == "node points" and reached == []  # packed as its LP is solved
    assert (
        check_allocation(inst, build_allocation(inst, "bp", got.placements), fair_share=True) == []
    )
    monkeypatch.setattr(bp, "DEFER_DIVE", False)
    monkeypatch.setattr(bp, "_pack_leaf", lambda *a, **k: iter(()))  # the reach MIP is enough
    got = bp.branch_and_price(inst, run, time_limit=120, warm_start=[start])
    assert reached == [1]
    assert got is not None and got.proven
    assert got.objective == pytest.approx(63.5671, abs=1e-6)


def test_the_plain_root_master_waits_for_a_short_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """Split penalties 128 GPUs seed 302 from TUNE: the plain root integer master took 3.1 s
    to find 51.8982, below the dive's points (52.1482, 0.7 s later) and the optimum the
    search's 47 nodes reach (52.2082).  Deferred with the dive's packings (DEFER_PLAIN) it
    never runs and the search proves the optimum; with the switch off it runs first."""
    inst = family_round("split-penalty", 128, 302)
    run = select_runnable(inst)
    tune = make_mechanism("tune").allocate(inst)
    start = {ja.id: ja.placement for ja in tune.jobs}
    calls: list[int] = []
    real_plain = bp._plain_root_ip

    def plain_spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real_plain(*args, **kwargs)

    monkeypatch.setattr(bp, "_plain_root_ip", plain_spy)
    got = bp.branch_and_price(inst, run, time_limit=120, warm_start=[start])
    assert got is not None and got.proven and got.stop == bp.STOP_PROVEN
    assert got.objective == pytest.approx(52.2082, abs=1e-6) and calls == []
    assert (
        check_allocation(inst, build_allocation(inst, "bp", got.placements), fair_share=True) == []
    )
    monkeypatch.setattr(bp, "DEFER_PLAIN", False)
    got = bp.branch_and_price(inst, run, time_limit=120, warm_start=[start])
    assert calls == [1]
    assert got is not None and got.proven
    assert got.objective == pytest.approx(52.2082, abs=1e-6)


def test_a_node_whose_lp_fixes_every_point_is_packed_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Split penalties 128 GPUs seed 21 from TUNE: the node whose points pack the optimum
    58.715 is solved early but, without EAGER_POINTS, packed only when it is next the best
    leaf, after leaves at 58.7201 (within the proof gap) have spent their dives and MIP
    slices.  Packed as soon as its LP is solved, the search proves the optimum from it."""
    inst = family_round("split-penalty", 128, 21)
    run = select_runnable(inst)
    tune = make_mechanism("tune").allocate(inst)
    start = {ja.id: ja.placement for ja in tune.jobs}
    packed: list[float] = []
    real_pack = bp._pack_points

    def pack_spy(inst_: Any, jobs: Any, data: Any, lp: Any, stop: float, refuted: Any) -> Any:
        packed.append(lp.value)
        return real_pack(inst_, jobs, data, lp, stop, refuted)

    monkeypatch.setattr(bp, "_pack_points", pack_spy)
    got = bp.branch_and_price(inst, run, time_limit=120, warm_start=[start])
    assert got is not None and got.proven and got.stop == bp.STOP_PROVEN
    assert got.objective == pytest.approx(58.715, abs=1e-6)
    assert got.source == "node points" and packed
    assert (
        check_allocation(inst, build_allocation(inst, "bp", got.placements), fair_share=True) == []
    )
    monkeypatch.setattr(bp, "EAGER_POINTS", False)
    cut = bp.branch_and_price(inst, run, time_limit=4, warm_start=[start])
    assert cut is not None and cut.source != "node points"
    assert cut.objective <= got.objective + 1e-6 and cut.bound >= got.objective - 1e-6


def test_a_node_packing_runs_to_its_own_end_and_is_asked_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Split penalties 128 GPUs seed 9 from TUNE: the nodes whose LP fixes every point are
    packed there (most of them do not pack).  Each such packing gets the search's deadline,
    not a share of its time, so none is cut short and asked again, whole, when its node
    comes up as a leaf (capped at 0.05 of a 7.5-s search, they were, and the search
    reached 21 nodes and no proof), nor asked at a node after the root's dive leaf asked
    the same points; the search proves the optimum 54.3377."""
    inst = family_round("split-penalty", 128, 9)
    run = select_runnable(inst)
    tune = make_mechanism("tune").allocate(inst)
    start = {ja.id: ja.placement for ja in tune.jobs}
    asked: list[tuple[frozenset[Any], float]] = []
    real_pack = bp._pack_points

    def pack_spy(inst_: Any, jobs: Any, data: Any, lp: Any, stop: float, refuted: Any) -> Any:
        got = bpts._leaf_points(data, lp)
        if got is not None:
            asked.append((frozenset(got[0].items()), stop))
        return real_pack(inst_, jobs, data, lp, stop, refuted)

    monkeypatch.setattr(bp, "_pack_points", pack_spy)
    res = bp.branch_and_price(inst, run, time_limit=120, warm_start=[start])
    assert res is not None and res.proven and res.stop == bp.STOP_PROVEN
    assert res.objective == pytest.approx(54.3377, abs=1e-6)
    assert len(asked) >= 3, "too few packings at points to tell"
    assert len({stop for _, stop in asked}) == 1, "a packing got less than the search's time"
    keys = [key for key, _ in asked]
    assert len(keys) == len(set(keys)), "the same points were packed twice"
