"""Per-job mutable state while a trace runs, and its preparation from a trace.

Each trace job becomes one immutable round-instance :class:`~synergy_opt.types.Job` built
once (its matrix is the model's per-GPU profile scaled by its GPU count) plus the few
numbers that change from round to round: work done and service attained.  The policies
read this state through :class:`synergy_opt.policies.JobView`.

**Work.** A trace's ``duration_s`` is the job's run time at its GPU-proportional share
(docs/formats.md section 5), so its work is ``duration_s x`` the job's fair-share
throughput at the *cluster-wide* share, floor(g*C/G) cores and g*M/G GB, whichever rule
the rounds keep.  Under ``"server"`` on a mixed cluster the share depends on where a job
lands, so it cannot define a trace's work; the cluster-wide share is the one share that
depends only on the job and the cluster (deterministic), equals every server's own share
on a homogeneous cluster (every calibration number is unchanged), and keeps the work of a
trace the same under both rules, so comparing the rules compares schedulers on one
workload.  (The smallest per-server share, the super-machine's, was tried: on the 1 %
Alibaba sample a G2 server's 48 GiB per GPU is below 7 of 12 profiles' 62.5 GB grid point,
so their jobs' work fell 10-24 fold and the trace no longer described the same jobs.)  A job
with per-type matrices is read in its slowest usable type's matrix, as for its floor.

**GPU types.** On a cluster whose servers name GPU types, each job gets per-type matrices
derived from its own matrix (read as the reference type's) and the model's measured type
speed (:func:`synergy_opt.gpu_types.derive_matrix`, docs/gpu-types.md) for every type with
measured speeds (``k80``, ``p100``; ``v100`` is the reference); other type names are read in
the reference matrix.
"""

from __future__ import annotations

from collections.abc import Sequence

from synergy_opt.errors import InputError, ValidationError
from synergy_opt.gpu_types import (
    REFERENCE_GPU_TYPE,
    derive_matrix,
    shipped_gavel_table,
    type_speed,
)
from synergy_opt.profiles import ProfileLibrary
from synergy_opt.sim.config import SimConfig
from synergy_opt.tracefile import TraceJob
from synergy_opt.types import Job, RoundInstance, ThroughputMatrix

#: The share a trace's ``duration_s`` is measured at (module docstring): cluster-wide.
WORK_FAIR_SHARE_RULE = "cluster"


class JobState:
    """A job in the simulator: static facts plus progress (mutable, engine-private)."""

    __slots__ = (
        "index",
        "trace",
        "job",
        "arrival_s",
        "duration_s",
        "gpus",
        "fair_tp",
        "work",
        "done",
        "attained_gpu_s",
        "attained_dominant_s",
        "start_s",
        "finish_s",
        "last_placement",
        "last_round",
        "rounds_run",
        "iter_s",
    )

    def __init__(
        self, index: int, trace: TraceJob, job: Job, fair_tp: float, iter_s: float = 1.0
    ) -> None:
        self.index = index
        self.trace = trace
        self.job = job
        self.arrival_s = trace.arrival_s
        self.duration_s = trace.duration_s
        self.gpus = trace.gpus
        self.fair_tp = fair_tp
        #: Work in throughput-seconds: at fair share the job runs exactly ``duration_s``.
        self.work = trace.duration_s * fair_tp
        self.done = 0.0
        self.attained_gpu_s = 0.0
        self.attained_dominant_s = 0.0
        self.start_s: float | None = None
        self.finish_s: float | None = None
        self.last_placement: object = None
        self.last_round = -2
        self.rounds_run = 0
        #: One training iteration at the GPU-proportional share, seconds (whole-iteration
        #: progress; the model profile's ``iter_time_s_at_fair_share`` x ``time_scale``).
        self.iter_s = iter_s

    @property
    def remaining_fair_s(self) -> float:
        """Seconds of work left at the GPU-proportional speed."""
        return max(0.0, self.work - self.done) / self.fair_tp


def scale_trace(trace: Sequence[TraceJob], config: SimConfig) -> list[TraceJob]:
    """Apply ``max_jobs`` (first arrivals) and ``time_scale`` (arrivals and durations)."""
    jobs = sorted(trace, key=lambda j: j.arrival_s)  # stable: file order breaks ties
    if config.max_jobs is not None:
        jobs = jobs[: config.max_jobs]
    k = config.time_scale
    if k != 1.0:
        from dataclasses import replace

        jobs = [replace(j, arrival_s=j.arrival_s * k, duration_s=j.duration_s * k) for j in jobs]
    return jobs


