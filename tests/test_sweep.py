"""Sweeps in-process: spec parsing, canonical cells, atomic cell folders, resume, aggregation.

The runner is exercised with a cheap fake cell function whose results are known, so the
resume and aggregation rules are checked exactly; one real simulation cell checks that a
cell is a pure function of its options.  The command-line kill/resume and Dask paths are in
``test_sweep_cli.py``.
"""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

import pytest

from synergy_opt.io import dumps
from synergy_opt.sweep import (
    TIMING_COLUMNS,
    Cell,
    SpecError,
    SweepError,
    aggregate,
    finished_keys,
    load_rows,
    load_spec,
    make_cell,
    run_cells,
    run_sweep,
    simulate_cell,
    spec_from_dict,
    table,
    validate_cell,
    write_report,
)
from synergy_opt.sweep.runner import TMP_PREFIX, _Lock, cells_dir, remove_stale, store_cell
from synergy_opt.sweep.spec import option_default

ABS_TOL = REL_TOL = 1e-6
ROOT = Path(__file__).resolve().parent.parent
SMOKE = ROOT / "instances" / "sweeps" / "smoke.toml"

#: avg JCT (hours) the fake cell gives each mechanism at load 1; it grows linearly with load.
FAKE_JCT = {"proportional": 12.0, "greedy": 9.0, "tune": 4.0}


def fake_cell(cell: Cell) -> dict[str, str]:
    """A deterministic stand-in for a simulation (module level: picklable for the pool)."""
    if cell.get("policy") == "las" and cell.get("seed") == 1:
        raise RuntimeError("planned failure")
    rate = cell.get("arrival_rate")
    jct = FAKE_JCT[cell.get("mechanism")] * rate + cell.get("seed")
    summary = {
        "format": "synergy-sim-summary/1",
        "policy": cell.get("policy"),
        "mechanism": cell.get("mechanism"),
        "avg_jct_hours": jct,
        "p99_jct_hours": 2 * jct,
        "short_jobs": {"jobs": 3, "avg_jct_hours": jct / 2},
        "seed": cell.get("seed"),
        "wall_seconds": float(os.getpid()),  # differs between runs, like a real timing
        "mechanism_seconds_per_round": {"mean": 0.1, "p99": 0.2, "max": 0.3},
    }
    return {"summary.json": dumps(summary), "jobs.csv": f"id\nj{cell.get('seed')}\n"}


def fake_spec(policies: tuple[str, ...] = ("fifo",)) -> dict[str, object]:
    return {
        "sweep": {"name": "fake"},
        "base": {"servers": 2},
        "axes": {
            "policy": list(policies),
            "mechanism": ["proportional", "greedy", "tune"],
            "arrival_rate": [1, 2.0],
            "seed": [0, 1],
        },
    }


# --------------------------------------------------------------------------- specs


def test_smoke_spec_is_the_full_cross_product() -> None:
    spec = load_spec(SMOKE)
    cells = spec.cells()
    assert len(cells) == 2 * 2 * 3 * 2
    assert len({c.key for c in cells}) == len(cells)
    assert spec.axis_names == ("policy", "mechanism", "arrival_rate", "seed")
    for c in cells:
        validate_cell(c)


