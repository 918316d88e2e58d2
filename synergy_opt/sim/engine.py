"""The round-based cluster simulator: replays a trace under a policy and a mechanism.

Semantics (the paper artifact's, unless a :class:`SimConfig` field says otherwise):

- Rounds start on multiples of ``round_s``.  At each round every lease ends; the policy
  orders the queue of arrived, unfinished jobs and the mechanism allocates all of them anew
  (no switching cost unless ``preemption_cost_s``).
- A job arriving mid-round waits for the next round; one arriving exactly at a boundary
  is in that round.
- A scheduled job progresses at its allocation's throughput for the round.  Its work is
  ``duration_s x fair-share throughput``, so at GPU-proportional share it runs for its
  duration, rounded up to whole rounds.  It completes at the end of the round in which its
  work runs out: JCT = that round's end - arrival.
- Idle stretches (nothing queued, next arrival later) are skipped: the next round is
  scheduled at the first boundary at or after the next arrival.

Jobs' throughput matrices and the mechanism a name means come from ``config.semantics``
(:mod:`synergy_opt.sim.semantics`): the throughput-matrix model by default, or the paper
simulator's multi-GPU rules (``artifact``).

The simulator has no real/simulated mode: it calls ``mechanism.allocate`` on a
:class:`~synergy_opt.types.RoundInstance` exactly as a deployment would.

Library API (used by the command line and by sweeps)::

    from synergy_opt.sim import SimConfig, paper_cluster, simulate, write_outputs
    result = simulate(SimConfig(paper_cluster(), window=(4000, 5000)), trace, "tune", "fifo",
                      profiles=shipped_profiles())
    write_outputs(result, "out/")          # summary.json + jobs.csv, atomically

``simulate`` is pure: same config, trace, mechanism and policy give the same result (only
the wall-clock timings differ).  Randomness lives in the workload generator
(:func:`synergy_opt.sim.workload.generate_workload` takes a ``numpy.random.Generator``);
every built-in mechanism and policy is deterministic, so the engine draws nothing.
"""

from __future__ import annotations

import bisect
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from synergy_opt.check import check_allocation
from synergy_opt.mechanisms import Mechanism
from synergy_opt.policies import PolicyKey, get_policy, is_static, policy_names
from synergy_opt.profiles import ProfileLibrary
from synergy_opt.sim.config import SimConfig
from synergy_opt.sim.events import (
    EventQueue,
    JobArrived,
    JobCompleted,
    JobRecord,
    Priority,
    RoundRecord,
    RoundStarted,
)
from synergy_opt.sim.state import JobState, prepare_jobs
from synergy_opt.tracefile import TraceJob
from synergy_opt.types import Allocation, PlacementPart, RoundInstance

log = logging.getLogger(__name__)

#: Work is done when what is left is below this fraction of the job's total work (float
#: sums of per-round progress must not leave a job one round longer than it needs).
WORK_REL_EPS: float = 1e-9


class SimulationError(RuntimeError):
    """The simulation cannot proceed (an invalid allocation, or no job can ever run)."""


@dataclass(frozen=True, slots=True)
class SimResult:
    """Everything a run produced: its inputs' names, the per-job and per-round logs."""

    config: SimConfig
    policy: str
    mechanism: str
    jobs: tuple[JobRecord, ...]
    rounds: tuple[RoundRecord, ...]
    end_s: float
    wall_seconds: float


@dataclass(frozen=True, slots=True)
class _RoundPlan:
    """An allocation plus the numbers the engine needs from it, kept for reuse."""

    alloc: Allocation
    #: (job, throughput, placement, dominant share) per scheduled job.
    entries: tuple[tuple[JobState, float, tuple[PlacementPart, ...], float], ...]
    gpus: int
    cpus: int
    mem_gb: float


def _gpu_prefix(order: Sequence[JobState], total_gpus: int) -> int:
    """Length of the shortest prefix whose in-order GPU selection fills ``total_gpus``."""
    free = total_gpus
    for k, js in enumerate(order):
        if js.gpus <= free:
            free -= js.gpus
            if free == 0:
                return k + 1
    return len(order)


