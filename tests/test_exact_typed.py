"""The counting model with three GPU types: exact, checked against the checker itself.

* Tiny 3-type rounds (<= 3 jobs on 3 servers of types v100, p100, k80, per-type matrices
  drawn independently, so no type is faster everywhere): ``opt-exact`` and the counting
  model equal a brute-force enumeration that values every allocation with the checker
  (every GPU split, every total grid point, cores and memory of spread jobs distributed by
  a max-flow), under both fair-share rules and on mixed server shapes.
* The spread variants: one per set of types whose slowest-type value differs; types
  ordered by speed give one per type.
* The Pyomo reference equals the fast path on generated 3-type rounds.
* ``opt-exact`` proves generated 3-type rounds (v100/p100/k80) at 32 and 64 GPUs.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

import networkx as nx
import numpy as np
import pytest

from synergy_opt.check import check_allocation, fair_share_floor
from synergy_opt.formulations import counting, counting_fast, super_machine, typed_fast
from synergy_opt.generate import MULTI_GPU_MIX, GenerateSpec, generate_instance
from synergy_opt.mechanisms import MechanismOptions, make_mechanism
from synergy_opt.mechanisms import opt_exact as opt_exact_mod
from synergy_opt.mechanisms.packing import select_runnable
from synergy_opt.solve import TerminationStatus, solve_matrix, solve_pyomo
from synergy_opt.types import (
    Allocation,
    Cluster,
    Job,
    PlacementPart,
    RoundInstance,
    Server,
    ThroughputMatrix,
    build_allocation,
)
from tests.test_exact import _same_model

ABS_TOL = 1e-6
TYPES = ("v100", "p100", "k80")


def approx(x: float) -> Any:
    return pytest.approx(x, rel=1e-6, abs=ABS_TOL)


# --------------------------------------------------------------------------- tiny rounds


def _matrix(rng: np.random.Generator, g: int) -> ThroughputMatrix:
    """A random 2 x 2 matrix, ascending in both resources, on the job's grid."""
    a = round(float(rng.uniform(0.1, 1.0)), 2)
    b = round(a + float(rng.uniform(0.0, 0.8)), 2)
    c = round(a + float(rng.uniform(0.0, 0.8)), 2)
    d = round(max(b, c) + float(rng.uniform(0.0, 0.8)), 2)
    return ThroughputMatrix.from_lists([g, 3 * g], [10.0 * g, 20.0 * g], [[a, b], [c, d]])


def tiny_round(seed: int) -> RoundInstance:
    """3 servers, one per type (1-2 GPUs), 2-3 jobs of 1-3 GPUs with per-type matrices.

    Even seeds: every server has 2 cores and 15 GB per GPU (the two fair-share rules
    agree); odd seeds: shapes differ and the ``"server"`` rule's floors depend on the split.
    """
    rng = np.random.default_rng(seed)
    servers = []
    for i, t in enumerate(TYPES):
        g = int(rng.integers(1, 3))
        cores, mem = (
            (2, 15.0)
            if seed % 2 == 0
            else (int(rng.integers(1, 4)), 10.0 * int(rng.integers(1, 3)))
        )
        servers.append(Server(f"s{i}", g, cores * g, mem * g, t))
    cluster = Cluster(tuple(servers))
    total = cluster.total_gpus
    jobs = []
    for j in range(int(rng.integers(2, 4))):
        g = int(rng.choice([1, 2, 2, 3, 3]))
        g = min(g, total)
        by_type = tuple((t, _matrix(rng, g)) for t in TYPES[1:])
        pen = float(rng.choice([1.0, 0.9]))
        jobs.append(
            Job(f"j{j}", g, _matrix(rng, g), split_penalty=pen, sensitivity_by_type=by_type)
        )
    rule = "cluster" if seed % 4 == 1 else "server"
    return RoundInstance(f"tiny3-{seed}", cluster, tuple(jobs), rule)


