"""The packing route's steps as shipped against the steps before 2026-12-06 (fifth session),
side by side in one run.

python bench/bench_packing_steps.py [--rounds multi-gpu:128:7,18,72 ...] [--passes 3] [--quick]

For each round, ``opt``'s packing route (``packing_route.pack`` at the tightest
super-machine's points) runs twice per pass, interleaved:

- ``now``: as shipped: the pattern LP's integral contents before CP-SAT's quick try where
  every spread job spreads for free (``CONTENTS_FIRST``), then a packing with fewer parts
  that keeps the first packing's whole jobs, from a complete hint, within
  ``FEWER_PARTS_DETERMINISTIC_S``;
- ``before``: CP-SAT's quick try first everywhere, and the fewer-parts solve on the whole
  model, hinted by the first packing's GPUs alone, within 0.5 units (the code before).

Printed per round: each one's wall time (median over the passes), its parts and its
fragmented jobs (the same on every pass: every solve stops at a deterministic budget), and
the time ratio; then the summed times and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_opt import table  # noqa: E402

from synergy_opt.formulations import packing_cp  # noqa: E402
from synergy_opt.formulations.packing_cp import PackingResult, PlanView  # noqa: E402
from synergy_opt.generate import FAMILIES, family_round  # noqa: E402
from synergy_opt.mechanisms.opt import Opt, packing_route  # noqa: E402
from synergy_opt.mechanisms.opt.packing_route import bound_points, pack  # noqa: E402

#: The rounds of the fifth session's measurements: the three multi-GPU 128-GPU rounds of
#: seeds 0-99 that reach the route, mixed shapes and split penalties whose points pack.
DEFAULT_ROUNDS: tuple[str, ...] = (
    "multi-gpu:128:7,18,72",
    "mixed-shapes:128:100,102,106,111",
    "split-penalty:128:0,4,18",
)
#: The fewer-parts budget before (deterministic units).
BEFORE_FEWER_S: float = 0.5


def _rounds(text: str) -> list[tuple[str, int, int]]:
    """FAMILY:GPUS:SEED,SEED,... as (family, GPUs, seed) triples."""
    try:
        family, gpus, seeds = text.split(":")
        out = [(family, int(gpus), int(s)) for s in seeds.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected FAMILY:GPUS:SEED[,SEED...], got {text!r}"
        ) from None
    if family not in FAMILIES:
        raise argparse.ArgumentTypeError(f"unknown family {family!r}")
    if any(g <= 0 or g % 8 or s < 0 for _, g, s in out):
        raise argparse.ArgumentTypeError(f"GPUs must be a positive multiple of 8: {text!r}")
    return out


@contextmanager
def _before() -> Iterator[None]:
    """The route as it was: quick try first, fewer parts on the whole model from the GPUs."""
    real = packing_cp.solve_packing
    first, fewer_s = packing_route.CONTENTS_FIRST, packing_route.FEWER_PARTS_DETERMINISTIC_S

    def old_fewer(data: Any, **kwargs: Any) -> PackingResult:
        if kwargs.get("fewest_parts"):
            kwargs = {**kwargs, "whole": None, "hint_resources": None, "hint_points": None}
        return real(data, **kwargs)

    packing_cp.solve_packing = old_fewer
    packing_route.CONTENTS_FIRST, packing_route.FEWER_PARTS_DETERMINISTIC_S = False, BEFORE_FEWER_S
    try:
        yield
    finally:
        packing_cp.solve_packing = real
        packing_route.CONTENTS_FIRST, packing_route.FEWER_PARTS_DETERMINISTIC_S = first, fewer_s


def _parts(plan: PlanView | None) -> tuple[int, int] | None:
    """(parts, fragmented jobs) of a packing."""
    if plan is None:
        return None
    return sum(len(p) for p in plan.values()), sum(len(p) > 1 for p in plan.values())


def _timed(run: Callable[[], PackingResult]) -> tuple[float, tuple[int, int] | None]:
    t0 = time.perf_counter()
    res = run()
    return time.perf_counter() - t0, _parts(res.plan)


def round_args(
    argv: list[str] | None, doc: str, defaults: str, quick: str
) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    """The packing benches' shared arguments (``--rounds``, ``--passes``, ``--quick``),
    parsed and checked; ``defaults`` and ``quick`` say in the help which rounds they run."""
    ap = argparse.ArgumentParser(description=doc.split("\n", 1)[0])
    ap.add_argument(
        "--rounds",
        type=_rounds,
        action="append",
        help=f"FAMILY:GPUS:SEED,... (repeatable; default: {defaults})",
    )
    ap.add_argument("--passes", type=int, default=3, help="passes over the rounds (3)")
    ap.add_argument("--quick", action="store_true", help=f"{quick}, one pass")
    args = ap.parse_args(argv)
    if args.passes < 1:
        ap.error("--passes must be at least 1")
    return ap, args


def chosen_rounds(
    args: argparse.Namespace, defaults: tuple[str, ...]
) -> list[tuple[str, int, int]]:
    """The rounds asked for (``defaults`` where none are); with ``--quick`` the first
    alone, and one pass (set on ``args``)."""
    rounds = [r for group in (args.rounds or map(_rounds, defaults)) for r in group]
    if args.quick:
        rounds, args.passes = rounds[:1], 1
    return rounds


def main(argv: list[str] | None = None) -> int:
    """Run the comparison; 0 when it ran."""
    ap, args = round_args(argv, __doc__, "the fifth session's rounds", "multi-GPU 128 seed 7")
    rounds = chosen_rounds(args, DEFAULT_ROUNDS)
    packing_route.load_packing_solver()
    ctxs = []
    for family, gpus, seed in rounds:
        ctx = Opt().context(family_round(family, gpus, seed))
        if ctx is None:
            ap.error(f"{family} {gpus} GPUs seed {seed}: no runnable job")
        ctxs.append(ctx)
    now_t: list[list[float]] = [[] for _ in ctxs]
    old_t: list[list[float]] = [[] for _ in ctxs]
    now_p: list[tuple[int, int] | None] = [None] * len(ctxs)
    old_p: list[tuple[int, int] | None] = [None] * len(ctxs)
    for p in range(args.passes):
        for i, ctx in enumerate(ctxs):
            for which in ("now", "before") if (p + i) % 2 == 0 else ("before", "now"):
                if which == "now":
                    t, now_p[i] = _timed(lambda ctx=ctx: pack(ctx, bound_points(ctx)))
                    now_t[i].append(t)
                else:
                    with _before():
                        t, old_p[i] = _timed(lambda ctx=ctx: pack(ctx, bound_points(ctx)))
                    old_t[i].append(t)
    rows: list[list[object]] = []
    for (family, gpus, seed), tn, to, pn, po in zip(
        rounds, now_t, old_t, now_p, old_p, strict=True
    ):
        mn, mo = statistics.median(tn), statistics.median(to)
        rows.append([f"{family} {gpus}/{seed}", 1000 * mo, 1000 * mn, mo / mn, str(po), str(pn)])
    total_o = sum(statistics.median(t) for t in old_t)
    total_n = sum(statistics.median(t) for t in now_t)
    rows.append(["sum", 1000 * total_o, 1000 * total_n, total_o / total_n, "", ""])
    table(
        f"The packing route before and now, interleaved ({args.passes} passes, each round's "
        "wall time its median; parts = (parts, fragmented jobs); None = no packing)",
        ["round", "before ms", "now ms", "before/now", "before parts", "now parts"],
        rows,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
