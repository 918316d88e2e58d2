"""Metrics from a run's logs: the summary (docs/formats.md section 4), ``jobs.csv``, time series.

Everything here is computed after the run from :class:`~synergy_opt.sim.engine.SimResult`
(job and round records), so adding a metric never touches the event loop.

Definitions
-----------
- JCT = finish - arrival, over the *measured* jobs (the window), in hours; percentiles
  use linear interpolation (``numpy.percentile``).
- Queueing delay = first start - arrival.
- Short / long jobs: a job is short when its duration at GPU-proportional share is under
  4 h (the paper's threshold).  Classifying by the job's own length rather than by the JCT
  it happened to get keeps the two classes identical across mechanisms being compared.
- Utilisation of GPU, CPU and memory = resources allocated, integrated over the run, over
  capacity x (end - first arrival); idle stretches count as zero.
- Makespan = end of the run - first arrival.
"""

from __future__ import annotations

import csv
import io as _io
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from synergy_opt.io import dumps, write_text_atomic
from synergy_opt.sim.engine import SimResult
from synergy_opt.sim.events import JobRecord
from synergy_opt.types import DEFAULT_FAIR_SHARE_RULE

SUMMARY_FORMAT = "synergy-sim-summary/1"
#: The files one run writes into its folder; the two plots only when asked for.  Commands
#: declare them before any work so an input of the same name is never overwritten.
SUMMARY_FILE = "summary.json"
JOBS_FILE = "jobs.csv"
TIMELINE_PNG = "utilisation.png"
JCT_CDF_PNG = "jct_cdf.png"
#: The paper's short/long boundary (hours of run time at fair share).
SHORT_JOB_HOURS: float = 4.0
#: Digits kept in summary floats: stable text, far below any meaningful difference.
_DIGITS = 6
#: Summary fields that measure this machine rather than the simulation.
TIMING_FIELDS: tuple[str, ...] = ("wall_seconds", "mechanism_seconds_per_round")


def _r(x: float) -> float:
    return round(float(x), _DIGITS)


def _pct(values: Sequence[float], q: float) -> float:
    return _r(np.percentile(np.asarray(values, dtype=float), q)) if len(values) else 0.0


def _mean(values: Sequence[float]) -> float:
    return _r(math.fsum(values) / len(values)) if len(values) else 0.0


def measured_jcts_h(result: SimResult) -> list[float]:
    """JCT (h) of every measured job that finished."""
    return [j.jct_s / 3600.0 for j in result.jobs if j.measured and j.jct_s is not None]


def _class_stats(jobs: Sequence[JobRecord]) -> dict[str, Any]:
    jct = [j.jct_s / 3600.0 for j in jobs if j.jct_s is not None]
    return {"jobs": len(jct), "avg_jct_hours": _mean(jct), "p95_jct_hours": _pct(jct, 95)}


