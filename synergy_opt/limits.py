"""The numeric bounds every input is held to, one named :class:`Limit` per quantity.

Every reader (round and allocation JSON, cluster files, trace CSVs, profile files, sweep
specs, the trace converters) and every numeric command-line option checks its numbers
against the limit of the quantity here, so one number means one thing wherever it is
read.  The bounds are wide enough for any real cluster or trace and narrow enough that
the model can use every accepted value: sums over a whole cluster or trace stay finite
(no ``OverflowError`` or ``inf``), integers convert to floats exactly, and a simulation's
number of rounds stays bounded.  ``docs/limits.md`` is the same table for users; a test
keeps the two in step.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from synergy_opt.errors import ValidationError


@dataclass(frozen=True, slots=True)
class Limit:
    """A closed (or, with ``low_open``, left-open) range of one quantity.

    ``integer`` limits accept only whole numbers; ``check`` returns the value as ``int``
    or ``float`` and raises :class:`ValidationError` (path left empty, for the caller
    to fill in) with one line that states the range.
    """

    name: str
    low: float
    high: float
    integer: bool = False
    low_open: bool = False
    unit: str = ""
    why: str = ""
    #: 0 is accepted besides the range (e.g. arrival rate 0 = every job at time 0).
    or_zero: bool = False

    def describe(self) -> str:
        """The range in words, e.g. ``an integer in [1, 1024]``."""
        kind = "an integer" if self.integer else "a number"
        left = "(" if self.low_open else "["
        zero = "0 or " if self.or_zero else ""
        return f"{zero}{kind} in {left}{_fmt(self.low)}, {_fmt(self.high)}]"

    def contains(self, value: float) -> bool:
        """Whether ``value`` (already a finite int or float) is within the range."""
        if self.or_zero and value == 0:
            return True
        above = value > self.low if self.low_open else value >= self.low
        return above and value <= self.high

    def check(self, value: object) -> int | float:
        """``value`` if it is a number of the right kind within the range, else raise.

        Booleans and strings are refused (JSON ``true`` is not 1); integers are compared
        before any float conversion, so ``10**400`` is out of range, not an overflow.
        """
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValidationError("", f"expected {self.describe()}, got {json_kind(value)}")
        if isinstance(value, float):
            if not math.isfinite(value):
                raise ValidationError("", f"must be finite, got {value!r}")
            if self.integer and not value.is_integer():
                raise ValidationError("", f"expected {self.describe()}, got {value!r}")
        if not self.contains(value):
            raise ValidationError("", f"must be {self.describe()}, got {_short(value)}")
        return int(value) if self.integer else float(value)

    def parse(self, text: str) -> int | float:
        """The number written in ``text`` (a CSV field or an option), checked."""
        t = text.strip()
        try:
            if not is_number_text(t):
                raise ValueError(t)
            v: int | float = int(t) if self.integer and _looks_int(t) else float(t)
        except ValueError:
            raise ValidationError("", f"expected {self.describe()}, got {text!r}") from None
        try:
            return self.check(v)
        except ValidationError as e:  # quote the text as written, not the parsed number
            raise ValidationError("", f"{e.problem.rsplit(', got ', 1)[0]}, got {text!r}") from None


#: A number as written in a CSV field or an option: ASCII digits, an optional sign, point
#: and exponent.  Python's ``float`` and ``int`` also take ``1_0`` (10), digits of other
#: scripts and ``nan``/``inf``; a typo must not quietly become another number.
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_INTEGER = re.compile(r"[+-]?[0-9]+")


def is_number_text(t: str) -> bool:
    """Whether ``t`` (already stripped) is a plain decimal number (see :data:`_NUMBER`)."""
    return _NUMBER.fullmatch(t) is not None


def _looks_int(t: str) -> bool:
    return _INTEGER.fullmatch(t) is not None


def _fmt(x: float) -> str:
    if isinstance(x, float) and abs(x) >= 1e7:
        return f"{x:g}"
    if isinstance(x, int) or float(x).is_integer():
        v = int(x)
        return f"{v:,}".replace(",", "_") if abs(v) >= 100_000 else str(v)
    return f"{x:g}"


def _short(value: int | float) -> str:
    text = repr(value)
    return text if len(text) <= 24 else f"{text[:10]}...({len(text)} digits)"


def json_kind(value: object) -> str:
    """What a JSON value is, in JSON's words (``an object``, ``a list``, ``the number 3``),
    for errors that say what was found instead of what was expected."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"the number {_short(value)}"
    if isinstance(value, str):
        return f"the string {value!r}" if len(value) < 40 else "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"  # e.g. a TOML date in a sweep spec


