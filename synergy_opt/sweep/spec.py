"""Sweep specifications: a TOML file -> the frozen cells of its cross product.

A spec names fixed simulate options in ``[base]`` and lists values to vary in ``[axes]``;
every combination of axis values is one :class:`Cell`::

    [sweep]
    name = "smoke"

    [base]                      # any simulate option (names as in ``synergy-opt simulate``,
    servers = 4                 # dashes or underscores)
    jobs = 60
    window = "10:50"

    [axes]                      # the cross product of these lists
    policy = ["fifo", "srtf"]
    mechanism = ["proportional", "tune"]
    arrival_rate = [2.0, 4.0]
    seed = [0, 1]

A cell's options are canonical: values are normalised to their option's type (``4`` and
``4.0`` are the same arrival rate) and options equal to their default are dropped, so the
same simulation always gets the same folder name, a readable slug plus a hash of the
canonical options (:attr:`Cell.key`), whichever spec it comes from.

``cpus_per_gpu`` is the one option that ``simulate`` does not have: it sets
``cpus_per_server = cpus_per_gpu x gpus_per_server``, the paper's CPU:GPU ratio axis.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from synergy_opt.errors import InputError, ValidationError
from synergy_opt.io import read_text
from synergy_opt.limits import (
    ARRIVAL_RATE,
    CPUS_PER_GPU,
    JOB_COUNT,
    PREEMPTION_COST_S,
    ROUND_SECONDS,
    SEED,
    SERVER_CPUS,
    SERVER_GPUS,
    SERVER_MEM_GB,
    SERVERS,
    SWEEP_CELLS,
    THREADS,
    TIME_LIMIT_S,
    TIME_SCALE,
    Limit,
    json_kind,
)
from synergy_opt.profiles import parse_split
from synergy_opt.sim.semantics import semantics_names
from synergy_opt.sim.workload import ASSIGNMENTS, DURATIONS, WORKLOADS
from synergy_opt.types import DEFAULT_FAIR_SHARE_RULE, FAIR_SHARE_RULES

Value = Any
#: Canonical options of one cell: (name, value) pairs sorted by name, defaults left out.
Options = tuple[tuple[str, Value], ...]


class SpecError(InputError):
    """A sweep spec that cannot be run; the message names the file and the field."""


# --------------------------------------------------------------------------- option types


def _number(limit: Limit, lo: float | None = None) -> Callable[[Value], float]:
    """A number within ``limit`` (and above ``lo``, exclusive, when given)."""

    def conv(v: Value) -> float:
        try:
            out = float(limit.check(v))
        except ValidationError as e:
            raise ValueError(e.problem) from None
        if lo is not None and out <= lo:
            raise ValueError(f"must be > {lo:g}, got {v!r}")
        return out

    return conv


def _integer(limit: Limit, lo: int | None = None) -> Callable[[Value], int]:
    """An integer within ``limit`` (and at least ``lo`` when given); TOML floats refused."""

    def conv(v: Value) -> int:
        if isinstance(v, float):
            raise ValueError(f"expected {limit.describe()}, got {json_kind(v)}")
        try:
            out = int(limit.check(v))
        except ValidationError as e:
            raise ValueError(e.problem) from None
        if lo is not None and out < lo:
            raise ValueError(f"must be >= {lo}, got {v!r}")
        return out

    return conv


def _choice(what: str, known: Callable[[], Sequence[str]]) -> Callable[[Value], str]:
    """A name from a registry (mechanisms, policies, ...), checked when the spec is read."""

    def conv(v: Value) -> str:
        name = _string(v)
        names = known()
        if name not in names:
            raise ValueError(f"unknown {what} {name!r}; known: {', '.join(names)}")
        return name

    return conv


def _mechanism(v: Value) -> str:
    from synergy_opt.mechanisms import is_mechanism, mechanism_names

    name = _string(v)
    if not is_mechanism(name):
        raise ValueError(f"unknown mechanism {name!r}; known: {', '.join(mechanism_names())}")
    return name


def _policies() -> tuple[str, ...]:
    from synergy_opt.policies import policy_names

    return policy_names()


def _solvers() -> tuple[str, ...]:
    from synergy_opt.solve import BACKENDS

    return BACKENDS


def _string(v: Value) -> str:
    if not isinstance(v, str) or not v:
        raise ValueError(f"expected a non-empty string, got {json_kind(v)}")
    if "\x00" in v:  # no file name or registry name holds one; open() would raise
        raise ValueError(f"contains a NUL character: {v!r}")
    return v


def _flag(v: Value) -> bool:
    if not isinstance(v, bool):
        raise ValueError(f"expected true or false, got {json_kind(v)}")
    return v


def _split(v: Value) -> tuple[float, float, float]:
    return parse_split(v if isinstance(v, str | list | tuple) else repr(v))


def _window(v: Value) -> tuple[int, int]:
    if isinstance(v, str):
        try:
            a, b = (int(t) for t in v.split(":"))
        except ValueError:
            raise ValueError(f"expected FIRST:LAST, got {v!r}") from None
    elif isinstance(v, list | tuple) and len(v) == 2:
        a, b = (_integer(JOB_COUNT)(t) for t in v)
    else:
        raise ValueError(f'expected "FIRST:LAST" or [FIRST, LAST], got {json_kind(v)}')
    if a < 0 or b <= a or b > JOB_COUNT.high:
        raise ValueError(f"expected 0 <= FIRST < LAST <= {JOB_COUNT.high:_}, got {v!r}")
    return a, b


@dataclass(frozen=True, slots=True)
class OptionType:
    """How one sweep option is read, and its value when a spec does not set it."""

    convert: Callable[[Value], Value]
    default: Value
    help: str


#: Every option a cell may set: ``synergy-opt simulate``'s options (argparse names with
#: underscores) plus ``cpus_per_gpu``.  Paths are resolved against the spec's folder.
OPTIONS: Mapping[str, OptionType] = {
    "policy": OptionType(_choice("policy", _policies), "fifo", "scheduling policy"),
    "mechanism": OptionType(_mechanism, "tune", "round mechanism"),
    "servers": OptionType(_integer(SERVERS), 16, "servers in the cluster"),
    "gpus_per_server": OptionType(_integer(SERVER_GPUS, 1), 8, "GPUs per server"),
    "cpus_per_server": OptionType(_integer(SERVER_CPUS, 1), 24, "cores per server"),
    "cpus_per_gpu": OptionType(_number(CPUS_PER_GPU), None, "cores per GPU (sets cpus_per_server)"),
    "mem_per_server_gb": OptionType(_number(SERVER_MEM_GB, 0), 500.0, "memory per server"),
    "cluster": OptionType(_string, None, "a cluster JSON file instead of the options above"),
    "trace": OptionType(_string, None, "a trace CSV instead of a generated workload"),
    "workload": OptionType(_choice("workload", lambda: WORKLOADS), "single-gpu", "workload"),
    "jobs": OptionType(_integer(JOB_COUNT, 1), 1000, "jobs to generate"),
    "arrival_rate": OptionType(_number(ARRIVAL_RATE), 9.0, "jobs per hour (0 = all at once)"),
    "split": OptionType(_split, (20.0, 70.0, 10.0), "image/language/speech percentages"),
    "durations": OptionType(_choice("durations", lambda: DURATIONS), "synthetic", "durations"),
    "assignment": OptionType(
        _choice("assignment", lambda: ASSIGNMENTS), "balanced", "model assignment"
    ),
    "profiles": OptionType(_string, None, "model profiles JSON"),
    "max_jobs": OptionType(_integer(JOB_COUNT, 1), None, "keep the first N arrivals"),
    "time_scale": OptionType(_number(TIME_SCALE), 1.0, "scale of arrivals and durations"),
    "seed": OptionType(_integer(SEED), 0, "workload seed"),
    "window": OptionType(_window, None, "measured jobs FIRST:LAST"),
    "round_seconds": OptionType(_number(ROUND_SECONDS), 300.0, "round length"),
    "preemption_cost_s": OptionType(_number(PREEMPTION_COST_S), 0.0, "seconds lost per (re)start"),
    "run_to_completion": OptionType(_flag, False, "run every job to the end"),
    "check_rounds": OptionType(_flag, False, "check every round (debug)"),
    "semantics": OptionType(
        _choice("semantics", semantics_names), "default", "matrix model or the artifact's rules"
    ),
    "fair_share": OptionType(
        _choice("fair-share rule", lambda: FAIR_SHARE_RULES),
        DEFAULT_FAIR_SHARE_RULE,
        "GPU-proportional share per server or cluster-wide (docs/formats.md section 1)",
    ),
    "solver": OptionType(_choice("solver", _solvers), "highs", "LP/MIP back-end"),
    "time_limit": OptionType(_number(TIME_LIMIT_S), None, "per-round solver time limit"),
    "threads": OptionType(_integer(THREADS), None, "solver threads"),
}
_PATH_OPTIONS = frozenset({"cluster", "trace", "profiles"})
#: Options that make the folder slug readable, in this order (when a cell sets them).
SLUG_OPTIONS: tuple[str, ...] = (
    "policy",
    "mechanism",
    "workload",
    "arrival_rate",
    "split",
    "cpus_per_gpu",
    "cpus_per_server",
    "servers",
    "seed",
    "fair_share",
)


def option_default(name: str) -> Value:
    """The value a cell has for ``name`` when its options leave it out."""
    return OPTIONS[name].default


# --------------------------------------------------------------------------- cells


def _jsonable(v: Value) -> Value:
    return list(v) if isinstance(v, tuple) else v


def canonical(options: Mapping[str, Value]) -> Options:
    """Sorted (name, value) pairs without the options equal to their default."""
    return tuple((k, options[k]) for k in sorted(options) if options[k] != OPTIONS[k].default)


def _slug_value(v: Value) -> str:
    if isinstance(v, tuple):
        return "-".join(_slug_value(x) for x in v)
    if isinstance(v, float):
        return f"{v:g}"
    return "".join(c if c.isalnum() or c in "-." else "-" for c in str(v))


@dataclass(frozen=True, slots=True)
class Cell:
    """One simulation of a sweep: its canonical options (a picklable, hashable value)."""

    options: Options

    def get(self, name: str) -> Value:
        """The cell's value of option ``name`` (its default when not set)."""
        for k, v in self.options:
            if k == name:
                return v
        return option_default(name)

    def as_dict(self) -> dict[str, Value]:
        """Every option with its value (defaults filled in)."""
        out = {k: t.default for k, t in OPTIONS.items()}
        out.update(self.options)
        return out

    def to_json(self) -> dict[str, Value]:
        """The canonical options as a JSON object (tuples as lists)."""
        return {k: _jsonable(v) for k, v in self.options}

    @property
    def digest(self) -> str:
        """Hash of the canonical options (10 hex digits)."""
        text = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:10]

    @property
    def key(self) -> str:
        """Folder name: a readable slug of the main options plus the digest."""
        parts = [_slug_value(self.get(k)) for k in SLUG_OPTIONS[:2]]
        parts += [
            f"{k.replace('_', '')}{_slug_value(v)}"
            for k, v in self.options
            if k in SLUG_OPTIONS[2:]
        ]
        slug = "_".join(parts)[:80]
        return f"{slug}__{self.digest}"


