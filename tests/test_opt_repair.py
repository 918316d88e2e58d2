"""The swap repair of ``opt`` (``mechanisms/opt/repair.py``), its min-cut flow, and the
numpy-built placement LP that feeds it.

The repair is a fast path: on a cold round where no route's plan deploys the super-machine
points as they are, it swaps whole jobs out of the servers of the deployment flow's minimum
cut until they deploy, so the round ends at the super-machine optimum without the
re-optimisation MIPs and the neighbourhood search.  These tests pin that it fires, that its
answer equals the answer without it, that it changes nothing but swaps of whole jobs of equal
GPU count, and that it declines plans no swap can fix.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import numpy as np
import pytest

from synergy_opt.check import check_allocation
from synergy_opt.formulations.fast import build_placement_fast
from synergy_opt.generate import family_round
from synergy_opt.io import allocation_to_dict
from synergy_opt.matrix import csc_columns
from synergy_opt.mechanisms import make_mechanism
from synergy_opt.mechanisms.opt import Opt, search
from synergy_opt.mechanisms.opt.repair import repair
from synergy_opt.mechanisms.opt.routes import ROUTES
from synergy_opt.mechanisms.opt.transport import cut_flow, deploy
from synergy_opt.types import RoundInstance

ABS_TOL = 1e-6
#: Cold rounds where the best route's plan misses the points by a few cores and the repair
#: makes them deploy: (family, GPUs, seed, route whose plan is repaired).  Without the
#: repair the 128-GPU multi-GPU round pays a re-optimisation MIP (181 ms against 8 ms when
#: measured); the single-GPU one reaches the same answer through later routes.
REPAIRED = (
    ("multi-gpu", 128, 10, "placement-lp"),
    ("single-gpu", 128, 2, "balanced"),
)


def _without_bridges() -> dict[str, Any]:
    """The route registry without the ``balanced-bridges`` routes (for the paths they
    pre-empt)."""
    return {k: r for k, r in ROUTES.items() if not k.startswith("balanced-bridges")}


def _no_mip(*_: Any, **__: Any) -> Any:
    raise AssertionError("the repaired round must not reach the MIPs or the search")


def test_cut_flow_names_the_full_servers() -> None:
    """Job a (6 cores) may only use server 0 (4 cores); b (3) spans both: 7 of 9 cores
    flow, and the cut is server 0, full with a's demand unmet; with room, no cut."""
    used, cut = cut_flow({"a": 6, "b": 3}, {"a": [0], "b": [0, 1]}, [4, 10])
    assert cut == {0}
    assert used[0] == 4 and used[0] + used[1] == 7
    used, cut = cut_flow({"a": 4, "b": 3}, {"a": [0], "b": [0, 1]}, [4, 10])
    assert cut == set() and sum(used) == 7


@pytest.mark.parametrize(("family", "gpus", "seed", "route"), REPAIRED)
def test_repair_deploys_with_swaps_of_whole_jobs_only(
    family: str, gpus: int, seed: int, route: str
) -> None:
    """The route's plan does not deploy the points; the repaired one does, every server
    keeps its GPU count, and every moved job is whole and traded for a whole job of the
    same GPU count (two jobs per swap)."""
    inst = family_round(family, gpus, seed)
    ctx = Opt().context(inst)
    assert ctx is not None
    plan = ROUTES[route].plan(ctx)
    assert deploy(inst, plan, ctx.points) is None
    fixed = repair(ctx, plan, ctx.points)
    assert fixed is not None
    assert deploy(inst, fixed, ctx.points) is not None

    def per_server(p: dict[str, tuple[tuple[int, int], ...]]) -> Counter[int]:
        out: Counter[int] = Counter()
        for parts in p.values():
            for s, k in parts:
                out[s] += k
        return out

    assert per_server(dict(plan)) == per_server(dict(fixed))
    moved = [j for j in plan if plan[j] != fixed[j]]
    assert moved and len(moved) % 2 == 0
    for jid in moved:
        assert len(plan[jid]) == 1 and len(fixed[jid]) == 1
        assert plan[jid][0][1] == fixed[jid][0][1]  # same GPU count, another server
    # Every destination server gave up a job of that GPU count: swaps, not moves.
    gave = Counter((plan[j][0][0], plan[j][0][1]) for j in moved)
    took = Counter((fixed[j][0][0], fixed[j][0][1]) for j in moved)
    assert gave == took


