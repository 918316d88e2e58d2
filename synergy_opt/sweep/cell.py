"""One sweep cell = one simulation: canonical options -> the text of its result files.

:func:`simulate_cell` is a pure function of the cell (same options, same ``summary.json``
except its timing fields, same ``jobs.csv``) and touches no file: it returns the files'
text and the runner writes them.  That keeps it usable unchanged in this process, in a
process pool and on Dask workers that share no file system with the driver.

:func:`validate_cell` runs the same option checks without simulating, so a spec with a bad
value fails before any cell runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from synergy_opt.errors import InputError
from synergy_opt.io import dumps, load_cluster
from synergy_opt.profiles import CATEGORIES, ProfileLibrary, load_profiles
from synergy_opt.sim import options
from synergy_opt.sim.config import SimConfig
from synergy_opt.sim.engine import SimulationError, simulate
from synergy_opt.sim.metrics import jobs_csv, summarize
from synergy_opt.sim.workload import (
    DURATION_CLASSES,
    MULTI_GPU_SIZES,
    WorkloadSpec,
    philly_runtimes_s,
)
from synergy_opt.sweep.spec import OPTIONS, Cell, SpecError, SweepSpec
from synergy_opt.tracefile import TraceJob, check_trace, read_trace
from synergy_opt.types import Cluster

#: The files a finished cell folder holds (besides ``cell.json``, written by the runner).
CELL_FILES: tuple[str, ...] = ("summary.json", "jobs.csv")

#: Names where a problem with an option is reported: ``blame("window")`` gives
#: ``spec.toml: axes.window[1]`` up front, ``<cell key>: window`` inside a running cell.
Blame = Callable[[str], str]


def cell_blame(cell: Cell) -> Blame:
    """Blame options by the cell's folder name (a cell run on its own)."""
    return lambda name: f"{cell.key}: {name}"


def _blamed(blame: Blame, e: ValueError) -> SpecError:
    """A ``"name: problem"`` ValueError from a config type, re-addressed by ``blame``."""
    name, sep, problem = str(e).partition(": ")
    name = {"round_s": "round_seconds", "kind": "workload"}.get(name, name)
    name = "arrival_rate" if name == "arrival_rate_per_h" else name
    return SpecError(f"{blame(name)}: {problem}" if sep else f"{blame('options')}: {e}")


@dataclass
class _Inputs:
    """Files read while checking or running cells, each read once per process."""

    clusters: dict[str, Cluster] = field(default_factory=dict)
    profiles: dict[str | None, ProfileLibrary] = field(default_factory=dict)
    traces: dict[tuple[str, str | None], tuple[TraceJob, ...]] = field(default_factory=dict)

    def cluster(self, path: str, blame: Blame) -> Cluster:
        if path not in self.clusters:
            try:
                self.clusters[path] = load_cluster(path)
            except InputError as e:
                raise SpecError(f"{blame('cluster')}: {e}") from None
        return self.clusters[path]

    def library(self, path: str | None, blame: Blame) -> ProfileLibrary:
        if path not in self.profiles:
            try:
                self.profiles[path] = load_profiles(path)
            except InputError as e:
                raise SpecError(f"{blame('profiles')}: {e}") from None
        return self.profiles[path]

    def trace(self, path: str, profiles_path: str | None, blame: Blame) -> tuple[TraceJob, ...]:
        key = (path, profiles_path)
        if key not in self.traces:
            lib = self.library(profiles_path, blame)
            try:
                self.traces[key] = read_trace(path, lib)
            except InputError as e:
                raise SpecError(f"{blame('trace')}: {e}") from None
        return self.traces[key]


def cell_options(cell: Cell) -> options.Option:
    """The cell's options as :mod:`synergy_opt.sim.options` reads them (the command's names).

    An option cells do not have (``max_fragmented``) reads as ``None``, the command line's
    default.
    """
    return lambda name: cell.get(name) if name in OPTIONS else None


def _cluster(cell: Cell, blame: Blame, inputs: _Inputs) -> tuple[Cluster, str, str]:
    """The cell's cluster, the name to blame for its size and for its cores per GPU."""
    if cell.get("cluster") is not None:
        path = cell.get("cluster")
        where = f"{blame('cluster')}: {path}"
        return inputs.cluster(path, blame), where, where
    servers, gpus = cell.get("servers"), cell.get("gpus_per_server")
    opt = cell_options(cell)
    cpus = options.cores_per_server(opt)
    shape = blame("cpus_per_server" if cell.get("cpus_per_gpu") is None else "cpus_per_gpu")
    if cpus < 1:
        raise SpecError(f"{shape}: gives {cpus} cores per server")
    size = f"{blame('servers')}: {servers} servers x {gpus} GPUs"
    return options.build_cluster(opt), size, shape


def sim_config(cell: Cell, blame: Blame | None = None, inputs: _Inputs | None = None) -> SimConfig:
    """The engine configuration of ``cell`` (SpecError on inconsistent options)."""
    blame = blame or cell_blame(cell)
    cluster, _, _ = _cluster(cell, blame, inputs or _Inputs())
    try:
        return options.build_config(cell_options(cell), cluster)
    except ValueError as e:
        raise _blamed(blame, e) from None


