"""Repair a GPU plan so that the super-machine's points deploy on it, without a MIP.

A route's plan often misses by a few cores or GB: on cold 512-GPU rounds of the multi-GPU
mix the best route leaves 4-14 cores of the 1400 the points ask for without a server
(measured by max-flow), and the mechanism then pays a re-optimisation MIP per plan and the
neighbourhood search.  This step closes such gaps by swapping whole jobs.

For one resource (cores, then memory) the max-flow of :mod:`.transport` either places every
job's demand or stops at a minimum cut: the set T of servers reachable from an unserved
job in the residual network (with every whole job pinned to its server).  The servers in T
are full; the jobs confined to T ask for more than T holds.  A swap of a whole job X on a
server of T with a whole job Y of the same GPU count on a server t outside T, where X
asks for more of that resource than Y, moves the difference out of T; it is taken only if
t has that much to spare in both resources (and X's server can take any extra of the
other resource Y brings).  Where no such Y exists, X may trade places with as many GPUs of
a spread job on t (:func:`_part_swap`): X goes whole to t, the spread job takes X's GPUs
in T and draws its cores and memory anywhere on its span.  Swaps keep every server's GPU
count and the number of spread jobs; points do not change, so a plan that deploys is
worth the super-machine optimum (the bound: nothing is lost by stopping there).  Each
round of swaps re-runs the flows; the repair stops when the points deploy, after
:data:`REPAIR_PATIENCE` rounds in a row that do not shrink the shortfall, when no swap is
left, or after :data:`REPAIR_ROUNDS` rounds.

Measured on cold rounds (``family_round``, seeds 0-8): the points deploy after the repair
of the placement-LP plan on 7 of 9 512-GPU multi-GPU rounds (the ring plan on 8), in 4-7
ms, where the same rounds spent 35-110 ms per re-optimisation MIP and up to 500 ms in the
neighbourhood search.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from synergy_opt.mechanisms.opt.context import GpuPlan, Point, RoundContext
from synergy_opt.mechanisms.opt.transport import MEM_UNIT_GB, cut_flow
from synergy_opt.types import MEM_EPS_GB, Job

log = logging.getLogger(__name__)

#: Rounds of swaps (one pair of max-flows each) before the repair gives up.
REPAIR_ROUNDS: int = 12
#: Rounds of swaps in a row that leave the shortfall no smaller before the repair gives up
#: (1 lost multi-GPU 128-GPU seed 6, whose shortfall went 16, 2, 5, 0 cores).
REPAIR_PATIENCE: int = 2
#: Partners of one GPU count at least this many are scanned with numpy
#: (:meth:`_Partners.best_swap`), fewer in Python (:func:`_listed_swap`): numpy's cost per
#: job of the tight set hardly depends on the partners (18 microseconds a scan on average
#: over the 5,291 scans of 931 recorded repairs).
VECTOR_MIN: int = 32
#: Cores and GB below this count as zero (memory is flowed in 0.1-micro-GB units).
SLACK_EPS: float = 1e-9


def _amounts(points: Mapping[str, Point], r: int) -> dict[str, int]:
    """Each job's demand of resource ``r`` as :func:`_resource` counts it: whole cores, or
    memory in :data:`~.transport.MEM_UNIT_GB` units rounded up (points do not change
    during a repair, so once per repair, not once per job and round of swaps)."""
    if r == 0:
        return {jid: int(p[0]) for jid, p in points.items()}
    return {jid: int(math.ceil(p[1] / MEM_UNIT_GB - 1e-3)) for jid, p in points.items()}


def _resource(
    ctx: RoundContext, plan: GpuPlan, amount: Mapping[str, int], r: int
) -> tuple[int, set[int], list[int]]:
    """(deficit, tight servers, spare per server) of resource ``r`` (0 cores, 1 memory;
    memory in :data:`~.transport.MEM_UNIT_GB` units, as the deployment flows it), each
    job asking for ``amount[job id]`` (:func:`_amounts`)."""
    servers = ctx.inst.cluster.servers
    if r == 0:
        cap = [int(s.cpus) for s in servers]
    else:
        cap = [int(math.floor((s.mem_gb + MEM_EPS_GB) / MEM_UNIT_GB)) for s in servers]
    free = list(cap)
    spread: dict[str, list[int]] = {}
    for jid, parts in plan.items():
        if len(parts) > 1:
            spread[jid] = [s for s, _ in parts]
        else:
            free[parts[0][0]] -= amount[jid]
    over = {s for s, f in enumerate(free) if f < 0}
    deficit = sum(-free[s] for s in over)
    clipped = [max(f, 0) for f in free]
    used, cut = cut_flow({jid: amount[jid] for jid in spread}, spread, clipped)
    deficit += sum(amount[jid] for jid in spread) - sum(used)
    spare = [clipped[s] - used[s] for s in range(len(servers))]
    return deficit, over | cut, spare


class _JobRows:
    """The runnable jobs' rows (``ctx.runnable``'s order) and which servers each may use,
    built where a numpy scan first asks (most repairs scan only short lists)."""

    def __init__(self, ctx: RoundContext) -> None:
        self._ctx = ctx

    @cached_property
    def row(self) -> dict[str, int]:
        return {j.id: i for i, j in enumerate(self._ctx.runnable)}

    @cached_property
    def allowed(self) -> np.ndarray | None:
        """Job row x server: may the job use it; ``None`` where no job has a GPU-type
        restriction (every pair allowed)."""
        runnable = self._ctx.runnable
        if all(j.gpu_types is None for j in runnable):
            return None
        kinds = [srv.gpu_type for srv in self._ctx.inst.cluster.servers]
        names = list(dict.fromkeys(kinds))
        ok = np.array([[j.gpu_types is None or k in j.gpu_types for k in names] for j in runnable])
        return ok[:, [names.index(k) for k in kinds]]


def _listed_swap(
    ctx: RoundContext,
    jobs: Mapping[str, Job],
    members: Sequence[tuple[str, int]],
    points: Mapping[str, Point],
    xs: tuple[str, int, tuple[float, float]],
    r: int,
    deficit: float,
    spare: list[list[int]],
    busy: set[int],
    short: set[int],
) -> tuple[float, str, int] | None:
    """:meth:`_Partners.best_swap` by a loop over the partners ``members`` (job x, on server
    s, needing dx: ``xs``; ``short``: the servers short of the other resource)."""
    servers = ctx.inst.cluster.servers
    x, s, dx = xs
    jx = jobs[x]
    other = 1 - r
    best: tuple[float, str, int] | None = None
    for y, t in members:
        if t in busy or not jx.may_use(servers[t]) or not jobs[y].may_use(servers[s]):
            continue
        dy = (points[y][0], points[y][1] / MEM_UNIT_GB)
        gain = dx[r] - dy[r]
        if gain <= SLACK_EPS or gain > spare[r][t] + SLACK_EPS:
            continue
        back = dx[other] - dy[other]  # what t takes of the other resource
        if back > spare[other][t] + SLACK_EPS:
            continue
        if back < -SLACK_EPS and s in short:
            continue  # s would take more of a resource it is short of
        if back < -SLACK_EPS and -back > spare[other][s] + SLACK_EPS:
            continue
        key = (min(gain, deficit), y, t)
        if best is None or key[0] > best[0] + SLACK_EPS:
            best = key
    return best


@dataclass(frozen=True, slots=True)
class _Partners:
    """The swap partners of one GPU count in one round of swaps (whole jobs on servers
    outside the tight set), in the plan's order, as arrays: each job of the tight set scans
    them all, and the scan in Python (193,000 pairs) took 130 ms of single-GPU 512 GPUs
    seed 7's 340."""

    ids: tuple[str, ...]
    #: Each partner's row in ``ctx.runnable`` (for :attr:`_JobRows.allowed`).
    rows: np.ndarray
    server: np.ndarray
    #: Each one's need of the resource moved and of the other at its point (cores, memory in
    #: :data:`~.transport.MEM_UNIT_GB` units).
    need: np.ndarray
    need_other: np.ndarray
    #: What each one's server has to spare of them, plus :data:`SLACK_EPS` (the round's
    #: flows fixed it).
    room: np.ndarray
    room_other: np.ndarray

    @classmethod
    def of(
        cls,
        members: Sequence[tuple[str, int]],
        points: Mapping[str, Point],
        rows: Mapping[str, int],
        r: int,
        spare: Sequence[Sequence[int]],
    ) -> _Partners:
        """``members`` ((job, server), in order) moving resource ``r`` with ``spare``."""
        ids = tuple(y for y, _ in members)
        t = np.array([t for _, t in members], dtype=np.int64)
        need = (
            np.array([float(points[y][0]) for y in ids], dtype=np.float64),
            np.array([points[y][1] / MEM_UNIT_GB for y in ids], dtype=np.float64),
        )
        room = [np.asarray(spare[k], dtype=np.int64)[t] + SLACK_EPS for k in (0, 1)]
        return cls(
            ids,
            np.array([rows[y] for y in ids], dtype=np.int64),
            t,
            need[r],
            need[1 - r],
            room[r],
            room[1 - r],
        )

    def best_swap(
        self,
        dx: tuple[float, float],
        s: int,
        deficit: float,
        busy: np.ndarray,
        s_room: float | None,
        allowed: np.ndarray | None,
        x_row: int,
    ) -> tuple[float, str, int] | None:
        """(gain, partner, its server) of the swap with job x (needing ``dx`` of the
        resource moved and the other, on server ``s``) that moves the most out of the tight
        set, capped at ``deficit``; the first in the plan's order among gains within
        :data:`SLACK_EPS` of each other (as :func:`_listed_swap`).  A partner qualifies
        where its server is not ``busy`` and has room for the difference in both resources,
        and where s has room (``s_room``, with :data:`SLACK_EPS`; ``None``: s is short of
        it) for what the partner needs more of the other resource."""
        t = self.server
        gain = dx[0] - self.need
        back = dx[1] - self.need_other
        ok = ~busy[t] & (gain > SLACK_EPS) & (gain <= self.room) & (back <= self.room_other)
        gives = back < -SLACK_EPS
        ok &= ~gives if s_room is None else ~(gives & (-back > s_room))
        if allowed is not None:
            ok &= allowed[x_row, t] & allowed[self.rows, s]
        idx = np.flatnonzero(ok)
        if idx.size == 0:
            return None
        value = np.minimum(gain[idx], deficit)
        # The first of the values in order that beats the best before it by SLACK_EPS.
        i, top = 0, float(value[0])
        while True:
            later = np.flatnonzero(value[i + 1 :] > top + SLACK_EPS)
            if later.size == 0:
                break
            i += 1 + int(later[0])
            top = float(value[i])
        k = int(idx[i])
        return top, self.ids[k], int(t[k])


