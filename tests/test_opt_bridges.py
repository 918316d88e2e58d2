"""The ``balanced-bridges`` route of ``opt`` (``mechanisms/opt/bridges.py``).

Bridging spreads a few jobs of ``balanced``'s whole-job plan so that they carry cores and
memory between servers, without a solver.  These tests pin what it promises (GPUs per
server kept, only jobs that may spread are spread, the fragmentation cap, no server given
more whole-job load than it holds, the same plan every run), that its bookkeeping is a
real flow (a pass that ends with every server within capacity deploys), that it does the
placement LP's job on the rounds it was built for with fewer spread jobs, and that where
its plan does not deploy ``opt`` answers exactly as without the route.
"""

from __future__ import annotations

import logging
from collections import Counter

import pytest

from synergy_opt.check import check_allocation
from synergy_opt.generate import family_round
from synergy_opt.io import allocation_to_dict
from synergy_opt.mechanisms import make_mechanism
from synergy_opt.mechanisms.opt import ROUTES, search
from synergy_opt.mechanisms.opt.bridges import EXCESS_EPS, _Bridging, bridged
from synergy_opt.mechanisms.opt.context import GpuPlan, RoundContext
from synergy_opt.mechanisms.opt.routes import balanced
from synergy_opt.mechanisms.opt.transport import deploy
from tests.conftest import family_context

ROUNDS = [
    ("multi-gpu", 32, 3),
    ("multi-gpu", 64, 1),
    ("multi-gpu", 128, 0),
    ("multi-gpu", 128, 17),
    ("mixed-shapes", 64, 5),
    ("split-penalty", 64, 2),
]


def _per_server(plan: GpuPlan) -> Counter[int]:
    out: Counter[int] = Counter()
    for parts in plan.values():
        for s, k in parts:
            out[s] += k
    return out


def _whole_load(ctx: RoundContext, plan: GpuPlan) -> list[tuple[float, float]]:
    load = [[0.0, 0.0] for _ in ctx.inst.cluster.servers]
    for jid, parts in plan.items():
        if len(parts) == 1:
            c, m, _ = ctx.points[jid]
            load[parts[0][0]][0] += c
            load[parts[0][0]][1] += m
    return [(c, m) for c, m in load]


@pytest.mark.parametrize(("family", "gpus", "seed"), ROUNDS)
def test_bridges_keep_what_they_promise(family: str, gpus: int, seed: int) -> None:
    ctx = family_context(family, gpus, seed)
    base = balanced(ctx)
    plan = bridged(ctx, base)
    jobs = {j.id: j for j in ctx.runnable}
    servers = ctx.inst.cluster.servers
    assert set(plan) == set(base)
    for jid, parts in plan.items():
        assert sum(k for _, k in parts) == jobs[jid].gpus
        assert all(k >= 1 and jobs[jid].may_use(servers[s]) for s, k in parts)
    assert _per_server(plan) == _per_server(base)
    newly = [j for j in plan if len(plan[j]) > 1 and len(base[j]) == 1]
    assert all(ctx.may_spread(jobs[j]) for j in newly)
    assert sum(len(p) > 1 for p in plan.values()) <= ctx.max_fragmented
    before, after = _whole_load(ctx, base), _whole_load(ctx, plan)
    for s, srv in enumerate(servers):
        if before[s][0] <= srv.cpus and before[s][1] <= srv.mem_gb + EXCESS_EPS[1]:
            assert after[s][0] <= srv.cpus + EXCESS_EPS[0]
            assert after[s][1] <= srv.mem_gb + EXCESS_EPS[1]
    assert bridged(ctx, base) == plan  # deterministic
    assert balanced(ctx) == base  # the plan given is not changed


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("gpus", [64, 128])
def test_a_pass_that_ends_within_capacity_deploys(gpus: int, seed: int) -> None:
    """The pass tracks where each spread job draws its cores and memory; those draws are a
    flow, so when no server ends over, the max-flow deployment must succeed."""
    ctx = family_context("multi-gpu", gpus, seed)
    run = _Bridging(ctx, balanced(ctx))
    plan = run.run()
    within = all(run.over(s) == 0.0 for s in range(len(ctx.inst.cluster.servers)))
    if within:
        assert deploy(ctx.inst, plan, ctx.points) is not None
    for jid, (cores, mem) in run.draw.items():
        c, m, _ = ctx.points[jid]
        assert sum(cores.values()) == pytest.approx(c)
        assert sum(mem.values()) == pytest.approx(m)
        assert min(cores.values()) >= -1e-9 and min(mem.values()) >= -1e-9
        assert set(cores) <= {s for s, _ in plan[jid]}


def test_bridges_do_the_placement_lps_job_with_fewer_spread_jobs() -> None:
    """Multi-GPU mix at 128 GPUs, seeds 0-9: ``balanced``'s plan never deploys the points;
    the bridged one does (directly) on most rounds, and ``opt`` then spreads fewer jobs in
    all than without the route (where the placement LP's plan, repaired, answers)."""
    deployed = 0
    for seed in range(10):
        ctx = family_context("multi-gpu", 128, seed)
        assert deploy(ctx.inst, balanced(ctx), ctx.points) is None
        deployed += deploy(ctx.inst, bridged(ctx, balanced(ctx)), ctx.points) is not None
    assert deployed >= 6


