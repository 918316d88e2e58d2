"""The packing's pattern LP (formulations/packing_lp.md): the matrix fast path against the
Pyomo reference, a relaxation of the packing (it never refutes a packing CP-SAT finds), and
its use before CP-SAT in ``opt``'s packing route.

Split penalties 128 GPUs: seed 2's full-server points (59.6616) do not pack (its optimum,
59.6041, is below them); CP-SAT spent its whole budget there, 4.3 s at a 10-s limit inside
``opt-exact``.  Seed 4's do (58.467, the proven optimum).
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from hypothesis import given, settings

from synergy_opt.check import check_allocation
from synergy_opt.formulations import packing
from synergy_opt.formulations import packing_cp as cp_module
from synergy_opt.formulations.packing_cp import pack_from_contents, solve_packing
from synergy_opt.formulations.packing_data import PackingData, SpreadJob, WholeGroup
from synergy_opt.formulations.packing_lp import (
    REFUTE_TOL,
    build_packing_lp_matrix,
    pattern_listing,
    refute_packing,
    whole_contents,
)
from synergy_opt.generate import family_round
from synergy_opt.mechanisms import make_mechanism
from synergy_opt.mechanisms.opt import Opt
from synergy_opt.mechanisms.opt.packing_route import (
    FULL_SERVER_POINTS,
    bound_points,
    pack,
    route_packing_data,
)
from synergy_opt.solve import TerminationStatus, solve_matrix, solve_pyomo
from synergy_opt.types import Job, RoundInstance, ThroughputMatrix
from tests.test_formulations import md_names, model_names
from tests.test_packing import packing_cases


def _full_server_data(seed: int) -> PackingData:
    """The packing data ``opt``'s packing route builds at the full-server points."""
    ctx = Opt().context(family_round("split-penalty", 128, seed))
    assert ctx is not None
    bp = bound_points(ctx)
    assert bp.name == FULL_SERVER_POINTS
    return route_packing_data(ctx, bp)


def _job(jid: str, gpus: int) -> Job:
    w = ThroughputMatrix(cpus=(1,), mem_gb=(1.0,), throughput=((1.0,),))
    return Job(jid, gpus, w)


def test_pyomo_component_names_match_markdown() -> None:
    lst = pattern_listing(_full_server_data(2))
    assert lst is not None
    m = packing.build_packing_lp(lst)
    names = md_names("packing_lp")
    assert model_names(m) == names
    rows = {r.split("[")[0] for r in build_packing_lp_matrix(lst).row_names}
    assert rows == {n for n in names if n.startswith("plp") and n != "plp0_shortfall"}


@settings(max_examples=60, deadline=None)
@given(packing_cases())
def test_matrix_lp_equals_the_reference_and_never_refutes_a_packing(
    case: tuple[RoundInstance, PackingData],
) -> None:
    _, data = case
    lst = pattern_listing(data)
    assert lst is not None  # tiny rounds: a few contents
    fast = solve_matrix(build_packing_lp_matrix(lst))
    ref = solve_pyomo(packing.build_packing_lp(lst))
    assert fast.status is TerminationStatus.OPTIMAL and ref.status is TerminationStatus.OPTIMAL
    assert fast.objective == pytest.approx(ref.objective, abs=1e-7)
    verdict = refute_packing(data)
    assert verdict.shortfall == pytest.approx(fast.objective, abs=1e-9)
    got = solve_packing(data, deterministic_s=5.0)
    assert got.status in (TerminationStatus.OPTIMAL, TerminationStatus.INFEASIBLE)
    if got.status is TerminationStatus.OPTIMAL:  # a relaxation: a packing leaves no shortfall
        assert not verdict.refuted, verdict
        assert verdict.shortfall is not None and verdict.shortfall <= REFUTE_TOL


