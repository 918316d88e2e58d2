"""Cores and memory for a fixed GPU plan: a transportation problem, solved by max-flow.

Once every job's GPUs sit on known servers, a job's cores and memory may come from any
server where it has GPUs (docs/formats.md: parts need >= 1 GPU, cores and memory are free per
part).  Jobs on one server take their point from that server; a spread job draws from the
servers it spans.  Cores and memory are two independent bipartite flows
(source -> job -> server -> sink), so the points deploy iff both max-flows saturate the
jobs.  Integral capacities give an integral core flow (no rounding of cores).  Memory is
flowed in units of :data:`MEM_UNIT_GB` with a slack below the checker's tolerance.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import networkx as nx

from synergy_opt.mechanisms.opt.context import GpuPlan, Point
from synergy_opt.types import MEM_EPS_GB, PlacementPart, RoundInstance

#: Memory is flowed in whole units of this size (0.1 micro-GB).
MEM_UNIT_GB: float = 1e-7


def _flow(
    demand: Mapping[str, int], spans: Mapping[str, Sequence[int]], cap: Sequence[int]
) -> dict[str, dict[int, int]] | None:
    """Integral flow giving every job its demand from its span's servers, or ``None``."""
    need = sum(demand.values())
    if need == 0:
        return {jid: dict.fromkeys(spans[jid], 0) for jid in demand}
    g = nx.DiGraph()
    for jid, d in demand.items():
        g.add_edge("src", ("j", jid), capacity=d)
        for s in spans[jid]:
            g.add_edge(("j", jid), ("s", s), capacity=need)
    for s in {s for sp in spans.values() for s in sp}:
        g.add_edge(("s", s), "dst", capacity=max(cap[s], 0))
    value, flow = nx.maximum_flow(g, "src", "dst")
    if value < need:
        return None
    return {jid: {s: int(flow[("j", jid)][("s", s)]) for s in spans[jid]} for jid in demand}


def deploy(
    inst: RoundInstance, plan: GpuPlan, points: Mapping[str, Point]
) -> dict[str, list[PlacementPart]] | None:
    """Placement parts giving every planned job its point, or ``None`` if they cannot fit.

    The caller checks throughput floors; this only decides where cores and memory go.
    """
    servers = inst.cluster.servers
    free_c = [s.cpus for s in servers]
    free_m = [s.mem_gb for s in servers]
    out: dict[str, list[PlacementPart]] = {}
    spread: dict[str, tuple[tuple[int, int], ...]] = {}
    for jid, parts in plan.items():
        if len(parts) > 1:
            spread[jid] = parts
            continue
        (s, g), (c, m, _) = parts[0], points[jid]
        free_c[s] -= c
        free_m[s] -= m
        out[jid] = [PlacementPart(servers[s].name, g, c, m)]
    if any(c < 0 for c in free_c) or any(m < -MEM_EPS_GB for m in free_m):
        return None
    if not spread:
        return out
    spans = {jid: [s for s, _ in parts] for jid, parts in spread.items()}
    cores = _flow({jid: points[jid][0] for jid in spread}, spans, free_c)
    if cores is None:
        return None
    unit_cap = [int(math.floor(m / MEM_UNIT_GB + 5.0)) for m in free_m]
    units = {jid: int(math.ceil(points[jid][1] / MEM_UNIT_GB - 1e-3)) for jid in spread}
    mem = _flow(units, spans, unit_cap)
    if mem is None:
        return None
    for jid, parts in spread.items():
        out[jid] = [
            PlacementPart(servers[s].name, g, cores[jid][s], mem[jid][s] * MEM_UNIT_GB)
            for s, g in parts
        ]
    return out