def repair(ctx: RoundContext, plan: GpuPlan, points: Mapping[str, Point]) -> GpuPlan | None:
    """A plan on which ``points`` deploy, reached by swapping whole jobs, or ``None``."""
    servers = ctx.inst.cluster.servers
    jobs = {j.id: j for j in ctx.runnable}
    if len(plan) != len(jobs):
        return None
    for jid, parts in plan.items():
        c, m, _ = points[jid]
        if len(parts) == 1:  # a whole job larger than its server: no swap fixes that
            srv = servers[parts[0][0]]
            if c > srv.cpus or m > srv.mem_gb + MEM_EPS_GB:
                return None
        elif jobs[jid].split_penalty < 1.0 and jid not in ctx.spread_ids:
            return None  # spread at a penalty the points do not carry
    cur = dict(plan)
    cl = ctx.inst.cluster
    scale = (1.0 / max(cl.total_cpus, 1), MEM_UNIT_GB / max(cl.total_mem_gb, 1e-9))
    best_short, misses = float("inf"), 0
    amounts = [_amounts({jid: points[jid] for jid in plan}, r) for r in (0, 1)]
    rows = _JobRows(ctx)
    for _ in range(REPAIR_ROUNDS):
        state = [_resource(ctx, cur, amounts[r], r) for r in (0, 1)]
        if all(d <= 0 for d, _, _ in state):
            return cur
        # Both shortfalls as fractions of the cluster: rounds of swaps that do not shrink
        # them end the repair after REPAIR_PATIENCE in a row (the swaps are estimates of
        # the flows; a round can lose ground that the next one more than wins back).
        short = sum(max(d, 0) * f for (d, _, _), f in zip(state, scale, strict=True))
        if short >= best_short - 1e-12:
            misses += 1
            if misses >= REPAIR_PATIENCE:
                return None
        else:
            best_short, misses = short, 0
        r = 0 if state[0][0] > 0 else 1
        other = 1 - r
        deficit: float  # _resource's int, less the swaps' (fractional) gains
        deficit, tight, _ = state[r]
        spare = [state[0][2], state[1][2]]
        # Servers outside the tight set, per GPU count, hold the swap partners; parts of
        # spread jobs there are partners too (:func:`_part_swap`).
        by_g: dict[int, list[tuple[str, int]]] = {}
        inside: list[tuple[str, int]] = []
        parts_out: list[tuple[str, int, int]] = []
        for jid, parts in cur.items():
            if len(parts) != 1:
                parts_out += [(jid, t, k) for t, k in parts if t not in tight]
                continue
            s = parts[0][0]
            (inside if s in tight else by_g.setdefault(jobs[jid].gpus, [])).append((jid, s))
        partners: dict[int, _Partners] = {}  # by_g as arrays, built where first asked
        busy_arr = np.zeros(len(servers), dtype=bool)
        moved = False
        busy: set[int] = set()
        # Hungriest jobs of the tight set first: they move the most per swap.
        inside.sort(key=lambda t: (-points[t[0]][r], t[0]))
        for x, s in inside:
            if deficit <= 0:
                break
            if s in busy:
                continue
            jx = jobs[x]
            dx = (points[x][0], points[x][1] / MEM_UNIT_GB)
            members = by_g.get(jx.gpus, [])
            if len(members) >= VECTOR_MIN:
                group = partners.get(jx.gpus)
                if group is None:
                    group = _Partners.of(members, points, rows.row, r, spare)
                    partners[jx.gpus] = group
                short = s in state[other][1]
                best = group.best_swap(
                    (dx[r], dx[other]),
                    s,
                    deficit,
                    busy_arr,
                    None if short else spare[other][s] + SLACK_EPS,
                    rows.allowed,
                    rows.row[x],
                )
            else:
                best = _listed_swap(
                    ctx, jobs, members, points, (x, s, dx), r, deficit, spare, busy, state[other][1]
                )
            if best is None:
                part = _part_swap(ctx, jobs, cur, x, s, dx, r, spare, busy, parts_out)
                if part is None:
                    continue
                y, t = part
                g = jx.gpus
                kept = {u: k for u, k in cur[y] if u != t}
                left = dict(cur[y])[t] - g
                if left:
                    kept[t] = left
                kept[s] = kept.get(s, 0) + g
                cur[x] = ((t, g),)
                cur[y] = tuple(sorted(kept.items()))
                busy.update((s, t))
                busy_arr[[s, t]] = True
                deficit -= min(dx[r], deficit)
                moved = True
                log.debug("repair: %s (server %d) <-> %d GPUs of %s on %d", x, s, g, y, t)
                continue
            gain, y, t = best
            cur[x] = ((t, jx.gpus),)
            cur[y] = ((s, jobs[y].gpus),)
            busy.update((s, t))
            busy_arr[[s, t]] = True
            deficit -= gain
            moved = True
            log.debug("repair: %s (server %d) <-> %s (server %d), %s %.6g", x, s, y, t, r, gain)
        if not moved:
            return None
    return None


