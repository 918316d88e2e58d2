"""GPU types (issue 11): derived per-type matrices, the format, typed look-ups, generation.

Numbers are worked by hand from ``../shared/data/gavel_gpu_type_throughputs.json`` (read
here independently of the package's parser) and the shipped ``res18``/``lstm`` profiles.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import statistics
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synergy_opt.check import check_allocation
from synergy_opt.cli import main
from synergy_opt.generate import (
    MULTI_GPU_MIX,
    GenerateSpec,
    generate_instance,
    parse_gpu_types,
)
from synergy_opt.gpu_types import (
    derive_matrix,
    gavel_split_penalty,
    shipped_gavel_table,
    type_speed,
    typed_matrices,
)
from synergy_opt.io import (
    allocation_to_dict,
    dumps,
    instance_from_dict,
    instance_to_dict,
    load_instance,
)
from synergy_opt.mechanisms import MechanismOptions, make_mechanism, mechanism_names
from synergy_opt.mechanisms.packing import type_views
from synergy_opt.profiles import shipped_profiles
from synergy_opt.types import (
    Cluster,
    Job,
    PlacementPart,
    RoundInstance,
    Server,
    ThroughputMatrix,
    ValidationError,
    build_allocation,
)
from tests.conftest import all_instances, shared_file

ABS_TOL = 1e-9
HEURISTICS = ("proportional", "tune", "tune-sorted", "greedy", "tetris")


def _gavel_raw() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(shared_file("gavel_gpu_type_throughputs.json").read_text())
    return data


# --------------------------------------------------------------------------- derivation


def test_shipped_copy_is_the_shared_file() -> None:
    shipped = Path(__file__).parent.parent / "synergy_opt" / "data"
    assert (shipped / "gavel_gpu_type_throughputs.json").read_bytes() == shared_file(
        "gavel_gpu_type_throughputs.json"
    ).read_bytes()
    assert "Narayanan" in (shipped / "README.md").read_text()


def test_res18_k80_speed_hand_worked() -> None:
    # ResNet-18, 1 GPU, K80/V100 iterations/s for batch sizes 16..256:
    # 4.795295/32.353384 = 0.14822, 7.175821/29.947157 = 0.23962, 7.052081/24.093232 = 0.29270,
    # 1.80653/17.994906 = 0.10039, 0.88558/10.300257 = 0.08598 -> median 0.14822 -> 0.1482.
    s = type_speed("res18", "image", "k80")
    assert s.speed == 0.1482
    assert "ResNet-18" in s.basis and "5" in s.basis
    # LM (lstm): 0.23345, 0.29141, 0.26478, 0.25421, 0.21438 -> median 0.25421.
    assert type_speed("lstm", "language", "k80").speed == 0.2542
    assert type_speed("res18", "image", "v100").speed == 1.0


@pytest.mark.parametrize(
    ("profile", "category", "families"),
    [
        ("alexnet", "image", ("ResNet-18", "ResNet-50", "CycleGAN")),
        ("gnmt", "language", ("Transformer", "LM")),
        ("m5", "speech", None),  # Gavel measured no speech model: every model
    ],
)
def test_speed_without_counterpart_is_the_category_median(
    profile: str, category: str, families: tuple[str, ...] | None
) -> None:
    raw = _gavel_raw()["models"]
    ratios = [
        v["p100"]["consolidated"]["1"] / v["v100"]["consolidated"]["1"]
        for name, v in raw.items()
        if families is None or name.split(" (")[0] in families
    ]
    assert len(ratios) == (10 if families else 26)
    s = type_speed(profile, category, "p100")
    assert s.speed == round(statistics.median(ratios), 4)
    assert ("median of all 26" in s.basis) == (families is None)


def test_derived_res18_matrix_on_k80_and_p100() -> None:
    lib = shipped_profiles()
    w = lib.get("res18").matrix(1)
    k80 = dict(typed_matrices(lib.get("res18"), 1, ["v100", "k80", "p100"]))
    assert set(k80) == {"k80", "p100"}  # the reference type's matrix is `sensitivity`
    # K80 ceiling 0.1482 x 2.4 = 0.35568: every point reaches it except the memory-starved
    # column (0.1, data-bound and below the new ceiling).
    for row in k80["k80"].throughput:
        assert row == (0.1, 0.35568, 0.35568, 0.35568, 0.35568)
    # P100 ceiling 0.9258 x 2.4 = 2.22192: data-bound points under it keep their rate.
    p100 = k80["p100"]
    for i, row in enumerate(w.throughput):
        for k, x in enumerate(row):
            assert p100.throughput[i][k] == (2.22192 if x >= 2.22192 else x)
    assert p100.lookup(3, 62.5) == w.lookup(3, 62.5) == 1.0  # a K80 needs fewer cores
    assert k80["k80"].lookup(1, 62.5) == k80["k80"].max_throughput


def test_derive_matrix_slower_and_faster() -> None:
    w = ThroughputMatrix.from_lists([1, 2], [10, 20], [[0.5, 1.0], [1.0, 2.0]])
    assert derive_matrix(w, 0.4).throughput == ((0.5, 0.8), (0.8, 0.8))
    # Faster: only GPU-bound points (at the reference ceiling) rise.
    assert derive_matrix(w, 1.5).throughput == ((0.5, 1.0), (1.0, 3.0))
    with pytest.raises(ValidationError, match="speed"):
        derive_matrix(w, 0.0)


def test_gavel_split_penalty_hand_worked() -> None:
    # ResNet-18 on V100, 2 GPUs, spread/consolidated: 35.33652/100.142062 = 0.35286,
    # 0.34656, 0.42463, 1.02193, 1.24050 -> median 0.42463.
    assert gavel_split_penalty("res18", "image", "v100", 2) == 0.4246
    assert gavel_split_penalty("res18", "image", "v100", 3) == 0.4246  # largest measured <= 3
    assert gavel_split_penalty("res18", "image", "v100", 1) == 1.0
    assert gavel_split_penalty("res18", "image", "k80", 8) == 1.0  # capped at 1
    # Gavel's 0.0 cells (ResNet-50 batch 128 on 2+ K80s) and absent ones (batch 64 spread)
    # are missing measurements, not zero speeds: only complete pairs count.
    bs128 = next(m for m in shipped_gavel_table().models if m.name == "ResNet-50 (batch size 128)")
    assert bs128.rate("k80", 2) is None and bs128.rate("k80", 1) == 0.347224
    raw = _gavel_raw()["models"]
    ratios = []
    for name, v in raw.items():
        spread = v["p100"]["unconsolidated"].get("4", 0.0)
        whole = v["p100"]["consolidated"].get("4", 0.0)
        if name.startswith("ResNet-50") and spread > 0 and whole > 0:
            ratios.append(spread / whole)
    assert gavel_split_penalty("res50", "image", "p100", 4) == min(
        1.0, round(statistics.median(ratios), 4)
    )
    assert gavel_split_penalty("res50", "image", "p100", 4) < 1.0


def test_unknown_type_has_no_speed() -> None:
    with pytest.raises(ValidationError, match="a100"):
        type_speed("res18", "image", "a100")
    with pytest.raises(ValueError, match="a100"):
        parse_gpu_types("v100:8,a100:8")
    assert shipped_gavel_table().gpu_types == ("k80", "p100", "v100")


# --------------------------------------------------------------------------- format

W: dict[str, Any] = {"cpus": [1, 3], "mem_gb": [10.0, 20.0], "throughput": [[0.5, 0.6], [0.9, 1.0]]}
WK: dict[str, Any] = {
    "cpus": [1, 3],
    "mem_gb": [10.0, 20.0],
    "throughput": [[0.2, 0.2], [0.2, 0.2]],
}
DOC: dict[str, Any] = {
    "format": "synergy-round/1",
    "name": "typed",
    "cluster": {
        "servers": [
            {"name": "a", "gpus": 4, "cpus": 12, "mem_gb": 80.0, "gpu_type": "v100"},
            {"name": "b", "gpus": 4, "cpus": 12, "mem_gb": 80.0, "gpu_type": "k80"},
        ]
    },
    "jobs": [
        {"id": "j0", "gpus": 1, "sensitivity": W, "sensitivity_by_type": {"k80": WK}},
        {"id": "j1", "gpus": 2, "sensitivity": W},
    ],
}


def test_round_trip_is_the_identity() -> None:
    inst = instance_from_dict(DOC)
    assert instance_to_dict(inst) == DOC
    gen = generate_instance(
        GenerateSpec(jobs=12, gpu_load=None, gpu_types=(("v100", 64), ("k80", 64)))
    )
    text = dumps(instance_to_dict(gen))
    assert dumps(instance_to_dict(instance_from_dict(json.loads(text)))) == text


@pytest.mark.parametrize(
    ("mutate", "field", "words"),
    [
        (lambda d: d["jobs"][0]["sensitivity_by_type"].update({"a100": W}),
         "jobs[0].sensitivity_by_type.a100", "no server has GPU type 'a100'"),
        (lambda d: d["jobs"][0]["sensitivity_by_type"]["k80"]["throughput"].__setitem__(1, [0.2]),
         "jobs[0].sensitivity_by_type.k80.throughput", "row 1 has 1 values, expected 2"),
        (lambda d: d["jobs"][0]["sensitivity_by_type"]["k80"].pop("cpus"),
         "jobs[0].sensitivity_by_type.k80.cpus", "missing required field"),
        (lambda d: d["jobs"][0].__setitem__("sensitivity_by_type", {}),
         "jobs[0].sensitivity_by_type", "at least one GPU type"),
        (lambda d: d["jobs"][0].__setitem__("sensitivity_by_type", [WK]),
         "jobs[0].sensitivity_by_type", "expected an object"),
        (lambda d: d["jobs"][1].__setitem__("gpu_types", ["a100"]),
         "jobs[1].gpu_types", "has 0 GPUs of types"),
    ],
)  # fmt: skip
def test_bad_typed_input_is_one_line_exit_2(
    mutate: Any, field: str, words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = copy.deepcopy(DOC)
    mutate(doc)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    assert main(["solve", str(path), "--mechanism", "proportional"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith(f"{path}: {field}: ") and words in err[0], err[0]


# --------------------------------------------------------------------------- look-up


def test_throughput_and_fair_share_read_the_servers_type() -> None:
    inst = instance_from_dict(DOC)
    j0 = inst.jobs[0]
    # Fair share (2 of the 4+4 GPUs' 24 cores per 8 GPUs -> 3 cores, 20 GB): the slowest
    # usable type's value, since a type-agnostic baseline may put j0 on the K80.
    assert inst.fair_share(j0) == (3, 20.0)
    assert inst.fair_share_throughput(j0) == 0.2
    assert inst.fair_share_throughput(inst.jobs[1]) == 1.0
    on_v100 = build_allocation(inst, "t", {"j0": [PlacementPart("a", 1, 3, 20.0)]})
    on_k80 = build_allocation(inst, "t", {"j0": [PlacementPart("b", 1, 3, 20.0)]})
    assert on_v100.jobs[0].throughput == 1.0 and on_k80.jobs[0].throughput == 0.2
    assert check_allocation(inst, on_k80, fair_share=True) == []
    # Reporting the reference value on a K80 is a wrong throughput for the checker.
    wrong = dataclasses.replace(
        on_k80,
        jobs=(dataclasses.replace(on_k80.jobs[0], throughput=1.0),),
        total_throughput=1.0,
    )
    assert [v.kind for v in check_allocation(inst, wrong)] == ["throughput", "total"]
    # Spread over both types: the slowest type's value, times the split penalty.
    job = dataclasses.replace(j0, id="sp", gpus=2, split_penalty=0.5)
    inst2 = RoundInstance("t2", inst.cluster, (job,))
    spread = build_allocation(
        inst2, "t", {"sp": [PlacementPart("a", 1, 2, 10.0), PlacementPart("b", 1, 2, 10.0)]}
    )
    assert spread.jobs[0].throughput == pytest.approx(0.2 * 0.5, abs=ABS_TOL)
    assert [v.kind for v in check_allocation(inst2, spread)] == []


def _typed_copy(inst: RoundInstance, gpu_type: str, with_matrices: bool) -> RoundInstance:
    servers = tuple(dataclasses.replace(s, gpu_type=gpu_type) for s in inst.cluster.servers)
    jobs = tuple(
        dataclasses.replace(j, sensitivity_by_type=((gpu_type, j.sensitivity),))
        if with_matrices
        else j
        for j in inst.jobs
    )
    return RoundInstance(inst.name, Cluster(servers), jobs)


def _comparable(alloc_dict: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in alloc_dict.items() if k != "solve_seconds"}


@pytest.mark.parametrize("path", all_instances(), ids=lambda p: p.stem)
def test_single_type_instance_gives_todays_answers(path: Path) -> None:
    """One GPU type everywhere, with or without per-type matrices: the same bytes."""
    inst = load_instance(path)
    typed = _typed_copy(inst, "v100", with_matrices=True)
    assert all(len(type_views(typed, j)) == 1 for j in typed.jobs)
    assert type_views(typed, typed.jobs[0])[0].gpu_types == ("v100",)  # the typed path runs
    for name in HEURISTICS:
        plain = _comparable(allocation_to_dict(make_mechanism(name).allocate(inst)))
        for variant in (typed, _typed_copy(inst, "v100", with_matrices=False)):
            got = _comparable(allocation_to_dict(make_mechanism(name).allocate(variant)))
            assert got == plain, name


# --------------------------------------------------------------------------- mechanisms


def _typed_round(seed: int, load: float = 1.3) -> RoundInstance:
    return generate_instance(
        GenerateSpec(
            servers=4,
            gpu_load=load,
            gpu_mix=((1, 0.6), (2, 0.2), (4, 0.15), (8, 0.05)),
            seed=seed,
            gpu_types=(("v100", 16), ("p100", 8), ("k80", 8)),
        )
    )


def _one_type_each(inst: RoundInstance, alloc_jobs: Any) -> None:
    types = {s.name: s.gpu_type for s in inst.cluster.servers}
    for ja in alloc_jobs:
        assert len({types[p.server] for p in ja.placement}) == 1, ja.id


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", mechanism_names())
def test_every_mechanism_passes_checker_on_typed_rounds(name: str, seed: int) -> None:
    inst = _typed_round(seed)
    assert any(j.sensitivity_by_type for j in inst.jobs)
    mech = make_mechanism(name, MechanismOptions(time_limit_s=20))
    alloc = mech.allocate(inst)
    keeps = name in mechanism_names(keeps_fair_share=True)
    assert check_allocation(inst, alloc, fair_share=keeps) == [], name
    assert alloc.jobs, name
    if name in HEURISTICS:  # views keep a typed job on one GPU type
        _one_type_each(inst, alloc.jobs)


@st.composite
def typed_rounds(draw: st.DrawFn) -> RoundInstance:
    """2-4 typed servers; jobs from profiles with matrices derived at random speeds."""
    lib = shipped_profiles()
    types = ["v100", "k80", "p100"]
    n = draw(st.integers(2, 4))
    servers = tuple(
        Server(
            f"s{i}",
            draw(st.sampled_from([2, 4, 8])),
            draw(st.integers(4, 32)),
            float(draw(st.integers(50, 500))),
            types[i % 3] if i < 3 else draw(st.sampled_from(types)),
        )
        for i in range(n)
    )
    cluster = Cluster(servers)
    present = list(dict.fromkeys(s.gpu_type for s in servers))
    jobs = []
    for k in range(draw(st.integers(2, 7))):
        g = draw(st.sampled_from([1, 1, 2, 4]))
        prof = lib.get(draw(st.sampled_from(lib.names())))
        w = prof.matrix(g)
        speeds = {t: draw(st.sampled_from([0.15, 0.5, 0.9, 1.0, 1.4])) for t in present}
        by_type = tuple((t, derive_matrix(w, s)) for t, s in speeds.items() if t != "v100")
        pen = draw(st.sampled_from([1.0, 0.8]))
        allowed = None
        if draw(st.booleans()):  # a gpu_types restriction that still holds the job
            allowed = tuple(draw(st.lists(st.sampled_from(present), min_size=1, unique=True)))
            if sum(s.gpus for s in servers if s.gpu_type in allowed) < g:
                allowed = None
        jobs.append(Job(f"j{k}", g, w, prof.name, prof.category, pen, allowed, by_type or None))
    return RoundInstance("hyp-typed", cluster, tuple(jobs))


@given(typed_rounds())
@settings(max_examples=40)
def test_property_heuristics_on_typed_rounds(inst: RoundInstance) -> None:
    for name in (*HEURISTICS, "type-aware", "tune-typed"):
        alloc = make_mechanism(name).allocate(inst)
        keeps = name in mechanism_names(keeps_fair_share=True)
        assert check_allocation(inst, alloc, fair_share=keeps) == [], name
        again = make_mechanism(name).allocate(inst)
        assert _comparable(allocation_to_dict(again)) == _comparable(allocation_to_dict(alloc))


# --------------------------------------------------------------------------- commands


def test_generate_typed_cluster_and_jobs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "typed.json"
    args = ["generate", "--gpu-types", "v100:48,p100:48,k80:32", "--workload", "multi-gpu"]
    assert main([*args, "-o", str(out)]) == 0
    inst = load_instance(out)
    kinds = [s.gpu_type for s in inst.cluster.servers]
    assert kinds == ["v100"] * 6 + ["p100"] * 6 + ["k80"] * 4
    lib = shipped_profiles()
    for j in inst.jobs:
        assert j.sensitivity_by_type is not None and j.model is not None
        assert [t for t, _ in j.sensitivity_by_type] == ["p100", "k80"]
        prof = lib.get(j.model)
        speed = type_speed(prof.name, prof.category, "k80").speed
        assert dict(j.sensitivity_by_type)["k80"] == derive_matrix(prof.matrix(j.gpus), speed)
    again = tmp_path / "again.json"
    assert main([*args, "-o", str(again)]) == 0
    assert again.read_bytes() == out.read_bytes()


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("v100:44,p100:52,k80:32", "ends inside a server"),
        ("v100:40,p100:48", "add up to 88"),
        ("v100:64,a100:64", "no measured speed for GPU type 'a100'"),
        ("v100", "TYPE:GPUS"),
    ],
)
def test_generate_bad_gpu_types(value: str, words: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["generate", "--gpu-types", value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--gpu-types" in err[0] and words in err[0], err


def test_generate_gavel_split_penalty() -> None:
    inst = generate_instance(
        GenerateSpec(jobs=40, gpu_load=None, gpu_mix=((1, 1.0), (2, 1.0)), gavel_split_penalty=True)
    )
    for j in inst.jobs:
        assert j.category is not None and j.model is not None
        want = gavel_split_penalty(j.model, j.category, "v100", j.gpus)
        assert j.split_penalty == want
    assert any(j.split_penalty < 1 for j in inst.jobs)
    assert all(j.split_penalty == 1.0 for j in inst.jobs if j.gpus == 1)


def test_profile_emits_per_type_matrices(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "--model", "lstm", "--gpu-types", "v100,k80"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["reference_gpu_type"] == "v100"
    assert out["type_speeds"]["k80"]["speed"] == 0.2542
    assert set(out["sensitivity_by_type"]) == {"k80"}
    w = ThroughputMatrix.from_lists(**out["sensitivity"])
    k80 = out["sensitivity_by_type"]["k80"]
    assert ThroughputMatrix.from_lists(**k80) == derive_matrix(w, 0.2542)
    with pytest.raises(SystemExit) as exc:  # argparse's type check: one line, exit 2
        main(["profile", "--model", "lstm", "--gpu-types", "a100"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--gpu-types" in err[0] and "'a100'" in err[0], err


def test_type_aware_gives_the_fast_gpu_to_the_biggest_speed_up() -> None:
    flat = ThroughputMatrix.from_lists([1, 4], [10.0, 40.0], [[1.0, 1.0], [1.0, 1.0]])
    cluster = Cluster((Server("v", 1, 4, 40.0, "v100"), Server("k", 1, 4, 40.0, "k80")))
    jobs = (
        Job("j0", 1, flat, sensitivity_by_type=(("k80", derive_matrix(flat, 0.8)),)),
        Job("j1", 1, flat, sensitivity_by_type=(("k80", derive_matrix(flat, 0.2)),)),
    )
    inst = RoundInstance("speedup", cluster, jobs)
    # j1 gains 5x from the V100, j0 only 1.25x: type-aware gives j1 the V100 (1.0 + 0.8);
    # type-agnostic PROPORTIONAL best-fits j0, first in priority, onto the first server.
    where = {
        name: {ja.id: ja.placement[0].server for ja in make_mechanism(name).allocate(inst).jobs}
        for name in ("type-aware", "proportional")
    }
    assert where["type-aware"] == {"j0": "k", "j1": "v"}
    assert where["proportional"] == {"j0": "v", "j1": "k"}
    assert make_mechanism("type-aware").allocate(inst).total_throughput == pytest.approx(1.8)
    assert make_mechanism("proportional").allocate(inst).total_throughput == pytest.approx(1.2)


@pytest.mark.parametrize("path", all_instances(), ids=lambda p: p.stem)
def test_type_aware_is_proportional_without_types(path: Path) -> None:
    inst = load_instance(path)
    for typed, plain in (("type-aware", "proportional"), ("tune-typed", "tune")):
        a = allocation_to_dict(make_mechanism(typed).allocate(inst))
        b = allocation_to_dict(make_mechanism(plain).allocate(inst))
        for d in (a, b):
            d.pop("mechanism")
            d.pop("solve_seconds")
        assert a == b, typed


@pytest.mark.parametrize("seed", [1, 2])
def test_tune_typed_beats_both_arms_on_typed_rounds(seed: int) -> None:
    """128 GPUs of v100:48, p100:48, k80:32, the paper's multi-GPU mix: choosing types by
    gain per GPU and then cores and memory beats either alone (measured, seed 1: tune
    56.17, type-aware 64.51, tune-typed 77.64; seed 2: 36.89, 56.10, 65.97)."""
    inst = generate_instance(
        GenerateSpec(
            gpu_mix=tuple(MULTI_GPU_MIX.items()),
            seed=seed,
            gpu_types=(("v100", 48), ("p100", 48), ("k80", 32)),
        )
    )
    got = {}
    for name in ("proportional", "type-aware", "tune", "tune-typed"):
        alloc = make_mechanism(name).allocate(inst)
        assert check_allocation(inst, alloc, fair_share=True) == [], name
        got[name] = alloc.total_throughput
    assert got["tune-typed"] > max(got["tune"], got["type-aware"]) > got["proportional"]
    # The same typed job set, chosen types fixed per job: one GPU type each.
    _one_type_each(inst, make_mechanism("tune-typed").allocate(inst).jobs)


# --------------------------------------------------------------------------- per-server share

#: Two 4-GPU servers of different shapes: "a" has 2 cores and 25 GB per GPU, "b" 8 and 100.
#: Cluster-wide, a GPU's share is 40/8 = 5 cores and 500/8 = 62.5 GB.
MIXED = Cluster((Server("a", 4, 8, 100.0), Server("b", 4, 32, 400.0)))
W4 = ThroughputMatrix.from_lists(
    [8, 20, 32], [100.0, 250.0, 400.0], [[0.5, 0.5, 0.5], [0.5, 1.0, 1.0], [0.5, 1.0, 1.5]]
)


def _mixed(rule: str | None) -> RoundInstance:
    return RoundInstance("mixed", MIXED, (Job("j0", 4, W4), Job("j1", 4, W4)), rule)


def test_per_server_share_hand_worked() -> None:
    server, cluster = _mixed("server"), _mixed("cluster")
    a, b = MIXED.servers
    assert server.per_server_shares and not cluster.per_server_shares
    assert server.server_share(4, a) == (8, 100.0) and server.server_share(4, b) == (32, 400.0)
    assert cluster.server_share(4, a) == (20, 250.0)  # the cluster-wide share everywhere
    # Before placement: the smallest over the servers (W(8, 100) = 0.5); cluster: W(20, 250).
    assert server.fair_share_throughput(server.jobs[0]) == 0.5
    assert cluster.fair_share_throughput(cluster.jobs[0]) == 1.0
    on_b = [PlacementPart("b", 4, 20, 250.0)]
    assert server.fair_share_throughput_on(server.jobs[0], on_b) == 1.5
    # (20 cores, 250 GB) on b keeps the cluster-wide floor (1.0) but not b's own (W(32, 400)).
    for inst, kinds in ((cluster, []), (server, ["fair-share"])):
        alloc = build_allocation(inst, "t", {"j1": on_b})
        assert [v.kind for v in check_allocation(inst, alloc, fair_share=True)] == kinds
    assert build_allocation(server, "t", {"j1": on_b}).jobs[0].fair_share_throughput == 1.5
    # Spread 2 + 2: the sum of the servers' shares, (4 + 16) cores and (50 + 200) GB.
    spread = [PlacementPart("a", 2, 4, 50.0), PlacementPart("b", 2, 16, 200.0)]
    assert server.placed_share(server.jobs[0], spread) == (20, 250.0)


def test_per_server_share_places_what_the_cluster_wide_share_strands() -> None:
    """Cluster-wide, a 4-GPU job wants 20 cores: "a" (8 cores) can never host it, so its 4
    GPUs idle; per server, "a" hands out its own 8 cores and both jobs run."""
    totals = {}
    for rule in ("cluster", "server"):
        inst = _mixed(rule)
        for name in ("proportional", "tune", "type-aware"):
            alloc = make_mechanism(name).allocate(inst)
            assert check_allocation(inst, alloc, fair_share=True) == [], (rule, name)
            totals[rule, name] = (alloc.total_throughput, len(alloc.jobs))
    assert totals["cluster", "proportional"] == (1.0, 1)
    assert totals["cluster", "tune"] == (1.5, 1)  # j0 takes b at its best point, j1 waits
    assert totals["server", "proportional"] == (2.0, 2)  # 0.5 on a + 1.5 on b
    assert totals["server", "tune"] == (2.0, 2)
    assert totals["server", "type-aware"] == totals["server", "proportional"]


def test_fair_share_rule_read_written_and_validated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = copy.deepcopy(DOC)
    doc = {"format": doc["format"], "name": doc["name"], "fair_share": "server", **doc}
    inst = instance_from_dict(doc)
    assert inst.fair_share_rule == "server"
    assert instance_to_dict(inst) == doc
    assert "fair_share" not in instance_to_dict(instance_from_dict(DOC))
    doc["fair_share"] = "pooled"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    assert main(["solve", str(path), "--mechanism", "tune"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"{path}: fair_share: expected one of 'server', 'cluster', got 'pooled'"]


@given(typed_rounds(), st.booleans())
@settings(max_examples=40)
def test_property_server_rule_floor_kept(inst: RoundInstance, penalties: bool) -> None:
    jobs = inst.jobs
    if not penalties:  # PROPORTIONAL promises the floor only where it pays no penalty
        jobs = tuple(dataclasses.replace(j, split_penalty=1.0) for j in jobs)
    inst = RoundInstance(inst.name, inst.cluster, jobs, "server")
    for name in mechanism_names(keeps_fair_share=True, uses_solver=False):
        if penalties and name in ("proportional", "type-aware"):
            continue
        alloc = make_mechanism(name).allocate(inst)
        assert check_allocation(inst, alloc, fair_share=True) == [], name


def test_generate_writes_the_rule_and_the_server_rule_feeds_every_gpu(tmp_path: Path) -> None:
    """The mixed-shapes family (24 cores per 8 GPUs, 32 per 8, 12 per 4): cluster-wide a
    GPU's share is 3.25 cores, more than the 4-GPU servers' 3, so PROPORTIONAL strands GPUs
    there; each server's own share feeds all 32 (measured: 24 -> 32 GPUs, 10.2 -> 18.2)."""
    out = tmp_path / "mixed.json"
    args = ["generate", "--family", "mixed-shapes", "--family-gpus", "32", "--fair-share"]
    assert main([*args, "server", "-o", str(out)]) == 0
    assert json.loads(out.read_text())["fair_share"] == "server"
    server = load_instance(out)
    cluster = RoundInstance(server.name, server.cluster, server.jobs, "cluster")
    used = {}
    for inst in (server, cluster):
        alloc = make_mechanism("proportional").allocate(inst)
        assert check_allocation(inst, alloc, fair_share=True) == []
        used[inst.fair_share_mode] = sum(ja.gpus for ja in alloc.jobs)
    assert used == {"server": 32, "cluster": 24}


