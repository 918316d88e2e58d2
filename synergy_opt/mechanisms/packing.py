"""Shared bin-packing machinery for the heuristic mechanisms.

Owns the mutable per-round view of free resources (:class:`ClusterState`), the runnable-set
selection by free GPUs, the split of a job's cores and memory over its servers, and the
demand points a job asks for (its cheapest best-throughput point, and the cheapest point
that still keeps its fair-share throughput).  Mechanisms differ only in how they combine
these pieces.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence, Set
from dataclasses import dataclass, replace
from functools import lru_cache

from synergy_opt.types import (
    MEM_EPS_GB,
    THROUGHPUT_EPS,
    Cluster,
    Job,
    RoundInstance,
    Server,
    ThroughputMatrix,
)

_NEG_INF = float("-inf")


class ClusterState:
    """Free GPUs, cores and memory per server, with a sorted index for best-fit search.

    ``_keys`` holds ``(free_gpus, free_cpus, free_mem, index)`` sorted ascending, so the
    first key at or after ``(g, ...)`` that also fits cores and memory is the server with
    the least free resources that still fits: the best-fit rule of Synergy-TUNE.
    """

    def __init__(self, cluster: Cluster) -> None:
        self.servers: tuple[Server, ...] = cluster.servers
        self.free_gpus = [s.gpus for s in cluster.servers]
        self.free_cpus = [s.cpus for s in cluster.servers]
        self.free_mem = [float(s.mem_gb) for s in cluster.servers]
        self._keys = sorted(self._key(i) for i in range(len(self.servers)))
        self._max_gpus: dict[tuple[str, ...] | None, int] = {}

    def max_server_gpus(self, job: Job) -> int:
        """Most GPUs (total, not free) one server usable by ``job`` has; memoised per type set.

        A job with more GPUs than this must be spread; one with fewer can be consolidated.
        """
        key = job.gpu_types
        got = self._max_gpus.get(key)
        if got is None:
            got = max_single_server_gpus(self.servers, job)
            self._max_gpus[key] = got
        return got

    def _key(self, i: int) -> tuple[int, int, float, int]:
        return (self.free_gpus[i], self.free_cpus[i], self.free_mem[i], i)

    def _update(self, i: int, g: int, c: int, m: float) -> None:
        del self._keys[bisect.bisect_left(self._keys, self._key(i))]
        self.free_gpus[i] += g
        self.free_cpus[i] += c
        self.free_mem[i] += m
        bisect.insort(self._keys, self._key(i))

    def take(self, i: int, g: int, c: int, m: float) -> None:
        """Consume resources on server ``i``."""
        self._update(i, -g, -c, -m)

    def give(self, i: int, g: int, c: int, m: float) -> None:
        """Return resources to server ``i``."""
        self._update(i, g, c, m)

    def fits(self, i: int, g: int, c: int, m: float) -> bool:
        """Whether server ``i`` has room for (g, c, m)."""
        return (
            self.free_gpus[i] >= g and self.free_cpus[i] >= c and self.free_mem[i] >= m - MEM_EPS_GB
        )

    def best_fit(self, job: Job, g: int, c: int, m: float) -> int | None:
        """Server with the least free resources that fits (g, c, m) and the job's GPU type."""
        keys, servers = self._keys, self.servers
        n = len(keys)
        m_need = m - MEM_EPS_GB
        pos = bisect.bisect_left(keys, (g, -1, _NEG_INF, -1))
        # Walk the groups of equal free GPUs; inside each, jump straight to free cores >= c
        # instead of scanning servers whose cores are already exhausted.
        while pos < n:
            fg = keys[pos][0]
            start = bisect.bisect_left(keys, (fg, c, _NEG_INF, -1), pos)
            end = bisect.bisect_left(keys, (fg + 1, -1, _NEG_INF, -1), start)
            for k in range(start, end):
                _, _, fm, i = keys[k]
                if fm >= m_need and job.may_use(servers[i]):
                    return i
            pos = end
        return None

    def first_fit(self, job: Job, g: int, c: int, m: float) -> int | None:
        """Lowest-index server that fits (g, c, m) and the job's GPU type."""
        # Same test as ``fits``, inlined: GREEDY calls this for every queued job each round.
        fg, fc, fm, lim = self.free_gpus, self.free_cpus, self.free_mem, m - MEM_EPS_GB
        for i in range(len(fg)):
            if fg[i] >= g and fc[i] >= c and fm[i] >= lim and job.may_use(self.servers[i]):
                return i
        return None

    def gpu_candidates(self, job: Job, g: int) -> list[int]:
        """Servers with at least ``g`` free GPUs the job may use, least free first.

        A snapshot (a list), since callers change free resources while iterating.
        """
        start = bisect.bisect_left(self._keys, (g, -1, _NEG_INF, -1))
        servers = self.servers
        if job.gpu_types is None:
            return [k[3] for k in self._keys[start:]]
        return [k[3] for k in self._keys[start:] if job.may_use(servers[k[3]])]

    def spread_plan(self, job: Job, g: int) -> list[tuple[int, int]] | None:
        """GPUs per server for a job spread over servers: most free GPUs first, fewest parts.

        Returns ``[(server, gpus), ...]`` or ``None`` when the usable free GPUs fall short.
        """
        if g < 2:
            return None  # one GPU cannot be spread
        usable = (i for i, s in enumerate(self.servers) if job.may_use(s))
        plan, left = most_free_first(self.free_gpus, usable, g)
        return plan if left == 0 else None

    def fitting_spread_plan(
        self, job: Job, g: int, cpus: int, mem: float
    ) -> list[tuple[int, int]] | None:
        """Like :meth:`spread_plan`, but each part must also fit its cores and memory.

        Parts carry cores and memory in proportion to their GPUs, so a server takes at most
        as many GPUs as its free cores and memory can feed at ``cpus/g`` and ``mem/g`` each.
        Needed on heterogeneous clusters, where the GPU-proportional share (from cluster
        totals) of a big job can exceed every single server: the GPU-only plan then puts
        all GPUs on one server and fails, and the job would wait forever.
        """
        if g < 2:
            return None
        c1, m1 = cpus / g, mem / g
        usable = (i for i, s in enumerate(self.servers) if self.free_gpus[i] > 0 and job.may_use(s))
        order = sorted(usable, key=lambda i: (-self.free_gpus[i], i))
        plan: list[tuple[int, int]] = []
        left = g
        for i in order:
            k = min(left, self.free_gpus[i])
            if c1 > 0:
                k = min(k, math.floor(self.free_cpus[i] / c1 + 1e-9))
            if m1 > 0:
                k = min(k, math.floor((self.free_mem[i] + MEM_EPS_GB) / m1))
            if k < 1:
                continue
            plan.append((i, k))
            left -= k
            if left == 0:
                return plan if len(plan) > 1 else None
        return None