def _part_swap(
    ctx: RoundContext,
    jobs: Mapping[str, Job],
    cur: dict[str, tuple[tuple[int, int], ...]],
    x: str,
    s: int,
    dx: tuple[float, float],
    r: int,
    spare: list[list[int]],
    busy: set[int],
    parts_out: list[tuple[str, int, int]],
) -> tuple[str, int] | None:
    """A spread job y with at least x's GPUs on a server t outside the tight set, where t
    can hold x whole: x goes to t, y takes x's GPUs on s (y draws its cores and memory
    from any server it spans, so s loses x's whole demand and gains a flexible one).  y
    keeps spanning two servers or more; the spread count does not change."""
    servers = ctx.inst.cluster.servers
    jx = jobs[x]
    g = jx.gpus
    other = 1 - r
    best: tuple[float, str, int] | None = None
    for y, t, k in parts_out:
        if t == s or t in busy or k < g or y == x:
            continue
        if dx[r] > spare[r][t] + SLACK_EPS or dx[other] > spare[other][t] + SLACK_EPS:
            continue  # first: it rules out most pairs, and costs no set
        if k == g and len({u for u, _ in cur[y]} - {t} | {s}) < 2:
            continue  # y would end on one server
        if not jx.may_use(servers[t]) or not jobs[y].may_use(servers[s]):
            continue
        key = (dx[r], y, t)
        if best is None or key[0] > best[0] + SLACK_EPS:
            best = key
    return None if best is None else (best[1], best[2])
