"""``bench/bench_contents_ip.py``: the integral contents as shipped against HiGHS's plain
MIP, side by side; both find contents on the same rounds, and bad arguments exit 2."""

from __future__ import annotations

import re

import pytest

from tests.conftest import bench_module


def test_the_table_shows_both_ways(capsys: pytest.CaptureFixture[str]) -> None:
    bench = bench_module("bench_contents_ip")
    assert bench.main(["--quick"]) == 0  # single-GPU 128 seed 7, one pass
    out = capsys.readouterr().out
    (row,) = [line for line in out.splitlines() if "single-gpu 128/7" in line]
    cells = row.split()
    contents = int(cells[2])
    plain_ms, shipped_ms, ratio = (float(c) for c in cells[3:6])
    assert contents > 0 and plain_ms > 0 and shipped_ms > 0
    assert ratio == pytest.approx(plain_ms / shipped_ms, rel=1e-2)
    assert cells[6:] == ["True", "True"]  # the same IP: both find contents
    assert re.search(r"^\s*sum\s", out, flags=re.MULTILINE)


@pytest.mark.parametrize(
    "argv",
    [
        ["--rounds", "x"],
        ["--rounds", "no-such-family:128:1"],
        ["--passes", "0"],
    ],
)
def test_bad_arguments_exit_2(argv: list[str]) -> None:
    bench = bench_module("bench_contents_ip")
    with pytest.raises(SystemExit) as e:
        bench.main(argv)
    assert e.value.code == 2
