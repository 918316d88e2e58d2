"""GPU-id-order placement: PROPORTIONAL, GREEDY and TUNE as the paper's simulator places jobs.

The Synergy artifact's simulator (msr-fiddle/synergy; ``docs/artifact-semantics.md``) has no
consolidation preference: a job's GPUs are taken one at a time from the free GPUs in GPU-id
order (server 0 first), from any server where the job's per-GPU share of cores and memory
still fits, so jobs span servers (every model's split penalty is 1 there).  These variants
are what the ``gpu-order`` placement rule of :mod:`synergy_opt.sim.semantics` maps a
mechanism name to; the registered mechanisms (best fit, consolidation first) stay the
default.  They are not registered by name: only a semantics chooses them.

TUNE here (the artifact's order of attempts):

1. runnable jobs (:func:`~synergy_opt.mechanisms.packing.select_runnable`, FIFO backfill)
   placed in the order of the semantics' ``placement_order`` rule (the artifact: the
   policy's order), each at its demand (the cheapest best point of its matrix, which the
   semantics' speed-up rules built);
2. a job that does not fit drops to the cheapest point keeping its proportional
   throughput;
3. if that does not fit either, the servers it is to use are chosen (for g > 1 the first
   server with g free GPUs, else the servers with the fewest free GPUs first) and their
   residents are reverted the same way, single-server and CPU-hungriest first, until the
   job's share fits there; then it is placed in GPU-id order again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from synergy_opt.mechanisms import Mechanism, MechanismOptions, canonical_name
from synergy_opt.mechanisms.packing import (
    DemandTable,
    Part,
    select_runnable,
    split_cpus,
    split_mem,
    split_within,
)
from synergy_opt.types import (
    MEM_EPS_GB,
    Allocation,
    Job,
    PlacementPart,
    RoundInstance,
    build_allocation,
)

#: Sort key of a runnable job from (GPU demand, priority rank).
OrderKey = Callable[[int, int], tuple[int, ...]]

#: Slack when comparing a fractional per-GPU core share with free cores.
CPU_EPS: float = 1e-9


class _Free:
    """Free GPUs, cores and memory per server (plain lists: the walk is in index order)."""

    def __init__(self, inst: RoundInstance) -> None:
        self.servers = inst.cluster.servers
        self.gpus = [s.gpus for s in self.servers]
        self.cpus = [s.cpus for s in self.servers]
        self.mem = [float(s.mem_gb) for s in self.servers]

    def take(self, i: int, g: int, c: int, m: float) -> None:
        self.gpus[i] -= g
        self.cpus[i] -= c
        self.mem[i] -= m

    def give(self, i: int, c: int, m: float) -> None:
        self.cpus[i] += c
        self.mem[i] += m


def take_in_gpu_order(free: _Free, job: Job, cpus: int, mem: float) -> list[Part] | None:
    """Take ``job``'s GPUs one at a time in GPU-id order where its per-GPU share fits.

    Cores and memory follow the GPUs taken on each server (whole cores by largest
    remainder).  Nothing is taken unless every GPU is found.
    """
    g = job.gpus
    c1, m1 = cpus / g, mem / g
    plan: list[tuple[int, int]] = []
    left = g
    for i, server in enumerate(free.servers):
        if free.gpus[i] == 0 or not job.may_use(server):
            continue
        fc: float  # free cores, less the (fractional) per-GPU shares taken
        fc, fm, k = free.cpus[i], free.mem[i], 0
        while k < free.gpus[i] and k < left and fc + CPU_EPS >= c1 and fm + MEM_EPS_GB >= m1:
            k += 1
            fc -= c1
            fm -= m1
        if k:
            plan.append((i, k))
            left -= k
            if left == 0:
                break
    if left:
        return None
    weights = [k for _, k in plan]
    parts = [
        (i, k, c, m)
        for (i, k), c, m in zip(
            plan, split_cpus(cpus, weights), split_mem(mem, weights), strict=True
        )
    ]
    if any(c > free.cpus[i] or m > free.mem[i] + MEM_EPS_GB for i, _, c, m in parts):
        return None  # whole-core rounding overflowed a server
    for i, k, c, m in parts:
        free.take(i, k, c, m)
    return parts


@dataclass(slots=True)
class _Placed:
    job: Job
    prio: int
    cpus: int
    mem: float
    parts: list[Part]
    floor: float
    reverted: bool = False


def _priority_order(gpus: int, rank: int) -> tuple[int, ...]:
    return (rank,)


class GpuOrderTune:
    """TUNE with the artifact's GPU-id-order placement and peer reversion (module doc).

    ``order`` sorts runnable jobs by (GPU demand, priority rank); default: priority.
    """

    name = "tune"

    def __init__(
        self,
        options: MechanismOptions | None = None,
        order: OrderKey = _priority_order,
    ) -> None:
        self.options = options or MechanismOptions()
        self._demand = DemandTable()
        self._order = order

    def allocate(self, inst: RoundInstance) -> Allocation:
        """Run one round."""
        t0 = time.perf_counter()
        total_c, total_m = inst.cluster.total_cpus, inst.cluster.total_mem_gb
        prio = {j.id: k for k, j in enumerate(inst.jobs)}
        runnable = select_runnable(inst)
        order = self._order
        runnable.sort(key=lambda j: order(j.gpus, prio[j.id]))
        free = _Free(inst)
        residents: list[list[_Placed]] = [[] for _ in free.servers]
        placed: list[_Placed] = []
        for job in runnable:
            floor = inst.fair_share_throughput(job)
            d = self._demand.best(job, total_c, total_m)
            cpus, mem = d.cpus, d.mem_gb
            parts = take_in_gpu_order(free, job, cpus, mem)
            if parts is None:
                s = self._demand.shrink(job, total_c, total_m, cpus, mem, floor)
                if s is None:  # demand below the share in some dimension: use the share
                    cpus, mem = inst.fair_share(job)
                else:
                    cpus, mem = s.cpus, s.mem_gb
                parts = take_in_gpu_order(free, job, cpus, mem)
            if parts is None:
                for i, k in self._chosen_servers(free, job):
                    self._revert_until(
                        inst, free, residents[i], i, cpus * k / job.gpus, mem * k / job.gpus
                    )
                parts = take_in_gpu_order(free, job, cpus, mem)
            if parts is None:
                # The chosen servers were not where GPU order looks first: revert every
                # server that still has free GPUs (at proportional shares the job fits).
                for i in range(len(free.servers)):
                    if free.gpus[i]:
                        self._revert_until(inst, free, residents[i], i, float("inf"), float("inf"))
                parts = take_in_gpu_order(free, job, cpus, mem)
            if parts is None:
                continue
            rec = _Placed(job, prio[job.id], cpus, mem, parts, floor)
            placed.append(rec)
            for p in parts:
                residents[p[0]].append(rec)
        names = [s.name for s in inst.cluster.servers]
        placements = {
            r.job.id: [PlacementPart(names[i], k, c, m) for i, k, c, m in r.parts] for r in placed
        }
        return build_allocation(inst, self.name, placements, solve_seconds=time.perf_counter() - t0)

    @staticmethod
    def _chosen_servers(free: _Free, job: Job) -> list[tuple[int, int]]:
        """Where the artifact makes room: one server with g free GPUs, else fewest free first."""
        g = job.gpus
        usable = [i for i, s in enumerate(free.servers) if free.gpus[i] and job.may_use(s)]
        if g > 1:
            for i in usable:
                if free.gpus[i] >= g:
                    return [(i, g)]
        out: list[tuple[int, int]] = []
        left = g
        for i in sorted(usable, key=lambda i: (free.gpus[i], i)):
            k = min(left, free.gpus[i])
            out.append((i, k))
            left -= k
            if left == 0:
                break
        return out

    def _revert_until(
        self,
        inst: RoundInstance,
        free: _Free,
        residents: list[_Placed],
        i: int,
        need_c: float,
        need_m: float,
    ) -> None:
        """Revert residents of server ``i`` to their floor until (need_c, need_m) is free."""
        c_tot, m_tot = inst.cluster.total_cpus, inst.cluster.total_mem_gb
        order = sorted(
            residents,
            key=lambda r: (len(r.parts), -r.cpus / r.job.gpus, -r.mem / r.job.gpus, r.prio),
        )
        for r in order:
            if free.cpus[i] + CPU_EPS >= need_c and free.mem[i] + MEM_EPS_GB >= need_m:
                return
            if r.reverted:
                continue
            r.reverted = True
            s = self._demand.shrink(r.job, c_tot, m_tot, r.cpus, r.mem, r.floor)
            if s is None or (s.cpus >= r.cpus and s.mem_gb >= r.mem - MEM_EPS_GB):
                continue
            new = split_within(r.parts, s.cpus, s.mem_gb)
            for old_p, new_p in zip(r.parts, new, strict=True):
                free.give(old_p[0], old_p[2] - new_p[2], old_p[3] - new_p[3])
            r.parts, r.cpus, r.mem = new, s.cpus, s.mem_gb


class GpuOrderProportional:
    """PROPORTIONAL with GPU-id-order placement (same GPUs per job as best fit, other servers)."""

    name = "proportional"

    def __init__(
        self,
        options: MechanismOptions | None = None,
        order: OrderKey = _priority_order,
    ) -> None:
        self.options = options or MechanismOptions()

    def allocate(self, inst: RoundInstance) -> Allocation:
        """Every runnable job at its GPU-proportional share, in priority order."""
        t0 = time.perf_counter()
        free = _Free(inst)
        names = [s.name for s in inst.cluster.servers]
        placements: dict[str, list[PlacementPart]] = {}
        for job in select_runnable(inst):
            c, m = inst.fair_share(job)
            parts = take_in_gpu_order(free, job, c, m)
            if parts:
                placements[job.id] = [PlacementPart(names[i], k, pc, pm) for i, k, pc, pm in parts]
        return build_allocation(inst, self.name, placements, solve_seconds=time.perf_counter() - t0)


class GpuOrderGreedy:
    """GREEDY with GPU-id-order placement: each job at its demand in priority order, or skipped."""

    name = "greedy"

    def __init__(
        self,
        options: MechanismOptions | None = None,
        order: OrderKey = _priority_order,
    ) -> None:
        self.options = options or MechanismOptions()
        self._demand = DemandTable()

    def allocate(self, inst: RoundInstance) -> Allocation:
        """Place jobs in priority order at their best demand; skip what does not fit."""
        t0 = time.perf_counter()
        total_c, total_m = inst.cluster.total_cpus, inst.cluster.total_mem_gb
        free = _Free(inst)
        names = [s.name for s in inst.cluster.servers]
        placements: dict[str, list[PlacementPart]] = {}
        for job in inst.jobs:
            if sum(free.gpus) == 0:
                break
            d = self._demand.best(job, total_c, total_m)
            parts = take_in_gpu_order(free, job, d.cpus, d.mem_gb)
            if parts:
                placements[job.id] = [PlacementPart(names[i], k, c, m) for i, k, c, m in parts]
        return build_allocation(inst, self.name, placements, solve_seconds=time.perf_counter() - t0)


_GPU_ORDER: dict[str, Callable[[MechanismOptions, OrderKey], Mechanism]] = {
    "proportional": GpuOrderProportional,
    "greedy": GpuOrderGreedy,
    "tune": GpuOrderTune,
}


def gpu_order_names() -> tuple[str, ...]:
    """Mechanisms that have a GPU-id-order variant."""
    return tuple(sorted(_GPU_ORDER))


def make_gpu_order_mechanism(
    name: str,
    options: MechanismOptions,
    order: OrderKey = _priority_order,
) -> Mechanism:
    """The GPU-order variant of mechanism ``name`` (TUNE placing jobs by ``order``).

    ``KeyError`` names the mechanisms that have one.  PROPORTIONAL and GREEDY place in
    priority order whatever ``order`` says (their artifact versions do).
    """
    try:
        factory = _GPU_ORDER[canonical_name(name)]
    except KeyError:
        raise KeyError(
            f"mechanism {name!r} has no GPU-order (artifact) placement; "
            f"known: {', '.join(gpu_order_names())}"
        ) from None
    return factory(options, order)
