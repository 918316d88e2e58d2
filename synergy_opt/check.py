"""An independent checker for allocations: it recomputes everything from the allocation alone.

Written without the mechanisms' helpers (it has its own floor look-up over the raw grid) so
a bug shared by a mechanism and the code that checks it cannot hide.  It reports and does not
judge: each rule is a :class:`Violation` ``kind``, and tests decide which kinds a mechanism
must avoid (GREEDY, for instance, may leave jobs below their fair share by not scheduling
them, but never over-fills a server).

The kinds are listed once, in :data:`RULES` (name, the rule in words, the function finding
its violations); :data:`KINDS` holds their names.  Each rule is one small function over
:class:`Facts`: what the allocation says, tallied once (each job's summed parts, the servers
it touches, the floor look-up of its throughput).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from synergy_opt.types import (
    Allocation,
    Cluster,
    Job,
    JobAllocation,
    PlacementPart,
    RoundInstance,
    Server,
    ThroughputMatrix,
)

#: Absolute slack for throughput and memory comparisons.
ABS_TOL: float = 1e-6
#: Relative slack for summed quantities (total throughput, memory per server).
REL_TOL: float = 1e-9


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken rule: what kind, where (job id or server name), and a readable message."""

    kind: str
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.where}: {self.message}"


def _matrix(job: Job, gpu_type: str | None) -> ThroughputMatrix:
    """The job's matrix on ``gpu_type``: its ``sensitivity_by_type`` entry, else the default."""
    for t, w in job.sensitivity_by_type or ():
        if t == gpu_type:
            return w
    return job.sensitivity


def _typed_lookup(job: Job, gpu_types: Iterable[str | None], cpus: float, mem: float) -> float:
    """The floor look-up on servers of ``gpu_types``: the slowest type's value when several."""
    values = [_floor_lookup(_matrix(job, t), cpus, mem) for t in set(gpu_types)]
    return min(values) if values else _floor_lookup(job.sensitivity, cpus, mem)


def _floor_lookup(w: ThroughputMatrix, cpus: float, mem: float) -> float:
    """W at the largest grid point <= (cpus, mem); written apart from ThroughputMatrix.

    The axes are strictly ascending (``ThroughputMatrix`` refuses others), so the largest
    index at or below a value is a bisection: the same index as a scan of the axis, at a
    fraction of its cost (the check runs on every OPT answer)."""
    ci = bisect_right(w.cpus, cpus + 1e-9) - 1
    mi = bisect_right(w.mem_gb, mem + ABS_TOL) - 1
    if ci < 0 or mi < 0:
        return 0.0
    return w.throughput[ci][mi]


def fair_share_floor(
    inst: RoundInstance, job: Job, parts: Sequence[PlacementPart] | None = None
) -> tuple[float, float]:
    """(fair-share throughput, required throughput) for ``job``, placed on ``parts``.

    The required value is the fair-share throughput, times the job's ``split_penalty`` when
    the job is larger than any single server it may use: then even PROPORTIONAL must spread
    it, so the penalty is part of its GPU-proportional baseline.

    Under the instance's ``"server"`` rule (docs/formats.md section 1) the share is the sum of
    g*C_s/G_s and g*M_s/G_s over the servers of ``parts``; without ``parts``, the smallest
    value over the servers the job may use.  Under ``"cluster"``, the cluster-wide share.
    Either way a job with per-type matrices is read in its slowest usable type's matrix.
    """
    g_total, c_total, m_total, biggest, _, _ = _cluster_facts(inst.cluster)
    if inst.fair_share_mode == "server":
        fair_tp = _server_rule_floor(inst, job, parts)
    else:
        fair_c = (job.gpus * c_total) // g_total
        fair_m = job.gpus * m_total / g_total
        # A type-agnostic baseline may put the job on any type it may use: the slowest counts.
        usable = (
            t for t, g in biggest.items() if g > 0 and (job.gpu_types is None or t in job.gpu_types)
        )
        fair_tp = _typed_lookup(job, usable, fair_c, fair_m)
    return fair_tp, fair_tp * forced_split_factor(inst, job)