def test_refutes_where_whole_jobs_cannot_share_servers() -> None:
    """Three 5-GPU jobs on two 8-GPU servers: 15 GPUs of 16, but one job per server."""
    jobs = tuple(_job(f"j{i}", 5) for i in range(3))
    data = PackingData((WholeGroup(jobs, 5, 2, 10.0, (0, 1)),), (), ((8, 24, 100.0),) * 2)
    verdict = refute_packing(data)
    assert verdict.refuted
    assert verdict.shortfall == pytest.approx(1 / 3)  # two of three jobs held
    assert solve_packing(data, deterministic_s=5.0).status is TerminationStatus.INFEASIBLE


def test_spread_cores_only_where_a_gpu_is_left() -> None:
    """Server 0 holds the 8-GPU job (11 cores left, no GPU), server 1 the 6-GPU job (2 GPUs,
    4 cores left): 15 cores are free, but the spread job's 12 cores can only sit next to
    its GPUs (plp4), so it does not fit."""
    big, mid, spread = _job("big", 8), _job("mid", 6), _job("sp", 2)
    data = PackingData(
        (WholeGroup((big,), 8, 1, 10.0, (0, 1)), WholeGroup((mid,), 6, 8, 10.0, (0, 1))),
        (SpreadJob(spread, 12, 10.0, (0, 1)),),
        ((8, 12, 100.0),) * 2,
    )
    verdict = refute_packing(data)
    assert verdict.refuted
    assert solve_packing(data, deterministic_s=5.0).status is TerminationStatus.INFEASIBLE
    roomy = PackingData(data.groups, (SpreadJob(spread, 4, 10.0, (0, 1)),), data.servers)
    assert not refute_packing(roomy).refuted  # 4 cores fit next to the two free GPUs
    assert solve_packing(roomy, deterministic_s=5.0).status is TerminationStatus.OPTIMAL


def test_refutes_the_full_server_points_of_seed_2_not_those_of_seed_4() -> None:
    two, four = refute_packing(_full_server_data(2)), refute_packing(_full_server_data(4))
    assert two.refuted and two.shortfall is not None and two.shortfall > 0.01
    assert not four.refuted and four.shortfall == pytest.approx(0.0, abs=REFUTE_TOL)


def test_no_listing_past_the_limit() -> None:
    data = _full_server_data(2)
    assert pattern_listing(data, limit=10) is None
    verdict = refute_packing(data, limit=10)
    assert verdict.shortfall is None and not verdict.refuted


def test_the_packing_route_skips_cp_sat_where_the_lp_refutes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[Any] = []
    real = cp_module.solve_packing

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(cp_module, "solve_packing", counted)
    ctx = Opt().context(family_round("split-penalty", 128, 2))
    assert ctx is not None
    res = pack(ctx, bound_points(ctx))
    assert res.status is TerminationStatus.INFEASIBLE and res.plan is None
    assert calls == []  # was: CP-SAT's whole budget, then a hinted second try
    ctx = Opt().context(family_round("split-penalty", 128, 4))
    assert ctx is not None
    res = pack(ctx, bound_points(ctx))
    assert res.status is TerminationStatus.OPTIMAL and res.plan is not None
    assert calls  # not refuted: CP-SAT packs it


def test_integral_contents_are_listed_contents_with_every_whole_job() -> None:
    data = _full_server_data(14)
    lst = pattern_listing(data)
    assert lst is not None
    whole = whole_contents(lst)
    assert whole is not None
    for d, gr in enumerate(data.groups):  # every whole job placed, on its servers
        assert sum(v for (dd, _), v in whole.items() if dd == d) == len(gr.jobs)
        assert all(s in gr.servers for (dd, s) in whole if dd == d)
    for s, (g, c, _) in enumerate(data.servers):  # within each server's GPUs and cores
        held = [(data.groups[d], v) for (d, ss), v in whole.items() if ss == s]
        assert sum(gr.gpus * v for gr, v in held) <= g
        assert sum(gr.cpus * v for gr, v in held) <= c
    assert whole_contents(lst, 3) == whole_contents(lst, 3)  # the same on every run


