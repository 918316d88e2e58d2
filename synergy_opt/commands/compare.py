"""``synergy-opt compare``: several mechanisms (and policies) on the *same* trace.

Every (policy, mechanism) pair replays the one trace (generated once from ``--seed``, or
``--trace``), so differences come from the scheduler alone.  Writes each run's
``summary.json``/``jobs.csv`` under ``DIR/<policy>-<mechanism>/``, a combined
``DIR/compare.json``, the JCT CDF ``DIR/jct_cdf.png`` and, per run, a utilisation/queue
timeline; prints one table with each run's average JCT relative to the first mechanism.
"""

from __future__ import annotations

import argparse
import logging
import sys

from synergy_opt.commands.common import UsageError
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
from synergy_opt.io import write_json_atomic
from synergy_opt.mechanisms import mechanism_names
from synergy_opt.outputs import Output, preflight
from synergy_opt.policies import policy_names
from synergy_opt.profiles import load_profiles
from synergy_opt.sim.engine import SimResult, SimulationError
from synergy_opt.sim.metrics import (
    JCT_CDF_PNG,
    JOBS_FILE,
    SUMMARY_FILE,
    TIMELINE_PNG,
    summarize,
    write_outputs,
)

log = logging.getLogger(__name__)

DEFAULT_MECHANISMS = "proportional,greedy,tune,tune-sorted"
COMPARE_FILE = "compare.json"


def _names(text: str, option: str) -> list[str]:
    names = [t.strip() for t in text.split(",")]
    if not any(names):
        raise UsageError(f"{option}: expected a comma-separated list, got {text!r}")
    if not all(names):  # 'fifo,,srtf': a name lost to a typo, not silently dropped
        raise UsageError(f"{option}: an empty name in {text!r}")
    if len(set(names)) != len(names):
        raise UsageError(f"{option}: names repeat in {text!r}")
    return names


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``compare`` sub-command."""
    p = sub.add_parser(
        "compare", help="several mechanisms/policies on one trace", description=__doc__
    )
    p.add_argument(
        "--mechanisms",
        default=DEFAULT_MECHANISMS,
        help=f"comma-separated; known: {', '.join(mechanism_names())}",
    )
    p.add_argument(
        "--policies", default="fifo", help=f"comma-separated; known: {', '.join(policy_names())}"
    )
    p.add_argument(
        "-o",
        "--output",
        default="out/compare",
        metavar="DIR",
        help="folder for compare.json, jct_cdf.png and one sub-folder per run "
        "(docs/formats.md section 4)",
    )
    add_common_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run every pair, write per-run outputs, the combined summary and the plots."""
    mechanisms = _names(args.mechanisms, "--mechanisms")
    policies = _names(args.policies, "--policies")
    for m in mechanisms:
        check_mechanism(m, "--mechanisms")
    for p in policies:
        check_policy(p, "--policies")
    runs = [f"{p}-{m}" for p in policies for m in mechanisms]
    files = (COMPARE_FILE, JCT_CDF_PNG) + tuple(
        f"{run}/{name}" for run in runs for name in (SUMMARY_FILE, JOBS_FILE, TIMELINE_PNG)
    )
    preflight(input_files(args), [Output("-o", args.output, folder=True, files=files)])
    config = build_config(args)
    check_semantics(config, mechanisms, "--mechanisms")
    profiles = load_profiles(args.profiles)
    trace = build_trace(args, profiles, config)
    seed = None if args.trace is not None else args.seed
    results: dict[str, SimResult] = {}
    summaries = []
    failed = 0
    for policy in policies:
        for mech in mechanisms:
            try:
                res = run_one(config, trace, mech, policy, args, profiles)
            except SimulationError as e:
                # One mechanism that cannot finish the trace must not hide the others.
                print(f"compare: {policy}/{mech}: {e}", file=sys.stderr)
                failed += 1
                continue
            write_outputs(res, f"{args.output}/{policy}-{mech}", seed=seed)
            results[f"{policy}/{mech}"] = res
            summaries.append(summarize(res, seed))
    # Ratio of each run's average JCT to the first mechanism's under the same policy
    # (e.g. PROPORTIONAL / TUNE = the paper's speed-up when proportional is listed first).
    base = {s["policy"]: s["avg_jct_hours"] for s in summaries if s["mechanism"] == mechanisms[0]}
    ratios = [
        f"{base[s['policy']] / s['avg_jct_hours']:.2f}x"
        if s["policy"] in base and s["avg_jct_hours"] > 0
        else "-"
        for s in summaries
    ]
    write_json_atomic(
        f"{args.output}/{COMPARE_FILE}",
        {
            "format": "synergy-sim-compare/1",
            "baseline_mechanism": mechanisms[0],
            "runs": summaries,
        },
    )
    from synergy_opt.sim.plots import plot_jct_cdf, plot_timeline

    plot_jct_cdf(results, f"{args.output}/{JCT_CDF_PNG}")
    for label, res in results.items():
        plot_timeline(res, f"{args.output}/{label.replace('/', '-')}/{TIMELINE_PNG}")
    if not args.quiet:
        print(format_table(summaries, [(f"{mechanisms[0]}/this", ratios)]))
        print(f"wrote {args.output}/{COMPARE_FILE} and {args.output}/{JCT_CDF_PNG}")
    return 1 if failed else 0
