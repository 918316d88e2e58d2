"""Server patterns (formulations/patterns.md): reference vs fast path, valid bounds, exactness.

The pattern bound and its rows must never cut off an allocation: with them the counting MIP
keeps its optimum on rounds of every family, the bound lies between the optimum and the
counting LP, and the Pyomo and matrix forms of each piece agree.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pyomo.environ as pyo
import pytest
from hypothesis import given, settings

from synergy_opt.formulations import counting, counting_fast, patterns, patterns_fast
from synergy_opt.generate import FAMILIES, family_round
from synergy_opt.mechanisms import MechanismOptions, make_mechanism
from synergy_opt.mechanisms import opt_exact as opt_exact_mod
from synergy_opt.mechanisms.packing import select_runnable
from synergy_opt.solve import TerminationStatus, pyomo_to_matrix, solve_matrix, solve_pyomo
from tests.conftest import ROOT
from tests.strategies import round_instances

TOL = 1e-6


def _optimum(mm: Any, time_limit: float = 60) -> float:
    res = solve_matrix(mm, "highs", time_limit=time_limit)
    assert res.status is TerminationStatus.OPTIMAL, res
    assert res.objective is not None
    return res.objective


def _data(family: str, gpus: int, seed: int) -> tuple[Any, dict[str, Any]]:
    inst = family_round(family, gpus, seed)
    return inst, counting._model_data(inst, select_runnable(inst))


def _names(m: pyo.ConcreteModel) -> set[str]:
    kinds = (pyo.Var, pyo.Constraint, pyo.Objective)
    return {c.local_name for c in m.component_objects(kinds, descend_into=False)}


def _rows(m: pyo.ConcreteModel) -> list[str]:
    return [c.name for c in m.component_data_objects(pyo.Constraint, active=True)]


def test_md_names_every_component() -> None:
    """patterns.md has one heading per component of the pricing problem, the master and
    the two counting rows, and no other."""
    _, data = _data("split-penalty", 32, 0)
    pb = patterns_fast.pattern_bound(data)
    assert pb.converged and pb.patterns
    text = (ROOT / "formulations" / "patterns.md").read_text(encoding="utf-8")
    md = set(re.findall(r"^### `(\w+)`", text, flags=re.MULTILINE))
    prices = _best_prices(data, pb.patterns)
    pricing = patterns.build_pricing(data, 0, prices)
    master = patterns.build_master(data, pb.patterns)
    model = counting.build_from_data(data)
    patterns.add_pattern_rows(model, data, pb.cuts)
    built = (_names(pricing) - {"x", "a", "u", "cp", "mp"}) | _names(master)
    built |= {"pat_full_gpus", "pat_dual_cut"}
    assert md == built
    assert len(model.pat_full_gpus) == len(data["G"]) and len(model.pat_dual_cut) == len(data["G"])


def _best_prices(data: dict[str, Any], pats: Any) -> patterns.Prices:
    mm, _, names = patterns_fast.build_master_matrix(data, pats)
    solved = patterns_fast._lp_duals(mm)
    assert solved is not None
    return patterns_fast._prices(data, names, solved[1])


@pytest.mark.parametrize(("family", "seed"), [("split-penalty", 0), ("multi-gpu", 1)])
def test_pyomo_equals_fast(family: str, seed: int) -> None:
    """Pricing problem, master LP and the counting model with the rows: the same rows in the
    same order under the same names, and the same optima, in Pyomo and as matrices."""
    _, data = _data(family, 32, seed)
    pb = patterns_fast.pattern_bound(data)
    prices = _best_prices(data, pb.patterns)
    for run in patterns.server_shapes(data):
        ref = patterns.build_pricing(data, run[0], prices)
        mm, _, names = patterns_fast.build_pricing_matrix(data, run[0], prices)
        assert _rows(ref) == names
        got = solve_pyomo(ref, "highs", time_limit=30)
        assert got.objective == pytest.approx(_optimum(mm), abs=TOL)
    ref_master = patterns.build_master(data, pb.patterns)
    mm, _, names = patterns_fast.build_master_matrix(data, pb.patterns)
    assert _rows(ref_master) == names
    assert solve_pyomo(ref_master, "highs").objective == pytest.approx(_optimum(mm), abs=TOL)
    assert pb.master_value == pytest.approx(_optimum(mm), abs=TOL)
    ref_cnt = counting.build_from_data(data)
    patterns.add_pattern_rows(ref_cnt, data, pb.cuts)
    scm = patterns_fast.strengthened_counting(data, pb.cuts)
    assert _rows(ref_cnt) == list(scm.row_names)
    assert pyomo_to_matrix(ref_cnt)[0].num_rows == scm.matrix.num_rows
    ref = solve_pyomo(ref_cnt, "highs", time_limit=60)
    assert ref.objective == pytest.approx(_optimum(scm.matrix), abs=TOL)


@pytest.mark.parametrize("family", FAMILIES)
def test_rows_keep_the_optimum_and_bound_brackets_it(family: str) -> None:
    """On a 32-GPU round of every family: the counting optimum is unchanged by the rows,
    and optimum <= pattern bound <= counting LP (the bound is converged here)."""
    _, data = _data(family, 32, 2)
    plain = _optimum(counting_fast.build_counting_matrix(data).matrix)
    lp = _optimum(counting_fast.build_counting_matrix(data, relax=True).matrix)
    pb = patterns_fast.pattern_bound(data)
    assert pb.converged and pb.bound is not None
    assert plain - TOL <= pb.bound <= lp + 1e-4 * max(1.0, lp)
    strong = patterns_fast.strengthened_counting(data, pb.cuts)
    assert _optimum(strong.matrix) == pytest.approx(plain, abs=1e-5)
    strong_lp = _optimum(strong.matrix.relaxed())
    assert strong_lp <= pb.bound + 1e-4 * max(1.0, pb.bound)


def test_bound_is_tighter_where_the_lp_is_loose() -> None:
    """Split-penalty 64 GPUs seed 0: LP 34.27, pattern bound 33.78, optimum 33.475."""
    _, data = _data("split-penalty", 64, 0)
    lp = _optimum(counting_fast.build_counting_matrix(data, relax=True).matrix)
    pb = patterns_fast.pattern_bound(data)
    assert pb.bound is not None and pb.converged
    assert pb.bound < lp - 0.4
    assert pb.bound == pytest.approx(33.7818, abs=1e-3)
    again = patterns_fast.pattern_bound(data)  # same inputs: same bound, rows and patterns
    assert dataclasses.replace(again, runtime_s=0.0) == dataclasses.replace(pb, runtime_s=0.0)


def test_bound_valid_when_stopped_early() -> None:
    """The Lagrangian bound of any round of prices bounds the optimum: stopping after one
    round of pricing still gives a bound >= the optimum (or none)."""
    _, data = _data("split-penalty", 32, 1)
    plain = _optimum(counting_fast.build_counting_matrix(data).matrix)
    pb = patterns_fast.pattern_bound(data, max_iterations=1)
    assert pb.iterations == 1 and not pb.converged
    assert pb.bound is not None and pb.bound >= plain - TOL
    strong = patterns_fast.strengthened_counting(data, pb.cuts)
    assert _optimum(strong.matrix) == pytest.approx(plain, abs=1e-5)


def test_solve_with_patterns_proves_and_declines() -> None:
    inst, data = _data("split-penalty", 64, 0)
    runnable = select_runnable(inst)
    res = patterns_fast.solve_with_patterns(inst, runnable, time_limit=60)
    assert res is not None and res.proven
    ref = counting_fast.solve_counting(inst, runnable, time_limit=60)
    assert ref.proven and res.objective == pytest.approx(ref.objective, rel=1e-4)
    assert patterns_fast.patterns_apply(inst, runnable)
    mixed = family_round("mixed-shapes", 32, 0)  # split-dependent floors: the split rows
    penalised = dataclasses.replace(
        mixed, jobs=tuple(dataclasses.replace(j, split_penalty=0.9) for j in mixed.jobs)
    )
    run = select_runnable(penalised)
    assert patterns_fast.pattern_search(penalised, run) == "split"
    assert not patterns_fast.patterns_apply(penalised, run)  # opt-exact: the floor pair's
    servers = list(penalised.cluster.servers)  # 2.5 cores per GPU: rounded-down shares
    servers[0] = dataclasses.replace(servers[0], cpus=servers[0].gpus * 5 // 2)
    frac = dataclasses.replace(
        penalised, cluster=dataclasses.replace(mixed.cluster, servers=tuple(servers))
    )
    frun = select_runnable(frac)
    assert counting._model_data(frac, frun)["slot_split_cores"]
    assert patterns_fast.solve_with_patterns(frac, frun) is None
    assert patterns_fast.pattern_search(frac, frun) == "pair"
    multi = family_round("multi-gpu", 32, 0)  # no split penalty: opt-exact skips the stage
    assert not patterns_fast.patterns_apply(multi, select_runnable(multi))


def test_opt_exact_uses_the_pattern_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    """opt-exact proves a split-penalty round through the pattern stage (branch-and-price);
    the answer is the counting optimum and passes the checker.  (Seed 4: ``opt`` stops at
    8.6 below its bound 9.0, so the search runs; where ``opt`` meets its bound, as on seed
    0, there is nothing left to prove.)"""
    from synergy_opt.check import check_allocation

    calls: list[int] = []
    real = opt_exact_mod.branch_and_price

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(opt_exact_mod, "branch_and_price", spy)
    monkeypatch.setattr(opt_exact_mod, "COUNTING_PROBE_S", 0.0)  # 4 servers: it proves first
    inst = family_round("split-penalty", 32, 4)
    alloc = make_mechanism("opt-exact", MechanismOptions(time_limit_s=60)).allocate(inst)
    ref = counting_fast.solve_counting(inst, select_runnable(inst), time_limit=60)
    assert calls and alloc.notes == ()
    assert alloc.total_throughput == pytest.approx(ref.objective, rel=1e-4)
    assert alloc.upper_bound == pytest.approx(alloc.total_throughput, rel=1e-4)
    assert check_allocation(inst, alloc, fair_share=True) == []


@settings(max_examples=25)
@given(inst=round_instances(max_jobs=5, max_servers=3))
def test_property_bound_and_rows_are_valid(inst: Any) -> None:
    """On random small rounds (split penalties, mixed shapes): the pattern bound is never
    below the counting optimum, and the rows never change that optimum."""
    run = select_runnable(inst)
    data = counting._model_data(inst, run)
    plain = solve_matrix(counting_fast.build_counting_matrix(data).matrix, "highs", time_limit=20)
    if plain.status is not TerminationStatus.OPTIMAL or plain.objective is None:
        return
    pb = patterns_fast.pattern_bound(data)
    assert pb.bound is not None and pb.bound >= plain.objective - TOL
    strong = patterns_fast.strengthened_counting(data, pb.cuts)
    assert _optimum(strong.matrix, 20) == pytest.approx(plain.objective, abs=1e-5)
