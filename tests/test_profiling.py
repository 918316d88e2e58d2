"""Optimistic profiling: the CPU-axis search, the cache model, replay and the report.

The search is tested on crafted curves (flat, linear, saturating, noisy, failing points)
and on random non-decreasing curves; the cache model at its limits and against the shipped
matrices it was calibrated on; the report against docs/formats.md's ``sensitivity`` object.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synergy_opt.io import dumps, matrix_from_dict
from synergy_opt.profiles import shipped_profiles
from synergy_opt.profiling import (
    SHIPPED_CACHE_DEFAULTS,
    CacheModel,
    MeasurementError,
    NoPointMeasured,
    ProfilingError,
    ReplayBackend,
    build_matrix,
    matrix_error,
    profile_cpu_axis,
    profile_job,
    profile_model,
    report_to_dict,
    scale_matrix,
    shipped_cache_model,
    step_fill,
)
from synergy_opt.types import ThroughputMatrix

ABS_TOL = REL_TOL = 1e-6
N = 24  # the paper's server: every core count 1..24


def knee_of(curve: dict[int, float], threshold: float) -> int:
    """The fewest cores within ``threshold`` of the best (reference implementation)."""
    best = max(curve.values())
    return min(c for c, w in curve.items() if w >= best / (1 + threshold))


def assert_never_over(prof_curve: tuple[float, ...], truth: list[float]) -> None:
    for c, (p, t) in enumerate(zip(prof_curve, truth, strict=True), start=1):
        assert p <= t + ABS_TOL, f"{c} cores: profile promises {p}, truth is {t}"


# --------------------------------------------------------------------------- search


def test_flat_curve_needs_only_the_anchors() -> None:
    calls: list[int] = []

    def measure(c: int) -> float:
        calls.append(c)
        return 5.0

    p = profile_cpu_axis(measure, N, fair_cpus=3)
    assert calls == [24, 1, 3]
    assert p.curve == (5.0,) * N
    assert p.saturation_cpus == 1
    assert p.points_measured == 3 and p.points_failed == 0


def test_linear_curve_finds_knee_and_never_over_estimates() -> None:
    truth = [float(c) for c in range(1, N + 1)]
    p = profile_cpu_axis(lambda c: float(c), N, threshold=0.1, fair_cpus=3)
    assert p.points_measured <= 8
    # 24 / 1.1 = 21.8: the knee is 22, pinned exactly (21 measured and missing the target).
    assert p.saturation_cpus == 22
    assert {21, 22} <= set(p.measured())
    assert_never_over(p.curve, truth)
    for c, w in p.measured().items():
        assert p.at(c) == pytest.approx(w, rel=REL_TOL, abs=ABS_TOL)


@pytest.mark.parametrize("knee", [2, 5, 9, 12, 17, 24])
def test_saturating_curve_knee_is_exact(knee: int) -> None:
    truth = [min(c, knee) * 0.5 for c in range(1, N + 1)]
    p = profile_cpu_axis(lambda c: truth[c - 1], N, threshold=0.1, fair_cpus=3)
    assert p.points_measured <= 8
    curve = dict(enumerate(truth, start=1))
    assert p.saturation_cpus == knee_of(curve, 0.1)
    # TUNE's demand: the cheapest point reaching the best speed is measured exactly.
    assert p.at(knee) == pytest.approx(truth[knee - 1], rel=REL_TOL, abs=ABS_TOL)
    assert_never_over(p.curve, truth)


def test_descends_into_lower_half_when_upper_half_gains_little() -> None:
    # Saturated at 4: 24 and 13 both reach the target, so the search must go down, not up.
    order: list[int] = []

    def measure(c: int) -> float:
        order.append(c)
        return float(min(c, 4))

    profile_cpu_axis(measure, N, fair_cpus=None, max_points=8)
    assert order[:2] == [24, 1]
    assert order[2] == 12  # the middle of [1, 24]
    assert all(c < 12 for c in order[3:])


def test_profiles_upper_half_when_it_still_gains() -> None:
    order: list[int] = []

    def measure(c: int) -> float:
        order.append(c)
        return float(min(c, 20))

    profile_cpu_axis(measure, N, fair_cpus=None, max_points=8)
    assert order[2] == 12
    assert order[3] > 12  # 12 misses the target: more of the upper half


def test_noisy_curve_stays_within_budget_and_monotone() -> None:
    rng = np.random.default_rng(7)
    noise = 1 + rng.uniform(-0.03, 0.03, N)
    clean = [min(c, 8) / 8 for c in range(1, N + 1)]
    noisy = [w * e for w, e in zip(clean, noise, strict=True)]
    p = profile_cpu_axis(lambda c: noisy[c - 1], N, threshold=0.1, fair_cpus=3)
    assert p.points_measured <= 8
    assert all(b >= a for a, b in zip(p.curve, p.curve[1:], strict=False))
    measured = p.measured()
    # Each filled value is one that was really measured at no more cores.
    for c in range(1, N + 1):
        if p.at(c) > 0:
            assert any(
                cc <= c and w == pytest.approx(p.at(c), rel=REL_TOL, abs=ABS_TOL)
                for cc, w in measured.items()
            )
    # Noise of +-3% cannot move the knee further than the threshold allows.
    assert clean[p.saturation_cpus - 1] >= 1 / (1.1 * 1.03 / 0.97) - ABS_TOL


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    steps=st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=N, max_size=N),
    threshold=st.sampled_from([0.05, 0.1, 0.2]),
    budget=st.integers(3, 10),
    fair=st.one_of(st.none(), st.integers(1, N)),
)
def test_random_monotone_curves(
    steps: list[float], threshold: float, budget: int, fair: int | None
) -> None:
    truth = list(np.cumsum(steps) + 0.1)
    calls: list[int] = []

    def measure(c: int) -> float:
        calls.append(c)
        return float(truth[c - 1])

    p = profile_cpu_axis(measure, N, threshold=threshold, fair_cpus=fair, max_points=budget)
    assert p.points_measured == len(calls) <= budget
    assert len(set(calls)) == len(calls)  # never measures a point twice
    assert {24, 1} <= set(calls)
    if fair is not None and budget >= 3:
        assert fair in calls
    assert_never_over(p.curve, truth)
    for c, w in p.measured().items():
        assert p.at(c) == pytest.approx(w, rel=REL_TOL, abs=ABS_TOL)
    s = p.saturation_cpus
    assert truth[s - 1] >= max(p.measured().values()) / (1 + threshold) - ABS_TOL


def test_unlimited_budget_resolves_every_interval() -> None:
    truth = [math.sqrt(c) for c in range(1, N + 1)]
    p = profile_cpu_axis(lambda c: truth[c - 1], N, threshold=0.1, max_points=N)
    ms = sorted(p.measured())
    for a, b in zip(ms, ms[1:], strict=False):
        assert b - a == 1 or truth[b - 1] / truth[a - 1] - 1 < 0.1


def test_failed_points_are_reported_and_bisected_around() -> None:
    def measure(c: int) -> float:
        if c in (13, 24):  # the full count and the first bisection point both fail
            raise MeasurementError(f"boom at {c}")
        return float(min(c, 6))

    p = profile_cpu_axis(measure, N, fair_cpus=3)
    failed = {m.cpus: m.error for m in p.measurements if not m.ok}
    assert failed == {24: "boom at 24", 13: "boom at 13"}
    assert p.points_failed == 2 and p.points_measured <= 8
    # The search climbed below the failures, found the plateau and its knee anyway.
    assert p.saturation_cpus == 6
    assert p.at(6) == 6.0 and p.at(24) == 6.0 and p.at(5) <= 5.0


def test_failing_top_does_not_waste_the_budget_climbing_a_plateau() -> None:
    def measure(c: int) -> float:
        if c == 24:
            raise MeasurementError("boom")
        return float(min(c, 6))

    p = profile_cpu_axis(measure, N, fair_cpus=3)
    assert p.saturation_cpus == 6 and p.at(6) == 6.0
    assert sum(1 for m in p.measurements if m.ok and m.cpus > 13) <= 1


def test_all_points_failing_raises_one_error_naming_them() -> None:
    def measure(c: int) -> float:
        raise MeasurementError("exit status 3")

    with pytest.raises(NoPointMeasured, match="24 cpus: exit status 3"):
        profile_cpu_axis(measure, N)


@pytest.mark.parametrize("value", [-1.0, math.nan, math.inf])
def test_bad_measured_value_fails_that_point_only(value: float) -> None:
    p = profile_cpu_axis(lambda c: value if c == 24 else 1.0, N)
    assert not p.measurements[0].ok and "finite number" in (p.measurements[0].error or "")
    assert p.at(24) == 1.0


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_cpus": 0}, "max_cpus"),
        ({"threshold": 0.0}, "threshold"),
        ({"threshold": math.nan}, "threshold"),
        ({"max_points": 1}, "max_points"),
    ],
)
def test_bad_parameters(kwargs: dict[str, float], field: str) -> None:
    args = {"max_cpus": N, **kwargs}
    max_cpus = args.pop("max_cpus")
    with pytest.raises(ProfilingError, match=field):
        profile_cpu_axis(lambda c: 1.0, max_cpus, **args)  # type: ignore[arg-type]


def test_step_fill_is_running_max_and_zero_below() -> None:
    assert step_fill({3: 2.0, 5: 1.5, 7: 4.0}, 8) == (0, 0, 2.0, 2.0, 2.0, 2.0, 4.0, 4.0)


# --------------------------------------------------------------------------- memory model


def test_cache_model_limits() -> None:
    m = CacheModel(dataset_gb=100.0, storage_mbps=50.0, mb_per_sample=0.5)
    assert m.hit_fraction(0) == 0.0 and m.hit_fraction(100) == 1.0 and m.hit_fraction(500) == 1.0
    assert m.storage_bound(0) == pytest.approx(100.0, rel=REL_TOL)  # B / s, nothing cached
    assert m.storage_bound(50) == pytest.approx(200.0, rel=REL_TOL)  # half the misses
    assert m.storage_bound(100) == math.inf
    assert m.throughput(30.0, 0) == 30.0  # CPU-bound below the storage rate
    assert m.throughput(1e6, 50) == pytest.approx(200.0, rel=REL_TOL)  # storage-bound
    assert m.throughput(1e6, 100) == 1e6  # all cached: only the CPUs limit
    ws = [m.throughput(150.0, g) for g in np.linspace(0, 120, 25)]
    assert all(b >= a for a, b in zip(ws, ws[1:], strict=False))


def test_footprint_leaves_small_memory_off_the_axis() -> None:
    m = CacheModel(100.0, 50.0, 0.5, min_mem_gb=32.0)
    assert m.throughput(10.0, 20.0) == 0.0
    assert m.usable([20.83, 62.5, 125.0]) == (62.5, 125.0)


def test_scaled_model_matches_the_per_gpu_convention() -> None:
    m = CacheModel(312.5, 187.5, 156.25, 32.0)
    for g in (2, 4, 8):
        s = m.scaled(g)
        for mem in (40.0, 62.5, 125.0, 187.5, 250.0):
            assert s.storage_bound(g * mem) == pytest.approx(m.storage_bound(mem), rel=REL_TOL)


@pytest.mark.parametrize("field", ["dataset_gb", "storage_mbps", "mb_per_sample"])
def test_cache_model_rejects_bad_values(field: str) -> None:
    args = {"dataset_gb": 1.0, "storage_mbps": 1.0, "mb_per_sample": 1.0, field: 0.0}
    with pytest.raises(ValueError, match=field):
        CacheModel(**args)


def _exact_cpu_matrix(name: str) -> tuple[ThroughputMatrix, ThroughputMatrix]:
    prof = shipped_profiles().get(name)
    truth = prof.matrix(1)
    full = truth.mem_gb[-1]
    cpu = profile_cpu_axis(lambda c: truth.lookup(c, full), N, max_points=N, threshold=1e-9)
    return truth, build_matrix(cpu, truth.mem_gb, shipped_cache_model(prof))


def test_m5_memory_sensitivity_is_reproduced_exactly() -> None:
    truth, w = _exact_cpu_matrix("m5")
    for c in range(1, N + 1):
        for mem in (62.5, 125.0, 187.5, 250.0):
            assert w.lookup(c, mem) == pytest.approx(truth.lookup(c, mem), abs=1e-3)
    assert w.lookup(6, 62.5) < w.lookup(6, 125.0) < w.lookup(6, 187.5)


@pytest.mark.parametrize("name", shipped_profiles().names())
def test_memory_model_residual_on_every_shipped_model(name: str) -> None:
    truth, w = _exact_cpu_matrix(name)
    for c in range(1, N + 1):
        for mem in truth.mem_gb:
            d = w.lookup(c, mem) - truth.lookup(c, mem)
            assert d <= 1e-3, f"{name} ({c}, {mem}): the model invents {d}"
            if mem >= 62.5:
                assert abs(d) <= 1e-3, f"{name} ({c}, {mem}): off by {d}"
            else:  # the 20.83 GB column: 0.1 in the shipped data, 0 below the footprint
                assert abs(d) <= 0.1 + ABS_TOL


def test_every_shipped_model_has_cache_defaults() -> None:
    assert set(SHIPPED_CACHE_DEFAULTS) == set(shipped_profiles().names())


# --------------------------------------------------------------------------- replay + report


@pytest.mark.parametrize("name", shipped_profiles().names())
def test_replay_profile_of_every_shipped_model(name: str) -> None:
    rep = profile_model(shipped_profiles().get(name))
    assert rep.points_measured <= 8  # the paper's claim: 8 CPU points instead of 24
    assert rep.grid_points == 24 * 5
    assert rep.error is not None and rep.error.over_estimates == 0
    truth = shipped_profiles().get(name).matrix(1)
    # The fair-share anchor is measured, so the fair-share floor is exact.
    assert rep.matrix.lookup(3, 62.5) == pytest.approx(truth.lookup(3, 62.5), abs=1e-9)
    # TUNE's demand point (cheapest best point) is the true one.
    assert rep.matrix.max_throughput == pytest.approx(truth.max_throughput, abs=1e-9)


def test_replay_refines_by_floor_lookup() -> None:
    truth = shipped_profiles().get("res18").matrix(1)
    r = ReplayBackend(truth)
    assert [r(c) for c in (6, 7, 8, 9)] == [1.75, 1.75, 1.75, 2.4]


def test_report_shape_and_sensitivity_parses() -> None:
    rep = profile_model(shipped_profiles().get("res18"), minutes_per_point=1.0)
    d = report_to_dict(rep)
    for key in ("points_measured", "grid_points", "profiling_minutes", "full_grid_minutes"):
        assert key in d
    assert d["profiling_minutes"] == d["points_measured"] * 1.0
    assert d["full_grid_minutes"] == 120.0
    assert d["reduction_factor"] == pytest.approx(120 / d["points_measured"], rel=REL_TOL)
    assert set(d["sensitivity"]) == {"cpus", "mem_gb", "throughput"}
    w = matrix_from_dict(d["sensitivity"], "sensitivity")
    assert w == rep.matrix
    assert "seconds" not in d["measurements"][0]  # replay output is deterministic
    assert dumps(d) == dumps(report_to_dict(profile_model(shipped_profiles().get("res18"))))


def test_matrix_rows_are_compressed_without_changing_the_function() -> None:
    rep = profile_model(shipped_profiles().get("alexnet"))
    w = rep.matrix
    assert len(w.cpus) < N
    for c in range(1, N + 1):
        for mem in w.mem_gb:
            assert w.lookup(c, mem) == rep.cache.throughput(rep.cpu.at(c), mem)  # type: ignore[union-attr]


def test_without_cache_model_only_full_memory_is_known() -> None:
    truth = shipped_profiles().get("m5").matrix(1)
    rep = profile_job(ReplayBackend(truth), max_cpus=N, mem_gb=truth.mem_gb, cache=None)
    assert rep.matrix.mem_gb == (250.0,)
    assert rep.matrix.lookup(24, 187.5) == 0.0  # nothing invented below what was profiled
    assert rep.grid_points == N * 5


def test_scaled_profile_matches_the_shipped_convention() -> None:
    prof = shipped_profiles().get("m5")
    rep = profile_model(prof, max_points=N, threshold=1e-9)  # every core: exact CPU axis
    for g in (2, 4):
        w = scale_matrix(rep.matrix, g)
        truth = prof.matrix(g)
        for c in range(1, N * g + 1):
            for mem in truth.mem_gb[1:]:
                assert w.lookup(c, mem) == pytest.approx(truth.lookup(c, mem), abs=1e-3)


def test_matrix_error_counts_over_estimates() -> None:
    truth = shipped_profiles().get("gnmt").matrix(1)
    over = scale_matrix(truth, 1)
    e = matrix_error(over, lambda c, m: 0.5, range(1, 4), (62.5,))
    assert e.points == 3 and e.over_estimates == 3 and e.max_abs == pytest.approx(0.5)
