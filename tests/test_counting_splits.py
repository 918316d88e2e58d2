"""Split-dependent floors: the counting model is exact on mixed-shape clusters.

Under the ``"server"`` rule a spread job's floor is W at the sum of its servers' shares, so
it depends on how its GPUs split over server shapes.  The model states that exactly
(``v``, ``cnt_split_one``, ``cnt_split_gpus``, ``cnt_split_floor``; formulations/counting.md):

* On tiny mixed-shape rounds the model alone equals a brute force that values every
  allocation with the checker, and the seeds include rounds where the old restriction
  (highest floor for every split) loses the optimum and where the old relaxation (lowest
  floor) overstates it, so dropping or weakening the rows fails here.
* The Pyomo reference equals the matrix fast path (columns, rows, names, optimum).
* Rounds whose floors do not depend on the split build the same matrix as before.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import time
from typing import Any

import numpy as np
import pytest

from synergy_opt.check import check_allocation, fair_share_floor
from synergy_opt.formulations import counting, counting_fast
from synergy_opt.generate import FAMILIES, family_round
from synergy_opt.mechanisms.packing import select_runnable
from synergy_opt.solve import TerminationStatus, solve_matrix
from synergy_opt.types import (
    Cluster,
    Job,
    PlacementPart,
    RoundInstance,
    Server,
    ThroughputMatrix,
    build_allocation,
)
from tests.test_exact import _same_model
from tests.test_exact_typed import brute_force

ABS_TOL = 1e-6


def approx(x: float) -> Any:
    return pytest.approx(x, rel=1e-6, abs=ABS_TOL)


def tiny_mixed_round(seed: int) -> RoundInstance:
    """3 servers of different shapes (1-2 GPUs, 1-3 whole cores and 10-30 GB per GPU) and
    2-3 jobs of 1-3 GPUs on a grid around their share: the per-server floors of a spread
    job differ by split."""
    rng = np.random.default_rng(1000 + seed)
    servers = []
    for i in range(3):
        g = int(rng.integers(1, 3))
        cores, mem = int(rng.integers(1, 4)), 10.0 * int(rng.integers(1, 4))
        servers.append(Server(f"s{i}", g, cores * g, mem * g))
    total = sum(s.gpus for s in servers)
    jobs = []
    for j in range(int(rng.integers(2, 4))):
        g = min(int(rng.choice([1, 2, 2, 3, 3])), total)
        cpus = sorted({g, 2 * g, 3 * g})
        mem = [10.0 * g, 20.0 * g, 30.0 * g]
        base = rng.uniform(0.1, 0.6, size=(len(cpus), len(mem)))
        rows = np.round(np.cumsum(np.cumsum(base, axis=0), axis=1), 2).tolist()
        pen = float(rng.choice([1.0, 1.0, 0.9]))
        jobs.append(Job(f"j{j}", g, ThroughputMatrix.from_lists(cpus, mem, rows), pen))
    return RoundInstance(f"tinymix-{seed}", Cluster(tuple(servers)), tuple(jobs), "server")


TINY_SEEDS = range(40)


def _optimum(data: dict[str, Any]) -> float | None:
    res = solve_matrix(counting_fast.build_counting_matrix(data).matrix, "highs", rel_gap=1e-9)
    return res.objective if res.status is TerminationStatus.OPTIMAL else None


@pytest.mark.parametrize("seed", TINY_SEEDS)
def test_tiny_mixed_shapes_equal_brute_force(seed: int) -> None:
    """The model alone (no TUNE or OPT answer to fall back on) finds the checker's optimum."""
    inst = tiny_mixed_round(seed)
    runnable = select_runnable(inst)
    want = brute_force(inst, runnable)
    res = counting_fast.solve_counting(inst, runnable, time_limit=20, rel_gap=1e-9)
    if want is None:
        assert res.status is TerminationStatus.INFEASIBLE or not res.placements
        return
    assert res.proven and res.objective == approx(want.total_throughput)
    alloc = build_allocation(inst, "counting", res.placements)
    assert check_allocation(inst, alloc, fair_share=True) == []
    assert res.dual_bound is not None and res.dual_bound >= want.total_throughput - ABS_TOL


