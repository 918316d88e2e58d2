"""Heuristic pattern pricing by dynamic programming on a grid of GPUs, cores and GB units.

Where a server class's whole-job contents are too many to list
(:data:`~synergy_opt.formulations.pricing_enum.MAX_ROWS`), each pricing call is a MIP of
20-50 ms, and column generation calls it hundreds of times per node (split-penalty
128-GPU seed 8: 184 calls, 6.7 s of a 12-s search).  Most calls only have to find *some*
improving pattern; a proof that none exists is needed once per node's convergence.  This
pricer finds good patterns in a few milliseconds, and column generation
(:class:`~synergy_opt.formulations.branch_node._Pricer`) calls the exact MIP only where
it finds none (``formulations/branch_price.md``, "Heuristic pricing").

The whole jobs' GB are rounded to units of the server's GB / n (the smallest n up to
:data:`MAX_UNITS` that puts every column within :data:`UNIT_SLACK` of a unit; the
generated profiles' memory points are multiples of M/24 to two decimals).  A dynamic
program over (GPUs, cores, units) then gives the best whole jobs per cell, one stage at a
time: interchangeable columns (classes without a ``pat_one_role`` row, grouped by
resources: t copies are worth the t best), a class with a ``pat_one_role`` row (the
multisets of its points), and last the classes with slots, each on an axis of its own
(their counts decide which sets of slots fit) while the cells multiply by at most
:data:`MAX_SIGS`; the other classes with slots are plain stages, their patterns checked
against ``pat_one_role`` when rebuilt.  Per set of slots the parts fill what is
left (:class:`~synergy_opt.formulations.pricing_enum.SlotSide`).  The rounding makes it a
heuristic: each pattern returned is rebuilt with its real GB, checked against the server's
GB, and valued exactly, so column generation only ever sees true reduced values; the
call's best value is not a bound.

Public API::

    GridPricer.build(data, s) -> GridPricer | None
    GridPricer.solve(cost, upper, keep) -> list[np.ndarray]   # solutions, best first
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from synergy_opt.formulations.patterns import one_role_classes, server_columns
from synergy_opt.formulations.pricing_enum import MEM_TOL, SlotSide
from synergy_opt.formulations.pricing_sets import fill_table

log = logging.getLogger(__name__)

#: The finest grid tried: the server's GB in at most this many units.
MAX_UNITS: int = 64
#: A column's GB may be this far (a share of one unit) from its rounded units.
UNIT_SLACK: float = 0.01
#: The classes with slots multiply the cells by at most this (one axis each, while it holds).
MAX_SIGS: int = 32
#: No grid where one class's multisets of points (before the capacities) pass this many.
MAX_OPTIONS: int = 20_000
#: Sets of slots are scored this many at a time, best bound first.
SET_CHUNK: int = 16
#: Candidates rebuilt per call, as a multiple of the solutions asked for (some fail the
#: real GB, some repeat a content).
CANDIDATES: int = 1


@dataclass(frozen=True, slots=True)
class _Stage:
    """One step of the program: its options (copies of its columns) and their resources.

    ``comp[o]`` counts option o's copies of each of ``cols``; option 0 is empty.  A
    ``group`` stage's columns are interchangeable (same resources, no shared cap): its
    option t holds t copies, the t best at each call (``comp`` is then unused).  ``axis``
    is the stage's class-with-slots number, -1 for the others."""

    cols: np.ndarray
    comp: np.ndarray
    copies: np.ndarray
    dg: np.ndarray
    dc: np.ndarray
    dm: np.ndarray
    group: bool
    axis: int
    # options sorted by resources: ``key[o]`` numbers option o's (copies, GPUs, cores,
    # units), ``starts`` the first option of each; per call only each key's best is tried
    key: np.ndarray
    starts: np.ndarray

    @classmethod
    def of(
        cls, cols: np.ndarray, comp: np.ndarray, res: np.ndarray, group: bool, axis: int
    ) -> _Stage:
        """A stage from its options' copies and resources (rows: copies, GPUs, cores,
        units), sorted by resources, the empty option first."""
        order = np.lexsort(res.T[::-1])
        res, comp = res[order], comp[order] if len(comp) else comp
        new = np.r_[True, np.any(res[1:] != res[:-1], axis=1)]
        return cls(
            cols,
            comp,
            res[:, 0],
            res[:, 1],
            res[:, 2],
            res[:, 3],
            group,
            axis,
            np.cumsum(new) - 1,
            np.flatnonzero(new),
        )


