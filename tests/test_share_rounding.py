"""Per-server shares on uniform clusters with a fractional number of cores per GPU.

docs/formats.md section 1: under the default ``"server"`` rule a job's share is
floor(q C_s / G_s) whole cores per part of q GPUs on server s, summed over its servers.  On
servers of 2 GPUs and 7 cores a 2-GPU job holds 7 cores on one server but 3 + 3 = 6 spread
1 + 1, below the cluster-wide floor(g C / G) = 7.  The reported floor
(``fair_share_throughput`` of :func:`~synergy_opt.types.build_allocation`) once took the
cluster-wide shortcut on every uniform cluster, the checker the per-server sum, so each such
spread job was a ``fair-share-report`` violation (and opt/opt-exact fell back to tune).
"""

from __future__ import annotations

import math

import pytest

from synergy_opt.check import check_allocation, fair_share_floor
from synergy_opt.generate import GenerateSpec, generate_instance
from synergy_opt.mechanisms import make_mechanism, mechanism_names
from synergy_opt.mechanisms.base import mechanism_info
from synergy_opt.types import (
    Allocation,
    Cluster,
    Job,
    PlacementPart,
    RoundInstance,
    Server,
    ThroughputMatrix,
    build_allocation,
)

ABS_TOL = 1e-6

#: 6 servers of 2 GPUs, 7 cores (3.5 per GPU) and 125 GB: uniform shapes, fractional cores.
FRACTIONAL = GenerateSpec(
    servers=6,
    gpus_per_server=2,
    cpus_per_server=7,
    mem_per_server_gb=125.0,
    gpu_load=1.3,
    gpu_mix=((1, 0.4), (2, 0.3), (3, 0.2), (4, 0.1)),
    seed=2,
)


def per_core(w: ThroughputMatrix) -> ThroughputMatrix:
    """``w`` on a grid of every core count up to its largest, linearly interpolated between
    its grid points (zero cores -> 0): a profile measured at each core, where 6 and 7 cores
    read differently.  Generated matrices step at multiples of the job's GPUs, where the
    per-server and cluster-wide roundings always land on the same grid point."""
    cores = list(range(1, w.cpus[-1] + 1))
    rows = []
    for c in cores:
        hi = next(i for i, x in enumerate(w.cpus) if x >= c)
        c0 = w.cpus[hi - 1] if hi else 0
        row = []
        for k in range(len(w.mem_gb)):
            lo_w = w.throughput[hi - 1][k] if hi else 0.0
            t = (c - c0) / (w.cpus[hi] - c0)
            row.append(round(lo_w + (w.throughput[hi][k] - lo_w) * t, 6))
        rows.append(row)
    return ThroughputMatrix.from_lists(cores, w.mem_gb, rows)


def fractional_round(rule: str | None = None) -> RoundInstance:
    """The generated round on :data:`FRACTIONAL`, every matrix on a per-core grid."""
    base = generate_instance(FRACTIONAL)
    jobs = tuple(
        Job(j.id, j.gpus, per_core(j.sensitivity), j.model, j.category, j.split_penalty)
        for j in base.jobs
    )
    return RoundInstance(base.name, base.cluster, jobs, rule)


def test_hand_worked_two_gpu_job_spread_one_plus_one() -> None:
    servers = tuple(Server(f"s{i}", 2, 7, 120.0) for i in range(3))
    w = ThroughputMatrix.from_lists([6, 7], [120.0], [[0.8], [1.0]])
    job = Job("j0", 2, w)
    inst = RoundInstance("frac", Cluster(servers), (job,))
    spread = (PlacementPart("s0", 1, 3, 60.0), PlacementPart("s1", 1, 3, 60.0))
    whole = (PlacementPart("s2", 2, 7, 120.0),)
    assert inst.placed_share(job, spread) == (6, 120.0)
    assert inst.placed_share(job, whole) == (7, 120.0)
    assert inst.fair_share_throughput_on(job, spread) == 0.8
    assert inst.fair_share_throughput_on(job, whole) == 1.0
    for parts, floor in ((spread, 0.8), (whole, 1.0)):
        alloc = build_allocation(inst, "hand", {"j0": parts})
        assert alloc.jobs[0].fair_share_throughput == floor
        assert fair_share_floor(inst, job, parts)[0] == floor
        assert check_allocation(inst, alloc, fair_share=True) == []
    # The cluster-wide rule keeps floor(2 * 21 / 6) = 7 cores however the job is split.
    cluster = RoundInstance("frac", Cluster(servers), (job,), "cluster")
    assert not cluster.per_server_shares
    assert cluster.fair_share_throughput_on(job, spread) == 1.0
    assert fair_share_floor(cluster, job, spread)[0] == 1.0


