"""The typed super-machine (GPU-type choice per job) and its use by OPT.

Over generated typed rounds (``generate --gpu-types``): the Pyomo reference and the matrix
fast path have the same optimum (1e-6); typed super-machine >= opt >= tune on the same
scheduled set, and >= the exact optimum where ``opt-exact`` is exact (two types); every
mechanism passes the checker; a one-type cluster gives exactly the plain model's answers.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synergy_opt.check import check_allocation, fair_share_floor
from synergy_opt.formulations import fast, super_machine, typed_fast
from synergy_opt.generate import MULTI_GPU_MIX, GenerateSpec, generate_instance
from synergy_opt.mechanisms import MechanismOptions, make_mechanism, mechanism_names
from synergy_opt.mechanisms.packing import select_runnable
from synergy_opt.solve import SolveResult, TerminationStatus, solve_matrix, solve_pyomo
from synergy_opt.types import Cluster, Job, PlacementPart, RoundInstance, Server, ThroughputMatrix
from tests.strategies import matrices
from tests.test_exact import _fits_two_servers

ABS_TOL = REL_TOL = 1e-6
THREE_TYPES = (("v100", 8), ("p100", 4), ("k80", 4))
TWO_TYPES = (("v100", 8), ("k80", 8))


def approx(x: float) -> Any:
    return pytest.approx(x, rel=REL_TOL, abs=ABS_TOL)


def optimal(res: SolveResult) -> float:
    assert res.status is TerminationStatus.OPTIMAL, res
    assert res.objective is not None
    return res.objective


#: Two server shapes (12 and 24 cores per 4 GPUs): the per-server rule's shares differ.
MIXED_SHAPES = ((2, 4, 12, 250.0), (2, 4, 24, 500.0))


def typed_round(
    seed: int,
    types: tuple[tuple[str, int], ...] = THREE_TYPES,
    rule: str | None = None,
    load: float = 1.2,
    mixed: bool = False,
) -> RoundInstance:
    """16 GPUs on 4-GPU servers, the paper's multi-GPU mix, split penalties 0.8-0.95."""
    return generate_instance(
        GenerateSpec(
            server_shapes=MIXED_SHAPES if mixed else None,
            servers=4,
            gpus_per_server=4,
            cpus_per_server=12,
            mem_per_server_gb=250.0,
            jobs=None,
            gpu_load=load,
            gpu_mix=tuple(MULTI_GPU_MIX.items()),
            seed=seed,
            split_penalty=(0.8, 0.95),
            gpu_types=types,
            fair_share_rule=rule,
        )
    )


#: (seed, rule, mixed shapes): the rules differ only on mixed shapes.
CASES = [(seed, rule, True) for seed in range(4) for rule in ("server", "cluster")] + [
    (seed, "server", False) for seed in range(4)
]


def typed_optimum(inst: RoundInstance, jobs: list[Job]) -> float:
    return optimal(solve_matrix(typed_fast.build_typed_super_machine_fast(inst, jobs).matrix))


@pytest.mark.parametrize(("seed", "rule", "mixed"), CASES)
def test_fast_path_equals_pyomo_reference(seed: int, rule: str, mixed: bool) -> None:
    inst = typed_round(seed, rule=rule, mixed=mixed)
    run = select_runnable(inst)
    assert typed_fast.is_typed_round(inst, run)
    ref = optimal(solve_pyomo(super_machine.build_typed_super_machine(inst, run), "highs"))
    assert typed_optimum(inst, run) == approx(ref)
    unpruned = typed_fast.build_typed_super_machine_fast(inst, run, prune=False)
    assert optimal(solve_matrix(unpruned.matrix)) == approx(ref)


def test_row_names_name_the_pools() -> None:
    inst = typed_round(0)
    k = typed_fast.build_typed_super_machine_fast(inst, select_runnable(inst))
    pools = [n for n in k.matrix.row_names if not n.startswith("eq4[")]
    labels = ["v100", "p100", "k80", "v100+p100", "v100+k80", "p100+k80", "*"]
    assert pools == [f"{e}[{t}]" for t in labels for e in ("eqT", "eq2", "eq3")]


