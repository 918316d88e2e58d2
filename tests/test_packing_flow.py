"""The packing's arc flow (``formulations/packing_flow.md``): the matrix model equals its
Pyomo reference, never refutes a packing that exists, refutes exactly the GPU-and-core
packings that do not, and sees whole servers where the pattern LP does not."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from typing import Any

import numpy as np
import pyomo.environ as pyo
from hypothesis import given, settings
from hypothesis import strategies as st

from synergy_opt.formulations import packing
from synergy_opt.formulations.packing_cp import solve_packing
from synergy_opt.formulations.packing_data import PackingData, SpreadJob, WholeGroup
from synergy_opt.formulations.packing_flow import (
    FLOWS,
    REFUTED,
    TOO_LARGE,
    Choice,
    _stranded,
    build_packing_flow_matrix,
    flow_graph,
    refute_by_flow,
)
from synergy_opt.formulations.packing_lp import refute_packing
from synergy_opt.generate import family_round
from synergy_opt.matrix import MatrixModel
from synergy_opt.mechanisms.packing import select_runnable
from synergy_opt.solve import TerminationStatus, solve_matrix, solve_pyomo
from synergy_opt.types import Job, RoundInstance, ThroughputMatrix
from tests.conftest import ROOT
from tests.test_formulations import md_names
from tests.test_packing import packing_cases

LEAF = ROOT / "tests" / "data" / "leaf_points_split_penalty_128_seed9.json"


def _job(jid: str, gpus: int) -> Job:
    w = ThroughputMatrix(cpus=(1,), mem_gb=(1.0,), throughput=((1.0,),))
    return Job(jid, gpus, w)


def _cores_only(data: PackingData) -> PackingData:
    """``data`` without what the flow drops: memory, and servers a job may not use."""
    n = len(data.servers)
    groups = tuple(
        WholeGroup(
            gr.jobs,
            gr.gpus,
            gr.cpus,
            0.0,
            tuple(s for s in range(n) if data.servers[s][:2] >= (gr.gpus, gr.cpus)),
        )
        for gr in data.groups
    )
    spread = tuple(SpreadJob(sj.job, sj.cpus, 0.0, tuple(range(n))) for sj in data.spread)
    return PackingData(groups, spread, data.servers)


def _leaf() -> tuple[RoundInstance, PackingData]:
    """The packing at the points of the leaf that held split penalties 128 seed 9 open."""
    saved: dict[str, Any] = json.loads(LEAF.read_text(encoding="utf-8"))
    inst = family_round(*saved["round"])
    points = {jid: (int(c), float(m), float(w)) for jid, (c, m, w) in saved["points"].items()}
    return inst, packing.packing_data(inst, select_runnable(inst), points, set(saved["spread"]))


def _spread_case() -> PackingData:
    """Server 0 holds the 8-GPU job (no GPU left), server 1 the 6-GPU job (2 GPUs, 4 cores
    left): the spread job's 12 cores can only sit next to its GPUs."""
    big, mid, spread = _job("big", 8), _job("mid", 6), _job("sp", 2)
    return PackingData(
        (WholeGroup((big,), 8, 1, 10.0, (0, 1)), WholeGroup((mid,), 6, 8, 10.0, (0, 1))),
        (SpreadJob(spread, 12, 10.0, (0, 1)),),
        ((8, 12, 100.0),) * 2,
    )


def test_pyomo_component_names_match_markdown() -> None:
    data = PackingData(
        (WholeGroup((_job("w", 4),), 4, 4, 1.0, (0, 1)),),
        (SpreadJob(_job("sp", 4), 8, 1.0, (0, 1)),),
        ((8, 24, 100.0),) * 2,
    )
    choice = Choice(2, 2, ((1, 1.0), (3, 1.5)))
    fg = flow_graph(data, choices=(choice,), floor=2.5)
    assert fg is not None
    m = packing.build_packing_flow(fg)
    names = {
        c.local_name for c in m.component_objects((pyo.Var, pyo.Constraint), descend_into=False)
    }
    assert names == md_names("packing_flow")
    rows = {r.split("[")[0] for r in build_packing_flow_matrix(fg).row_names}
    assert rows == {n for n in md_names("packing_flow") if n.startswith("pf")}


@settings(max_examples=60, deadline=None)
@given(packing_cases())
def test_refutes_exactly_the_packings_of_gpus_and_cores_that_do_not_exist(
    case: tuple[RoundInstance, PackingData],
) -> None:
    """With memory and allowed servers out of the packing (what the flow drops), the flow
    with ``one_server`` (the packing model's parts) is feasible exactly when CP-SAT packs;
    its Pyomo reference agrees; and on the packing itself a refutation means CP-SAT finds
    none (a relaxation)."""
    _, data = case
    bare = _cores_only(data)
    exact = solve_packing(bare, deterministic_s=5.0).status
    assert exact in (TerminationStatus.OPTIMAL, TerminationStatus.INFEASIBLE)
    verdict = refute_by_flow(bare, 30.0, one_server=True)
    assert verdict.status in (REFUTED, FLOWS)
    assert verdict.refuted == (exact is TerminationStatus.INFEASIBLE)
    fg = flow_graph(bare, one_server=True)
    assert fg is not None
    if fg.idle >= 0 and not _stranded(fg):  # else refuted without a solve
        ref = solve_pyomo(packing.build_packing_flow(fg))
        fast = solve_matrix(build_packing_flow_matrix(fg))
        assert (ref.status is TerminationStatus.INFEASIBLE) == verdict.refuted
        assert (fast.status is TerminationStatus.INFEASIBLE) == verdict.refuted
    if refute_by_flow(data, 30.0, one_server=True).refuted:
        assert solve_packing(data, deterministic_s=5.0).status is TerminationStatus.INFEASIBLE


