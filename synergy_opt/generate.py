"""Round instances generated from the shipped model profiles.

A generated round is a cluster (homogeneous, or servers of several shapes) plus jobs in
priority order whose models are drawn by the paper's image/language/speech split and whose
GPU demands follow a mix (the paper's multi-GPU mix is 1/2/4/8 GPUs with probabilities
0.70/0.10/0.15/0.05); multi-GPU jobs may carry a split penalty drawn from a range.  The only
randomness is a ``numpy.random.Generator`` seeded from ``seed``, so the same arguments give
the same instance, byte for byte.

:func:`family_round` names the round families that exact-model tests, the bench and the
gap notebook share (``single-gpu``, ``multi-gpu``, ``cpu-scarce``, ``mem-scarce``,
``mixed-shapes``, ``split-penalty``), each at any multiple of 32 GPUs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from synergy_opt.errors import ValidationError
from synergy_opt.gpu_types import (
    REFERENCE_GPU_TYPE,
    gavel_split_penalty,
    shipped_gavel_table,
    typed_matrices,
)
from synergy_opt.profiles import CATEGORIES, ProfileLibrary, shipped_profiles
from synergy_opt.types import Cluster, Job, RoundInstance, Server, intern_matrices

#: The paper's GPU-demand mix for multi-GPU workloads (seed: Philly-derived).
MULTI_GPU_MIX: Mapping[int, float] = {1: 0.70, 2: 0.10, 4: 0.15, 8: 0.05}
SINGLE_GPU_MIX: Mapping[int, float] = {1: 1.0}
#: The paper's default workload split, image/language/speech in percent.
DEFAULT_SPLIT: tuple[float, float, float] = (20.0, 70.0, 10.0)


@dataclass(frozen=True, slots=True)
class GenerateSpec:
    """Everything that defines a generated round."""

    servers: int = 16
    gpus_per_server: int = 8
    cpus_per_server: int = 24
    mem_per_server_gb: float = 500.0
    jobs: int | None = None
    gpu_load: float | None = 1.0
    split: tuple[float, float, float] = DEFAULT_SPLIT
    gpu_mix: tuple[tuple[int, float], ...] = tuple(SINGLE_GPU_MIX.items())
    seed: int = 0
    name: str | None = None
    #: Servers of several shapes instead of the homogeneous ones above: (count, GPUs, cores,
    #: GB) per shape, in cluster order.
    server_shapes: tuple[tuple[int, int, int, float], ...] | None = None
    #: Multi-GPU jobs draw a split penalty uniformly from [low, high], in steps of 0.01.
    split_penalty: tuple[float, float] | None = None
    #: GPU types: (type, GPUs) in cluster order; servers take their type in order until
    #: each type's GPUs are covered, and every job gets per-type matrices derived from its
    #: profile and Gavel's measured type speeds (docs/gpu-types.md).
    gpu_types: tuple[tuple[str, int], ...] | None = None
    #: Multi-GPU jobs get Gavel's measured spread/consolidated ratio on the reference type.
    gavel_split_penalty: bool = False
    #: The instance's ``fair_share`` rule (``"server"`` or ``"cluster"``); ``None`` writes
    #: none, so the default applies.
    fair_share_rule: str | None = None

    def __post_init__(self) -> None:
        if self.server_shapes is not None:
            if not self.server_shapes or any(
                n < 1 or g < 1 or c < 1 or not m > 0 for n, g, c, m in self.server_shapes
            ):
                raise ValidationError(
                    "server_shapes",
                    "each shape needs a count >= 1, >= 1 GPU, >= 1 core, memory > 0",
                )
        if self.split_penalty is not None:
            lo, hi = self.split_penalty
            if not 0 < lo <= hi <= 1:
                raise ValidationError(
                    "split_penalty", f"needs 0 < LOW <= HIGH <= 1, got {lo:g}:{hi:g}"
                )
        if self.split_penalty is not None and self.gavel_split_penalty:
            raise ValidationError("split_penalty", "give a range or gavel, not both")
        if self.servers < 1:
            raise ValidationError("servers", f"must be >= 1, got {self.servers}")
        if self.gpus_per_server < 1 or self.cpus_per_server < 1 or self.mem_per_server_gb <= 0:
            raise ValidationError("servers", "each server needs >= 1 GPU, >= 1 core and memory > 0")
        if (self.jobs is None) == (self.gpu_load is None):
            raise ValidationError("jobs", "give exactly one of a job count or a GPU load")
        if self.jobs is not None and self.jobs < 0:
            raise ValidationError("jobs", f"must be >= 0, got {self.jobs}")
        if self.gpu_load is not None and not self.gpu_load > 0:
            raise ValidationError("gpu_load", f"must be > 0, got {self.gpu_load}")
        if len(self.split) != 3 or any(x < 0 for x in self.split) or sum(self.split) <= 0:
            raise ValidationError(
                "split", "needs three non-negative percentages with a positive sum"
            )
        if not self.gpu_mix or any(g < 1 or p < 0 for g, p in self.gpu_mix):
            raise ValidationError("gpu_mix", "needs GPU counts >= 1 with non-negative weights")
        if sum(p for _, p in self.gpu_mix) <= 0:
            raise ValidationError("gpu_mix", "weights must have a positive sum")
        if max(g for g, _ in self.gpu_mix) > self.total_gpus:
            raise ValidationError("gpu_mix", "a GPU count exceeds the whole cluster")
        if self.gpu_types is not None:
            self.server_types()  # raises when the types do not cover whole servers

    @property
    def total_gpus(self) -> int:
        """The cluster's GPUs."""
        if self.server_shapes is not None:
            return sum(n * g for n, g, _, _ in self.server_shapes)
        return self.servers * self.gpus_per_server

    def build_servers(self) -> tuple[Server, ...]:
        """The cluster's servers, named s0, s1, ... in order (typed when ``gpu_types``)."""
        shapes = self.server_shapes or (
            (self.servers, self.gpus_per_server, self.cpus_per_server, self.mem_per_server_gb),
        )
        out: list[Server] = []
        for n, g, c, m in shapes:
            base = len(out)
            out.extend([Server(f"s{base + i}", g, c, float(m)) for i in range(n)])
        if self.gpu_types is None:
            return tuple(out)
        return tuple(
            Server(s.name, s.gpus, s.cpus, s.mem_gb, t)
            for s, t in zip(out, self.server_types(), strict=True)
        )

    def server_types(self) -> tuple[str, ...]:
        """Each server's GPU type: types take servers in order until their GPUs are covered."""
        shapes = self.server_shapes or (
            (self.servers, self.gpus_per_server, self.cpus_per_server, self.mem_per_server_gb),
        )
        gpus = [g for n, g, _, _ in shapes for _ in range(n)]
        wanted = self.gpu_types or ()
        if sum(k for _, k in wanted) != sum(gpus):
            raise ValidationError(
                "gpu_types",
                f"the types' GPUs add up to {sum(k for _, k in wanted)}, "
                f"the cluster has {sum(gpus)}",
            )
        out: list[str] = []
        it = iter(gpus)
        for t, k in wanted:
            left = k
            while left > 0:
                g = next(it)
                if g > left:
                    raise ValidationError(
                        "gpu_types",
                        f"{t}:{k} ends inside a server of {g} GPUs; give each type whole servers",
                    )
                out.append(t)
                left -= g
        return tuple(out)


