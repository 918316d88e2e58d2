"""Packing at fixed points by CP-SAT: the fast path of :mod:`.packing`, the same rows under
the same names (``pk1_whole_jobs[3]``), solved for a first packing.

Why CP-SAT: once points and modes are fixed, what is left is a pure packing question with
every server's GPUs nearly all spoken for, where an LP-based MIP has a tight bound from the
root and nothing to branch towards.  On split penalties 128 GPUs seed 4 HiGHS needed 26 s
for the packing that proves 58.467 optimal (no incumbent for 9.7 s); CP-SAT, one worker,
finds it in about a second.

Memory is counted in :data:`~.packing_data.MEM_UNIT_GB` units, demands rounded up and
capacities down, so every packing found keeps every GB (the deployment max-flow checks it
again); free jobs' throughputs (``data.free``) in :data:`WORTH_UNIT` units, rounded down
against a floor rounded up.  ``relax=True`` rounds every one of these the other way: then
every real packing is a solution, so INFEASIBLE and the best worth's bound are proofs,
while the packings found are not used.

One worker and a deterministic budget (the caller's ``deterministic_s``): the same model
gives the same packing on every run and machine; a wall-clock limit, where given, can cut
it short, and the result says so (``TIME_LIMIT``).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass

from ortools.sat.python import cp_model

from synergy_opt.formulations.packing_data import (
    MEM_UNIT_GB,
    PackingData,
    room_left,
    units_down,
    units_up,
)
from synergy_opt.formulations.packing_lp import (
    PatternListing,
    build_packing_lp_matrix,
    whole_contents,
)
from synergy_opt.matrix import MatrixModel
from synergy_opt.solve import TerminationStatus

#: Throughput unit of the free jobs' worth in CP-SAT's integer rows.
WORTH_UNIT: float = 1e-6
#: :func:`pack_from_contents` skips CP-SAT where the spread jobs' placement around an
#: attempt's whole jobs is a question it has already proven to have no answer
#: (:func:`around_key`): integral solutions of the pattern LP that differ only in which
#: of several identical servers holds what ask the same question.  Split penalties 128
#: GPUs seed 9, branch-and-price from TUNE: 31 attempts over six leaves asked 4 questions,
#: each solve 60-130 ms of CP-SAT presolve and search for 0.016 deterministic units.
SKIP_REFUTED: bool = True

#: Whole GPUs per server for every job: job id -> ((server index, GPUs), ...), server order.
Plan = dict[str, tuple[tuple[int, int], ...]]
#: Any plan of that shape, only read (a hint).
PlanView = Mapping[str, tuple[tuple[int, int], ...]]
#: A spread-placement question up to a permutation of the servers (:func:`around_key`).
AroundKey = tuple[
    tuple[tuple[int, int, int], ...], tuple[tuple[int, int, int, tuple[bool, ...]], ...]
]


@dataclass(frozen=True, slots=True)
class PackingResult:
    """A packing (``status`` OPTIMAL) or why there is none: INFEASIBLE (proven), LIMIT
    (the deterministic budget ran out), TIME_LIMIT (the wall clock did)."""

    status: TerminationStatus
    plan: Plan | None
    seconds: float
    deterministic_s: float
    #: Per spread job, (server, cores, GB) of each part where a packing was found: the
    #: cores and memory CP-SAT drew from each server of its span.
    resources: Mapping[str, tuple[tuple[int, int, float], ...]] | None = None
    #: Per free job (``data.free``), the (cores, GB, throughput) it was given.
    points: Mapping[str, tuple[int, float, float]] | None = None
    #: With ``most_worth``: the solver's bound on the free jobs' throughput (a proof only
    #: of a ``relax`` model; OPTIMAL: the best one).
    worth_bound: float | None = None


@dataclass(frozen=True, slots=True)
class PackingModel:
    """The CP-SAT model and the variables a packing is read from."""

    model: cp_model.CpModel
    #: Per whole group, (server, n[d, s]) pairs.
    n: tuple[tuple[tuple[int, cp_model.IntVar], ...], ...]
    #: Per spread job, (server, a[j, s]) pairs.
    a: tuple[tuple[tuple[int, cp_model.IntVar], ...], ...]
    #: Per spread job, (server, p[j, s], q[j, s]): its cores and memory units there.
    pq: tuple[tuple[tuple[int, cp_model.IntVar, cp_model.IntVar], ...], ...] = ()
    #: Per free group, (option, f[e, o]) pairs.
    f: tuple[tuple[tuple[int, cp_model.IntVar], ...], ...] = ()
    #: Per spread job, (server, u[j, s]): whether it has a part there.
    u: tuple[tuple[tuple[int, cp_model.IntVar], ...], ...] = ()


def build_packing_cp(
    data: PackingData,
    *,
    fewest_parts: bool = False,
    most_worth: bool = False,
    relax: bool = False,
) -> PackingModel:
    """(pk1)-(pk12) of ``formulations/packing.md`` as a CP-SAT model; ``fewest_parts``
    adds (pk0) as its objective, ``most_worth`` the free jobs' throughput instead
    (otherwise the first packing is the answer); ``relax`` rounds GB and throughputs so
    that the model relaxes the real one (module docstring)."""
    m = cp_model.CpModel()
    demand, capacity = (units_down, units_up) if relax else (units_up, units_down)
    G = [s[0] for s in data.servers]
    C = [s[1] for s in data.servers]
    M = [capacity(s[2]) for s in data.servers]
    gpu: list[list[cp_model.LinearExprT]] = [[] for _ in G]
    cpu: list[list[cp_model.LinearExprT]] = [[] for _ in G]
    mem: list[list[cp_model.LinearExprT]] = [[] for _ in G]
    n_vars: list[tuple[tuple[int, cp_model.IntVar], ...]] = []
    for d, gr in enumerate(data.groups):
        need, mu = len(gr.jobs), demand(gr.mem_gb)
        got: list[tuple[int, cp_model.IntVar]] = []
        for s in gr.servers:
            cap = min(need, G[s] // gr.gpus)
            if gr.cpus:
                cap = min(cap, C[s] // gr.cpus)
            if mu:
                cap = min(cap, M[s] // mu)
            if cap <= 0:
                continue
            v = m.new_int_var(0, cap, f"n[{d},{s}]")
            got.append((s, v))
            gpu[s].append(gr.gpus * v)
            cpu[s].append(gr.cpus * v)
            mem[s].append(mu * v)
        m.add(sum(v for _, v in got) == need).with_name(f"pk1_whole_jobs[{d}]")
        n_vars.append(tuple(got))
    a_vars: list[tuple[tuple[int, cp_model.IntVar], ...]] = []
    pq_vars: list[tuple[tuple[int, cp_model.IntVar, cp_model.IntVar], ...]] = []
    u_vars: list[tuple[tuple[int, cp_model.IntVar], ...]] = []
    used: list[cp_model.IntVar] = []
    for j, sj in enumerate(data.spread):
        g, mu = sj.job.gpus, demand(sj.mem_gb)
        parts: list[tuple[int, cp_model.IntVar]] = []
        cores: list[cp_model.IntVar] = []
        gbs: list[cp_model.IntVar] = []
        drawn: list[tuple[int, cp_model.IntVar, cp_model.IntVar]] = []
        flags: list[tuple[int, cp_model.IntVar]] = []
        for s in sj.servers:
            top = min(g, G[s])
            if top <= 0:
                continue
            a = m.new_int_var(0, top, f"a[{j},{s}]")
            u = m.new_bool_var(f"u[{j},{s}]")
            p = m.new_int_var(0, min(sj.cpus, C[s]), f"p[{j},{s}]")
            q = m.new_int_var(0, min(mu, M[s]), f"q[{j},{s}]")
            m.add(a >= u).with_name(f"pk5_part_gpus[{j},{s}]")
            m.add(a <= top * u).with_name(f"pk5_part_gpus[{j},{s}]")
            m.add(p <= C[s] * u).with_name(f"pk6_part_cpus[{j},{s}]")
            m.add(q <= M[s] * u).with_name(f"pk7_part_mem[{j},{s}]")
            parts.append((s, a))
            drawn.append((s, p, q))
            flags.append((s, u))
            used.append(u)
            cores.append(p)
            gbs.append(q)
            gpu[s].append(a)
            cpu[s].append(p)
            mem[s].append(q)
        m.add(sum(a for _, a in parts) == g).with_name(f"pk2_spread_gpus[{j}]")
        m.add(sum(cores) == sj.cpus).with_name(f"pk3_spread_cpus[{j}]")
        m.add(sum(gbs) == mu).with_name(f"pk4_spread_mem[{j}]")
        a_vars.append(tuple(parts))
        pq_vars.append(tuple(drawn))
        u_vars.append(tuple(flags))
    f_vars: list[tuple[tuple[int, cp_model.IntVar], ...]] = []
    worth: list[cp_model.LinearExprT] = []
    for e, fr in enumerate(data.free):
        need, g = len(fr.jobs), fr.gpus
        options: list[tuple[int, cp_model.IntVar]] = []
        for o, (s, c, gb, w) in enumerate(fr.options):
            mu = demand(gb)
            cap = min(need, G[s] // g, C[s] // c if c else need, M[s] // mu if mu else need)
            if cap <= 0:
                continue
            v = m.new_int_var(0, cap, f"f[{e},{o}]")
            options.append((o, v))
            gpu[s].append(g * v)
            cpu[s].append(c * v)
            mem[s].append(mu * v)
            units = w / WORTH_UNIT
            worth.append(int(math.ceil(units - 1e-6) if relax else math.floor(units + 1e-6)) * v)
        m.add(sum(v for _, v in options) == need).with_name(f"pk11_free_jobs[{e}]")
        f_vars.append(tuple(options))
    total = sum(worth)
    if data.free_worth is not None and math.isfinite(data.free_worth):
        floor = data.free_worth / WORTH_UNIT
        at_least = math.floor(floor + 1e-6) if relax else math.ceil(floor - 1e-6)
        m.add(total >= at_least).with_name("pk12_free_worth[0]")
    for s in range(len(G)):
        if not gpu[s]:
            continue
        m.add(sum(gpu[s]) <= G[s]).with_name(f"pk8_gpu_capacity[{s}]")
        m.add(sum(cpu[s]) <= C[s]).with_name(f"pk9_cpu_capacity[{s}]")
        m.add(sum(mem[s]) <= M[s]).with_name(f"pk10_mem_capacity[{s}]")
    if most_worth and worth:
        m.maximize(total)
    elif fewest_parts and used:
        m.minimize(sum(used))
    return PackingModel(
        m, tuple(n_vars), tuple(a_vars), tuple(pq_vars), tuple(f_vars), tuple(u_vars)
    )


def solve_packing(
    data: PackingData,
    *,
    deterministic_s: float,
    time_limit: float | None = None,
    fewest_parts: bool = False,
    most_worth: bool = False,
    relax: bool = False,
    hint: PlanView | None = None,
    hint_points: Mapping[str, tuple[int, float, float]] | None = None,
    whole: Mapping[tuple[int, int], int] | None = None,
    hint_resources: Mapping[str, tuple[tuple[int, int, float], ...]] | None = None,
) -> PackingResult:
    """A first packing of ``data`` within ``deterministic_s`` of CP-SAT's deterministic time
    (about seconds of one core) and, where given, ``time_limit`` wall seconds; with
    ``fewest_parts`` the one with the fewest parts of spread jobs found in that budget
    (``hint``: a packing to start from, e.g. a first one, ``hint_points`` its free jobs'
    points), with ``most_worth`` the one whose free jobs are worth most, and its bound.
    ``whole`` fixes every n[d, s] (missing pairs at 0): only the spread jobs are then
    placed, around those whole jobs.  ``hint_resources``: the cores and GB the hint's spread
    jobs draw from each server (:attr:`PackingResult.resources`), which completes the hint:
    without them CP-SAT must first rebuild the hint's packing from its GPUs alone, and
    within a small budget often did not (multi-GPU 128 GPUs seeds 7 and 72, no packing in
    0.5 units from a packing's own GPUs).
    ``relax``: the relaxation of :func:`build_packing_cp` (its verdicts are proofs)."""
    t0 = time.perf_counter()
    pm = build_packing_cp(data, fewest_parts=fewest_parts, most_worth=most_worth, relax=relax)
    if hint is not None:
        _add_hint(data, pm, hint, hint_points, hint_resources)
    if whole is not None:
        for d, got in enumerate(pm.n):
            for s, v in got:
                pm.model.add(v == whole.get((d, s), 0))
    solver = cp_model.CpSolver()
    params = solver.parameters
    params.num_workers = 1
    params.max_deterministic_time = float(deterministic_s)
    if time_limit is not None:
        params.max_time_in_seconds = float(max(time_limit, 1e-3))
    code = solver.solve(pm.model)
    seconds = time.perf_counter() - t0
    dtime = float(solver.deterministic_time)
    bound = solver.best_objective_bound * WORTH_UNIT if most_worth and pm.f else None
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        plan, points = _plan(data, pm, solver)
        return PackingResult(
            TerminationStatus.OPTIMAL,
            plan,
            seconds,
            dtime,
            _resources(data, pm, solver),
            points,
            bound,
        )
    if code == cp_model.INFEASIBLE:
        status = TerminationStatus.INFEASIBLE
    elif code == cp_model.UNKNOWN:
        cut = time_limit is not None and solver.wall_time >= 0.99 * time_limit
        status = TerminationStatus.TIME_LIMIT if cut else TerminationStatus.LIMIT
    else:  # pragma: no cover - MODEL_INVALID: a bug in the builder
        status = TerminationStatus.ERROR
    return PackingResult(status, None, seconds, dtime, worth_bound=bound)


def whole_counts(data: PackingData, plan: PlanView) -> dict[tuple[int, int], int]:
    """``plan``'s whole jobs as counts per (group, server): :func:`solve_packing`'s
    ``whole``, which keeps them where ``plan`` puts them."""
    out: dict[tuple[int, int], int] = {}
    for d, gr in enumerate(data.groups):
        for job in gr.jobs:
            (s, _), *_ = plan[job.id]
            out[d, s] = out.get((d, s), 0) + 1
    return out


def _add_hint(
    data: PackingData,
    pm: PackingModel,
    plan: PlanView,
    points: Mapping[str, tuple[int, float, float]] | None = None,
    resources: Mapping[str, tuple[tuple[int, int, float], ...]] | None = None,
) -> None:
    """``plan``'s values as CP-SAT's hint for every n and a variable; every u, p and q
    where ``resources`` gives the spread jobs' cores and GB per server (a complete hint;
    without it those stay CP-SAT's to choose, as before it existed); every f where
    ``points`` gives the free jobs' points."""
    on = whole_counts(data, plan)
    for d, got in enumerate(pm.n):
        for s, v in got:
            pm.model.add_hint(v, on.get((d, s), 0))
    for sj, parts in zip(data.spread, pm.a, strict=True):
        gpus = dict(plan[sj.job.id])
        for s, v in parts:
            pm.model.add_hint(v, gpus.get(s, 0))
    if resources is not None:
        for sj, flags, drawn in zip(data.spread, pm.u, pm.pq, strict=True):
            gpus = dict(plan[sj.job.id])
            for s, u in flags:
                pm.model.add_hint(u, int(gpus.get(s, 0) > 0))
            drew = {s: (c, gb) for s, c, gb in resources.get(sj.job.id, ())}
            for s, p, q in drawn:
                c, gb = drew.get(s, (0, 0.0))
                pm.model.add_hint(p, c)
                pm.model.add_hint(q, round(gb / MEM_UNIT_GB))
    if points is None:
        return
    for fr, options in zip(data.free, pm.f, strict=True):
        at: dict[int, int] = {}  # option -> jobs there, read from the plan's server and point
        index = {opt: o for o, opt in enumerate(fr.options)}
        for job in fr.jobs:
            (s, _), *_ = plan[job.id]
            o = index.get((s, *points[job.id]))
            if o is not None:
                at[o] = at.get(o, 0) + 1
        for o, v in options:
            pm.model.add_hint(v, at.get(o, 0))


def _plan(
    data: PackingData, pm: PackingModel, solver: cp_model.CpSolver
) -> tuple[Plan, dict[str, tuple[int, float, float]]]:
    """Whole jobs of a group go to its servers in order, members in the group's order (free
    jobs to their options so); the free jobs' points beside."""
    plan: Plan = {}
    for gr, got in zip(data.groups, pm.n, strict=True):
        members = iter(gr.jobs)
        for s, v in got:
            for _ in range(int(solver.value(v))):
                plan[next(members).id] = ((s, gr.gpus),)
    for sj, parts in zip(data.spread, pm.a, strict=True):
        plan[sj.job.id] = tuple((s, k) for s, v in parts if (k := int(solver.value(v))) > 0)
    points: dict[str, tuple[int, float, float]] = {}
    for fr, options in zip(data.free, pm.f, strict=True):
        members = iter(fr.jobs)
        for o, v in options:
            s, c, gb, w = fr.options[o]
            for _ in range(int(solver.value(v))):
                jid = next(members).id
                plan[jid] = ((s, fr.gpus),)
                points[jid] = (c, gb, w)
    return plan, points


def _resources(
    data: PackingData, pm: PackingModel, solver: cp_model.CpSolver
) -> dict[str, tuple[tuple[int, int, float], ...]]:
    """Per spread job, the cores and GB (units back to GB) it draws from each server."""
    return {
        sj.job.id: tuple(
            (s, int(solver.value(p)), int(solver.value(q)) * MEM_UNIT_GB)
            for s, p, q in drawn
            if solver.value(p) or solver.value(q)
        )
        for sj, drawn in zip(data.spread, pm.pq, strict=True)
    }


def pack_from_contents(
    data: PackingData,
    lst: PatternListing,
    *,
    attempts: int,
    deterministic_s: float,
    deadline: float | None = None,
    lp: MatrixModel | None = None,
    refuted: set[AroundKey] | None = None,
) -> tuple[PackingResult, int] | None:
    """A packing in two steps (``formulations/packing_lp.md``), with the attempt that found
    it, or ``None``: the whole jobs where an integral solution of the pattern LP puts them
    (:func:`~.packing_lp.whole_contents`), then the spread jobs placed around them within
    ``deterministic_s``; at most ``attempts`` solutions, all before ``deadline``
    (``time.perf_counter()`` seconds).  ``lp``: ``lst``'s LP where the caller has it
    (:attr:`~.packing_lp.LpVerdict.matrix`).

    ``refuted``: the questions (:func:`around_key`) CP-SAT has proven to have no answer,
    read and extended (a caller asking many packings passes one set to all); an attempt
    that asks one of them again is not solved (:data:`SKIP_REFUTED`).  The attempts are the
    same, so is the answer: only CP-SAT's time is saved."""
    t0 = time.perf_counter()
    if lp is None:
        lp = build_packing_lp_matrix(lst)  # once: attempts differ only in their costs
    seen: set[AroundKey] = set() if refuted is None else refuted
    for attempt in range(attempts):
        left = None if deadline is None else deadline - time.perf_counter()
        if left is not None and left <= 0:
            break
        whole = whole_contents(lst, attempt, left, lp)
        if whole is None:  # no integral solution within the IP's limits
            break
        key = around_key(data, whole) if SKIP_REFUTED else None
        if key is not None and key in seen:
            continue  # proven before: no spread placement around these whole jobs
        left = None if deadline is None else max(deadline - time.perf_counter(), 1e-3)
        got = solve_packing(data, deterministic_s=deterministic_s, time_limit=left, whole=whole)
        if got.plan is not None:
            return dataclasses.replace(got, seconds=time.perf_counter() - t0), attempt
        if key is not None and got.status is TerminationStatus.INFEASIBLE:
            seen.add(key)
    return None


def around_key(data: PackingData, whole: Mapping[tuple[int, int], int]) -> AroundKey | None:
    """What the spread jobs' placement around ``whole`` (:func:`solve_packing`'s) depends on,
    up to a permutation of the servers: each spread job's GPUs, cores and GB units, and,
    over the servers with a GPU left, what each has left and which spread jobs may use it.
    Two questions with one key have the same verdict (servers carry no name in the model).
    ``None`` where the key would not decide it: free groups, or whole jobs the model could
    not hold (beyond a server's capacity or their group's servers, a group not all placed,
    a negative count), which make the model infeasible whatever the spread jobs do."""
    if data.free or any(k < 0 for k in whole.values()):
        return None
    placed = [0] * len(data.groups)
    for (d, s), k in whole.items():
        if k and s not in data.groups[d].servers:
            return None
        placed[d] += k
    if any(p != len(gr.jobs) for p, gr in zip(placed, data.groups, strict=True)):
        return None
    gpus, cpus, mem = room_left(data, whole)
    if min(gpus, default=0) < 0 or min(cpus, default=0) < 0 or min(mem, default=0) < 0:
        return None
    spread = tuple((sj.job.gpus, sj.cpus, units_up(sj.mem_gb)) for sj in data.spread)
    allowed = [frozenset(sj.servers) for sj in data.spread]
    left = sorted(
        (gpus[s], cpus[s], mem[s], tuple(s in a for a in allowed))
        for s in range(len(gpus))
        if gpus[s] > 0
    )
    return spread, tuple(left)
