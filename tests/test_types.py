"""Data types: validation, floor look-up, fair share."""

from __future__ import annotations

import pytest

from synergy_opt.types import (
    Cluster,
    Job,
    PlacementPart,
    RoundInstance,
    Server,
    ThroughputMatrix,
    ValidationError,
    build_allocation,
)

W = ThroughputMatrix.from_lists(
    [1, 2, 3, 6, 9],
    [31.25, 62.5, 125],
    [
        [0.3, 0.37, 0.37],
        [0.6, 0.72, 0.72],
        [0.9, 1.0, 1.0],
        [1.5, 1.75, 1.8],
        [2.0, 2.4, 2.4],
    ],
)


@pytest.mark.parametrize(
    ("c", "m", "expected"),
    [
        (3, 62.5, 1.0),  # exact grid point
        (5, 100.0, 1.0),  # floors to (3, 62.5)
        (6, 125.0, 1.8),
        (100, 1000.0, 2.4),  # beyond the grid: the last point
        (0, 62.5, 0.0),  # below the smallest core count
        (3, 31.0, 0.0),  # below the smallest memory
        (1, 31.25, 0.3),
    ],
)
def test_floor_lookup(c: int, m: float, expected: float) -> None:
    assert W.lookup(c, m) == expected


def test_lookup_tolerates_float_sums() -> None:
    # 62.5 reached as a sum of parts that carries rounding error must still floor to 62.5.
    assert W.lookup(3, sum([62.5 / 3] * 3)) == 1.0


@pytest.mark.parametrize(
    ("cpus", "mem", "rows", "path"),
    [
        ([2, 1], [1.0], [[1], [1]], "cpus[1]"),
        ([1, 2], [2.0, 2.0], [[1, 1], [1, 1]], "mem_gb[1]"),
        ([0], [1.0], [[1]], "cpus[0]"),
        ([1], [-1.0], [[1]], "mem_gb[0]"),
        ([1, 2], [1.0], [[1]], "throughput"),
        ([1], [1.0, 2.0], [[1]], "throughput"),
        ([1], [1.0], [[-0.5]], "throughput[0][0]"),
        ([1], [1.0], [[float("nan")]], "throughput[0][0]"),
        ([1], [float("inf")], [[1]], "mem_gb[0]"),
    ],
)
def test_matrix_validation_names_the_field(cpus, mem, rows, path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValidationError) as e:
        ThroughputMatrix(tuple(cpus), tuple(mem), tuple(tuple(r) for r in rows))
    assert e.value.path == path


def test_fair_share_is_floor_of_gpu_proportional_cores() -> None:
    # 3 servers x (8 GPUs, 25 cores): 75/24 = 3.125 cores per GPU -> floor(3 * 3.125) = 9.
    c = Cluster(tuple(Server(f"s{i}", 8, 25, 500.0) for i in range(3)))
    assert c.fair_share(3) == (9, 187.5)
    assert c.fair_share(1) == (3, 62.5)


def test_instance_rejects_duplicates_and_oversized_jobs() -> None:
    c = Cluster((Server("s0", 2, 6, 100.0),))
    with pytest.raises(ValidationError, match="duplicate job id"):
        RoundInstance("x", c, (Job("a", 1, W), Job("a", 1, W)))
    with pytest.raises(ValidationError) as e:
        RoundInstance("x", c, (Job("a", 3, W),))
    assert e.value.path == "jobs[0].gpus"
    with pytest.raises(ValidationError, match="duplicate server name"):
        Cluster((Server("s0", 2, 6, 100.0), Server("s0", 2, 6, 100.0)))
    with pytest.raises(ValidationError, match="no GPU"):
        Cluster((Server("s0", 0, 6, 100.0),))


def test_job_validation() -> None:
    with pytest.raises(ValidationError, match="split_penalty"):
        Job("a", 1, W, split_penalty=0.0)
    with pytest.raises(ValidationError, match="gpus"):
        Job("a", 0, W)
    with pytest.raises(ValidationError, match="gpu_types"):
        Job("a", 1, W, gpu_types=())


def test_gpu_type_restriction_needs_enough_gpus() -> None:
    c = Cluster((Server("s0", 2, 6, 100.0, "a100"), Server("s1", 8, 24, 500.0, "v100")))
    with pytest.raises(ValidationError) as e:
        RoundInstance("x", c, (Job("a", 4, W, gpu_types=("a100",)),))
    assert e.value.path == "jobs[0].gpu_types"


def test_build_allocation_orders_and_counts() -> None:
    c = Cluster((Server("s0", 2, 6, 100.0), Server("s1", 2, 6, 100.0)))
    a, b = Job("a", 2, W, split_penalty=0.5), Job("b", 1, W)
    inst = RoundInstance("x", c, (a, b, Job("c", 1, W)))
    alloc = build_allocation(
        inst,
        "manual",
        {
            "b": [PlacementPart("s0", 1, 3, 62.5)],
            "a": [PlacementPart("s1", 1, 3, 31.25), PlacementPart("s0", 1, 3, 31.25)],
        },
    )
    assert [j.id for j in alloc.jobs] == ["a", "b"]
    assert alloc.unscheduled == ("c",)
    ja = alloc.jobs[0]
    assert [p.server for p in ja.placement] == ["s0", "s1"]  # server order, not insertion order
    assert ja.cpus == 6 and ja.mem_gb == 62.5
    assert ja.throughput == pytest.approx(1.75 * 0.5)  # split penalty applies
    assert alloc.fragmented_jobs == 1
    assert alloc.total_throughput == pytest.approx(1.75 * 0.5 + 1.0)