@pytest.mark.parametrize(
    ("gpus", "cpus", "mem_gb", "shortcut"),
    [
        (8, 24, 500.0, True),  # the paper's servers: 3 cores per GPU
        (8, 16, 250.0, True),
        (2, 7, 120.0, False),  # 3.5 cores per GPU
        (4, 14, 240.0, False),
        (8, 12, 500.0, False),
    ],
)
def test_cluster_wide_shortcut_only_with_whole_cores_per_gpu(
    gpus: int, cpus: int, mem_gb: float, shortcut: bool
) -> None:
    """The shortcut (cluster-wide formulas, the same bytes as before) stays where it is
    exact, and only there: every split of g GPUs sums to floor(g C / G) cores."""
    servers = tuple(Server(f"s{i}", gpus, cpus, mem_gb) for i in range(4))
    inst = RoundInstance(
        "u", Cluster(servers), (Job("j", 2, ThroughputMatrix.from_lists([1], [1.0], [[1.0]])),)
    )
    assert inst.per_server_shares is not shortcut
    job = Job("j", 3, inst.jobs[0].sensitivity)
    for split in ((3,), (2, 1), (1, 1, 1)):
        if max(split) > gpus:
            continue
        parts = [PlacementPart(f"s{i}", q, 0, 0.0) for i, q in enumerate(split)]
        cores = sum((q * cpus) // gpus for q in split)
        assert inst.placed_share(job, parts)[0] == cores
        assert math.isclose(inst.placed_share(job, parts)[1], 3 * mem_gb / gpus)
        if shortcut:
            assert cores == (3 * cpus) // gpus


def _spread_below_cluster_share(inst: RoundInstance, alloc: Allocation) -> list[str]:
    """Jobs of ``alloc`` whose summed per-server cores are below floor(g C / G) and whose
    floor look-up differs there: the jobs the old shortcut misreported."""
    jobs = inst.job_by_id()
    out = []
    for ja in alloc.jobs:
        job = jobs[ja.id]
        c, m = inst.cluster.fair_share(job.gpus)
        cores = inst.placed_share(job, ja.placement)[0]
        if cores < c and job.sensitivity.lookup(cores, m) != job.sensitivity.lookup(c, m):
            out.append(ja.id)
    return out


def test_every_mechanism_reports_the_checkers_floor_on_a_fractional_round() -> None:
    inst = fractional_round()
    allocs = {name: make_mechanism(name).allocate(inst) for name in mechanism_names()}
    jobs = inst.job_by_id()
    for name, alloc in allocs.items():
        assert check_allocation(inst, alloc, fair_share=True) == [], name
        for ja in alloc.jobs:
            want = fair_share_floor(inst, jobs[ja.id], ja.placement)[0]
            assert ja.fair_share_throughput == pytest.approx(want, abs=ABS_TOL), (name, ja.id)
        assert not [n for n in alloc.notes if "failed the check" in n], (name, alloc.notes)
    # The round exercises the rounding: opt and tetris spread jobs below the cluster-wide share.
    assert _spread_below_cluster_share(inst, allocs["opt"])
    assert _spread_below_cluster_share(inst, allocs["tetris"])
    exact = allocs["opt-exact"]
    assert allocs["opt"].total_throughput >= allocs["tune"].total_throughput - ABS_TOL
    assert exact.total_throughput >= allocs["opt"].total_throughput - ABS_TOL
    assert exact.upper_bound is not None
    # Proven here (8.5867; it fell back to tune's 7.2583 while the floors disagreed).
    assert exact.upper_bound - exact.total_throughput <= 1e-4 * max(1.0, exact.total_throughput)
    same = {ja.id for ja in exact.jobs}
    for name, alloc in allocs.items():
        if mechanism_info(name).keeps_fair_share and {ja.id for ja in alloc.jobs} == same:
            assert alloc.total_throughput <= exact.upper_bound + ABS_TOL, name


def test_cluster_rule_on_the_fractional_round_keeps_the_cluster_wide_floor() -> None:
    inst = fractional_round("cluster")
    assert not inst.per_server_shares
    jobs = inst.job_by_id()
    for name in ("proportional", "tune", "opt"):
        alloc = make_mechanism(name).allocate(inst)
        assert check_allocation(inst, alloc, fair_share=True) == [], name
        for ja in alloc.jobs:
            assert ja.fair_share_throughput == inst.fair_share_throughput(jobs[ja.id])
