"""Pricing by enumeration with and without its pruning, side by side in one run.

python bench/bench_pricing_enum.py [--family split-penalty] [--gpus 128]
    [--seeds 2,3,2002,2011] [--time-limit 120] [--quick]

Per round, the root's column generation runs once; each of its pricing calls on a class
priced by enumeration (``formulations/pricing_enum.py``) is solved twice in turn, with the
pruning off and on (``pricing_sets.PRUNE``): rows, runs and sets whose bounds cannot reach
the values the call keeps are not looked at.  The table gives the calls, the pricing
seconds each way and their ratio, the rows valued each way, and whether every call gave
the same bytes (optimum and patterns, in order): the pruning must change nothing but time.
The root stops at ``--time-limit`` (its bound is then the last one priced).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_opt import seed_list, table  # noqa: E402

from synergy_opt.formulations import branch_node as bnode  # noqa: E402
from synergy_opt.formulations import pricing_sets  # noqa: E402
from synergy_opt.formulations.counting import _model_data  # noqa: E402
from synergy_opt.formulations.pricing_enum import PatternTable  # noqa: E402
from synergy_opt.generate import FAMILIES, family_round  # noqa: E402
from synergy_opt.mechanisms.packing import select_runnable  # noqa: E402


class _Both:
    """Solves each pricing call with the pruning off, then on; keeps times and rows."""

    def __init__(self) -> None:
        self.seconds = {False: 0.0, True: 0.0}
        self.rows = {False: 0, True: 0}
        self.calls = 0
        self.differ = 0
        self._solve = PatternTable.solve
        self._set_values = pricing_sets.set_values

    def solve(self, tab: PatternTable, cost: np.ndarray, upper: np.ndarray, keep: int) -> Any:
        got = {}
        for prune in (False, True):
            pricing_sets.PRUNE = prune
            t0 = time.perf_counter()
            got[prune] = self._solve(tab, cost, upper, keep=keep)
            self.seconds[prune] += time.perf_counter() - t0
        self.calls += 1
        (a_top, a_sols), (b_top, b_sols) = got[False], got[True]
        same = (
            a_top == b_top
            and len(a_sols) == len(b_sols)
            and all(x.tobytes() == y.tobytes() for x, y in zip(a_sols, b_sols, strict=True))
        )
        self.differ += not same
        return got[True]

    def set_values(self, m: float, r: Any, rows: np.ndarray, *rest: Any) -> np.ndarray:
        self.rows[pricing_sets.PRUNE] += len(rows)
        return self._set_values(m, r, rows, *rest)


def _root(data: dict[str, Any], limit: float) -> tuple[_Both, float, float]:
    """The root's column generation with every enumeration call solved both ways:
    (the recorder, the root's wall seconds, its bound)."""
    both = _Both()
    solve, set_values = PatternTable.solve, pricing_sets.set_values
    PatternTable.solve = lambda tab, cost, upper, *, keep=8: both.solve(tab, cost, upper, keep)  # type: ignore[method-assign]
    pricing_sets.set_values = both.set_values
    try:
        t0 = time.perf_counter()
        pricer = bnode._Pricer(data)
        lp = bnode.solve_node(
            data, pricer, [], bnode.Node(), prune_at=None, deadline=time.time() + limit
        )
        seconds = time.perf_counter() - t0
    finally:
        PatternTable.solve = solve  # type: ignore[method-assign]
        pricing_sets.set_values = set_values
        pricing_sets.PRUNE = True
    bound = float("nan") if lp is None or lp.bound is None else float(lp.bound)
    return both, seconds, bound


def main(argv: list[str] | None = None) -> int:
    """Print the per-round table and the totals; exit 1 if any call's bytes differed."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--family", choices=sorted(FAMILIES), default="split-penalty")
    ap.add_argument("--gpus", type=int, choices=(32, 64, 96, 128, 256, 512), default=128)
    ap.add_argument("--seeds", type=seed_list, default=[2, 3, 2002, 2011])
    ap.add_argument("--time-limit", type=float, default=120.0, help="the root's, seconds")
    ap.add_argument("--quick", action="store_true", help="seed 2 alone, 20 s")
    args = ap.parse_args(argv)
    if not args.time_limit > 0:
        ap.error("--time-limit: must be a positive number of seconds")
    if args.quick:
        args.seeds, args.time_limit = [2], 20.0
    rows = []
    total = {False: 0.0, True: 0.0}
    differ = 0
    for seed in args.seeds:
        inst = family_round(args.family, args.gpus, seed)
        data = _model_data(inst, select_runnable(inst))
        both, seconds, bound = _root(data, args.time_limit)
        differ += both.differ
        for prune in (False, True):
            total[prune] += both.seconds[prune]
        off, on = both.seconds[False], both.seconds[True]
        rows.append(
            [
                seed,
                both.calls,
                f"{off:.2f}",
                f"{on:.2f}",
                f"{off / on:.2f}" if on > 0 else "-",
                both.rows[False],
                both.rows[True],
                "all" if both.differ == 0 else f"{both.differ} DIFFER",
                f"{bound:.6g}",
                f"{seconds:.1f}",
            ]
        )
    table(
        f"enumeration pricing, pruning off / on, {args.family} {args.gpus} GPUs "
        f"(root's column generation, at most {args.time_limit:g} s)",
        [
            "seed",
            "calls",
            "off s",
            "on s",
            "off/on",
            "rows off",
            "rows on",
            "same bytes",
            "root bound",
            "root s (both)",
        ],
        rows,
    )
    print(
        f"pricing by enumeration, {len(args.seeds)} roots: {total[False]:.2f} s without the "
        f"pruning, {total[True]:.2f} s with it (ratio "
        f"{total[False] / max(total[True], 1e-9):.2f}); calls that differ: {differ}"
    )
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