def test_opt_spreads_fewer_jobs_with_the_route(monkeypatch: pytest.MonkeyPatch) -> None:
    def spread(seeds: range) -> tuple[int, list[float]]:
        total, values = 0, []
        for seed in seeds:
            inst = family_round("multi-gpu", 128, seed)
            a = make_mechanism("opt").allocate(inst)
            assert check_allocation(inst, a, fair_share=True) == []
            total += sum(len(j.placement) > 1 for j in a.jobs)
            values.append(round(a.total_throughput, 9))
        return total, values

    seeds = range(0, 6)
    with_route, totals = spread(seeds)
    routes = {k: r for k, r in ROUTES.items() if not k.startswith("balanced-bridges")}
    monkeypatch.setattr(search, "ROUTES", routes)
    without, totals_before = spread(seeds)
    assert totals == totals_before  # both reach the bound
    assert with_route < without


def test_a_plan_that_does_not_deploy_is_dropped(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Multi-GPU 128 GPUs seed 35: neither bridged plan deploys, even after the swap
    repair.  Both are dropped, not re-optimised: the answer is byte for byte the answer
    of ``opt`` without the routes."""
    inst = family_round("multi-gpu", 128, 35)
    with caplog.at_level(logging.INFO, logger="synergy_opt.mechanisms.opt.search"):
        got = allocation_to_dict(make_mechanism("opt").allocate(inst))
    for name in ("balanced-bridges", "balanced-bridges-spreading"):
        assert any(f"{name}: the points do not deploy (dropped)" in r.getMessage()
                   for r in caplog.records)  # fmt: skip
    routes = {k: r for k, r in ROUTES.items() if not k.startswith("balanced-bridges")}
    monkeypatch.setattr(search, "ROUTES", routes)
    before = allocation_to_dict(make_mechanism("opt").allocate(inst))
    got.pop("solve_seconds")
    before.pop("solve_seconds")
    assert got == before


def test_the_route_sits_after_the_consolidating_routes() -> None:
    """Registry order is the order tried: whole-job routes first, then bridges (few spread
    jobs, no solver), then the placement LP (up to 3s spread jobs)."""
    names = [n for n, r in ROUTES.items() if not r.late]
    assert names.index("balanced") < names.index("server-class-mip")
    assert names.index("server-class-mip") < names.index("balanced-bridges")
    assert names.index("balanced-bridges") + 1 == names.index("balanced-bridges-spreading")
    assert names.index("balanced-bridges-spreading") + 1 == names.index("placement-lp")
    for name in ("balanced-bridges", "balanced-bridges-spreading"):
        assert ROUTES[name].fast_only and ROUTES[name].spreads
    assert not ROUTES["placement-lp"].fast_only


def _room_from_scratch(run: _Bridging, s: int) -> tuple[float, float]:
    """Server s's room recomputed: capacity less its whole jobs' points and the draws."""
    used = [0.0, 0.0]
    for jid, parts in run.plan.items():
        if s not in parts:
            continue
        for r in (0, 1):
            if jid in run.draw:
                used[r] += run.draw[jid][r].get(s, 0.0)
            else:
                used[r] += run.need[jid][r]
    return run.cap[0][s] - used[0], run.cap[1][s] - used[1]


def test_relays_and_hand_overs_to_spread_jobs_keep_the_books(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The two moves that spread no new job (a relay through another server of a spread
    job's span, a hand-over to a job spread already) are taken on these rounds, and after
    every move the tracked room equals the room recomputed from the plan and the draws,
    each server keeps its GPUs, every draw is non-negative on a server of the job's span,
    and each spread job draws exactly its point."""
    kinds: Counter[str] = Counter()
    real = _Bridging.apply

    def checked(self: _Bridging, s: int, move: tuple) -> None:  # type: ignore[type-arg]
        gpus_before = _per_server({j: tuple(p.items()) for j, p in self.plan.items()})
        spread_b = move[3] in self.draw
        real(self, s, move)
        kind = move[0]
        kinds[kind + (" to a spread job" if kind == "hand-over" and spread_b else "")] += 1
        assert _per_server({j: tuple(p.items()) for j, p in self.plan.items()}) == gpus_before
        for t in range(len(self.servers)):
            c, m = _room_from_scratch(self, t)
            assert self.room[0][t] == pytest.approx(c, abs=1e-6)
            assert self.room[1][t] == pytest.approx(m, abs=1e-6)
        for jid, (cores, mem) in self.draw.items():
            span = {u for u, k in self.plan[jid].items() if k > 0}
            for d, need in ((cores, self.need[jid][0]), (mem, self.need[jid][1])):
                assert all(v >= -1e-9 for v in d.values())
                assert {u for u, v in d.items() if v > 1e-9} <= span
                assert sum(d.values()) == pytest.approx(need)

    monkeypatch.setattr(_Bridging, "apply", checked)
    for seed in range(12):
        ctx = family_context("multi-gpu", 128, seed)
        bridged(ctx, balanced(ctx))
    assert kinds["relay"] >= 1 and kinds["hand-over to a spread job"] >= 1, kinds


def test_the_moves_that_spread_no_new_job_bridge_more_rounds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Multi-GPU 128 GPUs seeds 0-29: with relays and hand-overs to spread jobs the bridged
    plan deploys on more rounds, with fewer spread jobs where both deploy; switched off
    (``ZERO_SPREAD_MOVES``) the pass is the one before them."""
    from synergy_opt.mechanisms.opt import bridges

    def tally() -> tuple[set[int], dict[int, int]]:
        ok, spread = set(), {}
        for seed in range(30):
            ctx = family_context("multi-gpu", 128, seed)
            plan = bridged(ctx, balanced(ctx))
            if deploy(ctx.inst, plan, ctx.points) is not None:
                ok.add(seed)
                spread[seed] = sum(len(p) > 1 for p in plan.values())
        return ok, spread

    on, spread_on = tally()
    monkeypatch.setattr(bridges, "ZERO_SPREAD_MOVES", False)
    off, spread_off = tally()
    assert len(on) > len(off)
    both = on & off
    assert sum(spread_on[s] for s in both) < sum(spread_off[s] for s in both)
