"""``synergy-opt simulate`` and ``compare`` end to end (in-process), and their bad-input errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from synergy_opt.cli import main

DATA = Path(__file__).parent / "data" / "sim"
SUMMARY_KEYS = {
    "format",
    "policy",
    "mechanism",
    "cluster",
    "jobs_measured",
    "avg_jct_hours",
    "p50_jct_hours",
    "p95_jct_hours",
    "p99_jct_hours",
    "makespan_hours",
    "avg_queueing_hours",
    "gpu_util",
    "cpu_util",
    "mem_util",
    "rounds",
    "mechanism_seconds_per_round",
    "seed",
    "wall_seconds",
}


def test_simulate_on_defaults_writes_the_documented_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    assert main(["simulate", "--jobs", "60", "--window", "10:50", "-o", str(out), "--plots"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert SUMMARY_KEYS <= set(summary)
    assert summary["format"] == "synergy-sim-summary/1" and summary["jobs_measured"] == 40
    assert summary["cluster"] == {"servers": 16, "gpus": 128, "cpus": 384, "mem_gb": 8000.0}
    assert summary["policy"] == "fifo" and summary["mechanism"] == "tune" and summary["seed"] == 0
    lines = (out / "jobs.csv").read_text().splitlines()
    assert len(lines) == 61 and lines[0].startswith("id,model,gpus,arrival_hours")
    assert (out / "utilisation.png").stat().st_size > 0 and (out / "jct_cdf.png").stat().st_size > 0
    assert "avg JCT h" in capsys.readouterr().out


def test_simulate_replays_a_trace_file(tmp_path: Path) -> None:
    expected = json.loads((DATA / "golden10_expected.json").read_text())
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps(expected["cluster"]))
    args = [
        "simulate",
        "--trace",
        str(DATA / "golden10.csv"),
        "--cluster",
        str(cluster),
        "--mechanism",
        "proportional",
        "-o",
        str(tmp_path / "o"),
        "--quiet",
    ]
    assert main(args) == 0
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["rounds"] == 9 and summary["seed"] is None


def test_compare_runs_every_pair_on_one_trace(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    args = [
        "compare",
        "--jobs",
        "40",
        "--mechanisms",
        "proportional,tune",
        "--policies",
        "fifo,srtf",
        "-o",
        str(out),
        "--quiet",
    ]
    assert main(args) == 0
    doc = json.loads((out / "compare.json").read_text())
    assert [(r["policy"], r["mechanism"]) for r in doc["runs"]] == [
        ("fifo", "proportional"),
        ("fifo", "tune"),
        ("srtf", "proportional"),
        ("srtf", "tune"),
    ]
    assert (out / "jct_cdf.png").exists() and (out / "srtf-tune" / "summary.json").exists()


@pytest.mark.parametrize(
    "argv, option",
    [
        (["simulate", "--split", "20,80"], "--split"),
        (["simulate", "--split", "a,b,c"], "--split"),
        (["simulate", "--window", "50:10"], "--window"),
        (["simulate", "--window", "x"], "--window"),
        (["simulate", "--arrival-rate", "-3"], "--arrival-rate"),
        (["simulate", "--policy", "lottery"], "--policy"),
        (["simulate", "--mechanism", "magic"], "--mechanism"),
        (["simulate", "--round-seconds", "0"], "--round-seconds"),
        (["simulate", "--preemption-cost-s", "400"], "--preemption-cost-s"),
        (["simulate", "--jobs", "5", "--window", "0:10"], "window"),
        (["simulate", "--trace", "no-such-folder/trace.csv"], "no such file"),
        (["compare", "--mechanisms", "tune,tune"], "--mechanisms"),
        (["compare", "--policies", "fifo,,srtf"], "--policies: an empty name"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    argv: list[str], option: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        rc = main([*argv, "-o", str(tmp_path / "o"), "--quiet"])
    except SystemExit as e:  # argparse type errors exit directly
        rc = int(e.code or 0)
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert option in err and len(err.splitlines()) == 1


def test_a_run_that_can_never_finish_exits_1_and_compare_keeps_the_others(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GREEDY never places the 8-GPU alexnet job (96 cores at its best point, servers have 24).
    trace = tmp_path / "t.csv"
    trace.write_text("id,arrival_s,gpus,model,duration_s\nbig,0,8,alexnet,600\nx,0,1,gnmt,600\n")
    base = ["--trace", str(trace), "--servers", "2", "--quiet"]
    assert main(["simulate", "--mechanism", "greedy", *base, "-o", str(tmp_path / "s")]) == 1
    err = capsys.readouterr().err.strip()
    assert "can never finish under greedy" in err and len(err.splitlines()) == 1
    out = tmp_path / "c"
    assert main(["compare", "--mechanisms", "proportional,greedy", *base, "-o", str(out)]) == 1
    assert "fifo/greedy" in capsys.readouterr().err
    doc = json.loads((out / "compare.json").read_text())
    assert [r["mechanism"] for r in doc["runs"]] == ["proportional"]
