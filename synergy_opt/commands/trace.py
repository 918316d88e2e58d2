"""``synergy-opt trace convert``: public cluster traces -> job trace CSV (+ cluster JSON).

Prints where every input row went (converted, or skipped and why) so nothing is dropped
silently; the library does the work (:mod:`synergy_opt.traces`).
"""

from __future__ import annotations

import argparse
import sys

from synergy_opt.commands.common import UsageError, nonneg_int, positive_float, positive_int
from synergy_opt.io import cluster_to_dict, write_json_atomic
from synergy_opt.outputs import Output, preflight
from synergy_opt.profiles import load_profiles, parse_split
from synergy_opt.tracefile import write_trace
from synergy_opt.traces import CONVERTERS, ConvertOptions, convert


def _split(text: str) -> tuple[float, float, float]:
    try:
        return parse_split(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _fraction(text: str) -> float:
    v = positive_float(text)
    if v > 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text!r}")
    return v


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``trace`` sub-command group (``trace convert``)."""
    p = sub.add_parser("trace", help="convert public cluster traces", description=__doc__)
    tsub = p.add_subparsers(dest="trace_command", metavar="ACTION", parser_class=type(p))
    tsub.required = True
    c = tsub.add_parser(
        "convert",
        help="public trace -> job trace CSV (docs/formats.md section 5)",
        description="Convert a public trace into synergy-opt's job trace; see docs/real-traces.md.",
    )
    c.add_argument(
        "--from",
        dest="kind",
        required=True,
        choices=sorted(CONVERTERS),
        help="the public trace the INPUT files come from",
    )
    c.add_argument(
        "inputs",
        nargs="+",
        metavar="INPUT",
        help="alibaba-gpu-2023: pod list (+ node list); philly: cluster_job_log",
    )
    c.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="TRACE.csv",
        help="job trace to write (docs/formats.md section 5)",
    )
    c.add_argument(
        "--cluster-out",
        default=None,
        metavar="CLUSTER.json",
        help="write the node list as a cluster object (alibaba-gpu-2023)",
    )
    c.add_argument("--seed", type=int, default=0, help="seed of the task -> model rule")
    c.add_argument("--skip-bad", action="store_true", help="drop and count malformed rows")
    c.add_argument(
        "--profiles",
        default=None,
        metavar="PROFILES.json",
        help="map tasks to these profiles instead of the shipped ones",
    )
    g = c.add_argument_group("alibaba-gpu-2023")
    g.add_argument(
        "--gpu-sharing",
        choices=("whole", "skip"),
        default="whole",
        help="pods using a fraction of a GPU: give a whole GPU (default) or skip",
    )
    g.add_argument(
        "--cpu-only",
        choices=("skip", "one-gpu"),
        default="skip",
        help="pods without GPUs: skip (default) or give one GPU",
    )
    g.add_argument(
        "--unfinished",
        choices=("censor", "skip"),
        default="censor",
        help="pods without deletion_time: end at the trace's end (default) or skip",
    )
    g.add_argument(
        "--phases",
        default=None,
        metavar="P1,P2",
        help="keep only these pod_phase values (default: all that ran)",
    )
    g.add_argument(
        "--cpu-nodes",
        choices=("drop", "keep"),
        default="drop",
        help="nodes without GPUs in --cluster-out (default: drop)",
    )
    g.add_argument(
        "--nodes-fraction",
        type=_fraction,
        default=1.0,
        metavar="F",
        help="keep this fraction of nodes, stratified by configuration",
    )
    ph = c.add_argument_group("philly")
    ph.add_argument(
        "--attempts",
        choices=("sum", "last"),
        default="sum",
        help="duration from all attempts (default) or the last one",
    )
    ph.add_argument(
        "--split",
        type=_split,
        default=(20.0, 70.0, 10.0),
        metavar="I,L,S",
        help="category split in percent for the model rule (default 20,70,10)",
    )
    sel = c.add_argument_group("selection")
    sel.add_argument(
        "--skip-jobs",
        type=nonneg_int,
        default=0,
        metavar="K",
        help="drop the first K converted jobs (arrival order)",
    )
    sel.add_argument(
        "--max-jobs",
        type=positive_int,
        default=None,
        metavar="N",
        help="keep at most N jobs after --skip-jobs",
    )
    sel.add_argument(
        "--compress-arrivals",
        type=positive_float,
        default=1.0,
        metavar="F",
        help="divide inter-arrival times by F (F > 1: busier trace)",
    )
    c.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Convert, write the trace (and cluster), print the row accounting."""
    if args.cluster_out is not None and args.kind != "alibaba-gpu-2023":
        raise UsageError(f"--cluster-out: the {args.kind} format carries no node list")
    outputs = [Output("-o", args.output)]
    if args.cluster_out is not None:
        outputs.append(Output("--cluster-out", args.cluster_out))
    preflight([("INPUT", p) for p in args.inputs] + [("--profiles", args.profiles)], outputs)
    phases = None
    if args.phases is not None:
        phases = tuple(p.strip() for p in args.phases.split(",") if p.strip())
        if not phases:
            raise UsageError("--phases: expected a comma-separated list of pod_phase values")
    opts = ConvertOptions(
        seed=args.seed,
        skip_bad=args.skip_bad,
        gpu_sharing=args.gpu_sharing,
        cpu_only=args.cpu_only,
        unfinished=args.unfinished,
        phases=phases,
        cpu_nodes=args.cpu_nodes,
        nodes_fraction=args.nodes_fraction,
        attempts=args.attempts,
        split=args.split,
        max_jobs=args.max_jobs,
        skip_jobs=args.skip_jobs,
        arrival_compression=args.compress_arrivals,
    )
    profiles = load_profiles(args.profiles)
    conv = convert(args.kind, args.inputs, opts, profiles)
    if args.cluster_out is not None and conv.cluster is None:
        raise UsageError(
            "--cluster-out: give the node list (openb_node_list_*.csv) as an INPUT too"
        )
    if not conv.jobs:
        raise UsageError("no job left to write: " + "; ".join(conv.report.lines()[:4]))
    write_trace(args.output, conv.jobs)
    if args.cluster_out is not None and conv.cluster is not None:
        write_json_atomic(args.cluster_out, cluster_to_dict(conv.cluster))
    out = sys.stdout
    for line in conv.report.lines():
        print(line, file=out)
    for note in conv.cluster_notes:
        print(note, file=out)
    print(
        f"wrote {len(conv.jobs)} jobs to {args.output}"
        + (f" and the cluster to {args.cluster_out}" if args.cluster_out else ""),
        file=out,
    )
    return 0
