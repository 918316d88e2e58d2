"""Shared vocabulary of the trace converters: options, row accounting, errors, results.

Public traces are messy (empty fields, pods that never ran, jobs without attempts), so a
converter never silently drops a row: every input row ends up either converted or counted
under a named reason, and :class:`ConversionReport` says how many went each way.  A
malformed row is an error naming the file, the line and the field, unless the user asked to
``--skip-bad``, in which case it is counted (and the first few messages kept) instead.
"""

from __future__ import annotations

import csv
import io as _io
import logging
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

from synergy_opt.errors import InputError, ValidationError
from synergy_opt.io import read_text
from synergy_opt.limits import ARRIVAL_S, DURATION_S, Limit
from synergy_opt.tracefile import TraceJob
from synergy_opt.types import Cluster

R = TypeVar("R")

log = logging.getLogger(__name__)

#: How many malformed-row messages a report keeps verbatim (the rest are only counted).
MAX_BAD_EXAMPLES: int = 3


class TraceRowError(InputError):
    """One malformed input row: ``file: line N: field: problem``."""

    def __init__(self, source: str, line: int, field_name: str, problem: str) -> None:
        super().__init__(f"{source}: line {line}: {field_name}: {problem}")
        self.line = line
        self.field = field_name


@dataclass(frozen=True, slots=True)
class ConvertOptions:
    """Every knob of ``synergy-opt trace convert``; each converter reads the ones it needs.

    Attributes
    ----------
    seed:
        Seeds the task -> model rule (:mod:`synergy_opt.traces.mapping`).
    skip_bad:
        Drop and count malformed rows instead of stopping at the first one.
    gpu_sharing:
        Alibaba pods asking for a fraction of one GPU: ``whole`` gives them one whole GPU,
        ``skip`` drops them.
    cpu_only:
        Alibaba pods asking for no GPU: ``skip`` drops them, ``one-gpu`` gives them one GPU.
    unfinished:
        Alibaba pods without ``deletion_time``: ``censor`` ends them at the trace's last
        timestamp, ``skip`` drops them.
    phases:
        Keep only Alibaba pods in these ``pod_phase`` values (``None``: all that ran).
    cpu_nodes:
        Alibaba nodes without GPUs: ``drop`` (default) or ``keep`` them in the cluster.
    nodes_fraction:
        Keep this fraction of the Alibaba nodes, stratified by node configuration.
    attempts:
        Philly duration: ``sum`` of all attempts' run times, or the ``last`` attempt's.
    split:
        Philly category split (image, language, speech) in percent for the model rule.
    max_jobs, skip_jobs:
        After conversion, keep jobs ``skip_jobs .. skip_jobs + max_jobs`` in arrival order.
    arrival_compression:
        Divide inter-arrival times by this factor (> 1 compresses the trace, raising load);
        durations are unchanged.
    """

    seed: int = 0
    skip_bad: bool = False
    gpu_sharing: str = "whole"
    cpu_only: str = "skip"
    unfinished: str = "censor"
    phases: tuple[str, ...] | None = None
    cpu_nodes: str = "drop"
    nodes_fraction: float = 1.0
    attempts: str = "sum"
    split: tuple[float, float, float] = (20.0, 70.0, 10.0)
    max_jobs: int | None = None
    skip_jobs: int = 0
    arrival_compression: float = 1.0

    def __post_init__(self) -> None:
        choices = {
            "gpu_sharing": ("whole", "skip"),
            "cpu_only": ("skip", "one-gpu"),
            "unfinished": ("censor", "skip"),
            "cpu_nodes": ("drop", "keep"),
            "attempts": ("sum", "last"),
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name}: expected one of {allowed}, got {getattr(self, name)!r}")
        k = self.arrival_compression
        if not (math.isfinite(k) and k > 0):
            raise ValueError(f"arrival_compression: must be positive and finite, got {k!r}")
        if not 0 < self.nodes_fraction <= 1:
            raise ValueError(f"nodes_fraction: must be in (0, 1], got {self.nodes_fraction!r}")
        if self.max_jobs is not None and self.max_jobs < 1:
            raise ValueError(f"max_jobs: must be >= 1, got {self.max_jobs!r}")
        if self.skip_jobs < 0:
            raise ValueError(f"skip_jobs: must be >= 0, got {self.skip_jobs!r}")
        if len(self.split) != 3 or any(x < 0 for x in self.split) or sum(self.split) <= 0:
            raise ValueError(f"split: expected three shares >= 0, sum > 0, got {self.split!r}")


