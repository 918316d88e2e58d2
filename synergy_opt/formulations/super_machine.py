"""The super-machine model, LP (1)-(5) of Synergy-OPT (OSDI '22, Section 4), as a Pyomo model.

All servers are pooled into one machine with C cores and M GB.  Each job j picks exactly one
grid point [c, m] of its throughput matrix W_j (binary y[j, q]), the picks share C and M,
and no job falls below its GPU-proportional ("fair share") throughput:

    (1) max  sum_j sum_q W_j[q] y[j, q]
    (2)      sum_j sum_q c_q y[j, q] <= C
    (3)      sum_j sum_q m_q y[j, q] <= M
    (4)      sum_q y[j, q] = 1                       for every job j
    (5)      sum_q W_j[q] y[j, q] >= W_j[C_g, M_g]   for every job j

Theorem 4.1 of the paper: the optimum of (1)-(5) is at least the throughput of any
allocation that keeps every job at its fair share, so it is the upper bound OPT reports.
With ``relax=True`` y is continuous in [0, 1] (the LP relaxation, a bound on the MIP).
``formulations/super_machine.md`` states the same model under the same names.

On a cluster with two or more GPU types, :func:`build_typed_super_machine` adds a type
choice per job (per-type pools, y[j, t, q]); on one type, or none, it is this model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyomo.environ as pyo

from synergy_opt.formulations.typed_fast import (
    coefficients,
    gpu_pools,
    is_typed_round,
    lowest_fair_share,
    type_options,
    type_sets,
)
from synergy_opt.types import Job, RoundInstance


def grid_points(inst: RoundInstance, job: Job) -> list[tuple[int, float, float]]:
    """The job's grid points (cpus, mem_gb, W), plus the below-grid point (0, 0, 0) when needed.

    When the fair-share point lies below the grid its throughput is 0, and so is any
    allocation below the grid (floor look-up).  Without a zero point (4) would force such a
    job onto a grid point it may not fit, making the model infeasible and Theorem 4.1 false;
    with it, every fair allocation still maps to a feasible y.  Jobs with a positive fair
    share cannot use it ((5) excludes it), so the paper's model is unchanged for them.
    """
    pts = list(job.sensitivity.points())
    if inst.fair_share_throughput(job) <= 0.0:
        pts.append((0, 0.0, 0.0))
    return pts


ConfigTables = tuple[
    dict[int, tuple[int, ...]],
    dict[tuple[int, int], int],
    dict[tuple[int, int], float],
    dict[tuple[int, int], float],
]


def config_tables(inst: RoundInstance, chosen: Sequence[Job]) -> ConfigTables:
    """Per job j its config indices q, and cores, memory and W_j at each (j, q)."""
    configs: dict[int, tuple[int, ...]] = {}
    cpus: dict[tuple[int, int], int] = {}
    mem: dict[tuple[int, int], float] = {}
    w: dict[tuple[int, int], float] = {}
    for j, job in enumerate(chosen):
        qs = []
        for q, (c, m, tp) in enumerate(grid_points(inst, job)):
            cpus[j, q], mem[j, q], w[j, q] = c, m, tp
            qs.append(q)
        configs[j] = tuple(qs)
    return configs, cpus, mem, w


def _model_data(inst: RoundInstance, jobs: Sequence[Job] | None = None) -> dict[str, Any]:
    """Plain data for (1)-(5): jobs by position, every grid point of each W_j, C, M, floors.

    ``jobs`` defaults to every job of the round; OPT passes the runnable set.
    """
    chosen = list(inst.jobs if jobs is None else jobs)
    configs, cpus, mem, w = config_tables(inst, chosen)
    fair = {j: inst.fair_share_throughput(job) for j, job in enumerate(chosen)}
    return {
        "job_ids": tuple(job.id for job in chosen),
        "configs": configs,
        "cpus": cpus,
        "mem_gb": mem,
        "w": w,
        "fair": fair,
        "C": inst.cluster.total_cpus,
        "M": inst.cluster.total_mem_gb,
    }


def build_super_machine(
    inst: RoundInstance, jobs: Sequence[Job] | None = None, *, relax: bool = False
) -> pyo.ConcreteModel:
    """The super-machine model over ``jobs``; binary y (MIP) or ``relax=True`` (LP)."""
    return build_from_data(_model_data(inst, jobs), relax=relax)


def build_from_data(data: dict[str, Any], *, relax: bool = False) -> pyo.ConcreteModel:
    """Build (1)-(5) from :func:`_model_data` output (split out so tests can edit data)."""
    m = pyo.ConcreteModel(name="super_machine")
    configs: dict[int, tuple[int, ...]] = data["configs"]
    m.J = pyo.Set(initialize=sorted(configs), ordered=True, doc="jobs (by position)")
    m.JQ = pyo.Set(
        dimen=2,
        ordered=True,
        initialize=[(j, q) for j in sorted(configs) for q in configs[j]],
        doc="(job, grid point) pairs",
    )
    m.y = pyo.Var(
        m.JQ, domain=pyo.UnitInterval if relax else pyo.Binary, doc="job j runs at point q"
    )
    w, c, mem = data["w"], data["cpus"], data["mem_gb"]

    @m.Objective(sense=pyo.maximize)
    def eq1_weighted_throughput(m: pyo.ConcreteModel) -> Any:
        """(1) max sum_j sum_q W_j[q] y[j,q]."""
        return pyo.quicksum(w[jq] * m.y[jq] for jq in m.JQ)

    @m.Constraint()
    def eq2_cpu_capacity(m: pyo.ConcreteModel) -> Any:
        """(2) sum_j sum_q c_q y[j,q] <= C."""
        return pyo.quicksum(c[jq] * m.y[jq] for jq in m.JQ) <= data["C"]

    @m.Constraint()
    def eq3_mem_capacity(m: pyo.ConcreteModel) -> Any:
        """(3) sum_j sum_q m_q y[j,q] <= M."""
        return pyo.quicksum(mem[jq] * m.y[jq] for jq in m.JQ) <= data["M"]

    @m.Constraint(m.J)
    def eq4_one_config_per_job(m: pyo.ConcreteModel, j: int) -> Any:
        """(4) sum_q y[j,q] = 1."""
        return pyo.quicksum(m.y[j, q] for q in configs[j]) == 1

    @m.Constraint(m.J)
    def eq5_fair_share_floor(m: pyo.ConcreteModel, j: int) -> Any:
        """(5) sum_q W_j[q] y[j,q] >= W_j[C_g, M_g] (fair-share throughput)."""
        return pyo.quicksum(w[j, q] * m.y[j, q] for q in configs[j]) >= data["fair"][j]

    return m


def chosen_configs(data: dict[str, Any], values: dict[tuple[str, Any], float]) -> dict[int, int]:
    """Job position -> grid point with the largest y (the pick, for a binary solution)."""
    out: dict[int, int] = {}
    for j, qs in data["configs"].items():
        out[j] = max(qs, key=lambda q: (values.get(("y", (j, q)), 0.0), -q))
    return out


# --------------------------------------------------------------------------- GPU types


def _typed_model_data(inst: RoundInstance, jobs: Sequence[Job] | None = None) -> dict[str, Any]:
    """Plain data of the typed model: per job its (type, point) options with what each
    takes in every set of types' rows, and per set of types its G, C, M.

    Options are every grid point of each usable type's matrix (plus the below-grid point
    when the floor is 0) and, for jobs of >= 2 GPUs with >= 2 usable types, the same across
    types with each usable type t as the slowest (``"*t"``: min(W_t, second-best matrix),
    credited times the split penalty; :func:`typed_fast.coefficients` says its rows).
    """
    chosen = list(inst.jobs if jobs is None else jobs)
    sets = type_sets(gpu_pools(inst))
    opts: dict[tuple[int, str, int], tuple[int, float, float, float]] = {}
    coef: dict[tuple[int, str, int], dict[str, tuple[float, float, float]]] = {}
    fair: dict[int, float] = {}
    for j, job in enumerate(chosen):
        fair[j] = lowest_fair_share(inst, job)
        for opt in type_options(inst, job):
            pts = list(opt.matrix.points())
            if fair[j] <= 0.0:
                pts.append((0, 0.0, 0.0))  # the below-grid point, as in grid_points
            for q, (c, m, w) in enumerate(pts):
                rows = coefficients(opt, job.gpus, c, m, sets)
                if rows is None:
                    continue
                opts[j, opt.pool, q] = (c, m, w, opt.credit)
                coef[j, opt.pool, q] = {
                    ts.label: r for ts, r in zip(sets, rows, strict=True) if r != (0.0, 0.0, 0.0)
                }
    return {
        "job_ids": tuple(job.id for job in chosen),
        "options": opts,
        "coef": coef,
        "fair": fair,
        "pools": tuple(ts.label for ts in sets),
        "cap": {ts.label: (ts.pool.gpus, ts.pool.cpus, ts.pool.mem_gb) for ts in sets},
    }


def build_typed_super_machine(
    inst: RoundInstance, jobs: Sequence[Job] | None = None, *, relax: bool = False
) -> pyo.ConcreteModel:
    """The super-machine with a GPU-type choice per job; on one type (or none) where every
    job runs by its ``sensitivity``, exactly :func:`build_super_machine`."""
    if not is_typed_round(inst, jobs):
        return build_super_machine(inst, jobs, relax=relax)
    return build_typed_from_data(_typed_model_data(inst, jobs), relax=relax)


def build_typed_from_data(data: dict[str, Any], *, relax: bool = False) -> pyo.ConcreteModel:
    """(1)-(5) with rows (T), (2), (3) per set of GPU types from :func:`_typed_model_data`."""
    m = pyo.ConcreteModel(name="typed_super_machine")
    opts: dict[tuple[int, str, int], tuple[int, float, float, float]] = data["options"]
    coef: dict[tuple[int, str, int], dict[str, tuple[float, float, float]]] = data["coef"]
    cap = data["cap"]
    m.J = pyo.Set(initialize=range(len(data["job_ids"])), ordered=True, doc="jobs (by position)")
    m.P = pyo.Set(initialize=data["pools"], ordered=True, doc="sets of GPU types, '*' = all")
    m.JTQ = pyo.Set(dimen=3, ordered=True, initialize=list(opts), doc="(job, type, point)")
    m.y = pyo.Var(
        m.JTQ, domain=pyo.UnitInterval if relax else pyo.Binary, doc="job j runs on t at q"
    )

    def used(p: str, d: int) -> Any:
        """What the picks take of resource d (0 GPUs, 1 cores, 2 GB) in set p's rows."""
        return pyo.quicksum(coef[k][p][d] * m.y[k] for k in opts if p in coef[k])

    def cap_row(p: str, d: int) -> Any:
        """used(p, d) <= cap; no row where no pick reaches set p (a job-less GPU type)."""
        if not any(p in coef[k] for k in opts):
            return pyo.Constraint.Skip
        return used(p, d) <= cap[p][d]

    @m.Objective(sense=pyo.maximize)
    def eq1_weighted_throughput(m: pyo.ConcreteModel) -> Any:
        """(1) max sum credit_t W_jt[q] y[j,t,q]."""
        return pyo.quicksum(opts[k][2] * opts[k][3] * m.y[k] for k in m.JTQ)

    @m.Constraint(m.P)
    def eqT_gpu_capacity(m: pyo.ConcreteModel, p: str) -> Any:
        """(T) GPUs the picks take on the types of set p <= G_p."""
        return cap_row(p, 0)

    @m.Constraint(m.P)
    def eq2_cpu_capacity(m: pyo.ConcreteModel, p: str) -> Any:
        """(2) cores the picks take on the types of set p <= C_p."""
        return cap_row(p, 1)

    @m.Constraint(m.P)
    def eq3_mem_capacity(m: pyo.ConcreteModel, p: str) -> Any:
        """(3) memory the picks take on the types of set p <= M_p."""
        return cap_row(p, 2)

    @m.Constraint(m.J)
    def eq4_one_config_per_job(m: pyo.ConcreteModel, j: int) -> Any:
        """(4) sum_{t,q} y[j,t,q] = 1."""
        return pyo.quicksum(m.y[k] for k in opts if k[0] == j) == 1

    @m.Constraint(m.J)
    def eq5_fair_share_floor(m: pyo.ConcreteModel, j: int) -> Any:
        """(5) sum_{t,q} W_jt[q] y[j,t,q] >= F_j (uncredited W)."""
        return pyo.quicksum(opts[k][2] * m.y[k] for k in opts if k[0] == j) >= data["fair"][j]

    return m
