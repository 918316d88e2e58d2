"""PROPORTIONAL, GREEDY and TUNE: hand-worked optima, shipped instances, properties."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings

from synergy_opt.check import check_allocation
from synergy_opt.io import allocation_to_dict, dumps, load_instance
from synergy_opt.mechanisms import make_mechanism, mechanism_names
from synergy_opt.mechanisms.packing import select_runnable, split_cpus
from synergy_opt.mechanisms.tune import _pointwise_min_parts
from synergy_opt.profiles import shipped_profiles
from synergy_opt.types import Cluster, Job, RoundInstance, Server
from tests.conftest import all_instances, tiny_instances
from tests.strategies import round_instances

ABS_TOL = REL_TOL = 1e-6
#: Every registered mechanism that needs no solver, from the registry's capability flags.
HEURISTICS = mechanism_names(uses_solver=False)
#: Mechanisms whose every scheduled job must keep its fair-share throughput.
FAIR = mechanism_names(keeps_fair_share=True)
#: The hand-worked tiny rounds state totals for these heuristics.
HAND_WORKED = ("proportional", "greedy", "tune")


def test_registry_lists_heuristics() -> None:
    assert set(HAND_WORKED) <= set(HEURISTICS)
    assert {"proportional", "tune", "tune-sorted", "opt", "opt-exact"} <= set(FAIR)
    assert "greedy" not in FAIR and "opt" not in HEURISTICS
    with pytest.raises(KeyError, match="unknown mechanism 'nope'"):
        make_mechanism("nope")


@pytest.mark.parametrize("path", tiny_instances(), ids=lambda p: p.stem)
@pytest.mark.parametrize("mech", HAND_WORKED)
def test_tiny_hand_worked(path: Path, mech: str) -> None:
    inst = load_instance(path)
    expected = json.loads(path.read_text())["expected"]
    alloc = make_mechanism(mech).allocate(inst)
    assert alloc.total_throughput == pytest.approx(
        expected["total_throughput"][mech], rel=REL_TOL, abs=ABS_TOL
    )
    assert check_allocation(inst, alloc, fair_share=mech in FAIR) == []
    # A heuristic never beats the exact optimum worked out by hand.
    assert alloc.total_throughput <= expected["exact_optimum"] + ABS_TOL


def test_tune_reaches_unique_optimum_allocation() -> None:
    for path in tiny_instances():
        expected = json.loads(path.read_text())["expected"]
        if "allocation" not in expected:
            continue
        alloc = make_mechanism("tune").allocate(load_instance(path))
        got = {j.id: {"cpus": j.cpus, "mem_gb": j.mem_gb} for j in alloc.jobs}
        assert got == expected["allocation"], path.name


@pytest.mark.parametrize("path", all_instances(), ids=lambda p: p.stem)
@pytest.mark.parametrize("mech", HEURISTICS)
def test_shipped_instances_pass_checker(path: Path, mech: str) -> None:
    inst = load_instance(path)
    alloc = make_mechanism(mech).allocate(inst)
    assert check_allocation(inst, alloc, fair_share=mech in FAIR) == []


@pytest.mark.parametrize("path", all_instances(), ids=lambda p: p.stem)
def test_tune_never_below_proportional(path: Path) -> None:
    inst = load_instance(path)
    prop = make_mechanism("proportional").allocate(inst)
    tune = make_mechanism("tune").allocate(inst)
    assert tune.total_throughput >= prop.total_throughput - ABS_TOL
    # On homogeneous clusters TUNE schedules the same runnable set as the baseline.
    assert set(tune.unscheduled) == set(prop.unscheduled)


def test_runnable_set_passes_over_big_jobs() -> None:
    lib = shipped_profiles()
    c = Cluster((Server("s0", 8, 24, 500.0),))
    jobs = (
        Job("a", 4, lib.get("res18").matrix(4)),
        Job("b", 8, lib.get("gnmt").matrix(8)),  # no longer fits: passed over
        Job("c", 2, lib.get("gnmt").matrix(2)),
        Job("d", 2, lib.get("m5").matrix(2)),
        Job("e", 1, lib.get("m5").matrix(1)),  # GPUs exhausted
    )
    inst = RoundInstance("r", c, jobs)
    assert [j.id for j in select_runnable(inst)] == ["a", "c", "d"]


def test_greedy_skips_and_idles_gpus() -> None:
    lib = shipped_profiles()
    # Three alexnets want 12 cores each; a 24-core server fits two at their best, and
    # GREEDY then skips the third although a GPU is free.
    c = Cluster((Server("s0", 3, 24, 500.0),))
    inst = RoundInstance(
        "g", c, tuple(Job(f"j{k}", 1, lib.get("alexnet").matrix(1)) for k in range(3))
    )
    greedy = make_mechanism("greedy").allocate(inst)
    assert greedy.unscheduled == ("j2",)
    tune = make_mechanism("tune").allocate(inst)
    assert tune.unscheduled == ()
    assert check_allocation(inst, tune, fair_share=True) == []


def test_split_cpus_largest_remainder() -> None:
    """Floors first, then one more core to the largest remainders, ties by position."""
    assert split_cpus(10, [1, 1, 1]) == [4, 3, 3]  # 3.33 each: the tie goes to the first
    # 3.5, 1.75, 1.75: floors 3, 1, 1; the two spare cores go to the 0.75 remainders, not 0.5.
    assert split_cpus(7, [4, 2, 2]) == [3, 2, 2]
    assert split_cpus(13, [3, 5]) == [5, 8]  # 4.875, 8.125
    assert split_cpus(5, [1, 1, 1, 1]) == [2, 1, 1, 1]
    assert split_cpus(0, [2, 3]) == [0, 0]
    assert split_cpus(8, [0, 1]) == [0, 8]


def test_pointwise_min_parts_never_grows_a_part() -> None:
    old = [(0, 3, 5, 40.0), (1, 3, 4, 40.0), (2, 1, 1, 10.0)]
    for cpus in range(0, 11):
        for mem in (0.0, 30.0, 45.5, 90.0):
            new = _pointwise_min_parts(old, cpus, mem)
            assert sum(p[2] for p in new) == cpus
            assert sum(p[3] for p in new) == pytest.approx(mem)
            assert all(n[2] <= o[2] and n[3] <= o[3] + 1e-9 for n, o in zip(new, old, strict=True))


@given(round_instances())
@settings(max_examples=150)
def test_property_heuristics_pass_checker(inst: RoundInstance) -> None:
    for mech in HEURISTICS:
        alloc = make_mechanism(mech).allocate(inst)
        assert check_allocation(inst, alloc, fair_share=mech in FAIR) == [], mech


@given(round_instances(homogeneous=True, penalties=False))
@settings(max_examples=100)
def test_property_tune_at_least_proportional_per_job(inst: RoundInstance) -> None:
    prop = make_mechanism("proportional").allocate(inst)
    tune = make_mechanism("tune").allocate(inst)
    by_id = {j.id: j for j in prop.jobs}
    for j in tune.jobs:
        if j.id in by_id:
            assert j.throughput >= by_id[j.id].throughput - ABS_TOL


@given(round_instances())
@settings(max_examples=60)
def test_property_deterministic_bytes(inst: RoundInstance) -> None:
    for mech in HEURISTICS:
        a = allocation_to_dict(make_mechanism(mech).allocate(inst))
        b = allocation_to_dict(make_mechanism(mech).allocate(inst))
        a["solve_seconds"] = b["solve_seconds"] = 0
        assert dumps(a) == dumps(b)


def test_tune_inorder_is_a_former_name_of_tune() -> None:
    # Old sweep specs and scripts name the simulator's TUNE "tune-inorder": still accepted,
    # same allocation, but no longer listed as a mechanism of its own.
    inst = load_instance(Path(__file__).parent.parent / "instances" / "multi-gpu-128gpu.json")
    old = make_mechanism("tune-inorder").allocate(inst)
    new = make_mechanism("tune").allocate(inst)
    assert "tune-inorder" not in mechanism_names()
    assert old.jobs == new.jobs and old.unscheduled == new.unscheduled


def test_tune_places_larger_gpu_demands_first_then_priority() -> None:
    # s0 has 8 GPUs, s1 4.  In priority order the 1-GPU job would take the tighter s1 (best
    # fit) and push the 4-GPU job to s0; TUNE places the 4-GPU job first, so it fills s1
    # exactly and the 1-GPU job goes to s0.  Equal demands keep their priority order.
    p = shipped_profiles().get("res18")
    servers = (Server("s0", 8, 24, 500.0), Server("s1", 4, 12, 250.0))
    jobs = (
        Job("a", 1, p.matrix(1), model="res18"),
        Job("big", 4, p.matrix(4), model="res18"),
        Job("b", 1, p.matrix(1), model="res18"),
    )
    inst = RoundInstance("order", Cluster(servers), jobs)
    for name in ("tune", "tune-sorted"):
        alloc = make_mechanism(name).allocate(inst)
        where = {ja.id: [pp.server for pp in ja.placement] for ja in alloc.jobs}
        assert where == {"big": ["s1"], "a": ["s0"], "b": ["s0"]}, name
        assert check_allocation(inst, alloc, fair_share=True) == []
