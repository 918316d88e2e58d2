"""The packing's arc flow over server states: refuting a packing where whole servers matter.

``formulations/packing_flow.md`` states it.  The pattern LP (:mod:`.packing_lp`) refutes a
packing at fixed points when even fractional servers cannot hold the jobs; branch-and-price
stalls at leaves where they can (every Hall condition of the spread jobs' cores holds) and
only whole servers cannot.  Here each server is a path through states (GPUs, cores used by
its whole jobs, taken in one order of job shapes) ending in an arc that names the spread
jobs with a part on it and their GPUs there; the cores its whole jobs leave are shared among
those parts.  An integral flow of ``|k|`` paths per class of servers is exactly a packing of
GPUs and cores, so a MIP that finds none proves that no packing exists.  Memory and the
servers a job may use are dropped (both only relax it): on the stalled leaves of
split-penalty 128-GPU rounds cores are what is short, and the memory axis multiplied the
states by up to 4 and the time past a minute.

Plain data (:class:`FlowGraph`) and a :class:`~synergy_opt.matrix.MatrixModel`; the Pyomo
reference is :func:`synergy_opt.formulations.packing.build_packing_flow`, over the same graph.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass

from synergy_opt.formulations.packing_data import PackingData
from synergy_opt.matrix import MatrixModel, triplet_model
from synergy_opt.solve import TerminationStatus, solve_matrix

#: Columns at most: past this the MIP is not built and nothing is refuted.  The stalled
#: leaves of split-penalty 128-GPU rounds have 2,300-33,000.
MAX_FLOW_COLS: int = 60_000

#: HiGHS's presolve ran for minutes on these models (and on the pattern listing's IP); the
#: root LP with its cuts is what settles them.
FLOW_HIGHS_OPTIONS: dict[str, bool | int | float | str] = {"presolve": "off"}

#: Write (pf9), the cap on what one end gives one spread job.  Off only to measure it
#: (``bench/bench_branch_price.py --switch SHARE_CAP``); the Pyomo reference always has it.
SHARE_CAP: bool = True

#: Verdicts (:attr:`FlowVerdict.status`).
REFUTED = "refuted"
FLOWS = "flows"  # an integral flow exists: the relaxation packs, which proves nothing
UNKNOWN = "unknown"  # out of time
TOO_LARGE = "too large"

State = tuple[int, int]  # (GPUs, cores) used by a server's whole jobs so far
Shape = tuple[int, int]  # (GPUs, cores) of a whole job


@dataclass(frozen=True, slots=True)
class FlowClass:
    """Servers of one shape that may hold the same whole shapes and spread jobs.

    ``take[i] = (t, tail, head)``: one more whole job of ``shapes[t]`` on a path at ``tail``
    (layer t); ``skip[i] = (t, state)``: layer t to t + 1 at ``state``; ``ends[i] = (state,
    parts)``: a server whose whole jobs use ``state`` and whose spread parts are ``parts``
    ((spread job, GPUs), at most one part per job)."""

    servers: tuple[int, ...]
    gpus: int
    cpus: int
    shapes: tuple[int, ...]
    take: tuple[tuple[int, State, State], ...]
    skip: tuple[tuple[int, State], ...]
    ends: tuple[tuple[State, tuple[tuple[int, int], ...]], ...]


@dataclass(frozen=True, slots=True)
class FlowGraph:
    """The arc flow of a packing: whole jobs by shape, spread jobs one by one."""

    shapes: tuple[Shape, ...]
    #: Whole jobs per shape (0 for a choice's shapes: :attr:`choices` counts those).
    need: tuple[int, ...]
    #: (GPUs, cores) per spread job.
    spread: tuple[tuple[int, int], ...]
    classes: tuple[FlowClass, ...]
    #: GPUs no job takes: no server idles more.
    idle: int
    #: The choice each shape belongs to (-1: a whole group's) and its throughput there.
    tags: tuple[int, ...] = ()
    worth: tuple[float, ...] = ()
    #: Jobs per choice, and the throughput their points must reach (``None``: no floor).
    choices: tuple[int, ...] = ()
    floor: float | None = None

    @property
    def num_cols(self) -> int:
        """Columns of the model: arcs, and one share per spread part of an end arc."""
        return sum(
            len(c.take) + len(c.skip) + sum(1 + len(p) for _, p in c.ends) for c in self.classes
        )


@dataclass(frozen=True, slots=True)
class Choice:
    """``count`` whole jobs of ``gpus`` GPUs, each at any of ``options`` (cores,
    throughput): a class whose jobs' points the caller leaves open."""

    count: int
    gpus: int
    options: tuple[tuple[int, float], ...]


