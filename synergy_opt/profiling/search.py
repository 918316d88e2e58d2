"""Optimistic profiling of the CPU axis: a budgeted binary search over core counts.

The paper (OSDI '22, Section 3) profiles only the CPU axis, at full memory, and picks the core
counts by binary search: "descend into the lower half when a profiled point yields less than
a fixed threshold (say 10%) throughput improvement, else profile more of the upper half",
reaching about 8 points instead of 24.  This module implements that search against an
abstract ``measure(cpus) -> throughput`` so that the same code drives a replayed profile, a
user's command, or a crafted curve in a test.

The search, in four steps:

1. **Anchors.**  Measure the full core count (the paper's starting point: full resources),
   one core (an insensitive job can give every other core away, so its one-core speed must
   be known) and, when given, the GPU-proportional share (its throughput is the job's
   fair-share floor, eq. (5), and must be measured, never interpolated).
2. **Knee search** (the paper's binary search).  ``target = best / (1 + threshold)``.  Take
   ``hi`` = the fewest measured cores reaching the target and ``lo`` = the most measured cores
   below ``hi`` that miss it; measure the middle.  If the middle reaches the target, the
   cores above it improve throughput by less than the threshold: descend into the lower half
   (``hi = mid``); otherwise profile the upper half (``lo = mid``).  Stop when ``hi - lo <= 1``:
   the saturation point (the cheapest core count within the threshold of the best speed,
   which is what TUNE asks for) is then measured exactly.
3. **Top.**  Then the fewest cores reaching the *best* measured throughput, by the same
   bisection: TUNE asks for the cheapest point reaching a job's best speed, so a last small
   gain (mobilenet: 1.49 at 5 cores, 1.55 from 6) still decides its demand.
4. **Refinement** with whatever budget remains: an interval between two measured points is
   *resolved* when it has no unmeasured core inside or when its throughput gain is below the
   threshold; otherwise it carries an error mass ``(W(b) - W(a)) * (b - a - 1)``, the most a
   step fill can under-estimate over its interior.  Bisect the heaviest interval first
   (ties: the higher one, the paper's "upper half first").

Unmeasured core counts are filled by a **step (floor) rule over the running maximum**: W(c)
is the best throughput measured at some c' <= c.  Why step and not linear: it is exactly the
floor look-up every mechanism applies to W (docs/formats.md section 1), and it is the only
interpolation that can never exceed a non-decreasing true curve -- linear interpolation
between 6 and 9 cores of ``res18`` (1.75 -> 2.4) would promise 1.97 at 7 cores, where the job
really runs at 1.75.  An over-estimate is what hurts a scheduler (it hands out cores that buy
nothing, and can push a job below its true fair share); an under-estimate only makes it
cautious.  (The shipped curves are concave where they are not measured, so there linear
happens not to over-estimate either; ``bench/bench_profiling.py`` compares both fills on the
same measurements.)  The running maximum encodes free disposal: a job given more cores can
always run on fewer, so a noisy dip is not reported as a slow-down.

A point whose measurement fails (:class:`MeasurementError`) is recorded with its reason and
never retried; intervals simply bisect around it (when the full count fails, the search
first bisects for the highest count that still runs), so a failing or hanging core count never
aborts the profile.  Only when no point at all succeeds is :class:`NoPointMeasured` raised.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

#: The paper's default: "less than a fixed threshold (say 10%) throughput improvement".
DEFAULT_THRESHOLD: float = 0.10
#: The paper's headline: "under 8 minutes with 8 CPU points instead of 24".
DEFAULT_MAX_POINTS: int = 8


class MeasurementError(RuntimeError):
    """One core count could not be measured (non-zero exit, timeout, no throughput line)."""


class ProfilingError(RuntimeError):
    """The profile cannot be built: bad parameters (or, as a subclass, no point measured)."""


class NoPointMeasured(ProfilingError):
    """Every attempted core count failed, so there is no curve to fill."""


@dataclass(frozen=True, slots=True)
class Measurement:
    """One attempted core count, in the order the search measured it."""

    cpus: int
    throughput: float | None  # None when the point failed
    seconds: float = 0.0
    error: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the point produced a throughput."""
        return self.throughput is not None


