"""Odd but valid traces and clusters through ``synergy-opt simulate``, checked against the
command line's promises.

python bench/fuzz_traces.py [--seeds 0:100]

Each seed draws a cluster file of 1-4 server shapes (skewed ones among them: few cores
and much memory per GPU, a server with no cores, 1-GPU servers), GPU types on some, and a
trace of 1-25 jobs with the edges of section 5 of docs/formats.md: simultaneous arrivals,
rows out of order, durations from a millisecond to days, jobs as large as the largest
server or one GPU more, split penalties, allowed GPU types, an extra column with a comma.
It runs one ``simulate`` with a drawn mechanism (not ``opt-exact``: its answers depend on
the clock), policy, fair-share rule, semantics and options, and a seed is *bad* when:

- the exit code is not 0, 1 or 2, or standard error holds a traceback;
- an exit 2 (bad input) is not exactly one line;
- an exit 0 run, repeated, writes other ``summary.json`` fields (timing fields aside) or
  another ``jobs.csv``;
- a job in ``jobs.csv`` starts before it arrives or finishes before it starts, or the
  summary counts more finished measured jobs than measured ones.

Exit 1 (a run that can never finish) is allowed: on such clusters some job may never hold
its floor anywhere (docs/formats.md section 1).  One line per bad seed, then a summary;
exit status 1 if any seed was bad.  Its first version (420 seeds) found a traceback
(``--semantics artifact`` on a cluster whose largest server has no cores; here seed 23)
and, in the warnings of a run that could never finish, rounds on which ``opt`` answered
nothing where two jobs could run (a job no server could hold at its cluster-wide share in
the runnable set): tests/test_sim_semantics.py, tests/test_opt_stranded.py.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MODELS: tuple[str, ...] = (
    "alexnet",
    "bert",
    "deepspeech",
    "gnmt",
    "lstm",
    "m5",
    "mobilenet",
    "res18",
    "res50",
    "shufflenet",
    "transformer",
    "vae",
)
#: Every registered mechanism but ``opt-exact`` (whose answers depend on the clock).
MECHANISMS: tuple[str, ...] = (
    "greedy",
    "opt",
    "proportional",
    "tetris",
    "tune",
    "tune-sorted",
    "tune-typed",
    "type-aware",
)
POLICIES: tuple[str, ...] = ("drf", "fifo", "ftf", "las", "srtf")
#: (GPUs, cores, GB) of the servers drawn: skewed pairs, no cores, real node shapes.
SHAPES: tuple[tuple[int, int, float], ...] = (
    (1, 1, 8.0),
    (2, 4, 100.0),
    (4, 24, 200.0),
    (8, 24, 500.0),
    (8, 8, 500.0),
    (8, 48, 200.0),
    (4, 0, 100.0),
    (2, 104, 512.0),
    (8, 32, 64.0),
    (3, 7, 33.3),
)
GPU_TYPES: tuple[str, ...] = ("v100", "p100", "k80")
#: Summary fields that measure time, not the replay.
TIMING_FIELDS: frozenset[str] = frozenset({"wall_seconds", "mechanism_seconds_per_round"})
#: Seconds one ``simulate`` may take before the seed counts as bad.
RUN_TIMEOUT_S: float = 900.0

#: (argv after ``synergy-opt``) -> (exit code, standard error).
Runner = Callable[[list[str]], tuple[int, str]]


@dataclass(frozen=True, slots=True)
class Drawn:
    """One seed's cluster object, trace rows and ``simulate`` options."""

    cluster: dict[str, Any]
    rows: list[dict[str, str]]
    options: list[str]


def draw(seed: int) -> Drawn:
    """The seed's cluster, trace and options."""
    r = random.Random(seed)
    typed = r.random() < 0.3
    servers = []
    for _ in range(r.randint(1, 4)):
        g, c, m = r.choice(SHAPES)
        s: dict[str, Any] = {"count": r.randint(1, 3), "gpus": g, "cpus": c, "mem_gb": m}
        if typed:
            s["gpu_type"] = r.choice(GPU_TYPES)
        servers.append(s)
    biggest = max(s["gpus"] for s in servers)
    total = sum(s["gpus"] * s["count"] for s in servers)
    extra = r.random() < 0.4
    rows: list[dict[str, str]] = []
    t = 0.0
    for i in range(r.randint(1, 25)):
        if r.random() < 0.6:
            t += r.choice((0.0, 0.0, 1.0, 37.5, 600.0, 3600.0 * r.random() * 5))
        g = max(1, min(r.choice((1, 1, 1, 2, 4, 8, biggest, biggest + 1)), total))
        duration = r.choice((0.001, 1.0, 59.0, 300.0, 3600.0, 86400.0 * 3, r.uniform(1, 20000)))
        row = {
            "id": f"j{i}" if r.random() < 0.9 else f"job-\u00fc{i}",
            "arrival_s": f"{t:g}",
            "gpus": str(g),
            "model": r.choice(MODELS),
            "duration_s": f"{duration:g}",
        }
        if extra:
            row["split_penalty"] = f"{r.choice((1.0, 0.9, 0.5, 0.05)):g}"
            if typed and r.random() < 0.5:
                row["gpu_types"] = ";".join(sorted(set(r.choices(GPU_TYPES, k=2))))
            row["note"] = r.choice(("a,b", "x", ""))
        rows.append(row)
    if r.random() < 0.3:
        r.shuffle(rows)
    mechanism = r.choice(MECHANISMS)
    options = [
        "--mechanism",
        mechanism,
        "--policy",
        r.choice(POLICIES),
        "--fair-share",
        r.choice(("server", "cluster")),
        "--semantics",
        r.choice(("default", "default", "artifact")),
    ]
    if r.random() < 0.3:
        # Not 1 s: a three-day job then takes 259,200 rounds (valid, docs/limits.md, but
        # ten minutes a run under opt).
        options += ["--round-seconds", r.choice(("30", "60", "300", "3600"))]
    if r.random() < 0.2:
        options += ["--preemption-cost-s", r.choice(("0", "30", "600"))]
    if r.random() < 0.2:
        options.append("--run-to-completion")
    if r.random() < 0.3:
        options.append("--check-rounds")
    if mechanism == "opt" and r.random() < 0.5:
        options += ["--max-fragmented", str(r.randint(0, 3))]
    return Drawn({"servers": servers}, rows, options)


