"""``opt-exact``: the proven optimum of configuration choice and placement together.

It solves :mod:`~synergy_opt.formulations.joint` (Pyomo, either back-end) over TUNE's
runnable set; its ``upper_bound`` is the model's dual bound, so the true gap of TUNE and OPT
can be measured.  Never below TUNE, and never below ``opt`` when it cannot prove optimality.
"""

from __future__ import annotations

import dataclasses
import logging
import time

from synergy_opt.check import check_allocation
from synergy_opt.mechanisms.base import MechanismOptions, make_mechanism, register
from synergy_opt.mechanisms.opt import Opt, _better_of, _tune_fallback
from synergy_opt.mechanisms.packing import select_runnable
from synergy_opt.solve import TerminationStatus, solve_pyomo
from synergy_opt.types import (
    THROUGHPUT_EPS,
    Allocation,
    PlacementPart,
    RoundInstance,
    build_allocation,
)

log = logging.getLogger(__name__)

#: ``opt-exact`` without ``--time-limit`` stops after this many seconds (it is exponential).
EXACT_DEFAULT_TIME_LIMIT_S: float = 60.0
#: Above this many (job, server) pairs the joint model is not even built (its Pyomo build
#: alone would take minutes and gigabytes); ``opt-exact`` then returns ``opt``'s answer.
EXACT_MAX_PAIRS: int = 5000


@register("opt-exact", keeps_fair_share=True, exact=True, uses_solver=True, doc="proven optimum")
class OptExact:
    """The joint MIP (configuration + integral placement) for a few servers; never below TUNE."""

    name = "opt-exact"

    def __init__(self, options: MechanismOptions | None = None) -> None:
        self.options = options or MechanismOptions()

    def allocate(self, inst: RoundInstance) -> Allocation:
        """Solve the joint model over TUNE's runnable set."""
        from synergy_opt.formulations.joint import build_joint

        t0 = time.perf_counter()
        solver = self.options.solver
        limit = self.options.time_limit_s or EXACT_DEFAULT_TIME_LIMIT_S
        tune = make_mechanism("tune", self.options).allocate(inst)
        runnable = select_runnable(inst)
        if not runnable:
            return _tune_fallback(inst, tune, self.name, solver, 0.0, [], t0)
        pairs = sum(sum(1 for s in inst.cluster.servers if j.may_use(s)) for j in runnable)
        if pairs > EXACT_MAX_PAIRS:
            note = (
                f"round too large for the joint model ({pairs} job-server pairs > "
                f"{EXACT_MAX_PAIRS}); returned opt's allocation"
            )
            log.warning("opt-exact on %s: %s", inst.name, note)
            alloc = Opt(self.options).allocate(inst)
            return dataclasses.replace(
                alloc,
                mechanism=self.name,
                notes=(*alloc.notes, note),
                solve_seconds=time.perf_counter() - t0,
            )
        model = build_joint(inst, runnable)
        left = max(limit - (time.perf_counter() - t0), 1e-3)
        res = solve_pyomo(model, solver, time_limit=left, threads=self.options.threads)
        upper = res.dual_bound
        if not res.has_solution:
            # OPT is never below TUNE and its bound is valid here too; keep the tighter bound.
            alt = Opt(self.options).allocate(inst)
            bounds = [b for b in (upper, alt.upper_bound) if b is not None]
            note = (
                f"joint model ended {res.status} ({res.solver}) without a solution; "
                "returned opt's allocation"
            )
            log.warning("opt-exact on %s: %s", inst.name, note)
            mine = dataclasses.replace(
                alt,
                mechanism=self.name,
                upper_bound=min(bounds) if bounds else None,
                notes=(note, *alt.notes),
            )
            return _better_of(inst, mine, tune, self.name, t0)
        notes = []
        if res.status is not TerminationStatus.OPTIMAL:
            notes.append(f"joint model not proven optimal: {res.status}, gap {res.mip_gap}")
            log.warning("opt-exact on %s: %s", inst.name, notes[-1])
        names = [s.name for s in inst.cluster.servers]
        v = res.values
        placements: dict[str, list[PlacementPart]] = {}
        for j, job in enumerate(runnable):
            parts = []
            for s in range(len(names)):
                a = int(round(v.get(("a", (j, s)), 0.0)))
                if a >= 1:
                    c = int(round(v.get(("cp", (j, s)), 0.0)))
                    m = max(0.0, v.get(("mp", (j, s)), 0.0))
                    parts.append(PlacementPart(names[s], a, c, m))
            placements[job.id] = parts
        mine = build_allocation(
            inst, self.name, placements, solver=solver, upper_bound=upper, notes=notes
        )
        if res.status is not TerminationStatus.OPTIMAL:
            # An unproven incumbent may trail OPT's rounding: keep whichever is better, with
            # the joint model's dual bound (valid for both, same runnable set).
            alt = Opt(self.options).allocate(inst)
            if (
                alt.total_throughput > mine.total_throughput + THROUGHPUT_EPS
                and not check_allocation(inst, alt, fair_share=True)
            ):
                note = "returned opt's allocation: it beats the joint model's incumbent"
                log.warning("opt-exact on %s: %s", inst.name, note)
                mine = dataclasses.replace(
                    alt, mechanism=self.name, upper_bound=upper, notes=(*notes, note)
                )
        return _better_of(inst, mine, tune, self.name, t0)
