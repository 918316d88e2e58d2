"""Packing at fixed points (formulations/packing.md): the CP-SAT fast path against the Pyomo
reference, its use as ``opt``'s first late route, and ``opt-exact``'s proof by it.

On split penalties 128 GPUs seed 4 the full-server super-machine's optimum 58.467 is the
optimum (``opt-exact`` proved it in 22 s at a 60-s limit); ``opt`` stopped at 58.296 after
24 s and ``opt-exact`` at 10 s at 57.94 (0.90 % gap).  Packed by CP-SAT, those points give
58.467 in about a second.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synergy_opt.check import check_allocation, fair_share_floor
from synergy_opt.formulations import packing
from synergy_opt.formulations.packing_cp import build_packing_cp, solve_packing
from synergy_opt.formulations.packing_data import with_free
from synergy_opt.generate import family_round
from synergy_opt.mechanisms import MechanismOptions, make_mechanism
from synergy_opt.mechanisms import opt_exact as exact_module
from synergy_opt.mechanisms.opt import ROUTES, Opt
from synergy_opt.mechanisms.opt.packing_route import bound_points, pack, packing_route
from synergy_opt.mechanisms.opt.routes import late_routes
from synergy_opt.mechanisms.opt.transport import deploy
from synergy_opt.mechanisms.packing import select_runnable
from synergy_opt.solve import TerminationStatus, solve_pyomo
from synergy_opt.types import PlacementPart, RoundInstance
from tests.strategies import round_instances
from tests.test_counting_splits import TINY_SEEDS, tiny_mixed_round
from tests.test_exact_typed import brute_force
from tests.test_formulations import md_names, model_names

#: The proven optimum of split penalties 128 GPUs seed 4 (= its full-server bound).
OPTIMUM_SEED4: float = 58.467


def _random_points(
    draw: st.DrawFn, inst: RoundInstance
) -> tuple[dict[str, tuple[int, float, float]], frozenset[str]]:
    """A grid point per job (mostly from the lower half of its grid, so that both verdicts
    come up) and a random set of multi-GPU jobs to spread."""
    points: dict[str, tuple[int, float, float]] = {}
    spread: set[str] = set()
    for job in inst.jobs:
        w = job.sensitivity
        low = draw(st.booleans())
        c = draw(st.sampled_from(w.cpus[: max(1, len(w.cpus) // 2)] if low else w.cpus))
        m = draw(st.sampled_from(w.mem_gb[: max(1, len(w.mem_gb) // 2)] if low else w.mem_gb))
        points[job.id] = (c, m, w.lookup(c, m))
        if job.gpus >= 2 and draw(st.booleans()):
            spread.add(job.id)
    return points, frozenset(spread)


@st.composite
def packing_cases(draw: st.DrawFn) -> tuple[RoundInstance, packing.PackingData]:
    inst = draw(round_instances(min_jobs=1, max_jobs=5, max_servers=3, penalties=False))
    points, spread = _random_points(draw, inst)
    return inst, packing.packing_data(inst, inst.jobs, points, spread)


def test_pyomo_component_names_match_markdown() -> None:
    inst = family_round("multi-gpu", 32, 0)
    ctx = Opt().context(inst)
    assert ctx is not None
    data = packing.packing_data(inst, ctx.runnable, ctx.points, ctx.spread_ids | {"x"})
    m = packing.build_packing(data)
    assert model_names(m) == md_names("packing")


def test_cp_sat_rows_carry_the_markdown_names() -> None:
    inst = family_round("split-penalty", 32, 1)
    ctx = Opt().context(inst)
    assert ctx is not None
    spread = {j.id for j in ctx.runnable if j.gpus >= 2}
    data = packing.packing_data(inst, ctx.runnable, ctx.points, spread)
    assert data.spread and data.groups
    # a free class too ((pk11), (pk12), f): the first group's jobs at its own point
    gr = data.groups[0]
    data = with_free(data, [(gr.jobs, [(gr.servers[0], gr.cpus, gr.mem_gb, 1.0)])], 0.0)
    proto = build_packing_cp(data, fewest_parts=True).model.proto
    rows = {c.name.split("[")[0] for c in proto.constraints}
    variables = {v.name.split("[")[0] for v in proto.variables}
    assert rows | variables | {"pk0_fewest_parts"} == md_names("packing")
    assert len(proto.objective.vars) > 0  # (pk0)


@settings(max_examples=60, deadline=None)
@given(packing_cases())
def test_cp_sat_packs_exactly_when_the_reference_does(
    case: tuple[RoundInstance, packing.PackingData],
) -> None:
    inst, data = case
    ref = solve_pyomo(packing.build_packing(data))
    got = solve_packing(data, deterministic_s=5.0)
    assert got.status in (TerminationStatus.OPTIMAL, TerminationStatus.INFEASIBLE)
    assert (got.status is TerminationStatus.OPTIMAL) == (ref.status is TerminationStatus.OPTIMAL), (
        ref.status,
        got.status,
    )
    if got.plan is not None:
        points = {
            j: (g.cpus, g.mem_gb, 0.0) for g in data.groups for j in (x.id for x in g.jobs)
        } | {sj.job.id: (sj.cpus, sj.mem_gb, 0.0) for sj in data.spread}
        assert set(got.plan) == set(points)
        gpus = {j.id: j.gpus for j in inst.jobs}
        assert all(sum(k for _, k in parts) == gpus[j] for j, parts in got.plan.items())
        whole = {j for g in data.groups for j in (x.id for x in g.jobs)}
        assert all(len(got.plan[j]) == 1 for j in whole)
        assert deploy(inst, got.plan, points) is not None  # the max-flow agrees


def test_the_same_round_gives_the_same_packing() -> None:
    ctx = Opt().context(family_round("multi-gpu", 128, 7))
    assert ctx is not None
    first, again = pack(ctx, bound_points(ctx)), pack(ctx, bound_points(ctx))
    assert first.status is TerminationStatus.OPTIMAL
    assert first.plan == again.plan


def test_packing_runs_before_the_counting_late_routes() -> None:
    """First of the late routes: before ``counting-relax-fix`` (mixed shapes 128 GPUs seed
    2103: its counts step took 13.5 s to 110.82, the packing then 0.7 s to the optimum
    111.8) and the counting routes that cost seconds (split penalties 128 GPUs seed 4:
    they spent 7 s for 58.296, the packing 1 s for the optimum)."""
    assert ROUTES["packing"].late
    assert [r.name for r in late_routes()] == [
        "packing",
        "pattern-root",  # rounds of one-GPU jobs only: test_opt_pattern_route.py
        "counting-relax-fix",
        "counting-full-servers",
        "counting-near",
    ]


def test_opt_reaches_the_full_server_optimum_by_packing() -> None:
    inst = family_round("split-penalty", 128, 4)
    got = make_mechanism("opt").allocate(inst)
    assert got.upper_bound == pytest.approx(OPTIMUM_SEED4, abs=1e-6)
    assert got.total_throughput == pytest.approx(OPTIMUM_SEED4, abs=1e-6)  # was 58.296
    assert check_allocation(inst, got, fair_share=True) == []


def test_opt_reaches_the_bound_on_a_multi_gpu_round_by_packing() -> None:
    inst = family_round("multi-gpu", 128, 7)
    got = make_mechanism("opt").allocate(inst)
    assert got.total_throughput == pytest.approx(92.67, abs=1e-6)  # was 92.17
    assert got.upper_bound == pytest.approx(92.67, abs=1e-6)
    assert check_allocation(inst, got, fair_share=True) == []


def test_opt_exact_proves_by_packing_where_the_clock_cut_opt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """At a 30-s limit ``opt`` still gets 1 s here (``PATTERN_OPT_CAP_S``): cut, below its
    bound, so the packing runs and the answer is proven without a search."""
    inst = family_round("split-penalty", 128, 4)
    with caplog.at_level(logging.INFO, logger="synergy_opt.mechanisms.opt_exact"):
        got = make_mechanism("opt-exact", MechanismOptions(time_limit_s=30.0)).allocate(inst)
    assert got.total_throughput == pytest.approx(OPTIMUM_SEED4, abs=1e-6)
    assert got.upper_bound == pytest.approx(OPTIMUM_SEED4, abs=1e-6)
    assert got.notes == ()
    assert "opt's answer meets its bound" in caplog.text
    assert check_allocation(inst, got, fair_share=True) == []


def test_opt_exact_runs_no_search_where_opt_meets_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_search(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("searched a round opt had proven")

    monkeypatch.setattr(exact_module, "solve_counting", no_search)
    monkeypatch.setattr(exact_module, "branch_and_price", no_search)
    inst = family_round("multi-gpu", 128, 1)  # opt reaches its bound 95.04 at once
    got = make_mechanism("opt-exact").allocate(inst)
    assert got.total_throughput == pytest.approx(95.04, abs=1e-6)
    assert got.upper_bound == pytest.approx(95.04, abs=1e-6)
    assert got.notes == ()


@pytest.mark.parametrize("seed", TINY_SEEDS)
def test_opt_exact_equals_brute_force_on_tiny_mixed_shapes(seed: int) -> None:
    """Where ``opt`` meets its own bound ``opt-exact`` takes that as the proof: on the tiny
    mixed-shape rounds, where a spread job's floor depends on its split (the case that once
    made ``opt``'s bound too low), it still equals the checker's brute force."""
    inst = tiny_mixed_round(seed)
    want = brute_force(inst, select_runnable(inst))
    got = make_mechanism("opt-exact", MechanismOptions(time_limit_s=20.0)).allocate(inst)
    assert check_allocation(inst, got, fair_share=True) == []
    tune = make_mechanism("tune").allocate(inst).total_throughput
    best = tune if want is None else max(want.total_throughput, tune)
    assert got.total_throughput == pytest.approx(best, abs=1e-6)
    if got.upper_bound is not None:
        assert got.upper_bound >= best - 1e-6


def test_packing_keeps_per_server_floors_on_mixed_shapes() -> None:
    """Mixed shapes 64 GPUs seed 1021 (per-server share rule): a packing that ignored where
    a job's floor rises put a job worth 0.66 at its point on a server where its floor is 1;
    the checker refused the answer and ``opt`` fell back to TUNE's 40.3.  Servers whose
    floor a job's point cannot keep are left out of its packing (and where a plan is
    deployed, one whose split raises a spread job's floor is re-optimised): ``opt`` reaches
    52.11, the proven optimum (51.98 before the route)."""
    inst = family_round("mixed-shapes", 64, 1021)
    assert inst.per_server_shares
    ctx = Opt().context(inst)
    assert ctx is not None
    plan = packing_route(ctx)
    names = [s.name for s in inst.cluster.servers]
    for job in ctx.runnable:
        parts = tuple(PlacementPart(names[s], k, 0, 0.0) for s, k in plan[job.id])
        w = ctx.points[job.id][2] * (job.split_penalty if len(parts) > 1 else 1.0)
        assert fair_share_floor(inst, job, parts)[1] <= w + 1e-9
    got = make_mechanism("opt").allocate(inst)
    assert got.total_throughput == pytest.approx(52.11, abs=1e-6)
    assert check_allocation(inst, got, fair_share=True) == []


def test_a_packing_the_budget_missed_is_found_from_the_best_plan_so_far(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Mixed shapes 96 GPUs seed 1086: the pooled super-machine's 86.15 is the optimum, but
    from scratch CP-SAT finds no packing at its points within 20 units, and ``opt`` stopped
    at hungry-spread's 85.19 (0.989 of it) after 20 s.  From that plan as a hint it packs
    them within the first budget.  (The pattern LP's integral contents now pack them from
    scratch, tests/test_packing_lp.py; switched off here, then on.)"""
    from synergy_opt.mechanisms.opt import packing_route

    inst = family_round("mixed-shapes", 96, 1086)
    ctx = Opt().context(inst)
    assert ctx is not None
    bp = bound_points(ctx)
    assert bp.value == pytest.approx(86.15, abs=1e-6)
    with monkeypatch.context() as m:
        m.setattr(packing_route, "PACKING_LP", False)
        assert pack(ctx, bp).status is TerminationStatus.LIMIT
        best = ROUTES["hungry-spread"].plan(ctx)
        hinted = pack(ctx, bp, hint=best)
    assert hinted.status is TerminationStatus.OPTIMAL and hinted.plan is not None
    assert set(hinted.plan) == {j.id for j in ctx.runnable}
    assert pack(ctx, bp).status is TerminationStatus.OPTIMAL  # from the LP's contents
    got = make_mechanism("opt").allocate(inst)
    assert got.total_throughput == pytest.approx(86.15, abs=1e-6)
    assert got.upper_bound == pytest.approx(86.15, abs=1e-6)
    assert check_allocation(inst, got, fair_share=True) == []


