"""The typed super-machine: (1)-(5) with a GPU-type choice per job, as a sparse matrix.

On a cluster with several GPU types a job's throughput depends on the type it runs on
(``Job.sensitivity_by_type``), so pooling every server into one machine and reading one
matrix is no bound.  The typed super-machine pools the GPU servers *per type* instead and
lets each job pick one (type, grid point); a job of >= 2 GPUs may also span types, which
the checker values at its slowest type times its split penalty (and which holds >= 1 GPU
of that type).  Rows: (4) per job class,
then (GPUs, cores, memory) per type pool, then the same three for the whole cluster
(``formulations/super_machine.md``, "GPU types").

This module holds the plain data both builders read (:func:`gpu_pools`,
:func:`type_options`) and the fast path (:func:`build_typed_super_machine_fast`); the Pyomo
reference is :func:`synergy_opt.formulations.super_machine.build_typed_super_machine`.
Tests prove the two optima equal (1e-6).  No Pyomo import here.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from synergy_opt.formulations.fast import (
    JobClass,
    MatrixModel,
    class_key,
    make_classes,
    matrix_model,
    useful_points,
)
from synergy_opt.types import THROUGHPUT_EPS, Job, RoundInstance, ThroughputMatrix

#: Pool label of the whole cluster, and the "type" of a job spanning GPU types.
ACROSS: str = "*"
#: Pool label of GPU servers that name no ``gpu_type`` on a cluster where others do.
UNTYPED: str = "-"


@dataclass(frozen=True, slots=True)
class Pool:
    """The GPU servers of one type pooled: G_t GPUs, C_t cores, M_t GB."""

    label: str
    gpus: int
    cpus: int
    mem_gb: float


@dataclass(frozen=True, slots=True)
class TypeOption:
    """One way a job may run: wholly on ``pool``'s type, or across types with ``slowest``
    the type whose value it realises (``pool`` = ``"*" + slowest``).

    ``matrix`` holds the uncredited values (the floor (5) reads them); the objective (1)
    credits them times ``credit`` (the split penalty across types, else 1)."""

    pool: str
    matrix: ThroughputMatrix
    credit: float
    slowest: str | None = None
    #: Across types: every usable (type, matrix) of the job, to tell which are as fast.
    usable: tuple[tuple[str, ThroughputMatrix], ...] = ()


def type_label(gpu_type: str | None) -> str:
    """The pool label of a server's ``gpu_type``."""
    return UNTYPED if gpu_type is None else gpu_type


def gpu_pools(inst: RoundInstance) -> tuple[Pool, ...]:
    """One pool per GPU type of the servers with GPUs, in first-appearance order.

    Servers without GPUs are left out: every placement part needs >= 1 GPU (the checker),
    so their cores and memory serve no job."""
    acc: dict[str, list[float]] = {}
    for s in inst.cluster.servers:
        if s.gpus > 0:
            a = acc.setdefault(type_label(s.gpu_type), [0, 0, 0.0])
            a[0] += s.gpus
            a[1] += s.cpus
            a[2] += s.mem_gb
    return tuple(Pool(t, int(a[0]), int(a[1]), float(a[2])) for t, a in acc.items())


def is_typed_round(inst: RoundInstance, jobs: Sequence[Job] | None = None) -> bool:
    """Whether the typed model is needed: the GPU servers carry two or more GPU types, or a
    job of ``jobs`` (default: the round's) runs by another matrix than its ``sensitivity``
    on the one type there is.  Otherwise the plain model (1)-(5) is the same model."""
    if len(gpu_pools(inst)) >= 2:
        return True
    return any(
        any(w != job.sensitivity for w in inst.usable_matrices(job))
        for job in (inst.jobs if jobs is None else jobs)
        if job.sensitivity_by_type is not None
    )


def _gpu_type_of(label: str) -> str | None:
    return None if label == UNTYPED else label


@lru_cache(maxsize=4096)
def second_best_matrix(mats: tuple[ThroughputMatrix, ...]) -> ThroughputMatrix:
    """Pointwise second-largest value of ``mats`` on the union of their grid axes.

    A job spanning a set S of >= 2 types runs at min over S of W_t; the largest such
    minimum over every S is the second-largest W_t, so this matrix never undervalues a
    spanning job (the bound stays valid).  On the union axes every matrix's floor look-up
    equals its own, so no allocation falls between grid points.
    """
    cpus = sorted({c for w in mats for c in w.cpus})
    mems = sorted({m for w in mats for m in w.mem_gb})
    rows = [[sorted(w.lookup(c, m) for w in mats)[-2] for m in mems] for c in cpus]
    return ThroughputMatrix.from_lists(cpus, mems, rows)


