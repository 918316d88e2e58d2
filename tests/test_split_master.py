"""The pattern master states split-dependent floors (formulations/patterns.md, "Floors that
depend on the split"): ``v``, ``cnt_split_one``, ``pat_split_gpus`` and ``cnt_split_floor``
make branch-and-price exact on mixed shapes under per-server fair shares.

* Pricing charges a part's GPUs its share class's price, so the Lagrangian bound stays valid.
* The Pyomo master equals the matrix (rows, names, LP optimum), at the root and at a node
  that uses a slot (its share-class ghosts).
* On tiny mixed-shape rounds the exact search equals a brute force that values every
  allocation with the checker, including rounds where neither half of the old
  restriction / relaxation pair could prove the optimum.
* On 32-GPU rounds of three shapes with split penalties it proves the counting optimum.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest

from synergy_opt.check import check_allocation
from synergy_opt.formulations import branch_node as bnode
from synergy_opt.formulations import branch_price as bp
from synergy_opt.formulations import counting, counting_fast, patterns, patterns_fast
from synergy_opt.mechanisms.packing import select_runnable
from synergy_opt.profiles import shipped_profiles
from synergy_opt.solve import TerminationStatus, pyomo_to_matrix, solve_matrix
from synergy_opt.types import Cluster, Job, RoundInstance, Server, build_allocation
from tests.test_counting_splits import TINY_SEEDS, tiny_mixed_round
from tests.test_exact_typed import brute_force
from tests.test_floor_pair import _round

REL = 1e-6


def _optimum(data: dict[str, Any]) -> float | None:
    res = solve_matrix(counting_fast.build_counting_matrix(data).matrix, "highs", rel_gap=1e-9)
    return res.objective if res.status is TerminationStatus.OPTIMAL else None


def _split_data(seed: int = 4) -> tuple[RoundInstance, dict[str, Any]]:
    inst = _round(seed)
    data = counting._model_data(inst, select_runnable(inst))
    assert data["slot_splits"] and data["patterns"] and not data["exact"]
    return inst, data


def test_pricing_charges_the_share_class_price() -> None:
    """A part's GPU cost is the slot's price plus its server's share-class price, and only
    where the slot has split rows."""
    _, data = _split_data()
    zero = patterns_fast._zero_prices(data)
    ki = next(iter(data["slot_splits"]))
    classes = data["share_classes"][ki]
    split = {(*ki, c): 0.25 * (c + 1) for c in range(len(classes))}
    prices = patterns.Prices(zero.cover, zero.count, zero.gpus, zero.cpus, zero.mem, split)
    for c, cls in enumerate(classes):
        s = cls[0]
        _, wp = patterns.pricing_costs(data, s, prices)
        assert wp["a", ki] == pytest.approx(-0.25 * (c + 1))
        assert patterns.share_class_of(data, ki, s) == c
    plain = next((ki for ki in data["slots"] if ki not in data["slot_splits"]), None)
    if plain is not None:
        assert patterns.share_class_of(data, plain, data["slot_servers"][plain][0]) is None


def test_master_pyomo_equals_matrix_with_split_rows() -> None:
    """Root master and a node that uses a split slot: the same rows under the same names
    (root) and the same LP optimum, in Pyomo and as matrices; the node's ghosts cover the
    slot's share classes."""
    import pyomo.environ as pyo

    _, data = _split_data()
    pb = patterns_fast.pattern_bound(data)
    assert pb.converged and pb.bound is not None
    ref = patterns.build_master(data, pb.patterns)
    mm, cols, names = patterns_fast.build_master_matrix(data, pb.patterns)
    assert [c.name for c in ref.component_data_objects(pyo.Constraint, active=True)] == names
    assert any(n.startswith("pat_split_gpus[") for n in names)
    assert any(n.startswith("cnt_split_floor[") for n in names)
    assert sum(1 for n, _ in cols if n == "v") == len(ref.v)
    fast = solve_matrix(mm, "highs")
    slow = solve_matrix(pyomo_to_matrix(ref)[0], "highs")
    assert fast.objective == pytest.approx(slow.objective, abs=1e-6)
    assert pb.bound == pytest.approx(fast.objective, abs=1e-6)  # converged: bound = LP
    ki = next(iter(data["slot_splits"]))
    node = bnode.Node(on=frozenset({ki}))
    nm, ncols, _ = bnode.node_master(data, pb.patterns, node)
    nref = patterns.build_master(data, pb.patterns, on=node.on)
    ghosts = [idx for n, idx in ncols if n == "bp_ghost"]
    classes = patterns.master_split_rows(data)[1]
    assert len(ghosts) == 3 + sum(1 for (k, i, _), _ in classes if (k, i) == ki)
    assert sorted(ghosts) == sorted(nref.bp_ghost)
    a, b = solve_matrix(nm, "highs"), solve_matrix(pyomo_to_matrix(nref)[0], "highs")
    assert a.status is TerminationStatus.OPTIMAL and b.status is a.status
    assert a.objective == pytest.approx(b.objective, abs=1e-6)


