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

from synergy_opt.mechanisms.opt.context import GpuPlan, Point
from synergy_opt.types import MEM_EPS_GB, PlacementPart, RoundInstance

#: Memory is flowed in whole units of this size (0.1 micro-GB).
MEM_UNIT_GB: float = 1e-7


def transport_flow(
    demand: Mapping[str, int], spans: Mapping[str, Sequence[int]], cap: Sequence[int]
) -> dict[str, dict[int, int]] | None:
    """Integral flow giving every job its demand from its span's servers, or ``None``.

    A bipartite max-flow (Dinic: BFS levels, then blocking flows by DFS) on plain lists:
    these graphs have tens of nodes, where a general graph library spends its time building
    its own residual network (about 15 ms a call with networkx, well under 1 ms here).
    """
    if sum(demand.values()) == 0:
        return {jid: dict.fromkeys(spans[jid], 0) for jid in demand}
    net = _Network(demand, spans, cap)
    if net.total < net.need:
        return None
    return {jid: {s: net.capl[e ^ 1] for s, e in net.job_edges[jid].items()} for jid in demand}


def cut_flow(
    demand: Mapping[str, int], spans: Mapping[str, Sequence[int]], cap: Sequence[int]
) -> tuple[list[int], set[int]]:
    """The max-flow's use of each server and, when it cannot serve every job, the servers
    on the source side of a minimum cut (reachable from an unserved job in the residual
    network: full servers whose jobs ask for more than they hold).  The cut is empty when
    every demand is met."""
    if sum(demand.values()) == 0:
        return [0] * len(cap), set()
    net = _Network(demand, spans, cap)
    used = [0] * len(cap)
    for s, e in net.server_edges.items():
        used[s] = net.capl[e ^ 1]
    if net.total >= net.need:
        return used, set()
    return used, {s for s, node in net.snode.items() if net.level[node] >= 0}


class _Network:
    """A solved bipartite max-flow (source -> job -> server -> sink), Dinic's algorithm.

    After construction ``level`` is the last BFS's: nodes reachable from the source in the
    residual network (>= 0), the source side of a minimum cut when ``total < need``."""

    def __init__(
        self, demand: Mapping[str, int], spans: Mapping[str, Sequence[int]], cap: Sequence[int]
    ) -> None:
        self.need = sum(demand.values())
        jobs = list(demand)
        used = sorted({s for sp in spans.values() for s in sp})
        n_j = len(jobs)
        self.snode = {s: 1 + n_j + i for i, s in enumerate(used)}
        src, dst = 0, 1 + n_j + len(used)
        n = dst + 1
        head: list[list[int]] = [[] for _ in range(n)]
        to: list[int] = []
        capl: list[int] = []
        # Edge e (forward) and e ^ 1 (its reverse) are appended inline, not by a helper
        # call per edge: building was half of a flow's cost on 512-GPU rounds.
        self.job_edges: dict[str, dict[int, int]] = {}
        # Per job: its source edge, its demand and its (job -> server) edges in search order.
        firsts: list[tuple[int, int, list[tuple[int, int]]]] = []
        snode = self.snode
        for i, jid in enumerate(jobs):
            d, u = demand[jid], 1 + i
            out = len(to)
            head[src].append(out)
            head[u].append(out + 1)
            to += (u, src)
            capl += (d, 0)
            pairs: list[tuple[int, int]] = []
            for s in spans[jid]:
                e, v = len(to), snode[s]
                head[u].append(e)
                head[v].append(e + 1)
                to += (v, u)
                capl += (d, 0)
                pairs.append((s, e))
            self.job_edges[jid] = dict(pairs)
            firsts.append((out, d, pairs))
        self.server_edges: dict[int, int] = {}
        for s in used:
            e, v = len(to), snode[s]
            head[v].append(e)
            head[dst].append(e + 1)
            to += (dst, v)
            capl += (max(cap[s], 0), 0)
            self.server_edges[s] = e
        total = _greedy_phase(firsts, self.server_edges, capl)
        while True:
            level = [-1] * n
            level[src] = 0
            queue = [src]
            for u in queue:
                for e in head[u]:
                    if capl[e] > 0 and level[to[e]] < 0:
                        level[to[e]] = level[u] + 1
                        queue.append(to[e])
            if level[dst] < 0:
                break
            nxt = [0] * n
            while True:
                f = _push(src, dst, self.need, head, to, capl, level, nxt)
                if not f:
                    break
                total += f
        self.total = total
        self.capl = capl
        self.level = level


def _greedy_phase(
    jobs: list[tuple[int, int, list[tuple[int, int]]]],
    server_edges: Mapping[int, int],
    capl: list[int],
) -> int:
    """Dinic's first phase on this network, without the search: the flow it pushes.

    The first level graph is source -> jobs -> servers -> sink (every job with demand at
    level 1, every server of a span at 2), so its blocking flow by depth-first search gives
    each job in turn, server by server in span order, as much as the server has left: the
    same augmentations in the same order, hence the same residual capacities, at a tenth of
    the recursive search's cost (the later phases, usually few, search as before).
    """
    total = 0
    for src_edge, need, edges in jobs:
        left = need
        for s, e in edges:
            if left <= 0:
                break
            se = server_edges[s]
            take = min(left, capl[se])
            if take > 0:
                capl[e] -= take
                capl[e ^ 1] += take
                capl[se] -= take
                capl[se ^ 1] += take
                left -= take
        got = need - left
        if got:
            capl[src_edge] -= got
            capl[src_edge ^ 1] += got
            total += got
    return total


