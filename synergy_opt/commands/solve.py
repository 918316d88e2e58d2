"""``synergy-opt solve``: allocate one round instance with a named mechanism."""

from __future__ import annotations

import argparse
import logging

from synergy_opt.commands.common import (
    UsageError,
    emit_json,
    nonneg_int,
    positive_float,
    positive_int,
)
from synergy_opt.io import allocation_to_dict, load_instance
from synergy_opt.mechanisms import (
    MechanismOptions,
    is_mechanism,
    make_mechanism,
    mechanism_names,
)
from synergy_opt.outputs import Output, preflight
from synergy_opt.solve import BACKENDS

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``solve`` sub-command."""
    p = sub.add_parser("solve", help="allocate one round instance", description=__doc__)
    p.add_argument(
        "instance", metavar="INSTANCE.json", help="round instance (docs/formats.md section 1)"
    )
    p.add_argument("--mechanism", required=True, help=f"one of: {', '.join(mechanism_names())}")
    p.add_argument("--solver", choices=BACKENDS, default="highs", help="LP/MIP back-end (opt)")
    p.add_argument(
        "--time-limit",
        type=positive_float,
        default=None,
        metavar="SECONDS",
        help="time limit of the LP/MIP solves (opt, opt-exact)",
    )
    p.add_argument("--threads", type=positive_int, default=None, help="solver threads")
    p.add_argument(
        "--max-fragmented",
        type=nonneg_int,
        default=None,
        metavar="K",
        help=(
            "opt: spread at most K jobs over several servers (default and ceiling: 3 per "
            "server, the paper's bound); fewer spread jobs can cost throughput, and jobs too "
            "big for any server still count"
        ),
    )
    p.add_argument(
        "-o",
        "--output",
        default=None,
        metavar="ALLOCATION.json",
        help="write the allocation here (docs/formats.md section 2; default: standard output)",
    )
    p.set_defaults(func=run)


def _outputs(args: argparse.Namespace) -> list[Output]:
    return [] if args.output is None else [Output("-o", args.output, stdout=True)]


def run(args: argparse.Namespace) -> int:
    """Solve and write the allocation; exit 1 when nothing at all could be scheduled."""
    if not is_mechanism(args.mechanism):
        raise UsageError(
            f"--mechanism: unknown mechanism {args.mechanism!r}; "
            f"known: {', '.join(mechanism_names())}"
        )
    preflight([("INSTANCE.json", args.instance)], _outputs(args))
    inst = load_instance(args.instance)
    mech = make_mechanism(
        args.mechanism,
        MechanismOptions(
            solver=args.solver,
            time_limit_s=args.time_limit,
            threads=args.threads,
            max_fragmented=args.max_fragmented,
        ),
    )
    alloc = mech.allocate(inst)
    emit_json(allocation_to_dict(alloc), args.output)
    log.info(
        "%s: %d of %d jobs scheduled, total throughput %.6g",
        args.mechanism,
        len(alloc.jobs),
        len(inst.jobs),
        alloc.total_throughput,
    )
    return 0 if alloc.jobs or not inst.jobs else 1
