"""``bench/opt_fingerprint.py``: answers hash the same run after run, a changed answer is
reported (exit status 1), and clock-dependent mechanisms or bad arguments are refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import bench_module

SMALL = ["--families", "multi-gpu,split-penalty", "--sizes", "32", "--seeds", "2"]


def test_kept_fingerprints_match_a_second_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fp = bench_module("opt_fingerprint")
    kept = tmp_path / "fp.json"
    assert fp.main([*SMALL, "--mechanisms", "opt,tune", "-o", str(kept)]) == 0
    old = json.loads(kept.read_text())
    assert len(old) == 8 and len(set(old.values())) == 8  # different rounds, different answers
    assert "opt/split-penalty/32/1" in old and "tune/multi-gpu/32/0" in old
    capsys.readouterr()
    assert fp.main([*SMALL, "--against", str(kept)]) == 0
    assert "4 rounds, 0 changed, 0 not in" in capsys.readouterr().out


def test_a_changed_answer_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fp = bench_module("opt_fingerprint")
    kept = tmp_path / "fp.json"
    assert fp.main([*SMALL, "-o", str(kept)]) == 0
    old = json.loads(kept.read_text())
    old["opt/multi-gpu/32/1"] = "0" * fp.DIGITS
    kept.write_text(json.dumps(old))
    capsys.readouterr()
    assert fp.main([*SMALL, "--against", str(kept)]) == 1
    out = capsys.readouterr().out
    assert "changed: opt/multi-gpu/32/1" in out and "1 changed" in out


def test_the_hash_sees_the_allocation_not_the_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """``solve_seconds`` is left out; any other field changes the hash."""
    fp = bench_module("opt_fingerprint")
    base = fp.fingerprint("tune", "multi-gpu", 32, 0)
    real = fp.allocation_to_dict

    def slower(alloc: object) -> dict[str, object]:
        return {**real(alloc), "solve_seconds": 99.0}

    monkeypatch.setattr(fp, "allocation_to_dict", slower)
    assert fp.fingerprint("tune", "multi-gpu", 32, 0) == base

    def other(alloc: object) -> dict[str, object]:
        return {**real(alloc), "total_throughput": -1.0}

    monkeypatch.setattr(fp, "allocation_to_dict", other)
    assert fp.fingerprint("tune", "multi-gpu", 32, 0) != base


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--mechanisms", "opt-exact"], "--mechanisms: opt-exact's answers depend on the clock"),
        (["--mechanisms", "nope"], "--mechanisms: unknown nope"),
        (["--families", "single-gpu,bogus"], "--families: unknown bogus"),
        (["--sizes", "48"], "--sizes: family rounds come in multiples of 32 GPUs"),
        (["--sizes", "a,b"], "--sizes: expected GPU counts"),
        (["--seeds", "0"], "--seeds: must be >= 1"),
    ],
)
def test_bad_arguments_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    fp = bench_module("opt_fingerprint")
    with pytest.raises(SystemExit) as e:
        fp.main(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "message"),
    [("{", "is not JSON"), ('["a"]', "expected an object"), ('{"a": 1}', "expected an object")],
)
def test_a_bad_reference_file_exits_2(
    tmp_path: Path, text: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    fp = bench_module("opt_fingerprint")
    ref = tmp_path / "ref.json"
    ref.write_text(text)
    with pytest.raises(SystemExit) as e:
        fp.main([*SMALL, "--against", str(ref)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"--against: {ref}" in err and message in err
    missing = tmp_path / "missing.json"
    with pytest.raises(SystemExit):
        fp.main([*SMALL, "--against", str(missing)])
    assert "cannot read" in capsys.readouterr().err
