"""``synergy-opt report DIR``: one CSV table and the standard plots from a sweep folder.

Writes ``report.csv`` (a row per cell), ``speedup.csv`` (seed-averaged, with the speed-up
over PROPORTIONAL), ``avg_jct.png``, ``p99_jct.png`` and ``speedup.png`` into ``DIR/report``
(or ``-o``), and prints the seed-averaged table.
"""

from __future__ import annotations

import argparse

from synergy_opt.sweep.report import format_speedups, write_report


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``report`` sub-command."""
    p = sub.add_parser(
        "report", help="aggregate a sweep folder into a table and plots", description=__doc__
    )
    p.add_argument("dir", metavar="DIR", help="a folder written by synergy-opt sweep")
    p.add_argument("-o", "--output", default=None, metavar="OUT", help="default: DIR/report")
    p.add_argument(
        "--x",
        default=None,
        metavar="OPTION",
        help="x axis of the plots (default: arrival_rate, else the first varied number)",
    )
    p.add_argument("--no-plots", dest="plots", action="store_false", help="tables only")
    p.add_argument("--quiet", action="store_true", help="print nothing")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Aggregate and print."""
    files = write_report(args.dir, args.output, x=args.x, plots=args.plots)
    if not args.quiet:
        print(format_speedups(files.points))
        print(
            f"{files.cells} cells -> {files.table}, {files.speedup}"
            + "".join(f", {p.name}" for p in files.plots)
        )
    return 0
