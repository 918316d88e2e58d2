"""Corpus of malformed inputs over every command that reads input (issue 12, kinds 1, 4, 5, 6).

Each case writes its own bad files into a fresh folder, runs the command in-process through
``synergy_opt.cli.main`` (a few through a real subprocess, for the real exit code) and
requires: exit code 2, exactly one line on standard error, no traceback, the line naming the
file (and the CSV line) and the field the user wrote, and an answer within a few seconds.

Kinds: 1 = a traceback on bad input, 4 = a hang, 5 = a wrong exit code or a misleading
blame, 6 = a silent coercion.  Every case is ours (none copies the issue's examples).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from synergy_opt.cli import main
from synergy_opt.io import load_cluster, load_instance
from synergy_opt.limits import LIMITS, OPTION_LIMITS, option_help

#: Seconds any case may take: a hang shows up as a failure, not a stuck suite.
MAX_SECONDS = 5.0
ROOT = Path(__file__).resolve().parents[1]

# --------------------------------------------------------------------------- valid bases
# Small valid documents; each case breaks one thing in a copy.


def _matrix() -> dict[str, Any]:
    return {"cpus": [2, 4], "mem_gb": [30.0, 60.0], "throughput": [[0.5, 0.7], [0.8, 1.0]]}


def instance() -> dict[str, Any]:
    return {
        "format": "synergy-round/1",
        "name": "corpus",
        "cluster": {"servers": [{"gpus": 4, "cpus": 16, "mem_gb": 240.0, "count": 2}]},
        "jobs": [{"id": "a", "gpus": 2, "sensitivity": _matrix()}],
    }


def allocation() -> dict[str, Any]:
    return {
        "format": "synergy-allocation/1",
        "instance": "corpus",
        "mechanism": "tune",
        "jobs": [
            {
                "id": "a",
                "gpus": 2,
                "cpus": 4,
                "mem_gb": 60.0,
                "placement": [{"server": "s0", "gpus": 2, "cpus": 4, "mem_gb": 60.0}],
                "throughput": 1.0,
                "fair_share_throughput": 1.0,
            }
        ],
        "unscheduled": [],
        "total_throughput": 1.0,
        "fragmented_jobs": 0,
    }


def profiles() -> dict[str, Any]:
    """A profile file in the shipped schema with one model per task category."""

    def model(category: str) -> dict[str, Any]:
        return {
            "category": category,
            "cpu_points": [1, 3, 6],
            "mem_points_gb": [20.0, 62.5],
            "throughput": [[0.2, 0.5], [0.4, 1.0], [0.5, 1.4]],
            "iter_time_s_at_fair_share": 0.5,
        }

    return {"models": {"img": model("image"), "lang": model("language"), "sp": model("speech")}}


def trace_rows(*rows: str) -> str:
    return "id,arrival_s,gpus,model,duration_s\n" + "".join(r + "\n" for r in rows)


SPEC_HEAD = "[sweep]\nname = 'corpus'\n"

# --------------------------------------------------------------------------- the corpus


@dataclass(frozen=True)
class Case:
    """One malformed input: the files to write, the command, what the line must name."""

    name: str
    kind: int
    files: dict[str, str | bytes]
    argv: list[str]
    #: Regular expressions the one stderr line must match, in order ({d} = the folder).
    expect: tuple[str, ...]


def js(obj: Any) -> str:
    return json.dumps(obj)


def put(doc: dict[str, Any], path: list[Any], value: Any) -> dict[str, Any]:
    """``doc`` with the field at ``path`` replaced by ``value``."""
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return doc


def raw(doc: dict[str, Any], path: list[Any], literal: str) -> str:
    """``doc`` as JSON text with the field at ``path`` written as the raw ``literal``."""
    return js(put(doc, path, "@@RAW@@")).replace('"@@RAW@@"', literal)


def pods(*rows: str) -> str:
    head = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    head += "creation_time,deletion_time,scheduled_time\n"
    return head + "".join(r + "\n" for r in rows)


def report_folder(summary: str) -> dict[str, str]:
    """A sweep folder with one finished cell whose summary.json is ``summary``."""
    cell = {"format": "synergy-sweep-cell/1", "key": "k1", "options": {"seed": 3}}
    return {
        "sw/cells/k1/cell.json": js(cell),
        "sw/cells/k1/summary.json": summary,
        "sw/cells/k1/jobs.csv": "id\n",
    }


BIG = "9" * 420  # an integer literal no float can hold
CASES: list[Case] = [
    # ---- kind 1: tracebacks on bad input -------------------------------------------
    Case(
        "solve-int-literal-beyond-float",
        1,
        {"i.json": raw(instance(), ["cluster", "servers", 0, "mem_gb"], BIG)},
        ["solve", "{d}/i.json", "--mechanism", "tune"],
        (r"i\.json: ", r"cluster\.servers\[0\]\.mem_gb: ", r"in \[0, 1_000_000\]"),
    ),
    Case(
        "solve-json-nested-deep",
        1,
        {"i.json": raw(instance(), ["name"], "[" * 300 + "]" * 300)},
        ["solve", "{d}/i.json", "--mechanism", "proportional"],
        (r"i\.json: JSON nested deeper than 64 levels",),
    ),
    Case(
        "check-throughput-literal-beyond-float",
        1,
        {
            "i.json": js(instance()),
            "a.json": raw(allocation(), ["jobs", 0, "throughput"], "7" + "0" * 330),
        },
        ["check", "{d}/i.json", "{d}/a.json"],
        (r"a\.json: jobs\[0\]\.throughput: must be a number in",),
    ),
    Case(
        "check-surrogate-server-name",
        1,
        {
            "i.json": js(instance()),
            "a.json": raw(allocation(), ["jobs", 0, "placement", 0, "server"], '"s\\udc80"'),
        },
        ["check", "{d}/i.json", "{d}/a.json"],
        (r"a\.json: jobs\[0\]\.placement\[0\]\.server: contains \\udc80",),
    ),
    Case(
        "solve-surrogate-job-id",
        1,
        {"i.json": raw(instance(), ["jobs", 0, "id"], '"job\\ud9ff"')},
        ["solve", "{d}/i.json", "--mechanism", "tune"],
        (r"i\.json: jobs\[0\]\.id: contains \\ud9ff",),
    ),
    Case(
        "simulate-cluster-count-literal",
        1,
        {"c.json": raw(instance()["cluster"], ["servers", 0, "count"], "1" + "0" * 40)},
        ["simulate", "--cluster", "{d}/c.json", "-o", "{d}/out", "--quiet"],
        (r"c\.json: servers\[0\]\.count: must be an integer in \[1, 100_000\]",),
    ),
    Case(
        "simulate-profiles-infinite-throughput",
        1,
        {"p.json": raw(profiles(), ["models", "lang", "throughput", 1, 0], "1e999")},
        ["simulate", "--profiles", "{d}/p.json", "-o", "{d}/out", "--quiet"],
        (r"p\.json: models\.lang\.throughput\[1\]\[0\]: must be finite",),
    ),
    Case(
        "generate-profiles-cpu-point-literal",
        1,
        {"p.json": raw(profiles(), ["models", "img", "cpu_points", 1], "3" + "0" * 50)},
        ["generate", "--profiles", "{d}/p.json", "--jobs", "3"],
        (r"p\.json: models\.img\.cpu_points\[1\]: must be an integer in",),
    ),
    Case(
        "generate-negative-seed",
        1,
        {},
        ["generate", "--seed", "-7", "--jobs", "2"],
        (r"^--seed: must be an integer in \[0, ",),
    ),
    Case(
        "sweep-spec-latin1",
        1,
        {"s.toml": (SPEC_HEAD + "[axes]\nseed = [0]\n# caf\xe9\n").encode("latin-1")},
        ["sweep", "{d}/s.toml", "-o", "{d}/out", "--quiet"],
        (r"s\.toml: not UTF-8 text",),
    ),
    Case(
        "report-summary-is-a-list",
        1,
        report_folder("[1, 2]"),
        ["report", "{d}/sw", "--no-plots", "--quiet"],
        (r"k1/summary\.json: expected an object",),
    ),
    Case(
        "report-summary-lacks-p99",
        1,
        report_folder(js({"avg_jct_hours": 1.5})),
        ["report", "{d}/sw", "--no-plots", "--quiet"],
        (r"k1/summary\.json: p99_jct_hours: missing required field",),
    ),
    Case(
        "convert-philly-nested-deep",
        1,
        {"log.json": "[" + "[" * 500 + "]" * 500 + "]"},
        ["trace", "convert", "--from", "philly", "{d}/log.json", "-o", "{d}/t.csv"],
        (r"log\.json: JSON nested deeper than 64 levels",),
    ),
    Case(
        "convert-alibaba-huge-deletion-time",
        1,
        {"p.csv": pods("pa,2000,4096,1,1000,,LS,Running,10,4e305,20")},
        ["trace", "convert", "--from", "alibaba-gpu-2023", "{d}/p.csv", "-o", "{d}/t.csv"],
        (r"p\.csv: line 2: deletion_time: must be a number in \[0, 1e\+10\], got '4e305'",),
    ),
    Case(
        "compare-trace-arrival-overflows",
        1,
        {"t.csv": trace_rows("j0,0,1,gnmt,60", "j1,1e999,1,gnmt,60")},
        ["compare", "--trace", "{d}/t.csv", "-o", "{d}/out", "--quiet"],
        (r"t\.csv: line 3: arrival_s: must be finite",),
    ),
    Case(
        "sweep-path-with-nul",
        1,
        {"s.toml": SPEC_HEAD + '[base]\ncluster = "c\\u0000.json"\n[axes]\nseed = [0]\n'},
        ["sweep", "{d}/s.toml", "-o", "{d}/out", "--dry-run"],
        (r"s\.toml: base\.cluster: contains a NUL character",),
    ),
    # ---- kind 4: hangs ---------------------------------------------------------------
    Case(
        "sweep-axes-product-beyond-limit",
        4,
        {
            "s.toml": SPEC_HEAD
            + "[axes]\n"
            + "".join(
                f"{k} = [{', '.join(str(v + i) for i in range(60))}]\n"
                for k, v in (("seed", 0), ("round_seconds", 100), ("jobs", 10))
            )
        },
        ["sweep", "{d}/s.toml", "-o", "{d}/out", "--dry-run"],
        (r"s\.toml: axes: 216_000 combinations, more than 100_000 \(limit sweep_cells",),
    ),
    Case(
        "solve-server-count-beyond-limit",
        4,
        {"i.json": js(put(instance(), ["cluster", "servers", 0, "count"], 750_000))},
        ["solve", "{d}/i.json", "--mechanism", "tune"],
        (r"i\.json: cluster\.servers\[0\]\.count: must be an integer in \[1, 100_000\]",),
    ),
    Case(
        "solve-counts-sum-beyond-limit",
        4,
        {
            "i.json": js(
                put(
                    instance(),
                    ["cluster", "servers"],
                    [
                        {"gpus": 1, "cpus": 2, "mem_gb": 9.0, "count": 60_000, "name": n}
                        for n in "xy"
                    ],
                )
            )
        },
        ["solve", "{d}/i.json", "--mechanism", "tune"],
        (r"i\.json: cluster\.servers\[1\]\.count: the cluster would have more than 100_000",),
    ),
    Case(
        "generate-load-needs-too-many-jobs",
        4,
        {},
        ["generate", "--servers", "90000", "--gpu-load", "900"],
        (r"^--gpu-load: 900 x 720000 GPUs could take more than 1_000_000 jobs",),
    ),
    Case(
        "simulate-trace-duration-forever",
        4,
        {"t.csv": trace_rows("j0,0,1,gnmt,60", "j1,5,1,gnmt,3e307")},
        ["simulate", "--trace", "{d}/t.csv", "-o", "{d}/out", "--quiet"],
        (r"t\.csv: line 3: duration_s: must be a number in \(0, 1e\+08\]",),
    ),
    Case(
        "simulate-tiny-round",
        4,
        {},
        ["simulate", "--round-seconds", "0.0001", "-o", "{d}/out", "--quiet"],
        (r"^--round-seconds: must be a number in \[1, 86400\]",),
    ),
    Case(
        "simulate-huge-time-scale",
        4,
        {},
        ["simulate", "--time-scale", "2e9", "-o", "{d}/out", "--quiet"],
        (r"^--time-scale: must be a number in \[0\.001, 1000\]",),
    ),
    Case(
        "compare-near-zero-arrival-rate",
        4,
        {},
        ["compare", "--arrival-rate", "3e-12", "-o", "{d}/out", "--quiet"],
        (r"^--arrival-rate: must be 0 or a number in \[0\.001, ",),
    ),
    Case(
        "simulate-horizon-of-the-trace",
        4,
        {"t.csv": trace_rows("j0,0,1,gnmt,9e7")},
        ["simulate", "--trace", "{d}/t.csv", "--round-seconds", "30", "-o", "{d}/out", "--quiet"],
        (r"^--round-seconds: a job of 9e\+07 s \(.*t\.csv: line 2\)", r"limit rounds_per_job"),
    ),
    Case(
        "sweep-horizon-of-the-spec",
        4,
        {
            "s.toml": SPEC_HEAD
            + "[base]\ntime_scale = 800.0\nround_seconds = 2.0\n[axes]\nseed = [0, 1]\n"
        },
        ["sweep", "{d}/s.toml", "-o", "{d}/out", "--quiet"],
        (r"s\.toml: base\.time_scale: a job of ", r"limit rounds_per_job"),
    ),
    # ---- kind 5: wrong code or misleading blame --------------------------------------
    Case(
        "simulate-jobs-beyond-limit-blames-jobs",
        5,
        {},
        ["simulate", "--jobs", "3" + "0" * 24, "-o", "{d}/out", "--quiet"],
        (r"^--jobs: must be an integer in \[0, 1_000_000\]",),
    ),
    Case(
        "sweep-jobs-beyond-limit-blames-the-spec",
        5,
        {"s.toml": SPEC_HEAD + "[base]\njobs = 5000000000\n[axes]\nseed = [0]\n"},
        ["sweep", "{d}/s.toml", "-o", "{d}/out", "--quiet"],
        (r"s\.toml: base\.jobs: must be an integer in \[0, 1_000_000\]",),
    ),
    Case(
        "sweep-missing-trace-is-exit-2",
        5,
        {"s.toml": SPEC_HEAD + "[base]\ntrace = 'nowhere/jobs.csv'\n[axes]\nseed = [0]\n"},
        ["sweep", "{d}/s.toml", "-o", "{d}/out", "--quiet"],
        (r"s\.toml: base\.trace: .*nowhere/jobs\.csv: no such file",),
    ),
    Case(
        "sweep-bad-mechanism-named-by-axis",
        5,
        {"s.toml": SPEC_HEAD + "[axes]\nmechanism = ['tune', 'tunez']\n"},
        ["sweep", "{d}/s.toml", "-o", "{d}/out", "--quiet"],
        (r"s\.toml: axes\.mechanism\[1\]: unknown mechanism 'tunez'",),
    ),
    Case(
        "sweep-window-past-the-jobs",
        5,
        {"s.toml": SPEC_HEAD + "[base]\njobs = 30\n[axes]\nwindow = ['40:60', '0:10']\n"},
        ["sweep", "{d}/s.toml", "-o", "{d}/out", "--quiet"],
        (r"s\.toml: axes\.window\[0\]: ends at job 60 but only 30 jobs",),
    ),
    Case(
        "sweep-ratio-without-share",
        5,
        {"s.toml": SPEC_HEAD + "[base]\nservers = 2\ncpus_per_gpu = 0.125\n[axes]\nseed = [0]\n"},
        ["sweep", "{d}/s.toml", "-o", "{d}/out", "--quiet"],
        (r"s\.toml: base\.cpus_per_gpu: a 1-GPU job's GPU-proportional share is 0 cores",),
    ),
    Case(
        "simulate-trace-job-too-wide-names-file-line",
        5,
        # Out of arrival order on purpose: the line is the file's, not the sorted index.
        {"t.csv": trace_rows("late,500,1,gnmt,60", "wide,10,200,gnmt,60")},
        ["simulate", "--trace", "{d}/t.csv", "-o", "{d}/out", "--quiet"],
        (r"t\.csv: line 3: gpus: wants 200 GPUs, the cluster \(--servers/--gpus-per-server\)",),
    ),
    Case(
        "simulate-coreless-cluster-blames-cluster",
        5,
        {
            "c.json": js({"servers": [{"gpus": 8, "cpus": 0, "mem_gb": 300.0, "count": 3}]}),
            "t.csv": trace_rows("j0,0,1,gnmt,60"),
        },
        ["simulate", "--cluster", "{d}/c.json", "--trace", "{d}/t.csv", "-o", "{d}/o", "--quiet"],
        (r"c\.json: a 1-GPU job's GPU-proportional share is 0 cores",),
    ),
    Case(
        "trace-gpus-beyond-limit-names-column",
        5,
        {"t.csv": trace_rows("j0,0,1,gnmt,60", "j1,3,70000,gnmt,60")},
        ["simulate", "--trace", "{d}/t.csv", "-o", "{d}/out", "--quiet"],
        (r"t\.csv: line 3: gpus: must be an integer in \[1, 65536\], got '70000'",),
    ),
    # ---- kind 6: silent coercion -----------------------------------------------------
    Case(
        "trace-gpus-with-an-underscore-is-not-ten",
        6,
        # Python's int() reads '1_0' as 10: a typo must not become ten GPUs
        {"t.csv": trace_rows("j0,0,1_0,gnmt,60")},
        ["simulate", "--trace", "{d}/t.csv", "-o", "{d}/out", "--quiet"],
        (r"t\.csv: line 2: gpus: expected an integer in \[1, 65536\], got '1_0'",),
    ),
    Case(
        "trace-arrival-in-other-script-digits",
        6,
        {"t.csv": trace_rows("j0,\u0663,1,gnmt,60")},
        ["simulate", "--trace", "{d}/t.csv", "-o", "{d}/out", "--quiet"],
        (r"t\.csv: line 2: arrival_s: expected a number .*, got '\u0663'",),
    ),
    Case(
        "option-number-with-an-underscore",
        6,
        {},
        ["generate", "--servers", "1_6"],
        (r"argument --servers: expected an integer, got '1_6'",),
    ),
    Case(
        "simulate-profiles-fractional-cpu-point",
        6,
        {"p.json": js(put(profiles(), ["models", "sp", "cpu_points", 0], 1.5))},
        ["simulate", "--profiles", "{d}/p.json", "-o", "{d}/out", "--quiet"],
        (r"p\.json: models\.sp\.cpu_points\[0\]: expected an integer in .*got 1\.5",),
    ),
    Case(
        "profile-profiles-string-throughput",
        6,
        {"p.json": js(put(profiles(), ["models", "img", "throughput", 2, 1], "1.4"))},
        ["profile", "--model", "img", "--profiles", "{d}/p.json"],
        (r"p\.json: models\.img\.throughput\[2\]\[1\]: expected a number .*the string '1\.4'",),
    ),
    Case(
        "generate-profiles-boolean-throughput",
        6,
        {"p.json": js(put(profiles(), ["models", "lang", "throughput", 0, 0], False))},
        ["generate", "--profiles", "{d}/p.json", "--jobs", "2"],
        (r"p\.json: models\.lang\.throughput\[0\]\[0\]: expected a number .*a boolean",),
    ),
    Case(
        "simulate-profiles-string-iter-time",
        6,
        {"p.json": js(put(profiles(), ["models", "img", "iter_time_s_at_fair_share"], "0.5"))},
        ["simulate", "--profiles", "{d}/p.json", "-o", "{d}/out", "--quiet"],
        (r"p\.json: models\.img\.iter_time_s_at_fair_share: expected a number",),
    ),
    Case(
        "solve-boolean-gpus",
        6,
        {"i.json": js(put(instance(), ["jobs", 0, "gpus"], True))},
        ["solve", "{d}/i.json", "--mechanism", "tune"],
        (r"i\.json: jobs\[0\]\.gpus: expected an integer .*a boolean",),
    ),
    Case(
        "sweep-float-server-count",
        6,
        {"s.toml": SPEC_HEAD + "[base]\nservers = 4.0\n[axes]\nseed = [0]\n"},
        ["sweep", "{d}/s.toml", "-o", "{d}/out", "--quiet"],
        (r"s\.toml: base\.servers: expected an integer in \[1, 100_000\], got the number 4\.0",),
    ),
    Case(
        "check-fractional-fragmented-count",
        6,
        {"i.json": js(instance()), "a.json": js(put(allocation(), ["fragmented_jobs"], 0.5))},
        ["check", "{d}/i.json", "{d}/a.json"],
        (r"a\.json: fragmented_jobs: expected an integer .*got 0\.5",),
    ),
]


def _write(folder: Path, files: dict[str, str | bytes]) -> None:
    for name, content in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")


def _run_in_process(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as e:  # argparse's own usage errors
        return int(e.code or 0)


def _check_line(err: str, case: Case, folder: Path) -> None:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert "Traceback" not in err, err
    assert len(lines) == 1, f"{case.name}: expected one stderr line, got:\n{err}"
    for pattern in case.expect:
        assert re.search(pattern, lines[0]), f"{case.name}: {pattern!r} not in {lines[0]!r}"
    named = [n for n in case.files if not n.startswith("sw/")]
    if named and not case.expect[0].startswith("^--"):
        # The line names one of the files the case wrote (by its path in this folder).
        assert any(str(folder / n).split("/")[-1] in lines[0] for n in named), lines[0]


@pytest.mark.parametrize("case", CASES, ids=[f"kind{c.kind}-{c.name}" for c in CASES])
def test_malformed_input_is_one_line_exit_2(
    case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write(tmp_path, case.files)
    argv = [a.replace("{d}", str(tmp_path)) for a in case.argv]
    t0 = time.monotonic()
    rc = _run_in_process(argv)
    seconds = time.monotonic() - t0
    err = capsys.readouterr().err
    assert rc == 2, f"{case.name}: exit {rc}, stderr:\n{err}"
    _check_line(err, case, tmp_path)
    assert seconds < MAX_SECONDS, f"{case.name} took {seconds:.1f} s"


def test_every_kind_covers_every_reading_command() -> None:
    commands = {"solve", "check", "simulate", "compare", "generate", "profile", "sweep"}
    commands |= {"report", "trace"}
    assert {c.argv[0] for c in CASES} == commands
    assert {c.kind for c in CASES} == {1, 4, 5, 6}
    for kind in (1, 4, 5, 6):
        assert sum(c.kind == kind for c in CASES) >= 5, kind


SUBPROCESS = ["simulate-tiny-round", "solve-int-literal-beyond-float", "convert-philly-nested-deep"]


@pytest.mark.parametrize("name", SUBPROCESS)
def test_real_exit_code_through_a_process(name: str, tmp_path: Path) -> None:
    case = next(c for c in CASES if c.name == name)
    _write(tmp_path, case.files)
    argv = [a.replace("{d}", str(tmp_path)) for a in case.argv]
    proc = subprocess.run(
        [sys.executable, "-m", "synergy_opt", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr
    _check_line(proc.stderr, case, tmp_path)


# --------------------------------------------------------------------------- linear parsing


def test_many_servers_parse_in_linear_time(tmp_path: Path) -> None:
    """50,000 individually named servers (the duplicate check was quadratic: minutes)."""
    servers = [{"name": f"n{k}", "gpus": 8, "cpus": 32, "mem_gb": 256.0} for k in range(50_000)]
    path = tmp_path / "c.json"
    path.write_text(js({"servers": servers}), encoding="utf-8")
    t0 = time.monotonic()
    cluster = load_cluster(path)
    seconds = time.monotonic() - t0
    assert len(cluster.servers) == 50_000 and cluster.total_gpus == 400_000
    assert seconds < 3.0, seconds


def test_typed_jobs_validate_in_linear_time(tmp_path: Path) -> None:
    """10,000 typed jobs on 10,000 servers (usable GPUs were summed per job: 10^8 steps)."""
    servers = [
        {"name": t, "count": 5_000, "gpus": 4, "cpus": 16, "mem_gb": 128.0, "gpu_type": t}
        for t in ("T4", "A10")
    ]
    jobs = [
        {"id": f"j{k}", "gpus": 1, "gpu_types": ["A10"] if k % 3 else ["T4", "A10"]}
        for k in range(10_000)
    ]
    doc = instance()
    doc["cluster"] = {"servers": servers}
    doc["jobs"] = [{**j, "sensitivity": _matrix()} for j in jobs]
    path = tmp_path / "typed.json"
    path.write_text(js(doc), encoding="utf-8")
    t0 = time.monotonic()
    inst = load_instance(path)
    seconds = time.monotonic() - t0
    assert len(inst.jobs) == 10_000 and inst.cluster.total_gpus == 40_000
    assert seconds < 3.0, seconds


def test_duplicate_server_name_still_found(tmp_path: Path) -> None:
    servers = [{"name": f"n{k}", "gpus": 1, "cpus": 2, "mem_gb": 8.0} for k in range(2_000)]
    servers.append({"name": "n1234", "gpus": 1, "cpus": 2, "mem_gb": 8.0})
    path = tmp_path / "c.json"
    path.write_text(js({"servers": servers}), encoding="utf-8")
    with pytest.raises(ValueError, match=r"servers\[2000\]\.name: duplicate server name 'n1234'"):
        load_cluster(path)


# --------------------------------------------------------------------------- the documented table


def _doc_rows() -> dict[str, str]:
    text = (ROOT / "docs" / "limits.md").read_text(encoding="utf-8")
    rows = {}
    for line in text.splitlines():
        m = re.match(r"\| `([a-z_]+)` \| ([^|]+) \|", line)
        if m:
            rows[m.group(1)] = m.group(2).strip()
    return rows


def test_docs_limits_md_matches_the_table_in_the_code() -> None:
    rows = _doc_rows()
    assert set(rows) == {lim.name for lim in LIMITS}
    for lim in LIMITS:
        assert rows[lim.name] == lim.describe(), lim.name


def test_every_bounded_option_says_its_range_in_help() -> None:
    from synergy_opt.cli import build_parser

    seen: set[str] = set()

    def walk(parser: Any) -> None:
        for action in parser._actions:
            if hasattr(action, "choices") and isinstance(action.choices, dict):
                for child in action.choices.values():
                    walk(child)
            elif action.dest in OPTION_LIMITS and action.option_strings:
                seen.add(action.dest)
                # the limit's range, narrowed where the option's type refuses its low end
                # (test_cli_help checks that narrowing against the type)
                kind = action.type
                bound = option_help(
                    action.dest, getattr(kind, "minimum", None), getattr(kind, "strict", False)
                )
                assert (action.help or "").endswith(f"[{bound}]"), action.dest

    walk(build_parser())
    sweep_only = {"cpus_per_gpu"}  # the spec's CPU:GPU ratio axis has no command-line option
    assert seen == set(OPTION_LIMITS) - sweep_only, set(OPTION_LIMITS) - seen