def test_tiny_mixed_rounds_equal_brute_force() -> None:
    """The exact search equals the checker's brute force on every tiny seed whose floors
    depend on the split, and some of them are rounds the pair could not prove: the
    restriction below the optimum and the relaxation above it."""
    checked = neither = 0
    for seed in TINY_SEEDS:
        inst = tiny_mixed_round(seed)
        run = select_runnable(inst)
        data = counting._model_data(inst, run)
        if not data["slot_splits"]:
            continue
        assert data["patterns"]
        want = brute_force(inst, run)
        res = bp.branch_and_price(inst, run, time_limit=20)
        assert res is not None
        if want is None:
            assert not res.placements
            continue
        best = want.total_throughput
        checked += 1
        assert res.proven, seed
        assert res.objective == pytest.approx(best, rel=REL, abs=1e-6), seed
        assert res.bound is not None and res.bound >= best - 1e-6
        alloc = build_allocation(inst, "bp", res.placements)
        assert check_allocation(inst, alloc, fair_share=True) == [], seed
        high = _optimum(counting._model_data(inst, run, exact_splits=False))
        low = _optimum(counting._model_data(inst, run, exact_splits=False, spread_floor="low"))
        neither += (high is None or high < best - 1e-6) and (low is not None and low > best + 1e-6)
    assert checked >= 5 and neither >= 1, (checked, neither)


@pytest.mark.parametrize("seed", [0, 3, 4])
def test_exact_search_proves_the_counting_optimum(seed: int) -> None:
    """32 GPUs of three shapes with split penalties (the restriction loses 4-8 % on these
    seeds): the exact search proves the counting model's optimum, and its allocation keeps
    every floor."""
    inst, data = _split_data(seed)
    run = select_runnable(inst)
    ref = counting_fast.solve_counting(inst, run, time_limit=60)
    assert ref.proven and ref.objective is not None
    res = bp.branch_and_price(inst, run, time_limit=60)
    assert res is not None and res.proven
    assert res.objective == pytest.approx(ref.objective, rel=1e-4)
    assert res.bound is not None and res.bound >= ref.objective - 1e-6
    alloc = build_allocation(inst, "bp", res.placements)
    assert check_allocation(inst, alloc, fair_share=True) == []


def test_fractional_cores_keep_the_pair() -> None:
    """Where a share class has a fractional number of cores per GPU the split carries
    rounded-down cores, which the master does not state: the exact search declines and
    ``opt-exact`` keeps the restriction / relaxation pair."""
    base = _round(0)
    servers = list(base.cluster.servers)
    servers[0] = Server(servers[0].name, 8, 20, servers[0].mem_gb)  # 2.5 cores per GPU
    inst = dataclasses.replace(base, cluster=Cluster(tuple(servers)))
    run = select_runnable(inst)
    data = counting._model_data(inst, run)
    if not data["slot_split_cores"]:  # pragma: no cover - the round is built to have them
        pytest.fail("expected a split with rounded-down cores")
    assert not data["patterns"]
    assert patterns_fast.pattern_search(inst, run) == "pair"
    assert bp.branch_and_price(inst, run, time_limit=5) is None
    assert patterns_fast.pattern_search(base, select_runnable(base)) == "split"
    assert math.isfinite(_optimum(data) or math.inf)


