"""Rounding routes: whole GPUs per server for every runnable job, one registry entry each.

A route reads the frozen :class:`~.context.RoundContext` and returns a
:data:`~.context.GpuPlan`; the mechanism then deploys the super-machine points on it (a
max-flow, :mod:`.transport`) or, failing that, re-optimises the points for it
(:mod:`.configure`).  Routes run in registry order, consolidating ones first, so the first
plan that reaches the super-machine optimum is also the least fragmented one found.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import networkx as nx
import numpy as np

from synergy_opt.formulations.fast import build_placement_fast, build_server_classes
from synergy_opt.mechanisms.opt.bridges import bridged
from synergy_opt.mechanisms.opt.context import (
    GpuPlan,
    RoundContext,
    RoundingError,
    spreads_at_penalty,
)
from synergy_opt.mechanisms.packing import most_free_first
from synergy_opt.solve import TerminationStatus, solve_matrix
from synergy_opt.types import MEM_EPS_GB, Job

#: The server-class MIP route runs only on rounds with at most this many columns
#: (about 8 servers of mixed jobs): beyond, its root solve alone costs a second or more.
CLASS_MIP_MAX_COLUMNS: int = 400
#: Branch-and-bound nodes for that route: a deterministic stop, unlike a time limit.
CLASS_MIP_NODES: int = 200
#: Under a time limit, the share of what is left that the route's MIP may use, so that the
#: routes after it keep time (as ``counting_route.COUNTING_TIME_SHARE``).  With the whole
#: rest, multi-GPU 64 GPUs seed 54 at a 2-s limit spent it all here (the MIP takes 2.6-3.3
#: s to its node limit, at 51.69, its bound 51.93) and fell back to TUNE's 45.73, where
#: the ``counting`` route after it reaches the bound 55.09 in 0.8 s.
CLASS_MIP_TIME_SHARE: float = 0.25
#: The MIP stops, its incumbent kept, once it has one and its dual bound is below the
#: search's target (``search.TARGET_GAP`` below the super-machine's optimum): no plan of
#: whole jobs can then end the search.  Multi-GPU 64 GPUs seed 54: its root's cuts bring
#: the bound from 55.27 to 53.14 (target 54.98) in 0.3 s, and the node limit came 2.6-3.3 s
#: later, at 51.69; the ``counting`` route after it reaches the bound 55.09.  Not where a
#: job may spread at a split penalty: there a plan of whole jobs below the target can be
#: the routes' best (split penalties 64 GPUs seed 1069: this MIP's plan at its node limit,
#: 25.30, from which the spread move reaches 25.45; stopped, the routes' best was 24.47),
#: and the stop was measured only on the other families.  Off only to measure it.
CLASS_MIP_STOP_BELOW_TARGET: bool = True
#: Fractions of the placement LP below this are zero (simplex noise).
FRACTION_EPS: float = 1e-7
#: HiGHS options of the placement LP.  Without presolve its dual simplex reaches the very
#: vertex it reaches after presolve (equal solution vectors on all 252 rounds compared:
#: six families, 32-512 GPUs, HiGHS 1.16) in 70-80 % of the time (512 GPUs of the
#: multi-GPU mix: 12-17 -> 9-14 ms).  Primal simplex was faster still but reached other
#: vertices, whose plans the repair fixed on 3 of 9 512-GPU rounds instead of 8 and which
#: lowered one 128-GPU round's total: not taken.
PLACEMENT_LP_OPTIONS: Mapping[str, bool | int | float | str] = MappingProxyType({"presolve": "off"})

RoutePlan = Callable[[RoundContext], GpuPlan]
#: An upper bound on what any plan of a route is worth at the super-machine's points where
#: they deploy on it (``None``: no bound known).
RouteBound = Callable[[RoundContext], float | None]


@dataclass(frozen=True, slots=True)
class Route:
    """A named way to round: ``spreads`` says it may spread jobs that fit on one server;
    ``spread_only`` that it is skipped on rounds where no job may spread (it would only
    repeat a packing); ``one_gpu_only`` that it runs only where every job asks for one
    GPU; ``late`` that it runs only after the re-optimised plans missed the target (it
    costs more than they do, and is needed only where they fall short)."""

    name: str
    plan: RoutePlan
    spreads: bool
    doc: str
    spread_only: bool
    late: bool = False
    #: Late routes run in this order (registry order among equals): cheap or narrow first.
    late_rank: int = 0
    #: The plan counts only where the super-machine's points deploy on it (directly or
    #: after the swap repair); otherwise it is dropped, not re-optimised, so the route
    #: never changes which plans the re-optimisation gets.
    fast_only: bool = False
    #: Where this bound is below the target, no plan of the route ends the search at the
    #: super-machine's points, so the route is deferred: it runs after the other routes,
    #: and only if none of them reached the target (its plan then goes where it went).
    bound: RouteBound | None = None
    one_gpu_only: bool = False


ROUTES: dict[str, Route] = {}


def route(
    name: str,
    *,
    spreads: bool,
    spread_only: bool | None = None,
    late: bool = False,
    late_rank: int = 0,
    fast_only: bool = False,
    bound: RouteBound | None = None,
    one_gpu_only: bool = False,
) -> Callable[[RoutePlan], RoutePlan]:
    """Register a rounding route under ``name`` (registry order is the order tried; late
    routes by ``late_rank`` first, :func:`late_routes`); ``spread_only`` defaults to
    ``spreads``."""

    def deco(fn: RoutePlan) -> RoutePlan:
        if name in ROUTES:
            raise ValueError(f"rounding route {name!r} registered twice")
        doc = (fn.__doc__ or "").strip().splitlines()[0]
        only = spreads if spread_only is None else spread_only
        ROUTES[name] = Route(
            name, fn, spreads, doc, only, late, late_rank, fast_only, bound, one_gpu_only
        )
        return fn

    return deco


def late_routes() -> list[Route]:
    """The late routes in the order they are tried: by ``late_rank``, registry order among
    equal ranks."""
    return sorted((r for r in ROUTES.values() if r.late), key=lambda r: r.late_rank)


def _spread_over(
    job: Job, free_g: list[int], allowed: tuple[int, ...]
) -> tuple[tuple[int, int], ...]:
    """The job's GPUs over the fewest allowed servers (most free GPUs first)."""
    parts, need = most_free_first(free_g, allowed, job.gpus)
    if need:
        raise RoundingError(f"no whole-GPU placement for job {job.id}")
    for s, k in parts:
        free_g[s] -= k
    return tuple(sorted(parts))


