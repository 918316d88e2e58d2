"""Plain, immutable data types shared by every part of synergy-opt.

This module owns the vocabulary of a scheduling round: servers and clusters, a job's
throughput matrix W_j with its floor look-up, jobs, round instances, and allocations with
per-server placement parts.  It knows nothing of solvers, files or the command line, so
every other module (I/O, formulations, mechanisms, simulator) can depend on it freely.

Validation lives in ``__post_init__`` and raises :class:`ValidationError` carrying the
field path that is wrong, so the I/O layer can turn it into a one-line message.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

# Re-exported: ValidationError's home is synergy_opt.errors (below every module).
from synergy_opt.errors import ValidationError as ValidationError

#: Memory quantities are floats (GB); comparisons of memory against grid points and
#: capacities allow this slack so that, e.g., 8 x 62.5 fits in 500 after float sums.
MEM_EPS_GB: float = 1e-6
#: Throughput comparisons (fair-share floor, reported values) use this absolute slack.
THROUGHPUT_EPS: float = 1e-9
#: How a job's GPU-proportional share is defined (docs/formats.md section 1): ``"server"``, the
#: share of the servers it runs on, g*C_s/G_s and g*M_s/G_s (what a GPU-proportional cluster
#: hands out); ``"cluster"``, the cluster-wide g*C/G and g*M/G (the rule before issue 11).
FAIR_SHARE_RULES: tuple[str, ...] = ("server", "cluster")
#: The rule of an instance that names none (top-level ``fair_share`` absent).
DEFAULT_FAIR_SHARE_RULE: str = "server"


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _finite(x: float) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


# --------------------------------------------------------------------------- cluster


@dataclass(frozen=True, slots=True)
class Server:
    """One machine: whole GPUs and cores, memory in GB, optional GPU type."""

    name: str
    gpus: int
    cpus: int
    mem_gb: float
    gpu_type: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValidationError("name", "must be a non-empty string")
        if not _is_int(self.gpus) or self.gpus < 0:
            raise ValidationError("gpus", f"must be an integer >= 0, got {self.gpus!r}")
        if not _is_int(self.cpus) or self.cpus < 0:
            raise ValidationError("cpus", f"must be an integer >= 0, got {self.cpus!r}")
        if not _finite(self.mem_gb) or self.mem_gb < 0:
            raise ValidationError("mem_gb", f"must be a finite number >= 0, got {self.mem_gb!r}")
        if self.gpu_type is not None and (not isinstance(self.gpu_type, str) or not self.gpu_type):
            raise ValidationError("gpu_type", "must be a non-empty string")


@dataclass(frozen=True, slots=True)
class Cluster:
    """A set of servers; totals define every job's GPU-proportional share."""

    servers: tuple[Server, ...]
    # Totals are read once per job per round by every mechanism: computed once here.
    _totals: tuple[int, int, float] = field(init=False, repr=False, compare=False)
    # Servers by name, read per placed job under the per-server rule: built once here (an
    # lru_cache keyed on the cluster hashed all its servers per read, 60 us at 512 GPUs).
    _by_name: dict[str, Server] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {s.name: s for s in self.servers})
        object.__setattr__(
            self,
            "_totals",
            (
                sum(s.gpus for s in self.servers),
                sum(s.cpus for s in self.servers),
                math.fsum(s.mem_gb for s in self.servers),
            ),
        )
        if not self.servers:
            raise ValidationError("servers", "must list at least one server")
        seen: set[str] = set()
        for i, s in enumerate(self.servers):
            if s.name in seen:
                raise ValidationError(f"servers[{i}].name", f"duplicate server name {s.name!r}")
            seen.add(s.name)
        if self.total_gpus < 1:
            raise ValidationError("servers", "the cluster has no GPU")

    @property
    def total_gpus(self) -> int:
        """G, the cluster's GPU count."""
        return self._totals[0]

    @property
    def total_cpus(self) -> int:
        """C, the cluster's core count."""
        return self._totals[1]

    @property
    def total_mem_gb(self) -> float:
        """M, the cluster's memory."""
        return self._totals[2]

    def fair_share(self, gpus: int) -> tuple[int, float]:
        """GPU-proportional (cores, GB) for a job of ``gpus`` GPUs: floor(gC/G), gM/G."""
        g_total, c_total, m_total = self._totals
        return (gpus * c_total) // g_total, gpus * m_total / g_total

    @property
    def gpu_types(self) -> tuple[str | None, ...]:
        """Distinct GPU types in order of first appearance."""
        return tuple(dict.fromkeys(s.gpu_type for s in self.servers))

    @property
    def max_server_gpus(self) -> int:
        """The most GPUs any single server has (consolidation limit)."""
        return max(s.gpus for s in self.servers)


