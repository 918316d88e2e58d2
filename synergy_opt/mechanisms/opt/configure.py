"""Per-server re-optimisation of grid points for a fixed GPU plan, spread jobs included.

When the super-machine's points do not deploy on a plan (:func:`.transport.deploy` fails),
this multiple-choice knapsack picks the best points that do.  Rows, per server s and job
class k placed wholly on s (a class: interchangeable jobs, see ``class_key``):

    eq1  max  sum z[k,q] W_q + sum_j x[j,q] p_j W_q          (p_j: split penalty of spread j)
    eq4[k]    sum_q z[k,q] = n_k,   eq4[j]  sum_q x[j,q] = 1
    flow_cpu[j]  sum_{s in span j} f[j,s] = sum_q c_q x[j,q]  (memory alike, flow_mem[j])
    eq2[s]    sum c_q z[k,q] + sum_j f[j,s] <= C_s            (memory alike, eq3[s])

Only points meeting the floor get a column (fair share; for a spread job, its penalised
throughput must still reach the checker's floor), which is (5).  A spread job's cores and
memory are flows over the servers it spans, the transportation view of
:mod:`.transport`; the final integral split comes from there.
"""

from __future__ import annotations

from synergy_opt.formulations.fast import class_key, useful_points
from synergy_opt.matrix import matrix_model
from synergy_opt.mechanisms.opt.context import GpuPlan, Point, RoundContext, RoundingError
from synergy_opt.mechanisms.opt.transport import deploy
from synergy_opt.types import PlacementPart

#: Relative gap of the re-optimisation: its answer is a deployable point set, the bound of
#: the round comes from the super-machine.
CONFIGURE_REL_GAP: float = 1e-4
#: Branch-and-bound nodes: a deterministic stop (a time limit is only the caller's).
CONFIGURE_NODES: int = 500


def reoptimise(
    ctx: RoundContext, plan: GpuPlan
) -> tuple[dict[str, Point], dict[str, list[PlacementPart]]]:
    """The best points deployable on ``plan`` and their placement parts."""
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
        pts = useful_points(first.sensitivity, inst.fair_share_throughput(first))
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
        fair = inst.fair_share_throughput(job)
        required = fair * pen if ctx.must_spread(job) else fair
        pts = useful_points(job.sensitivity, required / pen)
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
    res = ctx.solve(mm, rel_gap=CONFIGURE_REL_GAP, node_limit=CONFIGURE_NODES)
    if res.x is None:
        raise RoundingError(f"per-server re-optimisation ended {res.status} ({res.solver})")

    chosen: dict[str, Point] = {}
    per_group: list[list[tuple[Point, int]]] = [[] for _ in group_keys]
    for (kind, i, pt), v in zip(owner, res.x, strict=True):
        n = int(round(float(v)))
        if kind == "z" and n > 0:
            per_group[i].append((pt, n))
        elif kind == "x" and n > 0:
            chosen[spread[i]] = pt
    for gi, key in enumerate(group_keys):
        pending = iter(groups[key])  # priority order: better points to earlier jobs
        for pt, n in sorted(per_group[gi], key=lambda pn: (-pn[0][2], pn[0][0], pn[0][1])):
            for _ in range(n):
                chosen[next(pending)] = pt
    parts = deploy(inst, plan, chosen)
    if parts is None:  # pragma: no cover - the MIP's flows are a feasible transportation
        raise RoundingError("re-optimised points do not deploy (numerical trouble)")
    return chosen, parts
