"""Simulation semantics: each artifact rule on its own, the GPU-order mechanisms, the option."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from synergy_opt.check import check_allocation
from synergy_opt.cli import main
from synergy_opt.mechanisms import MechanismOptions
from synergy_opt.mechanisms.packing import DemandTable
from synergy_opt.profiles import shipped_profiles
from synergy_opt.sim import (
    SimConfig,
    WorkloadSpec,
    generate_workload,
    get_semantics,
    paper_cluster,
    simulate,
    summarize,
)
from synergy_opt.sim.gpu_order import GpuOrderTune, _Free, take_in_gpu_order
from synergy_opt.sim.semantics import (
    ARTIFACT,
    DEFAULT,
    MATRIX,
    Semantics,
    ablations,
    best_per_gpu_point,
    semantics_names,
)
from synergy_opt.tracefile import TraceJob
from synergy_opt.types import Cluster, Job, RoundInstance, Server

PAPER = paper_cluster()
#: The paper simulator's TUNE speed-ups for 1/2/4/8 GPUs, as its traces' README lists them
#: (read from its code): the capped demand, CPU interpolation, kept memory-cap speed-up.
README_SPEEDUPS = {
    "alexnet": (2.94, 2.94, 1.65, 1.0),
    "res18": (2.4, 2.4, 1.7, 1.0),
    "shufflenet": (2.89, 2.89, 1.63, 1.0),
    "mobilenet": (1.55, 1.55, 1.55, 1.0),
    "res50": (1.15, 1.15, 1.15, 1.0),
    "m5": (2.5, 2.5, 2.5, 1.0),
    "gnmt": (1.0, 1.0, 1.0, 1.0),
    "deepspeech": (1.0, 1.0, 1.0, 1.0),
}
#: The README rounds to two decimals.
README_ABS_TOL = 0.006


def _best(
    sem: Semantics, model: str, gpus: int, cluster: Cluster = PAPER
) -> tuple[int, float, float]:
    prof = shipped_profiles().get(model)
    m = sem.job_matrix(prof, gpus, cluster)
    d = DemandTable().best(Job("x", gpus, m), cluster.total_cpus, cluster.total_mem_gb)
    return d.cpus, d.mem_gb, d.throughput


@pytest.mark.parametrize("model", sorted(README_SPEEDUPS))
def test_artifact_speedups_are_the_paper_simulators(model: str) -> None:
    got = [_best(ARTIFACT, model, g)[2] for g in (1, 2, 4, 8)]
    assert got == pytest.approx(list(README_SPEEDUPS[model]), abs=README_ABS_TOL)


def test_artifact_demands_are_capped_at_one_server() -> None:
    assert _best(ARTIFACT, "alexnet", 4)[:2] == (24, 500.0)  # 48 cores, 500 GB asked
    assert _best(ARTIFACT, "m5", 4)[:2] == (24, 500.0)  # 24 cores, 750 GB asked
    assert _best(DEFAULT, "alexnet", 4)[:2] == (48, 500.0)  # the matrix model: uncapped


def test_default_semantics_is_the_scaled_matrix() -> None:
    for prof in shipped_profiles().profiles:
        for g in (1, 2, 4, 8):
            assert DEFAULT.job_matrix(prof, g, PAPER) is prof.matrix(g)


def test_cpu_cap_rule_interpolates_where_the_matrix_looks_up() -> None:
    alexnet = shipped_profiles().get("alexnet")
    interpolated = 1.0 + (2.94 - 1.0) * (24 - 12) / (48 - 12)
    assert _best(ARTIFACT, "alexnet", 4)[2] == pytest.approx(interpolated)
    lookup = replace(ARTIFACT, cpu_cap_speedup=MATRIX)
    assert _best(lookup, "alexnet", 4)[2] == pytest.approx(alexnet.matrix(4).lookup(24, 500.0))
    assert alexnet.matrix(4).lookup(24, 500.0) != pytest.approx(interpolated)


def test_memory_cap_rule_keeps_the_speedup_where_the_matrix_lowers_it() -> None:
    m5 = shipped_profiles().get("m5")
    lowered = m5.matrix(4).lookup(24, 500.0)
    assert lowered < 2.5
    assert _best(ARTIFACT, "m5", 4)[2] == pytest.approx(2.5)
    assert _best(replace(ARTIFACT, mem_cap_speedup=MATRIX), "m5", 4)[2] == pytest.approx(lowered)


def test_best_or_share_leaves_nothing_in_between() -> None:
    alexnet = shipped_profiles().get("alexnet")
    two = ARTIFACT.job_matrix(alexnet, 1, PAPER)
    full = replace(ARTIFACT, speedup_levels=MATRIX).job_matrix(alexnet, 1, PAPER)
    assert two.lookup(9, 125.0) == 1.0 and full.lookup(9, 125.0) == 2.0
    assert two.lookup(12, 125.0) == full.lookup(12, 125.0) == 2.94
    assert two.lookup(2, 62.5) == 0.0  # below the share: nothing, as in any matrix


def test_a_demand_capped_at_a_server_without_cores_leaves_the_share_alone() -> None:
    """The cap is the server with most GPUs; a cluster file may give it no cores.  Building
    the matrix raised there (a point at 0 cores); now the job has its share only (fuzz of
    odd traces through ``simulate --semantics artifact``, seed 400)."""
    odd = Cluster(
        (
            Server("s0", 2, 104, 512.0),
            Server("s1", 2, 104, 512.0),
            Server("z0", 4, 0, 100.0),
            Server("z1", 4, 0, 100.0),
        )
    )
    alexnet = shipped_profiles().get("alexnet")
    m = ARTIFACT.job_matrix(alexnet, 1, odd)
    fc, fm = odd.fair_share(1)
    assert (m.cpus, m.mem_gb) == ((fc,), (fm,))
    assert m.lookup(fc, fm) == alexnet.matrix(1).lookup(fc, fm)
    assert m.lookup(fc - 1, fm) == 0.0


def test_best_per_gpu_point_is_the_profiles_declared_best() -> None:
    assert best_per_gpu_point(shipped_profiles().get("alexnet")) == (12, 125.0, 2.94)
    assert best_per_gpu_point(shipped_profiles().get("m5")) == (6, 187.5, 2.5)


def test_ablations_replace_one_rule_each_then_all() -> None:
    rows = ablations()
    assert rows[0] == ("artifact", ARTIFACT)
    changed = [r for r, v in ARTIFACT.rules().items() if v != MATRIX]
    assert len(rows) == len(changed) + 2
    for (label, sem), rule in zip(rows[1:-1], changed, strict=True):
        diff = {r for r, v in sem.rules().items() if v != ARTIFACT.rules()[r]}
        assert diff == {rule} and getattr(sem, rule) == MATRIX and label.startswith(rule)
    assert rows[-1][1].rules() == DEFAULT.rules()


def test_unknown_rules_and_semantics_are_named() -> None:
    with pytest.raises(ValueError, match="placement: unknown rule 'nowhere'"):
        Semantics("x", placement="nowhere")
    with pytest.raises(KeyError, match="artifact, default"):
        get_semantics("paper")
    assert semantics_names() == ("artifact", "default")


# --------------------------------------------------------------------------- progress

#: res50 iterates in 0.78 s at its share: 384 whole iterations (299.52 s) fit in a round.
RES50_ITER_S = 0.78


def test_whole_iteration_progress_loses_each_rounds_fraction() -> None:
    advance = ARTIFACT.progress_rule()
    assert advance(1.0, 1.0, 300.0, RES50_ITER_S, 1e9) == pytest.approx(384 * RES50_ITER_S)
    assert advance(2.94, 1.0, 300.0, 0.6, 1e9) == pytest.approx(1470 * 0.6)  # 300/(0.6/2.94)
    assert advance(0.0, 1.0, 300.0, 0.6, 1e9) == 0.0
    # Less than half an iteration left (a duration rounded to the millisecond): done.
    assert advance(1.0, 1.0, 300.0, RES50_ITER_S, 0.3) == 0.3
    assert DEFAULT.progress_rule()(1.0, 1.0, 300.0, RES50_ITER_S, 1e9) == 300.0


@pytest.mark.parametrize(
    "iterations, default_s, artifact_s",
    # 768.2: a fifth of an iteration left after two rounds counts as done; 768.7 does not.
    [(769, 600.0, 900.0), (768.2, 600.0, 600.0), (768.7, 600.0, 900.0), (384, 300.0, 300.0)],
)
def test_a_job_needs_rounds_for_its_whole_iterations(
    iterations: float, default_s: float, artifact_s: float
) -> None:
    """769 iterations take 599.82 s at the share: 2 rounds of time, 3 of whole iterations."""
    trace = [TraceJob("a", 0.0, 1, "res50", round(iterations * RES50_ITER_S, 3))]
    for sem, finish in (("default", default_s), ("artifact", artifact_s)):
        cfg = SimConfig(paper_cluster(), semantics=get_semantics(sem))
        assert (
            simulate(cfg, trace, "proportional", "fifo", profiles=shipped_profiles())
            .jobs[0]
            .finish_s
            == finish
        ), sem


# --------------------------------------------------------------------------- GPU-order placement


def _inst(
    cluster: Cluster, jobs: list[tuple[str, str, int]], sem: Semantics = ARTIFACT
) -> RoundInstance:
    lib = shipped_profiles()
    built = tuple(
        Job(jid, g, sem.job_matrix(lib.get(model), g, cluster), model) for jid, model, g in jobs
    )
    return RoundInstance("t", cluster, built)


def test_gpus_are_taken_in_id_order_where_the_share_fits() -> None:
    cluster = Cluster(tuple(Server(f"s{i}", 4, 8, 100.0) for i in range(3)))
    inst = _inst(cluster, [("a", "gnmt", 4)])
    free = _Free(inst)
    free.take(0, 0, 4, 0.0)  # server 0 keeps 4 free cores: room for one 4-core GPU share
    parts = take_in_gpu_order(free, inst.jobs[0], 16, 40.0)
    assert parts == [(0, 1, 4, 10.0), (1, 2, 8, 20.0), (2, 1, 4, 10.0)]
    assert free.gpus == [3, 2, 3] and free.cpus == [0, 0, 4]


def test_a_share_that_fits_nowhere_takes_nothing() -> None:
    cluster = Cluster(tuple(Server(f"s{i}", 4, 8, 100.0) for i in range(2)))
    inst = _inst(cluster, [("a", "gnmt", 2)])
    free = _Free(inst)
    assert take_in_gpu_order(free, inst.jobs[0], 24, 10.0) is None  # 12 cores per GPU
    assert free.gpus == [4, 4] and free.cpus == [8, 8] and free.mem == [100.0, 100.0]


def test_tune_reverts_the_cpu_hungriest_resident_to_fit_a_later_job() -> None:
    """One 8-GPU server, 24 cores: two alexnets at 12 cores each, then a res18.

    The res18 (9 cores) does not fit, nor does its share (3): the artifact reverts the
    resident with the most cores per GPU, ties to the earlier-placed one (j0), to its
    share, freeing 9 cores; j1 keeps 2.94.
    """
    cluster = Cluster((Server("s0", 8, 24, 500.0),))
    inst = _inst(cluster, [("j0", "alexnet", 1), ("j1", "alexnet", 1), ("j2", "res18", 1)])
    alloc = GpuOrderTune().allocate(inst)
    assert check_allocation(inst, alloc) == []
    got = {ja.id: (ja.cpus, ja.throughput) for ja in alloc.jobs}
    assert got == {"j0": (3, 1.0), "j1": (12, 2.94), "j2": (3, 1.0)}


def test_gpu_order_greedy_skips_what_does_not_fit_at_its_demand() -> None:
    """The same three jobs as above: GREEDY runs the two alexnets and leaves res18 out."""
    cluster = Cluster((Server("s0", 8, 24, 500.0),))
    inst = _inst(cluster, [("j0", "alexnet", 1), ("j1", "alexnet", 1), ("j2", "res18", 1)])
    alloc = get_semantics("artifact").make_mechanism("greedy").allocate(inst)
    assert check_allocation(inst, alloc) == []
    assert {ja.id: ja.cpus for ja in alloc.jobs} == {"j0": 12, "j1": 12}
    assert alloc.unscheduled == ("j2",)


def _multi_trace(jobs: int = 150, seed: int = 5) -> tuple:
    spec = WorkloadSpec(kind="multi-gpu", jobs=jobs, arrival_rate_per_h=30.0)
    return generate_workload(spec, shipped_profiles(), np.random.default_rng(seed))


@pytest.mark.parametrize("mech", ["proportional", "greedy", "tune"])
def test_gpu_order_mechanisms_pass_the_independent_check_every_round(mech: str) -> None:
    cfg = SimConfig(paper_cluster(4), window=(20, 120), check_rounds=True, semantics=ARTIFACT)
    s = summarize(simulate(cfg, _multi_trace(), mech, "fifo", profiles=shipped_profiles()))
    assert s["jobs_measured_finished"] == 100 and s["semantics"] == "artifact"


def test_artifact_runs_are_deterministic_and_tune_keeps_the_share() -> None:
    cfg = SimConfig(paper_cluster(4), window=(20, 120), semantics=ARTIFACT)
    trace = _multi_trace()
    a = simulate(cfg, trace, "tune", "fifo", profiles=shipped_profiles())
    b = simulate(cfg, trace, "tune", "fifo", profiles=shipped_profiles())
    assert a.jobs == b.jobs
    untimed = [[replace(r, mechanism_s=0.0) for r in x.rounds] for x in (a, b)]
    assert untimed[0] == untimed[1]
    prop = summarize(simulate(cfg, trace, "proportional", "fifo", profiles=shipped_profiles()))
    assert summarize(a)["avg_jct_hours"] <= prop["avg_jct_hours"]


def test_gpu_order_tune_places_in_the_order_it_is_given() -> None:
    """Priority order (the artifact's FIFO) vs largest first (the registered tune's)."""
    cluster = Cluster((Server("s0", 8, 24, 500.0),))
    inst = _inst(cluster, [("j0", "alexnet", 1), ("j1", "alexnet", 2)])
    by_priority = GpuOrderTune(MechanismOptions()).allocate(inst)
    largest_first = GpuOrderTune(MechanismOptions(), lambda g, r: (-g, r)).allocate(inst)
    # j0 first: 12 cores for it, the 2-GPU job's 24 do not fit and it reverts to 6.
    assert {ja.id: ja.cpus for ja in by_priority.jobs} == {"j0": 12, "j1": 6}
    # j1 first takes all 24 cores; j0 fits neither demand nor share, so j1 is reverted.
    assert {ja.id: ja.cpus for ja in largest_first.jobs} == {"j0": 3, "j1": 6}


# --------------------------------------------------------------------------- command line


def test_simulate_records_the_semantics_and_rejects_what_it_lacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["simulate", "--workload", "multi-gpu", "--jobs", "40", "--servers", "4", "--quiet"]
    out = tmp_path / "a"
    assert main([*base, "--semantics", "artifact", "-o", str(out)]) == 0
    assert json.loads((out / "summary.json").read_text())["semantics"] == "artifact"
    assert (
        main([*base, "--semantics", "artifact", "--mechanism", "opt", "-o", str(tmp_path / "b")])
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--semantics artifact" in err[0] and "'opt'" in err[0]
    with pytest.raises(SystemExit) as e:
        main([*base, "--semantics", "paper", "-o", str(tmp_path / "c")])
    assert e.value.code == 2


# --------------------------------------------------------------------------- sweeps


def test_a_sweep_cell_may_choose_the_semantics() -> None:
    from synergy_opt.sweep import SpecError, make_cell, simulate_cell, validate_cell

    base = {"servers": 2, "workload": "multi-gpu", "jobs": 30, "arrival_rate": 3.0}
    art = json.loads(simulate_cell(make_cell({**base, "semantics": "artifact"}))["summary.json"])
    dft = json.loads(simulate_cell(make_cell(base))["summary.json"])
    assert (art["semantics"], dft["semantics"]) == ("artifact", "default")
    with pytest.raises(SpecError, match="semantics.*'opt' has no GPU-order"):
        validate_cell(make_cell({**base, "semantics": "artifact", "mechanism": "opt"}))
    with pytest.raises(ValueError, match="unknown semantics 'paper'"):
        make_cell({**base, "semantics": "paper"})
