"""Fewer parts for a packing's spread jobs by dropping parts (:mod:`.fewer_parts`).

Checked by :func:`assert_serves`, written apart from the module's max-flows: every job
placed with its GPUs, every part with at least one GPU, every spread job's cores and GB
drawn from its own parts, every server within its GPUs, cores and GB.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import pytest
from hypothesis import given, settings

from synergy_opt.formulations.packing_cp import PlanView, solve_packing, whole_counts
from synergy_opt.formulations.packing_data import (
    FreeGroup,
    PackingData,
    SpreadJob,
    WholeGroup,
    units_up,
)
from synergy_opt.mechanisms.opt.fewer_parts import fewer_parts
from synergy_opt.types import Job, RoundInstance, ThroughputMatrix
from tests.test_packing import packing_cases

#: Throughput-matrix stand-in: the packing never reads throughputs.
_W = ThroughputMatrix((1,), (1.0,), ((1.0,),))
#: One GB over what the packing's units count, per spread job (units round demands up).
_GB_SLACK: float = 1e-6


def _job(jid: str, gpus: int) -> Job:
    return Job(jid, gpus, _W)


def assert_serves(
    data: PackingData,
    plan: PlanView,
    resources: Mapping[str, tuple[tuple[int, int, float], ...]],
) -> None:
    """``plan`` with ``resources`` is a packing of ``data`` (module docstring)."""
    n = len(data.servers)
    gpus, cores, mem = [0] * n, [0] * n, [0.0] * n
    for gr in data.groups:
        for job in gr.jobs:
            ((s, g),) = plan[job.id]
            assert g == gr.gpus and s in gr.servers
            gpus[s] += g
            cores[s] += gr.cpus
            mem[s] += gr.mem_gb
    for sj in data.spread:
        parts = plan[sj.job.id]
        on = [s for s, _ in parts]
        assert len(set(on)) == len(on) and set(on) <= set(sj.servers)
        assert all(g >= 1 for _, g in parts) and sum(g for _, g in parts) == sj.job.gpus
        for s, g in parts:
            gpus[s] += g
        drawn = resources.get(sj.job.id, ())
        assert {s for s, _, _ in drawn} <= set(on)
        assert sum(c for _, c, _ in drawn) == sj.cpus
        assert sum(gb for _, _, gb in drawn) >= sj.mem_gb - _GB_SLACK
        for s, c, gb in drawn:
            cores[s] += c
            mem[s] += gb
    for s, (g, c, m) in enumerate(data.servers):
        assert gpus[s] <= g and cores[s] <= c and mem[s] <= m + 1e-6, f"server {s}"


def _fragmented(plan: PlanView) -> int:
    return sum(len(p) > 1 for p in plan.values())


def _two_servers(*spread: SpreadJob, groups: tuple[WholeGroup, ...] = ()) -> PackingData:
    return PackingData(groups, spread, ((8, 24, 500.0), (8, 24, 500.0)))


def test_two_split_jobs_that_fit_whole_become_whole() -> None:
    a = SpreadJob(_job("a", 4), 12, 100.0, (0, 1))
    b = SpreadJob(_job("b", 4), 12, 100.0, (0, 1))
    data = _two_servers(a, b)
    plan = {"a": ((0, 2), (1, 2)), "b": ((0, 2), (1, 2))}
    got = fewer_parts(data, plan)
    assert got is not None and not got.cut
    assert _fragmented(got.plan) == 0 and got.dropped == 2
    assert_serves(data, got.plan, got.resources)


def test_a_job_too_big_for_one_server_keeps_its_parts() -> None:
    big = SpreadJob(_job("big", 12), 30, 700.0, (0, 1))
    small = WholeGroup((_job("w", 4),), 4, 6, 100.0, (0, 1))
    data = _two_servers(big, groups=(small,))
    plan = {"big": ((0, 8), (1, 4)), "w": ((1, 4),)}
    got = fewer_parts(data, plan)
    assert got is not None and got.dropped == 0
    assert got.plan == plan
    assert_serves(data, got.plan, got.resources)


@pytest.mark.parametrize(("cpus", "mem_gb"), [(30, 100.0), (12, 600.0)])
def test_cores_or_memory_a_server_lacks_keep_both_parts(cpus: int, mem_gb: float) -> None:
    """Two GPUs fit either server, but 30 cores (600 GB) do not: the job stays spread."""
    job = SpreadJob(_job("a", 2), cpus, mem_gb, (0, 1))
    data = _two_servers(job)
    got = fewer_parts(data, {"a": ((0, 1), (1, 1))})
    assert got is not None and got.dropped == 0 and _fragmented(got.plan) == 1
    assert_serves(data, got.plan, got.resources)


def test_a_whole_job_keeps_its_server_and_the_room_it_takes() -> None:
    """A whole job of 20 cores on server 0: the spread job (8 cores) can only be whole on
    server 1, not on server 0, where the first packing put most of its GPUs."""
    whole = WholeGroup((_job("w", 2),), 2, 20, 100.0, (0, 1))
    job = SpreadJob(_job("a", 4), 8, 100.0, (0, 1))
    data = _two_servers(job, groups=(whole,))
    got = fewer_parts(data, {"w": ((0, 2),), "a": ((0, 3), (1, 1))})
    assert got is not None
    assert got.plan["w"] == ((0, 2),) and got.plan["a"] == ((1, 4),)
    assert_serves(data, got.plan, got.resources)


def test_a_passed_deadline_keeps_the_first_packing() -> None:
    a = SpreadJob(_job("a", 4), 12, 100.0, (0, 1))
    data = _two_servers(a)
    plan = {"a": ((0, 2), (1, 2))}
    got = fewer_parts(data, plan, deadline=time.perf_counter() - 1.0)
    assert got is not None and got.cut and got.checks == 0 and got.plan == plan


def test_a_plan_that_does_not_fit_is_refused() -> None:
    a = SpreadJob(_job("a", 4), 60, 100.0, (0, 1))  # 60 cores, 48 on both servers
    assert fewer_parts(_two_servers(a), {"a": ((0, 2), (1, 2))}) is None


def test_free_groups_are_not_served() -> None:
    a = SpreadJob(_job("a", 4), 12, 100.0, (0, 1))
    free = FreeGroup((_job("f", 1),), 1, ((0, 2, 10.0, 1.0),))
    data = PackingData((), (a,), ((8, 24, 500.0), (8, 24, 500.0)), free=(free,))
    with pytest.raises(ValueError, match="free groups"):
        fewer_parts(data, {"a": ((0, 2), (1, 2)), "f": ((0, 1),)})


@settings(max_examples=60, deadline=None)
@given(packing_cases())
def test_fewer_parts_of_any_packing_is_a_packing(case: tuple[RoundInstance, PackingData]) -> None:
    """From CP-SAT's first packing of random rounds' points: a packing again, its whole
    jobs where they were, no more parts (nor fragmented jobs) than the first."""
    _, data = case
    first = solve_packing(data, deterministic_s=1.0)
    if first.plan is None or not data.spread:
        return
    got = fewer_parts(data, first.plan)
    assert got is not None
    assert_serves(data, got.plan, got.resources)
    assert whole_counts(data, got.plan) == whole_counts(data, first.plan)
    parts = sum(len(p) for p in got.plan.values())
    assert parts == sum(len(p) for p in first.plan.values()) - got.dropped
    assert _fragmented(got.plan) <= _fragmented(first.plan)
    # the units the module counts memory in are those of the packing (demands rounded up)
    for sj in data.spread:
        drawn = sum(gb for _, _, gb in got.resources.get(sj.job.id, ()))
        assert drawn == pytest.approx(units_up(sj.mem_gb) * 1e-3)


def _without_the_alone_test(data: PackingData, plan: PlanView) -> object:
    """``fewer_parts`` with every support run through its max-flows (the code before
    ``_alone_fits``)."""
    from synergy_opt.mechanisms.opt import fewer_parts as fp

    real = fp._alone_fits
    fp._alone_fits = lambda *_: True  # type: ignore[assignment]
    try:
        return fewer_parts(data, plan)
    finally:
        fp._alone_fits = real


@settings(max_examples=40, deadline=None)
@given(packing_cases())
def test_the_alone_test_skips_flows_and_changes_nothing(
    case: tuple[RoundInstance, PackingData],
) -> None:
    """Ruling out the supports where the changed job alone overfills what it keeps gives
    the same plan, resources and drops as running every support's max-flows, with no more
    supports flowed."""
    _, data = case
    first = solve_packing(data, deterministic_s=1.0)
    if first.plan is None or not data.spread:
        return
    got = fewer_parts(data, first.plan)
    ref = _without_the_alone_test(data, first.plan)
    assert got is not None and isinstance(ref, type(got))
    assert (got.plan, got.resources, got.dropped, got.cut) == (
        ref.plan,
        ref.resources,
        ref.dropped,
        ref.cut,
    )
    assert got.checks <= ref.checks


def test_the_alone_test_rules_out_supports_on_a_packing_round() -> None:
    """Multi-GPU 128 GPUs seed 7's packing (the route's first): the same answer as with
    every support flowed, and fewer supports flowed."""
    from synergy_opt.generate import family_round
    from synergy_opt.mechanisms.opt import fewer_parts as fp
    from synergy_opt.mechanisms.opt import packing_route
    from synergy_opt.mechanisms.opt.mechanism import Opt

    seen: list[tuple[PackingData, PlanView]] = []
    real = packing_route.fewer_parts

    def spy(data: PackingData, plan: PlanView, deadline: float | None = None) -> object:
        seen.append((data, plan))
        return real(data, plan, deadline)

    packing_route.fewer_parts = spy  # type: ignore[assignment]
    try:
        Opt().allocate(family_round("multi-gpu", 128, 7))
    finally:
        packing_route.fewer_parts = real
    assert seen
    data, plan = seen[0]
    got = fp.fewer_parts(data, plan)
    ref = _without_the_alone_test(data, plan)
    assert got is not None and isinstance(ref, type(got))
    assert (got.plan, got.resources, got.dropped) == (ref.plan, ref.resources, ref.dropped)
    assert got.checks < ref.checks
