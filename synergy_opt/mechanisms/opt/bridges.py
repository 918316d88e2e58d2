"""Bridges: spread a few jobs of a whole-job plan so that the super-machine's points deploy.

On rounds that use nearly all of the cluster's cores (the multi-GPU mix at 128 GPUs: 382
of 384), no plan of whole jobs deploys the super-machine's points: whole jobs come in
lumps of 1-48 cores, and a server 4 cores over has no whole job to give away that is
worth exactly 4.  The placement LP's vertex gets round this by splitting jobs, whose cores
and memory then come from any server of their span (:mod:`.transport`): they carry load
between servers.  This module builds such carriers without a solver, from a plan of whole
jobs (``balanced``'s), spreading as few jobs as it can.

Each server's load is tracked exactly: its whole jobs' points plus what each spread job
draws there.  The draws are a concrete choice, so a plan whose every server ends within
its capacity deploys (the draws are a feasible flow).  While a server is over, the move
that lowers the total excess most is taken (ties: fewer new spread jobs), among

- *shift*: a spread job with GPUs on the server draws more from another server of its span
  (no new spread job);
- *trade*: a job x with >= 2 GPUs there moves k of them to a server t with room, and a
  whole job of k GPUs on t moves over in exchange; x then draws from t (x spreads);
- *hand-over*: a whole job z moves to t whole, and a spreadable job y on t takes its GPUs
  on the server and may draw there (y spreads, unless it was spread already);
- *swap*: x and a spreadable whole job y on t trade one GPU (both spread);
- *relay*: a spread job x drawing on the server has k >= 2 GPUs on another server u of its
  span; k' < k of them move to t, a whole job y of k' GPUs on t moves to u, and x draws on
  t what y needed on u plus part of what it drew on the server (no new spread job).

Partners t are the :data:`PARTNERS` servers holding a whole job (or, for a hand-over, a
spread job) with most room for the server's excess (cores and memory, each as a share of
the cluster's).  Every move keeps each
server's GPU count, never puts more whole-job load on a server than it holds, only spreads
jobs that may spread, and stays within the fragmentation cap.  The plan returned may still
be over somewhere: the caller deploys it (a max-flow), repairs it, or drops it.
"""

from __future__ import annotations

from synergy_opt.mechanisms.opt.context import GpuPlan, RoundContext
from synergy_opt.types import MEM_EPS_GB, Job, Server

#: Servers with most room considered as partners of an over-committed server per move.
PARTNERS: int = 4
#: Tries (a search for the best move of one server) per server of the round at most: a
#: guard, since each move lowers the total excess but by amounts that may shrink.
TRIES_PER_SERVER: int = 6
#: Excess at or below this (cores, GB) is none: the deployment's tolerances are finer.
EXCESS_EPS: tuple[float, float] = (1e-9, MEM_EPS_GB / 2)
#: A move must lower the total excess (a fraction of the cluster) by more than this.
GAIN_EPS: float = 1e-12
#: Offer the moves that spread no new job (relays, hand-overs to a spread job).  Off, every
#: pass is the pass before them (2026-12-08): the benches' and tests' A/B switch.
ZERO_SPREAD_MOVES: bool = True

#: (gain, -new spread jobs, -order offered): larger is better; among equal gains and
#: spreads the move offered first (shifts, then partners by room, jobs by name).
_Key = tuple[float, int, int]
#: (kind, partner, job a, job b, GPUs moved, (cores, GB) leaving the server for the partner,
#: the relay's server u or -1).
_Move = tuple[str, int, str, str, int, tuple[float, float], int]


