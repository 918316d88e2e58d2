"""The packing route's second step: a packing with fewer parts (``packing_route.pack``,
:mod:`synergy_opt.mechanisms.opt.fewer_parts`).

Where every job the packing may spread spreads for free (the multi-GPU mix) or none spreads
(rounds of one-GPU jobs), the pattern LP's integral contents come first, then a packing with
fewer parts that keeps the first one's whole jobs where they are.  Multi-GPU 128 GPUs seed
7: the contents pack at attempt 0 (108 parts, 19 jobs fragmented).  CP-SAT, from that
packing as a complete hint within 0.2 units, cut it to 89 parts and 14 fragmented jobs in
0.5-0.9 s; dropping parts while three max-flows still carry every spread job cuts it to 83
and 10 in about 35 ms.
"""

from __future__ import annotations

from typing import Any

import pytest

from synergy_opt.check import check_allocation
from synergy_opt.formulations import packing_cp
from synergy_opt.formulations.packing_cp import PackingResult, whole_counts
from synergy_opt.generate import family_round
from synergy_opt.mechanisms import make_mechanism
from synergy_opt.mechanisms.opt import Opt, packing_route
from synergy_opt.mechanisms.opt.packing_route import bound_points, pack, route_packing_data
from synergy_opt.solve import TerminationStatus
from tests.test_fewer_parts import assert_serves


def _parts(plan: packing_cp.PlanView) -> int:
    return sum(len(p) for p in plan.values())


def _fragmented(plan: packing_cp.PlanView) -> int:
    return sum(len({s for s, _ in p}) > 1 for p in plan.values())


class _Recorder:
    """``solve_packing`` as the route calls it, each call's arguments and result kept."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[dict[str, Any], PackingResult]] = []
        self._real = packing_cp.solve_packing
        monkeypatch.setattr(packing_cp, "solve_packing", self)

    def __call__(self, data: Any, **kwargs: Any) -> PackingResult:
        res = self._real(data, **kwargs)
        self.calls.append((kwargs, res))
        return res


def test_fewer_parts_keeps_the_whole_jobs_and_has_fewer_parts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rec = _Recorder(monkeypatch)
    ctx = Opt().context(family_round("multi-gpu", 128, 7))
    assert ctx is not None
    bp = bound_points(ctx)
    res = pack(ctx, bp)
    assert res.status is TerminationStatus.OPTIMAL and res.plan is not None
    first_kw, first = rec.calls[-1]  # the spread jobs around the contents; no CP-SAT after
    assert first_kw.get("whole") is not None and not first_kw.get("fewest_parts")
    assert first.plan is not None
    data = route_packing_data(ctx, bp)
    assert whole_counts(data, res.plan) == whole_counts(data, first.plan)
    assert all(res.plan[j] == first.plan[j] for g in data.groups for j in (x.id for x in g.jobs))
    # measured: 108 parts (19 jobs fragmented) -> 83 (10); CP-SAT's 0.2 units: 89 (14)
    assert _parts(first.plan) == 108 and _fragmented(first.plan) == 19
    assert _parts(res.plan) == 83 and _fragmented(res.plan) == 10
    assert res.resources is not None
    assert_serves(data, res.plan, res.resources)


def test_the_cp_sat_fewer_parts_step_stays_for_measuring(monkeypatch: pytest.MonkeyPatch) -> None:
    """``FEWER_PARTS_BY_FLOWS`` off: CP-SAT from the first packing, whole and complete, its
    whole jobs kept (bench/bench_packing_steps.py measures the two side by side)."""
    monkeypatch.setattr(packing_route, "FEWER_PARTS_BY_FLOWS", False)
    rec = _Recorder(monkeypatch)
    ctx = Opt().context(family_round("multi-gpu", 128, 7))
    assert ctx is not None
    bp = bound_points(ctx)
    res = pack(ctx, bp)
    assert res.plan is not None
    (first_kw, first), (fewer_kw, fewer) = rec.calls[-2], rec.calls[-1]
    assert not first_kw.get("fewest_parts") and fewer_kw["fewest_parts"]
    assert first.plan is not None and fewer.plan is not None
    data = route_packing_data(ctx, bp)
    assert fewer_kw["hint"] == first.plan
    assert fewer_kw["hint_resources"] == first.resources
    assert fewer_kw["whole"] == whole_counts(data, first.plan)
    assert whole_counts(data, fewer.plan) == whole_counts(data, first.plan)
    assert _parts(res.plan) == _parts(fewer.plan) < _parts(first.plan)


def test_the_fewer_parts_packing_keeps_every_job_and_its_gpus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same jobs, each with its GPUs, within every server's GPUs (the deployment
    checks cores and memory: the allocation test below)."""
    ctx = Opt().context(family_round("multi-gpu", 128, 18))
    assert ctx is not None
    res = pack(ctx, bound_points(ctx))
    assert res.plan is not None
    jobs = {j.id: j for j in ctx.runnable}
    assert set(res.plan) == set(jobs)
    assert all(sum(k for _, k in res.plan[j]) == jobs[j].gpus for j in jobs)
    used = [0] * len(ctx.inst.cluster.servers)
    for parts in res.plan.values():
        for s, k in parts:
            used[s] += k
    assert all(u <= srv.gpus for u, srv in zip(used, ctx.inst.cluster.servers, strict=True))