def test_cell_keys_are_canonical() -> None:
    a = make_cell({"arrival-rate": 4, "seed": 0, "policy": "fifo", "split": "20,70,10"})
    b = make_cell({"arrival_rate": 4.0})
    assert a == b and a.key == b.key  # int vs float, dash vs underscore, defaults dropped
    c = make_cell({"arrival_rate": 4.0, "seed": 1})
    assert c.key != a.key
    assert c.key.startswith("fifo_tune_arrivalrate4_seed1__")
    assert c.get("servers") == option_default("servers") == 16


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"axes": {"polcy": ["fifo"]}}, "axes.polcy: unknown option"),
        ({"axes": {"arrival_rate": [1.0, "x"]}}, "axes.arrival_rate[1]: expected 0 or a number"),
        ({"axes": {"seed": [-1]}}, "axes.seed[0]: must be an integer in [0, "),
        ({"axes": {"seed": []}}, "axes.seed: expected a non-empty list"),
        ({"axes": {"seed": [1, 1]}}, "axes.seed: values repeat"),
        ({"base": {"seed": 1}, "axes": {"seed": [2]}}, "axes.seed: also set in [base]"),
        (
            {"base": {"window": "5:2"}, "axes": {"seed": [2]}},
            "base.window: expected 0 <= FIRST < LAST",
        ),
        ({"base": {"split": [1, 2]}, "axes": {"seed": [2]}}, "base.split: expected three"),
        ({"base": {"cpus_per_gpu": 3, "cpus_per_server": 24}, "axes": {"seed": [0]}}, "not both"),
        ({"axes": {}}, "axes: expected a table with at least one"),
        ({"axis": {"seed": [0]}}, "axis: unknown table"),
        ({"sweep": {"nmae": "x"}, "axes": {"seed": [0]}}, "sweep.nmae: unknown field"),
    ],
)
def test_bad_specs_name_the_field(data: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=None) as err:
        spec_from_dict(data, "s.toml")
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_bad_toml_and_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[axes\nseed = [", encoding="utf-8")
    with pytest.raises(SpecError, match="bad.toml: not valid TOML"):
        load_spec(bad)
    with pytest.raises(SpecError, match="no such file"):
        load_spec(tmp_path / "missing.toml")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"policy": "fifoo"}, "policy: unknown policy 'fifoo'"),
        ({"mechanism": "magic"}, "mechanism: unknown mechanism 'magic'"),
        ({"workload": "triple-gpu"}, "workload: unknown workload"),
        ({"jobs": 10, "window": "5:20"}, "window: ends at job 20 but only 10 jobs"),
        ({"round_seconds": 10.0, "preemption_cost_s": 20.0}, "preemption_cost_s"),
    ],
)
def test_semantic_checks_before_running(options: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError) as err:
        validate_cell(make_cell(options))
    assert message in str(err.value)


def test_cpu_gpu_ratio_sets_cores_per_server() -> None:
    cell = make_cell({"servers": 2, "cpus_per_gpu": 5, "jobs": 8, "arrival_rate": 0.0})
    summary = json.loads(simulate_cell(cell)["summary.json"])
    assert summary["cluster"] == {"servers": 2, "gpus": 16, "cpus": 80, "mem_gb": 1000.0}


def test_a_simulation_cell_is_a_pure_function_of_its_options() -> None:
    cell = make_cell({"servers": 2, "jobs": 30, "arrival_rate": 3.0, "seed": 4, "policy": "srtf"})
    a, b = simulate_cell(cell), simulate_cell(cell)
    assert a["jobs.csv"] == b["jobs.csv"]
    sa, sb = json.loads(a["summary.json"]), json.loads(b["summary.json"])
    for k in ("wall_seconds", "mechanism_seconds_per_round"):
        sa.pop(k), sb.pop(k)
    assert sa == sb
    assert sa["seed"] == 4 and sa["policy"] == "srtf" and sa["jobs_measured"] == 30


# --------------------------------------------------------------------------- folders


def test_store_is_atomic_and_never_overwrites(tmp_path: Path) -> None:
    cell = make_cell({"seed": 3})
    assert store_cell(tmp_path, cell, {"summary.json": "{}\n"})
    final = cells_dir(tmp_path) / cell.key
    assert sorted(p.name for p in final.iterdir()) == ["cell.json", "summary.json"]
    assert not store_cell(tmp_path, cell, {"summary.json": "other\n"})
    assert (final / "summary.json").read_text() == "{}\n"
    assert [p.name for p in cells_dir(tmp_path).iterdir()] == [cell.key]  # no temp left
    with pytest.raises(ValueError, match="plain name"):
        store_cell(tmp_path, make_cell({"seed": 4}), {"../x": ""})
    assert finished_keys(tmp_path) == {cell.key}


