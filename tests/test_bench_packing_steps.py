"""``bench/bench_packing_steps.py``: the packing route as shipped against its steps before,
side by side; its rows carry each variant's parts, and bad arguments exit 2."""

from __future__ import annotations

import re

import pytest

from tests.conftest import bench_module


def test_the_table_shows_every_variants_packing(capsys: pytest.CaptureFixture[str]) -> None:
    bench = bench_module("bench_packing_steps")
    assert bench.main(["--quick"]) == 0  # multi-GPU 128 seed 7, one pass
    out = capsys.readouterr().out
    (row,) = [line for line in out.splitlines() if "multi-gpu 128/7" in line]
    # before: the first packing kept (its fewer-parts solve found none); CP-SAT's fewer
    # parts from the first packing; now: parts dropped by max-flows
    assert "(108, 19)" in row and "(89, 14)" in row and "(83, 10)" in row
    cells = row.split()
    before_ms, cp_sat_ms, now_ms, before_ratio, cp_sat_ratio = (float(c) for c in cells[2:7])
    assert before_ms > 0 and cp_sat_ms > 0 and now_ms > 0
    assert before_ratio == pytest.approx(before_ms / now_ms, rel=1e-2)
    assert cp_sat_ratio == pytest.approx(cp_sat_ms / now_ms, rel=1e-2)
    assert re.search(r"^\s*sum\s", out, flags=re.MULTILINE)


@pytest.mark.parametrize(
    "argv",
    [
        ["--rounds", "x"],
        ["--rounds", "no-such-family:128:1"],
        ["--rounds", "multi-gpu:100:1"],
        ["--rounds", "multi-gpu:128:-1"],
        ["--passes", "0"],
    ],
)
def test_bad_arguments_exit_2(argv: list[str]) -> None:
    bench = bench_module("bench_packing_steps")
    with pytest.raises(SystemExit) as e:
        bench.main(argv)
    assert e.value.code == 2
