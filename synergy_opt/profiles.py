"""The shipped model profiles (per-GPU sensitivity matrices) and a library API over them.

The numbers come from the Synergy artifact's simulator (msr-fiddle/synergy, MIT; Mohan et
al., OSDI '22) and ship inside the package (``synergy_opt/data``) so that ``pip install``
users need nothing else.  A profile is stored *per GPU*; :meth:`ModelProfile.matrix` scales
both axes by the job's GPU count, which is how the artifact uses its ``*_1`` profiles for
every GPU count.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from synergy_opt.errors import InputError, ValidationError
from synergy_opt.io import check_text, matrix_from_dict, read_json
from synergy_opt.limits import ITER_TIME_S, SPLIT_PERCENT
from synergy_opt.types import ThroughputMatrix

#: Task categories in the order of the paper's ``--split IMAGE,LANGUAGE,SPEECH``.
CATEGORIES: tuple[str, ...] = ("image", "language", "speech")


def parse_split(value: str | list[object] | tuple[object, ...]) -> tuple[float, float, float]:
    """The paper's workload split: ``"20,70,10"`` (or three numbers) -> (20.0, 70.0, 10.0).

    One rule for every place a split is read (``generate``, ``simulate``/``compare``,
    ``trace convert``, sweep specs): one percentage per category of :data:`CATEGORIES`, each
    within :data:`~synergy_opt.limits.SPLIT_PERCENT`, with a positive sum.  Raises
    ``ValueError`` with a readable reason; callers add the option or field name.
    """
    items: list[object]
    if isinstance(value, str):
        items = []
        for t in value.split(","):
            try:
                items.append(float(t.strip()))
            except ValueError:
                raise ValueError(
                    f"expected IMAGE,LANGUAGE,SPEECH percentages, got {value!r}"
                ) from None
    elif isinstance(value, list | tuple):
        items = list(value)
    else:
        raise ValueError(f"expected IMAGE,LANGUAGE,SPEECH percentages, got {value!r}")
    if len(items) != len(CATEGORIES):
        raise ValueError(f"expected three percentages IMAGE,LANGUAGE,SPEECH, got {value!r}")
    try:
        vals = tuple(float(SPLIT_PERCENT.check(v)) for v in items)
    except ValidationError as e:
        raise ValueError(f"each percentage: {e.problem}") from None
    if sum(vals) <= 0:
        raise ValueError(f"percentages must have a positive sum, got {value!r}")
    return vals[0], vals[1], vals[2]


@dataclass(frozen=True, slots=True)
class ModelProfile:
    """One model's per-GPU sensitivity and timing facts."""

    name: str
    category: str
    cpus_per_gpu: tuple[int, ...]
    mem_gb_per_gpu: tuple[float, ...]
    throughput: tuple[tuple[float, ...], ...]
    iter_time_s_at_fair_share: float = 1.0
    in_simulator_zoo: bool = True

    def matrix(self, gpus: int) -> ThroughputMatrix:
        """W_j for a job of ``gpus`` GPUs: the per-GPU axes scaled by ``gpus``.

        Memoised, so every job of one model and GPU count shares one matrix object and
        the mechanisms' per-matrix caches hit by identity.
        """
        return _scaled_matrix(self, gpus)


@lru_cache(maxsize=4096)
def _scaled_matrix(profile: ModelProfile, gpus: int) -> ThroughputMatrix:
    return ThroughputMatrix(
        tuple(c * gpus for c in profile.cpus_per_gpu),
        tuple(m * gpus for m in profile.mem_gb_per_gpu),
        profile.throughput,
    )


@dataclass(frozen=True, slots=True)
class ProfileLibrary:
    """A named collection of model profiles."""

    profiles: tuple[ModelProfile, ...]
    source: str = ""
    # Name -> profile (first one wins): every trace row looks its model up, so a look-up
    # must not scan the library (a million rows x thousands of user profiles).
    _index: dict[str, ModelProfile] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        index: dict[str, ModelProfile] = {}
        for p in self.profiles:
            index.setdefault(p.name, p)
        object.__setattr__(self, "_index", index)

    def get(self, name: str) -> ModelProfile:
        """The profile called ``name``; ``KeyError`` lists the known names."""
        p = self._index.get(name)
        if p is None:
            raise KeyError(f"unknown model {name!r}; known: {', '.join(self.names())}")
        return p

    def names(self) -> tuple[str, ...]:
        """All model names in file order."""
        return tuple(p.name for p in self.profiles)

    def by_category(self, category: str, *, zoo_only: bool = True) -> tuple[ModelProfile, ...]:
        """Models of one category (by default only those the paper's simulator draws from)."""
        return tuple(
            p
            for p in self.profiles
            if p.category == category and (p.in_simulator_zoo or not zoo_only)
        )

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._index


def profiles_from_dict(data: Any) -> ProfileLibrary:
    """Parse the profile file's schema (``models`` keyed by name).

    Each model's grid goes through :func:`synergy_opt.io.matrix_from_dict`, the validator
    the round format uses, so both refuse the same values (``1.9`` cores, ``"1"``, ``true``).
    """
    if not isinstance(data, dict) or not isinstance(data.get("models"), dict):
        raise ValidationError("models", "expected an object of model profiles")
    if not data["models"]:
        raise ValidationError("models", "must hold at least one model profile")
    out = []
    for name, m in data["models"].items():
        path = f"models.{name}"
        if not name:
            raise ValidationError("models", "a model name must not be empty")
        check_text(name, "models")
        w = matrix_from_dict(
            m, path, cpus_key="cpu_points", mem_key="mem_points_gb", throughput_key="throughput"
        )
        category = m.get("category", "other")
        if not isinstance(category, str) or not category:
            raise ValidationError(f"{path}.category", "expected a non-empty string")
        check_text(category, f"{path}.category")
        iter_time = m.get("iter_time_s_at_fair_share", 1.0)
        try:
            iter_time = ITER_TIME_S.check(iter_time)
        except ValidationError as e:
            raise ValidationError(f"{path}.iter_time_s_at_fair_share", e.problem) from None
        zoo = m.get("in_simulator_model_zoo", True)
        if not isinstance(zoo, bool):
            raise ValidationError(
                f"{path}.in_simulator_model_zoo", f"expected true or false, got {zoo!r}"
            )
        out.append(
            ModelProfile(name, category, w.cpus, w.mem_gb, w.throughput, float(iter_time), zoo)
        )
    source = data.get("source", "")
    return ProfileLibrary(tuple(out), source if isinstance(source, str) else str(source))


@lru_cache(maxsize=1)
def shipped_profiles() -> ProfileLibrary:
    """The profiles that ship with the package (parsed once; the result is immutable)."""
    text = (
        resources.files("synergy_opt")
        .joinpath("data/synergy_model_profiles.json")
        .read_text(encoding="utf-8")
    )
    return profiles_from_dict(json.loads(text))


def load_profiles(path: str | Path | None) -> ProfileLibrary:
    """A user's profile file in the shipped schema, or the shipped profiles for ``None``."""
    if path is None:
        return shipped_profiles()
    data = read_json(path)
    try:
        return profiles_from_dict(data)
    except ValidationError as e:
        raise InputError(f"{path}: {e}") from None
