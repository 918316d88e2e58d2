"""Packing with free classes (``formulations/packing.md``, (pk11)-(pk12)): whole jobs whose
points the packing picks, as branch-and-price's leaves leave them (``branch_price.md``,
``FREE_PACK``).  The CP-SAT fast path against the Pyomo reference, both roundings, and a
leaf packed by :func:`~synergy_opt.formulations.branch_points._pack_free`."""

from __future__ import annotations

import math
import time

import pyomo.environ as pyo
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synergy_opt.check import check_allocation
from synergy_opt.formulations import packing
from synergy_opt.formulations.branch_points import _LeafPoints, _pack_free
from synergy_opt.formulations.counting import _model_data
from synergy_opt.formulations.packing_cp import solve_packing
from synergy_opt.formulations.packing_data import PackingData, with_free
from synergy_opt.generate import family_round
from synergy_opt.mechanisms.opt import Opt
from synergy_opt.solve import TerminationStatus, solve_pyomo
from synergy_opt.types import Job, RoundInstance, build_allocation
from tests.test_packing import packing_cases


@st.composite
def free_cases(draw: st.DrawFn) -> PackingData:
    """A packing case of ``test_packing`` plus one or two free classes of 1-2 jobs, each
    with 1-4 options (server, cores, whole GB, throughput), and a floor on their worth."""
    inst, data = draw(packing_cases())
    n = len(data.servers)
    free = []
    for e in range(draw(st.integers(1, 2))):
        gpus = draw(st.sampled_from((1, 2)))
        jobs = [
            Job(f"free{e}_{i}", gpus, inst.jobs[0].sensitivity)
            for i in range(draw(st.integers(1, 2)))
        ]
        options = draw(
            st.lists(
                st.tuples(
                    st.integers(0, n - 1),
                    st.integers(1, 8),
                    st.sampled_from((10.0, 20.0, 40.0)),
                    st.sampled_from((0.5, 1.0, 1.25, 2.0)),
                ),
                min_size=1,
                max_size=4,
            )
        )
        free.append((jobs, options))
    floor = draw(st.sampled_from((None, 1.0, 2.0, 3.0)))
    return with_free(data, free, floor)


def _reference_best(data: PackingData) -> float | None:
    """The Pyomo model's most worth of the free jobs (``None``: no packing)."""
    m = packing.build_packing(data)
    m.pk0_fewest_parts.deactivate()
    m.most = pyo.Objective(
        expr=pyo.quicksum(data.free[e].options[o][3] * m.f[e, o] for e, o in m.FO),
        sense=pyo.maximize,
    )
    res = solve_pyomo(m)
    if res.status is TerminationStatus.INFEASIBLE:
        return None
    assert res.status is TerminationStatus.OPTIMAL and res.objective is not None
    return res.objective


@settings(max_examples=60, deadline=None)
@given(free_cases())
def test_cp_sat_picks_the_free_points_the_reference_does(data: PackingData) -> None:
    """Both roundings agree with the reference on whole-GB rounds: the real model's packing
    exists and is worth the most exactly when the reference's is, and the relaxed model's
    bound is that worth (a proof, never below it)."""
    best = _reference_best(data)
    real = solve_packing(data, deterministic_s=5.0, most_worth=True)
    relaxed = solve_packing(data, deterministic_s=5.0, most_worth=True, relax=True)
    if best is None:
        assert real.status is TerminationStatus.INFEASIBLE
        assert relaxed.status is TerminationStatus.INFEASIBLE
        return
    assert real.status is TerminationStatus.OPTIMAL and real.points is not None
    worth = sum(w for _, _, w in real.points.values())
    assert worth == pytest.approx(best, abs=1e-6)
    if data.free_worth is not None:
        assert worth >= data.free_worth - 1e-9
    assert relaxed.worth_bound is not None
    assert best - 1e-9 <= relaxed.worth_bound <= best + 1e-5
    placed = {j.id for fr in data.free for j in fr.jobs}
    assert placed <= set(real.plan or {})


