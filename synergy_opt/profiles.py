"""The shipped model profiles (per-GPU sensitivity matrices) and a library API over them.

The numbers come from the Synergy artifact's simulator (msr-fiddle/synergy, MIT; Mohan et
al., OSDI '22) and ship inside the package (``synergy_opt/data``) so that ``pip install``
users need nothing else.  A profile is stored *per GPU*; :meth:`ModelProfile.matrix` scales
both axes by the job's GPU count, which is how the artifact uses its ``*_1`` profiles for
every GPU count.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from synergy_opt.errors import InputError, ValidationError
from synergy_opt.io import read_json
from synergy_opt.types import ThroughputMatrix

#: Task categories in the order of the paper's ``--split IMAGE,LANGUAGE,SPEECH``.
CATEGORIES: tuple[str, ...] = ("image", "language", "speech")


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

    def get(self, name: str) -> ModelProfile:
        """The profile called ``name``; ``KeyError`` lists the known names."""
        for p in self.profiles:
            if p.name == name:
                return p
        raise KeyError(f"unknown model {name!r}; known: {', '.join(self.names())}")

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
        return any(p.name == name for p in self.profiles)


def profiles_from_dict(data: Any) -> ProfileLibrary:
    """Parse the profile file's schema (``models`` keyed by name)."""
    if not isinstance(data, dict) or not isinstance(data.get("models"), dict):
        raise ValidationError("models", "expected an object of model profiles")
    out = []
    for name, m in data["models"].items():
        path = f"models.{name}"
        if not isinstance(m, dict):
            raise ValidationError(path, "expected an object")
        try:
            cpus = tuple(int(c) for c in m["cpu_points"])
            mem = tuple(float(x) for x in m["mem_points_gb"])
            tput = tuple(tuple(float(w) for w in row) for row in m["throughput"])
            category = str(m.get("category", "other"))
            iter_time = float(m.get("iter_time_s_at_fair_share", 1.0))
            zoo = bool(m.get("in_simulator_model_zoo", True))
        except KeyError as e:
            raise ValidationError(f"{path}.{e.args[0]}", "missing required field") from None
        except (TypeError, ValueError) as e:
            raise ValidationError(path, f"malformed profile ({e})") from None
        try:
            ThroughputMatrix(cpus, mem, tput)  # validate the grid once, per GPU
        except ValidationError as e:
            raise ValidationError(f"{path}.{e.path}", e.problem) from None
        out.append(ModelProfile(name, category, cpus, mem, tput, iter_time, zoo))
    return ProfileLibrary(tuple(out), str(data.get("source", "")))


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
