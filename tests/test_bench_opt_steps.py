"""``bench/bench_opt_steps.py``: the step table is printed with its steps timed, the package
is left unpatched afterwards, and bad arguments exit 2."""

from __future__ import annotations

import sys

import highspy
import pytest

import synergy_opt.mechanisms.opt.routes as opt_routes
import synergy_opt.mechanisms.opt.search as opt_search
from tests.conftest import bench_module


def test_the_steps_are_timed_and_unpatched_after(capsys: pytest.CaptureFixture[str]) -> None:
    steps = bench_module("bench_opt_steps")
    before = (highspy.Highs.run, opt_search.repair, dict(opt_routes.ROUTES))
    assert steps.main(["--gpus", "32", "--seeds", "0:3", "--passes", "1", "--skip", ""]) == 0
    assert (highspy.Highs.run, opt_search.repair, dict(opt_routes.ROUTES)) == before
    rows = {
        line.rsplit(None, 2)[0].strip(): float(line.split()[-2])
        for line in capsys.readouterr().out.splitlines()
        if line.count(".") >= 2 and not line.startswith("opt's steps")
    }
    # every multi-GPU round solves the super-machine and tries balanced; the rows are real
    assert rows["HiGHS run (all solves)"] > 0 and rows["route balanced"] > 0
    assert rows["opt (whole round)"] > rows["super-machine solve (incl. HiGHS)"] > 0
    # TUNE runs only where no bound proves opt's answer (tests/test_opt_subset_bound.py):
    # its row is there only if it ran on some round, and then inside opt's time
    assert rows.get("TUNE's floor", 0.0) < rows["opt (whole round)"]


@pytest.mark.parametrize(
    "argv",
    [["--gpus", "40"], ["--seeds", "3:1"], ["--passes", "0"], ["--skip", "x"], ["--seeds", "7:8"]],
)
def test_bad_arguments_exit_2(argv: list[str]) -> None:
    steps = bench_module("bench_opt_steps")
    with pytest.raises(SystemExit) as e:
        steps.main(argv)
    assert e.value.code == 2


def test_every_bench_script_takes_quick(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``bench/run.py --quick`` passes ``--quick`` to every ``bench_*.py``; one that does not
    take it would fail there (argparse's exit 2).  Each script's own ``--help`` is asked,
    so a flag defined by a helper the script shares counts too."""
    from tests.conftest import ROOT

    scripts = sorted((ROOT / "bench").glob("bench_*.py"))
    assert len(scripts) >= 6
    missing = []
    for path in scripts:
        mod = bench_module(path.stem)
        monkeypatch.setattr(sys, "argv", [path.name, "--help"])
        with pytest.raises(SystemExit) as e:
            mod.main()
        assert e.value.code == 0, path.name
        if "--quick" not in capsys.readouterr().out:
            missing.append(path.name)
    assert not missing, missing