def type_options(inst: RoundInstance, job: Job) -> tuple[TypeOption, ...]:
    """The job's choices: each usable type whose pool holds its GPUs, then across types.

    A type is usable when the job may use its servers (``gpu_types``).  Spanning types is
    an option for a job of >= 2 GPUs with >= 2 usable types."""
    usable = [p for p in gpu_pools(inst) if job.gpu_types is None or p.label in job.gpu_types]
    out = [
        TypeOption(p.label, job.matrix_for(_gpu_type_of(p.label)), 1.0)
        for p in usable
        if p.gpus >= job.gpus
    ]
    if job.gpus >= 2 and len(usable) >= 2:
        mats = tuple(job.matrix_for(_gpu_type_of(p.label)) for p in usable)
        pairs = tuple((p.label, w) for p, w in zip(usable, mats, strict=True))
        for i, p in enumerate(usable):
            out.append(
                TypeOption(
                    ACROSS + p.label, span_matrix(mats, i), job.split_penalty, p.label, pairs
                )
            )
    return tuple(out)


def lowest_fair_share(inst: RoundInstance, job: Job) -> float:
    """The smallest fair-share throughput the checker can hold ``job`` to, wherever it runs.

    Under the ``"server"`` rule the checker's floor is W (slowest usable type) at the sum of
    the job's servers' shares, floor(q C_s / G_s) cores and q M_s / G_s GB for q GPUs on s
    (:func:`synergy_opt.check.fair_share_floor`): it depends on the split, and a spread
    job's summed integer cores can fall below every whole job's (two 1-GPU parts at 3.5
    cores per GPU hold 6 cores, one 2-GPU part 7).  The minimum over every split of the
    job's GPUs into parts of at most G_s GPUs on the shapes it may use (a dynamic program
    over the Pareto-smallest (cores, GB) sums; server counts ignored, which only lowers it)
    is a floor no allocation goes below, so the super-machine built on it bounds every
    allocation that keeps the checker's floors.  Under ``"cluster"`` the floor is the
    placement-free :meth:`~synergy_opt.types.RoundInstance.fair_share_throughput`.
    """
    pooled = inst.fair_share_throughput(job)
    if inst.fair_share_mode != "server":
        return pooled
    return min(pooled, _lowest_split_floor(inst, job))


