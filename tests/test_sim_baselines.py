"""The multi-resource baselines mapped onto rounds: TETRIS (mechanism) and DRF (policy)."""

from __future__ import annotations

import numpy as np
import pytest

from synergy_opt.check import check_allocation
from synergy_opt.mechanisms import make_mechanism
from synergy_opt.profiles import shipped_profiles
from synergy_opt.sim import SimConfig, WorkloadSpec, generate_workload, paper_cluster, simulate
from synergy_opt.types import Cluster, Job, RoundInstance, Server

ABS_TOL = REL_TOL = 1e-6


def _job(jid: str, model: str, gpus: int = 1) -> Job:
    p = shipped_profiles().get(model)
    return Job(jid, gpus, p.matrix(gpus), model, p.category)


def test_tetris_packs_by_alignment_then_falls_back_to_fair_share() -> None:
    # One server, 3 GPUs, 18 cores, 500 GB: fair share 6 cores and 166.67 GB per GPU.
    # Alignment (demand . free, normalised by capacity) on the empty server:
    #   alexnet (12 cores, 125 GB): 1/3 + 12/18 + 125/500 = 1.25
    #   res18   ( 9 cores, 62.5 GB): 1/3 +  9/18 + 62.5/500 = 0.958
    # so alexnet goes first although res18 ranks higher; res18's best 9 cores no longer fit
    # (6 left), so it falls back to its GPU-proportional 6 cores / 166.67 GB.
    cluster = Cluster((Server("s0", 3, 18, 500.0),))
    inst = RoundInstance("t", cluster, (_job("r", "res18"), _job("a", "alexnet")))
    alloc = make_mechanism("tetris").allocate(inst)
    got = {ja.id: (ja.cpus, ja.mem_gb) for ja in alloc.jobs}
    assert got["a"] == (12, 125.0)
    assert got["r"][0] == 6 and got["r"][1] == pytest.approx(500 / 3, rel=REL_TOL, abs=ABS_TOL)
    assert check_allocation(inst, alloc, fair_share=True) == []
    # Packing ignores priority: a cheap gnmt job (1 core) still fits by alignment after
    # alexnet and takes a core, so the higher-ranked res18's fair share (6) no longer fits.
    inst = RoundInstance(
        "t", cluster, (_job("r", "res18"), _job("a", "alexnet"), _job("g", "gnmt"))
    )
    alloc = make_mechanism("tetris").allocate(inst)
    assert {ja.id for ja in alloc.jobs} == {"a", "g"} and alloc.unscheduled == ("r",)
    assert check_allocation(inst, alloc) == []


def test_tetris_spreads_a_job_bigger_than_any_server() -> None:
    cluster = Cluster((Server("s0", 8, 24, 500.0), Server("s1", 8, 24, 500.0)))
    inst = RoundInstance("t", cluster, (_job("big", "res50", 12), _job("x", "gnmt")))
    alloc = make_mechanism("tetris").allocate(inst)
    assert {ja.id for ja in alloc.jobs} == {"big", "x"}
    assert check_allocation(inst, alloc, fair_share=True) == []


def test_tetris_falls_back_to_a_spread_the_servers_can_feed() -> None:
    """Under the cluster-wide rule an 8-GPU job's share (124 cores) fits no 8-GPU server (8
    cores); TETRIS's first-fit GPU-proportional fallback left it waiting in every round,
    where PROPORTIONAL spreads it over the 2-GPU servers of 104 cores (a simulation that
    could never finish under TETRIS alone: bench/fuzz_traces.py)."""
    rich = tuple(Server(f"r{i}", 2, 104, 512.0) for i in range(5))
    cluster = Cluster(
        (*rich, Server("one", 1, 1, 8.0), *(Server(f"b{i}", 8, 8, 500.0) for i in range(3)))
    )
    inst = RoundInstance("t", cluster, (_job("big", "deepspeech", 8),), "cluster")
    for name in ("proportional", "tetris"):
        alloc = make_mechanism(name).allocate(inst)
        assert [ja.id for ja in alloc.jobs] == ["big"], name
        assert alloc.jobs[0].cpus >= inst.fair_share(inst.jobs[0])[0], name
        assert check_allocation(inst, alloc, fair_share=True) == [], name


@pytest.mark.parametrize("kind", ("single-gpu", "multi-gpu"))
def test_tetris_and_drf_run_a_loaded_trace_cleanly(kind: str) -> None:
    trace = generate_workload(
        WorkloadSpec(kind=kind, jobs=50, arrival_rate_per_h=3.0),
        shipped_profiles(),
        np.random.default_rng(2),
    )
    cfg = SimConfig(paper_cluster(servers=2), stop_after_window=False, check_rounds=True)
    for mech, policy in (("tetris", "fifo"), ("tune", "drf"), ("tetris", "drf")):
        res = simulate(cfg, trace, mech, policy, profiles=shipped_profiles())
        assert all(j.finish_s is not None for j in res.jobs), (mech, policy)