def forced_split_factor(inst: RoundInstance, job: Job) -> float:
    """``job.split_penalty`` when no server ``job`` may use holds all its GPUs, else 1.

    Such a job must spread even under PROPORTIONAL, so the penalty is part of its
    GPU-proportional baseline: the one rule the checker, the formulations and the mechanisms
    share for the forced-split fair-share floor.
    """
    biggest = _cluster_facts(inst.cluster)[3]
    if job.gpu_types is None:
        most = max(biggest.values(), default=0)
    else:
        most = max((biggest.get(t, 0) for t in job.gpu_types), default=0)
    return job.split_penalty if job.gpus > most else 1.0


def _server_rule_floor(
    inst: RoundInstance, job: Job, parts: Sequence[PlacementPart] | None
) -> float:
    """The per-server rule's fair-share throughput (recomputed from the raw servers: one
    GPU server of each kind stands for the others, a share and a type being all it gives)."""
    _, _, _, _, servers, kinds = _cluster_facts(inst.cluster)

    def share(g: int, s: Server) -> tuple[int, float]:
        return (g * s.cpus) // s.gpus, g * s.mem_gb / s.gpus

    usable = [s for s in kinds if job.gpu_types is None or s.gpu_type in job.gpu_types]
    types = {s.gpu_type for s in usable}  # the slowest usable type counts, as cluster-wide
    placed = [p for p in parts or () if p.server in servers and servers[p.server].gpus > 0]
    if not placed:  # before placement: the smallest over the servers the job may use
        return min(_typed_lookup(job, types, *share(job.gpus, s)) for s in usable)
    gpus: dict[str, int] = {}
    for p in placed:
        gpus[p.server] = gpus.get(p.server, 0) + p.gpus
    cores = sum(share(g, servers[n])[0] for n, g in gpus.items())
    mem = math.fsum(share(g, servers[n])[1] for n, g in gpus.items())
    return _typed_lookup(job, types, cores, mem)


ClusterFacts = tuple[int, int, float, dict[str | None, int], dict[str, Server], tuple[Server, ...]]
#: Clusters seen lately, by identity (the cluster kept alive so its id is not reused): a
#: hash-keyed cache hashed every server of the cluster on each of thousands of calls.
_CLUSTER_FACTS: dict[int, tuple[Cluster, ClusterFacts]] = {}
_CLUSTER_FACTS_SIZE: int = 16


def _cluster_facts(cluster: Cluster) -> ClusterFacts:
    """G, C, M, the biggest server per GPU type, the servers by name and one GPU server per
    (GPUs, cores, memory, GPU type), once per cluster (not once per job)."""
    hit = _CLUSTER_FACTS.get(id(cluster))
    if hit is not None and hit[0] is cluster:
        return hit[1]
    biggest: dict[str | None, int] = {}
    for s in cluster.servers:
        biggest[s.gpu_type] = max(biggest.get(s.gpu_type, 0), s.gpus)
    out = (
        sum(s.gpus for s in cluster.servers),
        sum(s.cpus for s in cluster.servers),
        math.fsum(s.mem_gb for s in cluster.servers),
        biggest,
        {s.name: s for s in cluster.servers},
        tuple(
            {
                (s.gpus, s.cpus, s.mem_gb, s.gpu_type): s for s in cluster.servers if s.gpus > 0
            }.values()
        ),
    )
    if len(_CLUSTER_FACTS) >= _CLUSTER_FACTS_SIZE:
        del _CLUSTER_FACTS[next(iter(_CLUSTER_FACTS))]
    _CLUSTER_FACTS[id(cluster)] = (cluster, out)
    return out


# --------------------------------------------------------------------------- facts


