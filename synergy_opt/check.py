"""An independent checker for allocations: it recomputes everything from the allocation alone.

Written without the mechanisms' helpers (it has its own floor look-up over the raw grid) so
a bug shared by a mechanism and the code that checks it cannot hide.  It reports and does not
judge: each rule is a :class:`Violation` ``kind``, and tests decide which kinds a mechanism
must avoid (GREEDY, for instance, may leave jobs below their fair share by not scheduling
them, but never over-fills a server).

Kinds: ``format``, ``unknown-job``, ``missing-job``, ``duplicate-job``, ``gpu-demand``,
``part``, ``unknown-server``, ``gpu-type``, ``capacity``, ``sum``, ``throughput``,
``fair-share-report``, ``total``, ``fragmented``, ``upper-bound``, ``fair-share``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from synergy_opt.types import Allocation, Cluster, Job, RoundInstance

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


def _floor_lookup(job: Job, cpus: float, mem: float) -> float:
    """W_j at the largest grid point <= (cpus, mem); written apart from ThroughputMatrix."""
    w = job.sensitivity
    ci = -1
    for i, c in enumerate(w.cpus):
        if c <= cpus + 1e-9:
            ci = i
    mi = -1
    for k, m in enumerate(w.mem_gb):
        if m <= mem + ABS_TOL:
            mi = k
    if ci < 0 or mi < 0:
        return 0.0
    return w.throughput[ci][mi]


def fair_share_floor(inst: RoundInstance, job: Job) -> tuple[float, float]:
    """(fair-share throughput, required throughput) for ``job``.

    The required value is the fair-share throughput, times the job's ``split_penalty`` when
    the job is larger than any single server it may use: then even PROPORTIONAL must spread
    it, so the penalty is part of its GPU-proportional baseline.
    """
    g_total, c_total, m_total, biggest = _cluster_facts(inst.cluster)
    fair_c = (job.gpus * c_total) // g_total
    fair_m = job.gpus * m_total / g_total
    fair_tp = _floor_lookup(job, fair_c, fair_m)
    if job.gpu_types is None:
        most = max(biggest.values(), default=0)
    else:
        most = max((biggest.get(t, 0) for t in job.gpu_types), default=0)
    forced_split = job.gpus > most
    return fair_tp, fair_tp * (job.split_penalty if forced_split else 1.0)


@lru_cache(maxsize=16)
def _cluster_facts(cluster: Cluster) -> tuple[int, int, float, dict[str | None, int]]:
    """G, C, M and the biggest server per GPU type, once per cluster (not once per job)."""
    biggest: dict[str | None, int] = {}
    for s in cluster.servers:
        biggest[s.gpu_type] = max(biggest.get(s.gpu_type, 0), s.gpus)
    return (
        sum(s.gpus for s in cluster.servers),
        sum(s.cpus for s in cluster.servers),
        math.fsum(s.mem_gb for s in cluster.servers),
        biggest,
    )


def check_allocation(
    inst: RoundInstance, alloc: Allocation, *, fair_share: bool = False
) -> list[Violation]:
    """Every violation of FORMATS.md section 2 (and, optionally, the fair-share floor)."""
    out: list[Violation] = []
    jobs = {j.id: j for j in inst.jobs}
    servers = {s.name: s for s in inst.cluster.servers}
    used: dict[str, list[float]] = {name: [0, 0, 0.0] for name in servers}
    seen: dict[str, int] = {}

    if alloc.instance != inst.name:
        out.append(
            Violation(
                "format",
                "instance",
                f"allocation is for {alloc.instance!r}, instance is {inst.name!r}",
            )
        )

    for jid in alloc.unscheduled:
        seen[jid] = seen.get(jid, 0) + 1
        if jid not in jobs:
            out.append(Violation("unknown-job", jid, "unscheduled job is not in the instance"))

    total = 0.0
    fragmented = 0
    for ja in alloc.jobs:
        seen[ja.id] = seen.get(ja.id, 0) + 1
        job = jobs.get(ja.id)
        if job is None:
            out.append(Violation("unknown-job", ja.id, "scheduled job is not in the instance"))
            continue
        if not ja.placement:
            out.append(Violation("part", ja.id, "scheduled job has no placement"))
        g_sum = c_sum = 0
        m_sum = 0.0
        part_servers: set[str] = set()
        for k, p in enumerate(ja.placement):
            where = f"{ja.id}.placement[{k}]"
            if p.gpus < 1:
                out.append(Violation("part", where, f"has {p.gpus} GPUs, each part needs >= 1"))
            if p.cpus < 0 or p.mem_gb < 0 or not math.isfinite(p.mem_gb):
                out.append(
                    Violation("part", where, f"negative resources ({p.cpus} cores, {p.mem_gb} GB)")
                )
            server = servers.get(p.server)
            if server is None:
                out.append(
                    Violation("unknown-server", where, f"server {p.server!r} is not in the cluster")
                )
            else:
                if job.gpu_types is not None and server.gpu_type not in job.gpu_types:
                    out.append(
                        Violation(
                            "gpu-type",
                            where,
                            f"server {p.server!r} has GPU type {server.gpu_type!r}, "
                            f"job allows {list(job.gpu_types)}",
                        )
                    )
                u = used[p.server]
                u[0] += p.gpus
                u[1] += p.cpus
                u[2] += p.mem_gb
            part_servers.add(p.server)
            g_sum += p.gpus
            c_sum += p.cpus
            m_sum += p.mem_gb
        if ja.gpus != job.gpus or g_sum != job.gpus:
            out.append(
                Violation(
                    "gpu-demand",
                    ja.id,
                    f"wants {job.gpus} GPUs, allocation says {ja.gpus}, parts hold {g_sum}",
                )
            )
        if c_sum != ja.cpus or not math.isclose(m_sum, ja.mem_gb, rel_tol=REL_TOL, abs_tol=ABS_TOL):
            out.append(
                Violation(
                    "sum",
                    ja.id,
                    f"parts hold {c_sum} cores and {m_sum:g} GB, "
                    f"job reports {ja.cpus} and {ja.mem_gb:g}",
                )
            )
        w = _floor_lookup(job, c_sum, m_sum)
        if len(part_servers) > 1:
            fragmented += 1
            w *= job.split_penalty
        if not math.isclose(w, ja.throughput, rel_tol=REL_TOL, abs_tol=ABS_TOL):
            out.append(
                Violation(
                    "throughput", ja.id, f"reports {ja.throughput:g}, floor look-up gives {w:g}"
                )
            )
        fair_tp, required = fair_share_floor(inst, job)
        if not math.isclose(fair_tp, ja.fair_share_throughput, rel_tol=REL_TOL, abs_tol=ABS_TOL):
            out.append(
                Violation(
                    "fair-share-report",
                    ja.id,
                    f"reports fair share {ja.fair_share_throughput:g}, expected {fair_tp:g}",
                )
            )
        if fair_share and w < required - ABS_TOL:
            out.append(
                Violation(
                    "fair-share", ja.id, f"throughput {w:g} is below its fair share {required:g}"
                )
            )
        total += w

    for jid, n in seen.items():
        if n > 1:
            out.append(Violation("duplicate-job", jid, f"appears {n} times"))
    for jid in jobs:
        if jid not in seen:
            out.append(Violation("missing-job", jid, "neither scheduled nor unscheduled"))

    for name, (g, c, m) in used.items():
        s = servers[name]
        if g > s.gpus or c > s.cpus or m > s.mem_gb * (1 + REL_TOL) + ABS_TOL:
            out.append(
                Violation(
                    "capacity",
                    name,
                    f"holds {g:g} GPUs, {c:g} cores, {m:g} GB; "
                    f"capacity {s.gpus}, {s.cpus}, {s.mem_gb:g}",
                )
            )

    if not math.isclose(total, alloc.total_throughput, rel_tol=1e-7, abs_tol=ABS_TOL):
        out.append(
            Violation(
                "total",
                "total_throughput",
                f"reports {alloc.total_throughput:g}, jobs sum to {total:g}",
            )
        )
    if fragmented != alloc.fragmented_jobs:
        out.append(
            Violation(
                "fragmented",
                "fragmented_jobs",
                f"reports {alloc.fragmented_jobs}, counted {fragmented}",
            )
        )
    if alloc.upper_bound is not None and total > alloc.upper_bound * (1 + 1e-7) + ABS_TOL:
        out.append(
            Violation(
                "upper-bound",
                "upper_bound",
                f"total {total:g} exceeds the claimed bound {alloc.upper_bound:g}",
            )
        )
    return out