def type_views(inst: RoundInstance, job: Job) -> tuple[Job, ...]:
    """``job`` as it would run on each GPU type it may use, for jobs with per-type matrices.

    A view is the job restricted to one type (``gpu_types=(t,)``) whose ``sensitivity`` is
    that type's matrix, so the heuristics' demand tables and look-ups need no other change
    and the job runs on one GPU type (docs/formats.md section 1).  Types come in cluster order;
    a type whose GPUs cannot hold the job has no view.  A job without per-type matrices is
    its only view (single-type answers are unchanged).  When the cluster has untyped
    servers, or no single type can hold the job, a last view lets it span types with the
    pointwise slowest of its matrices (what a job spanning types realises).
    """
    if job.sensitivity_by_type is None:
        return (job,)
    return _type_views(job, _type_gpus(inst.cluster))


@lru_cache(maxsize=64)
def _type_gpus(cluster: Cluster) -> tuple[tuple[str | None, int], ...]:
    """GPUs per GPU type, in cluster order of first appearance."""
    out: dict[str | None, int] = {}
    for s in cluster.servers:
        if s.gpus > 0:  # a GPU-less node hosts no part of any job
            out[s.gpu_type] = out.get(s.gpu_type, 0) + s.gpus
    return tuple(out.items())


@lru_cache(maxsize=8192)
def _type_views(job: Job, type_gpus: tuple[tuple[str | None, int], ...]) -> tuple[Job, ...]:
    views: list[Job] = []
    usable: list[ThroughputMatrix] = []
    for t, gpus in type_gpus:
        if job.gpu_types is not None and t not in job.gpu_types:
            continue
        w = job.matrix_for(t)
        usable.append(w)
        if t is not None and gpus >= job.gpus:
            views.append(replace(job, sensitivity=w, gpu_types=(t,), sensitivity_by_type=None))
    untyped = any(t is None for t, _ in type_gpus if job.gpu_types is None)
    if untyped or not views:
        views.append(replace(job, sensitivity=_slowest(usable, job.sensitivity)))
    return tuple(views)


