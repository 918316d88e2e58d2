"""The gather move: a spread penalised job brought whole onto one server.

The super-machine may give a penalised job more cores or memory than one server can give it
*beside other jobs*: on ``family_round("split-penalty", 128, 1163)`` it puts two 4-GPU jobs
at 24 cores, a whole server's, so the ``counting`` route spreads them (and a third 4-GPU
job) one GPU per server at 0.81-0.89 of their throughput, and ``opt`` stopped at 70.0, 0.989
of the proven optimum 70.7623, which keeps all three whole at 20 cores, each beside a 4-GPU
job that needs 4.  The neighbourhood search builds its job-centred neighbourhoods only
around jobs the super-machine spreads (it spread none of these), and its other
neighbourhoods never held a span together with a server that could take the job whole.

For every spread job with a split penalty that fits whole on a server it may use, the move
tries such servers: the job's parts elsewhere leave holes (free GPUs), and the smallest
items on the target (whole jobs, or parts of other spread jobs) move into holes, fewest free
GPUs first, until the job's GPUs fit.  The points are re-optimised for that plan
(:func:`.configure.reoptimise`), then the target and the job's old servers are re-decided
exactly (:func:`.neighbourhood.solve_hood`, node-limited: the items landed by a rule; on
round 1163 this turns 68.86 into 70.11), and the result is kept only if the round's total
rises.  A target is skipped where the job, whole there beside the least cores and memory
per GPU any job takes on the server's other GPUs, could not beat its spread value (an
alexnet job spread at 24 cores cannot gain from 18 cores whole).  At most
:data:`GATHER_TARGETS` targets per job, ranked by the cores and memory the job would find
there, and :data:`GATHER_TRIES` tries per call; a try already made in the round (the search
runs from several starts) is not repeated.  Node limits, no time limits: the same answer
on any machine.  It runs last in each search (after the spread move and the neighbourhood
search), so the search's answer from every start is never below what it was without it: run
first, it led the search elsewhere on 2 of 200 split-penalty rounds (128 GPUs seed 1195:
55.6965 against the optimum 55.841; 96/1098: 0.998 of it).  Round 1163: 70.4375 (0.9954).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from synergy_opt.mechanisms.opt.configure import reoptimise
from synergy_opt.mechanisms.opt.context import GpuPlan, RoundContext, RoundingError, plan_key
from synergy_opt.mechanisms.opt.neighbourhood import State, server_loads, solve_hood, total_of
from synergy_opt.types import Job

log = logging.getLogger(__name__)

#: Tries (a re-optimisation and a re-decision of a few servers each) per call of the move.
GATHER_TRIES: int = 24
#: Target servers tried per spread job (the best ranked).
GATHER_TARGETS: int = 3
#: The move runs only on a state more than this fraction below the super-machine's
#: optimum (a bound of the round's optimum): within it the round is already within 1 % of
#: the optimum, and the move's MIPs rarely pay (split penalties 128 GPUs seed 3: 1.9 s
#: more CPU for nothing).  The neighbourhood search's "near" rule, by the same reading.
GATHER_BELOW: float = 1e-2
#: Passes over the spread jobs while a pass still gains (a gathered job frees holes that
#: let the next one gather).
GATHER_PASSES: int = 2


@dataclass(frozen=True, slots=True)
class _Item:
    """GPUs of one job on one server that may move into a hole: a whole job, or one part
    of another spread job."""

    job_id: str
    server: int
    gpus: int
    #: Cores and memory it holds there (fractions of the server's), at the current points.
    load: float


def gather_candidates(ctx: RoundContext, state: State) -> list[Job]:
    """Spread jobs with a split penalty that fit whole on a server they may use, most
    throughput lost to the penalty first (then by id)."""
    servers = ctx.inst.cluster.servers
    out = []
    for job in ctx.runnable:
        parts = state.plan.get(job.id)
        if parts is None or len(parts) < 2 or job.split_penalty >= 1.0 or ctx.must_spread(job):
            continue
        if any(srv.gpus >= job.gpus and job.may_use(srv) for srv in servers):
            out.append(job)
    return sorted(out, key=lambda j: (-state.points[j.id][2] * (1.0 - j.split_penalty), j.id))


def gather_move(ctx: RoundContext, state: State, target: float) -> State:
    """``state`` improved by gather moves (see the module docstring), stopping at
    ``target``, after :data:`GATHER_TRIES` tries, or when a pass gains nothing; ``state``
    itself where it is within :data:`GATHER_BELOW` of the super-machine's optimum."""
    if state.total >= ctx.optimum * (1 - GATHER_BELOW):
        return state
    tries = 0
    for _ in range(GATHER_PASSES):
        start = state.total
        for job in gather_candidates(ctx, state):
            if len(state.plan[job.id]) < 2:  # gathered as a side effect of an earlier move
                continue
            for plan in _gather_plans(ctx, state, job)[:GATHER_TARGETS]:
                if tries >= GATHER_TRIES or state.total >= target:
                    return state
                hood = sorted({plan[job.id][0][0]} | {s for s, _ in state.plan[job.id]})
                key = (plan_key(plan), tuple(hood))
                if key in ctx.gathers_tried:
                    continue
                ctx.gathers_tried.add(key)
                tries += 1
                try:
                    points, _ = reoptimise(ctx, plan)
                except RoundingError:
                    continue
                gathered = State(plan, points, total_of(ctx, plan, points))
                # The moved items landed by a rule; the servers involved re-decided exactly
                # put them where they lose least (on round 1163: 68.86 -> 70.11, from 70.0).
                local = solve_hood(ctx, gathered, hood)
                if local is not None and local.total > gathered.total:
                    gathered = local
                log.debug("gather %s on %d: %.6g", job.id, plan[job.id][0][0], gathered.total)
                if gathered.total > state.total + 1e-9 * max(1.0, abs(state.total)):
                    log.info(
                        "opt: gathering %s on server %d raises %.6g to %.6g",
                        job.id,
                        plan[job.id][0][0],
                        state.total,
                        gathered.total,
                    )
                    state = gathered
                    break
        if state.total <= start + 1e-9 * max(1.0, abs(start)):
            break
    return state


