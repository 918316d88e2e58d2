"""Synergy-OPT made deployable (``opt``); the exact model ``opt-exact`` is in :mod:`.opt_exact`.

``opt`` runs, on TUNE's runnable set:

1. the super-machine (1)-(5) on the fast path (classes, fair-share restriction, dominance;
   proven equal to the Pyomo reference by tests) -> a grid point per job, and the proven
   optimum reported as ``upper_bound`` (the solver's dual bound, never an incumbent);
2. whole-GPU assignments of those points to servers, tried in turn: a least-loaded packing
   (balances cores and memory per server), the rounded vertex of the placement LP
   (pl0)-(pl4) (the paper's route: whole jobs where the vertex put them, the few split ones
   on one server, spread only when no server has the GPUs), and TUNE's own placement;
3. for each assignment, per-server re-optimisation: the same knapsack with one (2)/(3) pair
   per server, so every server's cores and memory go to its own jobs' best points (fair share
   kept by the column restriction, the split penalty by a higher floor for spread jobs).
   The search stops at the first candidate reaching the super-machine optimum.

The best candidate is checked by the independent checker and compared with TUNE on the same
round; the better allocation is returned, and any fallback (time limit, solver failure,
failed rounding, TUNE better) is said in ``notes`` and logged.  So OPT is never below TUNE.
The bound is claimed only when the whole runnable set is scheduled.

"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Sequence

import numpy as np

from synergy_opt.check import check_allocation
from synergy_opt.formulations.fast import (
    DemandClass,
    JobClass,
    MatrixModel,
    build_knapsack,
    build_placement_fast,
    build_server_classes,
    build_super_machine_fast,
    class_key,
    useful_points,
)
from synergy_opt.mechanisms.base import MechanismOptions, make_mechanism, register
from synergy_opt.mechanisms.packing import (
    max_single_server_gpus,
    select_runnable,
    split_cpus,
    split_mem,
)
from synergy_opt.solve import (
    DEFAULT_REL_GAP,
    SolveResult,
    TerminationStatus,
    solve_matrix,
)
from synergy_opt.types import (
    MEM_EPS_GB,
    THROUGHPUT_EPS,
    Allocation,
    Job,
    PlacementPart,
    RoundInstance,
    build_allocation,
)

log = logging.getLogger(__name__)

#: Relative gap for the per-server re-optimisation: it only has to find a good deployable
#: point quickly; the reported bound comes from the super-machine, solved to optimality.
CONFIGURE_REL_GAP: float = 1e-4

#: The server-class MIP route runs only on rounds with at most this many columns
#: (about 8 servers of mixed jobs): beyond, its root solve alone costs a second or more.
CLASS_MIP_MAX_COLUMNS: int = 400
#: Branch-and-bound nodes for that route: a deterministic stop, unlike a time limit.
CLASS_MIP_NODES: int = 200

Point = tuple[int, float, float]  # (cpus, mem_gb, throughput)


class RoundingError(RuntimeError):
    """The rounding could not turn the fractional solution into a valid allocation."""


def _tune_fallback(
    inst: RoundInstance,
    tune: Allocation,
    name: str,
    solver: str,
    upper: float | None,
    notes: Sequence[str],
    t0: float,
) -> Allocation:
    """TUNE's allocation relabelled as ``name``, with the bound and the reasons.

    The bound covers the runnable set; if TUNE left part of it unscheduled the bound does
    not apply to TUNE's smaller set (a job's fair-share floor can cost others more than the
    job adds), so it is dropped and the note says why.
    """
    upper, notes = _bound_for(inst, tune, upper, notes)
    for n in notes:
        log.warning("%s on %s: %s", name, inst.name, n)
    return dataclasses.replace(
        tune,
        mechanism=name,
        solver=solver,
        upper_bound=upper,
        notes=tuple(notes),
        solve_seconds=time.perf_counter() - t0,
    )


def _bound_for(
    inst: RoundInstance, alloc: Allocation, upper: float | None, notes: Sequence[str]
) -> tuple[float | None, list[str]]:
    """The runnable set's bound if ``alloc`` schedules exactly that set, else none (and why)."""
    if upper is not None and {j.id for j in alloc.jobs} != {j.id for j in select_runnable(inst)}:
        return None, [*notes, "no upper bound: only part of the runnable set is scheduled"]
    return upper, list(notes)