def test_untyped_servers_beside_typed_ones_get_a_spanning_view() -> None:
    """A typed job on a cluster with an untyped server: one view per named type, plus one
    that may span types, read in the pointwise slowest of the job's matrices."""
    w = ThroughputMatrix.from_lists([1, 4], [10.0, 40.0], [[0.5, 1.0], [0.5, 1.0]])
    slow = derive_matrix(w, 0.3)
    cluster = Cluster((Server("u", 2, 8, 80.0), Server("k", 2, 8, 80.0, "k80")))
    job = Job("j", 4, w, sensitivity_by_type=(("k80", slow),))
    inst = RoundInstance("untyped-mix", cluster, (job,))
    views = type_views(inst, job)
    assert [v.gpu_types for v in views] == [None]  # no single type holds 4 GPUs
    assert views[0].sensitivity.throughput == ((0.3, 0.3), (0.3, 0.3))  # min(w, slow)
    assert inst.fair_share_throughput(job) == 0.3
    for name in ("proportional", "tune", "type-aware"):
        alloc = make_mechanism(name).allocate(inst)
        assert [ja.id for ja in alloc.jobs] == ["j"], name
        assert alloc.jobs[0].throughput == pytest.approx(0.3, abs=ABS_TOL), name
        assert check_allocation(inst, alloc, fair_share=True) == [], name
    two = RoundInstance("untyped-mix-2", cluster, (dataclasses.replace(job, gpus=2),))
    assert [v.gpu_types for v in type_views(two, two.jobs[0])] == [("k80",), None]