def test_the_worth_floor_is_kept_or_the_packing_refused() -> None:
    """One 8-GPU, 8-core server holds a 4-GPU whole job of 6 cores; a free 4-GPU job is
    worth 1 at 1 core and 2 at 4 cores: at least 1.5 it does not fit, in either model."""
    w = family_round("multi-gpu", 32, 0).jobs[0].sensitivity
    whole, free = Job("w", 4, w), Job("f", 4, w)
    data = PackingData((packing.WholeGroup((whole,), 4, 6, 1.0, (0,)),), (), ((8, 8, 100.0),))
    for floor, fits in ((1.0, True), (1.5, False)):
        case = with_free(data, [([free], [(0, 1, 1.0, 1.0), (0, 4, 1.0, 2.0)])], floor)
        ref = solve_pyomo(packing.build_packing(case))
        assert (ref.status is TerminationStatus.OPTIMAL) is fits
        for relax in (False, True):
            got = solve_packing(case, deterministic_s=5.0, relax=relax)
            assert (got.status is TerminationStatus.OPTIMAL) is fits
            if fits:
                assert got.points == {"f": (1, 1.0, 1.0)}
                assert got.plan == {"w": ((0, 4),), "f": ((0, 4),)}


def _leaf(seed: int) -> tuple[RoundInstance, list[Job], dict, _LeafPoints, float] | None:
    """A split-penalty 32-GPU round's runnable jobs as a leaf: every job at its class's
    cheapest point but those of the largest class of one-GPU jobs, left free; with the
    fixed jobs' worth."""
    inst = family_round("split-penalty", 32, seed)
    ctx = Opt().context(inst)
    assert ctx is not None
    jobs = list(ctx.runnable)
    data = _model_data(inst, jobs)
    sizes = {k: len(ids) for k, ids in enumerate(data["classes"]) if data["g"][k] == 1}
    if not sizes:
        return None
    free = max(sizes, key=lambda k: (sizes[k], -k))
    cheapest: dict[int, tuple[int, float, float]] = {}
    for (_, k, _), pt in data["x_point"].items():
        if k not in cheapest or pt[2] < cheapest[k][2]:
            cheapest[k] = pt
    points = {}
    for k, ids in enumerate(data["classes"]):
        for jid in ids:
            points[jid] = cheapest[k]
    fixed = _LeafPoints(points, frozenset(), [], (free,))
    worth = math.fsum(pt[2] for jid, pt in points.items() if jid not in data["classes"][free])
    return inst, jobs, data, fixed, worth


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_leaf_with_a_free_class_is_packed_and_bounded(seed: int) -> None:
    """``_pack_free`` returns an allocation the checker accepts, worth at least its target;
    asked for more than its own bound, it refutes the leaf (or bounds it below that)."""
    got = _leaf(seed)
    assert got is not None
    inst, jobs, data, fixed, worth = got
    target = worth + 0.5 * len(data["classes"][fixed.free[0]])
    verdict = _pack_free(inst, jobs, data, fixed, target, time.perf_counter() + 30)
    assert verdict.placements is not None
    alloc = build_allocation(inst, "test", verdict.placements)
    assert check_allocation(inst, alloc, fair_share=True) == []
    assert set(verdict.placements) == {j.id for j in jobs}
    total = alloc.total_throughput
    assert total >= target - 1e-9
    assert verdict.bound is not None and verdict.bound >= total - 1e-6
    above = _pack_free(inst, jobs, data, fixed, verdict.bound + 0.01, time.perf_counter() + 30)
    assert above.placements is None
    assert above.bound is not None and above.bound < verdict.bound + 0.01


def test_no_floor_before_any_incumbent() -> None:
    """Before the search has an incumbent its target is -inf: no (pk12) row, in either
    model, and the packing is the same as with no floor at all."""
    w = family_round("multi-gpu", 32, 0).jobs[0].sensitivity
    data = PackingData((), (), ((8, 8, 100.0),))
    free = [([Job("f", 4, w)], [(0, 1, 1.0, 1.0), (0, 4, 1.0, 2.0)])]
    for floor in (None, -math.inf):
        case = with_free(data, free, floor)
        assert [c.local_name for c in packing.build_packing(case).pk12_free_worth.values()] == []
        got = solve_packing(case, deterministic_s=5.0, most_worth=True)
        assert got.points == {"f": (4, 1.0, 2.0)} and got.worth_bound == pytest.approx(2.0)
