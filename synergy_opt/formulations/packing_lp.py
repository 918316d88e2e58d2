"""The pattern LP of a packing at fixed points: a proof, in milliseconds, that none exists.

``formulations/packing_lp.md`` states it.  CP-SAT (:mod:`.packing_cp`) finds a packing
quickly when there is one, but proving that there is none is a search over which server
holds what, and its budget runs out first: on 36 split-penalty 128-GPU rounds whose
full-server points were tried, it packed 8, refuted 7 and spent its whole budget (3.6-5.9 s
of this machine's wall clock) on the other 21.  This LP relaxes the packing per class of
identical servers (a server's *content*: how many whole jobs of each group it holds; spread
jobs as GPUs, cores and GB taken from what whole jobs leave, cores and GB only on servers
with a free GPU).  Each content of every server in a packing is a column, so a packing
makes the LP's shortfall zero: a positive shortfall proves that no packing exists.  The
contents are listed outright (a few hundred to a few thousand at 128 GPUs), so there is no
pricing: one LP.

Memory is in the CP-SAT model's units (:data:`~.packing_data.MEM_UNIT_GB`, demands up,
capacities down), so a refutation here is a refutation of that model.  Plain data and a
:class:`~synergy_opt.matrix.MatrixModel`; the Pyomo reference is
:func:`synergy_opt.formulations.packing.build_packing_lp`, over the same listing.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from synergy_opt.formulations.packing_data import PackingData, units_down, units_up
from synergy_opt.matrix import MatrixModel, triplet_model
from synergy_opt.solve import TerminationStatus, solve_matrix

#: Contents listed at most, over all classes: past this the LP is not built (``None``) and
#: the packing is left to CP-SAT.  Split-penalty 128-GPU rounds at their full-server points
#: have 178-1442; a class of 8-GPU servers with 30 groups of 1-GPU jobs would have millions.
MAX_CONTENTS: int = 50_000
#: Shortfall (a share of the rows' right-hand sides, summed) above which the LP refutes a
#: packing.  LP round-off is about 1e-9 here; refutations seen are 0.06 and up.
REFUTE_TOL: float = 1e-5
#: The integral LP (:func:`whole_contents`): a node limit (the same answer on every run)
#: and its gap (attempts after the first differ by their costs only).
IP_NODES: int = 500
IP_REL_GAP: float = 1e-3
#: Where no job is spread, every integral solution is a packing, so which one is found does
#: not matter and the integral LP takes the cheapest way to one: its LP first, whose vertex
#: (primal simplex) is often integral already, then the MIP without presolve
#: (:data:`IP_FAST_OPTIONS`), which on these few rows (7-9) costs more than it saves.
#: Single-GPU 128 GPUs seeds 18, 19: 2-3 ms against 47-79 ms; seeds 7, 16 (vertex not
#: integral): 21-29 ms against 49-96 ms (2026-12-07).  With spread jobs the contents decide
#: whether they can be placed around them, and the MIP's own solution is kept: the fast way
#: there cost split penalties 128 GPUs seed 19 its 3.5-s proof at ``opt-exact``'s 10 s.
IP_FAST_WITHOUT_SPREAD: bool = True
IP_FAST_OPTIONS: Mapping[str, str] = MappingProxyType({"presolve": "off"})


@dataclass(frozen=True, slots=True, eq=False)
class ServerClass:
    """Identical servers: one shape, the same whole groups allowed, and whether any spread
    job may use them; ``contents[i, g]`` whole jobs of ``groups[g]`` in content ``i``."""

    servers: tuple[int, ...]
    gpus: int
    cpus: int
    mem: int
    groups: tuple[int, ...]
    spread: bool
    contents: np.ndarray

    def leftovers(self, data: PackingData) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """GPUs, cores and memory units each content leaves to spread jobs (none on a class
        no spread job may use; cores and memory only where a GPU is left for a part)."""
        n = self.contents
        if not self.spread:
            zero = np.zeros(n.shape[0], dtype=np.int64)
            return zero, zero, zero
        g = np.array([data.groups[d].gpus for d in self.groups], dtype=np.int64)
        c = np.array([data.groups[d].cpus for d in self.groups], dtype=np.int64)
        m = np.array([units_up(data.groups[d].mem_gb) for d in self.groups], dtype=np.int64)
        free_g = self.gpus - n @ g
        part = free_g >= 1
        return free_g, np.where(part, self.cpus - n @ c, 0), np.where(part, self.mem - n @ m, 0)


@dataclass(frozen=True, slots=True, eq=False)
class PatternListing:
    """Every content of every class of servers, with what the packing must hold."""

    data: PackingData
    classes: tuple[ServerClass, ...]
    #: Whole jobs per group.
    need: tuple[int, ...]
    #: GPUs, cores and memory units of the spread jobs, summed.
    spread_need: tuple[int, int, int]

    @property
    def num_contents(self) -> int:
        """Columns of the LP's ``z``."""
        return sum(k.contents.shape[0] for k in self.classes)


