"""The exact model and deployable OPT, measured side by side in one run (issue 10).

python bench/bench_opt.py [--rounds N] [--seeds S] [--repeats R] [--passes P] [--typed-seeds T]
    [--quick]
    [--sizes 32,64] [--seed-offset K] [--families a,b] [--exact-cache FILE]
    [--retry-time-limit T]

Tables (all rounds from ``synergy_opt.generate.family_round``: GPU load 1.2, shipped
profiles, split 20/70/10):

1. ``opt-exact`` per round, per family at 128 GPUs and single-GPU at 512 GPUs: wall time of
   the whole mechanism (TUNE and ``opt`` as MIP starts, the staged counting solve, the
   checker), how many rounds were proven (relative gap <= 1e-4), and the gap of the worst.
2. ``opt`` against the proven optimum on N rounds per family at 32-128 GPUs (sizes cycle
   ``--sizes``, default 32, 64, 96, 128; seeds ``--seed-offset`` + round, default 1000+): the
   minimum and mean of opt/exact, how often ``opt`` >= ``tune``, and how often it schedules
   the whole runnable set when the optimum does, per family and per size.  Rounds the exact
   model did not prove are counted apart and left out of the ratios.  ``--exact-cache FILE``
   keeps the proven optima (JSON) so that a later run with other ``opt`` code skips them.
   ``--retry-time-limit T`` solves a round left unproven once more with T seconds (column
   'late'): the rounds proven fast are not all the rounds.
3. ``opt`` and ``tune`` per-round time at 128 and 512 GPUs (single- and multi-GPU mix),
   measured interleaved (tune, opt, tune, opt, ...) in this one process, ``--passes P``
   times over the R rounds (default 5); a round's time is its median over the passes, the
   table's the median over the rounds.
   Cold rounds: ``opt.forget_rounds()`` before each (nothing to warm-start from or replay;
   its pure memos kept, as tune's are); wall and CPU time
   (CPU time is what this process used, robust to other load on a shared machine).  A
   third, interleaved column runs ``opt`` with its swap repair off (the fast path that
   deploys a route's plan without a MIP), on the same rounds.
3b. The same inside simulations (``--tables 3b``): a generated trace per cell (FIFO, paper
   workloads at 1.5x the paper's arrival rates so the cluster fills sooner), ``--warmup``
   rounds run by TUNE alone, then ``--sim-rounds`` rounds in which every round instance
   goes to ``tune`` and to one ``opt`` (timed side by side, ``opt``'s answer drives the
   simulation, so ``opt`` warm-starts from its own previous round).

4. ``opt`` on typed rounds (``--tables 4``; 16 servers of V100, P100 and K80 GPUs, 1-GPU, the
   1/2/4/8-GPU mix, and that mix with split penalties; ``--typed-seeds`` rounds each), CPU
   time against ``tune-typed`` and against ``opt`` with its plain pass on every round (how
   it ran typed rounds before 2026-12), with how often both reach the same total and
   ``opt``'s lowest total/bound.

5. ``opt``'s pattern bound (``--tables 5``): on memory-scarce (128, 512 GPUs), CPU-scarce
   and single-GPU rounds (128 GPUs) and split-penalty rounds (64 GPUs; ``--pattern-cells``
   picks others), ``--repeats`` cold rounds each, ``opt`` with and without the bound
   (``search.PATTERN_BOUND``) interleaved ``--passes`` times: CPU time, rounds proven by
   their own bound, median bound/total, rounds with equal totals.

``--rounds 200`` is the full claim of issue 10 (hours); the default runs in a few minutes.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import logging
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from synergy_opt.generate import FAMILIES, family_round
from synergy_opt.io import dumps, instance_to_dict
from synergy_opt.mechanisms import MechanismOptions, make_mechanism
from synergy_opt.mechanisms.opt import Opt
from synergy_opt.mechanisms.packing import select_runnable
from synergy_opt.types import Allocation, RoundInstance

#: A proven optimum: the bound within this relative gap of the total (issue 10).
PROVEN_GAP = 1e-4
log = logging.getLogger("bench_opt")
SIZES = (32, 64, 96, 128)


def table(title: str, header: list[str], rows: list[list[object]]) -> None:
    """Print one aligned table."""
    cells = [header] + [[f"{c:.3f}" if isinstance(c, float) else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    print(f"\n{title}")
    for k, r in enumerate(cells):
        print("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)))
        if k == 0:
            print("  ".join("-" * w for w in widths))
    sys.stdout.flush()


def seed_list(text: str) -> list[int]:
    """``--seeds`` of the side-by-side benches: comma-separated non-negative seeds."""
    try:
        seeds = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seeds like 3,9, got {text!r}") from None
    if not seeds or min(seeds) < 0:
        raise argparse.ArgumentTypeError(f"expected non-negative seeds, got {text!r}")
    return seeds


def gap(a: Allocation) -> float:
    """Relative gap between the allocation's bound and its total (inf without a bound)."""
    if a.upper_bound is None:
        return float("inf")
    return (a.upper_bound - a.total_throughput) / max(1.0, abs(a.total_throughput))