# --------------------------------------------------------------------------- the table
# Cluster shape.
SERVERS = Limit(
    "servers",
    1,
    100_000,
    integer=True,
    unit="servers",
    why="servers in one cluster (after expanding counts)",
)
SERVER_GPUS = Limit("server_gpus", 0, 1024, integer=True, unit="GPUs", why="GPUs of one server")
SERVER_CPUS = Limit("server_cpus", 0, 65_536, integer=True, unit="cores", why="cores of one server")
SERVER_MEM_GB = Limit("server_mem_gb", 0, 1_000_000, unit="GB", why="memory of one server")
# Jobs and their sensitivity matrices.
JOB_GPUS = Limit("job_gpus", 1, 65_536, integer=True, unit="GPUs", why="GPUs one job wants")
GRID_CPUS = Limit(
    "grid_cpus",
    1,
    100_000_000,
    integer=True,
    unit="cores",
    why="a core count of a throughput grid or an allocation",
)
GRID_MEM_GB = Limit(
    "grid_mem_gb", 0, 1e11, low_open=True, unit="GB", why="a memory point of a throughput grid"
)
THROUGHPUT = Limit(
    "throughput", 0, 1e12, unit="work/s", why="a throughput value (any unit, e.g. samples/s)"
)
SPLIT_PENALTY = Limit(
    "split_penalty", 0, 1, low_open=True, why="throughput factor of a job spread over servers"
)
ITER_TIME_S = Limit(
    "iter_time_s", 0, 1e6, low_open=True, unit="s", why="a profile's iteration time at fair share"
)
# Allocations (what a mechanism gave; the checker judges the values).
ALLOC_GPUS = Limit(
    "alloc_gpus", 0, 100_000_000, integer=True, unit="GPUs", why="GPUs in an allocation entry"
)
ALLOC_CPUS = Limit(
    "alloc_cpus", 0, 100_000_000, integer=True, unit="cores", why="cores in an allocation entry"
)
ALLOC_MEM_GB = Limit("alloc_mem_gb", 0, 1e11, unit="GB", why="memory in an allocation entry")
ALLOC_THROUGHPUT = Limit(
    "alloc_throughput",
    0,
    1e18,
    unit="work/s",
    why="a job's or the round's throughput in an allocation",
)
SUMMARY_METRIC = Limit(
    "summary_metric", 0, 1e18, why="a metric a report reads back from a summary (JCT hours)"
)
SOLVE_SECONDS = Limit("solve_seconds", 0, 1e9, unit="s", why="reported solve time")
# Traces and simulation horizon.
JOBS = Limit(
    "jobs",
    1,
    1_000_000,
    integer=True,
    unit="jobs",
    why="jobs in a trace, a round or a generated workload",
)
JOB_COUNT = Limit(
    "job_count",
    0,
    1_000_000,
    integer=True,
    unit="jobs",
    why="a count of jobs in a file (e.g. an allocation's fragmented_jobs)",
)
ARRIVAL_S = Limit("arrival_s", 0, 1e9, unit="s", why="a job's arrival time (about 31 years)")
DURATION_S = Limit(
    "duration_s",
    0,
    1e8,
    low_open=True,
    unit="s",
    why="a job's run time at fair share (about 3 years)",
)
TIME_SCALE = Limit(
    "time_scale", 1e-3, 1e3, unit="x", why="factor on every arrival time and duration"
)
ROUND_SECONDS = Limit("round_seconds", 1, 86_400, unit="s", why="round (lease) length")
PREEMPTION_COST_S = Limit(
    "preemption_cost_s",
    0,
    86_400,
    unit="s",
    why="seconds lost per (re)start; also below the round length",
)
ROUNDS_PER_JOB = Limit(
    "rounds_per_job",
    0,
    1_000_000,
    unit="rounds",
    why="longest job's scaled duration / round length: bounds the horizon",
)
ARRIVAL_RATE = Limit(
    "arrival_rate",
    1e-3,
    1e6,
    or_zero=True,
    unit="jobs/h",
    why="Poisson arrival rate (0 = every job at time 0; 0.001 = a job per 1,000 h)",
)
SPLIT_PERCENT = Limit("split_percent", 0, 100, unit="%", why="one IMAGE,LANGUAGE,SPEECH percentage")
GPU_LOAD = Limit(
    "gpu_load",
    0,
    1000,
    low_open=True,
    unit="x",
    why="generate: job GPUs as a multiple of the cluster's",
)
CPUS_PER_GPU = Limit(
    "cpus_per_gpu", 0, 1024, low_open=True, unit="cores/GPU", why="sweep: CPU:GPU ratio"
)
SEED = Limit("seed", 0, 2**63 - 1, integer=True, why="random seed")
SWEEP_CELLS = Limit(
    "sweep_cells",
    1,
    100_000,
    integer=True,
    unit="cells",
    why="simulations of one sweep spec (the product of its axes' lengths)",
)
# Solvers and execution.
TIME_LIMIT_S = Limit(
    "time_limit_s", 0, 1e6, low_open=True, unit="s", why="solver time limit per round"
)
THREADS = Limit("threads", 1, 1024, integer=True, unit="threads", why="solver threads")
WORKERS = Limit("workers", 1, 1024, integer=True, unit="processes", why="parallel sweep processes")
# Profiling.
PROFILE_POINTS = Limit(
    "profile_points", 1, 10_000, integer=True, unit="points", why="profiling budget (measurements)"
)
PROFILE_SIZE = Limit(
    "profile_size",
    0,
    1e9,
    why="profiling sizes and rates (GB, MB/s, MB per sample, minutes, s)",
)
# Trace converters (Alibaba pod and node lists).
ALIBABA_MILLI = Limit(
    "alibaba_milli",
    0,
    65_536_000,
    unit="milli-cores",
    why="Alibaba cpu_milli of a pod or node (server_cpus x 1000)",
)
ALIBABA_MIB = Limit(
    "alibaba_mib",
    0,
    1_024_000_000,
    unit="MiB",
    why="Alibaba memory_mib of a pod or node (server_mem_gb x 1024)",
)
ALIBABA_GPUS = Limit(
    "alibaba_gpus", 0, 1024, integer=True, unit="GPUs", why="Alibaba num_gpu / gpu of a pod or node"
)
ALIBABA_GPU_MILLI = Limit(
    "alibaba_gpu_milli",
    0,
    1000,
    integer=True,
    unit="milli-GPUs",
    why="Alibaba gpu_milli (a share of one GPU)",
)
ALIBABA_TIME_S = Limit(
    "alibaba_time_s", 0, 1e10, unit="s", why="Alibaba creation/scheduled/deletion time"
)
#: JSON nesting the readers follow; deeper documents are refused, not recursed into.
JSON_DEPTH = Limit(
    "json_depth", 1, 64, integer=True, unit="levels", why="nesting of a JSON document"
)

