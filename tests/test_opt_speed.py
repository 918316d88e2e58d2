"""The fast paths that make ``opt`` cheaper per round without changing its answers.

Each is an exact shortcut of a slower computation: TUNE's allocation assembled only on demand
(its total computed without it), the max-flow's first Dinic phase done as the greedy it
amounts to, the placement LP read at its positive entries only, ``must_spread`` memoised per
GPU-type restriction, and the checker's single-part jobs and bisected grid look-up.  Every
test compares a shortcut with the computation it replaces, or fails if the shortcut is
taken away.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Sequence

import networkx as nx
import numpy as np
import pytest

from synergy_opt.check import _floor_lookup, check_allocation, facts
from synergy_opt.generate import MULTI_GPU_MIX, GenerateSpec, family_round, generate_instance
from synergy_opt.io import allocation_to_dict, dumps
from synergy_opt.mechanisms.opt import Opt, answer, transport
from synergy_opt.mechanisms.opt.context import RoundContext
from synergy_opt.mechanisms.opt.routes import FRACTION_EPS, balanced, vertex_entries
from synergy_opt.mechanisms.packing import max_single_server_gpus
from synergy_opt.mechanisms.tune import Tune, TuneRound, TuneSorted, placements_total
from synergy_opt.types import (
    Allocation,
    Job,
    PlacementPart,
    RoundInstance,
    ThroughputMatrix,
    build_allocation,
)


def _bytes(a: Allocation) -> str:
    d = allocation_to_dict(a)
    d.pop("solve_seconds")
    return dumps(d)


def _typed_round() -> RoundInstance:
    """Two GPU types on servers of two sizes (8-GPU v100, 4-GPU k80), multi-GPU jobs."""
    return generate_instance(
        GenerateSpec(
            servers=12,
            server_shapes=((4, 8, 24, 500.0), (8, 4, 12, 250.0)),
            gpu_types=(("v100", 32), ("k80", 32)),
            gpu_mix=tuple(MULTI_GPU_MIX.items()),
            jobs=14,
            gpu_load=None,
            seed=3,
        )
    )


# --------------------------------------------------------------------------- TUNE on demand


@pytest.mark.parametrize("family", ["multi-gpu", "split-penalty", "mixed-shapes"])
@pytest.mark.parametrize("tune_cls", [Tune, TuneSorted])
def test_tune_round_is_tune_allocate(family: str, tune_cls: type[Tune]) -> None:
    """TUNE's round object carries the total ``allocate`` reports, to the bit, and builds
    the same allocation (timing aside)."""
    for seed in range(3):
        inst = family_round(family, 64, seed)
        got = tune_cls().tune_round(inst)
        want = tune_cls().allocate(inst)
        assert got.total_throughput == want.total_throughput
        assert _bytes(got.allocation()) == _bytes(want)
        assert got.allocation() is got.allocation()  # built once


def test_placements_total_is_build_allocation_total_on_spread_and_typed_answers() -> None:
    """The total without the allocation equals ``build_allocation``'s on answers that spread
    jobs (opt's), on typed rounds, and on parts that must be merged per server."""
    insts = [family_round("multi-gpu", 128, s) for s in range(3)] + [_typed_round()]
    spread = 0
    for inst in insts:
        alloc = Opt().allocate(inst)
        spread += alloc.fragmented_jobs
        parts = {ja.id: list(ja.placement) for ja in alloc.jobs}
        assert placements_total(inst, parts) == alloc.total_throughput
    assert spread > 0  # the multi-part path was exercised
    inst = insts[0]
    alloc = Tune().allocate(inst)
    ja = next(j for j in alloc.jobs if j.gpus >= 2)
    p = ja.placement[0]
    halves = [  # one server's part given as two, with an odd memory split
        PlacementPart(p.server, 1, p.cpus // 2, p.mem_gb / 3),
        PlacementPart(p.server, p.gpus - 1, p.cpus - p.cpus // 2, p.mem_gb - p.mem_gb / 3),
    ]
    parts = {j.id: list(j.placement) for j in alloc.jobs}
    parts[ja.id] = halves
    assert placements_total(inst, parts) == build_allocation(inst, "x", parts).total_throughput


def test_opt_builds_tune_allocation_only_when_it_returns_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On rounds where opt's own answer wins, TUNE's allocation is never assembled; where
    TUNE wins, opt returns exactly TUNE's allocation."""
    rounds: list[TuneRound] = []
    real = Tune.tune_round

    def spy(self: Tune, inst: RoundInstance, runnable: Sequence[Job] | None = None) -> TuneRound:
        out = real(self, inst, runnable)
        rounds.append(out)
        return out

    monkeypatch.setattr(Tune, "tune_round", spy)
    for seed in range(3):
        out = Opt().allocate(family_round("multi-gpu", 64, seed))
        assert not out.notes
        # TUNE may not run at all (tests/test_opt_subset_bound.py); where it ran, its
        # allocation was not assembled
        assert all(not r._built for r in rounds)
    inst = family_round("multi-gpu", 64, 0)
    worse = build_allocation(inst, "opt", {})  # schedules nothing: TUNE is higher
    tr = Tune().tune_round(inst)
    out = answer.better_of(inst, worse, tr, "opt", 0.0)
    want = dataclasses.replace(Tune().allocate(inst), mechanism="opt")
    assert out.total_throughput == want.total_throughput
    assert [ja.placement for ja in out.jobs] == [ja.placement for ja in want.jobs]
    assert any("returned tune's allocation" in n for n in out.notes)


# --------------------------------------------------------------------------- max-flow


def _random_networks(
    n: int, seed: int
) -> list[tuple[dict[str, int], dict[str, list[int]], list[int]]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        ns, nj = rng.randint(1, 10), rng.randint(1, 9)
        cap = [rng.randint(-2, 30) for _ in range(ns)]
        spans = {f"j{i}": rng.sample(range(ns), rng.randint(1, min(ns, 4))) for i in range(nj)}
        demand = {j: rng.randint(0, 25) for j in spans}
        out.append((demand, spans, cap))
    return out


def test_network_flow_is_a_maximum_flow() -> None:
    """The greedy first phase plus Dinic's later phases reach networkx's maximum flow, and
    the flow keeps every demand and capacity."""
    for demand, spans, cap in _random_networks(300, 7):
        g = nx.DiGraph()
        for jid, sp in spans.items():
            g.add_edge("src", jid, capacity=demand[jid])
            for s in sp:
                g.add_edge(jid, ("s", s), capacity=demand[jid])
        for s, c in enumerate(cap):
            g.add_edge(("s", s), "dst", capacity=max(c, 0))
        want = nx.maximum_flow_value(g, "src", "dst")
        net = transport._Network(demand, spans, cap)
        assert net.total == want
        used, cut = transport.cut_flow(demand, spans, cap)
        assert all(u <= max(c, 0) for u, c in zip(used, cap, strict=True))
        assert sum(used) == want
        assert (cut == set()) == (want == sum(demand.values()))
        flow = transport.transport_flow(demand, spans, cap)
        if flow is not None:
            assert all(sum(flow[j].values()) == demand[j] for j in demand)


def test_greedy_phase_needs_no_search_when_it_saturates(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where serving jobs greedily meets every demand, the path search never runs (it did,
    once per augmenting path, before the greedy phase); where it does not, the later phases
    reroute (job a moves to server 1 so job b gets server 0)."""

    def no_search(*_: object) -> int:
        raise AssertionError("the greedy phase should have met every demand")

    monkeypatch.setattr(transport, "_push", no_search)
    demand = {"a": 5, "b": 3, "c": 4}
    spans = {"a": [0, 1], "b": [1], "c": [2, 0]}
    assert transport._Network(demand, spans, [5, 6, 4]).total == 12
    monkeypatch.undo()
    net = transport._Network({"a": 1, "b": 1}, {"a": [0, 1], "b": [0]}, [1, 1])
    assert net.total == 2


# --------------------------------------------------------------------------- placement LP


def test_vertex_entries_are_the_positive_entries_in_column_order() -> None:
    """The sparse read keeps exactly the entries above FRACTION_EPS, per demand, in column
    order, with their values (noise at or below the threshold dropped)."""
    rng = np.random.default_rng(3)
    columns = [(d, s) for d in range(5) for s in rng.permutation(7).tolist()]
    x = rng.choice([0.0, FRACTION_EPS, -1e-12, 0.25, 1.0, 3.0], size=len(columns))
    got = vertex_entries(columns, x, 5)
    want: list[list[tuple[int, float]]] = [[] for _ in range(5)]
    for (d, s), v in zip(columns, x, strict=True):
        if v > FRACTION_EPS:
            want[d].append((s, float(v)))
    assert got == want


# --------------------------------------------------------------------------- must_spread memo


def test_must_spread_memo_is_per_gpu_type_restriction() -> None:
    """8-GPU jobs must spread on 4-GPU k80 servers, not where an 8-GPU v100 server is
    allowed; the memo answers each restriction as the full scan does, in any order."""
    inst = _typed_round()
    ctx = Opt().context(inst)
    assert ctx is not None
    job = dataclasses.replace(ctx.runnable[0], gpus=8)
    answers = []
    for types in [("k80",), ("v100",), None, ("k80",), ("v100", "k80"), None]:
        j = dataclasses.replace(job, gpu_types=types)
        want = j.gpus > max_single_server_gpus(inst.cluster.servers, j)
        assert ctx.must_spread(j) == want
        answers.append(want)
    assert answers[0] and not answers[1]


# --------------------------------------------------------------------------- checker


def _scan_lookup(w: ThroughputMatrix, cpus: float, mem: float) -> float:
    """The checker's floor look-up as a scan of both axes (its former definition)."""
    ci = max((i for i, c in enumerate(w.cpus) if c <= cpus + 1e-9), default=-1)
    mi = max((k for k, m in enumerate(w.mem_gb) if m <= mem + 1e-6), default=-1)
    return 0.0 if ci < 0 or mi < 0 else w.throughput[ci][mi]


def test_floor_lookup_bisection_is_the_scan() -> None:
    rng = random.Random(5)
    for _ in range(200):
        cpus = sorted(rng.sample(range(1, 40), rng.randint(1, 6)))
        mem = sorted(rng.sample([4.0 * k for k in range(1, 60)], rng.randint(1, 6)))
        w = ThroughputMatrix(
            tuple(cpus), tuple(mem), tuple(tuple(rng.random() for _ in mem) for _ in cpus)
        )
        for _ in range(20):
            c = rng.choice([*cpus, 0, 45, rng.uniform(0, 45), cpus[0] - 1e-10])
            m = rng.choice([*mem, 0.0, 300.0, rng.uniform(0, 300), mem[-1] - 1e-7])
            assert _floor_lookup(w, c, m) == _scan_lookup(w, c, m)


def test_single_part_facts_and_their_breaks() -> None:
    """The checker's single-part shortcut tallies a job as the general sums do, and still
    reports a single-part job that breaks a rule."""
    inst = family_round("multi-gpu", 64, 1)
    alloc = Opt().allocate(inst)
    f = facts(inst, alloc)
    single = [s for s in f.scheduled if len(s.alloc.placement) == 1]
    assert single
    for s in single:
        parts = s.alloc.placement
        assert (s.gpus, s.cpus, s.mem_gb) == (
            sum(p.gpus for p in parts),
            sum(p.cpus for p in parts),
            sum(p.mem_gb for p in parts),
        )
        assert s.throughput == _scan_lookup(s.job.sensitivity, s.cpus, s.mem_gb)
    assert check_allocation(inst, alloc, fair_share=True) == []
    k, ja = next((k, ja) for k, ja in enumerate(alloc.jobs) if len(ja.placement) == 1)
    p = ja.placement[0]
    starved = dataclasses.replace(
        ja, cpus=1, mem_gb=1.0, placement=(PlacementPart(p.server, p.gpus, 1, 1.0),)
    )
    broken = dataclasses.replace(alloc, jobs=(*alloc.jobs[:k], starved, *alloc.jobs[k + 1 :]))
    kinds = {v.kind for v in check_allocation(inst, broken, fair_share=True)}
    assert {"throughput", "fair-share", "total"} <= kinds
    assert math.isfinite(sum(s.throughput for s in facts(inst, broken).scheduled))


def test_floor_memo_follows_the_cluster_not_the_names() -> None:
    """Floors remembered across checks belong to one cluster's values: the same allocation
    on a cluster of the same server names with twice the cores is judged by that cluster's
    floors, exactly as with an empty memo."""
    from synergy_opt import check

    inst = family_round("multi-gpu", 64, 2)
    alloc = Opt().allocate(inst)
    rich = dataclasses.replace(
        inst,
        cluster=dataclasses.replace(
            inst.cluster,
            servers=tuple(dataclasses.replace(s, cpus=2 * s.cpus) for s in inst.cluster.servers),
        ),
    )
    warm = [
        [str(v) for v in check_allocation(i, alloc, fair_share=True)] for i in (inst, rich, inst)
    ]
    cold = []
    for i in (inst, rich, inst):
        check._FLOORS.clear()
        cold.append([str(v) for v in check_allocation(i, alloc, fair_share=True)])
    assert warm == cold
    assert warm[0] == [] and any(v.startswith("fair-share-report:") for v in warm[1])


def _balanced_by_scan(ctx: RoundContext) -> dict[str, tuple[tuple[int, int], ...]]:
    """``balanced`` as a scan of every server per job (its former form), for comparison."""
    servers = ctx.inst.cluster.servers
    free_g = [s.gpus for s in servers]
    cap_c = [float(max(s.cpus, 1)) for s in servers]
    cap_m = [float(max(s.mem_gb, 1e-9)) for s in servers]
    used_c, used_m = [0.0] * len(servers), [0.0] * len(servers)
    prio = {j.id: k for k, j in enumerate(ctx.inst.jobs)}
    mean_c, mean_m = float(np.mean(cap_c)), float(np.mean(cap_m))
    items = sorted(
        ((dc, job) for dc in ctx.demands for job in dc.jobs),
        key=lambda t: (-t[0].gpus, -(t[0].cpus / mean_c + t[0].mem_gb / mean_m), prio[t[1].id]),
    )
    plan: dict[str, tuple[tuple[int, int], ...]] = {}
    for dc, job in items:
        c, m, g = dc.cpus, dc.mem_gb, dc.gpus
        loads = [
            max((used_c[s] + c) / cap_c[s], (used_m[s] + m) / cap_m[s])
            if s in dc.allowed and free_g[s] >= g
            else math.inf
            for s in range(len(servers))
        ]
        low = min(loads)
        assert low < math.inf  # these rounds never spread in balanced
        s = loads.index(low)
        plan[job.id] = ((s, g),)
        free_g[s] -= g
        used_c[s] += c
        used_m[s] += m
    return plan


@pytest.mark.parametrize("family", ["single-gpu", "multi-gpu", "cpu-scarce"])
def test_balanced_heap_is_the_argmin_scan(family: str) -> None:
    """The heap of server loads picks what a scan of all servers picks (lowest load, lowest
    index among equal loads), job after job."""
    for seed in range(3):
        ctx = Opt().context(family_round(family, 64, seed))
        assert ctx is not None
        assert balanced(ctx) == _balanced_by_scan(ctx)
