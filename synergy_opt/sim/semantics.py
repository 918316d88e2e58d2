"""Simulation semantics: the throughput-matrix model, or the paper simulator's rules.

The two models agree on single-GPU jobs and differ on multi-GPU ones.  Each difference is a
*rule*: a field of the frozen :class:`Semantics`, whose value is a name looked up in that
rule's registry (never an if-chain elsewhere).  Two semantics are registered:

``default``
    The throughput-matrix model.  A g-GPU job's matrix is the model's per-GPU profile scaled
    by g (:meth:`~synergy_opt.profiles.ModelProfile.matrix`); a mechanism may give it any grid
    point, spread over servers if need be, and placement is the mechanisms' own (best fit).
``artifact``
    The Synergy artifact's simulator (msr-fiddle/synergy, read from its code; see
    ``docs/artifact-semantics.md``), rule by rule:

    - ``demand_cap = "one-server"``: TUNE's demand for a g-GPU job is g x the model's best
      per-GPU point, capped at one server's cores and memory;
    - ``cpu_cap_speedup = "interpolated"``: a CPU-capped demand's speed-up is interpolated
      linearly in cores between the proportional share and the best point (so every 8-GPU
      job of a model whose best point needs more than 3 cores per GPU gets speed-up 1);
    - ``mem_cap_speedup = "kept"``: a memory-capped demand keeps the best point's speed-up;
    - ``speedup_levels = "best-or-share"``: a job gets its demand's speed-up or the
      GPU-proportional one, nothing in between;
    - ``placement = "gpu-order"``: GPUs are taken one at a time in GPU-id order from any
      server where the job's per-GPU share still fits, with no consolidation preference
      (every model's split penalty is 1 there);
    - ``placement_order = "priority"``: runnable jobs are placed in the policy's order (its
      FIFO scheduler walks jobs by arrival), where the registered ``tune`` places the
      largest GPU demands first.  Only GPU-order placement reads this rule: a registered
      mechanism keeps its own order;
    - ``progress = "whole-iterations"``: a job advances by whole training iterations per
      round, ``floor(round / (iteration time / speed-up))`` of them (its ``Job.allocate``),
      so a round's fraction of an iteration is lost; the matrix model's progress is
      continuous (throughput x seconds).

Replacing one rule of ``artifact`` by the matrix model's (``dataclasses.replace``) is how the
attribution table is computed (:func:`ablations`); replacing them all gives ``default``.
The FIFO backfilling both models share (every job whose GPU demand fits the free GPUs is
run) is not a rule: :func:`synergy_opt.mechanisms.packing.select_runnable` does it for both.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from functools import lru_cache
from typing import Any, TypeVar

from synergy_opt.mechanisms import Mechanism, MechanismOptions, make_mechanism
from synergy_opt.profiles import ModelProfile
from synergy_opt.types import THROUGHPUT_EPS, Cluster, ThroughputMatrix

#: Rule values of the matrix model, field by field (the ``default`` semantics).
MATRIX = "matrix"


@dataclass(frozen=True, slots=True)
class DemandPoint:
    """Total (cores, GB) of a g-GPU job and the throughput the semantics gives it there."""

    cpus: int
    mem_gb: float
    throughput: float


@dataclass(frozen=True, slots=True)
class JobShape:
    """What the speed-up rules read about one (model, GPU count) on one cluster.

    ``fair`` is the GPU-proportional share, ``best`` g x the model's cheapest best per-GPU
    point, ``cap`` one server's (cores, GB); throughputs are the scaled matrix's look-ups.
    """

    matrix: ThroughputMatrix
    fair: DemandPoint
    best: DemandPoint
    cap_cpus: int
    cap_mem_gb: float


# --------------------------------------------------------------------------- rule registries

F = TypeVar("F", bound=Callable[..., Any])
DemandCap = Callable[[JobShape], tuple[int, float]]
CpuCapSpeedup = Callable[[JobShape, int], float]
MemCapSpeedup = Callable[[JobShape, int, float, float], float]
Levels = Callable[[JobShape, DemandPoint], ThroughputMatrix]
OrderKey = Callable[[int, int], tuple[int, ...]]
#: (throughput, fair-share throughput, seconds run, iteration time at the share, work left)
#: -> work done this round (work is in throughput-seconds, docs/formats.md section 5).
Progress = Callable[[float, float, float, float, float], float]
PlacementFactory = Callable[[str, MechanismOptions, OrderKey], Mechanism]

_DEMAND_CAPS: dict[str, DemandCap] = {}
_CPU_CAP: dict[str, CpuCapSpeedup] = {}
_MEM_CAP: dict[str, MemCapSpeedup] = {}
_LEVELS: dict[str, Levels] = {}
_PLACEMENTS: dict[str, PlacementFactory] = {}
_ORDERS: dict[str, OrderKey] = {}
_PROGRESS: dict[str, Progress] = {}

#: Each rule's registry, by the :class:`Semantics` field that names it.
RULE_REGISTRIES: Mapping[str, Mapping[str, object]] = {
    "demand_cap": _DEMAND_CAPS,
    "cpu_cap_speedup": _CPU_CAP,
    "mem_cap_speedup": _MEM_CAP,
    "speedup_levels": _LEVELS,
    "placement": _PLACEMENTS,
    "placement_order": _ORDERS,
    "progress": _PROGRESS,
}


def _rule(registry: dict[str, F], name: str) -> Callable[[F], F]:
    """Decorator adding a rule implementation to ``registry`` under ``name``."""

    def deco(fn: F) -> F:
        if name in registry:
            raise ValueError(f"rule {name!r} registered twice")
        registry[name] = fn
        return fn

    return deco


# demand_cap: what a g-GPU job asks for.


@_rule(_DEMAND_CAPS, MATRIX)
def _uncapped(shape: JobShape) -> tuple[int, float]:
    """g x the best per-GPU point; a job bigger than a server is spread to get it."""
    return shape.best.cpus, shape.best.mem_gb


@_rule(_DEMAND_CAPS, "one-server")
def _one_server(shape: JobShape) -> tuple[int, float]:
    """g x the best per-GPU point, capped at one server's cores and memory (the artifact)."""
    return min(shape.best.cpus, shape.cap_cpus), min(shape.best.mem_gb, shape.cap_mem_gb)


