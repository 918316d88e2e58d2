"""Pricing by the MIP against the grid program, side by side in one run.

python bench/bench_pricing.py [--family split-penalty] [--gpus 128] [--seeds 7,8,19,21]
    [--all-mip] [--quick]

Per round: the root's column generation runs twice, with and without heuristic pricing
(``formulations/branch_price.md``, "Heuristic pricing"), one after the other: its wall
time, its pricing MIP calls and its converged bound (the same in both, or the round is
flagged).  Then every pricing call of the run without the grid is replayed on the grid
program and on the MIP, one after the other: milliseconds per call, their ratio, and
the calls where the grid's best pattern is the MIP's optimum.  Classes whose table is
short enough are priced by enumeration and skip the grid; ``--all-mip`` prices every class
by the MIP (small rounds too).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_opt import seed_list, table  # noqa: E402

from synergy_opt.formulations import branch_node as bnode  # noqa: E402
from synergy_opt.formulations.counting import _model_data  # noqa: E402
from synergy_opt.formulations.patterns import server_shapes  # noqa: E402
from synergy_opt.formulations.patterns_fast import (  # noqa: E402
    PATTERNS_PER_PRICING,
    _pricing_solve,
)
from synergy_opt.formulations.pricing_grid import GridPricer  # noqa: E402
from synergy_opt.generate import FAMILIES, family_round  # noqa: E402
from synergy_opt.mechanisms.packing import select_runnable  # noqa: E402

#: A grid pattern is the MIP's optimum within this (relative).
HIT_TOL: float = 1e-6


def _root(data: dict[str, Any], method: str, quick: bool) -> tuple[float, int, float, list[Any]]:
    """The root's column generation: (seconds, MIP calls, bound, recorded MIP calls as
    (class, matrix with the call's costs and bounds))."""
    pricer = bnode._Pricer(data, method, heuristic=quick)
    calls: list[Any] = []
    price = pricer.price

    def counted(c: int, prices: Any, node: Any, left: float | None) -> Any:
        mm = pricer.models[c][0]
        cost, upper = pricer._costs(c, prices, node)
        calls.append((c, dataclasses.replace(mm, cost=cost, col_upper=upper)))
        return price(c, prices, node, left)

    pricer.price = counted  # type: ignore[method-assign]
    t0 = time.perf_counter()
    lp = bnode.solve_node(data, pricer, [], bnode.Node(), prune_at=None, deadline=float("inf"))
    seconds = time.perf_counter() - t0
    bound = float("nan") if lp is None or lp.bound is None else float(lp.bound)
    return seconds, len(calls), bound, calls


def _replay(data: dict[str, Any], calls: list[Any]) -> tuple[float, float, int, int] | None:
    """(grid ms/call, MIP ms/call, calls where the grid reaches the optimum, calls) over
    the recorded MIP calls of classes the grid prices; None where it prices none."""
    shapes = server_shapes(data)
    grids = {c: GridPricer.build(data, run[0]) for c, run in enumerate(shapes)}
    mine = [(c, mm) for c, mm in calls if grids.get(c) is not None]
    if not mine:
        return None
    t_grid = t_mip = 0.0
    hits = 0
    for c, mm in mine:
        grid = grids[c]
        assert grid is not None
        t0 = time.perf_counter()
        sols = grid.solve(mm.cost, mm.col_upper, keep=PATTERNS_PER_PRICING)
        t_grid += time.perf_counter() - t0
        t0 = time.perf_counter()
        ref, _ = _pricing_solve(mm, None)
        t_mip += time.perf_counter() - t0
        if ref is not None and sols:
            best = max(float(mm.cost @ x) for x in sols)
            hits += best >= ref - HIT_TOL * max(1.0, abs(ref))
    n = len(mine)
    return 1000 * t_grid / n, 1000 * t_mip / n, hits, n


def main(argv: list[str] | None = None) -> int:
    """Print the per-round table and the totals."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--family", choices=sorted(FAMILIES), default="split-penalty")
    ap.add_argument("--gpus", type=int, choices=(32, 64, 96, 128, 256, 512), default=128)
    ap.add_argument("--seeds", type=seed_list, default=[7, 8, 19, 21])
    ap.add_argument("--all-mip", action="store_true", help="price every class by the MIP")
    ap.add_argument("--quick", action="store_true", help="seed 8 alone")
    args = ap.parse_args(argv)
    if args.quick:
        args.seeds = [8]
    method = "mip" if args.all_mip else bnode.PRICING
    rows = []
    sums = np.zeros(4)
    replay = np.zeros(4)
    flagged = 0
    for seed in args.seeds:
        inst = family_round(args.family, args.gpus, seed)
        data = _model_data(inst, select_runnable(inst))
        t_on, mips_on, b_on, _ = _root(data, method, True)
        t_off, mips_off, b_off, calls = _root(data, method, False)
        same = abs(b_on - b_off) <= 1e-6 * max(1.0, abs(b_off))
        flagged += not same
        got = _replay(data, calls)
        grid_ms, mip_ms, hits, n = got if got is not None else (float("nan"),) * 2 + (0, 0)
        sums += (t_on, t_off, mips_on, mips_off)
        if got is not None:
            replay += (grid_ms * n, mip_ms * n, hits, n)
        rows.append(
            [
                seed,
                f"{t_off:.2f}",
                f"{t_on:.2f}",
                f"{t_off / t_on:.2f}",
                mips_off,
                mips_on,
                f"{b_off:.6g}",
                "same" if same else f"DIFFERS {b_on:.6g}",
                n,
                f"{grid_ms:.1f}",
                f"{mip_ms:.1f}",
                f"{mip_ms / grid_ms:.2f}" if n else "-",
                hits,
            ]
        )
    table(
        f"root column generation, {args.family} {args.gpus} GPUs (pricing {method})",
        [
            "seed",
            "root s MIP",
            "root s grid",
            "ratio",
            "MIP calls",
            "with grid",
            "bound",
            "bounds",
            "replayed",
            "grid ms",
            "MIP ms",
            "MIP/grid",
            "grid = optimum",
        ],
        rows,
    )
    print(
        f"{len(args.seeds)} rounds ({args.family}, {args.gpus} GPUs): the root's column "
        f"generation {sums[1]:.2f} s with the MIP alone, {sums[0]:.2f} s with the grid first "
        f"(ratio {sums[1] / max(sums[0], 1e-9):.2f}); MIP calls {int(sums[3])} -> "
        f"{int(sums[2])}; bounds differ on {flagged}"
    )
    if replay[3]:
        print(
            f"replayed {int(replay[3])} MIP calls: grid {replay[0] / replay[3]:.1f} ms a call, "
            f"MIP {replay[1] / replay[3]:.1f} ms (ratio {replay[1] / replay[0]:.2f}); the "
            f"grid's best is the MIP's optimum on {int(replay[2])}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
