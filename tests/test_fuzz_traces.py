"""``bench/fuzz_traces.py``: odd traces through ``simulate`` run clean, the draws cover what
the script claims, and a broken promise is reported."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import bench_module


def test_a_few_seeds_run_clean(capsys: pytest.CaptureFixture[str]) -> None:
    fz = bench_module("fuzz_traces")
    assert fz.main(["--seeds", "0:4"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("4 seeds") and " 0 bad" in last, last


def test_the_seed_that_raised_runs_clean(tmp_path: Path) -> None:
    """Seed 23: ``--semantics artifact`` on a cluster whose largest servers have no cores
    raised while building a job's matrix (a traceback, exit 1; the code before this test,
    run from a second worktree)."""
    fz = bench_module("fuzz_traces")
    d = fz.draw(23)
    assert "artifact" in d.options
    assert any(s["cpus"] == 0 for s in d.cluster["servers"])
    rc, why = fz.problem(d, tmp_path)
    assert why is None, why
    assert rc in (0, 1)


def test_the_draws_cover_what_they_claim() -> None:
    fz = bench_module("fuzz_traces")
    drawn = [fz.draw(s) for s in range(150)]
    servers = [s for d in drawn for s in d.cluster["servers"]]
    assert any(s["cpus"] == 0 for s in servers)
    assert any("gpu_type" in s for s in servers)
    opts = [" ".join(d.options) for d in drawn]
    for word in ("--fair-share cluster", "--fair-share server", "--semantics artifact"):
        assert any(word in o for o in opts), word
    assert {m for m in fz.MECHANISMS if any(f"--mechanism {m} " in o for o in opts)} == set(
        fz.MECHANISMS
    )
    assert "opt-exact" not in fz.MECHANISMS
    arrivals = [[float(r["arrival_s"]) for r in d.rows] for d in drawn]
    assert any(a != sorted(a) for a in arrivals)  # rows out of order
    assert any(len(set(a)) < len(a) for a in arrivals)  # simultaneous arrivals
    assert any(any("," in r.get("note", "") for r in d.rows) for d in drawn)
    largest = [max(s["gpus"] for s in d.cluster["servers"]) for d in drawn]
    assert any(any(int(r["gpus"]) > g for r in d.rows) for d, g in zip(drawn, largest, strict=True))


@pytest.mark.parametrize(
    ("rc", "err", "said"),
    [
        (1, "Traceback (most recent call last):\n  File x\nValueError: boom\n", "a traceback"),
        (2, "trace.csv: line 2: gpus: bad\nand a second line\n", "exit 2 with 2 lines"),
        (-9, "", "exit -9"),
    ],
)
def test_a_broken_promise_is_reported(
    rc: int, err: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    fz = bench_module("fuzz_traces")
    assert fz.main(["--seeds", "0:2"], run=lambda argv: (rc, err)) == 1
    out = capsys.readouterr().out
    assert said in out and "2 bad" in out.strip().splitlines()[-1]


def test_a_run_that_does_not_repeat_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two runs that write different jobs.csv files: not deterministic."""
    fz = bench_module("fuzz_traces")
    calls: list[int] = []

    def fake(argv: list[str]) -> tuple[int, str]:
        out = Path(argv[argv.index("-o") + 1])
        out.mkdir()
        (out / "summary.json").write_text('{"jobs_measured": 1, "wall_seconds": 1}')
        header = "id,model,gpus,arrival_hours,start_hours,finish_hours,jct_hours,measured\n"
        row = f"j0,m5,1,0,0,{1 + len(calls)},1,1\n"
        (out / "jobs.csv").write_text(header + row)
        calls.append(1)
        return 0, ""

    assert fz.main(["--seeds", "0:1"], run=fake) == 1
    assert "another summary.json or jobs.csv" in capsys.readouterr().out
