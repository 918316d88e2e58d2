"""JSON I/O: round trips, determinism, and a corpus of malformed inputs.

Every malformed input must end in exactly one line on stderr that names the file and the
field path, with exit code 2 and no traceback.
"""

from __future__ import annotations

import copy
import json
import os
import random
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings

from synergy_opt.cli import main
from synergy_opt.io import (
    InputError,
    allocation_from_dict,
    allocation_to_dict,
    cluster_from_dict,
    dumps,
    instance_from_dict,
    instance_to_dict,
    load_instance,
    read_json,
    write_json_atomic,
)
from synergy_opt.mechanisms import make_mechanism
from tests.conftest import INSTANCES, all_instances
from tests.strategies import round_instances

MALFORMED = Path(__file__).parent / "data" / "malformed"

BASE: dict[str, Any] = {
    "format": "synergy-round/1",
    "name": "base",
    "cluster": {
        "servers": [
            {"name": "s0", "gpus": 8, "cpus": 24, "mem_gb": 500},
            {"count": 3, "gpus": 8, "cpus": 24, "mem_gb": 500},
        ]
    },
    "jobs": [
        {
            "id": "j0",
            "gpus": 1,
            "sensitivity": {
                "cpus": [1, 3],
                "mem_gb": [31.25, 62.5],
                "throughput": [[0.3, 0.4], [0.9, 1.0]],
            },
        },
        {
            "id": "j1",
            "gpus": 2,
            "sensitivity": {"cpus": [2, 6], "mem_gb": [125], "throughput": [[0.5], [1.0]]},
        },
    ],
}


def test_server_count_and_names() -> None:
    inst = instance_from_dict(BASE)
    assert [s.name for s in inst.cluster.servers] == ["s0", "s1", "s2", "s3"]
    named = cluster_from_dict(
        {"servers": [{"name": "big", "count": 2, "gpus": 8, "cpus": 24, "mem_gb": 500}]}
    )
    assert [s.name for s in named.servers] == ["big-0", "big-1"]


def _mutate(path: list[Any], value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    node: Any = doc
    for key in path[:-1]:
        node = node[key]
    if value is _DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return doc


_DELETE = object()

# (mutation path, new value, expected field path in the message, expected words)
CASES: list[tuple[list[Any], Any, str, str]] = [
    (["format"], "synergy-round/2", "format", "expected 'synergy-round/1'"),
    (["format"], _DELETE, "format", "missing required field"),
    (["cluster"], _DELETE, "cluster", "missing required field"),
    (["cluster", "servers"], [], "cluster.servers", "at least one server"),
    (["cluster", "servers", 0, "gpus"], "8", "cluster.servers[0].gpus", "expected an integer"),
    (["cluster", "servers", 0, "gpus"], -1, "cluster.servers[0].gpus", "integer in [0, 1024]"),
    (["cluster", "servers", 0, "cpus"], 2.5, "cluster.servers[0].cpus", "expected an integer"),
    (["cluster", "servers", 0, "mem_gb"], _DELETE, "cluster.servers[0].mem_gb", "missing"),
    (["cluster", "servers", 1, "count"], 0, "cluster.servers[1].count", "integer in [1, 100_000]"),
    (
        ["cluster", "servers", 1],
        {"name": "s0", "gpus": 8, "cpus": 24, "mem_gb": 500},
        "cluster.servers[1].name",
        "duplicate server name",
    ),
    (
        ["cluster", "servers", 0, "name"],
        "s1",
        "cluster.servers[1].name",
        "duplicate server name 's1'",
    ),
    (["jobs"], {"a": 1}, "jobs", "expected a list"),
    (["jobs", 0, "id"], _DELETE, "jobs[0].id", "missing"),
    (["jobs", 1, "id"], "j0", "jobs[1].id", "duplicate job id"),
    (["jobs", 0, "gpus"], 0, "jobs[0].gpus", "integer in [1, 65536]"),
    (["jobs", 0, "gpus"], 33, "jobs[0].gpus", "whole cluster has 32"),
    (["jobs", 0, "gpus"], True, "jobs[0].gpus", "expected an integer"),
    (["jobs", 0, "split_penalty"], 1.5, "jobs[0].split_penalty", "(0, 1]"),
    (["jobs", 0, "gpu_types"], ["h100"], "jobs[0].gpu_types", "has 0 GPUs of types"),
    (["jobs", 0, "sensitivity"], _DELETE, "jobs[0].sensitivity", "missing"),
    (
        ["jobs", 0, "sensitivity", "cpus"],
        [3, 1],
        "jobs[0].sensitivity.cpus[1]",
        "strictly ascending",
    ),
    (
        ["jobs", 0, "sensitivity", "cpus"],
        [1, 1.5],
        "jobs[0].sensitivity.cpus[1]",
        "expected an integer",
    ),
    (
        ["jobs", 0, "sensitivity", "mem_gb"],
        [62.5, 31.25],
        "jobs[0].sensitivity.mem_gb[1]",
        "strictly ascending",
    ),
    (
        ["jobs", 0, "sensitivity", "mem_gb"],
        [0, 31.25],
        "jobs[0].sensitivity.mem_gb[0]",
        "in (0, 1e+11]",
    ),
    (
        ["jobs", 0, "sensitivity", "throughput"],
        [[0.3, 0.4], [0.9]],
        "jobs[0].sensitivity.throughput",
        "row 1 has 1 values, expected 2",
    ),
    (
        ["jobs", 0, "sensitivity", "throughput"],
        [[0.3, 0.4]],
        "jobs[0].sensitivity.throughput",
        "has 1 rows, expected 2",
    ),
    (
        ["jobs", 0, "sensitivity", "throughput"],
        [[0.3, -0.4], [0.9, 1.0]],
        "jobs[0].sensitivity.throughput[0][1]",
        "in [0, 1e+12]",
    ),
    (
        ["jobs", 0, "sensitivity", "throughput"],
        [[0.3, "x"], [0.9, 1.0]],
        "jobs[0].sensitivity.throughput[0][1]",
        "expected a number",
    ),
    # A wrong kind is named in JSON's words, as every other field names it.
    (
        ["jobs", 0, "sensitivity", "throughput"],
        [[0.3, {"a": 1}], [0.9, 1.0]],
        "jobs[0].sensitivity.throughput[0][1]",
        "got an object",
    ),
    (
        ["jobs", 0, "sensitivity", "cpus"],
        [1, [2]],
        "jobs[0].sensitivity.cpus[1]",
        "got a list",
    ),
    (
        ["jobs", 0, "sensitivity", "throughput"],
        [[0.3, "__HUGE__"], [0.9, 1.0]],
        "jobs[0].sensitivity.throughput[0][1]",
        "finite",
    ),
    (
        ["jobs", 0, "sensitivity", "throughput"],
        [0.3, 0.4],
        "jobs[0].sensitivity.throughput[0]",
        "expected a list",
    ),
]


@pytest.mark.parametrize(
    ("path", "value", "field", "words"), CASES, ids=[c[2] + ":" + c[3][:18] for c in CASES]
)
def test_malformed_instance_one_line_exit_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    path: list[Any],
    value: Any,
    field: str,
    words: str,
) -> None:
    f = tmp_path / "instance.json"
    # 1e400 is valid JSON text that decodes to infinity: write it raw.
    f.write_text(json.dumps(_mutate(path, value)).replace('"__HUGE__"', "1e400"))
    rc = main(["solve", str(f), "--mechanism", "tune"])
    err = capsys.readouterr().err
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{f}: {field}: "), lines[0]
    assert words in lines[0]


