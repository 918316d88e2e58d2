"""The fast path: super-machine and placement models built directly as sparse matrices.

The Pyomo models in this package are the declarative reference; building them costs tens of
microseconds per variable and importing Pyomo about a second, too slow for a per-round
scheduler at thousands of GPUs.  This module builds the *same optima* from numpy:

* **Fair-share restriction.**  A binary pick below the job's fair-share throughput violates
  (5), so only grid points with W >= W_j[C_g, M_g] get a column, and (5) needs no row.
* **Dominance.**  A point with at least as many cores and as much memory as another and no
  more throughput is never needed: swapping it for the cheaper one keeps (2)-(5) and (1).
* **Classes.**  Jobs with the same matrix, GPU count, split penalty and GPU types are
  interchangeable; one integer column z[k, q] counts how many of class k run at point q,
  and (4) becomes ``sum_q z[k, q] = n_k``.
* **Capacity groups.**  The same multiple-choice knapsack with one (2)/(3) pair per group of
  servers serves the pooled super-machine (one group) and the per-server re-optimisation
  after placement (one group per server, classes keyed by server).

Tests prove the optimum equal to the Pyomo reference (1e-6) on shipped and generated rounds.
No Pyomo import here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

# The matrix type lives in synergy_opt.matrix (below solver and models); re-exported here.
from synergy_opt.matrix import MatrixModel as MatrixModel
from synergy_opt.matrix import csc_columns
from synergy_opt.matrix import matrix_model as matrix_model
from synergy_opt.types import MEM_EPS_GB, THROUGHPUT_EPS, Job, RoundInstance, ThroughputMatrix

# --------------------------------------------------------------------------- configurations


@lru_cache(maxsize=4096)
def useful_points(
    w: ThroughputMatrix, floor: float, *, prune: bool = True
) -> tuple[tuple[int, float, float], ...]:
    """Grid points (cpus, mem, W) meeting ``floor`` and, with ``prune``, not dominated.

    A zero floor adds the below-grid point (0, 0, 0), as the reference model does.

    Sorted by (cpus, mem, -W), any dominating point precedes the point it dominates, so one
    pass against the kept points suffices.
    """
    cand = [(c, m, tp) for c, m, tp in w.points() if tp >= floor - THROUGHPUT_EPS]
    if floor <= 0.0:  # the below-grid point, worth 0 (see super_machine.grid_points)
        cand.append((0, 0.0, 0.0))
    pts = sorted(cand, key=lambda p: (p[0], p[1], -p[2]))
    if not prune:
        return tuple(pts)
    kept: list[tuple[int, float, float]] = []
    for c, m, tp in pts:
        if not any(kc <= c and km <= m and kw >= tp for kc, km, kw in kept):
            kept.append((c, m, tp))
    return tuple(kept)


def class_key(job: Job) -> tuple[object, ...]:
    """Jobs with equal keys are interchangeable in every OPT model (per-type matrices
    included: two jobs alike on the reference type may differ on another)."""
    return (job.sensitivity, job.gpus, job.split_penalty, job.gpu_types, job.sensitivity_by_type)


@dataclass(frozen=True, slots=True)
class JobClass:
    """Interchangeable jobs (priority order) and the grid points worth a column for them."""

    members: tuple[Job, ...]
    points: tuple[tuple[int, float, float], ...]
    group: int = 0

    @property
    def count(self) -> int:
        """n_k, how many jobs the class holds."""
        return len(self.members)


def make_classes(
    inst: RoundInstance,
    jobs: Sequence[Job],
    *,
    aggregate: bool = True,
    prune: bool = True,
    floors: dict[str, float] | None = None,
    points: bool = True,
) -> list[JobClass]:
    """Group ``jobs`` into classes (first-appearance order) with their useful grid points.

    ``floors`` overrides the per-job throughput floor (default: fair-share throughput);
    ``points=False`` leaves the points empty (for models that read other matrices).
    """
    groups: dict[object, list[Job]] = {}
    for job in jobs:
        key: object = class_key(job) if aggregate else job.id
        if floors is not None:
            key = (key, floors[job.id])
        groups.setdefault(key, []).append(job)
    out = []
    for members in groups.values():
        if not points:
            out.append(JobClass(tuple(members), ()))
            continue
        first = members[0]
        floor = floors[first.id] if floors is not None else inst.fair_share_throughput(first)
        out.append(JobClass(tuple(members), useful_points(first.sensitivity, floor, prune=prune)))
    return out


# --------------------------------------------------------------------------- knapsack model


@dataclass(frozen=True, slots=True, eq=False)
class KnapsackModel:
    """A multiple-choice knapsack in matrix form with the map back to classes and points.

    Columns are (class k, point q) in order; rows are one count row per class, then one
    (cores, memory) pair per capacity group.
    """

    matrix: MatrixModel
    classes: tuple[JobClass, ...]
    columns: tuple[tuple[int, int], ...]

    def picks(self, x: np.ndarray) -> list[list[tuple[tuple[int, float, float], int]]]:
        """Per class, [(point, how many jobs)] rounded from a solution vector."""
        out: list[list[tuple[tuple[int, float, float], int]]] = [[] for _ in self.classes]
        for col, (k, q) in enumerate(self.columns):
            n = int(round(float(x[col])))
            if n > 0:
                out[k].append((self.classes[k].points[q], n))
        return out


def build_knapsack(
    classes: Sequence[JobClass],
    capacity: Sequence[tuple[float, float]],
    *,
    integer: bool = True,
    name: str = "super_machine_fast",
) -> KnapsackModel:
    """(1)-(5) over classes: ``capacity[g] = (cores, GB)`` for each group a class may name."""
    n_cls = len(classes)
    cols: list[list[tuple[int, float]]] = []
    cost: list[float] = []
    upper: list[float] = []
    colmap: list[tuple[int, int]] = []
    for k, cl in enumerate(classes):
        crow = n_cls + 2 * cl.group
        for q, (c, m, tp) in enumerate(cl.points):
            cols.append([(k, 1.0), (crow, float(c)), (crow + 1, float(m))])
            cost.append(tp)
            upper.append(float(cl.count))
            colmap.append((k, q))
    start, idx, val = csc_columns(cols)
    counts = np.array([float(cl.count) for cl in classes])
    cap = np.array([v for cm in capacity for v in cm], dtype=np.float64)
    n = len(cost)
    names = [f"eq4[{cl.members[0].id}]" for cl in classes]
    for g in range(len(capacity)):
        names += [f"eq2[{g}]", f"eq3[{g}]"]
    mm = MatrixModel(
        cost=np.asarray(cost, dtype=np.float64),
        col_lower=np.zeros(n),
        col_upper=np.asarray(upper, dtype=np.float64),
        integer=np.full(n, integer, dtype=bool),
        row_lower=np.concatenate([counts, np.full(cap.shape[0], -np.inf)]),
        row_upper=np.concatenate([counts, cap]),
        a_start=start,
        a_index=idx,
        a_value=val,
        maximize=True,
        name=name,
        row_names=tuple(names),
    )
    return KnapsackModel(mm, tuple(classes), tuple(colmap))


def build_super_machine_fast(
    inst: RoundInstance,
    jobs: Sequence[Job],
    *,
    integer: bool = True,
    aggregate: bool = True,
    prune: bool = True,
) -> KnapsackModel:
    """The super-machine (1)-(5) on one pooled group with every fast-path reduction."""
    classes = make_classes(inst, jobs, aggregate=aggregate, prune=prune)
    cl = inst.cluster
    return build_knapsack(classes, [(float(cl.total_cpus), cl.total_mem_gb)], integer=integer)


# --------------------------------------------------------------------------- split-aware


@dataclass(frozen=True, slots=True, eq=False)
class SplitKnapsackModel:
    """The super-machine with a whole or a spread choice per job (see
    :func:`build_super_machine_split`); columns are (class k, point q, spread?)."""

    matrix: MatrixModel
    classes: tuple[JobClass, ...]
    columns: tuple[tuple[int, tuple[int, float, float], bool], ...]

    def picks(self, x: np.ndarray) -> list[list[tuple[tuple[int, float, float], int, bool]]]:
        """Per class, [(point with its uncredited W, how many jobs, spread?)]."""
        out: list[list[tuple[tuple[int, float, float], int, bool]]] = [[] for _ in self.classes]
        for col, (k, pt, spread) in enumerate(self.columns):
            n = int(round(float(x[col])))
            if n > 0:
                out[k].append((pt, n, spread))
        return out


def stranded(inst: RoundInstance, job: Job, required: float) -> bool:
    """Whether no placement holds ``job`` alone at ``required``, its fair-share floor.

    True when no grid point meeting the floor fits one server that holds the job's GPUs
    (whole), and no point meeting it after the split penalty fits the cores and memory of
    the ``g`` richest servers the job may use (spread: each part holds a GPU, so a spread
    spans at most ``g`` servers).  Both tests only relax the servers, so True means no
    allocation that keeps the floors schedules the job; the split-aware super-machine of
    a runnable set holding it has no solution.  It happens under the cluster-wide rule,
    where a job's share can exceed every server it fits on.  Read in the job's reference
    matrix: meant for jobs without per-type matrices.
    """
    usable = [srv for srv in inst.cluster.servers if job.may_use(srv) and srv.gpus > 0]
    shapes = {(srv.cpus, srv.mem_gb) for srv in usable if srv.gpus >= job.gpus}
    whole = useful_points(job.sensitivity, inst.fair_share_throughput(job))
    if any(c <= sc and m <= sm + MEM_EPS_GB for sc, sm in shapes for c, m, _ in whole):
        return False
    pen = job.split_penalty
    if job.gpus < 2 or len(usable) < 2 or pen <= 0.0:
        return True
    k = min(job.gpus, len(usable))
    c_top = sum(sorted((srv.cpus for srv in usable), reverse=True)[:k])
    m_top = sum(sorted((srv.mem_gb for srv in usable), reverse=True)[:k])
    spread = useful_points(job.sensitivity, required / pen)
    return not any(c <= c_top and m <= m_top + MEM_EPS_GB for c, m, _ in spread)


def build_super_machine_split(
    inst: RoundInstance, jobs: Sequence[Job], required: dict[str, float]
) -> SplitKnapsackModel:
    """(1)-(5) pooled, where each job is either whole or spread (beyond the paper).

    A whole job takes its cores and memory from one server, so only points within the
    largest server it may use get a whole column, credited W.  A job of >= 2 GPUs may
    instead spread: any point, credited W times its ``split_penalty``, among points whose
    credited W keeps ``required[job.id]`` (the checker's floor).  Jobs larger than every
    server they may use only spread.  Every allocation of ``jobs`` that keeps the floors
    maps to a solution of equal value (each job is whole or spread, and a whole job's
    point fits its server), so the optimum is an upper bound, never above the plain
    super-machine's (it only removes columns and lowers credits).
    """
    servers = inst.cluster.servers
    classes = make_classes(inst, jobs)
    cols: list[list[tuple[int, float]]] = []
    cost: list[float] = []
    upper: list[float] = []
    colmap: list[tuple[int, tuple[int, float, float], bool]] = []
    n_cls = len(classes)
    r_c, r_m = n_cls, n_cls + 1
    # What a class reads of the servers depends only on its GPU types and count: once
    # per such pair, not per class (a scan of every server per class was a third of this
    # build at 128 GPUs).
    shapes: dict[tuple[tuple[str, ...] | None, int], tuple[int, int, float, float]] = {}
    for k, cl in enumerate(classes):
        first = cl.members[0]
        shape = shapes.get((first.gpu_types, first.gpus))
        if shape is None:
            usable = [srv for srv in servers if first.may_use(srv)]
            fits = [srv for srv in usable if srv.gpus >= first.gpus]
            shape = shapes[(first.gpu_types, first.gpus)] = (
                len(usable),
                len(fits),
                max((srv.cpus for srv in fits), default=0),
                max((srv.mem_gb for srv in fits), default=0.0),
            )
        n_usable, n_fits, c_max, m_max = shape
        if n_fits:
            for c, m, w in cl.points:
                if c <= c_max and m <= m_max + MEM_EPS_GB:
                    cols.append([(k, 1.0), (r_c, float(c)), (r_m, float(m))])
                    cost.append(w)
                    upper.append(float(cl.count))
                    colmap.append((k, (c, m, w), False))
        if first.gpus >= 2 and n_usable >= 2:
            pen = first.split_penalty
            for c, m, w in useful_points(first.sensitivity, required[first.id] / pen):
                cols.append([(k, 1.0), (r_c, float(c)), (r_m, float(m))])
                cost.append(w * pen)
                upper.append(float(cl.count))
                colmap.append((k, (c, m, w), True))
    counts = [float(cl.count) for cl in classes]
    cl_ = inst.cluster
    names = [f"eq4[{cl.members[0].id}]" for cl in classes] + ["eq2[pool]", "eq3[pool]"]
    mm = matrix_model(
        cols,
        cost,
        upper,
        [True] * len(cost),
        [*counts, -np.inf, -np.inf],
        [*counts, float(cl_.total_cpus), cl_.total_mem_gb],
        names,
        maximize=True,
        name="super_machine_split",
    )
    return SplitKnapsackModel(mm, tuple(classes), tuple(colmap))


# --------------------------------------------------------------------------- placement


@dataclass(frozen=True, slots=True)
class DemandClass:
    """Jobs sharing (class, chosen point): n of them, each wanting (g, c, m).

    ``spread`` marks jobs the split-aware super-machine spreads over servers."""

    jobs: tuple[Job, ...]
    gpus: int
    cpus: int
    mem_gb: float
    allowed: tuple[int, ...]
    spread: bool = False


@dataclass(frozen=True, slots=True, eq=False)
class PlacementModel:
    """The placement LP (pl0)-(pl4) over demand classes: x[d, s] jobs of class d on s."""

    matrix: MatrixModel
    demands: tuple[DemandClass, ...]
    columns: tuple[tuple[int, int], ...]


def build_placement_fast(inst: RoundInstance, demands: Sequence[DemandClass]) -> PlacementModel:
    """(pl0)-(pl4) with x[d, s] in [0, n_d]: equal optimum to the per-job LP (by symmetry).

    Column (d, s) has four entries, rows d (pl1) and the GPU, core and memory rows of s;
    built with numpy at once (a Python loop over 1600 columns took 3-4 ms at 512 GPUs)."""
    n_d = len(demands)
    per = [len(dc.allowed) for dc in demands]
    d_idx = np.repeat(np.arange(n_d, dtype=np.int64), per)
    s_idx = np.fromiter(
        (s for dc in demands for s in dc.allowed), dtype=np.int64, count=int(sum(per))
    )
    g = np.array([float(dc.gpus) for dc in demands], dtype=np.float64)[d_idx]
    c = np.array([float(dc.cpus) for dc in demands], dtype=np.float64)[d_idx]
    m = np.array([float(dc.mem_gb) for dc in demands], dtype=np.float64)[d_idx]
    n = int(d_idx.shape[0])
    row = n_d + 3 * s_idx
    index = np.stack([d_idx, row, row + 1, row + 2], axis=1).astype(np.int32).reshape(-1)
    value = np.stack([np.ones(n), g, c, m], axis=1).reshape(-1)
    start = np.arange(0, 4 * n + 1, 4, dtype=np.int32)
    counts = [float(len(dc.jobs)) for dc in demands]
    mm = _count_capacity_model(
        inst,
        [],
        (s_idx + 1) * g,
        np.asarray(counts, dtype=np.float64)[d_idx],
        counts,
        integer=False,
        maximize=False,
        name="placement_fast",
        names=("pl1", "pl2", "pl3", "pl4"),
        csc=(start, index, value),
    )
    return PlacementModel(
        mm, tuple(demands), tuple(zip(d_idx.tolist(), s_idx.tolist(), strict=True))
    )


def _count_capacity_model(
    inst: RoundInstance,
    cols: list[list[tuple[int, float]]],
    cost: Sequence[float] | np.ndarray,
    upper: Sequence[float] | np.ndarray,
    counts: Sequence[float],
    *,
    integer: bool,
    maximize: bool,
    name: str,
    names: tuple[str, str, str, str] = ("eq4", "ext_gpu", "eq2", "eq3"),
    csc: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> MatrixModel:
    """Rows: one equality per count (jobs of a class or demand), then <= (GPUs, cores,
    memory) per server; the shape shared by the placement LP and the server-class MIP.

    ``names`` are the equation names of the count row and the three server rows; ``csc``,
    the columns already in compressed form (then ``cols`` is not read)."""
    start, idx, val = csc_columns(cols) if csc is None else csc
    cnt = np.asarray(counts, dtype=np.float64)
    cap = np.array(
        [v for srv in inst.cluster.servers for v in (srv.gpus, srv.cpus, srv.mem_gb)],
        dtype=np.float64,
    )
    n = len(cost)
    return MatrixModel(
        cost=np.asarray(cost, dtype=np.float64),
        col_lower=np.zeros(n),
        col_upper=np.asarray(upper, dtype=np.float64),
        integer=np.full(n, integer, dtype=bool),
        row_lower=np.concatenate([cnt, np.full(cap.shape[0], -np.inf)]),
        row_upper=np.concatenate([cnt, cap]),
        a_start=start,
        a_index=idx,
        a_value=val,
        maximize=maximize,
        name=name,
        row_names=(
            *(f"{names[0]}[{k}]" for k in range(len(counts))),
            *(f"{n}[{srv.name}]" for srv in inst.cluster.servers for n in names[1:]),
        ),
    )


# --------------------------------------------------------------------------- per-server classes


@dataclass(frozen=True, slots=True, eq=False)
class ServerClassModel:
    """Consolidated placement and point choice at once: z[k, q, s] jobs of class k at q on s.

    Rows: one count row per class (sum_{q,s} z = n_k), then (GPUs, cores, memory) per server.
    It is the joint model restricted to jobs on one server each, aggregated by class (exact
    for rounds of 1-GPU jobs, which cannot spread); OPT uses it as one more rounding route.
    """

    matrix: MatrixModel
    classes: tuple[JobClass, ...]
    columns: tuple[tuple[int, int, int], ...]


def build_server_classes(
    inst: RoundInstance, classes: Sequence[JobClass], allowed: Sequence[Sequence[int]]
) -> ServerClassModel:
    """Columns for every class, useful point and allowed server that can hold the class."""
    servers = inst.cluster.servers
    n_cls = len(classes)
    cols: list[list[tuple[int, float]]] = []
    cost: list[float] = []
    upper: list[float] = []
    colmap: list[tuple[int, int, int]] = []
    for k, cl in enumerate(classes):
        g = cl.members[0].gpus
        for q, (c, m, tp) in enumerate(cl.points):
            for s in allowed[k]:
                cap = min(cl.count, servers[s].gpus // g)
                if cap < 1 or c > servers[s].cpus or m > servers[s].mem_gb:
                    continue
                r = n_cls + 3 * s
                cols.append([(k, 1.0), (r, float(g)), (r + 1, float(c)), (r + 2, float(m))])
                cost.append(tp)
                upper.append(float(cap))
                colmap.append((k, q, s))
    counts = [float(cl.count) for cl in classes]
    mm = _count_capacity_model(
        inst, cols, cost, upper, counts, integer=True, maximize=True, name="server_classes_fast"
    )
    return ServerClassModel(mm, tuple(classes), tuple(colmap))
