"""The command line: exit codes, outputs, determinism (docs/formats.md section 3)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from synergy_opt.cli import main
from synergy_opt.io import load_instance
from tests.conftest import INSTANCES

TINY = INSTANCES / "tiny" / "fair-share-binds.json"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "synergy_opt", *args], capture_output=True, text=True, check=False
    )


def test_solve_then_check_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "a.json"
    r = _run("solve", str(TINY), "--mechanism", "tune", "-o", str(out))
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["format"] == "synergy-allocation/1" and doc["mechanism"] == "tune"
    assert doc["total_throughput"] == pytest.approx(2.0)
    r = _run("check", str(TINY), str(out), "--fair-share")
    assert r.returncode == 0 and r.stdout == ""


def test_check_reports_violations_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "a.json"
    assert main(["solve", str(TINY), "--mechanism", "greedy", "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    doc["jobs"][0]["throughput"] = 99.0
    out.write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["check", str(TINY), str(out)]) == 1
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines == ["throughput: a: reports 99, floor look-up gives 1.2"]


def test_stdout_equals_file_and_is_deterministic(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inst = INSTANCES / "paper-128gpu.json"
    outs = []
    for k in range(2):
        f = tmp_path / f"a{k}.json"
        assert main(["solve", str(inst), "--mechanism", "tune", "-o", str(f)]) == 0
        d = json.loads(f.read_text())
        d["solve_seconds"] = 0
        outs.append(d)
    assert outs[0] == outs[1]
    capsys.readouterr()
    assert main(["solve", str(inst), "--mechanism", "tune"]) == 0
    d = json.loads(capsys.readouterr().out)
    d["solve_seconds"] = 0
    assert d == outs[0]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["solve", str(TINY), "--mechanism", "nope"], "--mechanism: unknown mechanism 'nope'"),
        (["solve", str(TINY), "--mechanism", "tune", "--time-limit", "-1"], "--time-limit"),
        (["solve", str(TINY), "--mechanism", "tune", "--solver", "cplex"], "--solver"),
        (["generate", "--split", "1,2"], "--split"),
        (["generate", "--gpu-mix", "1:x"], "--gpu-mix"),
        (["generate", "--servers", "0"], "--servers"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_usage_errors_exit_2_one_line(
    args: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        rc = main(args)
        raise SystemExit(rc)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err


def test_generate_is_seeded_and_valid(tmp_path: Path) -> None:
    a, b, c = (tmp_path / n for n in ("a.json", "b.json", "c.json"))
    base = ["generate", "--servers", "4", "--workload", "multi-gpu", "--gpu-load", "1.2"]
    assert main([*base, "--seed", "5", "-o", str(a)]) == 0
    assert main([*base, "--seed", "5", "-o", str(b)]) == 0
    assert main([*base, "--seed", "6", "-o", str(c)]) == 0
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()
    inst = load_instance(a)
    assert sum(j.gpus for j in inst.jobs) >= 1.2 * 32
    assert {j.gpus for j in inst.jobs} <= {1, 2, 4, 8}
    d = tmp_path / "d.json"
    assert main(["generate", "--jobs", "50", "--split", "100,0,0", "-o", str(d)]) == 0
    assert {j.category for j in load_instance(d).jobs} == {"image"}


def test_demo_runs_and_checks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "-o", str(tmp_path / "demo")]) == 0
    out = capsys.readouterr().out
    assert "tune" in out and "proportional" in out
    assert (tmp_path / "demo" / "allocation-tune.json").exists()
    # opt-exact runs too and proves the round: its row is 1.000 of itself, with a bound equal
    # to its total, and nothing in the table beats it.
    exact = json.loads((tmp_path / "demo" / "allocation-opt-exact.json").read_text())
    assert exact["upper_bound"] == pytest.approx(exact["total_throughput"], rel=1e-4)
    rows = {ln.split()[0]: ln.split() for ln in out.splitlines()[2:] if ln.strip()}
    assert rows["opt-exact"][3] == "1.000"
    assert all(float(r[3]) <= 1.0 + 1e-9 for r in rows.values())
    assert "did not prove" not in out


def test_demo_refuses_a_bad_exact_time_limit(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as e:
        main(["demo", "-o", str(tmp_path / "demo"), "--exact-time-limit", "0"])
    assert e.value.code == 2


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["generate", "--servers", "1", "--jobs", "2", "--name", "r\udcff"], "--name"),
        (
            ["profile", "--command", "echo throughput: 1 \udcff {cpus}", "--max-cpus", "2"],
            "--command",
        ),
        (["profile", "--model", "res\udcff18"], "--model"),
    ],
)
def test_text_options_that_are_not_utf8_exit_2_and_leave_the_output(
    args: list[str], option: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A byte that is not UTF-8 in a name or command reaches Python as a surrogate, which no
    output file can hold: it is refused as bad input before anything runs or is written
    (it was a UnicodeEncodeError traceback, exit 1, from the atomic write)."""
    out = tmp_path / "out.json"
    out.write_text("kept")
    with pytest.raises(SystemExit) as e:
        raise SystemExit(main([*args, "-o", str(out)]))
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and option in err[0] and "not UTF-8 text" in err[0], err
    assert out.read_text() == "kept"
