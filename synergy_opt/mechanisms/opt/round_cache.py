"""Rounds an ``opt`` instance remembers: an identical round (same cluster, fair-share rule
and multiset of job classes) replays its answer instead of being solved again, as a
simulation's consecutive rounds often are."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from synergy_opt.formulations.fast import class_key
from synergy_opt.types import Allocation, Job, PlacementPart, RoundInstance, build_allocation

#: Rounds remembered per ``opt`` instance (a simulation keeps one).
ROUND_CACHE_SIZE: int = 64

RoundKey = tuple[object, str, frozenset[tuple[tuple[object, ...], int]]]


def round_key(inst: RoundInstance, runnable: Sequence[Job]) -> RoundKey:
    """The cluster, the fair-share rule and the multiset of runnable job classes: rounds
    with equal keys have the same allocations up to renaming interchangeable jobs (their
    floors are equal too: fair shares depend only on the cluster and the rule)."""
    counts = Counter(class_key(j) for j in runnable)
    return (inst.cluster, inst.fair_share_mode, frozenset(counts.items()))


@dataclass(frozen=True, slots=True)
class CachedRound:
    """Per job class, the parts its members got (priority order), and the round's bound."""

    parts: dict[tuple[object, ...], tuple[tuple[PlacementPart, ...], ...]]
    upper_bound: float | None

    @classmethod
    def of(cls, inst: RoundInstance, runnable: Sequence[Job], alloc: Allocation) -> CachedRound:
        """Remember ``alloc`` by class (jobs of a class in priority order)."""
        got = {ja.id: ja.placement for ja in alloc.jobs}
        parts: dict[tuple[object, ...], list[tuple[PlacementPart, ...]]] = {}
        for job in runnable:
            parts.setdefault(class_key(job), []).append(got.get(job.id, ()))
        return cls({k: tuple(v) for k, v in parts.items()}, alloc.upper_bound)

    def replay(
        self, inst: RoundInstance, runnable: Sequence[Job], name: str, solver: str
    ) -> Allocation:
        """The remembered answer for this round's jobs, class member by class member."""
        seen: Counter[tuple[object, ...]] = Counter()
        placements: dict[str, list[PlacementPart]] = {}
        for job in runnable:
            k = class_key(job)
            parts = self.parts[k][seen[k]]
            seen[k] += 1
            if parts:
                placements[job.id] = list(parts)
        return build_allocation(inst, name, placements, solver=solver, upper_bound=self.upper_bound)
