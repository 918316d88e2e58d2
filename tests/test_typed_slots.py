"""Typed spread slots of the counting model: one slot per job that chooses its variant.

* Every component of ``formulations/counting.md`` is built on a 3-type round (the
  spread-variant rows exist only there); untyped rounds get none of them.
* Slots: min(n_k, union GPUs // g_k) per class, each offering every variant's points with
  that variant's servers; the restriction to those servers is binding (without it tiny
  3-type rounds are worth more than the brute force of tests/test_exact_typed.py allows).
* The ``cnt_variant_*`` rows keep the LP relaxation as tight as per-variant slots were:
  dropped, the LP bound of a 2-cores-per-GPU 3-type round rises.
* A known allocation is a feasible MIP start of the typed model.
* ``opt-exact`` proves a 3-type multi-GPU round at 2 cores per GPU.
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np
import pytest

from synergy_opt.check import check_allocation
from synergy_opt.formulations import counting, counting_fast
from synergy_opt.generate import family_round
from synergy_opt.mechanisms import MechanismOptions, make_mechanism
from synergy_opt.mechanisms.packing import select_runnable
from synergy_opt.solve import TerminationStatus, solve_matrix
from synergy_opt.types import Allocation, RoundInstance
from tests.test_exact_typed import three_type_round, tiny_round
from tests.test_formulations import (
    SPLIT_ONLY_COUNTING_COMPONENTS,
    TYPED_ONLY_COUNTING_ROWS,
    md_names,
    model_names,
)

VARIANT_ROWS = ("cnt_variant_gpus", "cnt_variant_cpus", "cnt_variant_mem")


def _two_core_round(gpus: int, seed: int) -> RoundInstance:
    """A v100/p100/k80 multi-GPU round with 2 cores per GPU (cores are scarce)."""
    return three_type_round(gpus, seed, cpus_per_server=16)


def test_every_counting_component_on_a_three_type_round() -> None:
    inst = _two_core_round(32, 1)
    m = counting.build_counting(inst, select_runnable(inst), symmetry=True)
    assert model_names(m) == md_names("counting")
    empty = [
        name
        for name in md_names("counting")
        if name not in ("eq1_weighted_throughput", *SPLIT_ONLY_COUNTING_COMPONENTS)
        and len(getattr(m, name)) == 0
    ]
    assert empty == []


@pytest.mark.parametrize("family", ["multi-gpu", "split-penalty", "mixed-shapes"])
def test_untyped_rounds_have_no_variant_rows(family: str) -> None:
    inst = family_round(family, 64, seed=2)
    data = counting._model_data(inst, select_runnable(inst))
    assert data["slots"]
    assert counting.variant_parts(data) == [] and counting.variant_rows(data) == []
    names = counting_fast.build_counting_matrix(data).row_names
    assert not any(n.startswith(TYPED_ONLY_COUNTING_ROWS) for n in names)


def test_one_slot_per_job_offers_every_variant() -> None:
    inst = _two_core_round(64, 0)
    runnable = select_runnable(inst)
    data = counting._model_data(inst, runnable)
    servers = inst.cluster.servers
    by_class = {ids: next(j for j in runnable if j.id == ids[0]) for ids in data["classes"]}
    seen_multi = False
    for k, ids in enumerate(data["classes"]):
        mine = [i for kk, i in data["slots"] if kk == k]
        if not mine:
            continue
        job = by_class[ids]
        allowed = [s for s, srv in enumerate(servers) if job.may_use(srv)]
        variants = {ss for _, ss in counting._spread_variants(job, allowed, servers)}
        union = data["slot_servers"][k, 0]
        assert len(mine) == min(data["n"][k], sum(data["G"][s] for s in union) // job.gpus)
        pss = data["point_servers"][k, 0]
        assert set(pss) <= variants and len(pss) == len(data["slot_points"][k, 0])
        assert set(union) == {s for ss in pss for s in ss}
        seen_multi = seen_multi or len(set(pss)) >= 3
    assert seen_multi  # three ordered types: three variants offered by one slot


def _without_variants(data: dict[str, object]) -> dict[str, object]:
    """The same data with every slot point allowed on every slot server."""
    out = dict(data)
    out["point_servers"] = {
        ki: (data["slot_servers"][ki],) * len(pts)  # type: ignore[index]
        for ki, pts in data["slot_points"].items()  # type: ignore[attr-defined]
    }
    return out


def _optimum(data: dict[str, object], relax: bool = False) -> float:
    res = solve_matrix(counting_fast.build_counting_matrix(data, relax=relax).matrix, "highs")
    assert res.status is TerminationStatus.OPTIMAL and res.objective is not None
    return res.objective


def test_points_are_held_to_their_variants_servers() -> None:
    """Letting every point use every server over-credits some tiny 3-type round (whose
    modelled optimum test_exact_typed proves equal to the checker's brute force)."""
    higher = 0
    for seed in range(24):
        inst = tiny_round(seed)
        data = counting._model_data(inst, select_runnable(inst))
        if not counting.variant_parts(data):
            continue
        res = solve_matrix(counting_fast.build_counting_matrix(data).matrix, "highs")
        if res.status is TerminationStatus.INFEASIBLE:  # tiny_round(3): a class with no slot
            continue
        exact, loose = _optimum(data), _optimum(_without_variants(data))
        assert loose >= exact - 1e-9
        higher += loose > exact + 1e-6
    assert higher > 0


@pytest.mark.parametrize("seed", [0, 1])
def test_variant_rows_keep_the_lp_tight(seed: int) -> None:
    inst = _two_core_round(64, seed)
    data = counting._model_data(inst, select_runnable(inst))
    cm = counting_fast.build_counting_matrix(data, relax=True)
    drop = np.array([n.startswith(VARIANT_ROWS) for n in cm.row_names])
    assert drop.any()
    loose = dataclasses.replace(cm.matrix, row_upper=np.where(drop, math.inf, cm.matrix.row_upper))
    tight_lp = _optimum(data, relax=True)
    loose_lp = solve_matrix(loose, "highs").objective
    assert loose_lp is not None and loose_lp > tight_lp * 1.01


def _assert_feasible_start(inst: RoundInstance, alloc: Allocation) -> None:
    """``alloc`` as a MIP start of the counting model: within every row and column bound,
    worth the allocation's total."""
    cm = counting_fast.build_counting_matrix(counting._model_data(inst, select_runnable(inst)))
    x = counting_fast.start_from_placements(cm, {j.id: j.placement for j in alloc.jobs})
    assert x is not None
    mm = cm.matrix
    act = np.zeros(mm.num_rows)
    for c in range(mm.num_cols):
        lo, hi = mm.a_start[c], mm.a_start[c + 1]
        act[mm.a_index[lo:hi]] += mm.a_value[lo:hi] * x[c]
    assert np.all(act <= mm.row_upper + 1e-6) and np.all(act >= mm.row_lower - 1e-6)
    assert np.all(x <= mm.col_upper + 1e-6)  # GB parts carry solver round-off
    assert float(mm.cost @ x) == pytest.approx(alloc.total_throughput, rel=1e-6)


def test_spread_allocations_are_feasible_typed_starts() -> None:
    """Spread jobs of tiny 3-type optima (some over two or three GPU types) and of a
    64-GPU round start in a slot at a point whose variant has their servers."""
    kinds = []
    for seed in range(24):
        inst = tiny_round(seed)
        if not counting._model_data(inst, select_runnable(inst))["exact"]:
            continue  # split-dependent floors: opt-exact's answer may be below "high" ones
        alloc = make_mechanism("opt-exact").allocate(inst)
        if {j.id for j in alloc.jobs} != {j.id for j in select_runnable(inst)}:
            continue
        types = {s.name: s.gpu_type for s in inst.cluster.servers}
        spread = [j for j in alloc.jobs if len({p.server for p in j.placement}) > 1]
        if spread:
            _assert_feasible_start(inst, alloc)
            kinds += [len({types[p.server] for p in j.placement}) for j in spread]
    assert max(kinds) >= 2
    inst = _two_core_round(64, 1)
    alloc = make_mechanism("opt").allocate(inst)
    assert any(len({p.server for p in j.placement}) > 1 for j in alloc.jobs)
    _assert_feasible_start(inst, alloc)


def test_opt_exact_proves_a_two_core_multi_gpu_round() -> None:
    inst = _two_core_round(64, 0)
    t0 = time.perf_counter()
    exact = make_mechanism("opt-exact", MechanismOptions(time_limit_s=60)).allocate(inst)
    took = time.perf_counter() - t0
    assert exact.notes == ()
    assert check_allocation(inst, exact, fair_share=True) == []
    assert exact.upper_bound is not None
    assert exact.upper_bound - exact.total_throughput <= 1e-4 * max(1.0, exact.total_throughput)
    assert took < 60
