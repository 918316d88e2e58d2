"""Options shared by ``synergy-opt simulate`` and ``synergy-opt compare``.

The argparse side of a simulation: the cluster/workload/engine option groups, the checks that
name an option as the user typed it (``--window``, ``--split``), the progress bar and the result
table.  Turning parsed values into the engine's inputs is :mod:`synergy_opt.sim.options`, the
builder sweep cells use too; both commands sit on this module, neither on the other.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

from synergy_opt.commands.common import (
    UsageError,
    nonneg_float,
    nonneg_int,
    positive_float,
    positive_int,
)
from synergy_opt.errors import InputError
from synergy_opt.io import load_cluster
from synergy_opt.mechanisms import (
    MechanismOptions,
    is_mechanism,
    mechanism_names,
)
from synergy_opt.policies import policy_names
from synergy_opt.profiles import ProfileLibrary
from synergy_opt.profiles import parse_split as split_percentages
from synergy_opt.sim import options
from synergy_opt.sim.config import SimConfig
from synergy_opt.sim.engine import SimResult, simulate
from synergy_opt.sim.semantics import semantics_names
from synergy_opt.sim.workload import ASSIGNMENTS, DURATIONS, WORKLOADS
from synergy_opt.solve import BACKENDS
from synergy_opt.tracefile import TraceJob, check_trace, read_trace
from synergy_opt.types import DEFAULT_FAIR_SHARE_RULE, FAIR_SHARE_RULES, Cluster

log = logging.getLogger(__name__)


def add_common_options(p: argparse.ArgumentParser) -> None:
    """Cluster, workload and engine options shared by ``simulate`` and ``compare``."""
    c = p.add_argument_group("cluster (default: the paper's 16 x 8-GPU servers)")
    c.add_argument("--servers", type=positive_int, default=16, help="identical servers (16)")
    c.add_argument("--gpus-per-server", type=positive_int, default=8, help="GPUs per server (8)")
    c.add_argument(
        "--cpus-per-server", type=nonneg_int, default=24, help="CPU cores per server (24)"
    )
    c.add_argument(
        "--mem-per-server-gb", type=nonneg_float, default=500.0, help="memory per server (500)"
    )
    c.add_argument(
        "--cluster",
        metavar="CLUSTER.json",
        default=None,
        help="a cluster object (docs/formats.md section 1) instead of the four options above",
    )
    w = p.add_argument_group("workload")
    w.add_argument(
        "--trace",
        metavar="TRACE.csv",
        default=None,
        help="replay this trace (docs/formats.md section 5)",
    )
    w.add_argument(
        "--workload",
        choices=WORKLOADS,
        default="single-gpu",
        help="the paper's job mix: single-gpu (all 1 GPU) or multi-gpu "
        "(1/2/4/8 GPUs, 70/10/15/5%%)",
    )
    w.add_argument("--jobs", type=positive_int, default=1000, help="jobs to generate")
    w.add_argument(
        "--arrival-rate",
        type=nonneg_float,
        default=9.0,
        metavar="JOBS_PER_HOUR",
        help="Poisson arrival rate; 0 submits every job at time 0",
    )
    w.add_argument(
        "--split",
        default="20,70,10",
        metavar="IMAGE,LANGUAGE,SPEECH",
        help="percentages of jobs per task category",
    )
    w.add_argument(
        "--durations",
        choices=DURATIONS,
        default="synthetic",
        help="synthetic (Gavel/Philly-like) or sampled from the Philly run times",
    )
    w.add_argument(
        "--assignment",
        choices=ASSIGNMENTS,
        default="balanced",
        help="model assignment: balanced per split (the artifact's) or i.i.d.",
    )
    w.add_argument(
        "--profiles",
        metavar="PROFILES.json",
        default=None,
        help="model profiles (default: the shipped ones)",
    )
    w.add_argument("--max-jobs", type=positive_int, default=None, help="keep the first N arrivals")
    w.add_argument(
        "--time-scale",
        type=positive_float,
        default=1.0,
        help="multiply arrival times and durations by this factor",
    )
    w.add_argument("--seed", type=nonneg_int, default=0, help="seed of the generated workload")
    e = p.add_argument_group("engine")
    e.add_argument(
        "--window",
        default=None,
        metavar="FIRST:LAST",
        help="measure jobs FIRST..LAST-1 by arrival index (default: all)",
    )
    e.add_argument(
        "--round-seconds",
        type=positive_float,
        default=300.0,
        help="round length: every lease ends and is re-decided this often (300)",
    )
    e.add_argument(
        "--preemption-cost-s",
        type=nonneg_float,
        default=0.0,
        help="seconds a job loses when it starts, restarts or moves",
    )
    e.add_argument(
        "--run-to-completion",
        action="store_true",
        help="run every job to the end instead of stopping once the window is done",
    )
    e.add_argument(
        "--check-rounds",
        action="store_true",
        help="debug: check every round's allocation independently",
    )
    e.add_argument(
        "--semantics",
        choices=semantics_names(),
        default="default",
        help="default: the throughput-matrix model; artifact: the paper simulator's "
        "multi-GPU rules (GPU-id-order placement, capped TUNE demands; "
        "docs/artifact-semantics.md)",
    )
    e.add_argument(
        "--fair-share",
        choices=FAIR_SHARE_RULES,
        default=None,
        help="the GPU-proportional share rounds keep and jobs' work is measured in: "
        f"server (each server's own cores and memory per GPU) or cluster (cluster-wide); "
        f"default {DEFAULT_FAIR_SHARE_RULE} (docs/formats.md section 1)",
    )
    e.add_argument("--solver", choices=BACKENDS, default="highs", help="LP/MIP back-end (opt)")
    e.add_argument(
        "--time-limit",
        type=positive_float,
        default=None,
        metavar="SECONDS",
        help="per-round solver time limit (opt)",
    )
    e.add_argument("--threads", type=positive_int, default=None, help="solver threads (opt)")
    e.add_argument(
        "--max-fragmented",
        type=nonneg_int,
        default=None,
        metavar="K",
        help="opt: spread at most K jobs over several servers per round (default and "
        "ceiling: 3 per server); fewer spread jobs can cost throughput",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar and no table")


def parse_split(text: str) -> tuple[float, float, float]:
    """``IMAGE,LANGUAGE,SPEECH`` percentages -> a 3-tuple (UsageError naming ``--split``)."""
    try:
        return split_percentages(text)
    except ValueError as e:
        raise UsageError(f"--split: {e}") from None


def parse_window(text: str | None) -> tuple[int, int] | None:
    """``FIRST:LAST`` (LAST excluded) -> a pair, or ``None``."""
    if text is None:
        return None
    try:
        a, b = text.split(":")
        first, last = int(a), int(b)
    except ValueError:
        raise UsageError(f"--window: expected FIRST:LAST integers, got {text!r}") from None
    if first < 0 or last <= first:
        raise UsageError(f"--window: expected 0 <= FIRST < LAST, got {text!r}")
    return first, last


def option_getter(args: argparse.Namespace) -> options.Option:
    """Parsed options as :mod:`synergy_opt.sim.options` reads them (the sweep cells' names).

    ``--window`` and ``--split`` arrive as text and are parsed here (UsageError naming the
    option); an option these commands do not have (``cpus_per_gpu``) reads as ``None``.
    """
    parsers: dict[str, Callable[[Any], Any]] = {"window": parse_window, "split": parse_split}

    def get(name: str) -> Any:
        value = getattr(args, name, None)
        return parsers[name](value) if name in parsers else value

    return get


def build_cluster(args: argparse.Namespace) -> Cluster:
    """``--cluster`` file or the four homogeneous-cluster options."""
    if args.cluster is None and (args.cpus_per_server == 0 or args.mem_per_server_gb == 0):
        raise UsageError("--cpus-per-server/--mem-per-server-gb: a server needs cores and memory")
    return options.build_cluster(option_getter(args), load_cluster)


def build_config(args: argparse.Namespace) -> SimConfig:
    """The frozen engine configuration from parsed options."""
    parse_window(args.window)  # a bad --window is reported before the other options
    if args.preemption_cost_s >= args.round_seconds:
        raise UsageError("--preemption-cost-s: must be shorter than --round-seconds")
    return options.build_config(option_getter(args), build_cluster(args))


def check_semantics(config: SimConfig, names: Sequence[str], option: str) -> None:
    """UsageError unless every mechanism in ``names`` exists under ``config.semantics``."""
    for name in names:
        try:
            config.semantics.make_mechanism(name)
        except KeyError as e:
            raise UsageError(f"{option}/--semantics {config.semantics.name}: {e.args[0]}") from None


def build_trace(
    args: argparse.Namespace, profiles: ProfileLibrary, config: SimConfig | None = None
) -> tuple[TraceJob, ...]:
    """The ``--trace`` file, or a workload generated from ``--seed``.

    With ``config``, the trace is also checked against the cluster and the horizon before
    any simulation (:func:`~synergy_opt.tracefile.check_trace`), each problem blamed on
    the trace line or the option that causes it.
    """
    if args.trace is not None:
        trace = read_trace(args.trace, profiles)
    else:
        parse_split(args.split)  # UsageError naming --split, before the workload's own checks
        try:
            trace = options.generate_trace(option_getter(args), profiles)
        except ValueError as e:  # "field: problem" from the workload; name the option
            field, _, problem = str(e).partition(": ")
            option = _WORKLOAD_OPTIONS.get(field, field.replace("_", "-"))
            raise UsageError(f"--{option}: {problem}") from None
    if config is not None:
        generated = f"the workload generated with --seed {args.seed}"
        shape = "--cpus-per-server/--mem-per-server-gb"
        try:
            check_trace(
                trace,
                config.cluster,
                profiles,
                time_scale=config.time_scale,
                round_s=config.round_s,
                max_jobs=config.max_jobs,
                cluster_source=args.cluster or "--servers/--gpus-per-server",
                share_source=args.cluster or shape,
                horizon_source="--time-scale" if args.time_scale != 1.0 else "--round-seconds",
                jobs_source=generated,
            )
        except InputError as e:
            raise UsageError(str(e)) from None
        n = min(len(trace), config.max_jobs or len(trace))
        if config.window is not None and config.window[1] > n:
            raise UsageError(
                f"--window: ends at job {config.window[1]}, but the run has only {n} jobs"
            )
    return trace


#: WorkloadSpec's field names -> the options that set them.
_WORKLOAD_OPTIONS: dict[str, str] = {"kind": "workload", "arrival_rate_per_h": "arrival-rate"}


def input_files(args: argparse.Namespace) -> list[tuple[str, str | None]]:
    """The files a simulation reads, by option (for :func:`~synergy_opt.outputs.preflight`)."""
    return [("--trace", args.trace), ("--cluster", args.cluster), ("--profiles", args.profiles)]


def check_mechanism(name: str, option: str = "--mechanism") -> None:
    """UsageError unless ``name`` is a registered mechanism."""
    if not is_mechanism(name):
        raise UsageError(
            f"{option}: unknown mechanism {name!r}; known: {', '.join(mechanism_names())}"
        )


def check_policy(name: str, option: str = "--policy") -> None:
    """UsageError unless ``name`` is a registered policy."""
    if name not in policy_names():
        raise UsageError(f"{option}: unknown policy {name!r}; known: {', '.join(policy_names())}")


def mechanism_options(args: argparse.Namespace) -> MechanismOptions:
    """Solver options for mechanisms that use one."""
    return options.mechanism_options(option_getter(args))


class ProgressBar:
    """A one-line progress bar on standard error (only on a terminal)."""

    def __init__(self, label: str, enabled: bool) -> None:
        self.label = label
        self.enabled = enabled and sys.stderr.isatty()
        self._shown = -1

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or total <= 0:
            return
        pct = int(100 * done / total)
        if pct == self._shown:
            return
        self._shown = pct
        bar = "#" * (pct // 4)
        sys.stderr.write(f"\r{self.label} [{bar:<25}] {done}/{total} measured jobs done")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def run_one(
    config: SimConfig,
    trace: Sequence[TraceJob],
    mechanism: str,
    policy: str,
    args: argparse.Namespace,
    profiles: ProfileLibrary,
) -> SimResult:
    """Simulate one (policy, mechanism) pair.

    Raises :class:`SimulationError` when the run can never finish (a mechanism that never
    runs some job): not bad input, so the commands report it and exit 1.
    """
    progress: Callable[[int, int], None] = ProgressBar(f"{policy}/{mechanism}", not args.quiet)
    return simulate(
        config,
        trace,
        config.semantics.make_mechanism(mechanism, mechanism_options(args)),
        policy,
        profiles=profiles,
        progress=progress,
    )


TABLE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("avg_jct_hours", "avg JCT h"),
    ("p50_jct_hours", "p50 h"),
    ("p99_jct_hours", "p99 h"),
    ("avg_queueing_hours", "queue h"),
    ("gpu_util", "GPU util"),
    ("cpu_util", "CPU util"),
    ("rounds", "rounds"),
    ("wall_seconds", "wall s"),
)


def format_table(
    summaries: Sequence[dict[str, Any]], extra: Sequence[tuple[str, list[str]]] = ()
) -> str:
    """A plain-text table, one row per summary; ``extra`` adds (header, cells) columns."""
    head = ["policy", "mechanism", *[h for _, h in TABLE_COLUMNS], *[h for h, _ in extra]]
    rows = []
    for k, s in enumerate(summaries):
        cells = [s["policy"], s["mechanism"]]
        for key, _ in TABLE_COLUMNS:
            v = s[key]
            cells.append(f"{v:.3f}" if isinstance(v, float) else str(v))
        cells += [col[k] for _, col in extra]
        rows.append(cells)
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    lines = [
        "  ".join(str(c).rjust(w) for c, w in zip(r, widths, strict=True)) for r in [head, *rows]
    ]
    return "\n".join(lines)
