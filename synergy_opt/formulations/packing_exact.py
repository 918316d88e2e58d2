"""The packing at fixed points as one exact integer program over server contents: a proof
that no packing exists where the pattern LP and the arc flow see none.

``formulations/packing_exact.md`` states it.  The pattern LP (:mod:`.packing_lp`) sums the
spread jobs, and the arc flow (:mod:`.packing_flow`) drops memory, so neither sees that one
spread job's cores and memory must sit on the servers that hold its own GPUs.  Where
branch-and-price's best leaf puts every job at one point and neither refutes it, the leaf
MIP stalls and the search ends unproven (split penalties 128 GPUs seed 319: the leaf at
56.706, the root's bound, through 7 s of slices).  This program keeps each spread job
apart: a server's column is its whole jobs' content *and* the set of spread jobs with a
part on it, and each spread job's GPUs, cores and memory on a column's servers are summed
per job.  Servers of one class with the same column are interchangeable, so those sums lose
nothing (the markdown's proof): it is exact, and an infeasible verdict refutes the packing.
Its demands are rounded down and capacities up (memory in :data:`.packing_data.MEM_UNIT_GB`
units), so a refutation holds for the real packing too.  A solution is turned back into a
packing server by server (:func:`packing_from_solution`, the markdown's second proof) and
checked at the real cores and GB: where that rounding is all that made it fit, there is no
packing to offer, only the verdict.

It is slow where the pattern LP is fast (HiGHS 2.8-13.6 s on seed 319's two stalled
leaves), so branch-and-price asks it only where the search would otherwise end
(:data:`~.branch_price.EXACT_LATE`).  Free classes (:class:`.packing_data.FreeGroup`) are
not stated.

Public API::

    exact_listing(data, limit) -> ExactListing | None
    build_exact_packing_matrix(lst) -> MatrixModel
    refute_exactly(data, time_limit, limit) -> ExactVerdict
    packing_from_solution(lst, x) -> ExactPacking | None
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass

import numpy as np

from synergy_opt.formulations.packing_data import MEM_UNIT_GB, PackingData, units_down, units_up
from synergy_opt.formulations.packing_lp import _contents
from synergy_opt.matrix import MatrixModel, triplet_model
from synergy_opt.solve import TerminationStatus, solve_matrix

#: Columns ``z`` at most (a content and a set of spread jobs per column): past this the
#: program is not built.  Split penalties 128 GPUs seeds 300, 313 and 319's stalled leaves
#: have 582-6,122 (2-3 spread jobs).
MAX_COLUMNS: int = 20_000


@dataclass(frozen=True, slots=True, eq=False)
class ExactClass:
    """Identical servers (one shape, the same whole groups and spread jobs allowed) and
    their columns: ``contents[i, g]`` whole jobs of ``groups[g]`` in content ``i``, and the
    (content, spread jobs) pairs of ``columns``."""

    servers: tuple[int, ...]
    gpus: int
    cpus: int
    mem: int
    groups: tuple[int, ...]
    spread: tuple[int, ...]
    contents: np.ndarray
    columns: tuple[tuple[int, tuple[int, ...]], ...]

    def left(self, i: int, groups: np.ndarray) -> tuple[int, int, int]:
        """GPUs, cores and memory units content ``i`` leaves (``groups``: per allowed
        group, its GPUs, cores and units)."""
        used = self.contents[i] @ groups  # zeros where no group is allowed (shape (0, 3))
        return int(self.gpus - used[0]), int(self.cpus - used[1]), int(self.mem - used[2])


@dataclass(frozen=True, slots=True, eq=False)
class ExactListing:
    """Every class's columns, with the demands rounded against a refutation."""

    data: PackingData
    classes: tuple[ExactClass, ...]
    #: GPUs, cores and memory units per whole group (rounded down).
    group_need: np.ndarray
    #: GPUs, cores and memory units per spread job (cores and units rounded down).
    spread_need: tuple[tuple[int, int, int], ...]

    @property
    def num_columns(self) -> int:
        """Columns ``z``."""
        return sum(len(k.columns) for k in self.classes)

    def demands(self, k: int) -> np.ndarray:
        """GPUs, cores and units of class k's allowed groups, one row each."""
        return self.group_need[list(self.classes[k].groups)].reshape(-1, 3)


#: Real GB a server's parts may pass its memory by (round-off), and a spread job's parts
#: fall short of its point by; below the checker's own slack (``check.ABS_TOL``).
GB_SLACK: float = 1e-7