@dataclass(slots=True)
class Scheduled:
    """A scheduled job of the instance with what its parts add up to (never changed after
    :func:`facts` builds it; not ``frozen``: a frozen dataclass's ``__init__`` sets each
    field through ``object.__setattr__``, 0.69 us against 0.15 us, and the check builds one
    per job of every OPT answer and every simulated round)."""

    alloc: JobAllocation
    job: Job
    gpus: int
    cpus: int
    mem_gb: float
    servers: frozenset[str]
    #: W_j at the parts' summed cores and memory, times the split penalty when spread.
    throughput: float

    @property
    def fragmented(self) -> bool:
        """Spread over more than one server."""
        return len(self.servers) > 1


@dataclass(frozen=True, slots=True)
class Facts:
    """What every rule reads: the instance, the allocation and the per-job tallies."""

    inst: RoundInstance
    alloc: Allocation
    jobs: dict[str, Job]
    servers: dict[str, Server]
    scheduled: tuple[Scheduled, ...]
    #: (job, part, k) for every part k of every scheduled job (:func:`_where` names it):
    #: four rules walk them, so they are listed once.
    parts: tuple[tuple[Scheduled, PlacementPart, int], ...] = ()
    #: How often each job id appears, scheduled or unscheduled (two rules read it).
    counts: dict[str, int] = field(default_factory=dict)
    #: (fair-share throughput, required throughput) per scheduled job id, filled on first
    #: use by :meth:`floor`: two rules read it, and jobs of one class on the same servers
    #: share one computation.
    floors: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: The instance's rule is the per-server one (read once, not per job).
    per_server: bool = False
    #: This check's floors by the ids of the job's matrices (alive for the check; an id
    #: look-up, where the shared memo below compares equal matrices value by value).
    _floor_memo: dict[tuple[object, ...], tuple[float, float]] = field(default_factory=dict)
    #: Floors shared by the checks of equal clusters (:func:`_floors_for`), by the objects.
    _shared: dict[tuple[object, ...], tuple[float, float]] = field(default_factory=dict)

    @property
    def total(self) -> float:
        """Recomputed total throughput of the scheduled jobs."""
        return sum(s.throughput for s in self.scheduled)

    def floor(self, s: Scheduled) -> tuple[float, float]:
        """:func:`fair_share_floor` of ``s`` as placed, computed once per job class and
        footprint (what the floor reads: the job's matrices, GPUs, types and split penalty,
        and under the per-server rule the GPUs it holds per server)."""
        got = self.floors.get(s.alloc.id)
        if got is not None:
            return got
        job = s.job
        placement = s.alloc.placement
        footprint: tuple[tuple[int, int, float, int], ...] = ()
        if self.per_server and len(placement) == 1:
            # One part (most jobs): the general case below with a single entry.
            p = placement[0]
            srv = self.servers.get(p.server)
            if srv is not None and srv.gpus > 0:
                footprint = ((srv.gpus, srv.cpus, srv.mem_gb, p.gpus),)
        elif self.per_server:
            # GPUs per server, by server shape: all the per-server rule reads of a placement
            # (parts on unknown or GPU-less servers do not count toward the share).
            per: dict[str, int] = {}
            for p in placement:
                per[p.server] = per.get(p.server, 0) + p.gpus
            footprint = tuple(
                sorted(
                    (srv.gpus, srv.cpus, srv.mem_gb, g)
                    for name, g in per.items()
                    if (srv := self.servers.get(name)) is not None and srv.gpus > 0
                )
            )
        rest = (job.gpus, job.gpu_types, job.split_penalty, footprint)
        key = (id(job.sensitivity), id(job.sensitivity_by_type), *rest)
        got = self._floor_memo.get(key)
        if got is None:
            shared = (job.sensitivity, job.sensitivity_by_type, *rest)
            got = self._shared.get(shared)
            if got is None:
                got = self._shared[shared] = fair_share_floor(self.inst, job, placement)
            self._floor_memo[key] = got
        self.floors[s.alloc.id] = got
        return got