@pytest.mark.parametrize(
    ("family", "gpus", "seed", "status"),
    [
        ("multi-gpu", 128, 7, TerminationStatus.OPTIMAL),  # packs from scratch
        ("split-penalty", 64, 1153, TerminationStatus.INFEASIBLE),  # refuted at once
    ],
)
def test_no_hint_is_tried_where_the_first_packing_is_found_or_refuted(
    monkeypatch: pytest.MonkeyPatch,
    family: str,
    gpus: int,
    seed: int,
    status: TerminationStatus,
) -> None:
    """The hinted try runs only where the budget ran out: a packing found or proven not to
    exist stays as it was.  (CP-SAT's own refutation: the pattern LP that runs before it,
    tests/test_packing_lp.py, refutes seed 1153 too and is switched off here.)"""
    from synergy_opt.formulations import packing_cp
    from synergy_opt.mechanisms.opt import packing_route

    monkeypatch.setattr(packing_route, "PACKING_LP", False)
    calls: list[bool] = []
    real = packing_cp.solve_packing

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs.get("hint") is not None and not kwargs.get("fewest_parts"))
        return real(*args, **kwargs)

    monkeypatch.setattr(packing_cp, "solve_packing", counted)
    ctx = Opt().context(family_round(family, gpus, seed))
    assert ctx is not None
    res = pack(ctx, bound_points(ctx), hint=ROUTES["balanced"].plan(ctx))
    assert res.status is status
    assert calls and not any(calls)  # the first packing (and a fewer-parts one), no hinted try