class Tally:
    """Counts rows by outcome while a converter runs (mutable, private to one run)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.rows = 0
        self.skipped: Counter[str] = Counter()
        self.mapped: Counter[str] = Counter()
        self.bad_examples: list[str] = []

    def skip(self, reason: str) -> None:
        """Count one row dropped for ``reason``."""
        self.skipped[reason] += 1

    def map(self, what: str) -> None:
        """Count one row kept after an explicit mapping (e.g. fractional GPU -> whole)."""
        self.mapped[what] += 1

    def bad(self, err: TraceRowError, skip_bad: bool) -> None:
        """A malformed row: raise it, or count it when ``skip_bad``."""
        if not skip_bad:
            raise err
        self.skipped["malformed (--skip-bad)"] += 1
        if len(self.bad_examples) < MAX_BAD_EXAMPLES:
            self.bad_examples.append(str(err))
        log.debug("skipped: %s", err)

    def report(self, converted: int, trimmed: int = 0) -> ConversionReport:
        """Freeze the counts; ``trimmed`` jobs were cut by ``--max-jobs``/``--skip-jobs``."""
        skipped = dict(self.skipped)
        if trimmed:
            skipped["outside --skip-jobs/--max-jobs"] = trimmed
        return ConversionReport(
            source=self.source,
            rows=self.rows,
            converted=converted,
            skipped=tuple(sorted(skipped.items())),
            mapped=tuple(sorted(self.mapped.items())),
            bad_examples=tuple(self.bad_examples),
        )


@dataclass(frozen=True, slots=True)
class ConversionReport:
    """Where every input row went: converted, or skipped for a named reason."""

    source: str
    rows: int
    converted: int
    skipped: tuple[tuple[str, int], ...] = ()
    mapped: tuple[tuple[str, int], ...] = ()
    bad_examples: tuple[str, ...] = ()
    models: tuple[tuple[str, int], ...] = ()

    @property
    def skipped_total(self) -> int:
        """Rows not converted."""
        return sum(n for _, n in self.skipped)

    def lines(self) -> list[str]:
        """Human-readable accounting, one fact per line."""
        out = [
            f"{self.source}: {self.rows} rows: {self.converted} converted, "
            f"{self.skipped_total} skipped"
        ]
        out += [f"  skipped  {n:>7}  {why}" for why, n in self.skipped]
        out += [f"  mapped   {n:>7}  {what}" for what, n in self.mapped]
        out += [f"  model    {n:>7}  {m}" for m, n in self.models]
        out += [f"  e.g. {msg}" for msg in self.bad_examples]
        return out


@dataclass(frozen=True, slots=True)
class Conversion:
    """A converter's result: the jobs (arrival order), its accounting, and the cluster."""

    jobs: tuple[TraceJob, ...]
    report: ConversionReport
    cluster: Cluster | None = None
    cluster_notes: tuple[str, ...] = field(default=())


def finish_jobs(jobs: Sequence[TraceJob], opts: ConvertOptions, tally: Tally) -> Conversion:
    """Sort by arrival, apply ``--skip-jobs/--max-jobs`` and ``--compress-arrivals``, shift to 0.

    Arrivals are made relative to the first kept job so a selected slice starts at once;
    ``arrival_compression`` divides the gaps, making a busier trace of the same
    jobs.  Ties keep input order, so the result is deterministic.
    """
    order = sorted(range(len(jobs)), key=lambda k: (jobs[k].arrival_s, k))
    ordered = [jobs[k] for k in order]
    end = len(ordered) if opts.max_jobs is None else opts.skip_jobs + opts.max_jobs
    kept = ordered[opts.skip_jobs : end]
    trimmed = len(ordered) - len(kept)
    out: list[TraceJob] = []
    if kept:
        t0 = kept[0].arrival_s
        for j in kept:
            a = (j.arrival_s - t0) / opts.arrival_compression
            _within(j, "arrival_s", a, ARRIVAL_S, "after the first kept job")
            _within(j, "duration_s", j.duration_s, DURATION_S, "of run time")
            out.append(replace(j, arrival_s=_round_s(a)))
    report = tally.report(len(out), trimmed)
    models = Counter(j.model for j in out)
    report = replace(report, models=tuple(sorted(models.items())))
    return Conversion(tuple(out), report)


