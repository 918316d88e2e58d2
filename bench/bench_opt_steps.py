"""Where a cold ``opt`` round's time goes, step by step, beside ``tune`` in one run.

python bench/bench_opt_steps.py [--family multi-gpu] [--gpus 128] [--seeds 0:11]
    [--passes 5] [--skip 7] [--quick]

Table 3 of ``bench/bench_opt.py`` says how much slower ``opt`` is than ``tune``; this says
why.  The rounds are run cold (``Opt.forget_rounds()`` before each, as table 3 does), ``tune``
and ``opt`` alternated, and each step's wall time is summed while it runs: HiGHS's own
``run`` apart from the Python around it, and ``opt``'s steps (the super-machine, each route,
the swap repair, the max-flows, the checker, building the answer) as the package names
them.  The times are inclusive (a route's time holds the HiGHS run inside it), so they do
not add up to ``opt``'s.  ``--skip`` leaves seeds out (multi-GPU 128 GPUs seed 7 takes 2 s
where the others take 5 ms: its packing route runs).  Each step's wrapper costs about a
microsecond per call, a few per cent of ``opt``'s time.  Garbage collections are timed too
(their own row, ``gc`` callbacks): a collection runs inside whichever step allocates when it
falls due, so that row says how much of the steps' times is the collector's.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import gc
import inspect
import logging
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import highspy

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_opt import _cold, table, warm_up  # noqa: E402

import synergy_opt.mechanisms.opt.answer as opt_answer  # noqa: E402
import synergy_opt.mechanisms.opt.mechanism as opt_mechanism  # noqa: E402
import synergy_opt.mechanisms.opt.points as opt_points  # noqa: E402
import synergy_opt.mechanisms.opt.routes as opt_routes  # noqa: E402
import synergy_opt.mechanisms.opt.search as opt_search  # noqa: E402
from synergy_opt.generate import FAMILIES, family_round  # noqa: E402
from synergy_opt.mechanisms import make_mechanism  # noqa: E402
from synergy_opt.mechanisms.opt import Opt  # noqa: E402
from synergy_opt.mechanisms.tune import Tune  # noqa: E402

#: (module or class, attribute, label): the steps timed, as the package names them.  The
#: module-level names are the ones the calls read (``mechanism.py``'s and ``search.py``'s,
#: the checker's in ``answer.py``, the deployment's in ``points.py``), so the wrapper sits
#: where the call is made.
STEPS: tuple[tuple[Any, str, str], ...] = (
    (opt_mechanism, "split_super_machine", "super-machine build"),
    (opt_mechanism, "solve_matrix", "super-machine solve (incl. HiGHS)"),
    (opt_search, "repair", "swap repair"),
    (opt_points, "deploy", "max-flow deployment"),
    (opt_answer, "check_allocation", "checker"),
    (opt_search, "build_allocation", "building the answer"),
    (opt_mechanism, "better_of", "against TUNE (incl. checker)"),
    (opt_points, "direct_points", "points on a plan"),
    (opt_mechanism.Opt, "_context", "round context"),
    (Tune, "tune_round", "TUNE's floor"),  # only where run (``opt`` skips it where it may)
    (highspy.Highs, "run", "HiGHS run (all solves)"),
)

#: The row of the time garbage collections took while ``opt`` ran (inside the other steps).
GC_LABEL: str = "garbage collection (inside the steps)"


@dataclass
class Steps:
    """Seconds per step, summed while :attr:`recording` (``tune``'s own round, which runs
    the same TUNE code, is left out)."""

    totals: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    recording: bool = False


def _timed(acc: Steps, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not acc.recording:
            return fn(*args, **kwargs)
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            acc.totals[label] += time.perf_counter() - t

    return wrapper


@contextlib.contextmanager
def instrumented(acc: Steps) -> Iterator[None]:
    """Every step of :data:`STEPS` and every route timed into ``acc`` while inside."""
    with contextlib.ExitStack() as stack:
        for owner, attr, label in STEPS:
            raw = inspect.getattr_static(owner, attr)  # a staticmethod stays one
            if isinstance(raw, staticmethod):
                wrapped: Any = staticmethod(_timed(acc, label, raw.__func__))
            else:
                wrapped = _timed(acc, label, raw)
            stack.enter_context(mock.patch.object(owner, attr, wrapped))
        routes = {
            name: dataclasses.replace(r, plan=_timed(acc, f"route {name}", r.plan))
            for name, r in opt_routes.ROUTES.items()
        }
        stack.enter_context(mock.patch.dict(opt_routes.ROUTES, routes))
        started: list[float] = []

        def collector(phase: str, info: dict[str, int]) -> None:
            if not acc.recording:
                return
            if phase == "start":
                started.append(time.perf_counter())
            elif started:
                acc.totals[GC_LABEL] += time.perf_counter() - started.pop()

        gc.callbacks.append(collector)
        stack.callback(gc.callbacks.remove, collector)
        yield


def _seeds(text: str) -> range:
    try:
        a, b = (int(x) for x in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected A:B, got {text!r}") from None
    if not 0 <= a < b:
        raise argparse.ArgumentTypeError(f"expected 0 <= A < B, got {text!r}")
    return range(a, b)


def main(argv: list[str] | None = None) -> int:
    """Time the steps and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="multi-gpu", choices=FAMILIES)
    ap.add_argument("--gpus", type=int, default=128, help="a multiple of 32 (128)")
    ap.add_argument("--seeds", type=_seeds, default=range(0, 11), help="A:B, B excluded (0:11)")
    ap.add_argument("--passes", type=int, default=5, help="passes over the rounds (5)")
    ap.add_argument("--skip", default="7", help="seeds left out, comma-separated (7)")
    ap.add_argument("--quick", action="store_true", help="seeds 0:3, one pass (bench/run.py)")
    args = ap.parse_args(argv)
    if args.quick:
        args.seeds, args.passes = range(0, 3), 1
    if args.gpus < 32 or args.gpus % 32:
        ap.error(f"--gpus: family rounds come in multiples of 32 GPUs, got {args.gpus}")
    if args.passes < 1:
        ap.error("--passes: must be >= 1")
    try:
        skip = {int(x) for x in args.skip.split(",") if x.strip()}
    except ValueError:
        ap.error(f"--skip: expected seeds like 7,9, got {args.skip!r}")
    seeds = [s for s in args.seeds if s not in skip]
    if not seeds:
        ap.error("--seeds: every seed is skipped")
    logging.disable(logging.WARNING)
    warm_up()
    insts = [family_round(args.family, args.gpus, s) for s in seeds]
    tune, opt = make_mechanism("tune"), Opt()
    acc = Steps()
    t_tune: list[float] = []
    t_opt: list[float] = []
    with instrumented(acc):
        for inst in insts:  # untimed: the first call of each round fills the pure memos
            _cold(opt, inst)
        gc.collect()  # what the imports and memos owe the collector is not a round's cost
        for _ in range(args.passes):
            for inst in insts:
                t = time.perf_counter()
                tune.allocate(inst)
                t_tune.append(time.perf_counter() - t)
                acc.recording = True
                t = time.perf_counter()
                _cold(opt, inst)
                t_opt.append(time.perf_counter() - t)
                acc.recording = False
    n = len(t_opt)
    mean_tune = statistics.fmean(t_tune)
    rows: list[list[object]] = [
        ["tune (whole round)", 1000 * mean_tune, 1.0],
        ["opt (whole round)", 1000 * statistics.fmean(t_opt), statistics.fmean(t_opt) / mean_tune],
    ]
    rows += [
        [label, 1000 * total / n, total / n / mean_tune]
        for label, total in sorted(acc.totals.items(), key=lambda kv: -kv[1])
    ]
    table(
        f"opt's steps on cold {args.family} {args.gpus}-GPU rounds (seeds {seeds[0]}-{seeds[-1]}"
        f"{', without ' + ','.join(map(str, sorted(skip))) if skip else ''}; {args.passes} passes; "
        "mean ms per round, inclusive; opt's 'against TUNE' holds its checker)",
        ["step", "ms", "x tune"],
        rows,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
