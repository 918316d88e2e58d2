"""One sweep cell = one simulation: canonical options -> the text of its result files.

:func:`simulate_cell` is a pure function of the cell (same options, same ``summary.json``
except its timing fields, same ``jobs.csv``) and touches no file: it returns the files'
text and the runner writes them.  That keeps it usable unchanged in this process, in a
process pool and on Dask workers that share no file system with the driver.

:func:`validate_cell` runs the same option checks without simulating, so a spec with a bad
value fails before any cell runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from synergy_opt.errors import InputError
from synergy_opt.io import dumps, load_cluster
from synergy_opt.mechanisms import (
    MechanismOptions,
    is_mechanism,
    make_mechanism,
    mechanism_names,
)
from synergy_opt.policies import policy_names
from synergy_opt.profiles import ProfileLibrary, load_profiles
from synergy_opt.sim.config import SimConfig, paper_cluster
from synergy_opt.sim.engine import SimulationError, simulate
from synergy_opt.sim.metrics import jobs_csv, summarize
from synergy_opt.sim.workload import (
    ASSIGNMENTS,
    DURATIONS,
    WORKLOADS,
    WorkloadSpec,
    generate_workload,
)
from synergy_opt.sweep.spec import Cell, SpecError
from synergy_opt.tracefile import TraceJob, read_trace
from synergy_opt.types import Cluster

SOLVERS: tuple[str, ...] = ("highs", "ortools")

#: The files a finished cell folder holds (besides ``cell.json``, written by the runner).
CELL_FILES: tuple[str, ...] = ("summary.json", "jobs.csv")


def _choice(cell: Cell, name: str, known: tuple[str, ...] | list[str]) -> str:
    v = cell.get(name)
    if v not in known:
        raise SpecError(f"{cell.key}: {name}: unknown value {v!r}; known: {', '.join(known)}")
    return str(v)


def _cluster(cell: Cell) -> Cluster:
    if cell.get("cluster") is not None:
        return load_cluster(cell.get("cluster"))
    gpus = cell.get("gpus_per_server")
    ratio = cell.get("cpus_per_gpu")
    cpus = cell.get("cpus_per_server") if ratio is None else round(ratio * gpus)
    if cpus < 1:
        raise SpecError(f"{cell.key}: cpus_per_gpu: gives {cpus} cores per server")
    return paper_cluster(cell.get("servers"), gpus, cpus, cell.get("mem_per_server_gb"))


def sim_config(cell: Cell) -> SimConfig:
    """The engine configuration of ``cell`` (SpecError on inconsistent options)."""
    try:
        return SimConfig(
            cluster=_cluster(cell),
            round_s=cell.get("round_seconds"),
            window=cell.get("window"),
            stop_after_window=not cell.get("run_to_completion"),
            preemption_cost_s=cell.get("preemption_cost_s"),
            check_rounds=cell.get("check_rounds"),
            max_jobs=cell.get("max_jobs"),
            time_scale=cell.get("time_scale"),
        )
    except ValueError as e:
        raise SpecError(f"{cell.key}: {e}") from None


def workload_spec(cell: Cell) -> WorkloadSpec:
    """The generated workload of ``cell`` (ignored when it replays a trace)."""
    _choice(cell, "workload", WORKLOADS)
    _choice(cell, "durations", DURATIONS)
    _choice(cell, "assignment", ASSIGNMENTS)
    try:
        return WorkloadSpec(
            kind=cell.get("workload"),
            jobs=cell.get("jobs"),
            arrival_rate_per_h=cell.get("arrival_rate"),
            split=cell.get("split"),
            durations=cell.get("durations"),
            assignment=cell.get("assignment"),
        )
    except ValueError as e:
        raise SpecError(f"{cell.key}: {e}") from None


def _trace(cell: Cell, profiles: ProfileLibrary) -> tuple[TraceJob, ...]:
    if cell.get("trace") is not None:
        return read_trace(cell.get("trace"), profiles)
    try:
        return generate_workload(
            workload_spec(cell), profiles, np.random.default_rng(cell.get("seed"))
        )
    except ValueError as e:
        raise SpecError(f"{cell.key}: split: {e}") from None


def validate_cell(cell: Cell) -> None:
    """Every check that needs no simulation (SpecError or InputError naming the option)."""
    _choice(cell, "policy", policy_names())
    if not is_mechanism(str(cell.get("mechanism"))):
        _choice(cell, "mechanism", mechanism_names())
    _choice(cell, "solver", SOLVERS)
    config = sim_config(cell)
    if cell.get("trace") is None:
        spec = workload_spec(cell)
        n = min(spec.jobs, config.max_jobs or spec.jobs)
        if config.window is not None and config.window[1] > n:
            raise SpecError(f"{cell.key}: window: ends at job {config.window[1]} but only {n} jobs")


def simulate_cell(cell: Cell) -> dict[str, str]:
    """Run ``cell``'s simulation; return ``{file name: text}`` for :data:`CELL_FILES`.

    Raises
    ------
    synergy_opt.io.InputError
        Bad options or input files, or a simulation that cannot finish.
    """
    validate_cell(cell)
    profiles = load_profiles(cell.get("profiles"))
    trace = _trace(cell, profiles)
    options = MechanismOptions(
        solver=cell.get("solver"), time_limit_s=cell.get("time_limit"), threads=cell.get("threads")
    )
    try:
        result = simulate(
            sim_config(cell),
            trace,
            make_mechanism(cell.get("mechanism"), options),
            cell.get("policy"),
            profiles=profiles,
        )
    except SimulationError as e:
        raise InputError(f"{cell.key}: {e}") from None
    seed = None if cell.get("trace") is not None else cell.get("seed")
    return {"summary.json": dumps(summarize(result, seed)), "jobs.csv": jobs_csv(result)}


def cell_record(cell: Cell) -> dict[str, Any]:
    """``cell.json``: the options that produced a folder (read back by the report)."""
    return {"format": "synergy-sweep-cell/1", "key": cell.key, "options": cell.to_json()}


def cell_from_record(record: Mapping[str, Any]) -> Cell:
    """Inverse of :func:`cell_record` (lists back to the options' types)."""
    from synergy_opt.sweep.spec import make_cell

    return make_cell(record["options"], where=str(record.get("key", "cell")))
