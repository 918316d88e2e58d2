"""Branch-and-price over server patterns: proving split-penalty rounds (beyond the paper).

The pattern master's LP (:mod:`~synergy_opt.formulations.patterns_fast`) bounds the
counting optimum within 1-2 % on 128-GPU split-penalty rounds, but it leaves the spread
decisions fractional: a slot (a spread job) half used, or used at a mix of points.  Those
few decisions are what the counting MIP's branching on 16 identical servers cannot close.
This module branches on them, nothing else:

1. slot (k, i) used or not (sum_q y[k, i, q] = 1 or 0); a slot set unused has no parts,
   so its parts leave the pricing problem;
2. for a used slot, its point: one point q (y[k, i, q] = 1) or every other point.

Each node's bound is the Lagrangian bound of column generation on the node's master
(valid whenever it stops); nodes are explored best bound first and pruned against the
incumbent.  A node whose spread decisions are all fixed is a *leaf*: the counting MIP
with those decisions fixed (``y`` bounds) settles it; it is far smaller to prove than the
whole round, because what remains is packing known jobs and known spread points onto
identical servers.  Every real allocation sits in exactly one leaf (slots relabelled in
class order), so the search is exact: when it ends, the incumbent is optimal.

Allocations come from dives in the master (:func:`_dive_to_leaf`, :func:`_pack_leaf`):
down the LP's lean to a leaf, then servers fixed to patterns one at a time while the
leaf's LP value holds, then the leaf MIP with those servers held.  Where 128-GPU
split-penalty rounds stalled (seeds 2-4) the leaf bound was right and the allocation
missing: seed 2's stalled leaf has LP value 59.6041, and HiGHS needs 50-63 s over the
whole round to find an allocation worth that.

Where a leaf's LP puts every job at one point and the jobs do not pack there, no LP of
this search sees it (the servers are fractional) and the leaf MIP, branching over
identical servers, does not settle it: the leaf's points are made the node's own
(:func:`_fix_points`) and the packing's arc flow (:mod:`.packing_flow`), whole servers
as paths, refutes the node where it can (split penalties 128 GPUs seed 9: five leaves,
0.2-0.4 s each, proven where no limit proved it before).

``formulations/patterns.md`` ("Branch-and-price") states the node master's extra pieces;
the rest is the pattern master and pricing problem unchanged.

This module is the search itself (the best-first loop, its time shares, its result); its
parts live beside it: :mod:`.branch_node` (a node's master, column generation, children),
:mod:`.branch_dive` (allocations from a master: dives, integer masters), :mod:`.branch_leaf`
(the leaf MIP and reduced-cost fixing) and :mod:`.branch_points` (a leaf's points, packed
or made the node's own for the arc flow).

Public API::

    branch_and_price(inst, jobs, *, time_limit, warm_start, incumbent) -> BranchResult
    Node, BranchResult        # frozen dataclasses
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from synergy_opt.check import check_allocation
from synergy_opt.formulations.branch_dive import (
    ROOT_IP_S,
    _dive_to_leaf,
    _master_values,
    _pack_leaf,
    _plain_root_ip,
    _restricted_ip,
)
from synergy_opt.formulations.branch_leaf import _leaf_matrix, _rc_caps, _reach
from synergy_opt.formulations.branch_node import (
    PRICING,
    Node,
    _children,
    _NodeLP,
    _Pricer,
    solve_node,
)
from synergy_opt.formulations.branch_points import (
    _fix_points,
    _leaf_points,
    _LeafPoints,
    _pack_free,
    _pack_points,
    _placements,
    _points_key,
    _PointsKey,
)
from synergy_opt.formulations.counting import Point, _model_data
from synergy_opt.formulations.counting_fast import (
    EXACT_REL_GAP,
    CountingMatrix,
    build_counting_matrix,
    placements_from_values,
    start_from_placements,
)
from synergy_opt.formulations.packing_data import PackingData, packing_data
from synergy_opt.formulations.packing_exact import MAX_COLUMNS, ExactVerdict, refute_exactly
from synergy_opt.formulations.packing_flow import UNKNOWN, refute_by_flow
from synergy_opt.formulations.patterns import (
    PatternCut,
)
from synergy_opt.formulations.patterns_fast import (
    _seed_patterns,
    pattern_search,
)
from synergy_opt.solve import SolveResult, TerminationStatus, solve_matrix
from synergy_opt.types import Job, PlacementPart, RoundInstance, build_allocation

if TYPE_CHECKING:  # OR-Tools is imported where a packing is solved
    from synergy_opt.formulations.packing_cp import AroundKey

log = logging.getLogger(__name__)

#: The first time slice of a leaf's counting MIP; an unsettled leaf goes back into the
#: queue (with the MIP's bound) and gets twice the time when it is next the best node, so
#: one hard leaf cannot hold up the leaf that holds the optimum.  Slices alternate between
#: the plain leaf MIP and the one with the node's pattern rows: neither is always faster
#: (split-penalty 128 seed 0's optimal leaf: 4.9 s plain, 1.6 s with the rows; seed 1's:
#: 0.5 s plain, 6.8 s with them).
LEAF_SLICE_S: float = 1.0
#: A leaf not settled by slices up to this long ends the search (unproven, with its bound).
MAX_LEAF_SLICE_S: float = 4.0
#: Where a known allocation seeded the pool, the root's second integer master, over the
#: patterns of column generation from nothing (:func:`_plain_root_ip`), gets at most this
#: share of the search's time.  The two pools lead HiGHS to different allocations:
#: split-penalty 128 seed 8's seeded master finds 78.76 in 1 s (its bound already the
#: optimum), the plain one the optimum, 82.8872, in 0.2 s after 1.5-2.2 s of pricing.
PLAIN_ROOT_SHARE: float = 0.3
#: The same at a leaf, before its counting MIP.
LEAF_IP_S: float = 0.5
#: Before that integer master and the leaf's dives, its counting MIP gets a short try of
#: this many seconds (0: none).  Where leaves are small it settles them at once: on a
#: random 4-server round of mixed shapes with split penalties
#: (``tests/test_split_master.py``, ``small_split_round(128)``) each leaf's MIP took
#: 0.01-0.02 s, while the integer master ran out its 0.5 s
#: and the dives another 0.5 s first, and 28 leaves took the search past 30 s.
LEAF_QUICK_S: float = 0.1
#: The root's dive (down to one leaf and its packing) gets at most this share of the
#: search's time; each leaf's packing (:func:`_pack_leaf`) at most ``LEAF_DIVE_SHARE``.
ROOT_DIVE_SHARE: float = 0.3
LEAF_DIVE_SHARE: float = 0.2
#: A leaf whose LP puts every job at one point (how many of each class at each point, and
#: each used slot's point, all integral) is packed at those points first
#: (:func:`~.branch_points._pack_points`), as ``opt``'s packing route does a
#: super-machine's: the pattern LP of that packing, then the whole jobs where its integral
#: solutions put them and the spread jobs around them.  A packing is worth the leaf's LP
#: value, its bound.
#: Split penalties 128 GPUs seed 2: the leaf that stalls (59.6041, the optimum; its MIP
#: and dives found 59.1041 in 60 s) packs at its LP's points at the first attempt, 0.14 s.
PACK_POINTS: bool = True
#: Where such a leaf does not pack there, its points are made the node's own
#: (:func:`_fix_points`: each one-member class's whole point in turn, "only this point"
#: against "any other") and the node that allows no other points is refuted, where it can
#: be, by the packing's arc flow (:mod:`~synergy_opt.formulations.packing_flow`), which sees
#: whole servers where the pattern LP does not: refuted, the node has no allocation.  Each
#: refutation gets at most ``FLOW_SHARE`` of the search's time.  The leaves that held
#: split-penalty 128-GPU seeds 3, 7, 9 and 17 open (``formulations/branch_price.md``) are
#: refuted in 5.6, 2.9, 0.27 and 5.8 s.
FLOW_REFUTE: bool = True
FLOW_SHARE: float = 0.25
#: A leaf with free classes (several whole jobs free to take more than one point) that the
#: arc flow does not refute is then packed by CP-SAT with their points its choice
#: (:func:`~.branch_points._pack_free`): an allocation above the incumbent where one
#: packs, and the relaxed model's bound on the leaf (refuted where it finds none).  The
#: flow drops memory, and the leaf MIP stalls on such packings: split penalties 128 GPUs
#: seed 17's leaf sat at 70.2143 through four MIP slices, 8 s, with no allocation.
FREE_PACK: bool = True
#: A leaf whose flow ran out of that share and whose MIP slices then stall (where the
#: search would end) is asked the flow once more, with all the time left: the counting
#: MIP that ``opt-exact`` runs after an unproven search rarely closes these rounds.  Split
#: penalties 128 GPUs seed 3's third leaf (59.0975): no verdict in its 15-s share, refuted
#: in 24 s.
FLOW_LATE: bool = True
#: A stalled leaf (where the search would end) whose points have no free class and which
#: the arc flow did not refute is asked the exact packing program
#: (:mod:`~synergy_opt.formulations.packing_exact`), with all the time left: it keeps each
#: spread job's cores and memory on its own servers, which neither the pattern LP nor the
#: flow (no memory) sees.  Split penalties 128 GPUs seed 319 (branch-and-price alone from
#: TUNE, 90 s): its leaf at the root's bound, 56.706, stalled at 19.8 s; refuted in 13.6 s,
#: then a second leaf in 2.8 s, and the search proves 56.466 in 49.3 s.
EXACT_LATE: bool = True
#: Where that program is small (at most ``EXACT_EARLY_COLUMNS`` columns), it is asked
#: sooner: when the leaf's first full MIP slice (``LEAF_SLICE_S``) does not settle it, with
#: at most ``EXACT_EARLY_SHARE`` of the search's time, instead of after the slices up to
#: ``MAX_LEAF_SLICE_S`` (7.1 s a leaf); an "unknown" leaves it to the late step.  Split
#: penalties 128 GPUs seed 319 at ``opt-exact``'s default 60 s: with the late step alone
#: proven in three runs of five (51.0-51.6 s); with this, in 38.5-43.7 s (three runs).
EXACT_EARLY: bool = True
EXACT_EARLY_COLUMNS: int = 1_000
EXACT_EARLY_SHARE: float = 0.25
#: The root's dive leaf, where its points do not pack (:func:`_pack_points`), is asked the
#: arc flow too (at most ``DIVE_FLOW_NODES`` branch-and-bound nodes, ``DIVE_FLOW_COLS``
#: columns and ``DIVE_FLOW_SHARE`` of the search's time: seed 7's dive leaf, 10 s, ran
#: 4.5 s to no verdict before the share): refuted, no allocation has those points,
#: so the two packings that look for one worth the leaf's bound (:func:`_reach`,
#: :func:`_pack_leaf`) are skipped and the search refutes its leaves.  Split penalties
#: 128 GPUs seed 9 (branch-and-price alone, 30 s from TUNE): they took 4.1 and 4.3 s
#: of the 15 s to the proof and found 53.939, below the optimum 54.3377 a leaf packs later;
#: without them the proof takes 6.1 s.
DEFER_DIVE: bool = True
DEFER_NODES: int = 200
#: With ``EAGER_POINTS`` the search finds its allocations sooner, so the root's wait is
#: longer than the 0.1 it was: split penalties 128 GPUs at 10 s, seeds 0-23 proved 20 at
#: 0.1 and 21 at 0.3 (seed 21, 7.5 s), unseen seeds 300-323 21 at 0.3 against 20 before.
DEFER_SHARE: float = 0.3
DEFER_PLAIN: bool = True
#: A node whose LP puts every job at one point is packed at those points as soon as its LP
#: is solved, not when it is next the best leaf (each set of points once): a packing there
#: is worth the LP's value, and found early it prunes what waits above it within the proof
#: gap.  Split penalties 128 GPUs seed 21: the node that packs the optimum 58.715 (in 0.06
#: s) was solved at 3.7 s and packed at 36 s, after three leaves at 58.7201 (within the
#: proof gap of 58.715) had each spent 8 s in dives and MIP slices.
#: The packing gets the search's deadline, as a leaf's does: it ends on its own (at most
#: ``POINT_ATTEMPTS`` integral contents, CP-SAT within ``POINT_SPREAD_S`` units on each).
#: Capped at 0.05 of the search's time it was cut short under short limits (0.375 s at 7.5
#: s; unpackable points took 0.4-0.5 s), and a cut packing was asked again, whole, when its
#: node came up as a leaf: seed 9 from TUNE at 7.5 s reached 21 nodes and no proof, at 30 s
#: it proved 54.3377 after 51 nodes in 7.4 s.  The root dive leaf's, the nodes' and the
#: leaves' asks share one record (:func:`branch_and_price`'s ``pack_once``): seed 9's dive
#: leaf points were asked again at a node.
EAGER_POINTS: bool = True
#: Each new incumbent starts the wait of the deferred root packings (``DEFER_NODES``,
#: ``DEFER_SHARE``) again: they only look for allocations, and a search that is finding
#: them needs them least.  Seed 21 with ``EAGER_POINTS``: the search packs the optimum at
#: 5.4 s, then the plain root master took 2.5 s (finding 58.525) before the proof.
DEFER_RESTART: bool = True

DIVE_FLOW: bool = True
DIVE_FLOW_NODES: int = 100
DIVE_FLOW_COLS: int = 20_000
DIVE_FLOW_SHARE: float = 0.15


@dataclass(frozen=True, slots=True)
class BranchResult:
    """The search's outcome: best allocation found, its value, and the proven bound.

    ``bound`` is the largest node bound still open when the search stopped (the incumbent's
    value when it finished: then ``proven``); ``placements`` is the best allocation known
    (the best warm start if the search found none better; empty without either).
    """

    objective: float | None
    bound: float | None
    placements: Mapping[str, tuple[PlacementPart, ...]]
    nodes: int
    leaves: int
    proven: bool
    runtime_s: float
    #: which step found ``placements``: "warm start", "master", "restricted IP", "dive"
    #: (the root's), "leaf IP", "leaf dive" (:func:`_pack_leaf`) or "leaf" (leaf MIP)
    source: str = "none"
    #: why the search ended, in words for a note (:data:`STOP_PROVEN` and the others): a
    #: user reading an unproven answer learns what holds the bound
    stop: str = ""
    #: nodes whose points the packing's arc flow (:data:`FLOW_REFUTE`) or the exact packing
    #: program (:data:`EXACT_LATE`) proved unpackable
    refuted: int = 0


#: Why a search ended (:attr:`BranchResult.stop`).
STOP_PROVEN = "every node settled"
STOP_TIME = "time limit"
STOP_HALTED = "stopped by the caller"
STOP_DIVE = "the root and its dive only"
#: A leaf's MIP slices ran out (:data:`MAX_LEAF_SLICE_S`).  Where its LP fixes every job's
#: point the bound is the value of those points and what is open is whether the jobs pack
#: there (``formulations/branch_price.md``, "What the open rounds' top leaves lack").
STOP_LEAF_POINTS = "a leaf stalls whose LP fixes every job's point; open: do the jobs pack there"
STOP_LEAF = "a leaf stalls whose LP mixes points"


def _points_refuted(
    inst: RoundInstance,
    jobs: Sequence[Job],
    data: Mapping[str, Any],
    lp: _NodeLP,
    deadline: float,
    threads: int | None,
) -> _PointsKey | None:
    """Whether the arc flow proves that the jobs do not pack at the points the node LP
    gives every job (:data:`DIVE_FLOW`): those points (job, point, spread), or ``None``
    (not refuted, or the LP does not fix them all)."""
    got = _leaf_points(data, lp)
    if got is None:
        return None
    verdict = refute_by_flow(
        packing_data(inst, jobs, *got),
        max(deadline - time.perf_counter(), 1e-3),
        threads=threads,
        max_cols=DIVE_FLOW_COLS,
        node_limit=DIVE_FLOW_NODES,
    )
    log.debug("dive leaf points: arc flow %s in %.2fs", verdict.status, verdict.seconds)
    return _points_key(*got) if verdict.refuted else None


def _with_rows(slice_s: float) -> bool:
    """Whether the leaf slice of this length uses the pattern rows (every second one)."""
    return round(math.log2(slice_s / LEAF_SLICE_S)) % 2 == 1


#: What :func:`branch_and_price` searches where a spread job's floor depends on its split
#: (mixed shapes under per-server fair shares, fractional cores per GPU), which the pattern
#: model does not state: "exact" (the default) declines such rounds; "high" searches the
#: restriction that keeps every slot point above the highest floor any split may give (its
#: allocations keep every floor; its bound bounds only the restriction, so none is
#: returned); "low" the relaxation above the lowest floor (its bound bounds every
#: allocation; its allocation is returned only where it passes the checker).
FLOOR_MODES: tuple[str, ...] = ("exact", "high", "low")


def floor_pair_applies(inst: RoundInstance, jobs: Sequence[Job]) -> bool:
    """Whether ``floors="high"`` runs first on this round (a job may spread at a penalty,
    no per-type matrices, some floor depends on the split), then the exact search where
    the pattern master states the split (:func:`~.patterns_fast.pattern_search` "split"),
    else ``"low"`` ("pair")."""
    return pattern_search(inst, jobs) in ("pair", "split")


def branch_and_price(
    inst: RoundInstance,
    jobs: Sequence[Job],
    *,
    time_limit: float,
    warm_start: Sequence[Mapping[str, Sequence[PlacementPart]]] = (),
    solver: str = "highs",
    threads: int | None = None,
    halt: Callable[[], bool] | None = None,
    plain_root: bool = True,
    dive_only: bool = False,
    floors: str = "exact",
    root_ip_nodes: int | None = None,
    pricing: str = PRICING,
    counting: CountingMatrix | None = None,
) -> BranchResult | None:
    """Prove (or improve) the best of ``warm_start`` by branching on spread decisions.

    Returns None where the pattern model is not stated (per-type matrices; a split whose
    share of cores is rounded down part by part, unless ``floors`` is "high" or "low",
    :data:`FLOOR_MODES`).  ``bound`` is valid
    whenever the search stops; ``proven`` when every node was settled within
    :data:`EXACT_REL_GAP` of the incumbent.  ``halt``, asked before each node, ends the
    search early (the caller has its answer elsewhere).  ``plain_root``: where a warm start
    seeded the pool, the root also runs :func:`_plain_root_ip`.  ``dive_only``: the root's
    column generation, its integer master over the root's patterns, its dive and the dive
    leaf packed at its points, nothing else (no plain root, no leaf MIPs, no branching): an
    allocation quickly, for ``opt``'s ``pattern-dive`` step; ``bound`` is then the root's.
    ``root_ip_nodes``: the root's integer master stops after that many nodes (instead of
    after :data:`~.branch_dive.ROOT_IP_S`: the same answer on every machine).
    ``pricing``: how pricing problems are solved
    (:data:`~synergy_opt.formulations.pricing_enum.PRICING_METHODS`); a dive prices a dozen
    times, where building the enumeration's tables can cost more than it saves.
    ``counting``: the counting model of these jobs with exact floors, built already (its
    data and matrix are used, with ``floors`` "exact", instead of building them again).
    """
    if floors not in FLOOR_MODES:
        raise ValueError(f"floors must be one of {', '.join(FLOOR_MODES)}, got {floors!r}")
    if any(j.sensitivity_by_type is not None for j in jobs):
        return None
    if floors == "exact":
        data = _model_data(inst, jobs) if counting is None else counting.data
        if not data["patterns"]:
            return None
    else:
        data = _model_data(inst, jobs, spread_floor=floors, exact_splits=False)
        if not data["feasible" if floors == "high" else "bound_valid"]:
            return None
    got = _branch_and_price(
        inst,
        jobs,
        data,
        time_limit=time_limit,
        warm_start=warm_start,
        solver=solver,
        threads=threads,
        halt=halt,
        plain_root=plain_root,
        dive_only=dive_only,
        root_ip_nodes=root_ip_nodes,
        pricing=pricing,
        cm=counting if floors == "exact" else None,
    )
    if floors == "high" and not data["bound_valid"]:
        return _restricted(got)  # the restriction's bound is not the round's
    if floors == "low" and not data["feasible"] and got.placements:
        if _misses_a_floor(inst, got.placements):  # the relaxation's allocation may
            return dataclasses.replace(got, objective=None, placements={}, proven=False)
    return got


def _restricted(got: BranchResult) -> BranchResult:
    """A search of the restriction: its allocations hold, its bound is no bound."""
    return dataclasses.replace(got, bound=None, proven=False)


def _misses_a_floor(inst: RoundInstance, placements: Mapping[str, Sequence[PlacementPart]]) -> bool:
    """Whether an allocation of the relaxation fails the checker with fair shares."""
    alloc = build_allocation(inst, "branch-and-price", placements)
    return bool(check_allocation(inst, alloc, fair_share=True))


def _branch_and_price(  # noqa: C901 - one best-first loop: nodes, leaves, incumbents
    inst: RoundInstance,
    jobs: Sequence[Job],
    data: Mapping[str, Any],
    *,
    time_limit: float,
    warm_start: Sequence[Mapping[str, Sequence[PlacementPart]]],
    solver: str,
    threads: int | None,
    halt: Callable[[], bool] | None,
    plain_root: bool,
    dive_only: bool,
    root_ip_nodes: int | None = None,
    pricing: str = PRICING,
    cm: CountingMatrix | None = None,
) -> BranchResult:
    """:func:`branch_and_price` over the counting model's ``data`` (``cm``: its matrix,
    where built already)."""
    t0 = time.perf_counter()
    deadline = t0 + time_limit
    cm = cm or build_counting_matrix(data)
    starts = [(p, start_from_placements(cm, p)) for p in warm_start]
    known = sorted(
        ((p, v) for p, v in starts if v is not None), key=lambda pv: -float(cm.matrix.cost @ pv[1])
    )
    vectors = [v for _, v in known]
    inc = float(cm.matrix.cost @ vectors[0]) if vectors else -math.inf
    inc_vec = vectors[0] if vectors else None
    found = {jid: tuple(p) for jid, p in known[0][0].items()} if known else {}
    source = "warm start" if known else "none"
    nodes = leaves = count = refuted = 0
    ended = STOP_TIME
    packed_at: set[frozenset[tuple[str, Point]]] = set()  # points _pack_points has tried
    around_refuted: set[AroundKey] = set()  # spread placements CP-SAT proved impossible
    unpacked: set[_PointsKey] = set()  # points the arc flow refuted at the root's dive leaf

    def tol() -> float:
        return EXACT_REL_GAP * max(1.0, abs(inc)) if inc > -math.inf else 0.0

    # the root dive's leaf, whose reach MIP and packings wait for the search (DEFER_DIVE)
    waiting: tuple[Node | None, _NodeLP | None, bool, int, float] | None = None

    def offer(placements: Mapping[str, Sequence[PlacementPart]], what: str) -> None:
        nonlocal inc, found, source, inc_vec, waiting
        vec = start_from_placements(cm, placements)
        if vec is not None and float(cm.matrix.cost @ vec) > inc + 1e-9:
            inc = float(cm.matrix.cost @ vec)
            inc_vec = vec
            found = {jid: tuple(p) for jid, p in placements.items()}
            source = what
            if waiting is not None and DEFER_RESTART:  # the search finds: let it go on
                waiting = (*waiting[:3], nodes, time.perf_counter())
            log.debug("branch-and-price: %s incumbent %.6g at node %d", what, inc, nodes)

    # leaves with free classes the arc flow has seen, and the incumbent it was given
    flowed_at: dict[Node, tuple[_LeafPoints, float]] = {}

    # leaves whose flow ran out of its share (FLOW_LATE)
    ran_out: dict[Node, _LeafPoints] = {}

    # leaves without free classes the arc flow has seen, and their points (EXACT_LATE)
    plain_at: dict[Node, tuple[PackingData, _LeafPoints]] = {}

    def refute(node: Node, fixed: _LeafPoints, seconds: float | None = None) -> bool:
        """Whether the arc flow proves, within ``seconds`` (default :data:`FLOW_SHARE` of
        the search's time), that no allocation of ``node`` (which allows only ``fixed``'s
        points, but for its free classes) beats the incumbent."""
        nonlocal refuted
        if not fixed.free and _points_key(fixed.points, fixed.spread) in unpacked:
            refuted += 1  # the root's dive leaf had these points (DIVE_FLOW)
            return True
        pdata, choices, floor = fixed.refutation(inst, jobs, data, inc + tol())
        if choices:
            flowed_at[node] = (fixed, inc)
        else:
            plain_at[node] = (pdata, fixed)
        share = FLOW_SHARE * time_limit if seconds is None else seconds
        left = min(share, deadline - time.perf_counter())
        verdict = refute_by_flow(
            pdata,
            left,
            threads=threads,
            choices=choices,
            floor=None if floor is None or floor == -math.inf else floor,
        )
        log.debug(
            "leaf: arc flow %s in %.2fs (%d free classes)",
            verdict.status,
            verdict.seconds,
            len(choices),
        )
        refuted += verdict.refuted
        if verdict.status == UNKNOWN:
            ran_out[node] = fixed
        return verdict.refuted

    def pack_once(lp: _NodeLP) -> dict[str, list[PlacementPart]] | None:
        """An allocation packed at the points ``lp`` gives every job (:data:`PACK_POINTS`),
        each set of points asked once: a packing that ended before the deadline, found or
        not, is not asked again (by its node's leaf, the leaf's children that fix these
        points, or a node with the same points).  Every ask gets the search's deadline
        (:data:`EAGER_POINTS`)."""
        got = _leaf_points(data, lp)
        at = None if got is None else frozenset(got[0].items())
        if at is None or at in packed_at:
            return None
        found_p = _pack_points(inst, jobs, data, lp, deadline, around_refuted)
        if found_p is not None or time.perf_counter() < deadline:
            packed_at.add(at)
        return found_p

    def exact_verdict(
        asked: tuple[PackingData, _LeafPoints],
        bound: float,
        seconds: float,
        limit: int = MAX_COLUMNS,
    ) -> ExactVerdict:
        """The exact packing program's verdict (:data:`EXACT_LATE`) within ``seconds`` and
        the search's deadline on a leaf at ``bound`` whose points ``asked`` holds:
        "infeasible" (no allocation there), "feasible" or "unknown" (also where it has
        more than ``limit`` columns, and then it is not built).  A feasible solution that
        packs at the real cores and GB is offered: an allocation at the leaf's points."""
        nonlocal refuted
        packing, fixed = asked
        left = min(seconds, deadline - time.perf_counter())
        exact = refute_exactly(packing, max(left, 1e-3), limit)
        log.debug(
            "leaf at %.6g: exact packing %s in %.2fs (%d columns, %s)",
            bound,
            exact.status,
            exact.seconds,
            exact.columns,
            "packed" if exact.packing is not None else "no packing read",
        )
        refuted += exact.refuted
        if exact.packing is not None:
            got = exact.packing
            offer(
                _placements(data, got.plan, got.resources, fixed.points, fixed.spread), "leaf exact"
            )
        return exact

    pricer = _Pricer(data, pricing)
    pool = _seed_patterns(data, cm, vectors)
    root_bound = math.inf
    # (-bound, tie, node, leaf time slice; 0 while the node's master is not solved)
    heap: list[tuple[float, int, Node, float]] = [(-math.inf, 0, Node(), 0.0)]
    cuts_of: dict[Node, tuple[PatternCut, ...]] = {}
    lp_of: dict[Node, _NodeLP] = {}

    def leaf_mip(node: Node, seconds: float, slice_s: float) -> SolveResult:
        """The leaf's counting MIP for ``seconds`` (the pattern rows as slice ``slice_s``
        asks), its allocation offered."""
        nonlocal leaves
        leaves += 1
        # reduced-cost fixing for allocations that beat the incumbent: the leaf unchanged
        fixing = _rc_caps(data, pricer, node, lp_of[node], target=inc + tol())
        res = solve_matrix(
            _leaf_matrix(
                cm,
                node,
                cuts_of[node] if _with_rows(slice_s) else (),
                caps=None if fixing is None else fixing.caps,
                floors=() if fixing is None else fixing.floors,
            ),
            solver,
            # the incumbent, where it lies in this leaf, starts HiGHS's improvement
            # heuristics (RINS and the like) from a packing the dive found
            start=inc_vec,
            time_limit=max(min(seconds, deadline - time.perf_counter()), 1e-3),
            rel_gap=EXACT_REL_GAP,
            threads=threads,
            guard=True,  # HiGHS can run past its limit: synergy_opt.deadline
        )
        log.debug(
            "leaf (slice %.1fs): %s %s bound %s in %.2fs",
            seconds,
            res.status,
            res.objective,
            res.dual_bound,
            res.runtime_s,
        )
        if res.x is not None:
            offer(placements_from_values(data, cm.values(res.x[: cm.matrix.num_cols])), "leaf")
        return res

    def dive_packings(leaf: Node | None, leaf_lp: _NodeLP | None, plain: bool) -> None:
        """The root's slow allocations: the plain integer master, then the dive leaf's
        reach MIP and packings."""
        if plain and root_bound > inc + tol():
            stop = min(deadline, time.perf_counter() + PLAIN_ROOT_SHARE * time_limit)
            found_p = _plain_root_ip(data, pricer, stop)
            if found_p is not None:
                offer(found_p, "plain restricted IP")
        if leaf is None or leaf_lp is None:
            return
        if leaf_lp.value > inc + tol():
            # first the leaf MIP over the servers an allocation worth the leaf's
            # bound can have (_reach); it may take more than the dive's share
            reach = _reach(cm, pricer, leaf, leaf_lp, deadline, solver, threads)
            if reach is not None and reach[0] is not None:
                offer(reach[0], "dive reach")
        if leaf_lp.value > inc + tol():
            stop = min(deadline, time.perf_counter() + ROOT_DIVE_SHARE * time_limit)
            for found_p in _pack_leaf(data, cm, pricer, pool, leaf, leaf_lp, stop, solver):
                offer(found_p, "dive")
                if leaf_lp.value <= inc + tol():
                    break

    while heap and time.perf_counter() < deadline and not (halt is not None and halt()):
        if waiting is not None and (
            nodes - waiting[3] >= DEFER_NODES
            or time.perf_counter() - waiting[4] >= DEFER_SHARE * time_limit
        ):
            dive_packings(*waiting[:3])
            waiting = None
            continue
        key, tie, node, slice_s = heapq.heappop(heap)
        bound = -key
        if bound <= inc + tol():
            continue
        if slice_s <= 0:
            nodes += 1
            lp = solve_node(data, pricer, pool, node, prune_at=inc + tol(), deadline=deadline)
            if lp is None or lp.bound is None:
                if time.perf_counter() >= deadline:
                    heapq.heappush(heap, (key, tie, node, 0.0))
                    break
                continue  # an infeasible node master: no allocation lives here
            bound = min(bound, lp.bound)
            if bound <= inc + tol():
                continue
            if not lp.converged:  # out of time (a pruned node stops early, above)
                heapq.heappush(heap, (-bound, tie, node, 0.0))
                break
            values = _master_values(data, lp)
            if values is not None:
                offer(placements_from_values(data, values), "master")
                if lp.bound - lp.value <= tol():
                    continue
            if EAGER_POINTS and PACK_POINTS and nodes > 1 and lp.value > inc + tol():
                found_p = pack_once(lp)
                if found_p is not None:
                    offer(found_p, "node points")
                    if bound <= inc + tol():
                        continue
            if nodes == 1:
                log.debug(
                    "branch-and-price: root bound %.6g (LP %.6g, %d patterns) after %.2fs",
                    bound,
                    lp.value,
                    len(pool),
                    time.perf_counter() - t0,
                )
                left = deadline - time.perf_counter()
                if root_ip_nodes is None:  # a node limit replaces the fixed time
                    left = min(ROOT_IP_S, left)
                ip = _restricted_ip(data, pool, node, left, root_ip_nodes) if left > 0 else None
                values = None if ip is None else _master_values(data, ip)
                if values is not None:
                    offer(placements_from_values(data, values), "restricted IP")
                root_bound = bound
                plain = bool(plain_root and not dive_only and vectors)
                if plain and not (DEFER_DIVE and DEFER_PLAIN) and bound > inc + tol():
                    stop = min(deadline, time.perf_counter() + PLAIN_ROOT_SHARE * time_limit)
                    found_p = _plain_root_ip(data, pricer, stop)
                    if found_p is not None:
                        offer(found_p, "plain restricted IP")
                    plain = False
                if bound <= inc + tol():
                    continue
                # a dive down to one leaf and its packing: an early incumbent to prune with
                share = 1.0 if dive_only else ROOT_DIVE_SHARE
                stop = min(deadline, time.perf_counter() + share * time_limit)
                leaf, leaf_lp = _dive_to_leaf(data, pricer, pool, node, deadline=stop)
                if (
                    PACK_POINTS
                    and leaf_lp is not None
                    and leaf_lp.converged
                    and leaf_lp.value > inc + tol()
                ):
                    found_p = pack_once(leaf_lp)
                    if found_p is not None:
                        offer(found_p, "dive points")
                    elif DIVE_FLOW and not dive_only:
                        stop = min(deadline, time.perf_counter() + DIVE_FLOW_SHARE * time_limit)
                        no = _points_refuted(inst, jobs, data, leaf_lp, stop, threads)
                        if no is not None:  # no allocation at its points: the search goes on
                            unpacked.add(no)
                            leaf_lp = None
                if dive_only:
                    heapq.heappush(heap, (-bound, tie, node, 0.0))  # open: its bound stands
                    ended = STOP_DIVE
                    break
                open_leaf = (
                    leaf_lp is not None and leaf_lp.converged and leaf_lp.value > inc + tol()
                )
                later = (leaf if open_leaf else None, leaf_lp if open_leaf else None, plain)
                if DEFER_DIVE and (plain or open_leaf):
                    waiting = (*later, nodes, time.perf_counter())
                else:
                    dive_packings(*later)
                if bound <= inc + tol():
                    continue
            kids = _children(data, node, lp)
            if kids is not None:
                for kid in kids:
                    count += 1
                    heapq.heappush(heap, (-bound, count, kid, 0.0))
                continue
            cuts_of[node] = pricer.cuts(lp.cuts)
            lp_of[node] = lp
            # back into the queue at its own bound: its MIP runs when it is the best node
            heapq.heappush(heap, (-bound, tie, node, LEAF_SLICE_S))
            continue
        if slice_s > MAX_LEAF_SLICE_S:
            # the best node is a leaf whose MIP stalls: the pattern LP stays loose there
            # (the counting MIP over the whole round, which opt-exact runs next, sometimes
            # closes such rounds); stop with the bound, unless the incumbent has risen
            # since the arc flow last saw this leaf's free classes (a higher floor)
            again = flowed_at.get(node)
            if again is not None and inc > again[1] + tol() and refute(node, again[0]):
                continue
            late = ran_out.pop(node, None)
            if FLOW_LATE and late is not None and refute(node, late, math.inf):
                continue
            packing = plain_at.pop(node, None)
            if EXACT_LATE and packing is not None:
                late_v = exact_verdict(packing, bound, math.inf)
                if late_v.refuted or bound <= inc + tol():  # none there, or packed: settled
                    continue
            heapq.heappush(heap, (key, tie, node, slice_s))
            log.debug("branch-and-price: a leaf stalls at bound %.6g", bound)
            ended = STOP_LEAF if _leaf_points(data, lp_of[node]) is None else STOP_LEAF_POINTS
            break
        fixed = _fix_points(data, node, lp_of[node]) if slice_s == LEAF_SLICE_S else None
        if slice_s == LEAF_SLICE_S and PACK_POINTS:
            # asked once: the children that fix these points ask it no more
            found_p = pack_once(lp_of[node])
            if found_p is not None:
                offer(found_p, "leaf points")
                if bound <= inc + tol():
                    continue
        if FLOW_REFUTE and fixed is not None:
            if fixed.kids:  # make the LP's points the node's own: it keeps its bound
                for kid in fixed.kids:
                    count += 1
                    heapq.heappush(heap, (-bound, count, kid, 0.0))
                continue
            if refute(node, fixed):
                continue
            if FREE_PACK and fixed.free:  # fixed only at a leaf's first slice
                verdict = _pack_free(inst, jobs, data, fixed, inc + tol(), deadline)
                if verdict.placements is not None:
                    offer(verdict.placements, "leaf free points")
                if verdict.bound is not None:
                    bound = min(bound, verdict.bound)
                if bound <= inc + tol():
                    continue
        if slice_s == LEAF_SLICE_S and LEAF_QUICK_S > 0:
            # a short try of the leaf MIP before the slower ways to an allocation below
            res = leaf_mip(node, LEAF_QUICK_S, slice_s)
            if res.status in (TerminationStatus.OPTIMAL, TerminationStatus.INFEASIBLE):
                continue
            if res.dual_bound is not None:
                bound = min(bound, res.dual_bound)
            if bound <= inc + tol():
                continue
        if slice_s == LEAF_SLICE_S:
            # first the integer master over the patterns so far with the leaf's decisions:
            # where the leaf's bound is an allocation, it is often made of known patterns
            left = min(LEAF_IP_S, deadline - time.perf_counter())
            ip = _restricted_ip(data, pool, node, left)
            values = None if ip is None else _master_values(data, ip)
            if values is not None:
                offer(placements_from_values(data, values), "leaf IP")
                if bound <= inc + tol():
                    continue
            if waiting is not None:  # the leaf's dive and MIP are next: the root dive's first
                dive_packings(*waiting[:3])
                waiting = None
                if bound <= inc + tol():
                    continue
            stop = min(deadline, time.perf_counter() + LEAF_DIVE_SHARE * time_limit)
            for found_p in _pack_leaf(data, cm, pricer, pool, node, lp_of[node], stop, solver):
                offer(found_p, "leaf dive")
                if bound <= inc + tol():
                    break
            if bound <= inc + tol():
                continue
        res = leaf_mip(node, slice_s, slice_s)
        if res.status not in (TerminationStatus.OPTIMAL, TerminationStatus.INFEASIBLE):
            if res.dual_bound is not None:
                bound = min(bound, res.dual_bound)
            packing = plain_at.get(node) if slice_s == LEAF_SLICE_S else None
            if EXACT_EARLY and packing is not None:
                # only a small program (EXACT_EARLY_COLUMNS): a larger one is not built here
                early = exact_verdict(
                    packing, bound, EXACT_EARLY_SHARE * time_limit, EXACT_EARLY_COLUMNS
                )
                if early.refuted or bound <= inc + tol():  # none there, or packed: settled
                    continue
                if early.status == "feasible":
                    plain_at.pop(node)  # settled: not asked again when the leaf stalls
            heapq.heappush(heap, (-bound, tie, node, 2 * slice_s))
    top = max([-k for k, *_ in heap if -k > inc + tol()], default=None)
    if top is None:
        ended = STOP_PROVEN
    elif ended == STOP_TIME and halt is not None and time.perf_counter() < deadline:
        ended = STOP_HALTED
    if top == math.inf:  # the root's master was not solved: no bound
        return BranchResult(
            None if inc == -math.inf else inc,
            None,
            found,
            nodes,
            leaves,
            False,
            time.perf_counter() - t0,
            source,
            ended,
            refuted,
        )
    runtime = time.perf_counter() - t0
    log.debug(
        "branch-and-price: %s bound %s after %d nodes, %d leaf solves, %d patterns, %.2fs (%s)",
        inc,
        top,
        nodes,
        leaves,
        len(pool),
        runtime,
        ended,
    )
    return BranchResult(
        None if inc == -math.inf else inc,
        None if inc == -math.inf and top is None else (inc if top is None else top),
        found,
        nodes,
        leaves,
        top is None,
        runtime,
        source,
        ended,
        refuted,
    )