def make_cell(options: Mapping[str, Value], where: str = "cell") -> Cell:
    """Validate and normalise raw options into a :class:`Cell` (SpecError naming the field)."""
    norm: dict[str, Value] = {}
    for raw_name, raw in options.items():
        name = raw_name.replace("-", "_")
        if name not in OPTIONS:
            raise SpecError(f"{where}.{raw_name}: unknown option; known: {', '.join(OPTIONS)}")
        try:
            norm[name] = OPTIONS[name].convert(raw)
        except ValueError as e:
            raise SpecError(f"{where}.{raw_name}: {e}") from None
    if norm.get("cpus_per_gpu") is not None and "cpus_per_server" in norm:
        raise SpecError(f"{where}.cpus_per_gpu: give cpus_per_gpu or cpus_per_server, not both")
    return Cell(canonical(norm))


# --------------------------------------------------------------------------- specs


@dataclass(frozen=True, slots=True)
class SweepSpec:
    """A named cross product: fixed options and the values of each axis, in file order.

    ``source`` (the spec file) and ``written`` (each option's name as the file spells it,
    e.g. ``arrival-rate``) let checks blame ``spec.toml: axes.arrival-rate[2]``.
    """

    name: str
    base: Options
    axes: tuple[tuple[str, tuple[Value, ...]], ...]
    source: str = "spec"
    written: tuple[tuple[str, str], ...] = ()

    def cells(self) -> tuple[Cell, ...]:
        """Every combination of axis values, in the spec's order (last axis fastest)."""
        out: list[Cell] = []
        seen: set[Cell] = set()
        for cell, _ in self.cells_with_origins():
            if cell not in seen:  # an axis value equal to the base value repeats a cell
                seen.add(cell)
                out.append(cell)
        return tuple(out)

    def cells_with_origins(self) -> Iterator[tuple[Cell, Callable[[str], str]]]:
        """Each combination with a function naming where the spec set an option.

        ``origin("window")`` is ``axes.window[1]`` for an axis value, ``base.window`` for a
        fixed one, and ``window (default)`` for an option the spec leaves out.
        """
        names = [n for n, _ in self.axes]
        spelled = dict(self.written)
        base_names = {n for n, _ in self.base}
        for combo in itertools.product(*(range(len(vals)) for _, vals in self.axes)):
            opts = dict(self.base)
            opts.update(
                (n, self.axes[k][1][i]) for k, (n, i) in enumerate(zip(names, combo, strict=True))
            )
            if opts.get("cpus_per_gpu") is not None and "cpus_per_server" in opts:
                raise SpecError(f"{self.source}: cpus_per_gpu and cpus_per_server both set")
            at = dict(zip(names, combo, strict=True))

            def origin(name: str, at: dict[str, int] = at) -> str:
                shown = spelled.get(name, name)
                if name in at:
                    return f"axes.{shown}[{at[name]}]"
                return f"base.{shown}" if name in base_names else f"{name} (default)"

            yield Cell(canonical(opts)), origin

    @property
    def axis_names(self) -> tuple[str, ...]:
        """The varied options, in file order."""
        return tuple(n for n, _ in self.axes)


