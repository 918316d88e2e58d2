"""``opt``'s ``upper_bound`` bounds every fair allocation, also where floors depend on the split.

Under the per-server rule a spread job's floor is read at its servers' summed whole cores,
which can be below every whole job's floor; the guiding super-machine used the whole-job
floor, so on the one-type version of tiny round 179 ``opt`` claimed 3.89 while the optimum
(brute force through the checker) is 3.91.
"""

from __future__ import annotations

import dataclasses

import pytest

from synergy_opt.check import check_allocation
from synergy_opt.mechanisms import MechanismOptions, make_mechanism
from synergy_opt.mechanisms.packing import select_runnable
from synergy_opt.types import Cluster, RoundInstance
from tests.test_exact_typed import brute_force, tiny_round

ABS_TOL = 1e-6


def one_type(seed: int) -> RoundInstance:
    """Tiny round ``seed`` with its GPU types and per-type matrices dropped."""
    typed = tiny_round(seed)
    cluster = Cluster(tuple(dataclasses.replace(s, gpu_type=None) for s in typed.cluster.servers))
    jobs = tuple(dataclasses.replace(j, sensitivity_by_type=None) for j in typed.jobs)
    return RoundInstance(f"one-type-{seed}", cluster, jobs, "server")


def test_bound_at_or_above_the_optimum_on_the_round_that_broke_it() -> None:
    inst = one_type(179)
    best = brute_force(inst, select_runnable(inst))
    assert best is not None and best.total_throughput == pytest.approx(3.91)
    got = make_mechanism("opt").allocate(inst)
    assert got.upper_bound is not None
    assert got.upper_bound >= 3.91 - ABS_TOL  # was 3.89


def test_bound_never_below_the_brute_force_optimum() -> None:
    checked = 0
    for seed in range(101, 200, 2):  # odd seeds: mixed shapes, floors depend on the split
        inst = one_type(seed)
        best = brute_force(inst, select_runnable(inst))
        got = make_mechanism("opt").allocate(inst)
        assert got.total_throughput <= (got.upper_bound or float("inf")) + ABS_TOL
        if best is not None and got.upper_bound is not None:
            assert got.upper_bound >= best.total_throughput - ABS_TOL, seed
            checked += 1
    assert checked >= 25, checked  # most rounds have a fair allocation of the whole runnable set


def test_opt_exact_keeps_opts_better_answer_over_another_set() -> None:
    """Tiny 3-type round 194: ``opt`` schedules another set than the runnable one (1.865);
    ``opt-exact`` attached the runnable set's bound (1.712) to it, failed its own check
    and fell back to TUNE's 0.2."""
    inst = tiny_round(194)
    ids = {j.id for j in select_runnable(inst)}
    mine = make_mechanism("opt").allocate(inst)
    assert {ja.id for ja in mine.jobs} != ids  # the case under test
    exact = make_mechanism("opt-exact", MechanismOptions(time_limit_s=20)).allocate(inst)
    assert exact.total_throughput >= mine.total_throughput - ABS_TOL
    assert exact.total_throughput == pytest.approx(1.865)
    assert exact.upper_bound is None
    assert check_allocation(inst, exact, fair_share=True) == []


def test_scip_without_a_bound_reports_none_not_its_infinity() -> None:
    """SCIP stopped at 0.01 s reads its infinity (1e20) as the bound: that is no bound."""
    from synergy_opt.io import load_instance
    from tests.conftest import INSTANCES

    inst = load_instance(INSTANCES / "mem-scarce-32gpu.json")
    got = make_mechanism(
        "opt-exact", MechanismOptions(solver="ortools", time_limit_s=0.01)
    ).allocate(inst)
    assert got.upper_bound is None or got.upper_bound < 1e6
    assert check_allocation(inst, got, fair_share=True) == []
