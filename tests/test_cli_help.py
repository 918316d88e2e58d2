"""Every command-line option and argument says what it is for (``--help`` is the manual)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from synergy_opt.cli import _say_limits, build_parser
from synergy_opt.limits import OPTION_LIMITS, option_help


def parsers(
    parser: argparse.ArgumentParser, name: str = "synergy-opt"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """The parser and every sub-command's parser, depth first (``trace convert`` too)."""
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from parsers(sub, f"{name} {sub_name}")


def describes(action: argparse.Action) -> bool:
    """True when the help says what the option is for, beyond its numeric range.

    The command line appends a bounded option's range (``cli._say_limits``); without a
    description of its own the help is that range alone, which says what values pass but
    not what the option does.
    """
    text = action.help or ""
    limit = OPTION_LIMITS.get(action.dest) if action.option_strings else None
    if limit is not None:
        kind = action.type
        bound = option_help(
            action.dest, getattr(kind, "minimum", None), getattr(kind, "strict", False)
        )
        if text == bound:
            return False
        text = text.removesuffix(f" [{bound}]")
    return bool(text.strip())


def missing_help(parser: argparse.ArgumentParser) -> list[str]:
    """Options and positional arguments of ``parser`` without a help text."""
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        if action.help == argparse.SUPPRESS:
            continue
        if not describes(action):
            out.append("/".join(action.option_strings) or action.dest)
    return out


ALL = list(parsers(build_parser()))


def test_walk_reaches_every_command() -> None:
    names = {n for n, _ in ALL}
    assert {"synergy-opt solve", "synergy-opt generate", "synergy-opt trace convert"} <= names
    assert len(names) >= 12


def test_detector_flags_an_option_without_help() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--with", help="documented")
    p.add_argument("--without")
    p.add_argument("path")
    p.add_argument("--servers")  # bounded: gets its range as help, but no description
    p.add_argument("--seed", help="workload seed")
    _say_limits(p)
    assert missing_help(p) == ["--without", "path", "--servers"]


@pytest.mark.parametrize("name", [n for n, _ in ALL])
def test_every_option_has_help(name: str) -> None:
    parser = dict(ALL)[name]
    assert missing_help(parser) == []


def bounded_options() -> list[tuple[str, argparse.Action]]:
    return [
        (f"{name} {action.option_strings[-1]}", action)
        for name, parser in ALL
        for action in parser._actions
        if action.option_strings and action.dest in OPTION_LIMITS
    ]


@pytest.mark.parametrize(("name", "action"), bounded_options(), ids=lambda v: str(v))
def test_the_range_in_help_is_the_range_the_option_takes(
    name: str, action: argparse.Action
) -> None:
    """``simulate --jobs`` once said ``[0, 1_000_000]`` and refused 0: an option whose own
    type starts above its limit states the narrower range."""
    kind = action.type
    minimum, strict = getattr(kind, "minimum", None), getattr(kind, "strict", False)
    bound = option_help(action.dest, minimum, strict)  # in the help: test_corpus_input
    if callable(kind) and minimum is not None:
        limit = OPTION_LIMITS[action.dest]
        low = max(limit.low, minimum)
        shown_closed = "[" + (str(int(low)) if limit.integer else f"{low:g}") in bound
        if shown_closed:  # the low end the help states is accepted
            kind(str(int(low)) if limit.integer else f"{low:g}")
        with pytest.raises(argparse.ArgumentTypeError):
            kind(str(int(min(low, minimum)) - 1))
