"""Policy sort keys: each orders a hand-made queue the way its paper says."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from synergy_opt.policies import (
    finish_time_fairness,
    get_policy,
    is_static,
    policy_names,
    register,
)

ABS_TOL = REL_TOL = 1e-6


@dataclass
class FakeJob:
    index: int
    arrival_s: float = 0.0
    gpus: int = 1
    duration_s: float = 3600.0
    remaining_fair_s: float = 3600.0
    attained_gpu_s: float = 0.0
    attained_dominant_s: float = 0.0


def order(policy: str, jobs: list[FakeJob], now_s: float = 0.0) -> list[int]:
    key = get_policy(policy)
    return [j.index for j in sorted(jobs, key=lambda j: key(j, now_s))]


def test_registry_lists_the_paper_policies() -> None:
    assert {"fifo", "srtf", "las", "ftf", "drf"} <= set(policy_names())
    with pytest.raises(KeyError, match="known: "):
        get_policy("lottery")


def test_registering_a_name_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="twice"):
        register("fifo")(lambda job, now: (0.0,))


def test_fifo_orders_by_arrival_then_index() -> None:
    jobs = [FakeJob(0, arrival_s=50), FakeJob(1, arrival_s=10), FakeJob(2, arrival_s=10)]
    assert order("fifo", jobs) == [1, 2, 0]
    assert is_static(get_policy("fifo")) and not is_static(get_policy("srtf"))


def test_srtf_orders_by_remaining_fair_share_time() -> None:
    jobs = [
        FakeJob(0, remaining_fair_s=900),
        FakeJob(1, remaining_fair_s=100),
        FakeJob(2, remaining_fair_s=500, arrival_s=-5),
    ]
    assert order("srtf", jobs) == [1, 2, 0]


def test_las_counts_gpu_seconds_not_wall_seconds() -> None:
    # A 4-GPU job that ran 1000 s has attained 4000 GPU-s: more than a 1-GPU job's 3000.
    jobs = [
        FakeJob(0, gpus=4, attained_gpu_s=4000),
        FakeJob(1, gpus=1, attained_gpu_s=3000),
        FakeJob(2, attained_gpu_s=0),
    ]
    assert order("las", jobs) == [2, 1, 0]


def test_ftf_serves_the_most_unfairly_treated_job_first() -> None:
    # rho = (now - arrival + remaining) / duration.
    a = FakeJob(0, arrival_s=0, duration_s=1000, remaining_fair_s=1000)  # waited 1000: rho 2
    b = FakeJob(1, arrival_s=500, duration_s=100, remaining_fair_s=100)  # waited 500: rho 6
    c = FakeJob(2, arrival_s=900, duration_s=1000, remaining_fair_s=500)  # rho 0.6
    assert finish_time_fairness(a, 1000) == pytest.approx(2.0, rel=REL_TOL, abs=ABS_TOL)
    assert finish_time_fairness(b, 1000) == pytest.approx(6.0, rel=REL_TOL, abs=ABS_TOL)
    assert order("ftf", [a, b, c], now_s=1000) == [1, 0, 2]


def test_drf_orders_by_attained_dominant_share() -> None:
    jobs = [FakeJob(0, attained_dominant_s=30.0), FakeJob(1, attained_dominant_s=2.0)]
    assert order("drf", jobs) == [1, 0]
