"""The simulator's options as one frozen value (what the command line parses into).

A simulation is a pure function of (config, trace, policy, mechanism): everything that can
change its outcome is a field here, and nothing else (no module state, no clock, no RNG).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from synergy_opt.sim.semantics import DEFAULT, Semantics
from synergy_opt.types import FAIR_SHARE_RULES, Cluster, Server


def paper_cluster(
    servers: int = 16, gpus: int = 8, cpus: int = 24, mem_gb: float = 500.0
) -> Cluster:
    """The paper's homogeneous cluster (defaults: 16 x (8 GPUs, 24 cores, 500 GB) = 128 GPUs)."""
    return Cluster(tuple(Server(f"s{i}", gpus, cpus, float(mem_gb)) for i in range(servers)))


@dataclass(frozen=True, slots=True)
class SimConfig:
    """How to run a trace.

    Attributes
    ----------
    cluster
        The machines.
    round_s
        Round (lease) length; every lease ends at each round boundary.
    window
        ``(first, last)`` arrival indices of the measured jobs, ``last`` excluded (a Python
        slice); ``None`` measures every job.
    stop_after_window
        Stop as soon as every measured job has finished, as the paper's artifact does (jobs
        arriving later only keep the cluster loaded).  Turn off to run every job to the end.
    preemption_cost_s
        Seconds of a round lost by a job that starts, restarts or moves to a different
        placement in that round (0 = the artifact's free switching).
    reuse_allocations
        A mechanism is a deterministic function of its round instance (``opt`` also of the
        rounds before, through its warm start, which on a repeated round keeps that round's
        own plan), so a round whose ordered job list equals the previous round's gets the
        previous allocation back without calling the mechanism.
    truncate_queue
        Hand the mechanism only the shortest prefix of the ordered queue whose GPU demands
        fill the cluster; if its allocation leaves any GPU idle, the round is re-run on the
        full queue.  Exact for every mechanism that, like the paper's, never passes over a
        job it could run in favour of a lower-priority one once every GPU is taken.
    check_rounds
        Run the independent allocation checker on every round and fail on any violation
        (debug mode; slower).
    max_jobs
        Keep only the first ``max_jobs`` arrivals of the trace.
    time_scale
        Multiply every arrival time and duration by this factor before simulating (replay a
        long real trace faster, or stretch it; the load shape is unchanged).
    semantics
        How jobs' speed-ups and placement are modelled: the throughput-matrix model
        (``default``) or the paper simulator's rules (``artifact``); see
        :mod:`synergy_opt.sim.semantics`.
    fair_share_rule
        The rounds' GPU-proportional share (docs/formats.md section 1): ``"server"``, each
        server's own g*C_s/G_s, or ``"cluster"``, the cluster-wide g*C/G; ``None`` is the
        default rule (``"server"``).  A job's work is measured at the cluster-wide share under
        either rule (:mod:`synergy_opt.sim.state`), so the two rules run the same workload.
    """

    cluster: Cluster
    round_s: float = 300.0
    window: tuple[int, int] | None = None
    stop_after_window: bool = True
    preemption_cost_s: float = 0.0
    reuse_allocations: bool = True
    truncate_queue: bool = True
    check_rounds: bool = False
    max_jobs: int | None = None
    time_scale: float = 1.0
    semantics: Semantics = DEFAULT
    fair_share_rule: str | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.round_s) and self.round_s > 0):
            raise ValueError(f"round_s: must be a positive finite number, got {self.round_s!r}")
        if not (math.isfinite(self.preemption_cost_s) and 0 <= self.preemption_cost_s):
            raise ValueError(
                f"preemption_cost_s: must be a finite number >= 0, got {self.preemption_cost_s!r}"
            )
        if self.preemption_cost_s >= self.round_s:
            raise ValueError("preemption_cost_s: must be shorter than a round")
        if self.window is not None:
            first, last = self.window
            if first < 0 or last <= first:
                raise ValueError(f"window: expected 0 <= FIRST < LAST, got {first}:{last}")
        if self.fair_share_rule is not None and self.fair_share_rule not in FAIR_SHARE_RULES:
            raise ValueError(
                f"fair_share_rule: expected one of {', '.join(FAIR_SHARE_RULES)}, "
                f"got {self.fair_share_rule!r}"
            )
        if self.max_jobs is not None and self.max_jobs < 1:
            raise ValueError(f"max_jobs: must be >= 1, got {self.max_jobs!r}")
        if not (math.isfinite(self.time_scale) and self.time_scale > 0):
            raise ValueError(
                f"time_scale: must be a positive finite number, got {self.time_scale!r}"
            )