# --------------------------------------------------------------------------- throughput


@dataclass(frozen=True, slots=True)
class ThroughputMatrix:
    """W_j over a grid of *total* cores (ascending ints) and memory (ascending GB).

    The floor look-up is the single definition of "throughput of an allocation" used by
    every mechanism (docs/formats.md section 1): the value at the largest grid point that does
    not exceed the allocation in either dimension, 0 below the grid.
    """

    cpus: tuple[int, ...]
    mem_gb: tuple[float, ...]
    throughput: tuple[tuple[float, ...], ...]
    # Matrices key the mechanisms' demand caches; hashing 45 floats per look-up adds up.
    _hash: int = field(init=False, repr=False, compare=False)

    def __hash__(self) -> int:
        return self._hash

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.cpus, self.mem_gb, self.throughput)))
        if not self.cpus:
            raise ValidationError("cpus", "must not be empty")
        for i, c in enumerate(self.cpus):
            if not _is_int(c) or c < 1:
                raise ValidationError(f"cpus[{i}]", f"must be a positive integer, got {c!r}")
            if i and c <= self.cpus[i - 1]:
                raise ValidationError(f"cpus[{i}]", "values must be strictly ascending")
        if not self.mem_gb:
            raise ValidationError("mem_gb", "must not be empty")
        for k, m in enumerate(self.mem_gb):
            if not _finite(m) or m <= 0:
                raise ValidationError(
                    f"mem_gb[{k}]", f"must be a positive finite number, got {m!r}"
                )
            if k and m <= self.mem_gb[k - 1]:
                raise ValidationError(f"mem_gb[{k}]", "values must be strictly ascending")
        if len(self.throughput) != len(self.cpus):
            raise ValidationError(
                "throughput", f"has {len(self.throughput)} rows, expected {len(self.cpus)}"
            )
        for i, row in enumerate(self.throughput):
            if len(row) != len(self.mem_gb):
                raise ValidationError(
                    "throughput", f"row {i} has {len(row)} values, expected {len(self.mem_gb)}"
                )
            for k, w in enumerate(row):
                if not _finite(w) or w < 0:
                    raise ValidationError(
                        f"throughput[{i}][{k}]", f"must be a finite number >= 0, got {w!r}"
                    )

    @classmethod
    def from_lists(
        cls, cpus: Sequence[int], mem_gb: Sequence[float], throughput: Sequence[Sequence[float]]
    ) -> ThroughputMatrix:
        """Build from any sequences (lists from JSON, numpy rows)."""
        return cls(
            tuple(int(c) for c in cpus),
            tuple(float(m) for m in mem_gb),
            tuple(tuple(float(w) for w in row) for row in throughput),
        )

    def lookup(self, cpus: float, mem_gb: float) -> float:
        """Floor look-up W(c, m); 0 when below the smallest grid point."""
        i = bisect.bisect_right(self.cpus, cpus + 1e-9) - 1
        k = bisect.bisect_right(self.mem_gb, mem_gb + MEM_EPS_GB) - 1
        if i < 0 or k < 0:
            return 0.0
        return self.throughput[i][k]

    @property
    def max_throughput(self) -> float:
        """The best value anywhere on the grid."""
        return max(max(row) for row in self.throughput)

    def points(self) -> Iterable[tuple[int, float, float]]:
        """Every grid point as (cpus, mem_gb, throughput), row-major."""
        for i, c in enumerate(self.cpus):
            for k, m in enumerate(self.mem_gb):
                yield c, m, self.throughput[i][k]


def lowest_matrix(mats: Sequence[ThroughputMatrix]) -> ThroughputMatrix:
    """Pointwise minimum of ``mats`` on the union of their grid axes (floor look-ups): what a
    job whose parts may sit on any of their GPU types is sure to run at."""
    if len(mats) == 1:
        return mats[0]
    cpus = sorted({c for w in mats for c in w.cpus})
    mems = sorted({m for w in mats for m in w.mem_gb})
    rows = [[min(w.lookup(c, m) for w in mats) for m in mems] for c in cpus]
    return ThroughputMatrix.from_lists(cpus, mems, rows)