@dataclass(frozen=True, slots=True)
class LpVerdict:
    """The LP's shortfall (``None``: not built, too many contents, or not solved) and
    whether that refutes every packing; ``listing`` and its LP ``matrix`` where they were
    built (the integral contents reuse both)."""

    shortfall: float | None
    refuted: bool
    contents: int
    seconds: float
    listing: PatternListing | None = None
    matrix: MatrixModel | None = None


def _contents(caps: list[int], dem: np.ndarray, room: np.ndarray, limit: int) -> np.ndarray | None:
    """Every vector n (n[g] <= caps[g]) with dem @ n <= room, grown one group at a time;
    ``None`` past ``limit`` rows."""
    rows = np.zeros((1, 0), dtype=np.int64)
    used = np.zeros((1, dem.shape[0]), dtype=np.int64)
    for g, cap in enumerate(caps):
        parts_n, parts_u = [], []
        for k in range(cap + 1):
            u = used + k * dem[:, g]
            ok = (u <= room).all(axis=1)
            if not ok.any():
                break
            col = np.full((int(ok.sum()), 1), k, dtype=np.int64)
            parts_n.append(np.hstack([rows[ok], col]))
            parts_u.append(u[ok])
        rows, used = np.vstack(parts_n), np.vstack(parts_u)
        if rows.shape[0] > limit:
            return None
    return rows