# cpu_cap_speedup: the speed-up of a demand whose cores were capped (memory as in ``best``).


@_rule(_CPU_CAP, MATRIX)
def _cpu_lookup(shape: JobShape, cpus: int) -> float:
    """The scaled matrix's value at the capped cores."""
    return shape.matrix.lookup(cpus, shape.best.mem_gb)


@_rule(_CPU_CAP, "interpolated")
def _cpu_interpolated(shape: JobShape, cpus: int) -> float:
    """Linear in cores between the proportional share and the best point (the artifact)."""
    f, b = shape.fair, shape.best
    if b.cpus <= f.cpus:
        return b.throughput
    frac = max(0.0, min(1.0, (cpus - f.cpus) / (b.cpus - f.cpus)))
    return f.throughput + (b.throughput - f.throughput) * frac


# mem_cap_speedup: how a memory cap changes the speed-up found so far.


@_rule(_MEM_CAP, MATRIX)
def _mem_lookup(shape: JobShape, cpus: int, mem_gb: float, speedup: float) -> float:
    """No more than the scaled matrix gives at the capped demand."""
    return min(speedup, shape.matrix.lookup(cpus, mem_gb))


@_rule(_MEM_CAP, "kept")
def _mem_kept(shape: JobShape, cpus: int, mem_gb: float, speedup: float) -> float:
    """A memory cap does not lower the speed-up (the artifact: 4-GPU m5 keeps 2.5x)."""
    return speedup


# speedup_levels: which (cores, GB) -> throughput points a job has.


def _grid(points: list[tuple[int, float, float]]) -> ThroughputMatrix:
    """The floor-look-up matrix whose value at (c, m) is the best point it covers.

    Points with no core or no memory are left out: the floor look-up gives 0 below every
    grid, and a matrix axis starts at 1 core and above 0 GB.  A demand capped at a server
    with no cores (a cluster file may list one) would otherwise claim a speed-up at 0
    cores, and building the matrix raised (a fuzz of odd traces through ``simulate
    --semantics artifact``).  The proportional share is always left: ``simulate`` refuses a
    trace whose share is below its model's smallest profiled point."""
    points = [p for p in points if p[0] >= 1 and p[1] > 0.0]
    cs = sorted({c for c, _, _ in points})
    ms = sorted({m for _, m, _ in points})
    rows = tuple(
        tuple(max((w for pc, pm, w in points if pc <= c and pm <= m), default=0.0) for m in ms)
        for c in cs
    )
    return ThroughputMatrix(tuple(cs), tuple(ms), rows)


@_rule(_LEVELS, MATRIX)
def _matrix_levels(shape: JobShape, demand: DemandPoint) -> ThroughputMatrix:
    """Every grid point of the scaled matrix (within the demand cap), plus the demand point."""
    if (demand.cpus, demand.mem_gb) == (shape.best.cpus, shape.best.mem_gb):
        return shape.matrix  # uncapped: exactly the matrix model's job
    m = shape.matrix
    pts = [
        (c, mem, w) for c, mem, w in m.points() if c <= demand.cpus and mem <= demand.mem_gb + 1e-9
    ]
    pts.append((demand.cpus, demand.mem_gb, demand.throughput))
    return _grid(pts)


