"""One pricing call's search over a server class's sets of slots, and what it shares.

:meth:`~synergy_opt.formulations.pricing_enum.PatternTable.solve` lists the whole-job
contents once per class; each call values them with every usable set of slots.  This
module is that valuation: the parts' greedy GB fill (:func:`fill_table`), a record's value
with a set (:func:`set_values`), and the search over the sets (:class:`SetSearch`), which
looks only at what it can return: a call returns its optimum and the ``keep`` best
patterns it met, so rows, runs and chunks of sets whose bounds stay below the
``keep``-th best value met so far are skipped (:class:`Kept`; ``formulations/patterns.md``,
"Only what can be returned is looked at").  The answers are the same bytes as valuing
everything (:data:`PRUNE` off; ``tests/test_pricing_prune.py``).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from synergy_opt.formulations.pricing_enum import PatternTable

#: Rows, runs and sets whose bounds cannot reach the values a call keeps are not looked
#: at (the same answers, bit for bit).  Off only to measure it
#: (``bench/bench_pricing_enum.py``).
PRUNE: bool = True
#: Relative margin for the rounding of a bound summed in another order than the value
#: it bounds (the values are sums of a few hundred at most: rounding is ~1e-13 of them).
ROUND_MARGIN: float = 1e-9


@dataclass(frozen=True, slots=True)
class Parts:
    """Per slot at one call: the first GPU's value (with u's), an extra GPU's, a core's,
    a GB's, and the bounds of a, cp, mp."""

    first: np.ndarray
    va: np.ndarray
    vc: np.ndarray
    vm: np.ndarray
    A: np.ndarray
    Cb: np.ndarray
    Mb: np.ndarray


@dataclass(frozen=True, slots=True)
class Records:
    """The rows that can be optimal at one call's costs: value and totals."""

    w: np.ndarray
    g: np.ndarray
    c: np.ndarray
    m: np.ndarray
    s: np.ndarray
    rows: np.ndarray


def set_values(
    M: float,  # noqa: N803 - the paper's name
    r: Records,
    rows: np.ndarray,
    u_no: int,
    inside: np.ndarray,
    parts: Parts,
    fa: np.ndarray,
    fc: np.ndarray,
    compat: np.ndarray,
) -> np.ndarray:
    """The value of records ``rows`` with set ``u_no``'s parts on a server of ``M`` GB
    (-inf where the counts do not allow the set); element by element, so the same for any
    choice of rows."""
    vals = r.w[rows] + fa[u_no, r.g[rows]] + fc[u_no, r.c[rows]]
    left = np.maximum(M - r.m[rows], 0.0)
    vals += fill_table(left, inside[u_no : u_no + 1], parts.vm, parts.Mb)[0]
    return np.where(compat[u_no, r.s[rows]], vals, -math.inf)