@pytest.mark.parametrize("seed", [7, 18])
def test_free_spreading_rounds_try_the_contents_before_cp_sat(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """No job spreads at a penalty: the contents pack first, and CP-SAT's quick try on
    the whole model (0.25 units that found nothing on seeds 7 and 18) is never run."""
    rec = _Recorder(monkeypatch)
    ctx = Opt().context(family_round("multi-gpu", 128, seed))
    assert ctx is not None
    res = pack(ctx, bound_points(ctx))
    assert res.plan is not None
    first_kw, first = rec.calls[0]
    assert first_kw.get("whole") is not None and first.plan is not None  # the contents
    assert all(kw.get("whole") is not None for kw, _ in rec.calls)  # no solve of the whole model


def test_rounds_of_one_gpu_jobs_try_the_contents_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """No job spreads at all: an integral solution of the contents is a packing (single-GPU
    512 GPUs seed 5: the quick try found nothing there, 0.4 s, before the contents)."""
    rec = _Recorder(monkeypatch)
    ctx = Opt().context(family_round("single-gpu", 512, 5))
    assert ctx is not None
    bp = bound_points(ctx)
    assert not route_packing_data(ctx, bp).spread
    res = pack(ctx, bp)
    assert res.status is TerminationStatus.OPTIMAL and res.plan is not None
    assert len(rec.calls) == 1 and rec.calls[0][0].get("whole") is not None
    assert set(res.plan) == {j.id for j in ctx.runnable}


def test_penalised_spreading_keeps_cp_sat_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the packing spreads a job at its split penalty, CP-SAT's quick try stays first
    (split penalties 128 GPUs seed 4: it packs within the quick budget)."""
    rec = _Recorder(monkeypatch)
    ctx = Opt().context(family_round("split-penalty", 128, 4))
    assert ctx is not None
    bp = bound_points(ctx)
    data = route_packing_data(ctx, bp)
    assert any(sj.job.split_penalty < 1.0 for sj in data.spread)
    pack(ctx, bp)
    first_kw, _ = rec.calls[0]
    assert first_kw.get("whole") is None
    assert first_kw["deterministic_s"] == packing_route.QUICK_DETERMINISTIC_S


@pytest.mark.parametrize("seed", [7, 18, 72])
def test_opt_reaches_the_bound_with_fewer_fragmented_jobs(seed: int) -> None:
    """``opt`` on the three multi-GPU 128-GPU rounds (of seeds 0-99) that the packing
    route answers: at the bound, checked, with at most 3s fragmented jobs."""
    inst = family_round("multi-gpu", 128, seed)
    got = make_mechanism("opt").allocate(inst)
    assert got.upper_bound is not None
    assert got.total_throughput == pytest.approx(got.upper_bound, rel=1e-9)
    assert check_allocation(inst, got, fair_share=True) == []
    assert 0 < got.fragmented_jobs <= 16  # 10, 12, 16; CP-SAT's step 14, 13, 17; first 19, 16, 21
