"""Output faults and data loss over every command that writes (issue 12, kinds 2 and 3).

Each case runs the command line in a fresh copy of a small workspace (an instance, a trace,
an Alibaba pod and node list, a profile file, a sweep spec and a finished sweep) and asserts
what a user must see: exit code 2, exactly one line on standard error naming the path, no
traceback, every file of the workspace byte-for-byte as before and no new file at all (the
refusal comes before any work).  Refusals run in this process, which is fast; the full-disk
and standard-output cases run the real command in a subprocess.  The full-disk cases cap
the file size with ``RLIMIT_FSIZE``: the write fails half-way, like on a full disk, and no
temporary or partial file may be left.

Running as root, a folder without write permission is writable anyway, so the unwritable
folder cases use a path below a file and a path in ``/proc`` (where nothing can be created),
and :func:`test_read_only_folder_is_refused` checks the permission test directly.
"""

from __future__ import annotations

import errno
import hashlib
import os
import resource
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from synergy_opt import outputs
from synergy_opt.cli import main
from synergy_opt.outputs import Output, OutputError, preflight
from tests.conftest import INSTANCES, ROOT

TIMEOUT_S = 120
DATA = ROOT / "tests" / "data"
#: One tiny round, the 10-job golden trace and the Alibaba samples: every command here
#: finishes in about a second, so the whole file stays far below a minute.
INSTANCE = INSTANCES / "tiny" / "one-server-two-jobs.json"


