"""``bench/bench_pricing.py``: the MIP and the grid side by side on the same pricing calls;
its totals say what each cost and whether the bounds agree, and bad arguments exit 2."""

from __future__ import annotations

import re

import pytest

from tests.conftest import bench_module


def test_the_table_compares_both_on_the_same_calls(capsys: pytest.CaptureFixture[str]) -> None:
    bench = bench_module("bench_pricing")
    # 32 GPUs seed 4 with every class priced by the MIP: small, so every call is replayed
    assert bench.main(["--gpus", "32", "--seeds", "4", "--all-mip"]) == 0
    out = capsys.readouterr().out
    totals = re.search(
        r"1 rounds \(split-penalty, 32 GPUs\): .* MIP calls (\d+) -> (\d+); bounds differ on (\d+)",
        out,
    )
    assert totals is not None
    before, after, differ = (int(g) for g in totals.groups())
    assert after < before and differ == 0
    replay = re.search(
        r"replayed (\d+) MIP calls: .* the grid's best is the MIP's optimum on (\d+)", out
    )
    assert replay is not None
    n, hits = (int(g) for g in replay.groups())
    assert n == before and 0 < hits <= n


@pytest.mark.parametrize("argv", [["--seeds", "x"], ["--seeds", "-1"], ["--gpus", "40"]])
def test_bad_arguments_exit_2(argv: list[str]) -> None:
    bench = bench_module("bench_pricing")
    with pytest.raises(SystemExit) as e:
        bench.main(argv)
    assert e.value.code == 2
