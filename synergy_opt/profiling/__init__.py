"""Optimistic profiling: a job's (CPU, memory) -> throughput matrix from a few measurements.

The CPU axis is measured at full memory by a budgeted binary search over core counts
(:mod:`.search`); the memory axis comes from an analytic cache model (:mod:`.memory_model`);
measurements come from a replayed profile or the user's own command (:mod:`.backends`); the
result is a docs/formats.md ``sensitivity`` object inside a report (:mod:`.report`).
:mod:`.workload` is a small, real CPU-bound data pipeline to profile.
"""

from __future__ import annotations

from collections.abc import Sequence

from synergy_opt.profiles import ModelProfile
from synergy_opt.profiling.backends import (
    CPUS_PLACEHOLDER,
    SHIPPED_CACHE_DEFAULTS,
    CommandBackend,
    ReplayBackend,
    available_cpus,
    parse_throughput,
    shipped_cache_model,
)
from synergy_opt.profiling.memory_model import CacheModel
from synergy_opt.profiling.report import (
    DEFAULT_MINUTES_PER_POINT,
    PROFILE_FORMAT,
    MatrixError,
    ProfileReport,
    build_matrix,
    matrix_error,
    profile_job,
    report_to_dict,
)
from synergy_opt.profiling.search import (
    DEFAULT_MAX_POINTS,
    DEFAULT_THRESHOLD,
    CpuProfile,
    Measurement,
    MeasurementError,
    NoPointMeasured,
    ProfilingError,
    profile_cpu_axis,
    step_fill,
)
from synergy_opt.types import ThroughputMatrix

#: The paper's server gives each GPU 24 / 8 = 3 cores: the GPU-proportional anchor.
PAPER_FAIR_CPUS_PER_GPU = 3

__all__ = [
    "CPUS_PLACEHOLDER",
    "DEFAULT_MAX_POINTS",
    "DEFAULT_MINUTES_PER_POINT",
    "DEFAULT_THRESHOLD",
    "PAPER_FAIR_CPUS_PER_GPU",
    "PROFILE_FORMAT",
    "SHIPPED_CACHE_DEFAULTS",
    "CacheModel",
    "CommandBackend",
    "CpuProfile",
    "MatrixError",
    "Measurement",
    "MeasurementError",
    "NoPointMeasured",
    "ProfileReport",
    "ProfilingError",
    "ReplayBackend",
    "available_cpus",
    "build_matrix",
    "matrix_error",
    "parse_throughput",
    "profile_cpu_axis",
    "profile_job",
    "profile_model",
    "report_to_dict",
    "scale_matrix",
    "shipped_cache_model",
    "step_fill",
]


def scale_matrix(w: ThroughputMatrix, gpus: int) -> ThroughputMatrix:
    """A per-GPU matrix for a ``gpus``-GPU job: both axes times ``gpus`` (shipped convention)."""
    return ThroughputMatrix(
        tuple(c * gpus for c in w.cpus), tuple(m * gpus for m in w.mem_gb), w.throughput
    )


def profile_model(
    profile: ModelProfile,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    max_points: int = DEFAULT_MAX_POINTS,
    max_cpus: int | None = None,
    fair_cpus: int | None = PAPER_FAIR_CPUS_PER_GPU,
    cache: CacheModel | None = None,
    mem_gb: Sequence[float] | None = None,
    minutes_per_point: float = DEFAULT_MINUTES_PER_POINT,
) -> ProfileReport:
    """Replay-profile one GPU's share of ``profile`` (the profiles are per GPU).

    ``max_cpus`` defaults to the profile's largest core count (24 for the shipped ones),
    ``mem_gb`` to its memory axis and ``cache`` to the calibrated :func:`shipped_cache_model`
    (``None`` when the model has no calibration: only the full-memory column is known).
    Scale the result to a g-GPU job with :func:`scale_matrix`.
    """
    truth = profile.matrix(1)
    replay = ReplayBackend(truth)
    if cache is None:
        cache = shipped_cache_model(profile)
    return profile_job(
        replay,
        max_cpus=max_cpus if max_cpus is not None else truth.cpus[-1],
        mem_gb=tuple(mem_gb) if mem_gb is not None else truth.mem_gb,
        cache=cache,
        threshold=threshold,
        fair_cpus=fair_cpus,
        max_points=max_points,
        minutes_per_point=minutes_per_point,
        source={"kind": "replay", "model": profile.name, "per_gpu": True},
        truth=replay.truth,
    )