def _slowest(mats: Sequence[ThroughputMatrix], default: ThroughputMatrix) -> ThroughputMatrix:
    """Pointwise minimum of matrices on one grid (``default`` when their grids differ)."""
    if not mats or any((w.cpus, w.mem_gb) != (mats[0].cpus, mats[0].mem_gb) for w in mats):
        return default
    if len({id(w) for w in mats}) == 1:
        return mats[0]
    rows = tuple(
        tuple(min(vals) for vals in zip(*(w.throughput[i] for w in mats), strict=True))
        for i in range(len(mats[0].cpus))
    )
    return ThroughputMatrix(mats[0].cpus, mats[0].mem_gb, rows)


def order_views(
    state: ClusterState,
    views: Sequence[Job],
    demands: Sequence[tuple[int, float]],
    *,
    first_fit: bool = False,
) -> list[int]:
    """Indices of ``views``, type-agnostically: the one whose best-fit server is tightest first.

    A type-agnostic mechanism would best-fit (or first-fit) the job over all servers; with
    views, it takes the view whose own fitting server is the one that search would find
    (least free resources, or lowest index), views fitting on no single server last, in
    cluster order.  One view: ``[0]`` without any search.
    """
    if len(views) == 1:
        return [0]

    def key(k: int) -> tuple[int, tuple[int, int, float, int], int]:
        v = views[k]
        c, m = demands[k]
        if v.gpus <= state.max_server_gpus(v):
            i = (state.first_fit if first_fit else state.best_fit)(v, v.gpus, c, m)
            if i is not None:
                return (0, (i, 0, 0.0, 0) if first_fit else state._key(i), k)
        return (1, (0, 0, 0.0, 0), k)

    return sorted(range(len(views)), key=key)


def place_at_server_shares(
    state: ClusterState, inst: RoundInstance, job: Job, *, allow_spread: bool = True
) -> list[tuple[int, int, int, float]] | None:
    """GPU-proportional placement under the per-server rule (docs/formats.md section 1).

    Each part gets its own server's share, g*C_s/G_s cores and g*M_s/G_s GB, so the job's
    GPUs alone decide where it goes: best fit (least free) over servers with enough free
    GPUs, else spread over the servers with the most free GPUs.  What a GPU-proportional
    cluster hands out always fits a server whose other jobs took no more than their share,
    which is why a cluster-wide share can strand GPUs and this cannot.
    """
    g = job.gpus
    servers = state.servers
    if g <= state.max_server_gpus(job):
        for i in state.gpu_candidates(job, g):
            c, m = inst.server_share(g, servers[i])
            if state.fits(i, g, c, m):
                state.take(i, g, c, m)
                return [(i, g, c, m)]
    if not allow_spread:
        return None
    plan = state.spread_plan(job, g)
    if plan is None or len(plan) < 2:
        return None
    parts = [(i, k, *inst.server_share(k, servers[i])) for i, k in plan]
    if not all(state.fits(i, k, c, m) for i, k, c, m in parts):
        return None
    for i, k, c, m in parts:
        state.take(i, k, c, m)
    return parts


def max_single_server_gpus(servers: Sequence[Server], job: Job) -> int:
    """Most GPUs (total, not free) one server the job may use has; a bigger job must spread."""
    return max((s.gpus for s in servers if job.may_use(s)), default=0)