def _better_of(
    inst: RoundInstance, mine: Allocation, tune: Allocation, name: str, t0: float
) -> Allocation:
    """Return ``mine`` unless it breaks a rule or TUNE's total is higher."""
    bad = check_allocation(inst, mine, fair_share=True)
    if bad:
        note = f"fell back to tune: rounded solution failed the check ({bad[0]})"
        return _tune_fallback(inst, tune, name, mine.solver or "", mine.upper_bound, [note], t0)
    if tune.total_throughput > mine.total_throughput + THROUGHPUT_EPS:
        note = (
            f"returned tune's allocation: total {tune.total_throughput:.6g} beats the rounded "
            f"{name} solution's {mine.total_throughput:.6g}"
        )
        return _tune_fallback(inst, tune, name, mine.solver or "", mine.upper_bound, [note], t0)
    upper, notes = _bound_for(inst, mine, mine.upper_bound, mine.notes)
    for n in notes[len(mine.notes) :]:
        log.warning("%s on %s: %s", name, inst.name, n)
    return dataclasses.replace(
        mine, upper_bound=upper, notes=tuple(notes), solve_seconds=time.perf_counter() - t0
    )


class _Clock:
    """Remaining time of an optional overall limit."""

    def __init__(self, limit: float | None) -> None:
        self.start = time.perf_counter()
        self.limit = limit

    def left(self) -> float | None:
        if self.limit is None:
            return None
        return max(self.limit - (time.perf_counter() - self.start), 1e-3)


