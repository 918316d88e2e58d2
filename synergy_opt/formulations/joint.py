"""The exact joint model (beyond the paper): configuration choice and integral placement in one MIP.

The paper splits OPT into a super-machine LP and a placement LP and rounds in between, so
its value is only a bound.  This model decides both at once, with whole GPUs per server,
whole cores, the split penalty and the fair-share floor, so its optimum is the best
deployable allocation of the given jobs.  Its size grows with jobs x servers x grid points, so
``opt-exact`` solves the counting model (:mod:`.counting`, same optimum) instead; this model
stays as the tests' cross-check on tiny rounds.

Paper equations (1), (4) and (5) keep their names and meaning; (2) and (3) become per-server
rows on the placed parts (``ext_cpu_capacity``, ``ext_mem_capacity``).  Every other row is an
``ext_`` constraint whose docstring says why it is needed.  ``formulations/joint.md`` states
the model under the same names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyomo.environ as pyo

from synergy_opt.check import forced_split_factor
from synergy_opt.formulations.super_machine import config_tables
from synergy_opt.types import Job, RoundInstance


def _required_floor(inst: RoundInstance, job: Job) -> float:
    """The checker's floor: fair throughput, times split_penalty if no single server can host it."""
    return inst.fair_share_throughput(job) * forced_split_factor(inst, job)


def _model_data(inst: RoundInstance, jobs: Sequence[Job] | None = None) -> dict[str, Any]:
    """Plain data: grid points per job, servers, allowed (job, server) pairs, floors, penalties."""
    chosen = list(inst.jobs if jobs is None else jobs)
    servers = inst.cluster.servers
    configs, cpus, mem, w = config_tables(inst, chosen)
    return {
        "job_ids": tuple(job.id for job in chosen),
        "configs": configs,
        "cpus": cpus,
        "mem_gb": mem,
        "w": w,
        "w_max": {j: job.sensitivity.max_throughput for j, job in enumerate(chosen)},
        "g": {j: job.gpus for j, job in enumerate(chosen)},
        "penalty": {j: job.split_penalty for j, job in enumerate(chosen)},
        "required": {j: _required_floor(inst, job) for j, job in enumerate(chosen)},
        "allowed": {
            j: tuple(s for s, srv in enumerate(servers) if job.may_use(srv))
            for j, job in enumerate(chosen)
        },
        "server_names": tuple(s.name for s in servers),
        "G": {s: srv.gpus for s, srv in enumerate(servers)},
        "C": {s: srv.cpus for s, srv in enumerate(servers)},
        "M": {s: srv.mem_gb for s, srv in enumerate(servers)},
    }


def build_joint(inst: RoundInstance, jobs: Sequence[Job] | None = None) -> pyo.ConcreteModel:
    """The joint MIP over ``jobs`` (default: all jobs of the round)."""
    return build_from_data(_model_data(inst, jobs))


