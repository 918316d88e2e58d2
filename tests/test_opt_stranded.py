"""Jobs that no placement holds at their floor: ``opt`` and ``opt-exact`` pass them over.

The round in ``tests/data/fuzz/stranded-cluster-rule.json`` came from a simulation the trace
fuzz drove (``simulate --fair-share cluster --mechanism opt``, seed 120): three 3-GPU
servers of 7 cores and 33.3 GB next to one 2-GPU server of 104 cores, 512 GB.  Under the
cluster-wide rule job j2 (3 GPUs, vae, split penalty 0.05) has a share of 34 cores and
167 GB, which no 3-GPU server holds (vae's smallest point asks 62.5 GB), and spread it
keeps 0.05 of its floor.  With j2 in the runnable set the super-machine had no solution,
``opt`` fell back to TUNE and both answered 0.0, while j4 and j5 could run; the
simulation stalled on such rounds.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synergy_opt.check import check_allocation
from synergy_opt.formulations.fast import stranded
from synergy_opt.io import load_instance
from synergy_opt.mechanisms import MechanismOptions, make_mechanism
from synergy_opt.mechanisms.opt import Opt
from synergy_opt.mechanisms.opt.stranded import runnable_at_floors
from synergy_opt.mechanisms.packing import select_runnable
from synergy_opt.profiles import shipped_profiles
from synergy_opt.types import Allocation, Cluster, Job, RoundInstance, Server
from tests.strategies import round_instances
from tests.test_exact import _fits_two_servers, _job_options, brute_force

FUZZ = Path(__file__).parent / "data" / "fuzz" / "stranded-cluster-rule.json"
REL = 1e-4


def run(name: str, inst: RoundInstance, **options: object) -> Allocation:
    return make_mechanism(name, MechanismOptions(**options)).allocate(inst)  # type: ignore[arg-type]


def test_the_fuzz_round_runs_the_jobs_that_can_run() -> None:
    inst = load_instance(FUZZ)
    assert [j.id for j in select_runnable(inst)] == ["j2", "j4"]
    tune = run("tune", inst)
    for name in ("opt", "opt-exact"):
        got = run(name, inst, time_limit_s=30)
        assert check_allocation(inst, got, fair_share=True) == [], name
        assert "j2" in got.unscheduled, name
        assert {j.id for j in got.jobs} == {"j4", "j5"}, name  # j5 takes j2's GPUs
        assert got.total_throughput > 1.0, name  # 0.0 before: TUNE's answer
        assert got.total_throughput >= tune.total_throughput
        assert any("passed over j2" in n for n in got.notes), name
        assert got.upper_bound is not None, name  # the bound of the set it schedules
        assert got.total_throughput >= got.upper_bound * (1 - REL), name  # proven here


def test_the_per_server_rule_strands_no_job() -> None:
    """Under the per-server rule j2's floor is read at a 3-GPU server's own share (7 cores,
    33.3 GB: 0, below vae's grid), so it is kept anywhere it fits."""
    inst = dataclasses.replace(load_instance(FUZZ), fair_share_rule="server")
    runnable, passed = runnable_at_floors(inst, select_runnable(inst))
    assert passed == [] and [j.id for j in runnable] == ["j2", "j4"]
    got = run("opt", inst)
    assert check_allocation(inst, got, fair_share=True) == []
    assert not any("passed over" in n for n in got.notes)


def test_passed_over_jobs_leave_their_gpus_to_later_jobs() -> None:
    inst = load_instance(FUZZ)
    assert [j.id for j in select_runnable(inst, frozenset({"j2"}))] == ["j4", "j5"]
    runnable, passed = runnable_at_floors(inst, select_runnable(inst))
    assert [j.id for j in passed] == ["j2"]
    assert [j.id for j in runnable] == ["j4", "j5"]
    ctx = Opt().context(inst)  # the routes' context reads the same set
    assert ctx is not None and [j.id for j in ctx.runnable] == ["j4", "j5"]


def _placeable_alone(inst: RoundInstance, job: Job) -> bool:
    """Some placement of ``job`` alone keeps its floor, by enumeration (<= 2 servers)."""
    return any(_fits_two_servers(inst, [o]) for o in _job_options(inst, job))


def _runnable_by_enumeration(inst: RoundInstance) -> list[Job]:
    """The runnable set with the untyped jobs no placement holds passed over, the
    selection re-run each time: the rule of ``stranded.py`` by enumeration."""
    passed: set[str] = set()
    while True:
        runnable = select_runnable(inst, frozenset(passed))
        new = {
            j.id
            for j in runnable
            if j.sensitivity_by_type is None and not _placeable_alone(inst, j)
        }
        if new <= passed:
            return runnable
        passed |= new


@st.composite
def skewed_rounds(draw: st.DrawFn) -> RoundInstance:
    """Two servers, one with few GPUs and many cores and GB, one with more GPUs and few:
    under the cluster-wide rule a job sized for the second often has a share only the
    first could hold (the generic rounds above strand no job in 300 draws)."""
    rich = Server(
        "rich",
        draw(st.integers(1, 2)),
        draw(st.integers(24, 104)),
        float(draw(st.integers(150, 512))),
    )
    poor = Server(
        "poor", draw(st.integers(2, 4)), draw(st.integers(1, 8)), float(draw(st.integers(8, 60)))
    )
    lib = shipped_profiles()
    jobs = []
    for k in range(draw(st.integers(1, 3))):
        g = draw(st.integers(1, poor.gpus))
        prof = lib.get(draw(st.sampled_from(lib.names())))
        pen = draw(st.sampled_from([1.0, 0.8, 0.3, 0.05]))
        jobs.append(Job(f"j{k}", g, prof.matrix(g), prof.name, None, pen))
    return RoundInstance("skewed", Cluster((rich, poor)), tuple(jobs))


@settings(max_examples=40, deadline=None)
@given(
    inst=st.one_of(
        round_instances(min_jobs=1, max_jobs=3, max_servers=2), skewed_rounds(), skewed_rounds()
    ),
    rule=st.sampled_from(["cluster", "cluster", "server"]),
)
def test_property_stranded_matches_enumeration(inst: RoundInstance, rule: str) -> None:
    """On <= 2 servers, under the cluster-wide rule, the jobs passed over are exactly those
    no placement of them alone keeps at their floor, and ``opt-exact`` equals the brute
    force over what remains.  Under the per-server rule none is passed over (the brute
    force reads one floor per job, exact only under the cluster-wide rule)."""
    inst = dataclasses.replace(inst, fair_share_rule=rule)
    runnable, passed = runnable_at_floors(inst, select_runnable(inst))
    if rule == "server":
        assert passed == [] and runnable == select_runnable(inst)
        return
    want = _runnable_by_enumeration(inst)
    assert [j.id for j in runnable] == [j.id for j in want]
    for job in passed:
        assert not _placeable_alone(inst, job)
    exact = run("opt-exact", inst, time_limit_s=20)
    assert check_allocation(inst, exact, fair_share=True) == []
    best = brute_force(inst, want)
    tune = run("tune", inst).total_throughput
    expected = tune if best is None else max(best, tune)
    assert exact.total_throughput == pytest.approx(expected)


def test_stranded_reads_every_server_the_job_fits_on() -> None:
    """j2 strands on the fuzz cluster; on one with a 3-GPU server of 48 cores and 200 GB
    beside the others it does not, and no job strands there."""
    inst = load_instance(FUZZ)
    j2 = next(j for j in inst.jobs if j.id == "j2")
    assert stranded(inst, j2, 1.0)
    servers = inst.cluster.servers
    roomy = dataclasses.replace(servers[0], name="roomy", cpus=48, mem_gb=200.0)
    bigger = dataclasses.replace(inst.cluster, servers=(*servers, roomy))
    inst2 = dataclasses.replace(inst, cluster=bigger)
    assert not stranded(inst2, j2, 1.0)
    assert runnable_at_floors(inst2, select_runnable(inst2))[1] == []
