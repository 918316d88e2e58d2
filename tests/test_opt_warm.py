"""``opt`` across rounds: the warm start from the previous round, and the checker's floor memo.

The rounds come from a real simulation (a short multi-GPU trace on 32 GPUs), so consecutive
rounds differ the way a simulator's do: a few jobs leave, a few arrive.
"""

from __future__ import annotations

import dataclasses
import logging
import random

import numpy as np
import pytest

from synergy_opt.check import check_allocation, facts, fair_share_floor
from synergy_opt.generate import family_round
from synergy_opt.io import allocation_to_dict
from synergy_opt.mechanisms import Mechanism, make_mechanism
from synergy_opt.mechanisms.opt import Opt
from synergy_opt.mechanisms.opt.search import TARGET_GAP, WARM_START
from synergy_opt.profiles import shipped_profiles
from synergy_opt.sim.config import SimConfig, paper_cluster
from synergy_opt.sim.engine import simulate
from synergy_opt.sim.metrics import jobs_csv
from synergy_opt.sim.workload import WorkloadSpec, generate_workload
from synergy_opt.types import Allocation, RoundInstance

#: Rounds recorded from the simulation (after the cluster has filled).
ROUNDS = 24
SKIP = 40


class _Recorder:
    """A mechanism wrapper that keeps the round instances the engine hands it."""

    name = "opt"

    def __init__(self, inner: Mechanism) -> None:
        self.inner = inner
        self.rounds: list[RoundInstance] = []

    def allocate(self, inst: RoundInstance) -> Allocation:
        self.rounds.append(inst)
        return self.inner.allocate(inst)


def _trace() -> tuple[SimConfig, tuple]:
    prof = shipped_profiles()
    spec = WorkloadSpec(kind="multi-gpu", jobs=60, arrival_rate_per_h=6.0)
    trace = generate_workload(spec, prof, np.random.default_rng(3))
    return SimConfig(cluster=paper_cluster(4), truncate_queue=True), trace


@pytest.fixture(scope="module")
def sim_rounds() -> list[RoundInstance]:
    """Consecutive rounds of an ``opt`` simulation (tune decides nothing here)."""
    cfg, trace = _trace()
    rec = _Recorder(make_mechanism("opt"))
    simulate(cfg, trace, rec, "fifo", profiles=shipped_profiles())
    assert len(rec.rounds) >= SKIP + ROUNDS
    return rec.rounds[SKIP : SKIP + ROUNDS]


def _plans(alloc: Allocation) -> dict[str, tuple[tuple[str, int], ...]]:
    return {ja.id: tuple((p.server, p.gpus) for p in ja.placement) for ja in alloc.jobs}


def test_warm_start_keeps_jobs_in_place_and_quality(
    sim_rounds: list[RoundInstance], caplog: pytest.LogCaptureFixture
) -> None:
    """Rounds where the warm start is taken keep every continuing job's GPUs, reach the
    target gap of the bound, pass the checker and are never below TUNE; it is taken on most
    rounds of a simulation (a broken warm start re-places jobs or never fires)."""
    opt = Opt()
    tune = make_mechanism("tune")
    taken = 0
    last: dict[str, tuple[tuple[str, int], ...]] = {}
    for inst in sim_rounds:
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="synergy_opt.mechanisms.opt.search"):
            alloc = opt.allocate(inst)
        assert check_allocation(inst, alloc, fair_share=True) == []
        assert alloc.total_throughput >= tune.allocate(inst).total_throughput - 1e-9
        warm = any(f"{WARM_START} reaches" in r.getMessage() for r in caplog.records)
        replayed = any("replayed" in r.getMessage() for r in caplog.records)
        now = _plans(alloc)
        if warm and not replayed:
            taken += 1
            moved = [j for j in now if j in last and now[j] != last[j]]
            assert moved == [], f"{inst.name}: warm start moved {moved}"
            assert alloc.upper_bound is not None
            assert alloc.total_throughput >= (1 - TARGET_GAP) * alloc.upper_bound - 1e-9
        last = now
    assert taken >= ROUNDS // 2, taken


def test_warm_sequence_is_deterministic(sim_rounds: list[RoundInstance]) -> None:
    """The same sequence of rounds through two fresh instances gives the same bytes."""
    a, b = Opt(), Opt()
    for inst in sim_rounds:
        x, y = a.allocate(inst), b.allocate(inst)
        dx, dy = allocation_to_dict(x), allocation_to_dict(y)
        dx.pop("solve_seconds", None)
        dy.pop("solve_seconds", None)
        assert dx == dy


def test_opt_simulation_twice_same_output() -> None:
    """An ``opt`` simulation run twice writes the same job records (history-dependent
    answers depend only on the sequence of rounds)."""
    cfg, trace = _trace()
    cfg = dataclasses.replace(cfg, max_jobs=40)
    runs = [
        jobs_csv(simulate(cfg, trace, "opt", "fifo", profiles=shipped_profiles())) for _ in "ab"
    ]
    assert runs[0] == runs[1]


def test_warm_start_ignores_a_different_job_under_a_known_id() -> None:
    """A job id seen last round but now a different job (another class) is placed afresh,
    and a round on another cluster reuses nothing."""
    first = family_round("multi-gpu", 32, 1)
    opt = Opt()
    opt.allocate(first)
    ctx = opt.context(first)
    assert ctx is not None
    assert opt._kept(ctx), "the same round keeps its jobs"
    j0 = first.jobs[0]
    other = next(j for j in first.jobs if j.sensitivity != j0.sensitivity or j.gpus != j0.gpus)
    swapped = dataclasses.replace(
        first,
        jobs=(dataclasses.replace(other, id=j0.id), *first.jobs[1:]),
    )
    ctx2 = opt.context(swapped)
    assert ctx2 is not None
    kept = opt._kept(ctx2)
    assert j0.id not in kept
    bigger = family_round("multi-gpu", 64, 1)
    ctx3 = opt.context(bigger)
    assert ctx3 is not None and opt._kept(ctx3) == {}