def test_whole_jobs_fixed_leave_only_the_spread_jobs_to_place() -> None:
    data = _full_server_data(14)
    lst = pattern_listing(data)
    assert lst is not None
    found = pack_from_contents(data, lst, attempts=12, deterministic_s=1.0)
    assert found is not None
    got, attempt = found
    whole = whole_contents(lst, attempt)
    assert got.plan is not None and whole is not None
    placed: dict[tuple[int, int], int] = {}  # the whole jobs sit exactly where they were fixed
    for d, gr in enumerate(data.groups):
        for job in gr.jobs:
            ((s, _),) = got.plan[job.id]
            placed[d, s] = placed.get((d, s), 0) + 1
    assert placed == {ds: n for ds, n in whole.items() if n}
    # more whole jobs fixed on a server than it holds: no packing
    d, s = next(iter(whole))
    too_many = dict(whole) | {(d, s): whole[d, s] + 9}
    bad = solve_packing(data, deterministic_s=1.0, whole=too_many)
    assert bad.status is TerminationStatus.INFEASIBLE


def test_the_route_packs_from_integral_contents_where_cp_sat_alone_runs_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Split penalties 128 GPUs seed 14: CP-SAT alone spends its whole budget (1.5 units)
    without a packing at the full-server points (54.365); the pattern LP's integral
    contents and the spread jobs placed around them pack them."""
    data = _full_server_data(14)
    alone = solve_packing(data, deterministic_s=1.5)
    assert alone.status is TerminationStatus.LIMIT
    ctx = Opt().context(family_round("split-penalty", 128, 14))
    assert ctx is not None
    with caplog.at_level(logging.INFO, logger="synergy_opt.mechanisms.opt.packing_route"):
        res = pack(ctx, bound_points(ctx))
    assert res.status is TerminationStatus.OPTIMAL and res.plan is not None
    assert "integral contents" in caplog.text
    assert set(res.plan) == {j.id for j in ctx.runnable}


def test_opt_reaches_the_full_server_bound_of_seed_14() -> None:
    """The packing is worth the full-server super-machine's optimum, a bound: ``opt``
    returns it, proven (``opt-exact`` at 10 s had ended at 53.745, gap 1.14 %)."""
    inst = family_round("split-penalty", 128, 14)
    got = make_mechanism("opt").allocate(inst)
    assert got.total_throughput == pytest.approx(54.365, abs=1e-6)
    assert got.upper_bound == pytest.approx(54.365, abs=1e-6)
    assert check_allocation(inst, got, fair_share=True) == []


def test_the_route_refutes_by_the_arc_flow_where_cp_sat_runs_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Split penalties 128 GPUs seed 3005, full-server points: the pattern LP does not
    refute them, CP-SAT's quick try and the integral contents find no packing, and CP-SAT
    then spent its whole budget (and a hinted try) for nothing; the arc flow refutes them
    at its root, so CP-SAT's whole budget never runs."""
    from synergy_opt.mechanisms.opt import packing_route

    budgets: list[float] = []
    real = cp_module.solve_packing

    def counted(*args: Any, **kwargs: Any) -> Any:
        budgets.append(kwargs.get("deterministic_s", -1.0))
        return real(*args, **kwargs)

    monkeypatch.setattr(cp_module, "solve_packing", counted)
    ctx = Opt().context(family_round("split-penalty", 128, 3005))
    assert ctx is not None
    assert not refute_packing(route_packing_data(ctx, bound_points(ctx))).refuted
    res = pack(ctx, bound_points(ctx))
    assert res.status is TerminationStatus.INFEASIBLE and res.plan is None
    # the quick try, then the spread jobs around each integral solution; no whole budget
    assert budgets[0] == packing_route.QUICK_DETERMINISTIC_S
    assert packing_route.PACKING_DETERMINISTIC_S not in budgets
    monkeypatch.setattr(packing_route, "PACKING_FLOW", False)
    budgets.clear()
    ctx = Opt().context(family_round("split-penalty", 128, 3005))
    assert ctx is not None
    res = pack(ctx, bound_points(ctx))
    assert res.status is TerminationStatus.LIMIT  # unsettled without the flow
    assert packing_route.PACKING_DETERMINISTIC_S in budgets