class _Engine:
    """One run's mutable state; :func:`simulate` is its only user."""

    def __init__(
        self,
        config: SimConfig,
        jobs: list[JobState],
        mechanism: Mechanism,
        policy: PolicyKey,
        progress: Callable[[int, int], None] | None,
    ) -> None:
        self.cfg = config
        self.jobs = jobs
        self.mech = mechanism
        self.policy = policy
        self.progress = progress
        cl = config.cluster
        self.total_gpus = cl.total_gpus
        self.total_cpus = cl.total_cpus
        self.total_mem = cl.total_mem_gb
        first, last = config.window if config.window is not None else (0, len(jobs))
        self.measured = [first <= js.index < last for js in jobs]
        self.measured_left = last - first
        self.measured_total = last - first
        self.by_id = {js.job.id: js for js in jobs}
        self.active: dict[int, JobState] = {}
        self.queue = EventQueue()
        self.round_pending = False
        self.rounds: list[RoundRecord] = []
        self.last_key: tuple[int, ...] | None = None
        self.last_plan: _RoundPlan | None = None
        self.arrivals_left = len(jobs)
        self.now = 0.0
        # Static policies (FIFO): the queue is kept sorted as jobs come and go.
        self.static = is_static(policy)
        #: Work a round does (continuous, or whole iterations under the artifact's rules).
        self.advance = config.semantics.progress_rule()
        self.sorted_keys: list[tuple[tuple[float, ...], int]] = []
        # When the GPU-filling prefix left GPUs idle last round (a mechanism that skips
        # jobs, like GREEDY), go straight to the full queue until a round fills every GPU.
        self.prefix_failed = False

    # ------------------------------------------------------------------ loop

    def run(self) -> float:
        for js in self.jobs:
            self.queue.push(js.arrival_s, Priority.ARRIVAL, JobArrived(js.index))
        while len(self.queue):
            t, ev = self.queue.pop()
            self.now = t
            if isinstance(ev, JobCompleted):
                self._complete(t, ev.index)
                if self.cfg.stop_after_window and self.measured_left == 0:
                    break
            elif isinstance(ev, JobArrived):
                self._arrive(t, ev.index)
            else:
                self._round(t)
        return self.now

    def _arrive(self, t: float, index: int) -> None:
        js = self.jobs[index]
        self.active[index] = js
        if self.static:
            bisect.insort(self.sorted_keys, (self.policy(js, t), index))
        self.arrivals_left -= 1
        if not self.round_pending:
            r = self.cfg.round_s
            self._schedule_round(math.ceil(t / r) * r)

    def _complete(self, t: float, index: int) -> None:
        js = self.active.pop(index)
        js.finish_s = t
        if self.static:
            k = bisect.bisect_left(self.sorted_keys, (self.policy(js, t), index))
            del self.sorted_keys[k]
        if self.measured[index]:
            self.measured_left -= 1
            if self.progress is not None:
                self.progress(self.measured_total - self.measured_left, self.measured_total)

    def _schedule_round(self, t: float) -> None:
        self.round_pending = True
        self.queue.push(t, Priority.ROUND, RoundStarted())

    # ------------------------------------------------------------------ one round

    def _round(self, t: float) -> None:
        self.round_pending = False
        if not self.active:
            return  # everything finished; the next arrival schedules the next round
        plan = self._plan(t)
        alloc = plan.alloc
        r = self.cfg.round_s
        end = t + r
        cost = self.cfg.preemption_cost_s
        round_no = len(self.rounds)
        eps = 1.0 - WORK_REL_EPS
        advance = self.advance
        for js, throughput, placement, dominant in plan.entries:
            run_s = r
            if cost > 0:
                if not (js.last_round == round_no - 1 and js.last_placement == placement):
                    run_s = r - cost
                js.last_placement = placement
            js.last_round = round_no
            js.rounds_run += 1
            if js.start_s is None:
                js.start_s = t
            js.attained_gpu_s += js.gpus * r
            js.attained_dominant_s += r * dominant
            js.done += advance(throughput, js.fair_tp, run_s, js.iter_s, js.work - js.done)
            if js.done >= js.work * eps:
                js.done = js.work
                self.queue.push(end, Priority.COMPLETION, JobCompleted(js.index))
        queued = len(self.active) - len(plan.entries)
        self.rounds.append(
            RoundRecord(
                start_s=t,
                queued=queued,
                running=len(plan.entries),
                gpus_used=plan.gpus,
                cpus_used=plan.cpus,
                mem_gb_used=plan.mem_gb,
                total_throughput=alloc.total_throughput,
                mechanism_s=self._last_mech_s,
                reused=self._last_reused,
            )
        )
        if self.arrivals_left == 0 and not any(e[1] > 0 for e in plan.entries):
            # Nothing progresses and nothing will arrive: the next round is this one again.
            first = next(iter(self.active.values())).job.id
            raise SimulationError(
                f"round at {t:g} s: none of the {len(self.active)} queued jobs makes progress "
                f"({len(plan.entries)} scheduled; first queued: {first}) and no job is left to "
                f"arrive, so the simulation can never finish under {self.mech.name}"
            )
        self._schedule_round(end)

    def _ordered(self, t: float) -> list[JobState]:
        """Every queued job, most important first."""
        if self.static:
            jobs = self.jobs
            return [jobs[i] for _, i in self.sorted_keys]
        key = self.policy
        return sorted(self.active.values(), key=lambda js: key(js, t))

    def _static_prefix(self) -> list[JobState]:
        """The GPU-filling prefix of a statically ordered queue, without listing the rest."""
        out: list[JobState] = []
        free = self.total_gpus
        jobs = self.jobs
        for _, i in self.sorted_keys:
            js = jobs[i]
            out.append(js)
            if js.gpus <= free:
                free -= js.gpus
                if free == 0:
                    break
        return out

    def _plan(self, t: float) -> _RoundPlan:
        """The round's allocation: reused, from the GPU-filling prefix, or from everyone."""
        order: list[JobState] | None = None
        n_active = len(self.active)
        if self.cfg.truncate_queue and not self.prefix_failed:
            if self.static:
                prefix = self._static_prefix()
            else:
                order = self._ordered(t)
                prefix = order[: _gpu_prefix(order, self.total_gpus)]
            if len(prefix) < n_active:
                plan = self._allocate(prefix)
                if plan.gpus == self.total_gpus:
                    return plan
                # A mechanism that skips jobs (GREEDY) left GPUs idle: later jobs may use
                # them, so this round and the next ones see the whole queue.
                self.prefix_failed = True
        plan = self._allocate(order if order is not None else self._ordered(t))
        if plan.gpus == self.total_gpus:
            self.prefix_failed = False
        return plan

    def _allocate(self, jobs: list[JobState]) -> _RoundPlan:
        key = tuple([js.index for js in jobs])
        if self.cfg.reuse_allocations and key == self.last_key and self.last_plan is not None:
            self._last_mech_s = 0.0
            self._last_reused = True
            if self.cfg.check_rounds:
                self._check(jobs, self.last_plan.alloc)
            return self.last_plan
        inst = RoundInstance(
            "sim", self.cfg.cluster, tuple([js.job for js in jobs]), self.cfg.fair_share_rule
        )
        t0 = time.perf_counter()
        alloc = self.mech.allocate(inst)
        self._last_mech_s = time.perf_counter() - t0
        self._last_reused = False
        if self.cfg.check_rounds:
            self._check(jobs, alloc, inst)
        ig, ic, im = (
            1.0 / self.total_gpus,
            1.0 / max(self.total_cpus, 1),
            1.0 / max(self.total_mem, 1e-9),
        )
        by_id = self.by_id
        entries = []
        for ja in alloc.jobs:
            # Dominant share of the cluster this round (read by the DRF policy).
            dom = ja.gpus * ig
            x = ja.cpus * ic
            if x > dom:
                dom = x
            x = ja.mem_gb * im
            if x > dom:
                dom = x
            entries.append((by_id[ja.id], ja.throughput, ja.placement, dom))
        plan = _RoundPlan(
            alloc,
            tuple(entries),
            sum(ja.gpus for ja in alloc.jobs),
            sum(ja.cpus for ja in alloc.jobs),
            math.fsum(ja.mem_gb for ja in alloc.jobs),
        )
        self.last_key, self.last_plan = key, plan
        return plan

    _last_mech_s: float = 0.0
    _last_reused: bool = False

    def _check(
        self, jobs: list[JobState], alloc: Allocation, inst: RoundInstance | None = None
    ) -> None:
        if inst is None:
            inst = RoundInstance(
                "sim", self.cfg.cluster, tuple(js.job for js in jobs), self.cfg.fair_share_rule
            )
        bad = check_allocation(inst, alloc)
        if bad:
            raise SimulationError(
                f"round at {self.now:g} s: {self.mech.name} broke {len(bad)} rule(s); "
                f"first: {bad[0]}"
            )
        if sum(ja.gpus for ja in alloc.jobs) > self.total_gpus:
            raise SimulationError(f"round at {self.now:g} s: more GPUs allocated than exist")

    # ------------------------------------------------------------------ result

    def records(self) -> tuple[JobRecord, ...]:
        return tuple(
            JobRecord(
                index=js.index,
                id=js.job.id,
                model=js.trace.model,
                gpus=js.gpus,
                arrival_s=js.arrival_s,
                duration_s=js.duration_s,
                start_s=js.start_s,
                finish_s=js.finish_s,
                measured=self.measured[js.index],
                rounds_run=js.rounds_run,
            )
            for js in self.jobs
        )


