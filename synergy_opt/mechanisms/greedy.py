"""GREEDY: the paper's strawman (OSDI '22, Section 4).

Jobs are taken in priority order, each asking for its best-throughput demand, and placed
first-fit in all dimensions; a job that does not fit is skipped.  It exhausts cores and
memory while GPUs sit idle and starves skipped jobs, which is exactly what the paper uses it
to show.  It keeps no fair-share guarantee (skipped jobs get nothing).
"""

from __future__ import annotations

import time

from synergy_opt.mechanisms.base import MechanismOptions, register
from synergy_opt.mechanisms.packing import (
    ClusterState,
    DemandTable,
    order_views,
    place_job,
    type_views,
)
from synergy_opt.types import Allocation, PlacementPart, RoundInstance, build_allocation


@register("greedy", doc="highest throughput per GPU first; may idle GPUs")
class Greedy:
    """First fit at each job's best demand, skipping what does not fit."""

    name = "greedy"

    def __init__(self, options: MechanismOptions | None = None) -> None:
        self.options = options or MechanismOptions()
        self._demand = DemandTable()

    def allocate(self, inst: RoundInstance) -> Allocation:
        """Place jobs in priority order at their best demand, first fit."""
        t0 = time.perf_counter()
        total_c, total_m = inst.cluster.total_cpus, inst.cluster.total_mem_gb
        state = ClusterState(inst.cluster)
        names = [s.name for s in inst.cluster.servers]
        free_gpus = inst.cluster.total_gpus
        placements: dict[str, list[PlacementPart]] = {}
        for job in inst.jobs:
            if free_gpus == 0:
                break
            if job.gpus > free_gpus:
                continue
            views = type_views(inst, job)
            best = [self._demand.best(v, total_c, total_m) for v in views]
            demands = [(d.cpus, d.mem_gb) for d in best]
            parts = None
            for k in order_views(state, views, demands, first_fit=True):
                parts = place_job(state, views[k], best[k].cpus, best[k].mem_gb, first_fit=True)
                if parts:
                    break
            if parts:
                free_gpus -= job.gpus
                placements[job.id] = [PlacementPart(names[i], k, c, m) for i, k, c, m in parts]
        return build_allocation(inst, self.name, placements, solve_seconds=time.perf_counter() - t0)
