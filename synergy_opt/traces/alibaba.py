"""Alibaba GPU cluster trace 2023 (``openb_pod_list_*.csv``) -> job trace (docs/formats.md 5).

Built for the schema, not one file: every ``openb_pod_list_*`` variant (default, multi-GPU,
CPU-heavy, GPU-sharing, ``gpuspec``) has the columns ``name, cpu_milli, memory_mib, num_gpu,
gpu_milli, gpu_spec, qos, pod_phase, creation_time, deletion_time, scheduled_time``
(``gpu_spec``, ``qos`` and ``pod_phase`` may be absent or empty).  One pod -> one job:

- ``arrival_s`` = ``creation_time`` (shifted so the first kept job arrives at 0);
- ``duration_s`` = ``deletion_time - scheduled_time``: the time the pod held its resources,
  taken as its run time at the GPU-proportional share.  Pods without ``scheduled_time``
  never ran (``Pending`` ones were deleted while waiting) and are skipped.  Pods without
  ``deletion_time`` were still running when the trace was cut: ``unfinished="censor"``
  ends them at the trace's last timestamp (a lower bound on their run time), ``"skip"``
  drops them.  (In the shipped file every ``Running`` pod already carries the trace's end,
  12,902,960 s, as its deletion time: those are censored by the trace itself.)
  Pods with a zero run time are skipped;
- ``gpus`` = ``num_gpu``.  Pods asking for a fraction of one GPU (``gpu_milli`` < 1000) get
  one whole GPU (``gpu_sharing="whole"``) or are skipped (``"skip"``); Synergy does not
  share GPUs.  Pods with no GPU are skipped (``cpu_only="skip"``) or given one GPU
  (``"one-gpu"``);
- ``gpu_types`` = ``gpu_spec`` split at ``|`` (``V100M16|V100M32``), none when empty;
- ``model``/``category``: the seeded rule of :mod:`synergy_opt.traces.mapping`, by requested
  cores per GPU;
- extra columns keep the request for analysis: ``req_cpus`` (cores), ``req_mem_gib``,
  ``gpu_milli``, ``qos``, ``pod_phase``.

Given the node list too, jobs that no node can host (a ``gpu_spec`` naming only absent GPU
types, more GPUs of the allowed types than the cluster has, or a GPU-proportional share that
none of the allowed servers can feed, see :func:`proportional_placeable`) are skipped and
counted, so the trace always simulates on the cluster written beside it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from synergy_opt.errors import InputError
from synergy_opt.limits import (
    ALIBABA_GPU_MILLI,
    ALIBABA_GPUS,
    ALIBABA_MIB,
    ALIBABA_MILLI,
    ALIBABA_TIME_S,
    DURATION_S,
)
from synergy_opt.profiles import ProfileLibrary, shipped_profiles
from synergy_opt.tracefile import TraceJob
from synergy_opt.traces.base import (
    Conversion,
    ConvertOptions,
    Tally,
    TraceRowError,
    finish_jobs,
    is_empty,
    parse_number,
    read_csv,
    read_records,
)
from synergy_opt.traces.mapping import category_for_request, pick_model
from synergy_opt.traces.nodes import MIB_PER_GIB, is_node_header, nodes_to_cluster, read_nodes
from synergy_opt.types import MEM_EPS_GB, Cluster, Server

log = logging.getLogger(__name__)

POD_COLUMNS: tuple[str, ...] = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)
#: A whole GPU in ``gpu_milli`` units.
FULL_GPU_MILLI: int = 1000


@dataclass(frozen=True, slots=True)
class Pod:
    """One parsed pod row (times in seconds; ``None`` where the trace has no value)."""

    line: int
    name: str
    cpu_milli: float
    memory_mib: float
    num_gpu: int
    gpu_milli: int
    gpu_spec: tuple[str, ...] | None
    qos: str
    phase: str
    creation_s: float
    deletion_s: float | None
    scheduled_s: float | None


def _optional_time(path: str, line: int, col: str, text: str) -> float | None:
    return None if is_empty(text) else parse_number(path, line, col, text, ALIBABA_TIME_S)


def parse_pod(path: str, line: int, row: dict[str, str]) -> Pod:
    """One pod row; raises :class:`TraceRowError` naming the line and field."""
    name = row["name"]
    if is_empty(name):
        raise TraceRowError(path, line, "name", "must not be empty")
    cpu = parse_number(path, line, "cpu_milli", row["cpu_milli"], ALIBABA_MILLI)
    mem = parse_number(path, line, "memory_mib", row["memory_mib"], ALIBABA_MIB)
    gpus = int(parse_number(path, line, "num_gpu", row["num_gpu"], ALIBABA_GPUS))
    milli_text = row.get("gpu_milli", "")
    if is_empty(milli_text):
        milli = FULL_GPU_MILLI if gpus > 0 else 0
    else:
        milli = int(parse_number(path, line, "gpu_milli", milli_text, ALIBABA_GPU_MILLI))
        if milli > FULL_GPU_MILLI:
            raise TraceRowError(
                path, line, "gpu_milli", f"must be <= {FULL_GPU_MILLI}, got {milli_text!r}"
            )
    spec_text = row.get("gpu_spec", "")
    spec = None
    if not is_empty(spec_text):
        parts = tuple(t.strip() for t in spec_text.split("|"))
        if any(not t for t in parts):
            raise TraceRowError(path, line, "gpu_spec", f"empty GPU type in {spec_text!r}")
        spec = tuple(dict.fromkeys(parts))
    created = parse_number(path, line, "creation_time", row["creation_time"], ALIBABA_TIME_S)
    scheduled = _optional_time(path, line, "scheduled_time", row["scheduled_time"])
    deleted = _optional_time(path, line, "deletion_time", row["deletion_time"])
    if scheduled is not None and scheduled < created:
        raise TraceRowError(
            path, line, "scheduled_time", f"{scheduled:g} is before creation_time {created:g}"
        )
    if deleted is not None and deleted < created:
        raise TraceRowError(
            path, line, "deletion_time", f"{deleted:g} is before creation_time {created:g}"
        )
    if deleted is not None and scheduled is not None and deleted < scheduled:
        raise TraceRowError(
            path, line, "deletion_time", f"{deleted:g} is before scheduled_time {scheduled:g}"
        )
    return Pod(
        line,
        name,
        cpu,
        mem,
        gpus,
        milli,
        spec,
        row.get("qos", ""),
        row.get("pod_phase", ""),
        created,
        deleted,
        scheduled,
    )


def read_pods(path: str, tally: Tally, skip_bad: bool) -> list[Pod]:
    """Every well-formed pod of the file (malformed ones raise or are counted)."""
    return read_records(
        path,
        POD_COLUMNS,
        "an Alibaba GPU-2023 pod list",
        parse_pod,
        lambda p: p.name,
        "name",
        "pod name",
        tally,
        skip_bad,
    )


def _fmt(x: float) -> str:
    """Compact, deterministic decimal (``12``, ``3.152``, ``30.0234375``)."""
    return f"{x:.6f}".rstrip("0").rstrip(".") or "0"


def pod_to_job(
    pod: Pod, opts: ConvertOptions, tally: Tally, trace_end: float, profiles: ProfileLibrary
) -> TraceJob | None:
    """The job for ``pod``, or ``None`` after counting why it was skipped."""
    if opts.phases is not None and pod.phase not in opts.phases:
        tally.skip(f"pod_phase {pod.phase or '(empty)'} not in --phases")
        return None
    if pod.scheduled_s is None:
        tally.skip("never scheduled (no scheduled_time)")
        return None
    gpus = pod.num_gpu
    if gpus == 0:
        if opts.cpu_only == "skip":
            tally.skip("CPU-only (num_gpu 0; --cpu-only skip)")
            return None
        tally.map("CPU-only pod given 1 GPU (--cpu-only one-gpu)")
        gpus = 1
    elif gpus == 1 and pod.gpu_milli < FULL_GPU_MILLI:
        # gpu_milli only means a GPU share for single-GPU pods (the trace's README).
        if opts.gpu_sharing == "skip":
            tally.skip("GPU-sharing (gpu_milli < 1000; --gpu-sharing skip)")
            return None
        tally.map("GPU-sharing pod given 1 whole GPU (--gpu-sharing whole)")
    end = pod.deletion_s
    if end is None:
        if opts.unfinished == "skip":
            tally.skip("unfinished (no deletion_time; --unfinished skip)")
            return None
        tally.map("unfinished pod ended at the trace's last timestamp (--unfinished censor)")
        end = trace_end
    duration = end - pod.scheduled_s
    if duration <= 0:
        tally.skip("zero run time (deletion_time == scheduled_time)")
        return None
    if not DURATION_S.contains(duration):
        problem = f"runs {duration:g} s, more than {DURATION_S.high:g} (limit duration_s)"
        tally.bad(TraceRowError(tally.source, pod.line, "deletion_time", problem), opts.skip_bad)
        return None
    cats = category_for_request(pod.cpu_milli / 1000.0 / gpus)
    model = pick_model(profiles, cats, opts.seed, pod.name)
    extra = (
        ("req_cpus", _fmt(pod.cpu_milli / 1000.0)),
        ("req_mem_gib", _fmt(pod.memory_mib / MIB_PER_GIB)),
        ("gpu_milli", str(pod.gpu_milli)),
        ("qos", pod.qos),
        ("pod_phase", pod.phase),
    )
    return TraceJob(
        id=pod.name,
        arrival_s=pod.creation_s,
        gpus=gpus,
        model=model.name,
        duration_s=duration,
        category=model.category,
        gpu_types=pod.gpu_spec,
        extra=extra,
        source=f"{tally.source}: line {pod.line}",
    )


def fits_cluster(job: TraceJob, cluster: Cluster, tally: Tally) -> bool:
    """Whether some servers of ``cluster`` can host ``job`` at all (else count it)."""
    allowed = [s for s in cluster.servers if job.gpu_types is None or s.gpu_type in job.gpu_types]
    if job.gpu_types is not None and not any(s.gpus for s in allowed):
        tally.skip("gpu_spec names no GPU type of the cluster")
        return False
    if job.gpus > sum(s.gpus for s in allowed):
        tally.skip("more GPUs (of its allowed types) than the cluster has")
        return False
    if not proportional_placeable(job.gpus, allowed, cluster):
        tally.skip("its GPU-proportional share fits none of its allowed servers")
        return False
    return True


def proportional_placeable(gpus: int, allowed: Sequence[Server], cluster: Cluster) -> bool:
    """Whether the empty cluster could host ``gpus`` GPUs at the GPU-proportional share.

    The share comes from the cluster totals (docs/formats.md), so on a heterogeneous cluster it
    can exceed what the allowed servers have (a P100-only task: 16 cores for 2 GPUs, share
    17 cores per GPU).  PROPORTIONAL could then never run the job and a simulation would
    never end; such jobs are skipped and counted.  A job may be spread over servers, each
    taking as many GPUs as its cores and memory feed at the per-GPU share.
    """
    cpus, mem = cluster.fair_share(gpus)
    if any(s.gpus >= gpus and s.cpus >= cpus and s.mem_gb >= mem - MEM_EPS_GB for s in allowed):
        return True
    if gpus < 2:
        return False
    c1, m1 = cpus / gpus, mem / gpus
    feed = 0
    for s in allowed:
        k = s.gpus
        if c1 > 0:
            k = min(k, math.floor(s.cpus / c1 + 1e-9))
        if m1 > 0:
            k = min(k, math.floor((s.mem_gb + MEM_EPS_GB) / m1))
        feed += k
    return feed >= gpus


def split_inputs(inputs: Sequence[str]) -> tuple[str, str | None]:
    """(pod list, node list or None), told apart by their headers."""
    pods: list[str] = []
    nodes: list[str] = []
    for path in inputs:
        header, _ = read_csv(path)
        (nodes if is_node_header(header) else pods).append(path)
    if len(pods) != 1:
        raise InputError(
            f"alibaba-gpu-2023: expected exactly one pod list (openb_pod_list_*.csv) among the "
            f"inputs, got {len(pods)}" + (f": {', '.join(pods)}" if pods else "")
        )
    if len(nodes) > 1:
        raise InputError(
            f"alibaba-gpu-2023: expected at most one node list, got {', '.join(nodes)}"
        )
    return pods[0], (nodes[0] if nodes else None)


def convert(
    inputs: Sequence[str], opts: ConvertOptions, profiles: ProfileLibrary | None = None
) -> Conversion:
    """Convert a pod list (and optionally the node list) into jobs (and a cluster)."""
    profiles = profiles or shipped_profiles()
    pod_path, node_path = split_inputs(inputs)
    cluster = None
    cluster_notes: list[str] = []
    if node_path is not None:
        node_tally = Tally(node_path)
        nodes = read_nodes(node_path, node_tally, opts.skip_bad)
        cluster, cluster_notes = nodes_to_cluster(
            nodes, cpu_nodes=opts.cpu_nodes, fraction=opts.nodes_fraction, source=node_path
        )
        if node_tally.skipped:
            cluster_notes.insert(0, "; ".join(node_tally.report(len(nodes)).lines()))
    tally = Tally(pod_path)
    pods = read_pods(pod_path, tally, opts.skip_bad)
    if not pods and tally.rows == 0:
        raise InputError(f"{pod_path}: no pods in the file")
    trace_end = max(
        (t for p in pods for t in (p.creation_s, p.scheduled_s, p.deletion_s) if t is not None),
        default=0.0,
    )
    jobs: list[TraceJob] = []
    for pod in pods:
        job = pod_to_job(pod, opts, tally, trace_end, profiles)
        if job is None:
            continue
        if cluster is not None and not fits_cluster(job, cluster, tally):
            continue
        jobs.append(job)
    conv = finish_jobs(jobs, opts, tally)
    log.info("%s: %d of %d pods converted", pod_path, conv.report.converted, tally.rows)
    return replace(conv, cluster=cluster, cluster_notes=tuple(cluster_notes))
