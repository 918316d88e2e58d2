"""Helpers shared by sub-commands: output handling and argument types."""

from __future__ import annotations

from typing import Any

# The bounded-number argparse types live below the command layer (synergy_opt.argtypes) so
# library entry points can use them; re-exported here for the commands.
from synergy_opt.argtypes import (
    nonneg_float,
    nonneg_int,
    positive_float,
    positive_int,
    utf8_text,
)
from synergy_opt.io import dumps, write_json_atomic
from synergy_opt.outputs import STDOUT, write_stdout

__all__ = [
    "UsageError",
    "emit_json",
    "nonneg_float",
    "nonneg_int",
    "positive_float",
    "positive_int",
    "utf8_text",
]


class UsageError(ValueError):
    """A bad option value or combination; printed as one line, exit code 2."""


def emit_json(obj: Any, output: str | None) -> None:
    """Write JSON atomically to ``output``, or to standard output when it is ``None``/``-``."""
    if output is None or output == STDOUT:
        write_stdout(dumps(obj))
    else:
        write_json_atomic(output, obj)
