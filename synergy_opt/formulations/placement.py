"""The placement LP of Synergy-OPT: chosen demands mapped onto real servers.

Given each job's fixed GPUs g_j and chosen cores c_j and memory m_j (from the
super-machine), x[j, s] in [0, 1] is the fraction of job j placed on server s (only on
servers whose GPU type the job may use):

    (pl0) min  sum_{j,s} (s + 1) g_j x[j, s]           pack in server order (first fit)
    (pl1)      sum_s x[j, s] = 1                        every job placed whole
    (pl2)      sum_j g_j x[j, s] <= G_s                 per-server GPUs
    (pl3)      sum_j c_j x[j, s] <= C_s                 per-server cores
    (pl4)      sum_j m_j x[j, s] <= M_s                 per-server memory

Fragmentation bound (paper, section 4): a vertex (basic) solution has at most
n + 3s non-zero x (one basic variable per row), and every job has at least one, so at
most 3s jobs are split over several servers.  The objective does not carry the bound; it
picks, among vertices, the one that fills servers in order, so the split jobs sit at
server boundaries.  Solve it with a simplex method (or crossover) to get a vertex.
``formulations/placement.md`` states the same model under the same names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyomo.environ as pyo

from synergy_opt.types import Job, RoundInstance


def _model_data(inst: RoundInstance, demands: Sequence[tuple[Job, int, float]]) -> dict[str, Any]:
    """Plain data: per job (g, c, m) and allowed servers; per server (G, C, M) and rank.

    ``demands`` lists ``(job, cpus, mem_gb)`` for every job to place.
    """
    servers = inst.cluster.servers
    allowed = {
        j: tuple(s for s, srv in enumerate(servers) if job.may_use(srv))
        for j, (job, _, _) in enumerate(demands)
    }
    return {
        "job_ids": tuple(job.id for job, _, _ in demands),
        "g": {j: job.gpus for j, (job, _, _) in enumerate(demands)},
        "c": {j: c for j, (_, c, _) in enumerate(demands)},
        "m": {j: m for j, (_, _, m) in enumerate(demands)},
        "allowed": allowed,
        "server_names": tuple(s.name for s in servers),
        "G": {s: srv.gpus for s, srv in enumerate(servers)},
        "C": {s: srv.cpus for s, srv in enumerate(servers)},
        "M": {s: srv.mem_gb for s, srv in enumerate(servers)},
        "rank": {s: s + 1 for s in range(len(servers))},
    }


def build_placement(
    inst: RoundInstance, demands: Sequence[tuple[Job, int, float]]
) -> pyo.ConcreteModel:
    """The placement LP for ``demands`` = ``[(job, cpus, mem_gb), ...]``."""
    return build_from_data(_model_data(inst, demands))


def build_from_data(data: dict[str, Any]) -> pyo.ConcreteModel:
    """Build (pl0)-(pl4) from :func:`_model_data` output."""
    m = pyo.ConcreteModel(name="placement")
    allowed: dict[int, tuple[int, ...]] = data["allowed"]
    m.J = pyo.Set(initialize=sorted(allowed), ordered=True, doc="jobs (by position)")
    m.S = pyo.Set(initialize=sorted(data["G"]), ordered=True, doc="servers (by position)")
    m.JS = pyo.Set(
        dimen=2,
        ordered=True,
        initialize=[(j, s) for j in sorted(allowed) for s in allowed[j]],
        doc="(job, server) pairs the job's GPU types allow",
    )
    m.x = pyo.Var(m.JS, bounds=(0, 1), doc="fraction of job j on server s")
    on: dict[int, list[int]] = {s: [] for s in data["G"]}
    for j, s in m.JS:
        on[s].append(j)
    g, c, mem = data["g"], data["c"], data["m"]

    @m.Objective(sense=pyo.minimize)
    def pl0_pack_in_server_order(m: pyo.ConcreteModel) -> Any:
        """(pl0) min sum_{j,s} rank_s g_j x[j,s]."""
        return pyo.quicksum(data["rank"][s] * g[j] * m.x[j, s] for j, s in m.JS)

    @m.Constraint(m.J)
    def pl1_whole_job(m: pyo.ConcreteModel, j: int) -> Any:
        """(pl1) sum_s x[j,s] = 1."""
        return pyo.quicksum(m.x[j, s] for s in allowed[j]) == 1

    def _cap(coef: dict[int, float], cap: dict[int, float]) -> Any:
        def rule(m: pyo.ConcreteModel, s: int) -> Any:
            if not on[s]:
                return pyo.Constraint.Skip
            return pyo.quicksum(coef[j] * m.x[j, s] for j in on[s]) <= cap[s]

        return rule

    m.pl2_gpu_capacity = pyo.Constraint(
        m.S, rule=_cap(g, data["G"]), doc="(pl2) sum_j g_j x <= G_s"
    )
    m.pl3_cpu_capacity = pyo.Constraint(
        m.S, rule=_cap(c, data["C"]), doc="(pl3) sum_j c_j x <= C_s"
    )
    m.pl4_mem_capacity = pyo.Constraint(
        m.S, rule=_cap(mem, data["M"]), doc="(pl4) sum_j m_j x <= M_s"
    )
    return m


def split_jobs(values: dict[tuple[str, Any], float], tol: float = 1e-9) -> set[int]:
    """Positions of jobs with more than one server holding a positive fraction."""
    count: dict[int, int] = {}
    for (name, idx), v in values.items():
        if name == "x" and v > tol:
            count[idx[0]] = count.get(idx[0], 0) + 1
    return {j for j, k in count.items() if k > 1}
