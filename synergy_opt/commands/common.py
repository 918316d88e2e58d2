"""Helpers shared by sub-commands: output handling and argument types."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from synergy_opt.io import dumps, write_json_atomic

T = TypeVar("T", int, float)


class UsageError(ValueError):
    """A bad option value or combination; printed as one line, exit code 2."""


def emit_json(obj: Any, output: str | None) -> None:
    """Write JSON atomically to ``output``, or to standard output when it is ``None``/``-``."""
    if output is None or output == "-":
        sys.stdout.write(dumps(obj))
    else:
        write_json_atomic(output, obj)


def _bounded(
    cast: Callable[[str], T], kind: str, minimum: float, strict: bool
) -> Callable[[str], T]:
    """An argparse type: ``cast(text)``, finite, and > (strict) or >= ``minimum``."""

    def parse(text: str) -> T:
        try:
            v = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind}, got {text!r}") from None
        ok = v > minimum if strict else v >= minimum  # False for NaN
        if not ok or v == float("inf"):
            bound = f"> {minimum:g}" if strict else f">= {minimum:g}"
            what = f"a finite number {bound}" if cast is float else bound
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
        return v

    return parse


#: argparse types for option values; each names the problem in one line.
positive_float = _bounded(float, "a number", 0, strict=True)
nonneg_float = _bounded(float, "a number", 0, strict=False)
positive_int = _bounded(int, "an integer", 1, strict=False)
nonneg_int = _bounded(int, "an integer", 0, strict=False)
