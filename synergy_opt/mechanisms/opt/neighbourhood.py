"""Large-neighbourhood improvement: re-decide placement and points on a few servers exactly.

The routes fix where GPUs go and only then choose points, so they miss allocations that
spread a job *because* it gains more cores than its split penalty costs, or that move a
whole-server job to make room for one that must be fed from several servers.  This step
frees every job that lies wholly on a small set T of servers (all servers on small
rounds), keeps every other job where it is with its points, and solves the joint problem on
T as a MIP (the counting idea of the exact model, restricted to T):

    max  sum W_q z[k,q,s] + sum p_j W_q y[j,q]
    cover[k]       sum_{q,s} z[k,q,s] + sum_{j in slots(k)} sum_q y[j,q] = n_k(T)
    slot_gpu[j]    sum_s a[j,s] = g_j sum_q y[j,q]                  (whole GPUs of a spread job)
    link[j,s]      u[j,s] <= a[j,s] <= (g_j - 1) u[j,s]
    span[j]        sum_s u[j,s] >= 2 sum_q y[j,q]                   (a spread slot spans >= 2)
    flow_cpu[j]    sum_s f[j,s] = sum_q c_q y[j,q],  f[j,s] <= C_s u[j,s]   (memory alike)
    gpu[s], eq2[s], eq3[s]   per-server GPUs, cores, memory left by the fixed jobs

z counts whole jobs of class k at point q on s; a spread slot j (a few per class of jobs of
>= 2 GPUs) picks a point y credited W times its split penalty, among points that keep the
checker's floor after the penalty, and draws cores and memory from the servers it uses.  A
node limit keeps it bounded and deterministic; a neighbourhood is accepted only if the whole
round's total rises.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from synergy_opt.check import forced_split_factor
from synergy_opt.formulations.fast import class_key, useful_points
from synergy_opt.matrix import matrix_model
from synergy_opt.mechanisms.opt.context import (
    GpuPlan,
    Point,
    RoundContext,
    placed_matrix,
    whole_share_floor,
)
from synergy_opt.mechanisms.opt.transport import deploy
from synergy_opt.types import Job, PlacementPart, ThroughputMatrix

log = logging.getLogger(__name__)

#: Rounds with at most this many servers are improved as one neighbourhood (all servers).
LNS_WHOLE_ROUND_SERVERS: int = 4
#: Servers per neighbourhood on larger rounds, one neighbourhood of each size per try.
#: Three were too few on 128-GPU split-penalty rounds: a penalised job worth spreading
#: needs the servers that lose most and those with cores and memory to spare at once; no
#: one size served every round (best incumbent of the exact model in 30 s: split-penalty
#: seed 1003 0.992 with 6, 0.984 with 8; seed 3 0.993 with 6, 0.999 with 8; multi-gpu 64
#: GPUs seed 1131 0.987 with 6, the optimum with 8).
LNS_SERVERS: tuple[int, ...] = (6, 8)
#: Servers per neighbourhood built around one job far below its super-machine point.
LNS_JOB_SERVERS: int = 8
#: Such job-centred neighbourhoods per round (split-penalty rounds at 128 GPUs needed 6:
#: the job that gains from spreading is often not among the first three short ones).
LNS_JOB_TRIES: int = 6
#: Server-pair neighbourhoods tried per round on larger rounds (each one sub-MIP).
LNS_TRIES: int = 6
#: Neighbourhood MIPs above this many columns lose servers until they fit (measured: 300-500
#: columns solve in 0.1-1.5 s, 700 columns of mixed server shapes took 8 s).  At 600 the
#: 8-server neighbourhoods of split-penalty rounds lost the servers a spread job must draw
#: from (64 GPUs, seed 4: 0.994 of the optimum; 1500 with 1000 nodes: the optimum, in the
#: same time, as the node limit bounds each MIP).
LNS_MAX_COLUMNS: int = 1500
#: Passes over freshly chosen neighbourhoods while a pass still gains.
LNS_PASSES: int = 3
#: Stop after this many neighbourhoods in a row that do not improve the round.
LNS_PATIENCE: int = 6
#: Once the round is within this fraction of the split-aware super-machine's optimum (a
#: bound on rounds without per-type matrices, so within issue 10's 1 % of the optimum
#: there), the search is cheaper: :data:`LNS_NEAR_PATIENCE` misses in a row end it, and
#: every neighbourhood MIP starts from the current answer (which also prunes every branch
#: that cannot beat it).  Measured on 32 cold 128-GPU rounds of four families: the same
#: totals but one (0.02 % lower), single-GPU 1.38 -> 0.26 s, multi-GPU 2.52 -> 1.52 s CPU.
LNS_NEAR_GAP: float = 1e-2
LNS_NEAR_PATIENCE: int = 2
LNS_NEAR_START: bool = True
#: Spread slots per job class in a neighbourhood (jobs of a class are interchangeable).
LNS_SLOTS_PER_CLASS: int = 2
#: Branch-and-bound nodes per neighbourhood: a deterministic stop.
LNS_NODES: int = 1000
#: Relative MIP gap of a neighbourhood, in thousandths (the MIP stops once its incumbent
#: is this close to its bound: the last fraction of a neighbourhood's gain is not worth
#: seconds of branching).
LNS_REL_GAP: int = 1
#: HiGHS options of the neighbourhood MIPs.  Their root bound is usually tight at once and
#: the time goes into separating cuts until the incumbent is found (a 200-column 6-server
#: MIP of the 512-GPU multi-GPU round seed 1: 2972 cuts, 0.8 s); a small cut pool cuts that.
#: Measured on the 36 cold rounds of table 3 (single- and multi-GPU, 128 and 512 GPUs,
#: seeds 0-8, fresh ``opt`` each, interleaved): 7.2 s CPU with HiGHS's defaults, 6.4 s
#: with the pool, the same totals but one (multi-GPU 128 GPUs, higher); on split-penalty
#: 128-GPU seeds 1-3, whose neighbourhoods run into the node limit, 31.3 -> 21.8 s and
#: totals 0.9833/0.9715/0.9800 -> 0.9931/0.9726/0.9886 of the bound.  Turning RINS/RENS
#: off as well saved another 0.3 s on the 36 rounds but lost 0.4 % there (0.9679 on seed 2).
LNS_HIGHS_OPTIONS: Mapping[str, bool | int | float | str] = MappingProxyType(
    {"mip_pool_soft_limit": 100}
)
#: Minimal relative gain for accepting a neighbourhood's answer.
LNS_MIN_GAIN: float = 1e-7
#: Under a time limit, the share of what is left that one neighbourhood MIP may use.  The
#: node limit bounds each, but on mixed server shapes a node-limited MIP can still take
#: seconds (6.7 s on a 96-GPU round): with the whole rest one such MIP took the time of the
#: neighbourhoods after it.  Mixed shapes 96 GPUs at a 20-s limit, seeds 1006 and 1046:
#: 90.08 and 88.49 (0.989 and 0.982 of the optima 91.07 and 90.09, proven at 150 s) ->
#: 90.97 and 89.59 (0.999, 0.994); 0.1 and 0.5 gained less.  Without a limit nothing
#: changes (node limits alone).
LNS_TIME_SHARE: float = 0.25


@dataclass(frozen=True, slots=True)
class State:
    """A deployable answer: GPUs per job, each job's point, and the round's total."""

    plan: GpuPlan
    points: dict[str, Point]
    total: float
    #: Its placement parts when already deployed (saves the final max-flow), else ``None``.
    parts: dict[str, list[PlacementPart]] | None = field(default=None, compare=False)


def total_of(ctx: RoundContext, plan: GpuPlan, points: dict[str, Point]) -> float:
    """Realised total: W at each point, times the split penalty of spread jobs."""
    jobs = {j.id: j for j in ctx.runnable}
    return sum(
        pt[2] * (jobs[jid].split_penalty if len(plan[jid]) > 1 else 1.0)
        for jid, pt in points.items()
    )


def server_loads(ctx: RoundContext, state: State) -> tuple[list[float], list[float], list[int]]:
    """Per server: cores and memory in use at ``state``'s points (a spread job's split by
    its GPUs) and free GPUs; the moves and the neighbourhoods rank servers by these."""
    servers = ctx.inst.cluster.servers
    used_c = [0.0] * len(servers)
    used_m = [0.0] * len(servers)
    free = [srv.gpus for srv in servers]
    for jid, parts in state.plan.items():
        g = sum(k for _, k in parts)
        c, m, _ = state.points[jid]
        for s, k in parts:
            used_c[s] += c * k / g
            used_m[s] += m * k / g
            free[s] -= k
    return used_c, used_m, free


def improve(
    ctx: RoundContext,
    state: State,
    target: float,
    interrupt: Callable[[State], bool] | None = None,
) -> State:
    """Improve ``state`` by exact re-decisions on server neighbourhoods (see module doc),
    stopping once its total reaches ``target``, or before the next neighbourhood once
    ``interrupt(state)`` says so (the caller has a better start than ``state`` waiting)."""
    n_s = len(ctx.inst.cluster.servers)
    near = state.total >= ctx.optimum * (1 - LNS_NEAR_GAP)
    patience = LNS_NEAR_PATIENCE if near else LNS_PATIENCE
    tried: set[tuple[tuple[int, ...], float]] = set()
    passes = 1 if n_s <= LNS_WHOLE_ROUND_SERVERS else LNS_PASSES  # whole round: one MIP
    for _ in range(passes):
        start = state.total
        if n_s <= LNS_WHOLE_ROUND_SERVERS:
            hoods: list[tuple[int, ...]] = [tuple(range(n_s))]
        else:
            hoods = _neighbourhoods(ctx, state)
        misses = 0
        for hood in hoods:
            if interrupt is not None and interrupt(state):
                return state
            key = (tuple(sorted(hood)), round(state.total, 9))
            if key in tried:
                continue  # same servers, same answer so far: the sub-MIP would repeat
            tried.add(key)
            better = _solve_hood(ctx, state, hood, start=near and LNS_NEAR_START)
            if better is not None and better.total > state.total * (1 + LNS_MIN_GAIN) + 1e-9:
                log.info(
                    "opt: neighbourhood %s raises %.6g to %.6g", hood, state.total, better.total
                )
                state = better
                misses = 0
                if state.total >= target:
                    break
            else:
                misses += 1
                if misses >= patience:
                    break
        if state.total <= start * (1 + LNS_MIN_GAIN) or state.total >= target:
            break
    return state


def _credit(ctx: RoundContext, job: Job) -> float:
    """The factor the super-machine credits ``job`` with (its penalty if it spreads it)."""
    return job.split_penalty if job.id in ctx.spread_ids else 1.0


def _neighbourhoods(ctx: RoundContext, state: State) -> list[tuple[int, ...]]:
    """Server sets pairing the servers that lose most against the super-machine points
    with those that have the most cores and memory to spare."""
    servers = ctx.inst.cluster.servers
    loss = [0.0] * len(servers)
    for jid, parts in state.plan.items():
        g = sum(k for _, k in parts)
        w = state.points[jid][2]
        for s, k in parts:
            loss[s] += (ctx.points[jid][2] - w) * k / g if jid in ctx.points else 0.0
    used_c, used_m, _ = server_loads(ctx, state)
    spare = [
        (srv.cpus - used_c[s]) / max(srv.cpus, 1) + (srv.mem_gb - used_m[s]) / max(srv.mem_gb, 1e-9)
        for s, srv in enumerate(servers)
    ]
    by_loss = sorted(range(len(servers)), key=lambda s: (-loss[s], s))
    by_spare = sorted(range(len(servers)), key=lambda s: (-spare[s], s))
    hoods: list[tuple[int, ...]] = []
    # First around the jobs that may spread and lie furthest below their super-machine
    # point: their servers and the servers with most to spare, enough to feed a job that
    # needs several servers' cores or memory.
    jobs = {j.id: j for j in ctx.runnable}
    short = sorted(
        (
            (ctx.points[jid][2] * _credit(ctx, jobs[jid]) - pt[2] * _credit(ctx, jobs[jid]), jid)
            for jid, pt in state.points.items()
            if jid in ctx.points and ctx.may_spread(jobs[jid])
        ),
        reverse=True,
    )
    for n, (gap, jid) in enumerate(short[:LNS_JOB_TRIES]):
        if gap <= 1e-9:
            break
        pick = [s for s, _ in state.plan[jid]]
        # Each job's neighbourhood starts further down the spare list, so they differ.
        shift = (n * (LNS_JOB_SERVERS // 2)) % len(servers)
        for s in by_spare[shift:] + by_spare[:shift]:
            if len(pick) >= max(LNS_JOB_SERVERS, len(pick)):
                break
            if s not in pick:
                pick.append(s)
        hood = tuple(pick)
        if sorted(hood) not in [sorted(h) for h in hoods]:
            hoods.append(hood)
    for i in range(LNS_TRIES):
        for size in LNS_SERVERS:
            pick = []
            for s in (by_loss[i % len(servers)], by_spare[i % len(servers)], *by_loss, *by_spare):
                if s not in pick:
                    pick.append(s)
                if len(pick) == size:
                    break
            hood = tuple(pick)
            if sorted(hood) not in [sorted(h) for h in hoods]:
                hoods.append(hood)
    return hoods


def solve_hood(ctx: RoundContext, state: State, hood: Sequence[int]) -> State | None:
    """The exact re-decision of the servers ``hood`` (the jobs wholly inside them freed,
    every other job kept; node-limited), or ``None`` when its sub-MIP finds nothing that
    deploys: the gather move's local repair (:mod:`.gather_move`)."""
    return _solve_hood(ctx, state, hood)