@pytest.mark.parametrize("family", ["mixed-shapes", "single-gpu", "split-penalty"])
def test_checker_floor_memo_equals_fair_share_floor(family: str) -> None:
    """The checker computes each floor once per class and footprint; on allocations with
    parts moved between servers of different shapes (and merged on one server) every memoised
    floor equals :func:`fair_share_floor` of the job as placed."""
    inst = family_round(family, 32, 5)
    alloc = make_mechanism("tune").allocate(inst)
    rng = random.Random(7)
    servers = inst.cluster.servers
    for _ in range(20):
        jobs = list(alloc.jobs)
        for i in rng.sample(range(len(jobs)), min(6, len(jobs))):
            parts = list(jobs[i].placement)
            parts = [dataclasses.replace(p, server=rng.choice(servers).name) for p in parts]
            if rng.random() < 0.3:
                parts.append(dataclasses.replace(parts[0], server=parts[-1].server, gpus=1))
            jobs[i] = dataclasses.replace(jobs[i], placement=tuple(parts))
        f = facts(inst, dataclasses.replace(alloc, jobs=tuple(jobs)))
        for s in f.scheduled:
            assert f.floor(s) == fair_share_floor(inst, s.job, s.alloc.placement)


def test_highs_options_pass_through() -> None:
    """``highs_options`` reach HiGHS: the optimum is unchanged with the options OPT uses,
    and an option HiGHS refuses is an error, not silently dropped."""
    from synergy_opt.mechanisms.opt.context import OPT_HIGHS_OPTIONS
    from synergy_opt.mechanisms.opt.super_machine import split_super_machine
    from synergy_opt.mechanisms.packing import select_runnable
    from synergy_opt.solve import solve_matrix

    inst = family_round("multi-gpu", 64, 2)
    mm = split_super_machine(inst, select_runnable(inst)).matrix
    plain = solve_matrix(mm, "highs", threads=1)
    quick = solve_matrix(mm, "highs", threads=1, highs_options=OPT_HIGHS_OPTIONS)
    assert plain.objective is not None and quick.objective == pytest.approx(plain.objective)
    with pytest.raises(ValueError, match="no_such_option"):
        solve_matrix(mm, "highs", highs_options={"no_such_option": 1})


def test_opt_solves_single_threaded_unless_told() -> None:
    """OPT's MIPs are small: one solver thread unless the options ask for more."""
    from synergy_opt.mechanisms import MechanismOptions

    assert Opt().options.threads == 1
    assert Opt(MechanismOptions(threads=2)).options.threads == 2


def test_neighbourhood_search_is_short_within_one_percent(monkeypatch: pytest.MonkeyPatch) -> None:
    """A round already within LNS_NEAR_GAP of the super-machine bound (so within 1 % of the
    optimum) gets at most LNS_NEAR_PATIENCE neighbourhood MIPs without gain; the full
    patience applies when the rule is off.  The answer stays checked and within the gap."""
    from synergy_opt.mechanisms.opt import neighbourhood as nb
    from synergy_opt.mechanisms.opt import pattern_route

    # 0.995 of the bound after the routes as they were: the pattern-root route reaches
    # 0.9985 there and leaves the search nothing to do
    monkeypatch.setattr(pattern_route, "PATTERN_ROOT_ROUTE", False)
    inst = family_round("single-gpu", 128, 1)
    calls = {"n": 0}
    solve_hood = nb._solve_hood

    def counted(*args: object, **kwargs: object) -> object:
        calls["n"] += 1
        return solve_hood(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(nb, "_solve_hood", counted)
    near = Opt().allocate(inst)
    assert check_allocation(inst, near, fair_share=True) == []
    assert near.upper_bound is not None
    assert near.total_throughput >= (1 - nb.LNS_NEAR_GAP) * near.upper_bound
    assert 1 <= calls["n"] <= nb.LNS_NEAR_PATIENCE
    calls["n"] = 0
    monkeypatch.setattr(nb, "LNS_NEAR_GAP", 0.0)
    far = Opt().allocate(inst)
    assert calls["n"] > nb.LNS_NEAR_PATIENCE
    assert far.total_throughput >= near.total_throughput - 1e-9


def test_forget_rounds_solves_cold_and_keeps_the_floors() -> None:
    """After ``forget_rounds`` an ``opt`` answers a round with the same bytes as a fresh one
    (no replay, no warm start from the round before), and keeps its per-class floors (pure
    memos of the cluster and the job's class, equal to the checker's floors)."""
    from synergy_opt.formulations.fast import class_key

    def fields(a: Allocation) -> dict[str, object]:
        d = allocation_to_dict(a)
        d.pop("solve_seconds", None)
        return d

    first = family_round("multi-gpu", 64, 3)
    second = dataclasses.replace(first, jobs=first.jobs[2:])  # two jobs left
    opt = Opt()
    opt.allocate(first)
    floors = opt._class_floors(first)
    assert floors
    warm = fields(opt.allocate(second))  # warm-started: other placements than cold
    opt.forget_rounds()
    cold = fields(opt.allocate(second))
    fresh = fields(Opt().allocate(second))
    assert warm != fresh
    assert cold == fresh
    assert opt._class_floors(second) is floors  # same cluster: the memo is kept
    for job in second.jobs:
        if class_key(job) in floors:
            assert floors[class_key(job)] == fair_share_floor(second, job)[1]