@dataclass(frozen=True, slots=True)
class CpuProfile:
    """The CPU axis at full memory: what was measured and the filled curve over 1..max_cpus."""

    max_cpus: int
    threshold: float
    measurements: tuple[Measurement, ...]
    curve: tuple[float, ...]  # curve[c - 1] = filled throughput at c cores
    saturation_cpus: int  # the fewest cores within the threshold of the best throughput

    @property
    def points_measured(self) -> int:
        """Attempted core counts (failed ones cost time too)."""
        return len(self.measurements)

    @property
    def points_failed(self) -> int:
        """Attempts that produced no throughput."""
        return sum(1 for m in self.measurements if not m.ok)

    def measured(self) -> dict[int, float]:
        """Successful measurements keyed by core count."""
        return {m.cpus: m.throughput for m in self.measurements if m.throughput is not None}

    def at(self, cpus: int) -> float:
        """Filled throughput at ``cpus`` cores (0 below one core, flat above ``max_cpus``)."""
        if cpus < 1:
            return 0.0
        return self.curve[min(cpus, self.max_cpus) - 1]


def step_fill(measured: dict[int, float], max_cpus: int) -> tuple[float, ...]:
    """Throughput at every core count 1..max_cpus: the running maximum of measured points.

    Core counts below the smallest measured point get 0, as the floor look-up would.
    """
    out: list[float] = []
    best = 0.0
    for c in range(1, max_cpus + 1):
        if c in measured:
            best = max(best, measured[c])
        out.append(best)
    return tuple(out)


def _gain(lo_w: float, hi_w: float) -> float:
    """Relative throughput improvement from ``lo_w`` to ``hi_w`` (inf from zero)."""
    if lo_w <= 0:
        return math.inf if hi_w > 0 else 0.0
    return hi_w / lo_w - 1.0


class _Search:
    """Mutable state of one search; :func:`profile_cpu_axis` is the public entry point."""

    def __init__(self, measure: Callable[[int], float], max_cpus: int, max_points: int) -> None:
        self.measure = measure
        self.max_cpus = max_cpus
        self.max_points = max_points
        self.tried: dict[int, Measurement] = {}
        self.order: list[Measurement] = []

    @property
    def budget_left(self) -> bool:
        return len(self.order) < self.max_points

    def ok_points(self) -> dict[int, float]:
        return {c: m.throughput for c, m in self.tried.items() if m.throughput is not None}

    def probe(self, cpus: int) -> None:
        """Measure ``cpus`` once; failures are recorded, never raised."""
        if cpus in self.tried or not self.budget_left:
            return
        t0 = time.perf_counter()
        try:
            w = float(self.measure(cpus))
            if not math.isfinite(w) or w < 0:
                raise MeasurementError(f"throughput must be a finite number >= 0, got {w!r}")
            m = Measurement(cpus, w, time.perf_counter() - t0)
            log.info("profile: %d cpus -> %.6g", cpus, w)
        except MeasurementError as e:
            m = Measurement(cpus, None, time.perf_counter() - t0, str(e))
            log.warning("profile: %d cpus failed: %s", cpus, e)
        self.tried[cpus] = m
        self.order.append(m)

    def midpoint(self, lo: int, hi: int) -> int | None:
        """The untried core count strictly inside (lo, hi) closest to its middle."""
        mid = (lo + hi) / 2
        inside = [c for c in range(lo + 1, hi) if c not in self.tried]
        if not inside:
            return None
        return min(inside, key=lambda c: (abs(c - mid), c))

    def knee(self, threshold: float) -> None:
        """Step 2: bisect towards the fewest cores within the threshold of the best speed."""
        while self.budget_left:
            pts = self.ok_points()
            if not pts:
                return
            # The full count failed: first find how high the job still runs (bisect between
            # the highest success and the lowest failure above it), else the knee search
            # would never look above the anchors; stop climbing once the highest success
            # gains less than the threshold over the point below it (a plateau).
            top_ok = max(pts)
            failed_above = [c for c, m in self.tried.items() if not m.ok and c > top_ok]
            prev = max((c for c in pts if c < top_ok), default=None)
            climbing = prev is None or _gain(pts[prev], pts[top_ok]) >= threshold
            if failed_above and climbing:
                c = self.midpoint(top_ok, min(failed_above))
                if c is not None:
                    self.probe(c)
                    continue
            target = max(pts.values()) / (1.0 + threshold)
            hi = min(c for c, w in pts.items() if w >= target)
            below = [c for c in pts if c < hi and pts[c] < target]
            lo = max(below) if below else 0
            c = self.midpoint(lo, hi)
            if c is None:
                return
            self.probe(c)

    def top(self) -> None:
        """Step 3: pin down the fewest cores reaching the best measured throughput.

        TUNE asks each job for the cheapest point of its matrix reaching its best speed, so
        a last gain below the threshold (mobilenet: 1.49 at 5 cores, 1.55 from 6) still
        decides how many cores the job will ask for.  At most log2 of the gap in points.
        """
        while self.budget_left:
            pts = self.ok_points()
            best = max(pts.values(), default=0.0)
            if best <= 0:
                return
            top = min(c for c, w in pts.items() if w >= best)
            lo = max((c for c in pts if c < top), default=0)
            c = self.midpoint(lo, top)
            if c is None:
                return
            self.probe(c)

    def refine(self, threshold: float) -> None:
        """Step 4: bisect the unresolved interval with the largest error mass."""
        while self.budget_left:
            pts = self.ok_points()
            cs = sorted(pts)
            best: tuple[float, int, int, int] | None = None
            for a, b in zip(cs, cs[1:], strict=False):
                if _gain(pts[a], pts[b]) < threshold:
                    continue
                c = self.midpoint(a, b)
                if c is None:
                    continue
                mass = (pts[b] - pts[a]) * sum(1 for x in range(a + 1, b) if x not in self.tried)
                key = (mass, b, a, c)
                if best is None or key > best:
                    best = key
            if best is None:
                return
            self.probe(best[3])


