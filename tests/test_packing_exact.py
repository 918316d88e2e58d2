"""The exact packing program over (content, spread jobs) columns
(formulations/packing_exact.md): the matrix fast path against the Pyomo reference, its
verdicts against CP-SAT's on the same relaxed rounding, a packing the two relaxations pass
and it refutes, a feasible solution read back as a packing that fits, and its place at
branch-and-price's stalled leaves."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings

from synergy_opt.check import check_allocation
from synergy_opt.formulations import branch_price as bp
from synergy_opt.formulations import packing
from synergy_opt.formulations import packing_exact as pe
from synergy_opt.formulations.packing_cp import solve_packing
from synergy_opt.formulations.packing_data import PackingData, SpreadJob, WholeGroup, with_free
from synergy_opt.formulations.packing_exact import (
    GB_SLACK,
    ExactPacking,
    build_exact_packing_matrix,
    exact_listing,
    packing_from_solution,
    refute_exactly,
)
from synergy_opt.formulations.packing_flow import refute_by_flow
from synergy_opt.formulations.packing_lp import refute_packing
from synergy_opt.generate import family_round
from synergy_opt.mechanisms.packing import select_runnable
from synergy_opt.solve import SolveResult, TerminationStatus, solve_matrix, solve_pyomo
from synergy_opt.types import Job, RoundInstance, ThroughputMatrix, build_allocation
from tests.conftest import ROOT
from tests.test_formulations import md_names, model_names
from tests.test_packing import packing_cases

LEAF = ROOT / "tests" / "data" / "leaf_points_split_penalty_128_seed319.json"


def _job(jid: str, gpus: int) -> Job:
    w = ThroughputMatrix(cpus=(1,), mem_gb=(1.0,), throughput=((1.0,),))
    return Job(jid, gpus, w)


def _cores_apart() -> PackingData:
    """Three servers of 4 GPUs, 8 cores, 100 GB.  The 3-GPU job and the two 2-GPU jobs
    (6 cores each) need a server each, which leaves 1 GPU and 8 cores on one server and
    2 GPUs and 2 cores on the others.  The two spread jobs want 6 cores each: 12 of the 12
    left, so the pattern LP (spread jobs summed) passes, but only one of them can have a
    GPU on the server with 8 cores, and the other finds at most 4."""
    w0, w1, w2, s0, s1 = (
        _job(n, g) for n, g in (("w0", 3), ("w1", 2), ("w2", 2), ("s0", 2), ("s1", 2))
    )
    return PackingData(
        (WholeGroup((w0,), 3, 0, 10.0, (0, 1, 2)), WholeGroup((w1, w2), 2, 6, 10.0, (0, 1, 2))),
        (SpreadJob(s0, 6, 90.0, (0, 1, 2)), SpreadJob(s1, 6, 10.0, (0, 1, 2))),
        ((4, 8, 100.0),) * 3,
    )


def _leaf() -> tuple[RoundInstance, PackingData]:
    """The packing at the points of a leaf that held split penalties 128 seed 319 open."""
    saved: dict[str, Any] = json.loads(LEAF.read_text(encoding="utf-8"))
    inst = family_round(*saved["round"])
    points = {jid: (int(c), float(m), float(w)) for jid, (c, m, w) in saved["points"].items()}
    return inst, packing.packing_data(inst, select_runnable(inst), points, set(saved["spread"]))


def test_pyomo_component_names_match_markdown() -> None:
    lst = exact_listing(_cores_apart())
    assert lst is not None
    names = md_names("packing_exact")
    assert model_names(packing.build_packing_exact(lst)) == names
    rows = {r.split("[")[0] for r in build_exact_packing_matrix(lst).row_names}
    assert rows == {n for n in names if n.startswith("pe") and n != "pe0_feasibility"}


def _status(res: Any) -> str:
    return {TerminationStatus.OPTIMAL: "feasible", TerminationStatus.INFEASIBLE: "infeasible"}.get(
        res.status, "unknown"
    )


@settings(max_examples=60, deadline=None)
@given(packing_cases())
def test_matrix_equals_the_reference_and_cp_sat_on_the_same_rounding(
    case: tuple[RoundInstance, PackingData],
) -> None:
    """Exact: the same verdict as the Pyomo reference and as CP-SAT's relaxed model (demands
    rounded down, capacities up, as here), which is exact for that rounding too."""
    _, data = case
    lst = exact_listing(data)
    assert lst is not None  # tiny rounds: a few columns
    fast = _status(solve_matrix(build_exact_packing_matrix(lst)))
    ref = _status(solve_pyomo(packing.build_packing_exact(lst)))
    cp = solve_packing(data, deterministic_s=5.0, relax=True)
    assert cp.status in (TerminationStatus.OPTIMAL, TerminationStatus.INFEASIBLE)
    assert fast == ref == _status(cp)
    assert refute_exactly(data, 10.0).status == fast


def test_refutes_what_the_pattern_lp_passes() -> None:
    data = _cores_apart()
    assert not refute_packing(data).refuted  # 12 spread cores of 12 left: the sums pass
    verdict = refute_exactly(data, 10.0)
    assert verdict.refuted and verdict.status == "infeasible"
    assert (
        solve_packing(data, deterministic_s=5.0, relax=True).status is TerminationStatus.INFEASIBLE
    )
    # with 4 cores for the second spread job it fits: s0 by the 8-core server, s1 across
    # the two others (2 + 2 cores)
    s0, s1 = data.spread
    fits = PackingData(data.groups, (s0, SpreadJob(s1.job, 4, 10.0, s1.servers)), data.servers)
    assert refute_exactly(fits, 10.0).status == "feasible"


def _problems(data: PackingData, pk: ExactPacking) -> list[str]:
    """What keeps ``pk`` from being a packing of ``data`` at its real cores and GB (checked
    here from the data alone, not by the code under test)."""
    out: list[str] = []
    used = [[0, 0, 0.0] for _ in data.servers]
    whole = {j.id: gr for gr in data.groups for j in gr.jobs}
    spread = {sj.job.id: sj for sj in data.spread}
    if set(pk.plan) != set(whole) | set(spread):
        out.append(f"jobs {sorted(pk.plan)} against {sorted(set(whole) | set(spread))}")
    for jid, parts in pk.plan.items():
        if jid in whole:
            gr = whole[jid]
            ((s, g),) = parts
            if s not in gr.servers or g != gr.gpus:
                out.append(f"{jid}: {parts} (servers {gr.servers}, {gr.gpus} GPUs)")
            used[s][0] += g
            used[s][1] += gr.cpus
            used[s][2] += gr.mem_gb
            continue
        sj = spread[jid]
        if sum(g for _, g in parts) != sj.job.gpus or min(g for _, g in parts) < 1:
            out.append(f"{jid}: GPUs {parts}, needs {sj.job.gpus}")
        drawn = {s: (c, gb) for s, c, gb in pk.resources.get(jid, ())}
        if not set(drawn) <= {s for s, _ in parts} or not {s for s, _ in parts} <= set(sj.servers):
            out.append(f"{jid}: draws on {sorted(drawn)}, parts {parts}, span {sj.servers}")
        if sum(c for c, _ in drawn.values()) < sj.cpus:
            out.append(f"{jid}: cores {drawn}, needs {sj.cpus}")
        if sum(gb for _, gb in drawn.values()) < sj.mem_gb - GB_SLACK:
            out.append(f"{jid}: GB {drawn}, needs {sj.mem_gb}")
        for s, g in parts:
            c, gb = drawn.get(s, (0, 0.0))
            used[s][0] += g
            used[s][1] += c
            used[s][2] += gb
    for s, ((g, c, gb), (ug, uc, um)) in enumerate(zip(data.servers, used, strict=True)):
        if ug > g or uc > c or um > gb + GB_SLACK:
            out.append(f"server {s}: {ug} GPUs, {uc} cores, {um} GB of {g}, {c}, {gb}")
    return out


@settings(max_examples=60, deadline=None)
@given(packing_cases())
def test_a_feasible_verdict_comes_with_a_packing_that_fits(
    case: tuple[RoundInstance, PackingData],
) -> None:
    """Every feasible solution is read back as a packing (the markdown's second proof): the
    GB of these rounds are whole units, so the rounding never decides, and the packing fits
    the real servers, each job once, each spread job at its point's cores and GB."""
    _, data = case
    verdict = refute_exactly(data, 10.0)
    assert verdict.status in ("feasible", "infeasible")
    assert (verdict.packing is not None) == (verdict.status == "feasible"), verdict
    if verdict.packing is not None:
        assert _problems(data, verdict.packing) == []


def test_the_packing_that_fits_where_the_sums_alone_decide() -> None:
    """``_cores_apart`` with 4 cores for the second spread job: s0 takes the 8-core server
    and s1 the two others, 2 cores from each (no part may have more than its server left)."""
    data = _cores_apart()
    s0, s1 = data.spread
    fits = PackingData(data.groups, (s0, SpreadJob(s1.job, 4, 10.0, s1.servers)), data.servers)
    verdict = refute_exactly(fits, 10.0)
    assert verdict.status == "feasible" and verdict.packing is not None
    assert _problems(fits, verdict.packing) == []
    on = {s for s, _ in verdict.packing.plan["s1"]}
    assert len(on) == 2  # spread: no one server has 4 cores and a GPU left beside s0


def test_a_solution_that_fits_only_by_the_rounding_is_no_packing() -> None:
    """Two whole jobs of 5.0003 GB on one server of 10.0005 GB: in units (demands down,
    capacities up) 5,000 + 5,000 <= 10,001, so the program is feasible, but 10.0006 GB do
    not fit the real server: the verdict stays, with no packing to offer."""
    a, b = _job("a", 1), _job("b", 1)
    data = PackingData((WholeGroup((a, b), 1, 1, 5.0003, (0,)),), (), ((4, 8, 10.0005),))
    verdict = refute_exactly(data, 10.0)
    assert verdict.status == "feasible" and verdict.packing is None
    lst = exact_listing(data)
    assert lst is not None
    x = solve_matrix(build_exact_packing_matrix(lst)).x
    assert x is not None and packing_from_solution(lst, x) is None
    roomy = PackingData(data.groups, (), ((4, 8, 10.0006),))
    got = refute_exactly(roomy, 10.0).packing
    assert got is not None and _problems(roomy, got) == []


def test_free_classes_and_large_listings_are_not_stated() -> None:
    data = _cores_apart()
    gr = data.groups[1]
    free = with_free(data, [(gr.jobs, [(0, gr.cpus, gr.mem_gb, 1.0)])], 0.0)
    assert exact_listing(free) is None
    assert refute_exactly(free, 1.0).status == "unknown"
    assert exact_listing(data, limit=3) is None  # more than 3 columns
    not_built = refute_exactly(data, 10.0, limit=3)
    assert not_built.status == "unknown" and not_built.columns == 0


def test_refutes_the_stalled_leaf_of_split_penalties_128_seed_319() -> None:
    """Both relaxations pass this leaf's points (value 56.646); the program refutes them
    (2.8 s measured), and with them the leaf, on the way to the proof of 56.466."""
    _, data = _leaf()
    assert not refute_packing(data).refuted
    assert not refute_by_flow(data, 30.0).refuted
    verdict = refute_exactly(data, 120.0)
    assert verdict.status == "infeasible", verdict
    assert 0 < verdict.columns <= 20_000


def test_branch_and_price_asks_it_only_where_the_search_would_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Split penalties 32 GPUs seed 1 proves with every leaf settled by its MIP: the exact
    program is never asked (only a leaf whose MIP slice does not settle it is asked, after
    the first full slice where the program is small, else where its slices stall)."""
    inst = family_round("split-penalty", 32, 1)
    asked: list[PackingData] = []
    monkeypatch.setattr(
        bp, "refute_exactly", lambda d, t, n: asked.append(d) or refute_exactly(d, t, n)
    )
    res = bp.branch_and_price(inst, select_runnable(inst), time_limit=60.0)
    assert res is not None and res.proven
    assert asked == []


def test_a_leaf_the_program_packs_is_settled_by_its_packing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Split penalties 32 GPUs seed 1 with every other way to a leaf's allocation switched
    off (the leaf MIP always stalls, no packing at the LP's points, no leaf IP, dive or
    reach MIP): the exact program finds the leaf's points packable, its solution becomes the
    incumbent and the search proves the optimum the plain search proves, asked after the
    first slice (``EXACT_EARLY``) or where the slices stall (``EXACT_LATE``).  Without the
    packing read back, the verdict alone settles nothing and the search ends at the leaf."""
    inst = family_round("split-penalty", 32, 1)
    run = select_runnable(inst)
    plain = bp.branch_and_price(inst, run, time_limit=60.0)
    assert plain is not None and plain.proven and plain.objective is not None

    def stalls(*_: Any, **__: Any) -> SolveResult:
        return SolveResult(TerminationStatus.TIME_LIMIT, None, None, None, 0.0, "highs")

    monkeypatch.setattr(bp, "solve_matrix", stalls)  # the leaf MIP: branch_price's only solve
    monkeypatch.setattr(bp, "PACK_POINTS", False)
    monkeypatch.setattr(bp, "EAGER_POINTS", False)
    monkeypatch.setattr(bp, "_restricted_ip", lambda *a, **k: None)
    monkeypatch.setattr(bp, "_pack_leaf", lambda *a, **k: iter(()))
    monkeypatch.setattr(bp, "_reach", lambda *a, **k: None)
    for early in (True, False):
        monkeypatch.setattr(bp, "EXACT_EARLY", early)
        got = bp.branch_and_price(inst, run, time_limit=60.0)
        assert got is not None and got.proven and got.source == "leaf exact", (early, got)
        assert got.objective == pytest.approx(plain.objective, rel=1e-6)
        alloc = build_allocation(inst, "bp", got.placements)
        assert check_allocation(inst, alloc, fair_share=True) == []
    monkeypatch.setattr(pe, "packing_from_solution", lambda *a: None)
    cut = bp.branch_and_price(inst, run, time_limit=60.0)
    assert cut is not None and not cut.proven and cut.stop == bp.STOP_LEAF_POINTS