def workload_spec(cell: Cell, blame: Blame | None = None) -> WorkloadSpec:
    """The generated workload of ``cell`` (ignored when it replays a trace)."""
    try:
        return options.workload_spec(cell_options(cell))
    except ValueError as e:
        raise _blamed(blame or cell_blame(cell), e) from None


def _longest_generated_s(spec: WorkloadSpec) -> float:
    """An upper bound on any generated job's duration (for the horizon check)."""
    if spec.durations == "philly":
        return float(philly_runtimes_s().max())
    return 60.0 * 10.0 ** max(hi for _, _, hi in DURATION_CLASSES)


def _representatives(
    spec: WorkloadSpec, profiles: ProfileLibrary, where: str
) -> tuple[TraceJob, ...]:
    """One job per (model, GPU count) the generator can draw, at its longest duration."""
    sizes = MULTI_GPU_SIZES if spec.kind == "multi-gpu" else (1,)
    longest = _longest_generated_s(spec)
    return tuple(
        TraceJob(
            f"{p.name}x{g}", 0.0, g, p.name, longest, source=f"{where}: a {g}-GPU {p.name} job"
        )
        for c, share in zip(CATEGORIES, spec.split, strict=True)
        if share > 0
        for p in profiles.by_category(c)
        for g in sizes
    )


def check_cell(cell: Cell, blame: Blame, inputs: _Inputs | None = None) -> None:
    """Every check that needs no simulation, each problem addressed by ``blame``.

    Option values and names were checked when the options were read; this checks what
    only a whole cell knows: the cluster file loads, the trace file exists and fits the
    cluster, the window fits the jobs, and the horizon is bounded (docs/limits.md).
    """
    inputs = inputs or _Inputs()
    config = sim_config(cell, blame, inputs)
    try:  # the artifact's rules exist for a few mechanisms only
        config.semantics.make_mechanism(cell.get("mechanism"))
    except KeyError as e:
        raise SpecError(f"{blame('semantics')}: {e.args[0]}") from None
    _, size, shape = _cluster(cell, blame, inputs)
    profiles = inputs.library(cell.get("profiles"), blame)
    if cell.get("trace") is None:
        spec = workload_spec(cell, blame)
        jobs = _representatives(spec, profiles, blame("workload"))
        n = min(spec.jobs, config.max_jobs or spec.jobs)
        short = f"{n} jobs"
    else:
        jobs = inputs.trace(cell.get("trace"), cell.get("profiles"), blame)
        n = min(len(jobs), config.max_jobs or len(jobs))
        short = f"{n} jobs in {cell.get('trace')}"
    if config.window is not None and config.window[1] > n:
        raise SpecError(f"{blame('window')}: ends at job {config.window[1]} but only {short}")
    try:
        check_trace(
            jobs,
            config.cluster,
            profiles,
            time_scale=config.time_scale,
            round_s=config.round_s,
            max_jobs=None if cell.get("trace") is None else config.max_jobs,
            cluster_source=size,
            share_source=shape,
            horizon_source=blame(
                "time_scale" if cell.get("time_scale") != 1.0 else "round_seconds"
            ),
        )
    except InputError as e:
        raise SpecError(str(e)) from None


def validate_cell(cell: Cell) -> None:
    """:func:`check_cell` with problems named under the cell's folder name."""
    check_cell(cell, cell_blame(cell))


def validate_spec(spec: SweepSpec) -> None:
    """Check every cell of ``spec`` before any runs, blaming the spec file and field.

    A problem is reported once, as the user wrote it (``spec.toml: axes.window[1]: ...``),
    not under a cell's folder name; each input file is read once.
    """
    inputs = _Inputs()
    seen: set[Cell] = set()
    for cell, origin in spec.cells_with_origins():
        if cell in seen:
            continue
        seen.add(cell)

        def blame(name: str, o: Callable[[str], str] = origin) -> str:
            return f"{spec.source}: {o(name)}"

        check_cell(cell, blame, inputs)


def simulate_cell(cell: Cell) -> dict[str, str]:
    """Run ``cell``'s simulation; return ``{file name: text}`` for :data:`CELL_FILES`.

    Raises
    ------
    synergy_opt.io.InputError
        Bad options or input files, or a simulation that cannot finish.
    """
    validate_cell(cell)
    profiles = load_profiles(cell.get("profiles"))
    if cell.get("trace") is not None:
        trace = read_trace(cell.get("trace"), profiles)
    else:
        try:
            workload_spec(cell)  # a bad workload option is blamed on the cell's field
            trace = options.generate_trace(cell_options(cell), profiles)
        except ValueError as e:  # the split names a category without a model profile
            raise SpecError(f"{cell.key}: {e}") from None
    config = sim_config(cell)
    try:
        result = simulate(
            config,
            trace,
            config.semantics.make_mechanism(
                cell.get("mechanism"), options.mechanism_options(cell_options(cell))
            ),
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
