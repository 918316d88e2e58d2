"""Sweep specs set the fair-share rule (``fair_share``: ``"server"`` or ``"cluster"``).

A value in ``[base]`` or a list in ``[axes]``, like every other option; ``"server"`` is the
default, so it names the same cell (and folder) as leaving it out; a bad value is one line
naming the spec field; the rule reaches the simulation (its summary says which it used, and
on a mixed-shape cluster the two rules give different jobs' progress).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from synergy_opt.cli import main
from synergy_opt.sweep import SpecError, load_rows, make_cell, run_sweep, simulate_cell, table
from synergy_opt.sweep.spec import option_default, spec_from_dict

#: Two server shapes of different cores per GPU: the two rules give different shares.
MIXED = {
    "servers": [
        {"count": 1, "gpus": 8, "cpus": 48, "mem_gb": 500.0},
        {"count": 1, "gpus": 4, "cpus": 6, "mem_gb": 100.0},
    ]
}


def test_default_is_the_server_rule() -> None:
    assert option_default("fair_share") == "server"
    assert make_cell({"fair_share": "server"}) == make_cell({})
    assert make_cell({"fair-share": "cluster"}).get("fair_share") == "cluster"


def test_axis_sweeps_both_rules() -> None:
    spec = spec_from_dict({"axes": {"fair_share": ["server", "cluster"], "seed": [0, 1]}}, "s.toml")
    cells = spec.cells()
    assert [c.get("fair_share") for c in cells] == ["server", "server", "cluster", "cluster"]
    assert cells[0] == make_cell({"seed": 0})  # the default rule: the same cell and folder
    assert "fairsharecluster" in cells[2].key and "fairshare" not in cells[0].key
    assert cells[2].to_json()["fair_share"] == "cluster"


def test_base_value() -> None:
    spec = spec_from_dict({"base": {"fair-share": "cluster"}, "axes": {"seed": [0]}}, "s.toml")
    assert spec.cells()[0].get("fair_share") == "cluster"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"axes": {"fair_share": ["server", "pooled"]}},
            "s.toml: axes.fair_share[1]: unknown fair-share rule 'pooled'; known: server, cluster",
        ),
        (
            {"base": {"fair_share": 1}, "axes": {"seed": [0]}},
            "s.toml: base.fair_share: expected a non-empty string, got the number 1",
        ),
        (
            {"axes": {"fair_share": ["cluster", "cluster"]}},
            "s.toml: axes.fair_share: values repeat",
        ),
        (
            {"base": {"fair_share": "cluster"}, "axes": {"fair_share": ["server"]}},
            "axes.fair_share: also set in [base]",
        ),
    ],
)
def test_bad_values_name_the_field(data: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError) as err:
        spec_from_dict(data, "s.toml")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_bad_value_on_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text('[axes]\nfair_share = ["cluster", "per-gpu"]\n', encoding="utf-8")
    assert main(["sweep", str(spec), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "axes.fair_share[1]: unknown fair-share rule 'per-gpu'" in err[0]
    assert not (tmp_path / "out" / "cells").exists()


def test_the_rule_reaches_the_simulation(tmp_path: Path) -> None:
    """On a mixed-shape cluster a 4-GPU job's per-server share (6 cores on the small
    server) differs from the cluster-wide one (18 cores), so PROPORTIONAL's progress,
    measured in fair-share throughput, differs too; the summary names the rule."""
    cluster = tmp_path / "mixed.json"
    cluster.write_text(json.dumps(MIXED), encoding="utf-8")
    base = {
        "cluster": str(cluster),
        "jobs": 12,
        "arrival_rate": 0.0,
        "workload": "multi-gpu",
        "mechanism": "proportional",
        "seed": 3,
    }
    out = {}
    for rule in ("server", "cluster"):
        files = simulate_cell(make_cell({**base, "fair_share": rule}))
        summary = json.loads(files["summary.json"])
        assert summary["fair_share"] == rule
        out[rule] = files["jobs.csv"]
    assert out["server"] != out["cluster"]


def test_report_shows_the_rule_as_an_option_column(tmp_path: Path) -> None:
    def fake(cell: object) -> dict[str, str]:
        rule = cell.get("fair_share")  # type: ignore[attr-defined]
        summary = {
            "format": "synergy-sim-summary/1",
            "policy": "fifo",
            "mechanism": "tune",
            "avg_jct_hours": 1.0 if rule == "server" else 2.0,
            "p99_jct_hours": 3.0,
            "fair_share": rule,
            "seed": 0,
        }
        return {"summary.json": json.dumps(summary), "jobs.csv": "id\n"}

    spec = spec_from_dict({"axes": {"fair_share": ["server", "cluster"]}}, "s.toml")
    run_sweep(spec, tmp_path, fn=fake, workers=1, validate=False)
    header, body = table(tmp_path)
    col = header.index("fair_share")
    assert header.count("fair_share") == 1  # an option column, not also a metric
    jct = header.index("avg_jct_hours")
    assert sorted((r[col], r[jct]) for r in body) == [("cluster", "2.0"), ("server", "1.0")]
    assert {r["fair_share"] for r in load_rows(tmp_path)} == {"server", "cluster"}