def summarize(result: SimResult, seed: int | None = None) -> dict[str, Any]:
    """The ``synergy-sim-summary/1`` object for ``result``."""
    cfg = result.config
    cl = cfg.cluster
    measured = [j for j in result.jobs if j.measured]
    done = [j for j in measured if j.finish_s is not None]
    jct = [j.jct_s / 3600.0 for j in done if j.jct_s is not None]
    queueing = [(j.start_s - j.arrival_s) / 3600.0 for j in done if j.start_s is not None]
    t0 = min(j.arrival_s for j in result.jobs)
    span = max(result.end_s - t0, 1e-9)
    r = cfg.round_s
    rounds = result.rounds
    util = {
        "gpu_util": math.fsum(x.gpus_used for x in rounds) * r / (cl.total_gpus * span),
        "cpu_util": math.fsum(x.cpus_used for x in rounds) * r / (max(cl.total_cpus, 1) * span),
        "mem_util": math.fsum(x.mem_gb_used for x in rounds)
        * r
        / (max(cl.total_mem_gb, 1e-9) * span),
    }
    mech_s = [x.mechanism_s for x in rounds if not x.reused]
    short = [j for j in measured if j.duration_s < SHORT_JOB_HOURS * 3600.0]
    long_ = [j for j in measured if j.duration_s >= SHORT_JOB_HOURS * 3600.0]
    window = list(cfg.window) if cfg.window is not None else [0, len(result.jobs)]
    return {
        "format": SUMMARY_FORMAT,
        "policy": result.policy,
        "mechanism": result.mechanism,
        "cluster": {
            "servers": len(cl.servers),
            "gpus": cl.total_gpus,
            "cpus": cl.total_cpus,
            "mem_gb": _r(cl.total_mem_gb),
        },
        "jobs_measured": len(measured),
        "avg_jct_hours": _mean(jct),
        "p50_jct_hours": _pct(jct, 50),
        "p95_jct_hours": _pct(jct, 95),
        "p99_jct_hours": _pct(jct, 99),
        "makespan_hours": _r((result.end_s - t0) / 3600.0),
        "avg_queueing_hours": _mean(queueing),
        "gpu_util": _r(util["gpu_util"]),
        "cpu_util": _r(util["cpu_util"]),
        "mem_util": _r(util["mem_util"]),
        "rounds": len(rounds),
        "mechanism_seconds_per_round": {
            "mean": _mean(mech_s),
            "p99": _pct(mech_s, 99),
            "max": _r(max(mech_s, default=0.0)),
        },
        "seed": seed,
        "wall_seconds": _r(result.wall_seconds),
        # Extensions (optional fields, docs/formats.md allows adding them).
        "window": window,
        "semantics": cfg.semantics.name,
        "fair_share": cfg.fair_share_rule or DEFAULT_FAIR_SHARE_RULE,
        "jobs_total": len(result.jobs),
        "jobs_measured_finished": len(done),
        "round_seconds": _r(r),
        "rounds_reused": sum(1 for x in rounds if x.reused),
        "short_jobs": {"threshold_hours": SHORT_JOB_HOURS, **_class_stats(short)},
        "long_jobs": {"threshold_hours": SHORT_JOB_HOURS, **_class_stats(long_)},
    }


JOBS_CSV_COLUMNS: tuple[str, ...] = (
    "id",
    "model",
    "gpus",
    "arrival_hours",
    "start_hours",
    "finish_hours",
    "jct_hours",
    "measured",
)


def _h(x: float | None) -> str:
    return "" if x is None else f"{x / 3600.0:.6f}"


def jobs_csv(result: SimResult) -> str:
    """``jobs.csv`` text, one row per job in arrival order; empty where never started/finished."""
    buf = _io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(JOBS_CSV_COLUMNS)
    for j in result.jobs:
        w.writerow(
            [
                j.id,
                j.model,
                j.gpus,
                _h(j.arrival_s),
                _h(j.start_s),
                _h(j.finish_s),
                _h(j.jct_s),
                1 if j.measured else 0,
            ]
        )
    return buf.getvalue()


def write_outputs(
    result: SimResult, out_dir: str | os.PathLike[str], seed: int | None = None
) -> Path:
    """Write ``summary.json`` and ``jobs.csv`` into ``out_dir`` (created), each atomically."""
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    write_text_atomic(d / JOBS_FILE, jobs_csv(result))
    write_text_atomic(d / SUMMARY_FILE, dumps(summarize(result, seed)))
    return d


def time_series(result: SimResult) -> dict[str, np.ndarray]:
    """Per-round arrays for plots: start (h), GPU/CPU/memory utilisation, queue length."""
    cl = result.config.cluster
    rs = result.rounds
    return {
        "t_hours": np.array([x.start_s / 3600.0 for x in rs]),
        "gpu_util": np.array([x.gpus_used / cl.total_gpus for x in rs]),
        "cpu_util": np.array([x.cpus_used / max(cl.total_cpus, 1) for x in rs]),
        "mem_util": np.array([x.mem_gb_used / max(cl.total_mem_gb, 1e-9) for x in rs]),
        "queued": np.array([x.queued for x in rs]),
        "running": np.array([x.running for x in rs]),
    }