def pattern_listing(data: PackingData, limit: int = MAX_CONTENTS) -> PatternListing | None:
    """Classes of identical servers and their contents; ``None`` past ``limit`` contents."""
    mems = [units_up(gr.mem_gb) for gr in data.groups]
    keyed: dict[tuple[int, int, int, tuple[int, ...], bool], list[int]] = {}
    for s, (g, c, gb) in enumerate(data.servers):
        allowed = tuple(d for d, gr in enumerate(data.groups) if s in gr.servers)
        spread = any(s in sj.servers for sj in data.spread)
        keyed.setdefault((g, c, units_down(gb), allowed, spread), []).append(s)
    classes: list[ServerClass] = []
    left = limit
    for (g, c, m, allowed, spread), servers in keyed.items():
        dem = np.array(
            [[data.groups[d].gpus, data.groups[d].cpus, mems[d]] for d in allowed],
            dtype=np.int64,
        ).reshape(len(allowed), 3)
        caps = [min(len(data.groups[d].jobs), g // data.groups[d].gpus) for d in allowed]
        rows = _contents(caps, dem.T, np.array([g, c, m], dtype=np.int64), left)
        if rows is None:
            return None
        left -= rows.shape[0]
        classes.append(ServerClass(tuple(servers), g, c, m, allowed, spread, rows))
    spread_need = (
        sum(sj.job.gpus for sj in data.spread),
        sum(sj.cpus for sj in data.spread),
        sum(units_up(sj.mem_gb) for sj in data.spread),
    )
    need = tuple(len(gr.jobs) for gr in data.groups)
    return PatternListing(data, tuple(classes), need, spread_need)


def build_packing_lp_matrix(lst: PatternListing) -> MatrixModel:
    """(plp0)-(plp5) of ``formulations/packing_lp.md`` as a minimising matrix model: columns
    ``z`` (one per content, class by class), then ``short`` (one per row after plp1)."""
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    names = [f"plp1_servers[{k}]" for k in range(len(lst.classes))]
    names += [f"plp2_whole_jobs[{d}]" for d in range(len(lst.need))]
    spread_rows = [r for r, need in enumerate(lst.spread_need) if need > 0]
    spread_names = ("plp3_spread_gpus", "plp4_spread_cpus", "plp5_spread_mem")
    names += [spread_names[r] for r in spread_rows]
    first_group, first_spread = len(lst.classes), len(lst.classes) + len(lst.need)
    col = 0
    for k, sc in enumerate(lst.classes):
        left = sc.leftovers(lst.data)
        for i in range(sc.contents.shape[0]):
            rows.append(k)
            cols.append(col)
            vals.append(1.0)
            for g, d in enumerate(sc.groups):
                if sc.contents[i, g]:
                    rows.append(first_group + d)
                    cols.append(col)
                    vals.append(float(sc.contents[i, g]))
            for at, r in enumerate(spread_rows):
                if left[r][i]:
                    rows.append(first_spread + at)
                    cols.append(col)
                    vals.append(float(left[r][i]))
            col += 1
    rhs = [float(n) for n in lst.need] + [float(lst.spread_need[r]) for r in spread_rows]
    cost = [0.0] * col
    for at, need in enumerate(rhs):  # short[r]: the row's shortfall, a share of its need
        rows.append(first_group + at)
        cols.append(col)
        vals.append(1.0)
        cost.append(1.0 / need if need > 0 else 0.0)
        col += 1
    inf = float("inf")
    mm = triplet_model(
        rows,
        cols,
        vals,
        cost,
        [inf] * col,
        [False] * col,
        [-inf] * len(lst.classes) + rhs,
        [float(len(sc.servers)) for sc in lst.classes] + [inf] * len(rhs),
        name="packing_lp",
        row_names=names,
    )
    return dataclasses.replace(mm, maximize=False)


def refute_packing(data: PackingData, limit: int = MAX_CONTENTS) -> LpVerdict:
    """Whether the pattern LP proves that ``data`` has no packing (its shortfall above
    :data:`REFUTE_TOL`); not refuted where the listing passes ``limit`` contents."""
    t0 = time.perf_counter()
    lst = pattern_listing(data, limit)
    if lst is None:
        return LpVerdict(None, False, 0, time.perf_counter() - t0)
    mm = build_packing_lp_matrix(lst)
    res = solve_matrix(mm)
    if res.status is not TerminationStatus.OPTIMAL or res.objective is None:
        return LpVerdict(None, False, lst.num_contents, time.perf_counter() - t0, lst, mm)
    short = float(res.objective)
    seconds = time.perf_counter() - t0
    return LpVerdict(short, short > REFUTE_TOL, lst.num_contents, seconds, lst, mm)


def whole_contents(
    lst: PatternListing,
    attempt: int = 0,
    time_limit: float | None = None,
    lp: MatrixModel | None = None,
) -> dict[tuple[int, int], int] | None:
    """Whole jobs per (group, server) from an integral solution of the LP with no shortfall
    (z integer: every server gets one listed content), or ``None`` where there is none
    within :data:`IP_NODES` nodes (and ``time_limit``).  Attempt 0 takes any solution;
    attempt k > 0 minimises small costs on z drawn from a generator seeded with k, so
    that each attempt lands on another solution, the same one on every run.

    The spread jobs are summed in this IP, so a solution need not leave each spread job
    room next to its own GPUs: the caller places them (CP-SAT with these whole jobs fixed)
    and tries another attempt where they do not fit; without spread jobs any solution is
    a packing, and the cheapest way to one is taken (:data:`IP_FAST_WITHOUT_SPREAD`).
    ``lp``: ``lst``'s LP (:func:`build_packing_lp_matrix`), where the caller built it once
    for all attempts."""
    mm = build_packing_lp_matrix(lst) if lp is None else lp
    nz = lst.num_contents
    cost = np.zeros(mm.num_cols)
    if attempt:
        cost[:nz] = np.random.default_rng(attempt).random(nz)
    upper = mm.col_upper.copy()
    upper[nz:] = 0.0  # no shortfall: every whole job held, the spread jobs' sums met
    integer = np.zeros(mm.num_cols, dtype=bool)
    integer[:nz] = True
    ip = dataclasses.replace(mm, cost=cost, col_upper=upper, integer=integer, name="packing_ip")
    fast = IP_FAST_WITHOUT_SPREAD and not lst.data.spread
    res = solve_matrix(
        ip,
        time_limit=time_limit,
        rel_gap=IP_REL_GAP,
        node_limit=IP_NODES,
        lp_first=fast,
        highs_options=IP_FAST_OPTIONS if fast else None,
    )
    if res.x is None:
        return None
    z = np.rint(res.x[:nz]).astype(np.int64)
    whole: dict[tuple[int, int], int] = {}
    at = 0
    for sc in lst.classes:
        servers = iter(sc.servers)
        for i in range(sc.contents.shape[0]):
            for _ in range(int(z[at + i])):
                s = next(servers)
                for g, d in enumerate(sc.groups):
                    if sc.contents[i, g]:
                        whole[d, s] = int(sc.contents[i, g])
        at += sc.contents.shape[0]
    return whole
