"""``synergy-opt sweep``/``report`` end to end on the shipped smoke spec.

The done-when of the sweep issue, as tests: an uninterrupted run, a run killed with
SIGKILL half-way and rerun, and a run on a two-worker Dask LocalCluster all give the same
report table (timing columns excluded).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from synergy_opt.cli import main
from synergy_opt.sweep import finished_keys, load_spec, table
from synergy_opt.sweep.runner import TMP_PREFIX, cells_dir

ROOT = Path(__file__).resolve().parent.parent
SMOKE = ROOT / "instances" / "sweeps" / "smoke.toml"
N_CELLS = len(load_spec(SMOKE).cells())
#: Upper bound on the waits below (a loaded shared machine); never a timing assertion.
PATIENCE_S = 300.0


def sweep_cmd(out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "synergy_opt", "sweep", str(SMOKE), "-o", str(out), *extra]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted smoke sweep (two local processes) and its report."""
    out = tmp_path_factory.mktemp("sweep") / "ref"
    subprocess.run(sweep_cmd(out, "--workers", "2", "--quiet"), check=True, timeout=PATIENCE_S)
    assert main(["report", str(out), "--quiet"]) == 0
    return out


def test_uninterrupted_sweep_and_report(reference: Path) -> None:
    assert len(finished_keys(reference)) == N_CELLS
    report = reference / "report"
    for name in ("report.csv", "speedup.csv", "avg_jct.png", "p99_jct.png", "speedup.png"):
        assert (report / name).stat().st_size > 0
    header, rows = table(reference)
    assert len(rows) == N_CELLS
    assert {r[header.index("mechanism")] for r in rows} == {"proportional", "tune"}
    # Every measured job finished in every cell (the smoke spec is not a truncated run).
    measured = header.index("jobs_measured")
    finished = header.index("jobs_measured_finished")
    assert all(r[measured] == r[finished] == "60" for r in rows)


def test_rerun_of_a_finished_sweep_runs_nothing(
    reference: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = {p.name: p.stat().st_mtime_ns for p in cells_dir(reference).iterdir()}
    assert main(["sweep", str(SMOKE), "-o", str(reference), "--quiet"]) == 0
    after = {p.name: p.stat().st_mtime_ns for p in cells_dir(reference).iterdir()}
    assert before == after


def test_killed_sweep_resumes_to_the_same_table(reference: Path, tmp_path: Path) -> None:
    out = tmp_path / "killed"
    # One worker makes the run long enough to be caught half-way; its own session lets
    # the whole process group (pool workers included) be killed at once.
    proc = subprocess.Popen(
        sweep_cmd(out, "--workers", "1", "--quiet"),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + PATIENCE_S
    while len(finished_keys(out)) < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done = len(finished_keys(out))
    assert 0 < done < N_CELLS, f"the kill landed outside the run ({done} of {N_CELLS} done)"
    # What a kill during a cell's write leaves behind: a half-written temporary folder.
    stale = cells_dir(out) / f"{TMP_PREFIX}half-written-0000"
    stale.mkdir()
    (stale / "summary.json").write_text('{"avg_jct', encoding="utf-8")
    subprocess.run(sweep_cmd(out, "--workers", "2", "--quiet"), check=True, timeout=PATIENCE_S)
    assert not stale.exists()
    assert sorted(p.name for p in cells_dir(out).iterdir()) == sorted(finished_keys(reference))
    assert table(out, timing=False) == table(reference, timing=False)


def test_dask_local_cluster_gives_the_same_table(reference: Path, tmp_path: Path) -> None:
    out = tmp_path / "dask"
    res = subprocess.run(
        sweep_cmd(out, "--dask", "local", "--workers", "2"),
        timeout=PATIENCE_S,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert f"{N_CELLS} cells" in res.stderr  # the progress bar reached the end
    assert table(out, timing=False) == table(reference, timing=False)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["sweep", "missing.toml", "-o", "x"], "missing.toml: no such file"),
        (["sweep", str(SMOKE), "-o", "x", "--dask", "nowhere"], "--dask: expected 'local'"),
        (["report", "no-such-dir"], "not a sweep folder"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    argv: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_bad_value_in_a_spec_fails_before_any_cell_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "bad.toml"
    spec.write_text('[axes]\npolicy = ["fifo", "fifoo"]\n', encoding="utf-8")
    assert main(["sweep", str(spec), "-o", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"{spec}: axes.policy[1]: unknown policy 'fifoo'") and "\n" not in err
    assert not (tmp_path / "out").exists()


def test_dry_run_lists_the_cells(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["sweep", str(SMOKE), "-o", str(tmp_path / "o"), "--dry-run"]) == 0
    keys = capsys.readouterr().out.split()
    assert keys == [c.key for c in load_spec(SMOKE).cells()]
    assert not (tmp_path / "o").exists()