def build_from_data(data: dict[str, Any]) -> pyo.ConcreteModel:  # noqa: C901 - one rule per row
    """Build the joint model from :func:`_model_data` output."""
    m = pyo.ConcreteModel(name="joint")
    configs: dict[int, tuple[int, ...]] = data["configs"]
    allowed: dict[int, tuple[int, ...]] = data["allowed"]
    G, C, M = data["G"], data["C"], data["M"]
    g, w, pen = data["g"], data["w"], data["penalty"]
    m.J = pyo.Set(initialize=sorted(configs), ordered=True, doc="jobs (by position)")
    m.S = pyo.Set(initialize=sorted(G), ordered=True, doc="servers (by position)")
    m.JQ = pyo.Set(
        dimen=2, ordered=True, initialize=[(j, q) for j in sorted(configs) for q in configs[j]]
    )
    m.JS = pyo.Set(
        dimen=2, ordered=True, initialize=[(j, s) for j in sorted(allowed) for s in allowed[j]]
    )
    on: dict[int, list[int]] = {s: [] for s in G}
    for j, s in m.JS:
        on[s].append(j)

    m.y = pyo.Var(m.JQ, domain=pyo.Binary, doc="job j runs at grid point q")
    m.a = pyo.Var(
        m.JS,
        domain=pyo.NonNegativeIntegers,
        bounds=lambda m, j, s: (0, min(g[j], G[s])),
        doc="GPUs of j on s",
    )
    m.u = pyo.Var(m.JS, domain=pyo.Binary, doc="job j has a part on server s")
    m.cp = pyo.Var(
        m.JS,
        domain=pyo.NonNegativeIntegers,
        bounds=lambda m, j, s: (0, C[s]),
        doc="cores of j on s",
    )
    m.mp = pyo.Var(
        m.JS, domain=pyo.NonNegativeReals, bounds=lambda m, j, s: (0, M[s]), doc="GB of j on s"
    )
    m.v = pyo.Var(m.J, domain=pyo.Binary, doc="job j spans several servers")
    m.t = pyo.Var(
        m.J, domain=pyo.NonNegativeReals, doc="W_j when spread, else 0 (linearised product)"
    )

    def wsum(m: pyo.ConcreteModel, j: int) -> Any:
        return pyo.quicksum(w[j, q] * m.y[j, q] for q in configs[j])

    @m.Objective(sense=pyo.maximize)
    def eq1_weighted_throughput(m: pyo.ConcreteModel) -> Any:
        """(1) max sum_j (W_j(y) - (1 - p_j) t_j): throughput after the split penalty."""
        return pyo.quicksum(wsum(m, j) - (1 - pen[j]) * m.t[j] for j in m.J)

    @m.Constraint(m.J)
    def eq4_one_config_per_job(m: pyo.ConcreteModel, j: int) -> Any:
        """(4) sum_q y[j,q] = 1."""
        return pyo.quicksum(m.y[j, q] for q in configs[j]) == 1

    @m.Constraint(m.J)
    def eq5_fair_share_floor(m: pyo.ConcreteModel, j: int) -> Any:
        """(5) W_j(y) - (1 - p_j) t_j >= required_j: the realised throughput keeps the floor."""
        return wsum(m, j) - (1 - pen[j]) * m.t[j] >= data["required"][j]

    @m.Constraint(m.J)
    def ext_gpu_demand(m: pyo.ConcreteModel, j: int) -> Any:
        """sum_s a[j,s] = g_j.  Why: GPU demands are fixed; they must be met in whole GPUs."""
        return pyo.quicksum(m.a[j, s] for s in allowed[j]) == g[j]

    def _cap(var: str, cap: dict[int, float]) -> Any:
        def rule(m: pyo.ConcreteModel, s: int) -> Any:
            if not on[s]:
                return pyo.Constraint.Skip
            return pyo.quicksum(getattr(m, var)[j, s] for j in on[s]) <= cap[s]

        return rule

    m.ext_gpu_capacity = pyo.Constraint(
        m.S,
        rule=_cap("a", G),
        doc="sum_j a[j,s] <= G_s. Why: real servers, not one pooled machine.",
    )
    m.ext_cpu_capacity = pyo.Constraint(
        m.S,
        rule=_cap("cp", C),
        doc="sum_j cp[j,s] <= C_s. Why: (2) per server, on the placed parts.",
    )
    m.ext_mem_capacity = pyo.Constraint(
        m.S,
        rule=_cap("mp", M),
        doc="sum_j mp[j,s] <= M_s. Why: (3) per server, on the placed parts.",
    )

    @m.Constraint(m.J)
    def ext_cpus_match_config(m: pyo.ConcreteModel, j: int) -> Any:
        """sum_s cp[j,s] = sum_q c_q y[j,q].  Why: the floor look-up then gives exactly W_j[q].

        (With ">=" a non-monotone W_j could realise less, or more, than the objective credits;
        any allocation can shed resources down to its floor grid point at no loss.)
        """
        return pyo.quicksum(m.cp[j, s] for s in allowed[j]) == pyo.quicksum(
            data["cpus"][j, q] * m.y[j, q] for q in configs[j]
        )

    @m.Constraint(m.J)
    def ext_mem_match_config(m: pyo.ConcreteModel, j: int) -> Any:
        """sum_s mp[j,s] = sum_q m_q y[j,q].  Why: as for cores, exactly the point's memory."""
        return pyo.quicksum(m.mp[j, s] for s in allowed[j]) == pyo.quicksum(
            data["mem_gb"][j, q] * m.y[j, q] for q in configs[j]
        )

    @m.Constraint(m.JS)
    def ext_part_has_gpu(m: pyo.ConcreteModel, j: int, s: int) -> Any:
        """a[j,s] >= u[j,s].  Why: every placement part holds at least one GPU (docs/formats.md)."""
        return m.a[j, s] >= m.u[j, s]

    @m.Constraint(m.JS)
    def ext_gpus_only_on_used(m: pyo.ConcreteModel, j: int, s: int) -> Any:
        """a[j,s] <= min(g_j, G_s) u[j,s].  Why: u marks the servers a job occupies."""
        return m.a[j, s] <= min(g[j], G[s]) * m.u[j, s]

    @m.Constraint(m.JS)
    def ext_cpus_only_on_used(m: pyo.ConcreteModel, j: int, s: int) -> Any:
        """cp[j,s] <= C_s u[j,s].  Why: cores only where the job has GPUs."""
        return m.cp[j, s] <= C[s] * m.u[j, s]

    @m.Constraint(m.JS)
    def ext_mem_only_on_used(m: pyo.ConcreteModel, j: int, s: int) -> Any:
        """mp[j,s] <= M_s u[j,s].  Why: memory only where the job has GPUs."""
        return m.mp[j, s] <= M[s] * m.u[j, s]

    @m.Constraint(m.J)
    def ext_spread_flag(m: pyo.ConcreteModel, j: int) -> Any:
        """sum_s u[j,s] <= 1 + (|S_j| - 1) v_j.  Why: v_j = 1 whenever the job spans servers."""
        return pyo.quicksum(m.u[j, s] for s in allowed[j]) <= 1 + (len(allowed[j]) - 1) * m.v[j]

    @m.Constraint(m.J)
    def ext_split_loss(m: pyo.ConcreteModel, j: int) -> Any:
        """t_j >= W_j(y) - Wmax_j (1 - v_j).  Why: t_j = W_j v_j; (1 - p_j) t_j is the penalty."""
        return m.t[j] >= wsum(m, j) - data["w_max"][j] * (1 - m.v[j])

    return m