def proven(a: Allocation) -> bool:
    """Whether ``opt-exact`` proved its answer optimal."""
    return not a.notes and gap(a) <= PROVEN_GAP


def timed(fn: Callable[[], Allocation]) -> tuple[Allocation, float]:
    """The result and the wall time of ``fn()``."""
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def bench_exact_times(seeds: int, time_limit: float) -> None:
    """Table 1."""
    exact = make_mechanism("opt-exact", MechanismOptions(time_limit_s=time_limit))
    rows: list[list[object]] = []
    cases = [(f, 128) for f in FAMILIES] + [("single-gpu", 512)]
    for family, gpus in cases:
        times: list[float] = []
        gaps: list[float] = []
        jobs: list[int] = []
        for seed in range(seeds):
            inst = family_round(family, gpus, seed)
            alloc, dt = timed(lambda inst=inst: exact.allocate(inst))
            times.append(dt)
            gaps.append(gap(alloc) if not alloc.notes else max(gap(alloc), PROVEN_GAP * 10))
            jobs.append(len(select_runnable(inst)))
        rows.append(
            [
                family,
                gpus,
                f"{min(jobs)}-{max(jobs)}",
                statistics.median(times),
                max(times),
                f"{sum(g <= PROVEN_GAP for g in gaps)}/{seeds}",
                f"{max(gaps):.1e}",
            ]
        )
    table(
        f"1. opt-exact per round (time limit {time_limit:g} s, seeds 0-{seeds - 1})",
        ["family", "GPUs", "runnable", "median s", "max s", "proven", "worst gap"],
        rows,
    )


@dataclass(frozen=True, slots=True)
class Exact:
    """What table 2 needs of an ``opt-exact`` answer (kept in ``--exact-cache``)."""

    total: float
    proven: bool
    jobs: int
    #: Proven by the second, longer solve (``--retry-time-limit``), not at ``--time-limit``.
    retried: bool = False
    #: The exact model's proven bound (its ``upper_bound``): where the round is not proven,
    #: ``opt`` is at least its total over this bound of the optimum.
    bound: float | None = None

    @classmethod
    def of(cls, a: Allocation, *, retried: bool = False) -> Exact:
        return cls(a.total_throughput, proven(a), len(a.jobs), retried and proven(a), a.upper_bound)


