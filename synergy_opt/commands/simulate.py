"""``synergy-opt simulate``: replay a trace (a file or a generated paper workload) on a cluster.

Writes ``DIR/summary.json`` and ``DIR/jobs.csv`` (docs/formats.md section 4) and prints a short
table.  The option parsing here is shared with ``synergy-opt compare``.
"""

from __future__ import annotations

import argparse
import logging
import sys

from synergy_opt.commands.simopts import (
    add_common_options,
    build_config,
    build_trace,
    check_mechanism,
    check_policy,
    check_semantics,
    format_table,
    input_files,
    run_one,
)
from synergy_opt.mechanisms import mechanism_names
from synergy_opt.outputs import Output, preflight
from synergy_opt.policies import policy_names
from synergy_opt.profiles import load_profiles
from synergy_opt.sim.engine import SimulationError
from synergy_opt.sim.metrics import (
    JCT_CDF_PNG,
    JOBS_FILE,
    SUMMARY_FILE,
    TIMELINE_PNG,
    summarize,
    write_outputs,
)

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- command


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``simulate`` sub-command."""
    p = sub.add_parser("simulate", help="replay a job trace on a cluster", description=__doc__)
    p.add_argument("--policy", default="fifo", help=f"one of: {', '.join(policy_names())}")
    p.add_argument("--mechanism", default="tune", help=f"one of: {', '.join(mechanism_names())}")
    p.add_argument(
        "-o",
        "--output",
        default="out/simulate",
        metavar="DIR",
        help="folder for summary.json and jobs.csv (docs/formats.md section 4)",
    )
    p.add_argument(
        "--plots", action="store_true", help="also write utilisation.png and jct_cdf.png"
    )
    add_common_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Simulate, write the two result files, print the table."""
    check_policy(args.policy)
    check_mechanism(args.mechanism)
    files = (SUMMARY_FILE, JOBS_FILE) + ((TIMELINE_PNG, JCT_CDF_PNG) if args.plots else ())
    preflight(input_files(args), [Output("-o", args.output, folder=True, files=files)])
    config = build_config(args)
    check_semantics(config, [args.mechanism], "--mechanism")
    profiles = load_profiles(args.profiles)
    trace = build_trace(args, profiles, config)
    try:
        result = run_one(config, trace, args.mechanism, args.policy, args, profiles)
    except SimulationError as e:
        print(f"simulate: {e}", file=sys.stderr)
        return 1
    seed = None if args.trace is not None else args.seed
    out = write_outputs(result, args.output, seed=seed)
    if args.plots:
        from synergy_opt.sim.plots import plot_jct_cdf, plot_timeline

        plot_timeline(result, out / TIMELINE_PNG)
        plot_jct_cdf({f"{result.policy}/{result.mechanism}": result}, out / JCT_CDF_PNG)
    if not args.quiet:
        print(format_table([summarize(result, seed)]))
        print(f"wrote {out / SUMMARY_FILE} and {out / JOBS_FILE}")
    return 0
