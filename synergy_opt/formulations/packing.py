"""Packing at fixed points: whole GPUs, cores and memory per server once each job's grid
point and mode (whole on one server, or spread) are decided (``formulations/packing.md``).

A super-machine optimum (pooled, or the full-server one) fixes every job's point; it is an
allocation's value exactly when its jobs can be packed onto the real servers at those
points.  When they can, that value is both the answer and, being a relaxation's optimum, a
proof of optimality.  This is the Pyomo reference (solved by HiGHS); the fast path is
:mod:`~synergy_opt.formulations.packing_cp` (CP-SAT, the same names), which tests prove
feasible exactly when this model is.

    (pk1)  sum_s n[d, s] = N_d                       every whole job of group d placed
    (pk2)  sum_s a[j, s] = g_j                       a spread job's GPUs
    (pk3)  sum_s p[j, s] = c_j                       its cores, anywhere on its span
    (pk4)  sum_s q[j, s] = m_j                       its memory, anywhere on its span
    (pk5)  u[j, s] <= a[j, s] <= min(g_j, G_s) u[j, s]   a part is at least one GPU
    (pk6)  p[j, s] <= C_s u[j, s],  (pk7) q[j, s] <= M_s u[j, s]   only where it has GPUs
    (pk8)  sum_d g_d n[d, s] + sum_j a[j, s] <= G_s  per-server GPUs
    (pk9)  sum_d c_d n[d, s] + sum_j p[j, s] <= C_s  per-server cores
    (pk10) sum_d m_d n[d, s] + sum_j q[j, s] <= M_s  per-server memory
    (pk11) sum_o f[e, o] = N_e                       every free job at one option
    (pk12) sum_{e,o} w_o f[e, o] >= W                the free jobs' throughput

(free groups e, whose jobs pick their point, add g_e f, c_o f and m_o f on the option's
server to (pk8)-(pk10)).

:func:`build_packing_lp` is the reference of its pattern LP (``formulations/packing_lp.md``),
whose positive shortfall proves that no packing exists; the fast path is
:mod:`~synergy_opt.formulations.packing_lp`, over the same listing of server contents.
:func:`build_packing_exact` is the reference of the exact program over (content, spread
jobs) columns (``formulations/packing_exact.md``); its fast path is
:mod:`~synergy_opt.formulations.packing_exact`.
"""

from __future__ import annotations

import math
from typing import Any

import pyomo.environ as pyo

from synergy_opt.formulations.packing_data import (
    PackingData,
    SpreadJob,
    WholeGroup,
    packing_data,
)
from synergy_opt.formulations.packing_exact import ExactListing
from synergy_opt.formulations.packing_flow import FlowGraph
from synergy_opt.formulations.packing_lp import PatternListing

__all__ = [
    "PackingData",
    "SpreadJob",
    "WholeGroup",
    "build_packing",
    "build_packing_exact",
    "build_packing_lp",
    "packing_data",
]


