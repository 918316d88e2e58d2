"""From a CPU-axis profile and a cache model to W_j, and the JSON report around it.

The report says what profiling cost (points measured, minutes at a given time per point),
what the full grid would have cost, the reduction factor, and -- for a replayed profile --
how far the profiled matrix is from the truth.  Its ``sensitivity`` object is docs/formats.md
section 1's, ready to paste into a round instance.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from synergy_opt.io import matrix_to_dict
from synergy_opt.profiling.memory_model import CacheModel
from synergy_opt.profiling.search import (
    DEFAULT_MAX_POINTS,
    DEFAULT_THRESHOLD,
    CpuProfile,
    ProfilingError,
    profile_cpu_axis,
)
from synergy_opt.types import ThroughputMatrix

#: The report's format tag.
PROFILE_FORMAT = "synergy-profile/1"
#: The paper's cost model: "1 minute per point".
DEFAULT_MINUTES_PER_POINT = 1.0


@dataclass(frozen=True, slots=True)
class MatrixError:
    """How a profiled matrix differs from the truth over a grid of (cores, memory) points."""

    points: int
    max_abs: float
    mean_abs: float
    over_estimates: int  # cells where the profile promises more than the truth delivers

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "points": self.points,
            "max_abs": round(self.max_abs, 12),
            "mean_abs": round(self.mean_abs, 12),
            "over_estimates": self.over_estimates,
        }


@dataclass(frozen=True, slots=True)
class ProfileReport:
    """Everything one profiling run produced."""

    source: Mapping[str, Any]
    cpu: CpuProfile
    mem_gb: tuple[float, ...]  # the requested memory axis (the full grid's columns)
    cache: CacheModel | None
    matrix: ThroughputMatrix
    minutes_per_point: float
    notes: tuple[str, ...] = ()
    error: MatrixError | None = None
    include_seconds: bool = False

    @property
    def points_measured(self) -> int:
        """Attempted CPU points (the memory axis costs no measurement)."""
        return self.cpu.points_measured

    @property
    def grid_points(self) -> int:
        """What measuring the full grid would take: every core count x every memory point."""
        return self.cpu.max_cpus * len(self.mem_gb)

    @property
    def profiling_minutes(self) -> float:
        """Cost at ``minutes_per_point``."""
        return self.points_measured * self.minutes_per_point

    @property
    def full_grid_minutes(self) -> float:
        """Cost of the full grid at the same rate."""
        return self.grid_points * self.minutes_per_point

    @property
    def reduction_factor(self) -> float:
        """Full-grid cost over profiling cost."""
        return self.grid_points / max(1, self.points_measured)


def build_matrix(
    cpu: CpuProfile, mem_gb: Sequence[float], cache: CacheModel | None
) -> ThroughputMatrix:
    """W(c, m) = cache-model cap of the filled CPU curve, over every core count and ``mem_gb``.

    Without a cache model nothing is known about less memory than was profiled, so the axis
    is only the full-memory column (the floor look-up then gives 0 below it: conservative).
    Rows equal to the row above are dropped: under the floor look-up they add nothing, so the
    matrix is the same function with fewer configurations for OPT to consider.  Leading
    all-zero rows (cores below the first successful point) are dropped for the same reason.
    """
    if not mem_gb:
        raise ProfilingError("mem_gb: the memory axis needs at least one point")
    axis = tuple(sorted(float(m) for m in mem_gb))
    if cache is not None:
        axis = cache.usable(axis)
        if not axis:
            raise ProfilingError(
                f"mem_gb: every memory point is below the job's footprint ({cache.min_mem_gb:g} GB)"
            )
    else:
        axis = axis[-1:]
    cpus: list[int] = []
    rows: list[tuple[float, ...]] = []
    for c in range(1, cpu.max_cpus + 1):
        w = cpu.at(c)
        row = tuple(cache.throughput(w, m) if cache is not None else w for m in axis)
        if rows and row == rows[-1]:
            continue
        if not rows and c < cpu.max_cpus and all(x == 0 for x in row):
            continue
        cpus.append(c)
        rows.append(row)
    return ThroughputMatrix(tuple(cpus), axis, tuple(rows))


def matrix_error(
    profiled: ThroughputMatrix,
    truth: Callable[[int, float], float],
    cpus: Sequence[int],
    mem_gb: Sequence[float],
) -> MatrixError:
    """Compare ``profiled`` (floor look-up) with ``truth`` at every (cpus x mem_gb) point."""
    diffs = [profiled.lookup(c, m) - truth(c, m) for c in cpus for m in mem_gb]
    if not diffs:
        return MatrixError(0, 0.0, 0.0, 0)
    return MatrixError(
        len(diffs),
        max(abs(d) for d in diffs),
        math.fsum(abs(d) for d in diffs) / len(diffs),
        sum(1 for d in diffs if d > 1e-9),
    )


def profile_job(
    measure: Callable[[int], float],
    *,
    max_cpus: int,
    mem_gb: Sequence[float],
    cache: CacheModel | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    fair_cpus: int | None = None,
    max_points: int = DEFAULT_MAX_POINTS,
    minutes_per_point: float = DEFAULT_MINUTES_PER_POINT,
    source: Mapping[str, Any] | None = None,
    truth: Callable[[int, float], float] | None = None,
    notes: Sequence[str] = (),
    include_seconds: bool = False,
) -> ProfileReport:
    """Profile the CPU axis with ``measure``, add the memory axis, and report.

    ``truth`` (a replayed profile's W) makes the report carry the matrix error over every
    core count 1..max_cpus and every point of ``mem_gb``.
    """
    if not (math.isfinite(minutes_per_point) and minutes_per_point > 0):
        raise ProfilingError(
            f"minutes_per_point: must be a positive number, got {minutes_per_point!r}"
        )
    cpu = profile_cpu_axis(
        measure, max_cpus, threshold=threshold, fair_cpus=fair_cpus, max_points=max_points
    )
    matrix = build_matrix(cpu, mem_gb, cache)
    err = None
    if truth is not None:
        err = matrix_error(matrix, truth, range(1, max_cpus + 1), sorted(mem_gb))
    failed = [m for m in cpu.measurements if not m.ok]
    all_notes = list(notes)
    if failed:
        all_notes.append(
            f"{len(failed)} of {cpu.points_measured} points failed and were left out: "
            + "; ".join(f"{m.cpus} cpus: {m.error}" for m in failed)
        )
    return ProfileReport(
        source=dict(source or {}),
        cpu=cpu,
        mem_gb=tuple(sorted(float(m) for m in mem_gb)),
        cache=cache,
        matrix=matrix,
        minutes_per_point=float(minutes_per_point),
        notes=tuple(all_notes),
        error=err,
        include_seconds=include_seconds,
    )


def _r(x: float) -> float:
    # 12 significant digits: stable bytes across platforms, far below any measurement noise.
    return float(f"{x:.12g}")


def report_to_dict(rep: ProfileReport) -> dict[str, Any]:
    """The ``synergy-profile/1`` JSON object (deterministic for a replayed profile)."""
    measurements = []
    for m in rep.cpu.measurements:
        d: dict[str, Any] = {"cpus": m.cpus, "status": "ok" if m.ok else "failed"}
        if m.throughput is not None:
            d["throughput"] = _r(m.throughput)
        if m.error is not None:
            d["error"] = m.error
        if rep.include_seconds:
            d["seconds"] = round(m.seconds, 3)
        measurements.append(d)
    out: dict[str, Any] = {
        "format": PROFILE_FORMAT,
        "source": dict(rep.source),
        "threshold": rep.cpu.threshold,
        "max_cpus": rep.cpu.max_cpus,
        "points_measured": rep.points_measured,
        "points_failed": rep.cpu.points_failed,
        "grid_points": rep.grid_points,
        "minutes_per_point": rep.minutes_per_point,
        "profiling_minutes": _r(rep.profiling_minutes),
        "full_grid_minutes": _r(rep.full_grid_minutes),
        "reduction_factor": _r(rep.reduction_factor),
        "saturation_cpus": rep.cpu.saturation_cpus,
        "measurements": measurements,
        "cpu_curve": {
            "cpus": list(range(1, rep.cpu.max_cpus + 1)),
            "throughput": [_r(w) for w in rep.cpu.curve],
        },
        "memory_model": None
        if rep.cache is None
        else {
            "kind": "minio-cache",
            "dataset_gb": _r(rep.cache.dataset_gb),
            "storage_mbps": _r(rep.cache.storage_mbps),
            "mb_per_sample": _r(rep.cache.mb_per_sample),
            "min_mem_gb": _r(rep.cache.min_mem_gb),
        },
        "notes": list(rep.notes),
    }
    if rep.include_seconds:
        out["measured_seconds"] = round(math.fsum(m.seconds for m in rep.cpu.measurements), 3)
    if rep.error is not None:
        out["error_vs_truth"] = rep.error.to_dict()
    w = rep.matrix
    out["sensitivity"] = matrix_to_dict(
        ThroughputMatrix(w.cpus, w.mem_gb, tuple(tuple(_r(x) for x in row) for row in w.throughput))
    )
    return out