@route("balanced", spreads=False)
def balanced(ctx: RoundContext) -> GpuPlan:
    """Largest jobs first, each on the allowed server whose cores/memory load stays lowest.

    A server's load is the larger of its core and memory fractions in use at the jobs'
    super-machine points.  Decreasing GPU order keeps whole servers for big jobs (with
    power-of-two demands the free GPU counts stay multiples of the next job's size); a job
    spreads only when no server has its GPUs.
    """
    if "balanced" not in ctx.memo:  # balanced-bridges starts from it too
        ctx.memo["balanced"] = balanced_from(ctx, {})
    return ctx.memo["balanced"]


def balanced_from(ctx: RoundContext, kept: GpuPlan) -> GpuPlan:
    """:func:`balanced` for the jobs not in ``kept``, around ``kept``'s GPUs (whose cores
    and memory count at their super-machine points): how a warm start places new jobs."""
    servers = ctx.inst.cluster.servers
    free_g = [s.gpus for s in servers]
    # Plain lists and per-demand loads, not numpy per job: numpy's per-call cost dominated
    # (single-GPU rounds: 1.1 -> 0.2 ms at 128 GPUs, 5.6 -> 1.2 ms at 512).  The same
    # float64 arithmetic and ties to the lowest server index (argmin's): the same plans.
    cap_c = [float(max(s.cpus, 1)) for s in servers]
    cap_m = [float(max(s.mem_gb, 1e-9)) for s in servers]
    used_c = [0.0] * len(servers)
    used_m = [0.0] * len(servers)
    for jid, parts in kept.items():
        c, m, _ = ctx.points[jid]
        g = sum(k for _, k in parts)
        for s, k in parts:
            free_g[s] -= k
            used_c[s] += c * k / g
            used_m[s] += m * k / g
    prio = {j.id: k for k, j in enumerate(ctx.inst.jobs)}
    # Once, not twice per job in the sort key (numpy's pairwise mean, as before).
    mean_c, mean_m = float(np.mean(cap_c)), float(np.mean(cap_m))
    items = sorted(
        ((dc, job) for dc in ctx.demands for job in dc.jobs if job.id not in kept),
        key=lambda t: (
            -t[0].gpus,
            -(t[0].cpus / mean_c + t[0].mem_gb / mean_m),
            prio[t[1].id],
        ),
    )
    plan: dict[str, tuple[tuple[int, int], ...]] = dict(kept)
    # (load, server) of the servers that hold the demand's GPUs, as a heap: its top is the
    # lowest load at the lowest index among equal loads (argmin's choice), and placing a
    # job changes only the server it took, so that one entry is replaced (a scan of every
    # server per job was most of this route's time at 512 GPUs).
    heap: list[tuple[float, int]] = []
    same: tuple[object, ...] | None = None  # the demand the heap was built for
    for dc, job in items:
        c, m, g = dc.cpus, dc.mem_gb, dc.gpus
        if (c, m, g, dc.allowed) != same:  # consecutive jobs mostly share one demand
            same = (c, m, g, dc.allowed)
            heap = [
                (max((used_c[s] + c) / cap_c[s], (used_m[s] + m) / cap_m[s]), s)
                for s in dc.allowed
                if free_g[s] >= g
            ]
            heapq.heapify(heap)
        if heap:
            s = heapq.heappop(heap)[1]
            plan[job.id] = ((s, g),)
            free_g[s] -= g
            used_c[s] += c
            used_m[s] += m
            # Only server s changed: its load for the next job of the same demand.
            if free_g[s] >= g:
                load = max((used_c[s] + c) / cap_c[s], (used_m[s] + m) / cap_m[s])
                heapq.heappush(heap, (load, s))
            continue
        parts = _spread_over(job, free_g, dc.allowed)
        for s, k in parts:
            used_c[s] += c * k / g
            used_m[s] += m * k / g
        plan[job.id] = parts
        same = None
    return plan