def _lowest_split_floor(inst: RoundInstance, job: Job) -> float:
    shapes = sorted(
        {(s.gpus, s.cpus, s.mem_gb) for s in inst.cluster.servers if s.gpus > 0 and job.may_use(s)}
    )
    if not shapes:
        return 0.0
    front: list[set[tuple[int, float]]] = [{(0, 0.0)}]
    for h in range(1, job.gpus + 1):
        cand = {
            (c0 + (q * cs) // gs, m0 + q * ms / gs)
            for gs, cs, ms in shapes
            for q in range(1, min(gs, h) + 1)
            for c0, m0 in front[h - q]
        }
        front.append(_pareto_smallest(cand))
    mats = inst.usable_matrices(job)
    return min((w.lookup(c, m) for w in mats for c, m in front[job.gpus]), default=0.0)


def _pareto_smallest(points: set[tuple[int, float]]) -> set[tuple[int, float]]:
    """The points no other point undercuts in both cores and GB."""
    out: list[tuple[int, float]] = []
    for c, m in sorted(points):
        if not out or m < out[-1][1]:
            out.append((c, m))
    return set(out)


#: Up to this many GPU types every set of types gets rows; beyond, only each type and the
#: whole cluster (2^K - 1 sets: 15 at four types).
MAX_TYPES_FOR_SETS: int = 4


@dataclass(frozen=True, slots=True)
class TypeSet:
    """A set of GPU types with its pooled capacity: rows (T), (2), (3) per set."""

    label: str
    types: frozenset[str]
    pool: Pool


def type_sets(pools: Sequence[Pool]) -> tuple[TypeSet, ...]:
    """Every non-empty set of types (singletons first, the whole cluster ``*`` last), or
    only singletons and ``*`` beyond :data:`MAX_TYPES_FOR_SETS` types."""
    n = len(pools)
    sizes = list(range(1, n + 1)) if n <= MAX_TYPES_FOR_SETS else [1, n]
    out = []
    for size in sizes:
        for combo in itertools.combinations(pools, size):
            label = ACROSS if size == n else "+".join(p.label for p in combo)
            cap = Pool(
                label,
                sum(p.gpus for p in combo),
                sum(p.cpus for p in combo),
                float(sum(p.mem_gb for p in combo)),
            )
            out.append(TypeSet(label, frozenset(p.label for p in combo), cap))
    return tuple(out)


def span_types(opt: TypeOption, cpus: int, mem_gb: float) -> frozenset[str]:
    """H: the usable types at least as fast at (cpus, mem) as the option's slowest type.

    A job realising type t's value there spans only such types (t is its slowest)."""
    mats = dict(opt.usable)
    wt = mats[opt.slowest].lookup(cpus, mem_gb) if opt.slowest is not None else 0.0
    return frozenset(u for u, w in opt.usable if w.lookup(cpus, mem_gb) >= wt - THROUGHPUT_EPS)


def coefficients(
    opt: TypeOption, gpus: int, cpus: int, mem_gb: float, sets: Sequence[TypeSet]
) -> list[tuple[float, float, float]] | None:
    """(GPUs, cores, GB) the pick takes in each set's rows; ``None``: no such allocation.

    Wholly on type p: all of it in every set holding p.  Across types with slowest t: its
    types lie in H (:func:`span_types`), so all of it in every set holding H, and at least
    one GPU of t in every other set holding t.  Fewer than two types in H: it cannot span."""
    if opt.slowest is None:
        return [
            (float(gpus), float(cpus), float(mem_gb)) if opt.pool in ts.types else (0.0, 0.0, 0.0)
            for ts in sets
        ]
    h = span_types(opt, cpus, mem_gb)
    if len(h) < 2:
        return None
    return [
        (float(gpus), float(cpus), float(mem_gb))
        if h <= ts.types
        else ((1.0, 0.0, 0.0) if opt.slowest in ts.types else (0.0, 0.0, 0.0))
        for ts in sets
    ]


@lru_cache(maxsize=4096)
def span_matrix(mats: tuple[ThroughputMatrix, ...], i: int) -> ThroughputMatrix:
    """min(W_i, second-best of ``mats``) pointwise on the union axes: the most a job
    spanning types can realise where type i is its slowest (it then holds >= 1 GPU of i)."""
    sb = second_best_matrix(mats)
    w = mats[i]
    rows = [[min(w.lookup(c, m), sb.lookup(c, m)) for m in sb.mem_gb] for c in sb.cpus]
    return ThroughputMatrix.from_lists(sb.cpus, sb.mem_gb, rows)


@dataclass(frozen=True, slots=True, eq=False)
class TypedKnapsackModel:
    """The typed super-machine in matrix form; columns are (class k, option pool, point)."""

    matrix: MatrixModel
    classes: tuple[JobClass, ...]
    pools: tuple[Pool, ...]
    columns: tuple[tuple[int, str, tuple[int, float, float]], ...]

    def picks(self, x: np.ndarray) -> list[list[tuple[str, tuple[int, float, float], int]]]:
        """Per class, [(type pool or ``"*"`` + slowest type, point with its uncredited W, how
        many jobs)]."""
        out: list[list[tuple[str, tuple[int, float, float], int]]] = [[] for _ in self.classes]
        for col, (k, pool, pt) in enumerate(self.columns):
            n = int(round(float(x[col])))
            if n > 0:
                out[k].append((pool, pt, n))
        return out


def build_typed_super_machine_fast(
    inst: RoundInstance, jobs: Sequence[Job], *, integer: bool = True, prune: bool = True
) -> TypedKnapsackModel:
    """The typed super-machine over ``jobs`` with the fast-path reductions.

    Fair-share restriction and dominance apply within each option (its columns share the
    same rows), classes as in :func:`synergy_opt.formulations.fast.make_classes`
    (``class_key`` holds the per-type matrices and ``gpu_types``, so a class shares its
    options and floor).  Rows: ``eq4[job]`` per class, then ``eqT[U]``, ``eq2[U]``,
    ``eq3[U]`` per set of types U (:func:`type_sets`; the whole cluster is ``*``).  The
    classes carry no points (columns read each option's matrix); a class's columns are
    memoised (:func:`_class_columns`).
    """
    pools = gpu_pools(inst)
    sets = type_sets(pools)
    classes = make_classes(inst, jobs, points=False)
    n_cls = len(classes)
    cols: list[list[tuple[int, float]]] = []
    cost: list[float] = []
    upper: list[float] = []
    colmap: list[tuple[int, str, tuple[int, float, float]]] = []
    for k, cl in enumerate(classes):
        for entries, value, pool, point in _class_columns(inst, sets, cl.members[0], prune):
            cols.append([(k, 1.0), *((n_cls + r, v) for r, v in entries)])
            cost.append(value)
            upper.append(float(cl.count))
            colmap.append((k, pool, point))
    counts = [float(cl.count) for cl in classes]
    caps: list[float] = []
    names = [f"eq4[{cl.members[0].id}]" for cl in classes]
    for ts in sets:
        caps += [float(ts.pool.gpus), float(ts.pool.cpus), ts.pool.mem_gb]
        names += [f"eqT[{ts.label}]", f"eq2[{ts.label}]", f"eq3[{ts.label}]"]
    mm = matrix_model(
        cols,
        cost,
        upper,
        [integer] * len(cost),
        [*counts, *([-np.inf] * len(caps))],
        [*counts, *caps],
        names,
        maximize=True,
        name="typed_super_machine_fast",
    )
    return TypedKnapsackModel(mm, tuple(classes), pools, tuple(colmap))


#: A class's columns: (set-row entries (3 i + resource, value), credited W, option pool,
#: point (cores, GB, uncredited W)).
ClassColumns = tuple[
    tuple[tuple[tuple[int, float], ...], float, str, tuple[int, float, float]], ...
]
#: Bound on :data:`_COLUMNS` (entries: one per job class and cluster).
COLUMN_MEMO_SIZE: int = 4096
#: Pure memo of :func:`_class_columns` by (cluster, fair-share rule, prune, class key): a
#: class's columns depend on nothing else, and in a simulation the same classes come back
#: every round (building them was half of ``opt``'s time on typed simulation rounds).
_COLUMNS: dict[tuple[object, ...], ClassColumns] = {}


def _class_columns(
    inst: RoundInstance, sets: Sequence[TypeSet], first: Job, prune: bool
) -> ClassColumns:
    """The columns of ``first``'s class (fair-share restriction and dominance within each
    option), memoised by (cluster, fair-share rule, ``prune``, class key); ``sets`` are
    the cluster's (:func:`type_sets`)."""
    key = (inst.cluster, inst.fair_share_mode, prune, class_key(first))
    got = _COLUMNS.get(key)
    if got is not None:
        return got
    floor = lowest_fair_share(inst, first)
    out = []
    for opt in type_options(inst, first):
        pts: Sequence[tuple[int, float, float]] = useful_points(
            opt.matrix, floor, prune=prune and opt.slowest is None
        )
        coefs = [coefficients(opt, first.gpus, c, m, sets) for c, m, _ in pts]
        if prune and opt.slowest is not None:  # dominance among picks with equal rows
            pts, coefs = _prune_by_rows(pts, coefs)
        for (c, m, w), coef in zip(pts, coefs, strict=True):
            if coef is None:
                continue
            entries = tuple(
                (3 * i + d, v)
                for i, (cg, cc, cm) in enumerate(coef)
                for d, v in enumerate((cg, cc, cm))
                if v != 0.0
            )
            out.append((entries, w * opt.credit, opt.pool, (c, m, w)))
    if len(_COLUMNS) >= COLUMN_MEMO_SIZE:
        _COLUMNS.clear()
    _COLUMNS[key] = got = tuple(out)
    return got


def _prune_by_rows(
    pts: Sequence[tuple[int, float, float]],
    coefs: Sequence[list[tuple[float, float, float]] | None],
) -> tuple[list[tuple[int, float, float]], list[list[tuple[float, float, float]] | None]]:
    """Drop points dominated (no fewer cores and GB, no more W) by one with the same rows
    pattern; ``pts`` sorted by (cores, GB, -W) as :func:`useful_points` returns them."""
    kept: dict[object, list[tuple[int, float, float]]] = {}
    out_p: list[tuple[int, float, float]] = []
    out_c: list[list[tuple[float, float, float]] | None] = []
    for (c, m, w), coef in zip(pts, coefs, strict=True):
        if coef is None:
            continue
        key = tuple((g > 0, cc > 0) for g, cc, _ in coef) + tuple(g for g, _, _ in coef)
        group = kept.setdefault(key, [])
        if any(kc <= c and km <= m and kw >= w for kc, km, kw in group):
            continue
        group.append((c, m, w))
        out_p.append((c, m, w))
        out_c.append(coef)
    return out_p, out_c


def super_machine_matrix(
    inst: RoundInstance, jobs: Sequence[Job], *, integer: bool = True
) -> MatrixModel:
    """The super-machine for ``jobs`` as a matrix: typed on typed rounds, else exactly
    :func:`synergy_opt.formulations.fast.build_super_machine_fast`'s (one type, or none)."""
    if is_typed_round(inst, jobs):
        return build_typed_super_machine_fast(inst, jobs, integer=integer).matrix
    from synergy_opt.formulations.fast import build_super_machine_fast

    return build_super_machine_fast(inst, jobs, integer=integer).matrix
