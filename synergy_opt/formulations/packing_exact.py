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
units), so a refutation holds for the real packing too.

It is slow where the pattern LP is fast (HiGHS 2.8-13.6 s on seed 319's two stalled
leaves), so branch-and-price asks it only where the search would otherwise end
(:data:`~.branch_price.EXACT_LATE`).  Free classes (:class:`.packing_data.FreeGroup`) are
not stated.

Public API::

    exact_listing(data, limit) -> ExactListing | None
    build_exact_packing_matrix(lst) -> MatrixModel
    refute_exactly(data, time_limit, limit) -> ExactVerdict
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass

import numpy as np

from synergy_opt.formulations.packing_data import PackingData, units_down, units_up
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


@dataclass(frozen=True, slots=True)
class ExactVerdict:
    """``status``: "infeasible" (no packing: a proof), "feasible", or "unknown" (not built,
    past :data:`MAX_COLUMNS` or free classes, or out of time)."""

    status: str
    columns: int
    seconds: float

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
    return ExactVerdict(status, lst.num_columns, time.perf_counter() - t0)