@dataclass(frozen=True, slots=True)
class GridPricer:
    """One server class's program: its slots, its GB unit and its stages."""

    side: SlotSide
    unit: float
    mu: int
    col_m: np.ndarray  # real GB per whole-job column
    col_upper: np.ndarray
    stages: tuple[_Stage, ...]
    axes: tuple[int, ...]  # per axis: most whole copies of its class on one server, + 1
    axis_class: np.ndarray  # per axis: its class among those with slots (SlotSide's order)
    col_spread: np.ndarray  # per whole-job column: its class among those with slots, or -1

    @classmethod
    def build(cls, data: Mapping[str, Any], s: int) -> GridPricer | None:
        """Server s's program; None where no grid fits the columns' GB or a class has
        more than :data:`MAX_OPTIONS` multisets of points."""
        side = SlotSide.build(data, s)
        if side is None:
            return None
        xs, _ = server_columns(data, s)
        g, xpt = data["g"], data["x_point"]
        G, C, M = side.G, side.C, side.M
        col_g = np.asarray([int(g[k]) for k, _ in xs], dtype=np.int64)
        col_c = np.asarray([int(xpt[s, k, p][0]) for k, p in xs], dtype=np.int64)
        col_m = np.asarray([float(xpt[s, k, p][1]) for k, p in xs], dtype=np.float64)
        col_up = np.asarray([int(data["x_upper"][s, k, p]) for k, p in xs], dtype=np.int64)
        units = _units(col_m, M)
        if units is None:
            log.debug("pricing grid of server %s: no GB unit fits", s)
            return None
        n, col_u = units
        roles = set(one_role_classes(data, s))
        stages: list[_Stage] = []
        shapes: dict[tuple[int, int, int], list[int]] = {}
        by_class: dict[int, list[int]] = {}
        for j, (k, _) in enumerate(xs):
            if k in roles:
                by_class.setdefault(k, []).append(j)
            else:
                shapes.setdefault((int(col_g[j]), int(col_c[j]), int(col_u[j])), []).append(j)
        for (dg, dc, du), cols in sorted(shapes.items()):
            most = int(col_up[cols].sum())
            for size, cap in ((dg, G), (dc, C), (du, n)):
                if size > 0:
                    most = min(most, cap // size)
            t = np.arange(most + 1, dtype=np.int64)
            res = np.stack([t, dg * t, dc * t, du * t], axis=1)
            stages.append(_Stage.of(np.asarray(cols), np.zeros((0, 0)), res, True, -1))
        # classes with slots get an axis each while the cells multiply by at most
        # MAX_SIGS; the others' patterns are checked against pat_one_role when rebuilt
        axis_class: list[int] = []
        sigs = 1
        for r, k in enumerate(side.classes):
            size = min(int(data["n"][k]), G // max(1, int(g[k]))) + 1
            if k in by_class and sigs * size <= MAX_SIGS:
                axis_class.append(r)
                sigs *= size
        on_axis = {side.classes[r]: a for a, r in enumerate(axis_class)}
        for k in sorted(by_class, key=lambda k: (k in on_axis, on_axis.get(k, 0), k)):
            cols = by_class[k]
            comp = _multisets(
                [int(col_up[j]) for j in cols],
                int(data["n"][k]),
                int(g[k]),
                col_c[cols],
                col_u[cols],
                G,
                C,
                n,
            )
            if comp is None:
                log.debug("pricing grid of server %s: class %s has too many multisets", s, k)
                return None
            copies = comp.sum(1)
            res = np.stack([copies, copies * int(g[k]), comp @ col_c[cols], comp @ col_u[cols]], 1)
            stages.append(_Stage.of(np.asarray(cols), comp, res, False, on_axis.get(k, -1)))
        # per axis: its class's most whole copies on one server, + 1
        axes = tuple(int(st.comp.sum(1).max()) + 1 for st in stages if st.axis >= 0)
        col_spread = side.column_class(xs)
        return cls(
            side,
            M / n,
            n,
            col_m,
            col_up,
            tuple(stages),
            axes,
            np.asarray(axis_class, dtype=np.int64),
            col_spread,
        )

    def solve(self, cost: np.ndarray, upper: np.ndarray, *, keep: int = 8) -> list[np.ndarray]:
        """Up to ``keep`` feasible pricing vectors (the pricing matrix's column order), best
        reduced value first, each worth exactly ``cost @ x``; [] where none is found."""
        side = self.side
        nx = side.nx
        on = side.call(cost, upper)
        parts, sets, inside, per, fa, fc = on.parts, on.sets, on.inside, on.per, on.fa, on.fc
        if len(sets) == 0:
            return []
        wx = np.asarray(cost[:nx], dtype=np.float64)
        up = np.minimum(self.col_upper, np.floor(np.asarray(upper[:nx]) + 1e-9)).astype(np.int64)
        V = np.full((side.G + 1, side.C + 1, self.mu + 1), -math.inf)
        V[0, 0, 0] = 0.0
        picks: list[tuple[np.ndarray, np.ndarray]] = []  # per stage: choice array, order
        for st in self.stages:
            values, order = _option_values(st, wx, up)
            V, choice = _step(V, st, values)
            picks.append((choice, order))
        best = V.copy()
        for r, size in enumerate(self.axes):  # at most a(r) whole copies of class r
            along = np.moveaxis(best, r, 0)  # a view: writes reach ``best``
            for i in range(1, size):
                np.maximum(along[i], along[i - 1], out=along[i])
        cap = side.class_cap[None] - per
        allow = np.minimum(cap[:, self.axis_class], np.asarray(self.axes, dtype=np.int64) - 1)
        room = np.maximum(side.M - self.unit * np.arange(self.mu + 1), 0.0)
        fm = fill_table(room, inside, parts.vm, parts.Mb)
        top = self._candidates(best, allow, fa, fc, fm, keep * CANDIDATES)
        out: dict[bytes, tuple[float, np.ndarray]] = {}
        m_cap = side.M + MEM_TOL * max(1.0, side.M)
        spread = self.col_spread >= 0
        for _, u_no, gi, ci, mi in top:
            whole = self._backtrack(V, picks, allow[u_no], (int(gi), int(ci), int(mi)))
            mem = float(self.col_m @ whole)
            held = np.bincount(self.col_spread[spread], whole[spread], side.spread)
            if mem > m_cap or np.any(held > cap[u_no]):
                continue
            cols = np.repeat(np.arange(nx), whole)
            x = side.solution(sets[u_no], cols, (int(gi), int(ci), mem), parts)
            out.setdefault(x.tobytes(), (float(cost @ x), x))
        ranked = sorted(out.values(), key=lambda vx: -vx[0])
        return [x for _, x in ranked[:keep]]

    def _candidates(
        self,
        best: np.ndarray,
        allow: np.ndarray,
        fa: np.ndarray,
        fc: np.ndarray,
        fm: np.ndarray,
        want: int,
    ) -> list[tuple[float, int, int, int, int]]:
        """The ``want`` best (value, set, GPUs, cores, units) of whole jobs (``best``: per
        allowed counts of the axes' classes) plus parts, best first: sets are scored
        :data:`SET_CHUNK` at a time, best bound first, until no bound beats the
        ``want``-th value found."""
        # per set, the whole jobs' best cells where its slots allow them (built per chunk)
        cells = best.reshape(*best.shape[: len(self.axes)], -1)
        # a bound per set: its best cell per (GPUs, cores) with their fills, GB as if all left
        by_gc = _rows(best.max(-1), allow) + fa[:, :, None] + fc[:, None, :]
        ub = by_gc.reshape(len(allow), -1).max(1) + fm.max(1)
        found: list[tuple[float, int, int, int, int]] = []
        order = np.argsort(-ub, kind="stable")
        for at in range(0, len(order), SET_CHUNK):
            chunk = order[at : at + SET_CHUNK]
            if len(found) >= want:
                chunk = chunk[ub[chunk] > found[want - 1][0]]
            if chunk.size == 0 or not np.isfinite(ub[chunk]).any():
                break
            total = (
                _rows(cells, allow[chunk]).reshape(len(chunk), *best.shape[-3:])
                + fa[chunk][:, :, None, None]
                + fc[chunk][:, None, :, None]
                + fm[chunk][:, None, None, :]
            )
            flat = total.ravel()
            n = min(want, flat.size)
            pick = np.argpartition(-flat, n - 1)[:n]
            pick = pick[np.isfinite(flat[pick])]
            for f in pick:
                u, g, c, m = np.unravel_index(int(f), total.shape)
                found.append((float(flat[f]), int(chunk[u]), int(g), int(c), int(m)))
            found.sort(key=lambda t: (-t[0], t[1:]))
            del found[want:]
        return found

    def _backtrack(
        self,
        V: np.ndarray,
        picks: Sequence[tuple[np.ndarray, np.ndarray]],
        allow: np.ndarray,
        cell: tuple[int, int, int],
    ) -> np.ndarray:
        """The copies per whole-job column of the best content at ``cell`` whose counts
        of the classes with slots are within ``allow``."""
        g, c, m = cell
        box = V[tuple(slice(0, int(a) + 1) for a in allow)][..., g, c, m]
        sig = list(np.unravel_index(int(np.argmax(box)), box.shape)) if box.ndim else []
        whole = np.zeros(self.side.nx, dtype=np.int64)
        for st, (choice, order) in zip(reversed(self.stages), reversed(picks), strict=True):
            if st.axis >= 0:
                o = int(choice[(*sig, g, c, m)])
                sig.pop()
            else:
                o = int(choice[g, c, m])
            if o == 0:
                continue
            if st.group:
                np.add.at(whole, order[: int(st.copies[o])], 1)
            else:
                whole[st.cols] += st.comp[o]
            g, c, m = g - int(st.dg[o]), c - int(st.dc[o]), m - int(st.dm[o])
        return whole


def _rows(arr: np.ndarray, allow: np.ndarray) -> np.ndarray:
    """``arr`` (leading axes: the axes' counts) at each row of ``allow``, stacked."""
    if allow.shape[1] == 0:
        return np.broadcast_to(arr, (len(allow), *np.shape(arr)))
    return arr[tuple(allow.T)]


def _units(col_m: np.ndarray, M: float) -> tuple[int, np.ndarray] | None:
    """The coarsest grid of the server's GB (n units) that every column's GB is within
    :data:`UNIT_SLACK` of a unit of, and the columns' units."""
    if M <= 0:
        return None
    for n in range(1, MAX_UNITS + 1):
        u = M / n
        k = np.rint(col_m / u)
        if np.all(np.abs(col_m - k * u) <= UNIT_SLACK * u):
            return n, k.astype(np.int64)
    return None


def _most_copies(uppers: Sequence[int], n_k: int, g_k: int, G: int) -> int | None:
    """A class's most copies on one server (its members, the server's GPUs), or ``None``
    where the multisets of its points up to that size could pass :data:`MAX_OPTIONS`."""
    most = min(n_k, G // max(1, g_k))
    if math.comb(len(uppers) + most, most) > MAX_OPTIONS:
        return None
    return most


def _multisets(
    uppers: Sequence[int],
    n_k: int,
    g_k: int,
    cores: np.ndarray,
    units: np.ndarray,
    G: int,
    C: int,
    mu: int,
) -> np.ndarray | None:
    """Every count vector over one class's points (each within its upper bound, at most
    n_k in all, within the server's GPUs, cores and units), the empty one first; None
    past :data:`MAX_OPTIONS` multisets.

    In the order :func:`itertools.combinations_with_replacement` lists them, size by size
    (:func:`_multisets_listed`, the plain loop it replaces): that order breaks ties between
    options of equal resources and value, so the program's answers depend on it.  Built
    point by point with numpy, the partial sums pruned as they pass a bound (cores and units
    only grow): 24-64 ms of a 255-395 ms ``opt`` on single-GPU 128-GPU rounds seeds 1, 12
    and 27 went to the loop."""
    most = _most_copies(uppers, n_k, g_k, G)
    if most is None:
        return None
    counts = np.zeros((1, 0), dtype=np.int64)
    total = np.zeros(1, dtype=np.int64)
    used_c = np.zeros(1, dtype=np.int64)
    used_u = np.zeros(1, dtype=np.int64)
    for i, up in enumerate(uppers):
        k = np.arange(max(0, min(int(up), most)) + 1, dtype=np.int64)
        row = np.repeat(np.arange(len(counts)), len(k))
        kk = np.tile(k, len(counts))
        t, c, u = (
            total[row] + kk,
            used_c[row] + kk * int(cores[i]),
            used_u[row] + kk * int(units[i]),
        )
        ok = (t <= most) & (c <= C) & (u <= mu)
        counts = np.concatenate([counts[row[ok]], kk[ok, None]], axis=1)
        total, used_c, used_u = t[ok], c[ok], u[ok]
    # size first, then the listed order within a size: a combination with more copies of
    # an earlier point comes first, so the count vectors in descending lexicographic order
    order = np.lexsort((*(-counts[:, i] for i in range(counts.shape[1] - 1, -1, -1)), total))
    return counts[order]


def _multisets_listed(
    uppers: Sequence[int],
    n_k: int,
    g_k: int,
    cores: np.ndarray,
    units: np.ndarray,
    G: int,
    C: int,
    mu: int,
) -> np.ndarray | None:
    """:func:`_multisets` by listing every combination (the reference its tests compare
    against)."""
    most = _most_copies(uppers, n_k, g_k, G)
    if most is None:
        return None
    out: list[tuple[int, ...]] = []
    for t in range(most + 1):
        for combo in itertools.combinations_with_replacement(range(len(uppers)), t):
            cnt = [combo.count(i) for i in range(len(uppers))]
            if any(c > u for c, u in zip(cnt, uppers, strict=True)):
                continue
            if int(np.dot(cnt, cores)) <= C and int(np.dot(cnt, units)) <= mu:
                out.append(tuple(cnt))
    return np.asarray(out, dtype=np.int64).reshape(len(out), len(uppers))


def _option_values(st: _Stage, wx: np.ndarray, up: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A stage's option values at this call (-inf where a column's bound rules it out),
    and for a group its columns' copies best first (one entry per copy)."""
    if st.group:
        order = np.repeat(st.cols, up[st.cols])
        order = order[np.lexsort((order, -wx[order]))]
        cum = np.concatenate(([0.0], np.cumsum(wx[order])))
        values = np.full(len(st.copies), -math.inf)
        fits = st.copies < len(cum)
        values[fits] = cum[st.copies[fits]]
        return values, order
    ok = np.all(st.comp <= up[st.cols][None], axis=1)
    return np.where(ok, st.comp @ wx[st.cols], -math.inf), st.cols


def _step(V: np.ndarray, st: _Stage, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One stage of the program: the best value per cell (per count of the stage's class
    on a new leading axis after the others, for a class with slots) and the option taken
    (per resources only the best option at this call's values)."""
    G1, C1, M1 = V.shape[-3:]
    if st.axis >= 0:
        new = np.full((*V.shape[:-3], int(st.copies.max()) + 1, G1, C1, M1), -math.inf)
        choice = np.zeros(new.shape, dtype=np.int16)
        new[..., 0, :, :, :] = V
    else:
        new = V.copy()
        choice = np.zeros(V.shape, dtype=np.int16)
    ranked = np.lexsort((-values, st.key))  # per resources, the best option first
    for o in ranked[st.starts[1:]]:
        w = values[o]
        if not math.isfinite(w):
            continue
        dg, dc, dm = int(st.dg[o]), int(st.dc[o]), int(st.dm[o])
        if dg >= G1 or dc >= C1 or dm >= M1:
            continue
        src = V[..., : G1 - dg, : C1 - dc, : M1 - dm] + w
        at: tuple[Any, ...] = (..., slice(dg, None), slice(dc, None), slice(dm, None))
        if st.axis >= 0:
            at = (..., int(st.copies[o]), *at[1:])
        dst = new[at]
        better = src > dst
        dst[better] = src[better]
        choice[at][better] = o
    return new, choice
