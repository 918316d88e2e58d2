"""``synergy-opt profile``: build a job's throughput matrix by optimistic profiling.

Either replay a profile as ground truth (``--model NAME``, from the shipped profiles or
``--profiles FILE``) to see what the method costs and how far it lands, or profile the
user's own command (``--command "CMD {cpus}"``), run once per core count pinned to that many
cores.  The method is the paper's optimistic profiling (OSDI '22, Section 3).  The output is
a ``synergy-profile/1`` report (docs/formats.md section 6) whose ``sensitivity`` object is a
round's (section 1), ready to paste into a round instance.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import shlex
import sys
from typing import Any

from synergy_opt.commands.common import (
    UsageError,
    emit_json,
    nonneg_float,
    positive_float,
    positive_int,
    utf8_text,
)
from synergy_opt.gpu_types import (
    REFERENCE_GPU_TYPE,
    derive_matrix,
    shipped_gavel_table,
    type_speed,
)
from synergy_opt.io import matrix_from_dict, matrix_to_dict
from synergy_opt.limits import GRID_MEM_GB, is_number_text
from synergy_opt.outputs import Output, preflight
from synergy_opt.profiles import load_profiles
from synergy_opt.profiling import (
    CPUS_PLACEHOLDER,
    DEFAULT_MAX_POINTS,
    DEFAULT_MINUTES_PER_POINT,
    DEFAULT_THRESHOLD,
    PAPER_FAIR_CPUS_PER_GPU,
    CacheModel,
    CommandBackend,
    NoPointMeasured,
    ProfileReport,
    ProfilingError,
    ReplayBackend,
    available_cpus,
    profile_job,
    report_to_dict,
    scale_matrix,
    shipped_cache_model,
)
from synergy_opt.types import ThroughputMatrix

log = logging.getLogger(__name__)

#: The paper's server (Section 3): a full grid is every core count x 10 memory points to 500 GB.
PAPER_SERVER_MEM_GB = 500.0
PAPER_MEM_POINTS = 10
DEFAULT_TIMEOUT_S = 600.0


def _threshold(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (math.isfinite(v) and 0 < v < 10):
        raise argparse.ArgumentTypeError(f"must be a relative gain in (0, 10), got {text!r}")
    return v


def _mem_list(text: str) -> tuple[float, ...]:
    try:
        words = [x.strip() for x in text.split(",")]
        if not all(is_number_text(x) for x in words):
            raise ValueError(text)
        vals = tuple(float(x) for x in words)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers, got {text!r}"
        ) from None
    if not vals or any(not GRID_MEM_GB.contains(v) for v in vals):  # NaN fails too
        raise argparse.ArgumentTypeError(
            f"needs numbers in {GRID_MEM_GB.describe()[len('a number in ') :]} "
            f"(limit {GRID_MEM_GB.name}, docs/limits.md), got {text!r}"
        )
    if len(set(vals)) != len(vals):
        raise argparse.ArgumentTypeError(f"has a repeated value: {text!r}")
    return tuple(sorted(vals))


def _gpu_type_list(text: str) -> tuple[str, ...]:
    known = shipped_gavel_table().gpu_types
    vals = tuple(t.strip() for t in text.split(","))
    for t in vals:
        if t not in known:
            raise argparse.ArgumentTypeError(
                f"no measured speed for GPU type {t!r}; known: {', '.join(known)}"
            )
    if len(set(vals)) != len(vals):
        raise argparse.ArgumentTypeError(f"has a repeated type: {text!r}")
    return vals


def _typed_fields(
    w: ThroughputMatrix, model: str | None, category: str | None, gpu_types: tuple[str, ...]
) -> dict[str, Any]:
    """``sensitivity_by_type`` and the speeds behind it, for the report.

    The profiled matrix is the reference type's; a ``--command`` job names no model, so its
    speeds are Gavel's medians over every measured model (the ``basis`` says so).
    """
    speeds = [
        type_speed(model or "", category or "", t) for t in gpu_types if t != REFERENCE_GPU_TYPE
    ]
    return {
        "reference_gpu_type": REFERENCE_GPU_TYPE,
        "type_speeds": {s.gpu_type: {"speed": s.speed, "basis": s.basis} for s in speeds},
        "sensitivity_by_type": {
            s.gpu_type: matrix_to_dict(derive_matrix(w, s.speed)) for s in speeds
        },
    }


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``profile`` sub-command."""
    p = sub.add_parser(
        "profile",
        help="build a job's throughput matrix by optimistic profiling",
        description=__doc__,
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--model",
        type=utf8_text,
        metavar="NAME",
        help="replay this model's profile as ground truth",
    )
    src.add_argument(
        "--command",
        type=utf8_text,
        metavar='"CMD {cpus}"',
        help="profile this shell command; it must print 'throughput: <number>'",
    )
    p.add_argument("--profiles", metavar="FILE", help="profile file for --model (default: shipped)")
    p.add_argument("--gpus", type=positive_int, default=None, help="--model: GPUs of the job (1)")
    p.add_argument(
        "--max-cpus",
        type=positive_int,
        default=None,
        metavar="N",
        help="largest core count (--model: the profile's, per GPU; --command: all "
        "cores this process may use)",
    )
    p.add_argument(
        "--fair-cpus",
        type=positive_int,
        default=None,
        metavar="N",
        help="GPU-proportional cores, always measured (--model: 3 per GPU)",
    )
    p.add_argument(
        "--threshold",
        type=_threshold,
        default=DEFAULT_THRESHOLD,
        help="relative gain counted as no improvement (default 0.1)",
    )
    p.add_argument(
        "--max-points",
        type=positive_int,
        default=DEFAULT_MAX_POINTS,
        metavar="N",
        help="measurement budget (default 8)",
    )
    p.add_argument(
        "--dataset-gb",
        type=positive_float,
        default=None,
        metavar="D",
        help="dataset size (with --model every size, rate and axis is per GPU)",
    )
    p.add_argument(
        "--storage-mbps",
        type=positive_float,
        default=None,
        metavar="B",
        help="storage bandwidth available to the job",
    )
    p.add_argument(
        "--mb-per-sample",
        type=positive_float,
        default=None,
        metavar="S",
        help="MB read per unit of throughput (per sample for samples/s)",
    )
    p.add_argument(
        "--min-mem-gb",
        type=nonneg_float,
        default=None,
        metavar="GB",
        help="the job's footprint: memory points below it are left off",
    )
    p.add_argument(
        "--mem-gb",
        type=_mem_list,
        default=None,
        metavar="M1,M2,...",
        help="memory axis (--model: per GPU, default the profile's; --command: for the "
        "whole job, default 50, 100, ..., 500: the paper's 10 points on a 500 GB server)",
    )
    p.add_argument(
        "--minutes-per-point",
        type=positive_float,
        default=DEFAULT_MINUTES_PER_POINT,
        metavar="MIN",
        help="cost model for the report (the paper: 1 minute per point)",
    )
    p.add_argument(
        "--timeout",
        type=positive_float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help="--command: per-point time limit (default 600); the process group is killed",
    )
    p.add_argument(
        "--gpu-types",
        type=_gpu_type_list,
        default=None,
        metavar="T1,T2,...",
        help="also emit sensitivity_by_type for these GPU types (k80, p100, v100): the "
        "profiled matrix is taken as the reference type's (v100) and each type's is "
        "derived from Gavel's measured speeds (docs/gpu-types.md)",
    )
    p.add_argument(
        "-o",
        "--output",
        default=None,
        metavar="PROFILE.json",
        help="write the synergy-profile/1 report here (docs/formats.md section 6; "
        "default: standard output)",
    )
    p.set_defaults(func=run)