@dataclass(frozen=True, slots=True)
class FlowVerdict:
    """Whether the arc flow refutes the packing, and what it took."""

    status: str
    seconds: float
    columns: int

    @property
    def refuted(self) -> bool:
        """No packing exists."""
        return self.status == REFUTED


def _parts(
    spread: tuple[tuple[int, int], ...],
    allowed: tuple[int, ...],
    free: tuple[int, int],
    cap: int,
    one_server: bool,
) -> Iterator[tuple[tuple[int, int], ...]]:
    """Every set of parts (job, GPUs) of the ``allowed`` spread jobs whose GPUs sum to
    between ``free[0]`` and ``free[1]``, each part 1 to min(g - 1, ``cap``) GPUs (g with
    ``one_server``).  Grown job by job within ``free[1]`` GPUs, so the work is that of the
    sets that fit, not of every combination (ten 8-GPU spread jobs: 7^8 per set of eight)."""
    lo, hi = free
    most = [min(spread[j][0] - (0 if one_server else 1), cap) for j in allowed]

    def grow(
        i: int, used: int, chosen: tuple[tuple[int, int], ...]
    ) -> Iterator[tuple[tuple[int, int], ...]]:
        if i == len(allowed):
            if lo <= used:
                yield chosen
            return
        yield from grow(i + 1, used, chosen)
        for a in range(1, min(most[i], hi - used) + 1):
            yield from grow(i + 1, used + a, (*chosen, (allowed[i], a)))

    if hi >= 0:
        yield from grow(0, 0, ())


def flow_graph(
    data: PackingData,
    max_cols: int = MAX_FLOW_COLS,
    *,
    one_server: bool = False,
    choices: tuple[Choice, ...] = (),
    floor: float | None = None,
) -> FlowGraph | None:
    """The arc flow of ``data`` (memory and allowed servers dropped); ``None`` past
    ``max_cols`` columns.  A spread job has parts on two servers at least, each at most
    g - 1 GPUs, as in the counting model (``cnt_gpus_only_on_used``), whose leaves this
    refutes; ``one_server``: a part may hold all g, as the packing model allows (pk5).
    ``choices``: more whole jobs, each at a point of its choice, their throughput summed
    at least ``floor`` where given (on any server their GPUs and cores fit)."""
    counts: dict[tuple[int, int, int], int] = {}
    worth: dict[tuple[int, int, int], float] = {}
    for gr in data.groups:
        key = (gr.gpus, gr.cpus, -1)
        counts[key] = counts.get(key, 0) + len(gr.jobs)
        worth[key] = 0.0
    for i, ch in enumerate(choices):
        for c, w in ch.options:
            counts[ch.gpus, c, i] = 0
            worth[ch.gpus, c, i] = max(w, worth.get((ch.gpus, c, i), w))
    keys = tuple(sorted(counts, reverse=True))
    shapes = tuple((g, c) for g, c, _ in keys)
    need = tuple(counts[key] for key in keys)
    spread = tuple((sj.job.gpus, sj.cpus) for sj in data.spread)
    idle = sum(g for g, _, _ in data.servers) - sum(
        g * n for (g, _), n in zip(shapes, need, strict=True)
    )
    idle -= sum(g for g, _ in spread) + sum(ch.gpus * ch.count for ch in choices)
    keyed: dict[tuple[int, int, tuple[int, ...], tuple[int, ...]], list[int]] = {}
    for s, (g, c, _) in enumerate(data.servers):
        allowed = tuple(
            t
            for t, (gg, cc, tag) in enumerate(keys)
            if (tag >= 0 and gg <= g and cc <= c)
            or any((gr.gpus, gr.cpus) == (gg, cc) and s in gr.servers for gr in data.groups)
        )
        parts = tuple(j for j, sj in enumerate(data.spread) if s in sj.servers)
        keyed.setdefault((g, c, allowed, parts), []).append(s)
    classes: list[FlowClass] = []
    cols = 0
    for (gpus, cpus, allowed, parts), servers in keyed.items():
        take: list[tuple[int, State, State]] = []
        skip: list[tuple[int, State]] = []
        layer: set[State] = {(0, 0)}
        for t in allowed:
            g, c = shapes[t]
            seen = set(layer)
            todo = sorted(layer)
            while todo:
                st = todo.pop()
                head = (st[0] + g, st[1] + c)
                if head[0] <= gpus and head[1] <= cpus:
                    take.append((t, st, head))
                    if head not in seen:
                        seen.add(head)
                        todo.append(head)
            skip += [(t, st) for st in sorted(seen)]
            layer = seen
        cols += len(take) + len(skip)
        if cols > max_cols:
            return None
        ends: list[tuple[State, tuple[tuple[int, int], ...]]] = []
        for st in sorted(layer):
            free = (gpus - idle - st[0], gpus - st[0])
            for p in _parts(spread, parts, free, gpus, one_server):
                ends.append((st, p))
                cols += 1 + len(p)
                if cols > max_cols:
                    return None
        classes.append(
            FlowClass(tuple(servers), gpus, cpus, allowed, tuple(take), tuple(skip), tuple(ends))
        )
    return FlowGraph(
        shapes,
        need,
        spread,
        tuple(classes),
        idle,
        tuple(tag for _, _, tag in keys),
        tuple(worth[key] for key in keys),
        tuple(ch.count for ch in choices),
        floor if choices else None,
    )