#: Every limit, in the order docs/limits.md lists them.
LIMITS: tuple[Limit, ...] = tuple(v for v in dict(globals()).values() if isinstance(v, Limit))

#: The limit of every numeric command-line option and sweep-spec option, by its name
#: (argparse ``dest``, i.e. the option without ``--`` and with ``_`` for ``-``).  The
#: command line checks every parsed option found here and appends the range to its help.
OPTION_LIMITS: Mapping[str, Limit] = {
    "servers": SERVERS,
    "gpus_per_server": SERVER_GPUS,
    "cpus_per_server": SERVER_CPUS,
    "mem_per_server_gb": SERVER_MEM_GB,
    "cpus_per_gpu": CPUS_PER_GPU,
    "jobs": JOB_COUNT,
    "max_jobs": JOB_COUNT,
    "skip_jobs": JOB_COUNT,
    "gpu_load": GPU_LOAD,
    "arrival_rate": ARRIVAL_RATE,
    "seed": SEED,
    "time_scale": TIME_SCALE,
    "compress_arrivals": TIME_SCALE,
    "round_seconds": ROUND_SECONDS,
    "preemption_cost_s": PREEMPTION_COST_S,
    "time_limit": TIME_LIMIT_S,
    "threads": THREADS,
    "workers": WORKERS,
    "gpus": JOB_GPUS,
    "max_cpus": GRID_CPUS,
    "fair_cpus": GRID_CPUS,
    "max_points": PROFILE_POINTS,
    "dataset_gb": PROFILE_SIZE,
    "storage_mbps": PROFILE_SIZE,
    "mb_per_sample": PROFILE_SIZE,
    "min_mem_gb": PROFILE_SIZE,
    "minutes_per_point": PROFILE_SIZE,
    "timeout": PROFILE_SIZE,
}


_HORIZON = (
    f"and the longest job's duration x time scale / round seconds <= "
    f"{ROUNDS_PER_JOB.high:,.0f} rounds"
)
#: Combined limits an option takes part in, said after its range in ``--help``.
OPTION_NOTES: Mapping[str, str] = {
    "time_scale": _HORIZON,
    "round_seconds": _HORIZON,
    "preemption_cost_s": "and below --round-seconds",
    "gpu_load": f"and load x cluster GPUs <= {JOBS.high:,} jobs",
}


def option_help(name: str, minimum: float | None = None, strict: bool = False) -> str:
    """The bound of option ``name`` as ``--help`` says it (range, combined limits, doc);
    ``minimum`` (``strict``: excluded) where the option itself refuses less than its limit
    (``simulate --jobs`` needs a job, the ``jobs`` limit starts at 0)."""
    limit = OPTION_LIMITS[name]
    if minimum is not None and (minimum, strict) > (limit.low, limit.low_open):
        limit = replace(limit, low=minimum, low_open=strict, or_zero=False)
    note = OPTION_NOTES.get(name)
    return f"{limit.describe()}{' ' + note if note else ''}; docs/limits.md"


def check_options(values: Mapping[str, object]) -> None:
    """ValidationError (path = the option's name) for the first option out of its limit.

    ``None`` (an option left unset) passes; so do names without a limit.
    """
    for name, value in values.items():
        limit = OPTION_LIMITS.get(name)
        if limit is None or value is None:
            continue
        try:
            limit.check(value)
        except ValidationError as e:
            raise ValidationError(name, e.problem) from None


def horizon_rounds(longest_duration_s: float, time_scale: float, round_s: float) -> float:
    """Rounds the longest job needs at fair share: the simulator's horizon per job."""
    return longest_duration_s * time_scale / round_s
