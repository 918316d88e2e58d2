"""Per-GPU-type throughput matrices derived from measured data (issue 11, docs/gpu-types.md).

The shipped CPU/memory profiles (Synergy artifact) were measured on one GPU type, the
paper's V100 cluster: that is the *reference type*, and their unit (1.0 = the job's speed at
its GPU-proportional share) is the unit on the reference type.  Gavel's artifact (Narayanan
et al., OSDI '20; MIT) measured how fast 26 model/batch-size pairs train alone on K80, P100
and V100 GPUs.  This module joins the two with one physical rule:

* a job's **data-loading rate per core does not depend on the GPU** (the CPU/memory
  pipeline is the same), so every point of the reference matrix that is *below* the
  matrix's ceiling (data-bound) keeps its value on another type, unless the other GPU
  cannot go that fast;
* the **GPU-bound ceiling scales by the type's measured speed**: ``speed_t`` = the model's
  isolated 1-GPU throughput on type t divided by that on the reference type.

So ``W_t[c, m] = min(W_ref[c, m], speed_t * ceiling_ref)`` for a slower type, and, for a
faster type (``speed_t > 1``), the points where the reference is GPU-bound (at its ceiling)
rise to ``speed_t * ceiling_ref`` while data-bound points stay (data loading cannot keep up
beyond what was measured).  A K80 therefore saturates with fewer cores than a V100.

Which measured speed a profile gets (:func:`type_speed`): ``res18``, ``res50``,
``transformer`` and ``lstm`` have counterparts in Gavel's table (ResNet-18, ResNet-50,
Transformer, LM): the median ratio over the counterpart's batch sizes.  Every other profile
takes its category's median over all of Gavel's measurements of that category (image:
ResNet-18, ResNet-50, CycleGAN; language: Transformer, LM); a category Gavel never measured
(speech) takes the median over all 26 measurements.  Speeds are rounded to 4 decimals and
derived matrix values to 6, so generated files stay short and exact.

Gavel also measured each job with its GPUs on one server (``consolidated``) or spread
(``unconsolidated``): their ratio is a measured cost of spreading, returned by
:func:`gavel_split_penalty` for users who ask for data-driven ``split_penalty`` values.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from synergy_opt.errors import ValidationError
from synergy_opt.profiles import ModelProfile
from synergy_opt.types import ThroughputMatrix

#: The GPU type the shipped CPU/memory profiles were measured on (the paper's V100 cluster).
REFERENCE_GPU_TYPE: str = "v100"
#: Shipped profile -> the Gavel model family that is the same network.
COUNTERPARTS: dict[str, str] = {
    "res18": "ResNet-18",
    "res50": "ResNet-50",
    "transformer": "Transformer",
    "lstm": "LM",  # Gavel's LM is an LSTM language model
}
#: Gavel model family -> the task category of the shipped profiles it stands for.
FAMILY_CATEGORY: dict[str, str] = {
    "ResNet-18": "image",
    "ResNet-50": "image",
    "CycleGAN": "image",
    "Transformer": "language",
    "LM": "language",
    "A3C": "reinforcement-learning",
    "Recommendation": "recommendation",
}
#: Digits kept of a speed ratio and of a derived matrix value.
SPEED_DIGITS: int = 4
VALUE_DIGITS: int = 6

_NAME = re.compile(r"^(?P<family>.+?)(?: \(batch size (?P<batch>\d+)\))?$")


@dataclass(frozen=True, slots=True)
class GavelModel:
    """One measured model/batch-size pair: iterations/s per (type, GPUs, consolidated)."""

    name: str
    family: str
    #: ``(gpu_type, consolidated, gpus) -> iterations/s`` as sorted tuples.
    measurements: tuple[tuple[tuple[str, bool, int], float], ...]

    def rate(self, gpu_type: str, gpus: int, consolidated: bool = True) -> float | None:
        """Measured iterations/s, or ``None`` when the table has no such cell."""
        for key, v in self.measurements:
            if key == (gpu_type, consolidated, gpus):
                return v
        return None


@dataclass(frozen=True, slots=True)
class GavelTable:
    """Gavel's isolated throughputs per GPU type (the shipped extract, or a user's file)."""

    gpu_types: tuple[str, ...]
    models: tuple[GavelModel, ...]
    source: str = ""

    def family(self, family: str) -> tuple[GavelModel, ...]:
        """Every batch size measured of one model family."""
        return tuple(m for m in self.models if m.family == family)

    def category(self, category: str) -> tuple[GavelModel, ...]:
        """Every measurement of the families standing for one task category."""
        return tuple(m for m in self.models if FAMILY_CATEGORY.get(m.family) == category)


def gavel_from_dict(data: Any) -> GavelTable:
    """Parse the ``gavel_gpu_type_throughputs.json`` schema (field paths in errors)."""
    if not isinstance(data, dict):
        raise ValidationError("", "expected an object")
    types = data.get("gpu_types")
    if not isinstance(types, list) or not types or not all(isinstance(t, str) for t in types):
        raise ValidationError("gpu_types", "expected a list of GPU type names")
    models_raw = data.get("models")
    if not isinstance(models_raw, dict) or not models_raw:
        raise ValidationError("models", "expected an object of measured models")
    models = []
    for name, per_type in models_raw.items():
        path = f"models.{name}"
        match = _NAME.match(name)
        if not isinstance(per_type, dict) or match is None:
            raise ValidationError(path, "expected an object keyed by GPU type")
        cells: list[tuple[tuple[str, bool, int], float]] = []
        for t, kinds in per_type.items():
            if t not in types:
                raise ValidationError(f"{path}.{t}", f"GPU type not in gpu_types {types}")
            for kind, consolidated in (("consolidated", True), ("unconsolidated", False)):
                rates = kinds.get(kind) if isinstance(kinds, dict) else None
                if not isinstance(rates, dict):
                    raise ValidationError(f"{path}.{t}.{kind}", "expected an object GPUs -> rate")
                for g, v in rates.items():
                    if not g.isdigit() or int(g) < 1:
                        raise ValidationError(f"{path}.{t}.{kind}.{g}", "GPU count must be >= 1")
                    if isinstance(v, bool) or not isinstance(v, int | float) or not v >= 0:
                        raise ValidationError(
                            f"{path}.{t}.{kind}.{g}", f"expected a rate >= 0, got {v!r}"
                        )
                    # Gavel records 0.0 where it has no measurement (ResNet-50 at batch
                    # size 128 on 2-8 K80s): no cell, rather than a zero speed.
                    if v > 0:
                        cells.append(((t, consolidated, int(g)), float(v)))
        models.append(GavelModel(name, match["family"], tuple(sorted(cells))))
    source = data.get("source", "")
    return GavelTable(tuple(types), tuple(models), source if isinstance(source, str) else "")


@lru_cache(maxsize=1)
def shipped_gavel_table() -> GavelTable:
    """The Gavel extract shipped in ``synergy_opt/data`` (parsed once)."""
    text = (
        resources.files("synergy_opt")
        .joinpath("data/gavel_gpu_type_throughputs.json")
        .read_text(encoding="utf-8")
    )
    return gavel_from_dict(json.loads(text))


# --------------------------------------------------------------------------- type speeds


@dataclass(frozen=True, slots=True)
class TypeSpeed:
    """A profile's measured speed on one GPU type relative to the reference type."""

    gpu_type: str
    speed: float
    #: Where the number comes from, in words (for ``profile`` reports and the docs).
    basis: str


