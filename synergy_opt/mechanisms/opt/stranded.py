"""Jobs that no placement holds at their fair-share floor, passed over by ``opt`` and
``opt-exact`` as jobs whose GPUs do not fit are.

Under the cluster-wide rule (``"fair_share": "cluster"``) a job's floor is read at the
cluster's share, which can exceed every server the job fits on: three 3-GPU servers of 7
cores next to one 2-GPU server of 104 cores give a 3-GPU job a share of 34 cores, which no
3-GPU server holds, and spreading at a split penalty of 0.05 loses more than the job
gains.  No allocation that keeps the floors schedules such a job, so the super-machine
over a runnable set holding it has no solution, and ``opt`` used to fall back to TUNE,
which (placing by GPUs alone) may then schedule nothing at all where another job could
run (a fuzz of odd traces through ``simulate`` found it; tests/test_opt_stranded.py).

:func:`~synergy_opt.formulations.fast.stranded` decides it for one job alone, relaxing the
servers only (so a job it strands strands in every allocation); on rounds of at most two
servers it agrees with an enumeration of every placement (tests/test_opt_stranded.py).

Under the per-server rule no job strands: a job that fits whole on a server keeps its
floor with exactly that server's share (the floor is read there, in the slowest of its
usable types' matrices), and a job larger than every server keeps it spread with each
server's share (the split penalty is then part of the floor).  So the test runs only under
the cluster-wide rule, and only for jobs without per-type matrices (whose reference matrix
the test reads; typed rounds take ``opt``'s typed passes).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence

from synergy_opt.check import fair_share_floor
from synergy_opt.formulations.fast import stranded
from synergy_opt.mechanisms.packing import select_runnable
from synergy_opt.types import Allocation, Job, RoundInstance

log = logging.getLogger(__name__)

#: Per job class (its matrix, GPUs, split penalty, GPU types; the objects, kept alive here,
#: not their ids): stranded or not, on one cluster under one rule (the caller empties it
#: when either changes).
StrandMemo = dict[tuple[object, ...], bool]


def runnable_at_floors(
    inst: RoundInstance, runnable: Sequence[Job], memo: StrandMemo | None = None
) -> tuple[list[Job], list[Job]]:
    """(the runnable set without stranded jobs, the stranded jobs passed over).

    ``runnable`` is ``select_runnable(inst)``.  A stranded job is passed over and the
    selection re-run, so later jobs take its GPUs as they take those of a job whose GPUs
    do not fit; repeated until no selected job strands."""
    if inst.fair_share_mode != "cluster":
        return list(runnable), []
    memo = {} if memo is None else memo
    passed: dict[str, Job] = {}
    current = list(runnable)
    while True:
        new = [j for j in current if j.id not in passed and _strands(inst, j, memo)]
        if not new:
            return current, list(passed.values())
        passed.update((j.id, j) for j in new)
        current = select_runnable(inst, frozenset(passed))


def with_passed_over(
    out: Allocation, passed: Sequence[Job], level: int = logging.WARNING
) -> Allocation:
    """``out`` with the note (logged at ``level``) naming the jobs
    :func:`runnable_at_floors` passed over."""
    ids = ", ".join(j.id for j in passed)
    its, they = ("its", "it fits") if len(passed) == 1 else ("their", "they fit")
    note = (
        f"passed over {ids}: no placement holds {its} fair share under the cluster-wide "
        f"rule (the share exceeds every server {they} on, and spreading loses more)"
    )
    log.log(level, "%s on %s: %s", out.mechanism, out.instance, note)
    return dataclasses.replace(out, notes=(*out.notes, note))


def _strands(inst: RoundInstance, job: Job, memo: StrandMemo) -> bool:
    if job.sensitivity_by_type is not None:
        return False
    key = (job.sensitivity, job.gpus, job.split_penalty, job.gpu_types)
    got = memo.get(key)
    if got is None:
        got = memo[key] = stranded(inst, job, fair_share_floor(inst, job)[1])
    return got
