"""Branch-and-price with one of its steps on and off, side by side in one run.

python bench/bench_branch_price.py [--family split-penalty] [--gpus 128] [--seeds 9]
    [--time-limit 30] [--switch DIVE_FLOW] [--repeat 1] [--quick]

Per round: ``branch_and_price`` alone, from TUNE's answer (as ``opt-exact`` starts it, without
``opt``), runs with the switch on and off, the order alternating per repeat (the machine is
shared: each pair is measured back to back).  One untimed search of a 32-GPU round runs
first (imports, the solvers' first start); a round's pure memos are still filled by its
first run, so ``--repeat 2`` or more evens that out.  Each run prints its wall time, whether it
proved its answer, the answer, the bound, nodes and leaves refuted by the arc flow; the
ratio on/off of the times, and a summary: time summed, rounds proven, and any round whose
two proven answers differ (both are optima, so that would be a bug).  The switches are
branch-and-price's own (``formulations/branch_price.md``): ``DEFER_DIVE`` (the root dive
leaf's reach MIP and packings after a short search), ``DIVE_FLOW`` (the root dive
leaf's arc flow), ``DEFER_RESTART`` (each incumbent restarts that wait),
``EAGER_POINTS`` (a node whose LP fixes every point packed at once), ``EXACT_LATE`` (a
stalled leaf asked the exact packing program, ``formulations/packing_exact.md``),
``EXACT_EARLY`` (a small such program asked after the leaf's first full MIP slice),
``FLOW_LATE`` (a stalled leaf's flow asked again), ``FLOW_REFUTE`` (the leaves' arc flow at all),
``PACK_POINTS`` (a leaf packed at its LP's points); ``SHARE_CAP``, the arc flow's
(pf9) cut (``formulations/packing_flow.md``); and ``SKIP_REFUTED``, the packings'
(``formulations/packing_cp.py``): a spread placement CP-SAT has refuted is not asked again.
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_opt import seed_list, switched, table  # noqa: E402

from synergy_opt.argtypes import positive_float, positive_int  # noqa: E402
from synergy_opt.formulations import branch_price as bp  # noqa: E402
from synergy_opt.formulations import packing_cp as pcp  # noqa: E402
from synergy_opt.formulations import packing_flow as pf  # noqa: E402
from synergy_opt.formulations.branch_price import BranchResult  # noqa: E402
from synergy_opt.generate import FAMILIES, family_round  # noqa: E402
from synergy_opt.mechanisms import make_mechanism  # noqa: E402
from synergy_opt.mechanisms.packing import select_runnable  # noqa: E402
from synergy_opt.types import Job, PlacementPart, RoundInstance  # noqa: E402

#: Branch-and-price's steps that can be switched off: booleans of ``branch_price``, and
#: the arc flow's (pf9) cut (``packing_flow.SHARE_CAP``), which its leaf refutations solve.
SWITCHES: dict[str, ModuleType] = {
    "DEFER_DIVE": bp,
    "DEFER_PLAIN": bp,
    "DEFER_RESTART": bp,
    "DIVE_FLOW": bp,
    "EAGER_POINTS": bp,
    "EXACT_EARLY": bp,
    "EXACT_LATE": bp,
    "FLOW_LATE": bp,
    "FLOW_REFUTE": bp,
    "PACK_POINTS": bp,
    "SHARE_CAP": pf,
    "SKIP_REFUTED": pcp,
}
#: The untimed warm-up search's limit (a 32-GPU round of the family, seed 0).
WARM_UP_S: float = 5.0
#: Two proven answers agree within this (relative): the search's proof tolerance.
SAME_TOL: float = 1e-4


def _switched(name: str, on: bool) -> AbstractContextManager[None]:
    """The switch ``name`` set to ``on`` in its module for the block, restored after it."""
    return switched(SWITCHES[name], name, on)


@dataclass(frozen=True)
class _Round:
    """A round and TUNE's answer on it: what every search of the round starts from."""

    inst: RoundInstance
    runnable: list[Job]
    start: dict[str, tuple[PlacementPart, ...]]

    @classmethod
    def build(cls, family: str, gpus: int, seed: int) -> _Round:
        inst = family_round(family, gpus, seed)
        tune = make_mechanism("tune").allocate(inst)
        return cls(inst, select_runnable(inst), {ja.id: ja.placement for ja in tune.jobs})