def run_cli(cwd: Path, *argv: str, fsize: int | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m synergy_opt ARGV`` in ``cwd`` (this checkout's package), optionally with
    every file capped at ``fsize`` bytes (a write beyond it fails like a full disk)."""

    def cap() -> None:
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "synergy_opt", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        preexec_fn=cap,
    )


def snapshot(root: Path) -> dict[str, str]:
    """Relative path -> SHA-256 of every file under ``root`` (symbolic links as their target)."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_symlink():
            out[str(p.relative_to(root))] = "link:" + os.readlink(p)
        elif p.is_file():
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The workspace every case copies: inputs plus one finished two-cell sweep."""
    ws = tmp_path_factory.mktemp("workspace")
    shutil.copy(INSTANCE, ws / "round.json")
    shutil.copy(DATA / "sim" / "golden10.csv", ws / "trace.csv")
    shutil.copy(DATA / "traces" / "alibaba_pods_sample.csv", ws / "pods.csv")
    shutil.copy(DATA / "traces" / "alibaba_nodes_sample.csv", ws / "nodes.csv")
    shutil.copy(ROOT / "synergy_opt" / "data" / "synergy_model_profiles.json", ws / "prof.json")
    (ws / "spec.toml").write_text(
        '[sweep]\nname = "corpus"\n[base]\ntrace = "trace.csv"\n'
        '[axes]\nmechanism = ["proportional", "tune"]\n',
        encoding="utf-8",
    )
    (ws / "a-file").write_text("not a folder\n", encoding="utf-8")
    (ws / "a-folder").mkdir()
    (ws / "link.json").symlink_to("round.json")
    # A previous run's folder whose files are now inputs of the next command.
    (ws / "run").mkdir()
    shutil.copy(ws / "trace.csv", ws / "run" / "jobs.csv")
    r = run_cli(ws, "sweep", "spec.toml", "-o", "sweep", "--workers", "1", "--quiet")
    assert r.returncode == 0, r.stderr
    (ws / "run2").mkdir()
    cell = sorted((ws / "sweep" / "cells").iterdir())[0].name
    (ws / "nested").mkdir()
    shutil.copytree(ws / "sweep", ws / "nested" / "sweep")
    (ws / "nested" / "spec.toml").write_text(
        f'[sweep]\nname = "n"\n[base]\ntrace = "sweep/cells/{cell}/jobs.csv"\n'
        '[axes]\nmechanism = ["tune"]\n',
        encoding="utf-8",
    )
    (ws / "sweep-spec").mkdir()
    (ws / "sweep-spec" / "sweep.json").write_text(
        (ws / "spec.toml").read_text(encoding="utf-8").replace("trace.csv", "../trace.csv"),
        encoding="utf-8",
    )
    return ws


@pytest.fixture
def ws(base: Path, tmp_path: Path) -> Path:
    """A fresh copy of the workspace for one case."""
    dst = tmp_path / "ws"
    shutil.copytree(base, dst, symlinks=True)
    return dst


@dataclass(frozen=True)
class Case:
    """One refused invocation and the path its one-line message must name."""

    argv: tuple[str, ...]
    names: str


SOLVE = ("solve", "round.json", "--mechanism", "tune")
GENERATE = ("generate", "--servers", "2", "--jobs", "3")
PROFILE = ("profile", "--model", "res18")
CONVERT = ("trace", "convert", "--from", "alibaba-gpu-2023", "pods.csv", "nodes.csv")
SIMULATE = ("simulate", "--trace", "trace.csv", "--quiet")
COMPARE = ("compare", "--trace", "trace.csv", "--mechanisms", "tune", "--quiet")
SWEEP = ("sweep", "spec.toml", "--workers", "1", "--quiet")
REPORT = ("report", "sweep", "--no-plots", "--quiet")
DEMO = ("demo",)

#: Kind 2: outputs that cannot be written, for every command that writes.
UNWRITABLE: dict[str, Case] = {
    # file outputs
    "solve-empty": Case((*SOLVE, "-o", ""), "-o"),
    "solve-folder": Case((*SOLVE, "-o", "a-folder"), "a-folder"),
    "solve-below-file": Case((*SOLVE, "-o", "a-file/alloc.json"), "a-file"),
    "solve-device": Case((*SOLVE, "-o", "/dev/full"), "/dev/full"),
    "solve-trailing-slash": Case((*SOLVE, "-o", "new/"), "new/"),
    "solve-proc": Case((*SOLVE, "-o", "/proc/synergy-opt-none/alloc.json"), "/proc/"),
    "generate-folder": Case((*GENERATE, "-o", "a-folder"), "a-folder"),
    "generate-device": Case((*GENERATE, "-o", "/dev/full"), "/dev/full"),
    "generate-below-file": Case((*GENERATE, "-o", "a-file/x/i.json"), "a-file"),
    "profile-empty": Case((*PROFILE, "-o", ""), "-o"),
    "profile-device": Case((*PROFILE, "-o", "/dev/full"), "/dev/full"),
    "profile-folder": Case((*PROFILE, "-o", "a-folder"), "a-folder"),
    "convert-folder": Case((*CONVERT, "-o", "a-folder"), "a-folder"),
    "convert-device": Case((*CONVERT, "-o", "/dev/full"), "/dev/full"),
    "convert-cluster-below-file": Case(
        (*CONVERT, "-o", "t.csv", "--cluster-out", "a-file/c.json"), "a-file"
    ),
    "convert-dash": Case((*CONVERT, "-o", "-"), "-o -"),  # no file named "-" either
    "sweep-dash": Case((*SWEEP, "-o", "-"), "-o -"),
    "convert-cluster-empty": Case((*CONVERT, "-o", "t.csv", "--cluster-out", ""), "--cluster-out"),
    # folder outputs
    "simulate-file": Case((*SIMULATE, "-o", "a-file"), "a-file"),
    "simulate-empty": Case((*SIMULATE, "-o", ""), "-o"),
    "simulate-below-file": Case((*SIMULATE, "-o", "a-file/run"), "a-file"),
    "simulate-device": Case((*SIMULATE, "-o", "/dev/full"), "/dev/full"),
    "simulate-summary-is-folder": Case((*SIMULATE, "-o", "odd"), "odd/summary.json"),
    "compare-file": Case((*COMPARE, "-o", "round.json"), "round.json"),
    "compare-below-file": Case((*COMPARE, "-o", "a-file/cmp"), "a-file"),
    "sweep-file": Case((*SWEEP, "-o", "trace.csv"), "trace.csv"),
    "sweep-empty": Case((*SWEEP, "-o", ""), "-o"),
    "sweep-below-file": Case((*SWEEP, "-o", "a-file/s"), "a-file"),
    "report-file": Case((*REPORT, "-o", "a-file"), "a-file"),
    "report-below-file": Case((*REPORT, "-o", "a-file/r"), "a-file"),
    "report-empty": Case((*REPORT, "-o", ""), "-o"),
    "demo-file": Case((*DEMO, "-o", "a-file"), "a-file"),
    "demo-below-file": Case((*DEMO, "-o", "a-file/demo"), "a-file"),
}

#: Kind 3: an output that is an input or another output; compared by resolved path.
DATA_LOSS: dict[str, Case] = {
    "solve-onto-instance": Case((*SOLVE, "-o", "round.json"), "round.json"),
    "solve-onto-instance-respelled": Case((*SOLVE, "-o", "a-folder/../round.json"), "round.json"),
    "solve-through-link": Case(
        ("solve", "link.json", "--mechanism", "tune", "-o", "round.json"), "link.json"
    ),
    "generate-onto-profiles": Case(
        (*GENERATE, "--profiles", "prof.json", "-o", "prof.json"), "prof.json"
    ),
    "profile-onto-profiles": Case(
        (*PROFILE, "--profiles", "prof.json", "-o", "./prof.json"), "prof.json"
    ),
    "profile-onto-command-script": Case(
        ("profile", "--command", "python3 work.py --workers {cpus}", "-o", "work.py"), "work.py"
    ),
    "convert-onto-pods": Case((*CONVERT, "-o", "pods.csv"), "pods.csv"),
    "convert-cluster-onto-nodes": Case(
        (*CONVERT, "-o", "t.csv", "--cluster-out", "nodes.csv"), "nodes.csv"
    ),
    "convert-both-outputs-one-file": Case(
        (*CONVERT, "-o", "t.csv", "--cluster-out", "./t.csv"), "t.csv"
    ),
    "convert-onto-profiles": Case(
        (*CONVERT, "--profiles", "prof.json", "-o", "prof.json"), "prof.json"
    ),
    "simulate-trace-in-output": Case(
        ("simulate", "--trace", "run/jobs.csv", "-o", "run", "--quiet"), "run/jobs.csv"
    ),
    "simulate-profiles-are-summary": Case(
        (*SIMULATE, "--profiles", "run/summary.json", "-o", "run"), "run/summary.json"
    ),
    "simulate-plots-onto-input": Case(
        (*SIMULATE, "--profiles", "run/../run/jct_cdf.png", "-o", "run", "--plots"), "jct_cdf.png"
    ),
    "compare-trace-in-run-folder": Case(
        (
            "compare",
            "--trace",
            "run/fifo-tune/jobs.csv",
            "--mechanisms",
            "tune",
            "-o",
            "run",
            "--quiet",
        ),
        "run/fifo-tune/jobs.csv",
    ),
    "sweep-spec-is-manifest": Case(
        ("sweep", "sweep-spec/sweep.json", "-o", "sweep-spec", "--quiet"), "sweep-spec/sweep.json"
    ),
    "sweep-trace-inside-cells": Case(
        ("sweep", "nested/spec.toml", "-o", "nested/sweep", "--quiet"), "jobs.csv"
    ),
}


def _prepare(ws: Path, name: str) -> None:
    """Per-case set-up that the shared workspace does not hold."""
    if name == "profile-onto-command-script":
        (ws / "work.py").write_text('print("throughput: 1")\n', encoding="utf-8")
    if name == "simulate-summary-is-folder":
        (ws / "odd" / "summary.json").mkdir(parents=True)
    if name == "simulate-profiles-are-summary":
        shutil.copy(ws / "prof.json", ws / "run" / "summary.json")
    if name == "simulate-plots-onto-input":
        (ws / "run" / "jct_cdf.png").write_bytes(b"an input that happens to be named so")
    if name == "compare-trace-in-run-folder":
        (ws / "run" / "fifo-tune").mkdir()
        shutil.copy(ws / "trace.csv", ws / "run" / "fifo-tune" / "jobs.csv")


def _assert_refused(ws: Path, r: subprocess.CompletedProcess[str], names: str) -> None:
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr
    assert len(lines) == 1, r.stderr
    assert names in lines[0], lines[0]


@pytest.mark.parametrize("name", sorted(UNWRITABLE) + sorted(DATA_LOSS))
def test_refused_in_one_line_and_nothing_changes(
    ws: Path, name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """In-process (the refusal comes before any work, so this is the real code path); an
    exception escaping ``main`` would be the traceback a user sees, and fails the test."""
    case = UNWRITABLE.get(name) or DATA_LOSS[name]
    _prepare(ws, name)
    before = snapshot(ws)
    monkeypatch.chdir(ws)
    try:
        rc = main(list(case.argv))
    except SystemExit as e:  # argparse's own usage errors exit directly
        rc = int(e.code or 0)
    err = capsys.readouterr().err
    _assert_refused(ws, subprocess.CompletedProcess(case.argv, rc, "", err), case.names)
    assert snapshot(ws) == before  # inputs unchanged, and not one new file


#: Full disk: (argv, the output that must not exist afterwards, a file cap in bytes).  Each
#: output is larger than the cap, so the write fails part-way through.
FULL_DISK: dict[str, tuple[tuple[str, ...], str, int]] = {
    "solve": ((*SOLVE, "-o", "alloc.json"), "alloc.json", 64),
    "generate": ((*GENERATE, "-o", "gen.json"), "gen.json", 64),
    "profile": ((*PROFILE, "-o", "p.json"), "p.json", 64),
    "convert": ((*CONVERT, "-o", "conv.csv"), "conv.csv", 64),
    "simulate": ((*SIMULATE, "-o", "out"), "out/jobs.csv", 64),
    "compare": ((*COMPARE, "-o", "cmp"), "cmp/fifo-tune/jobs.csv", 64),
    "report": ((*REPORT, "-o", "rep"), "rep/report.csv", 64),
    "demo": ((*DEMO, "-o", "demo"), "demo/instance.json", 64),
}


@pytest.mark.parametrize("name", sorted(FULL_DISK))
def test_full_disk_is_one_line_and_leaves_nothing_partial(ws: Path, name: str) -> None:
    argv, target, cap = FULL_DISK[name]
    before = snapshot(ws)
    r = run_cli(ws, *argv, fsize=cap)
    _assert_refused(ws, r, target)
    assert "cannot write" in r.stderr
    assert not (ws / target).exists()
    after = snapshot(ws)
    assert {k: v for k, v in after.items() if k in before} == before
    # Nothing new but whole files smaller than the cap (e.g. a sweep's manifest): no
    # temporary file, no truncated result.
    new = set(after) - set(before)
    assert not [k for k in new if Path(k).name.startswith(".")], new
    assert all((ws / k).stat().st_size <= cap for k in new), new


def test_sweep_cell_on_full_disk_leaves_no_partial_cell(ws: Path) -> None:
    r = run_cli(ws, *SWEEP, "-o", "sw", fsize=300)
    _assert_refused(ws, r, "sw/cells/")
    cells = ws / "sw" / "cells"
    assert cells.is_dir() and list(cells.iterdir()) == []  # no cell, no temporary folder


@pytest.mark.parametrize(
    "command",
    [
        SOLVE,  # the JSON result
        GENERATE,
        PROFILE,
        ("simulate", "--trace", "trace.csv", "-o", "out"),  # the printed table
        (*CONVERT, "-o", "conv.csv"),  # the row accounting
    ],
    ids=["solve", "generate", "profile", "simulate", "convert"],
)
def test_failing_standard_output_is_one_line(ws: Path, command: tuple[str, ...]) -> None:
    with open("/dev/full", "w") as full:
        r = subprocess.run(
            [sys.executable, "-m", "synergy_opt", *command],
            cwd=ws,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=TIMEOUT_S,
        )
    _assert_refused(ws, r, "standard output")


def test_unrelated_file_in_output_folder_is_kept(ws: Path) -> None:
    """The refusal is by name: an input beside the outputs is fine and stays unchanged."""
    before = (ws / "trace.csv").read_bytes()
    shutil.copy(ws / "trace.csv", ws / "run" / "mine.csv")
    r = run_cli(ws, "simulate", "--trace", "run/mine.csv", "-o", "run", "--quiet")
    assert r.returncode == 0, r.stderr
    assert (ws / "run" / "mine.csv").read_bytes() == before
    assert (ws / "run" / "summary.json").is_file()


# --------------------------------------------------------------------------- the helper itself


def test_read_only_folder_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    if os.geteuid() == 0:
        # root may write anywhere, so emulate a folder it may not write by the access test.
        real = os.access
        monkeypatch.setattr(
            outputs.os, "access", lambda p, m: False if Path(p) == folder else real(p, m)
        )
    else:
        folder.chmod(0o500)
    with pytest.raises(OutputError, match="permission denied"):
        preflight([], [Output("-o", str(folder / "x.json"))])
    with pytest.raises(OutputError, match="permission denied"):
        preflight([], [Output("-o", str(folder / "sub"), folder=True, files=("a",))])


def test_writer_failure_keeps_old_file_and_removes_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "out.json"
    target.write_text("old\n", encoding="utf-8")

    def full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(outputs.os, "fsync", full)
    with pytest.raises(OutputError, match=r"out\.json: cannot write: No space left on device"):
        outputs.write_text_atomic(target, "new\n")
    assert target.read_text(encoding="utf-8") == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_writer_never_replaces_a_device_or_folder(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match="not a regular file"):
        outputs.write_text_atomic("/dev/null", "x")
    assert Path("/dev/null").is_char_device()
    (tmp_path / "d").mkdir()
    with pytest.raises(OutputError, match="a folder"):
        outputs.write_text_atomic(tmp_path / "d", "x")


@pytest.mark.parametrize(
    ("inputs", "outs", "ok"),
    [
        ([("IN", "a.json")], [Output("-o", "b.json")], True),
        ([("IN", "a.json")], [Output("-o", "./a.json")], False),
        (
            [("IN", "d/summary.json")],
            [Output("-o", "d", folder=True, files=("summary.json",))],
            False,
        ),
        ([("IN", "d/other.json")], [Output("-o", "d", folder=True, files=("summary.json",))], True),
        ([("IN", "d/cells/k/x.csv")], [Output("-o", "d", folder=True, trees=("cells",))], False),
        ([("IN", "d/cellsx/x.csv")], [Output("-o", "d", folder=True, trees=("cells",))], True),
        ([], [Output("-o", "x.csv"), Output("--cluster-out", "sub/../x.csv")], False),
        ([("IN", None), ("IN2", "-")], [Output("-o", "-", stdout=True)], True),
        ([], [Output("-o", "-")], False),  # "-" where the command cannot print
    ],
)
def test_preflight_compares_resolved_paths(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    inputs: list[tuple[str, str | None]],
    outs: list[Output],
    ok: bool,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    check: Callable[[], None] = lambda: preflight(inputs, outs)  # noqa: E731
    if ok:
        check()
    else:
        with pytest.raises(OutputError):
            check()


def test_closed_standard_output_is_one_line(ws: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "synergy_opt", *SOLVE],
        cwd=ws,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stderr=subprocess.PIPE,
        text=True,
        timeout=TIMEOUT_S,
        preexec_fn=lambda: os.close(1),
    )
    _assert_refused(ws, r, "standard output")


def test_only_write_errors_are_blamed_on_standard_output(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outputs, "_drop_stdout", lambda: None)  # keep pytest's capture intact
    err = outputs.stdout_failure(OSError(errno.ENOSPC, "No space left on device"))
    assert isinstance(err, OutputError) and "standard output" in str(err)
    assert outputs.stdout_failure(OSError(errno.ENOSPC, "full", "data.json")) is None  # a file
    assert outputs.stdout_failure(TimeoutError(errno.ETIMEDOUT, "timed out")) is None
    assert outputs.stdout_failure(ConnectionRefusedError(errno.ECONNREFUSED, "refused")) is None


def test_every_command_with_an_output_is_in_the_corpus() -> None:
    """A new command that writes must join the corpus (and call ``preflight``)."""
    from tests.test_cli_help import ALL

    writing = {
        name.removeprefix("synergy-opt ")
        for name, parser in ALL
        if any("-o" in a.option_strings for a in parser._actions)
    }
    covered = {
        " ".join(c.argv[:2]) if c.argv[0] == "trace" else c.argv[0]
        for c in [*UNWRITABLE.values(), *DATA_LOSS.values()]
    }
    assert writing and writing <= covered, sorted(writing - covered)
