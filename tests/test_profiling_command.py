"""The command back-end and ``synergy-opt profile`` on the real shipped workload.

These run real processes: the shipped decode/augment pipeline at 1 and 2 workers (small
sizes, a few seconds in all), and tiny shell commands for pinning, failure and timeout.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from synergy_opt.cli import main
from synergy_opt.io import matrix_from_dict
from synergy_opt.profiling import (
    CommandBackend,
    MeasurementError,
    ProfilingError,
    available_cpus,
    parse_throughput,
    profile_job,
)
from synergy_opt.profiling.workload import augment, synthetic_jpegs

ABS_TOL = REL_TOL = 1e-6
PY = sys.executable
WORKLOAD = (
    f"{PY} -m synergy_opt.profiling.workload --workers {{cpus}} "
    "--samples 120 --image-size 64 --out-size 48"
)
#: Prints how many cores it may run on, as its "throughput": checks the pinning itself.
AFFINITY = f"{PY} -c \"import os; print('throughput:', len(os.sched_getaffinity(0)))\" {{cpus}}"
CORES = len(available_cpus())


# --------------------------------------------------------------------------- parsing


def test_parse_takes_last_throughput_line_with_units() -> None:
    out = "warming up\nthroughput: 10\nTHROUGHPUT: 1.5e3 samples/s\nbye\n"
    assert parse_throughput(out) == 1500.0


@pytest.mark.parametrize("out", ["", "speed: 3\n", "throughput: fast\n", "throughput: -2\n"])
def test_parse_rejects_missing_or_bad_lines(out: str) -> None:
    with pytest.raises(MeasurementError):
        parse_throughput(out)


# --------------------------------------------------------------------------- back-end


def test_each_point_is_pinned_to_that_many_cores() -> None:
    b = CommandBackend(AFFINITY, timeout_s=30)
    for c in range(1, CORES + 1):
        assert b(c) == c


def test_more_cores_than_the_machine_has_is_a_failed_point() -> None:
    b = CommandBackend(AFFINITY, timeout_s=30)
    with pytest.raises(MeasurementError, match=f"cannot pin {CORES + 1} cores"):
        b(CORES + 1)


def test_non_zero_exit_reports_status_and_stderr_tail() -> None:
    b = CommandBackend("echo 'disk on fire' >&2; exit 3 # {cpus}", timeout_s=30)
    with pytest.raises(MeasurementError, match=r"exit status 3; stderr: disk on fire"):
        b(1)


def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    cmd = f"sleep 60 & echo $! > {pidfile}; wait # {{cpus}}"
    b = CommandBackend(cmd, timeout_s=0.5)
    t0 = time.monotonic()
    with pytest.raises(MeasurementError, match="timed out after 0.5 s"):
        b(1)
    assert time.monotonic() - t0 < 20
    pid = int(pidfile.read_text())
    time.sleep(0.2)
    state = Path(f"/proc/{pid}/stat")
    # Gone, or a zombie waiting for init to reap it: either way no longer sleeping.
    assert not state.exists() or state.read_text().split(") ")[1][0] in "ZX"


def test_missing_placeholder_is_rejected() -> None:
    with pytest.raises(ProfilingError, match=r"\{cpus\}"):
        CommandBackend("python train.py", timeout_s=1)


def test_one_failing_point_does_not_crash_the_profile() -> None:
    cmd = 'if [ {cpus} -eq 1 ]; then exit 4; fi; echo "throughput: {cpus}"'
    rep = profile_job(CommandBackend(cmd, timeout_s=30), max_cpus=CORES, mem_gb=(100.0,))
    status = {m.cpus: m.ok for m in rep.cpu.measurements}
    assert status[1] is False
    assert any("1 cpus: exit status 4" in n for n in rep.notes)
    if CORES >= 2:
        assert status[2] is True and rep.matrix.lookup(2, 100.0) == 2.0


# --------------------------------------------------------------------------- workload


def test_workload_pipeline_produces_normalised_chw_samples() -> None:
    import numpy as np

    imgs = synthetic_jpegs(2, 64, seed=1)
    assert imgs == synthetic_jpegs(2, 64, seed=1)  # seeded: same bytes
    out = augment(imgs[0], 48, np.random.default_rng(0))
    assert out.shape == (3, 48, 48) and out.dtype == np.float32
    assert -3.0 < float(out.mean()) < 3.0


def test_shipped_workload_runs_at_one_and_two_workers() -> None:
    b = CommandBackend(WORKLOAD, timeout_s=120)
    rates = [b(c) for c in range(1, min(2, CORES) + 1)]
    assert all(r > 0 for r in rates)


# --------------------------------------------------------------------------- CLI


def test_cli_profiles_the_shipped_workload_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "profile.json"
    rc = main(
        [
            "profile", "--command", WORKLOAD, "--max-cpus", "8",
            "--dataset-gb", "140", "--storage-mbps", "200", "--mb-per-sample", "0.11",
            "--timeout", "120", "-o", str(out),
        ]
    )  # fmt: skip
    assert rc == 0
    d = json.loads(out.read_text())
    assert d["max_cpus"] == min(8, CORES)
    assert d["points_measured"] == min(d["max_cpus"], 2)  # the two anchors: all cores, one
    assert d["points_failed"] == 0
    assert d["grid_points"] == d["max_cpus"] * 10
    assert any("capped at" in n for n in d["notes"]) == (CORES < 8)
    w = matrix_from_dict(d["sensitivity"], "sensitivity")
    assert w.mem_gb == tuple(50.0 * k for k in range(1, 11))
    assert all(m["status"] == "ok" and m["throughput"] > 0 for m in d["measurements"])
    assert [p.name for p in tmp_path.iterdir()] == ["profile.json"]  # atomic: no temp left


def test_cli_model_replay_writes_pasteable_sensitivity(tmp_path: Path) -> None:
    out = tmp_path / "m5.json"
    assert main(["profile", "--model", "m5", "--gpus", "2", "-o", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["points_measured"] <= 8 and d["grid_points"] == 120
    w = matrix_from_dict(d["sensitivity"], "sensitivity")
    assert w.mem_gb[0] == 125.0 and w.cpus[-1] % 2 == 0  # both axes scaled by 2 GPUs
    again = tmp_path / "again.json"
    assert main(["profile", "--model", "m5", "--gpus", "2", "-o", str(again)]) == 0
    assert out.read_bytes() == again.read_bytes()


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--model", "nosuchnet"], "--model: unknown model"),
        (["--model", "m5", "--threshold", "0"], "--threshold"),
        (["--model", "m5", "--threshold", "abc"], "--threshold"),
        (["--command", "python train.py"], "{cpus}"),
        (["--command", "echo {cpus}", "--dataset-gb", "10"], "--storage-mbps"),
        (["--command", "echo {cpus}", "--gpus", "2"], "--gpus"),
        (["--model", "m5", "--mem-gb", "1,x"], "--mem-gb"),
        (["--model", "m5", "--mem-gb", "1_0,20"], "--mem-gb"),
        (["--model", "m5", "--mem-gb", "10,,20"], "--mem-gb"),
        (["--model", "m5", "--max-points", "1"], "--max-points"),
        (["--model", "m5", "--command", "x {cpus}"], "not allowed"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(
    argv: list[str], needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "p.json"
    with pytest.raises(SystemExit) as exc:
        rc = main(["profile", *argv, "-o", str(out)])
        raise SystemExit(rc)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err
    assert not out.exists()


def test_cli_command_failing_everywhere_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "p.json"
    assert main(["profile", "--command", "exit 5 # {cpus}", "-o", str(out)]) == 1
    assert "no core count could be measured" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="Linux only")
def test_available_cpus_is_the_affinity_set() -> None:
    assert set(available_cpus()) == os.sched_getaffinity(0)


def test_cli_replays_a_user_profile_file(tmp_path: Path) -> None:
    # A user's own profile in the shipped schema: a job that saturates at 4 cores.
    user = {
        "models": {
            "mynet": {
                "category": "image",
                "cpu_points": [1, 2, 4, 8, 16],
                "mem_points_gb": [32, 64],
                "throughput": [[0.3, 0.4], [0.6, 0.7], [1.0, 1.2], [1.0, 1.2], [1.0, 1.2]],
            }
        }
    }
    pfile = tmp_path / "mine.json"
    pfile.write_text(json.dumps(user))
    bare = tmp_path / "bare.json"
    assert main(["profile", "--model", "mynet", "--profiles", str(pfile), "-o", str(bare)]) == 0
    d = json.loads(bare.read_text())
    assert d["max_cpus"] == 16 and d["saturation_cpus"] == 4
    assert d["sensitivity"]["mem_gb"] == [64.0]  # no cache model: only full memory is known
    assert any("no cache model" in n for n in d["notes"])
    modelled = tmp_path / "modelled.json"
    argv = ["profile", "--model", "mynet", "--profiles", str(pfile), "-o", str(modelled)]
    argv += ["--dataset-gb", "100", "--storage-mbps", "50", "--mb-per-sample", "100"]
    assert main(argv) == 0
    w = matrix_from_dict(json.loads(modelled.read_text())["sensitivity"], "sensitivity")
    assert w.mem_gb == (32.0, 64.0)
    # R(32) = 50 / ((1 - 0.32) * 100) = 0.735 caps the 1.2 measured at full memory;
    # R(64) = 50 / ((1 - 0.64) * 100) = 1.39 does not.
    assert w.lookup(4, 32) == pytest.approx(50 / (0.68 * 100), rel=REL_TOL)
    assert w.lookup(4, 64) == pytest.approx(1.2, rel=REL_TOL)


def test_profiled_sensitivity_pastes_into_a_round_instance(tmp_path: Path) -> None:
    from synergy_opt.io import instance_from_dict

    out = tmp_path / "res18.json"
    assert main(["profile", "--model", "res18", "-o", str(out)]) == 0
    sens = json.loads(out.read_text())["sensitivity"]
    inst = instance_from_dict(
        {
            "format": "synergy-round/1",
            "name": "pasted",
            "cluster": {"servers": [{"gpus": 8, "cpus": 24, "mem_gb": 500}]},
            "jobs": [{"id": "j0", "gpus": 1, "model": "res18", "sensitivity": sens}],
        }
    )
    assert inst.fair_share_throughput(inst.jobs[0]) == pytest.approx(1.0, rel=REL_TOL)