def _class_allowed(ctx: RoundContext) -> list[tuple[int, ...]]:
    """Per job class, the servers its jobs may use."""
    servers = ctx.inst.cluster.servers
    return [
        tuple(s for s, srv in enumerate(servers) if cl.members[0].may_use(srv))
        for cl in ctx.classes
    ]


def _class_size(ctx: RoundContext, allowed: Sequence[tuple[int, ...]]) -> int:
    return sum(len(cl.points) * len(a) for cl, a in zip(ctx.classes, allowed, strict=True))


def whole_job_bound(ctx: RoundContext) -> float | None:
    """A bound on every plan of whole jobs at the super-machine's points, or ``None``.

    Where the super-machine put a job at a point no server it may use holds whole, no such
    plan deploys the points at all (``-inf``).  Otherwise the server-class model's LP
    relaxation: where the points deploy on a plan of whole jobs, the jobs per server at
    their points are a solution of that model (each point one of its class's, on a server
    the job may use, within the server's GPUs, cores and memory), so the plan is worth at
    most its LP optimum.  ``None`` where a spread job's point is not one of its class's
    whole points, and beyond the route's size limit (the route declines there at once).
    Simulated multi-GPU 128-GPU rounds where ``balanced``'s plan missed: the LP (1-2 ms)
    was 1-4 % below the optimum, or a 4-GPU job sat at 48 cores where servers have 24,
    while the MIP took 100-260 ms to find a plan that could not deploy the points."""
    servers = ctx.inst.cluster.servers
    jobs = {j.id: j for j in ctx.runnable}
    for jid in sorted(ctx.spread_ids):
        c, m, _ = ctx.points[jid]
        job = jobs[jid]
        if not any(
            job.may_use(srv)
            and srv.gpus >= job.gpus
            and c <= srv.cpus
            and m <= srv.mem_gb + MEM_EPS_GB
            for srv in servers
        ):
            return -math.inf
    allowed = _class_allowed(ctx)
    if _class_size(ctx, allowed) > CLASS_MIP_MAX_COLUMNS:
        return None
    whole = {j.id: {(c, m) for c, m, _ in cl.points} for cl in ctx.classes for j in cl.members}
    if any((ctx.points[jid][0], ctx.points[jid][1]) not in whole[jid] for jid in ctx.spread_ids):
        return None
    mm = build_server_classes(ctx.inst, ctx.classes, allowed).matrix
    res = solve_matrix(
        dataclasses.replace(mm, integer=np.zeros_like(mm.integer)),
        ctx.options.solver,
        time_limit=ctx.clock.left(),
        threads=ctx.options.threads,
    )
    if res.status is not TerminationStatus.OPTIMAL or res.dual_bound is None:
        return None
    return res.dual_bound


