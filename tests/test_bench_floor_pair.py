"""``bench/bench_floor_pair.py``: ``opt-exact`` with the floor pair on and off on the same
mixed-shape split-penalty rounds; each run's row and a summary, bad arguments exit 2."""

from __future__ import annotations

import re

import pytest

from synergy_opt.formulations.branch_price import floor_pair_applies
from synergy_opt.mechanisms.packing import select_runnable
from tests.conftest import bench_module


def test_the_rounds_have_floors_that_depend_on_the_split() -> None:
    bench = bench_module("bench_floor_pair")
    inst = bench.mixed_split_round(64, 1)
    assert sum(s.gpus for s in inst.cluster.servers) == 64
    assert floor_pair_applies(inst, select_runnable(inst))


def test_both_runs_of_each_round_are_reported(capsys: pytest.CaptureFixture[str]) -> None:
    bench = bench_module("bench_floor_pair")
    assert bench.main(["--quick"]) == 0
    out = capsys.readouterr().out
    rows = re.findall(r"^\s+(0|3)\s+(on|off)\s+[\d.]+\s+([\d.]+)\s+([\d.]+)", out, re.M)
    assert sorted((s, o) for s, o, *_ in rows) == [
        ("0", "off"),
        ("0", "on"),
        ("3", "off"),
        ("3", "on"),
    ]
    summary = re.search(
        r"2 rounds: proven (\d) with SPLIT_MASTER, (\d) without; .* answers above the other "
        r"run's "
        r"bound: none",
        out,
    )
    assert summary is not None
    # seed 3: the search after the restriction proves 19.355 (tests/test_floor_pair.py)
    assert int(summary.group(1)) >= 1 and int(summary.group(2)) >= 1


@pytest.mark.parametrize("bad", [["--seeds", "x"], ["--seeds", "-1"], ["--time-limit", "0"]])
def test_bad_arguments_exit_2(bad: list[str]) -> None:
    bench = bench_module("bench_floor_pair")
    with pytest.raises(SystemExit) as e:
        bench.main(bad)
    assert e.value.code == 2