def _never_kept(*args: Any) -> Any:
    raise AssertionError("the probe route finds no plan, so nothing is kept")


def test_the_late_routes_see_the_best_plan_only_near_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The hint is shared only from a plan within ``BEST_SO_FAR_MIN_SHARE`` of the
    super-machine optimum: further off, the packing's second try lost its whole budget."""
    from synergy_opt.mechanisms.opt import search
    from synergy_opt.mechanisms.opt.context import BEST_SO_FAR, BEST_SO_FAR_MIN_SHARE, RoundingError
    from synergy_opt.mechanisms.opt.neighbourhood import State
    from synergy_opt.mechanisms.opt.routes import Route

    seen: list[object] = []

    def probe(c: Any) -> Any:
        seen.append(c.memo.get(BEST_SO_FAR))
        raise RoundingError("probe")

    monkeypatch.setattr(
        search, "late_routes", lambda: [Route("probe", probe, True, "", False, late=True)]
    )
    inst = family_round("multi-gpu", 32, 0)
    for share in (BEST_SO_FAR_MIN_SHARE - 0.01, BEST_SO_FAR_MIN_SHARE + 0.01):
        ctx = Opt().context(inst)
        assert ctx is not None
        plan = ROUTES["balanced"].plan(ctx)
        state = State(plan, dict(ctx.points), share * ctx.optimum)
        errors: list[str] = []
        kept = search.run_late_routes(ctx, state, ctx.optimum, True, _never_kept, errors)
        assert kept is state and errors == ["probe: probe"]
    assert seen == [None, plan]