def build_packing(data: PackingData) -> pyo.ConcreteModel:
    """(pk0)-(pk10) over ``data`` (Pyomo; the objective, fewest parts of spread jobs, only
    picks among packings: the model's question is whether there is one)."""
    m = pyo.ConcreteModel(name="packing")
    G = {s: v[0] for s, v in enumerate(data.servers)}
    C = {s: v[1] for s, v in enumerate(data.servers)}
    M = {s: v[2] for s, v in enumerate(data.servers)}
    m.DS = pyo.Set(
        dimen=2,
        ordered=True,
        initialize=[(d, s) for d, gr in enumerate(data.groups) for s in gr.servers],
        doc="(whole group, server) pairs: servers that hold one of its jobs",
    )
    m.JS = pyo.Set(
        dimen=2,
        ordered=True,
        initialize=[(j, s) for j, sj in enumerate(data.spread) for s in sj.servers],
        doc="(spread job, server) pairs its GPU types allow",
    )
    m.n = pyo.Var(m.DS, domain=pyo.NonNegativeIntegers, doc="whole jobs of group d on s")
    m.a = pyo.Var(m.JS, domain=pyo.NonNegativeIntegers, doc="GPUs of spread job j on s")
    m.u = pyo.Var(m.JS, domain=pyo.Binary, doc="spread job j has a part on s")
    m.p = pyo.Var(m.JS, domain=pyo.NonNegativeIntegers, doc="cores of spread job j on s")
    m.q = pyo.Var(m.JS, domain=pyo.NonNegativeReals, doc="GB of spread job j on s")
    m.FO = pyo.Set(
        dimen=2,
        ordered=True,
        initialize=[(e, o) for e, fr in enumerate(data.free) for o in range(len(fr.options))],
        doc="(free group, option): a server and a point one of its jobs may take",
    )
    m.f = pyo.Var(m.FO, domain=pyo.NonNegativeIntegers, doc="free jobs of group e at option o")
    groups, spread, free = data.groups, data.spread, data.free

    @m.Objective(sense=pyo.minimize)
    def pk0_fewest_parts(m: pyo.ConcreteModel) -> Any:
        return pyo.quicksum(m.u[j, s] for j, s in m.JS)

    @m.Constraint(range(len(groups)))
    def pk1_whole_jobs(m: pyo.ConcreteModel, d: int) -> Any:
        if not groups[d].servers:  # no server holds one: no packing
            return pyo.Constraint.Infeasible
        return pyo.quicksum(m.n[d, s] for s in groups[d].servers) == len(groups[d].jobs)

    @m.Constraint(range(len(spread)))
    def pk2_spread_gpus(m: pyo.ConcreteModel, j: int) -> Any:
        if not spread[j].servers:
            return pyo.Constraint.Infeasible
        return pyo.quicksum(m.a[j, s] for s in spread[j].servers) == spread[j].job.gpus

    @m.Constraint(range(len(spread)))
    def pk3_spread_cpus(m: pyo.ConcreteModel, j: int) -> Any:
        return pyo.quicksum(m.p[j, s] for s in spread[j].servers) == spread[j].cpus

    @m.Constraint(range(len(spread)))
    def pk4_spread_mem(m: pyo.ConcreteModel, j: int) -> Any:
        return pyo.quicksum(m.q[j, s] for s in spread[j].servers) == spread[j].mem_gb

    @m.Constraint(m.JS, ["least", "most"])
    def pk5_part_gpus(m: pyo.ConcreteModel, j: int, s: int, side: str) -> Any:
        if side == "least":
            return m.u[j, s] <= m.a[j, s]
        return m.a[j, s] <= min(spread[j].job.gpus, G[s]) * m.u[j, s]

    @m.Constraint(m.JS)
    def pk6_part_cpus(m: pyo.ConcreteModel, j: int, s: int) -> Any:
        return m.p[j, s] <= C[s] * m.u[j, s]

    @m.Constraint(m.JS)
    def pk7_part_mem(m: pyo.ConcreteModel, j: int, s: int) -> Any:
        return m.q[j, s] <= M[s] * m.u[j, s]

    @m.Constraint(range(len(free)))
    def pk11_free_jobs(m: pyo.ConcreteModel, e: int) -> Any:
        if not free[e].options:
            return pyo.Constraint.Infeasible
        return pyo.quicksum(m.f[e, o] for o in range(len(free[e].options))) == len(free[e].jobs)

    @m.Constraint([0] if data.free_worth is not None and math.isfinite(data.free_worth) else [])
    def pk12_free_worth(m: pyo.ConcreteModel, _: int) -> Any:
        worth = pyo.quicksum(free[e].options[o][3] * m.f[e, o] for e, o in m.FO)
        return worth >= data.free_worth

    on_d: dict[int, list[int]] = {s: [] for s in G}
    on_j: dict[int, list[int]] = {s: [] for s in G}
    on_f: dict[int, list[tuple[int, int]]] = {s: [] for s in G}
    for d, s in m.DS:
        on_d[s].append(d)
    for j, s in m.JS:
        on_j[s].append(j)
    for e, o in m.FO:
        on_f[free[e].options[o][0]].append((e, o))

    # rows for servers nobody may use are skipped
    held = [s for s in G if on_d[s] or on_j[s] or on_f[s]]

    def took(s: int, r: int) -> Any:
        """What server s's free jobs take of resource r (0 GPUs, 1 cores, 2 GB)."""
        return pyo.quicksum(
            (free[e].gpus if r == 0 else free[e].options[o][r]) * m.f[e, o] for e, o in on_f[s]
        )

    @m.Constraint(held)
    def pk8_gpu_capacity(m: pyo.ConcreteModel, s: int) -> Any:
        whole = pyo.quicksum(groups[d].gpus * m.n[d, s] for d in on_d[s]) + took(s, 0)
        return whole + pyo.quicksum(m.a[j, s] for j in on_j[s]) <= G[s]

    @m.Constraint(held)
    def pk9_cpu_capacity(m: pyo.ConcreteModel, s: int) -> Any:
        whole = pyo.quicksum(groups[d].cpus * m.n[d, s] for d in on_d[s]) + took(s, 1)
        return whole + pyo.quicksum(m.p[j, s] for j in on_j[s]) <= C[s]

    @m.Constraint(held)
    def pk10_mem_capacity(m: pyo.ConcreteModel, s: int) -> Any:
        whole = pyo.quicksum(groups[d].mem_gb * m.n[d, s] for d in on_d[s]) + took(s, 2)
        return whole + pyo.quicksum(m.q[j, s] for j in on_j[s]) <= M[s]

    return m