@dataclass(frozen=True, slots=True)
class ExactPacking:
    """A packing read from a solution (:func:`packing_from_solution`), in the shapes of
    :class:`.packing_cp.PackingResult`: per job its (server, GPUs) parts, and per spread job
    the (server, cores, GB) it draws from each server of its span."""

    plan: dict[str, tuple[tuple[int, int], ...]]
    resources: dict[str, tuple[tuple[int, int, float], ...]]


@dataclass(frozen=True, slots=True)
class ExactVerdict:
    """``status``: "infeasible" (no packing: a proof), "feasible", or "unknown" (not built,
    past :data:`MAX_COLUMNS` or free classes, or out of time).  ``packing``: where feasible,
    the solution as a packing at the real cores and GB (``None`` where the rounding made it
    fit)."""

    status: str
    columns: int
    seconds: float
    packing: ExactPacking | None = None

    @property
    def refuted(self) -> bool:
        """Whether the program proves that no packing exists."""
        return self.status == "infeasible"


def exact_listing(data: PackingData, limit: int = MAX_COLUMNS) -> ExactListing | None:
    """Classes of identical servers and their (content, spread set) columns, demands
    rounded down and capacities up; ``None`` with free classes or past ``limit`` columns."""
    if data.free:
        return None
    need = np.array(
        [[gr.gpus, gr.cpus, units_down(gr.mem_gb)] for gr in data.groups], dtype=np.int64
    ).reshape(len(data.groups), 3)
    keyed: dict[tuple[int, int, int, tuple[int, ...], tuple[int, ...]], list[int]] = {}
    for s, (g, c, gb) in enumerate(data.servers):
        groups = tuple(d for d, gr in enumerate(data.groups) if s in gr.servers)
        spread = tuple(j for j, sj in enumerate(data.spread) if s in sj.servers)
        keyed.setdefault((g, c, units_up(gb), groups, spread), []).append(s)
    classes: list[ExactClass] = []
    left = limit
    for (g, c, m, groups, spread), servers in keyed.items():
        dem = need[list(groups)].reshape(-1, 3)
        caps = [min(len(data.groups[d].jobs), g // data.groups[d].gpus) for d in groups]
        rows = _contents(caps, dem.T, np.array([g, c, m], dtype=np.int64), left)
        if rows is None:
            return None
        free_gpus = g - rows @ dem[:, 0]
        cols: list[tuple[int, tuple[int, ...]]] = []
        for i in range(rows.shape[0]):
            for size in range(min(len(spread), int(free_gpus[i])) + 1):
                cols += [(i, tj) for tj in itertools.combinations(spread, size)]
        left -= len(cols)
        if left < 0:
            return None
        classes.append(ExactClass(tuple(servers), g, c, m, groups, spread, rows, tuple(cols)))
    spread_need = tuple((sj.job.gpus, sj.cpus, units_down(sj.mem_gb)) for sj in data.spread)
    return ExactListing(data, tuple(classes), need, spread_need)


def build_exact_packing_matrix(lst: ExactListing) -> MatrixModel:
    """(pe1)-(pe9) of ``formulations/packing_exact.md`` as a feasibility matrix model
    (objective 0): per class its columns ``z`` in order, each followed by the ``a``, ``p``
    and ``q`` of its spread jobs."""
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    names: list[str] = []
    lower: list[float] = []
    upper: list[float] = []
    integer: list[bool] = []

    def row(name: str, lo: float, up: float) -> int:
        names.append(name)
        lower.append(lo)
        upper.append(up)
        return len(names) - 1

    def put(r: int, c: int, v: float) -> None:
        rows.append(r)
        cols.append(c)
        vals.append(v)

    def col(is_int: bool) -> int:
        integer.append(is_int)
        return len(integer) - 1

    servers = [
        row(f"pe1_servers[{k}]", -math.inf, len(sc.servers)) for k, sc in enumerate(lst.classes)
    ]
    whole = [
        row(f"pe2_whole_jobs[{d}]", len(gr.jobs), len(gr.jobs))
        for d, gr in enumerate(lst.data.groups)
    ]
    gpus = [row(f"pe3_spread_gpus[{j}]", n[0], n[0]) for j, n in enumerate(lst.spread_need)]
    cpus = [row(f"pe4_spread_cpus[{j}]", n[1], math.inf) for j, n in enumerate(lst.spread_need)]
    mem = [row(f"pe5_spread_mem[{j}]", n[2], math.inf) for j, n in enumerate(lst.spread_need)]
    for k, sc in enumerate(lst.classes):
        dem = lst.demands(k)
        for i, tj in sc.columns:
            z = col(True)
            put(servers[k], z, 1.0)
            for g, d in enumerate(sc.groups):
                if sc.contents[i, g]:
                    put(whole[d], z, float(sc.contents[i, g]))
            if not tj:
                continue
            gl, cl, ml = sc.left(i, dem)
            at = f"{k},{i},{'+'.join(map(str, tj))}"
            caps = (
                row(f"pe7_gpus_left[{at}]", -math.inf, 0.0),
                row(f"pe8_cpus_left[{at}]", -math.inf, 0.0),
                row(f"pe9_mem_left[{at}]", -math.inf, 0.0),
            )
            for r, have in zip(caps, (gl, cl, ml), strict=True):
                put(r, z, -float(have))
            for j in tj:
                a, p, q = col(True), col(True), col(False)
                part = row(f"pe6_part_gpus[{j},{at}]", 0.0, math.inf)
                put(part, a, 1.0)
                put(part, z, -1.0)
                for r, c in zip((*caps, gpus[j], cpus[j], mem[j]), (a, p, q, a, p, q), strict=True):
                    put(r, c, 1.0)
    n = len(integer)
    return triplet_model(
        rows,
        cols,
        vals,
        [0.0] * n,
        [math.inf] * n,
        integer,
        lower,
        upper,
        name="packing_exact",
        row_names=names,
    )


def refute_exactly(
    data: PackingData, time_limit: float | None, limit: int = MAX_COLUMNS
) -> ExactVerdict:
    """Whether the exact program proves within ``time_limit`` that ``data`` has no packing
    ("infeasible"), finds that it has one ("feasible"), or neither ("unknown"; with 0
    ``columns`` where it was not built: free classes, or more than ``limit`` columns)."""
    t0 = time.perf_counter()
    lst = exact_listing(data, limit)
    if lst is None:
        return ExactVerdict("unknown", 0, time.perf_counter() - t0)
    res = solve_matrix(build_exact_packing_matrix(lst), time_limit=time_limit, guard=True)
    status = {
        TerminationStatus.INFEASIBLE: "infeasible",
        TerminationStatus.OPTIMAL: "feasible",
    }.get(res.status, "unknown")
    packing = None
    if status == "feasible" and res.x is not None:
        packing = packing_from_solution(lst, res.x)
    return ExactVerdict(status, lst.num_columns, time.perf_counter() - t0, packing)


@dataclass(frozen=True, slots=True)
class _Column:
    """One column of a solution: ``servers`` (real server indices, z of them) each holding
    content ``content``, and per spread job of the column its summed GPUs, cores and units."""

    cls: ExactClass
    content: int
    servers: tuple[int, ...]
    parts: dict[int, tuple[int, int, float]]


def _columns_of(lst: ExactListing, x: np.ndarray) -> list[_Column] | None:
    """The used columns of solution ``x`` (the matrix's column order: each z, then a, p, q
    per spread job), each given its servers from its class in order; ``None`` where the
    values are not integral where they must be or ask for more servers than a class has."""
    out: list[_Column] = []
    at = 0
    for sc in lst.classes:
        free = list(sc.servers)
        for i, tj in sc.columns:
            z = int(round(x[at]))
            parts: dict[int, tuple[int, int, float]] = {}
            ints = [x[at]]
            at += 1
            for j in tj:
                parts[j] = (int(round(x[at])), int(round(x[at + 1])), float(x[at + 2]))
                ints += [x[at], x[at + 1]]
                at += 3
            if any(abs(v - round(v)) > 1e-6 for v in ints) or z > len(free):
                return None
            if z > 0:
                out.append(_Column(sc, i, tuple(free[:z]), parts))
                del free[:z]
    return out


def _fill(amounts: dict[int, float], caps: list[float]) -> dict[int, list[float]] | None:
    """Each amount split over the servers one server at a time, each server up to its cap
    (next fit: exact where they sum to at most the caps' sum; the last server takes
    round-off below :data:`GB_SLACK`); ``None`` where they do not fit."""
    left = list(caps)
    out: dict[int, list[float]] = {j: [0.0] * len(caps) for j in amounts}
    s = 0
    for j, amount in amounts.items():
        while amount > GB_SLACK:
            if s == len(left):
                return None
            take = min(amount, max(left[s], 0.0))
            out[j][s] += take
            left[s] -= take
            amount -= take
            if left[s] <= 0:
                s += 1
        if amount > 0:
            out[j][min(s, len(left) - 1)] += amount
    return out


def _trimmed(
    cols: list[_Column], j: int, need: float, field: int, unit: float
) -> list[float] | None:
    """Spread job ``j``'s cores (``field`` 1) or GB (2, ``unit`` GB a unit) per column,
    summing to exactly ``need``: the solution's surplus taken back from the last columns
    first; a shortfall (memory rounded down) added to the first column (the real check
    after decides)."""
    got = [c.parts[j][field] * unit if j in c.parts else 0.0 for c in cols]
    surplus = math.fsum(got) - need
    for c in reversed(range(len(got))):
        if surplus <= 0:
            break
        cut = min(surplus, got[c])
        got[c] -= cut
        surplus -= cut
    if surplus < 0:
        first = next((c for c, col in enumerate(cols) if j in col.parts), None)
        if first is None:
            return None
        got[first] -= surplus
    return got


def packing_from_solution(lst: ExactListing, x: np.ndarray) -> ExactPacking | None:
    """Solution ``x`` of :func:`build_exact_packing_matrix` as a packing, by the markdown's
    "every solution is a packing": each column's servers get its content's whole jobs, one
    GPU of each of its spread jobs and their further GPUs, cores and GB filled one server at
    a time.  Each spread job takes exactly its point's cores and GB (the solution's surplus
    trimmed).  Checked at the real cores and GB; ``None`` where it does not fit there (the
    program's demands are rounded down and capacities up) or ``x`` is not a solution."""
    cols = _columns_of(lst, x)
    if cols is None:
        return None
    data = lst.data
    members = [iter(gr.jobs) for gr in data.groups]
    plan: dict[str, tuple[tuple[int, int], ...]] = {}
    used = [[0, 0, 0.0] for _ in data.servers]  # GPUs, cores, GB per server
    gpus: dict[int, dict[int, int]] = {j: {} for j in range(len(data.spread))}
    drawn: dict[int, dict[int, list[float]]] = {j: {} for j in range(len(data.spread))}
    cores: list[list[float]] = []  # per spread job, its cores per column
    mem: list[list[float]] = []  # and its GB
    for j, sj in enumerate(data.spread):
        got_c = _trimmed(cols, j, sj.cpus, 1, 1.0)
        got_m = _trimmed(cols, j, sj.mem_gb, 2, MEM_UNIT_GB)
        if got_c is None or got_m is None:
            return None  # a spread job in no column: (pe3) does not hold
        cores.append(got_c)
        mem.append(got_m)
    for c, col in enumerate(cols):
        sc = col.cls
        for g, d in enumerate(sc.groups):
            gr = data.groups[d]
            for s in col.servers:
                for _ in range(int(sc.contents[col.content, g])):
                    job = next(members[d], None)
                    if job is None:
                        return None
                    plan[job.id] = ((s, gr.gpus),)
                    used[s][0] += gr.gpus
                    used[s][1] += gr.cpus
                    used[s][2] += gr.mem_gb
        if not col.parts:
            continue
        n = len(col.servers)
        extra = {j: float(a - n) for j, (a, _, _) in col.parts.items()}
        if min(extra.values()) < 0:
            return None  # (pe6): a part on every server of the column
        room = [float(data.servers[s][0] - used[s][0] - len(col.parts)) for s in col.servers]
        g_fill = _fill(extra, room)
        c_fill = _fill(
            {j: cores[j][c] for j in col.parts},
            [float(data.servers[s][1] - used[s][1]) for s in col.servers],
        )
        m_fill = _fill(
            {j: mem[j][c] for j in col.parts},
            [data.servers[s][2] - used[s][2] for s in col.servers],
        )
        if g_fill is None or c_fill is None or m_fill is None:
            return None
        for j in col.parts:
            for t, s in enumerate(col.servers):
                gpus[j][s] = gpus[j].get(s, 0) + 1 + int(round(g_fill[j][t]))
                at = drawn[j].setdefault(s, [0.0, 0.0])
                at[0] += c_fill[j][t]
                at[1] += m_fill[j][t]
    for j, sj in enumerate(data.spread):
        parts = gpus[j]
        if sum(parts.values()) != sj.job.gpus or not set(parts) <= set(sj.servers):
            return None
        plan[sj.job.id] = tuple(sorted(parts.items()))
        for s, g in parts.items():
            used[s][0] += g
            used[s][1] += int(round(drawn[j][s][0]))
            used[s][2] += drawn[j][s][1]
    if len(plan) != sum(len(gr.jobs) for gr in data.groups) + len(data.spread):
        return None
    for j, sj in enumerate(data.spread):
        got = drawn[j].values()
        if sum(int(round(cp)) for cp, _ in got) < sj.cpus:
            return None
        if math.fsum(gb for _, gb in got) < sj.mem_gb - GB_SLACK:
            return None
    for (g, c, gb), (ug, uc, um) in zip(data.servers, used, strict=True):
        if ug > g or uc > c or um > gb + GB_SLACK:
            return None
    resources = {
        sj.job.id: tuple(
            (s, int(round(cp)), gb) for s, (cp, gb) in sorted(drawn[j].items()) if cp or gb
        )
        for j, sj in enumerate(data.spread)
    }
    return ExactPacking(plan, resources)