def _within(job: TraceJob, name: str, value: float, limit: Limit, what: str) -> None:
    """InputError naming the job's input line when a converted time leaves its limit.

    The converters' outputs are traces too (docs/limits.md), so a pod list whose times
    span centuries is refused here, with a hint to convert a slice.
    """
    if not limit.contains(value):
        raise InputError(
            f"{job.where('converted job ' + job.id)}: {name}: {value:g} s {what}, more than "
            f"{limit.high:g} s (limit {limit.name}, docs/limits.md); select a slice with "
            "--skip-jobs/--max-jobs"
        )


def _round_s(x: float) -> float:
    """Millisecond resolution: enough for 300 s rounds, and stable bytes in the CSV."""
    return math.floor(x * 1000.0 + 0.5) / 1000.0


# --------------------------------------------------------------------------- CSV input


def read_csv(path: str) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """Header and ``(line number, fields)`` rows of a CSV file; blank lines are dropped.

    Line numbers are physical lines (the header is line 1), as an editor shows them.
    """
    text = read_text(path, "a CSV file")
    reader = csv.reader(_io.StringIO(text, newline=""))
    rows: list[tuple[int, list[str]]] = []
    try:
        header = [h.strip() for h in next(reader)]
        for fields in reader:
            if fields and any(v.strip() for v in fields):
                rows.append((reader.line_num, fields))
    except StopIteration:
        raise InputError(f"{path}: empty file, expected a CSV header") from None
    except csv.Error as e:
        raise InputError(f"{path}: line {reader.line_num}: not valid CSV ({e})") from None
    return header, rows


def require_columns(path: str, header: Sequence[str], columns: Sequence[str], what: str) -> None:
    """Fail with one line when the header lacks a column ``what`` needs."""
    missing = [c for c in columns if c not in header]
    if missing:
        raise InputError(f"{path}: line 1: header lacks column(s) {', '.join(missing)} of {what}")


def read_records(
    path: str,
    columns: Sequence[str],
    what: str,
    parse: Callable[[str, int, dict[str, str]], R],
    key: Callable[[R], str],
    key_column: str,
    noun: str,
    tally: Tally,
    skip_bad: bool,
) -> list[R]:
    """Every well-formed record of a CSV file, unique by ``key``.

    Malformed rows (and duplicate keys) raise, or with ``skip_bad`` are counted in
    ``tally`` and dropped; ``what`` names the file kind in the missing-column message.
    """
    header, rows = read_csv(path)
    require_columns(path, header, columns, what)
    out: list[R] = []
    seen: set[str] = set()
    for line, fields in rows:
        tally.rows += 1
        try:
            rec = parse(path, line, row_dict(path, line, header, fields))
            if key(rec) in seen:
                raise TraceRowError(path, line, key_column, f"duplicate {noun} {key(rec)!r}")
        except TraceRowError as e:
            tally.bad(e, skip_bad)
            continue
        seen.add(key(rec))
        out.append(rec)
    return out


def row_dict(path: str, line: int, header: Sequence[str], fields: Sequence[str]) -> dict[str, str]:
    """Fields by column name; a row with the wrong field count is a malformed row."""
    if len(fields) != len(header):
        raise TraceRowError(
            path, line, "row", f"has {len(fields)} fields, header has {len(header)}"
        )
    return {h: v.strip() for h, v in zip(header, fields, strict=True)}


def parse_number(path: str, line: int, col: str, text: str, limit: Limit) -> float:
    """A number within ``limit`` (integral for integer limits) from one CSV field."""
    try:
        return float(limit.parse(text))
    except ValidationError as e:
        raise TraceRowError(path, line, col, e.problem) from None


#: Field values that mean "no value" in the public traces (pandas writes ``nan``).
EMPTY_VALUES: frozenset[str] = frozenset({"", "nan", "NaN", "NAN", "None", "null", "NULL"})


def is_empty(text: str) -> bool:
    """Whether a field holds no value."""
    return text.strip() in EMPTY_VALUES
