"""TYPE-AWARE: a Gavel-like baseline that chooses GPU types but not cores or memory.

Gavel (Narayanan et al., OSDI '20) allocates across GPU generations by each job's measured
speed on each type, and gives every job the GPU-proportional CPU and memory.  Mapped onto
one round with synergy-opt's objective (the sum of the jobs' normalised throughputs): the
runnable set is PROPORTIONAL's; jobs are taken by their *gain per GPU* (throughput at the
proportional share on their fastest usable type minus that on their slowest, divided by
their GPUs: the value density of giving them fast GPUs), then by descending GPU demand and
priority; each job takes the type where its proportional-share throughput is highest among
the types with room, best fit within the type.  A job without per-type matrices gains
nothing, so on an untyped round the order is PROPORTIONAL's and so is the answer.

Gain per GPU, not per job: a 1-GPU job moved from a K80 to a V100 gains as much as an
8-GPU one does, for an eighth of the fast GPUs.  On three generated 128-GPU rounds
(v100:48, p100:48, k80:32, multi-GPU mix) this order gives 64.5, 56.1 and 67.4 where
ordering by GPU demand first gives 45.8, 35.4 and 49.2 (PROPORTIONAL: 44.9, 35.0, 48.0).

It keeps every job's fair share: the proportional share on any type is worth at least the
slowest usable type's value, which is the fair share (docs/gpu-types.md).  It is the
"type-aware only" arm of issue 11's study, beside PROPORTIONAL (neither), TUNE (CPU and
memory only) and a mechanism aware of both.
"""

from __future__ import annotations

import dataclasses
import time

from synergy_opt.mechanisms.base import MechanismOptions, register
from synergy_opt.mechanisms.packing import (
    ClusterState,
    select_runnable,
    type_views,
)
from synergy_opt.mechanisms.proportional import place_at_share
from synergy_opt.mechanisms.tune import Tune
from synergy_opt.types import Allocation, PlacementPart, RoundInstance, build_allocation


@register(
    "type-aware",
    keeps_fair_share=True,
    doc="Gavel-like: each job on its fastest GPU type with room, CPU and memory proportional",
)
class TypeAware:
    """GPU type by gain per GPU, GPU-proportional cores and memory, best fit within the type."""

    name = "type-aware"

    def __init__(self, options: MechanismOptions | None = None) -> None:
        self.options = options or MechanismOptions()

    def allocate(self, inst: RoundInstance) -> Allocation:
        """Place each runnable job on its fastest GPU type that has room."""
        t0 = time.perf_counter()
        runnable = select_runnable(inst)
        prio = {j.id: k for k, j in enumerate(inst.jobs)}
        views_of = {j.id: type_views(inst, j) for j in runnable}
        # Each view's throughput at the job's proportional share, fastest type first
        # (cluster order among equals, so the choice is deterministic).
        ranked = {}
        gain: dict[str, float] = {}
        for job in runnable:
            c, m = inst.fair_share(job)
            vals = [v.sensitivity.lookup(c, m) for v in views_of[job.id]]

            def fastest_first(k: int, v: list[float] = vals) -> tuple[float, int]:
                return (-v[k], k)

            ranked[job.id] = sorted(range(len(vals)), key=fastest_first)
            gain[job.id] = (max(vals) - min(vals)) / job.gpus
        runnable.sort(key=lambda j: (-gain[j.id], -j.gpus, prio[j.id]))
        state = ClusterState(inst.cluster)
        names = [s.name for s in inst.cluster.servers]
        placements: dict[str, list[PlacementPart]] = {}
        for job in runnable:
            c, m = inst.fair_share(job)
            views = views_of[job.id]
            for k in ranked[job.id]:
                parts = place_at_share(state, inst, views[k], c, m)  # as PROPORTIONAL
                if parts:
                    placements[job.id] = [
                        PlacementPart(names[i], g, pc, pm) for i, g, pc, pm in parts
                    ]
                    break
        return build_allocation(inst, self.name, placements, solve_seconds=time.perf_counter() - t0)


@register(
    "tune-typed",
    keeps_fair_share=True,
    doc="TUNE on type-aware's GPU-type assignment: types, cores and memory",
)
class TuneTyped:
    """Aware of both: TYPE-AWARE picks each job's GPU type, TUNE then sizes cores and memory.

    Each job type-aware placed is restricted to that GPU type (``gpu_types``), and TUNE
    allocates the restricted round: its placement, demands and reverts, within the types
    chosen for the jobs' gain per GPU.  The restriction only raises a job's floor (the
    slowest of one type instead of all usable types), so the original floor holds.  Without
    per-type matrices there is nothing to choose and the answer is TUNE's.
    """

    name = "tune-typed"

    def __init__(self, options: MechanismOptions | None = None) -> None:
        self.options = options or MechanismOptions()
        self._types = TypeAware(self.options)
        self._tune = Tune(self.options)

    def allocate(self, inst: RoundInstance) -> Allocation:
        """Choose types with TYPE-AWARE, then run TUNE on the typed round."""
        t0 = time.perf_counter()
        if all(j.sensitivity_by_type is None for j in inst.jobs):
            alloc = self._tune.allocate(inst)
            return dataclasses.replace(alloc, mechanism=self.name)
        kind = {s.name: s.gpu_type for s in inst.cluster.servers}
        chosen: dict[str, str] = {}
        for ja in self._types.allocate(inst).jobs:
            types = {kind[p.server] for p in ja.placement}
            only = types.pop() if len(types) == 1 else None
            if only is not None:
                chosen[ja.id] = only
        jobs = tuple(
            dataclasses.replace(j, gpu_types=(chosen[j.id],))
            if j.id in chosen and j.sensitivity_by_type is not None
            else j
            for j in inst.jobs
        )
        typed = RoundInstance(inst.name, inst.cluster, jobs, inst.fair_share_rule)
        placed = self._tune.allocate(typed)
        placements = {ja.id: list(ja.placement) for ja in placed.jobs}
        return build_allocation(inst, self.name, placements, solve_seconds=time.perf_counter() - t0)