@pytest.mark.parametrize("name", sorted(p.name for p in MALFORMED.glob("*.json")))
def test_malformed_files(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["solve", str(MALFORMED / name), "--mechanism", "proportional"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1 and err[0].startswith(str(MALFORMED / name) + ": ")
    assert "Traceback" not in err[0]


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        load_instance(tmp_path / "nope.json")


@pytest.mark.parametrize("path", all_instances(), ids=lambda p: p.name)
def test_shipped_instances_round_trip(path: Path) -> None:
    inst = load_instance(path)
    again = instance_from_dict(json.loads(dumps(instance_to_dict(inst))))
    assert again == inst


@given(round_instances(typed=True))
@settings(max_examples=40)
def test_round_trip_identity(inst) -> None:  # type: ignore[no-untyped-def]
    doc = instance_to_dict(inst)
    assert instance_from_dict(json.loads(dumps(doc))) == inst
    # and the text itself is a fixed point
    assert dumps(instance_to_dict(instance_from_dict(json.loads(dumps(doc))))) == dumps(doc)


def test_allocation_round_trip_and_key_order_independence() -> None:
    inst = load_instance(INSTANCES / "multi-gpu-128gpu.json")
    alloc = make_mechanism("tune").allocate(inst)
    doc = allocation_to_dict(alloc)
    back = allocation_from_dict(json.loads(dumps(doc)))
    assert back == alloc
    # Shuffle every object's key order in the *instance* file: the answer must not change.
    raw = json.loads((INSTANCES / "multi-gpu-128gpu.json").read_text())
    rnd = random.Random(7)

    def shuffle(x: Any) -> Any:
        if isinstance(x, dict):
            items = list(x.items())
            rnd.shuffle(items)
            return {k: shuffle(v) for k, v in items}
        if isinstance(x, list):
            return [shuffle(v) for v in x]
        return x

    again = make_mechanism("tune").allocate(instance_from_dict(shuffle(raw)))
    strip = lambda a: {**allocation_to_dict(a), "solve_seconds": 0}  # noqa: E731
    assert dumps(strip(again)) == dumps(strip(alloc))


def test_atomic_write_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "x.json"
    write_json_atomic(target, {"a": 1})
    write_json_atomic(target, {"a": 2})
    assert json.loads(target.read_text()) == {"a": 2}
    assert [p.name for p in target.parent.iterdir()] == ["x.json"]
    with pytest.raises(ValueError):
        write_json_atomic(target, {"a": float("nan")})  # refused before replacing
    assert json.loads(target.read_text()) == {"a": 2}
    assert [p.name for p in target.parent.iterdir()] == ["x.json"]


# --------------------------------------------------------------------------- limits and text


def test_limit_refuses_what_python_would_coerce() -> None:
    from synergy_opt.errors import ValidationError
    from synergy_opt.limits import ARRIVAL_RATE, SERVER_GPUS, SPLIT_PENALTY

    assert SERVER_GPUS.check(8) == 8 and isinstance(SERVER_GPUS.check(8.0), int)
    for bad, words in [
        (True, "a boolean"),
        ("8", "the string '8'"),
        (8.5, "got 8.5"),
        (10**400, "(401 digits)"),  # compared as an int: no OverflowError
        (float("inf"), "finite"),
        (1025, "in [0, 1024]"),
    ]:
        with pytest.raises(ValidationError, match=None) as e:
            SERVER_GPUS.check(bad)
        assert words in str(e.value), (bad, str(e.value))
    assert ARRIVAL_RATE.check(0) == 0.0 and ARRIVAL_RATE.check(0.001) == 0.001
    with pytest.raises(ValidationError, match="0 or a number"):
        ARRIVAL_RATE.check(1e-9)
    with pytest.raises(ValidationError, match=r"\(0, 1\]"):
        SPLIT_PENALTY.check(0)
    assert SERVER_GPUS.parse(" 16 ") == 16
    with pytest.raises(ValidationError, match="got '1e999'"):
        SERVER_GPUS.parse("1e999")


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ('{"id": "\\ud83d\\ude00"}', True),  # a surrogate pair is one character: fine
        ('{"id": "\\\\ud800"}', True),  # an escaped backslash, then plain letters
        ('{"id": "x\\ud800"}', False),
        ('{"id": ["a", {"k": "\\udfff"}]}', False),
        ('{"\\ud800": 1}', False),  # keys too
    ],
)
def test_lone_surrogates_refused_when_read(tmp_path: Path, text: str, ok: bool) -> None:
    from synergy_opt.io import InputError, read_json

    f = tmp_path / "s.json"
    f.write_text(text, encoding="utf-8")
    if ok:
        read_json(f)
    else:
        with pytest.raises(InputError, match="lone UTF-16 surrogate"):
            read_json(f)


