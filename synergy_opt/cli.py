"""The ``synergy-opt`` command: a thin layer that parses arguments and calls the library.

Each sub-command lives in ``synergy_opt.commands.<name>`` and exposes
``register(subparsers)``; it sets ``func`` to a ``run(args) -> int`` callable.  This module
only wires them up, configures logging and maps errors to exit codes (docs/formats.md section 3):
0 success, 1 violations or no feasible answer, 2 bad input or usage.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from synergy_opt.commands.common import UsageError
from synergy_opt.errors import InputError, ValidationError
from synergy_opt.limits import OPTION_LIMITS, check_options, option_help
from synergy_opt.outputs import flush_stdout, stdout_failure

#: Sub-command modules, in the order ``--help`` lists them.
COMMANDS: tuple[str, ...] = (
    "synergy_opt.commands.solve",
    "synergy_opt.commands.check",
    "synergy_opt.commands.generate",
    "synergy_opt.commands.demo",
    "synergy_opt.commands.trace",
    "synergy_opt.commands.profile",
    "synergy_opt.commands.simulate",
    "synergy_opt.commands.compare",
    "synergy_opt.commands.sweep",
    "synergy_opt.commands.report",
)

log = logging.getLogger("synergy_opt")


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors on one line with exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser with every registered sub-command."""
    parser = _Parser(prog="synergy-opt", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name in COMMANDS:
        importlib.import_module(name).register(sub)
    _say_limits(parser)
    return parser


def _say_limits(parser: argparse.ArgumentParser) -> None:
    """Append each bounded option's range (synergy_opt.limits) to its help text."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                _say_limits(child)
        elif action.option_strings and action.dest in OPTION_LIMITS:
            kind = action.type
            bound = option_help(
                action.dest, getattr(kind, "minimum", None), getattr(kind, "strict", False)
            )
            action.help = f"{action.help} [{bound}]" if action.help else bound


def check_option_limits(args: argparse.Namespace) -> None:
    """UsageError naming the option when a parsed number is outside its documented limit."""
    try:
        check_options(vars(args))
    except ValidationError as e:
        raise UsageError(f"--{e.path.replace('_', '-')}: {e.problem}") from None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING - 10 * min(args.verbose, 2),
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        check_option_limits(args)
        code = int(args.func(args))
        flush_stdout()  # a full standard output is one line too, not a traceback at exit
        return code
    except (InputError, UsageError) as e:
        print(str(e), file=sys.stderr)
        return 2
    except OSError as e:
        err = stdout_failure(e)
        if err is None:
            raise
        print(str(err), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
