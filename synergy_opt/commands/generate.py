"""``synergy-opt generate``: write a round instance drawn from the shipped model profiles."""

from __future__ import annotations

import argparse
import dataclasses

from synergy_opt.commands.common import (
    UsageError,
    emit_json,
    nonneg_int,
    positive_float,
    positive_int,
    utf8_text,
)
from synergy_opt.errors import ValidationError
from synergy_opt.generate import (
    FAMILIES,
    GenerateSpec,
    family_spec,
    generate_instance,
    mix_from_workload,
    parse_gpu_mix,
    parse_gpu_types,
    parse_penalty_range,
    parse_server_shapes,
)
from synergy_opt.io import instance_to_dict
from synergy_opt.limits import JOBS
from synergy_opt.outputs import Output, preflight
from synergy_opt.profiles import load_profiles, parse_split
from synergy_opt.types import DEFAULT_FAIR_SHARE_RULE, FAIR_SHARE_RULES


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``generate`` sub-command."""
    p = sub.add_parser("generate", help="generate a round instance", description=__doc__)
    p.add_argument("--servers", type=positive_int, default=16, help="identical servers (16)")
    p.add_argument("--gpus-per-server", type=positive_int, default=8, help="GPUs per server (8)")
    p.add_argument(
        "--cpus-per-server", type=positive_int, default=24, help="CPU cores per server (24)"
    )
    p.add_argument(
        "--mem-per-server-gb", type=positive_float, default=500.0, help="memory per server (500)"
    )
    size = p.add_mutually_exclusive_group()
    size.add_argument("--jobs", type=nonneg_int, default=None, help="number of jobs")
    size.add_argument(
        "--gpu-load",
        type=positive_float,
        default=None,
        help="jobs until their GPUs reach this multiple of the cluster's GPUs (default 1.0)",
    )
    p.add_argument("--split", default="20,70,10", help="IMAGE,LANGUAGE,SPEECH percentages")
    mix = p.add_mutually_exclusive_group()
    mix.add_argument(
        "--workload",
        choices=("single-gpu", "multi-gpu"),
        default=None,
        help="the paper's GPU-demand mix: all 1 GPU (default) or 1/2/4/8 GPUs",
    )
    mix.add_argument("--gpu-mix", default=None, help="GPUS:WEIGHT pairs, e.g. 1:70,2:10,4:15,8:5")
    p.add_argument(
        "--server-shapes",
        default=None,
        metavar="COUNTxGPUS:CORES:GB,...",
        help="servers of several shapes instead of --servers etc., "
        "e.g. 8x8:24:500,4x8:32:256,8x4:12:200",
    )
    p.add_argument(
        "--split-penalty",
        default=None,
        metavar="LOW:HIGH",
        help="multi-GPU jobs get a split penalty drawn from [LOW, HIGH] (steps of 0.01), "
        "e.g. 0.8:0.95, or 'gavel': Gavel's measured spread/consolidated ratio on the "
        "reference GPU type (docs/gpu-types.md); default none (1.0)",
    )
    p.add_argument(
        "--fair-share",
        choices=FAIR_SHARE_RULES,
        default=None,
        help="write the instance's fair-share rule: 'server' (each server's own "
        "GPU-proportional share) or 'cluster' (cluster-wide); default: none written, "
        f"so the default rule ({DEFAULT_FAIR_SHARE_RULE}) applies",
    )
    p.add_argument(
        "--gpu-types",
        default=None,
        metavar="TYPE:GPUS,...",
        help="typed cluster: GPUs per GPU type in server order, e.g. v100:48,p100:48,k80:32 "
        "(types k80, p100, v100; each type whole servers); every job gets per-type "
        "matrices derived from its profile (docs/gpu-types.md)",
    )
    p.add_argument(
        "--family",
        choices=FAMILIES,
        default=None,
        help="a named round family of the exact-model bench (cluster, GPU mix and penalties "
        "preset; GPU load 1.2); its size is --family-gpus; other cluster and mix options "
        "are ignored",
    )
    p.add_argument(
        "--family-gpus",
        type=positive_int,
        default=128,
        help="GPUs of a --family round, a multiple of 32 (default 128)",
    )
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--name", type=utf8_text, default=None, help="instance name")
    p.add_argument(
        "--profiles",
        default=None,
        metavar="PROFILES.json",
        help="model profiles to draw jobs from (docs/formats.md section 6; default: shipped)",
    )
    p.add_argument(
        "-o",
        "--output",
        default=None,
        metavar="INSTANCE.json",
        help="write the round here (docs/formats.md section 1; default: standard output)",
    )
    p.set_defaults(func=run)


def spec_from_args(args: argparse.Namespace) -> GenerateSpec:
    """Translate parsed options into a :class:`GenerateSpec`, naming the bad option."""
    if args.family is not None:
        try:
            spec = family_spec(args.family, args.family_gpus, args.seed)
        except ValueError as e:
            raise UsageError(f"--family-gpus: {e}") from None
        if args.name is not None:
            spec = dataclasses.replace(spec, name=args.name)
        return dataclasses.replace(spec, fair_share_rule=args.fair_share)
    try:
        shapes = None if args.server_shapes is None else parse_server_shapes(args.server_shapes)
    except ValueError as e:
        raise UsageError(f"--server-shapes: {e}") from None
    gavel = args.split_penalty == "gavel"
    try:
        penalty = (
            None if args.split_penalty is None or gavel else parse_penalty_range(args.split_penalty)
        )
    except ValueError as e:
        raise UsageError(f"--split-penalty: {e}") from None
    try:
        gpu_types = None if args.gpu_types is None else parse_gpu_types(args.gpu_types)
    except ValueError as e:
        raise UsageError(f"--gpu-types: {e}") from None
    try:
        split = parse_split(args.split)
    except ValueError as e:
        raise UsageError(f"--split: {e}") from None
    try:
        if args.gpu_mix is not None:
            mix = parse_gpu_mix(args.gpu_mix)
        else:
            mix = mix_from_workload(args.workload or "single-gpu")
    except ValueError as e:
        raise UsageError(f"--gpu-mix: {e}") from None
    gpu_load = args.gpu_load if args.jobs is None else None
    if args.jobs is None and gpu_load is None:
        gpu_load = 1.0
    if gpu_load is not None and gpu_load * args.servers * args.gpus_per_server > JOBS.high:
        # Jobs are drawn until their GPUs reach the load: up to one job per GPU of it.
        raise UsageError(
            f"--gpu-load: {gpu_load:g} x {args.servers * args.gpus_per_server} GPUs could take "
            f"more than {JOBS.high:_} jobs (limit {JOBS.name}, docs/limits.md)"
        )
    try:
        return GenerateSpec(
            servers=args.servers,
            gpus_per_server=args.gpus_per_server,
            cpus_per_server=args.cpus_per_server,
            mem_per_server_gb=args.mem_per_server_gb,
            jobs=args.jobs,
            gpu_load=gpu_load,
            split=split,
            gpu_mix=mix,
            seed=args.seed,
            name=args.name,
            server_shapes=shapes,
            split_penalty=penalty,
            gpu_types=gpu_types,
            gavel_split_penalty=gavel,
            fair_share_rule=args.fair_share,
        )
    except ValidationError as e:
        raise UsageError(f"--{e.path.replace('_', '-')}: {e.problem}") from None


def run(args: argparse.Namespace) -> int:
    """Generate and write the instance."""
    spec = spec_from_args(args)
    preflight(
        [("--profiles", args.profiles)],
        [] if args.output is None else [Output("-o", args.output, stdout=True)],
    )
    library = load_profiles(args.profiles)
    try:
        inst = generate_instance(spec, library)
    except ValidationError as e:  # e.g. a --split category the profiles have no model of
        source = args.profiles or "the shipped profiles"
        raise UsageError(f"--{e.path.replace('_', '-')}: {e.problem} ({source})") from None
    emit_json(instance_to_dict(inst), args.output)
    return 0
