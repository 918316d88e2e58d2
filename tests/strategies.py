"""Hypothesis strategies that build *valid* round instances.

Small by design (2-6 jobs, 1-3 servers) so that exact models stay cheap; matrices are
either random (possibly non-monotone, zeros allowed) or taken from the shipped profiles.
"""

from __future__ import annotations

from hypothesis import strategies as st

from synergy_opt.profiles import shipped_profiles
from synergy_opt.types import Cluster, Job, RoundInstance, Server, ThroughputMatrix


@st.composite
def matrices(draw: st.DrawFn, max_cpus: int = 32, max_mem: float = 400.0) -> ThroughputMatrix:
    """A random grid: ascending cores and memory, throughputs in [0, 3]."""
    cpus = sorted(draw(st.sets(st.integers(1, max_cpus), min_size=1, max_size=5)))
    mem = sorted(draw(st.sets(st.integers(1, int(max_mem)), min_size=1, max_size=4)))
    mem_f = [m / 2 for m in mem]  # halves: exercise non-integer memory
    monotone = draw(st.booleans())
    rows = []
    for _ in cpus:
        rows.append(
            [
                draw(
                    st.floats(0, 3, allow_nan=False, allow_infinity=False).map(
                        lambda x: round(x, 3)
                    )
                )
                for _ in mem_f
            ]
        )
    if monotone:  # cumulative maxima make W non-decreasing in both axes, as real profiles are
        for i in range(len(rows)):
            for k in range(len(mem_f)):
                best = rows[i][k]
                if i:
                    best = max(best, rows[i - 1][k])
                if k:
                    best = max(best, rows[i][k - 1])
                rows[i][k] = best
    return ThroughputMatrix.from_lists(cpus, mem_f, rows)


@st.composite
def clusters(
    draw: st.DrawFn, max_servers: int = 3, homogeneous: bool | None = None, typed: bool = False
) -> Cluster:
    """1-3 servers; homogeneous ones share one shape (the paper's setting)."""
    n = draw(st.integers(1, max_servers))
    homo = draw(st.booleans()) if homogeneous is None else homogeneous
    types = ["a100", "v100"]

    def one(i: int) -> Server:
        return Server(
            f"s{i}",
            draw(st.integers(1, 8)),
            draw(st.integers(1, 32)),
            float(draw(st.integers(10, 500))),
            draw(st.sampled_from(types)) if typed else None,
        )

    if homo:
        s = one(0)
        return Cluster(
            tuple(Server(f"s{i}", s.gpus, s.cpus, s.mem_gb, s.gpu_type) for i in range(n))
        )
    return Cluster(tuple(one(i) for i in range(n)))


@st.composite
def round_instances(
    draw: st.DrawFn,
    min_jobs: int = 2,
    max_jobs: int = 6,
    max_servers: int = 3,
    homogeneous: bool | None = None,
    typed: bool = False,
    penalties: bool = True,
) -> RoundInstance:
    """A valid round: every job fits the cluster's GPUs; matrices random or shipped."""
    cluster = draw(clusters(max_servers=max_servers, homogeneous=homogeneous, typed=typed))
    lib = shipped_profiles()
    n = draw(st.integers(min_jobs, max_jobs))
    jobs = []
    for k in range(n):
        gpu_types = None
        usable = cluster.total_gpus
        if typed and draw(st.booleans()):
            t = draw(st.sampled_from([s.gpu_type for s in cluster.servers]))
            gpu_types = (t,)
            usable = sum(s.gpus for s in cluster.servers if s.gpu_type == t)
        g = draw(st.integers(1, min(usable, 8)))
        if draw(st.booleans()):
            prof = lib.get(draw(st.sampled_from(lib.names())))
            w = prof.matrix(g)
            model = prof.name
        else:
            w = draw(matrices())
            model = None
        pen = draw(st.sampled_from([1.0, 1.0, 0.8])) if penalties else 1.0
        jobs.append(Job(f"j{k}", g, w, model, None, pen, gpu_types))
    return RoundInstance("hyp", cluster, tuple(jobs))