def facts(inst: RoundInstance, alloc: Allocation) -> Facts:
    """Tally ``alloc`` against ``inst`` once; jobs unknown to the instance are left out."""
    jobs = {j.id: j for j in inst.jobs}
    known = {s.name: s for s in inst.cluster.servers}
    scheduled = []
    for ja in alloc.jobs:
        job = jobs.get(ja.id)
        if job is None:
            continue
        parts = ja.placement
        if len(parts) == 1 and job.sensitivity_by_type is None:
            # One part of an untyped job (most jobs): the general case below, which then
            # sums one term, reads the default matrix and has no split penalty.
            p = parts[0]
            w = _floor_lookup(job.sensitivity, p.cpus, p.mem_gb)
            scheduled.append(
                Scheduled(ja, job, 0 + p.gpus, 0 + p.cpus, 0 + p.mem_gb, frozenset((p.server,)), w)
            )
            continue
        cpus = sum(p.cpus for p in parts)
        mem = sum(p.mem_gb for p in parts)
        servers = frozenset(p.server for p in parts)
        # Per-type matrices: the type of the servers the job runs on (unknown servers are
        # the unknown-server rule's business; they read the default matrix here).
        types = {known[n].gpu_type if n in known else None for n in servers} or {None}
        w = _typed_lookup(job, types, cpus, mem) * (job.split_penalty if len(servers) > 1 else 1.0)
        scheduled.append(Scheduled(ja, job, sum(p.gpus for p in parts), cpus, mem, servers, w))
    listed = tuple((s, p, k) for s in scheduled for k, p in enumerate(s.alloc.placement))
    counts: dict[str, int] = {}
    for jid in (*alloc.unscheduled, *(ja.id for ja in alloc.jobs)):
        counts[jid] = counts.get(jid, 0) + 1
    return Facts(
        inst,
        alloc,
        jobs,
        known,
        tuple(scheduled),
        listed,
        counts,
        per_server=inst.fair_share_mode == "server",
        _shared=_floors_for(inst),
    )


#: Floors by (job class, footprint) per cluster and rule, shared by the checks of equal
#: clusters (a simulation's or a bench's rounds): a floor reads only the cluster, the rule,
#: the job's matrices, GPUs, types and split penalty, and its footprint, all in the key or
#: the memo's own key.  Keyed by the objects (kept alive here), not their ids, so an id
#: reused after a collection cannot alias.  Recomputing them was a third of the check of a
#: 512-GPU round; hashing the cluster costs about 8 us there.
_FLOORS: dict[tuple[Cluster, str], dict[tuple[object, ...], tuple[float, float]]] = {}
_FLOORS_SIZE: int = 16
#: Entries per cluster before its memo starts over (bounds memory on long runs).
_FLOORS_ENTRIES: int = 100_000


def _floors_for(inst: RoundInstance) -> dict[tuple[object, ...], tuple[float, float]]:
    """The floor memo of ``inst``'s cluster (by value) and fair-share rule."""
    key = (inst.cluster, inst.fair_share_mode)
    memo = _FLOORS.get(key)
    if memo is not None and len(memo) < _FLOORS_ENTRIES:
        return memo
    if memo is None and len(_FLOORS) >= _FLOORS_SIZE:
        del _FLOORS[next(iter(_FLOORS))]
    memo = _FLOORS[key] = {}
    return memo


def _close(a: float, b: float, rel: float = REL_TOL) -> bool:
    """Equal within the tolerances.  The per-job rules test ``a != b`` first: the values an
    answer reports are mostly the very floats recomputed here, and the call costs more than
    the comparison (a fifth of a 128-GPU round's check went to ``isclose``)."""
    return math.isclose(a, b, rel_tol=rel, abs_tol=ABS_TOL)


def _where(s: Scheduled, k: int) -> str:
    """``id.placement[k]``: built only for a violation, not for every part of every rule."""
    return f"{s.alloc.id}.placement[{k}]"


# --------------------------------------------------------------------------- one rule per kind


def _format(f: Facts) -> Iterator[Violation]:
    if f.alloc.instance != f.inst.name:
        yield Violation(
            "format",
            "instance",
            f"allocation is for {f.alloc.instance!r}, instance is {f.inst.name!r}",
        )


