"""Per-round time of each heuristic mechanism at 128, 512 and 2048 GPUs, and of the checker.

All mechanisms run on the *same* generated rounds in one process, interleaved per repeat, so
machine noise hits them alike; the table reports the median of the repeats and each
mechanism's time relative to PROPORTIONAL measured side by side.  The last row per size,
``check``, is the checker with ``--fair-share`` on TUNE's answer (``opt`` checks its own
answer this way every round, and the simulator checks every round's).

    python bench/bench_mechanisms.py [--quick] [--repeats N]
"""

from __future__ import annotations

import argparse
import statistics
import time

from synergy_opt.check import check_allocation
from synergy_opt.generate import GenerateSpec, generate_instance, mix_from_workload
from synergy_opt.mechanisms import make_mechanism

MECHANISMS = ("proportional", "greedy", "tune", "tune-sorted", "tetris")
SIZES_GPUS = (128, 512, 2048)
#: The checker's row (``check_allocation(..., fair_share=True)`` on TUNE's answer).
CHECK = "check"


def bench(
    sizes: tuple[int, ...], repeats: int, workload: str, load: float
) -> list[dict[str, object]]:
    """Median per-round milliseconds for each (size, mechanism)."""
    rows = []
    for gpus in sizes:
        inst = generate_instance(
            GenerateSpec(
                servers=gpus // 8, gpu_load=load, gpu_mix=mix_from_workload(workload), seed=0
            )
        )
        mechs = {m: make_mechanism(m) for m in MECHANISMS}
        times: dict[str, list[float]] = {m: [] for m in (*MECHANISMS, CHECK)}
        totals: dict[str, float] = {}
        for _ in range(repeats):
            for m, mech in mechs.items():
                t0 = time.perf_counter()
                alloc = mech.allocate(inst)
                times[m].append(time.perf_counter() - t0)
                totals[m] = alloc.total_throughput
                if m == "tune":
                    t0 = time.perf_counter()
                    bad = check_allocation(inst, alloc, fair_share=True)
                    times[CHECK].append(time.perf_counter() - t0)
                    assert not bad, bad[0]
                    totals[CHECK] = alloc.total_throughput
        for m in MECHANISMS:  # sanity: a fast wrong answer is not a result
            assert not check_allocation(inst, mechs[m].allocate(inst)), m
        base = statistics.median(times["proportional"])
        for m in (*MECHANISMS, CHECK):
            med = statistics.median(times[m])
            rows.append(
                {
                    "gpus": gpus,
                    "jobs": len(inst.jobs),
                    "mechanism": m,
                    "median_ms": med * 1e3,
                    "vs_proportional": med / base,
                    "throughput": totals[m],
                }
            )
    return rows


def main() -> None:
    """Print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="128 and 512 GPUs, 3 repeats")
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--workload", choices=("single-gpu", "multi-gpu"), default="single-gpu")
    ap.add_argument("--load", type=float, default=1.5, help="GPU demand / cluster GPUs")
    args = ap.parse_args()
    sizes = SIZES_GPUS[:2] if args.quick else SIZES_GPUS
    repeats = 3 if args.quick else args.repeats
    rows = bench(sizes, repeats, args.workload, args.load)
    print(f"per-round mechanism time, {args.workload}, load {args.load}, median of {repeats}")
    print(
        f"{'GPUs':>6}{'jobs':>6}  {'mechanism':<13}{'median ms':>10}{'x prop':>8}{'throughput':>12}"
    )
    for r in rows:
        print(
            f"{r['gpus']:>6}{r['jobs']:>6}  {r['mechanism']:<13}{r['median_ms']:>10.2f}"
            f"{r['vs_proportional']:>8.2f}{r['throughput']:>12.2f}"
        )


if __name__ == "__main__":
    main()