def _norm_name(raw: str, where: str) -> str:
    name = raw.replace("-", "_")
    if name not in OPTIONS:
        raise SpecError(f"{where}.{raw}: unknown option; known: {', '.join(OPTIONS)}")
    return name


def _convert(name: str, raw: Value, where: str, base_dir: Path | None) -> Value:
    try:
        v = OPTIONS[name].convert(raw)
    except ValueError as e:
        raise SpecError(f"{where}: {e}") from None
    if name in _PATH_OPTIONS and base_dir is not None and not os.path.isabs(v):
        v = str((base_dir / v).resolve())
    return v


def spec_from_dict(
    data: Mapping[str, Any], source: str = "spec", base_dir: Path | None = None
) -> SweepSpec:
    """Build a :class:`SweepSpec` from decoded TOML (``[sweep]``, ``[base]``, ``[axes]``)."""
    unknown = set(data) - {"sweep", "base", "axes"}
    if unknown:
        raise SpecError(
            f"{source}: {sorted(unknown)[0]}: unknown table; expected sweep, base, axes"
        )
    meta = data.get("sweep", {})
    if not isinstance(meta, Mapping):
        raise SpecError(f"{source}: sweep: expected a table")
    extra = set(meta) - {"name", "description"}
    if extra:
        raise SpecError(
            f"{source}: sweep.{sorted(extra)[0]}: unknown field; expected name, description"
        )
    name = meta.get("name", Path(source).stem)
    if not isinstance(name, str) or not name:
        raise SpecError(f"{source}: sweep.name: expected a non-empty string")
    base_raw = data.get("base", {})
    axes_raw = data.get("axes", {})
    if not isinstance(base_raw, Mapping):
        raise SpecError(f"{source}: base: expected a table")
    if not isinstance(axes_raw, Mapping) or not axes_raw:
        raise SpecError(f"{source}: axes: expected a table with at least one option list")
    base: dict[str, Value] = {}
    written: dict[str, str] = {}
    for raw, v in base_raw.items():
        n = _norm_name(raw, f"{source}: base")
        written[n] = raw
        base[n] = _convert(n, v, f"{source}: base.{raw}", base_dir)
    axes: list[tuple[str, tuple[Value, ...]]] = []
    for raw, vals in axes_raw.items():
        n = _norm_name(raw, f"{source}: axes")
        written[n] = raw
        if n in base:
            raise SpecError(f"{source}: axes.{raw}: also set in [base]; set it in one place")
        if not isinstance(vals, list) or not vals:
            raise SpecError(f"{source}: axes.{raw}: expected a non-empty list of values")
        conv = tuple(
            _convert(n, v, f"{source}: axes.{raw}[{i}]", base_dir) for i, v in enumerate(vals)
        )
        if len(set(conv)) != len(conv):
            raise SpecError(f"{source}: axes.{raw}: values repeat")
        axes.append((n, conv))
    cells = math.prod(len(vals) for _, vals in axes)
    if cells > SWEEP_CELLS.high:
        raise SpecError(
            f"{source}: axes: {cells:_} combinations, more than {SWEEP_CELLS.high:_} "
            f"(limit {SWEEP_CELLS.name}, docs/limits.md)"
        )
    names = set(base) | {n for n, _ in axes}
    if {"cpus_per_gpu", "cpus_per_server"} <= names:
        raise SpecError(f"{source}: cpus_per_gpu: give cpus_per_gpu or cpus_per_server, not both")
    return SweepSpec(name, tuple(sorted(base.items())), tuple(axes), source, tuple(written.items()))


def load_spec(path: str | os.PathLike[str], *, validate: bool = True) -> SweepSpec:
    """Read a TOML sweep spec (SpecError naming the file and field on bad input).

    With ``validate`` every cell is checked before anything runs (input files exist and
    fit, windows fit the jobs, horizons are bounded), each problem named as the spec
    file and the field the user wrote.
    """
    p = Path(path)
    try:
        text = read_text(p, "a TOML sweep spec")
    except InputError as e:
        raise SpecError(str(e)) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{p}: not valid TOML: {e}") from None
    except RecursionError:
        raise SpecError(f"{p}: not valid TOML: nested too deeply") from None
    spec = spec_from_dict(data, str(p), p.parent)
    if validate:
        # Imported here: cell.py builds on this module (cells, options, SpecError).
        from synergy_opt.sweep.cell import validate_spec

        validate_spec(spec)
    return spec