def select_runnable(inst: RoundInstance, passed_over: Set[str] = frozenset()) -> list[Job]:
    """The top jobs (instance order) whose GPU demands the free GPUs satisfy exactly.

    A job whose GPUs no longer fit is passed over, and later, smaller jobs fill the
    remaining GPUs, as the paper's artifact does.  GPU types are honoured by counting
    free GPUs per type and drawing a job's GPUs from its allowed types in cluster order.
    Jobs in ``passed_over`` (ids) are passed over the same way (``opt``'s jobs that no
    placement holds at their floor, :mod:`.opt.stranded`).
    """
    free: dict[str | None, int] = {}
    for s in inst.cluster.servers:
        free[s.gpu_type] = free.get(s.gpu_type, 0) + s.gpus
    total_free = sum(free.values())
    out: list[Job] = []
    for job in inst.jobs:
        if total_free == 0:
            break
        if job.id in passed_over:
            continue
        if job.gpu_types is None:
            types: Sequence[str | None] = list(free)
        else:
            types = [t for t in free if t in job.gpu_types]
        if sum(free[t] for t in types) < job.gpus:
            continue
        left = job.gpus
        for t in types:
            k = min(left, free[t])
            free[t] -= k
            left -= k
        total_free -= job.gpus
        out.append(job)
    return out


def most_free_first(
    free: Sequence[int], servers: Iterable[int], gpus: int
) -> tuple[list[tuple[int, int]], int]:
    """Take ``gpus`` GPUs from ``servers``, the servers with the most free GPUs first.

    The one spreading rule of the heuristics and the opt rounding: fewest parts, ties to the
    lower server index.  Returns ``[(server, gpus taken), ...]`` in taking order and the GPUs
    still missing (0 when the job fits); ``free`` is not changed.
    """
    order = sorted((s for s in servers if free[s] > 0), key=lambda s: (-free[s], s))
    plan: list[tuple[int, int]] = []
    left = gpus
    for s in order:
        if left == 0:
            break
        k = min(left, free[s])
        plan.append((s, k))
        left -= k
    return plan, left


def split_cpus(total: int, weights: Sequence[int]) -> list[int]:
    """Split whole cores in proportion to ``weights`` (largest remainder, ties by position)."""
    wsum = sum(weights)
    exact = [total * w / wsum for w in weights]
    parts = [math.floor(x) for x in exact]
    short = total - sum(parts)
    order = sorted(range(len(weights)), key=lambda k: (-(exact[k] - parts[k]), k))
    for k in order[:short]:
        parts[k] += 1
    return parts


def split_mem(total: float, weights: Sequence[int]) -> list[float]:
    """Split memory in proportion to ``weights``; the last part absorbs float rounding."""
    wsum = sum(weights)
    parts = [total * w / wsum for w in weights[:-1]]
    parts.append(max(0.0, total - math.fsum(parts)))
    return parts


#: A spread job's share of one server: (server index, gpus, cpus, mem_gb).
Part = tuple[int, int, int, float]


def split_within(old: Sequence[Part], cpus: int, mem: float) -> list[Part]:
    """Re-split (cpus, mem) over the same servers as ``old`` without growing any part.

    Largest-remainder splits are not monotone in the total (the Alabama paradox), so a
    proportional re-split could grow one part while shrinking the total; capping each part
    at its old size and handing the deficit back, first parts first, keeps every server's
    release >= 0.  TUNE's resident shrinking and the artifact's peer reversion both use it.
    """
    weights = [k for _, k, _, _ in old]
    cs = [min(a, p[2]) for a, p in zip(split_cpus(cpus, weights), old, strict=True)]
    ms = [min(a, p[3]) for a, p in zip(split_mem(mem, weights), old, strict=True)]
    short_c, short_m = cpus - sum(cs), mem - sum(ms)
    for k, p in enumerate(old):
        add = min(short_c, p[2] - cs[k])
        cs[k] += add
        short_c -= add
        add_m = max(0.0, min(short_m, p[3] - ms[k]))
        ms[k] += add_m
        short_m -= add_m
    return [(p[0], p[1], c, m) for p, c, m in zip(old, cs, ms, strict=True)]


@dataclass(frozen=True, slots=True)
class DemandPoint:
    """A grid point a job may ask for, with its cost in cluster-normalised resources."""

    cost: float
    cpus: int
    mem_gb: float
    throughput: float