class SetSearch:
    """One :meth:`~.pricing_enum.PatternTable.solve` call's search over its sets of slots,
    chunk by chunk, best first bound first: the plain sets (no GB price) by their runs'
    best records, the sets with GB record by record, each set stopped once its bound
    cannot beat the best value (``top``).  It collects the sets' best values (``found``);
    a row below the ``keep``-th of them can never be returned, so with :data:`PRUNE` the
    chunks, runs and rows whose bounds stay below it are skipped."""

    def __init__(
        self,
        table: PatternTable,
        r: Records,
        parts: Parts,
        inside: np.ndarray,
        compat: np.ndarray,
        fa: np.ndarray,
        fc: np.ndarray,
        keep: int,
    ) -> None:
        self.table, self.r, self.parts, self.inside = table, r, parts, inside
        self.compat, self.fa, self.fc, self.keep = compat, fa, fc, keep
        M = table.M  # noqa: N806 - the paper's name
        # per run of records (same counts, GPUs, cores): the best record, the least memory
        seg = table.seg[r.rows]
        new_run = np.r_[True, seg[1:] != seg[:-1]]
        self.head = np.flatnonzero(new_run)
        self.run_best = np.maximum.reduceat(r.w, self.head)
        self.run_of = np.cumsum(new_run) - 1
        first_best = np.flatnonzero(r.w == self.run_best[self.run_of])
        self.best_rec = first_best[np.unique(self.run_of[first_best], return_index=True)[1]]
        head = self.head
        self.hg, self.hc, self.hs = r.g[head], r.c[head], r.s[head]
        self.room = np.maximum(M - r.m[head], 0.0)
        self.left = np.maximum(M - r.m, 0.0)
        # a bound per set: the best row per GPU count, cores and GB as if all were left
        by_gpus = np.full(table.G + 1, -math.inf)
        np.maximum.at(by_gpus, self.hg, self.run_best)
        self.all_mem = fill_table(np.asarray([M]), inside, parts.vm, parts.Mb)[:, 0]
        self.ub0 = np.max(fa + by_gpus[None], axis=1) + fc[:, 0] + self.all_mem
        self.order = np.argsort(-self.ub0, kind="stable")
        # the best run per whole-job GPUs and cores, and the most GB such a run leaves: a
        # set's bound over every run at once, summed as a run's value is
        self.by_use = np.full((table.G + 1, table.C + 1), -math.inf)
        np.maximum.at(self.by_use, (self.hg, self.hc), self.run_best)
        self.room_use = np.zeros((table.G + 1, table.C + 1))
        np.maximum.at(self.room_use, (self.hg, self.hc), self.room)
        # a set's best GB price: its GB fill is at most that times the room (concave from 0)
        self.gb_price = np.max(np.where(inside > 0, parts.vm[None], 0.0), axis=1, initial=0.0)
        # numpy's stubs type ``any`` with an axis as bool-or-array; along axis 1 it is an array
        self.with_mem: np.ndarray = (inside[:, parts.vm > 0] > 0).any(1)  # type: ignore[assignment]
        self.found: list[tuple[float, int, int]] = []  # (value, set, record)
        self.kept = Kept(keep)
        self.top = -math.inf

    def chunk(self, chunk: np.ndarray) -> None:
        """Search one chunk of sets (whose first bound beats ``top``)."""
        fa, fc = self.fa, self.fc
        if math.isfinite(self.kept.reach()):
            # sets with GB none of whose rows can be kept are never searched (their bound
            # is below ``top``): leave them out; a chunk left empty is skipped
            gb = self.gb_price[chunk, None, None] * self.room_use[None]
            gb = np.minimum(gb, self.all_mem[chunk, None, None])
            bound = self.by_use[None] + fa[chunk][:, :, None] + fc[chunk][:, None, :] + gb
            chunk = chunk[~self.with_mem[chunk] | (bound.max((1, 2)) >= self.kept.reach())]
            if chunk.size == 0:
                return
        val = self.run_best[None] + fa[chunk][:, self.hg] + fc[chunk][:, self.hc]
        val = np.where(self.compat[chunk][:, self.hs], val, -math.inf)
        plain = ~self.with_mem[chunk]
        if plain.any():
            self._plain(chunk[plain], val[plain])
        if not plain.all():
            self._with_mem(chunk[~plain], val[~plain])

    def _plain(self, sets: np.ndarray, val: np.ndarray) -> None:
        """Sets without a GB price: a run's value is its best record's."""
        flat = val.ravel()
        n_keep = min(self.keep, flat.size)
        for f in np.argpartition(-flat, n_keep - 1)[:n_keep]:
            if math.isfinite(flat[f]):
                u_row, h = divmod(int(f), val.shape[1])
                self.found.append((float(flat[f]), int(sets[u_row]), int(self.best_rec[h])))
                self.kept.add(float(flat[f]))
        self.top = max(self.top, float(flat.max()))

    def _with_mem(self, mem_sets: np.ndarray, val_mem: np.ndarray) -> None:
        """Sets with a GB price, best run bound first, record by record."""
        r, kept, parts, head = self.r, self.kept, self.parts, self.head
        # per set and run: the run's best value with the GB its least-memory row leaves,
        # worked out only for runs that could reach the kept list's last value (the others
        # stay below it, so they are -inf here: no set's order or stop changes, and their
        # rows could never be returned); a set's GB are worth at most all of them filled,
        # and at most its best GB price times the room
        run_ub = np.full((len(mem_sets), len(head)), -math.inf)
        run_gb = np.full((len(mem_sets), len(head)), -math.inf)  # the GB's part of it
        gb_most = np.minimum(
            self.all_mem[mem_sets, None], self.gb_price[mem_sets, None] * self.room[None]
        )
        cols = np.flatnonzero((val_mem + gb_most >= kept.reach()).any(0))
        if cols.size:
            fill = fill_table(self.room[cols], self.inside[mem_sets], parts.vm, parts.Mb)
            run_gb[:, cols] = fill
            run_ub[:, cols] = val_mem[:, cols] + fill
        ub = run_ub.max(1)
        for at_set in np.argsort(-ub, kind="stable"):
            if ub[at_set] <= self.top:
                break
            u_no = int(mem_sets[at_set])
            # a row's bound: its own value with its run's GPU and core tables, and GB worth
            # at most what its run's least-memory row leaves, and at most the best GB price
            # times its own room (the fill is concave from 0)
            gb = np.minimum(run_gb[at_set][self.run_of], self.gb_price[u_no] * self.left)
            bound = r.w + (val_mem[at_set] - self.run_best)[self.run_of] + gb
            rows = np.flatnonzero(bound >= kept.reach())
            if rows.size == 0:
                continue
            vals = set_values(
                self.table.M, r, rows, u_no, self.inside, parts, self.fa, self.fc, self.compat
            )
            every = rows.size == len(r.w)
            best = partition_best(vals, self.keep) if every else unique_best(vals, self.keep)
            if best is None:  # a tie at the edge: choose among every row, as always
                rows = np.arange(len(r.w))
                vals = set_values(
                    self.table.M, r, rows, u_no, self.inside, parts, self.fa, self.fc, self.compat
                )
                best = partition_best(vals, self.keep)
            for i in best:
                self.found.append((float(vals[i]), u_no, int(rows[i])))
                kept.add(float(vals[i]))
            self.top = max(self.top, float(vals.max()))


