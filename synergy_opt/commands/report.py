"""``synergy-opt report DIR``: one CSV table and the standard plots from a sweep folder.

Writes ``report.csv`` (a row per cell), ``speedup.csv`` (seed-averaged, with the speed-up
over PROPORTIONAL), ``avg_jct.png``, ``p99_jct.png`` and ``speedup.png`` into ``DIR/report``
(or ``-o``), and prints the seed-averaged table.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from synergy_opt.outputs import Output, preflight
from synergy_opt.sweep.report import (
    PLOT_FILES,
    REPORT_CSV,
    SPEEDUP_CSV,
    format_speedups,
    write_report,
)
from synergy_opt.sweep.runner import CELLS, MANIFEST


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
    out = args.output if args.output is not None else str(Path(args.dir) / "report")
    names = (REPORT_CSV, SPEEDUP_CSV, *(PLOT_FILES if args.plots else ()))
    root = Path(args.dir)
    inputs = [("DIR", str(root / MANIFEST))]
    if (root / CELLS).is_dir():
        inputs += [("DIR", str(f)) for f in sorted((root / CELLS).glob("*/*"))]
    preflight(inputs, [Output("-o", out, folder=True, files=names)])
    files = write_report(args.dir, out, x=args.x, plots=args.plots)
    if not args.quiet:
        print(format_speedups(files.points))
        print(
            f"{files.cells} cells -> {files.table}, {files.speedup}"
            + "".join(f", {p.name}" for p in files.plots)
        )
    return 0
