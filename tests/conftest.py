"""Shared fixtures and the Hypothesis profile (derandomized, no deadline) for CI."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

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


@pytest.fixture(autouse=True)
def _logging_enabled_after_each_test() -> Iterator[None]:
    """A bench script's ``main`` (its tests run it in-process) turns logging below WARNING
    off for the whole process, as it should on the command line; the tests after it must
    not inherit that (their ``caplog`` checks read INFO records)."""
    yield
    logging.disable(logging.NOTSET)


def bench_module(name: str) -> ModuleType:
    """``bench/<name>.py`` loaded as a module (the benches are scripts, not part of the
    package), registered in ``sys.modules`` first: its dataclasses look their module up
    while being built."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def shared_file(*parts: str) -> Path:
    """A file under ``<repo>/../shared/data``; a missing one fails the test, never skips.

    The shared data sit beside the repository (``SHARED_DATA``), so tests find them from
    any checkout location without an absolute path.
    """
    path = SHARED_DATA.joinpath(*parts)
    if not path.is_file():
        pytest.fail(f"shared data file missing: {path} (expected beside the repository)")
    return path


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


@pytest.fixture
def without_routes() -> Iterator[Callable[..., None]]:
    """``without_routes("counting", ...)`` drops opt's rounding routes for one test; the
    registry comes back in its own order afterwards (``monkeypatch.delitem`` re-adds a key
    at the end, which changes the order later tests try the routes in)."""
    from synergy_opt.mechanisms.opt import ROUTES

    saved = dict(ROUTES)

    def drop(*names: str) -> None:
        for name in names:
            del ROUTES[name]

    yield drop
    ROUTES.clear()
    ROUTES.update(saved)


def assert_plan_on_whole_gpus(ctx: Any, plan: Mapping[str, Sequence[tuple[int, int]]]) -> None:
    """A rounding route's plan places every runnable job on whole GPUs (its GPU count in
    all), and no server holds more GPUs than it has."""
    assert set(plan) == {j.id for j in ctx.runnable}
    used = [0] * len(ctx.inst.cluster.servers)
    for job in ctx.runnable:
        assert sum(g for _, g in plan[job.id]) == job.gpus
        for s, g in plan[job.id]:
            used[s] += g
    assert all(u <= s.gpus for u, s in zip(used, ctx.inst.cluster.servers, strict=True))


def family_context(family: str, gpus: int, seed: int) -> Any:
    """``opt``'s round context of a generated family round (``None`` is a test error)."""
    from synergy_opt.generate import family_round
    from synergy_opt.mechanisms.opt import Opt

    ctx = Opt().context(family_round(family, gpus, seed))
    assert ctx is not None
    return ctx
