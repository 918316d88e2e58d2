"""Philly ``cluster_job_log`` (msr-fiddle/philly-traces) -> job trace (docs/formats.md section 5).

The log is one JSON list of jobs::

    {"status": "Pass", "vc": "...", "jobid": "application_...", "user": "...",
     "submitted_time": "2017-10-03 03:01:57",
     "attempts": [{"start_time": "...", "end_time": "...",
                   "detail": [{"ip": "m123", "gpus": ["gpu0", "gpu1"]}]}]}

with times as ``YYYY-MM-DD HH:MM:SS`` (``None``/null/empty where unknown).  One job -> one
trace row:

- ``arrival_s`` = ``submitted_time`` (seconds after the first kept job's);
- ``gpus`` = the GPUs listed in the **first** attempt's ``detail`` (over all its machines);
- ``duration_s`` = the run times of its attempts: ``attempts="sum"`` adds every attempt
  with both times, ``"last"`` takes the last such attempt (what the job finally ran);
- jobs without a usable attempt (none, no times, or no GPUs in the first attempt) are
  skipped and counted by reason, as are jobs whose run time is zero;
- ``model``/``category``: no request is recorded, so the category is drawn by the
  seeded split rule of :mod:`synergy_opt.traces.mapping`; ``status`` is kept as an extra
  column.

Malformed entries name their line in the file: the top-level list is decoded element by
element so each job's starting line is known.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from synergy_opt.errors import InputError, ValidationError
from synergy_opt.io import check_json_depth, check_text, read_text
from synergy_opt.limits import DURATION_S, json_kind
from synergy_opt.profiles import ProfileLibrary, shipped_profiles
from synergy_opt.tracefile import TraceJob
from synergy_opt.traces.base import Conversion, ConvertOptions, Tally, TraceRowError, finish_jobs
from synergy_opt.traces.mapping import category_by_split, pick_model

log = logging.getLogger(__name__)

TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
_NO_TIME = (None, "", "None", "null")


def decode_entries(path: str) -> list[tuple[int, Any]]:
    """``(line, value)`` for each element of the top-level JSON list."""
    text = read_text(path, "a JSON job log")
    check_json_depth(text, path)  # raw_decode would recurse into any depth
    dec = json.JSONDecoder()
    ws = " \t\r\n"
    i = 0
    n = len(text)

    def skip_ws(k: int) -> int:
        while k < n and text[k] in ws:
            k += 1
        return k

    def fail(k: int, problem: str) -> InputError:
        return InputError(f"{path}: line {text.count(chr(10), 0, k) + 1}: {problem}")

    i = skip_ws(i)
    if i >= n or text[i] != "[":
        raise fail(i, "expected a JSON list of jobs ('[' ...)")
    i = skip_ws(i + 1)
    out: list[tuple[int, Any]] = []
    if i < n and text[i] == "]":
        return out
    while True:
        try:
            value, end = dec.raw_decode(text, i)
        except json.JSONDecodeError as e:
            raise InputError(f"{path}: line {e.lineno}: not valid JSON ({e.msg})") from None
        out.append((text.count("\n", 0, i) + 1, value))
        i = skip_ws(end)
        if i < n and text[i] == ",":
            i = skip_ws(i + 1)
            continue
        if i < n and text[i] == "]":
            if skip_ws(i + 1) != n:
                raise fail(skip_ws(i + 1), "unexpected data after the job list")
            return out
        raise fail(i, "expected ',' or ']' after a job")


def _time(path: str, line: int, field: str, value: Any) -> datetime | None:
    if value in _NO_TIME:
        return None
    if not isinstance(value, str):
        raise TraceRowError(path, line, field, f"expected a time string, got {value!r}")
    try:
        return datetime.strptime(value.strip(), TIME_FORMAT)
    except ValueError:
        raise TraceRowError(path, line, field, f"expected {TIME_FORMAT!r}, got {value!r}") from None


def _job_fields(path: str, line: int, entry: Any) -> tuple[str, str, datetime, list[Any]]:
    """(jobid, status, submitted, attempts) with the schema checked."""
    if not isinstance(entry, dict):
        raise TraceRowError(path, line, "job", f"expected an object, got {json_kind(entry)}")
    jobid = entry.get("jobid")
    if not isinstance(jobid, str) or not jobid.strip():
        raise TraceRowError(path, line, "jobid", "missing or not a non-empty string")
    try:
        check_text(jobid, "jobid")
    except ValidationError as e:
        raise TraceRowError(path, line, e.path, e.problem) from None
    submitted = _time(path, line, f"{jobid}.submitted_time", entry.get("submitted_time"))
    if submitted is None:
        raise TraceRowError(path, line, f"{jobid}.submitted_time", "missing")
    attempts = entry.get("attempts", [])
    if attempts is None:
        attempts = []
    if not isinstance(attempts, list):
        raise TraceRowError(path, line, f"{jobid}.attempts", "expected a list")
    status = entry.get("status", "")
    return jobid.strip(), str(status) if status is not None else "", submitted, attempts


def _attempt(
    path: str, line: int, where: str, a: Any
) -> tuple[datetime | None, datetime | None, int]:
    """(start, end, GPUs in its detail) of one attempt."""
    if not isinstance(a, dict):
        raise TraceRowError(path, line, where, "expected an object")
    start = _time(path, line, f"{where}.start_time", a.get("start_time"))
    end = _time(path, line, f"{where}.end_time", a.get("end_time"))
    detail = a.get("detail", [])
    if detail is None:
        detail = []
    if not isinstance(detail, list):
        raise TraceRowError(path, line, f"{where}.detail", "expected a list")
    gpus = 0
    for k, d in enumerate(detail):
        if not isinstance(d, dict) or not isinstance(d.get("gpus", []), list):
            raise TraceRowError(
                path, line, f"{where}.detail[{k}]", "expected an object with a 'gpus' list"
            )
        gpus += len(d.get("gpus") or [])
    if start is not None and end is not None and end < start:
        raise TraceRowError(path, line, f"{where}.end_time", "is before start_time")
    return start, end, gpus


def convert(
    inputs: Sequence[str], opts: ConvertOptions, profiles: ProfileLibrary | None = None
) -> Conversion:
    """Convert one ``cluster_job_log`` into jobs (Philly logs carry no cluster)."""
    profiles = profiles or shipped_profiles()
    if len(inputs) != 1:
        raise InputError(f"philly: expected one cluster_job_log file, got {len(inputs)}")
    path = inputs[0]
    tally = Tally(path)
    jobs: list[TraceJob] = []
    seen: set[str] = set()
    for line, entry in decode_entries(path):
        tally.rows += 1
        try:
            jobid, status, submitted, attempts = _job_fields(path, line, entry)
            if jobid in seen:
                raise TraceRowError(path, line, "jobid", f"duplicate job id {jobid!r}")
            parsed = [
                _attempt(path, line, f"{jobid}.attempts[{k}]", a) for k, a in enumerate(attempts)
            ]
        except TraceRowError as e:
            tally.bad(e, opts.skip_bad)
            continue
        seen.add(jobid)
        if not parsed:
            tally.skip("no attempts")
            continue
        gpus = parsed[0][2]
        if gpus == 0:
            tally.skip("no GPUs in the first attempt's detail")
            continue
        runs = [(e - s).total_seconds() for s, e, _ in parsed if s is not None and e is not None]
        if not runs:
            tally.skip("no attempt with both start_time and end_time")
            continue
        duration = sum(runs) if opts.attempts == "sum" else runs[-1]
        if duration <= 0:
            tally.skip("zero run time")
            continue
        if not DURATION_S.contains(duration):
            problem = f"run {duration:g} s, more than {DURATION_S.high:g} (limit duration_s)"
            tally.bad(TraceRowError(path, line, f"{jobid}.attempts", problem), opts.skip_bad)
            continue
        category = category_by_split(opts.seed, jobid, opts.split)
        model = pick_model(profiles, category, opts.seed, jobid)
        jobs.append(
            TraceJob(
                id=jobid,
                arrival_s=_epoch(submitted),
                gpus=gpus,
                model=model.name,
                duration_s=duration,
                category=model.category,
                extra=(("status", status), ("attempts", str(len(parsed)))),
                source=f"{path}: line {line}",
            )
        )
    return finish_jobs(jobs, opts, tally)


_EPOCH = datetime(1970, 1, 1)


def _epoch(t: datetime) -> float:
    """Seconds since 1970 of a naive time; only differences matter (arrivals are shifted)."""
    return (t - _EPOCH).total_seconds()
