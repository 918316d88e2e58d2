"""``bench/bench_opt.py`` table 2: a round the exact model leaves unproven is solved again
with ``--retry-time-limit`` and counted as proven late (the cache keeps that), and a retry
limit not above the first one is refused."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import bench_module


def test_an_unproven_round_is_solved_again_and_counted_late(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = bench_module("bench_opt")
    real = bench.make_mechanism
    limits: list[float | None] = []

    class ShortExact:
        """``opt-exact`` that, at the first limit, claims a bound 10 % above its answer."""

        def __init__(self, inner: Any, limit: float | None) -> None:
            self.inner, self.limit = inner, limit

        def allocate(self, inst: Any) -> Any:
            limits.append(self.limit)
            a = self.inner.allocate(inst)
            if self.limit == 5.0:
                return dataclasses.replace(a, upper_bound=1.1 * a.total_throughput)
            return a

    def make(name: str, options: Any = None) -> Any:
        mech = real(name, options)
        if name == "opt-exact":
            return ShortExact(mech, options.time_limit_s)
        return mech

    monkeypatch.setattr(bench, "make_mechanism", make)
    cache_file = tmp_path / "cache.json"
    bench.bench_opt_ratio(
        1,
        5.0,
        (32,),
        1000,
        ("single-gpu",),
        bench.ExactCache(cache_file),
        retry_time_limit=30.0,
    )
    assert limits == [5.0, 30.0]
    (entry,) = json.loads(cache_file.read_text(encoding="utf-8"))["rounds"].values()
    assert entry["proven"] and entry["retried"]
    rows = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("single-gpu")]
    assert rows and all(r.split()[2] == "1/1" and r.split()[-1] == "1" for r in rows), rows
    # A later run takes the retried optimum from the cache and still counts it late.
    limits.clear()
    bench.bench_opt_ratio(1, 5.0, (32,), 1000, ("single-gpu",), bench.ExactCache(cache_file))
    assert limits == []
    rows = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("single-gpu")]
    assert rows and all(r.split()[-1] == "1" for r in rows), rows


def test_a_retry_limit_not_above_the_first_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = bench_module("bench_opt")
    monkeypatch.setattr(
        sys,
        "argv",
        ["bench_opt.py", "--tables", "2", "--time-limit", "20", "--retry-time-limit", "5"],
    )
    with pytest.raises(SystemExit) as e:
        bench.main()
    assert e.value.code == 2
    assert "--retry-time-limit" in capsys.readouterr().err