class ExactCache:
    """Proven optima by round (family, GPUs, seed and a digest of the round's JSON), in a
    JSON file: a later run (other ``opt`` code, same rounds) skips the exact solves, which
    are most of table 2's time.  An optimum does not depend on the code that proved it; a
    round not proven is solved again (a new exact model may prove it).  The file is
    rewritten atomically after every new round."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.rounds: dict[str, dict[str, Any]] = {}
        if path is not None and path.exists():
            try:
                self.rounds = json.loads(path.read_text(encoding="utf-8"))["rounds"]
            except (ValueError, KeyError, TypeError) as e:
                raise SystemExit(f"--exact-cache {path}: not a table-2 cache ({e})") from e

    def get(self, key: str) -> Exact | None:
        got = self.rounds.get(key)
        if got is None or not got.get("proven"):
            return None
        bound = got.get("bound")
        return Exact(
            float(got["total"]),
            True,
            int(got["jobs"]),
            bool(got.get("retried")),
            None if bound is None else float(bound),
        )

    def put(self, key: str, ex: Exact) -> None:
        if self.path is None:
            return
        self.rounds[key] = {"total": ex.total, "proven": ex.proven, "jobs": ex.jobs}
        if ex.retried:
            self.rounds[key]["retried"] = True
        if ex.bound is not None:
            self.rounds[key]["bound"] = ex.bound
        tmp = self.path.with_name(self.path.name + ".tmp")
        text = json.dumps({"format": "bench-opt-exact/1", "rounds": self.rounds}, indent=0)
        tmp.write_text(text + "\n", encoding="utf-8")
        os.replace(tmp, self.path)


def bench_opt_ratio(
    rounds: int,
    time_limit: float,
    sizes: tuple[int, ...] = SIZES,
    seed_offset: int = 1000,
    families: tuple[str, ...] = FAMILIES,
    cache: ExactCache | None = None,
    retry_time_limit: float | None = None,
) -> None:
    """Table 2: one row per family and size, then one per family over all sizes.

    ``retry_time_limit``: a round the exact model leaves unproven at ``time_limit`` is
    solved once more with this limit.  Without it the ratios cover only the rounds proven
    fast, which can hide the hard ones: mixed shapes 96 GPUs seed 1006 is unproven at
    20 s and proven at 150 s, and ``opt`` at 20 s was 1.1 % below that optimum.

    Rounds left unproven are not left out silently: ``opt`` runs on them too, and column
    'opt/bound unproven' is its lowest total over the exact model's proven bound there, a
    floor of its ratio to the optimum it cannot measure (split penalties 128 GPUs seed 13:
    unproven at 10 and 20 s, ``opt`` at 20 s 0.989 of the optimum proven at 39 s)."""
    options = MechanismOptions(time_limit_s=time_limit)
    exact, opt, tune = (make_mechanism(n, options) for n in ("opt-exact", "opt", "tune"))
    retry = (
        None
        if retry_time_limit is None
        else make_mechanism("opt-exact", MechanismOptions(time_limit_s=retry_time_limit))
    )
    cache = cache or ExactCache(None)
    rows: list[list[object]] = []
    for family in families:
        # per size: ratios, rounds, unproven, below tune, dropped, worst round
        cells = {g: ([], 0, 0, 0, 0, "") for g in sizes}
        retried: dict[int, int] = dict.fromkeys(sizes, 0)  # proven only at the longer limit
        # per size: opt's total over the exact model's bound, on rounds it did not prove
        floors: dict[int, list[float]] = {g: [] for g in sizes}
        t0 = time.perf_counter()
        for r in range(rounds):
            gpus = sizes[r % len(sizes)]
            seed = seed_offset + r
            ratios, n_rounds, unproven, below_tune, dropped, worst = cells[gpus]
            n_rounds += 1
            inst = family_round(family, gpus, seed)
            # the round's own bytes in the key: a changed generator cannot reuse an optimum
            digest = hashlib.sha256(dumps(instance_to_dict(inst)).encode()).hexdigest()[:16]
            key = f"{family}/{gpus}/{seed}/{digest}"
            ex = cache.get(key)
            if ex is None:
                ex = Exact.of(exact.allocate(inst))
                if not ex.proven and retry is not None:
                    ex = Exact.of(retry.allocate(inst), retried=True)
                cache.put(key, ex)
            retried[gpus] += ex.retried
            o = opt.allocate(inst)
            if not ex.proven:
                floor = o.total_throughput / ex.bound if ex.bound else None
                if floor is not None:
                    floors[gpus].append(floor)
                log.info(
                    "table 2: %s %dg seed %d: not proven (opt/bound %s)",
                    family,
                    gpus,
                    seed,
                    "-" if floor is None else f"{floor:.4f}",
                )
                cells[gpus] = (ratios, n_rounds, unproven + 1, below_tune, dropped, worst)
                continue
            t = tune.allocate(inst)
            ratio = o.total_throughput / ex.total if ex.total else 1.0
            if not ratios or ratio < min(ratios):
                worst = f"{gpus}g seed {seed}"
            ratios.append(ratio)
            log.info(
                "table 2: %s %dg seed %d: opt/exact %.4f, opt %s tune, %d/%d jobs",
                family,
                gpus,
                seed,
                ratio,
                ">=" if o.total_throughput >= t.total_throughput - 1e-9 else "<",
                len(o.jobs),
                ex.jobs,
            )
            below_tune += o.total_throughput < t.total_throughput - 1e-9
            dropped += len(o.jobs) < ex.jobs
            cells[gpus] = (ratios, n_rounds, unproven, below_tune, dropped, worst)
        log.warning("table 2: %s done in %.0f s", family, time.perf_counter() - t0)
        for label, parts, late, loose in [
            (str(g), [cells[g]], retried[g], floors[g]) for g in sizes
        ] + [("all", list(cells.values()), sum(retried.values()), sum(floors.values(), []))]:
            ratios = [x for c in parts for x in c[0]]
            n = len(ratios)
            n_rounds = sum(c[1] for c in parts)
            below_tune = sum(c[3] for c in parts)
            dropped = sum(c[4] for c in parts)
            worst = min(
                (c for c in parts if c[0]), key=lambda c: min(c[0]), default=([], 0, 0, 0, 0, "")
            )[5]
            rows.append(
                [
                    family,
                    label,
                    f"{n}/{n_rounds}",
                    min(ratios) if ratios else float("nan"),
                    statistics.fmean(ratios) if ratios else float("nan"),
                    worst,
                    f"{n - below_tune}/{n}",
                    f"{n - dropped}/{n}",
                    sum(c[2] for c in parts),
                    late,
                    f"{min(loose):.4f}" if loose else "-",
                ]
            )
    later = "" if retry_time_limit is None else f", unproven ones again at {retry_time_limit:g} s"
    table(
        f"2. opt / proven optimum over {rounds} rounds per family (GPUs "
        f"{','.join(map(str, sizes))}; seeds {seed_offset}-{seed_offset + rounds - 1}; "
        f"exact at {time_limit:g} s{later}; 'late' = proven only by the second solve)",
        [
            "family",
            "GPUs",
            "proven",
            "min opt/exact",
            "mean",
            "worst round",
            "opt>=tune",
            "all runnable",
            "unproven",
            "late",
            "opt/bound unproven",
        ],
        rows,
    )


def cpu_timed(fn: Callable[[], Allocation]) -> tuple[Allocation, float, float]:
    """The result, the wall time and this process's CPU time of ``fn()`` (CPU time does not
    count the time other processes on a shared machine take from it)."""
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - t0, time.process_time() - c0


def warm_up() -> None:
    """One untimed ``opt`` and ``tune`` round: lazy imports and the solver's first start are
    once per process, not per round (in a 5-round median they moved the median round).

    Then a full garbage collection: the imports leave one owed (about 86,000 tracked
    objects, 40-50 ms), which otherwise lands inside whichever timed step allocates next
    (``bench_opt_steps.py`` charged it to the checker, 1.2 ms a round on average where the
    checker takes 0.27)."""
    inst = family_round("multi-gpu", 32, 99)
    make_mechanism("opt").allocate(inst)
    make_mechanism("tune").allocate(inst)
    gc.collect()


@contextmanager
def switched(module: ModuleType, name: str, value: object) -> Iterator[None]:
    """``module.<name>`` (a switch of the code under measurement) set to ``value`` for the
    block, restored after it: the benches' one way to run the same code with a step off."""
    before = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, before)