def parse_gpu_mix(text: str) -> tuple[tuple[int, float], ...]:
    """``"1:70,2:10,4:15,8:5"`` -> ((1, 70.0), ...); weights need not sum to 100."""
    out: list[tuple[int, float]] = []
    for item in text.split(","):
        g_text, sep, w_text = item.partition(":")
        try:
            g, w = int(g_text), float(w_text) if sep else 1.0
        except ValueError:
            raise ValueError(f"expected GPUS:WEIGHT pairs like 1:70,2:30, got {text!r}") from None
        if g < 1 or not np.isfinite(w) or w < 0:
            raise ValueError(f"GPU counts must be >= 1 and weights >= 0, got {item!r}")
        out.append((g, w))
    if sum(w for _, w in out) <= 0:
        raise ValueError(f"weights must have a positive sum, got {text!r}")
    return tuple(out)


def generate_instance(spec: GenerateSpec, profiles: ProfileLibrary | None = None) -> RoundInstance:
    """A round instance drawn from ``profiles`` (the shipped ones by default)."""
    lib = profiles or shipped_profiles()
    rng = np.random.default_rng(spec.seed)
    servers = spec.build_servers()
    cluster = Cluster(servers)
    mix_g = np.array([g for g, _ in spec.gpu_mix])
    mix_p = np.array([p for _, p in spec.gpu_mix], dtype=float)
    mix_p /= mix_p.sum()
    split = np.array(spec.split, dtype=float)
    cats = [
        c for c, share in zip(CATEGORIES, split, strict=True) if share > 0 and lib.by_category(c)
    ]
    if not cats:
        raise ValidationError("split", "no shipped model in any category with a positive share")
    cat_p = np.array([split[CATEGORIES.index(c)] for c in cats])
    cat_p /= cat_p.sum()

    jobs: list[Job] = []
    demanded = 0
    target = None if spec.gpu_load is None else spec.gpu_load * cluster.total_gpus
    while (spec.jobs is not None and len(jobs) < spec.jobs) or (
        target is not None and demanded < target
    ):
        g = int(rng.choice(mix_g, p=mix_p))
        cat = cats[int(rng.choice(len(cats), p=cat_p))]
        models = lib.by_category(cat)
        prof = models[int(rng.integers(len(models)))]
        pen = 1.0
        if spec.split_penalty is not None and g > 1:
            lo, hi = spec.split_penalty
            steps = int(round((hi - lo) * 100))
            pen = round(lo + int(rng.integers(steps + 1)) / 100, 2)
        if spec.gavel_split_penalty:
            pen = gavel_split_penalty(prof.name, prof.category, REFERENCE_GPU_TYPE, g)
        by_type = None
        if spec.gpu_types is not None:
            by_type = typed_matrices(prof, g, (t for t, _ in spec.gpu_types)) or None
        jobs.append(
            Job(
                f"j{len(jobs)}",
                g,
                prof.matrix(g),
                prof.name,
                prof.category,
                pen,
                sensitivity_by_type=by_type,
            )
        )
        demanded += g
    shape = (
        f"{len(servers)}srv-{cluster.total_gpus}g"
        if spec.server_shapes is not None
        else f"{spec.servers}x{spec.gpus_per_server}g"
    )
    if spec.gpu_types is not None:
        shape += "-" + "-".join(f"{k}{t}" for t, k in spec.gpu_types)
    name = spec.name or f"gen-{shape}-{len(jobs)}jobs-seed{spec.seed}"
    return RoundInstance(name, cluster, intern_matrices(jobs), spec.fair_share_rule)