@pytest.mark.parametrize(("seed", "rule", "mixed"), CASES)
def test_typed_super_machine_bounds_opt_and_opt_beats_tune(
    seed: int, rule: str, mixed: bool
) -> None:
    inst = typed_round(seed, rule=rule, mixed=mixed)
    run = select_runnable(inst)
    ids = {j.id for j in run}
    bound = typed_optimum(inst, run)
    opt = make_mechanism("opt").allocate(inst)
    assert check_allocation(inst, opt, fair_share=True) == []
    for name in ("tune", "tune-typed"):
        other = make_mechanism(name).allocate(inst)
        if {j.id for j in other.jobs} == ids:
            assert other.total_throughput <= bound + ABS_TOL, name
        assert opt.total_throughput >= other.total_throughput - ABS_TOL, name
    if {j.id for j in opt.jobs} == ids:
        assert opt.total_throughput <= bound + ABS_TOL
        # the typed bound, or tighter where the counting LP is a valid bound too
        assert opt.upper_bound is not None
        assert opt.total_throughput - ABS_TOL <= opt.upper_bound <= bound * (1 + 1e-4)
    else:
        assert opt.upper_bound is None


@pytest.mark.parametrize("seed", range(4))
def test_typed_super_machine_bounds_the_exact_optimum(seed: int) -> None:
    """On two types (two matrices per job) opt-exact is the exact optimum: never above."""
    inst = typed_round(seed, TWO_TYPES, load=0.9)
    run = select_runnable(inst)
    exact = make_mechanism("opt-exact", MechanismOptions(time_limit_s=20)).allocate(inst)
    assert check_allocation(inst, exact, fair_share=True) == []
    if {j.id for j in exact.jobs} == {j.id for j in run}:
        assert exact.total_throughput <= typed_optimum(inst, run) + ABS_TOL


@pytest.mark.parametrize("name", mechanism_names())
def test_every_mechanism_passes_the_checker(name: str) -> None:
    keeps = name in mechanism_names(keeps_fair_share=True)
    for seed in (1, 2):
        inst = typed_round(seed, mixed=seed == 2)
        alloc = make_mechanism(name, MechanismOptions(time_limit_s=20)).allocate(inst)
        assert check_allocation(inst, alloc, fair_share=keeps) == [], (name, seed)
        assert alloc.jobs


def spanning_round(penalty: float) -> tuple[RoundInstance, ThroughputMatrix]:
    """One 2-GPU job and two 1-GPU servers of different types: it must span types."""
    v = ThroughputMatrix.from_lists([2, 4], [50.0], [[1.0], [2.0]])
    p = ThroughputMatrix.from_lists([2, 4], [50.0], [[0.8], [1.5]])
    k = ThroughputMatrix.from_lists([2, 4], [50.0], [[0.5], [0.6]])
    servers = (
        Server("a", 1, 4, 100.0, "v100"),
        Server("b", 1, 4, 100.0, "p100"),
        Server("c", 1, 4, 100.0, "k80"),
    )
    job = Job("j", 2, v, split_penalty=penalty, sensitivity_by_type=(("p100", p), ("k80", k)))
    return RoundInstance("span", Cluster(servers), (job,), "cluster"), p


def test_spanning_types_is_valued_at_the_second_best_type() -> None:
    """The job realises min(W_v100, W_p100) = W_p100 on the v100 and p100 servers (the
    best pair): the typed model credits exactly that times the penalty, and opt reaches it."""
    inst, p = spanning_round(0.9)
    bound = typed_optimum(inst, list(inst.jobs))
    assert bound == approx(0.9 * p.lookup(8, 100.0))
    opt = make_mechanism("opt").allocate(inst)
    assert check_allocation(inst, opt, fair_share=True) == []
    assert opt.total_throughput <= bound + ABS_TOL
    assert opt.upper_bound == approx(bound)
    best_pair = typed_fast.second_best_matrix(tuple(inst.usable_matrices(inst.jobs[0])))
    assert best_pair.lookup(4, 50.0) == 1.5