def build_packing_lp(lst: PatternListing) -> pyo.ConcreteModel:
    """(plp0)-(plp5) of ``formulations/packing_lp.md`` over ``lst``'s contents (Pyomo)."""
    m = pyo.ConcreteModel(name="packing_lp")
    cols = [(k, i) for k, sc in enumerate(lst.classes) for i in range(sc.contents.shape[0])]
    left = [sc.leftovers(lst.data) for sc in lst.classes]
    rows = [f"d{d}" for d in range(len(lst.need))]
    rows += [r for r, need in zip(("gpus", "cpus", "mem"), lst.spread_need, strict=True) if need]
    need = dict(zip(rows, [*lst.need, *(n for n in lst.spread_need if n)], strict=True))
    m.P = pyo.Set(dimen=2, ordered=True, initialize=cols, doc="(class, content) pairs")
    m.R = pyo.Set(ordered=True, initialize=rows, doc="rows that may fall short")
    m.z = pyo.Var(m.P, domain=pyo.NonNegativeReals, doc="servers of class k holding content P")
    m.short = pyo.Var(m.R, domain=pyo.NonNegativeReals, doc="shortfall of a row")

    def held(k: int, i: int, d: int) -> int:
        sc = lst.classes[k]
        return int(sc.contents[i, sc.groups.index(d)]) if d in sc.groups else 0

    @m.Objective(sense=pyo.minimize)
    def plp0_shortfall(m: pyo.ConcreteModel) -> Any:
        return pyo.quicksum(m.short[r] / need[r] for r in m.R if need[r] > 0)

    @m.Constraint(range(len(lst.classes)))
    def plp1_servers(m: pyo.ConcreteModel, k: int) -> Any:
        n = lst.classes[k].contents.shape[0]
        return pyo.quicksum(m.z[k, i] for i in range(n)) <= len(lst.classes[k].servers)

    @m.Constraint(range(len(lst.need)))
    def plp2_whole_jobs(m: pyo.ConcreteModel, d: int) -> Any:
        got = pyo.quicksum(held(k, i, d) * m.z[k, i] for k, i in m.P)
        return got + m.short[f"d{d}"] >= lst.need[d]

    def spread_row(r: int, name: str) -> Any:
        if name not in need:
            return pyo.Constraint.Skip
        got = pyo.quicksum(int(left[k][r][i]) * m.z[k, i] for k, i in m.P)
        return got + m.short[name] >= need[name]

    m.plp3_spread_gpus = pyo.Constraint(rule=lambda m: spread_row(0, "gpus"))
    m.plp4_spread_cpus = pyo.Constraint(rule=lambda m: spread_row(1, "cpus"))
    m.plp5_spread_mem = pyo.Constraint(rule=lambda m: spread_row(2, "mem"))
    return m