def test_spread_cores_only_where_the_job_has_a_gpu() -> None:
    data = _spread_case()
    assert refute_by_flow(data, 10.0).refuted
    assert refute_by_flow(data, math.inf).refuted  # no limit: solved without a guard
    assert refute_by_flow(data, 10.0, one_server=True).refuted
    sp = data.spread[0].job
    roomy = PackingData(data.groups, (SpreadJob(sp, 4, 10.0, (0, 1)),), data.servers)
    # 4 cores fit next to server 1's two free GPUs, as the packing model may place it;
    # the counting model spreads a job over two servers, and server 0 has no GPU left
    assert refute_by_flow(roomy, 10.0, one_server=True).status == FLOWS
    assert refute_by_flow(roomy, 10.0).refuted


def test_parts_of_a_spread_job_share_what_whole_jobs_leave() -> None:
    """Two 4-GPU whole jobs of 7 cores each on two servers of 8 GPUs and 8 cores: a 4-GPU
    spread job gets one core per server, so 2 cores fit and 3 do not; alone on one such
    server it needs the packing model's one-server part."""
    whole = WholeGroup(tuple(_job(f"w{i}", 4) for i in range(2)), 4, 7, 1.0, (0, 1))
    sp = _job("sp", 4)
    servers = ((8, 8, 100.0),) * 2
    fits = PackingData((whole,), (SpreadJob(sp, 2, 1.0, (0, 1)),), servers)
    assert refute_by_flow(fits, 10.0).status == FLOWS
    short = PackingData((whole,), (SpreadJob(sp, 3, 1.0, (0, 1)),), servers)
    assert refute_by_flow(short, 10.0).refuted
    alone = PackingData((), (SpreadJob(sp, 8, 1.0, (0,)),), servers[:1])
    assert refute_by_flow(alone, 10.0).refuted
    assert refute_by_flow(alone, 10.0, one_server=True).status == FLOWS


def _relaxed(mm: MatrixModel, *, without: str = "") -> TerminationStatus:
    """The LP relaxation's status, rows named ``without...`` dropped."""
    dropped = [bool(without) and n.startswith(without) for n in mm.row_names]
    upper = np.where(dropped, np.inf, mm.row_upper)
    lp = dataclasses.replace(mm, integer=np.zeros_like(mm.integer), row_upper=upper)
    return solve_matrix(lp).status


def _pouring_case() -> PackingData:
    """Four servers of 4 GPUs and 4 cores; two 2-GPU jobs of 4 cores leave two servers
    2 GPUs and no core, two 3-GPU jobs of 1 core leave two 1 GPU and 3 cores.  A spread
    job of 3 GPUs and 4 cores needs both 3-core servers' GPUs, so a 2-GPU spread job of 2
    cores has none next to a core: no packing."""
    return PackingData(
        (
            WholeGroup(tuple(_job(f"a{i}", 2) for i in range(2)), 2, 4, 0.0, (0, 1, 2, 3)),
            WholeGroup(tuple(_job(f"b{i}", 3) for i in range(2)), 3, 1, 0.0, (0, 1, 2, 3)),
        ),
        (
            SpreadJob(_job("s0", 3), 4, 0.0, (0, 1, 2, 3)),
            SpreadJob(_job("s1", 2), 2, 0.0, (0, 1, 2, 3)),
        ),
        ((4, 4, 100.0),) * 4,
    )


def test_share_cap_cuts_off_an_end_pouring_its_cores_into_one_job() -> None:
    """The LP without (pf9) gives a fraction of an end all 3 cores for the 2-core job
    (:func:`_pouring_case`); with (pf9) the LP alone refutes it, as does CP-SAT."""
    data = _pouring_case()
    fg = flow_graph(data)
    assert fg is not None
    mm = build_packing_flow_matrix(fg)
    assert any(n.startswith("pf9_share_cap") for n in mm.row_names)
    assert _relaxed(mm, without="pf9") is TerminationStatus.OPTIMAL
    assert _relaxed(mm) is TerminationStatus.INFEASIBLE
    ref = packing.build_packing_flow(fg)
    ref.pf9_share_cap.deactivate()
    relax = pyo.TransformationFactory("core.relax_integer_vars")
    relax.apply_to(ref)
    assert solve_pyomo(ref).status is TerminationStatus.OPTIMAL
    ref.pf9_share_cap.activate()
    assert solve_pyomo(ref).status is TerminationStatus.INFEASIBLE
    assert refute_by_flow(data, 10.0).refuted
    assert solve_packing(data, deterministic_s=5.0).status is TerminationStatus.INFEASIBLE