def _cold(
    opt: Opt, inst: RoundInstance, *, repair: bool = True, pattern_bound: bool = True
) -> Allocation:
    """``opt`` on ``inst`` as a cold round: its remembered rounds and warm start forgotten
    (the same bytes as a fresh ``opt``), its pure memos kept, as ``tune``'s are across the
    table's rounds.  ``repair=False`` turns the swap repair (``mechanisms/opt/repair.py``)
    off, ``pattern_bound=False`` the pattern bound (``search.PATTERN_BOUND``): the same
    code otherwise, so two columns differ by that step alone."""
    from synergy_opt.mechanisms.opt import search

    opt.forget_rounds()
    with switched(search, "REPAIR", repair), switched(search, "PATTERN_BOUND", pattern_bound):
        return opt.allocate(inst)


def _time_cells(tune_s: float, opt_s: float, tune_cpu: float, opt_cpu: float) -> list[float]:
    """Tables 3 and 3b's timing columns: tune and opt wall ms and their ratio, then the same
    for CPU time."""
    return [
        1000 * tune_s,
        1000 * opt_s,
        opt_s / tune_s,
        1000 * tune_cpu,
        1000 * opt_cpu,
        opt_cpu / tune_cpu,
    ]


def _per_round(samples: list[list[tuple[float, float]]]) -> list[tuple[float, float]]:
    """Each round's (wall, CPU) time: its median over the passes."""
    return [
        (statistics.median(t[0] for t in ts), statistics.median(t[1] for t in ts)) for ts in samples
    ]