def test_stale_temporary_folders_are_removed_and_never_counted(tmp_path: Path) -> None:
    stale = cells_dir(tmp_path) / f"{TMP_PREFIX}somecell-1234"
    stale.mkdir(parents=True)
    (stale / "summary.json").write_text("{partial", encoding="utf-8")
    assert finished_keys(tmp_path) == set()
    assert remove_stale(tmp_path) == 1
    assert not stale.exists()


def test_a_second_sweep_on_the_same_folder_is_refused(tmp_path: Path) -> None:
    lock = _Lock(tmp_path)
    try:
        with pytest.raises(SweepError, match="another sweep is writing"):
            run_cells([make_cell({})], tmp_path, fn=fake_cell, workers=1)
    finally:
        lock.release()


# --------------------------------------------------------------------------- resume


@pytest.mark.parametrize("workers", [1, 2])
def test_resume_runs_only_what_is_missing(tmp_path: Path, workers: int) -> None:
    spec = spec_from_dict(fake_spec(("fifo", "las")), "fake.toml")
    cells = spec.cells()
    first = run_cells(cells[:5], tmp_path, fn=fake_cell, workers=workers)
    assert (first.ran, first.skipped, first.failed) == (5, 0, ())
    second = run_sweep(spec, tmp_path, fn=fake_cell, workers=workers)
    las_seed1 = [c for c in cells if c.get("policy") == "las" and c.get("seed") == 1]
    assert second.skipped == 5
    assert second.ran == len(cells) - 5 - len(las_seed1)
    assert sorted(k for k, _ in second.failed) == sorted(c.key for c in las_seed1)
    assert all("planned failure" in msg for _, msg in second.failed)
    assert not second.complete
    assert finished_keys(tmp_path) == {c.key for c in cells} - {c.key for c in las_seed1}
    # A rerun retries only the failed cells (they still fail) and runs nothing else.
    third = run_sweep(spec, tmp_path, fn=fake_cell, workers=workers)
    assert (third.ran, third.skipped, len(third.failed)) == (0, len(cells) - len(las_seed1), 6)


def test_resumed_table_equals_uninterrupted_table(tmp_path: Path) -> None:
    spec = spec_from_dict(fake_spec(), "fake.toml")
    cells = spec.cells()
    run_cells(cells[3:7], tmp_path / "a", fn=fake_cell, workers=1)
    run_sweep(spec, tmp_path / "a", fn=fake_cell, workers=2)
    run_sweep(spec, tmp_path / "b", fn=fake_cell, workers=1)
    assert table(tmp_path / "a", timing=False) == table(tmp_path / "b", timing=False)
    assert table(tmp_path / "a") != table(tmp_path / "b")  # wall_seconds = the worker's pid


def dying_cell(cell: Cell) -> dict[str, str]:
    """Like :func:`fake_cell`, but the worker process dies abruptly on seed 1."""
    if cell.get("seed") == 1:
        os._exit(3)
    return fake_cell(cell)


def test_a_dead_pool_worker_stops_the_sweep_with_one_line_and_rerun_completes(
    tmp_path: Path,
) -> None:
    spec = spec_from_dict(fake_spec(), "fake.toml")
    with pytest.raises(SweepError, match="worker process died.*rerun"):
        run_sweep(spec, tmp_path, fn=dying_cell, workers=2, validate=False)
    d = cells_dir(tmp_path)
    assert not d.exists() or not any(p.name.startswith(TMP_PREFIX) for p in d.iterdir())
    done = finished_keys(tmp_path)
    assert all(make_cell(dict(c.options)).get("seed") == 0 for c in spec.cells() if c.key in done)
    out = run_sweep(spec, tmp_path, fn=fake_cell, workers=2)
    assert out.complete and out.skipped == len(done)
    run_sweep(spec, tmp_path / "ref", fn=fake_cell, workers=1)
    assert table(tmp_path, timing=False) == table(tmp_path / "ref", timing=False)


# --------------------------------------------------------------------------- report