def _unknown_job(f: Facts) -> Iterator[Violation]:
    for jid in f.alloc.unscheduled:
        if jid not in f.jobs:
            yield Violation("unknown-job", jid, "unscheduled job is not in the instance")
    for ja in f.alloc.jobs:
        if ja.id not in f.jobs:
            yield Violation("unknown-job", ja.id, "scheduled job is not in the instance")


def _missing_job(f: Facts) -> Iterator[Violation]:
    seen = f.counts
    for jid in f.jobs:
        if jid not in seen:
            yield Violation("missing-job", jid, "neither scheduled nor unscheduled")


def _duplicate_job(f: Facts) -> Iterator[Violation]:
    for jid, n in f.counts.items():
        if n > 1:
            yield Violation("duplicate-job", jid, f"appears {n} times")


def _part(f: Facts) -> Iterator[Violation]:
    for s in f.scheduled:
        if not s.alloc.placement:
            yield Violation("part", s.alloc.id, "scheduled job has no placement")
    for s, p, k in f.parts:
        if p.gpus < 1:
            yield Violation("part", _where(s, k), f"has {p.gpus} GPUs, each part needs >= 1")
        if p.cpus < 0 or p.mem_gb < 0 or not math.isfinite(p.mem_gb):
            yield Violation(
                "part", _where(s, k), f"negative resources ({p.cpus} cores, {p.mem_gb} GB)"
            )


def _unknown_server(f: Facts) -> Iterator[Violation]:
    for s, p, k in f.parts:
        if p.server not in f.servers:
            yield Violation(
                "unknown-server", _where(s, k), f"server {p.server!r} is not in the cluster"
            )


def _gpu_type(f: Facts) -> Iterator[Violation]:
    for s, p, k in f.parts:
        allowed = s.job.gpu_types
        if allowed is None:
            continue
        server = f.servers.get(p.server)
        if server is not None and server.gpu_type not in allowed:
            yield Violation(
                "gpu-type",
                _where(s, k),
                f"server {server.name!r} has GPU type {server.gpu_type!r}, "
                f"job allows {list(allowed)}",
            )


def _gpu_demand(f: Facts) -> Iterator[Violation]:
    for s in f.scheduled:
        if s.alloc.gpus != s.job.gpus or s.gpus != s.job.gpus:
            yield Violation(
                "gpu-demand",
                s.alloc.id,
                f"wants {s.job.gpus} GPUs, allocation says {s.alloc.gpus}, parts hold {s.gpus}",
            )


def _sum(f: Facts) -> Iterator[Violation]:
    for s in f.scheduled:
        if s.cpus != s.alloc.cpus or (
            s.mem_gb != s.alloc.mem_gb and not _close(s.mem_gb, s.alloc.mem_gb)
        ):
            yield Violation(
                "sum",
                s.alloc.id,
                f"parts hold {s.cpus} cores and {s.mem_gb:g} GB, "
                f"job reports {s.alloc.cpus} and {s.alloc.mem_gb:g}",
            )


def _capacity(f: Facts) -> Iterator[Violation]:
    used = {name: [0, 0, 0.0] for name in f.servers}
    for _, p, _ in f.parts:
        if p.server in used:
            u = used[p.server]
            u[0] += p.gpus
            u[1] += p.cpus
            u[2] += p.mem_gb
    for name, (g, c, m) in used.items():
        srv = f.servers[name]
        if g > srv.gpus or c > srv.cpus or m > srv.mem_gb * (1 + REL_TOL) + ABS_TOL:
            yield Violation(
                "capacity",
                name,
                f"holds {g:g} GPUs, {c:g} cores, {m:g} GB; "
                f"capacity {srv.gpus}, {srv.cpus}, {srv.mem_gb:g}",
            )


def _throughput(f: Facts) -> Iterator[Violation]:
    for s in f.scheduled:
        if s.throughput != s.alloc.throughput and not _close(s.throughput, s.alloc.throughput):
            yield Violation(
                "throughput",
                s.alloc.id,
                f"reports {s.alloc.throughput:g}, floor look-up gives {s.throughput:g}",
            )