def bench_opt_vs_tune_time(repeats: int, passes: int = 5) -> None:
    """Table 3: interleaved per-round times on cold rounds (no previous round to warm-start
    from or replay), with and without the swap repair.

    ``passes`` passes over the ``repeats`` rounds, each round's time its median over them:
    with one sample a round, one noisy sample moved the table's median (multi-GPU 128 GPUs
    read 3.9x-5.7x on the same code in one day)."""
    warm_up()
    tune = make_mechanism("tune")
    opt, opt_off = Opt(), Opt()
    rows: list[list[object]] = []
    for family in ("single-gpu", "multi-gpu"):
        for gpus in (128, 512):
            insts: list[RoundInstance] = [family_round(family, gpus, s) for s in range(repeats)]
            s_opt: list[list[tuple[float, float]]] = [[] for _ in insts]
            s_tune: list[list[tuple[float, float]]] = [[] for _ in insts]
            s_off: list[list[tuple[float, float]]] = [[] for _ in insts]
            not_lower = 0
            for p in range(passes):
                for i, inst in enumerate(insts):
                    s_tune[i].append(cpu_timed(lambda inst=inst: tune.allocate(inst))[1:])
                    got, *t = cpu_timed(lambda inst=inst: _cold(opt, inst))
                    s_opt[i].append((t[0], t[1]))
                    off, *t = cpu_timed(lambda inst=inst: _cold(opt_off, inst, repair=False))
                    s_off[i].append((t[0], t[1]))
                    if p == 0:
                        not_lower += got.total_throughput >= off.total_throughput - 1e-9
            t_opt, t_tune, t_off = _per_round(s_opt), _per_round(s_tune), _per_round(s_off)
            mt, mo = (statistics.median(t[0] for t in ts) for ts in (t_tune, t_opt))
            ct, co, cf = (statistics.median(t[1] for t in ts) for ts in (t_tune, t_opt, t_off))
            # The slow rounds (neighbourhood search) sit above the median: the summed CPU
            # time says what a run of such rounds costs.
            total = sum(t[1] for t in t_opt) / sum(t[1] for t in t_tune)
            total_off = sum(t[1] for t in t_off) / sum(t[1] for t in t_tune)
            # rounds whose own CPU ratio is within issue 10's 5x (the median hides the rest)
            within = sum(o[1] <= 5.0 * t[1] for o, t in zip(t_opt, t_tune, strict=True))
            rows.append(
                [
                    family,
                    gpus,
                    *_time_cells(mt, mo, ct, co),
                    f"{within}/{len(insts)}",
                    total,
                    1000 * cf,
                    cf / ct,
                    total_off,
                    f"{not_lower}/{len(insts)}",
                ]
            )
    table(
        f"3. per-round time on cold rounds, tune and opt interleaved ({passes} passes, each "
        f"round's time its median over them; median of {repeats} rounds; "
        "'<=5x' = rounds whose own CPU ratio is at most 5; "
        "'sum cpu' = total CPU opt/tune; 'no repair' = opt with the swap repair off, "
        "interleaved too; 'opt>=' = rounds where opt's total >= the no-repair total)",
        [
            "family",
            "GPUs",
            "tune ms",
            "opt ms",
            "opt/tune",
            "tune cpu",
            "opt cpu",
            "cpu ratio",
            "<=5x",
            "sum cpu",
            "no-repair cpu",
            "ratio",
            "sum",
            "opt>=",
        ],
        rows,
    )


#: Table 4's cells: (label, GPU mix, split penalty range) on 3-type 16-server rounds.
TYPED_CELLS: tuple[tuple[str, tuple[tuple[int, float], ...], tuple[float, float] | None], ...] = (
    ("1-GPU", ((1, 1.0),), None),
    ("1/2/4/8-GPU", ((1, 0.5), (2, 0.2), (4, 0.2), (8, 0.1)), None),
    ("1/2/4/8-GPU split", ((1, 0.5), (2, 0.2), (4, 0.2), (8, 0.1)), (0.8, 0.95)),
)


def _typed_round(
    mix: tuple[tuple[int, float], ...], pen: tuple[float, float] | None, seed: int
) -> RoundInstance:
    from synergy_opt.generate import GenerateSpec, generate_instance

    return generate_instance(
        GenerateSpec(
            servers=16,
            gpu_load=1.3,
            gpu_mix=mix,
            seed=seed,
            gpu_types=(("v100", 64), ("p100", 32), ("k80", 32)),
            split_penalty=pen,
        )
    )


def _opt_plain_always(inst: RoundInstance) -> Allocation:
    """``opt`` as it ran typed rounds before 2026-12: the plain pass on every round."""
    from synergy_opt.mechanisms.opt import mechanism

    with switched(mechanism, "PLAIN_PASS_ALWAYS", True):
        return Opt().allocate(inst)