def test_profile_of_a_command_uses_the_median_of_every_model() -> None:
    """A profiled command names no model: its speeds are Gavel's medians over all 26."""
    from synergy_opt.commands.profile import _typed_fields

    raw = _gavel_raw()["models"]
    ratios = [v["k80"]["consolidated"]["1"] / v["v100"]["consolidated"]["1"] for v in raw.values()]
    w = ThroughputMatrix.from_lists([1, 2], [10.0], [[0.5], [1.0]])
    out = _typed_fields(w, None, None, ("v100", "k80"))
    speed = out["type_speeds"]["k80"]["speed"]
    assert speed == round(statistics.median(ratios), 4)
    assert "all 26" in out["type_speeds"]["k80"]["basis"]
    # Ceiling 1.0 x 0.2469: below even the 1-core rate 0.5, so both rows are GPU-bound.
    assert out["sensitivity_by_type"]["k80"]["throughput"] == [[speed], [speed]]


def test_gpu_less_nodes_are_no_gpu_type() -> None:
    """A GPU-less untyped node (as in the Alibaba cluster) hosts no job: it adds no type to
    the floor's minimum and no spanning view, even when every GPU is faster than the
    reference (here speed 1.4: the job reads 1.4 at its fair share, not the reference 1.0)."""
    w = ThroughputMatrix.from_lists([1, 4], [10.0, 40.0], [[0.5, 1.0], [0.5, 1.0]])
    fast = derive_matrix(w, 1.4)
    cluster = Cluster((Server("p", 4, 16, 160.0, "p100"), Server("cpu", 0, 32, 256.0)))
    job = Job("j", 1, w, sensitivity_by_type=(("p100", fast),))
    inst = RoundInstance("cpu-node", cluster, (job,))
    assert [v.gpu_types for v in type_views(inst, job)] == [("p100",)]
    assert inst.fair_share(job) == (12, 104.0)
    assert inst.fair_share_throughput(job) == 1.4
    for name in ("proportional", "tune", "type-aware", "tune-typed"):
        alloc = make_mechanism(name).allocate(inst)
        assert alloc.jobs[0].fair_share_throughput == 1.4, name
        assert check_allocation(inst, alloc, fair_share=True) == [], name


