"""Job traces as CSV (docs/formats.md section 5): one row per job, header required.

Required columns ``id, arrival_s, gpus, model, duration_s``; optional ``category``,
``split_penalty`` and ``gpu_types`` (allowed GPU types joined by ``;``).  Any other column is
kept verbatim in :attr:`TraceJob.extra` (converters use it for, e.g., requested CPU and
memory) and written back in the same order.  ``duration_s`` is the run time at the job's
GPU-proportional share, so its work is ``duration_s x fair-share throughput``.

Errors name the file, the line and the column:
``trace.csv: line 7: gpus: expected an integer >= 1, got 'two'``.
"""

from __future__ import annotations

import csv
import io as _io
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from synergy_opt.errors import InputError, ValidationError
from synergy_opt.io import read_text, write_text_atomic
from synergy_opt.limits import (
    ARRIVAL_S,
    DURATION_S,
    JOB_GPUS,
    JOBS,
    ROUNDS_PER_JOB,
    SPLIT_PENALTY,
    Limit,
    horizon_rounds,
    is_number_text,
)
from synergy_opt.profiles import ProfileLibrary
from synergy_opt.types import Cluster

REQUIRED_COLUMNS: tuple[str, ...] = ("id", "arrival_s", "gpus", "model", "duration_s")
OPTIONAL_COLUMNS: tuple[str, ...] = ("category", "split_penalty", "gpu_types")


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace: when it arrives, what it runs, and for how long at fair share."""

    id: str
    arrival_s: float
    gpus: int
    model: str
    duration_s: float
    category: str | None = None
    split_penalty: float = 1.0
    gpu_types: tuple[str, ...] | None = None
    extra: tuple[tuple[str, str], ...] = ()
    #: ``file: line N`` this job was read from (None for generated jobs); later checks
    #: (GPU demand against the cluster, horizon) blame the line the user wrote.
    source: str | None = field(default=None, compare=False)

    def where(self, fallback: str = "trace") -> str:
        """``file: line N`` of this job, or ``fallback: job ID`` for a generated one."""
        return self.source if self.source is not None else f"{fallback}: job {self.id}"


def _num(text: str, col: str, where: str, limit: Limit) -> float:
    try:
        v = float(text) if is_number_text(text) else math.nan
    except ValueError:
        v = math.nan
    # Fast path for the common, valid field; anything else gets Limit.parse's exact words.
    if v == v and limit.contains(v) and (not limit.integer or v.is_integer()):
        return v
    try:
        return float(limit.parse(text))
    except ValidationError as e:
        raise InputError(f"{where}: {col}: {e.problem}") from None


def parse_row(row: dict[str, str], extra_cols: list[str], where: str) -> TraceJob:
    """Turn one CSV row (already split into columns) into a :class:`TraceJob`."""
    jid = (row.get("id") or "").strip()
    if not jid:
        raise InputError(f"{where}: id: must not be empty")
    gpus = int(_num((row.get("gpus") or "").strip(), "gpus", where, JOB_GPUS))
    model = (row.get("model") or "").strip()
    if not model:
        raise InputError(f"{where}: model: must not be empty")
    arrival = _num((row.get("arrival_s") or "").strip(), "arrival_s", where, ARRIVAL_S)
    duration = _num((row.get("duration_s") or "").strip(), "duration_s", where, DURATION_S)
    category = (row.get("category") or "").strip() or None
    ptext = (row.get("split_penalty") or "").strip()
    penalty = _num(ptext, "split_penalty", where, SPLIT_PENALTY) if ptext else 1.0
    ttext = (row.get("gpu_types") or "").strip()
    gpu_types = tuple(t.strip() for t in ttext.split(";") if t.strip()) or None
    extra = tuple((c, row.get(c) or "") for c in extra_cols)
    return TraceJob(jid, arrival, gpus, model, duration, category, penalty, gpu_types, extra, where)


def read_trace(
    path: str | os.PathLike[str], profiles: ProfileLibrary | None = None
) -> tuple[TraceJob, ...]:
    """Read and validate a trace; with ``profiles``, every model must be a known profile.

    Jobs are returned sorted by (arrival, file order) so the arrival index used by
    ``--window`` is well defined even for unsorted files.
    """
    p = Path(path)
    reader = csv.reader(_io.StringIO(read_text(p, "a CSV trace"), newline=""))
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise InputError(f"{p}: empty file, expected a CSV header") from None
    except csv.Error as e:
        raise InputError(f"{p}: line 1: not valid CSV ({e})") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise InputError(f"{p}: line 1: header lacks column(s) {', '.join(missing)}")
    if len(set(header)) != len(header):
        raise InputError(f"{p}: line 1: duplicate column names in header")
    extra_cols = [h for h in header if h not in REQUIRED_COLUMNS and h not in OPTIONAL_COLUMNS]
    jobs: list[TraceJob] = []
    seen: set[str] = set()
    try:
        for row_values in reader:
            line = reader.line_num
            if not row_values or all(not v.strip() for v in row_values):
                continue
            where = f"{p}: line {line}"
            if len(jobs) >= JOBS.high:
                raise InputError(f"{where}: more than {JOBS.high:_} jobs (limit {JOBS.name})")
            if len(row_values) != len(header):
                raise InputError(f"{where}: has {len(row_values)} fields, header has {len(header)}")
            job = parse_row(dict(zip(header, row_values, strict=True)), extra_cols, where)
            if job.id in seen:
                raise InputError(f"{where}: id: duplicate job id {job.id!r}")
            seen.add(job.id)
            if profiles is not None and job.model not in profiles:
                known = ", ".join(profiles.names())
                raise InputError(f"{where}: model: unknown model {job.model!r}; known: {known}")
            jobs.append(job)
    except csv.Error as e:
        raise InputError(f"{p}: line {reader.line_num}: not valid CSV ({e})") from None
    if not jobs:
        raise InputError(f"{p}: no jobs in trace")
    order = sorted(range(len(jobs)), key=lambda k: (jobs[k].arrival_s, k))
    return tuple(jobs[k] for k in order)


def check_trace(
    jobs: Sequence[TraceJob],
    cluster: Cluster,
    profiles: ProfileLibrary,
    *,
    time_scale: float = 1.0,
    round_s: float = 300.0,
    max_jobs: int | None = None,
    cluster_source: str = "cluster",
    share_source: str | None = None,
    horizon_source: str | None = None,
    jobs_source: str = "trace",
) -> None:
    """Refuse, before simulating, a trace that cannot run on ``cluster``; blame who is wrong.

    A job that wants more GPUs (or GPU types) than the cluster has, or names an unknown
    model, is blamed on its trace line and column.  A GPU-proportional share below every
    profiled point of a model (servers with no cores or memory) is blamed on the cluster
    (``share_source``, by default ``cluster_source``).
    A job whose scaled duration needs more than ``ROUNDS_PER_JOB`` rounds is refused so a
    simulation's horizon stays bounded (docs/limits.md); it is blamed on
    ``horizon_source`` (e.g. the time-scale option) when given, else on the job's line.
    Checks the first ``max_jobs`` jobs, in the order given (arrival order, as the
    simulator keeps them); jobs not read from a file are named under ``jobs_source``.
    """
    kept = jobs[:max_jobs] if max_jobs is not None else jobs
    g_total = cluster.total_gpus
    gpus_of_type: dict[str | None, int] = {}  # counted once: linear in jobs + servers
    for s in cluster.servers:
        gpus_of_type[s.gpu_type] = gpus_of_type.get(s.gpu_type, 0) + s.gpus
    seen: set[tuple[str, int]] = set()
    for j in kept:
        at = j.where(jobs_source)
        if j.gpus > g_total:
            raise InputError(
                f"{at}: gpus: wants {j.gpus} GPUs, the cluster ({cluster_source}) has {g_total}"
            )
        if j.gpu_types is not None:
            usable = sum(gpus_of_type.get(t, 0) for t in set(j.gpu_types))
            if j.gpus > usable:
                raise InputError(
                    f"{at}: gpu_types: the cluster ({cluster_source}) has {usable} GPUs "
                    f"of types {';'.join(j.gpu_types)}, the job wants {j.gpus}"
                )
        if (j.model, j.gpus) in seen:
            continue
        seen.add((j.model, j.gpus))
        if j.model not in profiles:
            known = ", ".join(profiles.names())
            raise InputError(f"{at}: model: unknown model {j.model!r}; known: {known}")
        w = profiles.get(j.model).matrix(j.gpus)
        cpus, mem = cluster.fair_share(j.gpus)
        if w.lookup(cpus, mem) <= 0:
            raise InputError(
                f"{share_source or cluster_source}: a {j.gpus}-GPU job's GPU-proportional "
                f"share is {cpus} "
                f"cores and {mem:g} GB, below model {j.model}'s smallest profiled point "
                f"({w.cpus[0]} cores, {w.mem_gb[0]:g} GB; {at}): the servers need more cores "
                "or memory"
            )
    if kept:
        longest = max(kept, key=lambda j: j.duration_s)
        rounds = horizon_rounds(longest.duration_s, time_scale, round_s)
        if not ROUNDS_PER_JOB.contains(rounds):
            head = horizon_source or f"{longest.where(jobs_source)}: duration_s"
            job = f" ({longest.where(jobs_source)})" if horizon_source else ""
            raise InputError(
                f"{head}: a job of {longest.duration_s:g} s{job} x time scale {time_scale:g} "
                f"needs {rounds:.3g} rounds of {round_s:g} s, more than "
                f"{ROUNDS_PER_JOB.high:,.0f} (limit {ROUNDS_PER_JOB.name}, docs/limits.md): "
                "raise the round length or lower the time scale"
            )


def _fmt(x: float) -> str:
    # Shortest repr that round-trips: deterministic and lossless.
    return repr(float(x)) if not float(x).is_integer() else f"{x:.1f}"


def trace_to_csv(jobs: Iterable[TraceJob]) -> str:
    """CSV text for ``jobs``: optional columns appear only when some job uses them."""
    rows = list(jobs)
    cols = list(REQUIRED_COLUMNS)
    if any(j.category is not None for j in rows):
        cols.append("category")
    if any(j.split_penalty != 1.0 for j in rows):
        cols.append("split_penalty")
    if any(j.gpu_types is not None for j in rows):
        cols.append("gpu_types")
    extra_cols = list(dict.fromkeys(k for j in rows for k, _ in j.extra))
    cols += extra_cols
    buf = _io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(cols)
    for j in rows:
        ex = dict(j.extra)
        values = {
            "id": j.id,
            "arrival_s": _fmt(j.arrival_s),
            "gpus": str(j.gpus),
            "model": j.model,
            "duration_s": _fmt(j.duration_s),
            "category": j.category or "",
            "split_penalty": _fmt(j.split_penalty),
            "gpu_types": ";".join(j.gpu_types) if j.gpu_types else "",
        }
        w.writerow([values[c] if c in values else ex.get(c, "") for c in cols])
    return buf.getvalue()


def write_trace(path: str | os.PathLike[str], jobs: Iterable[TraceJob]) -> None:
    """Write a trace CSV atomically."""
    write_text_atomic(path, trace_to_csv(jobs))
