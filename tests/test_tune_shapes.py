"""TUNE's strictest per-server floor read on one server of each kind, and the cluster's
servers by name built once: the same numbers as over every server, the same answers."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from synergy_opt.generate import GenerateSpec, family_round, generate_instance
from synergy_opt.mechanisms import make_mechanism
from synergy_opt.mechanisms.packing import select_runnable
from synergy_opt.mechanisms.tune import _strictest_floor
from synergy_opt.types import Cluster, RoundInstance, Server


def _typed_mixed(seed: int) -> RoundInstance:
    """Three shapes, two of them also split by GPU type, under the per-server rule."""
    return generate_instance(
        GenerateSpec(
            server_shapes=((4, 8, 24, 500.0), (6, 4, 16, 200.0), (2, 8, 32, 400.0)),
            gpu_load=1.2,
            gpu_mix=((1, 0.5), (2, 0.2), (4, 0.2), (8, 0.1)),
            gpu_types=(("v100", 40), ("k80", 32)),
            fair_share_rule="server",
            seed=seed,
        )
    )


ROUNDS = [
    *[lambda s=s: family_round("mixed-shapes", 128, s) for s in range(3)],
    *[lambda s=s: _typed_mixed(s) for s in range(3)],
]


@pytest.mark.parametrize("make", ROUNDS)
def test_one_server_of_each_kind_gives_the_floor_of_every_server(make: object) -> None:
    inst = make()  # type: ignore[operator]
    assert inst.per_server_shares
    servers = inst.cluster.servers
    shapes = tuple({(s.gpus, s.cpus, s.mem_gb, s.gpu_type): s for s in servers}.values())
    assert len(shapes) < len(servers)
    for job in select_runnable(inst):
        mats = inst.usable_matrices(job)
        assert _strictest_floor(inst, job, mats, shapes) == _strictest_floor(
            inst, job, mats, servers
        )


def test_a_cluster_looks_servers_up_by_name_and_compares_on_its_servers_alone() -> None:
    servers = (Server("a", 8, 24, 500.0), Server("b", 4, 16, 200.0, "k80"))
    one, two = Cluster(servers), Cluster(tuple(servers))
    assert one == two and hash(one) == hash(two)
    assert one._by_name == {"a": servers[0], "b": servers[1]}
    moved = dataclasses.replace(one, servers=servers[:1])
    assert moved._by_name == {"a": servers[0]}
    assert pickle.loads(pickle.dumps(one))._by_name == one._by_name


def test_tune_answers_mixed_shapes_512_as_it_did() -> None:
    """Mixed shapes 512 GPUs seed 0: TUNE's total recorded before the change (its
    fingerprints on mixed shapes, split penalties and the multi-GPU mix at 32-512 GPUs
    matched the code before on 36 rounds)."""
    inst = family_round("mixed-shapes", 512, 0)
    got = make_mechanism("tune").allocate(inst)
    assert len(got.jobs) == len(select_runnable(inst))
    assert got.total_throughput == pytest.approx(TUNE_MIXED_512_0, abs=1e-9)


#: Recorded with the code before (8709808), which read every server.
TUNE_MIXED_512_0 = 297.65


@pytest.mark.parametrize("make", ROUNDS)
def test_the_checker_floor_before_placement_is_the_smallest_over_every_server(
    make: object,
) -> None:
    """The checker's per-server floor reads one GPU server of each kind: the same value as
    the smallest over every usable server, read in the slowest usable type's matrix."""
    from synergy_opt.check import _typed_lookup, fair_share_floor

    inst = make()  # type: ignore[operator]
    for job in select_runnable(inst):
        usable = [s for s in inst.cluster.servers if s.gpus > 0 and job.may_use(s)]
        types = {s.gpu_type for s in usable}
        every = min(
            _typed_lookup(job, types, (job.gpus * s.cpus) // s.gpus, job.gpus * s.mem_gb / s.gpus)
            for s in usable
        )
        assert fair_share_floor(inst, job)[0] == every