def bench_typed(seeds: int) -> None:
    """Table 4: ``opt`` on typed rounds against ``tune-typed`` and against ``opt`` with the
    plain pass on every round (interleaved, cold, CPU time)."""
    warm_up()
    tt = make_mechanism("tune-typed")
    rows: list[list[object]] = []
    for label, mix, pen in TYPED_CELLS:
        cpu: dict[str, list[float]] = {"tt": [], "opt": [], "old": []}
        ratio, equal, proven = [], 0, 0
        for seed in range(seeds):
            inst = _typed_round(mix, pen, seed)
            a, _, c = cpu_timed(lambda inst=inst: tt.allocate(inst))
            cpu["tt"].append(c)
            got, _, c = cpu_timed(lambda inst=inst: Opt().allocate(inst))
            cpu["opt"].append(c)
            old, _, c = cpu_timed(lambda inst=inst: _opt_plain_always(inst))
            cpu["old"].append(c)
            equal += abs(got.total_throughput - old.total_throughput) <= 1e-9 * max(
                1.0, old.total_throughput
            )
            if got.upper_bound is not None:
                ratio.append(got.total_throughput / got.upper_bound)
                proven += got.total_throughput >= got.upper_bound * (1 - PROVEN_GAP)
        med = {k: statistics.median(v) for k, v in cpu.items()}
        rows.append(
            [
                label,
                seeds,
                1000 * med["tt"],
                1000 * med["opt"],
                med["opt"] / med["tt"],
                1000 * med["old"],
                sum(cpu["old"]) / sum(cpu["opt"]),
                f"{equal}/{seeds}",
                min(ratio) if ratio else "-",
                f"{proven}/{seeds}",
            ]
        )
    table(
        "4. typed rounds (16 servers: V100 64, P100 32, K80 32 GPUs; load 1.3; seeds 0..N-1), "
        "CPU ms, medians; 'plain first' = opt with its plain pass on every round, as before "
        "2026-12; 'sum old/new' = total CPU of the two; 'equal' = same total; 'opt/bound' = "
        "the lowest; 'at bound' = within 1e-4 of it",
        [
            "mix",
            "rounds",
            "tune-typed",
            "opt",
            "opt/tt",
            "plain first",
            "sum old/new",
            "equal",
            "opt/bound",
            "at bound",
        ],
        rows,
    )


#: Table 5's cells (family, GPUs): rounds where no job may spread, and split-penalty rounds
#: of at most 16 servers (``bounds.PATTERN_SPREAD_MAX_SERVERS``); ``--pattern-cells
#: split-penalty:128`` measures the 128-GPU ones (seconds to a minute per round).
PATTERN_CELLS: tuple[tuple[str, int], ...] = (
    ("mem-scarce", 128),
    ("mem-scarce", 512),
    ("cpu-scarce", 128),
    ("single-gpu", 128),
    ("split-penalty", 64),
)


def _bound_over_total(a: Allocation) -> float:
    """``upper_bound`` over the total (inf without a bound): table 5's tightness column."""
    return (a.upper_bound or math.inf) / max(a.total_throughput, 1e-12)


def _pattern_cells(text: str) -> tuple[tuple[str, int], ...] | None:
    """``--pattern-cells``: FAMILY:GPUS pairs, comma-separated; ``None`` where malformed."""
    out = []
    for cell in (c.strip() for c in text.split(",") if c.strip()):
        family, _, gpus = cell.partition(":")
        if family not in FAMILIES or not gpus.isdigit() or int(gpus) < 32 or int(gpus) % 32:
            return None
        out.append((family, int(gpus)))
    return tuple(out) or None


def bench_pattern_bound(
    repeats: int, passes: int = 5, cells: Sequence[tuple[str, int]] = PATTERN_CELLS
) -> None:
    """Table 5: ``opt`` with and without its pattern bound, interleaved on the same cold
    rounds (seeds 0..R-1; which runs first alternates), CPU time (each round's median over
    the passes); how many rounds
    each proves (total within 1e-4 of its own bound), its median bound over its total, and
    on how many both totals are equal."""
    warm_up()
    opt = Opt()
    rows: list[list[object]] = []
    for family, gpus in cells:
        insts = [family_round(family, gpus, seed) for seed in range(repeats)]
        cpu: dict[bool, list[list[float]]] = {on: [[] for _ in insts] for on in (True, False)}
        last: dict[bool, list[Allocation]] = {True: [], False: []}
        for p in range(passes):
            for i, inst in enumerate(insts):
                for on in (True, False) if (p + i) % 2 == 0 else (False, True):  # either first
                    a, _, c = cpu_timed(lambda inst=inst, on=on: _cold(opt, inst, pattern_bound=on))
                    cpu[on][i].append(c)
                    if p == 0:
                        last[on].append(a)
        med = {on: [statistics.median(v) for v in cpu[on]] for on in (True, False)}
        same = sum(
            abs(a.total_throughput - b.total_throughput) <= 1e-9 * max(1.0, b.total_throughput)
            for a, b in zip(last[True], last[False], strict=True)
        )
        rows.append(
            [
                family,
                gpus,
                len(insts),
                1000 * statistics.median(med[False]),
                1000 * statistics.median(med[True]),
                statistics.median(med[False]) / statistics.median(med[True]),
                sum(med[False]) / sum(med[True]),
                f"{sum(map(proven, last[False]))}/{len(insts)}",
                f"{sum(map(proven, last[True]))}/{len(insts)}",
                statistics.median(map(_bound_over_total, last[False])),
                statistics.median(map(_bound_over_total, last[True])),
                f"{same}/{len(insts)}",
            ]
        )
    table(
        f"5. opt's pattern bound, cold rounds, interleaved ({passes} passes; CPU ms, medians "
        "over rounds of each round's median; 'proven' = total within 1e-4 of its own bound; "
        "'bound/total' = median upper_bound over total; 'same' = rounds with equal totals)",
        [
            "family",
            "GPUs",
            "rounds",
            "without ms",
            "with ms",
            "speedup",
            "sum",
            "proven without",
            "proven with",
            "bound/total without",
            "bound/total with",
            "same",
        ],
        rows,
    )


