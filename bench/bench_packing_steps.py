"""The packing route's steps as shipped against the steps before, side by side in one run.

python bench/bench_packing_steps.py [--rounds multi-gpu:128:7,18,72 ...] [--passes 3] [--quick]

For each round, ``opt``'s packing route (``packing_route.pack`` at the tightest
super-machine's points) runs three times per pass, interleaved (the order turns each time):

- ``now``: as shipped: the pattern LP's integral contents before CP-SAT's quick try where
  every spread job spreads for free (``CONTENTS_FIRST``), then fewer parts by dropping the
  first packing's spare parts while three max-flows still carry every spread job
  (``FEWER_PARTS_BY_FLOWS``, 2026-12-07's fourth session);
- ``cp-sat``: the same first packing, then the fewer-parts packing by CP-SAT, keeping the
  first packing's whole jobs, from a complete hint, within ``FEWER_PARTS_DETERMINISTIC_S``
  (the code from 2026-12-06's fifth session to 2026-12-07's fourth session);
- ``before``: CP-SAT's quick try first everywhere, and the fewer-parts solve on the whole
  model, hinted by the first packing's GPUs alone, within 0.5 units (the code before the
  fifth session of 2026-12-06).

Printed per round: each one's wall time (median over the passes), its parts and its
fragmented jobs (the same on every pass: every solve stops at a deterministic budget), and
the time ratios against ``now``; then the summed times and their ratios.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
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
        with _cp_sat():
            yield
    finally:
        packing_cp.solve_packing = real
        packing_route.CONTENTS_FIRST, packing_route.FEWER_PARTS_DETERMINISTIC_S = first, fewer_s


@contextmanager
def _cp_sat() -> Iterator[None]:
    """The fewer-parts packing by CP-SAT (``FEWER_PARTS_BY_FLOWS`` off)."""
    by_flows = packing_route.FEWER_PARTS_BY_FLOWS
    packing_route.FEWER_PARTS_BY_FLOWS = False
    try:
        yield
    finally:
        packing_route.FEWER_PARTS_BY_FLOWS = by_flows


#: The variants, each a context the route runs in.
VARIANTS: tuple[tuple[str, Callable[[], AbstractContextManager[None]]], ...] = (
    ("before", _before),
    ("cp-sat", _cp_sat),
    ("now", nullcontext),
)


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
    times: dict[str, list[list[float]]] = {n: [[] for _ in ctxs] for n, _ in VARIANTS}
    parts: dict[str, list[tuple[int, int] | None]] = {n: [None] * len(ctxs) for n, _ in VARIANTS}
    for p in range(args.passes):
        for i, ctx in enumerate(ctxs):
            turn = (p + i) % len(VARIANTS)
            for name, within in VARIANTS[turn:] + VARIANTS[:turn]:
                with within():
                    t, parts[name][i] = _timed(lambda ctx=ctx: pack(ctx, bound_points(ctx)))
                times[name][i].append(t)
    names = [n for n, _ in VARIANTS]
    med = {n: [statistics.median(t) for t in times[n]] for n in names}
    rows: list[list[object]] = []
    for i, (family, gpus, seed) in enumerate(rounds):
        now = med["now"][i]
        rows.append(
            [
                f"{family} {gpus}/{seed}",
                *(1000 * med[n][i] for n in names),
                *(med[n][i] / now for n in names[:-1]),
                *(str(parts[n][i]) for n in names),
            ]
        )
    sums = {n: sum(med[n]) for n in names}
    rows.append(
        [
            "sum",
            *(1000 * sums[n] for n in names),
            *(sums[n] / sums["now"] for n in names[:-1]),
            *([""] * len(names)),
        ]
    )
    table(
        f"The packing route before, with CP-SAT's fewer parts, and now, interleaved "
        f"({args.passes} passes, each round's wall time its median; parts = (parts, "
        "fragmented jobs); None = no packing)",
        [
            "round",
            *(f"{n} ms" for n in names),
            *(f"{n}/now" for n in names[:-1]),
            *(f"{n} parts" for n in names),
        ],
        rows,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
