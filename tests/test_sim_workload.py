"""The synthetic paper workloads: arrivals, durations, GPU mix and the model split."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from synergy_opt.profiles import shipped_profiles
from synergy_opt.sim.workload import WorkloadSpec, generate_workload, philly_runtimes_s

ABS_TOL = REL_TOL = 1e-6


def gen(seed: int = 0, **kw: object) -> tuple:
    return generate_workload(WorkloadSpec(**kw), shipped_profiles(), np.random.default_rng(seed))  # type: ignore[arg-type]


def test_balanced_split_hits_the_target_counts_exactly() -> None:
    jobs = gen(jobs=1000)
    cats = Counter(j.category for j in jobs)
    assert cats == {"image": 200, "language": 700, "speech": 100}
    # Round-robin inside a category: the 5 image models get 40 jobs each.
    image = Counter(j.model for j in jobs if j.category == "image")
    assert set(image.values()) == {40}
    # Every prefix stays within one job of its target share.
    seen: Counter[str] = Counter()
    for n, j in enumerate(jobs, start=1):
        seen[j.category] += 1
        assert abs(seen["language"] - 0.7 * n) <= 1.0


def test_zero_share_categories_get_no_job_and_iid_follows_the_split() -> None:
    assert {j.category for j in gen(jobs=200, split=(50.0, 0.0, 50.0))} == {"image", "speech"}
    cats = Counter(j.category for j in gen(jobs=4000, split=(20.0, 70.0, 10.0), assignment="iid"))
    assert abs(cats["language"] / 4000 - 0.7) < 0.03


def test_poisson_arrivals_at_the_requested_rate() -> None:
    jobs = gen(jobs=4000, arrival_rate_per_h=9.0)
    arr = np.array([j.arrival_s for j in jobs])
    assert np.all(np.diff(arr) >= 0)
    assert abs(np.mean(np.diff(arr)) - 400.0) < 20.0  # 3600 / 9 s between arrivals
    assert all(j.arrival_s == 0.0 for j in gen(jobs=50, arrival_rate_per_h=0.0))


def test_synthetic_durations_follow_the_two_log_uniform_classes() -> None:
    d = np.array([j.duration_s for j in gen(jobs=5000)])
    lo, mid, hi = 60 * 10**1.5, 60 * 10**3, 60 * 10**4
    assert d.min() >= lo - ABS_TOL and d.max() <= hi + ABS_TOL
    assert abs(np.mean(d < mid) - 0.8) < 0.03


def test_multi_gpu_mix_and_single_gpu_demand() -> None:
    assert {j.gpus for j in gen(jobs=100)} == {1}
    g = Counter(j.gpus for j in gen(jobs=5000, kind="multi-gpu"))
    for size, p in ((1, 0.70), (2, 0.10), (4, 0.15), (8, 0.05)):
        assert abs(g[size] / 5000 - p) < 0.03


def test_philly_durations_are_positive_samples_of_the_shipped_run_times() -> None:
    runtimes = philly_runtimes_s()
    assert runtimes.size == 83152 and runtimes.min() > 0
    d = [j.duration_s for j in gen(jobs=300, durations="philly")]
    assert set(d) <= set(runtimes.tolist())


def test_a_seed_names_a_trace_and_more_jobs_extend_it() -> None:
    assert gen(7, jobs=100) == gen(7, jobs=100)
    assert gen(7, jobs=100) != gen(8, jobs=100)
    for kw in ({"kind": "multi-gpu"}, {"durations": "philly", "assignment": "iid"}):
        assert gen(7, jobs=150, **kw)[:100] == gen(7, jobs=100, **kw)


@pytest.mark.parametrize(
    "kw, field",
    [
        ({"kind": "tiny"}, "kind"),
        ({"jobs": 0}, "jobs"),
        ({"arrival_rate_per_h": -1.0}, "arrival_rate_per_h"),
        ({"split": (1.0, 2.0)}, "split"),
        ({"split": (0.0, 0.0, 0.0)}, "split"),
        ({"durations": "weibull"}, "durations"),
    ],
)
def test_bad_specs_name_the_field(kw: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        WorkloadSpec(**kw)