Option = tuple[tuple[int, ...], int, float, float]


def _options(inst: RoundInstance, job: Job) -> list[Option]:
    """(GPUs per server, total cores, total GB, value) for every way the job may run at a
    grid point of its matrices, kept where the checker's floor for that split holds.

    The value is read here (the slowest type's look-up, times the penalty when spread) and
    compared with the checker's in :func:`brute_force`."""
    servers = inst.cluster.servers
    mats = [job.sensitivity, *(w for _, w in job.sensitivity_by_type or ())]
    cpus = sorted({c for w in mats for c in w.cpus})
    mem = sorted({m for w in mats for m in w.mem_gb})
    totals = [(c, m) for c in cpus for m in mem] + [(0, 0.0)]
    ranges = [range(min(job.gpus, s.gpus) + 1) if job.may_use(s) else range(1) for s in servers]
    out = []
    for split in itertools.product(*ranges):
        if sum(split) != job.gpus:
            continue
        used = [s for s, a in enumerate(split) if a]
        parts = [PlacementPart(servers[s].name, split[s], 0, 0.0) for s in used]
        _, required = fair_share_floor(inst, job, parts)
        pen = job.split_penalty if len(used) > 1 else 1.0
        for c, m in totals:
            value = min(job.matrix_for(servers[s].gpu_type).lookup(c, m) for s in used) * pen
            if value >= required - 1e-9:
                out.append((split, c, m, value))
    return out


def _distribute(inst: RoundInstance, jobs: list[Job], picks: tuple[Option, ...]) -> Any:
    """Placement parts for the picks, or None: whole jobs load their server, spread jobs'
    cores and GB flow to the servers where they hold GPUs (one max-flow per resource)."""
    servers = inst.cluster.servers
    spread = [q for q, p in enumerate(picks) if sum(1 for a in p[0] if a) > 1]
    shares: dict[tuple[int, int], list[float]] = {}
    for dim, caps in ((1, [s.cpus for s in servers]), (2, [s.mem_gb for s in servers])):
        left = list(map(float, caps))
        for p in picks:
            used = [s for s, a in enumerate(p[0]) if a]
            if len(used) == 1:
                left[used[0]] -= p[dim]
        if any(v < -1e-9 for v in left):
            return None
        graph = nx.DiGraph()
        for q in spread:
            graph.add_edge("src", ("j", q), capacity=picks[q][dim])
            for s, a in enumerate(picks[q][0]):
                if a:
                    graph.add_edge(("j", q), ("s", s), capacity=math.inf)
        for s in range(len(servers)):
            graph.add_edge(("s", s), "dst", capacity=max(0.0, left[s]))
        need = sum(picks[q][dim] for q in spread)
        if need > 0:
            value, flow = nx.maximum_flow(graph, "src", "dst")
            if value < need - 1e-9:
                return None
            for q in spread:
                for s, a in enumerate(picks[q][0]):
                    if a:
                        shares.setdefault((q, s), [0.0, 0.0])[dim - 1] = flow[("j", q)][("s", s)]
    out = {}
    for q, (job, p) in enumerate(zip(jobs, picks, strict=True)):
        used = [s for s, a in enumerate(p[0]) if a]
        if len(used) == 1:
            out[job.id] = [PlacementPart(servers[used[0]].name, job.gpus, p[1], p[2])]
        else:
            out[job.id] = [
                PlacementPart(
                    servers[s].name,
                    p[0][s],
                    int(round(shares.get((q, s), [0.0, 0.0])[0])),
                    shares.get((q, s), [0.0, 0.0])[1],
                )
                for s in used
            ]
    return out