def _cache_from_args(args: argparse.Namespace, default: CacheModel | None) -> CacheModel | None:
    """The cache model: options override ``default``; without one all three are needed."""
    given = {
        "--dataset-gb": args.dataset_gb,
        "--storage-mbps": args.storage_mbps,
        "--mb-per-sample": args.mb_per_sample,
    }
    if default is None:
        if all(v is None for v in given.values()):
            if args.min_mem_gb is not None:
                raise UsageError("--min-mem-gb: needs the cache model (--dataset-gb, ...)")
            return None
        missing = [k for k, v in given.items() if v is None]
        if missing:
            raise UsageError(f"{missing[0]}: required with the other cache-model options")
        return CacheModel(
            args.dataset_gb, args.storage_mbps, args.mb_per_sample, args.min_mem_gb or 0.0
        )

    def pick(value: float | None, fallback: float) -> float:
        return fallback if value is None else value

    return CacheModel(
        pick(args.dataset_gb, default.dataset_gb),
        pick(args.storage_mbps, default.storage_mbps),
        pick(args.mb_per_sample, default.mb_per_sample),
        pick(args.min_mem_gb, default.min_mem_gb),
    )


def _profile_model(args: argparse.Namespace) -> tuple[ProfileReport, int]:
    """Replay one GPU's share (profiles are per GPU); the caller scales to ``--gpus``."""
    lib = load_profiles(args.profiles)
    try:
        prof = lib.get(args.model)
    except KeyError as e:
        raise UsageError(f"--model: {e.args[0]}") from None
    gpus = args.gpus or 1
    default = shipped_cache_model(prof) if args.profiles is None else None
    cache = _cache_from_args(args, default)
    notes = []
    if gpus > 1:
        notes.append(
            f"profiled one GPU's share (the profiles are per GPU) and scaled both axes of the "
            f"sensitivity by {gpus}, as the shipped profiles are used for every GPU count"
        )
    if cache is None:
        notes.append(
            "no cache model (give --dataset-gb, --storage-mbps, --mb-per-sample): only the "
            "full-memory column is known"
        )
    truth = prof.matrix(1)
    replay = ReplayBackend(truth)
    rep = profile_job(
        replay,
        max_cpus=args.max_cpus if args.max_cpus is not None else truth.cpus[-1],
        mem_gb=args.mem_gb or truth.mem_gb,
        cache=cache,
        threshold=args.threshold,
        fair_cpus=args.fair_cpus if args.fair_cpus is not None else PAPER_FAIR_CPUS_PER_GPU,
        max_points=args.max_points,
        minutes_per_point=args.minutes_per_point,
        source={
            "kind": "replay",
            "model": prof.name,
            "gpus": gpus,
            "per_gpu": True,
            "profiles": args.profiles or "shipped",
        },
        truth=replay.truth,
        notes=notes,
    )
    return rep, gpus