@route("server-class-mip", spreads=False, bound=whole_job_bound)
def server_class_mip(ctx: RoundContext) -> GpuPlan:
    """Servers from the server-class MIP (small rounds only; a node limit keeps it bounded).

    The node limit, not a time limit, ends the search, so the answer is the same on every
    run (a time limit is only passed when the caller set one).
    """
    allowed = _class_allowed(ctx)
    size = _class_size(ctx, allowed)
    if size > CLASS_MIP_MAX_COLUMNS:
        raise RoundingError(f"skipped: {size} columns > {CLASS_MIP_MAX_COLUMNS}")
    from synergy_opt.mechanisms.opt.search import round_target  # the search imports this module

    sc = build_server_classes(ctx.inst, ctx.classes, allowed)
    stop = CLASS_MIP_STOP_BELOW_TARGET and not spreads_at_penalty(ctx)
    res = ctx.solve(
        sc.matrix,
        rel_gap=1e-4,
        node_limit=CLASS_MIP_NODES,
        time_share=CLASS_MIP_TIME_SHARE,
        stop_past=round_target(ctx) if stop else None,
    )
    if res.x is None:
        raise RoundingError(f"server-class MIP ended {res.status} ({res.solver})")
    pending = [iter(cl.members) for cl in ctx.classes]
    plan: dict[str, tuple[tuple[int, int], ...]] = {}
    for (k, _, s), v in zip(sc.columns, res.x, strict=True):
        for _ in range(int(round(float(v)))):
            job = next(pending[k])
            plan[job.id] = ((s, job.gpus),)
    return plan


@route("balanced-bridges", spreads=True, fast_only=True)
def balanced_bridges(ctx: RoundContext) -> GpuPlan:
    """``balanced``'s plan with a few jobs spread to carry cores and memory (:mod:`.bridges`).

    Where a round uses nearly every core, no plan of whole jobs deploys the super-machine's
    points; the placement LP's vertex spreads up to 3s jobs to carry load between servers.
    This spreads only what ``balanced``'s plan needs (multi-GPU mix, 128 GPUs, seeds 0-39:
    the points deploy on 38 of 40, after the swap repair, with 5.7 spread jobs on average
    where the placement LP's plan has about 10; 35 and 6.6 before the relays of
    2026-12-08), without a solver.  Its plan is used only where the points deploy on it.
    """
    return bridged(ctx, balanced(ctx))


@route("balanced-bridges-spreading", spreads=True, fast_only=True)
def balanced_bridges_spreading(ctx: RoundContext) -> GpuPlan:
    """``balanced-bridges`` with only the moves that spread a new job (its pass before
    2026-12-08), tried where the route's plan does not deploy.

    Both passes are greedy and get stuck in different places: with the moves that spread
    no new job the plan deploys on more rounds (multi-GPU mix 128 GPUs seeds 0-99: 95 of
    100 against 78, with the swap repair), but not on every round the plain pass's plan
    does (mixed shapes 64 GPUs seed 27, where the search then took 5 s instead of 17 ms).
    """
    return bridged(ctx, balanced(ctx), zero_spread=False)