def _push(
    u: int,
    dst: int,
    f: int,
    head: list[list[int]],
    to: list[int],
    capl: list[int],
    level: list[int],
    nxt: list[int],
) -> int:
    """One augmenting path of the level graph from ``u`` (Dinic's blocking-flow step).

    The depth-first search without recursion: ``path`` holds the edges taken; a dead end
    steps back over the last one and moves its tail past it, a path to ``dst`` carries
    its bottleneck (at most ``f``) and leaves every ``nxt`` where it was, as the recursive
    search did (the same paths in the same order, at a third of the calls)."""
    path: list[int] = []
    while u != dst:
        hu, lu, i = head[u], level[u] + 1, nxt[u]
        while i < len(hu):
            e = hu[i]
            if capl[e] > 0 and level[to[e]] == lu:
                break
            i += 1
        nxt[u] = i
        if i < len(hu):
            e = hu[i]
            path.append(e)
            u = to[e]
            continue
        if not path:
            return 0
        e = path.pop()
        u = to[e ^ 1]
        nxt[u] += 1
    for e in path:
        f = min(f, capl[e])
    for e in path:
        capl[e] -= f
        capl[e ^ 1] += f
    return f


def deploy(
    inst: RoundInstance,
    plan: GpuPlan,
    points: Mapping[str, Point],
    *,
    avoid: frozenset[int] = frozenset(),
    keep: frozenset[str] = frozenset(),
) -> dict[str, list[PlacementPart]] | None:
    """Placement parts giving every planned job its point, or ``None`` if they cannot fit.

    Spread jobs not in ``keep`` draw nothing from the servers in ``avoid`` when they can do
    without (the neighbourhood search keeps those servers for the jobs it re-decides).  The
    caller checks throughput floors; this only decides where cores and memory go.
    """
    if avoid:
        spared = _deploy(inst, plan, points, avoid, keep)
        if spared is not None:
            return spared
    return _deploy(inst, plan, points, frozenset(), keep)


def _deploy(
    inst: RoundInstance,
    plan: GpuPlan,
    points: Mapping[str, Point],
    avoid: frozenset[int],
    keep: frozenset[str],
) -> dict[str, list[PlacementPart]] | None:
    servers = inst.cluster.servers
    free_c = [s.cpus for s in servers]
    free_m = [s.mem_gb for s in servers]
    whole: list[tuple[str, int, int, int, float]] = []
    spread: dict[str, tuple[tuple[int, int], ...]] = {}
    for jid, parts in plan.items():
        if len(parts) > 1:
            spread[jid] = parts
            continue
        (s, g), (c, m, _) = parts[0], points[jid]
        free_c[s] -= c
        free_m[s] -= m
        whole.append((jid, s, g, c, m))
    if any(c < 0 for c in free_c) or any(m < -MEM_EPS_GB for m in free_m):
        return None
    # Parts only once the plan is known to fit (most failing plans fail here or in the
    # flows below): the whole jobs' in plan order, then the spread jobs', as before.
    if not spread:
        return {jid: [PlacementPart(servers[s].name, g, c, m)] for jid, s, g, c, m in whole}
    spans = {jid: [s for s, _ in parts] for jid, parts in spread.items()}
    draw = {
        jid: sp if jid in keep else [s for s in sp if s not in avoid] for jid, sp in spans.items()
    }
    cores = transport_flow({jid: points[jid][0] for jid in spread}, draw, free_c)
    if cores is None:
        return None
    unit_cap = [int(math.floor(m / MEM_UNIT_GB + 5.0)) for m in free_m]
    units = {jid: int(math.ceil(points[jid][1] / MEM_UNIT_GB - 1e-3)) for jid in spread}
    mem = transport_flow(units, draw, unit_cap)
    if mem is None:
        return None
    out = {jid: [PlacementPart(servers[s].name, g, c, m)] for jid, s, g, c, m in whole}
    for jid, parts in spread.items():
        out[jid] = [
            PlacementPart(
                servers[s].name, g, cores[jid].get(s, 0), mem[jid].get(s, 0) * MEM_UNIT_GB
            )
            for s, g in parts
        ]
    return out


def overcommitment(inst: RoundInstance, plan: GpuPlan, points: Mapping[str, Point]) -> float:
    """How far ``plan`` over-commits cores and memory at ``points`` (0 when it fits well).

    A cheap ranking, not a feasibility test: each job's point is split over its servers in
    proportion to its GPUs there, and each server's excess is counted as a fraction of the
    cluster's cores (memory alike).
    """
    servers = inst.cluster.servers
    used_c = [0.0] * len(servers)
    used_m = [0.0] * len(servers)
    for jid, parts in plan.items():
        c, m, _ = points[jid]
        g = sum(k for _, k in parts)
        for s, k in parts:
            used_c[s] += c * k / g
            used_m[s] += m * k / g
    cl = inst.cluster
    return sum(
        max(used_c[s] - srv.cpus, 0.0) / max(cl.total_cpus, 1)
        + max(used_m[s] - srv.mem_gb, 0.0) / max(cl.total_mem_gb, 1e-9)
        for s, srv in enumerate(servers)
    )