def profile_cpu_axis(
    measure: Callable[[int], float],
    max_cpus: int,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    fair_cpus: int | None = None,
    max_points: int = DEFAULT_MAX_POINTS,
) -> CpuProfile:
    """Profile ``measure`` over 1..``max_cpus`` cores with at most ``max_points`` measurements.

    Parameters
    ----------
    measure
        ``measure(cpus) -> throughput`` at full memory; raises :class:`MeasurementError` when
        that core count cannot be measured.
    max_cpus
        The largest core count (the full server for the paper: 24).
    threshold
        A relative throughput gain below this counts as "no improvement" (paper: 10%).
    fair_cpus
        The job's GPU-proportional cores, measured as an anchor (optional).
    max_points
        Measurement budget, anchors included.
    """
    if not isinstance(max_cpus, int) or max_cpus < 1:
        raise ProfilingError(f"max_cpus: must be an integer >= 1, got {max_cpus!r}")
    if not (isinstance(threshold, int | float) and math.isfinite(threshold) and threshold > 0):
        raise ProfilingError(f"threshold: must be a positive finite number, got {threshold!r}")
    if not isinstance(max_points, int) or max_points < 2:
        raise ProfilingError(f"max_points: must be an integer >= 2, got {max_points!r}")
    s = _Search(measure, max_cpus, max_points)
    # Step 1: anchors, most informative first so a tiny budget still sees the top and bottom.
    s.probe(max_cpus)
    s.probe(1)
    if fair_cpus is not None and 1 <= fair_cpus <= max_cpus:
        s.probe(fair_cpus)
    s.knee(threshold)
    s.top()
    s.refine(threshold)
    pts = s.ok_points()
    if not pts:
        reasons = "; ".join(f"{m.cpus} cpus: {m.error}" for m in s.order)
        raise NoPointMeasured(f"no core count could be measured ({reasons})")
    curve = step_fill(pts, max_cpus)
    target = max(pts.values()) / (1.0 + threshold)
    saturation = min(c for c, w in pts.items() if w >= target)
    return CpuProfile(max_cpus, float(threshold), tuple(s.order), curve, saturation)