def test_tiny_rounds_need_the_split_rows() -> None:
    """On these seeds the split matters both ways: the old restriction (every split at the
    highest floor) misses the optimum on some, the old relaxation (every split at the
    lowest) overstates it on others, and the exact model equals the brute force on all."""
    below = above = with_rows = 0
    for seed in TINY_SEEDS:
        inst = tiny_mixed_round(seed)
        runnable = select_runnable(inst)
        want = brute_force(inst, runnable)
        if want is None:
            continue
        exact = counting._model_data(inst, runnable)
        with_rows += bool(exact["slot_splits"])
        best = want.total_throughput
        assert _optimum(exact) == approx(best)
        high = _optimum(counting._model_data(inst, runnable, exact_splits=False))
        low = _optimum(counting._model_data(inst, runnable, exact_splits=False, spread_floor="low"))
        below += high is None or high < best - ABS_TOL
        above += low is not None and low > best + ABS_TOL
    assert with_rows >= 5 and below >= 1 and above >= 1, (with_rows, below, above)


def test_split_floors_are_the_checkers() -> None:
    """The splits are exactly the GPUs per share class of every real spread placement (each
    part at most min(G_s, g - 1), two servers or more), and each split's floor is the
    checker's fair_share_floor of such a placement."""
    inst = family_round("mixed-shapes", 32, seed=0)
    servers = inst.cluster.servers
    levels = set()
    for job in {(j.sensitivity, j.gpus): j for j in inst.jobs if j.gpus >= 2}.values():
        got = counting._split_floors(inst, job, range(len(servers)))
        assert got is not None
        classes, splits, cores = got
        assert len(classes) == 3 and cores is None  # whole cores per GPU: sigma alone
        where = {s: c for c, run in enumerate(classes) for s in run}
        real: dict[tuple[int, ...], float] = {}
        rooms = [range(min(s.gpus, job.gpus - 1) + 1) for s in servers]
        for gpus in itertools.product(*rooms):
            if sum(gpus) != job.gpus or sum(1 for a in gpus if a) < 2:
                continue
            sigma = [0, 0, 0]
            for s, a in enumerate(gpus):
                sigma[where[s]] += a
            parts = [PlacementPart(servers[s].name, a, 0, 0.0) for s, a in enumerate(gpus) if a]
            floor = fair_share_floor(inst, job, parts)[1]
            assert real.setdefault(tuple(sigma), floor) == floor  # one floor per split
        assert dict(splits) == real
        levels.add(len(set(real.values())))
    assert max(levels) >= 2


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pyomo_equals_fast_on_mixed_shapes(seed: int) -> None:
    """Same columns, rows, names and optimum; the split rows are there and not empty."""
    inst = family_round("mixed-shapes", 32, seed=seed)
    runnable = select_runnable(inst)
    data = counting._model_data(inst, runnable)
    assert data["slot_splits"] and not data["floor_gap"]
    assert data["feasible"] and data["bound_valid"] and not data["exact"]
    model = counting.build_from_data(data)
    for name in ("v", "cnt_split_one", "cnt_split_gpus", "cnt_split_floor"):
        assert len(getattr(model, name)) > 0, name
    ref, fast = _same_model(inst, runnable, symmetry=seed == 1)
    assert fast == approx(ref)


