"""Synthetic job traces like the paper's (and its artifact's) simulated workloads.

- Arrivals: a Poisson process at ``arrival_rate_per_h`` jobs per hour (exponential gaps);
  rate 0 submits every job at time 0 (a static trace).
- Durations at GPU-proportional share, Gavel/Philly-like: 80% of jobs 60 x 10^U(1.5, 3) s
  (about 30 min to 17 h), 20% 60 x 10^U(3, 4) s (17 h to a week); or sampled from the
  Philly cluster's measured run times shipped with the package (``durations="philly"``).
- GPU demand: 1 for ``single-gpu``; 1/2/4/8 with probabilities 0.70/0.10/0.15/0.05 for
  ``multi-gpu``.
- Models: by the image/language/speech ``split`` (percentages).  ``balanced`` (the
  artifact's scheme) gives each new job to the category furthest below its target share of
  all jobs so far and cycles round-robin through that category's models; ``iid`` draws the
  category with the split as probabilities and the model uniformly.

Everything random comes from the ``numpy.random.Generator`` passed in, so a seed names a
trace.  Each random quantity (arrival gaps, duration class, duration value, GPU count,
category, model) draws from its own child stream of that generator, one value per job, so
a longer trace from the same seed extends a shorter one: ``--jobs 7000`` begins with the
``--jobs 6000`` trace.  The output is a tuple of
:class:`~synergy_opt.tracefile.TraceJob` (the same type ``--trace`` files become), so the
simulator has one input path.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import numpy as np

from synergy_opt.profiles import CATEGORIES, ProfileLibrary
from synergy_opt.tracefile import TraceJob

WORKLOADS: tuple[str, ...] = ("single-gpu", "multi-gpu")
DURATIONS: tuple[str, ...] = ("synthetic", "philly")
ASSIGNMENTS: tuple[str, ...] = ("balanced", "iid")

#: Multi-GPU demand mix of the paper's multi-GPU trace.
MULTI_GPU_SIZES: tuple[int, ...] = (1, 2, 4, 8)
MULTI_GPU_PROBS: tuple[float, ...] = (0.70, 0.10, 0.15, 0.05)

#: Synthetic durations: (probability, low exponent, high exponent) of 60 x 10^U(lo, hi) s.
DURATION_CLASSES: tuple[tuple[float, float, float], ...] = ((0.8, 1.5, 3.0), (0.2, 3.0, 4.0))


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """What to generate (everything but the random seed)."""

    kind: str = "single-gpu"
    jobs: int = 1000
    arrival_rate_per_h: float = 9.0
    split: tuple[float, float, float] = (20.0, 70.0, 10.0)
    durations: str = "synthetic"
    assignment: str = "balanced"

    def __post_init__(self) -> None:
        if self.kind not in WORKLOADS:
            raise ValueError(f"kind: expected one of {', '.join(WORKLOADS)}, got {self.kind!r}")
        if self.jobs < 1:
            raise ValueError(f"jobs: must be >= 1, got {self.jobs}")
        if not (np.isfinite(self.arrival_rate_per_h) and self.arrival_rate_per_h >= 0):
            raise ValueError(f"arrival_rate_per_h: must be >= 0, got {self.arrival_rate_per_h}")
        if len(self.split) != len(CATEGORIES) or any(
            not np.isfinite(s) or s < 0 for s in self.split
        ):
            raise ValueError(
                f"split: expected {len(CATEGORIES)} percentages >= 0, got {self.split}"
            )
        if sum(self.split) <= 0:
            raise ValueError("split: at least one category needs a positive share")
        if self.durations not in DURATIONS:
            raise ValueError(
                f"durations: expected one of {', '.join(DURATIONS)}, got {self.durations!r}"
            )
        if self.assignment not in ASSIGNMENTS:
            raise ValueError(
                f"assignment: expected one of {', '.join(ASSIGNMENTS)}, got {self.assignment!r}"
            )


@lru_cache(maxsize=1)
def philly_runtimes_s() -> np.ndarray:
    """Run times (s) of the Philly trace's jobs, shipped in ``data/philly_runtime_s.csv.gz``.

    The shipped copy already excludes the jobs that ran 0 s: they failed at start-up, have
    no work to schedule, and would otherwise enter the simulation as jobs that finish in
    the round they arrive (the paper's and Gavel's samplers skip them too).
    """
    raw = resources.files("synergy_opt").joinpath("data/philly_runtime_s.csv.gz").read_bytes()
    lines = gzip.decompress(raw).decode("ascii").split()
    values = np.array([float(x) for x in lines[1:]], dtype=float)
    values = values[values > 0]  # defensive: the file is pre-filtered
    values.setflags(write=False)
    return values


def _arrivals(spec: WorkloadSpec, rng: np.random.Generator) -> np.ndarray:
    if spec.arrival_rate_per_h == 0:
        return np.zeros(spec.jobs)
    gaps = rng.exponential(3600.0 / spec.arrival_rate_per_h, size=spec.jobs)
    return np.cumsum(gaps)


def _durations(
    spec: WorkloadSpec, rng_class: np.random.Generator, rng_value: np.random.Generator
) -> np.ndarray:
    if spec.durations == "philly":
        return rng_value.choice(philly_runtimes_s(), size=spec.jobs, replace=True)
    probs = np.array([c[0] for c in DURATION_CLASSES])
    cls = rng_class.choice(len(DURATION_CLASSES), size=spec.jobs, p=probs / probs.sum())
    u = rng_value.random(spec.jobs)
    lo = np.array([DURATION_CLASSES[c][1] for c in cls])
    hi = np.array([DURATION_CLASSES[c][2] for c in cls])
    return 60.0 * 10.0 ** (lo + u * (hi - lo))


def _gpus(spec: WorkloadSpec, rng: np.random.Generator) -> np.ndarray:
    if spec.kind == "single-gpu":
        return np.ones(spec.jobs, dtype=int)
    return rng.choice(np.array(MULTI_GPU_SIZES), size=spec.jobs, p=np.array(MULTI_GPU_PROBS))


def _models(
    spec: WorkloadSpec,
    profiles: ProfileLibrary,
    rng_category: np.random.Generator,
    rng_model: np.random.Generator,
) -> list[tuple[str, str]]:
    pools = {c: [p.name for p in profiles.by_category(c)] for c in CATEGORIES}
    share = np.array(spec.split, dtype=float) / sum(spec.split)
    for c, s in zip(CATEGORIES, share, strict=True):
        if s > 0 and not pools[c]:
            raise ValueError(f"split: category {c!r} has a positive share but no model profile")
    out: list[tuple[str, str]] = []
    if spec.assignment == "iid":
        cats = rng_category.choice(len(CATEGORIES), size=spec.jobs, p=share)
        picks = rng_model.random(spec.jobs)
        for c, u in zip(cats, picks, strict=True):
            pool = pools[CATEGORIES[c]]
            out.append((pool[min(int(u * len(pool)), len(pool) - 1)], CATEGORIES[c]))
        return out
    counts = np.zeros(len(CATEGORIES))
    cursor = [0] * len(CATEGORIES)
    for n in range(spec.jobs):
        # Deficit against the target share after this job; ties go to the earlier category.
        deficit = share * (n + 1) - counts
        deficit[share == 0] = -np.inf
        k = int(np.argmax(deficit))
        pool = pools[CATEGORIES[k]]
        out.append((pool[cursor[k] % len(pool)], CATEGORIES[k]))
        cursor[k] += 1
        counts[k] += 1
    return out


def generate_workload(
    spec: WorkloadSpec, profiles: ProfileLibrary, rng: np.random.Generator
) -> tuple[TraceJob, ...]:
    """A synthetic trace per ``spec``; ids are ``j0, j1, ...`` in arrival order."""
    s_arrival, s_class, s_value, s_gpus, s_category, s_model = rng.spawn(6)
    arrivals = _arrivals(spec, s_arrival)
    durations = _durations(spec, s_class, s_value)
    gpus = _gpus(spec, s_gpus)
    models = _models(spec, profiles, s_category, s_model)
    return tuple(
        TraceJob(
            id=f"j{k}",
            arrival_s=round(float(arrivals[k]), 3),
            gpus=int(gpus[k]),
            model=models[k][0],
            duration_s=round(float(durations[k]), 3),
            category=models[k][1],
        )
        for k in range(spec.jobs)
    )
