"""docs/formats.md stays in step with the code: every format, command and checker kind.

The contract lives inside the repository; a format string the code writes, a sub-command
or a violation kind the page does not name is a contract nobody can read.
"""

from __future__ import annotations

import re

from synergy_opt.check import KINDS
from tests.conftest import ROOT
from tests.test_cli_help import ALL

DOC = ROOT / "docs" / "formats.md"
FORMAT_STRING = re.compile(r"[\"'](synergy-[a-z-]+/\d+)[\"']")


def doc() -> str:
    return DOC.read_text(encoding="utf-8")


def formats_in_code() -> set[str]:
    """Every ``"synergy-.../N"`` format string in the package's source."""
    found: set[str] = set()
    for p in (ROOT / "synergy_opt").rglob("*.py"):
        found.update(FORMAT_STRING.findall(p.read_text(encoding="utf-8")))
    return found


def test_every_format_written_is_documented() -> None:
    found = formats_in_code()
    assert {"synergy-round/1", "synergy-allocation/1", "synergy-profile/1"} <= found
    assert sorted(f for f in found if f"`{f}`" not in doc()) == []


def test_every_checker_kind_is_documented() -> None:
    rules = doc().split("## 2.", 1)[1].split("## 3.", 1)[0]
    assert sorted(k for k in KINDS if f"`{k}`" not in rules) == []


def test_every_command_is_documented() -> None:
    commands = {name.removeprefix("synergy-opt ") for name, _ in ALL if name != "synergy-opt"}
    commands.discard("trace")  # a group; `trace convert` is the command
    table = doc().split("## 3.", 1)[1].split("## 4.", 1)[0]
    assert sorted(c for c in commands if f"| `{c} " not in table and f"| `{c}`" not in table) == []


def test_linked_pages_exist() -> None:
    for target in re.findall(r"\]\(([^)#]+\.md)\)", doc()):
        assert (DOC.parent / target).is_file(), target


#: Where code, tests and docs may point readers: the repository's own pages, not the
#: development tree's shared folder or the seed summary's numbering.
FOREIGN_REFERENCES = re.compile(r"FORMATS\.md|[Ss]eed section \d")
SCANNED = ("synergy_opt", "tests", "bench", "notebooks", "formulations", "docs")


def test_no_reference_outside_the_repository() -> None:
    hits = []
    for folder in SCANNED:
        for p in sorted((ROOT / folder).rglob("*")):
            if p.suffix not in {".py", ".md", ".ipynb", ".toml"} or p == DOC:
                continue
            if p == ROOT / "tests" / "test_docs_formats.py":
                continue  # this file names the patterns
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
                if FOREIGN_REFERENCES.search(line):  # case matters: docs/formats.md is ours
                    hits.append(f"{p.relative_to(ROOT)}:{n}")
    assert hits == []