@register("opt")
class Opt:
    """Synergy-OPT: super-machine optimum, vertex placement, rounding, never below TUNE."""

    name = "opt"

    def __init__(self, options: MechanismOptions | None = None) -> None:
        self.options = options or MechanismOptions()

    def _solve(
        self,
        mm: MatrixModel,
        clock: _Clock,
        *,
        rel_gap: float = DEFAULT_REL_GAP,
        vertex: bool = True,
        node_limit: int | None = None,
    ) -> SolveResult:
        return solve_matrix(
            mm,
            self.options.solver,
            time_limit=clock.left(),
            threads=self.options.threads,
            rel_gap=rel_gap,
            vertex=vertex,
            node_limit=node_limit,
        )

    def allocate(self, inst: RoundInstance) -> Allocation:
        """Allocate one round (see the module docstring for the steps)."""
        t0 = time.perf_counter()
        clock = _Clock(self.options.time_limit_s)
        solver = self.options.solver
        tune = make_mechanism("tune", self.options).allocate(inst)
        runnable = select_runnable(inst)
        if not runnable:
            return _tune_fallback(inst, tune, self.name, solver, 0.0, [], t0)

        ksm = build_super_machine_fast(inst, runnable)
        res = self._solve(ksm.matrix, clock)
        upper = res.dual_bound
        if res.status is not TerminationStatus.OPTIMAL or res.x is None:
            note = f"fell back to tune: super-machine solve ended {res.status} ({res.solver})"
            return _tune_fallback(inst, tune, self.name, solver, upper, [note], t0)
        log.info(
            "super-machine optimum %.6g (%d columns, %.3fs)",
            res.objective or 0.0,
            ksm.matrix.num_cols,
            res.runtime_s,
        )

        # Up to four integral GPU assignments, each re-optimised per server: a least-loaded
        # packing of the super-machine points (balances cores and memory per server), on
        # small rounds the server-class MIP (consolidated placement and points at once), the
        # rounded vertex of the placement LP (the paper's route), and TUNE's own (whose points
        # the knapsack can always keep, so that candidate is never below TUNE).  The best is
        # returned; the search stops early once a candidate reaches the super-machine bound.
        candidates: list[Allocation] = []
        errors: list[str] = []
        target = (res.objective or 0.0) - 1e-9 * max(1.0, abs(res.objective or 0.0))
        for label, plan_of in (
            ("balanced packing", _balanced_plan),
            ("server-class MIP", self._class_mip_plan),
            ("placement LP", self._lp_plan),
            ("tune placement", _tune_plan),
        ):
            try:
                plan = plan_of(inst, ksm.classes, ksm.picks(res.x), clock, tune)
                placements = self._configure(inst, plan, clock)
            except RoundingError as e:
                errors.append(f"{label}: {e}")
                log.info("opt on %s: %s: %s", inst.name, label, e)
                continue
            cand = build_allocation(inst, self.name, placements, solver=solver, upper_bound=upper)
            log.info("opt on %s: %s reaches %.6g", inst.name, label, cand.total_throughput)
            candidates.append(cand)
            if cand.total_throughput >= target:
                break
        if not candidates:
            return _tune_fallback(
                inst,
                tune,
                self.name,
                solver,
                upper,
                [f"fell back to tune: {'; '.join(errors)}"],
                t0,
            )
        mine = max(candidates, key=lambda a: a.total_throughput)
        return _better_of(inst, mine, tune, self.name, t0)

    # ------------------------------------------------------------------ rounding

    def _class_mip_plan(
        self,
        inst: RoundInstance,
        classes: Sequence[JobClass],
        picks: Sequence[Sequence[tuple[Point, int]]],
        clock: _Clock,
        tune: Allocation,
    ) -> dict[str, list[tuple[int, int]]]:
        """Servers from the server-class MIP (small rounds only; a node limit keeps it bounded).

        The node limit, not a time limit, ends the search, so the answer is the same on every
        run (a time limit is only passed when the caller set one).
        """
        servers = inst.cluster.servers
        allowed = [
            tuple(s for s, srv in enumerate(servers) if cl.members[0].may_use(srv))
            for cl in classes
        ]
        size = sum(len(cl.points) * len(a) for cl, a in zip(classes, allowed, strict=True))
        if size > CLASS_MIP_MAX_COLUMNS:
            raise RoundingError(f"skipped: {size} columns > {CLASS_MIP_MAX_COLUMNS}")
        sc = build_server_classes(inst, classes, allowed)
        res = self._solve(sc.matrix, clock, rel_gap=CONFIGURE_REL_GAP, node_limit=CLASS_MIP_NODES)
        if res.x is None:
            raise RoundingError(f"server-class MIP ended {res.status} ({res.solver})")
        pending = [iter(cl.members) for cl in classes]
        plan: dict[str, list[tuple[int, int]]] = {}
        for (k, _, s), v in zip(sc.columns, res.x, strict=True):
            for _ in range(int(round(float(v)))):
                job = next(pending[k])
                plan[job.id] = [(s, job.gpus)]
        return plan

    def _lp_plan(
        self,
        inst: RoundInstance,
        classes: Sequence[JobClass],
        picks: Sequence[Sequence[tuple[Point, int]]],
        clock: _Clock,
        tune: Allocation,
    ) -> dict[str, list[tuple[int, int]]]:
        """GPUs per server from the placement LP's vertex (steps 2 and 3)."""
        demands = _demand_classes(inst, classes, picks)
        pm = build_placement_fast(inst, demands)
        pres = self._solve(pm.matrix, clock, vertex=True)
        if pres.x is None:
            raise RoundingError(f"placement LP ended {pres.status} ({pres.solver})")
        frac = {col: float(v) for col, v in zip(pm.columns, pres.x, strict=True) if v > 1e-9}
        return _assign_gpus(inst, demands, frac)

    def _configure(
        self, inst: RoundInstance, plan: dict[str, list[tuple[int, int]]], clock: _Clock
    ) -> dict[str, list[PlacementPart]]:
        """Pick every job's grid point under per-server capacities (step 4)."""
        servers = inst.cluster.servers
        jobs = {j.id: j for j in inst.jobs}
        free_c = [float(s.cpus) for s in servers]
        free_m = [float(s.mem_gb) for s in servers]
        total_c, total_m = inst.cluster.total_cpus, inst.cluster.total_mem_gb
        spread: dict[str, list[tuple[int, int, int, float]]] = {}
        spread_pts: dict[str, tuple[Point, ...]] = {}
        for jid, parts in plan.items():
            if len(parts) == 1:
                continue
            job = jobs[jid]
            fair = inst.fair_share_throughput(job)
            consolidable = job.gpus <= max_single_server_gpus(inst.cluster.servers, job)
            floor = fair / job.split_penalty if consolidable else fair
            pts = useful_points(job.sensitivity, floor)
            if not pts:
                raise RoundingError(
                    f"job {jid} must be spread but no grid point keeps its fair share"
                )
            cheapest = min(pts, key=lambda p: (p[0] / total_c + p[1] / total_m, p[0], p[1]))
            spread[jid] = _split(parts, cheapest)
            spread_pts[jid] = pts
            for s, _, c, m in spread[jid]:
                free_c[s] -= c
                free_m[s] -= m
        if any(c < 0 or m < -MEM_EPS_GB for c, m in zip(free_c, free_m, strict=True)):
            raise RoundingError("spread jobs do not fit at their cheapest fair-share points")

        groups: dict[tuple[int, object], list[Job]] = {}
        for jid, parts in plan.items():
            if len(parts) == 1:
                groups.setdefault((parts[0][0], class_key(jobs[jid])), []).append(jobs[jid])
        classes: list[JobClass] = []
        for (s, _), members in groups.items():
            first = members[0]
            pts = useful_points(first.sensitivity, inst.fair_share_throughput(first))
            classes.append(JobClass(tuple(members), pts, group=s))
        out: dict[str, list[PlacementPart]] = {}
        if classes:
            km = build_knapsack(
                classes,
                [(max(c, 0.0), max(m, 0.0)) for c, m in zip(free_c, free_m, strict=True)],
                name="per_server_fast",
            )
            res = self._solve(km.matrix, clock, rel_gap=CONFIGURE_REL_GAP)
            if res.x is None:
                raise RoundingError(f"per-server re-optimisation ended {res.status} ({res.solver})")
            for cl, picks in zip(km.classes, km.picks(res.x), strict=True):
                s = cl.group
                ordered = sorted(picks, key=lambda pn: (-pn[0][2], pn[0][0], pn[0][1]))
                pending = iter(cl.members)
                for (c, m, _), n in ordered:
                    for _ in range(n):
                        job = next(pending)
                        out[job.id] = [PlacementPart(servers[s].name, job.gpus, c, m)]
                        free_c[s] -= c
                        free_m[s] -= m
        # Spread jobs take the best point whose parts fit what the others left (few jobs).
        for jid, held in spread.items():
            for s, _, c, m in held:
                free_c[s] += c
                free_m[s] += m
            best = held
            for pt in sorted(spread_pts[jid], key=lambda p: (-p[2], p[0], p[1])):
                cand = _split([(s, k) for s, k, _, _ in held], pt)
                if all(c <= free_c[s] and m <= free_m[s] + MEM_EPS_GB for s, _, c, m in cand):
                    best = cand
                    break
            for s, _, c, m in best:
                free_c[s] -= c
                free_m[s] -= m
            out[jid] = [PlacementPart(servers[s].name, k, c, m) for s, k, c, m in best]
        return out


