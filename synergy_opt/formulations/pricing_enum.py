"""Exact pattern pricing without a MIP: one server class's whole-job contents, listed once.

Column generation (:mod:`~synergy_opt.formulations.patterns_fast`,
:mod:`~synergy_opt.formulations.branch_price`) solves the pricing problem of
``formulations/patterns.md`` hundreds of times per round, and as a MIP each solve costs
20-50 ms (HiGHS, 90 columns), most of a split-penalty 128-GPU round's search.  The problem
is small and only its costs change between solves, so it is solved here exactly by
enumeration instead:

* **Whole jobs (X).**  Every multiset of whole-job columns (k, p) that fits one server
  (GPUs, cores, memory, each column's ``x_upper``, ``pat_one_role``'s n_k) is listed once
  per server class, as a tree (each row its parent plus one column): a server of G GPUs
  holds at most G whole jobs.
  Rows are sorted by (slot-class counts, GPUs, cores, memory); per call only the rows that
  no row of the same counts, GPUs and cores with less memory beats (the *records*) can be
  optimal.
* **Spread parts (U).**  Given the set U of slots with a part here, the parts' GPUs,
  cores and GB appear in one capacity row each (``cnt_gpu_capacity``, (2), (3)) and their
  own bounds, so each fills separately and greedily by its price: extra GPUs (at least
  the ``cnt_gpu_capacity`` floor, at most what is left), cores, GB (continuous).  Unit
  weights make the greedy exact for GPUs and cores, and the fractional knapsack is exact
  for GB.  Sets U are tried best upper bound first and stop once no bound beats the best
  value found.

The value is the pricing MIP's optimum (tests compare both on many random prices and
node restrictions); the MIP stays the reference and the fallback where the list would be
too long (:data:`MAX_ROWS`, :data:`MAX_SETS`).

Public API::

    PatternTable.build(data, s) -> PatternTable | None
    PatternTable.solve(cost, upper, keep) -> tuple[float | None, list[np.ndarray]]
    PRICING_METHODS[name](data, s) -> PricingSolve   # "enumeration" | "mip"
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from synergy_opt.formulations import pricing_sets
from synergy_opt.formulations.counting import part_bounds
from synergy_opt.formulations.patterns import full_gpu_floor, one_role_classes, server_columns
from synergy_opt.formulations.patterns_fast import PATTERNS_PER_PRICING, _pricing_solve
from synergy_opt.formulations.pricing_sets import Parts, Records, SetSearch, fill_table, set_values
from synergy_opt.matrix import MatrixModel

log = logging.getLogger(__name__)

#: A class whose whole-job contents exceed this many rows is priced by the MIP.
MAX_ROWS: int = 300_000
#: Listing is not even tried where a quick count (GPUs and cores only) passes this
#: multiple of the cap: it overstates by about 2x (split-penalty 128 seeds 0, 4: 201k
#: and 217k for 82k and 118k rows), and 256-GPU rounds count 0.8-4.2 million, whose
#: listing would stop at the cap after 0.4-0.7 s.
ROW_BOUND_SLACK: float = 2.0
#: The same for more sets of slots with a part on one server than this.
MAX_SETS: int = 4096
#: Sets of slots are scored this many at a time, best bound first.
SET_CHUNK: int = 16
#: A part's cores or GB priced within this of zero are free: a solution gives the part
#: what the server has left of them (the same reduced value, a pattern that dominates
#: the bare one in the master, whose spread rows ask for at least a point's cores and GB;
#: integral packings need such slack: split-penalty 128 seed 2's optimum has parts with
#: 146-354 GB where the bare patterns of the same jobs had none).
FREE: float = 1e-9
#: Memory fits when it is within this (relative) of the capacity (the MIP's rows keep
#: HiGHS's feasibility tolerance, 1e-7; a few ULPs of summing GB decide nothing here).
MEM_TOL: float = 1e-9


@dataclass(frozen=True, slots=True)
class SlotSide:
    """One server class's spread slots: what every exact pricer of the class shares.

    ``sets`` are the sets U of slots that may have a part on one server together (one
    row of booleans each); ``classes`` are the classes with slots, ``slot_class`` maps a
    slot to its number among them, whose whole jobs and parts together are at most
    ``class_cap``; ``bounds`` are a
    part's a, cp, mp upper bounds.  Given a set U and the whole jobs' GPUs, cores and GB,
    the parts fill what is left greedily (module docstring), so a pricer only has to find
    the best whole jobs per (compatible counts, GPUs, cores, GB).
    """

    nx: int
    slots: tuple[tuple[int, int], ...]
    classes: tuple[int, ...]
    sets: np.ndarray
    slot_class: np.ndarray
    class_cap: np.ndarray
    bounds: np.ndarray  # (slot, 3): a, cp, mp upper bounds of a part
    per_all: np.ndarray  # (set, class with slots): the set's slots of each class
    G: int
    C: int
    M: float
    floor: float

    @classmethod
    def build(cls, data: Mapping[str, Any], s: int) -> SlotSide | None:
        """Server s's slots; None past :data:`MAX_SETS` sets of slots."""
        xs, slots = server_columns(data, s)
        spread = sorted({k for k, _ in slots})  # classes whose count a set of slots limits
        spread_of = {k: r for r, k in enumerate(spread)}
        spread_caps = [int(data["n"][k]) for k in spread]
        G = int(data["G"][s])
        sets = _slot_sets(slots, spread_caps, spread_of, G)
        if sets is None:
            log.debug("pricing of server %s: over %d slot sets, MIP pricing", s, MAX_SETS)
            return None
        bounds = np.asarray([part_bounds(dict(data), *ki, s) for ki in slots], dtype=np.float64)
        slot_class = np.asarray([spread_of[k] for k, _ in slots], dtype=np.int64)
        per_all = sets.astype(np.int64) @ np.eye(len(spread), dtype=np.int64)[slot_class]
        return cls(
            len(xs),
            tuple(slots),
            tuple(spread),
            sets,
            slot_class.reshape(len(slots)),
            np.asarray(spread_caps, dtype=np.int64),
            bounds.reshape(len(slots), 3),
            per_all.reshape(len(sets), len(spread)),
            G,
            int(data["C"][s]),
            float(data["M"][s]),
            full_gpu_floor(data, s),
        )

    @property
    def spread(self) -> int:
        """How many classes have slots here."""
        return len(self.class_cap)

    def column_class(self, xs: Sequence[tuple[int, int]]) -> np.ndarray:
        """Per whole-job column (k, p): k's number among :attr:`classes`, or -1."""
        number = {k: r for r, k in enumerate(self.classes)}
        return np.asarray([number.get(k, -1) for k, _ in xs], dtype=np.int64).reshape(len(xs))

    def call(self, cost: np.ndarray, upper: np.ndarray) -> SlotCall:
        """One call's parts, usable sets of slots and per set: its slots per class with
        slots, and its GPU and core fill tables (by the whole jobs' GPUs, cores)."""
        nx, ns = self.nx, len(self.slots)
        col = np.asarray(cost, dtype=np.float64)
        up = np.asarray(upper, dtype=np.float64)
        va, vu, vc, vm = (col[nx + t * ns : nx + (t + 1) * ns] for t in range(4))
        ua, uu, ucp, ump = (up[nx + t * ns : nx + (t + 1) * ns] for t in range(4))
        parts = Parts(
            va + vu,  # a used part's first GPU (u = 1 exactly where a part is)
            va,
            vc,
            vm,
            np.minimum(self.bounds[:, 0], ua),
            np.minimum(self.bounds[:, 1], ucp),
            np.minimum(self.bounds[:, 2], ump),
        )
        usable = (uu >= 0.5) & (parts.A >= 1)
        in_use = np.flatnonzero(~np.any(self.sets[:, ~usable], axis=1))
        sets = self.sets[in_use]
        inside = sets.astype(np.float64)
        fa = self.gpu_table(inside, parts)
        fc = fill_table(self.C - np.arange(self.C + 1), inside, parts.vc, parts.Cb)
        return SlotCall(parts, in_use, sets, inside, self.per_all[in_use], fa, fc)

    def gpu_table(self, inside: np.ndarray, parts: Parts) -> np.ndarray:
        """Per set (rows) and whole-job GPUs g (columns): the parts' GPU value, one GPU
        each plus the best extra ones (every positive one that fits, and at least enough
        to reach the floor of ``cnt_gpu_capacity``); -inf where none fits."""
        gpu = np.arange(self.G + 1)[None]
        n = inside.sum(1, keepdims=True)
        extra = inside * (parts.A - 1)
        room = self.G - gpu - n
        need = np.maximum(0.0, np.ceil(self.floor - gpu - n - 1e-9))
        total = extra.sum(1, keepdims=True)
        pos = (extra * (parts.va > 0)).sum(1, keepdims=True)
        take = np.maximum(need, np.minimum(pos, room))
        ok = (room >= 0) & (need <= np.minimum(room, total))
        value = inside @ parts.first
        start = np.zeros_like(n)
        gain = np.zeros(take.shape)
        for t in np.argsort(-parts.va, kind="stable"):
            cap = extra[:, t : t + 1]
            gain += parts.va[t] * np.clip(take - start, 0.0, cap)
            start = start + cap
        return np.where(ok, value[:, None] + gain, -math.inf)

    def solution(
        self, in_set: np.ndarray, whole: np.ndarray, used: tuple[int, int, float], parts: Parts
    ) -> np.ndarray:
        """Whole-job columns ``whole`` (one entry per copy; ``nx`` pads) using ``used``
        GPUs, cores and GB, with the parts of ``in_set`` filled greedily, as a pricing
        vector (free cores and GB too: :data:`FREE`)."""
        nx, ns = self.nx, len(self.slots)
        out = np.zeros(nx + 4 * ns)
        for j in whole:
            if j < nx:
                out[j] += 1.0
        g_whole, c_whole, m_whole = used
        used_slots = [int(t) for t in np.flatnonzero(in_set)]
        a = {t: 1 for t in used_slots}
        room = self.G - g_whole - len(used_slots)
        need = max(0, math.ceil(self.floor - g_whole - len(used_slots) - 1e-9))
        take = 0
        for t in sorted(used_slots, key=lambda t: (-parts.va[t], t)):
            for _ in range(int(parts.A[t]) - 1):
                if take >= room or (take >= need and parts.va[t] <= 0):
                    break
                a[t] += 1
                take += 1
        cores_left = float(self.C - c_whole)
        mem_left = max(self.M - m_whole, 0.0)
        cp: dict[int, float] = {}
        mp: dict[int, float] = {}
        for t in sorted(used_slots, key=lambda t: (-parts.vc[t], t)):
            cp[t] = min(float(parts.Cb[t]), cores_left) if parts.vc[t] > -FREE else 0.0
            cores_left -= cp[t]
        for t in sorted(used_slots, key=lambda t: (-parts.vm[t], t)):
            mp[t] = min(float(parts.Mb[t]), mem_left) if parts.vm[t] > -FREE else 0.0
            mem_left -= mp[t]
        for t in used_slots:
            out[nx + t] = a[t]
            out[nx + ns + t] = 1.0
            out[nx + 2 * ns + t] = cp[t]
            out[nx + 3 * ns + t] = mp[t]
        return out


