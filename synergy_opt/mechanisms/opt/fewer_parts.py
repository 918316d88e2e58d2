"""Fewer parts for a packing's spread jobs: drop parts while the others still carry them.

Once a packing's whole jobs stay where it put them, its spread jobs face three independent
transportation problems over the servers where each has a part (its *support*): GPUs, with
at least one on every part (pk5 of ``formulations/packing.md``), cores and memory units
(pk3, pk4, drawn anywhere on the support; pk8-pk10 the servers' room left by the whole
jobs).  A support serves iff the three max-flows saturate
(:func:`~.transport.transport_flow`).  So a part can be dropped exactly when the support
without it still serves.  Trying, in passes, to make each spread job whole and then to drop
single parts, until nothing more can go, gives a support with no part to spare: a packing
with fewer parts (pk0, not the fewest) that keeps every job's GPUs, cores and GB.

Why not CP-SAT (pk0 as its objective, the first packing as a complete hint; the code before
2026-12-07's fourth session): its presolve and hint search alone took 0.2-0.3 s at 128
GPUs before it improved anything, and its budget of 0.2 deterministic units 0.5-0.9 s of
wall time, half of ``opt``'s round on the three multi-GPU 128-GPU rounds of seeds 0-99 that
reach the packing route (7, 18 and 72).  Dropping parts there takes 35-82 ms and leaves
fewer fragmented jobs (10, 12, 16 against CP-SAT's 14, 13, 17; first packings 19, 16, 21).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from synergy_opt.formulations.packing_data import (
    MEM_UNIT_GB,
    PackingData,
    SpreadJob,
    room_left,
    units_up,
)
from synergy_opt.mechanisms.opt.context import GpuPlan
from synergy_opt.mechanisms.opt.transport import transport_flow

#: Per spread job, (server, cores, GB) of each part (as
#: :attr:`~synergy_opt.formulations.packing_cp.PackingResult.resources`).
Resources = dict[str, tuple[tuple[int, int, float], ...]]


@dataclass(frozen=True, slots=True)
class FewerParts:
    """A packing whose spread jobs' supports have no part to spare, and what it dropped."""

    plan: dict[str, tuple[tuple[int, int], ...]]
    resources: Resources
    #: Parts dropped from the first packing's spread jobs.
    dropped: int
    #: Supports tried by their max-flows (not those :func:`_alone_fits` ruled out).
    checks: int
    #: Whether the deadline stopped it before no part could go.
    cut: bool


@dataclass(frozen=True, slots=True)
class _Need:
    """Each spread job's GPUs, cores and memory units (the same for every support tried)."""

    gpus: Mapping[str, int]
    cpus: Mapping[str, int]
    mem: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class _Room:
    """Each server's GPUs, cores and memory units left by the whole jobs."""

    gpus: tuple[int, ...]
    cpus: tuple[int, ...]
    mem: tuple[int, ...]


def fewer_parts(
    data: PackingData, plan: GpuPlan, deadline: float | None = None
) -> FewerParts | None:
    """``plan`` (a packing of ``data``, no free groups) with parts of its spread jobs
    dropped while the rest still carries every job, in passes until none can go or
    ``time.perf_counter()`` passes ``deadline``.  Whole jobs keep their servers.

    Each pass first tries to make each spread job whole (:func:`_moves`: smallest jobs
    first, each on the server where ``plan`` gave it most GPUs first), then to drop single
    parts, smallest first.  ``None`` where ``plan``'s spread jobs do not fit in the
    packing's units (a packing CP-SAT found always does); ``ValueError`` for free groups
    (branch-and-price's leaves, which this does not serve)."""
    if data.free:
        raise ValueError("fewer_parts: packings with free groups are not supported")
    room = _room(data, plan)
    jobs = {sj.job.id: sj for sj in data.spread}
    need = _Need(
        {jid: sj.job.gpus for jid, sj in jobs.items()},
        {jid: sj.cpus for jid, sj in jobs.items()},
        {jid: units_up(sj.mem_gb) for jid, sj in jobs.items()},
    )
    support = {jid: tuple(s for s, _ in plan[jid]) for jid in jobs}
    best = _serve(need, support, room)
    if best is None:
        return None
    dropped = checks = 0
    cut = progress = False
    while not cut:
        progress = False
        for jid, whole, s in _moves(jobs, plan, support):
            if deadline is not None and time.perf_counter() > deadline:
                cut = True
                break
            now = support[jid]
            if len(now) < 2 or s not in now:
                continue  # an earlier move of this pass made the job whole or dropped s
            kept = (s,) if whole else tuple(x for x in now if x != s)
            if not _alone_fits(need, jid, kept, room):
                continue  # the flows would fail: the job alone overfills what is kept
            trial = {**support, jid: kept}
            checks += 1
            served = _serve(need, trial, room)
            if served is not None:
                dropped += len(now) - len(kept)
                support, best, progress = trial, served, True
        if not progress:
            break
    gpus, cores, mem = best
    out = {jid: parts for jid, parts in plan.items() if jid not in jobs}
    resources: Resources = {}
    for jid, sp in support.items():
        # the first GPUs where nothing dropped (cores and GB do not depend on them)
        out[jid] = tuple((s, gpus[jid][s]) for s in sp) if dropped else tuple(plan[jid])
        resources[jid] = tuple(
            (s, cores[jid].get(s, 0), mem[jid].get(s, 0) * MEM_UNIT_GB)
            for s in sp
            if cores[jid].get(s, 0) or mem[jid].get(s, 0)
        )
    return FewerParts(out, resources, dropped, checks, cut)