def _basis_models(
    table: GavelTable, profile: str, category: str
) -> tuple[tuple[GavelModel, ...], str]:
    """The measurements that stand for ``profile``, and how they were chosen."""
    family = COUNTERPARTS.get(profile)
    if family is not None and table.family(family):
        ms = table.family(family)
        return ms, f"{family}, median of {len(ms)} measured batch sizes"
    ms = table.category(category)
    if ms:
        return ms, f"no counterpart: median of Gavel's {len(ms)} {category} measurements"
    return table.models, f"no {category} model measured: median of all {len(table.models)}"


def _check_type(table: GavelTable, gpu_type: str) -> None:
    if gpu_type not in table.gpu_types:
        raise ValidationError(
            "gpu_type",
            f"no measured speed for GPU type {gpu_type!r} (measured: {', '.join(table.gpu_types)})",
        )


def type_speed(
    profile: str,
    category: str,
    gpu_type: str,
    *,
    table: GavelTable | None = None,
    reference: str = REFERENCE_GPU_TYPE,
) -> TypeSpeed:
    """``profile``'s isolated 1-GPU speed on ``gpu_type`` over ``reference`` (median ratio)."""
    tab = table or shipped_gavel_table()
    _check_type(tab, gpu_type)
    _check_type(tab, reference)
    models, basis = _basis_models(tab, profile, category)
    ratios = []
    for m in models:
        num, den = m.rate(gpu_type, 1), m.rate(reference, 1)
        if num is not None and den is not None:
            ratios.append(num / den)
    if not ratios:
        raise ValidationError("gpu_type", f"no 1-GPU measurement of {gpu_type!r} for {profile!r}")
    return TypeSpeed(gpu_type, round(statistics.median(ratios), SPEED_DIGITS), basis)