def brute_force(inst: RoundInstance, jobs: list[Job]) -> Allocation | None:
    """The best allocation of exactly ``jobs`` that the checker passes with its floors.

    Combinations of options are tried best value first; the first that fits and passes
    ``check_allocation(..., fair_share=True)`` is the optimum (its value, recomputed by the
    checker, must be the one read here)."""
    servers = inst.cluster.servers
    combos = []
    for picks in itertools.product(*(_options(inst, j) for j in jobs)):
        load = [sum(p[0][s] for p in picks) for s in range(len(servers))]
        if all(g <= s.gpus for g, s in zip(load, servers, strict=True)):
            combos.append((math.fsum(p[3] for p in picks), picks))
    combos.sort(key=lambda t: -t[0])
    for total, picks in combos:
        placed = _distribute(inst, jobs, picks)
        if placed is None:
            continue
        alloc = build_allocation(inst, "brute", placed)
        if check_allocation(inst, alloc, fair_share=True) == []:
            assert alloc.total_throughput == approx(total)
            return alloc
    return None


TINY_SEEDS = range(24)


@pytest.mark.parametrize("seed", TINY_SEEDS)
def test_three_types_exact_equals_brute_force(seed: int) -> None:
    inst = tiny_round(seed)
    runnable = select_runnable(inst)
    want = brute_force(inst, runnable)
    exact = make_mechanism("opt-exact", MechanismOptions(time_limit_s=20)).allocate(inst)
    assert check_allocation(inst, exact, fair_share=True) == []
    tune = make_mechanism("tune").allocate(inst).total_throughput
    expected = tune if want is None else max(want.total_throughput, tune)
    assert exact.total_throughput == approx(expected)
    assert exact.upper_bound is not None and exact.upper_bound >= expected - ABS_TOL
    data = counting._model_data(inst, runnable)
    if data["exact"] and want is not None:  # the model alone reaches the enumeration
        res = counting_fast.solve_counting(inst, runnable, time_limit=20)
        assert res.proven and res.objective == approx(want.total_throughput)


def test_tiny_rounds_exercise_three_type_spreads() -> None:
    """The seeds above include optima spread over all three types and over two."""
    spans = set()
    for seed in TINY_SEEDS:
        inst = tiny_round(seed)
        best = brute_force(inst, select_runnable(inst))
        if best is not None:
            for ja in best.jobs:
                spans.add(len(ja.placement))
    assert {1, 2, 3} <= spans


# --------------------------------------------------------------------------- variants


def _flat(v: float) -> ThroughputMatrix:
    return ThroughputMatrix.from_lists([1, 2], [10.0, 20.0], [[v, v], [v, v]])


def _variants(by_type: dict[str, ThroughputMatrix]) -> dict[frozenset[str], float]:
    servers = tuple(Server(f"s{i}", 1, 4, 40.0, t) for i, t in enumerate(TYPES * 2))
    job = Job(
        "j",
        2,
        by_type["v100"],
        sensitivity_by_type=tuple((t, w) for t, w in by_type.items() if t != "v100"),
    )
    out = {}
    for w, ss in counting._spread_variants(job, range(len(servers)), servers):
        out[frozenset(servers[s].gpu_type or "" for s in ss)] = w.lookup(2, 20.0)
    return out


def test_ordered_types_give_one_variant_per_type() -> None:
    """v100 >= p100 >= k80 everywhere: {v100}, {v100, p100} and all three, each at its
    slowest type's value."""
    got = _variants({"v100": _flat(3.0), "p100": _flat(2.0), "k80": _flat(1.0)})
    assert got == {
        frozenset({"v100"}): 3.0,
        frozenset({"v100", "p100"}): 2.0,
        frozenset(TYPES): 1.0,
    }


