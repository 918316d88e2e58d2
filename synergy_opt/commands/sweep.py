"""``synergy-opt sweep SPEC.toml -o DIR``: run a spec's cross product of simulations, resumably.

Each cell writes ``DIR/cells/<key>/`` (``summary.json``, ``jobs.csv``, ``cell.json``)
atomically; rerunning the same command skips finished cells, so a sweep killed at any
moment completes on the next run.  Runs on this machine (``--workers N``) or on Dask
(``--dask local`` starts a LocalCluster, ``--dask tcp://HOST:PORT`` uses an existing one).
Exit code 1 when some cell failed (its error is printed; a rerun retries it).
"""

from __future__ import annotations

import argparse
import logging

from synergy_opt.commands.common import UsageError, positive_int
from synergy_opt.outputs import Output, preflight
from synergy_opt.sweep.runner import CELLS, LOCK, MANIFEST, run_sweep
from synergy_opt.sweep.spec import SweepSpec, load_spec

#: Cell options that name files the cells read.
PATH_OPTIONS = ("trace", "cluster", "profiles")

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``sweep`` sub-command."""
    p = sub.add_parser("sweep", help="run a grid of simulations (resumable)", description=__doc__)
    p.add_argument("spec", metavar="SPEC.toml", help="sweep spec ([sweep], [base], [axes])")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="sweep folder")
    p.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        help="parallel processes (default: all cores; with --dask local: workers)",
    )
    p.add_argument(
        "--dask",
        default=None,
        metavar="local|tcp://HOST:PORT",
        help="run the cells on Dask: a new LocalCluster or an existing scheduler",
    )
    p.add_argument("--dry-run", action="store_true", help="list the cells and exit")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def _inputs(spec_path: str, spec: SweepSpec) -> list[tuple[str, str | None]]:
    """The spec file and every file its cells read (a cell's folder may not hold them)."""
    found: dict[str, str] = {}
    for cell in spec.cells():
        for name in PATH_OPTIONS:
            value = cell.get(name)
            if isinstance(value, str):
                found.setdefault(value, f"{spec_path}: {name}")
    return [("SPEC.toml", spec_path), *((where, path) for path, where in found.items())]


def run(args: argparse.Namespace) -> int:
    """Load, validate, run the missing cells, print what happened."""
    if args.dask is not None and args.dask != "local" and "://" not in args.dask:
        raise UsageError(
            "--dask: expected 'local' or a scheduler address like tcp://HOST:8786, "
            f"got {args.dask!r}"
        )
    spec = load_spec(args.spec)
    preflight(
        _inputs(args.spec, spec),
        [Output("-o", args.output, folder=True, files=(MANIFEST, LOCK), trees=(CELLS,))],
    )
    if args.dry_run:
        for cell in spec.cells():
            print(cell.key)
        return 0
    out = run_sweep(
        spec, args.output, workers=args.workers, dask=args.dask, progress=not args.quiet
    )
    for key, err in out.failed:
        print(f"{key}: {err}")
    if not args.quiet:
        print(
            f"{spec.name}: {out.total} cells, {out.skipped} already done, {out.ran} run, "
            f"{len(out.failed)} failed ({out.seconds:.1f} s) -> {args.output}"
        )
    return 0 if not out.failed else 1
