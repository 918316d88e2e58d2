"""Calibration against the paper's own simulator: its recorded traces, its reported JCTs.

Two traces recorded from the Synergy artifact's simulator (``../shared/data/traces/
synergy-artifact/``, README beside them), 128 GPUs, FIFO:

- single-GPU, 9 jobs/h, jobs 4000-4999: PROPORTIONAL 83.52 h, TUNE 22.37 h;
- multi-GPU (1/2/4/8 GPUs), 4 jobs/h, jobs 2000-2999: PROPORTIONAL 20.38 h, TUNE 13.89 h.

Under ``--semantics artifact`` (the paper simulator's rules, ``docs/artifact-semantics.md``)
every run lands within 0.5% of those numbers (the issue asks for 5%).  Single-GPU runs land
within 1% under both semantics, as they did before semantics existed.  On the multi-GPU
trace the matrix model's TUNE (``default``) is slower than the artifact's: its best-fit,
largest-first placement against the artifact's GPU-id-order placement in arrival order
(the ablation is in the doc), so that number is pinned to what the matrix model gives,
within ``DEFAULT_PIN_REL_TOL``.  A missing trace fails.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest

from synergy_opt.profiles import shipped_profiles
from synergy_opt.sim import SimConfig, get_semantics, paper_cluster, simulate, summarize
from synergy_opt.tracefile import read_trace

from .conftest import shared_file

SINGLE = ("fifo_9jph_seed42.csv", (4000, 5000))
MULTI = ("fifo_multigpu_4jph_seed42.csv", (2000, 3000))
#: The artifact's reported average JCTs (hours), from the traces' README.
ARTIFACT_AVG_H = {
    (SINGLE[0], "proportional"): 83.52,
    (SINGLE[0], "tune"): 22.37,
    (MULTI[0], "proportional"): 20.38,
    (MULTI[0], "tune"): 13.89,
}
#: The issue's acceptance band for ``--semantics artifact``.
ARTIFACT_REL_TOL = 0.05
#: What the artifact's rules achieve (every number within 0.1% when introduced); tighter
#: than the issue's band, so that losing a rule that matters here (placement, its order,
#: whole-iteration progress) fails.
REPRODUCTION_REL_TOL = 0.005
#: The matrix model where it agrees with the artifact (single-GPU jobs, and PROPORTIONAL
#: anywhere), as calibrated before semantics existed.
DEFAULT_REL_TOL = 0.01
#: What the matrix model gives for TUNE on the multi-GPU trace (14.94 h; measured when
#: semantics were introduced) and how far it may move before this test calls it a change.
DEFAULT_MULTI_TUNE_H = 14.94
DEFAULT_PIN_REL_TOL = 0.01


@cache
def _avg_jct(trace: str, window: tuple[int, int], mechanism: str, semantics: str) -> float:
    """One full replay (cached: several tests read the same run)."""
    jobs = read_trace(shared_file("traces", "synergy-artifact", trace))
    cfg = SimConfig(paper_cluster(), window=window, semantics=get_semantics(semantics))
    summary: dict[str, Any] = summarize(
        simulate(cfg, jobs, mechanism, "fifo", profiles=shipped_profiles())
    )
    assert summary["jobs_measured"] == window[1] - window[0]
    assert summary["jobs_measured_finished"] == window[1] - window[0]
    assert summary["semantics"] == semantics
    return float(summary["avg_jct_hours"])


@pytest.mark.slow
@pytest.mark.parametrize("trace", [SINGLE, MULTI], ids=["single-gpu", "multi-gpu"])
@pytest.mark.parametrize("mechanism", ["proportional", "tune"])
def test_artifact_semantics_reproduce_the_paper_simulator(
    trace: tuple[str, tuple[int, int]], mechanism: str
) -> None:
    got = _avg_jct(trace[0], trace[1], mechanism, "artifact")
    assert got == pytest.approx(ARTIFACT_AVG_H[(trace[0], mechanism)], rel=REPRODUCTION_REL_TOL)


@pytest.mark.slow
@pytest.mark.parametrize("mechanism", ["proportional", "tune"])
def test_default_semantics_single_gpu_calibration_unchanged(mechanism: str) -> None:
    got = _avg_jct(SINGLE[0], SINGLE[1], mechanism, "default")
    assert got == pytest.approx(ARTIFACT_AVG_H[(SINGLE[0], mechanism)], rel=DEFAULT_REL_TOL)


@pytest.mark.slow
def test_default_semantics_multi_gpu_proportional_matches_the_artifact() -> None:
    """Every job at its share fits any placement: only whole-iteration progress differs."""
    got = _avg_jct(MULTI[0], MULTI[1], "proportional", "default")
    assert got == pytest.approx(ARTIFACT_AVG_H[(MULTI[0], "proportional")], rel=DEFAULT_REL_TOL)


@pytest.mark.slow
def test_default_semantics_multi_gpu_tune_is_the_matrix_models() -> None:
    got = _avg_jct(MULTI[0], MULTI[1], "tune", "default")
    assert got == pytest.approx(DEFAULT_MULTI_TUNE_H, rel=DEFAULT_PIN_REL_TOL)
    # The documented gap: the matrix model's TUNE is more than the band above the artifact's.
    assert got > ARTIFACT_AVG_H[(MULTI[0], "tune")] * (1 + ARTIFACT_REL_TOL)


def test_a_missing_shared_file_fails_instead_of_skipping() -> None:
    with pytest.raises(pytest.fail.Exception, match="shared data file missing"):
        shared_file("traces", "synergy-artifact", "no-such-trace.csv")
    assert shared_file("traces", "synergy-artifact", SINGLE[0]).is_file()