def simulate(
    config: SimConfig,
    trace: Sequence[TraceJob],
    mechanism: Mechanism | str,
    policy: PolicyKey | str,
    *,
    profiles: ProfileLibrary,
    progress: Callable[[int, int], None] | None = None,
) -> SimResult:
    """Replay ``trace`` on ``config.cluster`` and return the job and round logs.

    Parameters
    ----------
    config
        Cluster, round length, measurement window and engine options.
    trace
        Jobs (any order; they are taken by arrival time, ties in the given order).
    mechanism
        A :class:`~synergy_opt.mechanisms.Mechanism` or a registered mechanism name.
    policy
        A sort key from :mod:`synergy_opt.policies` or a registered policy name.
    profiles
        Model profiles the trace's ``model`` names refer to.  Required: the engine loads no
        file itself; callers pass the library they read the trace with (the command line and
        sweep cells pass ``--profiles`` or :func:`~synergy_opt.profiles.shipped_profiles`).
    progress
        Called with (measured jobs finished, measured jobs) after each measured completion.

    Raises
    ------
    synergy_opt.io.InputError
        A job that can never run on this cluster, an unknown model, a window too large.
    SimulationError
        In ``check_rounds`` mode, any invalid allocation; or a queue that can never drain.
    """
    t0 = time.perf_counter()
    mech = config.semantics.make_mechanism(mechanism) if isinstance(mechanism, str) else mechanism
    if isinstance(policy, str):
        policy_name, key = policy, get_policy(policy)
    else:
        key = policy
        policy_name = next((n for n in policy_names() if get_policy(n) is policy), policy.__name__)
    jobs = prepare_jobs(config, trace, profiles)
    eng = _Engine(config, jobs, mech, key, progress)
    end = eng.run()
    log.info("%s/%s: %d rounds, end at %.1f h", policy_name, mech.name, len(eng.rounds), end / 3600)
    return SimResult(
        config=config,
        policy=policy_name,
        mechanism=mech.name,
        jobs=eng.records(),
        rounds=tuple(eng.rounds),
        end_s=end,
        wall_seconds=time.perf_counter() - t0,
    )