def _fair_share_report(f: Facts) -> Iterator[Violation]:
    for s in f.scheduled:
        fair_tp, _ = f.floor(s)
        reported = s.alloc.fair_share_throughput
        if fair_tp != reported and not _close(fair_tp, reported):
            yield Violation(
                "fair-share-report",
                s.alloc.id,
                f"reports fair share {s.alloc.fair_share_throughput:g}, expected {fair_tp:g}",
            )


def _fair_share(f: Facts) -> Iterator[Violation]:
    for s in f.scheduled:
        _, required = f.floor(s)
        if s.throughput < required - ABS_TOL:
            yield Violation(
                "fair-share",
                s.alloc.id,
                f"throughput {s.throughput:g} is below its fair share {required:g}",
            )


def _total(f: Facts) -> Iterator[Violation]:
    if not _close(f.total, f.alloc.total_throughput, rel=1e-7):
        yield Violation(
            "total",
            "total_throughput",
            f"reports {f.alloc.total_throughput:g}, jobs sum to {f.total:g}",
        )


def _fragmented(f: Facts) -> Iterator[Violation]:
    counted = sum(s.fragmented for s in f.scheduled)
    if counted != f.alloc.fragmented_jobs:
        yield Violation(
            "fragmented",
            "fragmented_jobs",
            f"reports {f.alloc.fragmented_jobs}, counted {counted}",
        )


def _upper_bound(f: Facts) -> Iterator[Violation]:
    bound = f.alloc.upper_bound
    if bound is not None and f.total > bound * (1 + 1e-7) + ABS_TOL:
        yield Violation(
            "upper-bound",
            "upper_bound",
            f"total {f.total:g} exceeds the claimed bound {bound:g}",
        )


@dataclass(frozen=True, slots=True)
class Rule:
    """One kind of violation: its name, the rule in words and the function finding it."""

    kind: str
    rule: str
    find: Callable[[Facts], Iterator[Violation]]
    #: Checked only with ``fair_share=True`` (GREEDY, for one, need not keep it).
    optional: bool = False


#: Every kind of violation, in report order (docs/formats.md, the allocation's rules).
RULES: tuple[Rule, ...] = (
    Rule("format", "the allocation names the instance it answers", _format),
    Rule("unknown-job", "every job id it names is in the instance", _unknown_job),
    Rule("missing-job", "every job is scheduled or unscheduled", _missing_job),
    Rule("duplicate-job", "no job appears twice", _duplicate_job),
    Rule("part", "a job has parts, each with >= 1 GPU and no negative resource", _part),
    Rule("unknown-server", "every part is on a server of the cluster", _unknown_server),
    Rule("gpu-type", "a typed job runs only on servers of its GPU types", _gpu_type),
    Rule("gpu-demand", "a job gets exactly the GPUs it asks for", _gpu_demand),
    Rule("sum", "the parts add up to the job's cores and memory", _sum),
    Rule("capacity", "no server gives more GPUs, cores, memory than it has: (2), (3)", _capacity),
    Rule(
        "throughput",
        "throughput is the floor look-up on the servers' GPU type (x split penalty)",
        _throughput,
    ),
    Rule(
        "fair-share-report", "the fair share reported is the instance's rule's", _fair_share_report
    ),
    Rule("fair-share", "no job below its fair-share throughput: (5)", _fair_share, optional=True),
    Rule("total", "total_throughput is the sum over the jobs", _total),
    Rule("fragmented", "fragmented_jobs counts the jobs on several servers", _fragmented),
    Rule("upper-bound", "the total does not exceed the claimed bound", _upper_bound),
)
#: The kinds' names, in report order.
KINDS: tuple[str, ...] = tuple(r.kind for r in RULES)


def check_allocation(
    inst: RoundInstance, alloc: Allocation, *, fair_share: bool = False
) -> list[Violation]:
    """Every violation of the allocation rules (and, with ``fair_share``, of the floor (5))."""
    f = facts(inst, alloc)
    return [v for r in RULES if fair_share or not r.optional for v in r.find(f)]