@pytest.mark.parametrize("seed", range(6))
def test_one_type_cluster_gives_todays_model(seed: int) -> None:
    inst = typed_round(seed, (("v100", 16),), rule=("server", "cluster")[seed % 2])
    run = select_runnable(inst)
    assert not typed_fast.is_typed_round(inst, run)
    typed = super_machine.build_typed_super_machine(inst, run)
    plain = super_machine.build_super_machine(inst, run)
    assert typed.name == plain.name == "super_machine"
    assert typed.eq2_cpu_capacity.body.to_string() == plain.eq2_cpu_capacity.body.to_string()
    a = typed_fast.super_machine_matrix(inst, run)
    b = fast.build_super_machine_fast(inst, run).matrix
    for field in ("cost", "col_upper", "row_lower", "row_upper", "a_start", "a_index", "a_value"):
        assert np.array_equal(getattr(a, field), getattr(b, field)), field
    assert a.row_names == b.row_names
    ref = optimal(solve_pyomo(plain, "highs"))
    assert optimal(solve_matrix(a)) == approx(ref)


def test_one_type_with_another_matrix_is_typed() -> None:
    """One GPU type whose per-type matrix differs from the reference: the plain model would
    read the wrong matrix, so the typed model (one pool) is used."""
    slow = ThroughputMatrix.from_lists([2, 4], [50.0], [[0.5], [0.6]])
    ref = ThroughputMatrix.from_lists([2, 4], [50.0], [[1.0], [2.0]])
    inst = RoundInstance(
        "k80-only",
        Cluster((Server("s0", 2, 8, 100.0, "k80"),)),
        (Job("j", 1, ref, sensitivity_by_type=(("k80", slow),)),),
    )
    assert typed_fast.is_typed_round(inst)
    assert typed_optimum(inst, list(inst.jobs)) == approx(0.6)
    ref_opt = solve_pyomo(super_machine.build_typed_super_machine(inst), "highs")
    assert optimal(ref_opt) == approx(0.6)


def test_opt_chooses_types_from_the_typed_model() -> None:
    """On a 3-type 128-GPU multi-GPU round, the typed model's type choice fixes every
    runnable job to one type within each type's GPUs, and OPT's routes on that round beat
    both TUNE and tune-typed (no fallback note)."""
    from synergy_opt.mechanisms.opt.typed import fix_types

    spec = GenerateSpec(
        gpu_load=1.2,
        gpu_types=(("v100", 48), ("p100", 48), ("k80", 32)),
        seed=2,
        gpu_mix=tuple(MULTI_GPU_MIX.items()),
    )
    inst = generate_instance(spec)
    run = select_runnable(inst)
    k = typed_fast.build_typed_super_machine_fast(inst, run)
    res = solve_matrix(k.matrix)
    assert res.x is not None
    mod = fix_types(inst, k, k.picks(res.x))
    assert mod is not None
    ids = {j.id for j in run}
    used: dict[str, int] = {}
    for j in mod.jobs:
        if j.id in ids:
            assert j.gpu_types is not None and len(j.gpu_types) == 1, j.id
            used[j.gpu_types[0]] = used.get(j.gpu_types[0], 0) + j.gpus
    assert used and all(used[t] <= g for t, g in spec.gpu_types if t in used)
    opt = make_mechanism("opt").allocate(inst)
    assert check_allocation(inst, opt, fair_share=True) == []
    assert opt.notes == ()
    best_tune = max(
        make_mechanism(n).allocate(inst).total_throughput for n in ("tune", "tune-typed")
    )
    assert opt.total_throughput > best_tune + 1.0
    assert opt.total_throughput <= opt.upper_bound + ABS_TOL


def test_type_sets_beyond_four_types_keep_single_types_and_the_cluster() -> None:
    """Up to four types every set gets rows (2^K - 1); beyond, each type and ``*`` only."""
    pools = tuple(typed_fast.Pool(f"t{i}", 4, 12, 100.0) for i in range(5))
    assert len(typed_fast.type_sets(pools[:4])) == 15
    five = typed_fast.type_sets(pools)
    assert [ts.label for ts in five] == ["t0", "t1", "t2", "t3", "t4", "*"]
    assert five[-1].pool == typed_fast.Pool("*", 20, 60, 500.0)


