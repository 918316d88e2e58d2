"""``synergy-opt check``: verify an allocation against its instance, one violation a line."""

from __future__ import annotations

import argparse

from synergy_opt.check import check_allocation
from synergy_opt.io import load_allocation, load_instance


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``check`` sub-command."""
    p = sub.add_parser("check", help="check an allocation", description=__doc__)
    p.add_argument(
        "instance", metavar="INSTANCE.json", help="round instance (docs/formats.md section 1)"
    )
    p.add_argument(
        "allocation",
        metavar="ALLOCATION.json",
        help="allocation to check against it (docs/formats.md section 2)",
    )
    p.add_argument(
        "--fair-share", action="store_true", help="also flag jobs below their fair-share throughput"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print violations; exit 0 when there are none, 1 otherwise."""
    inst = load_instance(args.instance)
    alloc = load_allocation(args.allocation)
    violations = check_allocation(inst, alloc, fair_share=args.fair_share)
    for v in violations:
        print(v)
    return 1 if violations else 0
