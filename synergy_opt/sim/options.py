"""Simulation options -> the engine's inputs: one builder for the command line and sweep cells.

``synergy-opt simulate``/``compare`` (argparse) and sweep cells (:mod:`synergy_opt.sweep.spec`)
name their options alike (``servers``, ``round_seconds``, ``window``, ...).  Each front end hands
an :data:`Option` getter, and this module turns the values into the cluster, the
:class:`~synergy_opt.sim.config.SimConfig`, the generated workload and the mechanism options,
so the two front ends cannot drift apart in how an option reaches the engine.

Checks whose message names an option the way its user wrote it (``--window`` on the command
line, ``spec.toml: axes.window[1]`` in a sweep) stay with each front end; the types built here
raise ``ValueError("field: problem")`` for the front end to re-address.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from synergy_opt.io import load_cluster
from synergy_opt.mechanisms import MechanismOptions
from synergy_opt.profiles import ProfileLibrary
from synergy_opt.sim.config import SimConfig, paper_cluster
from synergy_opt.sim.semantics import get_semantics
from synergy_opt.sim.workload import WorkloadSpec, generate_workload
from synergy_opt.tracefile import TraceJob
from synergy_opt.types import DEFAULT_FAIR_SHARE_RULE, Cluster

#: Option name -> its parsed value (``None`` for an option the front end does not have).
Option = Callable[[str], Any]


def cores_per_server(opt: Option) -> int:
    """``cpus_per_server``, or ``cpus_per_gpu x gpus_per_server`` when a ratio is given."""
    ratio = opt("cpus_per_gpu")
    return opt("cpus_per_server") if ratio is None else round(ratio * opt("gpus_per_server"))


def build_cluster(opt: Option, load: Callable[[str], Cluster] = load_cluster) -> Cluster:
    """The ``cluster`` file (read by ``load``) or the homogeneous cluster the options describe."""
    if opt("cluster") is not None:
        return load(opt("cluster"))
    return paper_cluster(
        opt("servers"), opt("gpus_per_server"), cores_per_server(opt), opt("mem_per_server_gb")
    )


def build_config(opt: Option, cluster: Cluster) -> SimConfig:
    """The frozen engine configuration on ``cluster`` (ValueError naming a SimConfig field)."""
    return SimConfig(
        cluster=cluster,
        round_s=opt("round_seconds"),
        window=opt("window"),
        stop_after_window=not opt("run_to_completion"),
        preemption_cost_s=opt("preemption_cost_s"),
        check_rounds=opt("check_rounds"),
        max_jobs=opt("max_jobs"),
        time_scale=opt("time_scale"),
        semantics=get_semantics(opt("semantics")),
        # Left out on the command line means the default rule, as a sweep cell spells it.
        fair_share_rule=opt("fair_share") or DEFAULT_FAIR_SHARE_RULE,
    )


def workload_spec(opt: Option) -> WorkloadSpec:
    """The generated workload the options describe (ValueError naming a WorkloadSpec field)."""
    return WorkloadSpec(
        kind=opt("workload"),
        jobs=opt("jobs"),
        arrival_rate_per_h=opt("arrival_rate"),
        split=opt("split"),
        durations=opt("durations"),
        assignment=opt("assignment"),
    )


def generate_trace(opt: Option, profiles: ProfileLibrary) -> tuple[TraceJob, ...]:
    """The workload of :func:`workload_spec`, drawn from the ``seed`` option."""
    return generate_workload(workload_spec(opt), profiles, np.random.default_rng(opt("seed")))


def mechanism_options(opt: Option) -> MechanismOptions:
    """Solver options for mechanisms that use one."""
    return MechanismOptions(
        solver=opt("solver"),
        time_limit_s=opt("time_limit"),
        threads=opt("threads"),
        max_fragmented=opt("max_fragmented"),
    )
