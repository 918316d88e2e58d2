"""``opt-exact`` with one of its split-floor steps on and off, side by side in one run.

python bench/bench_floor_pair.py [--gpus 128] [--seeds 0,1,2,3,4,5,6,7] [--time-limit 10]
    [--switch SPLIT_MASTER|FLOOR_PAIR] [--quick]

Rounds where a spread job's floor depends on its split and jobs may spread at a split
penalty: the split-penalty family's job mix on the mixed-shapes family's three server
shapes (8 GPUs x 24 cores x 500 GB, 8 x 32 x 256, 4 x 12 x 200), scaled to ``--gpus``.
Per round ``opt-exact`` runs with the switch on and off, the order alternating per round
(the machine is shared):

- ``SPLIT_MASTER`` (``patterns_fast``): the pattern master states the split, so the second
  search after the restriction is the exact one; off, it is the relaxation
  (``formulations/branch_price.md``, "Floors that depend on the split").
- ``FLOOR_PAIR`` (``opt_exact``): branch-and-price on the restriction, then the second
  search; off, the counting MIP alone.

Each run prints its wall time, answer, bound, gap and whether it is proven; the summary:
rounds proven, mean gap, time summed and its ratio, and the rounds where one run's answer
is above the other's bound (a bug: both are valid).
"""

from __future__ import annotations

import argparse
import sys
from contextlib import AbstractContextManager
from functools import partial
from pathlib import Path
from types import ModuleType

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_opt import PROVEN_GAP, gap, seed_list, switched, table, timed  # noqa: E402

from synergy_opt.argtypes import positive_float  # noqa: E402
from synergy_opt.formulations import patterns_fast  # noqa: E402
from synergy_opt.generate import GenerateSpec, generate_instance  # noqa: E402
from synergy_opt.mechanisms import make_mechanism, opt_exact  # noqa: E402
from synergy_opt.mechanisms.base import MechanismOptions  # noqa: E402
from synergy_opt.types import Allocation, RoundInstance  # noqa: E402

#: The mixed-shapes family's servers per 32 GPUs (count, GPUs, cores, GB).
SHAPES_PER_32: tuple[tuple[int, int, int, float], ...] = (
    (2, 8, 24, 500.0),
    (1, 8, 32, 256.0),
    (2, 4, 12, 200.0),
)
#: The split-penalty family's job mix (GPUs, share) and penalties.
MIX: tuple[tuple[int, float], ...] = ((1, 0.5), (2, 0.15), (4, 0.15), (6, 0.1), (8, 0.1))
PENALTY: tuple[float, float] = (0.8, 0.95)


def mixed_split_round(gpus: int, seed: int) -> RoundInstance:
    """A round of mixed server shapes whose multi-GPU jobs may spread at a penalty."""
    scale = gpus // 32
    spec = GenerateSpec(
        gpu_load=1.2,
        gpu_mix=MIX,
        seed=seed,
        name=f"mixed-split-{gpus}gpu-seed{seed}",
        server_shapes=tuple((n * scale, g, c, m) for n, g, c, m in SHAPES_PER_32),
        split_penalty=PENALTY,
    )
    return generate_instance(spec, None)


#: The switches, by name, and the module that holds each.
SWITCHES: dict[str, ModuleType] = {"SPLIT_MASTER": patterns_fast, "FLOOR_PAIR": opt_exact}


def _switched(name: str, on: bool) -> AbstractContextManager[None]:
    """Switch ``name`` (:data:`SWITCHES`) set to ``on`` for the block, restored after it."""
    return switched(SWITCHES[name], name, on)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--gpus", type=int, choices=(32, 64, 96, 128), default=128)
    ap.add_argument("--seeds", type=seed_list, default=list(range(8)))
    ap.add_argument("--time-limit", type=positive_float, default=10.0)
    ap.add_argument("--switch", choices=sorted(SWITCHES), default="SPLIT_MASTER")
    ap.add_argument("--quick", action="store_true", help="32 GPUs, seeds 0 and 3, 10 s")
    args = ap.parse_args(argv)
    if args.quick:
        args.gpus, args.seeds, args.time_limit = 32, [0, 3], 10.0
    mech = make_mechanism("opt-exact", MechanismOptions(time_limit_s=args.time_limit))
    rows: list[list[object]] = []
    spent = {True: 0.0, False: 0.0}
    proven = {True: 0, False: 0}
    gaps: dict[bool, list[float]] = {True: [], False: []}
    crossed: list[int] = []
    for n, seed in enumerate(args.seeds):
        inst = mixed_split_round(args.gpus, seed)
        got: dict[bool, tuple[Allocation, float]] = {}
        for on in (True, False) if n % 2 == 0 else (False, True):
            with _switched(args.switch, on):
                got[on] = timed(partial(mech.allocate, inst))
        for on in (True, False):
            a, secs = got[on]
            rel = gap(a)
            spent[on] += secs
            proven[on] += rel <= PROVEN_GAP
            gaps[on].append(rel)
            rows.append(
                [
                    seed,
                    "on" if on else "off",
                    f"{secs:.2f}",
                    f"{a.total_throughput:.6g}",
                    f"{a.upper_bound:.6g}" if a.upper_bound is not None else "-",
                    f"{100 * rel:.2f} %",
                    "yes" if rel <= PROVEN_GAP else "no",
                ]
            )
        for mine, other in ((True, False), (False, True)):
            ub = got[other][0].upper_bound
            top = got[mine][0].total_throughput
            if ub is not None and top > ub * (1 + PROVEN_GAP) + 1e-9:
                crossed.append(seed)
    table(
        f"opt-exact, mixed shapes with split penalties, {args.gpus} GPUs, "
        f"{args.time_limit:g} s, {args.switch} on and off",
        ["seed", args.switch, "s", "answer", "bound", "gap", "proven"],
        rows,
    )
    mean = {on: 100 * sum(g) / max(len(g), 1) for on, g in gaps.items()}
    print(
        f"{len(args.seeds)} rounds: proven {proven[True]} with {args.switch}, {proven[False]} "
        f"without; mean gap {mean[True]:.2f} % with, {mean[False]:.2f} % without; "
        f"{spent[True]:.2f} s with, {spent[False]:.2f} s without (ratio "
        f"{spent[True] / max(spent[False], 1e-9):.3f}); answers above the other run's bound: "
        f"{', '.join(map(str, sorted(set(crossed)))) if crossed else 'none'}"
    )
    return 1 if crossed else 0


if __name__ == "__main__":
    raise SystemExit(main())