@st.composite
def two_type_rounds(draw: st.DrawFn) -> RoundInstance:
    """Two servers of different GPU types; 1-3 jobs with a per-type matrix on one type,
    possibly on other grid axes than the reference matrix (the union axes matter)."""
    servers = tuple(
        Server(
            f"s{i}",
            draw(st.integers(1, 4)),
            draw(st.integers(2, 24)),
            float(draw(st.integers(20, 300))),
            t,
        )
        for i, t in enumerate(("a100", "v100"))
    )
    total = sum(s.gpus for s in servers)
    jobs = []
    for k in range(draw(st.integers(1, 3))):
        g = draw(st.integers(1, min(total, 4)))
        typed = ((draw(st.sampled_from(["a100", "v100"])), draw(matrices())),)
        pen = draw(st.sampled_from([1.0, 0.8]))
        jobs.append(Job(f"j{k}", g, draw(matrices()), split_penalty=pen, sensitivity_by_type=typed))
    rule = draw(st.sampled_from(["server", "cluster"]))
    return RoundInstance("two-types", Cluster(servers), tuple(jobs), rule)


def brute_force_typed(inst: RoundInstance, jobs: list[Job]) -> float | None:
    """Best total over every split of each job's GPUs over the two servers and every point
    of its union grid, valued as the checker does (slowest type, split penalty), keeping
    the floor of its placement; feasibility as ``tests/test_exact.py``'s oracle."""
    servers = inst.cluster.servers
    options = []
    for job in jobs:
        mats = inst.usable_matrices(job)
        cpus = sorted({c for w in mats for c in w.cpus})
        mems = sorted({m for w in mats for m in w.mem_gb})
        opts = []
        for split in itertools.product(*(range(min(job.gpus, s.gpus) + 1) for s in servers)):
            if sum(split) != job.gpus:
                continue
            on = [s for s, a in zip(servers, split, strict=True) if a]
            parts = [
                PlacementPart(s.name, a, 0, 0.0) for s, a in zip(servers, split, strict=True) if a
            ]
            _, required = fair_share_floor(inst, job, parts)
            for c, m in [(c, m) for c in cpus for m in mems] + [(0, 0.0)]:
                tp = min(job.matrix_for(s.gpu_type).lookup(c, m) for s in on)
                tp *= job.split_penalty if len(on) > 1 else 1.0
                if tp >= required - 1e-9:
                    opts.append((split, c, m, tp))
        options.append(opts)
    best = None
    for picks in itertools.product(*options):
        if _fits_two_servers(inst, list(picks)):
            total = math.fsum(p[3] for p in picks)
            best = total if best is None else max(best, total)
    return best


@settings(max_examples=60, deadline=None)
@given(inst=two_type_rounds())
def test_property_typed_super_machine_bounds_brute_force(inst: RoundInstance) -> None:
    """Every allocation of the runnable set that keeps its floors, enumerated: none above
    the typed super-machine optimum (the proof of formulations/super_machine.md, tested)."""
    run = select_runnable(inst)
    best = brute_force_typed(inst, run)
    res = solve_matrix(typed_fast.build_typed_super_machine_fast(inst, run).matrix)
    if best is None:
        return
    assert res.status is TerminationStatus.OPTIMAL and res.objective is not None
    assert best <= res.objective + ABS_TOL


def test_class_column_memo_keeps_models_equal_and_apart() -> None:
    """The typed builder memoises each class's columns by cluster, fair-share rule and
    class: a warm build equals a cold one, and the same jobs on another cluster (other
    cores) get that cluster's columns, not the memo's."""

    def build(cpus: int) -> Any:
        inst = generate_instance(
            GenerateSpec(
                servers=4,
                gpu_load=1.3,
                gpu_mix=((1, 0.5), (2, 0.3), (4, 0.2)),
                seed=5,
                cpus_per_server=cpus,
                gpu_types=(("v100", 16), ("p100", 8), ("k80", 8)),
            )
        )
        return typed_fast.build_typed_super_machine_fast(inst, select_runnable(inst))

    typed_fast._COLUMNS.clear()
    cold = build(24)
    warm = build(24)
    assert typed_fast._COLUMNS  # the second build read the memo
    assert warm.columns == cold.columns
    for f in ("cost", "a_start", "a_index", "a_value", "row_upper"):
        assert np.array_equal(getattr(warm.matrix, f), getattr(cold.matrix, f))
    typed_fast._COLUMNS.clear()
    fresh_small = build(12)
    build(24)
    assert build(12).columns == fresh_small.columns != cold.columns