def test_refutes_the_stalled_leaf_of_seed_9_which_the_pattern_lp_cannot() -> None:
    """The spread jobs' cores meet every Hall condition with fractional servers, so the
    pattern LP leaves no shortfall; with whole servers they do not fit."""
    _, data = _leaf()
    assert not refute_packing(data).refuted
    verdict = refute_by_flow(data, 60.0)
    assert verdict.refuted, verdict
    assert verdict.columns > 1000


def test_nothing_is_refuted_past_the_size_limit() -> None:
    _, data = _leaf()
    verdict = refute_by_flow(data, 60.0, max_cols=100)
    assert verdict.status == TOO_LARGE and not verdict.refuted
    # twelve 8-GPU spread jobs over sixteen 8-GPU servers: the ends are grown within a
    # server's GPUs until the limit, not drawn from every combination (7^8 per set of 8)
    many = tuple(SpreadJob(_job(f"s{i}", 8), 4, 1.0, tuple(range(16))) for i in range(12))
    crowded = PackingData((), many, ((8, 24, 500.0),) * 16)
    assert flow_graph(crowded) is None
    assert refute_by_flow(crowded, 60.0).status == TOO_LARGE


def test_a_choice_must_reach_its_floor() -> None:
    """One server of 8 GPUs and 8 cores holds a 4-GPU job of 6 cores; a 4-GPU job of a
    free class is worth 1 at 1 core and 2 at 4 cores: worth 1.5 it does not fit."""
    data = PackingData((WholeGroup((_job("w", 4),), 4, 6, 1.0, (0,)),), (), ((8, 8, 100.0),))
    choice = (Choice(1, 4, ((1, 1.0), (4, 2.0))),)
    assert refute_by_flow(data, 10.0, choices=choice).status == FLOWS
    assert refute_by_flow(data, 10.0, choices=choice, floor=1.0).status == FLOWS
    assert refute_by_flow(data, 10.0, choices=choice, floor=1.5).refuted
    for floor, refuted in ((1.0, False), (1.5, True)):
        fg = flow_graph(data, choices=choice, floor=floor)
        assert fg is not None
        ref = solve_pyomo(packing.build_packing_flow(fg))
        assert (ref.status is TerminationStatus.INFEASIBLE) == refuted


@st.composite
def _choice_cases(draw: st.DrawFn) -> tuple[PackingData, tuple[Choice, ...], float]:
    servers = tuple(
        (draw(st.sampled_from((4, 8))), draw(st.integers(4, 16)), 100.0)
        for _ in range(draw(st.integers(1, 2)))
    )
    n = len(servers)
    groups = tuple(
        WholeGroup(tuple(_job(f"w{d}_{i}", g) for i in range(count)), g, c, 1.0, tuple(range(n)))
        for d, (g, c, count) in enumerate(
            draw(
                st.lists(
                    st.tuples(st.sampled_from((1, 2, 4)), st.integers(1, 8), st.integers(1, 2)),
                    max_size=2,
                )
            )
        )
    )
    choices = tuple(
        Choice(
            draw(st.integers(1, 2)),
            draw(st.sampled_from((1, 2))),
            tuple(
                sorted(
                    draw(
                        st.sets(
                            st.tuples(st.integers(1, 8), st.sampled_from((1.0, 1.5, 2.0))),
                            min_size=1,
                            max_size=3,
                        )
                    )
                )
            ),
        )
        for _ in range(draw(st.integers(1, 2)))
    )
    return PackingData(groups, (), servers), choices, draw(st.sampled_from((1.0, 2.0, 3.0, 4.0)))


@settings(max_examples=60, deadline=None)
@given(_choice_cases())
def test_choices_refute_exactly_when_every_worthy_assignment_does_not_pack(
    case: tuple[PackingData, tuple[Choice, ...], float],
) -> None:
    """Brute force: every assignment of the choices' jobs to points worth the floor, as a
    packing with those points fixed, refuted or not (the flow is exact for GPUs and cores)."""
    data, choices, floor = case
    verdict = refute_by_flow(data, 30.0, one_server=True, choices=choices, floor=floor)
    assert verdict.status in (REFUTED, FLOWS)
    packs = False
    menus = [itertools.combinations_with_replacement(ch.options, ch.count) for ch in choices]
    for picks in itertools.product(*menus):
        if sum(w for pick in picks for _, w in pick) < floor - 1e-9:
            continue
        extra = tuple(
            WholeGroup(
                (_job(f"c{i}_{j}", ch.gpus),), ch.gpus, c, 1.0, tuple(range(len(data.servers)))
            )
            for i, (ch, pick) in enumerate(zip(choices, picks, strict=True))
            for j, (c, _) in enumerate(pick)
        )
        fixed = PackingData(data.groups + extra, (), data.servers)
        if refute_by_flow(fixed, 30.0, one_server=True).status == FLOWS:
            packs = True
            break
    assert verdict.refuted == (not packs)