def _node(k: int, t: int, st: State) -> str:
    return f"{k},{t},{st[0]},{st[1]}"


def build_packing_flow_matrix(fg: FlowGraph) -> MatrixModel:
    """(pf1)-(pf9) of ``formulations/packing_flow.md`` as a feasibility MIP (no objective):
    columns ``take``, ``skip``, ``end`` and ``share`` class by class; rows named as there."""
    names: list[str] = []
    row_of: dict[str, int] = {}
    lower: list[float] = []
    upper: list[float] = []
    inf = float("inf")

    def row(name: str, lo: float, hi: float) -> int:
        if name not in row_of:
            row_of[name] = len(names)
            names.append(name)
            lower.append(lo)
            upper.append(hi)
        return row_of[name]

    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    integer: list[bool] = []
    col_upper: list[float] = []

    def column(entries: list[tuple[int, float]], is_int: bool, hi: float) -> None:
        for r, v in entries:
            rows.append(r)
            cols.append(len(integer))
            vals.append(v)
        integer.append(is_int)
        col_upper.append(hi)

    tags = fg.tags or (-1,) * len(fg.shapes)
    for t, need in enumerate(fg.need):
        if tags[t] < 0:
            row(f"pf3_whole_jobs[{t}]", float(need), float(need))
    for i, count in enumerate(fg.choices):
        row(f"pf7_choices[{i}]", float(count), float(count))
    if fg.floor is not None:
        row("pf8_value_floor", fg.floor, inf)
    for j, (g, c) in enumerate(fg.spread):
        row(f"pf4_spread_gpus[{j}]", float(g), float(g))
        row(f"pf5_spread_cpus[{j}]", float(c), inf)
    for k, fc in enumerate(fg.classes):
        n = float(len(fc.servers))
        last = len(fc.shapes)
        root = row(f"pf2_servers[{k}]", n, n)

        def flow(t: int, st: State, k: int = k, root: int = root) -> int:
            if t == 0 and st == (0, 0):
                return root
            return row(f"pf1_flow[{_node(k, t, st)}]", 0.0, 0.0)

        for t, tail, head in fc.take:
            layer = fc.shapes.index(t)
            entries = [(flow(layer, tail), 1.0), (flow(layer, head), -1.0)]
            if tags[t] < 0:
                entries.append((row_of[f"pf3_whole_jobs[{t}]"], 1.0))
            else:
                entries.append((row_of[f"pf7_choices[{tags[t]}]"], 1.0))
                if fg.floor is not None:
                    entries.append((row_of["pf8_value_floor"], fg.worth[t]))
            column(entries, True, n)
        for t, st in fc.skip:
            layer = fc.shapes.index(t)
            column([(flow(layer, st), 1.0), (flow(layer + 1, st), -1.0)], True, n)
        for e, (st, parts) in enumerate(fc.ends):
            entries = [(flow(last, st), 1.0)]
            entries += [(row_of[f"pf4_spread_gpus[{j}]"], float(a)) for j, a in parts]
            room = fc.cpus - st[1]
            if parts:
                share = row(f"pf6_leftover_cpus[{k},{e}]", -inf, 0.0)
                entries.append((share, -float(room)))
            # (pf9) only where it cuts: with c_j >= room, (pf6) implies it
            capped = [j for j, _ in parts if SHARE_CAP and fg.spread[j][1] < room]
            entries += [
                (row(f"pf9_share_cap[{k},{e},{j}]", -inf, 0.0), -float(fg.spread[j][1]))
                for j in capped
            ]
            column(entries, True, n)
            for j, _ in parts:
                got = [
                    (row_of[f"pf6_leftover_cpus[{k},{e}]"], 1.0),
                    (row_of[f"pf5_spread_cpus[{j}]"], 1.0),
                ]
                if j in capped:
                    got.append((row_of[f"pf9_share_cap[{k},{e},{j}]"], 1.0))
                column(got, False, inf)
    ncol = len(integer)
    return triplet_model(
        rows,
        cols,
        vals,
        [0.0] * ncol,
        col_upper,
        integer,
        lower,
        upper,
        name="packing_flow",
        row_names=names,
    )


