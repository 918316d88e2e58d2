"""Alibaba GPU-2023 node list -> :class:`~synergy_opt.types.Cluster` (docs/formats.md section 1).

Columns ``sn, cpu_milli, memory_mib, gpu, model``.  Each node becomes one server named by its
``sn``:

- ``cpus`` = ``cpu_milli // 1000`` (whole cores; a fractional core cannot be handed out);
- ``mem_gb`` = ``memory_mib / 1024``, i.e. binary gigabytes (GiB).  The shipped profiles'
  memory axis is in the same unit, so a 500 GB server of the paper is 500 of these;
- ``gpu_type`` = ``model`` (``G2``, ``T4``, ``V100M16``...), none for GPU-less nodes.

Nodes without GPUs are **dropped by default**: docs/formats.md computes every job's
GPU-proportional share from the cluster totals C, M and G, and cores on a GPU-less server
would enlarge that share although no job (jobs sit on their GPUs' servers) can ever use
them.  ``cpu_nodes="keep"`` keeps them as ``gpus: 0`` servers for those who want the raw
cluster.  ``fraction`` keeps a stratified share of the nodes (per distinct configuration,
largest remainder, first nodes in file order) for smaller, busier simulations.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from synergy_opt.errors import InputError, ValidationError
from synergy_opt.limits import ALIBABA_GPUS, ALIBABA_MIB, ALIBABA_MILLI, SERVERS
from synergy_opt.traces.base import (
    Tally,
    TraceRowError,
    is_empty,
    parse_number,
    read_records,
)
from synergy_opt.types import Cluster, Server

NODE_COLUMNS: tuple[str, ...] = ("sn", "cpu_milli", "memory_mib", "gpu")
MIB_PER_GIB: float = 1024.0


@dataclass(frozen=True, slots=True)
class Node:
    """One row of the node list, already in server units."""

    name: str
    gpus: int
    cpus: int
    mem_gb: float
    gpu_type: str | None

    @property
    def config(self) -> tuple[int, int, float, str | None]:
        """What makes two nodes interchangeable (the stratum for ``fraction``)."""
        return (self.gpus, self.cpus, self.mem_gb, self.gpu_type)


def is_node_header(header: list[str]) -> bool:
    """Whether a CSV header looks like the node list (used to tell inputs apart)."""
    return "sn" in header and "gpu" in header


def parse_node(path: str, line: int, row: dict[str, str]) -> Node:
    """One node row; raises :class:`TraceRowError` naming the line and field."""
    name = row["sn"]
    if is_empty(name):
        raise TraceRowError(path, line, "sn", "must not be empty")
    cpu_milli = parse_number(path, line, "cpu_milli", row["cpu_milli"], ALIBABA_MILLI)
    mem_mib = parse_number(path, line, "memory_mib", row["memory_mib"], ALIBABA_MIB)
    gpus = int(parse_number(path, line, "gpu", row["gpu"], ALIBABA_GPUS))
    model = row.get("model", "")
    gpu_type = None if is_empty(model) else model
    return Node(name, gpus, int(cpu_milli // 1000), mem_mib / MIB_PER_GIB, gpu_type)


def read_nodes(path: str, tally: Tally, skip_bad: bool) -> list[Node]:
    """Every well-formed node of the file (malformed ones raise or are counted)."""
    return read_records(
        path,
        NODE_COLUMNS,
        "an Alibaba node list",
        parse_node,
        lambda n: n.name,
        "sn",
        "node name",
        tally,
        skip_bad,
    )


def stratified(nodes: list[Node], fraction: float) -> list[Node]:
    """Keep about ``fraction`` of the nodes with the same mix of configurations.

    Quotas per configuration by largest remainder (ties to the larger stratum, then first
    appearance), so the kept total is ``round(fraction * len(nodes))``, at least 1; within a
    configuration the first nodes in file order are kept.  Deterministic without a seed.
    """
    if fraction >= 1.0:
        return list(nodes)
    counts = Counter(n.config for n in nodes)
    order = list(dict.fromkeys(n.config for n in nodes))
    target = max(1, round(fraction * len(nodes)))
    exact = {c: counts[c] * fraction for c in order}
    quota = {c: math.floor(exact[c]) for c in order}
    short = target - sum(quota.values())
    rank = sorted(order, key=lambda c: (-(exact[c] - quota[c]), -counts[c], order.index(c)))
    for c in rank[:short]:
        quota[c] += 1
    taken: Counter[tuple[int, int, float, str | None]] = Counter()
    out = []
    for n in nodes:
        if taken[n.config] < quota[n.config]:
            taken[n.config] += 1
            out.append(n)
    return out


def nodes_to_cluster(
    nodes: list[Node], *, cpu_nodes: str = "drop", fraction: float = 1.0, source: str = "nodes"
) -> tuple[Cluster, list[str]]:
    """The cluster of ``nodes`` and notes saying what was dropped or sampled."""
    notes: list[str] = []
    kept = nodes
    if cpu_nodes == "drop":
        kept = [n for n in nodes if n.gpus > 0]
        if len(kept) < len(nodes):
            notes.append(
                f"dropped {len(nodes) - len(kept)} nodes without GPUs (--cpu-nodes keep keeps them)"
            )
    sampled = stratified(kept, fraction)
    if len(sampled) < len(kept):
        notes.append(
            f"kept {len(sampled)} of {len(kept)} nodes "
            f"(--nodes-fraction {fraction:g}, stratified by configuration)"
        )
    if len(sampled) > SERVERS.high:
        raise InputError(
            f"{source}: {len(sampled):_} nodes, more than {SERVERS.high:_} servers (limit "
            f"{SERVERS.name}, docs/limits.md); keep a share with --nodes-fraction"
        )
    try:
        cluster = Cluster(
            tuple(Server(n.name, n.gpus, n.cpus, n.mem_gb, n.gpu_type) for n in sampled)
        )
    except ValidationError as e:
        raise InputError(f"{source}: {e}") from None
    types: Counter[str] = Counter()
    for s in cluster.servers:
        types[s.gpu_type or "none"] += s.gpus
    notes.append(
        f"cluster: {len(cluster.servers)} servers, {cluster.total_gpus} GPUs, "
        f"{cluster.total_cpus} cores, {cluster.total_mem_gb:.0f} GiB; GPUs by type: "
        + ", ".join(f"{t} {g}" for t, g in types.most_common())
    )
    c, m = cluster.fair_share(1)
    notes.append(f"GPU-proportional share per GPU: {c} cores, {m:.2f} GiB (cluster totals)")
    return cluster, notes