# --------------------------------------------------------------------------- jobs


@dataclass(frozen=True, slots=True)
class Job:
    """A job wanting ``gpus`` GPUs for its lifetime, with its sensitivity matrix."""

    id: str
    gpus: int
    sensitivity: ThroughputMatrix
    model: str | None = None
    category: str | None = None
    split_penalty: float = 1.0
    gpu_types: tuple[str, ...] | None = None
    #: W_j per GPU type, ``(type, matrix)`` pairs in file order (docs/formats.md section 1, GPU
    #: types): on a server of a listed type the job's throughput is looked up there;
    #: ``sensitivity`` stays the reference type's matrix and that of every type not listed.
    sensitivity_by_type: tuple[tuple[str, ThroughputMatrix], ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ValidationError("id", "must be a non-empty string")
        if self.sensitivity_by_type is not None:
            seen_types: set[str] = set()
            for t, w in self.sensitivity_by_type:
                if not isinstance(t, str) or not t:
                    raise ValidationError("sensitivity_by_type", "GPU types must be non-empty")
                if t in seen_types:
                    raise ValidationError(f"sensitivity_by_type.{t}", "listed twice")
                if not isinstance(w, ThroughputMatrix):
                    raise ValidationError(f"sensitivity_by_type.{t}", "must be a matrix")
                seen_types.add(t)
        if not _is_int(self.gpus) or self.gpus < 1:
            raise ValidationError("gpus", f"must be an integer >= 1, got {self.gpus!r}")
        if not _finite(self.split_penalty) or not 0 < self.split_penalty <= 1:
            raise ValidationError("split_penalty", f"must be in (0, 1], got {self.split_penalty!r}")
        if self.gpu_types is not None:
            if not self.gpu_types:
                raise ValidationError("gpu_types", "must list at least one GPU type")
            for i, t in enumerate(self.gpu_types):
                if not isinstance(t, str) or not t:
                    raise ValidationError(f"gpu_types[{i}]", "must be a non-empty string")

    def may_use(self, server: Server) -> bool:
        """Whether this job's GPU-type restriction admits ``server``."""
        return self.gpu_types is None or server.gpu_type in self.gpu_types

    def matrix_for(self, gpu_type: str | None) -> ThroughputMatrix:
        """W_j on a server of ``gpu_type``: its per-type matrix, else ``sensitivity``."""
        if self.sensitivity_by_type is not None and gpu_type is not None:
            for t, w in self.sensitivity_by_type:
                if t == gpu_type:
                    return w
        return self.sensitivity

    def matrices_for(self, gpu_types: Iterable[str | None]) -> tuple[ThroughputMatrix, ...]:
        """The distinct matrices of this job on servers of ``gpu_types``, first seen first."""
        return tuple({id(m): m for m in (self.matrix_for(t) for t in gpu_types)}.values())

    def matrix_on(self, gpu_types: Iterable[str | None]) -> ThroughputMatrix | None:
        """The one matrix that applies on servers of ``gpu_types``; ``None`` if they differ.

        A job spanning several GPU types has no single matrix (docs/formats.md: a job runs on
        one GPU type at a time); :func:`realised_throughput` then takes the slowest type.
        """
        found = self.matrices_for(gpu_types)
        return found[0] if len(found) == 1 else None


@dataclass(frozen=True, slots=True)
class RoundInstance:
    """One scheduling round: a cluster and jobs in priority order (first = most important)."""

    name: str
    cluster: Cluster
    jobs: tuple[Job, ...]
    # Memo of fair-share throughput per (matrix, gpus): read several times per job per round.
    _fair_memo: dict[tuple[object, ...], float] = field(
        init=False, repr=False, compare=False, default_factory=dict
    )
    #: The instance's top-level ``fair_share`` as written (``None``: the default rule).
    fair_share_rule: str | None = None
    # Whether shares differ by server (read per job per round): decided once.
    _per_server: bool = field(init=False, repr=False, compare=False, default=False)

    def __post_init__(self) -> None:
        if self.fair_share_rule is not None and self.fair_share_rule not in FAIR_SHARE_RULES:
            raise ValidationError(
                "fair_share",
                f"expected one of {', '.join(map(repr, FAIR_SHARE_RULES))}, "
                f"got {self.fair_share_rule!r}",
            )
        object.__setattr__(
            self,
            "_per_server",
            self.fair_share_mode == "server" and not _uniform_shares(self.cluster),
        )
        seen: set[str] = set()
        g_total = self.cluster.total_gpus
        # GPUs per type, counted once: the per-job checks below stay O(types), not
        # O(servers), so 100,000 servers x 1,000,000 jobs validate in linear time.
        gpus_of_type: dict[str | None, int] = {}
        for s in self.cluster.servers:
            gpus_of_type[s.gpu_type] = gpus_of_type.get(s.gpu_type, 0) + s.gpus
        for i, j in enumerate(self.jobs):
            if j.id in seen:
                raise ValidationError(f"jobs[{i}].id", f"duplicate job id {j.id!r}")
            seen.add(j.id)
            if j.gpus > g_total:
                raise ValidationError(
                    f"jobs[{i}].gpus", f"wants {j.gpus} GPUs, the whole cluster has {g_total}"
                )
            if j.sensitivity_by_type is not None:
                for t, _ in j.sensitivity_by_type:
                    if t not in gpus_of_type:
                        have = sorted(x for x in gpus_of_type if x is not None)
                        raise ValidationError(
                            f"jobs[{i}].sensitivity_by_type.{t}",
                            f"no server has GPU type {t!r} (the cluster's types: "
                            f"{', '.join(have) if have else 'none'})",
                        )
            if j.gpu_types is not None:
                usable = sum(gpus_of_type.get(t, 0) for t in set(j.gpu_types))
                if j.gpus > usable:
                    raise ValidationError(
                        f"jobs[{i}].gpu_types",
                        f"the cluster has {usable} GPUs of types {list(j.gpu_types)}, "
                        f"the job wants {j.gpus}",
                    )

    def fair_share(self, job: Job) -> tuple[int, float]:
        """The job's cluster-wide GPU-proportional (cores, GB), floor(gC/G) and gM/G."""
        return self.cluster.fair_share(job.gpus)

    @property
    def fair_share_mode(self) -> str:
        """The rule in force: the instance's ``fair_share``, else the default."""
        return self.fair_share_rule or DEFAULT_FAIR_SHARE_RULE

    @property
    def per_server_shares(self) -> bool:
        """Whether shares depend on the placement: the ``"server"`` rule on a cluster whose
        GPU servers do not all have the cluster's cores and memory per GPU, or where that
        is a fractional number of cores (each part's share is rounded down on its own).

        Where every GPU server has the cluster-wide ratios with whole cores per GPU the two
        rules agree, and the cluster-wide formulas (the same numbers, the same bytes) are
        used.
        """
        return self._per_server

    def server_share(self, gpus: int, server: Server) -> tuple[int, float]:
        """GPU-proportional (cores, GB) of ``gpus`` GPUs on ``server``: g*C_s/G_s, g*M_s/G_s.

        Under the ``"cluster"`` rule, or where all servers agree, the cluster-wide share.
        """
        if not self.per_server_shares or server.gpus < 1:
            return self.cluster.fair_share(gpus)
        return (gpus * server.cpus) // server.gpus, gpus * server.mem_gb / server.gpus

    def placed_share(self, job: Job, parts: Sequence[PlacementPart]) -> tuple[int, float]:
        """The job's GPU-proportional share where it runs: the sum of its servers' shares."""
        if not self.per_server_shares:
            return self.cluster.fair_share(job.gpus)
        by_name = self.cluster._by_name
        gpus: dict[str, int] = {}
        for p in parts:
            gpus[p.server] = gpus.get(p.server, 0) + p.gpus
        cores, mem = 0, []
        for name, g in gpus.items():
            c, m = self.server_share(g, by_name[name])
            cores += c
            mem.append(m)
        return cores, math.fsum(mem)

    def fair_share_throughput_on(self, job: Job, parts: Sequence[PlacementPart]) -> float:
        """The fair-share throughput of ``job`` as placed: the floor the checker enforces.

        Under the ``"server"`` rule, W at the sum of the job's servers' shares; otherwise
        :meth:`fair_share_throughput`.  Either way a job with per-type matrices is read in
        its slowest usable type's matrix, the type-agnostic baseline's guarantee.
        """
        if not self.per_server_shares:
            return self.fair_share_throughput(job)
        c, m = self.placed_share(job, parts)
        return min(w.lookup(c, m) for w in self.usable_matrices(job))

    def fair_share_throughput(self, job: Job) -> float:
        """W_j at the GPU-proportional share, before placement: the floor models pool.

        A job with per-type matrices gets the smallest value over the GPU types it may run
        on: a type-agnostic GPU-proportional baseline may place it on any of them, so that
        minimum is what the baseline guarantees (docs/gpu-types.md).  Under the
        ``"server"`` rule on a mixed-shape cluster, the smallest over the servers the job
        may use (docs/formats.md: the super-machine's relaxation); a placed job's floor is
        :meth:`fair_share_throughput_on`.
        """
        if job.sensitivity_by_type is None:
            key: tuple[object, ...] = (job.sensitivity, job.gpus)
        else:
            key = (job.sensitivity, job.gpus, job.sensitivity_by_type, job.gpu_types)
        if self.per_server_shares:
            key = (*key, job.gpu_types)
        w = self._fair_memo.get(key)
        if w is None:
            if self.per_server_shares:
                mats = self.usable_matrices(job)
                w = min(
                    mat.lookup(*self.server_share(job.gpus, s))
                    for s in self.cluster.servers
                    if s.gpus > 0 and job.may_use(s)
                    for mat in mats
                )
            else:
                c, m = self.cluster.fair_share(job.gpus)
                w = min(mat.lookup(c, m) for mat in self.usable_matrices(job))
            self._fair_memo[key] = w
        return w

    def usable_matrices(self, job: Job) -> tuple[ThroughputMatrix, ...]:
        """The distinct matrices of ``job`` on the GPU types of the servers it may use."""
        if job.sensitivity_by_type is None:
            return (job.sensitivity,)
        types = dict.fromkeys(
            s.gpu_type for s in self.cluster.servers if s.gpus > 0 and job.may_use(s)
        )
        return job.matrices_for(types)

    def job_by_id(self) -> dict[str, Job]:
        """Jobs keyed by id."""
        return {j.id: j for j in self.jobs}


def _uniform_shares(cluster: Cluster) -> bool:
    """Every GPU server has the cluster's cores and memory per GPU (exact for cores), and
    that is a whole number of cores.

    Only then does the sum of a spread job's per-server shares, floor(q C_s / G_s) over its
    parts of q GPUs, equal the cluster-wide floor(g C / G): at 7 cores per 2 GPUs two 1-GPU
    parts hold 3 + 3 cores where the cluster-wide formula gives 7.
    """
    g, c, m = cluster.total_gpus, cluster.total_cpus, cluster.total_mem_gb
    return all(
        s.cpus * g == c * s.gpus
        and s.cpus % s.gpus == 0
        and math.isclose(s.mem_gb * g, m * s.gpus, rel_tol=1e-12)
        for s in cluster.servers
        if s.gpus > 0
    )


def intern_matrices(jobs: Sequence[Job]) -> tuple[Job, ...]:
    """The same jobs, with equal throughput matrices replaced by one shared object.

    Mechanisms memoise per matrix; shared objects make those caches hit by identity instead
    of comparing 45 floats (many models, e.g. every language model, have equal matrices).
    """
    seen: dict[ThroughputMatrix, ThroughputMatrix] = {}
    out = []
    for j in jobs:
        w = seen.setdefault(j.sensitivity, j.sensitivity)
        if j.sensitivity_by_type is not None:
            typed = tuple((t, seen.setdefault(m, m)) for t, m in j.sensitivity_by_type)
            if any(a is not b for (_, a), (_, b) in zip(typed, j.sensitivity_by_type, strict=True)):
                j = replace(j, sensitivity_by_type=typed)
        out.append(j if w is j.sensitivity else replace(j, sensitivity=w))
    return tuple(out)


# --------------------------------------------------------------------------- allocations


@dataclass(frozen=True, slots=True)
class PlacementPart:
    """The share of one job that sits on one server."""

    server: str
    gpus: int
    cpus: int
    mem_gb: float


@dataclass(frozen=True, slots=True)
class JobAllocation:
    """What one scheduled job receives, with throughput by the floor look-up."""

    id: str
    gpus: int
    cpus: int
    mem_gb: float
    placement: tuple[PlacementPart, ...]
    throughput: float
    fair_share_throughput: float

    @property
    def fragmented(self) -> bool:
        """True when the job spans more than one server."""
        return len({p.server for p in self.placement}) > 1


@dataclass(frozen=True, slots=True)
class Allocation:
    """A mechanism's answer for one round (docs/formats.md ``synergy-allocation/1``)."""

    instance: str
    mechanism: str
    jobs: tuple[JobAllocation, ...]
    unscheduled: tuple[str, ...]
    total_throughput: float
    fragmented_jobs: int
    solver: str | None = None
    upper_bound: float | None = None
    solve_seconds: float = 0.0
    #: Optional remarks (e.g. "fell back to tune: time limit"); written only when present.
    notes: tuple[str, ...] = field(default=())


def realised_throughput(
    job: Job, parts: Sequence[PlacementPart], types: Mapping[str, str | None] | None = None
) -> float:
    """Throughput of ``job`` given its placement parts (floor look-up, split penalty).

    ``types`` maps server names to GPU types; a job with per-type matrices is looked up in
    the matrix of its servers' type, and one spanning several types runs at its slowest
    type's value (synchronous data-parallel training waits for the slowest worker).
    """
    cpus = sum(p.cpus for p in parts)
    mem = math.fsum(p.mem_gb for p in parts)
    if job.sensitivity_by_type is None or types is None:
        w = job.sensitivity.lookup(cpus, mem)
    else:
        kinds = dict.fromkeys(types.get(p.server) for p in parts)
        w = min(job.matrix_for(t).lookup(cpus, mem) for t in kinds)
    if len({p.server for p in parts}) > 1:
        w *= job.split_penalty
    return w


def merged_parts(
    parts: Sequence[PlacementPart], order: Mapping[str, int]
) -> tuple[PlacementPart, ...]:
    """A job's parts merged per server (GPUs, cores and GB summed) in server order
    (``order``: server name -> index), as an allocation reports them."""
    merged: dict[str, list[float]] = {}
    for p in parts:
        acc = merged.setdefault(p.server, [0, 0, 0.0])
        acc[0] += p.gpus
        acc[1] += p.cpus
        acc[2] += p.mem_gb
    return tuple(
        PlacementPart(s, int(v[0]), int(v[1]), float(v[2]))
        for s, v in sorted(merged.items(), key=lambda kv: order[kv[0]])
    )


def build_allocation(
    inst: RoundInstance,
    mechanism: str,
    placements: Mapping[str, Sequence[PlacementPart]],
    *,
    solver: str | None = None,
    upper_bound: float | None = None,
    solve_seconds: float = 0.0,
    notes: Sequence[str] = (),
) -> Allocation:
    """Assemble an :class:`Allocation` from per-job placement parts.

    Jobs appear in instance order, parts in server order, so every mechanism's output is
    deterministic regardless of the order in which it placed jobs.
    """
    order = {s.name: i for i, s in enumerate(inst.cluster.servers)}
    types = {s.name: s.gpu_type for s in inst.cluster.servers}
    jobs: list[JobAllocation] = []
    unscheduled: list[str] = []
    for job in inst.jobs:
        parts = placements.get(job.id)
        if not parts:
            unscheduled.append(job.id)
            continue
        if len(parts) == 1:  # the common case: one part, nothing to merge or sort
            p = parts[0]
            ordered: tuple[PlacementPart, ...] = (
                p
                if isinstance(p.mem_gb, float)
                else PlacementPart(p.server, p.gpus, p.cpus, float(p.mem_gb)),
            )
            w = job.matrix_for(types.get(p.server)).lookup(p.cpus, p.mem_gb)
            jobs.append(
                JobAllocation(
                    job.id,
                    p.gpus,
                    p.cpus,
                    float(p.mem_gb),
                    ordered,
                    w,
                    inst.fair_share_throughput_on(job, ordered),
                )
            )
            continue
        ordered = merged_parts(parts, order)
        jobs.append(
            JobAllocation(
                id=job.id,
                gpus=sum(p.gpus for p in ordered),
                cpus=sum(p.cpus for p in ordered),
                mem_gb=math.fsum(p.mem_gb for p in ordered),
                placement=ordered,
                throughput=realised_throughput(job, ordered, types),
                fair_share_throughput=inst.fair_share_throughput_on(job, ordered),
            )
        )
    return Allocation(
        instance=inst.name,
        mechanism=mechanism,
        jobs=tuple(jobs),
        unscheduled=tuple(unscheduled),
        total_throughput=math.fsum(j.throughput for j in jobs),
        fragmented_jobs=sum(1 for j in jobs if j.fragmented),
        solver=solver,
        upper_bound=upper_bound,
        solve_seconds=solve_seconds,
        notes=tuple(notes),
    )
