"""The analytic memory axis: a DNN-aware cache in front of bandwidth-limited storage.

Synergy profiles only the CPU axis and derives the memory axis from a model, which is valid
because a DNN-aware cache such as MinIO (Mohan et al., "Analyzing and mitigating data stalls
in DNN training", VLDB '21) keeps a *fixed* part of the dataset resident: with ``m`` GB of
cache for a ``D`` GB dataset, every epoch hits on ``h = min(1, m / D)`` of the samples and
fetches the rest from storage.  At ``B`` MB/s of storage bandwidth and ``s`` MB read per
unit of throughput (per sample when throughput is samples/s), storage can sustain at most

    R(m) = B / ((1 - h) * s)        (infinite once the whole dataset is cached)

and the job runs at ``W(c, m) = min(W_cpu(c), R(m))``: the CPU-bound speed measured at full
memory, capped by what storage can feed.  The model can only lower a measured value, so it
never invents a speed-up.

``min_mem_gb`` is our addition (not in the paper): the job's own footprint below which it
cannot train efficiently at all.  The shipped matrices report about a tenth of the fair-share
speed for every image and speech model at 20.83 GB per GPU, whatever the cores -- no cache
model explains that (an empty cache still leaves the job storage-bound at ``B / s``), so the
memory axis simply starts at the footprint and the floor look-up gives 0 below it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from synergy_opt.types import MEM_EPS_GB


@dataclass(frozen=True, slots=True)
class CacheModel:
    """MinIO-style cache over bandwidth-limited storage (units in the field names).

    Attributes
    ----------
    dataset_gb
        Size of the training set as read from storage.
    storage_mbps
        Storage bandwidth available to the job.
    mb_per_sample
        MB read from storage per unit of throughput when nothing is cached (per sample when
        throughput is samples/s; per unit of normalised throughput for the shipped models).
    min_mem_gb
        The job's footprint: memory points below it are left off the axis.
    """

    dataset_gb: float
    storage_mbps: float
    mb_per_sample: float
    min_mem_gb: float = 0.0

    def __post_init__(self) -> None:
        for name in ("dataset_gb", "storage_mbps", "mb_per_sample"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and math.isfinite(v) and v > 0):
                raise ValueError(f"{name}: must be a positive finite number, got {v!r}")
        if not (math.isfinite(self.min_mem_gb) and self.min_mem_gb >= 0):
            raise ValueError(f"min_mem_gb: must be a finite number >= 0, got {self.min_mem_gb!r}")

    def hit_fraction(self, mem_gb: float) -> float:
        """Share of each epoch served from the cache: min(1, m / D)."""
        return min(1.0, max(0.0, mem_gb) / self.dataset_gb)

    def storage_bound(self, mem_gb: float) -> float:
        """R(m), the throughput storage can sustain with ``mem_gb`` of cache (inf if all cached)."""
        miss = 1.0 - self.hit_fraction(mem_gb)
        if miss <= 0.0:
            return math.inf
        return self.storage_mbps / (miss * self.mb_per_sample)

    def throughput(self, cpu_throughput: float, mem_gb: float) -> float:
        """W(c, m) = min(W_cpu(c), R(m)); 0 below the footprint."""
        if mem_gb < self.min_mem_gb - MEM_EPS_GB:
            return 0.0
        return min(cpu_throughput, self.storage_bound(mem_gb))

    def usable(self, mem_points: Sequence[float]) -> tuple[float, ...]:
        """The memory points at or above the footprint (the axis of the profiled matrix)."""
        return tuple(float(m) for m in mem_points if m >= self.min_mem_gb - MEM_EPS_GB)

    def scaled(self, factor: float) -> CacheModel:
        """The model of a job ``factor`` times as large, in the shipped profiles' convention.

        The shipped profiles are per GPU and a g-GPU job uses them with both axes times g and
        throughput unchanged (normalised per job, :meth:`ModelProfile.matrix`).  Scaling the
        dataset, bandwidth, footprint *and* the MB per unit of (per-job) throughput by g keeps
        R(g * m) equal to the per-GPU R(m), so the scaled model matches that convention.
        """
        return CacheModel(
            self.dataset_gb * factor,
            self.storage_mbps * factor,
            self.mb_per_sample * factor,
            self.min_mem_gb * factor,
        )