def _gather_plans(ctx: RoundContext, state: State, job: Job) -> list[GpuPlan]:
    """Plans with ``job`` whole on one server where it could beat its spread value, best
    ranked first (by the cores and memory left there for it, as fractions of the server's,
    then the server's index)."""
    servers = ctx.inst.cluster.servers
    used_c, used_m, free = server_loads(ctx, state)
    c, m, _ = state.points[job.id]
    own = dict(state.plan[job.id])
    for s, k in own.items():  # the job's own GPUs, cores and memory are freed
        free[s] += k
        used_c[s] -= c * k / job.gpus
        used_m[s] -= m * k / job.gpus
    # The least cores and memory per GPU any job takes: a whole job on a server leaves at
    # least that much per remaining GPU to whoever holds them.
    c_min = min(j.sensitivity.cpus[0] / j.gpus for j in ctx.runnable)
    m_min = min(j.sensitivity.mem_gb[0] / j.gpus for j in ctx.runnable)
    now = state.points[job.id][2] * job.split_penalty
    ranked: list[tuple[float, int, GpuPlan]] = []
    for s, srv in enumerate(servers):
        if srv.gpus < job.gpus or not job.may_use(srv):
            continue
        rest = srv.gpus - job.gpus
        room_c, room_m = srv.cpus - rest * c_min, srv.mem_gb - rest * m_min
        best = max(
            (
                w
                for c, m, w in job.sensitivity.points()
                if c <= room_c + 1e-9 and m <= room_m + 1e-9
            ),
            default=0.0,
        )
        if best <= now + 1e-9:
            continue  # whole beside jobs on the other GPUs, it cannot beat its spread value
        got = _gather_on(ctx, state, job, s, list(free), used_c, used_m)
        if got is not None:
            ranked.append((-got[0], s, got[1]))
    ranked.sort(key=lambda t: (t[0], t[1]))
    return [plan for _, _, plan in ranked]


def _gather_on(
    ctx: RoundContext,
    state: State,
    job: Job,
    target: int,
    free: list[int],
    used_c: Sequence[float],
    used_m: Sequence[float],
) -> tuple[float, GpuPlan] | None:
    """``job`` whole on ``target``, the smallest items there moved into holes elsewhere (best
    fit: the hole with the fewest free GPUs that holds the item), with the share of cores
    and memory the job finds on ``target``; ``None`` if the items do not fit the holes."""
    servers = ctx.inst.cluster.servers
    srv = servers[target]
    jobs = {j.id: j for j in ctx.runnable}
    need = job.gpus - free[target]
    items: list[_Item] = []
    for jid, parts in state.plan.items():
        if jid == job.id:
            continue
        g = sum(k for _, k in parts)
        c, m, _ = state.points[jid]
        for s, k in parts:
            if s == target:
                load = (c * k / g) / max(srv.cpus, 1) + (m * k / g) / max(srv.mem_gb, 1e-9)
                items.append(_Item(jid, s, k, load))
    items.sort(key=lambda it: (it.gpus, it.load, it.job_id))
    plan = {jid: dict(parts) for jid, parts in state.plan.items()}
    freed_c = freed_m = 0.0
    for it in items:
        if need <= 0:
            break
        holes = [
            t
            for t in range(len(servers))
            if t != target and free[t] >= it.gpus and jobs[it.job_id].may_use(servers[t])
        ]
        if not holes:
            continue
        t = min(holes, key=lambda t: (free[t], t))
        free[t] -= it.gpus
        need -= it.gpus
        moved = plan[it.job_id]
        moved[target] -= it.gpus
        if not moved[target]:
            del moved[target]
        moved[t] = moved.get(t, 0) + it.gpus
        g = jobs[it.job_id].gpus
        c, m, _ = state.points[it.job_id]
        freed_c += c * it.gpus / g
        freed_m += m * it.gpus / g
    if need > 0:
        return None
    plan[job.id] = {target: job.gpus}
    spare = (srv.cpus - used_c[target] + freed_c) / max(srv.cpus, 1) + (
        srv.mem_gb - used_m[target] + freed_m
    ) / max(srv.mem_gb, 1e-9)
    out = {jid: tuple(sorted(parts.items())) for jid, parts in plan.items()}
    if sum(1 for parts in out.values() if len(parts) > 1) > ctx.max_fragmented:
        return None  # pragma: no cover - gathering never spreads another job
    return spare, out
