"""Shared fixtures and the Hypothesis profile (derandomized, no deadline) for CI."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

ROOT = Path(__file__).resolve().parent.parent
INSTANCES = ROOT / "instances"
SHARED_DATA = ROOT.parent / "shared" / "data"


@pytest.fixture
def root() -> Path:
    """The repository root."""
    return ROOT


def all_instances() -> list[Path]:
    """Every shipped round instance (tiny and large); other JSON under instances/ is skipped."""
    return sorted(
        p
        for p in INSTANCES.rglob("*.json")
        if json.loads(p.read_text(encoding="utf-8")).get("format") == "synergy-round/1"
    )


def tiny_instances() -> list[Path]:
    """The hand-worked tiny instances."""
    return sorted((INSTANCES / "tiny").glob("*.json"))