@dataclass(frozen=True, slots=True)
class PatternTable:
    """Every whole-job content of one server (rows), and its slots (``side``).

    ``idx[r]`` lists row r's whole-job columns (repeated per copy, padded with ``nx``);
    ``gpus``, ``cores``, ``mem`` its totals; ``sig[r]`` the id of its counts of the
    classes with slots (``sig_counts``).  Rows are sorted by (sig, gpus, cores, mem) and
    ``seg`` numbers the runs of equal (sig, gpus, cores).
    """

    side: SlotSide
    idx: np.ndarray
    gpus: np.ndarray
    cores: np.ndarray
    mem: np.ndarray
    sig: np.ndarray
    sig_counts: np.ndarray
    seg: np.ndarray
    # the rows in the order listed: each is its parent plus one column, so a call sums
    # one column per row, depth by depth (``levels``), then sorts (``order``)
    parent: np.ndarray
    item: np.ndarray
    levels: tuple[np.ndarray, ...]
    order: np.ndarray
    # per set of slots (all of ``side.sets``) and counts id: whether the set's parts fit
    # beside whole jobs of those counts (``pat_one_role``'s n_k); no cost changes it
    compat_all: np.ndarray

    @property
    def nx(self) -> int:
        """How many whole-job columns the class has."""
        return self.side.nx

    @property
    def G(self) -> int:  # noqa: N802 - the paper's name
        """The class's GPUs per server."""
        return self.side.G

    @property
    def C(self) -> int:  # noqa: N802 - the paper's name
        """The class's cores per server."""
        return self.side.C

    @property
    def M(self) -> float:  # noqa: N802 - the paper's name
        """The class's GB per server."""
        return self.side.M

    @classmethod
    def build(
        cls, data: Mapping[str, Any], s: int, *, max_rows: int = MAX_ROWS
    ) -> PatternTable | None:
        """The table of server s's class; None when it would exceed ``max_rows`` rows or
        :data:`MAX_SETS` sets of slots (the MIP prices that class)."""
        xs, slots = server_columns(data, s)
        g, xpt = data["g"], data["x_point"]
        G, C, M = int(data["G"][s]), int(data["C"][s]), float(data["M"][s])
        roles = one_role_classes(data, s)
        role_of = {k: r for r, k in enumerate(roles)}
        items = [
            (int(g[k]), int(xpt[s, k, p][0]), float(xpt[s, k, p][1]), int(data["x_upper"][s, k, p]))
            for k, p in xs
        ]
        caps = [int(data["n"][k]) for k in roles]
        if _row_bound(items, G, C) > ROW_BOUND_SLACK * max_rows:
            log.debug("pricing table of server %s: far over %d rows, MIP pricing", s, max_rows)
            return None
        side = SlotSide.build(data, s)
        if side is None:
            return None
        m_cap = M + MEM_TOL * max(1.0, M)
        found = _enumerate(items, [role_of.get(k, -1) for k, _ in xs], caps, G, C, m_cap, max_rows)
        if found is None:
            log.debug("pricing table of server %s: over %d rows, MIP pricing", s, max_rows)
            return None
        parent, item, depths = found
        nx, n_rows = len(xs), len(parent)
        up, add, depth = (np.asarray(v, dtype=np.int64) for v in (parent, item, depths))
        levels = [np.flatnonzero(depth == d) for d in range(1, int(depth.max(initial=0)) + 1)]
        idx = np.full((n_rows, max(1, len(levels))), nx, dtype=np.int32)
        for d, rows in enumerate(levels):  # a row is its parent plus one column
            idx[rows] = idx[up[rows]]
            idx[rows, d] = add[rows]
        ig = np.asarray([it[0] for it in items] + [0], dtype=np.int64)
        ic = np.asarray([it[1] for it in items] + [0], dtype=np.int64)
        im = np.asarray([it[2] for it in items] + [0.0], dtype=np.float64)
        gpus, cores, mem = ig[idx].sum(1), ic[idx].sum(1), im[idx].sum(1)
        counts = np.zeros((n_rows, side.spread), dtype=np.int64)
        item_spread = np.append(side.column_class(xs), -1)
        for r_id in range(side.spread):
            counts[:, r_id] = (item_spread[idx] == r_id).sum(1)
        # counts <= n_k, so these keys are exact and sort as the count vectors do
        radix = np.cumprod([1, *(int(c) + 1 for c in side.class_cap[::-1])])[-2::-1]
        _, first, sig = np.unique(counts @ radix, return_index=True, return_inverse=True)
        sig_counts, sig = counts[first], sig.reshape(-1)
        order = np.lexsort((mem, cores, gpus, sig))
        key = np.stack([sig[order], gpus[order], cores[order]], axis=1)
        new = np.ones(n_rows, dtype=bool)
        new[1:] = np.any(key[1:] != key[:-1], axis=1)
        compat = np.ones((len(side.sets), len(sig_counts)), dtype=bool)
        for r_id in range(side.spread):  # class by class: no (sets, counts, classes) array
            room = side.class_cap[r_id] - sig_counts[:, r_id]
            compat &= side.per_all[:, r_id, None] <= room[None]
        return cls(
            side,
            idx[order],
            gpus[order],
            cores[order],
            mem[order],
            sig[order],
            sig_counts.reshape(len(sig_counts), side.spread),
            np.cumsum(new) - 1,
            up,
            add,
            tuple(levels),
            order,
            compat,
        )

    @property
    def rows(self) -> int:
        """How many whole-job contents the table lists."""
        return len(self.gpus)

    def _whole_values(self, cost: np.ndarray, upper: np.ndarray) -> np.ndarray:
        """Each listed set of whole jobs' summed cost (in listing order), -inf where an
        upper bound of 0 leaves one of its columns out."""
        nx = self.nx
        wx = np.append(np.asarray(cost[:nx], dtype=np.float64), 0.0)
        wx[:nx][np.asarray(upper[:nx]) < 0.5] = -math.inf
        listed = np.zeros(len(self.parent))
        for rows in self.levels:
            listed[rows] = listed[self.parent[rows]] + wx[self.item[rows]]
        return listed[self.order]

    def solve(
        self, cost: np.ndarray, upper: np.ndarray, *, keep: int = 8
    ) -> tuple[float | None, list[np.ndarray]]:
        """The pricing MIP's optimum for these column costs and upper bounds (the pricing
        matrix's column order: x, then a, u, cp, mp per slot), and up to ``keep`` of the
        best solutions, best first (None, [] when no pattern is feasible).

        An upper bound of 0 on an x column leaves that column out; on a slot's u (or a)
        the slot; other bounds on a part tighten its a, cp, mp."""
        w = self._whole_values(cost, upper)
        parts, sets, inside, compat, fa, fc = self._call(cost, upper)
        call = self._search(w, parts, inside, compat, fa, fc, keep)
        if call is None or not math.isfinite(call.top):
            return None, []
        found = sorted(call.found, key=lambda f: (-f[0], f[1], f[2]))
        sols = [self._solution(sets[u], int(call.r.rows[i]), parts) for _, u, i in found[:keep]]
        return call.top, sols

    def _search(
        self,
        w: np.ndarray,
        parts: Parts,
        inside: np.ndarray,
        compat: np.ndarray,
        fa: np.ndarray,
        fc: np.ndarray,
        keep: int,
    ) -> SetSearch | None:
        """The search over the sets of slots at whole-job values ``w`` (:class:`SetSearch`,
        chunk by chunk until no chunk's first bound beats the best value); None where no
        row is feasible."""
        rec = _records(w, self.seg)
        if rec.size == 0:
            return None
        r = Records(w[rec], self.gpus[rec], self.cores[rec], self.mem[rec], self.sig[rec], rec)
        call = SetSearch(self, r, parts, inside, compat, fa, fc, keep)
        for at in range(0, len(call.order), SET_CHUNK):
            chunk = call.order[at : at + SET_CHUNK]
            chunk = chunk[call.ub0[chunk] > call.top]
            if chunk.size == 0:
                break
            call.chunk(chunk)
        return call

    def within(
        self, cost: np.ndarray, upper: np.ndarray, delta: float
    ) -> tuple[float | None, np.ndarray]:
        """The optimum at these costs and bounds (None where no pattern is feasible) and,
        per whole-job column, the most copies of it on one server among every content
        (whole jobs and the set of slots with a part, the parts filled at best) worth
        more than the optimum minus ``delta``: 0 where no such content holds it.

        Reduced-cost fixing (``formulations/branch_price.md``, "Reduced-cost fixing"):
        with ``delta`` above the gap between a node's Lagrangian bound and an allocation's
        value, every server of that allocation holds at most these copies.  Unlike
        :meth:`solve` this looks at every row, not only the records: a row another row
        beats at these costs may still be in an integer allocation."""
        w = self._whole_values(cost, upper)
        parts, sets, inside, compat, fa, fc = self._call(cost, upper)
        every = Records(w, self.gpus, self.cores, self.mem, self.sig, np.arange(len(w)))

        def values(u: int, rows: np.ndarray) -> np.ndarray:
            """Rows ``rows`` (of every row) with set u (-inf where the counts forbid it)."""
            return set_values(self.M, every, rows, u, inside, parts, fa, fc, compat)

        if pricing_sets.PRUNE:
            top, above = self._within_pruned(
                every, values, self._search(w, parts, inside, compat, fa, fc, 1), fa, fc, delta
            )
        else:
            best = np.full(len(w), -math.inf)
            for u in range(len(sets)):
                best = np.maximum(best, values(u, every.rows))
            top = float(best.max(initial=-math.inf))
            above = best > top - delta
        caps = np.zeros(self.nx, dtype=np.int64)
        if not math.isfinite(top):
            return None, caps
        rows = self.idx[above]
        for j in np.unique(rows):
            if j < self.nx:
                caps[j] = int((rows == j).sum(axis=1).max())
        return top, caps

    def _within_pruned(
        self,
        every: Records,
        values: Callable[[int, np.ndarray], np.ndarray],
        call: SetSearch | None,
        fa: np.ndarray,
        fc: np.ndarray,
        delta: float,
    ) -> tuple[float, np.ndarray]:
        """:meth:`within`'s optimum and its rows worth more than it less ``delta``, each
        row valued with a set (``values``) only where a bound says it may matter: per set
        and run of rows (same counts, GPUs, cores), the run's best whole jobs with the
        set's GPU and core tables and GB worth at most all of them filled and at most the
        set's best GB price times the run's most room (the fill is concave from 0).
        Values are summed as every row's is, so the optimum and the rows are the same as
        valuing all.  The optimum is pricing's (``call``, the search at these costs): the
        best row is a record, since a row with less memory and at least its whole jobs'
        value is worth at least as much."""
        above = np.zeros(len(every.w), dtype=bool)
        if call is None or not math.isfinite(call.top):
            return -math.inf, above
        head = np.flatnonzero(np.r_[True, self.seg[1:] != self.seg[:-1]])
        run_of = self.seg
        run_w = np.maximum.reduceat(every.w, head)
        left = np.maximum(self.M - every.m, 0.0)
        room = left[head]  # rows of a run are sorted by memory: the first leaves the most
        gb = np.minimum(call.all_mem[:, None], call.gb_price[:, None] * room[None])
        bound = run_w[None] + fa[:, every.g[head]] + fc[:, every.c[head]] + gb
        bound = np.where(call.compat[:, every.s[head]], bound, -math.inf)
        set_top = bound.max(1, initial=-math.inf)
        floor = call.top - delta
        reach = floor - pricing_sets.ROUND_MARGIN * (1.0 + abs(floor))
        for u in np.argsort(-set_top, kind="stable"):
            if set_top[u] <= reach:
                break
            # a row's own bound: its whole jobs, the set's GPU and core tables, GB as above
            # with the row's own room; valued only if that passes and no set passed it yet
            rows = np.flatnonzero((bound[u][run_of] > reach) & ~above)
            gb_row = np.minimum(call.all_mem[u], call.gb_price[u] * left[rows])
            own = every.w[rows] + fa[u, every.g[rows]] + fc[u, every.c[rows]] + gb_row
            rows = rows[own > reach]
            if rows.size:
                above[rows] |= values(int(u), rows) > floor
        return call.top, above

    def _call(
        self, cost: np.ndarray, upper: np.ndarray
    ) -> tuple[Parts, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """One call's parts, usable sets of slots, and per set: compatible counts, GPU and
        core fill tables."""
        on = self.side.call(cost, upper)
        return on.parts, on.sets, on.inside, self.compat_all[on.in_use], on.fa, on.fc

    def _solution(self, in_set: np.ndarray, row: int, parts: Parts) -> np.ndarray:
        """Row ``row`` with the parts of ``in_set`` (:meth:`SlotSide.solution`)."""
        used = (int(self.gpus[row]), int(self.cores[row]), float(self.mem[row]))
        return self.side.solution(in_set, self.idx[row], used, parts)


@dataclass(frozen=True, slots=True)
class SlotCall:
    """One call's side of the slots (:meth:`SlotSide.call`): the parts, the usable sets
    (their numbers among :attr:`SlotSide.sets`, ``in_use``), and per usable set its slots
    per class with slots (``per``), its parts' GPU value by the whole jobs' GPUs (``fa``)
    and core value by their cores (``fc``)."""

    parts: Parts
    in_use: np.ndarray
    sets: np.ndarray
    inside: np.ndarray
    per: np.ndarray
    fa: np.ndarray
    fc: np.ndarray


def _row_bound(items: Sequence[tuple[int, int, float, int]], G: int, C: int) -> int:
    """How many multisets of items fit G GPUs and C cores (memory and ``pat_one_role``
    left out: at least as many as :func:`_enumerate` lists), by counting per (GPUs,
    cores)."""
    count = np.zeros((G + 1, C + 1))
    count[0, 0] = 1.0
    for g, c, _, upper in items:
        new = count.copy()
        for t in range(1, upper + 1):
            if t * g > G or t * c > C:
                break
            new[t * g :, t * c :] += count[: G + 1 - t * g, : C + 1 - t * c]
        count = new
    return int(count.sum())


def _enumerate(
    items: Sequence[tuple[int, int, float, int]],
    item_role: Sequence[int],
    caps: Sequence[int],
    G: int,
    C: int,
    m_cap: float,
    max_rows: int,
) -> tuple[list[int], list[int], list[int]] | None:
    """Every multiset of items within the capacities (each item's own bound, and at most
    ``caps[r]`` items of role r), the empty one first: as a tree, each row's parent row,
    the item it adds (-1 for the empty row) and its depth; None past ``max_rows``."""
    parent: list[int] = [-1]
    item: list[int] = [-1]
    depth: list[int] = [0]
    per = [0] * len(caps)

    def walk(row: int, start: int, g: int, c: int, m: float, copies: int) -> bool:
        for j in range(start, len(items)):
            gj, cj, mj, uj = items[j]
            same = copies if j == start else 0
            role = item_role[j]
            if (
                g + gj > G
                or c + cj > C
                or m + mj > m_cap
                or same >= uj
                or (role >= 0 and per[role] >= caps[role])
            ):
                continue
            parent.append(row)
            item.append(j)
            depth.append(depth[row] + 1)
            if len(parent) > max_rows:
                return False
            if role >= 0:
                per[role] += 1
            ok = walk(len(parent) - 1, j, g + gj, c + cj, m + mj, same + 1)
            if role >= 0:
                per[role] -= 1
            if not ok:
                return False
        return True

    return (parent, item, depth) if walk(0, 0, 0, 0, 0.0, 0) else None


def _slot_sets(
    slots: Sequence[tuple[int, int]], caps: Sequence[int], role_of: Mapping[int, int], G: int
) -> np.ndarray | None:
    """Every set of slots that may each have a part on one server (at most G, at most
    n_k of class k): booleans, one row per set, the empty set first."""
    out: list[tuple[int, ...]] = []
    for size in range(min(G, len(slots)) + 1):
        for combo in itertools.combinations(range(len(slots)), size):
            per: dict[int, int] = {}
            for t in combo:
                r = role_of[slots[t][0]]
                per[r] = per.get(r, 0) + 1
            if all(n <= caps[r] for r, n in per.items()):
                out.append(combo)
                if len(out) > MAX_SETS:
                    return None
    sets = np.zeros((len(out), len(slots)), dtype=bool)
    for r, combo in enumerate(out):
        sets[r, list(combo)] = True
    return sets


def _records(w: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """Rows that beat every earlier row of their run (less memory, same counts, GPUs and
    cores): a superset of the only rows that can be optimal, whatever the parts."""
    finite = np.isfinite(w)
    if not finite.any():
        return np.zeros(0, dtype=np.int64)
    lo, hi = float(w[finite].min()), float(w[finite].max())
    span = hi - lo + 2.0
    v = np.where(finite, w, lo - 1.0) + seg * span
    run = np.maximum.accumulate(v)
    # rounding in v is at most a few ULPs of its largest value: counting a row as a
    # record within that keeps every true record (a spare one costs nothing)
    slack = 8 * np.finfo(np.float64).eps * (float(seg[-1]) + 1.0) * span
    rec = np.ones(len(w), dtype=bool)
    rec[1:] = v[1:] > run[:-1] - slack
    rec[1:] |= seg[1:] != seg[:-1]
    return np.flatnonzero(rec & finite)


#: One class's pricing solve: (the pricing matrix with this call's costs and column
#: bounds, time limit) -> (proven optimum or None, solutions best first).
PricingSolve = Callable[[MatrixModel, float | None], tuple[float | None, list[np.ndarray]]]


def _by_mip(data: Mapping[str, Any], s: int) -> PricingSolve:
    """HiGHS on the pricing MIP (the reference)."""
    return _pricing_solve


@dataclass(frozen=True, slots=True)
class TableSolve:
    """Pricing by one class's :class:`PatternTable` (a :data:`PricingSolve`); the table
    stays reachable for :meth:`PatternTable.within`."""

    table: PatternTable

    def __call__(
        self, mm: MatrixModel, time_limit: float | None
    ) -> tuple[float | None, list[np.ndarray]]:
        return self.table.solve(mm.cost, mm.col_upper, keep=PATTERNS_PER_PRICING)


def _by_enumeration(data: Mapping[str, Any], s: int) -> PricingSolve:
    """:class:`PatternTable` (exact, no time limit needed: milliseconds), or the MIP where
    the class's table would be too long."""
    table = PatternTable.build(data, s)
    if table is None:
        return _pricing_solve
    return TableSolve(table)


#: How column generation prices a server class, by name.
PRICING_METHODS: dict[str, Callable[[Mapping[str, Any], int], PricingSolve]] = {
    "enumeration": _by_enumeration,
    "mip": _by_mip,
}