def test_unordered_types_give_every_distinct_minimum() -> None:
    """No type faster everywhere: every set of types has its own minimum (7 variants),
    unless a set's minimum is a larger set's (then the larger one serves both)."""

    def grid(a: float, b: float, c: float, d: float) -> ThroughputMatrix:
        return ThroughputMatrix.from_lists([1, 2], [10.0, 20.0], [[a, b], [c, d]])

    got = _variants({"v100": grid(1, 3, 1, 3), "p100": grid(1, 1, 3, 3), "k80": grid(2, 2, 2, 2)})
    assert len(got) == 7
    assert got[frozenset({"v100", "p100"})] == 3.0
    assert got[frozenset(TYPES)] == 2.0
    # min(v100, k80) = min of all three: {v100, k80} is served by the variant of all three.
    got = _variants({"v100": grid(1, 1, 1, 3), "p100": grid(2, 2, 2, 2.5), "k80": grid(3, 3, 3, 2)})
    assert frozenset({"v100", "k80"}) not in got and len(got) == 6
    assert got[frozenset({"v100", "p100"})] == 2.5 and got[frozenset(TYPES)] == 2.0
    equal = _variants({"v100": _flat(2.0), "p100": _flat(2.0), "k80": _flat(1.0)})
    assert equal == {frozenset({"v100", "p100"}): 2.0, frozenset(TYPES): 1.0}


# --------------------------------------------------------------------------- generated


def three_type_round(gpus: int, seed: int, **kw: Any) -> RoundInstance:
    """A generated v100/p100/k80 round (a quarter, a quarter, half) of multi-GPU jobs."""
    q = gpus // 4
    spec = GenerateSpec(
        servers=gpus // 8,
        gpu_load=1.2,
        gpu_mix=tuple(MULTI_GPU_MIX.items()),
        seed=seed,
        gpu_types=(("v100", q), ("p100", q), ("k80", 2 * q)),
        **kw,
    )
    return generate_instance(spec)


@pytest.mark.parametrize("seed", [0, 1])
def test_pyomo_equals_fast_on_three_types(seed: int) -> None:
    inst = three_type_round(32, seed, split_penalty=(0.8, 0.95))
    runnable = select_runnable(inst)
    assert counting._model_data(inst, runnable)["exact"]
    ref, fast = _same_model(inst, runnable, symmetry=False)
    assert fast == approx(ref)


@pytest.mark.parametrize("seed", [0, 2, 5, 13, 17, 26])
def test_pyomo_equals_fast_on_unordered_types(seed: int) -> None:
    """Tiny rounds whose per-type matrices are not ordered (3-4 spread variants here)."""
    inst = tiny_round(seed)
    runnable = select_runnable(inst)
    ref, fast = _same_model(inst, runnable, symmetry=seed % 2 == 1)
    assert fast == approx(ref)


@pytest.mark.parametrize(("gpus", "seed"), [(32, 0), (32, 5), (64, 0), (64, 1)])
def test_opt_exact_proves_three_type_rounds(gpus: int, seed: int) -> None:
    inst = three_type_round(gpus, seed)
    exact = make_mechanism("opt-exact", MechanismOptions(time_limit_s=60)).allocate(inst)
    assert exact.notes == ()
    assert check_allocation(inst, exact, fair_share=True) == []
    assert exact.upper_bound is not None
    assert exact.upper_bound - exact.total_throughput <= 1e-4 * max(1.0, exact.total_throughput)
    for name in ("tune", "opt", "tune-typed"):
        other = make_mechanism(name).allocate(inst)
        if {j.id for j in other.jobs} == {j.id for j in exact.jobs}:
            assert other.total_throughput <= exact.upper_bound + ABS_TOL