def _balanced_plan(
    inst: RoundInstance,
    classes: Sequence[JobClass],
    picks: Sequence[Sequence[tuple[Point, int]]],
    clock: _Clock,
    tune: Allocation,
) -> dict[str, list[tuple[int, int]]]:
    """Largest jobs first, each on the allowed server whose cores/memory load stays lowest.

    Jobs carry their super-machine points; a server's load is the larger of its core and
    memory fractions in use.  Decreasing GPU order keeps whole servers for big jobs (with
    power-of-two demands the free GPU counts stay multiples of the next job's size).
    """
    servers = inst.cluster.servers
    demands = _demand_classes(inst, classes, picks)
    cap_g = np.array([s.gpus for s in servers], dtype=np.int64)
    cap_c = np.array([max(s.cpus, 1) for s in servers], dtype=np.float64)
    cap_m = np.array([max(s.mem_gb, 1e-9) for s in servers], dtype=np.float64)
    free_g = cap_g.copy()
    used_c = np.zeros(len(servers))
    used_m = np.zeros(len(servers))
    prio = {j.id: k for k, j in enumerate(inst.jobs)}
    items = sorted(
        ((dc, job) for dc in demands for job in dc.jobs),
        key=lambda t: (
            -t[0].gpus,
            -(t[0].cpus / cap_c.mean() + t[0].mem_gb / cap_m.mean()),
            prio[t[1].id],
        ),
    )
    plan: dict[str, list[tuple[int, int]]] = {}
    for dc, job in items:
        allowed = np.zeros(len(servers), dtype=bool)
        allowed[list(dc.allowed)] = True
        ok = allowed & (free_g >= dc.gpus)
        if ok.any():
            load = np.maximum((used_c + dc.cpus) / cap_c, (used_m + dc.mem_gb) / cap_m)
            load[~ok] = np.inf
            s = int(np.argmin(load))
            plan[job.id] = [(s, dc.gpus)]
            free_g[s] -= dc.gpus
            used_c[s] += dc.cpus
            used_m[s] += dc.mem_gb
            continue
        order = sorted(
            (int(s) for s in np.flatnonzero(allowed & (free_g > 0))), key=lambda s: (-free_g[s], s)
        )
        parts: list[tuple[int, int]] = []
        need = dc.gpus
        for s in order:
            k = int(min(need, free_g[s]))
            parts.append((s, k))
            need -= k
            if need == 0:
                break
        if need:
            raise RoundingError(f"no whole-GPU placement for job {job.id}")
        for s, k in parts:
            free_g[s] -= k
            used_c[s] += dc.cpus * k / dc.gpus
            used_m[s] += dc.mem_gb * k / dc.gpus
        plan[job.id] = sorted(parts)
    return plan