@_rule(_LEVELS, "best-or-share")
def _two_levels(shape: JobShape, demand: DemandPoint) -> ThroughputMatrix:
    """Two points: the proportional share and the demand (the artifact's "this or 1")."""
    f = shape.fair
    return _grid(
        [(f.cpus, f.mem_gb, f.throughput), (demand.cpus, demand.mem_gb, demand.throughput)]
    )


# placement_order: the order TUNE places runnable jobs in, as a sort key of
# (GPU demand, priority rank).


@_rule(_ORDERS, MATRIX)
def _largest_first(gpus: int, rank: int) -> tuple[int, ...]:
    """Descending GPU demand, priority kept among equals (the registered ``tune``)."""
    return (-gpus, rank)


@_rule(_ORDERS, "priority")
def _by_priority(gpus: int, rank: int) -> tuple[int, ...]:
    """The policy's order (the artifact's FIFO scheduler walks jobs by arrival)."""
    return (rank,)


# progress: how much work a round at some throughput does.


@_rule(_PROGRESS, MATRIX)
def _continuous(
    throughput: float, fair_tp: float, run_s: float, iter_s: float, left: float
) -> float:
    """Throughput x seconds: work is continuous."""
    return throughput * run_s


#: A job is done when less than this fraction of one iteration is left (trace durations
#: are whole iterations rounded to the millisecond).
ITERATION_SNAP: float = 0.5


@_rule(_PROGRESS, "whole-iterations")
def _whole_iterations(
    throughput: float, fair_tp: float, run_s: float, iter_s: float, left: float
) -> float:
    """floor(seconds / (iteration time / speed-up)) whole iterations (the artifact).

    The iteration time at the share over the speed-up (split penalty included in
    ``throughput``) is computed as that simulator does, so exact multiples floor alike.
    """
    if throughput <= 0:
        return 0.0
    per_iter = iter_s * fair_tp
    step = math.floor(run_s / (iter_s / (throughput / fair_tp))) * per_iter
    return left if left - step < ITERATION_SNAP * per_iter else step


# placement: which mechanism a name means (the GPU-order ones live in sim.gpu_order).


@_rule(_PLACEMENTS, MATRIX)
def _registered(name: str, options: MechanismOptions, order: OrderKey) -> Mechanism:
    """The registered mechanism itself (best fit, consolidation first, its own order)."""
    return make_mechanism(name, options)


@_rule(_PLACEMENTS, "gpu-order")
def _gpu_order(name: str, options: MechanismOptions, order: OrderKey) -> Mechanism:
    """The mechanism's GPU-id-order variant (:mod:`synergy_opt.sim.gpu_order`)."""
    from synergy_opt.sim.gpu_order import make_gpu_order_mechanism

    return make_gpu_order_mechanism(name, options, order)


# --------------------------------------------------------------------------- semantics


@dataclass(frozen=True, slots=True)
class Semantics:
    """One simulation model: a name and one registered rule per field (see the module doc)."""

    name: str
    demand_cap: str = MATRIX
    cpu_cap_speedup: str = MATRIX
    mem_cap_speedup: str = MATRIX
    speedup_levels: str = MATRIX
    placement: str = MATRIX
    placement_order: str = MATRIX
    progress: str = MATRIX

    def __post_init__(self) -> None:
        for rule, registry in RULE_REGISTRIES.items():
            value = getattr(self, rule)
            if value not in registry:
                raise ValueError(
                    f"{rule}: unknown rule {value!r}; known: {', '.join(sorted(registry))}"
                )

    def rules(self) -> dict[str, str]:
        """Rule field -> rule name."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "name"}

    def job_matrix(self, profile: ModelProfile, gpus: int, cluster: Cluster) -> ThroughputMatrix:
        """The matrix a ``gpus``-GPU job of ``profile`` has under these rules on ``cluster``."""
        return _job_matrix(self, profile, gpus, _cluster_key(cluster))

    def progress_rule(self) -> Progress:
        """The work a round does (the engine calls it once per scheduled job per round)."""
        return _PROGRESS[self.progress]

    def make_mechanism(self, name: str, options: MechanismOptions | None = None) -> Mechanism:
        """The mechanism ``name`` under this semantics' placement rule."""
        return _PLACEMENTS[self.placement](
            name, options or MechanismOptions(), _ORDERS[self.placement_order]
        )