def test_spread_slots_are_capped_by_their_servers_gpus() -> None:
    """A class never has more slots than its slots' servers (every variant's) have GPUs for."""
    inst = dataclasses.replace(three_type_round(32, 0))
    data = counting._model_data(inst, select_runnable(inst))
    per: dict[tuple[int, tuple[int, ...]], int] = {}
    for k, i in data["slots"]:
        key = (k, data["slot_servers"][k, i])
        per[key] = per.get(key, 0) + 1
    assert per
    for (k, ss), count in per.items():
        assert count <= min(data["n"][k], sum(data["G"][s] for s in ss) // data["g"][k])


# --------------------------------------------------------------------------- the typed bound


def test_lowest_fair_share_counts_spread_cores() -> None:
    """3.5 cores per GPU: a 2-GPU job whole holds 7 cores, split 1 + 1 only 3 + 3; the
    checker's floor for the split is the 6-core value, so the bound's floor must be too."""
    w = ThroughputMatrix.from_lists([6, 7], [30.0], [[0.5], [1.0]])
    slow = ThroughputMatrix.from_lists([6, 7], [30.0], [[0.4], [0.8]])
    cl = Cluster((Server("a", 2, 7, 30.0, "v100"), Server("b", 2, 7, 30.0, "k80")))
    job = Job("j", 2, w, sensitivity_by_type=(("k80", slow),))
    inst = RoundInstance("odd-cores", cl, (job,), "server")
    split = [PlacementPart("a", 1, 0, 0.0), PlacementPart("b", 1, 0, 0.0)]
    assert fair_share_floor(inst, job, split)[0] == 0.4  # 6 cores, the slowest type
    assert fair_share_floor(inst, job, [PlacementPart("a", 2, 0, 0.0)])[0] == 0.8
    assert typed_fast.lowest_fair_share(inst, job) == 0.4
    cluster_rule = dataclasses.replace(inst, fair_share_rule="cluster")
    assert typed_fast.lowest_fair_share(cluster_rule, job) == 0.8


def _typed_bound(inst: RoundInstance, jobs: list[Job]) -> float:
    res = solve_matrix(typed_fast.super_machine_matrix(inst, jobs), "highs", time_limit=30)
    assert res.status is TerminationStatus.OPTIMAL and res.objective is not None
    return res.objective


#: 163 and 179 are mixed-shape rounds whose optimum the typed super-machine cut off when it
#: used the whole-job floor (1.171 < 1.477 and 3.584 < 3.749).
BOUND_SEEDS = [*range(0, 40, 3), 163, 179]


@pytest.mark.parametrize("seed", BOUND_SEEDS)
def test_typed_bound_covers_the_brute_force_optimum(seed: int) -> None:
    inst = tiny_round(seed)
    runnable = select_runnable(inst)
    best = brute_force(inst, runnable)
    if best is None:
        return
    assert _typed_bound(inst, runnable) >= best.total_throughput - ABS_TOL
    ref = solve_pyomo(super_machine.build_typed_super_machine(inst, runnable), "highs")
    assert ref.objective is not None and ref.objective >= best.total_throughput - ABS_TOL


SHAPES: dict[str, Any] = {
    "homogeneous": {"servers": 4},
    "mixed": {"server_shapes": ((2, 8, 24, 500.0), (1, 8, 32, 256.0), (2, 4, 12, 200.0))},
    "odd-cores": {"server_shapes": ((2, 8, 28, 400.0), (2, 4, 10, 150.0), (1, 8, 20, 300.0))},
}


@pytest.mark.parametrize("rule", ["server", "cluster"])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_typed_bound_covers_the_proven_optimum(shape: str, rule: str) -> None:
    """Generated 3-type rounds of every shape (1-4 GPU jobs, split penalties): the typed
    super-machine is >= ``opt-exact``'s proven optimum, and ``opt-exact`` takes it."""
    types = (("v100", 8), ("p100", 8), ("k80", 16))
    if shape == "odd-cores":
        types = (("v100", 16), ("p100", 8), ("k80", 8))
    spec = GenerateSpec(
        gpu_load=1.2,
        gpu_mix=((1, 0.5), (2, 0.2), (3, 0.1), (4, 0.2)),
        seed=2,
        gpu_types=types,
        fair_share_rule=rule,
        split_penalty=(0.8, 0.95),
        **SHAPES[shape],
    )
    inst = generate_instance(spec)
    exact = make_mechanism("opt-exact", MechanismOptions(time_limit_s=30)).allocate(inst)
    assert exact.notes == () and check_allocation(inst, exact, fair_share=True) == []
    bound = _typed_bound(inst, select_runnable(inst))
    assert bound >= exact.total_throughput - ABS_TOL
    assert exact.upper_bound is not None and exact.upper_bound <= bound + ABS_TOL


def test_opt_exact_takes_opts_typed_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a counting bound (time limit, no solution) a typed round keeps opt's."""

    def nothing(*_: Any, **__: Any) -> counting_fast.CountingResult:
        return counting_fast.CountingResult(
            TerminationStatus.TIME_LIMIT, None, None, None, 0.1, 0.0, "highs", 0, 0, {}
        )

    monkeypatch.setattr(opt_exact_mod, "solve_counting", nothing)
    inst = three_type_round(32, 0)
    alloc = make_mechanism("opt-exact", MechanismOptions(time_limit_s=20)).allocate(inst)
    opt = make_mechanism("opt", MechanismOptions(time_limit_s=5)).allocate(inst)
    assert opt.upper_bound is not None
    assert alloc.upper_bound == approx(opt.upper_bound)
    assert check_allocation(inst, alloc, fair_share=True) == []


@pytest.mark.parametrize("seed", [2, 3])
def test_counting_bound_and_staging_take_the_typed_super_machine(seed: int) -> None:
    """On these 3-type rounds the typed super-machine is below the counting LP (17.05 <
    17.09, 17.87 < 18.09): both the bound and the staged solve's bound take it."""
    inst = three_type_round(32, seed)
    runnable = select_runnable(inst)
    sm = _typed_bound(inst, runnable)
    low = counting._model_data(inst, runnable, spread_floor="low")
    lp = solve_matrix(counting_fast.build_counting_matrix(low, relax=True).matrix, "highs")
    assert lp.objective is not None and lp.objective > sm + 1e-3
    bound = counting_fast.counting_bound(inst, runnable)
    res = counting_fast.solve_counting(inst, runnable, time_limit=30)
    assert res.proven and res.objective is not None and res.dual_bound is not None
    assert bound == approx(sm) and res.objective - ABS_TOL <= bound
    assert res.dual_bound <= sm + ABS_TOL


def test_one_type_spread_floor_below_every_whole_floor() -> None:
    """Tiny round 179 without its GPU types: j0 (2 GPUs) spread over s0 (3 cores per GPU)
    and s2 (1 core per GPU) has the checker's floor at 3 + 1 cores, below both whole-job
    floors.  The plain super-machine with whole-job floors said 3.89 and the staged solve
    "proved" it; the optimum is 3.91.  ``opt``'s bound (3.89, still whole-job floors) is
    below the incumbent, so ``opt-exact`` leaves it out and says so."""
    typed = tiny_round(179)
    cluster = Cluster(tuple(dataclasses.replace(s, gpu_type=None) for s in typed.cluster.servers))
    jobs = tuple(dataclasses.replace(j, sensitivity_by_type=None) for j in typed.jobs)
    inst = RoundInstance("one-type-179", cluster, jobs, "server")
    runnable = select_runnable(inst)
    best = brute_force(inst, runnable)
    assert best is not None and best.total_throughput == approx(3.91)
    bound = counting_fast.counting_bound(inst, runnable)
    assert bound is not None and bound >= 3.91 - ABS_TOL
    exact = make_mechanism("opt-exact", MechanismOptions(time_limit_s=20)).allocate(inst)
    assert check_allocation(inst, exact, fair_share=True) == []
    assert exact.total_throughput == approx(3.91)
    assert exact.upper_bound is not None and exact.upper_bound >= 3.91 - ABS_TOL
    opt = make_mechanism("opt").allocate(inst)
    if opt.upper_bound is not None and opt.upper_bound < 3.91 - ABS_TOL:
        assert any("opt's bound" in n for n in exact.notes)