def test_every_lagrangian_bound_covers_the_optimum() -> None:
    """Column generation stopped after 1, 2, 3 ... rounds of pricing: each Lagrangian bound
    (prices of a master that is not yet optimal over all patterns) is at least the optimum,
    on the 32-GPU rounds with split rows and on the tiny ones.  A pricer that left out the
    share-class price would undercharge the parts and could fall below it."""
    cases = [_split_data(seed)[1] for seed in (0, 3, 4)]
    for seed in TINY_SEEDS:
        inst = tiny_mixed_round(seed)
        data = counting._model_data(inst, select_runnable(inst))
        if data["slot_splits"]:
            cases.append(data)
    below = []
    for n, data in enumerate(cases):
        best = _optimum(data)
        if best is None:
            continue
        for rounds in (1, 2, 3, 5, 8):
            pb = patterns_fast.pattern_bound(data, max_iterations=rounds)
            if pb.bound is not None and pb.bound < best - 1e-6 * max(1.0, best):
                below.append((n, rounds, pb.bound, best))
    assert not below


def small_split_round(seed: int) -> RoundInstance:
    """2-5 servers of mixed shapes (2, 4 or 8 GPUs, 1-4 cores and 20-62.5 GB per GPU) and
    3-9 jobs of the shipped profiles with split penalties 0.8-1.0 under per-server shares:
    rounds the counting MIP proves in well under a second."""
    rng = np.random.default_rng(seed)
    servers = []
    for i in range(int(rng.integers(2, 6))):
        g = int(rng.choice([2, 4, 8]))
        cores, mem = int(rng.integers(1, 5)), float(rng.choice([20, 32, 50, 62.5]))
        servers.append(Server(f"s{i}", g, cores * g, mem * g))
    total = sum(s.gpus for s in servers)
    lib = shipped_profiles()
    names = lib.names()
    jobs = []
    for j in range(int(rng.integers(3, 10))):
        g = min(int(rng.choice([1, 2, 2, 3, 4, 6])), total)
        prof = lib.get(names[int(rng.integers(len(names)))])
        pen = float(rng.choice([1.0, 0.9, 0.8]))
        jobs.append(Job(f"j{j}", g, prof.matrix(g), prof.name, None, pen))
    return RoundInstance(f"small-{seed}", Cluster(tuple(servers)), tuple(jobs), "server")


def _calls(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[int]:
    """Count calls of ``module.name`` (still called through)."""
    calls: list[int] = []
    real = getattr(module, name)

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)
    return calls


@pytest.mark.parametrize("quick", [5.0, 0.0])
def test_a_leaf_mip_gets_a_short_try_first(quick: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """``LEAF_QUICK_S``: a leaf's counting MIP runs before the leaf's integer master and
    dives, which it spares where it settles the leaf (here every leaf: the try is long
    enough for these small MIPs); without the try the dives run.  The optimum either way."""
    inst = small_split_round(128)
    run = select_runnable(inst)
    data = counting._model_data(inst, run)
    assert data["slot_splits"] and data["patterns"]
    best = _optimum(data)
    monkeypatch.setattr(bp, "LEAF_QUICK_S", quick)
    dives = _calls(monkeypatch, bp, "_pack_leaf")
    res = bp.branch_and_price(inst, run, time_limit=120)
    assert res is not None and res.proven and res.leaves > 0
    assert best is not None and res.objective == pytest.approx(best, rel=1e-6)
    assert (not dives) is (quick > 0)


@pytest.mark.parametrize("probe", [10.0, 0.0])
def test_opt_exact_asks_the_counting_mip_first(
    probe: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``COUNTING_PROBE_S``: on a small round with split penalties the counting MIP's short
    try proves the optimum and no search runs; without the try the search runs.  Either
    way the answer is the optimum, proven, and keeps every floor."""
    from synergy_opt.mechanisms import MechanismOptions, make_mechanism, opt_exact

    inst = small_split_round(128)
    best = _optimum(counting._model_data(inst, select_runnable(inst)))
    monkeypatch.setattr(opt_exact, "COUNTING_PROBE_S", probe)
    monkeypatch.setattr(opt_exact, "OPT_BESIDE", False)  # no child process: counted here
    searches = _calls(monkeypatch, opt_exact, "branch_and_price")
    got = make_mechanism("opt-exact", MechanismOptions(time_limit_s=60)).allocate(inst)
    assert best is not None and got.total_throughput == pytest.approx(best, rel=1e-6)
    assert got.upper_bound is not None
    assert got.upper_bound <= got.total_throughput * (1 + 1e-4) + 1e-9
    assert check_allocation(inst, got, fair_share=True) == []
    assert (not searches) is (probe > 0)
