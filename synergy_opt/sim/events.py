"""The event kernel and the typed records the simulator logs.

The kernel is SimPy's design cut to what a round-based scheduler needs: a heap of
``(time, priority, sequence, event)``.  Ties in time are broken by priority (completions
before arrivals before round starts, so a job finishing at a boundary frees its GPUs for the
round that starts there and a job arriving exactly at a boundary is in that round), then by
insertion order, so a run is reproducible bit for bit.

Metrics are computed afterwards from the log (:class:`JobRecord`, :class:`RoundRecord`),
never inside the loop.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from enum import IntEnum


class Priority(IntEnum):
    """Order of events that share a time stamp."""

    COMPLETION = 0
    ARRIVAL = 1
    ROUND = 2


@dataclass(frozen=True, slots=True)
class JobArrived:
    """Job ``index`` (arrival order) enters the queue."""

    index: int


@dataclass(frozen=True, slots=True)
class JobCompleted:
    """Job ``index`` ran out of work in the round that ends now."""

    index: int


@dataclass(frozen=True, slots=True)
class RoundStarted:
    """A scheduling round begins: leases are re-issued for ``round_s`` seconds."""


Event = JobArrived | JobCompleted | RoundStarted


class EventQueue:
    """A deterministic priority queue of timed events."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, Event]] = []
        self._seq = itertools.count()

    def push(self, time_s: float, priority: Priority, event: Event) -> None:
        """Schedule ``event`` at ``time_s``."""
        heapq.heappush(self._heap, (time_s, int(priority), next(self._seq), event))

    def pop(self) -> tuple[float, Event]:
        """Remove and return the earliest event."""
        t, _, _, ev = heapq.heappop(self._heap)
        return t, ev

    def peek_time(self) -> float:
        """Time of the earliest event (``inf`` when empty)."""
        return self._heap[0][0] if self._heap else float("inf")

    def __len__(self) -> int:
        return len(self._heap)


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One job's life: times in seconds, ``None`` where it never started or finished."""

    index: int
    id: str
    model: str
    gpus: int
    arrival_s: float
    duration_s: float
    start_s: float | None
    finish_s: float | None
    measured: bool
    rounds_run: int = 0

    @property
    def jct_s(self) -> float | None:
        """Job completion time: finish - arrival."""
        return None if self.finish_s is None else self.finish_s - self.arrival_s


@dataclass(frozen=True, slots=True)
class RoundRecord:
    """What one round did: queue sizes, resources in use, and what the mechanism cost."""

    start_s: float
    queued: int
    running: int
    gpus_used: int
    cpus_used: int
    mem_gb_used: float
    total_throughput: float
    mechanism_s: float
    reused: bool
