"""The OPT models: names in sync with formulations/*.md, worked optima, fast path = reference.

Every fast-path reduction (fair-share restriction, dominance, classes, matrix build) is
checked against the Pyomo reference MIP on every shipped instance and on generated rounds;
both back-ends must agree.  Tolerances are the project's ``ABS_TOL = REL_TOL = 1e-6``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pyomo.environ as pyo
import pytest
from hypothesis import given, settings

from synergy_opt.formulations import counting, counting_fast, fast, joint, placement, super_machine
from synergy_opt.io import load_instance
from synergy_opt.mechanisms.packing import select_runnable
from synergy_opt.profiles import shipped_profiles
from synergy_opt.solve import (
    BACKENDS,
    NotOptimalError,
    SolveResult,
    TerminationStatus,
    require_optimal,
    solve_matrix,
    solve_pyomo,
)
from synergy_opt.types import Cluster, Job, RoundInstance, Server, ThroughputMatrix
from tests.conftest import ROOT, all_instances, tiny_instances
from tests.strategies import round_instances

ABS_TOL = REL_TOL = 1e-6
SHIPPED = all_instances()
TINY = tiny_instances()


def approx(x: float) -> Any:
    return pytest.approx(x, rel=REL_TOL, abs=ABS_TOL)


def optimal(res: SolveResult) -> float:
    assert res.status is TerminationStatus.OPTIMAL, res
    assert res.objective is not None
    return res.objective


def two_job_round() -> RoundInstance:
    """One server (2 GPUs, 6 cores, 100 GB); fair share 3 cores, 50 GB each.

    a is CPU-sensitive (1.0 at 3 cores, 1.8 at 5), b is not (1.0 from 1 core).  Moving two
    cores from b to a gives 1.8 + 1.0 = 2.8, the optimum; 3 + 3 gives only 2.0.
    """
    a = ThroughputMatrix.from_lists([1, 3, 5], [50.0], [[0.3], [1.0], [1.8]])
    b = ThroughputMatrix.from_lists([1, 3, 5], [50.0], [[1.0], [1.0], [1.0]])
    return RoundInstance(
        "two", Cluster((Server("s0", 2, 6, 100.0),)), (Job("a", 1, a), Job("b", 1, b))
    )


# --------------------------------------------------------------------------- names vs .md


def md_names(name: str) -> set[str]:
    text = (ROOT / "formulations" / f"{name}.md").read_text(encoding="utf-8")
    return set(re.findall(r"^### `(\w+)`", text, flags=re.MULTILINE))


def model_names(m: pyo.ConcreteModel) -> set[str]:
    return {
        c.local_name
        for c in m.component_objects((pyo.Var, pyo.Constraint, pyo.Objective), descend_into=False)
    }


@pytest.mark.parametrize(
    ("md", "build"),
    [
        ("super_machine", lambda i: super_machine.build_super_machine(i)),
        ("placement", lambda i: placement.build_placement(i, [(j, 1, 10.0) for j in i.jobs])),
        ("joint", lambda i: joint.build_joint(i)),
        ("counting", lambda i: counting.build_counting(i)),
    ],
)
def test_component_names_match_markdown(md: str, build: Any) -> None:
    extra = typed_only_names() if md == "super_machine" else set()
    assert model_names(build(two_job_round())) == md_names(md) - extra


def typed_only_names() -> set[str]:
    """Headings of super_machine.md's GPU-types section: components only the typed model has."""
    text = (ROOT / "formulations" / "super_machine.md").read_text(encoding="utf-8")
    section = text.split("## GPU types", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^### `(\w+)`", section, flags=re.MULTILINE))


def two_type_round() -> RoundInstance:
    """two_job_round's jobs on a v100 and a k80 server, b with a slower k80 matrix."""
    base = two_job_round()
    a, b = base.jobs
    slow = ThroughputMatrix.from_lists([1, 3, 5], [50.0], [[0.5], [0.5], [0.5]])
    servers = (Server("s0", 2, 6, 100.0, "v100"), Server("s1", 2, 6, 100.0, "k80"))
    b2 = Job("b", 2, b.sensitivity, sensitivity_by_type=(("k80", slow),))
    return RoundInstance("two-typed", Cluster(servers), (a, b2))


def test_typed_super_machine_names_match_markdown() -> None:
    """The typed model has every heading of super_machine.md, the GPU-types one included."""
    m = super_machine.build_typed_super_machine(two_type_round())
    assert typed_only_names() == {"eqT_gpu_capacity"}
    assert model_names(m) == md_names("super_machine")


def test_paper_names_present() -> None:
    names = model_names(super_machine.build_super_machine(two_job_round()))
    assert {
        "eq1_weighted_throughput",
        "eq2_cpu_capacity",
        "eq3_mem_capacity",
        "eq4_one_config_per_job",
        "eq5_fair_share_floor",
    } <= names


def test_model_data_is_plain_and_deterministic() -> None:
    inst = two_job_round()
    for mod in (super_machine, joint, counting):
        d1, d2 = mod._model_data(inst), mod._model_data(inst)
        assert d1 == d2
        assert "pyomo" not in repr(d1)
    d = super_machine._model_data(inst)
    assert d["C"] == 6 and d["M"] == 100.0
    assert d["fair"] == {0: 1.0, 1: 1.0}


def test_binary_and_relaxed_domains() -> None:
    inst = two_job_round()
    assert all(v.is_binary() for v in super_machine.build_super_machine(inst).y.values())
    assert not any(
        v.is_integer() for v in super_machine.build_super_machine(inst, relax=True).y.values()
    )


# --------------------------------------------------------------------------- worked optima


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_job_round_optimum(backend: str) -> None:
    inst = two_job_round()
    res = solve_pyomo(super_machine.build_super_machine(inst), backend)
    assert optimal(res) == approx(2.8)
    picks = super_machine.chosen_configs(super_machine._model_data(inst), dict(res.values))
    data = super_machine._model_data(inst)
    assert [data["cpus"][j, q] for j, q in sorted(picks.items())] == [5, 1]
    assert res.dual_bound == approx(2.8)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("path", TINY, ids=lambda p: p.stem)
def test_tiny_expected_optima(path: Path, backend: str) -> None:
    inst = load_instance(path)
    expected = json.loads(path.read_text(encoding="utf-8"))["expected"]
    run = select_runnable(inst)
    sm = solve_pyomo(super_machine.build_super_machine(inst, run), backend)
    assert optimal(sm) == approx(expected["super_machine_optimum"])
    ex = solve_pyomo(joint.build_joint(inst, run), backend)
    assert optimal(ex) == approx(expected["exact_optimum"])
    k = fast.build_super_machine_fast(inst, run)
    assert optimal(solve_matrix(k.matrix, backend)) == approx(expected["super_machine_optimum"])


def test_require_optimal_raises() -> None:
    bad = SolveResult(TerminationStatus.TIME_LIMIT, None, 3.0, None, 1.0, "highs")
    with pytest.raises(NotOptimalError, match="time_limit"):
        require_optimal(bad, "super-machine")


@pytest.mark.parametrize("backend", BACKENDS)
def test_infeasible_status(backend: str) -> None:
    """Two 1-GPU jobs, one 1-GPU server: (pl2) cannot hold."""
    w = ThroughputMatrix.from_lists([1], [1.0], [[1.0]])
    inst = RoundInstance(
        "inf",
        Cluster((Server("s0", 1, 4, 10.0), Server("s1", 1, 4, 10.0))),
        (Job("a", 1, w), Job("b", 1, w), Job("c", 1, w)),
    )
    res = solve_pyomo(placement.build_placement(inst, [(j, 1, 1.0) for j in inst.jobs]), backend)
    assert res.status in (TerminationStatus.INFEASIBLE, TerminationStatus.INFEASIBLE_OR_UNBOUNDED)
    assert not res.has_solution


@settings(max_examples=25)
@given(inst=round_instances(max_jobs=6, max_servers=3, typed=True))
def test_property_super_machine_always_feasible(inst: RoundInstance) -> None:
    """Fair points fit the pooled totals (the below-grid point covers jobs worth 0 there)."""
    k = fast.build_super_machine_fast(inst, select_runnable(inst))
    assert solve_matrix(k.matrix).status is TerminationStatus.OPTIMAL


# --------------------------------------------------------------------------- fast path


def test_dominance_and_fair_restriction_on_a_profile() -> None:
    """res18 at 1 GPU: only 3+ cores reach 1.0 and memory above 62.5 GB never helps."""
    w = shipped_profiles().get("res18").matrix(1)
    pts = fast.useful_points(w, 1.0)
    assert [(c, m) for c, m, _ in pts] == [(3, 62.5), (4, 62.5), (5, 62.5), (6, 62.5), (9, 62.5)]
    assert [tp for _, _, tp in pts] == [1.0, 1.3, 1.53, 1.75, 2.4]
    assert len(fast.useful_points(w, 1.0, prune=False)) == 7 * 4


def test_classes_group_identical_jobs() -> None:
    lib = shipped_profiles()
    jobs = (
        Job("a", 1, lib.get("res18").matrix(1)),
        Job("b", 2, lib.get("res18").matrix(2)),
        Job("c", 1, lib.get("res18").matrix(1)),
        Job("d", 1, lib.get("res18").matrix(1), split_penalty=0.5),
    )
    inst = RoundInstance("c", Cluster((Server("s0", 8, 24, 500.0),)), jobs)
    classes = fast.make_classes(inst, jobs)
    assert [[j.id for j in cl.members] for cl in classes] == [["a", "c"], ["b"], ["d"]]


def fast_variants(inst: RoundInstance, jobs: list[Job], backend: str) -> list[float]:
    out = []
    for agg in (True, False):
        for prune in (True, False):
            k = fast.build_super_machine_fast(inst, jobs, aggregate=agg, prune=prune)
            out.append(optimal(solve_matrix(k.matrix, backend)))
    return out


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_fast_equals_reference_on_shipped(path: Path) -> None:
    inst = load_instance(path)
    run = select_runnable(inst)
    ref = optimal(solve_pyomo(super_machine.build_super_machine(inst, run), "highs"))
    for backend in BACKENDS:
        assert fast_variants(inst, run, backend) == [approx(ref)] * 4


@settings(max_examples=25)
@given(inst=round_instances(max_jobs=6, max_servers=3, typed=True))
def test_property_fast_equals_reference(inst: RoundInstance) -> None:
    run = select_runnable(inst)
    ref = solve_pyomo(super_machine.build_super_machine(inst, run), "highs")
    k = fast.build_super_machine_fast(inst, run)
    for backend in BACKENDS:
        res = solve_matrix(k.matrix, backend)
        assert (res.status is TerminationStatus.OPTIMAL) == (
            ref.status is TerminationStatus.OPTIMAL
        )
        if ref.status is TerminationStatus.OPTIMAL:
            assert optimal(res) == approx(optimal(ref))


@settings(max_examples=20)
@given(inst=round_instances(max_jobs=6, max_servers=3))
def test_property_backends_agree_and_lp_bounds_mip(inst: RoundInstance) -> None:
    run = select_runnable(inst)
    mip = [solve_pyomo(super_machine.build_super_machine(inst, run), b) for b in BACKENDS]
    lp = [
        solve_pyomo(super_machine.build_super_machine(inst, run, relax=True), b) for b in BACKENDS
    ]
    if mip[0].status is not TerminationStatus.OPTIMAL:
        assert mip[1].status is not TerminationStatus.OPTIMAL
        return
    assert optimal(mip[1]) == approx(optimal(mip[0]))
    assert optimal(lp[1]) == approx(optimal(lp[0]))
    assert optimal(lp[0]) >= optimal(mip[0]) - ABS_TOL
    klp = fast.build_super_machine_fast(inst, run, integer=False)
    fast_lp = optimal(solve_matrix(klp.matrix, "highs"))
    assert optimal(lp[0]) + ABS_TOL >= fast_lp >= optimal(mip[0]) - ABS_TOL


@settings(max_examples=15)
@given(inst=round_instances(max_jobs=5, max_servers=2, typed=True))
def test_property_joint_below_super_machine(inst: RoundInstance) -> None:
    run = select_runnable(inst)
    sm = solve_pyomo(super_machine.build_super_machine(inst, run), "highs")
    ex = solve_pyomo(joint.build_joint(inst, run), "highs", time_limit=20)
    if ex.status is TerminationStatus.OPTIMAL and sm.status is TerminationStatus.OPTIMAL:
        assert optimal(ex) <= optimal(sm) + ABS_TOL


#: Rows of the counting model built only where a slot's points differ in their servers.
TYPED_ONLY_COUNTING_ROWS = (
    "cnt_part_in_variant",
    "cnt_variant_gpus",
    "cnt_variant_cpus",
    "cnt_variant_mem",
)
#: Built only where a spread job's floor depends on its split (mixed shapes, per-server
#: shares; the last three only where a server has fractional cores per GPU):
#: tests/test_counting_splits.py checks them non-empty there.
SPLIT_ONLY_COUNTING_COMPONENTS = (
    "v",
    "cnt_split_one",
    "cnt_split_gpus",
    "cnt_split_floor",
    "fc",
    "cnt_share_cores",
    "cnt_split_cores",
)


def test_counting_md_names_every_component_of_a_spreading_round() -> None:
    """A round with spread slots and identical servers builds every row family (but
    the spread-variant rows, typed rounds only: tests/test_typed_slots.py)."""
    from synergy_opt.generate import family_round

    inst = family_round("multi-gpu", 32, seed=1)
    m = counting.build_counting(inst, select_runnable(inst), symmetry=True)
    assert model_names(m) == md_names("counting")
    assert all(
        len(getattr(m, name)) > 0
        for name in md_names("counting")
        if name
        not in (
            "eq1_weighted_throughput",
            *TYPED_ONLY_COUNTING_ROWS,
            *SPLIT_ONLY_COUNTING_COMPONENTS,
        )
    )


@settings(max_examples=15)
@given(inst=round_instances(max_jobs=4, max_servers=2, typed=True))
def test_property_counting_equals_joint(inst: RoundInstance) -> None:
    """The retired joint model stays as a cross-check: same optimum on tiny rounds."""
    run = select_runnable(inst)
    ex = solve_pyomo(joint.build_joint(inst, run), "highs", time_limit=20)
    cnt = counting_fast.solve_counting(inst, run, staged=False, rel_gap=1e-9, time_limit=20)
    assert (ex.status is TerminationStatus.OPTIMAL) == (cnt.status is TerminationStatus.OPTIMAL)
    if ex.status is TerminationStatus.OPTIMAL:
        assert cnt.objective == approx(optimal(ex))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(3))
