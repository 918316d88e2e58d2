"""Round instances generated from the shipped model profiles.

A generated round is a homogeneous cluster plus jobs in priority order whose models are
drawn by the paper's image/language/speech split and whose GPU demands follow a mix (the
paper's multi-GPU mix is 1/2/4/8 GPUs with probabilities 0.70/0.10/0.15/0.05).  The only
randomness is a ``numpy.random.Generator`` seeded from ``seed``, so the same arguments give
the same instance, byte for byte.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from synergy_opt.profiles import CATEGORIES, ProfileLibrary, shipped_profiles
from synergy_opt.types import Cluster, Job, RoundInstance, Server, ValidationError, intern_matrices

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

    def __post_init__(self) -> None:
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
        if max(g for g, _ in self.gpu_mix) > self.servers * self.gpus_per_server:
            raise ValidationError("gpu_mix", "a GPU count exceeds the whole cluster")


def parse_split(text: str) -> tuple[float, float, float]:
    """``"20,70,10"`` -> (20.0, 70.0, 10.0); raises ``ValueError`` with a readable reason."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 3:
        raise ValueError(f"expected IMAGE,LANGUAGE,SPEECH percentages, got {text!r}")
    try:
        vals = tuple(float(p) for p in parts)
    except ValueError:
        raise ValueError(f"expected three numbers, got {text!r}") from None
    if any(not np.isfinite(v) or v < 0 for v in vals) or sum(vals) <= 0:
        raise ValueError(f"percentages must be >= 0 with a positive sum, got {text!r}")
    return vals[0], vals[1], vals[2]


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
    servers = tuple(
        Server(f"s{i}", spec.gpus_per_server, spec.cpus_per_server, float(spec.mem_per_server_gb))
        for i in range(spec.servers)
    )
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
        jobs.append(Job(f"j{len(jobs)}", g, prof.matrix(g), prof.name, prof.category))
        demanded += g
    name = spec.name or (
        f"gen-{spec.servers}x{spec.gpus_per_server}g-{len(jobs)}jobs-seed{spec.seed}"
    )
    return RoundInstance(name, cluster, intern_matrices(jobs))


def mix_from_workload(workload: str) -> tuple[tuple[int, float], ...]:
    """The GPU mix of a named paper workload (``single-gpu`` or ``multi-gpu``)."""
    mixes: dict[str, Mapping[int, float]] = {
        "single-gpu": SINGLE_GPU_MIX,
        "multi-gpu": MULTI_GPU_MIX,
    }
    if workload not in mixes:
        raise ValueError(f"unknown workload {workload!r}; known: {', '.join(mixes)}")
    return tuple(mixes[workload].items())
