"""Synergy-TUNE, the deployed heuristic (OSDI '22, Section 4).

1. Runnable set: the top jobs, in priority order, whose GPU demands the free GPUs satisfy
   exactly (auxiliary demands are ignored here, so GPUs never idle at full load).
2. Each job asks for the cheapest grid point reaching its best throughput.
3. Jobs are placed by descending GPU demand, priority order kept among equal demands (as
   the paper's simulator does: ``tune``), or sorted by GPU, then CPU, then memory demand as
   the paper's text says (``tune-sorted``); each goes to the server with the least free
   resources that still fits.
4. A job that does not fit first reverts its own demand to GPU-proportional (precisely: the
   cheapest point within its demand that keeps its fair-share throughput, which is the
   proportional point for every shipped profile); if it still does not fit, a server with
   enough free GPUs is chosen and co-resident jobs holding more than they need are reverted
   the same way, least important first, until the job fits.

Every placed job keeps at least its fair-share throughput, so in the worst case the round
degenerates to PROPORTIONAL: Synergy is never worse than the baseline.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from synergy_opt.check import forced_split_factor
from synergy_opt.mechanisms.base import MechanismOptions, register, register_alias
from synergy_opt.mechanisms.packing import (
    ClusterState,
    DemandPoint,
    DemandTable,
    Part,
    order_views,
    place_job,
    select_runnable,
    split_within,
    spread_parts,
    type_views,
)
from synergy_opt.types import (
    MEM_EPS_GB,
    THROUGHPUT_EPS,
    Allocation,
    Job,
    PlacementPart,
    RoundInstance,
    Server,
    ThroughputMatrix,
    build_allocation,
    merged_parts,
    realised_throughput,
)


@dataclass(slots=True)
class _Placed:
    """A job placed in this round (mutable while the round is being packed)."""

    job: Job
    prio: int
    cpus: int
    mem: float
    parts: list[Part]
    w_floor: float
    shrunk: bool = False
    new_parts: list[Part] | None = field(default=None)


def _pointwise_min_parts(old: list[Part], cpus: int, mem: float) -> list[Part]:
    """Re-split (cpus, mem) over the same servers without growing any part (split_within).

    A consolidated job's single part is the whole job: it takes (cpus, mem) as they are,
    even memory up to ``MEM_EPS_GB`` above the old part that the shrunk point may carry.
    """
    if len(old) == 1:  # consolidated: the single part is the whole job
        return [(old[0][0], old[0][1], cpus, mem)]
    return split_within(old, cpus, mem)


def placements_total(
    inst: RoundInstance, placements: Mapping[str, Sequence[PlacementPart]]
) -> float:
    """``build_allocation(inst, ..., placements).total_throughput``, without the allocation.

    The same throughput per job (a single part read on its server's type; several parts
    merged per server in server order, then :func:`realised_throughput`) and the same
    ``math.fsum`` over the jobs in instance order, so the two are equal to the bit (a test
    holds them to it)."""
    types = {s.name: s.gpu_type for s in inst.cluster.servers}
    order: dict[str, int] | None = None
    values: list[float] = []
    for job in inst.jobs:
        parts = placements.get(job.id)
        if not parts:
            continue
        if len(parts) == 1:
            p = parts[0]
            values.append(job.matrix_for(types.get(p.server)).lookup(p.cpus, p.mem_gb))
            continue
        if order is None:
            order = {s.name: i for i, s in enumerate(inst.cluster.servers)}
        values.append(realised_throughput(job, merged_parts(parts, order), types))
    return math.fsum(values)


@dataclass(frozen=True, slots=True)
class TuneRound:
    """TUNE's answer to one round before it becomes an :class:`Allocation`: its parts per
    job and their total (equal to the allocation's), the allocation built once, on demand."""

    inst: RoundInstance
    mechanism: str
    placements: Mapping[str, Sequence[PlacementPart]]
    total_throughput: float
    #: Seconds TUNE took (the allocation's ``solve_seconds``).
    seconds: float
    _built: list[Allocation] = field(default_factory=list, compare=False, repr=False)

    def allocation(self) -> Allocation:
        """The allocation ``Tune.allocate`` returns for this round (timing aside)."""
        if not self._built:
            self._built.append(
                build_allocation(
                    self.inst, self.mechanism, self.placements, solve_seconds=self.seconds
                )
            )
        return self._built[0]


class TuneAnswer(Protocol):
    """What ``opt`` reads of TUNE's answer: its total and, on demand, its allocation."""

    @property
    def total_throughput(self) -> float: ...

    def allocation(self) -> Allocation: ...


class TuneLater:
    """TUNE's round, run the first time its total or allocation is read.

    ``opt`` compares its answer with TUNE's; where a bound proves TUNE cannot beat the
    answer (:func:`~synergy_opt.mechanisms.opt.bounds.subset_bound`) TUNE is not run at all
    (on multi-GPU 128-GPU rounds its placements were a seventh of ``opt``'s time).  The
    same placements either way: TUNE's memos are pure."""

    def __init__(self, tune: Tune, inst: RoundInstance, runnable: Sequence[Job]) -> None:
        self._tune, self._inst, self._runnable = tune, inst, runnable
        self._round: TuneRound | None = None

    def round(self) -> TuneRound:
        """TUNE's round (run now if it has not)."""
        if self._round is None:
            self._round = self._tune.tune_round(self._inst, self._runnable)
        return self._round

    @property
    def total_throughput(self) -> float:
        """TUNE's total (runs TUNE)."""
        return self.round().total_throughput

    def allocation(self) -> Allocation:
        """TUNE's allocation (runs TUNE)."""
        return self.round().allocation()


@register("tune", keeps_fair_share=True, doc="the paper simulator's TUNE")
class Tune:
    """Synergy-TUNE as the paper's simulator runs it: largest GPU demand first.

    Runnable jobs are placed by descending GPU demand, priority order kept among equal
    demands (a stable sort), then best fit.  Placing in (near) priority order mixes CPU-hungry
    and insensitive jobs on every server; on the calibration trace (128 GPUs, FIFO, 9 jobs/h)
    this order reproduces the artifact's TUNE average JCT (22.3 h against 22.37 h), where the
    paper text's full GPU/CPU/memory sort (``tune-sorted``) gives 36.6 h.
    """

    name = "tune"
    #: Also sort by CPU, then memory demand within a GPU demand (the paper's text).
    sort_by_demand: bool = False

    def __init__(self, options: MechanismOptions | None = None) -> None:
        self.options = options or MechanismOptions()
        self._demand = DemandTable()

    def allocate(self, inst: RoundInstance) -> Allocation:
        """Run one round of Synergy-TUNE."""
        t0 = time.perf_counter()
        placements = self.placements(inst)
        return build_allocation(inst, self.name, placements, solve_seconds=time.perf_counter() - t0)

    def tune_round(self, inst: RoundInstance, runnable: Sequence[Job] | None = None) -> TuneRound:
        """TUNE's placements for ``inst`` and their exact total, the :class:`Allocation`
        assembled only on demand (``opt`` runs TUNE every round as its floor, and returns or
        reads TUNE's answer on few of them).  ``runnable``: ``select_runnable(inst)`` when
        the caller has it already."""
        t0 = time.perf_counter()
        placements = self.placements(inst, runnable)
        return TuneRound(
            inst,
            self.name,
            placements,
            placements_total(inst, placements),
            time.perf_counter() - t0,
        )

    def placements(
        self, inst: RoundInstance, runnable: Sequence[Job] | None = None
    ) -> dict[str, list[PlacementPart]]:
        """The parts of every job TUNE places in ``inst`` (the steps of :meth:`allocate`);
        ``runnable``: ``select_runnable(inst)`` when the caller has it already."""
        cluster = inst.cluster
        total_c, total_m = cluster.total_cpus, cluster.total_mem_gb
        prio = {j.id: k for k, j in enumerate(inst.jobs)}
        runnable = select_runnable(inst) if runnable is None else list(runnable)
        # A job with per-type matrices is tried on each GPU type it may use (its type
        # views, each with that type's matrix); any other job is its only view.
        # Views and per-view demands only for typed jobs: an untyped job is its only view.
        demand = self._demand
        views_of: dict[str, tuple[Job, ...]] = {}
        best_of: dict[str, list[DemandPoint]] = {}
        best: dict[str, DemandPoint] = {}
        for j in runnable:
            if j.sensitivity_by_type is None:
                best[j.id] = demand.best(j, total_c, total_m)
            else:
                vs = views_of[j.id] = type_views(inst, j)
                ds = best_of[j.id] = [demand.best(v, total_c, total_m) for v in vs]
                best[j.id] = ds[0]
        if self.sort_by_demand:
            runnable.sort(key=lambda j: (-j.gpus, -best[j.id].cpus, -best[j.id].mem_gb, prio[j.id]))
        else:
            runnable.sort(key=lambda j: (-j.gpus, prio[j.id]))
        state = ClusterState(cluster)
        # One server of each kind (GPUs, cores, memory, GPU type): a floor depends on no more.
        shapes = tuple(
            {(v.gpus, v.cpus, v.mem_gb, v.gpu_type): v for v in cluster.servers}.values()
        )
        residents: list[list[_Placed]] = [[] for _ in cluster.servers]
        placed: list[_Placed] = []

        # Untyped jobs under one share for every server (every homogeneous cluster, the
        # simulator's calibration runs): the paper's steps without views, floors per server
        # or the per-server check, which cost ~60% of a replay's time for the same answer.
        plain = not inst.per_server_shares
        for job in runnable:
            views = views_of.get(job.id) or (job,)
            fair_tp = inst.fair_share_throughput(job)
            if plain and views[0] is job:
                got_plain = self._place_plain(inst, state, residents, job, best[job.id], fair_tp)
                if got_plain is None:
                    continue
                cpus, mem, parts, consolidable = got_plain
                spread = len(parts) > 1
                w_floor = fair_tp / job.split_penalty if (spread and consolidable) else fair_tp
                rec = _Placed(job, prio[job.id], cpus, mem, list(parts), w_floor)
                placed.append(rec)
                for p in parts:
                    residents[p[0]].append(rec)
                continue
            # Under the per-server rule a job's floor depends on where it lands: demands are
            # shrunk only as far as the strictest server's floor allows (each view's own).
            mats = inst.usable_matrices(job)
            floors = (
                [_strictest_floor(inst, v, mats, shapes) for v in views]
                if inst.per_server_shares
                else [fair_tp] * len(views)
            )
            got = self._place(
                inst, state, residents, views, best_of.get(job.id) or [best[job.id]], floors, mats
            )
            if got is None:
                continue
            view, cpus, mem, parts, consolidable = got
            if inst.per_server_shares:
                fair_tp = _floor_on(inst, mats, parts)
            spread = len(parts) > 1
            w_floor = fair_tp / job.split_penalty if (spread and consolidable) else fair_tp
            rec = _Placed(view, prio[job.id], cpus, mem, list(parts), w_floor)
            placed.append(rec)
            for p in parts:
                residents[p[0]].append(rec)

        names = [s.name for s in cluster.servers]
        return {
            r.job.id: [PlacementPart(names[i], k, c, m) for i, k, c, m in r.parts] for r in placed
        }

    # ------------------------------------------------------------------ helpers

    def _place_plain(
        self,
        inst: RoundInstance,
        state: ClusterState,
        residents: list[list[_Placed]],
        job: Job,
        d: DemandPoint,
        fair_tp: float,
    ) -> tuple[int, float, list[Part], bool] | None:
        """:meth:`_place` for a job that is its only view, one floor for every server.

        The same four steps on the job itself (best demand; shrunk to the
        fair-share-keeping demand; reclaiming; spreading by what servers can feed): the
        answer is :meth:`_place`'s with ``views == (job,)`` and no per-server check.
        """
        consolidable = job.gpus <= state.max_server_gpus(job)
        cpus, mem = d.cpus, d.mem_gb
        parts = place_job(
            state,
            job,
            cpus,
            mem,
            allow_spread=self._may_spread(job, consolidable, d.throughput, fair_tp),
        )
        if parts is not None:
            return cpus, mem, parts, consolidable
        total_c, total_m = inst.cluster.total_cpus, inst.cluster.total_mem_gb
        s = self._demand.shrink(job, total_c, total_m, cpus, mem, fair_tp)
        if s is not None and (s.cpus, s.mem_gb) != (cpus, mem):
            cpus, mem = s.cpus, s.mem_gb
            parts = place_job(
                state,
                job,
                cpus,
                mem,
                allow_spread=self._may_spread(job, consolidable, s.throughput, fair_tp),
            )
            if parts is not None:
                return cpus, mem, parts, consolidable
        parts = self._reclaim_and_place(
            inst, state, residents, job, cpus, mem, consolidable, fair_tp
        )
        if parts is not None:
            return cpus, mem, parts, consolidable
        w = job.sensitivity.lookup(cpus, mem)
        parts = place_job(
            state,
            job,
            cpus,
            mem,
            allow_spread=self._may_spread(job, consolidable, w, fair_tp),
            fit_spread=True,
        )
        if parts is not None:
            return cpus, mem, parts, consolidable
        return None

    def _place(
        self,
        inst: RoundInstance,
        state: ClusterState,
        residents: list[list[_Placed]],
        views: tuple[Job, ...],
        best: list[DemandPoint],
        floors: list[float],
        mats: tuple[ThroughputMatrix, ...],
    ) -> tuple[Job, int, float, list[Part], bool] | None:
        """Place one job: (view, cores, memory, parts, consolidable), or ``None``.

        Each step (best demand; shrunk to the fair-share-keeping demand; reclaiming from
        residents; spreading by what servers can feed) is tried on every view before the
        next, views in type-agnostic best-fit order; with one view, the steps of the paper.
        ``floors[k]`` is the fair share view k must keep: the job's own (for a typed job,
        its slowest usable type's), or under the per-server rule the strictest server's;
        ``mats`` are the job's usable matrices, whose slowest reads a placed job's floor.
        Under that rule each placement is checked against its servers' own floor, and a
        last step gives the job its servers' GPU-proportional shares, reclaiming from
        residents, so TUNE never does worse than PROPORTIONAL.
        """
        total_c, total_m = inst.cluster.total_cpus, inst.cluster.total_mem_gb
        want = [(d.cpus, d.mem_gb) for d in best]
        order = order_views(state, views, want)
        cons = [v.gpus <= state.max_server_gpus(v) for v in views]
        checked = inst.per_server_shares

        def keeps(v: Job, parts: list[Part], cpus: int, mem: float) -> bool:
            """Per-server rule: whether the placement keeps its servers' own floor."""
            if not checked:
                return True
            w = v.sensitivity.lookup(cpus, mem) * (v.split_penalty if len(parts) > 1 else 1.0)
            need = _floor_on(inst, mats, parts)
            if len(parts) > 1:  # a forced spread: the baseline pays the penalty too
                need *= forced_split_factor(inst, v)
            return w >= need - THROUGHPUT_EPS

        def kept(v: Job, parts: list[Part] | None, cpus: int, mem: float) -> list[Part] | None:
            """The placement if it keeps its servers' floor, else undone."""
            if parts is None or keeps(v, parts, cpus, mem):
                return parts
            for i, g, c, m in parts:
                state.give(i, g, c, m)
            return None

        for k in order:
            v, d = views[k], best[k]
            parts = place_job(
                state,
                v,
                d.cpus,
                d.mem_gb,
                allow_spread=self._may_spread(v, cons[k], d.throughput, floors[k]),
            )
            parts = kept(v, parts, d.cpus, d.mem_gb)
            if parts is not None:
                return v, d.cpus, d.mem_gb, parts, cons[k]
        for k in order:
            v, (cpus, mem) = views[k], want[k]
            s = self._demand.shrink(v, total_c, total_m, cpus, mem, floors[k])
            if s is not None and (s.cpus, s.mem_gb) != (cpus, mem):
                want[k] = (s.cpus, s.mem_gb)
                parts = place_job(
                    state,
                    v,
                    s.cpus,
                    s.mem_gb,
                    allow_spread=self._may_spread(v, cons[k], s.throughput, floors[k]),
                )
                parts = kept(v, parts, s.cpus, s.mem_gb)
                if parts is not None:
                    return v, s.cpus, s.mem_gb, parts, cons[k]
        for k in order:
            v, (cpus, mem) = views[k], want[k]

            def keeps_at(parts: list[Part], v: Job = v, cpus: int = cpus, mem: float = mem) -> bool:
                return keeps(v, parts, cpus, mem)

            parts = self._reclaim_and_place(
                inst,
                state,
                residents,
                v,
                cpus,
                mem,
                cons[k],
                floors[k],
                keeps_at,
            )
            if parts is not None:
                return v, cpus, mem, parts, cons[k]
        for k in order:
            # Last resort for heterogeneous clusters: no server (and no GPU-only spread)
            # can feed even the fair-share-keeping demand, e.g. 500 GB for 8 GPUs on
            # 384 GB servers; spread it by what each server can feed, or it never runs.
            v, (cpus, mem) = views[k], want[k]
            w = v.sensitivity.lookup(cpus, mem)
            parts = place_job(
                state,
                v,
                cpus,
                mem,
                allow_spread=self._may_spread(v, cons[k], w, floors[k]),
                fit_spread=True,
            )
            parts = kept(v, parts, cpus, mem)
            if parts is not None:
                return v, cpus, mem, parts, cons[k]
        if checked:
            for k in order:
                got = self._place_at_server_shares(inst, state, residents, views[k], cons[k])
                if got is not None:
                    return views[k], got[0], got[1], got[2], cons[k]
        return None

    def _place_at_server_shares(
        self,
        inst: RoundInstance,
        state: ClusterState,
        residents: list[list[_Placed]],
        job: Job,
        consolidable: bool,
    ) -> tuple[int, float, list[Part]] | None:
        """PROPORTIONAL's placement under the per-server rule, reverting residents for room.

        Each part gets its server's own GPU-proportional share, so the job sits exactly at
        its fair share; residents holding more than their own floor give the room back.
        """
        g = job.gpus
        servers = state.servers
        if consolidable:
            for i in state.gpu_candidates(job, g):
                c, m = inst.server_share(g, servers[i])
                if self._make_room(inst, state, residents[i], i, g, c, m):
                    state.take(i, g, c, m)
                    return c, m, [(i, g, c, m)]
            if job.split_penalty < 1.0:
                return None  # PROPORTIONAL too waits rather than spread it below its share
        plan = state.spread_plan(job, g)
        if plan is None or len(plan) < 2:
            return None
        parts = [(i, k, *inst.server_share(k, servers[i])) for i, k in plan]
        for i, k, c, m in parts:
            if not self._make_room(inst, state, residents[i], i, k, c, m):
                return None
        for i, k, c, m in parts:
            state.take(i, k, c, m)
        return sum(p[2] for p in parts), sum(p[3] for p in parts), parts

    @staticmethod
    def _may_spread(job: Job, consolidable: bool, w: float, fair_tp: float) -> bool:
        """Spreading a job that could sit on one server must not cost it its fair share."""
        return not consolidable or w * job.split_penalty >= fair_tp - THROUGHPUT_EPS

    def _shrunk(self, inst: RoundInstance, r: _Placed) -> list[Part] | None:
        """Parts of resident ``r`` reverted to the least it needs (cached per round)."""
        if r.shrunk:
            return None
        if r.new_parts is None:
            c = inst.cluster
            s = self._demand.shrink(r.job, c.total_cpus, c.total_mem_gb, r.cpus, r.mem, r.w_floor)
            if s is None or (s.cpus >= r.cpus and s.mem_gb >= r.mem - MEM_EPS_GB):
                r.shrunk = True
                return None
            r.new_parts = _pointwise_min_parts(r.parts, s.cpus, s.mem_gb)
        return r.new_parts

    def _reclaimable(
        self, inst: RoundInstance, residents: list[_Placed], i: int
    ) -> tuple[int, float]:
        """Cores and memory that reverting server ``i``'s residents would free there."""
        rc, rm = 0, 0.0
        for r in residents:
            new = self._shrunk(inst, r)
            if new is None:
                continue
            for old_p, new_p in zip(r.parts, new, strict=True):
                if old_p[0] == i:
                    rc += old_p[2] - new_p[2]
                    rm += old_p[3] - new_p[3]
        return rc, rm

    def _revert(self, state: ClusterState, r: _Placed, new: list[Part]) -> None:
        for old_p, new_p in zip(r.parts, new, strict=True):
            state.give(old_p[0], 0, old_p[2] - new_p[2], old_p[3] - new_p[3])
        r.parts = new
        r.cpus = sum(p[2] for p in new)
        r.mem = sum(p[3] for p in new)
        r.shrunk = True

    def _make_room(
        self,
        inst: RoundInstance,
        state: ClusterState,
        residents: list[_Placed],
        i: int,
        g: int,
        c: int,
        m: float,
    ) -> bool:
        """Revert residents of server ``i``, least important first, until (g, c, m) fits."""
        for r in sorted(residents, key=lambda r: -r.prio):
            if state.fits(i, g, c, m):
                return True
            new = self._shrunk(inst, r)
            if new is not None:
                self._revert(state, r, new)
        return state.fits(i, g, c, m)

    def _reclaim_and_place(
        self,
        inst: RoundInstance,
        state: ClusterState,
        residents: list[list[_Placed]],
        job: Job,
        cpus: int,
        mem: float,
        consolidable: bool,
        fair_tp: float,
        keeps: Callable[[list[Part]], bool] | None = None,
    ) -> list[Part] | None:
        """Place ``job`` at (``cpus``, ``mem``), reverting residents for room: on one server
        if it fits there, else spread.  ``keeps`` (per-server rule) vets the parts before
        any resident is reverted: a spread over servers of several shapes has a floor of
        its own, which the demand, shrunk to the strictest single server's, can miss."""
        g = job.gpus
        if consolidable:
            for i in state.gpu_candidates(job, g):
                if keeps is not None and not keeps([(i, g, cpus, mem)]):
                    continue
                rc, rm = self._reclaimable(inst, residents[i], i)
                if state.free_cpus[i] + rc >= cpus and state.free_mem[i] + rm >= mem - MEM_EPS_GB:
                    if self._make_room(inst, state, residents[i], i, g, cpus, mem):
                        state.take(i, g, cpus, mem)
                        return [(i, g, cpus, mem)]
            if not self._may_spread(job, consolidable, job.sensitivity.lookup(cpus, mem), fair_tp):
                return None
        plan = state.spread_plan(job, g)
        if plan is None or (consolidable and len(plan) == 1):
            return None
        parts = spread_parts(state, plan, cpus, mem)
        if keeps is not None and not keeps(parts):
            return None
        for i, k, c, m in parts:
            if not self._make_room(inst, state, residents[i], i, k, c, m):
                return None
        for i, k, c, m in parts:
            state.take(i, k, c, m)
        return parts


@register("tune-sorted", keeps_fair_share=True, doc="the paper text's TUNE sort")
class TuneSorted(Tune):
    """TUNE as the paper's text describes it: runnable jobs sorted by GPU, CPU, memory demand.

    Sorting by demand packs the CPU-hungry jobs first and best fit stacks them on the same
    servers, whose spare GPUs are then left with no cores for the jobs that follow, so
    those jobs force the big ones back to fair share: about 3 % less throughput per round
    on the calibration trace, which at its load becomes a large backlog (36.6 h average JCT
    against the artifact's 22.37 h).  Kept beside ``tune`` because the difference is itself
    a finding.
    """

    name = "tune-sorted"
    sort_by_demand = True


def _strictest_floor(
    inst: RoundInstance,
    view: Job,
    mats: tuple[ThroughputMatrix, ...],
    shapes: Sequence[Server],
) -> float:
    """The largest per-server fair-share throughput over the servers ``view`` may use.

    A demand keeping it keeps every usable server's own floor (profiles are monotone);
    each placement is still checked against its own servers' floor.  ``shapes``: one
    server per (GPUs, cores, memory, GPU type), all a server's share and ``may_use``
    read, so the maximum is the one over every server (mixed shapes 512 GPUs: 3 kinds of
    about 80 servers, where this was half of ``tune``'s time).
    """
    return max(
        min(w.lookup(*inst.server_share(view.gpus, s)) for w in mats)
        for s in shapes
        if s.gpus > 0 and view.may_use(s)
    )


def _floor_on(inst: RoundInstance, mats: tuple[ThroughputMatrix, ...], parts: list[Part]) -> float:
    """The fair-share throughput on the servers of ``parts`` (per-server rule), read in the
    slowest of the job's usable matrices as :meth:`RoundInstance.fair_share_throughput_on`."""
    servers = inst.cluster.servers
    gpus: dict[int, int] = {}
    for i, g, _, _ in parts:
        gpus[i] = gpus.get(i, 0) + g
    shares = [inst.server_share(g, servers[i]) for i, g in gpus.items()]
    c, m = sum(c for c, _ in shares), math.fsum(m for _, m in shares)
    return min(w.lookup(c, m) for w in mats)


#: ``tune-inorder`` was the name of the simulator's TUNE before it became ``tune``.
register_alias("tune-inorder", "tune")