def derive_matrix(w_ref: ThroughputMatrix, speed: float) -> ThroughputMatrix:
    """W_t from the reference matrix and the type's speed (module docstring's rule).

    Data-bound points (below the reference ceiling) keep their value, capped by the new
    ceiling ``speed * ceiling``; GPU-bound points (at the ceiling) become the new ceiling.
    """
    if not speed > 0:
        raise ValidationError("speed", f"must be > 0, got {speed!r}")
    ceiling = w_ref.max_throughput
    top = round(speed * ceiling, VALUE_DIGITS)

    def value(w: float) -> float:
        if w >= ceiling:  # GPU-bound on the reference: runs at the type's own ceiling
            return top
        return min(w, top)

    return ThroughputMatrix(
        w_ref.cpus, w_ref.mem_gb, tuple(tuple(value(w) for w in row) for row in w_ref.throughput)
    )


@lru_cache(maxsize=4096)
def _typed(
    profile: ModelProfile, gpus: int, gpu_types: tuple[str, ...], reference: str
) -> tuple[tuple[str, ThroughputMatrix], ...]:
    w_ref = profile.matrix(gpus)
    out = []
    for t in gpu_types:
        if t == reference:
            continue
        s = type_speed(profile.name, profile.category, t, reference=reference)
        out.append((t, derive_matrix(w_ref, s.speed)))
    return tuple(out)


def typed_matrices(
    profile: ModelProfile,
    gpus: int,
    gpu_types: Iterable[str],
    *,
    reference: str = REFERENCE_GPU_TYPE,
) -> tuple[tuple[str, ThroughputMatrix], ...]:
    """``sensitivity_by_type`` for a ``gpus``-GPU job of ``profile`` on ``gpu_types``.

    The reference type is left out (its matrix is ``sensitivity``); memoised, so jobs of
    one model, size and cluster share matrix objects.
    """
    return _typed(profile, gpus, tuple(dict.fromkeys(gpu_types)), reference)


# --------------------------------------------------------------------------- split penalty


def gavel_split_penalty(
    profile: str,
    category: str,
    gpu_type: str,
    gpus: int,
    *,
    table: GavelTable | None = None,
) -> float:
    """Measured cost of spreading a ``gpus``-GPU job: spread over consolidated throughput.

    Median over the measurements standing for ``profile`` (as for :func:`type_speed`) at
    the largest measured GPU count <= ``gpus``, capped at 1 (a few cells measure spreading
    as faster, which is noise, and ``split_penalty`` must lie in (0, 1]).  One GPU never
    spreads: 1.0.
    """
    tab = table or shipped_gavel_table()
    _check_type(tab, gpu_type)
    if gpus < 2:
        return 1.0
    models, _ = _basis_models(tab, profile, category)
    ratios = []
    for m in models:
        counts = sorted(
            g for (t, cons, g), _ in m.measurements if t == gpu_type and cons and 2 <= g <= gpus
        )
        if not counts:
            continue
        g = counts[-1]
        spread, whole = m.rate(gpu_type, g, False), m.rate(gpu_type, g, True)
        if spread is not None and whole is not None:
            ratios.append(spread / whole)
    if not ratios:
        return 1.0
    return min(1.0, round(statistics.median(ratios), SPEED_DIGITS))


def speeds_table(
    profiles: Sequence[ModelProfile], gpu_types: Sequence[str]
) -> list[tuple[str, str, TypeSpeed]]:
    """(profile, category, speed) for every profile and type: the docs' and reports' table."""
    return [
        (p.name, p.category, type_speed(p.name, p.category, t)) for p in profiles for t in gpu_types
    ]
