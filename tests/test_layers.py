"""Layers point one way: no library module imports the command layer.

``synergy_opt.commands`` and ``synergy_opt.cli`` sit on top of the library; a library module
that imports them drags argparse and every command into its import graph and makes a cycle
waiting to happen.  Only the command layer itself and the ``python -m synergy_opt`` entry
point (``__main__.py``) may import them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import ROOT

PACKAGE = ROOT / "synergy_opt"
UPPER = ("synergy_opt.commands", "synergy_opt.cli")
#: Modules allowed to import the command layer (relative to the package).
ENTRY_POINTS = frozenset({"cli.py", "__main__.py"})


def _is_upper(name: str, upper: tuple[str, ...] = UPPER) -> bool:
    return any(name == u or name.startswith(u + ".") for u in upper)


def upward_imports(source: str, upper: tuple[str, ...] = UPPER) -> list[str]:
    """Every import of the command layer in ``source``, at any depth (lazy imports too).

    ``from synergy_opt import cli`` and ``importlib.import_module("synergy_opt.cli")``
    count as well: a string naming the module is an import waiting to happen.
    """
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if _is_upper(a.name, upper)]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if _is_upper(node.module, upper):
                found.append(node.module)
            elif node.module == "synergy_opt":
                names = (f"synergy_opt.{a.name}" for a in node.names)
                found += [n for n in names if _is_upper(n, upper)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if _is_upper(node.value, upper):
                found.append(node.value)
    return found


def library_modules() -> list[Path]:
    """Every module of the package outside the command layer and the entry points."""
    return sorted(
        p
        for p in PACKAGE.rglob("*.py")
        if "commands" not in p.relative_to(PACKAGE).parts
        and str(p.relative_to(PACKAGE)) not in ENTRY_POINTS
    )


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from synergy_opt.commands.common import positive_int", ["synergy_opt.commands.common"]),
        ("import synergy_opt.cli", ["synergy_opt.cli"]),
        ("from synergy_opt import cli, io", ["synergy_opt.cli"]),
        ("def f():\n    from synergy_opt.commands import solve\n", ["synergy_opt.commands"]),
        ("importlib.import_module('synergy_opt.commands.trace')", ["synergy_opt.commands.trace"]),
        ("from synergy_opt.argtypes import positive_int", []),
        ("import synergy_opt.clingo_like", []),
    ],
)
def test_detector_finds_upward_imports(source: str, expected: list[str]) -> None:
    assert upward_imports(source) == expected


def test_library_modules_are_found() -> None:
    names = {str(p.relative_to(PACKAGE)) for p in library_modules()}
    assert {"io.py", "check.py", "profiling/workload.py", "sim/engine.py"} <= names
    assert not any(n.startswith("commands/") for n in names)


def test_no_library_module_imports_the_command_layer() -> None:
    offenders = {
        str(p.relative_to(ROOT)): hits
        for p in library_modules()
        if (hits := upward_imports(p.read_text(encoding="utf-8")))
    }
    assert offenders == {}


#: Lower modules and the layers above them they must not import (issue 12): the solver and
#: its matrix type sit below the models that build matrices.
BELOW: dict[str, tuple[str, ...]] = {
    "matrix.py": ("synergy_opt.solve", "synergy_opt.formulations", "synergy_opt.mechanisms"),
    "solve.py": ("synergy_opt.formulations", "synergy_opt.mechanisms"),
}


@pytest.mark.parametrize("module", sorted(BELOW))
def test_lower_modules_do_not_import_upper_layers(module: str) -> None:
    source = (PACKAGE / module).read_text(encoding="utf-8")
    assert upward_imports(source, BELOW[module]) == []


def test_lower_layer_detector_sees_a_formulation_import() -> None:
    source = "def f():\n    from synergy_opt.formulations.fast import MatrixModel\n"
    assert upward_imports(source, BELOW["solve.py"]) == ["synergy_opt.formulations.fast"]


# --------------------------------------------------------------------------- no machine paths

#: Operating-system interfaces a test may name: the same on every Linux machine.
OS_PATHS = ("/dev/", "/proc/")


def absolute_paths(source: str) -> list[str]:
    """String literals in ``source`` that are absolute file-system paths (f-string parts too).

    Tests and benchmarks find data relative to the repository (``tests/conftest.py``); an
    absolute path works on one machine only, and silently skips or fails anywhere else.
    """
    tree = ast.parse(source)
    inner: set[int] = set()  # f-string pieces after the first: not the start of a path
    heads: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            inner.update(id(v) for v in node.values)
            first = node.values[0] if node.values else None
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                heads.append(first.value)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in inner:
            heads.append(node.value)
    return [t for t in heads if _is_machine_path(t)]


def _is_machine_path(text: str) -> bool:
    return (
        text.startswith("/")
        and len(text) > 1
        and not text.startswith(OS_PATHS)
        and "\n" not in text
        and " " not in text.split("/")[1]
    )


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        # The expected paths are spelled "/" + "..." so this file does not trip the test.
        ('TRACE = Path("/work/shared/data/x.csv")', ["/" + "work/shared/data/x.csv"]),
        ('p = f"/home/{user}/data"', ["/" + "home/"]),
        ('open("/dev/full", "w")', []),
        ('Path(f"/proc/{pid}/stat")', []),
        ('x = "a/b.csv"; y = "/"', []),
    ],
)
def test_absolute_path_detector(source: str, expected: list[str]) -> None:
    assert absolute_paths(source) == expected


def test_no_absolute_path_in_tests_or_bench() -> None:
    offenders = {
        str(p.relative_to(ROOT)): hits
        for folder in ("tests", "bench")
        for p in sorted((ROOT / folder).rglob("*.py"))
        if (hits := absolute_paths(p.read_text(encoding="utf-8")))
    }
    assert offenders == {}
