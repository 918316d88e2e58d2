"""Sweep benchmark: the same cells run inline, in a process pool and on a Dask LocalCluster.

Every mode runs the shipped smoke spec's cells (``--quick``: the first eight) into a fresh
folder in this one run, so the speed-ups over inline execution are measured side by side.
The table also checks that every mode produced the same report table (timing columns
excluded), and it reports the cost of a rerun on a finished folder (the resume check alone).
Wall and CPU seconds are both shown: the machine may be shared, and CPU seconds of the
pool and Dask workers are not counted in this process's CPU time.

    python bench/bench_sweep.py [--quick]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from synergy_opt.sweep import load_spec, run_cells, table

SMOKE = Path(__file__).resolve().parents[1] / "instances" / "sweeps" / "smoke.toml"


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    """Wall and CPU (this process) seconds of ``fn()``."""
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def main() -> None:
    """Print one table: mode, cells, wall s, CPU s, speed-up over inline, same table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="first eight cells only")
    args = ap.parse_args()
    cells = load_spec(SMOKE).cells()
    if args.quick:
        cells = cells[:8]
    modes: list[tuple[str, dict[str, object]]] = [
        ("inline (--workers 1)", {"workers": 1}),
        ("process pool (--workers 2)", {"workers": 2}),
        ("dask LocalCluster, 2 workers", {"workers": 2, "dask": "local"}),
    ]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        ref = None
        for label, kw in modes:
            out = Path(tmp) / label.split()[0]
            wall, cpu = timed(lambda out=out, kw=kw: run_cells(cells, out, **kw))  # type: ignore[arg-type]
            tab = table(out, timing=False)
            ref = ref or tab
            rows.append((label, wall, cpu, tab == ref))
        wall_re, cpu_re = timed(lambda: run_cells(cells, Path(tmp) / "inline", workers=1))
    base = rows[0][1]
    print(f"{len(cells)} cells of {SMOKE.name}")
    print(f"{'mode':<30} {'wall s':>8} {'CPU s':>7} {'x inline':>9}  same table")
    for label, wall, cpu, same in rows:
        print(f"{label:<30} {wall:8.2f} {cpu:7.2f} {base / wall:9.2f}  {'yes' if same else 'NO'}")
    print(
        f"{'rerun on a finished folder':<30} {wall_re:8.2f} {cpu_re:7.2f} {base / wall_re:9.1f}  -"
    )


if __name__ == "__main__":
    main()