# --------------------------------------------------------------------------- simulator


def _typed_cluster_file(tmp_path: Path, types: tuple[str, ...] = ("v100", "p100", "k80")) -> Path:
    """One 8-GPU, 24-core, 500 GB server per type, typed as given."""
    servers = [{"gpus": 8, "cpus": 24, "mem_gb": 500.0, "gpu_type": t} for t in types]
    path = tmp_path / "typed-cluster.json"
    path.write_text(json.dumps({"servers": servers}))
    return path


def test_simulated_jobs_carry_per_type_matrices_on_a_typed_cluster() -> None:
    """Each trace job gets its model's derived matrix for every non-reference type (the
    same values ``typed_matrices`` gives the generator), none on an untyped cluster."""
    from synergy_opt.sim import SimConfig, paper_cluster
    from synergy_opt.sim.state import prepare_jobs
    from synergy_opt.tracefile import TraceJob

    lib = shipped_profiles()
    typed = Cluster(
        tuple(Server(f"s{i}", 8, 24, 500.0, t) for i, t in enumerate(("v100", "p100", "k80")))
    )
    trace = [TraceJob("a", 0.0, 1, "res18", 3600.0), TraceJob("b", 0.0, 2, "lstm", 3600.0)]
    states = prepare_jobs(SimConfig(typed), trace, lib)
    for js in states:
        prof = lib.get(js.trace.model)
        want = typed_matrices(prof, js.gpus, ("v100", "p100", "k80"))
        assert js.job.sensitivity_by_type == want
        assert [t for t, _ in want] == ["p100", "k80"]
        # Work is read in the slowest usable type (K80), the type-agnostic guarantee.
        c, m = typed.fair_share(js.gpus)
        k80 = dict(want)["k80"]
        assert js.fair_tp == pytest.approx(k80.lookup(c, m))
        assert js.fair_tp < prof.matrix(js.gpus).lookup(c, m)
    plain = prepare_jobs(SimConfig(paper_cluster(3)), trace, lib)
    assert all(js.job.sensitivity_by_type is None for js in plain)