class DemandTable:
    """Per-matrix demand points, memoised so repeated rounds do not recompute them.

    "Cheapest" means the smallest ``cpus / C + mem / M`` for the cluster totals C and M:
    both resources weighted by their scarcity, ties to fewer cores, then less memory.
    """

    def __init__(self) -> None:
        self._cache: dict[tuple[object, int, float], tuple[DemandPoint, ...]] = {}
        self._best: dict[tuple[object, int, float], DemandPoint] = {}

    def points(self, job: Job, total_cpus: int, total_mem: float) -> tuple[DemandPoint, ...]:
        """All grid points of the job's matrix, cheapest first."""
        key = (job.sensitivity, total_cpus, total_mem)
        pts = self._cache.get(key)
        if pts is None:
            cs = max(total_cpus, 1)
            ms = total_mem if total_mem > 0 else 1.0
            pts = tuple(
                sorted(
                    (DemandPoint(c / cs + m / ms, c, m, w) for c, m, w in job.sensitivity.points()),
                    key=lambda p: (p.cost, p.cpus, p.mem_gb),
                )
            )
            self._cache[key] = pts
        return pts

    def best(self, job: Job, total_cpus: int, total_mem: float) -> DemandPoint:
        """The cheapest grid point that reaches the job's best throughput."""
        key = (job.sensitivity, total_cpus, total_mem)
        got = self._best.get(key)
        if got is None:
            pts = self.points(job, total_cpus, total_mem)
            top = max(p.throughput for p in pts)
            got = next(p for p in pts if p.throughput >= top - THROUGHPUT_EPS)
            self._best[key] = got
        return got

    def shrink(
        self, job: Job, total_cpus: int, total_mem: float, cpus: int, mem: float, floor: float
    ) -> DemandPoint | None:
        """Cheapest point within (cpus, mem) in both dimensions keeping ``floor`` throughput."""
        for p in self.points(job, total_cpus, total_mem):
            if (
                p.cpus <= cpus
                and p.mem_gb <= mem + MEM_EPS_GB
                and p.throughput >= floor - THROUGHPUT_EPS
            ):
                return p
        return None


def spread_parts(
    state: ClusterState, plan: Sequence[tuple[int, int]], cpus: int, mem: float
) -> list[tuple[int, int, int, float]]:
    """(server, gpus, cpus, mem) per part: cores and memory follow the GPUs of each part."""
    weights = [k for _, k in plan]
    cs = split_cpus(cpus, weights)
    ms = split_mem(mem, weights)
    return [(i, k, c, m) for (i, k), c, m in zip(plan, cs, ms, strict=True)]


def place_job(
    state: ClusterState,
    job: Job,
    cpus: int,
    mem: float,
    *,
    first_fit: bool = False,
    allow_spread: bool = True,
    fit_spread: bool = False,
) -> list[tuple[int, int, int, float]] | None:
    """Place ``job`` with (cpus, mem) in total: consolidated if possible, else spread.

    Consolidation uses best fit (least free resources) or, for GREEDY, first fit.  Parts
    are taken from ``state`` only when every part fits, so a failure changes nothing.
    ``fit_spread`` adds a last resort for demands that must be met somewhere (the
    GPU-proportional share, or TUNE's fair-share-keeping fallback): spread over as many
    servers as it takes to feed each part (:meth:`ClusterState.fitting_spread_plan`).
    """
    g = job.gpus
    fit = state.first_fit if first_fit else state.best_fit
    if g <= state.max_server_gpus(job):
        i = fit(job, g, cpus, mem)
        if i is not None:
            state.take(i, g, cpus, mem)
            return [(i, g, cpus, mem)]
    if not allow_spread:
        return None
    plan = state.spread_plan(job, g)
    parts: list[tuple[int, int, int, float]] | None = None
    if plan is not None and len(plan) > 1:
        parts = spread_parts(state, plan, cpus, mem)
        if not all(state.fits(i, k, c, m) for i, k, c, m in parts):
            parts = None
    if parts is None:
        if not fit_spread:
            return None
        # The GPU-only plan failed on cores or memory (a big share on small servers):
        # spread by what each server can feed instead.
        plan = state.fitting_spread_plan(job, g, cpus, mem)
        if plan is None:
            return None
        parts = spread_parts(state, plan, cpus, mem)
        if not all(state.fits(i, k, c, m) for i, k, c, m in parts):
            return None
    for i, k, c, m in parts:
        state.take(i, k, c, m)
    return parts