def _profile_command(args: argparse.Namespace) -> ProfileReport:
    if args.gpus is not None or args.profiles is not None:
        raise UsageError("--gpus/--profiles: only with --model")
    if CPUS_PLACEHOLDER not in args.command:
        raise UsageError(f"--command: must contain the placeholder {CPUS_PLACEHOLDER}")
    backend = CommandBackend(args.command, timeout_s=args.timeout)
    notes: list[str] = []
    have = backend.max_cpus
    max_cpus = args.max_cpus if args.max_cpus is not None else have
    if max_cpus > have:
        notes.append(
            f"--max-cpus {max_cpus} capped at {have}: this process may use only cores "
            f"{list(available_cpus())}, and a point that cannot really be pinned is not measured"
        )
        max_cpus = have
    cache = _cache_from_args(args, None)
    if args.mem_gb is not None:
        mem = args.mem_gb
    else:
        step = PAPER_SERVER_MEM_GB / PAPER_MEM_POINTS
        mem = tuple(step * k for k in range(1, PAPER_MEM_POINTS + 1))
    if cache is None:
        notes.append(
            "no cache model (give --dataset-gb, --storage-mbps, --mb-per-sample): only the "
            f"full-memory column ({mem[-1]:g} GB) is known"
        )
    fair = args.fair_cpus if args.fair_cpus is not None and args.fair_cpus <= max_cpus else None
    if args.fair_cpus is not None and fair is None:
        notes.append(
            f"--fair-cpus {args.fair_cpus} is above the {max_cpus} usable cores; not measured"
        )
    return profile_job(
        backend,
        max_cpus=max_cpus,
        mem_gb=mem,
        cache=cache,
        threshold=args.threshold,
        fair_cpus=fair,
        max_points=max(2, args.max_points),
        minutes_per_point=args.minutes_per_point,
        source={
            "kind": "command",
            "command": args.command,
            "timeout_s": args.timeout,
            "cores": list(backend.pool[:max_cpus]),
        },
        notes=notes,
        include_seconds=True,
    )


def _command_files(command: str | None) -> list[tuple[str, str]]:
    """Existing files named in ``--command`` (its script, its data): inputs the report
    must not overwrite.  A command that does not split like a shell line names none."""
    if command is None:
        return []
    try:
        words = shlex.split(command)
    except ValueError:
        return []
    return [("--command", w) for w in words if os.path.isfile(w)]


def run(args: argparse.Namespace) -> int:
    """Profile and write the report atomically; exit 1 when no point could be measured."""
    if args.max_points < 2:
        raise UsageError(f"--max-points: must be >= 2, got {args.max_points}")
    preflight(
        [("--profiles", args.profiles), *_command_files(args.command)],
        [] if args.output is None else [Output("-o", args.output, stdout=True)],
    )
    try:
        if args.model is not None:
            rep, gpus = _profile_model(args)
        else:
            rep, gpus = _profile_command(args), 1
    except NoPointMeasured as e:
        # Not bad input (the command ran): the profile has no answer, exit 1, one line.
        sys.stderr.write(f"profile: {e}\n")
        return 1
    except (ProfilingError, ValueError) as e:
        raise UsageError(str(e)) from None
    out: dict[str, Any] = report_to_dict(rep)
    if gpus > 1:
        per_gpu = matrix_from_dict(out["sensitivity"], "sensitivity")
        out["sensitivity"] = matrix_to_dict(scale_matrix(per_gpu, gpus))
    if args.gpu_types is not None:
        w = matrix_from_dict(out["sensitivity"], "sensitivity")
        model = args.model
        category = None
        if model is not None:
            category = load_profiles(args.profiles).get(model).category
        out.update(_typed_fields(w, model, category, args.gpu_types))
    emit_json(out, args.output)
    log.info(
        "profile: %d points measured of a %d-point grid (%.1fx less), saturation at %d cores",
        rep.points_measured,
        rep.grid_points,
        rep.reduction_factor,
        rep.cpu.saturation_cpus,
    )
    return 0