def test_simulator_work_is_measured_at_the_cluster_wide_share_under_both_rules() -> None:
    """docs/formats.md section 5: work = duration x the fair-share throughput at the
    cluster-wide share, whichever rule the rounds keep.  Two 4-GPU servers with 2 and 8
    cores per GPU: the cluster-wide share is 5 cores per GPU (res18: 1.53), so a job placed
    by PROPORTIONAL on the poor server under the per-server rule runs at its 2 cores (0.72)
    and takes longer than its duration, on the rich one (8 cores, read at 6: 1.75) shorter."""
    from synergy_opt.sim import SimConfig, simulate
    from synergy_opt.sim.state import prepare_jobs
    from synergy_opt.tracefile import TraceJob

    lib = shipped_profiles()
    cl = Cluster((Server("poor", 4, 8, 500.0), Server("rich", 4, 32, 500.0)))
    trace = [TraceJob(f"j{k}", 0.0, 1, "res18", 3000.0) for k in range(8)]
    w = lib.get("res18").matrix(1)
    for rule in ("server", "cluster", None):
        states = prepare_jobs(SimConfig(cl, fair_share_rule=rule), trace, lib)
        assert {js.work for js in states} == {3000.0 * w.lookup(5, 125.0)} == {4590.0}
    with pytest.raises(ValueError, match="fair_share_rule"):
        SimConfig(cl, fair_share_rule="pooled")
    # Eight jobs fill both servers, per server: 4 at 2 cores (0.72 a second against the
    # work's 1.53) and 4 at 8 cores (1.75); jobs finish at the end of a 60 s round.
    res = simulate(SimConfig(cl, round_s=60.0), trace, "proportional", "fifo", profiles=lib)
    jct = sorted(round(r.finish_s - r.arrival_s) for r in res.jobs)
    assert (
        jct
        == [math.ceil(4590.0 / 1.75 / 60.0) * 60] * 4 + [math.ceil(4590.0 / 0.72 / 60.0) * 60] * 4
    )
    assert jct[0] < 3000.0 < jct[-1]