def mix_from_workload(workload: str) -> tuple[tuple[int, float], ...]:
    """The GPU mix of a named paper workload (``single-gpu`` or ``multi-gpu``)."""
    mixes: dict[str, Mapping[int, float]] = {
        "single-gpu": SINGLE_GPU_MIX,
        "multi-gpu": MULTI_GPU_MIX,
    }
    if workload not in mixes:
        raise ValueError(f"unknown workload {workload!r}; known: {', '.join(mixes)}")
    return tuple(mixes[workload].items())


def parse_server_shapes(text: str) -> tuple[tuple[int, int, int, float], ...]:
    """``"8x8:24:500,8x4:12:200"`` -> ((8, 8, 24, 500.0), (8, 4, 12, 200.0)).

    Each item is COUNTxGPUS:CORES:GB; raises ``ValueError`` with a readable reason.
    """
    out: list[tuple[int, int, int, float]] = []
    for item in text.split(","):
        count, sep, rest = item.strip().partition("x")
        fields = rest.split(":")
        try:
            if not sep or len(fields) != 3:
                raise ValueError
            shape = (int(count), int(fields[0]), int(fields[1]), float(fields[2]))
        except ValueError:
            raise ValueError(
                f"expected COUNTxGPUS:CORES:GB items like 8x8:24:500, got {item!r}"
            ) from None
        if (
            shape[0] < 1
            or shape[1] < 1
            or shape[2] < 1
            or not (np.isfinite(shape[3]) and shape[3] > 0)
        ):
            raise ValueError(f"counts, GPUs and cores must be >= 1 and GB > 0, got {item!r}")
        out.append(shape)
    return tuple(out)


