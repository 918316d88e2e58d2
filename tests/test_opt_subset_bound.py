"""``opt`` skips TUNE where the super-machine's optimum bounds allocations of part of the
runnable set too (:func:`~synergy_opt.mechanisms.opt.bounds.subset_bound`).

TUNE may leave runnable jobs waiting, so the bound ``opt`` reports (for the whole set) does
not bound TUNE's total; with the count rows (4) relaxed to ``<= n_k`` it would.  Where every
count row's dual is non-negative the relaxed LP has the same optimum: these tests solve the
relaxed LP itself and check the claim, check that TUNE is not run only where ``opt``'s
answer reaches the bound, and that the answers are the bytes they were with TUNE run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import pytest

from synergy_opt.generate import family_round
from synergy_opt.io import allocation_to_dict, dumps
from synergy_opt.matrix import MatrixModel
from synergy_opt.mechanisms.opt import Opt
from synergy_opt.mechanisms.opt import mechanism as opt_mechanism
from synergy_opt.mechanisms.opt.bounds import subset_bound
from synergy_opt.mechanisms.opt.context import OPT_HIGHS_OPTIONS
from synergy_opt.mechanisms.opt.super_machine import split_super_machine
from synergy_opt.mechanisms.packing import select_runnable
from synergy_opt.mechanisms.tune import Tune, TuneRound
from synergy_opt.solve import SolveResult, TerminationStatus, solve_matrix
from synergy_opt.types import Job, RoundInstance

#: (family, GPUs, seed): cluster-wide shares (uniform servers), with and without spreads.
ROUNDS: tuple[tuple[str, int, int], ...] = tuple(
    (f, g, s)
    for f in ("single-gpu", "multi-gpu", "cpu-scarce", "mem-scarce", "split-penalty")
    for g in (32, 128)
    for s in range(4)
) + (("multi-gpu", 128, 28),)  # a count row's dual is negative there


def _super_machine(inst: RoundInstance) -> tuple[MatrixModel, SolveResult]:
    runnable = select_runnable(inst)
    mm = split_super_machine(inst, runnable).matrix
    res = solve_matrix(mm, "highs", highs_options=OPT_HIGHS_OPTIONS, lp_first=True)
    return mm, res


def counts_relaxed(mm: MatrixModel) -> MatrixModel:
    """``mm`` with every count row (4) relaxed to ``<= n_k``: its solutions are the
    allocations of the runnable set or of part of it."""
    lower = np.array(mm.row_lower, dtype=np.float64)
    for i, name in enumerate(mm.row_names):
        if name.startswith("eq4["):
            lower[i] = 0.0
    return dataclasses.replace(mm, row_lower=lower)


def relaxed_optimum(mm: MatrixModel) -> float:
    """The LP relaxation with every count row (4) relaxed to ``<= n_k``."""
    relaxed = counts_relaxed(mm)
    res = solve_matrix(dataclasses.replace(relaxed, integer=np.zeros_like(mm.integer)), "highs")
    assert res.status is TerminationStatus.OPTIMAL and res.objective is not None
    return res.objective


def relaxed_mip_optimum(mm: MatrixModel) -> float:
    """The MIP itself with every count row (4) relaxed to ``<= n_k``: the best allocation
    of the runnable set or of part of it."""
    res = solve_matrix(counts_relaxed(mm), "highs", rel_gap=1e-9)
    assert res.status is TerminationStatus.OPTIMAL and res.dual_bound is not None
    return res.dual_bound


def test_subset_bound_is_at_or_above_the_relaxed_count_rows_optimum() -> None:
    found = refused = fractional = 0
    for family, gpus, seed in ROUNDS:
        inst = family_round(family, gpus, seed)
        assert not inst.per_server_shares
        mm, res = _super_machine(inst)
        got = subset_bound(mm, res)
        if got is None:
            refused += 1
            continue
        found += 1
        assert res.objective is not None and got >= res.objective - 1e-9
        if res.row_dual is not None:  # an integral vertex: the LP optimum is the MIP's
            assert got == pytest.approx(res.objective, abs=1e-9)
            relaxed = relaxed_optimum(mm)
        else:  # a fractional one: the MIP with relaxed count rows is what it bounds
            fractional += 1
            relaxed = relaxed_mip_optimum(mm)
        assert relaxed <= got + 1e-7 * max(1.0, got), (family, gpus, seed)
        # and so TUNE, which may leave jobs waiting, is below it
        assert Tune().tune_round(inst).total_throughput <= got + 1e-9
    assert found >= len(ROUNDS) // 2  # the claim is not vacuous
    assert refused >= 1  # nor is the refusal
    assert fractional >= 1  # multi-GPU 128 seed 0's vertex is fractional


@pytest.mark.parametrize("seed", [0, 11, 13])
def test_a_fractional_vertex_gives_the_bound_from_its_duals(seed: int) -> None:
    """Multi-GPU 128 GPUs seeds 0, 11 and 13: the super-machine's LP vertex is fractional
    and the MIP runs; the LP's count-row duals (all >= 0.1) prove that dropping any job
    loses more than the LP's lead over the MIP, so the bound is the MIP's optimum, and no
    allocation of the set or of part of it (the relaxed MIP, TUNE's) beats it."""
    inst = family_round("multi-gpu", 128, seed)
    mm, res = _super_machine(inst)
    assert res.row_dual is None and res.relaxation_row_dual is not None
    assert res.relaxation_objective is not None and res.objective is not None
    assert res.relaxation_objective > res.objective + 1e-3  # the LP is above the MIP
    got = subset_bound(mm, res)
    assert got == pytest.approx(res.objective, abs=1e-9)
    assert relaxed_mip_optimum(mm) <= got + 1e-9
    assert Tune().tune_round(inst).total_throughput <= got + 1e-9


def _model_with_counts(n_counts: int) -> MatrixModel:
    """A placeholder model whose first ``n_counts`` rows are count rows (4)."""
    names = tuple(f"eq4[k{i}]" for i in range(n_counts)) + ("eq2[pool]",)
    return MatrixModel(
        cost=np.ones(1),
        col_lower=np.zeros(1),
        col_upper=np.ones(1),
        integer=np.ones(1, dtype=bool),
        row_lower=np.zeros(len(names)),
        row_upper=np.ones(len(names)),
        a_start=np.array([0, 0]),
        a_index=np.array([], dtype=np.int32),
        a_value=np.array([]),
        row_names=names,
    )


def _mip_result(duals: list[float], lp: float, mip: float) -> SolveResult:
    return SolveResult(
        TerminationStatus.OPTIMAL,
        mip,
        mip,
        0.0,
        0.0,
        "highs",
        x=np.ones(1),
        relaxation_objective=lp,
        relaxation_row_dual=np.array(duals),
    )


def test_the_strict_subset_bound_is_the_lp_less_the_cheapest_job() -> None:
    mm = _model_with_counts(2)
    # dropping a job of the first class loses at least 3, of the second at least 1: a
    # strict subset is worth at most 12 - 1 = 11, above the MIP's 10
    got = subset_bound(mm, _mip_result([3.0, 1.0, 0.5], lp=12.0, mip=10.0))
    assert got == pytest.approx(11.0, rel=1e-6) and got >= 11.0
    # the LP's lead (0.5) below the cheapest drop (1): the MIP's optimum bounds all
    assert subset_bound(mm, _mip_result([3.0, 1.0, 0.5], lp=10.5, mip=10.0)) == 10.0
    # a negative count dual: dropping that class may pay, no claim
    assert subset_bound(mm, _mip_result([3.0, -0.5, 0.5], lp=10.5, mip=10.0)) is None
    # a dual within the tolerance below 0 counts as 0: the LP's own optimum
    assert subset_bound(mm, _mip_result([3.0, -1e-12, 0.0], lp=10.5, mip=10.0)) == (
        pytest.approx(10.5, rel=1e-6)
    )
    # a MIP stopped short proves nothing
    stopped = dataclasses.replace(
        _mip_result([3.0, 1.0, 0.5], lp=10.5, mip=10.0), status=TerminationStatus.TIME_LIMIT
    )
    assert subset_bound(mm, stopped) is None


def test_subset_bound_refuses_where_the_relaxed_optimum_is_higher() -> None:
    inst = family_round("multi-gpu", 128, 28)
    mm, res = _super_machine(inst)
    assert res.objective is not None
    assert relaxed_optimum(mm) > res.objective + 1e-6  # dropping a job would pay
    assert subset_bound(mm, res) is None


def test_row_duals_only_for_optimal_lps() -> None:
    inst = family_round("multi-gpu", 32, 1)
    mm, _ = _super_machine(inst)
    lp = solve_matrix(dataclasses.replace(mm, integer=np.zeros_like(mm.integer)), "highs")
    assert lp.row_dual is not None and len(lp.row_dual) == mm.num_rows
    mip = solve_matrix(mm, "highs", highs_options=OPT_HIGHS_OPTIONS)
    assert mip.row_dual is None
    assert subset_bound(mm, mip) is None  # no duals, no claim


def _spy_tune(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    ran: list[str] = []
    real = Tune.tune_round

    def spy(self: Tune, inst: RoundInstance, runnable: Sequence[Job] | None = None) -> TuneRound:
        ran.append(inst.name)
        return real(self, inst, runnable)

    monkeypatch.setattr(Tune, "tune_round", spy)
    return ran


@pytest.mark.parametrize("family", ["multi-gpu", "single-gpu"])
def test_opt_runs_tune_only_where_no_bound_proves_its_answer(
    monkeypatch: pytest.MonkeyPatch, family: str
) -> None:
    """The same bytes as with TUNE run on every round; TUNE skipped only where the answer
    reaches the subset bound, and ``opt`` >= TUNE everywhere."""
    insts = [family_round(family, 128, s) for s in range(6)]
    eager = []
    with monkeypatch.context() as m:
        m.setattr(opt_mechanism, "subset_bound", lambda mm, res: None)
        ran_eager = _spy_tune(m)
        for inst in insts:
            eager.append(Opt().allocate(inst))
        assert ran_eager == [i.name for i in insts]  # without the bound TUNE is read
    ran = _spy_tune(monkeypatch)
    skipped = 0
    for inst, want in zip(insts, eager, strict=True):
        ran.clear()
        got = Opt().allocate(inst)
        assert dumps(allocation_to_dict(dataclasses.replace(got, solve_seconds=0.0))) == dumps(
            allocation_to_dict(dataclasses.replace(want, solve_seconds=0.0))
        )
        tune = Tune().allocate(inst)
        assert got.total_throughput >= tune.total_throughput - 1e-9
        if not ran:
            skipped += 1
            mm, res = _super_machine(inst)
            bound = subset_bound(mm, res)
            assert bound is not None and got.total_throughput >= bound - 1e-9
    assert skipped >= 1


def test_opt_runs_tune_where_the_subset_bound_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    ran = _spy_tune(monkeypatch)
    inst = family_round("multi-gpu", 128, 28)
    got = Opt().allocate(inst)
    assert ran == [inst.name]
    assert got.total_throughput >= Tune().allocate(inst).total_throughput - 1e-9


def test_opt_skips_tune_where_a_fractional_vertex_proves_its_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Seeds 0, 11 and 13 of multi-GPU 128 GPUs: ``opt`` reaches the MIP's optimum, which
    the duals prove no allocation of part of the set beats, so TUNE is not run (it was, a
    quarter of those rounds' time); the same bytes as with TUNE run."""
    for seed in (0, 11, 13):
        inst = family_round("multi-gpu", 128, seed)
        with monkeypatch.context() as m:
            m.setattr(opt_mechanism, "subset_bound", lambda mm, res: None)
            want = Opt().allocate(inst)
        ran = _spy_tune(monkeypatch)
        got = Opt().allocate(inst)
        assert ran == [], seed
        assert dumps(allocation_to_dict(dataclasses.replace(got, solve_seconds=0.0))) == dumps(
            allocation_to_dict(dataclasses.replace(want, solve_seconds=0.0))
        )
        assert got.total_throughput >= Tune().allocate(inst).total_throughput - 1e-9
        monkeypatch.undo()
