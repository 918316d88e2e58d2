"""The packing's pattern LP against CP-SAT on the same packings, side by side in one run.

python bench/bench_packing_lp.py [--family split-penalty] [--gpus 128] [--seeds 0:24]
    [--budget 1.5] [--quick]

For each round, the tightest super-machine's points (``opt``'s packing route's,
``bound_points``) are packed by CP-SAT alone (its deterministic budget, one worker, as the
route runs it without the LP), refuted-or-not by the pattern LP
(``formulations/packing_lp.md``) and, where the LP does not refute them, packed-or-not from
the LP's integral contents (the route's ``_by_contents``), and where none of these settles
them, the packing's arc flow (``formulations/packing_flow.md``, as the route asks it), one
after the other.  Printed
per round: the points' kind and value, each verdict and wall time; then the totals: rounds
the LP refutes, what CP-SAT spent on them, the ratio of the time to settle those rounds, LP
over CP-SAT, the packings the integral contents find that CP-SAT alone does not, and the
rounds the arc flow refutes (its time over what CP-SAT spent on them).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_opt import table  # noqa: E402

from synergy_opt.formulations.packing_cp import solve_packing  # noqa: E402
from synergy_opt.formulations.packing_lp import refute_packing  # noqa: E402
from synergy_opt.generate import FAMILIES, family_round  # noqa: E402
from synergy_opt.mechanisms.opt import Opt  # noqa: E402
from synergy_opt.mechanisms.opt.packing_route import (  # noqa: E402
    _by_contents,
    bound_points,
    route_flow,
    route_packing_data,
)


def _seeds(text: str) -> range:
    try:
        lo, hi = (int(x) for x in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LO:HI, got {text!r}") from None
    if not 0 <= lo < hi:
        raise argparse.ArgumentTypeError(f"expected 0 <= LO < HI, got {text!r}")
    return range(lo, hi)


def _positive(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return v


def main(argv: list[str] | None = None) -> int:
    """Print the per-round table and the totals."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--family", choices=FAMILIES, default="split-penalty")
    ap.add_argument("--gpus", type=int, choices=(32, 64, 96, 128, 256, 512), default=128)
    ap.add_argument("--seeds", type=_seeds, default=range(0, 24), help="LO:HI")
    ap.add_argument("--budget", type=_positive, default=1.5, help="CP-SAT deterministic s")
    ap.add_argument("--quick", action="store_true", help="seeds 0:3")
    args = ap.parse_args(argv)
    seeds = range(0, 3) if args.quick else args.seeds
    rows: list[list[object]] = []
    lp_s = cp_s = cp_on_refuted = lp_on_refuted = 0.0
    refuted = packed = missed = contents_packed = contents_only = 0
    contents_total = flow_time = cp_on_flow = 0.0
    flow_refuted = 0
    for seed in seeds:
        ctx = Opt().context(family_round(args.family, args.gpus, seed))
        if ctx is None:
            continue
        bp = bound_points(ctx)
        data = route_packing_data(ctx, bp)
        verdict = refute_packing(data)
        t = time.perf_counter()
        cp = solve_packing(data, deterministic_s=args.budget)
        cp_wall = time.perf_counter() - t
        by_contents, contents_s = "-", 0.0
        if not verdict.refuted and verdict.listing is not None:
            t = time.perf_counter()
            got = _by_contents(ctx, data, verdict.listing, 1.0, verdict.matrix)
            contents_s = time.perf_counter() - t
            by_contents = "packed" if got is not None else "none"
            contents_packed += got is not None
            contents_only += got is not None and cp.plan is None
            contents_total += contents_s
        lp_s += verdict.seconds
        cp_s += cp_wall
        if verdict.refuted:
            refuted += 1
            cp_on_refuted += cp_wall
            lp_on_refuted += verdict.seconds
        if cp.plan is not None:
            packed += 1
            if verdict.refuted:  # pragma: no cover - the LP is a relaxation of the packing
                print(f"seed {seed}: the LP refuted a packing CP-SAT found", file=sys.stderr)
                return 1
        flow, flow_s = "-", 0.0
        if cp.plan is None and not verdict.refuted and by_contents != "packed":
            # what the route asks last, before CP-SAT's whole budget (FLOW_NODES nodes)
            got_flow = route_flow(data, math.inf)
            flow, flow_s = got_flow.status, got_flow.seconds
            if got_flow.refuted:
                flow_refuted += 1
                flow_time += flow_s
                cp_on_flow += cp_wall
            else:
                missed += 1
        shortfall = "-" if verdict.shortfall is None else f"{verdict.shortfall:.4f}"
        rows.append(
            [
                seed,
                bp.name,
                round(bp.value, 4),
                verdict.contents,
                shortfall,
                "refuted" if verdict.refuted else "-",
                round(verdict.seconds, 4),
                str(cp.status),
                round(cp.deterministic_s, 2),
                round(cp_wall, 3),
                by_contents,
                round(contents_s, 3),
                flow,
                round(flow_s, 3),
            ]
        )
    table(
        f"packing at the tightest super-machine's points, {args.family} {args.gpus} GPUs",
        [
            "seed",
            "points",
            "value",
            "contents",
            "shortfall",
            "LP",
            "LP s",
            "CP-SAT",
            "det s",
            "s",
            "LP's IP",
            "IP s",
            "flow",
            "flow s",
        ],
        rows,
    )
    ratio = lp_on_refuted / cp_on_refuted if cp_on_refuted > 0 else float("nan")
    flow_ratio = flow_time / cp_on_flow if cp_on_flow > 0 else float("nan")
    print(
        f"\n{len(rows)} rounds: CP-SAT packs {packed}; the LP refutes {refuted} "
        f"(CP-SAT spent {cp_on_refuted:.2f} s on them, the LP {lp_on_refuted:.3f} s: "
        f"ratio LP/CP-SAT {ratio:.4f}); the LP's integral contents pack {contents_packed} "
        f"({contents_only} that CP-SAT alone does not, {contents_total:.2f} s in all); "
        f"the arc flow refutes {flow_refuted} of what is left (CP-SAT spent {cp_on_flow:.2f} s "
        f"on them, the flow {flow_time:.3f} s: ratio flow/CP-SAT {flow_ratio:.4f}); "
        f"none of them settles {missed}.  All rounds: LP {lp_s:.3f} s, CP-SAT {cp_s:.2f} s."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