def write_inputs(d: Drawn, folder: Path) -> tuple[Path, Path]:
    """The cluster file and the trace CSV of ``d`` in ``folder``."""
    cluster, trace = folder / "cluster.json", folder / "trace.csv"
    cluster.write_text(json.dumps(d.cluster), encoding="utf-8")
    columns: list[str] = []
    for row in d.rows:
        columns += [k for k in row if k not in columns]
    with trace.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        for row in d.rows:
            w.writerow({k: row.get(k, "") for k in columns})
    return cluster, trace


def run_cli(argv: list[str]) -> tuple[int, str]:
    """``synergy-opt ARGV`` in a child process: its exit code and standard error."""
    try:
        p = subprocess.run(
            [sys.executable, "-m", "synergy_opt", *argv],
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return -1, f"no answer within {RUN_TIMEOUT_S:g} s"
    return p.returncode, p.stderr


def _replay(out: Path) -> tuple[dict[str, Any], str]:
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    for k in TIMING_FIELDS:
        summary.pop(k, None)
    return summary, (out / "jobs.csv").read_text(encoding="utf-8")


def _jobs_problem(jobs_csv: str, summary: dict[str, Any]) -> str | None:
    for row in csv.DictReader(io.StringIO(jobs_csv)):
        arrival, start, finish = (
            float(row[k]) if row[k] not in ("", "nan") else None
            for k in ("arrival_hours", "start_hours", "finish_hours")
        )
        if start is not None and arrival is not None and start < arrival - 1e-9:
            return f"job {row['id']} starts at {start} h, before it arrives at {arrival} h"
        if finish is not None and start is not None and finish < start - 1e-9:
            return f"job {row['id']} finishes at {finish} h, before it starts at {start} h"
    if summary.get("jobs_measured_finished", 0) > summary.get("jobs_measured", 0):
        return "more measured jobs finished than measured"
    return None


def problem(d: Drawn, folder: Path, run: Runner = run_cli) -> tuple[int, str | None]:
    """(exit code, what the seed breaks or ``None``)."""
    cluster, trace = write_inputs(d, folder)
    base = ["simulate", "--trace", str(trace), "--cluster", str(cluster), "--quiet", *d.options]
    rc, err = run([*base, "-o", str(folder / "first")])
    lines = err.strip().splitlines()
    if rc not in (0, 1, 2):
        return rc, f"exit {rc}: {err.strip()[-300:]}"
    if "Traceback (most recent call last)" in err:
        return rc, f"a traceback: {err.strip()[-300:]}"
    if rc == 2 and len(lines) != 1:
        return rc, f"exit 2 with {len(lines)} lines: {err.strip()[-300:]}"
    if rc != 0:
        return rc, None
    rc2, err2 = run([*base, "-o", str(folder / "second")])
    if rc2 != 0:
        return rc, f"the repeated run ended {rc2}: {err2.strip()[-300:]}"
    first, second = _replay(folder / "first"), _replay(folder / "second")
    if first != second:
        return rc, "the repeated run wrote another summary.json or jobs.csv"
    return rc, _jobs_problem(first[1], first[0])


def main(argv: list[str] | None = None, run: Runner = run_cli) -> int:
    """Run the seeds and print the bad ones and a summary."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0:100", help="A:B, B excluded (0:100)")
    args = ap.parse_args(argv)
    try:
        a, b = (int(x) for x in args.seeds.split(":"))
    except ValueError:
        ap.error(f"--seeds: expected A:B, got {args.seeds!r}")
    if not 0 <= a < b:
        ap.error(f"--seeds: expected 0 <= A < B, got {args.seeds!r}")
    t0 = time.perf_counter()
    codes: dict[int, int] = {}
    bad = 0
    for seed in range(a, b):
        d = draw(seed)
        with tempfile.TemporaryDirectory() as tmp:
            rc, why = problem(d, Path(tmp), run)
        codes[rc] = codes.get(rc, 0) + 1
        if why is not None:
            bad += 1
            print(f"seed {seed} ({' '.join(d.options)}): {why}", flush=True)
    tally = ", ".join(f"exit {k}: {v}" for k, v in sorted(codes.items()))
    print(f"{b - a} seeds ({tally}), {bad} bad, {time.perf_counter() - t0:.0f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