#: Table 3b's cells: (workload, servers of 8 GPUs, arrivals per hour: 1.5x the paper's 9
#: single-GPU and 4 multi-GPU jobs per hour per 128 GPUs).
SIM_CELLS: tuple[tuple[str, int, float], ...] = (
    ("single-gpu", 16, 13.5),
    ("single-gpu", 64, 54.0),
    ("multi-gpu", 16, 6.0),
    ("multi-gpu", 64, 24.0),
)


class _Enough(Exception):
    """Raised by the timing wrapper once its rounds are measured (ends the simulation)."""


@dataclass(frozen=True, slots=True)
class _Timed:
    """One measured simulation round."""

    tune_s: float
    opt_s: float
    tune_cpu: float
    opt_cpu: float
    runnable: int
    tune_total: float
    opt_total: float
    bound: float | None


class _SideBySide:
    """A mechanism for the simulator: TUNE alone for ``warmup`` rounds, then each round to
    TUNE and to one ``opt``, both timed; ``opt``'s answer is returned."""

    name = "opt"

    def __init__(self, warmup: int, rounds: int) -> None:
        self.tune, self.opt = make_mechanism("tune"), make_mechanism("opt")
        self.warmup, self.rounds = warmup, rounds
        self.calls = 0
        self.log: list[_Timed] = []

    def allocate(self, inst: RoundInstance) -> Allocation:
        self.calls += 1
        if self.calls <= self.warmup:
            return self.tune.allocate(inst)
        t, t_s, t_cpu = cpu_timed(lambda: self.tune.allocate(inst))
        o, o_s, o_cpu = cpu_timed(lambda: self.opt.allocate(inst))
        self.log.append(
            _Timed(
                t_s,
                o_s,
                t_cpu,
                o_cpu,
                len(select_runnable(inst)),
                t.total_throughput,
                o.total_throughput,
                o.upper_bound,
            )
        )
        if len(self.log) >= self.rounds:
            raise _Enough
        return o


def bench_sim_rounds(rounds: int, warmup: int) -> None:
    """Table 3b: per-round times of ``tune`` and ``opt`` on the rounds of simulations."""
    import numpy as np

    from synergy_opt.profiles import shipped_profiles
    from synergy_opt.sim.config import SimConfig, paper_cluster
    from synergy_opt.sim.engine import simulate
    from synergy_opt.sim.workload import WorkloadSpec, generate_workload

    profiles = shipped_profiles()
    warm_up()
    rows: list[list[object]] = []
    for kind, servers, rate in SIM_CELLS:
        spec = WorkloadSpec(kind=kind, jobs=20000, arrival_rate_per_h=rate)
        trace = generate_workload(spec, profiles, np.random.default_rng(0))
        mech = _SideBySide(warmup, rounds)
        try:
            simulate(
                SimConfig(cluster=paper_cluster(servers)), trace, mech, "fifo", profiles=profiles
            )
        except _Enough:
            pass
        got = mech.log
        if not got:
            continue
        mt, mo = statistics.median(r.tune_s for r in got), statistics.median(r.opt_s for r in got)
        ct = statistics.median(r.tune_cpu for r in got)
        co = statistics.median(r.opt_cpu for r in got)
        near = sum(
            1 for r in got if r.bound is not None and r.opt_total >= r.bound * (1 - 2e-3) - 1e-9
        )
        rows.append(
            [
                kind,
                8 * servers,
                len(got),
                f"{min(r.runnable for r in got)}-{max(r.runnable for r in got)}",
                *_time_cells(mt, mo, ct, co),
                sum(r.opt_cpu for r in got) / sum(r.tune_cpu for r in got),
                f"{sum(r.opt_total >= r.tune_total - 1e-9 for r in got)}/{len(got)}",
                f"{near}/{len(got)}",
            ]
        )
    table(
        f"3b. per-round time inside simulations ({warmup} TUNE rounds, then {rounds} timed; "
        "opt warm-starts from its previous round; medians, 'sum cpu' = total CPU opt/tune)",
        [
            "workload",
            "GPUs",
            "rounds",
            "runnable",
            "tune ms",
            "opt ms",
            "opt/tune",
            "tune cpu",
            "opt cpu",
            "cpu ratio",
            "sum cpu",
            "opt>=tune",
            "within 0.2%",
        ],
        rows,
    )