def _packing_data_per_job(
    inst: RoundInstance, jobs: Any, points: Any, spread: Any, servers: Any = None
) -> packing.PackingData:
    """``packing_data`` as it was built: every job scans every server (the reference)."""
    from synergy_opt.formulations.packing_data import PackingData, SpreadJob, WholeGroup

    srv = inst.cluster.servers
    by_key: dict[Any, list[Any]] = {}
    spreads = []
    for job in jobs:
        c, m, _ = points[job.id]
        if servers is not None and job.id in servers:
            allowed = tuple(servers[job.id])
        else:
            allowed = tuple(s for s, server in enumerate(srv) if job.may_use(server))
        if job.id in spread:
            spreads.append(SpreadJob(job, int(c), float(m), allowed))
            continue
        fits = tuple(
            s
            for s in allowed
            if srv[s].gpus >= job.gpus and srv[s].cpus >= c and srv[s].mem_gb >= m - 1e-9
        )
        by_key.setdefault((job.gpus, int(c), float(m), fits), []).append(job)
    groups = tuple(WholeGroup(tuple(js), g, c, m, f) for (g, c, m, f), js in by_key.items())
    shapes = tuple((s.gpus, int(s.cpus), float(s.mem_gb)) for s in srv)
    return PackingData(groups, tuple(spreads), shapes)


@pytest.mark.parametrize("seed", range(40))
def test_packing_data_equals_the_per_job_scan(seed: int) -> None:
    """The server lists computed once per distinct restriction and point give the data the
    per-job scan gave, on fuzz rounds (mixed shapes, GPU types with half the jobs
    restricted to some of them, spread jobs) with and without per-job server lists."""
    import dataclasses
    import random
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from fuzz_rounds import draw

    d, k = None, 0
    while d is None:  # the next seed where the generator refuses the drawn spec
        d, k = draw(50_000 + 100 * seed + k, (2, 12)), k + 1
    r = random.Random(seed)
    kinds = sorted({s.gpu_type for s in d.inst.cluster.servers if s.gpu_type is not None})
    jobs = tuple(
        dataclasses.replace(j, gpu_types=tuple(r.sample(kinds, r.randint(1, len(kinds)))))
        if kinds and r.random() < 0.5
        else j
        for j in d.inst.jobs
    )
    inst = dataclasses.replace(d.inst, jobs=jobs)
    cols = [(c, m) for c in (1, 2, 3, 4, 6) for m in (10.0, 20.5, 62.5)]
    points = {j.id: (*r.choice(cols), 1.0) for j in inst.jobs}
    spread = {j.id for j in inst.jobs if j.gpus > 1 and r.random() < 0.3}
    n = len(inst.cluster.servers)
    lists = {j.id: sorted(r.sample(range(n), r.randint(1, n))) for j in inst.jobs[::3]}
    for servers in (None, lists):
        got = packing.packing_data(inst, inst.jobs, points, spread, servers)
        assert got == _packing_data_per_job(inst, inst.jobs, points, spread, servers)