def partition_best(vals: np.ndarray, keep: int) -> list[int]:
    """Positions of ``keep`` largest finite ``vals`` (numpy's choice among ties)."""
    n_keep = min(keep, len(vals))
    return [int(i) for i in np.argpartition(-vals, n_keep - 1)[:n_keep] if math.isfinite(vals[i])]


def unique_best(vals: np.ndarray, keep: int) -> list[int] | None:
    """:func:`partition_best` where the ``keep`` largest are one set whatever the ties
    (so the same on any superset of ``vals`` whose other values are smaller); None where
    a tie at the edge leaves numpy the choice."""
    best = partition_best(vals, keep)
    if len(vals) > keep:  # ``best`` is then numpy's ``keep`` largest, -inf left out
        edge = float(vals[best].min()) if len(best) == keep else -math.inf
        if math.isfinite(edge) and int(np.count_nonzero(vals >= edge)) > keep:
            return None
    return best


@dataclass(slots=True)
class Kept:
    """The ``keep`` largest values a pricing call has found so far (a min-heap), and what
    a row must reach to be returned: only rows at least the smallest of them can be (the
    list only rises), less a margin for bounds summed in another order than values."""

    keep: int
    heap: list[float] = field(default_factory=list)

    def add(self, value: float) -> None:
        """Keep ``value`` if it is among the ``keep`` largest seen."""
        if len(self.heap) < self.keep:
            heapq.heappush(self.heap, value)
        elif value > self.heap[0]:
            heapq.heapreplace(self.heap, value)

    def reach(self) -> float:
        """What a row's bound must reach to be looked at (-inf: every row, as before the
        list is full, or with :data:`PRUNE` off)."""
        if not PRUNE or len(self.heap) < self.keep:
            return -math.inf
        floor = self.heap[0]
        return floor - ROUND_MARGIN * (1.0 + abs(floor))


def fill_table(
    room: np.ndarray, inside: np.ndarray, price: np.ndarray, cap: np.ndarray
) -> np.ndarray:
    """Per set (rows of ``inside``) and room (columns): the best value of giving the room
    to the set's parts at ``price`` per unit, at most ``cap`` each (positive prices only;
    a fractional knapsack with unit weights, so greedy by price is exact)."""
    out = np.zeros((inside.shape[0], len(room)))
    start = np.zeros((inside.shape[0], 1))
    for t in np.argsort(-price, kind="stable"):
        if price[t] <= 0:
            break
        cap_t = inside[:, t : t + 1] * cap[t]
        out += price[t] * np.clip(room[None] - start, 0.0, cap_t)
        start = start + cap_t
    return out