def build_packing_flow(fg: FlowGraph) -> pyo.ConcreteModel:
    """(pf1)-(pf9) of ``formulations/packing_flow.md`` over ``fg``'s graph (Pyomo): a
    feasibility model, its objective a constant 0."""
    m = pyo.ConcreteModel(name="packing_flow")
    take = [(k, i) for k, fc in enumerate(fg.classes) for i in range(len(fc.take))]
    skip = [(k, i) for k, fc in enumerate(fg.classes) for i in range(len(fc.skip))]
    ends = [(k, e) for k, fc in enumerate(fg.classes) for e in range(len(fc.ends))]
    shares = [(k, e, j) for k, e in ends for j, _ in fg.classes[k].ends[e][1]]
    m.take = pyo.Var(take, domain=pyo.NonNegativeIntegers, doc="one more whole job")
    m.skip = pyo.Var(skip, domain=pyo.NonNegativeIntegers, doc="on to the next shape")
    m.end = pyo.Var(ends, domain=pyo.NonNegativeIntegers, doc="servers ending at e")
    m.share = pyo.Var(shares, domain=pyo.NonNegativeReals, doc="cores of an end's part")
    m.feasibility = pyo.Objective(expr=0.0)

    def layer(k: int, t: int) -> int:
        return fg.classes[k].shapes.index(t)

    # arcs into and out of every node (class, layer, state)
    out: dict[tuple[int, int, tuple[int, int]], list[Any]] = {}
    into: dict[tuple[int, int, tuple[int, int]], list[Any]] = {}
    for k, i in take:
        t, tail, head = fg.classes[k].take[i]
        out.setdefault((k, layer(k, t), tail), []).append(m.take[k, i])
        into.setdefault((k, layer(k, t), head), []).append(m.take[k, i])
    for k, i in skip:
        t, st = fg.classes[k].skip[i]
        out.setdefault((k, layer(k, t), st), []).append(m.skip[k, i])
        into.setdefault((k, layer(k, t) + 1, st), []).append(m.skip[k, i])
    for k, e in ends:
        st = fg.classes[k].ends[e][0]
        out.setdefault((k, len(fg.classes[k].shapes), st), []).append(m.end[k, e])
    roots = {(k, 0, (0, 0)) for k in range(len(fg.classes))}
    inner = sorted((set(out) | set(into)) - roots)

    @m.Constraint(inner)
    def pf1_flow(m: pyo.ConcreteModel, k: int, layer: int, u: int, v: int) -> Any:
        node = (k, layer, (u, v))
        return pyo.quicksum(into.get(node, [])) == pyo.quicksum(out.get(node, []))

    @m.Constraint(range(len(fg.classes)))
    def pf2_servers(m: pyo.ConcreteModel, k: int) -> Any:
        arcs = out.get((k, 0, (0, 0)), [])
        return (
            pyo.quicksum(arcs) == len(fg.classes[k].servers) if arcs else pyo.Constraint.Infeasible
        )

    tags = fg.tags or (-1,) * len(fg.shapes)

    def arcs_of(t: int) -> list[Any]:
        return [m.take[k, i] for k, i in take if fg.classes[k].take[i][0] == t]

    @m.Constraint([t for t in range(len(fg.need)) if tags[t] < 0])
    def pf3_whole_jobs(m: pyo.ConcreteModel, t: int) -> Any:
        arcs = arcs_of(t)
        return pyo.quicksum(arcs) == fg.need[t] if arcs else pyo.Constraint.Infeasible

    @m.Constraint(range(len(fg.choices)))
    def pf7_choices(m: pyo.ConcreteModel, i: int) -> Any:
        arcs = [a for t, tag in enumerate(tags) if tag == i for a in arcs_of(t)]
        return pyo.quicksum(arcs) == fg.choices[i] if arcs else pyo.Constraint.Infeasible

    @m.Constraint()
    def pf8_value_floor(m: pyo.ConcreteModel) -> Any:
        if fg.floor is None:
            return pyo.Constraint.Skip
        chosen = [fg.worth[t] * a for t, tag in enumerate(tags) if tag >= 0 for a in arcs_of(t)]
        return pyo.quicksum(chosen) >= fg.floor

    def parts_of(j: int) -> list[tuple[int, int, int]]:
        return [(k, e, a) for k, e in ends for jj, a in fg.classes[k].ends[e][1] if jj == j]

    @m.Constraint(range(len(fg.spread)))
    def pf4_spread_gpus(m: pyo.ConcreteModel, j: int) -> Any:
        parts = parts_of(j)
        got = pyo.quicksum(a * m.end[k, e] for k, e, a in parts)
        return got == fg.spread[j][0] if parts else pyo.Constraint.Infeasible

    @m.Constraint(range(len(fg.spread)))
    def pf5_spread_cpus(m: pyo.ConcreteModel, j: int) -> Any:
        got = [m.share[k, e, j] for k, e, _ in parts_of(j)]
        if not got:
            return pyo.Constraint.Infeasible if fg.spread[j][1] > 0 else pyo.Constraint.Skip
        return pyo.quicksum(got) >= fg.spread[j][1]

    @m.Constraint([(k, e) for k, e in ends if fg.classes[k].ends[e][1]])
    def pf6_leftover_cpus(m: pyo.ConcreteModel, k: int, e: int) -> Any:
        (_, v), parts = fg.classes[k].ends[e]
        room = fg.classes[k].cpus - v
        return pyo.quicksum(m.share[k, e, j] for j, _ in parts) <= room * m.end[k, e]

    # only where it cuts: with c_j >= the end's room, (pf6) implies it
    capped = [
        (k, e, j)
        for k, e, j in shares
        if fg.spread[j][1] < fg.classes[k].cpus - fg.classes[k].ends[e][0][1]
    ]

    @m.Constraint(capped)
    def pf9_share_cap(m: pyo.ConcreteModel, k: int, e: int, j: int) -> Any:
        return m.share[k, e, j] <= fg.spread[j][1] * m.end[k, e]

    return m


