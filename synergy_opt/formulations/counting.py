"""The counting model (beyond the paper): the exact joint optimum, built to scale.

The joint model (:mod:`~synergy_opt.formulations.joint`) has one set of variables per job
and server, so identical jobs and identical servers make it huge and very symmetric.  This
model states the same optimum over what rounds really have, many copies of few things:

* **Job classes** k (same matrix, GPUs, split penalty, GPU types, hence the same floor) with
  n_k members.  A whole job on one server is counted, not named: integer x[s, k, p] is how
  many class-k jobs run on server s at grid point p.  Only useful points (meeting the
  fair-share floor, not dominated; :func:`~synergy_opt.formulations.fast.useful_points`)
  that fit the server get a column, so (5) needs no row.
* **Spread jobs.**  A job of >= 2 GPUs may span servers (one larger than every server it may
  use must).  Each such class gets n_k *spread slots* with the joint model's per-job
  variables: a point y, whole GPUs a, a use flag u, whole cores cp and GB mp per server;
  its throughput is W times ``split_penalty``, and its points keep the checker's floor
  (:func:`synergy_opt.check.fair_share_floor`) after the penalty.  A slot that is used
  spans >= 2 servers (a single-server job is a count in x).  With per-GPU-type matrices a
  slot's points come from several spread variants, each allowed only its variant's servers
  (``cnt_part_in_variant``, ``cnt_variant_*``).
* **Split-dependent floors.**  Under the ``"server"`` rule on a mixed-shape cluster a spread
  job's floor depends on how many of its GPUs sit in each share class (same cores and GB
  per GPU): a split variable ``v`` per realisable split ties the parts to it
  (``cnt_split_gpus``) and the point to its floor (``cnt_split_floor``), exactly.
* **Per-server rows** (2), (3) and GPUs; the class cover (4) ``sum x + sum y = n_k``.
* **Symmetry.**  Slots of a class are used in order, and among identical servers
  (same GPUs, cores, memory, GPU type) the consolidated throughput never increases along
  the server order: any solution can be permuted into that form, so no optimum is lost.

``_model_data`` is pure data (no Pyomo) shared with the matrix fast path
(:mod:`~synergy_opt.formulations.counting_fast`), which builds the same columns and rows
(names included) with numpy; tests prove both optima equal.  ``formulations/counting.md``
states the model equation by equation under these names.

Public API (used by ``opt-exact`` and by ``opt`` for bounds)::

    counting_data(inst, jobs) -> dict                    # == _model_data
    build_counting(inst, jobs, relax=False) -> pyo.ConcreteModel
    synergy_opt.formulations.counting_fast.solve_counting(...) -> CountingResult
    synergy_opt.formulations.counting_fast.counting_bound(...) -> float
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from synergy_opt.check import fair_share_floor, forced_split_factor
from synergy_opt.formulations.fast import class_key, useful_points
from synergy_opt.types import (
    MEM_EPS_GB,
    THROUGHPUT_EPS,
    Job,
    PlacementPart,
    RoundInstance,
    Server,
    ThroughputMatrix,
)

if TYPE_CHECKING:  # Pyomo is imported only when a model is built: the fast path skips it
    import pyomo.environ as pyo

Point = tuple[int, float, float]  # (cores, GB, credited throughput)


def _whole_floor(inst: RoundInstance, job: Job, server: Server) -> float:
    """The fair-share throughput a job must keep when it runs whole on ``server``.

    The stricter of the round's and the checker's reading (they agree by construction; the
    maximum keeps the model safe should one of them change): under the ``"server"`` rule on a
    mixed-shape cluster it depends on the server, else it is the cluster-wide value.
    """
    part = (PlacementPart(server.name, job.gpus, 0, 0.0),)
    return max(inst.fair_share_throughput_on(job, part), fair_share_floor(inst, job, part)[0])


def _spread_floor(inst: RoundInstance, job: Job) -> tuple[float, float]:
    """(lowest, highest) floor a spread job may face, its forced-spread penalty included.

    Cluster-wide shares: both are the job's fair-share throughput (times its penalty when it
    must spread; docs/formats.md).  Per-server shares depend on how its GPUs split over servers of
    different shapes: between g * min floor(C_s/G_s) and g * max C_s/G_s cores, and
    g * min M_s/G_s and g * max M_s/G_s GB.  Over that box the floor look-up takes every
    value of an index rectangle of each usable matrix: its minimum no split goes below (the
    relaxation), its maximum no split exceeds (the restriction).
    """
    pen = forced_split_factor(inst, job)
    if not inst.per_server_shares:
        fair = max(inst.fair_share_throughput(job), fair_share_floor(inst, job)[0])
        return fair * pen, fair * pen
    usable = [s for s in inst.cluster.servers if s.gpus > 0 and job.may_use(s)]
    g = job.gpus
    c_lo = g * min(s.cpus // s.gpus for s in usable)
    c_hi = (g * max(s.cpus for s in usable)) // min(s.gpus for s in usable)
    m_lo = g * min(s.mem_gb / s.gpus for s in usable)
    m_hi = g * max(s.mem_gb / s.gpus for s in usable)
    values = []
    for mat in inst.usable_matrices(job):
        cs = [c for c in mat.cpus if c_lo < c <= c_hi]
        ms = [m for m in mat.mem_gb if m_lo + MEM_EPS_GB < m <= m_hi + MEM_EPS_GB]
        values += [mat.lookup(c, m) for c in [c_lo, *cs] for m in [m_lo, *ms]]
    return min(values) * pen, max(values) * pen


def _spread_variants(
    job: Job, allowed: Sequence[int], servers: Sequence[Server]
) -> list[tuple[ThroughputMatrix, tuple[int, ...]]]:
    """(matrix, servers) of each spread variant of ``job``: exact for any number of types.

    The checker values a job spread over servers of GPU types T at min over T of W_t (the
    floor look-up of each, times the penalty).  Every set T of the job's distinct matrices
    gives the value V_T = that minimum; its *closure* adds every type whose matrix is >= V_T
    everywhere, which leaves V_T unchanged.  One variant per distinct closure U (its
    servers: those of U's types; its matrix: V_U) is then exact both ways:

    * a job spread over exactly the types T runs in the variant closure(T) at V_T, its
      real value (nothing real is lost);
    * a job of variant U spread over any T' within U really earns V_T' >= V_U (no model
      value exceeds the real one).

    Types with ordered matrices (a faster GPU is faster everywhere, as the derived per-type
    profiles are) give one variant per type, {fastest}, {two fastest}, ...; variants with
    fewer than two servers are left out (a job there cannot spread).  Matrices on different
    grids are compared on the union grid, where each one's look-up equals its own.
    """
    by_matrix: dict[ThroughputMatrix, list[int]] = {}
    for s in allowed:
        by_matrix.setdefault(job.matrix_for(servers[s].gpu_type), []).append(s)
    mats = list(by_matrix)
    if len(mats) == 1:
        ss = tuple(by_matrix[mats[0]])
        return [(mats[0], ss)] if len(ss) >= 2 else []
    cpus = sorted({c for w in mats for c in w.cpus})
    mem = sorted({m for w in mats for m in w.mem_gb})
    grid = [tuple(w.lookup(c, m) for c in cpus for m in mem) for w in mats]
    closures: dict[frozenset[int], tuple[float, ...]] = {}
    for size in range(1, len(mats) + 1):
        for combo in itertools.combinations(range(len(mats)), size):
            low = tuple(min(v) for v in zip(*(grid[i] for i in combo), strict=True))
            closed = frozenset(
                i
                for i in range(len(mats))
                if all(a >= b for a, b in zip(grid[i], low, strict=True))
            )
            closures.setdefault(closed, low)
    out = []
    for closed, low in closures.items():
        ss = tuple(s for s in allowed if any(s in by_matrix[mats[i]] for i in closed))
        if len(ss) < 2:
            continue
        if len(closed) == 1:
            out.append((mats[next(iter(closed))], ss))
            continue
        rows = [low[r * len(mem) : (r + 1) * len(mem)] for r in range(len(cpus))]
        out.append((ThroughputMatrix.from_lists(cpus, mem, rows), ss))
    return out


def _slot_menu(
    job: Job, allowed: Sequence[int], servers: Sequence[Server], required: float
) -> tuple[tuple[Point, ...], tuple[tuple[int, ...], ...]]:
    """The points a spread slot of ``job`` may choose, each with the servers it may use.

    One slot serves every spread variant (:func:`_spread_variants`): its points are the
    variants' useful points (value times the penalty, keeping ``required``) in variant
    order, each with its variant's servers, so choosing a point chooses the variant.  A
    point is left out when another point of a variant with a superset of its servers has
    at most its cores and memory and at least its value (the same swap argument as for
    dominated points).  One variant (every untyped class) gives exactly its useful points.
    """
    pen = job.split_penalty
    menu: list[tuple[Point, tuple[int, ...]]] = []
    for w, ss in _spread_variants(job, allowed, servers):
        menu += [((c, m, v * pen), ss) for c, m, v in useful_points(w, required / pen)]

    def dominates(r: int, q: int) -> bool:
        (qt, ts), (pt, ss) = menu[r], menu[q]
        covers = set(ss) <= set(ts) and qt[0] <= pt[0] and qt[1] <= pt[1] and qt[2] >= pt[2]
        # Exactly equal entries: the first one stays.
        return covers and (r < q or set(ss) != set(ts) or qt != pt)

    keep = [
        menu[q]
        for q in range(len(menu))
        if not any(dominates(r, q) for r in range(len(menu)) if r != q)
    ]
    return tuple(pt for pt, _ in keep), tuple(ss for _, ss in keep)


SplitFloor = tuple[tuple[int, ...], float]  # (GPUs per share class, required throughput)


def _share_classes(servers: Sequence[Server], ss: Sequence[int]) -> tuple[tuple[int, ...], ...]:
    """Servers of ``ss`` grouped by their GPU-proportional share per GPU (cores, GB).

    Under the ``"server"`` rule q GPUs on s bring floor(q C_s / G_s) cores and q M_s / G_s
    GB to a job's share.  With whole cores per GPU that is linear in q, so a spread job's
    share is fixed by how many of its GPUs sit in each class, whatever the servers; where
    C_s / G_s is fractional each part is rounded down on its own, and the share depends
    on the parts too (:func:`_split_floors` then carries the rounded-down cores).  Classes
    are keyed by the exact ratio, so 10 cores on 4 GPUs and 20 on 8 are one class.
    """
    by: dict[tuple[Fraction, float], list[int]] = {}
    for s in ss:
        srv = servers[s]
        if srv.gpus < 1:
            continue
        by.setdefault((Fraction(srv.cpus, srv.gpus), srv.mem_gb / srv.gpus), []).append(s)
    return tuple(tuple(v) for v in by.values())


def fractional_share(server: Server) -> bool:
    """Whether ``server`` has a fractional number of cores per GPU: a part's share of
    cores, floor(q C / G), is then not linear in its GPUs q."""
    return server.gpus > 0 and server.cpus % server.gpus != 0


#: Most splits a spread slot gets rows for (a split variable each): three share classes
#: give at most 45 for an 8-GPU job; a cluster of many shapes with large jobs keeps the
#: relaxation / restriction pair instead of a model that grows with the compositions.
MAX_SPLITS: int = 200


def _compositions(total: int, caps: Sequence[int]) -> Iterator[tuple[int, ...]]:
    """Every tuple of non-negative integers, each at most its cap, summing to ``total``
    (lexicographic order), without enumerating the product of the ranges."""
    if not caps:
        if total == 0:
            yield ()
        return
    rest = sum(caps[1:])
    for q in range(max(0, total - rest), min(caps[0], total) + 1):
        for tail in _compositions(total - q, caps[1:]):
            yield (q, *tail)


SplitCores = tuple[int, ...]  # the share's rounded-down cores, one per split


def _split_floors(
    inst: RoundInstance, job: Job, ss: Sequence[int]
) -> tuple[tuple[tuple[int, ...], ...], tuple[SplitFloor, ...], SplitCores | None] | None:
    """The share classes of ``ss``, every realisable split of ``job``'s GPUs over them with
    its exact floor R: the checker's own :func:`~synergy_opt.check.fair_share_floor`
    (forced-spread penalty included) of a placement with that split, and the split's
    share of cores where some class has fractional cores per GPU (else None).

    A split is realisable by a spread job when each class holds its GPUs in parts of at
    most min(G_s, g - 1) and the parts span two servers.  With whole cores per GPU a split
    is sigma, the GPUs per class.  With a fractional class the share's cores also depend on
    the parts (each floor(q C_s / G_s)), so a split is (sigma, F), F the share's cores summed
    part by part (:func:`_fractional_splits`).  None where there are more than
    :data:`MAX_SPLITS` splits.
    """
    servers = inst.cluster.servers
    classes = _share_classes(servers, ss)
    g = job.gpus
    room = [[min(servers[s].gpus, g - 1) for s in c] for c in classes]
    if any(fractional_share(servers[c[0]]) for c in classes):
        found = _fractional_splits(servers, classes, room, g)
        if found is None:
            return None
        splits = tuple((sigma, fair_share_floor(inst, job, parts)[1]) for sigma, _, parts in found)
        return classes, splits, tuple(f for _, f, _ in found)
    sigmas = []
    for sigma in _compositions(g, [sum(r) for r in room]):
        if sum(min(q, len(c)) for q, c in zip(sigma, classes, strict=True)) >= 2:
            sigmas.append(sigma)
        if len(sigmas) > MAX_SPLITS:
            return None
    out: list[SplitFloor] = []
    for sigma in sigmas:
        parts = []
        for q, c, r in zip(sigma, classes, room, strict=True):
            for s, cap in zip(c, r, strict=True):
                take = min(q, cap)
                if take:
                    parts.append(PlacementPart(servers[s].name, take, 0, 0.0))
                q -= take
        out.append((sigma, fair_share_floor(inst, job, parts)[1]))
    return classes, tuple(out), None


def _fractional_splits(
    servers: Sequence[Server],
    classes: Sequence[Sequence[int]],
    room: Sequence[Sequence[int]],
    g: int,
) -> list[tuple[tuple[int, ...], int, list[PlacementPart]]] | None:
    """Every realisable (sigma, F) of a ``g``-GPU spread job over ``classes``, each with a
    placement that has it (GPUs only; the checker reads the floor from it).

    A dynamic programme over the servers, class by class: a state is (GPUs per class so
    far, rounded-down cores so far, parts so far capped at 2).  A part holds 1 to its room
    GPUs (at most g - 1, so a used slot spans two servers); of a run of identical servers
    at most g can hold parts, so longer runs are cut to g.  None where more than
    :data:`MAX_SPLITS` splits (or fifty times as many partial states) exist.
    """
    State = tuple[tuple[int, ...], int, int]
    states: dict[State, tuple[tuple[int, int], ...]] = {((), 0, 0): ()}
    for cls, caps in zip(classes, room, strict=True):
        grown: dict[State, tuple[tuple[int, int], ...]] = {
            ((*sig, 0), f, p): w for (sig, f, p), w in states.items()
        }
        seen: dict[tuple[int, int, int], int] = {}
        for s, cap in zip(cls, caps, strict=True):
            srv = servers[s]
            shape = (srv.gpus, srv.cpus, cap)
            seen[shape] = seen.get(shape, 0) + 1
            if seen[shape] > g:
                continue  # more servers of this shape than the job has GPUs: none needed
            nxt = dict(grown)
            for (sig, f, p), w in grown.items():
                used = sum(sig)
                for a in range(1, min(cap, g - used) + 1):
                    key = ((*sig[:-1], sig[-1] + a), f + (a * srv.cpus) // srv.gpus, min(p + 1, 2))
                    if key not in nxt:
                        nxt[key] = (*w, (s, a))
            grown = nxt
            if len(grown) > 50 * MAX_SPLITS:
                return None
        states = grown
    out: dict[tuple[tuple[int, ...], int], list[PlacementPart]] = {}
    for (sig, f, p), w in sorted(states.items()):
        if sum(sig) == g and p >= 2 and (sig, f) not in out:
            out[sig, f] = [PlacementPart(servers[s].name, a, 0, 0.0) for s, a in w]
            if len(out) > MAX_SPLITS:
                return None
    return [(sig, f, parts) for (sig, f), parts in out.items()]


def _class_key(job: Job) -> tuple[object, ...]:
    return (*class_key(job), job.sensitivity_by_type)


def _model_data(  # noqa: C901 - one pass over classes, servers and spread variants
    inst: RoundInstance,
    jobs: Sequence[Job] | None = None,
    *,
    symmetry: bool = False,
    spread_floor: str = "high",
    exact_splits: bool = True,
) -> dict[str, Any]:
    """Plain data of the counting model over ``jobs`` (default: every job of the round).

    Keys: ``classes`` (member job ids per class, priority order), ``g``, ``n``; the whole-job
    columns ``x_index`` ((s, k, p)) with ``x_point[s, k, p] = (cores, GB, W)`` and
    ``x_upper``; the spread slots ``slots`` ((k, i)) with ``slot_points[k, i]`` (W already
    times the penalty), ``point_servers[k, i]`` (per point) and ``slot_servers[k, i]``
    (their union); ``server_names``, ``G``, ``C``, ``M``;
    ``server_classes`` (runs of identical servers) and ``symmetry`` (add ``sym_server_order``).

    A job with per-GPU-type matrices gets, on each server, the points of that server's
    type; it spreads in variants, one per set of types whose slowest-type value differs
    (:func:`_spread_variants`), each on its types' servers at that value: exact for any
    number of GPU types.  Each of its slots offers every variant's points
    (:func:`_slot_menu`), ``point_servers[k, i]`` giving each point's servers, so picking a
    point picks the variant (one set of per-server parts per job, not one per variant).

    Under per-server fair shares a spread job's floor depends on its GPU split
    (:func:`_spread_floor`): ``spread_floor="high"`` keeps every slot point above the
    highest floor it may face (a restriction: every solution keeps every floor),
    ``"low"`` above the lowest (a relaxation: its optimum bounds every allocation).
    With ``exact_splits`` (the default) a class instead gets its splits over share classes
    (:func:`_split_floors`): ``share_classes`` and ``slot_splits`` per slot, the rows
    ``cnt_split_*``, and the model is both at once; where a server has fractional cores per
    GPU, ``slot_split_cores`` gives each split's rounded-down cores, tied to the parts by
    ``fc`` and the rows ``cnt_share_cores`` and ``cnt_split_cores``.
    ``feasible`` and ``bound_valid`` say which of the two the data is, ``floor_gap`` that
    they differ; ``exact`` that no floor depends on the split at all; ``patterns`` that the
    server-pattern master states the data (split rows without rounded-down cores).
    """
    chosen = list(inst.jobs if jobs is None else jobs)
    servers = inst.cluster.servers
    groups: dict[object, list[Job]] = {}
    for job in chosen:
        groups.setdefault(_class_key(job), []).append(job)
    members = [tuple(js) for js in groups.values()]
    G = {s: srv.gpus for s, srv in enumerate(servers)}
    C = {s: srv.cpus for s, srv in enumerate(servers)}
    M = {s: float(srv.mem_gb) for s, srv in enumerate(servers)}
    g: dict[int, int] = {}
    n: dict[int, int] = {}
    x_index: list[tuple[int, int, int]] = []
    x_point: dict[tuple[int, int, int], Point] = {}
    x_upper: dict[tuple[int, int, int], int] = {}
    slots: list[tuple[int, int]] = []
    slot_points: dict[tuple[int, int], tuple[Point, ...]] = {}
    slot_servers: dict[tuple[int, int], tuple[int, ...]] = {}
    point_servers: dict[tuple[int, int], tuple[tuple[int, ...], ...]] = {}
    share_classes: dict[tuple[int, int], tuple[tuple[int, ...], ...]] = {}
    slot_splits: dict[tuple[int, int], tuple[SplitFloor, ...]] = {}
    slot_split_cores: dict[tuple[int, int], SplitCores] = {}
    floor_gap = False
    for k, js in enumerate(members):
        job = js[0]
        g[k], n[k] = job.gpus, len(js)
        allowed = tuple(s for s, srv in enumerate(servers) if job.may_use(srv))
        for s in allowed:
            if G[s] < job.gpus:
                continue
            fair = _whole_floor(inst, job, servers[s])
            pts = useful_points(job.matrix_for(servers[s].gpu_type), fair)
            for p, (c, m, w) in enumerate(pts):
                if c > C[s] or m > M[s] + MEM_EPS_GB:
                    continue
                cap = min(n[k], G[s] // job.gpus)
                if c > 0:
                    cap = min(cap, C[s] // c)
                if m > MEM_EPS_GB:
                    cap = min(cap, int((M[s] + MEM_EPS_GB) // m))
                x_index.append((s, k, p))
                x_point[s, k, p] = (c, m, w)
                x_upper[s, k, p] = cap
        if job.gpus < 2 or len(allowed) < 2:
            continue
        low, high = _spread_floor(inst, job)
        required = high if spread_floor == "high" else low
        splits = None
        if high > low + 1e-12 and exact_splits:
            splits = _split_floors(inst, job, allowed)
        if splits is not None:
            # Exact: the menu keeps every point some split allows; the rows cnt_split_*
            # tie each job's point to the floor of its split (none if all floors agree).
            required = min((r for _, r in splits[1]), default=high)
        floor_gap = floor_gap or (high > low + 1e-12 and splits is None)
        pts, pss = _slot_menu(job, allowed, servers, required)
        if not pts:
            continue
        union = tuple(s for s in allowed if any(s in ss for ss in pss))
        if splits is not None and len({r for _, r in splits[1]}) < 2:
            splits = None
        elif splits is not None and set(union) != set(allowed):
            splits = _split_floors(inst, job, union)  # a variant's servers left out
        # Slots hold at most as many spread jobs as their servers have GPUs for.
        for i in range(min(n[k], sum(G[s] for s in union) // job.gpus)):
            slots.append((k, i))
            slot_points[k, i] = pts
            slot_servers[k, i] = union
            point_servers[k, i] = pss
            if splits is not None:
                share_classes[k, i], slot_splits[k, i], cores = splits
                if cores is not None:
                    slot_split_cores[k, i] = cores
    # Runs of identical servers (any order in the cluster): symmetry is broken inside each.
    shapes: dict[tuple[object, ...], list[int]] = {}
    for s, srv in enumerate(servers):
        shapes.setdefault((srv.gpus, srv.cpus, srv.mem_gb, srv.gpu_type), []).append(s)
    return {
        "job_ids": tuple(job.id for job in chosen),
        "classes": tuple(tuple(j.id for j in js) for js in members),
        "g": g,
        "n": n,
        "x_index": tuple(x_index),
        "x_point": x_point,
        "x_upper": x_upper,
        "slots": tuple(slots),
        "slot_points": slot_points,
        "slot_servers": slot_servers,
        "point_servers": point_servers,
        "server_names": tuple(s.name for s in servers),
        "G": G,
        "C": C,
        "M": M,
        "server_classes": tuple(tuple(v) for v in shapes.values() if len(v) > 1),
        "symmetry": symmetry,
        "share_classes": share_classes,
        "slot_splits": slot_splits,
        "slot_split_cores": slot_split_cores,
        # No floor depends on the split:
        "exact": not floor_gap and not slot_splits,
        # The server-pattern master states this data exactly (patterns.md, "Floors that
        # depend on the split"): every split-dependent floor has split rows, none of them
        # carries rounded-down cores (fractional cores per GPU)
        "patterns": not floor_gap and not slot_split_cores,
        # Solutions are allocations that keep every floor / the optimum bounds them all:
        "feasible": not floor_gap or spread_floor == "high",
        "bound_valid": not floor_gap or spread_floor == "low",
        "floor_gap": floor_gap,
    }


counting_data = _model_data


def part_index(data: dict[str, Any]) -> list[tuple[int, int, int]]:
    """(k, i, s) for every spread slot and server it may use (the per-part variables)."""
    return [(k, i, s) for k, i in data["slots"] for s in data["slot_servers"][k, i]]


Index = tuple[int, int, int]


def index_groups(
    data: Any, parts: Sequence[Index]
) -> tuple[
    dict[int, list[Index]],
    dict[int, list[Index]],
    dict[int, list[Index]],
    dict[tuple[int, int], list[Index]],
]:
    """Whole-job columns by server and by class, spread parts by server and by slot.

    The rows of both builders (Pyomo and matrix) sum over these groups; one grouping keeps
    their row order the same.
    """
    x_at: dict[int, list[Index]] = {s: [] for s in data["G"]}
    x_of: dict[int, list[Index]] = {k: [] for k in data["g"]}
    for s, k, p in data["x_index"]:
        x_at[s].append((s, k, p))
        x_of[k].append((s, k, p))
    parts_at: dict[int, list[Index]] = {s: [] for s in data["G"]}
    parts_of: dict[tuple[int, int], list[Index]] = {ki: [] for ki in data["slots"]}
    for k, i, s in parts:
        parts_at[s].append((k, i, s))
        parts_of[k, i].append((k, i, s))
    return x_at, x_of, parts_at, parts_of


def part_bounds(data: dict[str, Any], k: int, i: int, s: int) -> tuple[int, int, float]:
    """Upper bounds of (a, cp, mp) for a part of slot (k, i) on server s.

    A used slot spans >= 2 servers, so one part holds at most g - 1 GPUs; cores and memory
    never exceed the server's nor the largest of the slot's points that may use s.
    """
    pts = [pt for pt, ss in _menu(data, k, i) if s in ss]
    cmax = max(c for c, _, _ in pts)
    mmax = max(m for _, m, _ in pts)
    return (
        min(data["g"][k] - 1, data["G"][s]),
        min(cmax, data["C"][s]),
        min(mmax, data["M"][s]),
    )


def share_core_bound(data: Any, k: int, i: int, s: int) -> int:
    """Upper bound of ``fc[k, i, s]``: the share of cores of the largest part on s."""
    return (min(data["g"][k] - 1, data["G"][s]) * data["C"][s]) // data["G"][s]


def _menu(data: Any, k: int, i: int) -> list[tuple[Point, tuple[int, ...]]]:
    """(point, servers it may use) of slot (k, i); every slot server where no
    ``point_servers`` are given (data built by hand)."""
    pts = data["slot_points"][k, i]
    pss = data.get("point_servers", {}).get((k, i))
    return list(zip(pts, pss or [data["slot_servers"][k, i]] * len(pts), strict=True))


def variant_parts(data: dict[str, Any]) -> list[tuple[Index, tuple[int, ...]]]:
    """Parts (k, i, s) whose server not every point of the slot may use, each with the
    points p that may: the rows ``cnt_part_in_variant`` (none on untyped rounds)."""
    out = []
    for k, i, s in part_index(data):
        ok = tuple(p for p, (_, ss) in enumerate(_menu(data, k, i)) if s in ss)
        if len(ok) < len(data["slot_points"][k, i]):
            out.append(((k, i, s), ok))
    return out


def variant_rows(
    data: dict[str, Any],
) -> list[tuple[Index, tuple[int, ...], tuple[int, ...]]]:
    """((k, i, j), servers outside S_j, points q whose servers are not within S_j) for each
    slot and each distinct server set S_j of its points short of all its servers: the rows
    ``cnt_variant_gpus/cpus/mem`` (none on untyped rounds)."""
    out = []
    for k, i in data["slots"]:
        menu = _menu(data, k, i)
        sets = list(dict.fromkeys(ss for _, ss in menu))
        for j, sj in enumerate(sets):
            outside = tuple(s for s in data["slot_servers"][k, i] if s not in sj)
            if outside:
                beyond = tuple(q for q, (_, ss) in enumerate(menu) if not set(ss) <= set(sj))
                out.append(((k, i, j), outside, beyond))
    return out


def slot_pairs(data: dict[str, Any]) -> list[tuple[int, int]]:
    """Slots (k, i) whose predecessor (k, i - 1) is the same (points and their servers)."""
    pts, srv = data["slot_points"], data["slot_servers"]
    return [
        (k, i)
        for k, i in data["slots"]
        if (k, i - 1) in pts
        and _menu(data, k, i) == _menu(data, k, i - 1)
        and srv[k, i] == srv[k, i - 1]
    ]


def restrict_points(
    data: Mapping[str, Any], keep: Mapping[int, set[tuple[int, float]]]
) -> dict[str, Any]:
    """The same model data with class k limited to the (cores, GB) points in ``keep[k]``.

    Its optimum is a lower bound of the full model's (fewer columns, same rows); used to
    find, fast, an allocation that reaches the super-machine bound when one exists.
    """
    out = dict(data)
    out["x_index"] = tuple(
        idx for idx in data["x_index"] if data["x_point"][idx][:2] in keep.get(idx[1], ())
    )
    menus = {
        ki: [(p, ss) for p, ss in _menu(data, *ki) if p[:2] in keep.get(ki[0], ())]
        for ki in data["slot_points"]
    }
    out["slots"] = tuple(ki for ki in data["slots"] if menus[ki])
    out["slot_points"] = {ki: tuple(p for p, _ in menus[ki]) for ki in out["slots"]}
    out["point_servers"] = {ki: tuple(ss for _, ss in menus[ki]) for ki in out["slots"]}
    out["slot_servers"] = {
        ki: tuple(s for s in data["slot_servers"][ki] if any(s in ss for _, ss in menus[ki]))
        for ki in out["slots"]
    }
    splits = data.get("slot_splits", {})
    out["slot_splits"] = {ki: splits[ki] for ki in out["slots"] if ki in splits}
    out["share_classes"] = {ki: data["share_classes"][ki] for ki in out["slot_splits"]}
    cores = data.get("slot_split_cores", {})
    out["slot_split_cores"] = {ki: cores[ki] for ki in out["slot_splits"] if ki in cores}
    return out


def split_rows(
    data: Any,
) -> tuple[
    list[Index],
    list[tuple[Index, tuple[int, ...], tuple[int, ...]]],
    list[tuple[Index, tuple[int, ...], tuple[int, ...]]],
]:
    """The split-floor variables and rows of slots whose floor depends on the split.

    Returns the v indices (k, i, j) (split j of ``slot_splits[k, i]``); for
    ``cnt_split_gpus`` ((k, i, c), the slot's servers in share class c, sigma_j[c] per
    split j); for ``cnt_split_floor`` ((k, i, t), the splits whose floor is >= the t-th
    distinct floor level L_t, the points q crediting >= L_t), only for levels some point
    of the slot misses (the others are implied by ``cnt_split_one``).  Empty on rounds
    whose floors do not depend on the split.
    """
    splits = data.get("slot_splits", {})
    v_index: list[Index] = []
    gpu_rows: list[tuple[Index, tuple[int, ...], tuple[int, ...]]] = []
    floor_rows: list[tuple[Index, tuple[int, ...], tuple[int, ...]]] = []
    for k, i in data["slots"]:
        if (k, i) not in splits:
            continue
        sig = splits[k, i]
        v_index += [(k, i, j) for j in range(len(sig))]
        on = set(data["slot_servers"][k, i])
        for c, cls in enumerate(data["share_classes"][k, i]):
            ss = tuple(s for s in cls if s in on)
            coefs = tuple(sigma[c] for sigma, _ in sig)
            if ss or any(coefs):
                gpu_rows.append(((k, i, c), ss, coefs))
        values = [w for _, _, w in data["slot_points"][k, i]]
        for t, level in enumerate(sorted({r for _, r in sig})):
            qs = tuple(q for q, w in enumerate(values) if w >= level - THROUGHPUT_EPS)
            if len(qs) < len(values):
                js = tuple(j for j, (_, r) in enumerate(sig) if r >= level)
                floor_rows.append(((k, i, t), js, qs))
    return v_index, gpu_rows, floor_rows


def add_split_floor_rows(
    m: pyo.ConcreteModel, split_floor_rows: Sequence[tuple[Index, tuple[int, ...], tuple[int, ...]]]
) -> None:
    """``cnt_split_floor`` on a model with ``v`` and ``y`` (the counting model's, and the
    pattern master's, which states the same row): :func:`split_rows`' third list."""
    import pyomo.environ as pyo

    floor_rows = {idx: (js, qs) for idx, js, qs in split_floor_rows}

    def cnt_split_floor(m: pyo.ConcreteModel, k: int, i: int, t: int) -> Any:
        """sum_{j: R_j >= L_t} v[k,i,j] <= sum_{q: W_q >= L_t} y[k,i,q]: a split's floor
        holds for the slot's point."""
        js, qs = floor_rows[k, i, t]
        return pyo.quicksum(m.v[k, i, j] for j in js) <= pyo.quicksum(m.y[k, i, q] for q in qs)

    m.cnt_split_floor = pyo.Constraint(
        list(floor_rows), rule=cnt_split_floor, doc=cnt_split_floor.__doc__
    )


def share_core_parts(data: Any) -> list[Index]:
    """Parts (k, i, s) of slots with ``slot_split_cores`` on servers with fractional cores
    per GPU: each gets ``fc``, its share's rounded-down cores floor(a C_s / G_s)."""
    cores = data.get("slot_split_cores", {})
    return [
        (k, i, s)
        for k, i in data["slots"]
        if (k, i) in cores
        for s in data["slot_servers"][k, i]
        if data["C"][s] % data["G"][s]
    ]


def split_core_rows(
    data: Any,
) -> list[tuple[tuple[int, int], tuple[Index, ...], tuple[tuple[Index, int], ...], SplitCores]]:
    """For ``cnt_split_cores``: per slot with ``slot_split_cores``, its ``fc`` parts, its
    parts on whole-ratio servers with their cores per GPU, and each split's cores F_j."""
    out = []
    for k, i in data["slots"]:
        f = data.get("slot_split_cores", {}).get((k, i))
        if f is None:
            continue
        frac, whole = [], []
        for s in data["slot_servers"][k, i]:
            if data["C"][s] % data["G"][s]:
                frac.append((k, i, s))
            else:
                whole.append(((k, i, s), data["C"][s] // data["G"][s]))
        out.append(((k, i), tuple(frac), tuple(whole), f))
    return out


def sym_pairs(data: dict[str, Any]) -> list[tuple[int, int]]:
    """Consecutive (s, t) pairs inside each run of identical servers (none if switched off)."""
    if not data["symmetry"]:
        return []
    return [(run[i], run[i + 1]) for run in data["server_classes"] for i in range(len(run) - 1)]


def build_counting(
    inst: RoundInstance,
    jobs: Sequence[Job] | None = None,
    *,
    relax: bool = False,
    symmetry: bool = False,
) -> pyo.ConcreteModel:
    """The counting MIP over ``jobs``; ``relax`` makes every variable continuous."""
    return build_from_data(_model_data(inst, jobs, symmetry=symmetry), relax=relax)


def build_from_data(  # noqa: C901 - one rule per row family
    data: dict[str, Any], *, relax: bool = False
) -> pyo.ConcreteModel:
    """Build the counting model from :func:`_model_data` output."""
    import pyomo.environ as pyo

    m = pyo.ConcreteModel(name="counting")
    xpt, spts = data["x_point"], data["slot_points"]
    G, C, M, g = data["G"], data["C"], data["M"], data["g"]
    ints = pyo.NonNegativeReals if relax else pyo.NonNegativeIntegers
    bins = pyo.UnitInterval if relax else pyo.Binary
    parts = part_index(data)
    m.X = pyo.Set(dimen=3, ordered=True, initialize=data["x_index"], doc="(server, class, point)")
    m.Y = pyo.Set(
        dimen=3,
        ordered=True,
        initialize=[(k, i, p) for k, i in data["slots"] for p in range(len(spts[k, i]))],
        doc="(class, slot, point) of spread jobs",
    )
    m.P = pyo.Set(dimen=3, ordered=True, initialize=parts, doc="(class, slot, server) parts")
    x_at, x_of, parts_at, parts_of = index_groups(data, parts)

    m.x = pyo.Var(
        m.X,
        domain=ints,
        bounds=lambda m, s, k, p: (0, data["x_upper"][s, k, p]),
        doc="class-k jobs whole on server s at point p",
    )
    m.y = pyo.Var(m.Y, domain=bins, bounds=(0, 1), doc="spread slot (k, i) runs at point p")
    m.a = pyo.Var(
        m.P,
        domain=ints,
        bounds=lambda m, k, i, s: (0, part_bounds(data, k, i, s)[0]),
        doc="GPUs of slot (k, i) on s",
    )
    m.u = pyo.Var(m.P, domain=bins, bounds=(0, 1), doc="slot (k, i) has a part on s")
    m.cp = pyo.Var(
        m.P,
        domain=ints,
        bounds=lambda m, k, i, s: (0, part_bounds(data, k, i, s)[1]),
        doc="cores of slot (k, i) on s",
    )
    m.mp = pyo.Var(
        m.P,
        domain=pyo.NonNegativeReals,
        bounds=lambda m, k, i, s: (0, part_bounds(data, k, i, s)[2]),
        doc="GB of slot (k, i) on s",
    )
    v_index, split_gpu_rows, split_floor_rows = split_rows(data)
    m.V = pyo.Set(dimen=3, ordered=True, initialize=v_index, doc="(class, slot, split)")
    m.v = pyo.Var(m.V, domain=bins, bounds=(0, 1), doc="spread slot (k, i) splits as sigma_j")
    fc_parts = share_core_parts(data)
    m.FC = pyo.Set(dimen=3, ordered=True, initialize=fc_parts, doc="parts with fractional shares")
    m.fc = pyo.Var(
        m.FC,
        domain=ints,
        bounds=lambda m, k, i, s: (0, share_core_bound(data, k, i, s)),
        doc="rounded-down cores of the share of slot (k, i)'s part on s",
    )

    def used(m: pyo.ConcreteModel, k: int, i: int) -> Any:
        return pyo.quicksum(m.y[k, i, p] for p in range(len(spts[k, i])))

    def key(m: pyo.ConcreteModel, s: int) -> Any:
        return pyo.quicksum(xpt[idx][2] * m.x[idx] for idx in x_at[s])

    @m.Objective(sense=pyo.maximize)
    def eq1_weighted_throughput(m: pyo.ConcreteModel) -> Any:
        """(1) max sum W x + sum W p y: whole jobs, plus spread jobs after their penalty."""
        return pyo.quicksum(xpt[idx][2] * m.x[idx] for idx in m.X) + pyo.quicksum(
            spts[k, i][p][2] * m.y[k, i, p] for k, i, p in m.Y
        )

    @m.Constraint(sorted(g))
    def eq4_class_cover(m: pyo.ConcreteModel, k: int) -> Any:
        """(4) per class: sum_{s,p} x[s,k,p] + sum_{i,p} y[k,i,p] = n_k (every job runs once)."""
        spread = [(k, i) for kk, i in data["slots"] if kk == k]
        if not x_of[k] and not spread:
            # No server point and no spread slot can hold class k (n_k >= 1): the row is
            # 0 = n_k, which Pyomo refuses as a constant; the fast path keeps it without terms.
            return pyo.Constraint.Infeasible
        expr = pyo.quicksum(m.x[idx] for idx in x_of[k]) + pyo.quicksum(
            used(m, *ki) for ki in spread
        )
        return expr == data["n"][k]

    def cap_rule(cons: int, part_var: str, cap: dict[int, float]) -> Any:
        def rule(m: pyo.ConcreteModel, s: int) -> Any:
            whole = [(g[idx[1]] if cons == 0 else xpt[idx][cons - 1]) * m.x[idx] for idx in x_at[s]]
            spread = [getattr(m, part_var)[idx] for idx in parts_at[s]]
            if not whole and not spread:
                return pyo.Constraint.Skip
            return pyo.quicksum(whole) + pyo.quicksum(spread) <= cap[s]

        return rule

    m.cnt_gpu_capacity = pyo.Constraint(
        sorted(G),
        rule=cap_rule(0, "a", G),
        doc="GPUs per server: whole jobs' g_k plus spread parts <= G_s.",
    )
    m.eq2_cpu_capacity = pyo.Constraint(
        sorted(G), rule=cap_rule(1, "cp", C), doc="(2) per server: cores <= C_s."
    )
    m.eq3_mem_capacity = pyo.Constraint(
        sorted(G), rule=cap_rule(2, "mp", M), doc="(3) per server: GB <= M_s."
    )

    @m.Constraint(list(data["slots"]))
    def cnt_one_point(m: pyo.ConcreteModel, k: int, i: int) -> Any:
        """sum_p y[k,i,p] <= 1: a slot holds at most one job, at one point."""
        return used(m, k, i) <= 1

    @m.Constraint(list(data["slots"]))
    def cnt_spread_gpus(m: pyo.ConcreteModel, k: int, i: int) -> Any:
        """sum_s a[k,i,s] = g_k sum_p y[k,i,p]: a used slot gets exactly its GPUs."""
        return pyo.quicksum(m.a[idx] for idx in parts_of[k, i]) == g[k] * used(m, k, i)

    @m.Constraint(list(data["slots"]))
    def cnt_spread_cpus(m: pyo.ConcreteModel, k: int, i: int) -> Any:
        """sum_s cp[k,i,s] = sum_p c_p y[k,i,p]: exactly the credited point's cores."""
        return pyo.quicksum(m.cp[idx] for idx in parts_of[k, i]) == pyo.quicksum(
            spts[k, i][p][0] * m.y[k, i, p] for p in range(len(spts[k, i]))
        )

    @m.Constraint(list(data["slots"]))
    def cnt_spread_mem(m: pyo.ConcreteModel, k: int, i: int) -> Any:
        """sum_s mp[k,i,s] = sum_p m_p y[k,i,p]: exactly the credited point's memory."""
        return pyo.quicksum(m.mp[idx] for idx in parts_of[k, i]) == pyo.quicksum(
            spts[k, i][p][1] * m.y[k, i, p] for p in range(len(spts[k, i]))
        )

    @m.Constraint(list(data["slots"]))
    def cnt_spread_spans(m: pyo.ConcreteModel, k: int, i: int) -> Any:
        """sum_s u[k,i,s] >= 2 sum_p y[k,i,p]: a used slot spans servers (else it is an x)."""
        return pyo.quicksum(m.u[idx] for idx in parts_of[k, i]) >= 2 * used(m, k, i)

    @m.Constraint(m.P)
    def cnt_part_has_gpu(m: pyo.ConcreteModel, k: int, i: int, s: int) -> Any:
        """a >= u: every placement part holds at least one GPU (docs/formats.md)."""
        return m.a[k, i, s] >= m.u[k, i, s]

    @m.Constraint(m.P)
    def cnt_gpus_only_on_used(m: pyo.ConcreteModel, k: int, i: int, s: int) -> Any:
        """a <= min(g_k - 1, G_s) u: GPUs only where the slot has a part, < g_k per part."""
        return m.a[k, i, s] <= part_bounds(data, k, i, s)[0] * m.u[k, i, s]

    @m.Constraint(m.P)
    def cnt_cpus_only_on_used(m: pyo.ConcreteModel, k: int, i: int, s: int) -> Any:
        """cp <= min(c_max, C_s) u: cores only where the slot has GPUs."""
        return m.cp[k, i, s] <= part_bounds(data, k, i, s)[1] * m.u[k, i, s]

    @m.Constraint(m.P)
    def cnt_mem_only_on_used(m: pyo.ConcreteModel, k: int, i: int, s: int) -> Any:
        """mp <= min(m_max, M_s) u: memory only where the slot has GPUs."""
        return m.mp[k, i, s] <= part_bounds(data, k, i, s)[2] * m.u[k, i, s]

    in_variant = dict(variant_parts(data))

    @m.Constraint(list(in_variant))
    def cnt_part_in_variant(m: pyo.ConcreteModel, k: int, i: int, s: int) -> Any:
        """u <= sum of y over the points whose variant has s: a part only on the servers
        of the variant the slot's point belongs to (GPU types)."""
        return m.u[k, i, s] <= pyo.quicksum(m.y[k, i, p] for p in in_variant[k, i, s])

    beyond = {idx: (outside, qs) for idx, outside, qs in variant_rows(data)}

    def outside_rule(var: str, coef: Any) -> Any:
        def rule(m: pyo.ConcreteModel, k: int, i: int, j: int) -> Any:
            outside, qs = beyond[k, i, j]
            return pyo.quicksum(getattr(m, var)[k, i, s] for s in outside) <= pyo.quicksum(
                coef(k, i, q) * m.y[k, i, q] for q in qs
            )

        return rule

    m.cnt_variant_gpus = pyo.Constraint(
        list(beyond),
        rule=outside_rule("a", lambda k, i, q: g[k]),
        doc="GPUs outside a variant's servers only for points beyond that variant.",
    )
    m.cnt_variant_cpus = pyo.Constraint(
        list(beyond),
        rule=outside_rule("cp", lambda k, i, q: spts[k, i][q][0]),
        doc="Cores outside a variant's servers only for points beyond that variant.",
    )
    m.cnt_variant_mem = pyo.Constraint(
        list(beyond),
        rule=outside_rule("mp", lambda k, i, q: spts[k, i][q][1]),
        doc="GB outside a variant's servers only for points beyond that variant.",
    )

    split_slots = list(dict.fromkeys((k, i) for k, i, _ in v_index))
    n_splits = {ki: len(data["slot_splits"][ki]) for ki in split_slots}

    @m.Constraint(split_slots)
    def cnt_split_one(m: pyo.ConcreteModel, k: int, i: int) -> Any:
        """sum_j v[k,i,j] = sum_p y[k,i,p]: a used slot has exactly one split."""
        return pyo.quicksum(m.v[k, i, j] for j in range(n_splits[k, i])) == used(m, k, i)

    gpu_rows = {idx: (ss, coefs) for idx, ss, coefs in split_gpu_rows}

    @m.Constraint(list(gpu_rows))
    def cnt_split_gpus(m: pyo.ConcreteModel, k: int, i: int, c: int) -> Any:
        """sum_{s in class c} a[k,i,s] = sum_j sigma_j[c] v[k,i,j]: the split is real."""
        ss, coefs = gpu_rows[k, i, c]
        return pyo.quicksum(m.a[k, i, s] for s in ss) == pyo.quicksum(
            coefs[j] * m.v[k, i, j] for j in range(len(coefs)) if coefs[j]
        )

    add_split_floor_rows(m, split_floor_rows)

    @m.Constraint(fc_parts)
    def cnt_share_cores(m: pyo.ConcreteModel, k: int, i: int, s: int) -> Any:
        """0 <= C_s a[k,i,s] - G_s fc[k,i,s] <= G_s - 1: fc = floor(a C_s / G_s) exactly."""
        return pyo.inequality(0, C[s] * m.a[k, i, s] - G[s] * m.fc[k, i, s], G[s] - 1)

    core_rows = {ki: (frac, whole, f) for ki, frac, whole, f in split_core_rows(data)}

    @m.Constraint(list(core_rows))
    def cnt_split_cores(m: pyo.ConcreteModel, k: int, i: int) -> Any:
        """sum_s fc[k,i,s] + sum_s r_s a[k,i,s] = sum_j F_j v[k,i,j]: the split's cores are
        the parts' rounded-down shares."""
        frac, whole, f = core_rows[k, i]
        parts = pyo.quicksum(m.fc[idx] for idx in frac) + pyo.quicksum(
            r * m.a[idx] for idx, r in whole
        )
        return parts == pyo.quicksum(f[j] * m.v[k, i, j] for j in range(len(f)) if f[j])

    @m.Constraint(slot_pairs(data))
    def sym_slot_order(m: pyo.ConcreteModel, k: int, i: int) -> Any:
        """sum_p y[k,i-1,p] >= sum_p y[k,i,p]: slots of a class are used in order."""
        return used(m, k, i - 1) >= used(m, k, i)

    @m.Constraint(sym_pairs(data))
    def sym_server_order(m: pyo.ConcreteModel, s: int, t: int) -> Any:
        """key(s) >= key(t) for consecutive identical servers (key: whole jobs' throughput)."""
        ks, kt = [x_at[v] for v in (s, t)]
        if not ks and not kt:
            return pyo.Constraint.Skip
        return key(m, s) >= key(m, t)

    return m
