"""Scheduling policies: how the queue of arrived, unfinished jobs is ordered each round.

A policy is a *sort key* over a job's state (smaller key = more important), chosen by name
from a registry and composed with any mechanism: the policy decides who comes first, the
mechanism decides what everyone gets.  There are no ``<policy>_<mechanism>`` combinations.

Keys end with the job's arrival index so that ties are broken deterministically and
identically for every policy (earlier arrival first).

- ``fifo``: arrival order.
- ``srtf``: shortest remaining time at the job's GPU-proportional (fair-share) speed.
- ``las``: least attained service, counted in GPU-seconds as Tiresias does (a 4-GPU job
  that ran an hour has attained 4 GPU-hours), so big jobs yield to small ones over time.
- ``ftf``: finish-time fairness (Themis): rho = expected finish time in the shared cluster /
  finish time in isolation, served highest rho first.  The shared finish time is the time
  already spent since arrival plus the remaining time at fair-share speed; the isolated
  finish time is the job's duration at fair share.  A cluster-wide contention factor would
  scale every rho alike and cannot change the order, so it is left out.
- ``drf``: dominant-resource fairness over time: least attained *dominant share* first,
  where a round's dominant share is the largest of the GPU, CPU and memory fractions of the
  cluster that the job received, integrated over the seconds it ran.  DRF's progressive
  filling hands the next task to the user with the smallest dominant share; with leases
  ending every round, that becomes "least dominant-resource service so far goes first".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class JobView(Protocol):
    """What a policy may read about a queued job (the simulator's job state provides it)."""

    @property
    def index(self) -> int:
        """Arrival order, 0-based (deterministic tie-break)."""
        ...

    @property
    def arrival_s(self) -> float:
        """Arrival time in seconds."""
        ...

    @property
    def gpus(self) -> int:
        """GPUs the job holds while it runs."""
        ...

    @property
    def duration_s(self) -> float:
        """Run time at the GPU-proportional share, start to finish."""
        ...

    @property
    def remaining_fair_s(self) -> float:
        """Run time still needed at the GPU-proportional share."""
        ...

    @property
    def attained_gpu_s(self) -> float:
        """GPU-seconds of service received so far."""
        ...

    @property
    def attained_dominant_s(self) -> float:
        """Dominant-share-seconds of service received so far (see ``drf``)."""
        ...


PolicyKey = Callable[[JobView, float], tuple[float, ...]]
"""``key(job, now_s)``; smaller sorts first."""

_REGISTRY: dict[str, PolicyKey] = {}
#: Keys that read only facts fixed at arrival: the simulator keeps such a queue sorted
#: incrementally instead of re-sorting it every round.
_STATIC: set[PolicyKey] = set()


def register(name: str, *, static: bool = False) -> Callable[[PolicyKey], PolicyKey]:
    """Decorator adding a policy sort key under ``name``.

    ``static=True`` promises that the key depends only on facts fixed at arrival (not on
    progress or on ``now_s``).
    """

    def deco(key: PolicyKey) -> PolicyKey:
        if name in _REGISTRY:
            raise ValueError(f"policy {name!r} registered twice")
        _REGISTRY[name] = key
        if static:
            _STATIC.add(key)
        return key

    return deco


def is_static(key: PolicyKey) -> bool:
    """Whether ``key`` was registered as depending only on arrival-time facts."""
    return key in _STATIC


def policy_names() -> tuple[str, ...]:
    """Registered policy names, sorted."""
    return tuple(sorted(_REGISTRY))


def get_policy(name: str) -> PolicyKey:
    """The sort key called ``name``; ``KeyError`` names the known ones."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown policy {name!r}; known: {', '.join(policy_names())}") from None


def finish_time_fairness(job: JobView, now_s: float) -> float:
    """Themis's rho: (time since arrival + remaining fair-share time) / fair-share duration."""
    isolated = max(job.duration_s, 1e-9)
    return (now_s - job.arrival_s + job.remaining_fair_s) / isolated


@register("fifo", static=True)
def fifo(job: JobView, now_s: float) -> tuple[float, ...]:
    """First come, first served."""
    return (job.arrival_s, job.index)


@register("srtf")
def srtf(job: JobView, now_s: float) -> tuple[float, ...]:
    """Shortest remaining time (at fair-share speed) first."""
    return (job.remaining_fair_s, job.index)


@register("las")
def las(job: JobView, now_s: float) -> tuple[float, ...]:
    """Least attained GPU-service first (Tiresias)."""
    return (job.attained_gpu_s, job.index)


@register("ftf")
def ftf(job: JobView, now_s: float) -> tuple[float, ...]:
    """Highest finish-time fairness rho first (Themis)."""
    return (-finish_time_fairness(job, now_s), job.index)


@register("drf")
def drf(job: JobView, now_s: float) -> tuple[float, ...]:
    """Least attained dominant-resource service first."""
    return (job.attained_dominant_s, job.index)
