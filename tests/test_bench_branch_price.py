"""``bench/bench_branch_price.py``: branch-and-price with a step on and off on the same
rounds; each run's row, the ratio and a summary that flags proven answers that differ, and
bad arguments exit 2."""

from __future__ import annotations

import dataclasses
import re

import pytest

from tests.conftest import bench_module


def test_both_runs_of_each_round_are_reported(capsys: pytest.CaptureFixture[str]) -> None:
    bench = bench_module("bench_branch_price")
    # 32 GPUs seed 3: small; both runs prove the same optimum
    assert bench.main(["--quick", "--switch", "FLOW_REFUTE"]) == 0
    out = capsys.readouterr().out
    rows = re.findall(r"^\s+3\s+0\s+(on|off)\s+([\d.]+)\s+(yes|no)\s+([\d.]+)", out, re.M)
    assert sorted(r[0] for r in rows) == ["off", "on"]
    assert all(r[2] == "yes" for r in rows) and rows[0][3] == rows[1][3]
    summary = re.search(
        r"1 pairs: ([\d.]+) s with FLOW_REFUTE, ([\d.]+) s without \(ratio ([\d.]+)\); "
        r"proven 1 with, 1 without; proven answers that differ: none",
        out,
    )
    assert summary is not None
    on, off, ratio = (float(g) for g in summary.groups())
    assert ratio == pytest.approx(on / off, rel=0.06)  # the times are printed rounded


def test_proven_answers_that_differ_are_flagged(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two proven answers of one round are both optima: a difference is a bug, flagged
    by the exit code and named in the summary."""
    bench = bench_module("bench_branch_price")
    result = bench.BranchResult(1.0, 1.0, {}, 1, 0, True, 0.0)

    def fake(rnd: object, limit: float) -> tuple[float, object]:
        worth = 1.0 if bench.bp.DIVE_FLOW else 1.5
        return 0.1, dataclasses.replace(result, objective=worth, bound=worth)

    monkeypatch.setattr(bench, "_run", fake)
    assert bench.main(["--seeds", "4"]) == 1
    assert "proven answers that differ: 4" in capsys.readouterr().out


@pytest.mark.parametrize(("name", "module"), [("DIVE_FLOW", "bp"), ("SHARE_CAP", "pf")])
def test_the_switch_is_restored_after_the_runs(name: str, module: str) -> None:
    """Each switch is set in its own module (the arc flow's cut in ``packing_flow``)."""
    bench = bench_module("bench_branch_price")
    where = getattr(bench, module)
    before = getattr(where, name)
    with bench._switched(name, not before):
        assert getattr(where, name) is (not before)
    assert getattr(where, name) is before


def test_share_cap_switch_drops_the_cut_rows() -> None:
    """Off, the arc flow is built without (pf9): what the switch measures is that cut."""
    bench = bench_module("bench_branch_price")
    from tests.test_packing_flow import _pouring_case

    fg = bench.pf.flow_graph(_pouring_case())
    assert fg is not None
    for on in (True, False):
        with bench._switched("SHARE_CAP", on):
            rows = bench.pf.build_packing_flow_matrix(fg).row_names
        assert any(r.startswith("pf9_share_cap") for r in rows) is on


@pytest.mark.parametrize(
    "argv",
    [
        ["--seeds", "x"],
        ["--seeds", "-1"],
        ["--gpus", "40"],
        ["--switch", "NOPE"],
        ["--time-limit", "0"],
        ["--repeat", "0"],
    ],
)
def test_bad_arguments_exit_2(argv: list[str]) -> None:
    bench = bench_module("bench_branch_price")
    with pytest.raises(SystemExit) as e:
        bench.main(argv)
    assert e.value.code == 2
