"""Branch-and-price where a spread job's floor depends on its split (mixed server shapes
under per-server fair shares): the restriction's allocations keep every floor, the
relaxation's bound covers the optimum, and ``opt-exact`` runs the pair there."""

from __future__ import annotations

from typing import Any

import pytest

from synergy_opt.check import check_allocation
from synergy_opt.formulations import branch_price as bp
from synergy_opt.formulations import counting_fast, patterns_fast
from synergy_opt.generate import GenerateSpec, generate_instance
from synergy_opt.mechanisms import make_mechanism, opt_exact
from synergy_opt.mechanisms.base import MechanismOptions
from synergy_opt.mechanisms.packing import select_runnable
from synergy_opt.types import PlacementPart, RoundInstance, build_allocation

#: 32 GPUs of three shapes (cores and GB per GPU 3 / 62.5, 4 / 32, 3 / 50): a 2-GPU job's
#: floor depends on the shapes its GPUs land on.
SHAPES = ((2, 8, 24, 500.0), (1, 8, 32, 256.0), (2, 4, 12, 200.0))
MIX = ((1, 0.5), (2, 0.15), (4, 0.15), (6, 0.1), (8, 0.1))


def _round(seed: int, shapes: Any = SHAPES, penalty: Any = (0.8, 0.95)) -> RoundInstance:
    spec = GenerateSpec(
        gpu_load=1.2,
        gpu_mix=MIX,
        seed=seed,
        name=f"pair-{seed}",
        server_shapes=shapes,
        split_penalty=penalty,
    )
    return generate_instance(spec, None)


def _valid(inst: RoundInstance, placements: Any) -> bool:
    alloc = build_allocation(inst, "bp", placements)
    return check_allocation(inst, alloc, fair_share=True) == []


def test_the_pair_applies_only_where_a_floor_depends_on_the_split() -> None:
    mixed = _round(0)
    assert bp.floor_pair_applies(mixed, select_runnable(mixed))
    one_shape = _round(0, shapes=((4, 8, 24, 500.0),))
    assert not bp.floor_pair_applies(one_shape, select_runnable(one_shape))
    no_penalty = _round(0, penalty=None)
    assert not bp.floor_pair_applies(no_penalty, select_runnable(no_penalty))
    run = select_runnable(mixed)
    # the pattern master states these splits: the exact search runs (tests/test_split_master)
    assert patterns_fast.pattern_search(mixed, run) == "split"
    with pytest.raises(ValueError, match="floors"):
        bp.branch_and_price(mixed, run, time_limit=5, floors="middle")


@pytest.mark.parametrize("seed", [0, 3, 4])
def test_restriction_below_and_relaxation_above_the_optimum(seed: int) -> None:
    """Seeds whose restriction loses throughput (0: 13.94 of 14.55, 3: 18.96 of 19.355,
    4: 7.7 of 8.4): the pair brackets the counting model's proven optimum."""
    inst = _round(seed)
    run = select_runnable(inst)
    ref = counting_fast.solve_counting(inst, run, time_limit=60)
    assert ref.proven and ref.objective is not None
    high = bp.branch_and_price(inst, run, time_limit=30, floors="high")
    assert high is not None and high.bound is None and not high.proven
    assert high.objective is not None and high.objective < ref.objective - 1e-6
    assert _valid(inst, high.placements)
    low = bp.branch_and_price(inst, run, time_limit=30, floors="low")
    assert low is not None and low.bound is not None
    assert low.bound >= ref.objective - 1e-6
    if low.placements:  # only an allocation that keeps every floor comes back
        assert _valid(inst, low.placements)
        assert low.objective is not None and low.objective <= ref.objective + 1e-6


def test_a_relaxation_answer_that_misses_a_floor_is_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    inst = _round(0)
    run = select_runnable(inst)
    monkeypatch.setattr(bp, "_misses_a_floor", lambda *_: True)
    low = bp.branch_and_price(inst, run, time_limit=30, floors="low")
    assert low is not None and low.bound is not None
    assert low.objective is None and not low.placements and not low.proven


def test_misses_a_floor_reads_the_checker() -> None:
    inst = _round(0)
    run = select_runnable(inst)
    high = bp.branch_and_price(inst, run, time_limit=30, floors="high")
    assert high is not None and high.placements
    assert not bp._misses_a_floor(inst, high.placements)
    job = next(j for j, parts in high.placements.items() if parts and parts[0].cpus > 0)
    starved = dict(high.placements)  # a job without cores falls below its floor
    starved[job] = tuple(PlacementPart(p.server, p.gpus, 0, p.mem_gb) for p in starved[job])
    assert bp._misses_a_floor(inst, starved)


def test_the_pair_stage_proves_the_optimum(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seed 3: the restriction stops at 18.96, the relaxation from its answer finds an
    allocation that keeps every floor at its bound, the optimum 19.355."""
    inst = _round(3)
    run = select_runnable(inst)
    ref = counting_fast.solve_counting(inst, run, time_limit=60)
    assert ref.proven and ref.objective is not None
    modes: list[str] = []
    real = bp.branch_and_price

    def spy(*args: Any, **kwargs: Any) -> Any:
        modes.append(kwargs.get("floors", "exact"))
        return real(*args, **kwargs)

    monkeypatch.setattr(opt_exact, "branch_and_price", spy)
    for exact, second in ((False, "low"), (True, "exact")):
        modes.clear()
        got = opt_exact._floor_pair_stage(
            inst, run, [], 60.0, MechanismOptions(), lambda: False, exact=exact
        )
        assert got is not None and modes == ["high", second]
        assert got.proven and got.objective == pytest.approx(ref.objective, rel=1e-4)
        assert got.dual_bound is not None and got.dual_bound >= ref.objective - 1e-6
        assert _valid(inst, got.placements)


@pytest.mark.parametrize("seed", [0, 4])
def test_opt_exact_on_split_dependent_floors_is_the_optimum(seed: int) -> None:
    inst = _round(seed)
    run = select_runnable(inst)
    ref = counting_fast.solve_counting(inst, run, time_limit=60)
    assert ref.proven and ref.objective is not None
    got = make_mechanism("opt-exact", MechanismOptions(time_limit_s=60)).allocate(inst)
    assert check_allocation(inst, got, fair_share=True) == []
    assert got.total_throughput == pytest.approx(ref.objective, rel=1e-4)
    assert got.upper_bound is not None and got.upper_bound >= ref.objective - 1e-6
    assert got.upper_bound <= got.total_throughput * (1 + 1e-4) + 1e-9