def test_server_class_mip_equals_joint_for_single_gpu_jobs(seed: int, backend: str) -> None:
    """1-GPU jobs cannot spread, so the aggregated server-class MIP is the joint model."""
    import random

    rng = random.Random(seed)
    lib = shipped_profiles()
    names = ("res18", "alexnet", "m5", "gnmt", "shufflenet")
    jobs = tuple(Job(f"j{k}", 1, lib.get(rng.choice(names)).matrix(1)) for k in range(7))
    cl = Cluster((Server("s0", 4, 12, 250.0), Server("s1", 4, 12, 250.0)))
    inst = RoundInstance("sc", cl, jobs)
    run = select_runnable(inst)
    classes = fast.make_classes(inst, run)
    sc = fast.build_server_classes(inst, classes, [(0, 1)] * len(classes))
    ex = solve_pyomo(joint.build_joint(inst, run), backend)
    assert optimal(solve_matrix(sc.matrix, backend)) == approx(optimal(ex))


# --------------------------------------------------------------------------- placement


def placement_round(servers: int, seed: int) -> tuple[RoundInstance, list[tuple[Job, int, float]]]:
    """Shipped models on homogeneous servers, each job at its super-machine point."""
    import random

    rng = random.Random(seed)
    lib = shipped_profiles()
    names = ("res18", "alexnet", "m5", "gnmt", "transformer", "shufflenet", "res50")
    jobs = tuple(
        Job(f"j{k}", g, lib.get(n).matrix(g), model=n)
        for k, (n, g) in enumerate(
            (rng.choice(names), rng.choice((1, 1, 1, 2, 4))) for _ in range(3 * servers)
        )
    )
    inst = RoundInstance(
        "pl", Cluster(tuple(Server(f"s{i}", 8, 24, 500.0) for i in range(servers))), jobs
    )
    run = select_runnable(inst)
    k = fast.build_super_machine_fast(inst, run)
    res = solve_matrix(k.matrix)
    demands = []
    for cl, picks in zip(k.classes, k.picks(res.x), strict=True):
        members = iter(cl.members)
        for (c, m, _), n in picks:
            demands.extend((next(members), c, m) for _ in range(n))
    return inst, demands


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("backend", BACKENDS)
def test_placement_vertex_splits_at_most_3s(seed: int, backend: str) -> None:
    servers = 2 + seed % 4
    inst, demands = placement_round(servers, seed)
    res = solve_pyomo(placement.build_placement(inst, demands), backend)
    if res.status is TerminationStatus.INFEASIBLE:  # per-server rows can bind; no bound to test
        return
    optimal(res)
    assert len(placement.split_jobs(dict(res.values))) <= 3 * servers
    # The fast (demand-class) LP has the same optimum.
    by_key: dict[tuple[Any, ...], list[Job]] = {}
    for job, c, m in demands:
        by_key.setdefault((fast.class_key(job), c, m), []).append(job)
    dcs = [
        fast.DemandClass(tuple(js), js[0].gpus, key[1], key[2], tuple(range(servers)))
        for key, js in by_key.items()
    ]
    pm = fast.build_placement_fast(inst, dcs)
    assert optimal(solve_matrix(pm.matrix, backend)) == approx(optimal(res))