def test_compare_on_a_typed_cluster_runs_the_four_variants(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """proportional / type-aware / tune / tune-typed on one typed trace, every round
    checked, all at the per-server default rule.  On this loaded 24-GPU cluster each
    variant beats PROPORTIONAL's average JCT (5.998 h when written; type-aware 5.915 h,
    tune 4.777 h, tune-typed 5.090 h)."""
    cluster = _typed_cluster_file(tmp_path)
    out = tmp_path / "cmp"
    mechs = ["proportional", "type-aware", "tune", "tune-typed"]
    argv = ["compare", "--cluster", str(cluster), "--mechanisms", ",".join(mechs)]
    argv += ["--jobs", "80", "--window", "20:60", "--arrival-rate", "12", "--check-rounds"]
    assert main([*argv, "--quiet", "-o", str(out)]) == 0
    runs = json.loads((out / "compare.json").read_text())["runs"]
    assert [r["mechanism"] for r in runs] == mechs
    jct = {r["mechanism"]: r["avg_jct_hours"] for r in runs}
    assert all(r["fair_share"] == "server" and r["jobs_measured_finished"] == 40 for r in runs)
    assert max(jct[m] for m in mechs[1:]) < jct["proportional"]


def test_simulated_types_without_measured_speeds_read_the_reference_matrix(
    tmp_path: Path,
) -> None:
    """A type Gavel did not measure (``a100``, the Alibaba cluster's ``G2``) gets no derived
    matrix: jobs read their reference matrix there, and ``simulate`` runs."""
    from synergy_opt.sim import SimConfig
    from synergy_opt.sim.state import prepare_jobs
    from synergy_opt.tracefile import TraceJob

    lib = shipped_profiles()
    cl = Cluster((Server("s0", 8, 24, 500.0, "a100"), Server("s1", 8, 24, 500.0, "k80")))
    (js,) = prepare_jobs(SimConfig(cl), [TraceJob("a", 0.0, 1, "res18", 60.0)], lib)
    assert js.job.sensitivity_by_type is not None
    assert [t for t, _ in js.job.sensitivity_by_type] == ["k80"]
    assert js.job.matrix_for("a100") is js.job.sensitivity
    cluster = _typed_cluster_file(tmp_path, ("v100", "a100"))
    argv = ["simulate", "--cluster", str(cluster), "--jobs", "5", "-o", str(tmp_path / "o")]
    assert main([*argv, "--quiet", "--fair-share", "cluster"]) == 0
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["fair_share"] == "cluster" and summary["jobs_measured_finished"] == 5


def test_tune_plain_path_gives_the_general_paths_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """TUNE's fast path for untyped jobs (one share for every server) must place exactly as
    its general per-view path does with the job as its only view."""
    from synergy_opt.mechanisms.tune import Tune

    def general(self, inst, state, residents, job, d, fair_tp):  # type: ignore[no-untyped-def]
        got = self._place(inst, state, residents, (job,), [d], [fair_tp], (job.sensitivity,))
        return None if got is None else got[1:]

    insts = [
        generate_instance(
            GenerateSpec(servers=4, cpus_per_server=c, gpu_load=load, gpu_mix=mix, seed=seed)
        )
        for seed in range(4)
        for c in (16, 48)
        for load in (0.8, 1.5)
        for mix in (((1, 1.0),), tuple(MULTI_GPU_MIX.items()))
    ]
    insts += [load_instance(p) for p in all_instances()]
    insts = [i for i in insts if not i.per_server_shares]
    fast = [
        allocation_to_dict(make_mechanism(m).allocate(i))
        for i in insts
        for m in ("tune", "tune-sorted")
    ]
    monkeypatch.setattr(Tune, "_place_plain", general)
    slow = [
        allocation_to_dict(make_mechanism(m).allocate(i))
        for i in insts
        for m in ("tune", "tune-sorted")
    ]
    for a in fast + slow:
        a.pop("solve_seconds", None)
    assert len(fast) >= 64 and fast == slow