class _Bridging:
    """One bridging pass over a plan (mutable working state; :func:`bridged` is the API)."""

    def __init__(self, ctx: RoundContext, plan: GpuPlan, zero_spread: bool = True) -> None:
        self.ctx = ctx
        #: whether the moves that spread no new job are offered
        self.zero_spread = zero_spread and ZERO_SPREAD_MOVES
        self.servers = ctx.inst.cluster.servers
        n = len(self.servers)
        self.jobs: dict[str, Job] = {j.id: j for j in ctx.runnable}
        self.need: dict[str, tuple[float, float]] = {
            jid: (float(p[0]), float(p[1])) for jid, p in ctx.points.items()
        }
        cl = ctx.inst.cluster
        self.scale = (1.0 / max(cl.total_cpus, 1), 1.0 / max(cl.total_mem_gb, 1e-9))
        self.cap = ([float(s.cpus) for s in self.servers], [float(s.mem_gb) for s in self.servers])
        self.plan: dict[str, dict[int, int]] = {jid: dict(parts) for jid, parts in plan.items()}
        # Per resource and server: room (capacity less the whole jobs' points and the
        # spread jobs' draws) and the whole jobs' load.
        self.room = (list(self.cap[0]), list(self.cap[1]))
        self.whole_load = ([0.0] * n, [0.0] * n)
        self.whole_on: list[list[str]] = [[] for _ in range(n)]
        self.on: list[set[str]] = [set() for _ in range(n)]
        self.draw: dict[str, tuple[dict[int, float], dict[int, float]]] = {}
        for jid, parts in self.plan.items():
            need = self.need[jid]
            for s in parts:
                self.on[s].add(jid)
            if len(parts) == 1:
                (s,) = parts
                self.whole_on[s].append(jid)
                for r in (0, 1):
                    self.room[r][s] -= need[r]
                    self.whole_load[r][s] += need[r]
                continue
            g = sum(parts.values())
            self.draw[jid] = ({}, {})
            for r in (0, 1):
                for s, k in parts.items():
                    self.draw[jid][r][s] = need[r] * k / g
                    self.room[r][s] -= need[r] * k / g
        self.budget = ctx.max_fragmented - len(self.draw)
        self.spreadable = {jid: ctx.may_spread(j) for jid, j in self.jobs.items()}
        #: The plan as given: a job no move touched is returned as it came.
        self.given = plan
        self.touched: set[str] = set()
        #: Per server and GPU type, its whole jobs that may use that type by (scaled load,
        #: id), most frugal first (:meth:`frugal`); dropped when a whole job arrives or
        #: leaves (every best move sorted them again per partner).
        self._frugal: dict[int, dict[str | None, list[tuple[float, str]]]] = {}

    def over(self, s: int) -> float:
        """How far server s is over, as a fraction of the cluster (both resources)."""
        total = 0.0
        for r in (0, 1):
            e = -self.room[r][s]
            if e > EXCESS_EPS[r]:
                total += e * self.scale[r]
        return total

    def best_move(self, s: int) -> tuple[_Key, _Move] | None:
        """The move that lowers the total excess most, or ``None``."""
        cap, scale = self.cap, self.scale
        room0, room1 = self.room
        es = (-room0[s], -room1[s])
        ps = (max(es[0], 0.0), max(es[1], 0.0))
        n = len(self.servers)
        sc0, sc1 = scale
        ps0, ps1 = ps
        # Partners: servers holding a whole job (every move but a shift needs one) with
        # the most room for s's excess, both resources counted.  With the moves that spread
        # no new job, a server holding only spread jobs is one too (a hand-over to one of
        # them; multi-GPU 128 GPUs seed 35: the one server with 12 free cores).
        whole_on, on = self.whole_on, self.on if self.zero_spread else None
        pots: list[tuple[float, int]] = []
        for t in range(n):
            if t == s or not (whole_on[t] or (on is not None and on[t])):
                continue
            r0, r1 = room0[t], room1[t]
            # Conditional expressions, not min/max: this loop is most of a 512-GPU pass.
            pot = (ps0 if r0 > ps0 else r0 if r0 > 0.0 else 0.0) * sc0 + (
                ps1 if r1 > ps1 else r1 if r1 > 0.0 else 0.0
            ) * sc1
            if pot > 0.0:
                pots.append((-pot, t))
        # nsmallest's documented equal, faster on a list of a few dozen
        partners = sorted(pots)[:PARTNERS]
        best: tuple[_Key, _Move] | None = None
        budget = self.budget
        order = 0

        es0, es1 = es
        #: Per partner: its room, the flow it can take (w) and the excess before the move
        #: (s's plus its own), read by every move offered with it (hand-overs: most).
        at: dict[int, tuple[float, float, float, float, float, float]] = {}

        def consider(
            t: int,
            lo0: float,
            hi0: float,
            lo1: float,
            hi1: float,
            new: int,
            kind: str,
            a: str,
            b: str,
            k: int,
            via: int = -1,
        ) -> None:
            """Offer a move whose flow from s to t lies in [lo, hi] per resource; the flow
            taken is as much of s's excess as t has room for, within those bounds."""
            nonlocal best, order
            if new > budget:
                return
            p = at.get(t)
            if p is None:
                r0, r1 = room0[t], room1[t]
                p = at[t] = (
                    r0,
                    r1,
                    min(ps0, r0 if r0 > 0.0 else 0.0),
                    min(ps1, r1 if r1 > 0.0 else 0.0),
                    ps0 + max(-r0, 0.0),
                    ps1 + max(-r1, 0.0),
                )
            r0, r1, w0, w1, b0, b1 = p
            f0 = lo0 if w0 < lo0 else hi0 if w0 > hi0 else w0
            f1 = lo1 if w1 < lo1 else hi1 if w1 > hi1 else w1
            # excess before minus after, on s and t, per resource (scaled)
            g0 = b0 - max(es0 - f0, 0.0) - max(f0 - r0, 0.0)
            g1 = b1 - max(es1 - f1, 0.0) - max(f1 - r1, 0.0)
            order += 1
            gain = g0 * sc0 + g1 * sc1
            if best is not None:
                # (gain, -new, -order) > best's key, without the tuple: a later offer's
                # -order is always lower, so equal gains are decided by -new alone
                bk = best[0]
                if gain < bk[0] or (gain == bk[0] and -new <= bk[1]):
                    return
            best = ((gain, -new, -order), (kind, t, a, b, k, (f0, f1), via))

        servers = self.servers
        on_s = sorted(self.on[s])
        for x in on_s:  # shift: a spread job draws more elsewhere on its span
            d = self.draw.get(x)
            if d is None:
                continue
            d0, d1 = d
            for t in self.plan[x]:
                # Only towards room where s is over (elsewhere the flow gains nothing).
                if t != s and ((ps0 > 0.0 and room0[t] > 0.0) or (ps1 > 0.0 and room1[t] > 0.0)):
                    consider(
                        t, -d0.get(t, 0.0), d0.get(s, 0.0), -d1.get(t, 0.0), d1.get(s, 0.0),
                        0, "shift", x, x, 0,
                    )  # fmt: skip
        wl, eps = self.whole_load, EXCESS_EPS
        whole_s = sorted(self.whole_on[s])  # no move changes it before one is applied
        # Relay carriers: spread jobs drawing on s where s is over, each with the servers
        # of its span that hold >= 2 of its GPUs (the relay's u).
        zero = self.zero_spread
        carriers = self._carriers(s, on_s) if zero else []
        srv_s = servers[s]
        for neg_pot, t in partners:
            srv_t = servers[t]
            # Spread jobs on t that may take GPUs on s: a hand-over to one spreads none (and
            # without a whole job on s there is no hand-over to offer).
            spread_t = (
                [y for y in sorted(self.on[t]) if y in self.draw and self.jobs[y].may_use(srv_s)]
                if zero and whole_s
                else []
            )
            # No move with t lowers the excess by more than t's room for s's excess plus
            # t's own excess; every move with t spreads at least one job but relays and
            # hand-overs to spread jobs, so only where neither is offered does a move of
            # equal gain lose to a best that spreads one.
            bound = -neg_pot + max(-room0[t], 0.0) * sc0 + max(-room1[t], 0.0) * sc1
            fewest = 0 if carriers or spread_t else -1
            if best is not None and best[0][0] >= bound and best[0][1] >= fewest:
                continue
            # Whole jobs of t that may come to s, most frugal first: for a trade the most
            # frugal that fits is best (its load arriving on s is all a trade loses), for
            # a swap any will do (the flow rides on x), for a hand-over the hungriest that
            # can take z's place (the more y may draw on s, the less z's move overshoots).
            ys = self.frugal(t, srv_s)
            swap_y = next((y for _, y in ys if self.jobs[y].gpus >= 2 and self.spreadable[y]), None)
            for x in on_s:
                here = self.plan[x][s]
                if here < 2 or not self.spreadable[x] or not self.jobs[x].may_use(srv_t):
                    continue
                d = self.draw.get(x)
                if d is None:
                    share, own, new_x = self.need[x], self.need[x], 1
                else:
                    share, own, new_x = (d[0].get(s, 0.0), d[1].get(s, 0.0)), (0.0, 0.0), 0
                for _, y in ys:
                    cy, my = self.need[y]
                    if (
                        y != x
                        and self.jobs[y].gpus < here
                        and wl[0][s] - own[0] + cy <= cap[0][s] + eps[0]
                        and wl[1][s] - own[1] + my <= cap[1][s] + eps[1]
                    ):
                        lo0, hi0, lo1, hi1 = -cy, share[0] - cy, -my, share[1] - my
                        consider(t, lo0, hi0, lo1, hi1, new_x, "trade", x, y, self.jobs[y].gpus)
                        break
                if swap_y is not None and swap_y != x:
                    cy, my = self.need[swap_y]
                    consider(t, -cy, share[0], -my, share[1], new_x + 1, "swap", x, swap_y, 1)
            for z in whole_s:
                jz = self.jobs[z]
                if not jz.may_use(srv_t):
                    continue
                cz, mz = self.need[z]
                for _, y in reversed(ys):
                    cy, my = self.need[y]
                    if (
                        self.jobs[y].gpus > jz.gpus
                        and self.spreadable[y]
                        and wl[0][t] - cy + cz <= cap[0][t] + eps[0]
                        and wl[1][t] - my + mz <= cap[1][t] + eps[1]
                    ):
                        consider(t, cz - cy, cz, mz - my, mz, 1, "hand-over", z, y, jz.gpus)
                        break
                if wl[0][t] + cz > cap[0][t] + eps[0] or wl[1][t] + mz > cap[1][t] + eps[1]:
                    continue
                for y in spread_t:
                    if self.plan[y][t] > jz.gpus:  # y keeps a GPU on t
                        dy0, dy1 = self.draw[y][0].get(t, 0.0), self.draw[y][1].get(t, 0.0)
                        consider(t, cz - dy0, cz, mz - dy1, mz, 0, "hand-over", z, y, jz.gpus)
                        break
            for x, f0, f1, vias in carriers:
                if t in self.plan[x] or not self.jobs[x].may_use(srv_t):
                    continue  # t in x's span: a shift, offered above
                d0, d1 = self.draw[x]
                for u, h in vias:
                    srv_u = servers[u]
                    u0, u1 = d0.get(u, 0.0), d1.get(u, 0.0)
                    for _, y in ys:
                        jy = self.jobs[y]
                        cy, my = self.need[y]
                        # y arrives whole on u in place of x's GPUs and x draws y's need
                        # less there: u's load is unchanged, its whole-job load must fit.
                        if (
                            jy.gpus < h
                            and cy <= u0
                            and my <= u1
                            and wl[0][u] + cy <= cap[0][u] + eps[0]
                            and wl[1][u] + my <= cap[1][u] + eps[1]
                            and jy.may_use(srv_u)
                        ):
                            consider(t, 0.0, f0, 0.0, f1, 0, "relay", x, y, jy.gpus, u)
                            break
        return best

    def _carriers(
        self, s: int, on_s: list[str]
    ) -> list[tuple[str, float, float, list[tuple[int, int]]]]:
        """Spread jobs on s that draw a resource s is over in, with what they draw on s
        and the other servers of their span holding >= 2 of their GPUs (a relay's u)."""
        room0, room1 = self.room
        out = []
        for x in on_s:
            d = self.draw.get(x)
            if d is None:
                continue
            f0, f1 = d[0].get(s, 0.0), d[1].get(s, 0.0)
            if not ((room0[s] < 0.0 and f0 > 0.0) or (room1[s] < 0.0 and f1 > 0.0)):
                continue
            vias = [(u, h) for u, h in sorted(self.plan[x].items()) if u != s and h >= 2]
            if vias:
                out.append((x, f0, f1, vias))
        return out

    def frugal(self, t: int, srv: Server) -> list[tuple[float, str]]:
        """Server t's whole jobs that may use ``srv``, by (load as a share of the
        cluster's, id), ascending.  Kept per GPU type of ``srv`` (all ``may_use`` reads)."""
        per = self._frugal.get(t)
        if per is None:
            per = self._frugal[t] = {}
        got = per.get(srv.gpu_type)
        if got is None:
            need, jobs, (sc0, sc1) = self.need, self.jobs, self.scale
            got = per[srv.gpu_type] = sorted(
                (need[y][0] * sc0 + need[y][1] * sc1, y)
                for y in self.whole_on[t]
                if jobs[y].may_use(srv)
            )
        return got

    # -- applying a move ----------------------------------------------------------------

    def _whole_to(self, jid: str, src: int, dst: int) -> None:
        """Whole job ``jid`` leaves ``src`` for ``dst`` (GPUs and load)."""
        self.plan[jid] = {dst: self.jobs[jid].gpus}
        self.touched.add(jid)
        self.whole_on[src].remove(jid)
        self.whole_on[dst].append(jid)
        self._frugal.pop(src, None)
        self._frugal.pop(dst, None)
        self.on[src].discard(jid)
        self.on[dst].add(jid)
        for r, v in enumerate(self.need[jid]):
            self.room[r][src] += v
            self.room[r][dst] -= v
            self.whole_load[r][src] -= v
            self.whole_load[r][dst] += v

    def _spread(self, jid: str) -> None:
        """Whole job ``jid`` becomes spread: its load turns into draws on its server."""
        (s,) = self.plan[jid]
        self.touched.add(jid)
        self.whole_on[s].remove(jid)
        self._frugal.pop(s, None)
        c, m = self.need[jid]
        self.draw[jid] = ({s: c}, {s: m})
        self.whole_load[0][s] -= c
        self.whole_load[1][s] -= m
        self.budget -= 1

    def _gpus(self, jid: str, src: int, dst: int, k: int) -> None:
        parts = self.plan[jid]
        self.touched.add(jid)
        parts[src] -= k
        parts[dst] = parts.get(dst, 0) + k
        self.on[dst].add(jid)

    def _shift(self, jid: str, src: int, dst: int, r: int, amount: float) -> None:
        """``jid`` draws ``amount`` of resource r from ``dst`` instead of ``src``."""
        d = self.draw[jid][r]
        d[src] = d.get(src, 0.0) - amount
        d[dst] = d.get(dst, 0.0) + amount
        self.room[r][src] += amount
        self.room[r][dst] -= amount

    def apply(self, s: int, move: _Move) -> None:
        kind, t, a, b, k, flow, via = move
        if kind == "relay":  # a's k GPUs on via go to t, b goes whole from t to via
            self._gpus(a, via, t, k)
            need_b = self.need[b]
            self._whole_to(b, t, via)
            for r in (0, 1):
                self._shift(a, via, t, r, need_b[r])
                self._shift(a, s, t, r, flow[r])
        elif kind == "shift":
            for r in (0, 1):
                self._shift(a, s, t, r, flow[r])
        elif kind == "trade":  # a takes b's GPUs on t, b goes whole to s
            if a not in self.draw:
                self._spread(a)
            self._gpus(a, s, t, k)
            need_b = self.need[b]
            self._whole_to(b, t, s)
            for r in (0, 1):
                self._shift(a, s, t, r, flow[r] + need_b[r])
        elif kind == "swap":  # a and b trade one GPU; the flow goes with whichever fits
            if a not in self.draw:
                self._spread(a)
            self._spread(b)
            self._gpus(a, s, t, 1)
            self._gpus(b, t, s, 1)
            for r in (0, 1):
                if flow[r] >= 0:
                    self._shift(a, s, t, r, flow[r])
                else:
                    self._shift(b, t, s, r, -flow[r])
        else:  # hand-over: a goes whole to t, b (spread) takes its GPUs on s
            if b not in self.draw:
                self._spread(b)
            need_a = self.need[a]
            self._whole_to(a, s, t)
            self._gpus(b, t, s, k)
            for r in (0, 1):
                back = need_a[r] - flow[r]  # what b draws on s, for the net flow
                if back > 0:
                    self._shift(b, t, s, r, back)

    def run(self) -> GpuPlan:
        n = len(self.servers)
        overs = {s: v for s in range(n) if (v := self.over(s)) > 0.0}
        stuck: set[int] = set()
        for _ in range(TRIES_PER_SERVER * n):
            open_ = [(-v, s) for s, v in overs.items() if s not in stuck]
            if not open_:
                break
            s = min(open_)[1]
            found = self.best_move(s)
            if found is None or found[0][0] <= GAIN_EPS:
                stuck.add(s)
                continue
            move = found[1]
            self.apply(s, move)
            stuck.clear()  # a partner's room changed: every server may move again
            for u in (s, move[1]):
                v = self.over(u)
                if v > 0.0:
                    overs[u] = v
                else:
                    overs.pop(u, None)
        given, touched = self.given, self.touched
        return {
            jid: (
                given[jid]  # one part, as given: already the canonical form below
                if jid not in touched and len(given[jid]) == 1
                else tuple(sorted((s, k) for s, k in parts.items() if k))
            )
            for jid, parts in self.plan.items()
        }


def bridged(ctx: RoundContext, plan: GpuPlan, *, zero_spread: bool = True) -> GpuPlan:
    """``plan`` with bridges (module docstring); ``plan`` itself is not changed.
    ``zero_spread=False``: without relays and hand-overs to spread jobs, a second pass
    where the first gets stuck (each is greedy; neither's plans deploy on all rounds the
    other's do)."""
    return _Bridging(ctx, plan, zero_spread).run()