@route("placement-lp", spreads=True)
def placement_lp(ctx: RoundContext) -> GpuPlan:
    """The paper's route: the placement LP's vertex, its split jobs spread on whole GPUs.

    Whole jobs go where the vertex (pl0)-(pl4) put them.  The vertex splits at most 3s
    jobs; those that may spread (split penalty 1, or too big for any server) keep their
    span, up to the fragmentation cap, and a min-cost flow rounds their GPU fractions to
    whole GPUs (one GPU first on every server of the span, so the cores and memory the LP
    drew there stay reachable).  The other split jobs go whole to the best-fitting server
    of their span.
    """
    if "placement-lp" not in ctx.memo:
        ctx.memo["placement-lp"] = _placement_lp(ctx)
    return ctx.memo["placement-lp"]


def _placement_lp(ctx: RoundContext) -> GpuPlan:
    inst = ctx.inst
    servers = inst.cluster.servers
    pm = build_placement_fast(inst, ctx.demands)
    res = ctx.solve(pm.matrix, vertex=True, highs_options=PLACEMENT_LP_OPTIONS)
    if res.x is None:
        raise RoundingError(f"placement LP ended {res.status} ({res.solver})")
    on = vertex_entries(pm.columns, res.x, len(ctx.demands))
    free_g = [s.gpus for s in servers]
    plan: dict[str, tuple[tuple[int, int], ...]] = {}
    pieces: list[tuple[Job, tuple[int, ...], dict[int, float]]] = []
    for d, dc in enumerate(ctx.demands):
        members = list(dc.jobs)
        fracs: list[list[float]] = []
        for s, v in on[d]:
            whole = min(int(math.floor(v + FRACTION_EPS)), len(members), free_g[s] // dc.gpus)
            for job in members[:whole]:
                plan[job.id] = ((s, dc.gpus),)
                free_g[s] -= dc.gpus
            members = members[whole:]
            if v - whole > FRACTION_EPS:
                fracs.append([float(s), v - whole])
        for job in members:  # each left job takes fractions summing to 1, in server order
            got: dict[int, float]
            need, got = 1.0, {}
            while need > FRACTION_EPS and fracs:
                s, f = int(fracs[0][0]), fracs[0][1]
                take = min(f, need)
                got[s] = got.get(s, 0.0) + take
                need -= take
                fracs[0][1] -= take
                if fracs[0][1] <= FRACTION_EPS:
                    fracs.pop(0)
            pieces.append((job, dc.allowed, got))

    budget = ctx.max_fragmented - sum(1 for p in plan.values() if len(p) > 1)
    spreading: list[tuple[Job, tuple[int, ...], dict[int, float]]] = []
    whole_jobs: list[tuple[Job, tuple[int, ...], dict[int, float]]] = []
    for job, allowed, got in pieces:
        if ctx.must_spread(job) or (ctx.may_spread(job) and len(got) > 1 and budget > 0):
            spreading.append((job, allowed, got))
            budget -= 0 if ctx.must_spread(job) else 1
        else:
            whole_jobs.append((job, allowed, got))
    prio = {j.id: k for k, j in enumerate(inst.jobs)}
    for job, allowed, got in sorted(whole_jobs, key=lambda t: (-t[0].gpus, prio[t[0].id])):
        fits = [s for s in allowed if free_g[s] >= job.gpus]
        if fits:
            s = min(fits, key=lambda s: (-got.get(s, 0.0), free_g[s], s))
            plan[job.id] = ((s, job.gpus),)
            free_g[s] -= job.gpus
        elif ctx.may_spread(job):
            spreading.append((job, allowed, got))
        else:
            raise RoundingError(f"no server has {job.gpus} free GPUs for job {job.id}")
    plan.update(_round_spans(spreading, free_g))
    return plan


def vertex_entries(
    columns: Sequence[tuple[int, int]], x: np.ndarray, n_demands: int
) -> list[list[tuple[int, float]]]:
    """Per demand, the (server, value) of the placement LP's entries above
    :data:`FRACTION_EPS`, in column order (the demand's allowed servers in order).

    Only these place anything: an entry at or below it puts no whole job and no fraction on
    its server, and reading all demands x servers entries one by one cost about 2 ms of a
    512-GPU round."""
    pos = np.flatnonzero(x > FRACTION_EPS)
    on: list[list[tuple[int, float]]] = [[] for _ in range(n_demands)]
    for i, v in zip(pos.tolist(), x[pos].tolist(), strict=True):
        d, s = columns[i]
        on[d].append((s, v))
    return on


def _round_spans(
    spreading: list[tuple[Job, tuple[int, ...], dict[int, float]]], free_g: list[int]
) -> dict[str, tuple[tuple[int, int], ...]]:
    """Whole GPUs for split jobs by a min-cost flow near the LP's fractions.

    Per job and server of its span: a first GPU (cost -2, keeps the span), then up to the
    rounded-up fraction (cost 0); any other allowed server costs 1 per GPU.  The LP's own
    fractions are a feasible flow, so a whole one exists whenever the GPUs add up.
    """
    if not spreading:
        return {}
    quick = _round_spans_greedy(spreading, free_g)
    if quick is not None:
        return quick
    g = nx.DiGraph()
    total = 0
    for job, allowed, got in spreading:
        j = ("j", job.id)
        g.add_edge("src", j, capacity=job.gpus, weight=0)
        total += job.gpus
        for s in allowed:
            f = got.get(s, 0.0)
            if f > FRACTION_EPS:
                u = ("u", job.id, s)
                g.add_edge(j, u, capacity=1, weight=-2)
                g.add_edge(u, ("s", s), capacity=1, weight=0)
                rest = max(int(math.ceil(f * job.gpus - FRACTION_EPS)) - 1, 0)
                if rest:
                    g.add_edge(j, ("s", s), capacity=rest, weight=0)
            else:
                g.add_edge(j, ("s", s), capacity=job.gpus, weight=1)
    for s, free in enumerate(free_g):
        if g.has_node(("s", s)):
            g.add_edge(("s", s), "dst", capacity=free, weight=0)
    flow = nx.max_flow_min_cost(g, "src", "dst")
    if sum(flow["src"].values()) < total:
        raise RoundingError("split jobs' GPUs do not fit the GPUs the whole jobs left")
    out: dict[str, tuple[tuple[int, int], ...]] = {}
    for job, _, _ in spreading:
        per: dict[int, int] = {}
        for node, v in flow[("j", job.id)].items():
            if v <= 0:
                continue
            s = node[2] if node[0] == "u" else node[1]
            per[s] = per.get(s, 0) + int(v)
        for s, k in per.items():
            free_g[s] -= k
        out[job.id] = tuple(sorted(per.items()))
    return out


def _round_spans_greedy(
    spreading: list[tuple[Job, tuple[int, ...], dict[int, float]]], free_g: list[int]
) -> dict[str, tuple[tuple[int, int], ...]] | None:
    """The same rounding greedily (``None`` if it strands GPUs; the flow then decides).

    First one GPU on every server of each span (largest fraction first), then up to the
    rounded-up fraction, then any allowed server with free GPUs (most free first).  This
    answers almost every round without building a flow network (networkx's min-cost flow
    took 0.4 s of a 512-GPU round).
    """
    free = list(free_g)
    per_job: list[dict[int, int]] = []
    for job, _, got in spreading:
        per: dict[int, int] = {}
        for s, _f in sorted(got.items(), key=lambda t: (-t[1], t[0])):
            if len(per) < job.gpus and free[s] > 0:
                per[s] = 1
                free[s] -= 1
        per_job.append(per)
    for (job, allowed, got), per in zip(spreading, per_job, strict=True):
        need = job.gpus - sum(per.values())
        for s, f in sorted(got.items(), key=lambda t: (-t[1], t[0])):
            room = max(int(math.ceil(f * job.gpus - FRACTION_EPS)) - per.get(s, 0), 0)
            k = min(need, room, free[s])
            if k > 0:
                per[s] = per.get(s, 0) + k
                free[s] -= k
                need -= k
        spread, need = most_free_first(free, allowed, need)
        for s, k in spread:
            per[s] = per.get(s, 0) + k
            free[s] -= k
        if need:
            return None
    free_g[:] = free
    return {
        job.id: tuple(sorted(per.items()))
        for (job, _, _), per in zip(spreading, per_job, strict=True)
    }


@route("hungry-spread", spreads=True)
def hungry_spread(ctx: RoundContext) -> GpuPlan:
    """Resource-hungry jobs first; a job no server can feed spreads over servers that can.

    Jobs that cannot spread go first (they have no way round a short server), then those
    that may, each group by decreasing cores-or-memory per GPU relative to the cluster's.
    A job takes the least-loaded server that holds it whole (GPUs, cores
    and memory at its super-machine point); if none does and it may spread, it takes one
    GPU on each of the richest servers (most spare cores and memory) until their spare
    resources cover its point, then the rest of its GPUs on those servers.  Frugal jobs
    fill the GPUs left.  This is the transportation view of :mod:`.transport` used
    forwards: a spread job is fed from every server of its span.
    """
    inst = ctx.inst
    servers = inst.cluster.servers
    cl = inst.cluster
    per_c = cl.total_cpus / max(cl.total_gpus, 1)
    per_m = cl.total_mem_gb / max(cl.total_gpus, 1)
    free_g = [s.gpus for s in servers]
    free_c = [float(s.cpus) for s in servers]
    free_m = [s.mem_gb for s in servers]
    prio = {j.id: k for k, j in enumerate(inst.jobs)}
    items = sorted(
        ((job, dc) for dc in ctx.demands for job in dc.jobs),
        key=lambda t: (
            ctx.may_spread(t[0]),
            -max(t[1].cpus / t[1].gpus / per_c, t[1].mem_gb / t[1].gpus / per_m),
            -t[1].gpus,
            prio[t[0].id],
        ),
    )
    budget = ctx.max_fragmented
    plan: dict[str, tuple[tuple[int, int], ...]] = {}

    def load(s: int, c: float, m: float) -> float:
        return max(
            (servers[s].cpus - free_c[s] + c) / max(servers[s].cpus, 1),
            (servers[s].mem_gb - free_m[s] + m) / max(servers[s].mem_gb, 1e-9),
        )

    for job, dc in items:
        g, c, m = dc.gpus, float(dc.cpus), dc.mem_gb
        whole = [
            s
            for s in dc.allowed
            if free_g[s] >= g and free_c[s] >= c - 1e-9 and free_m[s] >= m - 1e-9
        ]
        spread_ok = ctx.must_spread(job) or (ctx.may_spread(job) and budget > 0)
        if whole and not ctx.must_spread(job):
            s = min(whole, key=lambda s: (load(s, c, m), s))
            parts = [(s, g)]
        elif spread_ok:
            rich = sorted(
                (s for s in dc.allowed if free_g[s] > 0),
                key=lambda s: (
                    -(
                        free_c[s] / max(servers[s].cpus, 1)
                        + free_m[s] / max(servers[s].mem_gb, 1e-9)
                    ),
                    s,
                ),
            )
            span: list[int] = []
            need_c, need_m = c, m
            for s in rich:
                if len(span) == g or (need_c <= 1e-9 and need_m <= 1e-9 and len(span) >= 1):
                    break
                span.append(s)
                need_c -= min(need_c, max(free_c[s], 0.0))
                need_m -= min(need_m, max(free_m[s], 0.0))
            gpus = {s: 1 for s in span}
            left = g - len(span)
            for s in sorted(span, key=lambda s: (-free_g[s], s)):
                k = min(left, free_g[s] - 1)
                gpus[s] += k
                left -= k
            rest, left = most_free_first(free_g, set(rich) - set(span), left)
            gpus.update(rest)
            if left:
                raise RoundingError(f"no whole-GPU placement for job {job.id}")
            parts = sorted(gpus.items())
            if len(parts) > 1 and not ctx.must_spread(job):
                budget -= 1
        else:
            fits = [s for s in dc.allowed if free_g[s] >= g]
            if not fits:
                raise RoundingError(f"no server has {g} free GPUs for job {job.id}")
            s = min(fits, key=lambda s: (load(s, c, m), s))
            parts = [(s, g)]
        # Cores and memory drawn from the span, richest server first.
        need_c, need_m = c, m
        for s, k in parts:
            free_g[s] -= k
        for s, _ in sorted(parts, key=lambda p: (-free_c[p[0]], p[0])):
            take = min(need_c, free_c[s]) if len(parts) > 1 else need_c
            free_c[s] -= take
            need_c -= take
        for s, _ in sorted(parts, key=lambda p: (-free_m[p[0]], p[0])):
            take = min(need_m, free_m[s]) if len(parts) > 1 else need_m
            free_m[s] -= take
            need_m -= take
        if need_c > 0 or need_m > 0:  # over-committed: the re-optimisation lowers points
            free_c[parts[0][0]] -= need_c
            free_m[parts[0][0]] -= need_m
        plan[job.id] = tuple(parts)
    return plan


@route("lp-ring", spreads=True)
def lp_ring(ctx: RoundContext) -> GpuPlan:
    """The placement LP's plan with ring bridges added between neighbouring servers."""
    return _add_ring(ctx, placement_lp(ctx))


def _add_ring(ctx: RoundContext, plan: GpuPlan) -> GpuPlan:
    """``plan`` with bridges: neighbouring servers trade one GPU of two spreadable jobs.

    Around a ring of servers, a job that may spread on server s and one on server s+1 trade
    one GPU each, so both span {s, s+1}: GPU counts stay whole and unchanged, while cores
    and memory can now flow between neighbours, closer to the pooled super-machine.  The
    jobs with the most cores per GPU bridge (they move the most).
    """
    servers = ctx.inst.cluster.servers
    base = {jid: list(parts) for jid, parts in plan.items()}
    jobs = {j.id: j for j in ctx.runnable}
    pts = ctx.points
    on: list[list[str]] = [[] for _ in servers]
    for jid, parts in base.items():
        if len(parts) == 1 and ctx.may_spread(jobs[jid]):
            on[parts[0][0]].append(jid)
    for lst in on:
        lst.sort(key=lambda jid: (-pts[jid][0] / jobs[jid].gpus, jid))
    budget = ctx.max_fragmented - sum(1 for p in base.values() if len(p) > 1)
    used: set[str] = set()
    n_s = len(servers)
    for s in range(n_s if n_s > 2 else n_s - 1):
        t = (s + 1) % n_s
        if budget < 2:
            break
        a = next((j for j in on[s] if j not in used and jobs[j].may_use(servers[t])), None)
        b = next((j for j in on[t] if j not in used and jobs[j].may_use(servers[s])), None)
        if a is None or b is None:
            continue
        ga, gb = jobs[a].gpus, jobs[b].gpus
        base[a] = [(s, ga - 1), (t, 1)]
        base[b] = [(s, 1), (t, gb - 1)]
        used.update((a, b))
        budget -= 2
    return {jid: tuple(sorted(parts)) for jid, parts in base.items()}


@route("tune", spreads=False)
def tune_placement(ctx: RoundContext) -> GpuPlan:
    """GPUs per server exactly as TUNE placed them (so OPT's points can only improve them)."""
    index = {s.name: i for i, s in enumerate(ctx.inst.cluster.servers)}
    if not ctx.tune.jobs:
        raise RoundingError("tune scheduled no job")
    return {ja.id: tuple((index[p.server], p.gpus) for p in ja.placement) for ja in ctx.tune.jobs}
