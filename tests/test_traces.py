"""Trace converters on samples cut from the shipped files and on hand-made broken rows."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from synergy_opt.cli import main
from synergy_opt.io import InputError, load_cluster
from synergy_opt.profiles import shipped_profiles
from synergy_opt.tracefile import read_trace, trace_to_csv
from synergy_opt.traces import ConversionReport, ConvertOptions, convert
from synergy_opt.traces.mapping import (
    IMAGE_MIN_CPUS_PER_GPU,
    LANGUAGE_MAX_CPUS_PER_GPU,
    category_by_split,
    category_for_request,
    pick_model,
)
from synergy_opt.traces.nodes import Node, stratified

from .conftest import SHARED_DATA

ABS_TOL = REL_TOL = 1e-6

DATA = Path(__file__).resolve().parent / "data" / "traces"
PODS = str(DATA / "alibaba_pods_sample.csv")
NODES = str(DATA / "alibaba_nodes_sample.csv")
GPUSPEC = str(DATA / "alibaba_pods_gpuspec.csv")
BROKEN = str(DATA / "alibaba_pods_broken.csv")
NODES_BROKEN = str(DATA / "alibaba_nodes_broken.csv")
PHILLY = str(DATA / "philly_job_log.json")
PHILLY_BROKEN = str(DATA / "philly_broken.json")
SHIPPED = SHARED_DATA / "traces" / "alibaba-gpu-v2023"


def _raw_pods(path: str) -> dict[str, dict[str, str]]:
    with open(path, newline="") as f:
        return {r["name"]: r for r in csv.DictReader(f)}


def _accounted(report: ConversionReport) -> None:
    """Every input row is either converted or skipped for a named reason."""
    assert report.converted + report.skipped_total == report.rows


# --------------------------------------------------------------------------- Alibaba pods


def test_alibaba_sample_fields_follow_the_documented_rules() -> None:
    conv = convert("alibaba-gpu-2023", [PODS])
    raw = _raw_pods(PODS)
    rep = conv.report
    assert rep.rows == 45
    _accounted(rep)
    skipped = dict(rep.skipped)
    assert skipped == {
        "CPU-only (num_gpu 0; --cpu-only skip)": 2,
        "never scheduled (no scheduled_time)": 1,
    }
    assert rep.converted == 42
    sharing = sum(1 for r in raw.values() if r["num_gpu"] == "1" and int(r["gpu_milli"]) < 1000)
    assert dict(rep.mapped) == {"GPU-sharing pod given 1 whole GPU (--gpu-sharing whole)": sharing}
    t0 = min(float(raw[j.id]["creation_time"]) for j in conv.jobs)
    lib = shipped_profiles()
    for j in conv.jobs:
        r = raw[j.id]
        assert j.gpus == max(1, int(r["num_gpu"]))
        assert j.duration_s == float(r["deletion_time"]) - float(r["scheduled_time"])
        assert j.arrival_s == pytest.approx(float(r["creation_time"]) - t0, abs=ABS_TOL)
        extra = dict(j.extra)
        assert float(extra["req_cpus"]) == pytest.approx(int(r["cpu_milli"]) / 1000, abs=ABS_TOL)
        assert float(extra["req_mem_gib"]) == pytest.approx(int(r["memory_mib"]) / 1024, abs=1e-5)
        assert extra["pod_phase"] == r["pod_phase"]
        assert j.category == category_for_request(int(r["cpu_milli"]) / 1000 / j.gpus)
        assert lib.get(j.model).category == j.category
        assert j.gpu_types is None
    arrivals = [j.arrival_s for j in conv.jobs]
    assert arrivals == sorted(arrivals) and arrivals[0] == 0.0
    assert {j.gpus for j in conv.jobs} == {1, 2, 4, 8}


def test_alibaba_output_reads_back_and_is_deterministic(tmp_path: Path) -> None:
    a = convert("alibaba-gpu-2023", [PODS], ConvertOptions(seed=3))
    b = convert("alibaba-gpu-2023", [PODS], ConvertOptions(seed=3))
    assert trace_to_csv(a.jobs) == trace_to_csv(b.jobs)
    c = convert("alibaba-gpu-2023", [PODS], ConvertOptions(seed=4))
    assert [j.model for j in a.jobs] != [j.model for j in c.jobs]
    assert [j.category for j in a.jobs] == [j.category for j in c.jobs]  # seed picks models only
    out = tmp_path / "t.csv"
    assert (
        main(
            ["trace", "convert", "--from", "alibaba-gpu-2023", PODS, "-o", str(out), "--seed", "3"]
        )
        == 0
    )
    assert out.read_text() == trace_to_csv(a.jobs)
    back = read_trace(out, shipped_profiles())
    assert [j.id for j in back] == [j.id for j in a.jobs]
    assert dict(back[0].extra)["req_cpus"] == dict(a.jobs[0].extra)["req_cpus"]


def test_alibaba_model_of_a_pod_does_not_depend_on_other_rows() -> None:
    full = {j.id: j.model for j in convert("alibaba-gpu-2023", [PODS]).jobs}
    part = convert("alibaba-gpu-2023", [PODS], ConvertOptions(skip_jobs=10, max_jobs=5))
    assert len(part.jobs) == 5
    assert dict(part.report.skipped)["outside --skip-jobs/--max-jobs"] == 37
    assert part.jobs[0].arrival_s == 0.0
    for j in part.jobs:
        assert full[j.id] == j.model


def test_alibaba_explicit_options_for_sharing_cpu_only_and_phases() -> None:
    skip = convert("alibaba-gpu-2023", [PODS], ConvertOptions(gpu_sharing="skip"))
    whole = convert("alibaba-gpu-2023", [PODS])
    n_share = dict(whole.report.mapped)["GPU-sharing pod given 1 whole GPU (--gpu-sharing whole)"]
    reason = "GPU-sharing (gpu_milli < 1000; --gpu-sharing skip)"
    assert dict(skip.report.skipped)[reason] == n_share
    assert skip.report.converted == whole.report.converted - n_share
    assert all(dict(j.extra)["gpu_milli"] == "1000" for j in skip.jobs)

    one = convert("alibaba-gpu-2023", [PODS], ConvertOptions(cpu_only="one-gpu"))
    assert dict(one.report.mapped)["CPU-only pod given 1 GPU (--cpu-only one-gpu)"] == 2
    assert one.report.converted == whole.report.converted + 2

    ok = convert("alibaba-gpu-2023", [PODS], ConvertOptions(phases=("Succeeded",)))
    assert {dict(j.extra)["pod_phase"] for j in ok.jobs} == {"Succeeded"}
    _accounted(ok.report)


def test_alibaba_arrival_compression_compresses_arrivals_only() -> None:
    base = convert("alibaba-gpu-2023", [PODS])
    fast = convert("alibaba-gpu-2023", [PODS], ConvertOptions(arrival_compression=10.0))
    for a, b in zip(base.jobs, fast.jobs, strict=True):
        assert b.arrival_s == pytest.approx(a.arrival_s / 10.0, abs=1e-3)
        assert b.duration_s == a.duration_s


def test_alibaba_gpuspec_variant_with_nodes() -> None:
    conv = convert("alibaba-gpu-2023", [GPUSPEC, NODES])
    by_id = {j.id: j for j in conv.jobs}
    assert by_id["openb-pod-0001"].gpu_types == ("V100M16", "V100M32")
    assert by_id["openb-pod-0002"].gpu_types == ("T4",)
    assert by_id["openb-pod-0004"].gpu_types == ("G2", "P100", "T4", "V100M16", "V100M32")
    assert by_id["openb-pod-0009"].gpu_types == ("V100M32",)  # duplicate type collapsed
    assert by_id["openb-pod-0000"].gpu_types is None
    assert "openb-pod-0006" not in by_id  # G1: no such GPU in the cluster
    assert "openb-pod-a10x8" not in by_id  # 8 A10 GPUs wanted, the cluster has 2
    skipped = dict(conv.report.skipped)
    assert skipped["gpu_spec names no GPU type of the cluster"] == 1
    assert skipped["more GPUs (of its allowed types) than the cluster has"] == 1
    # No deletion_time: censored at the file's last timestamp.
    end = max(
        float(v)
        for r in _raw_pods(GPUSPEC).values()
        for k, v in r.items()
        if k.endswith("_time") and v
    )
    assert by_id["openb-pod-0008"].duration_s == end - 4130198
    assert "unfinished pod ended at the trace's last timestamp (--unfinished censor)" in dict(
        conv.report.mapped
    )
    _accounted(conv.report)
    assert "gpu_types" in trace_to_csv(conv.jobs).splitlines()[0]
    assert "V100M16;V100M32" in trace_to_csv(conv.jobs)

    dropped = convert("alibaba-gpu-2023", [GPUSPEC], ConvertOptions(unfinished="skip"))
    assert dict(dropped.report.skipped)["unfinished (no deletion_time; --unfinished skip)"] == 1
    # Without the node list nothing is known about the cluster, so nothing is dropped for it.
    assert "openb-pod-0006" in {j.id for j in dropped.jobs}


def test_alibaba_malformed_rows_name_the_line() -> None:
    with pytest.raises(InputError) as e:
        convert("alibaba-gpu-2023", [BROKEN])
    assert str(e.value) == f"{BROKEN}: line 5: row: has 10 fields, header has 11"
    conv = convert("alibaba-gpu-2023", [BROKEN], ConvertOptions(skip_bad=True))
    assert dict(conv.report.skipped) == {"malformed (--skip-bad)": 10}
    assert conv.report.converted == 4
    assert [j.id for j in conv.jobs] == [
        "openb-pod-0000",
        "openb-pod-b011",
        "openb-pod-0001",
        "openb-pod-0002",
    ]
    assert conv.report.bad_examples[1] == (
        f"{BROKEN}: line 6: num_gpu: expected an integer in [0, 1024], got 'two'"
    )


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (6, "num_gpu: expected an integer in [0, 1024], got 'two'"),
        (7, "cpu_milli: must be a number in [0, 65_536_000], got '-5'"),
        (8, "scheduled_time: 60 is before creation_time 100"),
        (9, "gpu_milli: must be an integer in [0, 1000], got '1500'"),
        (10, "name: must not be empty"),
        (11, "name: duplicate pod name 'openb-pod-0000'"),
        (12, "gpu_spec: empty GPU type in 'V100M16||T4'"),
        (13, "num_gpu: expected an integer in [0, 1024], got '1.5'"),
        (14, "creation_time: expected a number in [0, 1e+10], got ''"),
    ],
)
def test_each_broken_row_has_its_own_message(tmp_path: Path, line: int, message: str) -> None:
    lines = Path(BROKEN).read_text().splitlines()
    one = tmp_path / "one.csv"
    one.write_text("\n".join(lines[:4] + [lines[line - 1]]) + "\n")
    with pytest.raises(InputError) as e:
        convert("alibaba-gpu-2023", [str(one)])
    assert str(e.value) == f"{one}: line 5: {message}"


# --------------------------------------------------------------------------- Alibaba nodes


def test_alibaba_nodes_become_a_cluster(tmp_path: Path) -> None:
    out = tmp_path / "c.json"
    trace = tmp_path / "t.csv"
    assert (
        main(
            [
                "trace",
                "convert",
                "--from",
                "alibaba-gpu-2023",
                PODS,
                NODES,
                "-o",
                str(trace),
                "--cluster-out",
                str(out),
            ]
        )
        == 0
    )
    cluster = load_cluster(out)
    with open(NODES, newline="") as f:
        rows = list(csv.DictReader(f))
    gpu_rows = [r for r in rows if int(r["gpu"]) > 0]
    assert len(cluster.servers) == len(gpu_rows)
    for s, r in zip(cluster.servers, gpu_rows, strict=True):
        assert s.name == r["sn"]
        assert s.gpus == int(r["gpu"])
        assert s.cpus == int(r["cpu_milli"]) // 1000
        assert s.mem_gb == pytest.approx(int(r["memory_mib"]) / 1024, abs=ABS_TOL)
        assert s.gpu_type == r["model"]
    keep = convert("alibaba-gpu-2023", [PODS, NODES], ConvertOptions(cpu_nodes="keep"))
    assert keep.cluster is not None and len(keep.cluster.servers) == len(rows)
    assert sum(1 for s in keep.cluster.servers if s.gpus == 0 and s.gpu_type is None) == len(
        rows
    ) - len(gpu_rows)


def test_stratified_node_sample_keeps_the_mix() -> None:
    nodes = [Node(f"a{i}", 8, 96, 384.0, "G2") for i in range(60)]
    nodes += [Node(f"b{i}", 2, 104, 512.0, "T4") for i in range(30)]
    nodes += [Node(f"c{i}", 4, 32, 128.0, "V100M16") for i in range(10)]
    kept = stratified(nodes, 0.1)
    assert [n.name for n in kept] == ["a0", "a1", "a2", "a3", "a4", "a5", "b0", "b1", "b2", "c0"]
    assert stratified(nodes, 1.0) == nodes
    assert len(stratified(nodes, 0.001)) == 1


def test_malformed_node_row_names_the_line() -> None:
    with pytest.raises(InputError) as e:
        convert("alibaba-gpu-2023", [PODS, NODES_BROKEN])
    assert str(e.value) == (
        f"{NODES_BROKEN}: line 3: memory_mib: expected a number in [0, 1_024_000_000], got 'lots'"
    )


def test_inputs_are_told_apart_by_header() -> None:
    a = convert("alibaba-gpu-2023", [NODES, PODS])
    b = convert("alibaba-gpu-2023", [PODS, NODES])
    assert a.jobs == b.jobs and a.cluster == b.cluster
    with pytest.raises(InputError, match="expected exactly one pod list"):
        convert("alibaba-gpu-2023", [NODES])
    with pytest.raises(InputError, match="header lacks column"):
        convert("alibaba-gpu-2023", [str(DATA / "README.md")])


@pytest.mark.parametrize(
    "bad",
    [
        {"gpu_sharing": "half"},
        {"arrival_compression": 0.0},
        {"nodes_fraction": 1.5},
        {"max_jobs": 0},
        {"skip_jobs": -1},
        {"split": (0.0, 0.0, 0.0)},
        {"attempts": "first"},
    ],
)
def test_options_are_validated(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        ConvertOptions(**bad)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- mapping rule


def test_mapping_rule_thresholds_and_determinism() -> None:
    assert category_for_request(IMAGE_MIN_CPUS_PER_GPU) == "image"
    assert category_for_request(IMAGE_MIN_CPUS_PER_GPU - 0.01) == "speech"
    assert category_for_request(LANGUAGE_MAX_CPUS_PER_GPU) == "speech"
    assert category_for_request(LANGUAGE_MAX_CPUS_PER_GPU - 0.01) == "language"
    lib = shipped_profiles()
    picks = {pick_model(lib, "image", 0, f"pod-{k}").name for k in range(200)}
    assert picks == {p.name for p in lib.by_category("image")}
    assert pick_model(lib, "language", 7, "x") == pick_model(lib, "language", 7, "x")
    cats = [category_by_split(1, f"job-{k}", (20, 70, 10)) for k in range(2000)]
    assert 0.15 < cats.count("image") / 2000 < 0.25
    assert 0.65 < cats.count("language") / 2000 < 0.75
    assert {category_by_split(1, f"job-{k}", (0, 100, 0)) for k in range(50)} == {"language"}


# --------------------------------------------------------------------------- Philly


def test_philly_job_log() -> None:
    conv = convert("philly", [PHILLY])
    rep = conv.report
    assert rep.rows == 8 and rep.converted == 3
    assert dict(rep.skipped) == {
        "no attempts": 1,
        "no attempt with both start_time and end_time": 2,
        "no GPUs in the first attempt's detail": 1,
        "zero run time": 1,
    }
    by_id = {j.id: j for j in conv.jobs}
    multi = by_id["application_1506638472019_10001"]
    assert multi.gpus == 4  # two machines x two GPUs in the first attempt
    assert multi.duration_s == 3600.0
    retried = by_id["application_1506638472019_10002"]
    assert retried.gpus == 1  # the first attempt's detail, not the retry's
    assert retried.duration_s == 600.0 + 1800.0
    assert retried.arrival_s == 0.0  # submitted first
    assert multi.arrival_s == 3600.0
    assert by_id["application_1506638472019_10007"].gpus == 8
    assert dict(retried.extra) == {"status": "Killed", "attempts": "2"}
    last = convert("philly", [PHILLY], ConvertOptions(attempts="last"))
    assert {j.id: j for j in last.jobs}["application_1506638472019_10002"].duration_s == 1800.0
    lib = shipped_profiles()
    for j in conv.jobs:
        assert lib.get(j.model).category == j.category


def test_philly_malformed_entries() -> None:
    with pytest.raises(InputError) as e:
        convert("philly", [PHILLY_BROKEN])
    assert str(e.value) == (
        f"{PHILLY_BROKEN}: line 6: application_1_2.submitted_time: "
        "expected '%Y-%m-%d %H:%M:%S', got '10/03/2017 10:00'"
    )
    conv = convert("philly", [PHILLY_BROKEN], ConvertOptions(skip_bad=True))
    assert dict(conv.report.skipped) == {"malformed (--skip-bad)": 2}
    second = conv.report.bad_examples[1]
    assert second.startswith(f"{PHILLY_BROKEN}: line 9: application_1_3.attempts")
    assert [j.id for j in conv.jobs] == ["application_1_1", "application_1_4"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"jobs": []}', "line 1: expected a JSON list of jobs"),
        ('[\n {"jobid": "a"}\n {"jobid": "b"}]', "line 3: expected ',' or ']' after a job"),
        ('[\n {"jobid": "a",\n  "attempts": [}\n]', "line 3: not valid JSON"),
        ("[\n 3\n]", "line 2: job: expected an object, got the number 3"),
    ],
)
def test_philly_structural_errors(tmp_path: Path, text: str, message: str) -> None:
    p = tmp_path / "log.json"
    p.write_text(text)
    with pytest.raises(InputError) as e:
        convert("philly", [str(p)])
    assert str(e.value).startswith(f"{p}: {message}")


def _philly_job(jobid: str, submitted: str, start: str, end: str) -> dict[str, object]:
    detail = [{"ip": "m1", "gpus": ["gpu0"]}]
    attempt = {"start_time": start, "end_time": end, "detail": detail}
    return {"jobid": jobid, "status": "Pass", "submitted_time": submitted, "attempts": [attempt]}


def test_philly_times_outside_the_trace_limits(tmp_path: Path) -> None:
    """A run of 7 years is a malformed row (countable); an arrival span of 80 years is not."""
    p = tmp_path / "log.json"
    day = "2017-10-01 00:"
    ok = _philly_job("ok", day + "00:00", day + "10:00", day + "50:00")
    long_run = _philly_job("long", "2010-01-01 00:00:00", "2010-01-01 00:00:00", day + "00:00")
    p.write_text(json.dumps([ok, long_run], indent=1))
    with pytest.raises(InputError) as e:
        convert("philly", [str(p)])
    # The second entry begins on line 21 of this indented dump; 2010-01 to 2017-10 is 7.75 y.
    assert str(e.value).startswith(f"{p}: line 21: long.attempts: run 2.4")
    assert "(limit duration_s)" in str(e.value)
    conv = convert("philly", [str(p)], ConvertOptions(skip_bad=True))
    assert [j.id for j in conv.jobs] == ["ok"]
    assert dict(conv.report.skipped) == {"malformed (--skip-bad)": 1}
    early = _philly_job("early", "1930-01-01 00:00:00", day + "00:00", day + "01:00")
    p.write_text(json.dumps([ok, early], indent=1))
    with pytest.raises(InputError) as e:
        convert("philly", [str(p)])
    # Sorted by arrival, "early" (1930) comes first, so "ok" (line 2) is 87 years later.
    assert str(e.value).startswith(f"{p}: line 2: arrival_s: 2.76912e+09 s after the first")
    assert "select a slice with --skip-jobs/--max-jobs" in str(e.value)
    assert len(convert("philly", [str(p)], ConvertOptions(skip_jobs=1)).jobs) == 1


# --------------------------------------------------------------------------- CLI


def test_cli_bad_input_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "t.csv"
    assert main(["trace", "convert", "--from", "alibaba-gpu-2023", BROKEN, "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"{BROKEN}: line 5: row: has 10 fields, header has 11"]
    assert not out.exists()
    assert (
        main(
            [
                "trace",
                "convert",
                "--from",
                "philly",
                PHILLY,
                "-o",
                str(out),
                "--cluster-out",
                str(tmp_path / "c.json"),
            ]
        )
        == 2
    )
    assert "--cluster-out" in capsys.readouterr().err
    assert (
        main(
            [
                "trace",
                "convert",
                "--from",
                "alibaba-gpu-2023",
                PODS,
                "-o",
                str(out),
                "--cluster-out",
                str(tmp_path / "c.json"),
            ]
        )
        == 2
    )
    assert (
        main(
            [
                "trace",
                "convert",
                "--from",
                "alibaba-gpu-2023",
                str(tmp_path / "nope.csv"),
                "-o",
                str(out),
            ]
        )
        == 2
    )
    assert "no such file" in capsys.readouterr().err


def test_cli_prints_the_row_accounting(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "t.csv"
    assert (
        main(
            ["trace", "convert", "--from", "alibaba-gpu-2023", BROKEN, "--skip-bad", "-o", str(out)]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert f"{BROKEN}: 14 rows: 4 converted, 10 skipped" in text
    assert "malformed (--skip-bad)" in text
    assert (
        main(["trace", "convert", "--from", "philly", PHILLY, "-o", str(out), "--split", "0,100,0"])
        == 0
    )
    assert {r["category"] for r in csv.DictReader(out.open())} == {"language"}


# --------------------------------------------------------------------------- the shipped trace


@pytest.mark.skipif(not SHIPPED.exists(), reason="shared Alibaba trace not present")
def test_shipped_alibaba_trace_converts(tmp_path: Path) -> None:
    pods = str(SHIPPED / "openb_pod_list_default.csv")
    nodes = str(SHIPPED / "openb_node_list_all_node.csv")
    conv = convert("alibaba-gpu-2023", [pods, nodes])
    rep = conv.report
    assert rep.rows == 8152
    _accounted(rep)
    assert dict(rep.skipped) == {
        "CPU-only (num_gpu 0; --cpu-only skip)": 1052,
        "never scheduled (no scheduled_time)": 897,
    }
    assert rep.converted == 6203
    assert conv.cluster is not None
    assert conv.cluster.total_gpus == 6212
    assert len(conv.cluster.servers) == 1213  # 1,523 nodes minus 310 without GPUs
    assert {s.gpu_type for s in conv.cluster.servers} == {
        "G2",
        "T4",
        "P100",
        "G3",
        "V100M16",
        "V100M32",
        "A10",
    }
    out = tmp_path / "t.csv"
    from synergy_opt.tracefile import write_trace

    write_trace(out, conv.jobs)
    assert len(read_trace(out, shipped_profiles())) == 6203
    json.dumps([j.model for j in conv.jobs])  # plain strings only


# --------------------------------------------------------------------------- variants


def test_share_no_allowed_server_can_feed_is_skipped(tmp_path: Path) -> None:
    """A P100-only task on a cluster whose P100 servers have 8 cores per GPU: the
    GPU-proportional share (from cluster totals) is 36 cores per GPU, so PROPORTIONAL
    could never run it and a simulation would never end."""
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(
        "sn,cpu_milli,memory_mib,gpu,model\na,104000,524288,2,T4\nb,16000,122880,2,P100\n"
    )
    pods = tmp_path / "pods.csv"
    header = Path(PODS).read_text().splitlines()[0]
    pods.write_text(
        header + "\n"
        "p-any,8000,16384,1,1000,,LS,Running,0,100,0\n"
        "p-p100,8000,16384,1,1000,P100,LS,Running,1,100,1\n"
        "p-t4,8000,16384,1,1000,T4,LS,Running,2,100,2\n"
    )
    conv = convert("alibaba-gpu-2023", [str(pods), str(nodes)])
    assert conv.cluster is not None and conv.cluster.fair_share(1)[0] == 30
    assert [j.id for j in conv.jobs] == ["p-any", "p-t4"]
    assert dict(conv.report.skipped) == {
        "its GPU-proportional share fits none of its allowed servers": 1
    }


def _variant(tmp_path: Path, name: str, keep: Callable[[int, list[str]], list[str] | None]) -> str:
    """A pod list in the shipped schema, derived row by row from the default one."""
    lines = (SHIPPED / "openb_pod_list_default.csv").read_text().splitlines()
    out = [lines[0]]
    for k, line in enumerate(lines[1:]):
        row = keep(k, line.split(","))
        if row is not None:
            out.append(",".join(row))
    path = tmp_path / f"openb_pod_list_{name}.csv"
    path.write_text("\n".join(out) + "\n")
    return str(path)


#: gpu_spec values as they appear in the upstream ``gpuspec`` variants.
SPECS = (
    "V100M16|V100M32",
    "T4",
    "G2",
    "P100",
    "G3",
    "G2|P100|T4|V100M16|V100M32",
    "P100|T4|V100M16|V100M32",
)


def _gpuspec(k: int, r: list[str]) -> list[str]:
    if r[3] != "0" and k % 3 == 0:
        r[5] = SPECS[(k // 3) % len(SPECS)]
    return r


def _multigpu(k: int, r: list[str]) -> list[str] | None:
    return r if int(r[3]) >= 2 or k % 20 == 0 else None


def _cpu_heavy(k: int, r: list[str]) -> list[str] | None:
    return r if r[3] == "0" or k % 4 == 0 else None


@pytest.mark.skipif(not SHIPPED.exists(), reason="shared Alibaba trace not present")
@pytest.mark.parametrize(
    ("name", "keep"), [("gpuspec", _gpuspec), ("multigpu", _multigpu), ("cpuheavy", _cpu_heavy)]
)
def test_variant_pod_lists_convert_and_simulate(
    tmp_path: Path, name: str, keep: Callable[[int, list[str]], list[str] | None]
) -> None:
    """Variants emphasising GPU-type constraints, multi-GPU or CPU-only tasks convert with
    no option changes, and every converted job finishes under PROPORTIONAL and TUNE on a
    2 % stratified sample of the real nodes (where the share does not fit every server)."""
    from synergy_opt.sim import SimConfig, simulate

    pods = _variant(tmp_path, name, keep)
    nodes = str(SHIPPED / "openb_node_list_all_node.csv")
    # Skip the 17 pods created months before the rest (they run for weeks).
    opts = ConvertOptions(nodes_fraction=0.02, skip_jobs=17, max_jobs=250)
    conv = convert("alibaba-gpu-2023", [pods, nodes], opts)
    assert conv.cluster is not None and len(conv.jobs) == 250
    if name == "gpuspec":
        assert sum(j.gpu_types is not None for j in conv.jobs) > 50
    if name == "multigpu":
        assert sum(j.gpus > 1 for j in conv.jobs) >= 10
    for mech in ("proportional", "tune"):
        cfg = SimConfig(conv.cluster, check_rounds=True)
        res = simulate(cfg, conv.jobs, mech, "fifo", profiles=shipped_profiles())
        assert all(r.finish_s is not None for r in res.jobs), mech
