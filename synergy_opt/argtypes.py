"""Bounded-number and text argparse types, below every command-line entry point.

They live here rather than in :mod:`synergy_opt.commands` so that runnable library modules
(``python -m synergy_opt.profiling.workload``) can use them without importing the command
layer: library modules never import ``synergy_opt.commands`` or ``synergy_opt.cli``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypeVar

from synergy_opt.limits import is_number_text

T = TypeVar("T", int, float)


def _bounded(
    cast: Callable[[str], T], kind: str, minimum: float, strict: bool
) -> Callable[[str], T]:
    """An argparse type: ``cast(text)``, finite, and > (strict) or >= ``minimum``."""

    def parse(text: str) -> T:
        try:
            if not is_number_text(text.strip()):
                raise ValueError(text)
            v = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind}, got {text!r}") from None
        ok = v > minimum if strict else v >= minimum  # False for NaN
        if not ok or v == float("inf"):
            bound = f"> {minimum:g}" if strict else f">= {minimum:g}"
            what = f"a finite number {bound}" if cast is float else bound
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
        return v

    parse.minimum = minimum  # type: ignore[attr-defined]  # read by the CLI's --help ranges
    parse.strict = strict  # type: ignore[attr-defined]
    return parse


#: argparse types for option values; each names the problem in one line.
positive_float = _bounded(float, "a number", 0, strict=True)
nonneg_float = _bounded(float, "a number", 0, strict=False)
positive_int = _bounded(int, "an integer", 1, strict=False)
nonneg_int = _bounded(int, "an integer", 0, strict=False)


def utf8_text(text: str) -> str:
    """An argparse type for free text that goes into an output file (a name, a command):
    bytes that are not UTF-8 reach Python as surrogates, which no JSON or CSV output can
    hold; refused here, in one line, rather than as a traceback when the file is written."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        shown = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        raise argparse.ArgumentTypeError(f"not UTF-8 text: {shown}") from None
    return text