def test_json_depth_counts_only_brackets_outside_strings(tmp_path: Path) -> None:
    from synergy_opt.io import InputError, read_json

    f = tmp_path / "d.json"
    f.write_text('{"a": "' + "[{" * 500 + '", "b": ' + "[" * 60 + "]" * 60 + "}")
    assert len(json.dumps(read_json(f)["b"])) == 120  # 61 levels with the object: accepted
    f.write_text("[" * 65 + "]" * 65)
    with pytest.raises(InputError, match="nested deeper than 64 levels"):
        read_json(f)
    f.write_text("[" * 64 + "]" * 64)
    read_json(f)


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom", "/dev/null"])
def test_a_device_is_refused_not_read(device: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``solve /dev/zero`` read forever (zeros never end); a device is refused in one line,
    while a pipe (``solve <(cat round.json)``) is still read."""
    assert main(["solve", device, "--mechanism", "tune"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"{device}: is a device, expected a JSON file"]


def test_a_pipe_is_still_read(tmp_path: Path) -> None:
    fifo = tmp_path / "round.fifo"
    os.mkfifo(fifo)
    text = (INSTANCES / "tiny" / "fair-share-binds.json").read_text()
    writer = threading.Thread(target=fifo.write_text, args=(text,))
    writer.start()
    try:
        inst = load_instance(fifo)
    finally:
        writer.join()
    assert inst.name == "tiny-fair-share-binds"


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ('{"a": [1, {"b": NaN}], "c": Infinity}', "a[1].b: NaN is not a JSON number"),
        ('{"a": "NaN", "c": -Infinity}', "c: -Infinity is not a JSON number"),
        ("[1, Infinity]", "[1]: Infinity is not a JSON number"),
    ],
)
def test_a_nan_or_infinity_token_is_refused_naming_its_field(
    tmp_path: Path, text: str, line: str
) -> None:
    """Python decodes NaN and Infinity (not JSON) silently; they are refused with the field
    they sit in (was: 'not valid JSON: NaN is not a JSON number', no field)."""
    p = tmp_path / "x.json"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as err:
        read_json(p)
    assert str(err.value) == f"{p}: {line}"


def test_nan_inside_a_string_is_just_text(tmp_path: Path) -> None:
    p = tmp_path / "x.json"
    p.write_text('{"name": "NaN Infinity"}', encoding="utf-8")
    assert read_json(p) == {"name": "NaN Infinity"}
