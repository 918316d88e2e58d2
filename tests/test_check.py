"""The independent checker catches every kind of broken allocation."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from synergy_opt.check import KINDS, RULES, check_allocation, fair_share_floor
from synergy_opt.io import load_instance
from synergy_opt.mechanisms import make_mechanism
from synergy_opt.types import Allocation, JobAllocation, PlacementPart
from tests.conftest import INSTANCES

INST = load_instance(INSTANCES / "tiny" / "one-server-two-jobs.json")
GOOD = make_mechanism("tune").allocate(INST)


def _job(alloc: Allocation, k: int, **changes: object) -> Allocation:
    jobs = list(alloc.jobs)
    jobs[k] = dataclasses.replace(jobs[k], **changes)  # type: ignore[arg-type]
    return dataclasses.replace(alloc, jobs=tuple(jobs))


def _kinds(alloc: Allocation, fair: bool = False) -> set[str]:
    return {v.kind for v in check_allocation(INST, alloc, fair_share=fair)}


def test_good_allocation_is_clean() -> None:
    assert check_allocation(INST, GOOD, fair_share=True) == []


BREAKS: list[tuple[str, Callable[[Allocation], Allocation]]] = [
    (
        "missing-job",
        lambda a: dataclasses.replace(a, jobs=a.jobs[:1], total_throughput=a.jobs[0].throughput),
    ),
    ("unknown-job", lambda a: dataclasses.replace(a, unscheduled=("ghost",))),
    ("duplicate-job", lambda a: dataclasses.replace(a, unscheduled=(a.jobs[0].id,))),
    ("gpu-demand", lambda a: _job(a, 0, gpus=2)),
    (
        "capacity",  # 5 + 4 cores > 6 on s0
        lambda a: _job(a, 1, cpus=4, placement=(PlacementPart("s0", 1, 4, 50.0),)),
    ),
    ("unknown-server", lambda a: _job(a, 1, placement=(PlacementPart("s9", 1, 1, 50.0),))),
    (
        "part",
        lambda a: _job(
            a,
            1,
            gpus=1,
            placement=(PlacementPart("s0", 0, 1, 50.0), PlacementPart("s0", 1, 0, 0.0)),
        ),
    ),
    ("sum", lambda a: _job(a, 0, cpus=4)),
    ("throughput", lambda a: _job(a, 0, throughput=2.0)),
    ("fair-share-report", lambda a: _job(a, 0, fair_share_throughput=0.5)),
    ("total", lambda a: dataclasses.replace(a, total_throughput=3.5)),
    ("fragmented", lambda a: dataclasses.replace(a, fragmented_jobs=1)),
    ("upper-bound", lambda a: dataclasses.replace(a, upper_bound=2.0)),
    ("format", lambda a: dataclasses.replace(a, instance="other")),
]


#: Kinds broken by their own tests below (they need another instance or the fair_share flag).
BROKEN_ELSEWHERE = frozenset({"fair-share", "gpu-type"})


def test_every_kind_is_broken_by_a_test() -> None:
    """A rule added to RULES without a test breaking it fails here."""
    assert len(set(KINDS)) == len(RULES)
    assert {k for k, _ in BREAKS} | BROKEN_ELSEWHERE == set(KINDS)


@pytest.mark.parametrize(("kind", "brk"), BREAKS, ids=[b[0] for b in BREAKS])
def test_each_break_is_reported(kind: str, brk: Callable[[Allocation], Allocation]) -> None:
    assert kind in _kinds(brk(GOOD))


def test_fair_share_only_when_asked() -> None:
    # a at 1 core: 0.4 < its fair share 1.0
    low = _job(GOOD, 0, cpus=1, placement=(PlacementPart("s0", 1, 1, 50.0),), throughput=0.4)
    low = dataclasses.replace(low, total_throughput=1.4)
    assert _kinds(low) == set()
    assert _kinds(low, fair=True) == {"fair-share"}


def test_fair_share_floor_includes_penalty_only_for_forced_splits() -> None:
    inst = load_instance(INSTANCES / "multi-gpu-128gpu.json")
    job = inst.jobs[0]
    fair_tp, required = fair_share_floor(inst, job)
    assert fair_tp == pytest.approx(inst.fair_share_throughput(job))
    assert required == fair_tp  # 8-GPU servers: every job can be consolidated


def test_violation_str_is_one_line() -> None:
    v = check_allocation(INST, _job(GOOD, 0, throughput=2.0))[0]
    assert "\n" not in str(v) and str(v).startswith("throughput: a: ")


def test_gpu_type_violation() -> None:
    from synergy_opt.types import Cluster, RoundInstance, Server

    cl = Cluster((Server("s0", 2, 6, 100.0, "a"), Server("s1", 2, 6, 100.0, "b")))
    j0 = dataclasses.replace(INST.jobs[0], gpu_types=("a",))
    inst = RoundInstance("t", cl, (j0,))
    ja = JobAllocation("a", 1, 3, 50.0, (PlacementPart("s1", 1, 3, 50.0),), 1.0, 1.0)
    alloc = Allocation("t", "manual", (ja,), (), 1.0, 0)
    assert {v.kind for v in check_allocation(inst, alloc)} == {"gpu-type"}