def _tune_plan(
    inst: RoundInstance,
    classes: Sequence[JobClass],
    picks: Sequence[Sequence[tuple[Point, int]]],
    clock: _Clock,
    tune: Allocation,
) -> dict[str, list[tuple[int, int]]]:
    """GPUs per server exactly as TUNE placed them."""
    index = {s.name: i for i, s in enumerate(inst.cluster.servers)}
    if not tune.jobs:
        raise RoundingError("tune scheduled no job")
    return {ja.id: [(index[p.server], p.gpus) for p in ja.placement] for ja in tune.jobs}


def _split(parts: Sequence[tuple[int, int]], pt: Point) -> list[tuple[int, int, int, float]]:
    """(server, gpus, cores, GB) per part: the point's cores and memory follow the GPUs."""
    weights = [k for _, k in parts]
    cs = split_cpus(pt[0], weights)
    ms = split_mem(pt[1], weights)
    return [(s, k, c, m) for (s, k), c, m in zip(parts, cs, ms, strict=True)]


def _demand_classes(
    inst: RoundInstance, classes: Sequence[JobClass], picks: Sequence[Sequence[tuple[Point, int]]]
) -> list[DemandClass]:
    """(class, point) groups; within a class, higher-priority jobs get higher-throughput points."""
    servers = inst.cluster.servers
    out: list[DemandClass] = []
    for cl, pk in zip(classes, picks, strict=True):
        allowed = tuple(s for s, srv in enumerate(servers) if cl.members[0].may_use(srv))
        members = list(cl.members)
        for (c, m, _), n in sorted(pk, key=lambda pn: (-pn[0][2], pn[0][0], pn[0][1])):
            take, members = members[:n], members[n:]
            out.append(DemandClass(tuple(take), take[0].gpus, c, m, allowed))
        if members:  # pragma: no cover - (4) makes the counts add up
            raise RoundingError("super-machine solution does not cover every job")
    return out


