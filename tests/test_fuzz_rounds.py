"""``bench/fuzz_rounds.py``: the random-round harness runs clean, and it does catch a broken
promise (a mechanism whose answer is above its own bound, a bound below the proven optimum)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tests.conftest import bench_module


def test_a_few_seeds_run_clean(capsys: pytest.CaptureFixture[str]) -> None:
    fz = bench_module("fuzz_rounds")
    assert fz.main(["--seeds", "0:6", "--servers", "1:4", "--exact-time-limit", "20"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    tried = int(last.split()[0])
    assert tried >= 3 and " 0 bad" in last, last


def test_the_draws_cover_what_they_claim() -> None:
    """Mixed shapes, GPU types, split penalties and both fair-share rules all occur."""
    fz = bench_module("fuzz_rounds")
    drawn = [d for d in (fz.draw(s, (1, 8)) for s in range(60)) if d is not None]
    assert len(drawn) >= 40
    assert any(len({(s.gpus, s.cpus, s.mem_gb) for s in d.inst.cluster.servers}) > 1 for d in drawn)
    assert any(any(s.gpu_type for s in d.inst.cluster.servers) for d in drawn)
    assert any(any(j.split_penalty < 1.0 for j in d.inst.jobs) for d in drawn)
    assert {d.inst.fair_share_mode for d in drawn} == {"server", "cluster"}
    assert any(d.max_fragmented == 0 for d in drawn)


def _altered(monkeypatch: pytest.MonkeyPatch, fz: Any, name: str, alter: Any) -> None:
    """Make the harness's ``name`` mechanism return ``alter(allocation)`` instead."""
    real = fz.make_mechanism

    def make(mech_name: str, options: Any = None) -> Any:
        mech = real(mech_name, options)
        if mech_name != name:
            return mech

        class Altered:
            def allocate(self, inst: Any) -> Any:
                return alter(mech.allocate(inst))

        return Altered()

    monkeypatch.setattr(fz, "make_mechanism", make)


def test_a_broken_promise_is_reported(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fz = bench_module("fuzz_rounds")
    _altered(
        monkeypatch,
        fz,
        "tune",
        lambda a: dataclasses.replace(a, upper_bound=a.total_throughput - 0.5),
    )
    assert fz.main(["--seeds", "0:3", "--servers", "1:3", "--exact-time-limit", "20"]) == 1
    out = capsys.readouterr().out
    assert "tune total" in out and "above its bound" in out


def test_a_bound_below_the_proven_optimum_is_reported(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An ``opt`` whose ``upper_bound`` cuts below ``opt-exact``'s proven optimum (and, being
    below its own total, above its bound too) is caught by the new check by name."""
    fz = bench_module("fuzz_rounds")

    def cut(a: Any) -> Any:
        if a.upper_bound is None:
            return a
        return dataclasses.replace(a, upper_bound=0.5 * a.total_throughput)

    _altered(monkeypatch, fz, "opt", cut)
    assert fz.main(["--seeds", "0:6", "--servers", "1:3", "--exact-time-limit", "20"]) == 1
    out = capsys.readouterr().out
    assert "opt's bound" in out and "below proven opt-exact" in out
