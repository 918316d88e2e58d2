"""``bench/bench_packing_lp.py``: the LP and CP-SAT side by side on the same packings; its
totals say what each settled, and bad arguments exit 2."""

from __future__ import annotations

import re

import pytest

from tests.conftest import bench_module


def test_the_table_counts_what_each_settles(capsys: pytest.CaptureFixture[str]) -> None:
    bench = bench_module("bench_packing_lp")
    # split penalties 128 GPUs: seed 2's full-server points are refuted by the LP (CP-SAT
    # runs out of its budget there), seed 4's are packed (from the LP's integral contents;
    # CP-SAT alone needs 1.17 units)
    assert bench.main(["--seeds", "2:5", "--budget", "0.3"]) == 0
    out = capsys.readouterr().out
    rows = {
        int(line.split()[0]): line.split()
        for line in out.splitlines()
        if re.match(r"\s*\d+\s+(full-server|pooled)\s", line)
    }
    assert set(rows) == {2, 3, 4}
    assert rows[2][5] == "refuted" and rows[4][5] == "-"
    assert rows[4][10] == "packed"  # from the LP's integral contents
    assert re.search(r"the LP's integral contents pack \d+", out)
    totals = re.search(r"(\d+) rounds: CP-SAT packs (\d+); the LP refutes (\d+)", out)
    assert totals is not None
    n, packed, refuted = (int(g) for g in totals.groups())
    assert n == 3 and refuted >= 1 and packed + refuted <= n


def test_the_arc_flow_settles_what_the_lp_and_cp_sat_leave(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Split penalties 128 GPUs seed 9 (pooled points): the LP does not refute them, CP-SAT
    runs out of its budget, the integral contents find no packing; the arc flow refutes."""
    bench = bench_module("bench_packing_lp")
    assert bench.main(["--seeds", "9:10", "--budget", "0.3"]) == 0
    out = capsys.readouterr().out
    (row,) = [line.split() for line in out.splitlines() if re.match(r"\s*9\s+pooled\s", line)]
    assert row[5] == "-" and row[10] == "none" and row[12] == "refuted"
    assert re.search(r"the arc flow refutes 1 of what is left", out)
    assert "none of them settles 0" in out


@pytest.mark.parametrize(
    "argv", [["--seeds", "3:1"], ["--seeds", "x"], ["--budget", "0"], ["--gpus", "40"]]
)
def test_bad_arguments_exit_2(argv: list[str]) -> None:
    bench = bench_module("bench_packing_lp")
    with pytest.raises(SystemExit) as e:
        bench.main(argv)
    assert e.value.code == 2