def _assign_gpus(
    inst: RoundInstance, demands: Sequence[DemandClass], frac: dict[tuple[int, int], float]
) -> dict[str, list[tuple[int, int]]]:
    """Whole GPUs per server for every job, from the vertex x[d, s] (step 3)."""
    servers = inst.cluster.servers
    free_g = [s.gpus for s in servers]
    free_c = [float(s.cpus) for s in servers]
    free_m = [float(s.mem_gb) for s in servers]
    plan: dict[str, list[tuple[int, int]]] = {}
    left: list[tuple[DemandClass, Job, dict[int, float]]] = []
    for d, dc in enumerate(demands):
        members = list(dc.jobs)
        rest: dict[int, float] = {}
        for s in dc.allowed:
            x = frac.get((d, s), 0.0)
            whole = min(int(math.floor(x + 1e-7)), len(members), free_g[s] // dc.gpus)
            for job in members[:whole]:
                plan[job.id] = [(s, dc.gpus)]
                free_g[s] -= dc.gpus
                free_c[s] -= dc.cpus
                free_m[s] -= dc.mem_gb
            members = members[whole:]
            if x - math.floor(x + 1e-7) > 1e-7:
                rest[s] = x - math.floor(x + 1e-7)
        left.extend((dc, job, rest) for job in members)
    prio = {j.id: k for k, j in enumerate(inst.jobs)}
    left.sort(key=lambda t: (-t[0].gpus, prio[t[1].id]))
    for dc, job, rest in left:
        g = dc.gpus
        fits = [s for s in dc.allowed if free_g[s] >= g]
        if fits:

            def score(
                s: int, dc: DemandClass = dc, rest: dict[int, float] = rest
            ) -> tuple[float, ...]:
                # Where the point fits in cores and memory first (else the per-server
                # re-optimisation must shrink someone), then where the vertex put it, then
                # best fit on GPUs so larger jobs still find a whole server.
                sc = (free_c[s] - dc.cpus) / max(servers[s].cpus, 1)
                sm = (free_m[s] - dc.mem_gb) / max(servers[s].mem_gb, 1e-9)
                return (
                    0.0 if min(sc, sm) >= -1e-9 else -min(sc, sm),
                    -rest.get(s, 0.0),
                    free_g[s],
                    -(sc + sm),
                    s,
                )

            s = min(fits, key=score)
            plan[job.id] = [(s, g)]
            free_g[s] -= g
            free_c[s] -= dc.cpus
            free_m[s] -= dc.mem_gb
            continue
        order = sorted((s for s in dc.allowed if free_g[s] > 0), key=lambda s: (-free_g[s], s))
        parts: list[tuple[int, int]] = []
        need = g
        for s in order:
            k = min(need, free_g[s])
            parts.append((s, k))
            need -= k
            if need == 0:
                break
        if need:
            raise RoundingError(f"no whole-GPU placement for job {job.id}")
        for (s, k), c, m in zip(
            parts,
            split_cpus(dc.cpus, [k for _, k in parts]),
            split_mem(dc.mem_gb, [k for _, k in parts]),
            strict=True,
        ):
            free_g[s] -= k
            free_c[s] -= c
            free_m[s] -= m
        plan[job.id] = sorted(parts)
    return plan
