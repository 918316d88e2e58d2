"""``opt`` builds the counting model of a round once (``RoundContext.counting_matrix``).

On one-GPU rounds three steps ask for the same model of the runnable jobs: the
``pattern-root`` route (branch-and-price's root and dive), the pattern bound, and the
counting LP's bound reported at the end.  Each built its data and matrix on its own (7 ms a
build on single-GPU 128 GPUs rounds).  These tests pin that one build serves all three, that
the relaxation taken from the built matrix is the one a relaxed build gives, and that the
answers do not change (nothing mutates the shared model)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from synergy_opt.formulations import branch_price, counting_fast, patterns_fast
from synergy_opt.formulations.counting import counting_data
from synergy_opt.formulations.counting_fast import build_counting_matrix, relaxed_matrix
from synergy_opt.generate import family_round
from synergy_opt.io import allocation_to_dict
from synergy_opt.mechanisms import make_mechanism
from synergy_opt.mechanisms.opt.context import RoundContext

#: Single-GPU 128-GPU rounds answered by the ``pattern-root`` route, which also compute the
#: pattern bound and the counting LP's bound.
PATTERN_ROOT_ROUNDS = (1, 12)


@pytest.mark.parametrize(
    ("family", "gpus", "seed"),
    [("single-gpu", 128, 1), ("split-penalty", 64, 2), ("mixed-shapes", 64, 3)],
)
def test_relaxed_matrix_is_the_relaxed_build(family: str, gpus: int, seed: int) -> None:
    """Every array and name of ``relaxed_matrix(cm)`` equals the relaxed build's."""
    inst = family_round(family, gpus, seed)
    data = counting_data(inst, list(inst.jobs))
    cm = build_counting_matrix(data)
    want = build_counting_matrix(data, relax=True).matrix
    got = relaxed_matrix(cm)
    assert not got.integer.any() and cm.matrix.integer.any()
    for name in ("cost", "col_lower", "col_upper", "integer", "row_lower", "row_upper"):
        assert np.array_equal(getattr(got, name), getattr(want, name)), name
    for name in ("a_start", "a_index", "a_value"):
        assert np.array_equal(getattr(got, name), getattr(want, name)), name
    assert (got.maximize, got.name, got.row_names) == (want.maximize, want.name, want.row_names)


def _bytes(seed: int) -> dict[str, Any]:
    d = allocation_to_dict(make_mechanism("opt").allocate(family_round("single-gpu", 128, seed)))
    d.pop("solve_seconds", None)
    return d


@pytest.mark.parametrize("seed", PATTERN_ROOT_ROUNDS)
def test_one_build_serves_the_route_and_both_bounds(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The round builds the counting matrix once, and its answer (bound included) is the
    same bytes as when every step is handed a fresh build of its own."""
    builds: list[int] = []
    real = counting_fast.build_counting_matrix

    def counted(*a: Any, **k: Any) -> Any:
        builds.append(1)
        return real(*a, **k)

    for mod in (counting_fast, branch_price, patterns_fast):
        monkeypatch.setattr(mod, "build_counting_matrix", counted)
    shared = _bytes(seed)
    assert len(builds) == 1
    assert shared["upper_bound"] is not None

    def fresh(self: RoundContext) -> Any:
        builds.append(1)
        return real(counting_data(self.inst, self.runnable))

    builds.clear()
    monkeypatch.setattr(RoundContext, "counting_matrix", fresh)
    assert _bytes(seed) == shared
    assert len(builds) == 3  # the route, the pattern bound and the counting LP's bound
