"""Per-server re-optimisation of grid points for a fixed GPU plan, spread jobs included.

When the super-machine's points do not deploy on a plan (:func:`.transport.deploy` fails),
this multiple-choice knapsack picks the best points that do.  Rows, per server s and job
class k placed wholly on s (a class: interchangeable jobs, see ``class_key``):

    eq1  max  sum z[k,q] W_q + sum_j x[j,q] p_j W_q          (p_j: split penalty of spread j)
    eq4[k]    sum_q z[k,q] = n_k,   eq4[j]  sum_q x[j,q] = 1
    flow_cpu[j]  sum_{s in span j} f[j,s] = sum_q c_q x[j,q]  (memory alike, flow_mem[j])
    eq2[s]    sum c_q z[k,q] + sum_j f[j,s] <= C_s            (memory alike, eq3[s])

Only points meeting the floor get a column (fair share; for a spread job, its penalised
throughput must still reach the checker's floor), which is (5); under the per-server rule
the floor is the checker's as placed: a whole job's server's share, a spread job's split's.
A spread job's cores and memory are flows over the servers it spans, the transportation
view of :mod:`.transport`; the final integral split comes from there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from synergy_opt.formulations.fast import class_key, useful_points
from synergy_opt.matrix import MatrixModel, matrix_model
from synergy_opt.mechanisms.opt.context import (
    GpuPlan,
    Point,
    RoundContext,
    RoundingError,
    gpu_parts,
    placed_matrix,
    plan_key,
    whole_share_floor,
)
from synergy_opt.mechanisms.opt.transport import deploy
from synergy_opt.solve import TerminationStatus
from synergy_opt.types import MEM_EPS_GB, PlacementPart

#: Relative gap of the re-optimisation: its answer is a deployable point set, the bound of
#: the round comes from the super-machine.
CONFIGURE_REL_GAP: float = 1e-4
#: Branch-and-bound nodes: a deterministic stop (a time limit is only the caller's).
CONFIGURE_NODES: int = 500


@dataclass(frozen=True, slots=True)
class PointModel:
    """The re-optimisation MIP of one plan and what its columns stand for."""

    plan: GpuPlan
    matrix: MatrixModel
    #: Per column: ("z", group, point), ("x", spread job index, point) or ("f", job, -).
    owner: tuple[tuple[str, int, Point], ...]
    #: Job ids of each (server, class) group of whole jobs, priority order.
    groups: tuple[tuple[str, ...], ...]
    #: Ids of the plan's spread jobs.
    spread: tuple[str, ...]


def reoptimise(
    ctx: RoundContext, plan: GpuPlan
) -> tuple[dict[str, Point], dict[str, list[PlacementPart]]]:
    """The best points deployable on ``plan`` and their placement parts, starting from the
    allocation a route found with it, where one did (:attr:`.RoundContext.found_with`)."""
    model = point_model(ctx, plan)
    found = ctx.found_with.get(plan_key(plan))
    return solve_points(ctx, model, None if found is None else start_vector(ctx, model, found))


def relaxation_bound(ctx: RoundContext, model: PointModel) -> float | None:
    """The LP relaxation's optimum: no point set on the plan beats it (``None``: no
    optimum).  A few ms where the MIP takes 10-200 ms on 512-GPU multi-GPU rounds, so
    the mechanism ranks plans by it and skips those that cannot beat its best."""
    res = ctx.solve(model.matrix.relaxed())
    if res.status is not TerminationStatus.OPTIMAL or res.objective is None:
        return None
    return res.objective


def point_model(ctx: RoundContext, plan: GpuPlan) -> PointModel:
    """The re-optimisation MIP of ``plan`` (rows as in the module docstring)."""
    inst = ctx.inst
    servers = inst.cluster.servers
    jobs = {j.id: j for j in ctx.runnable}
    groups: dict[tuple[int, object], list[str]] = {}
    spread: list[str] = []
    for jid, parts in plan.items():
        if len(parts) > 1:
            spread.append(jid)
        else:
            groups.setdefault((parts[0][0], class_key(jobs[jid])), []).append(jid)

    cols: list[list[tuple[int, float]]] = []
    cost: list[float] = []
    upper: list[float] = []
    integer: list[bool] = []
    row_lo: list[float] = []
    row_hi: list[float] = []
    names: list[str] = []
    # Server rows first: eq2[s] (cores) at 2s, eq3[s] (memory) at 2s + 1.
    for srv in servers:
        row_lo += [-float("inf"), -float("inf")]
        row_hi += [float(srv.cpus), float(srv.mem_gb)]
        names += [f"eq2[{srv.name}]", f"eq3[{srv.name}]"]
    owner: list[tuple[str, int, Point]] = []  # per column: ("z", group, point) / ("x", j, point)

    group_keys = list(groups)
    for gi, key in enumerate(group_keys):
        s = key[0]
        members = groups[key]
        first = jobs[members[0]]
        # Under the per-server rule a whole job's floor is its server's (fuzz seed 50: a 4-GPU
        # job re-optimised at the pooled floor on a richer server failed the check).
        pts = useful_points(placed_matrix(inst, first, (s,)), whole_share_floor(inst, first, s))
        row = len(row_lo)
        row_lo.append(float(len(members)))
        row_hi.append(float(len(members)))
        names.append(f"eq4[{servers[s].name},{first.id}]")
        for c, m, tp in pts:
            cols.append([(row, 1.0), (2 * s, float(c)), (2 * s + 1, float(m))])
            cost.append(tp)
            upper.append(float(len(members)))
            integer.append(True)
            owner.append(("z", gi, (c, m, tp)))
    for ji, jid in enumerate(spread):
        job = jobs[jid]
        pen = job.split_penalty
        fair = inst.fair_share_throughput_on(job, gpu_parts(inst, plan[jid]))
        required = fair * pen if ctx.must_spread(job) else fair
        pts = useful_points(placed_matrix(inst, job, (s for s, _ in plan[jid])), required / pen)
        if not pts:
            raise RoundingError(f"job {jid} is spread but no grid point keeps its fair share")
        count, bal_c, bal_m = len(row_lo), len(row_lo) + 1, len(row_lo) + 2
        row_lo += [1.0, 0.0, 0.0]
        row_hi += [1.0, 0.0, 0.0]
        names += [f"eq4[{jid}]", f"flow_cpu[{jid}]", f"flow_mem[{jid}]"]
        for c, m, tp in pts:
            cols.append([(count, 1.0), (bal_c, float(c)), (bal_m, float(m))])
            cost.append(tp * pen)
            upper.append(1.0)
            integer.append(True)
            owner.append(("x", ji, (c, m, tp)))
        for s, _ in plan[jid]:
            for res_row, bal, cap in (
                (2 * s, bal_c, float(servers[s].cpus)),
                (2 * s + 1, bal_m, float(servers[s].mem_gb)),
            ):
                cols.append([(res_row, 1.0), (bal, -1.0)])
                cost.append(0.0)
                upper.append(cap)
                integer.append(False)
                owner.append(("f", ji, (0, 0.0, 0.0)))
    mm = matrix_model(
        cols, cost, upper, integer, row_lo, row_hi, names, maximize=True, name="per_server_flow"
    )
    return PointModel(
        plan, mm, tuple(owner), tuple(tuple(groups[k]) for k in group_keys), tuple(spread)
    )


def start_vector(
    ctx: RoundContext, model: PointModel, placements: Mapping[str, Sequence[PlacementPart]]
) -> np.ndarray | None:
    """``placements`` (an allocation on ``model``'s plan) as a solution of ``model``, for
    the MIP to start from; ``None`` where a job's cores and GB hold no column's point.

    Each job takes the best column whose cores and GB its placement holds (the columns are
    the undominated points meeting the floor, so its own grid point or one at least as
    good with no more of either); a spread job's flows take its point's cores and GB from
    its servers in order, at most what it holds on each (and the server's size: a part's
    GB can exceed it by the deployment's rounding), so no server row is exceeded that the
    placements kept."""
    servers = {srv.name: i for i, srv in enumerate(ctx.inst.cluster.servers)}
    held: dict[str, dict[int, tuple[int, float]]] = {}
    for jid, parts in placements.items():
        per = held.setdefault(jid, {})
        for p in parts:
            c, m = per.get(servers[p.server], (0, 0.0))
            per[servers[p.server]] = (c + p.cpus, m + p.mem_gb)
    columns: dict[tuple[str, int], list[tuple[int, Point]]] = {}
    for i, (kind, idx, pt) in enumerate(model.owner):
        if kind != "f":
            columns.setdefault((kind, idx), []).append((i, pt))

    def best(kind: str, idx: int, jid: str) -> tuple[int, Point] | None:
        if jid not in held:
            return None
        c = sum(v[0] for v in held[jid].values())
        m = math.fsum(v[1] for v in held[jid].values())
        fits = [
            (i, pt)
            for i, pt in columns.get((kind, idx), ())
            if pt[0] <= c and pt[1] <= m + MEM_EPS_GB
        ]
        return max(fits, key=lambda ip: (ip[1][2], -ip[1][0], -ip[1][1]), default=None)

    x = np.zeros(len(model.owner))
    for gi, members in enumerate(model.groups):
        for jid in members:
            got = best("z", gi, jid)
            if got is None:
                return None
            x[got[0]] += 1.0
    flow_cols = iter(i for i, (kind, _, _) in enumerate(model.owner) if kind == "f")
    for ji, jid in enumerate(model.spread):
        got = best("x", ji, jid)
        if got is None:
            return None
        x[got[0]] = 1.0
        need = [float(got[1][0]), got[1][1]]
        for s, _ in model.plan[jid]:  # the flow columns' order (point_model)
            have = held[jid].get(s, (0, 0.0))
            for r in (0, 1):
                col = next(flow_cols)
                take = min(float(have[r]), need[r], float(model.matrix.col_upper[col]))
                need[r] -= take
                x[col] = take
        if need[0] > 0 or need[1] > MEM_EPS_GB:  # pragma: no cover - the column's point fits
            return None
    return x


def solve_points(
    ctx: RoundContext, model: PointModel, start: np.ndarray | None = None
) -> tuple[dict[str, Point], dict[str, list[PlacementPart]]]:
    """Solve ``model`` (node-limited; from ``start``, a solution of it, where given): the
    best points on its plan and their parts."""
    res = ctx.solve(
        model.matrix, rel_gap=CONFIGURE_REL_GAP, node_limit=CONFIGURE_NODES, start=start
    )
    if res.x is None:
        raise RoundingError(f"per-server re-optimisation ended {res.status} ({res.solver})")

    chosen: dict[str, Point] = {}
    per_group: list[list[tuple[Point, int]]] = [[] for _ in model.groups]
    for (kind, i, pt), v in zip(model.owner, res.x, strict=True):
        n = int(round(float(v)))
        if kind == "z" and n > 0:
            per_group[i].append((pt, n))
        elif kind == "x" and n > 0:
            chosen[model.spread[i]] = pt
    for gi, members in enumerate(model.groups):
        pending = iter(members)  # priority order: better points to earlier jobs
        for pt, n in sorted(per_group[gi], key=lambda pn: (-pn[0][2], pn[0][0], pn[0][1])):
            for _ in range(n):
                chosen[next(pending)] = pt
    parts = deploy(ctx.inst, model.plan, chosen)
    if parts is None:  # pragma: no cover - the MIP's flows are a feasible transportation
        raise RoundingError("re-optimised points do not deploy (numerical trouble)")
    return chosen, parts