def test_mixed_shapes_solved_in_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """With exact split floors ``solve_counting`` needs no relaxation/restriction pair: one
    solve, its answer keeps every floor, its bound covers it."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the two-pass path ran")

    monkeypatch.setattr(counting_fast, "_solve_between_floors", refuse)
    inst = family_round("mixed-shapes", 32, seed=1)
    runnable = select_runnable(inst)
    res = counting_fast.solve_counting(inst, runnable, time_limit=30)
    assert res.proven
    alloc = build_allocation(inst, "counting", res.placements)
    assert check_allocation(inst, alloc, fair_share=True) == []
    assert {j.id for j in alloc.jobs} == {j.id for j in runnable}


def _digest(cm: counting_fast.CountingMatrix) -> str:
    mm, out = cm.matrix, hashlib.sha256()
    for f in dataclasses.fields(mm):
        v = getattr(mm, f.name)
        out.update(v.tobytes() if isinstance(v, np.ndarray) else repr(v).encode())
    out.update(repr((cm.columns, cm.row_names)).encode())
    return out.hexdigest()


@pytest.mark.parametrize("family", FAMILIES)
def test_rounds_without_split_floors_build_the_same_matrix(family: str) -> None:
    """Where no floor depends on the split (uniform clusters, the cluster-wide rule) the
    exact split rows add nothing: the same bytes as the model without them."""
    for rule in ("server", "cluster"):
        inst = dataclasses.replace(family_round(family, 32, seed=1), fair_share_rule=rule)
        runnable = select_runnable(inst)
        new = counting._model_data(inst, runnable)
        old = counting._model_data(inst, runnable, exact_splits=False)
        if family == "mixed-shapes" and rule == "server":
            assert new["slot_splits"] and _digest(
                counting_fast.build_counting_matrix(new)
            ) != _digest(counting_fast.build_counting_matrix(old))
            continue
        assert not new["slot_splits"]
        assert _digest(counting_fast.build_counting_matrix(new)) == _digest(
            counting_fast.build_counting_matrix(old)
        )


def test_warm_start_sets_the_split() -> None:
    """A known allocation with spread jobs becomes a feasible MIP start of the exact model:
    each spread job's split variable is set to its GPUs per share class."""
    inst = family_round("mixed-shapes", 32, seed=2)
    runnable = select_runnable(inst)
    res = counting_fast.solve_counting(inst, runnable, time_limit=30)
    assert any(len(parts) > 1 for parts in res.placements.values())
    cm = counting_fast.build_counting_matrix(counting._model_data(inst, runnable))
    x = counting_fast.start_from_placements(cm, res.placements)
    assert x is not None
    mm = cm.matrix
    act = np.zeros(mm.num_rows)
    for c in range(mm.num_cols):
        lo, hi = mm.a_start[c], mm.a_start[c + 1]
        act[mm.a_index[lo:hi]] += mm.a_value[lo:hi] * x[c]
    assert np.all(act >= mm.row_lower - 1e-6) and np.all(act <= mm.row_upper + 1e-6)
    assert float(mm.cost @ x) == approx(res.objective or 0.0)
    v_on = [key for key, val in zip(cm.columns, x, strict=True) if key[0] == "v" and val > 0.5]
    cls = {jid: k for k, ids in enumerate(cm.data["classes"]) for jid in ids}
    with_rows = {k for k, _ in cm.data["slot_splits"]}
    spread = [j for j, parts in res.placements.items() if len(parts) > 1 and cls[j] in with_rows]
    assert spread and len(v_on) == len(spread)


@pytest.mark.parametrize("seed", [7, 11, 27, 35, 55])
def test_typed_mixed_shapes_use_the_same_rows(seed: int) -> None:
    """Per-type matrices on mixed shapes: the split rows sit beside the spread variants
    (a split's floor reads the slowest usable type, whatever the variant), and the model
    alone equals the brute force of tests/test_exact_typed.py."""
    from tests.test_exact_typed import tiny_round

    inst = tiny_round(seed)
    runnable = select_runnable(inst)
    data = counting._model_data(inst, runnable)
    assert data["slot_splits"] and not data["floor_gap"]
    want = brute_force(inst, runnable)
    assert want is not None
    res = counting_fast.solve_counting(inst, runnable, time_limit=20, rel_gap=1e-9)
    assert res.proven and res.objective == approx(want.total_throughput)
    ref, fast = _same_model(inst, runnable, symmetry=False)
    assert fast == approx(ref) == approx(want.total_throughput)