@settings(max_examples=25)
@given(inst=round_instances(max_jobs=6, max_servers=3, typed=True))
def test_property_placement_vertex_splits_at_most_3s(inst: RoundInstance) -> None:
    run = select_runnable(inst)
    k = fast.build_super_machine_fast(inst, run)
    res = solve_matrix(k.matrix)
    demands = []
    for cl, picks in zip(k.classes, k.picks(res.x), strict=True):
        members = iter(cl.members)
        for (c, m, _), n in picks:
            demands.extend((next(members), c, m) for _ in range(n))
    for backend in BACKENDS:
        pl = solve_pyomo(placement.build_placement(inst, demands), backend)
        if pl.status is TerminationStatus.OPTIMAL:
            assert len(placement.split_jobs(dict(pl.values))) <= 3 * len(inst.cluster.servers)


def test_placement_respects_gpu_types() -> None:
    w = ThroughputMatrix.from_lists([1], [1.0], [[1.0]])
    cl = Cluster((Server("s0", 2, 8, 10.0, "a100"), Server("s1", 2, 8, 10.0, "v100")))
    inst = RoundInstance("t", cl, (Job("a", 1, w, gpu_types=("v100",)), Job("b", 1, w)))
    m = placement.build_placement(inst, [(inst.jobs[0], 1, 1.0), (inst.jobs[1], 1, 1.0)])
    assert (0, 0) not in m.x and (0, 1) in m.x
    res = solve_pyomo(m, "highs")
    assert res.values[("x", (0, 1))] == approx(1.0)


def test_node_limit_is_reported_as_a_limit_not_an_error() -> None:
    """A MIP stopped at its node limit (HiGHS: "Solution limit reached") is a deliberate
    stop with an incumbent, like a time limit; it used to come back as ``error``."""
    import numpy as np

    from synergy_opt.matrix import matrix_model

    rng = np.random.default_rng(1)
    w = rng.integers(50, 100, (4, 40))
    cols = [[(r, float(w[r, i])) for r in range(4)] for i in range(40)]
    value = (w.sum(0) + rng.integers(0, 10, 40)).astype(float)
    caps = [float(w[r].sum() // 2) for r in range(4)]
    mm = matrix_model(
        cols, value, [1.0] * 40, [True] * 40, [0.0] * 4, caps, ["c"] * 4, maximize=True, name="k"
    )
    res = solve_matrix(mm, "highs", node_limit=1, highs_options={"mip_heuristic_effort": 0.0})
    assert res.status is TerminationStatus.LIMIT
    assert res.x is not None and res.objective is not None
    assert res.dual_bound is not None and res.dual_bound >= res.objective
