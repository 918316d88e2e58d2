"""The spread move: a penalised job spread one GPU per server over the richest servers.

The neighbourhood search (:mod:`.neighbourhood`) re-decides a few servers at a time, but a
job with a split penalty gains from spreading only when it reaches the cores and memory of
*several* servers with slack at once, and those are rarely the servers it sits on.  On
``family_round("split-penalty", 64, 1069)`` the search stopped at 0.988 of the proven
optimum (25.60 against 25.92; the optimum spreads a 4-GPU job one GPU on each of four
servers) unless given 5000 nodes per neighbourhood.  This move tries, for every job with a
split penalty, spans of k = 2..g servers ranked by spare cores and memory (three rankings:
both, cores, memory); small whole jobs on a span server that lacks free GPUs move to a
server with GPUs to spare, and the points are re-optimised for the new plan
(:func:`.configure.reoptimise`, one small MIP).  A plan is kept only if the round's total
rises.  It runs before the neighbourhood search, which then starts from the better plan
(on round 1069: 25.30 -> 25.45 by the move, then 25.71 = 0.992 of the optimum, in less
time than the search alone spent to reach 25.60).
"""

from __future__ import annotations

import itertools
import logging

from synergy_opt.mechanisms.opt.configure import reoptimise
from synergy_opt.mechanisms.opt.context import GpuPlan, RoundContext, RoundingError
from synergy_opt.mechanisms.opt.neighbourhood import State, server_loads, total_of
from synergy_opt.types import Job

log = logging.getLogger(__name__)

#: Re-optimisations (one small MIP each) the move may spend per round: a bound on its cost
#: on large rounds with many penalised jobs (round 1069 used 16).
SPREAD_MOVE_TRIES: int = 32
#: Passes over the penalised jobs while a pass still gains.
SPREAD_MOVE_PASSES: int = 3
#: Server rankings a span is drawn from: spare cores + memory, spare cores, spare memory
#: (fractions of each server's capacity, at the current points).
RANKINGS: tuple[str, ...] = ("both", "cpu", "mem")


def spread_candidates(ctx: RoundContext) -> list[Job]:
    """Jobs the move tries, in id order: a split penalty below 1, >= 2 GPUs, and >= 2
    servers they may use (the routes already spread jobs whose spreading costs nothing)."""
    servers = ctx.inst.cluster.servers
    return sorted(
        (
            j
            for j in ctx.runnable
            if j.gpus >= 2
            and j.split_penalty < 1.0
            and sum(1 for srv in servers if j.may_use(srv)) >= 2
        ),
        key=lambda j: j.id,
    )


def spread_move(ctx: RoundContext, state: State, target: float) -> State:
    """``state`` improved by spread moves (see the module docstring), stopping at
    ``target``, after :data:`SPREAD_MOVE_TRIES` re-optimisations, or when a pass gains
    nothing."""
    jobs = spread_candidates(ctx)
    if not jobs:
        return state
    tries = 0
    for _ in range(SPREAD_MOVE_PASSES):
        start = state.total
        for job in jobs:
            if job.id not in state.plan:  # a plan may leave a job out (it is then kept out)
                continue
            for k, rank in itertools.product(range(2, job.gpus + 1), RANKINGS):
                if tries >= SPREAD_MOVE_TRIES or state.total >= target:
                    return state
                plan = _spread_plan(ctx, state, job, k, rank)
                if plan is None:
                    continue
                tries += 1
                try:
                    points, _ = reoptimise(ctx, plan)
                except RoundingError:
                    continue
                total = total_of(ctx, plan, points)
                if total > state.total + 1e-9 * max(1.0, abs(state.total)):
                    log.info(
                        "opt: spreading %s over %s raises %.6g to %.6g",
                        job.id,
                        plan[job.id],
                        state.total,
                        total,
                    )
                    state = State(plan, points, total)
        if state.total <= start + 1e-9 * max(1.0, abs(start)):
            break
    return state


def _spare(ctx: RoundContext, state: State) -> tuple[list[float], list[float], list[int]]:
    """Per server: spare cores and memory (fractions of capacity) and free GPUs."""
    servers = ctx.inst.cluster.servers
    used_c, used_m, free = server_loads(ctx, state)
    spare_c = [(srv.cpus - used_c[s]) / max(srv.cpus, 1) for s, srv in enumerate(servers)]
    spare_m = [(srv.mem_gb - used_m[s]) / max(srv.mem_gb, 1e-9) for s, srv in enumerate(servers)]
    return spare_c, spare_m, free


def _spread_plan(ctx: RoundContext, state: State, job: Job, k: int, rank: str) -> GpuPlan | None:
    """``state``'s plan with ``job`` on the k allowed servers ranked first by ``rank`` (one
    GPU each, the rest on those servers in rank order), or ``None`` if room cannot be made
    by moving small whole jobs or the fragmentation cap would be exceeded."""
    servers = ctx.inst.cluster.servers
    spare_c, spare_m, free = _spare(ctx, state)
    score = {
        "both": lambda s: spare_c[s] + spare_m[s],
        "cpu": lambda s: spare_c[s],
        "mem": lambda s: spare_m[s],
    }[rank]
    # a server without GPUs holds no part (each part has a GPU at least)
    allowed = [s for s, srv in enumerate(servers) if srv.gpus and job.may_use(srv)]
    if len(allowed) < k:
        return None
    span = sorted(allowed, key=lambda s: (-score(s), s))[:k]
    need = dict.fromkeys(span, 1)
    extra = job.gpus - k
    for s in span:
        add = min(extra, servers[s].gpus - 1)
        need[s] += add
        extra -= add
    if extra:
        return None
    plan = dict(state.plan)
    for s, g in plan.pop(job.id):
        free[s] += g
    surplus = [free[s] - need.get(s, 0) for s in range(len(servers))]
    jobs = {j.id: j for j in ctx.runnable}
    for s in span:  # move the smallest whole jobs off a short span server
        while surplus[s] < 0:
            movable = sorted(
                (jid for jid, parts in plan.items() if len(parts) == 1 and parts[0][0] == s),
                key=lambda jid: (plan[jid][0][1], jid),
            )
            for jid in movable:
                g = plan[jid][0][1]
                dest = [
                    t
                    for t in range(len(servers))
                    if t != s and surplus[t] >= g and jobs[jid].may_use(servers[t])
                ]
                if dest:
                    t = max(dest, key=lambda t: (spare_c[t] + spare_m[t], -t))
                    plan[jid] = ((t, g),)
                    surplus[t] -= g
                    surplus[s] += g
                    break
            else:
                return None
    plan[job.id] = tuple(sorted(need.items()))
    if sum(1 for parts in plan.values() if len(parts) > 1) > ctx.max_fragmented:
        return None
    return plan