def prepare_jobs(
    config: SimConfig, trace: Sequence[TraceJob], profiles: ProfileLibrary
) -> list[JobState]:
    """Build every job's state once; bad jobs raise :class:`InputError` naming the job."""
    jobs = scale_trace(trace, config)
    if not jobs:
        raise InputError("trace: no jobs to simulate")
    matrices: dict[tuple[str, int], ThroughputMatrix] = {}
    canonical: dict[ThroughputMatrix, ThroughputMatrix] = {}
    types = cluster_gpu_types(config)
    by_type: dict[tuple[str, int], TypedMatrices | None] = {}
    built: list[Job] = []
    for j in jobs:
        key = (j.model, j.gpus)
        m = matrices.get(key)
        if m is None:
            try:
                prof = profiles.get(j.model)
            except KeyError as e:
                raise InputError(f"trace: job {j.id}: model: {e.args[0]}") from None
            m = config.semantics.job_matrix(prof, j.gpus, config.cluster)
            # One object per distinct matrix (several models share identical ones), so the
            # mechanisms' per-matrix caches hit by identity instead of comparing values.
            m = matrices[key] = canonical.setdefault(m, m)
            prof = profiles.get(j.model)
            by_type[key] = _typed(m, prof.name, prof.category, types, canonical)
        category = j.category if j.category is not None else profiles.get(j.model).category
        try:
            built.append(
                Job(
                    j.id,
                    j.gpus,
                    m,
                    j.model,
                    category,
                    j.split_penalty,
                    j.gpu_types,
                    sensitivity_by_type=by_type[key],
                )
            )
        except ValidationError as e:
            raise InputError(f"trace: job {j.id}: {e}") from None
    try:
        # One validation of the whole population (ids, GPU demand vs cluster and GPU
        # types), so no round can fail later on a job that was never runnable.
        whole = RoundInstance("trace", config.cluster, tuple(built), WORK_FAIR_SHARE_RULE)
    except ValidationError as e:
        raise InputError(f"trace: {e}") from None
    states: list[JobState] = []
    for k, (tj, job) in enumerate(zip(jobs, built, strict=True)):
        fair_tp = whole.fair_share_throughput(job)
        if fair_tp <= 0:
            raise InputError(
                f"trace: job {tj.id}: model {tj.model} has no throughput at its GPU-proportional "
                "share on this cluster, so its work (duration x fair-share throughput) is undefined"
            )
        iter_s = profiles.get(tj.model).iter_time_s_at_fair_share * config.time_scale
        states.append(JobState(k, tj, job, fair_tp, iter_s))
    if config.window is not None and config.window[1] > len(states):
        raise InputError(
            f"window: {config.window[0]}:{config.window[1]} needs {config.window[1]} jobs, "
            f"the trace has {len(states)}"
        )
    return states


#: ``Job.sensitivity_by_type``: (GPU type, matrix) pairs.
TypedMatrices = tuple[tuple[str, ThroughputMatrix], ...]


def cluster_gpu_types(config: SimConfig) -> tuple[str, ...]:
    """The GPU types of the cluster's GPU servers, in cluster order (empty: untyped)."""
    return tuple(
        dict.fromkeys(
            s.gpu_type for s in config.cluster.servers if s.gpus > 0 and s.gpu_type is not None
        )
    )


def _typed(
    matrix: ThroughputMatrix,
    model: str,
    category: str,
    types: Sequence[str],
    canonical: dict[ThroughputMatrix, ThroughputMatrix],
) -> TypedMatrices | None:
    """Per-type matrices of a job whose reference-type matrix is ``matrix`` (``None``: none).

    A type without measured speeds (not in Gavel's table, e.g. the Alibaba cluster's
    ``G2`` or ``T4``) gets no matrix: the job is read there in its reference matrix, as
    docs/formats.md section 1 says for any type a job does not list.
    """
    out = []
    for t in types:
        if t == REFERENCE_GPU_TYPE or t not in shipped_gavel_table().gpu_types:
            continue
        w = derive_matrix(matrix, type_speed(model, category, t).speed)
        out.append((t, canonical.setdefault(w, w)))
    return tuple(out) or None