def test_repair_declines_what_no_swap_fixes() -> None:
    """A whole job whose point exceeds its server (the balanced route keeps the jobs the
    super-machine spreads whole) cannot be fixed by swaps: ``None`` at once."""
    inst = family_round("multi-gpu", 128, 10)
    ctx = Opt().context(inst)
    assert ctx is not None
    plan = ROUTES["balanced"].plan(ctx)
    servers = inst.cluster.servers
    big = [
        jid
        for jid, parts in plan.items()
        if len(parts) == 1 and ctx.points[jid][0] > servers[parts[0][0]].cpus
    ]
    assert big, "the round should have a spread job placed whole"
    assert repair(ctx, plan, ctx.points) is None


@pytest.mark.parametrize(("family", "gpus", "seed", "route"), REPAIRED)
def test_repaired_round_needs_no_mip_and_equals_the_old_answer(
    family: str,
    gpus: int,
    seed: int,
    route: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With the repair the round is answered by a repaired route plan at the bound, without
    any re-optimisation MIP, spread move or neighbourhood search; without it the answer is
    no higher (single-GPU 128 seed 2: the same total before the pattern-root route, 170.83
    with it, which stops there within the target gap instead of at the bound 170.98)."""
    inst = family_round(family, gpus, seed)
    # The bridged plan deploys the multi-GPU round's points before the placement LP runs:
    # without that route, the repair of the LP's plan is what answers.
    monkeypatch.setattr(search, "ROUTES", _without_bridges())
    with monkeypatch.context() as mp:
        for name in ("solve_points", "improve", "gather_move", "spread_move", "point_model"):
            mp.setattr(search, name, _no_mip)
        with caplog.at_level(logging.INFO, logger="synergy_opt.mechanisms.opt.search"):
            fast = make_mechanism("opt").allocate(inst)
    assert any(f"{route}+repair reaches" in r.getMessage() for r in caplog.records)
    assert check_allocation(inst, fast, fair_share=True) == []
    assert fast.upper_bound is not None
    assert fast.total_throughput == pytest.approx(fast.upper_bound, abs=ABS_TOL)
    monkeypatch.setattr(search, "REPAIR", False)
    old = make_mechanism("opt").allocate(inst)
    assert fast.total_throughput >= old.total_throughput - ABS_TOL
    assert fast.total_throughput >= make_mechanism("tune").allocate(inst).total_throughput


def test_repaired_round_is_deterministic() -> None:
    """Two fresh ``opt``s on the same round give the same bytes (timing aside)."""
    inst = family_round(*REPAIRED[0][:3])

    def run(i: RoundInstance) -> dict[str, Any]:
        d = allocation_to_dict(make_mechanism("opt").allocate(i))
        d.pop("solve_seconds", None)
        return d

    assert run(inst) == run(inst)


def _placement_reference(
    inst: RoundInstance, ctx_demands: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The placement LP's columns as the list-based builder made them, one by one."""
    n_d = len(ctx_demands)
    cols, cost, upper = [], [], []
    for d, dc in enumerate(ctx_demands):
        for s in dc.allowed:
            r = n_d + 3 * s
            cols.append(
                [(d, 1.0), (r, float(dc.gpus)), (r + 1, float(dc.cpus)), (r + 2, float(dc.mem_gb))]
            )
            cost.append(float((s + 1) * dc.gpus))
            upper.append(float(len(dc.jobs)))
    start, idx, val = csc_columns(cols)
    return np.asarray(cost), np.asarray(upper), start, idx, val


@pytest.mark.parametrize(
    ("family", "gpus", "seed"),
    [("multi-gpu", 128, 1), ("split-penalty", 64, 2), ("mixed-shapes", 64, 3)],
)
def test_placement_lp_matrix_equals_the_column_by_column_build(
    family: str, gpus: int, seed: int
) -> None:
    """The numpy build gives the very arrays (dtype and value) of the per-column build, so
    HiGHS sees the same LP and returns the same vertex."""
    inst = family_round(family, gpus, seed)
    ctx = Opt().context(inst)
    assert ctx is not None
    pm = build_placement_fast(inst, ctx.demands)
    cost, upper, start, idx, val = _placement_reference(inst, ctx.demands)
    mm = pm.matrix
    for got, want in ((mm.cost, cost), (mm.col_upper, upper)):
        assert got.dtype == want.dtype and np.array_equal(got, want)
    for got, want in ((mm.a_start, start), (mm.a_index, idx), (mm.a_value, val)):
        assert got.dtype == want.dtype and np.array_equal(got, want)
    assert pm.columns == tuple((d, s) for d, dc in enumerate(ctx.demands) for s in dc.allowed)


def test_part_swap_trades_a_whole_job_for_gpus_of_a_spread_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On this round no swap of whole jobs closes the gap: a whole job leaves a full
    server for a server where a spread job held GPUs, and the spread job takes its GPUs on
    the full server (drawing its cores and memory anywhere on its span).  Every server
    keeps its GPU count and the number of spread jobs does not change; turning the part
    swap off leaves the plan unrepaired."""
    from synergy_opt.mechanisms.opt import repair as repair_mod

    inst = family_round("multi-gpu", 128, 6)
    ctx = Opt().context(inst)
    assert ctx is not None
    plan = ROUTES["placement-lp"].plan(ctx)
    assert deploy(inst, plan, ctx.points) is None
    fixed = repair(ctx, plan, ctx.points)
    assert fixed is not None and deploy(inst, fixed, ctx.points) is not None
    spread_before = {j for j, p in plan.items() if len(p) > 1}
    spread_after = {j for j, p in fixed.items() if len(p) > 1}
    assert spread_before == spread_after
    assert any(plan[j] != fixed[j] for j in spread_before)  # a span changed
    gpus = Counter()
    for p, sign in ((plan, 1), (fixed, -1)):
        for parts in p.values():
            for s, k in parts:
                gpus[s] += sign * k
    assert all(v == 0 for v in gpus.values())
    monkeypatch.setattr(repair_mod, "_part_swap", lambda *_: None)
    assert repair(ctx, plan, ctx.points) is None


@pytest.mark.parametrize(
    ("family", "gpus", "seed"),
    [
        ("multi-gpu", 128, 1),
        ("multi-gpu", 512, 0),
        ("split-penalty", 64, 2),
        ("cpu-scarce", 128, 3),
    ],
)
def test_placement_lp_without_presolve_reaches_the_same_vertex(
    family: str, gpus: int, seed: int
) -> None:
    """The placement route solves its LP without HiGHS's presolve (faster); the vertex,
    and so every plan rounded from it, is the one HiGHS's defaults reach."""
    from synergy_opt.mechanisms.opt.routes import PLACEMENT_LP_OPTIONS

    inst = family_round(family, gpus, seed)
    ctx = Opt().context(inst)
    assert ctx is not None
    mm = build_placement_fast(inst, ctx.demands).matrix
    plain = ctx.solve(mm, vertex=True)
    fast = ctx.solve(mm, vertex=True, highs_options=PLACEMENT_LP_OPTIONS)
    assert plain.x is not None and fast.x is not None
    assert np.array_equal(plain.x, fast.x)


def _typed_round() -> tuple[Any, dict[str, Any]]:
    """A round on servers of two GPU types whose jobs are restricted to random type sets,
    as a context the swap scans read (``inst``, ``runnable``) and its jobs by id."""
    import dataclasses
    import random
    import types

    from synergy_opt.generate import GenerateSpec, generate_instance

    inst = generate_instance(
        GenerateSpec(servers=12, gpu_load=1.0, gpu_types=(("v100", 48), ("k80", 48)), seed=5)
    )
    r = random.Random(5)
    jobs = tuple(
        dataclasses.replace(j, gpu_types=r.choice((None, ("v100",), ("k80",), ("k80", "v100"))))
        for j in inst.jobs
    )
    return types.SimpleNamespace(inst=inst, runnable=jobs), {j.id: j for j in jobs}


def test_numpy_swap_scan_equals_the_listed_scan() -> None:
    """``_Partners.best_swap`` (numpy, for long partner lists) picks the same swap as
    ``_listed_swap`` (the loop) on 400 random scans: random points (few values, so gains
    tie and the deficit caps them), spare room, busy servers, servers short of the other
    resource, and GPU-type restrictions both ways."""
    import random

    from synergy_opt.mechanisms.opt import repair as rm

    ctx, jobs = _typed_round()
    servers = ctx.inst.cluster.servers
    ids = list(jobs)
    r = random.Random(11)
    picked = 0
    for _ in range(400):
        points = {j: (r.choice((1, 2, 3, 6)), r.choice((10.0, 20.5, 62.5, 83.0)), 1.0) for j in ids}
        members = [(y, r.randrange(len(servers))) for y in r.sample(ids, r.randint(1, 60))]
        x = r.choice([j for j in ids if j not in {y for y, _ in members}])
        s = r.randrange(len(servers))
        res = r.randint(0, 1)
        spare = [
            [r.randint(0, 8) for _ in servers],
            [r.randint(0, 9) * 50_000_000 * 10 for _ in servers],
        ]
        busy = set(r.sample(range(len(servers)), r.randint(0, 4)))
        short = {s} if r.random() < 0.3 else set()
        deficit = r.choice((1, 3, 1e9, 2.5e8))
        dx = (points[x][0], points[x][1] / rm.MEM_UNIT_GB)
        want = rm._listed_swap(
            ctx, jobs, members, points, (x, s, dx), res, deficit, spare, busy, short
        )
        rows = rm._JobRows(ctx)
        group = rm._Partners.of(members, points, rows.row, res, spare)
        busy_arr = np.zeros(len(servers), dtype=bool)
        busy_arr[list(busy)] = True
        other = 1 - res
        got = group.best_swap(
            (dx[res], dx[other]),
            s,
            deficit,
            busy_arr,
            None if short else spare[other][s] + rm.SLACK_EPS,
            rows.allowed,
            rows.row[x],
        )
        assert got == want
        picked += want is not None
    assert 50 < picked < 400  # both outcomes are exercised


@pytest.mark.parametrize(
    ("family", "gpus", "seed", "route"), [*REPAIRED, ("multi-gpu", 128, 6, "placement-lp")]
)
def test_repair_is_the_same_with_every_scan(
    family: str, gpus: int, seed: int, route: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The repair gives the same plan whether every partner list is scanned with numpy or
    every one in a loop (``VECTOR_MIN``), and the numpy scan does run."""
    from synergy_opt.mechanisms.opt import repair as rm

    inst = family_round(family, gpus, seed)
    ctx = Opt().context(inst)
    assert ctx is not None
    plan = ROUTES[route].plan(ctx)
    monkeypatch.setattr(rm, "VECTOR_MIN", 10**9)
    listed = repair(ctx, plan, ctx.points)
    scans: list[int] = []
    real = rm._Partners.best_swap

    def spy(self: Any, *a: Any, **k: Any) -> Any:
        scans.append(len(self.ids))
        return real(self, *a, **k)

    monkeypatch.setattr(rm, "VECTOR_MIN", 1)
    monkeypatch.setattr(rm._Partners, "best_swap", spy)
    assert repair(ctx, plan, ctx.points) == listed
    assert listed is not None and scans
