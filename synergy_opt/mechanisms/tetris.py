"""TETRIS: multi-resource packing by alignment score (Grandl et al., SIGCOMM '14), per round.

One of the multi-resource baselines the Synergy artifact compares against.  Mapped onto
rounds: the runnable set is the top jobs whose GPU demands fit (as for every mechanism
here); each asks for its best-throughput demand; then, repeatedly, the (job, server) pair
with the highest *alignment* -- the dot product of the job's demand and the server's free
resources, each normalised by the server's capacity -- is placed, until no remaining demand
fits anywhere.  Tetris packs resources well but knows nothing of throughput floors, so the
jobs still unplaced then fall back to their GPU-proportional share, first fit (spread over
servers when the GPUs of no single server suffice).  A job that fits nowhere waits.

Jobs with equal demand vectors are interchangeable for the score, so the search runs over
distinct demands (a handful per round), taking the most important job of the winning demand.
"""

from __future__ import annotations

import time

from synergy_opt.mechanisms.base import MechanismOptions, register
from synergy_opt.mechanisms.packing import (
    ClusterState,
    DemandTable,
    order_views,
    place_job,
    select_runnable,
    type_views,
)
from synergy_opt.types import (
    MEM_EPS_GB,
    Allocation,
    Job,
    PlacementPart,
    RoundInstance,
    build_allocation,
)


@register("tetris", doc="multi-resource packing by alignment score")
class Tetris:
    """Alignment-score packing of best demands, GPU-proportional fallback."""

    name = "tetris"

    def __init__(self, options: MechanismOptions | None = None) -> None:
        self.options = options or MechanismOptions()
        self._demand = DemandTable()

    def allocate(self, inst: RoundInstance) -> Allocation:
        """Pack the runnable jobs by alignment, then place the rest at fair share."""
        t0 = time.perf_counter()
        cluster = inst.cluster
        total_c, total_m = cluster.total_cpus, cluster.total_mem_gb
        state = ClusterState(cluster)
        names = [s.name for s in cluster.servers]
        caps = [(max(s.gpus, 1), max(s.cpus, 1), max(s.mem_gb, 1e-9)) for s in cluster.servers]
        runnable = select_runnable(inst)
        # Pending jobs grouped by (gpus, cpus, mem, gpu types), in priority order within a group.
        groups: dict[tuple[int, int, float, tuple[str, ...] | None], list[Job]] = {}
        # A job with per-type matrices enters once per GPU type it may use (its type views,
        # each with that type's best demand); placing one view withdraws the others.
        views_of = {job.id: type_views(inst, job) for job in runnable}
        for job in runnable:
            for v in views_of[job.id]:
                d = self._demand.best(v, total_c, total_m)
                groups.setdefault((v.gpus, d.cpus, d.mem_gb, v.gpu_types), []).append(v)
        placements: dict[str, list[PlacementPart]] = {}
        while groups:
            best: tuple[float, int, tuple[int, int, float, tuple[str, ...] | None]] | None = None
            for key, jobs in groups.items():
                g, c, m, _ = key
                head = jobs[0]
                for i, (gc, cc, mc) in enumerate(caps):
                    if not (
                        state.free_gpus[i] >= g
                        and state.free_cpus[i] >= c
                        and state.free_mem[i] >= m - MEM_EPS_GB
                        and head.may_use(cluster.servers[i])
                    ):
                        continue
                    score = (
                        (g / gc) * (state.free_gpus[i] / gc)
                        + (c / cc) * (state.free_cpus[i] / cc)
                        + (m / mc) * (state.free_mem[i] / mc)
                    )
                    # Ties go to the group seen first (its head ranked highest when the round
                    # began), then to the lower-numbered server.
                    if best is None or score > best[0] + 1e-12:
                        best = (score, i, key)
            if best is None:
                break
            _, i, key = best
            g, c, m, _ = key
            job = groups[key].pop(0)
            if not groups[key]:
                del groups[key]
            state.take(i, g, c, m)
            placements[job.id] = [PlacementPart(names[i], g, c, m)]
            if len(views_of[job.id]) > 1:
                for other in [k for k, js in groups.items() if any(x.id == job.id for x in js)]:
                    groups[other] = [x for x in groups[other] if x.id != job.id]
                    if not groups[other]:
                        del groups[other]
        # What no single server could take at its best demand: GPU-proportional, first fit;
        # a share the GPU-only spread cannot feed spreads by what each server can feed, as
        # PROPORTIONAL's does (without it an 8-GPU job whose share no 8-GPU server holds
        # waited forever where PROPORTIONAL ran it: bench/fuzz_traces.py).
        for job in runnable:
            if job.id in placements:
                continue
            c, m = inst.fair_share(job)
            views = views_of[job.id]
            parts = None
            for k in order_views(state, views, [(c, m)] * len(views), first_fit=True):
                parts = place_job(state, views[k], c, m, first_fit=True, fit_spread=True)
                if parts:
                    break
            if parts:
                placements[job.id] = [
                    PlacementPart(names[k], pg, pc, pm) for k, pg, pc, pm in parts
                ]
        return build_allocation(inst, self.name, placements, solve_seconds=time.perf_counter() - t0)
