"""The simulator: a hand-worked golden trace, speed-ups, invariants, exactness of its shortcuts."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from synergy_opt.io import InputError, cluster_from_dict
from synergy_opt.mechanisms import make_mechanism, mechanism_names
from synergy_opt.profiles import ProfileLibrary, shipped_profiles
from synergy_opt.sim import (
    SimConfig,
    SimulationError,
    WorkloadSpec,
    generate_workload,
    paper_cluster,
    simulate,
    summarize,
    write_outputs,
)
from synergy_opt.sim.events import EventQueue, JobArrived, JobCompleted, Priority, RoundStarted
from synergy_opt.sim.metrics import TIMING_FIELDS, jobs_csv
from synergy_opt.tracefile import TraceJob, read_trace
from synergy_opt.types import Allocation, RoundInstance

#: The simulator loads no profiles itself: every run names the library its trace uses.
LIB = shipped_profiles()
ABS_TOL = REL_TOL = 1e-6
DATA = Path(__file__).parent / "data" / "sim"
#: Every registered mechanism that needs no solver (the registry's capability flags).
HEURISTICS = mechanism_names(uses_solver=False)
POLICIES = ("fifo", "srtf", "las", "ftf", "drf")


def small_cluster() -> SimConfig:
    return SimConfig(paper_cluster(servers=2), window=None, stop_after_window=False)


def small_trace(kind: str = "single-gpu", jobs: int = 60, seed: int = 3) -> tuple[TraceJob, ...]:
    # 2 servers (16 GPUs) at 3 jobs/h with ~17 h mean durations: a loaded, queueing cluster.
    spec = WorkloadSpec(kind=kind, jobs=jobs, arrival_rate_per_h=3.0)
    return generate_workload(spec, shipped_profiles(), np.random.default_rng(seed))


# --------------------------------------------------------------------------- kernel


def test_event_queue_orders_by_time_then_priority_then_insertion() -> None:
    q = EventQueue()
    q.push(10.0, Priority.ROUND, RoundStarted())
    q.push(10.0, Priority.ARRIVAL, JobArrived(1))
    q.push(10.0, Priority.COMPLETION, JobCompleted(0))
    q.push(10.0, Priority.ARRIVAL, JobArrived(2))
    q.push(5.0, Priority.ROUND, RoundStarted())
    got = [q.pop() for _ in range(len(q))]
    assert got == [
        (5.0, RoundStarted()),
        (10.0, JobCompleted(0)),
        (10.0, JobArrived(1)),
        (10.0, JobArrived(2)),
        (10.0, RoundStarted()),
    ]
    assert q.peek_time() == math.inf


# --------------------------------------------------------------------------- golden


def test_golden_ten_job_trace_matches_the_hand_worked_schedule(tmp_path: Path) -> None:
    expected = json.loads((DATA / "golden10_expected.json").read_text())
    cfg = SimConfig(cluster_from_dict(expected["cluster"]), round_s=expected["round_s"])
    res = simulate(
        cfg,
        read_trace(DATA / "golden10.csv"),
        expected["mechanism"],
        expected["policy"],
        profiles=LIB,
    )
    assert {j.id: j.start_s for j in res.jobs} == {
        k: float(v) for k, v in expected["start_s"].items()
    }
    assert {j.id: j.finish_s for j in res.jobs} == {
        k: float(v) for k, v in expected["finish_s"].items()
    }
    summary = summarize(res)
    for key, value in expected["summary"].items():
        assert summary[key] == pytest.approx(value, rel=REL_TOL, abs=ABS_TOL), key
    write_outputs(res, tmp_path)
    rows = (tmp_path / "jobs.csv").read_text().splitlines()
    assert rows[0] == "id,model,gpus,arrival_hours,start_hours,finish_hours,jct_hours,measured"
    assert rows[3] == "j2,alexnet,1,0.027778,0.083333,0.333333,0.305556,1"


def test_speed_up_shortens_a_job_by_its_throughput_ratio() -> None:
    # res18 runs 2.4x faster at its best point (9 cores) than at fair share (3 cores):
    # 7200 s of fair-share work takes 3000 s = 10 rounds alone on the paper cluster.
    trace = [TraceJob("a", 0.0, 1, "res18", 7200.0)]
    cfg = SimConfig(paper_cluster())
    for mech, finish in (("tune", 3000.0), ("greedy", 3000.0), ("proportional", 7200.0)):
        res = simulate(cfg, trace, mech, "fifo", profiles=LIB)
        assert res.jobs[0].finish_s == pytest.approx(finish, rel=REL_TOL, abs=ABS_TOL), mech


def test_preemption_cost_is_paid_on_start_and_on_every_move_only() -> None:
    # Alone on the cluster the job keeps its placement: it pays 60 s once, so 600 s of work
    # needs 3 rounds (240 + 300 + 60) instead of 2.
    trace = [TraceJob("a", 0.0, 1, "gnmt", 600.0)]
    free = simulate(SimConfig(paper_cluster()), trace, "proportional", "fifo", profiles=LIB)
    costly = simulate(
        SimConfig(paper_cluster(), preemption_cost_s=60.0),
        trace,
        "proportional",
        "fifo",
        profiles=LIB,
    )
    assert free.jobs[0].finish_s == 600.0 and costly.jobs[0].finish_s == 900.0


def test_idle_stretches_are_skipped_to_the_next_arrival() -> None:
    trace = [
        TraceJob("a", 0.0, 1, "gnmt", 300.0),
        TraceJob("b", 10 * 86400.0 + 1, 1, "gnmt", 300.0),
    ]
    res = simulate(SimConfig(paper_cluster()), trace, "tune", "fifo", profiles=LIB)
    assert len(res.rounds) == 2
    assert res.jobs[1].start_s == 10 * 86400.0 + 300.0


# --------------------------------------------------------------------------- invariants


@pytest.mark.parametrize("mech", HEURISTICS)
def test_invariants_on_a_loaded_trace(mech: str) -> None:
    # GREEDY never runs a job whose best demand fits no server (see the next test), which
    # the multi-GPU mix produces, so it is checked on the single-GPU trace.
    trace = small_trace("single-gpu" if mech == "greedy" else "multi-gpu")
    cfg = replace(small_cluster(), check_rounds=True)  # the checker runs on every round
    res = simulate(cfg, trace, mech, "fifo", profiles=LIB)
    total = cfg.cluster.total_gpus
    assert len(res.jobs) == len(trace)
    for j in res.jobs:
        # No job lost: run to completion, every job finished, after it arrived and started.
        assert j.finish_s is not None and j.start_s is not None
        assert j.arrival_s <= j.start_s < j.finish_s
        need = math.ceil(j.duration_s / cfg.round_s - 1e-9)
        if mech == "proportional":
            assert j.rounds_run == need  # exactly its duration, rounded up to rounds
        elif mech != "greedy":
            assert j.rounds_run <= need  # never slower than fair share
    for r in res.rounds:
        assert r.gpus_used <= total
        assert r.cpus_used <= cfg.cluster.total_cpus
        assert r.mem_gb_used <= cfg.cluster.total_mem_gb + ABS_TOL


def test_greedy_starvation_of_an_oversized_demand_is_reported() -> None:
    # An 8-GPU alexnet job asks for 8 x 12 = 96 cores at its best point, more than any
    # 24-core server: GREEDY never places it, so the run stops with an error naming that
    # it can never finish, while TUNE falls back to the fair share and runs it.
    trace = [TraceJob("big", 0.0, 8, "alexnet", 600.0), TraceJob("small", 0.0, 1, "gnmt", 600.0)]
    cfg = SimConfig(paper_cluster(servers=2))
    with pytest.raises(SimulationError, match="can never finish"):
        simulate(cfg, trace, "greedy", "fifo", profiles=LIB)
    assert all(j.finish_s == 600.0 for j in simulate(cfg, trace, "tune", "fifo", profiles=LIB).jobs)


@pytest.mark.parametrize("mech", ("proportional", "tune", "tune-sorted"))
def test_no_gpu_idles_while_single_gpu_jobs_wait(mech: str) -> None:
    res = simulate(small_cluster(), small_trace(), mech, "fifo", profiles=LIB)
    busy = [r for r in res.rounds if r.queued > 0]
    assert busy, "the trace must load the cluster for this test to mean anything"
    assert all(r.gpus_used == 16 for r in busy)


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_runs_every_job_with_tune(policy: str) -> None:
    res = simulate(small_cluster(), small_trace(jobs=40), "tune", policy, profiles=LIB)
    assert all(j.finish_s is not None for j in res.jobs)


def test_policy_changes_who_waits() -> None:
    trace = small_trace(jobs=60)
    by = {
        p: summarize(simulate(small_cluster(), trace, "proportional", p, profiles=LIB))
        for p in ("fifo", "srtf")
    }
    # Shortest-remaining-time first minimises average JCT on a queueing trace.
    assert by["srtf"]["avg_jct_hours"] < by["fifo"]["avg_jct_hours"]


def test_stop_after_window_leaves_later_jobs_queued_not_lost() -> None:
    trace = small_trace(jobs=60)
    cfg = replace(small_cluster(), window=(10, 20), stop_after_window=True)
    res = simulate(cfg, trace, "tune", "fifo", profiles=LIB)
    measured = [j for j in res.jobs if j.measured]
    assert len(measured) == 10 and all(j.finish_s is not None for j in measured)
    assert all(j.finish_s is None or j.finish_s <= res.end_s for j in res.jobs)
    assert any(j.finish_s is None for j in res.jobs)  # still queued or running at the end


@pytest.mark.parametrize("mech", HEURISTICS)
def test_shortcuts_are_exact(mech: str) -> None:
    trace = small_trace(jobs=50, seed=5)
    fast = simulate(small_cluster(), trace, mech, "fifo", profiles=LIB)
    slow_cfg = replace(small_cluster(), reuse_allocations=False, truncate_queue=False)
    slow = simulate(slow_cfg, trace, mech, "fifo", profiles=LIB)
    assert fast.jobs == slow.jobs
    assert [replace(r, mechanism_s=0.0, reused=False) for r in fast.rounds] == [
        replace(r, mechanism_s=0.0, reused=False) for r in slow.rounds
    ]
    if mech != "greedy":
        assert any(r.reused for r in fast.rounds)


def test_same_inputs_give_the_same_bytes(tmp_path: Path) -> None:
    trace = small_trace(jobs=40)
    outs = []
    for k in range(2):
        res = simulate(small_cluster(), trace, "tune", "las", profiles=LIB)
        d = write_outputs(res, tmp_path / str(k), seed=3)
        summary = json.loads((d / "summary.json").read_text())
        for f in TIMING_FIELDS:
            summary.pop(f)
        outs.append((summary, (d / "jobs.csv").read_bytes()))
    assert outs[0] == outs[1]


# --------------------------------------------------------------------------- bad input


def test_jobs_that_can_never_run_are_input_errors() -> None:
    cfg = SimConfig(paper_cluster(servers=1))
    with pytest.raises(InputError, match="jobs\\[0\\].gpus"):
        simulate(cfg, [TraceJob("big", 0.0, 16, "gnmt", 60.0)], "tune", "fifo", profiles=LIB)
    with pytest.raises(InputError, match="unknown model"):
        simulate(cfg, [TraceJob("x", 0.0, 1, "nope", 60.0)], "tune", "fifo", profiles=LIB)
    with pytest.raises(InputError, match="window"):
        simulate(
            replace(cfg, window=(0, 5)),
            [TraceJob("x", 0.0, 1, "gnmt", 60.0)],
            "tune",
            "fifo",
            profiles=LIB,
        )


def test_a_mechanism_that_never_schedules_is_reported_not_looped() -> None:
    class Idle:
        name = "idle"

        def allocate(self, inst: RoundInstance) -> Allocation:
            return Allocation(inst.name, "idle", (), tuple(j.id for j in inst.jobs), 0.0, 0)

    with pytest.raises(SimulationError, match="none of the 1 queued jobs makes progress"):
        simulate(
            SimConfig(paper_cluster()),
            [TraceJob("x", 0.0, 1, "gnmt", 60.0)],
            Idle(),
            "fifo",
            profiles=LIB,
        )

    inner = make_mechanism("proportional")

    class Stalled:  # schedules every job at zero throughput
        name = "stalled"

        def allocate(self, inst: RoundInstance) -> Allocation:
            a = inner.allocate(inst)
            return replace(a, jobs=tuple(replace(ja, throughput=0.0) for ja in a.jobs))

    trace = [TraceJob("x", 0.0, 1, "gnmt", 60.0), TraceJob("y", 900.0, 1, "gnmt", 60.0)]
    # It keeps going while a job may still arrive (y at 900 s), then gives up.
    with pytest.raises(SimulationError, match=r"round at 900 s: none of the 2 .*\(2 scheduled;"):
        simulate(SimConfig(paper_cluster()), trace, Stalled(), "fifo", profiles=LIB)


def test_an_over_full_allocation_fails_the_debug_check() -> None:
    inner = make_mechanism("proportional")

    class Doubler:
        name = "doubler"

        def allocate(self, inst: RoundInstance) -> Allocation:
            a = inner.allocate(inst)
            jobs = tuple(
                replace(
                    ja,
                    cpus=ja.cpus * 2,
                    placement=tuple(replace(p, cpus=p.cpus * 2) for p in ja.placement),
                )
                for ja in a.jobs
            )
            return replace(a, jobs=jobs)

    trace = [TraceJob(f"j{k}", 0.0, 1, "gnmt", 600.0) for k in range(9)]
    cfg = SimConfig(paper_cluster(servers=1), check_rounds=True)
    with pytest.raises(SimulationError, match="doubler broke"):
        simulate(cfg, trace, Doubler(), "fifo", profiles=LIB)
    simulate(
        replace(cfg, check_rounds=False), trace, Doubler(), "fifo", profiles=LIB
    )  # unchecked: runs


def test_max_jobs_and_time_scale_reshape_the_trace() -> None:
    trace = [TraceJob(f"j{k}", 100.0 * k, 1, "gnmt", 600.0) for k in range(5)]
    res = simulate(
        SimConfig(paper_cluster(), max_jobs=3, time_scale=2.0), trace, "tune", "fifo", profiles=LIB
    )
    assert [j.arrival_s for j in res.jobs] == [0.0, 200.0, 400.0]
    assert [j.duration_s for j in res.jobs] == [1200.0, 1200.0, 1200.0]
    assert "jobs_total" in summarize(res) and summarize(res)["jobs_total"] == 3
    assert jobs_csv(res).count("\n") == 4


def test_the_engine_uses_the_profiles_it_is_given() -> None:
    """No hidden loading: a library without the trace's model fails, the shipped one runs."""
    trace = [TraceJob("a", 0.0, 1, "gnmt", 600.0)]
    cfg = SimConfig(paper_cluster(servers=1))
    others = ProfileLibrary(tuple(p for p in LIB.profiles if p.name != "gnmt"), "no-gnmt")
    with pytest.raises(InputError, match="unknown model 'gnmt'"):
        simulate(cfg, trace, "tune", "fifo", profiles=others)
    assert simulate(cfg, trace, "tune", "fifo", profiles=LIB).jobs[0].finish_s == 600.0
    with pytest.raises(TypeError, match="profiles"):
        simulate(cfg, trace, "tune", "fifo")  # type: ignore[call-arg]
