"""``synergy-opt demo``: the main job on built-in data.

Generates the paper-like 128-GPU round from the shipped profiles (16 servers of 8 GPUs, 24
cores, 500 GB; GPU load 1.5; split 20/70/10; seed 0 — the same round as
``instances/paper-128gpu.json``), solves it with every registered mechanism, checks each
answer with the independent checker, writes the allocations and prints one table.  The
exact counting model (``opt-exact``) proves the demo round's optimum in under a second (seeds
0 and 2; 7 s on seed 1), so the table shows every mechanism against the proven optimum
(``vs exact``); ``--exact-time-limit`` bounds that solve, and an optimum it did not prove is
said under the table.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from synergy_opt.argtypes import positive_float
from synergy_opt.check import check_allocation
from synergy_opt.generate import GenerateSpec, generate_instance
from synergy_opt.io import allocation_to_dict, instance_to_dict, write_json_atomic
from synergy_opt.mechanisms import MechanismOptions, make_mechanism, mechanism_names
from synergy_opt.outputs import Output, preflight
from synergy_opt.types import Allocation

#: Mechanisms that must keep every job at its fair share (GREEDY, DRF, ... may not).
FAIR_SHARE_MECHANISMS = frozenset({"proportional", "tune", "opt", "opt-exact"})
#: Seconds the exact model may take on the demo round (keeps ``make run`` short).
EXACT_TIME_LIMIT_S: float = 30.0
#: The mechanism every row is compared with.
EXACT = "opt-exact"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``demo`` sub-command."""
    p = sub.add_parser("demo", help="solve the built-in 128-GPU round with every mechanism")
    p.add_argument("--seed", type=int, default=0, help="seed of the generated round (default 0)")
    p.add_argument(
        "-o",
        "--output",
        default="out/demo",
        metavar="DIR",
        help="folder for instance.json and allocation-<mechanism>.json (default out/demo)",
    )
    p.add_argument(
        "--exact-time-limit",
        type=positive_float,
        default=EXACT_TIME_LIMIT_S,
        metavar="S",
        help=f"seconds for opt-exact's proof (default {EXACT_TIME_LIMIT_S:g})",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Solve, check and tabulate; exit 1 if any answer has a violation it must not have."""
    names = list(mechanism_names())
    files = ("instance.json", *(f"allocation-{n}.json" for n in names))
    preflight([], [Output("-o", args.output, folder=True, files=files)])
    inst = generate_instance(
        GenerateSpec(gpu_load=1.5, seed=args.seed, name=f"paper-128gpu-seed{args.seed}")
    )
    out = Path(args.output)
    write_json_atomic(out / files[0], instance_to_dict(inst))
    rows = []
    baseline = None
    exact: Allocation | None = None
    bad = 0
    for name in names:
        options = MechanismOptions(time_limit_s=args.exact_time_limit if name == EXACT else None)
        alloc = make_mechanism(name, options).allocate(inst)
        write_json_atomic(out / f"allocation-{name}.json", allocation_to_dict(alloc))
        violations = check_allocation(inst, alloc, fair_share=name in FAIR_SHARE_MECHANISMS)
        bad += bool(violations)
        if name == "proportional":
            baseline = alloc.total_throughput
        if name == EXACT:
            exact = alloc
        rows.append((name, alloc, len(violations)))
    print(
        f"{inst.name}: {len(inst.jobs)} jobs, {inst.cluster.total_gpus} GPUs  (written to {out}/)"
    )
    print(
        f"{'mechanism':<14}{'throughput':>11}{'vs prop':>9}{'vs exact':>9}{'scheduled':>10}"
        f"{'bound':>9}{'ms':>9}{'violations':>11}"
    )
    best = exact.total_throughput if exact is not None else 0.0
    for name, alloc, nv in rows:
        ratio = alloc.total_throughput / baseline if baseline else float("nan")
        vs_exact = alloc.total_throughput / best if best > 0 else float("nan")
        bound = "-" if alloc.upper_bound is None else f"{alloc.upper_bound:.2f}"
        print(
            f"{name:<14}{alloc.total_throughput:>11.2f}{ratio:>9.3f}{vs_exact:>9.3f}"
            f"{len(alloc.jobs):>10}"
            f"{bound:>9}{alloc.solve_seconds * 1e3:>9.1f}{nv:>11}"
        )
    if exact is not None and exact.notes:
        print(f"{EXACT} did not prove its optimum: {'; '.join(exact.notes)}")
    return 1 if bad else 0