def parse_gpu_types(text: str) -> tuple[tuple[str, int], ...]:
    """``"v100:48,p100:48,k80:32"`` -> (("v100", 48), ...): GPUs per type, cluster order.

    Only types with measured speeds (the shipped Gavel table) are accepted, since every
    generated job needs a matrix on each type.
    """
    known = shipped_gavel_table().gpu_types
    out: list[tuple[str, int]] = []
    for item in text.split(","):
        t, sep, k_text = item.strip().partition(":")
        try:
            k = int(k_text)
        except ValueError:
            raise ValueError(
                f"expected TYPE:GPUS pairs like v100:48,k80:32, got {text!r}"
            ) from None
        if not sep or k < 1:
            raise ValueError(f"expected TYPE:GPUS pairs with GPUS >= 1, got {item!r}")
        if t not in known:
            raise ValueError(f"no measured speed for GPU type {t!r}; known: {', '.join(known)}")
        if any(t == u for u, _ in out):
            raise ValueError(f"GPU type {t!r} given twice")
        out.append((t, k))
    return tuple(out)


def parse_penalty_range(text: str) -> tuple[float, float]:
    """``"0.8:0.95"`` -> (0.8, 0.95); one number means a fixed penalty."""
    lo_text, sep, hi_text = text.partition(":")
    try:
        lo = float(lo_text)
        hi = float(hi_text) if sep else lo
    except ValueError:
        raise ValueError(f"expected LOW:HIGH penalties like 0.8:0.95, got {text!r}") from None
    if not 0 < lo <= hi <= 1:
        raise ValueError(f"penalties need 0 < LOW <= HIGH <= 1, got {text!r}")
    return lo, hi


# --------------------------------------------------------------------------- named families

#: The round families of issue 10, per 32 GPUs: (server shapes, GPU mix, penalty range).
#: Homogeneous families use the paper's 8-GPU server (24 cores, 500 GB) unless said;
#: ``mem-scarce`` is the issue's 32-core/200-GB server, ``cpu-scarce`` has 2 cores per GPU,
#: ``mixed-shapes`` mixes two 8-GPU shapes and a 4-GPU one, and ``split-penalty`` gives
#: 2- to 8-GPU jobs penalties of 0.80-0.95.
_FAMILIES: dict[
    str,
    tuple[tuple[tuple[int, int, int, float], ...], Mapping[int, float], tuple[float, float] | None],
] = {
    "single-gpu": (((4, 8, 24, 500.0),), SINGLE_GPU_MIX, None),
    "multi-gpu": (((4, 8, 24, 500.0),), MULTI_GPU_MIX, None),
    "cpu-scarce": (((4, 8, 16, 500.0),), SINGLE_GPU_MIX, None),
    "mem-scarce": (((4, 8, 32, 200.0),), SINGLE_GPU_MIX, None),
    "mixed-shapes": (
        ((2, 8, 24, 500.0), (1, 8, 32, 256.0), (2, 4, 12, 200.0)),
        {1: 0.6, 2: 0.25, 4: 0.15},
        None,
    ),
    "split-penalty": (
        ((4, 8, 24, 500.0),),
        {1: 0.5, 2: 0.15, 4: 0.15, 6: 0.1, 8: 0.1},
        (0.8, 0.95),
    ),
}
FAMILIES: tuple[str, ...] = tuple(_FAMILIES)
#: Family rounds ask for this multiple of the cluster's GPUs (some jobs wait).
FAMILY_GPU_LOAD: float = 1.2


def family_spec(family: str, gpus: int = 128, seed: int = 0) -> GenerateSpec:
    """The :class:`GenerateSpec` of ``family`` at ``gpus`` GPUs (a multiple of 32)."""
    if family not in _FAMILIES:
        raise ValueError(f"unknown family {family!r}; known: {', '.join(FAMILIES)}")
    if gpus < 32 or gpus % 32:
        raise ValueError(f"family rounds come in multiples of 32 GPUs, got {gpus}")
    shapes, mix, pen = _FAMILIES[family]
    scale = gpus // 32
    return GenerateSpec(
        gpu_load=FAMILY_GPU_LOAD,
        gpu_mix=tuple(mix.items()),
        seed=seed,
        name=f"{family}-{gpus}gpu-seed{seed}",
        server_shapes=tuple((n * scale, g, c, m) for n, g, c, m in shapes),
        split_penalty=pen,
    )


def family_round(
    family: str, gpus: int = 128, seed: int = 0, profiles: ProfileLibrary | None = None
) -> RoundInstance:
    """A round of the named ``family`` at ``gpus`` GPUs, drawn with ``seed``."""
    return generate_instance(family_spec(family, gpus, seed), profiles)
