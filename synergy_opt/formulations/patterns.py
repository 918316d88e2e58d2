"""Server patterns (beyond the paper): a Dantzig-Wolfe bound on the counting model.

The counting model's LP relaxation (:mod:`~synergy_opt.formulations.counting`) lets a
whole job sit fractionally on several servers, so on rounds with split penalties its root
bound stays 2-3 % above the optimum.  This module reformulates the same rounds per *server
pattern*: what one server holds (whole jobs at grid points, GPU/core/memory parts of
spread jobs), every pattern integral.  Its LP (the master) is the counting LP with each
server's rows replaced by the convex hull of that server's integral configurations, so it
bounds the optimum at least as tightly; column generation finds the patterns worth having
by solving, per class of identical servers, a one-server MIP (the pricing problem).

Two per-server rows are valid for every allocation of the counting model and are part of
the pricing problem: a server hosts at most n_k class-k jobs (whole copies plus parts of
distinct spread slots), and when the scheduled jobs need every GPU of the cluster but d,
each server uses at least G_s - d GPUs.

The pricing problem's optimum for one set of prices also gives one valid row per server of
the counting model (``pat_dual_cut``): with those rows, the counting LP is as tight as the
pattern bound, and the MIP starts from it.

``formulations/patterns.md`` states the three pieces (pricing, master, counting rows)
equation by equation under the names used here; the matrix fast path and the column
generation loop are :mod:`~synergy_opt.formulations.patterns_fast`.

Public API::

    server_shapes(data) -> tuple[tuple[int, ...], ...]
    gpu_slack(data) -> int
    Prices, Pattern, PatternCut        # frozen dataclasses
    build_pricing(data, s, prices) -> pyo.ConcreteModel
    build_master(data, patterns, relax=True) -> pyo.ConcreteModel
    add_pattern_rows(model, data, cuts) -> None   # onto counting.build_from_data's model
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from synergy_opt.formulations.counting import add_split_floor_rows, part_bounds, split_rows

if TYPE_CHECKING:  # Pyomo is imported only when a model is built
    import pyomo.environ as pyo

#: Cost of leaving one job out of the master (``short``): it keeps the master feasible
#: before enough patterns exist.  Any value keeps the bound valid (it relaxes the cover);
#: above every job's value it never pays to leave one out once patterns cover it.
SHORT_PENALTY: float = 100.0

Index = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Prices:
    """Duals of the master rows: per class (cover), per server class, per slot (3 rows),
    and per slot and share class (``pat_split_gpus``, only where a floor depends on the
    split): a part's GPUs on a server of share class c cost ``gpus[k, i] + split[k, i, c]``."""

    cover: Mapping[int, float]
    count: Mapping[int, float]
    gpus: Mapping[tuple[int, int], float]
    cpus: Mapping[tuple[int, int], float]
    mem: Mapping[tuple[int, int], float]
    split: Mapping[tuple[int, int, int], float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Pattern:
    """One server's contents: whole jobs ((k, p), count) and spread parts ((k, i), a, cp, mp)."""

    shape: int
    whole: tuple[tuple[tuple[int, int], int], ...]
    parts: tuple[tuple[tuple[int, int], int, int, float], ...]
    value: float


@dataclass(frozen=True, slots=True)
class PatternCut:
    """``pat_dual_cut[s]``: sum of ``coef`` (keyed like counting columns) <= ``rhs``."""

    server: int
    coef: tuple[tuple[tuple[str, Index], float], ...]
    rhs: float


def server_shapes(data: Mapping[str, Any]) -> tuple[tuple[int, ...], ...]:
    """Runs of servers with the same rows and columns in the counting model.

    Same G, C, M, the same whole-job columns (class, point, resources, value, cap) and the
    same spread slots: one pricing problem serves them all.
    """
    cols: dict[int, list[tuple[object, ...]]] = {s: [] for s in data["G"]}
    for s, k, p in data["x_index"]:
        cols[s].append((k, p, data["x_point"][s, k, p], data["x_upper"][s, k, p]))
    groups: dict[tuple[object, ...], list[int]] = {}
    for s in sorted(data["G"]):
        slots = tuple(ki for ki in data["slots"] if s in data["slot_servers"][ki])
        key = (data["G"][s], data["C"][s], data["M"][s], tuple(cols[s]), slots)
        groups.setdefault(key, []).append(s)
    return tuple(tuple(v) for v in groups.values())


def gpu_slack(data: Mapping[str, Any]) -> int:
    """d: the cluster's GPUs minus the scheduled jobs' (every job runs, so at most d idle)."""
    need = sum(data["g"][k] * data["n"][k] for k in data["g"])
    return int(sum(data["G"].values()) - need)


def server_columns(
    data: Mapping[str, Any], s: int
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Whole-job columns (k, p) and spread slots (k, i) that server s may hold."""
    xs = [(k, p) for ss, k, p in data["x_index"] if ss == s]
    slots = [ki for ki in data["slots"] if s in data["slot_servers"][ki]]
    return xs, slots


def one_role_classes(data: Mapping[str, Any], s: int) -> list[int]:
    """Classes that get a ``pat_one_role`` row on server s: those with a slot there, and
    those whose whole columns could otherwise hold more copies than the class has jobs
    (at several points at once); for the others the row is redundant."""
    xs, slots = server_columns(data, s)
    whole: dict[int, int] = {}
    for k, p in xs:
        whole[k] = whole.get(k, 0) + int(data["x_upper"][s, k, p])
    return sorted({k for k, _ in slots} | {k for k, n in whole.items() if n > data["n"][k]})


def master_split_rows(
    data: Mapping[str, Any],
) -> tuple[
    list[tuple[int, int, int]],
    list[tuple[tuple[int, int, int], tuple[int, ...]]],
    list[tuple[tuple[int, int, int], tuple[int, ...], tuple[int, ...]]],
]:
    """The master's split variables and rows (:func:`~.counting.split_rows`): the v
    indices, ``pat_split_gpus`` ((k, i, c), sigma_j[c] per split j) for the share classes
    some split puts GPUs in (a class that none does has no servers of the slot), and
    ``cnt_split_floor`` ((k, i, t), splits, points)."""
    v_index, gpu_rows, floor_rows = split_rows(data)
    return v_index, [(idx, coefs) for idx, _, coefs in gpu_rows if any(coefs)], floor_rows


def share_class_of(data: Mapping[str, Any], ki: tuple[int, int], s: int) -> int | None:
    """The index c of server s's share class among slot ``ki``'s (its ``pat_split_gpus``
    row), or None where the slot's floor does not depend on the split."""
    classes = data.get("share_classes", {}).get(ki)
    if classes is None:
        return None
    return next((c for c, cls in enumerate(classes) if s in cls), None)


def pricing_costs(
    data: Mapping[str, Any], s: int, prices: Prices
) -> tuple[dict[tuple[int, ...], float], dict[tuple[str, tuple[int, ...]], float]]:
    """Reduced values of server s's columns: W - pi_k per whole job, -price per part unit
    (a part's GPUs also pay its share class's ``pat_split_gpus`` price, where it has one)."""
    xs, slots = server_columns(data, s)
    wx: dict[tuple[int, ...], float] = {
        (k, p): data["x_point"][s, k, p][2] - prices.cover[k] for k, p in xs
    }
    wp: dict[tuple[str, tuple[int, ...]], float] = {}
    for ki in slots:
        c = share_class_of(data, ki, s) if prices.split else None
        extra = 0.0 if c is None else prices.split.get((*ki, c), 0.0)
        wp["a", ki] = -prices.gpus[ki] - extra
        wp["u", ki] = 0.0
        wp["cp", ki] = -prices.cpus[ki]
        wp["mp", ki] = -prices.mem[ki]
    return wx, wp


def build_pricing(  # noqa: C901 - one rule per row family
    data: Mapping[str, Any], s: int, prices: Prices
) -> pyo.ConcreteModel:
    """The pricing MIP of server s: the best-priced integral configuration of one server."""
    import pyomo.environ as pyo

    xs, slots = server_columns(data, s)
    wx, wp = pricing_costs(data, s, prices)
    g, xpt = data["g"], data["x_point"]
    d = gpu_slack(data)
    m = pyo.ConcreteModel(name="pattern_pricing")
    m.X = pyo.Set(dimen=2, ordered=True, initialize=xs, doc="(class, point) whole on s")
    m.S = pyo.Set(dimen=2, ordered=True, initialize=slots, doc="spread slots with a part on s")
    bnd = {ki: part_bounds(dict(data), *ki, s) for ki in slots}
    m.x = pyo.Var(
        m.X,
        domain=pyo.NonNegativeIntegers,
        bounds=lambda m, k, p: (0, data["x_upper"][s, k, p]),
        doc="class-k jobs whole on s at point p",
    )
    m.a = pyo.Var(m.S, domain=pyo.NonNegativeIntegers, bounds=lambda m, k, i: (0, bnd[k, i][0]))
    m.u = pyo.Var(m.S, domain=pyo.Binary)
    m.cp = pyo.Var(m.S, domain=pyo.NonNegativeIntegers, bounds=lambda m, k, i: (0, bnd[k, i][1]))
    m.mp = pyo.Var(m.S, domain=pyo.NonNegativeReals, bounds=lambda m, k, i: (0, bnd[k, i][2]))

    @m.Objective(sense=pyo.maximize)
    def pat_reduced_value(m: pyo.ConcreteModel) -> Any:
        """sum (W - pi_k) x - sum (alpha a + beta cp + gamma mp): the pattern's reduced value
        before the server-class price mu."""
        return pyo.quicksum(wx[kp] * m.x[kp] for kp in m.X) + pyo.quicksum(
            wp[name, ki] * getattr(m, name)[ki] for ki in m.S for name in ("a", "cp", "mp")
        )

    def cap(pos: int, var: str, limit: float, lower: float | None) -> Any:
        def rule(m: pyo.ConcreteModel) -> Any:
            whole = [(g[k] if pos == 0 else xpt[s, k, p][pos - 1]) * m.x[k, p] for k, p in m.X]
            expr = pyo.quicksum(whole) + pyo.quicksum(getattr(m, var)[ki] for ki in m.S)
            if lower is None:
                return expr <= limit
            return pyo.inequality(lower, expr, limit)

        return rule

    m.cnt_gpu_capacity = pyo.Constraint(
        rule=cap(0, "a", data["G"][s], max(0.0, float(data["G"][s] - d))),
        doc="G_s - d <= GPUs used <= G_s (every job runs: at most d GPUs idle in all)",
    )
    m.eq2_cpu_capacity = pyo.Constraint(rule=cap(1, "cp", data["C"][s], None), doc="(2)")
    m.eq3_mem_capacity = pyo.Constraint(rule=cap(2, "mp", data["M"][s], None), doc="(3)")

    @m.Constraint(one_role_classes(data, s))
    def pat_one_role(m: pyo.ConcreteModel, k: int) -> Any:
        """Whole class-k jobs plus class-k slots with a part here <= n_k (distinct jobs)."""
        return (
            pyo.quicksum(m.x[kk, p] for kk, p in m.X if kk == k)
            + pyo.quicksum(m.u[ki] for ki in m.S if ki[0] == k)
            <= data["n"][k]
        )

    @m.Constraint(m.S)
    def cnt_part_has_gpu(m: pyo.ConcreteModel, k: int, i: int) -> Any:
        """a >= u: a part holds at least one GPU."""
        return m.a[k, i] >= m.u[k, i]

    @m.Constraint(m.S)
    def cnt_gpus_only_on_used(m: pyo.ConcreteModel, k: int, i: int) -> Any:
        """a <= min(g_k - 1, G_s) u."""
        return m.a[k, i] <= bnd[k, i][0] * m.u[k, i]

    @m.Constraint(m.S)
    def cnt_cpus_only_on_used(m: pyo.ConcreteModel, k: int, i: int) -> Any:
        """cp <= min(c_max, C_s) u."""
        return m.cp[k, i] <= bnd[k, i][1] * m.u[k, i]

    @m.Constraint(m.S)
    def cnt_mem_only_on_used(m: pyo.ConcreteModel, k: int, i: int) -> Any:
        """mp <= min(m_max, M_s) u."""
        return m.mp[k, i] <= bnd[k, i][2] * m.u[k, i]

    return m


def build_master(  # noqa: C901 - one rule per row family
    data: Mapping[str, Any],
    patterns: Sequence[Pattern],
    *,
    relax: bool = True,
    off: frozenset[tuple[int, int]] = frozenset(),
    on: frozenset[tuple[int, int]] = frozenset(),
    banned: frozenset[tuple[int, int, int]] = frozenset(),
) -> pyo.ConcreteModel:
    """The pattern master over ``patterns``: how many servers of each class use each.

    ``off``, ``on``, ``banned``: a branch-and-price node's spread decisions
    (``formulations/branch_price.md``): slots unused (their points fixed to 0), slots used
    (``cnt_one_point`` at equality, and ``bp_ghost`` columns that keep the master feasible
    before patterns carry their parts), points left out.

    Where a spread job's floor depends on its split (``slot_splits``), ``v`` picks the
    split and ``cnt_split_one``, ``pat_split_gpus`` and ``cnt_split_floor`` state it as
    the counting model's ``cnt_split_*`` do, the parts' GPUs summed over the patterns.
    """
    import pyomo.environ as pyo

    shapes = server_shapes(data)
    spts, g = data["slot_points"], data["g"]
    m = pyo.ConcreteModel(name="pattern_master")
    m.J = pyo.Set(initialize=range(len(patterns)), ordered=True, doc="patterns")
    m.Y = pyo.Set(
        dimen=3,
        ordered=True,
        initialize=[(k, i, q) for k, i in data["slots"] for q in range(len(spts[k, i]))],
    )
    m.K = pyo.Set(initialize=sorted(g), ordered=True, doc="job classes")
    ints = pyo.NonNegativeReals if relax else pyo.NonNegativeIntegers
    m.z = pyo.Var(m.J, domain=ints, bounds=(0, None), doc="servers (N_c by pat_server_count)")
    m.y = pyo.Var(m.Y, domain=pyo.UnitInterval if relax else pyo.Binary, bounds=(0, 1))
    v_index, split_gpu_rows, split_floor_rows = master_split_rows(data)
    m.V = pyo.Set(dimen=3, ordered=True, initialize=v_index, doc="(class, slot, split)")
    m.v = pyo.Var(
        m.V, domain=pyo.UnitInterval if relax else pyo.Binary, bounds=(0, 1), doc="split j"
    )
    m.short = pyo.Var(m.K, domain=pyo.NonNegativeReals, doc="jobs left out, at a penalty")
    for k, i, q in m.Y:
        if (k, i) in off or (k, i, q) in banned:
            m.y[k, i, q].fix(0)
    ghosts = [(k, i, r) for k, i in sorted(on) for r in range(3)]
    # a used slot's GPUs per share class from nowhere, too (``pat_split_gpus``)
    ghosts += [(k, i, 3 + c) for (k, i, c), _ in split_gpu_rows if (k, i) in on]
    if ghosts:
        m.bp_ghost = pyo.Var(
            ghosts, domain=pyo.NonNegativeReals, doc="GPUs, cores, GB of a used slot from nowhere"
        )
    whole = [dict(p.whole) for p in patterns]
    parts = [{ki: (a, c, mm) for ki, a, c, mm in p.parts} for p in patterns]

    def used(m: pyo.ConcreteModel, k: int, i: int, pos: int | None = None) -> Any:
        return pyo.quicksum(
            (1.0 if pos is None else spts[k, i][q][pos]) * m.y[k, i, q]
            for q in range(len(spts[k, i]))
        )

    @m.Objective(sense=pyo.maximize)
    def eq1_weighted_throughput(m: pyo.ConcreteModel) -> Any:
        """(1) patterns' whole jobs, spread jobs after their penalty, minus left-out jobs."""
        return (
            pyo.quicksum(patterns[j].value * m.z[j] for j in m.J)
            + pyo.quicksum(spts[k, i][q][2] * m.y[k, i, q] for k, i, q in m.Y)
            - SHORT_PENALTY * pyo.quicksum(m.short[k] for k in m.K)
            - SHORT_PENALTY * pyo.quicksum(m.bp_ghost[idx] for idx in ghosts)
        )

    @m.Constraint(m.K)
    def eq4_class_cover(m: pyo.ConcreteModel, k: int) -> Any:
        """(4) whole copies in patterns + spread slots used + left out = n_k."""
        copies = pyo.quicksum(
            cnt * m.z[j] for j in m.J for (kk, _), cnt in whole[j].items() if kk == k
        )
        spread = pyo.quicksum(used(m, kk, i) for kk, i in data["slots"] if kk == k)
        return copies + spread + m.short[k] == data["n"][k]

    @m.Constraint(range(len(shapes)))
    def pat_server_count(m: pyo.ConcreteModel, c: int) -> Any:
        """At most N_c servers of class c take a pattern."""
        return pyo.quicksum(m.z[j] for j in m.J if patterns[j].shape == c) <= len(shapes[c])

    @m.Constraint(list(data["slots"]))
    def cnt_one_point(m: pyo.ConcreteModel, k: int, i: int) -> Any:
        """A slot holds at most one job, at one point (exactly one where a node uses it)."""
        return used(m, k, i) == 1 if (k, i) in on else used(m, k, i) <= 1

    def link(pos: int) -> Any:
        def rule(m: pyo.ConcreteModel, k: int, i: int) -> Any:
            got = pyo.quicksum(parts[j][k, i][pos] * m.z[j] for j in m.J if (k, i) in parts[j])
            if (k, i) in on:
                got = got + m.bp_ghost[k, i, pos]
            if pos == 0:
                return got == g[k] * used(m, k, i)
            return got >= used(m, k, i, pos - 1)

        return rule

    slots = list(data["slots"])
    m.pat_spread_gpus = pyo.Constraint(slots, rule=link(0), doc="parts' GPUs = g_k used")
    m.pat_spread_cpus = pyo.Constraint(slots, rule=link(1), doc="parts' cores >= the point's")
    m.pat_spread_mem = pyo.Constraint(slots, rule=link(2), doc="parts' GB >= the point's")

    split_slots = list(dict.fromkeys((k, i) for k, i, _ in v_index))
    n_splits = {ki: len(data["slot_splits"][ki]) for ki in split_slots}

    @m.Constraint(split_slots)
    def cnt_split_one(m: pyo.ConcreteModel, k: int, i: int) -> Any:
        """sum_j v[k,i,j] = sum_q y[k,i,q]: a used slot has exactly one split."""
        return pyo.quicksum(m.v[k, i, j] for j in range(n_splits[k, i])) == used(m, k, i)

    gpu_rows = dict(split_gpu_rows)

    @m.Constraint(list(gpu_rows))
    def pat_split_gpus(m: pyo.ConcreteModel, k: int, i: int, c: int) -> Any:
        """Parts' GPUs on servers of share class c, summed over the patterns, = sum_j
        sigma_j[c] v[k,i,j]: the split is the one the parts have."""
        got = pyo.quicksum(
            parts[j][k, i][0] * m.z[j]
            for j in m.J
            if (k, i) in parts[j]
            and share_class_of(data, (k, i), shapes[patterns[j].shape][0]) == c
        )
        if (k, i) in on:
            got = got + m.bp_ghost[k, i, 3 + c]
        coefs = gpu_rows[k, i, c]
        return got == pyo.quicksum(coefs[j] * m.v[k, i, j] for j in range(len(coefs)) if coefs[j])

    add_split_floor_rows(m, split_floor_rows)
    return m


def full_gpu_floor(data: Mapping[str, Any], s: int) -> float:
    """The least GPUs server s uses in any allocation that runs every job: G_s - d."""
    return max(0.0, float(data["G"][s] - gpu_slack(data)))


def add_pattern_rows(
    model: pyo.ConcreteModel, data: Mapping[str, Any], cuts: Sequence[PatternCut]
) -> None:
    """Add ``pat_full_gpus`` and ``pat_dual_cut`` to a counting model (same data)."""
    import pyomo.environ as pyo

    from synergy_opt.formulations.counting import index_groups, part_index

    x_at, _, parts_at, _ = index_groups(data, part_index(dict(data)))
    d = gpu_slack(data)

    def full(m: pyo.ConcreteModel, s: int) -> Any:
        if d >= data["G"][s] or (not x_at[s] and not parts_at[s]):
            return pyo.Constraint.Skip
        whole = pyo.quicksum(data["g"][idx[1]] * m.x[idx] for idx in x_at[s])
        return whole + pyo.quicksum(m.a[idx] for idx in parts_at[s]) >= full_gpu_floor(data, s)

    model.pat_full_gpus = pyo.Constraint(sorted(data["G"]), rule=full)
    by_server = {c.server: c for c in cuts}

    def cut(m: pyo.ConcreteModel, s: int) -> Any:
        c = by_server[s]
        return pyo.quicksum(v * getattr(m, name)[idx] for (name, idx), v in c.coef) <= c.rhs

    model.pat_dual_cut = pyo.Constraint(sorted(by_server), rule=cut)