def main() -> int:
    """Parse options and print the tables."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4, help="rounds per family in table 2")
    ap.add_argument("--seeds", type=int, default=3, help="rounds per family in table 1")
    ap.add_argument("--repeats", type=int, default=5, help="rounds per cell in table 3")
    ap.add_argument("--passes", type=int, default=5, help="passes over table 3's rounds")
    ap.add_argument("--sim-rounds", type=int, default=60, help="timed rounds per cell, table 3b")
    ap.add_argument("--warmup", type=int, default=800, help="TUNE-only rounds first, table 3b")
    ap.add_argument("--typed-seeds", type=int, default=4, help="rounds per cell in table 4")
    ap.add_argument("--time-limit", type=float, default=60.0, help="opt-exact limit, seconds")
    ap.add_argument(
        "--retry-time-limit",
        type=float,
        help="table 2: solve a round the exact model left unproven once more with this limit",
    )
    ap.add_argument("--tables", default="1,2,3,3b,4,5", help="which tables, e.g. 1,3,3b")
    ap.add_argument("--quick", action="store_true", help="one seed, two rounds, two repeats")
    ap.add_argument(
        "--sizes", default="32,64,96,128", help="table 2: GPU counts the rounds cycle through"
    )
    ap.add_argument("--seed-offset", type=int, default=1000, help="table 2: first seed")
    ap.add_argument("--families", default=",".join(FAMILIES), help="table 2: which families")
    ap.add_argument(
        "--pattern-cells",
        default=",".join(f"{f}:{g}" for f, g in PATTERN_CELLS),
        help="table 5: FAMILY:GPUS cells, e.g. split-penalty:128",
    )
    ap.add_argument("-v", "--verbose", action="store_true", help="table 2: one line per round")
    ap.add_argument(
        "--exact-cache",
        type=Path,
        help="table 2: JSON file of proven optima, read and extended (skips their exact solves)",
    )
    args = ap.parse_args()
    try:
        sizes = tuple(int(x) for x in args.sizes.split(","))
    except ValueError:
        ap.error(f"--sizes: expected GPU counts like 32,64, got {args.sizes!r}")
    if not sizes or any(g < 32 or g % 32 for g in sizes):
        ap.error(f"--sizes: family rounds come in multiples of 32 GPUs, got {args.sizes!r}")
    families = tuple(f.strip() for f in args.families.split(",") if f.strip())
    unknown = [f for f in families if f not in FAMILIES]
    if not families or unknown:
        ap.error(f"--families: unknown {unknown or args.families!r}; known: {', '.join(FAMILIES)}")
    cells = _pattern_cells(args.pattern_cells)
    if cells is None:
        ap.error(
            f"--pattern-cells: expected FAMILY:GPUS cells (GPUs a multiple of 32, families "
            f"{', '.join(FAMILIES)}), got {args.pattern_cells!r}"
        )
    if (
        min(args.rounds, args.seeds, args.repeats, args.passes, args.sim_rounds, args.typed_seeds)
        < 1
        or args.time_limit <= 0
        or (args.retry_time_limit is not None and args.retry_time_limit <= args.time_limit)
    ):
        ap.error(
            "--rounds, --seeds, --repeats, --passes, --sim-rounds and --typed-seeds must be >= 1, "
            "--time-limit > 0, --retry-time-limit > --time-limit"
        )
    if args.warmup < 0:
        ap.error("--warmup must be >= 0")
    if args.quick:
        args.rounds, args.seeds, args.repeats, args.sim_rounds, args.typed_seeds = 2, 1, 2, 10, 1
        args.passes = 1
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s"
    )
    logging.getLogger("synergy_opt").setLevel(logging.ERROR)
    wanted = {t.strip() for t in args.tables.split(",")}
    if "1" in wanted:
        bench_exact_times(args.seeds, args.time_limit)
    if "2" in wanted:
        cache = ExactCache(args.exact_cache)
        bench_opt_ratio(
            args.rounds,
            args.time_limit,
            sizes,
            args.seed_offset,
            families,
            cache,
            retry_time_limit=args.retry_time_limit,
        )
    if "3" in wanted:
        bench_opt_vs_tune_time(args.repeats, args.passes)
    if "3b" in wanted:
        bench_sim_rounds(args.sim_rounds, args.warmup)
    if "4" in wanted:
        bench_typed(args.typed_seeds)
    if "5" in wanted:
        bench_pattern_bound(args.repeats, args.passes, cells)
    return 0


if __name__ == "__main__":
    sys.exit(main())