def _moves(
    jobs: Mapping[str, SpreadJob], plan: GpuPlan, support: Mapping[str, tuple[int, ...]]
) -> list[tuple[str, bool, int]]:
    """One pass's tries, each (spread job, whole, server): every spread job whole on one of
    its servers (``True``: fewest GPUs first, then fewest parts; its servers by most GPUs in
    ``plan``), then every part dropped alone (``False``: fewest GPUs in ``plan`` first).
    Whole moves first: on the 21 packings of multi-GPU, mixed-shape and split-penalty
    rounds the route reached (32-128 GPUs), 212 fragmented jobs in all, 215 with drops
    alone; CP-SAT's fewer-parts step left 236 (``bench/bench_packing_steps.py``)."""
    index = {jid: i for i, jid in enumerate(jobs)}
    first = {jid: dict(plan[jid]) for jid in jobs}
    split = [(jid, sp) for jid, sp in support.items() if len(sp) > 1]
    out: list[tuple[str, bool, int]] = []
    for _, _, _, jid in sorted((jobs[j].job.gpus, len(sp), index[j], j) for j, sp in split):
        gpus = first[jid]
        out += [(jid, True, s) for _, s in sorted((-gpus.get(s, 0), s) for s in support[jid])]
    drops = sorted((first[j].get(s, 0), index[j], s, j) for j, sp in split for s in sp)
    out += [(j, False, s) for _, _, s, j in drops]
    return out


def _room(data: PackingData, plan: GpuPlan) -> _Room:
    """What the whole jobs of ``plan`` leave on each server, in the packing's units
    (:func:`~synergy_opt.formulations.packing_data.room_left`)."""
    whole: dict[tuple[int, int], int] = {}
    for d, gr in enumerate(data.groups):
        for job in gr.jobs:
            ((s, _),) = plan[job.id]
            whole[d, s] = whole.get((d, s), 0) + 1
    gpus, cpus, mem = room_left(data, whole)
    return _Room(tuple(gpus), tuple(cpus), tuple(mem))


def _alone_fits(need: _Need, jid: str, kept: tuple[int, ...], room: _Room) -> bool:
    """Whether spread job ``jid`` alone fits the room the whole jobs leave on ``kept``
    (GPUs, cores, memory units): where it does not, no support giving it ``kept`` serves,
    and the three max-flows of :func:`_serve` are not run (on multi-GPU 128 GPUs seeds 7,
    18 and 72 this rules out 276 of the 633 supports that do not serve)."""
    return (
        sum(room.gpus[s] for s in kept) >= need.gpus[jid]
        and sum(room.cpus[s] for s in kept) >= need.cpus[jid]
        and sum(room.mem[s] for s in kept) >= need.mem[jid]
    )


_Flows = tuple[
    Mapping[str, Mapping[int, int]],
    Mapping[str, Mapping[int, int]],
    Mapping[str, Mapping[int, int]],
]


def _serve(need: _Need, support: Mapping[str, tuple[int, ...]], room: _Room) -> _Flows | None:
    """The GPUs (one on every part, then a max-flow for the rest), cores and memory units
    of every spread job on ``support``, or ``None`` where one of the three falls short."""
    used = [0] * len(room.gpus)
    for sp in support.values():
        for s in sp:
            used[s] += 1
    left = [g - u for g, u in zip(room.gpus, used, strict=True)]
    if min(left, default=0) < 0:
        return None
    extra = {jid: g - len(support[jid]) for jid, g in need.gpus.items()}
    if min(extra.values(), default=0) < 0:
        return None
    more = transport_flow(extra, support, left)
    if more is None:
        return None
    cores = transport_flow(need.cpus, support, room.cpus)
    if cores is None:
        return None
    mem = transport_flow(need.mem, support, room.mem)
    if mem is None:
        return None
    gpus = {jid: {s: 1 + more[jid].get(s, 0) for s in sp} for jid, sp in support.items()}
    return gpus, cores, mem
