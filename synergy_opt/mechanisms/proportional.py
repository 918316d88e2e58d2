"""PROPORTIONAL: the GPU-proportional baseline every prior DNN scheduler uses.

Each runnable job gets floor(g C / G) cores and g M / G GB; it is consolidated on the
best-fitting server when its GPUs fit on one, else spread over the servers with the most
free GPUs.  This is the throughput floor that TUNE and OPT must never go below.  Under an
instance's per-server rule (``"fair_share": "server"``, docs/formats.md section 1) on a cluster
of several shapes, each part gets its own server's share, floor(g C_s / G_s) and g M_s / G_s,
so only free GPUs decide where a job goes.
"""

from __future__ import annotations

import time

from synergy_opt.mechanisms.base import MechanismOptions, register
from synergy_opt.mechanisms.packing import (
    ClusterState,
    order_views,
    place_at_server_shares,
    place_job,
    select_runnable,
    type_views,
)
from synergy_opt.types import Allocation, Job, PlacementPart, RoundInstance, build_allocation


def place_at_share(
    state: ClusterState, inst: RoundInstance, view: Job, cpus: int, mem: float
) -> list[tuple[int, int, int, float]] | None:
    """Place ``view`` at its GPU-proportional share (``cpus``, ``mem`` under the cluster rule).

    Spreading a job that fits on one server costs it its split penalty; the baseline then
    waits for a whole server rather than run below its own share, and a bigger job spreads
    by what the servers can feed.  Shared by PROPORTIONAL and TYPE-AWARE.
    """
    consolidable = view.gpus <= state.max_server_gpus(view)
    spread_ok = not consolidable or view.split_penalty >= 1.0
    if inst.per_server_shares:
        return place_at_server_shares(state, inst, view, allow_spread=spread_ok)
    return place_job(state, view, cpus, mem, allow_spread=spread_ok, fit_spread=True)


@register("proportional", keeps_fair_share=True, doc="GPU-proportional cores and memory")
class Proportional:
    """GPU-proportional allocation with best-fit consolidated placement."""

    name = "proportional"

    def __init__(self, options: MechanismOptions | None = None) -> None:
        self.options = options or MechanismOptions()

    def allocate(self, inst: RoundInstance) -> Allocation:
        """Allocate every runnable job its GPU-proportional share."""
        t0 = time.perf_counter()
        runnable = select_runnable(inst)
        prio = {j.id: k for k, j in enumerate(inst.jobs)}
        # Larger jobs first so that multi-GPU jobs find whole servers before singles
        # fragment them; priority breaks ties.
        runnable.sort(key=lambda j: (-j.gpus, prio[j.id]))
        state = ClusterState(inst.cluster)
        names = [s.name for s in inst.cluster.servers]
        placements: dict[str, list[PlacementPart]] = {}
        for job in runnable:
            c, m = inst.fair_share(job)
            # A job with per-type matrices runs on one GPU type: one view per type, taken
            # type-agnostically (the view whose best-fit server is tightest first).
            views = type_views(inst, job)
            for k in order_views(state, views, [(c, m)] * len(views)):
                parts = place_at_share(state, inst, views[k], c, m)
                if parts:
                    placements[job.id] = [
                        PlacementPart(names[i], g, pc, pm) for i, g, pc, pm in parts
                    ]
                    break
        return build_allocation(inst, self.name, placements, solve_seconds=time.perf_counter() - t0)