def _run(rnd: _Round, limit: float) -> tuple[float, BranchResult]:
    """One search from TUNE's answer: (wall seconds, result)."""
    t0 = time.perf_counter()
    res = bp.branch_and_price(rnd.inst, rnd.runnable, time_limit=limit, warm_start=[rnd.start])
    if res is None:
        raise SystemExit(f"error: {rnd.inst.name}: no pattern model to search")
    return time.perf_counter() - t0, res


def main(argv: list[str] | None = None) -> int:
    """Print one row per run, the ratio per round and the totals."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--family", choices=sorted(FAMILIES), default="split-penalty")
    ap.add_argument("--gpus", type=int, choices=(32, 64, 96, 128), default=128)
    ap.add_argument("--seeds", type=seed_list, default=[9])
    ap.add_argument("--time-limit", type=positive_float, default=30.0)
    ap.add_argument("--switch", choices=sorted(SWITCHES), default="DIVE_FLOW")
    ap.add_argument("--repeat", type=positive_int, default=1)
    ap.add_argument("--quick", action="store_true", help="32 GPUs, seed 3, 20 s")
    args = ap.parse_args(argv)
    if args.quick:
        args.gpus, args.seeds, args.time_limit = 32, [3], 20.0
    # Untimed: the first search of a process pays lazy imports and the solvers' first
    # start (seed 0 of 64 GPUs read 6.0 s against 0.3 s for its second run).
    _run(_Round.build(args.family, 32, 0), WARM_UP_S)
    rows: list[list[object]] = []
    spent = {True: 0.0, False: 0.0}
    proven = {True: 0, False: 0}
    differ: list[int] = []
    for seed in args.seeds:
        rnd = _Round.build(args.family, args.gpus, seed)
        for rep in range(args.repeat):
            got: dict[bool, tuple[float, BranchResult]] = {}
            for on in (True, False) if rep % 2 == 0 else (False, True):
                with _switched(args.switch, on):
                    got[on] = _run(rnd, args.time_limit)
            for on in (True, False):
                secs, res = got[on]
                spent[on] += secs
                proven[on] += res.proven
                rows.append(
                    [
                        seed,
                        rep,
                        "on" if on else "off",
                        f"{secs:.2f}",
                        "yes" if res.proven else "no",
                        f"{res.objective:.6g}" if res.objective is not None else "-",
                        f"{res.bound:.6g}" if res.bound is not None else "-",
                        res.nodes,
                        res.refuted,
                        f"{got[True][0] / max(got[False][0], 1e-9):.3f}" if on else "",
                    ]
                )
            a, b = got[True][1], got[False][1]
            if a.proven and b.proven and a.objective is not None and b.objective is not None:
                if abs(a.objective - b.objective) > SAME_TOL * max(1.0, abs(b.objective)):
                    differ.append(seed)
    table(
        f"branch_and_price from TUNE, {args.family} {args.gpus} GPUs, {args.time_limit:g} s, "
        f"{args.switch} on and off",
        [
            *("seed", "rep", args.switch, "s", "proven"),
            *("answer", "bound", "nodes", "refuted", "on/off"),
        ],
        rows,
    )
    runs = len(args.seeds) * args.repeat
    print(
        f"{runs} pairs: {spent[True]:.2f} s with {args.switch}, {spent[False]:.2f} s without "
        f"(ratio {spent[True] / max(spent[False], 1e-9):.3f}); proven {proven[True]} with, "
        f"{proven[False]} without; proven answers that differ: "
        f"{', '.join(map(str, differ)) if differ else 'none'}"
    )
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
