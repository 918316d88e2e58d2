"""The packing's integral contents solved as shipped against the plain MIP, side by side.

python bench/bench_contents_ip.py [--rounds single-gpu:128:7,16,18,19 ...] [--passes 3]
    [--quick]

``whole_contents`` (``formulations/packing_lp.md``) finds an integral solution of the
pattern LP: every server one listed content.  ``opt``'s packing route asks it on every
round it reaches, and branch-and-price on every set of leaf points it packs.  Where no job
is spread, as shipped it solves the LP first, taking its vertex where it is integral, then
the MIP without presolve (``IP_FAST_WITHOUT_SPREAD``); before 2026-12-07, and still with
spread jobs, it ran HiGHS's MIP with its defaults.  Per round (the route's packing data at
the tightest super-machine's points; rounds with spread jobs are skipped, the two ways are
one there), the first attempt is solved both ways, interleaved, ``--passes`` times.
Printed per round: the contents listed, each way's median wall time, their ratio, and
whether each found contents (both must, or neither: the same IP); then the summed times and
their ratio.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_opt import switched, table  # noqa: E402
from bench_packing_steps import chosen_rounds, round_args  # noqa: E402

from synergy_opt.formulations import packing_lp  # noqa: E402
from synergy_opt.formulations.packing_lp import refute_packing, whole_contents  # noqa: E402
from synergy_opt.generate import family_round  # noqa: E402
from synergy_opt.matrix import MatrixModel  # noqa: E402
from synergy_opt.mechanisms.opt import Opt  # noqa: E402
from synergy_opt.mechanisms.opt.packing_route import (  # noqa: E402
    bound_points,
    route_packing_data,
)

#: Rounds whose route reaches the integral contents with no job spread (the measurements
#: of 2026-12-07): single-GPU at 128 and 512 GPUs, CPU-scarce at 128.
DEFAULT_ROUNDS: tuple[str, ...] = (
    "single-gpu:128:7,16,18,19",
    "single-gpu:512:5",
    "cpu-scarce:128:1,2",
)


def _timed_contents(
    lst: packing_lp.PatternListing, lp: MatrixModel | None, plain: bool
) -> tuple[float, bool]:
    """Wall seconds of attempt 0 and whether it found contents; ``plain``: HiGHS's MIP
    with its defaults, as before."""
    with switched(packing_lp, "IP_FAST_WITHOUT_SPREAD", not plain):
        t0 = time.perf_counter()
        got = whole_contents(lst, 0, None, lp)
        return time.perf_counter() - t0, got is not None


def main(argv: list[str] | None = None) -> int:
    """Run the comparison; 0 when it ran."""
    ap, args = round_args(
        argv, __doc__, "single-GPU 128 and 512, CPU-scarce 128", "single-GPU 128 seed 7"
    )
    rounds = chosen_rounds(args, DEFAULT_ROUNDS)
    cases = []
    for family, gpus, seed in rounds:
        ctx = Opt().context(family_round(family, gpus, seed))
        if ctx is None:
            ap.error(f"{family} {gpus} GPUs seed {seed}: no runnable job")
        data = route_packing_data(ctx, bound_points(ctx))
        if data.spread:
            print(f"{family} {gpus}/{seed}: spread jobs (the MIP as before); skipped")
            continue
        verdict = refute_packing(data)
        if verdict.refuted or verdict.listing is None:
            print(f"{family} {gpus}/{seed}: the pattern LP refutes the points; skipped")
            continue
        cases.append((f"{family} {gpus}/{seed}", verdict.listing, verdict.matrix))
    now_t: list[list[float]] = [[] for _ in cases]
    old_t: list[list[float]] = [[] for _ in cases]
    now_f = [False] * len(cases)
    old_f = [False] * len(cases)
    for p in range(args.passes):
        for i, (_, lst, lp) in enumerate(cases):
            for plain in (False, True) if (p + i) % 2 == 0 else (True, False):
                t, found = _timed_contents(lst, lp, plain)
                if plain:
                    old_t[i].append(t)
                    old_f[i] = found
                else:
                    now_t[i].append(t)
                    now_f[i] = found
    rows: list[list[object]] = []
    for i, (name, lst, _) in enumerate(cases):
        old, now = statistics.median(old_t[i]), statistics.median(now_t[i])
        rows.append([name, lst.num_contents, 1000 * old, 1000 * now, old / now, old_f[i], now_f[i]])
    if cases:
        old_sum = sum(statistics.median(t) for t in old_t)
        now_sum = sum(statistics.median(t) for t in now_t)
        rows.append(["sum", "", 1000 * old_sum, 1000 * now_sum, old_sum / now_sum, "", ""])
    table(
        f"integral contents, attempt 0 ({args.passes} passes, interleaved, median wall ms; "
        "'plain' = HiGHS's MIP with its defaults, 'shipped' = LP first, MIP without presolve)",
        ["round", "contents", "plain ms", "shipped ms", "plain/shipped", "found", "found"],
        rows,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
