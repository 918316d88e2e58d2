"""OPT's moves re-decide points on a plan in the matrix of the plan's GPU types.

OPT's routes plan on each job's reference matrix.  On a typed round a job placed on
another type's servers realises that type's matrix (the slowest type where it spans
several), so a point chosen on the reference matrix could be worth less than counted,
and below the job's floor: fuzz seed 10113 (15 servers, V100 and P100, split penalties)
spread a 3-GPU job over P100 servers at a point that met its floor on V100 only, and OPT's
plain pass fell back to TUNE.  The re-optimisation and the neighbourhood MIP now read
:func:`~synergy_opt.mechanisms.opt.context.placed_matrix`.
"""

from __future__ import annotations

import pytest

from synergy_opt.check import check_allocation
from synergy_opt.io import instance_from_dict
from synergy_opt.mechanisms import make_mechanism
from synergy_opt.mechanisms.opt import Opt
from synergy_opt.mechanisms.opt.configure import reoptimise
from synergy_opt.mechanisms.opt.context import RoundingError, placed_matrix
from synergy_opt.mechanisms.opt.neighbourhood import total_of
from synergy_opt.types import RoundInstance, build_allocation

CPUS = [2, 4, 6, 8, 16]
MEM = [50.0, 100.0]
FAST = [[1.0, 1.0], [1.6, 1.7], [1.9, 2.0], [2.0, 2.1], [2.4, 2.4]]  # V100: the reference
SLOW = [[0.5, 0.5], [0.8, 0.85], [0.95, 1.0], [1.0, 1.05], [1.4, 1.4]]  # P100


def _round() -> RoundInstance:
    def job(jid: str, gpus: int, penalty: float) -> dict[str, object]:
        return {
            "id": jid,
            "gpus": gpus,
            "split_penalty": penalty,
            "sensitivity": {"cpus": CPUS, "mem_gb": MEM, "throughput": FAST},
            "sensitivity_by_type": {
                "p100": {"cpus": CPUS, "mem_gb": MEM, "throughput": SLOW},
            },
        }

    return instance_from_dict(
        {
            "format": "synergy-round/1",
            "name": "typed-points",
            "fair_share": "cluster",
            "cluster": {
                "servers": [
                    {"count": 2, "gpus": 4, "cpus": 8, "mem_gb": 200, "gpu_type": "v100"},
                    {"count": 2, "gpus": 4, "cpus": 8, "mem_gb": 200, "gpu_type": "p100"},
                ]
            },
            "jobs": [job("big", 4, 0.8), job("a", 2, 0.9), job("b", 2, 0.9), job("c", 4, 0.8)],
        }
    )


def test_placed_matrix_is_the_type_there_and_the_lowest_across_types() -> None:
    inst = _round()
    big = inst.jobs[0]
    assert placed_matrix(inst, big, (0,)).lookup(4, 50) == pytest.approx(1.6)
    assert placed_matrix(inst, big, (2, 3)).lookup(4, 50) == pytest.approx(0.8)
    assert placed_matrix(inst, big, (1, 2)).lookup(4, 50) == pytest.approx(0.8)  # the slowest


def test_whole_jobs_on_slow_servers_are_reoptimised_in_their_matrix() -> None:
    """Two 2-GPU jobs whole on a P100 server: their points are read in the P100 matrix, so
    what the re-optimisation counts is what they realise and their floors (0.85, the
    slowest type's value at the share) hold; in the V100 matrix 2 cores (1.0) looked enough
    and realise 0.5."""
    inst = _round()
    ctx = Opt().context(inst)
    assert ctx is not None
    plan = {"big": ((0, 2), (1, 2)), "c": ((2, 4),), "a": ((3, 2),), "b": ((3, 2),)}
    points, parts = reoptimise(ctx, plan)
    alloc = build_allocation(inst, "opt", parts)
    assert check_allocation(inst, alloc, fair_share=True) == []
    realised = {ja.id: ja.throughput for ja in alloc.jobs}
    for jid in ("a", "b", "c"):
        assert realised[jid] == pytest.approx(points[jid][2])
    assert realised["big"] == pytest.approx(points["big"][2] * 0.8)
    assert alloc.total_throughput == pytest.approx(total_of(ctx, plan, points))


def test_a_spread_that_keeps_its_floor_only_on_the_fast_type_is_refused() -> None:
    """The 4-GPU job spread over both P100 servers beside two 2-GPU jobs: 8 cores are left
    to it there, worth 1.0 x 0.8 in the P100 matrix, below its floor 1.05; the plan has no
    valid points (in the V100 matrix 4 cores looked worth 1.6 x 0.8)."""
    inst = _round()
    ctx = Opt().context(inst)
    assert ctx is not None
    plan = {"big": ((2, 2), (3, 2)), "a": ((2, 2),), "b": ((3, 2),), "c": ((0, 4),)}
    with pytest.raises(RoundingError):
        reoptimise(ctx, plan)


def test_opt_on_the_typed_round_keeps_its_own_answer() -> None:
    inst = _round()
    out = make_mechanism("opt").allocate(inst)
    assert check_allocation(inst, out, fair_share=True) == []
    assert not any("failed the check" in n for n in out.notes), out.notes