def build_packing_exact(lst: ExactListing) -> pyo.ConcreteModel:
    """(pe1)-(pe9) of ``formulations/packing_exact.md`` over ``lst``'s columns (Pyomo): a
    feasibility model, its objective a constant 0."""
    m = pyo.ConcreteModel(name="packing_exact")
    cols = [(k, c) for k, sc in enumerate(lst.classes) for c in range(len(sc.columns))]
    parts = [(k, c, j) for k, c in cols for j in lst.classes[k].columns[c][1]]
    m.z = pyo.Var(cols, domain=pyo.NonNegativeIntegers, doc="servers with column c of class k")
    m.a = pyo.Var(parts, domain=pyo.NonNegativeIntegers, doc="spread job j's GPUs there")
    m.p = pyo.Var(parts, domain=pyo.NonNegativeIntegers, doc="its cores there")
    m.q = pyo.Var(parts, domain=pyo.NonNegativeReals, doc="its memory units there")
    m.pe0_feasibility = pyo.Objective(expr=0.0)

    def held(k: int, c: int, d: int) -> int:
        sc = lst.classes[k]
        i = sc.columns[c][0]
        return int(sc.contents[i, sc.groups.index(d)]) if d in sc.groups else 0

    def left(k: int, c: int) -> tuple[int, int, int]:
        return lst.classes[k].left(lst.classes[k].columns[c][0], lst.demands(k))

    @m.Constraint(range(len(lst.classes)))
    def pe1_servers(m: pyo.ConcreteModel, k: int) -> Any:
        n = len(lst.classes[k].columns)
        return pyo.quicksum(m.z[k, c] for c in range(n)) <= len(lst.classes[k].servers)

    @m.Constraint(range(len(lst.data.groups)))
    def pe2_whole_jobs(m: pyo.ConcreteModel, d: int) -> Any:
        got = [held(k, c, d) * m.z[k, c] for k, c in cols if held(k, c, d)]
        need = len(lst.data.groups[d].jobs)
        return pyo.quicksum(got) == need if got else pyo.Constraint.Infeasible

    def spread_row(j: int, var: Any, r: int, equal: bool) -> Any:
        got = [var[k, c, jj] for k, c, jj in parts if jj == j]
        need = lst.spread_need[j][r]
        if not got:
            return pyo.Constraint.Infeasible if need > 0 else pyo.Constraint.Skip
        return pyo.quicksum(got) == need if equal else pyo.quicksum(got) >= need

    js = range(len(lst.spread_need))
    m.pe3_spread_gpus = pyo.Constraint(js, rule=lambda m, j: spread_row(j, m.a, 0, True))
    m.pe4_spread_cpus = pyo.Constraint(js, rule=lambda m, j: spread_row(j, m.p, 1, False))
    m.pe5_spread_mem = pyo.Constraint(js, rule=lambda m, j: spread_row(j, m.q, 2, False))

    @m.Constraint(parts)
    def pe6_part_gpus(m: pyo.ConcreteModel, k: int, c: int, j: int) -> Any:
        return m.a[k, c, j] >= m.z[k, c]

    spread_cols = [(k, c) for k, c in cols if lst.classes[k].columns[c][1]]

    def cap(k: int, c: int, var: Any, r: int) -> Any:
        used = pyo.quicksum(var[k, c, j] for j in lst.classes[k].columns[c][1])
        return used <= left(k, c)[r] * m.z[k, c]

    m.pe7_gpus_left = pyo.Constraint(spread_cols, rule=lambda m, k, c: cap(k, c, m.a, 0))
    m.pe8_cpus_left = pyo.Constraint(spread_cols, rule=lambda m, k, c: cap(k, c, m.p, 1))
    m.pe9_mem_left = pyo.Constraint(spread_cols, rule=lambda m, k, c: cap(k, c, m.q, 2))
    return m