def _solve_hood(  # noqa: C901 - one block per column family, as in the module docstring
    ctx: RoundContext, state: State, hood: Sequence[int], *, start: bool = False
) -> State | None:
    inst = ctx.inst
    servers = inst.cluster.servers
    inside = set(hood)
    jobs = {j.id: j for j in ctx.runnable}
    free = [jid for jid, parts in state.plan.items() if all(s in inside for s, _ in parts)]
    if not free:
        return None
    cap_g = {s: float(servers[s].gpus) for s in hood}
    cap_c = {s: float(servers[s].cpus) for s in hood}
    cap_m = {s: servers[s].mem_gb for s in hood}
    # The whole answer deploys; jobs crossing into T draw from outside T where they can.
    all_parts = deploy(inst, state.plan, state.points, avoid=frozenset(hood), keep=frozenset(free))
    if all_parts is None:  # pragma: no cover - every state is checked to deploy
        return None
    fixed_parts = {jid: p for jid, p in all_parts.items() if jid not in set(free)}
    index = {srv.name: s for s, srv in enumerate(servers)}
    for job_parts in fixed_parts.values():
        for p in job_parts:
            s = index[p.server]
            if s in inside:
                cap_g[s] -= p.gpus
                cap_c[s] -= p.cpus
                cap_m[s] -= p.mem_gb

    classes: dict[object, list[Job]] = {}
    for jid in free:
        classes.setdefault(class_key(jobs[jid]), []).append(jobs[jid])
    prio = {j.id: k for k, j in enumerate(inst.jobs)}
    for members in classes.values():
        members.sort(key=lambda j: prio[j.id])

    lo: list[float] = []
    hi: list[float] = []
    names: list[str] = []

    def row(name: str, a: float, b: float) -> int:
        lo.append(a)
        hi.append(b)
        names.append(name)
        return len(names) - 1

    inf = float("inf")
    r_g = {s: row(f"gpu[{servers[s].name}]", -inf, max(cap_g[s], 0.0)) for s in hood}
    r_c = {s: row(f"eq2[{servers[s].name}]", -inf, max(cap_c[s], 0.0)) for s in hood}
    r_m = {s: row(f"eq3[{servers[s].name}]", -inf, max(cap_m[s], 0.0)) for s in hood}
    cols: list[list[tuple[int, float]]] = []
    cost: list[float] = []
    upper: list[float] = []
    integer: list[bool] = []
    owner: list[tuple[str, int, tuple[int, Any]]] = []  # (kind, class, (slot/server, point/server))

    def col(
        entries: list[tuple[int, float]], c: float, ub: float, integral: bool, who: tuple
    ) -> None:
        cols.append(entries)
        cost.append(c)
        upper.append(ub)
        integer.append(integral)
        owner.append(who)

    spread_fixed = sum(
        1
        for jid, parts in state.plan.items()
        if jid not in set(free) and len(parts) > 1 and not ctx.must_spread(jobs[jid])
    )
    r_frag = row("max_fragmented", -inf, float(max(ctx.max_fragmented - spread_fixed, 0)))
    class_list = list(classes.values())
    for k, members in enumerate(class_list):
        first = members[0]
        g = first.gpus
        fair = inst.fair_share_throughput(first)
        r_k = row(f"cover[{first.id}]", float(len(members)), float(len(members)))
        allowed = [s for s in hood if first.may_use(servers[s])]
        if not ctx.must_spread(first):
            # Under the per-server share rule a whole job's floor is its own server's share
            # (the checker's), not the smallest over servers that ``fair`` pools: a point
            # below that floor on server s is no column there (mixed shapes, 32 GPUs, seed
            # 1174: a 0.1 point on a rich server failed the check and opt fell back to tune).
            floor = [whole_share_floor(inst, first, s) for s in range(len(servers))]
            # Each server's GPU type's matrix (one group, the reference, on untyped rounds).
            by_matrix: dict[int, tuple[ThroughputMatrix, list[int]]] = {}
            for s in allowed:
                mat = placed_matrix(inst, first, (s,))
                by_matrix.setdefault(id(mat), (mat, []))[1].append(s)
            for mat, group in by_matrix.values():
                for c, m, w in useful_points(mat, fair):
                    for s in group:
                        ub = min(len(members), int(servers[s].gpus // g))
                        if ub < 1 or c > cap_c[s] or m > cap_m[s] + 1e-9:
                            continue
                        if w < floor[s] - 1e-9:
                            continue
                        col(
                            [(r_k, 1.0), (r_g[s], float(g)), (r_c[s], float(c)), (r_m[s], m)],
                            w,
                            float(ub),
                            True,
                            ("z", k, (s, (c, m, w))),
                        )
        if g < 2 or len(allowed) < 2:
            continue
        pen = first.split_penalty
        required = fair * pen if ctx.must_spread(first) else fair
        if inst.per_server_shares:
            # A spread job's floor is W at the sum of its servers' shares, at most W at g
            # GPUs' worth of the richest cores and memory per GPU among the servers it may
            # use here: requiring that keeps every span's check (the pooled ``fair`` is the
            # poorest server's and let a 4-GPU job spread at 0.1 below its floor of 1).
            shares = [inst.server_share(g, servers[s]) for s in allowed]
            rich_c, rich_m = max(c for c, _ in shares), max(m for _, m in shares)
            rich = min(w.lookup(rich_c, rich_m) for w in inst.usable_matrices(first))
            required = max(required, rich * forced_split_factor(inst, first))
        # The slot may span any allowed servers: the lowest of their types' matrices, so
        # what it counts is what it realises wherever it lands.
        pts = useful_points(placed_matrix(inst, first, allowed), required / pen)
        n_slots = len(members) if ctx.must_spread(first) else min(len(members), LNS_SLOTS_PER_CLASS)
        prev_used: int | None = None
        prev_cols: list[int] = []
        for i in range(n_slots):
            tag = f"{first.id}#{i}"
            r_one = row(f"slot_one[{tag}]", -inf, 1.0)
            r_gpu = row(f"slot_gpu[{tag}]", 0.0, 0.0)
            r_span = row(f"span[{tag}]", 0.0, inf)
            r_fc = row(f"flow_cpu[{tag}]", 0.0, 0.0)
            r_fm = row(f"flow_mem[{tag}]", 0.0, 0.0)
            r_order = row(f"order[{tag}]", -inf, 0.0) if prev_used is not None else None
            for c, m, w in pts:
                entries = [
                    (r_k, 1.0),
                    (r_one, 1.0),
                    (r_gpu, -float(g)),
                    (r_span, -2.0),
                    (r_fc, -float(c)),
                    (r_fm, -m),
                ]
                if r_order is not None:
                    entries.append((r_order, 1.0))  # this slot used <= the previous one
                if not ctx.must_spread(first):
                    entries.append((r_frag, 1.0))
                col(entries, w * pen, 1.0, True, ("y", k, (i, (c, m, w))))
            if r_order is not None:  # the previous slot's y columns enter with -1
                for ci in prev_cols:
                    cols[ci].append((r_order, -1.0))
            prev_used = i
            prev_cols = [
                ci for ci, o in enumerate(owner) if o[0] == "y" and o[1] == k and o[2][0] == i
            ]
            for s in allowed:
                r_lo = row(f"link_lo[{tag},{s}]", -inf, 0.0)
                r_hi = row(f"link_hi[{tag},{s}]", -inf, 0.0)
                r_cc = row(f"cpu_cap[{tag},{s}]", -inf, 0.0)
                r_mc = row(f"mem_cap[{tag},{s}]", -inf, 0.0)
                col(
                    [(r_gpu, 1.0), (r_lo, -1.0), (r_hi, 1.0), (r_g[s], 1.0)],
                    0.0,
                    float(min(g - 1, servers[s].gpus)),
                    True,
                    ("a", k, (i, s)),
                )
                col(
                    [
                        (r_lo, 1.0),
                        (r_hi, -float(g - 1)),
                        (r_span, 1.0),
                        (r_cc, -cap_c[s]),
                        (r_mc, -cap_m[s]),
                    ],
                    0.0,
                    1.0,
                    True,
                    ("u", k, (i, s)),
                )
                col(
                    [(r_fc, 1.0), (r_cc, 1.0), (r_c[s], 1.0)],
                    0.0,
                    max(cap_c[s], 0.0),
                    True,
                    ("f", k, (i, s)),
                )
                col(
                    [(r_fm, 1.0), (r_mc, 1.0), (r_m[s], 1.0)],
                    0.0,
                    max(cap_m[s], 0.0),
                    False,
                    ("m", k, (i, s)),
                )
    if len(cols) > LNS_MAX_COLUMNS and len(hood) > min(LNS_SERVERS):
        # Too big to solve quickly (HiGHS's root alone takes seconds on 700 columns):
        # drop the neighbourhood's last server (the one with least to spare) and retry.
        return _solve_hood(ctx, state, hood[:-1], start=start)
    mm = matrix_model(cols, cost, upper, integer, lo, hi, names, maximize=True, name="lns_hood")
    # A start makes the small server-triple neighbourhoods of large rounds cheaper; on the
    # whole of a small round and on job-centred neighbourhoods HiGHS finds more from scratch
    # within the node limit (measured: 32-GPU mixed-shapes seed 7 reaches its optimum 29.27
    # without a start, 28.77 with one; split-penalty 128 seed 1 57.24 against 56.75).
    warm = start or len(hood) <= min(LNS_SERVERS) < len(servers)
    x0 = _start(state, all_parts, class_list, owner, index) if warm else None
    res = ctx.solve(
        mm,
        rel_gap=LNS_REL_GAP / 1000.0,
        node_limit=LNS_NODES,
        time_share=LNS_TIME_SHARE,
        start=x0,
        # Only with spread slots (whose flow rows make the cuts): on pure packings (single-
        # GPU rounds) the small pool cost time (128 GPUs seed 7: 0.27 -> 0.64 s).
        highs_options=LNS_HIGHS_OPTIONS if any(o[0] == "y" for o in owner) else None,
    )
    if res.x is None:
        log.debug("neighbourhood %s: sub-MIP ended %s", hood, res.status)
        return None

    # Per class: (W, point, parts) per placed job, best first, to members in priority order.
    placed: list[list[tuple[float, Point, tuple[tuple[int, int], ...]]]] = [[] for _ in class_list]
    slot_gpus: dict[tuple[int, int], dict[int, int]] = {}
    slot_point: dict[tuple[int, int], Point] = {}
    for (kind, k, data), v in zip(owner, res.x, strict=True):
        n = int(round(float(v)))
        if n <= 0:
            continue
        if kind == "z":
            s, pt = data
            placed[k].extend([(pt[2], pt, ((s, class_list[k][0].gpus),))] * n)
        elif kind == "y":
            i, pt = data
            slot_point[(k, i)] = pt
        elif kind == "a":
            i, s = data
            slot_gpus.setdefault((k, i), {})[s] = n
    for (k, i), pt in slot_point.items():
        parts = tuple(sorted((s, a) for s, a in slot_gpus.get((k, i), {}).items() if a > 0))
        if sum(a for _, a in parts) != class_list[k][0].gpus or len(parts) < 2:
            return None  # pragma: no cover - the rows forbid it
        placed[k].append((pt[2] * class_list[k][0].split_penalty, pt, parts))
    plan = dict(state.plan)
    points = dict(state.points)
    for k, members in enumerate(class_list):
        got = sorted(placed[k], key=lambda t: (-t[0], t[2]))
        if len(got) != len(members):
            return None  # pragma: no cover - cover rows are equalities
        for job, (_, pt, parts) in zip(members, got, strict=True):
            plan[job.id] = parts
            points[job.id] = pt
    if sum(1 for p in plan.values() if len(p) > 1) > ctx.max_fragmented:
        log.debug("neighbourhood %s: over the fragmentation cap", hood)
        return None
    if deploy(inst, plan, points) is None:
        log.debug("neighbourhood %s: answer does not deploy", hood)
        return None
    return State(plan, points, total_of(ctx, plan, points))


def _start(
    state: State,
    parts: dict[str, list[PlacementPart]],
    class_list: Sequence[Sequence[Job]],
    owner: Sequence[tuple[str, int, object]],
    index: dict[str, int],
) -> np.ndarray | None:
    """The current answer as a start vector of the neighbourhood MIP (``None`` if it does
    not fit the columns, e.g. more spread jobs of a class than slots): the MIP then starts
    from an incumbent worth the current total, so its answer is never worse."""
    col_of = {(kind, k, data): c for c, (kind, k, data) in enumerate(owner)}
    x = np.zeros(len(owner))
    for k, members in enumerate(class_list):
        slot = 0
        for job in members:
            pt = state.points[job.id]
            plan = state.plan[job.id]
            if len(plan) == 1:
                c = col_of.get(("z", k, (plan[0][0], pt)))
                if c is None:
                    return None
                x[c] += 1
                continue
            c = col_of.get(("y", k, (slot, pt)))
            if c is None:
                return None
            x[c] = 1
            for p in parts[job.id]:
                s = index[p.server]
                for kind, v in (("a", p.gpus), ("u", 1), ("f", p.cpus), ("m", p.mem_gb)):
                    cc = col_of.get((kind, k, (slot, s)))
                    if cc is None:
                        return None
                    x[cc] = v
            slot += 1
    return x


def placements(ctx: RoundContext, state: State) -> dict[str, list[PlacementPart]] | None:
    """Placement parts of ``state`` (``None`` only on numerical trouble)."""
    if state.parts is not None:
        return state.parts
    return deploy(ctx.inst, state.plan, state.points)
