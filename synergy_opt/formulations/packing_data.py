"""The plain data of the packing models (:mod:`.packing`, its Pyomo reference, and
:mod:`.packing_cp`, CP-SAT): whole jobs grouped by GPUs, point and allowed servers, spread
jobs one by one, and the servers' shapes.

Kept apart from both models so that building it (``opt``'s packing route does, on every
round it reaches) imports neither Pyomo nor OR-Tools: together they were 0.9 s of the 1.5 s
that importing the mechanisms took, paid by every command line call.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from synergy_opt.formulations.counting import Point
from synergy_opt.types import Job, RoundInstance

#: Memory unit of the packing models that count whole units (CP-SAT, the pattern LP; GB):
#: demands round up, capacities down, so a packing in units keeps every GB.
MEM_UNIT_GB: float = 1e-3
#: Round-off allowed before rounding a GB amount to units (points carry 124.97999999999999).
UNIT_EPS: float = 1e-6


def units_up(gb: float) -> int:
    """A demand of ``gb`` in :data:`MEM_UNIT_GB` units, rounded up."""
    return int(math.ceil(gb / MEM_UNIT_GB - UNIT_EPS))


def units_down(gb: float) -> int:
    """A capacity of ``gb`` in :data:`MEM_UNIT_GB` units, rounded down."""
    return int(math.floor(gb / MEM_UNIT_GB + UNIT_EPS))


@dataclass(frozen=True, slots=True)
class WholeGroup:
    """Whole jobs with the same GPUs, point and allowed servers (interchangeable here)."""

    jobs: tuple[Job, ...]
    gpus: int
    cpus: int
    mem_gb: float
    servers: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class SpreadJob:
    """A job that may take GPUs on several servers, drawing its cores and memory anywhere
    on its span (the deployment max-flow's rule)."""

    job: Job
    cpus: int
    mem_gb: float
    servers: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class FreeGroup:
    """Whole jobs of one class whose points the packing picks (a free class at a leaf of
    branch-and-price, ``formulations/branch_price.md``): each job takes one of
    ``options``, (server, cores, GB, throughput)."""

    jobs: tuple[Job, ...]
    gpus: int
    options: tuple[tuple[int, int, float, float], ...]


@dataclass(frozen=True, slots=True)
class PackingData:
    """The plain data both models are built from (:func:`packing_data`)."""

    groups: tuple[WholeGroup, ...]
    spread: tuple[SpreadJob, ...]
    #: (GPUs, cores, GB) per server, in cluster order.
    servers: tuple[tuple[int, int, float], ...]
    #: Classes whose jobs' points the packing picks (:func:`with_free`).
    free: tuple[FreeGroup, ...] = ()
    #: The free jobs' throughput at least this (``None`` or ``-inf``: any).
    free_worth: float | None = None


def room_left(
    data: PackingData, whole: Mapping[tuple[int, int], int]
) -> tuple[list[int], list[int], list[int]]:
    """Each server's GPUs, cores and memory units left by ``whole`` (whole jobs per
    (group, server)), in the packing's units: GB capacities rounded down and demands up,
    as the CP-SAT model counts them (pk8-pk10).  Negative where they do not fit."""
    gpus = [g for g, _, _ in data.servers]
    cpus = [c for _, c, _ in data.servers]
    mem = [units_down(m) for _, _, m in data.servers]
    for (d, s), k in whole.items():
        gr = data.groups[d]
        gpus[s] -= gr.gpus * k
        cpus[s] -= gr.cpus * k
        mem[s] -= units_up(gr.mem_gb) * k
    return gpus, cpus, mem


def packing_data(
    inst: RoundInstance,
    jobs: Sequence[Job],
    points: Mapping[str, Point],
    spread: Collection[str],
    servers: Mapping[str, Sequence[int]] | None = None,
) -> PackingData:
    """Group ``jobs`` (whole ones by GPUs, point and allowed servers, in first-seen order;
    ids in ``spread`` one by one) for the packing models.  A job's servers are those it may
    use (``servers[job id]`` where given), a whole job's only those that hold its GPUs,
    cores and memory alone."""
    srv = inst.cluster.servers
    by_key: dict[tuple[int, int, float, tuple[int, ...]], list[Job]] = {}
    spreads: list[SpreadJob] = []
    # Jobs share GPU-type restrictions and points: each server list is computed once per
    # distinct one (a scan of every server per job was 33,000 tests on 512-GPU rounds).
    usable: dict[tuple[str, ...] | None, tuple[int, ...]] = {}
    fitting: dict[tuple[int, int, float, tuple[int, ...]], tuple[int, ...]] = {}
    for job in jobs:
        c, m, _ = points[job.id]
        if servers is not None and job.id in servers:
            allowed = tuple(servers[job.id])
        else:
            known = usable.get(job.gpu_types)
            if known is None:
                known = tuple(s for s, server in enumerate(srv) if job.may_use(server))
                usable[job.gpu_types] = known
            allowed = known
        if job.id in spread:
            spreads.append(SpreadJob(job, int(c), float(m), allowed))
            continue
        fits = fitting.get((job.gpus, c, m, allowed))
        if fits is None:
            fits = tuple(
                s
                for s in allowed
                if srv[s].gpus >= job.gpus and srv[s].cpus >= c and srv[s].mem_gb >= m - 1e-9
            )
            fitting[job.gpus, c, m, allowed] = fits
        by_key.setdefault((job.gpus, int(c), float(m), fits), []).append(job)
    groups = tuple(WholeGroup(tuple(js), g, c, m, fits) for (g, c, m, fits), js in by_key.items())
    shapes = tuple((s.gpus, int(s.cpus), float(s.mem_gb)) for s in srv)
    return PackingData(groups, tuple(spreads), shapes)


def with_free(
    data: PackingData,
    free: Sequence[tuple[Sequence[Job], Sequence[tuple[int, int, float, float]]]],
    worth: float | None,
) -> PackingData:
    """``data`` with whole jobs whose points the packing picks: per class its jobs (one
    GPU count) and their (server, cores, GB, throughput) options, worth ``worth`` in all."""
    groups = tuple(
        FreeGroup(tuple(js), js[0].gpus, tuple(sorted(set(opts)))) for js, opts in free if js
    )
    return dataclasses.replace(data, free=groups, free_worth=worth)