def test_report_rows_columns_and_speedups(tmp_path: Path) -> None:
    spec = spec_from_dict(fake_spec(), "fake.toml")
    run_sweep(spec, tmp_path, fn=fake_cell, workers=1)
    header, body = table(tmp_path)
    assert header[:6] == ["key", "policy", "mechanism", "arrival_rate", "seed", "servers"]
    assert header[-len(TIMING_COLUMNS) :] == list(TIMING_COLUMNS)
    assert "short_jobs.avg_jct_hours" in header and "format" not in header
    assert len(body) == 12
    mech = [r[2] for r in body]
    assert mech == sorted(mech)  # rows sorted by their options
    rows = load_rows(tmp_path)
    points = aggregate(rows, ["policy", "mechanism", "arrival_rate", "seed", "servers"])
    assert len(points) == 6 and all(p.seeds == 2 for p in points)
    for p in points:
        rate, m = p.get("arrival_rate"), p.get("mechanism")
        mean_jct = FAKE_JCT[m] * rate + 0.5  # seeds 0 and 1 add 0 and 1 hour
        assert p.avg_jct_hours == pytest.approx(mean_jct, rel=REL_TOL, abs=ABS_TOL)
        assert p.p99_jct_hours == pytest.approx(2 * mean_jct, rel=REL_TOL, abs=ABS_TOL)
        expected = (FAKE_JCT["proportional"] * rate + 0.5) / mean_jct
        assert p.speedup_avg == pytest.approx(expected, rel=REL_TOL, abs=ABS_TOL)
    files = write_report(tmp_path)
    assert [p.name for p in files.plots] == ["avg_jct.png", "p99_jct.png", "speedup.png"]
    assert all(p.stat().st_size > 1000 for p in files.plots)
    rows_csv = list(csv.DictReader(io.StringIO(files.speedup.read_text())))
    tune2 = next(r for r in rows_csv if r["mechanism"] == "tune" and r["arrival_rate"] == "2.0")
    assert float(tune2["speedup_avg"]) == pytest.approx(24.5 / 8.5, rel=REL_TOL)


def test_report_of_a_damaged_or_missing_folder(tmp_path: Path) -> None:
    from synergy_opt.sweep import ReportError

    with pytest.raises(ReportError, match="not a sweep folder"):
        load_rows(tmp_path)
    bad = cells_dir(tmp_path) / "x__0"
    bad.mkdir(parents=True)
    (bad / "cell.json").write_text("{}", encoding="utf-8")
    with pytest.raises(ReportError, match="damaged cell folder"):
        load_rows(tmp_path)


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        ("garbage", "sweep.json: not valid JSON"),
        ("[1]", "sweep.json: expected an object"),
        ('{"format": "synergy-sweep/9", "axes": []}', "sweep.json: format: expected"),
        ('{"format": "synergy-sweep/1", "axes": "seed"}', "sweep.json: axes: expected a list"),
    ],
)
def test_report_refuses_a_damaged_manifest_and_reads_a_folder_without_one(
    tmp_path: Path, manifest: str, message: str
) -> None:
    """The report once read any sweep.json (garbage, a wrong format) as 'no axes' and wrote
    its table; a damaged manifest is now one line naming it.  A folder without one (cells
    only) still reports: the cells are the record, the axes only order the columns."""
    from synergy_opt.sweep import ReportError
    from synergy_opt.sweep.runner import MANIFEST

    run_sweep(spec_from_dict(fake_spec(), "fake.toml"), tmp_path, fn=fake_cell, workers=1)
    good = table(tmp_path)
    path = tmp_path / MANIFEST
    path.write_text(manifest, encoding="utf-8")
    with pytest.raises(ReportError) as err:
        table(tmp_path)
    assert message in str(err.value) and "\n" not in str(err.value)
    path.unlink()
    assert len(table(tmp_path)[1]) == len(good[1])


def test_a_spec_without_a_name_takes_its_file_stem() -> None:
    spec = spec_from_dict({"axes": {"seed": [0]}}, "dir/my-sweep.toml")
    assert spec.name == "my-sweep"