def _feasible(mm: Any, x: np.ndarray) -> bool:
    act = np.zeros(mm.num_rows)
    for c in range(mm.num_cols):
        lo, hi = mm.a_start[c], mm.a_start[c + 1]
        act[mm.a_index[lo:hi]] += mm.a_value[lo:hi] * x[c]
    integral = np.all(np.abs(x[mm.integer] - np.round(x[mm.integer])) <= 1e-6)
    return bool(
        integral
        and np.all(act >= mm.row_lower - 1e-6)
        and np.all(act <= mm.row_upper + 1e-6)
        and np.all(x >= mm.col_lower - 1e-9)
        and np.all(x <= mm.col_upper + 1e-9)
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_relax_and_fix_gives_feasible_points(seed: int) -> None:
    """Counts first with fluid slots, then integral slots: a feasible point of the model,
    worth at most its optimum."""
    inst = family_round("mixed-shapes", 32, seed=seed)
    runnable = select_runnable(inst)
    cm = counting_fast.build_counting_matrix(counting._model_data(inst, runnable))
    clock = counting_fast._Deadline(30.0, time.perf_counter())
    res = counting_fast._relax_and_fix(cm, "highs", clock, 1e-9, None)
    assert res is not None and res.x is not None
    assert _feasible(cm.matrix, res.x)
    best = solve_matrix(cm.matrix, "highs", rel_gap=1e-9).objective
    assert best is not None and float(cm.matrix.cost @ res.x) <= best + ABS_TOL


def _spy_relax_and_fix(monkeypatch: pytest.MonkeyPatch) -> list[float | None]:
    """Record the objective of every relax-and-fix answer (None: it found nothing)."""
    calls: list[float | None] = []
    real = counting_fast._relax_and_fix

    def spy(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        calls.append(None if out is None else out.objective)
        return out

    monkeypatch.setattr(counting_fast, "_relax_and_fix", spy)
    return calls


def test_relax_and_fix_proves_the_128_gpu_round(monkeypatch: pytest.MonkeyPatch) -> None:
    """mixed-shapes 128 seed 0: the restricted MIP alone found no solution in 40 s; relax-
    and-fix reaches the super-machine bound, which proves it (92.64)."""
    calls = _spy_relax_and_fix(monkeypatch)
    inst = family_round("mixed-shapes", 128, seed=0)
    runnable = select_runnable(inst)
    res = counting_fast.solve_counting(inst, runnable, time_limit=60)
    assert calls and calls[0] == approx(92.64)
    assert res.proven and res.objective == approx(92.64)
    alloc = build_allocation(inst, "counting", res.placements)
    assert check_allocation(inst, alloc, fair_share=True) == []


def test_without_relax_and_fix_the_solve_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """When relax-and-fix finds nothing the staged solve continues as before."""
    monkeypatch.setattr(counting_fast, "_relax_and_fix", lambda *a, **k: None)
    inst = family_round("mixed-shapes", 32, seed=0)
    runnable = select_runnable(inst)
    res = counting_fast.solve_counting(inst, runnable, time_limit=30)
    exact = counting_fast.solve_counting(inst, runnable, staged=False, time_limit=30)
    assert res.proven and exact.proven and res.objective == approx(exact.objective or 0.0)


def _fractional_round() -> RoundInstance:
    """A server with 3.5 cores per GPU beside two with 2: a 3-GPU job spread 1 + 2 over
    the 3.5-core server holds 3 + 7 or 1 + 2 GPUs there, and each part's share is rounded
    down on its own (floor(3.5) + floor(7) = 10 cores for 1 + 2, floor(10.5) = 10 for 3)."""
    w = ThroughputMatrix.from_lists([2, 4, 6], [20.0, 40.0], [[0.2, 0.4], [0.5, 1.0], [0.9, 1.4]])
    servers = (Server("a", 2, 7, 40.0), Server("b", 2, 4, 20.0), Server("c", 2, 4, 20.0))
    jobs = (Job("j0", 3, w), Job("j1", 1, w))
    return RoundInstance("frac", Cluster(servers), jobs, "server")


def test_fractional_cores_per_gpu_get_split_rows_with_their_cores() -> None:
    """Fractional cores per GPU: the split is (GPUs per share class, the share's
    rounded-down cores), tied to the parts by fc and the rows cnt_share_cores /
    cnt_split_cores; no relaxation / restriction pair, and the optimum is the brute force's."""
    inst = _fractional_round()
    runnable = select_runnable(inst)
    assert len(counting._share_classes(inst.cluster.servers, range(3))) == 2
    data = counting._model_data(inst, runnable)
    assert not data["floor_gap"] and data["slot_splits"] and data["slot_split_cores"]
    cm = counting_fast.build_counting_matrix(data)
    names = {name for name, _ in cm.columns}
    assert "fc" in names
    assert any(r.startswith("cnt_split_cores[") for r in cm.row_names)
    assert any(r.startswith("cnt_share_cores[") for r in cm.row_names)
    res = counting_fast.solve_counting(inst, runnable, time_limit=20)
    assert res.proven
    alloc = build_allocation(inst, "counting", res.placements)
    assert check_allocation(inst, alloc, fair_share=True) == []
    want = brute_force(inst, runnable)
    assert want is not None and res.objective == approx(want.total_throughput)


def test_fractional_splits_are_the_checkers() -> None:
    """With fractional cores per GPU the splits are exactly the (sigma, share cores) of every
    real spread placement, each with the checker's floor: a brute force over every
    per-server GPU vector of a 4-GPU job on a cluster with 2.5 and 1.5 cores per GPU."""
    servers = (
        Server("a", 4, 10, 80.0),
        Server("b", 4, 10, 80.0),
        Server("c", 2, 3, 40.0),
        Server("d", 2, 4, 40.0),
    )
    w = ThroughputMatrix.from_lists(
        [2, 4, 6, 8, 10], [20.0, 80.0], [[0.1, 0.2], [0.3, 0.5], [0.5, 0.8], [0.7, 1.0], [0.8, 1.2]]
    )
    job = Job("j", 4, w)
    inst = RoundInstance("frac4", Cluster(servers), (job,), "server")
    got = counting._split_floors(inst, job, range(4))
    assert got is not None
    classes, splits, cores = got
    assert cores is not None and len(cores) == len(splits)
    where = {s: c for c, run in enumerate(classes) for s in run}
    real: dict[tuple[tuple[int, ...], int], float] = {}
    for gpus in itertools.product(*(range(min(s.gpus, 3) + 1) for s in servers)):
        if sum(gpus) != 4 or sum(1 for a in gpus if a) < 2:
            continue
        sigma = [0] * len(classes)
        share = 0
        for s, a in enumerate(gpus):
            sigma[where[s]] += a
            share += (a * servers[s].cpus) // servers[s].gpus
        parts = [PlacementPart(servers[s].name, a, 0, 0.0) for s, a in enumerate(gpus) if a]
        floor = fair_share_floor(inst, job, parts)[1]
        assert real.setdefault((tuple(sigma), share), floor) == floor
    assert {(sig, f): r for (sig, r), f in zip(splits, cores, strict=True)} == real
    # the rounding matters here: one sigma, two shares of cores
    assert len({sig for sig, _ in real}) < len(real)


def tiny_fractional_round(seed: int) -> RoundInstance:
    """2-3 servers of 1-4 GPUs with any number of cores (mostly fractional per GPU) and 1-3
    jobs of 1-4 GPUs, some with split penalties, under the per-server rule."""
    rng = np.random.default_rng(5000 + seed)
    n = int(rng.integers(2, 4))
    servers: list[Server] = []
    for i in range(n):
        if i and rng.random() < 0.4:
            s = servers[0]
            servers.append(Server(f"s{i}", s.gpus, s.cpus, s.mem_gb))
            continue
        g = int(rng.integers(1, 5))
        servers.append(
            Server(f"s{i}", g, int(rng.integers(1, 4 * g + 1)), 10.0 * int(rng.integers(1, 4)) * g)
        )
    total = sum(s.gpus for s in servers)
    jobs = []
    for j in range(int(rng.integers(1, 4))):
        g = int(min(rng.choice([1, 2, 2, 3, 4]), total))
        cpus = sorted({1, g, 2 * g, 3 * g})
        mem = [5.0 * g, 10.0 * g, 20.0 * g, 30.0 * g]
        base = rng.uniform(0.05, 0.6, size=(len(cpus), len(mem)))
        rows = np.round(np.cumsum(np.cumsum(base, axis=0), axis=1), 2).tolist()
        pen = float(rng.choice([1.0, 0.9, 0.8]))
        jobs.append(Job(f"j{j}", g, ThroughputMatrix.from_lists(cpus, mem, rows), None, None, pen))
    return RoundInstance(f"tinyfrac-{seed}", Cluster(tuple(servers)), tuple(jobs), "server")


FRACTIONAL_SEEDS = range(60)


def test_tiny_fractional_rounds_have_fractional_spreads() -> None:
    """The seeds below are the case in point: spread jobs over servers with fractional
    cores per GPU whose floors differ by split."""
    with_cores = 0
    for seed in FRACTIONAL_SEEDS:
        inst = tiny_fractional_round(seed)
        with_cores += bool(counting._model_data(inst, select_runnable(inst))["slot_split_cores"])
    assert with_cores >= 10


@pytest.mark.parametrize("seed", FRACTIONAL_SEEDS)
def test_tiny_fractional_rounds_equal_brute_force(seed: int) -> None:
    """The counting model alone equals a brute force that values every allocation with the
    checker, where parts' shares are rounded down one by one (before, 5 of 300 such rounds
    ended below the optimum and 11 more unproven)."""
    inst = tiny_fractional_round(seed)
    runnable = select_runnable(inst)
    data = counting._model_data(inst, runnable)
    assert not data["floor_gap"]
    want = brute_force(inst, runnable)
    res = counting_fast.solve_counting(inst, runnable, time_limit=20)
    if want is None:
        assert res.objective is None
        return
    assert res.proven and res.objective == approx(want.total_throughput)
    alloc = build_allocation(inst, "counting", res.placements)
    assert check_allocation(inst, alloc, fair_share=True) == []
    assert alloc.total_throughput == approx(want.total_throughput)


@pytest.mark.parametrize("seed", [5, 7, 8, 10, 11, 14])
def test_pyomo_equals_fast_with_fractional_shares(seed: int) -> None:
    """The Pyomo reference and the matrix fast path agree (columns, rows, names, optimum)
    where fc and its rows are built (these seeds have them and a feasible model)."""
    inst = tiny_fractional_round(seed)
    runnable = select_runnable(inst)
    assert counting._model_data(inst, runnable)["slot_split_cores"]
    ref, fast = _same_model(inst, runnable, symmetry=False)
    assert ref == approx(fast)


@pytest.mark.parametrize(
    ("family", "applies"),
    [("multi-gpu", True), ("mixed-shapes", True), ("split-penalty", False), ("single-gpu", False)],
)
def test_relax_and_fix_where_spreads_are_free_or_split_floors(family: str, applies: bool) -> None:
    """It runs where slots carry split rows or spread at no penalty (the super-machine bound
    is then usually met), not where spreads pay a penalty nor where no job can spread."""
    inst = family_round(family, 32, seed=1)
    runnable = select_runnable(inst)
    data = counting._model_data(inst, runnable)
    assert counting_fast._relax_and_fix_applies(data, runnable) is applies


def test_relax_and_fix_proves_a_multi_gpu_round_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """multi-gpu 128 seed 0 without any warm start: relax-and-fix meets the super-machine
    bound 84.68 (the restricted MIP alone stood at 76.45 after 10 s)."""
    calls = _spy_relax_and_fix(monkeypatch)
    inst = family_round("multi-gpu", 128, seed=0)
    runnable = select_runnable(inst)
    res = counting_fast.solve_counting(inst, runnable, time_limit=60)
    assert calls and calls[0] == approx(84.68)
    assert res.proven and res.objective == approx(84.68)


@pytest.mark.parametrize("caps", [(2, 0, 3), (1, 1, 1, 1), (7, 3, 7), (0,), (4, 4)])
def test_compositions_are_the_filtered_product(caps: tuple[int, ...]) -> None:
    for total in range(sum(caps) + 2):
        want = [t for t in itertools.product(*(range(c + 1) for c in caps)) if sum(t) == total]
        assert list(counting._compositions(total, caps)) == want


def test_many_shapes_fall_back_to_the_pair() -> None:
    """Eight share classes and an 8-GPU job: 6435 splits, more than MAX_SPLITS, so the class
    keeps the relaxation / restriction pair instead of a split variable per composition;
    a 2-GPU job on the same cluster (one GPU on each of two of the eight servers: 28
    splits) gets its rows."""
    servers = tuple(Server(f"s{i}", 4, 4 * (1 + i % 4), 40.0 * (1 + i // 4)) for i in range(8))
    grid = [4, 8, 16, 32], [40.0, 80.0, 160.0, 320.0]
    rows = [[round(0.1 * (1 + a) * (1 + b), 2) for b in range(4)] for a in range(4)]
    big = Job("big", 8, ThroughputMatrix.from_lists(*grid, rows))
    small = Job(
        "small",
        2,
        ThroughputMatrix.from_lists([2, 4, 8], [20.0, 80.0], [[0.1, 0.5], [0.2, 0.9], [0.4, 1.0]]),
    )
    inst = RoundInstance("many", Cluster(servers), (big, small), "server")
    assert len(counting._share_classes(servers, range(8)) or ()) == 8
    assert counting._split_floors(inst, big, range(8)) is None
    got = counting._split_floors(inst, small, range(8))
    assert got is not None and len(got[1]) == 28
    # Both kinds in one round: the pair for the big job, the rows for the small one.
    runnable = select_runnable(inst)
    data = counting._model_data(inst, runnable)
    assert data["floor_gap"] and data["slot_splits"]
    res = counting_fast.solve_counting(inst, runnable, time_limit=20)
    alloc = build_allocation(inst, "counting", res.placements)
    assert res.placements and check_allocation(inst, alloc, fair_share=True) == []