def _stranded(fg: FlowGraph) -> bool:
    """Whether a whole job or a spread job has no arc at all (its row would be empty)."""
    shapes = {t for fc in fg.classes for t, _, _ in fc.take}
    parts = {j for fc in fg.classes for _, p in fc.ends for j, _ in p}
    chosen = {fg.tags[t] for t in shapes if fg.tags and fg.tags[t] >= 0}
    return (
        any(n and t not in shapes for t, n in enumerate(fg.need))
        or len(parts) < len(fg.spread)
        or any(n and i not in chosen for i, n in enumerate(fg.choices))
    )


def refute_by_flow(
    data: PackingData,
    time_limit: float,
    *,
    threads: int | None = None,
    max_cols: int = MAX_FLOW_COLS,
    one_server: bool = False,
    choices: tuple[Choice, ...] = (),
    floor: float | None = None,
    node_limit: int | None = None,
) -> FlowVerdict:
    """Whether no integral flow exists (then no packing does: none with every spread job
    on two servers at least, or none at all with ``one_server``; with ``choices``, none
    whose chosen points are worth ``floor``), within ``time_limit`` (and ``node_limit``
    branch-and-bound nodes: the same verdict on every machine)."""
    t0 = time.perf_counter()
    fg = flow_graph(data, max_cols, one_server=one_server, choices=choices, floor=floor)
    if fg is None:
        return FlowVerdict(TOO_LARGE, time.perf_counter() - t0, 0)
    if fg.idle < 0 or _stranded(fg):  # more GPUs asked for than there are; a job no server holds
        return FlowVerdict(REFUTED, time.perf_counter() - t0, 0)
    mm = build_packing_flow_matrix(fg)
    left = max(time_limit - (time.perf_counter() - t0), 1e-3)
    res = solve_matrix(
        mm,
        time_limit=left if math.isfinite(left) else None,
        threads=threads,
        node_limit=node_limit,
        highs_options=FLOW_HIGHS_OPTIONS,
        # HiGHS does not check its limit everywhere (synergy_opt.deadline)
        guard=math.isfinite(left),
    )
    status = {
        TerminationStatus.INFEASIBLE: REFUTED,
        TerminationStatus.OPTIMAL: FLOWS,
    }.get(res.status, UNKNOWN)
    return FlowVerdict(status, time.perf_counter() - t0, mm.num_cols)