def _cluster_key(cluster: Cluster) -> tuple[int, int, float, int, float]:
    """(total GPUs, total cores, total GB, largest server's cores, its GB)."""
    big = max(cluster.servers, key=lambda s: (s.gpus, s.cpus, s.mem_gb))
    return cluster.total_gpus, cluster.total_cpus, cluster.total_mem_gb, big.cpus, big.mem_gb


def best_per_gpu_point(profile: ModelProfile) -> tuple[int, float, float]:
    """The model's cheapest per-GPU grid point reaching its best throughput.

    Cheapest = fewest cores, then least memory (the profiles' ``best_cpus_per_gpu`` and
    ``best_mem_gb_per_gpu``: e.g. alexnet 12 cores, 125 GB, 2.94).
    """
    top = max(max(row) for row in profile.throughput)
    for i, c in enumerate(profile.cpus_per_gpu):
        for k, m in enumerate(profile.mem_gb_per_gpu):
            if profile.throughput[i][k] >= top - THROUGHPUT_EPS:
                return c, m, profile.throughput[i][k]
    raise AssertionError("unreachable: the maximum is on the grid")


#: The rules that shape a job's matrix (the others choose the mechanism).
_SPEEDUP_RULES: tuple[str, ...] = (
    "demand_cap",
    "cpu_cap_speedup",
    "mem_cap_speedup",
    "speedup_levels",
)


@lru_cache(maxsize=4096)
def _job_matrix(
    sem: Semantics,
    profile: ModelProfile,
    gpus: int,
    key: tuple[int, int, float, int, float],
) -> ThroughputMatrix:
    total_g, total_c, total_m, cap_c, cap_m = key
    matrix = profile.matrix(gpus)
    if all(getattr(sem, r) == MATRIX for r in _SPEEDUP_RULES):
        return matrix  # the matrix model: nothing to derive
    fc, fm = (gpus * total_c) // total_g, gpus * total_m / total_g
    bc, bm, _ = best_per_gpu_point(profile)
    shape = JobShape(
        matrix,
        DemandPoint(fc, fm, matrix.lookup(fc, fm)),
        DemandPoint(bc * gpus, bm * gpus, matrix.lookup(bc * gpus, bm * gpus)),
        cap_c,
        cap_m,
    )
    dc, dm = _DEMAND_CAPS[sem.demand_cap](shape)
    speedup = shape.best.throughput
    if dc < shape.best.cpus:
        speedup = _CPU_CAP[sem.cpu_cap_speedup](shape, dc)
    if dm < shape.best.mem_gb - 1e-9:
        speedup = _MEM_CAP[sem.mem_cap_speedup](shape, dc, dm, speedup)
    # The proportional share is a floor: TUNE reverts to it rather than run slower.
    demand = DemandPoint(dc, dm, max(speedup, shape.fair.throughput))
    return _LEVELS[sem.speedup_levels](shape, demand)


_SEMANTICS: dict[str, Semantics] = {}


def register_semantics(sem: Semantics) -> Semantics:
    """Add ``sem`` to the registry under its name."""
    if sem.name in _SEMANTICS:
        raise ValueError(f"semantics {sem.name!r} registered twice")
    _SEMANTICS[sem.name] = sem
    return sem


DEFAULT = register_semantics(Semantics("default"))
ARTIFACT = register_semantics(
    Semantics(
        "artifact",
        demand_cap="one-server",
        cpu_cap_speedup="interpolated",
        mem_cap_speedup="kept",
        speedup_levels="best-or-share",
        placement="gpu-order",
        placement_order="priority",
        progress="whole-iterations",
    )
)


def semantics_names() -> tuple[str, ...]:
    """Registered semantics names, sorted."""
    return tuple(sorted(_SEMANTICS))


def get_semantics(name: str) -> Semantics:
    """The semantics called ``name``; ``KeyError`` names the known ones."""
    try:
        return _SEMANTICS[name]
    except KeyError:
        raise KeyError(
            f"unknown semantics {name!r}; known: {', '.join(semantics_names())}"
        ) from None


def ablations(base: Semantics = ARTIFACT) -> list[tuple[str, Semantics]]:
    """``base``, then ``base`` with each non-matrix rule replaced by the matrix model's, then all.

    Labels: ``"artifact"``, ``"placement -> matrix"``, ..., ``"all -> matrix"``.
    """
    out = [(base.name, base)]
    changed = [r for r, v in base.rules().items() if v != MATRIX]
    for rule in changed:
        out.append(
            (f"{rule} -> {MATRIX}", replace(base, name=f"{base.name}-{rule}", **{rule: MATRIX}))
        )
    out.append(
        (
            f"all -> {MATRIX}",
            replace(base, name=f"{base.name}-all", **dict.fromkeys(changed, MATRIX)),
        )
    )
    return out
