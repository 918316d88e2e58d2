"""Synergy-OPT made deployable (``opt``); the exact model ``opt-exact`` is in :mod:`..opt_exact`.

``opt`` runs, on TUNE's runnable set (the paper's OPT, section 4, made to deploy):

1. the split-aware super-machine (``fast.build_super_machine_split``) -> a grid point
   per job, which jobs are worth spreading, and the bound reported as
   ``upper_bound`` (claimed only when the whole runnable set is scheduled);
2. rounding routes (:mod:`.routes`, a registry over one frozen :class:`.RoundContext`) turn it
   into whole GPUs per server: consolidating routes first, then ``balanced``'s plan with a few
   jobs spread to carry cores and memory between servers (:mod:`.bridges`, no solver; kept only
   where the points deploy on it), then the paper's placement-LP vertex, whose at most 3s split
   jobs keep their span, then TUNE's own, and last the exact counting model restricted to the
   super-machine's points (:mod:`.counting_route`, node-limited, on rounds small enough for it,
   not on rounds of one-GPU jobs); and, only once the plans below (re-optimised) miss the
   target, the *late* routes: the counting model by relax-and-fix on larger mixed-shape rounds
   (:mod:`.relax_fix_route`); the tightest super-machine's points packed onto the servers by
   CP-SAT (``packing``, :mod:`.packing_route`; a packing is worth that super-machine's optimum,
   the bound); on rounds of one-GPU jobs, branch-and-price's root, its integer master and one
   dive, in-process (``pattern-root``, :mod:`.pattern_route`); on split-penalty rounds where a
   job filling every server it fits on strands the rest of it, the counting model over the
   points of a super-machine that charges it the whole server (``counting-full-servers``,
   :mod:`.full_servers`; that model's bound also lowers the target and the reported bound); and
   where the super-machine's points cannot all be realised, the same counting model over each
   job's point and the three best points below it (``counting-near``); beside the late routes,
   in a child process under a time limit on split-penalty rounds, branch-and-price's root and
   its dive to one packed leaf (``pattern-dive``, :mod:`.pattern_dive`), whose plan joins
   theirs;
3. each plan is deployed at the super-machine points when a max-flow fits their cores and
   memory (:mod:`.transport`: a job's cores and memory may sit on any server where it has
   GPUs), else repaired by swapping whole jobs out of the servers of the flow's minimum
   cut until it fits (:mod:`.repair`, no solver), else re-optimised per server with
   spread jobs drawing from their span (:mod:`.configure`);
4. below the bound, the best plan is improved: penalised jobs spread over the richest
   servers (:mod:`.spread_move`), exact re-decisions on neighbourhoods of servers
   (:mod:`.neighbourhood`), then spread penalised jobs gathered whole onto one server
   (:mod:`.gather_move`).

Throughput comes first, then fewer fragmented jobs; no plan spreads more than
``min(3s, --max-fragmented)`` jobs.  The best candidate is checked by the independent
checker and compared with TUNE; the better one is returned and every fallback is said in
``notes`` and logged, so OPT is never below TUNE.  An ``Opt`` instance remembers its last
rounds (a simulation keeps one) and replays the answer of an identical round.  It also
warm-starts from its previous round: jobs still runnable keep their GPUs, new ones are
placed around them, and if the super-machine points deploy on that plan within the target
gap of the bound (the bound is solved every round) the routes and the search are skipped;
otherwise the round is solved cold, exactly as without the warm start.  Answers inside a
simulation therefore depend on the sequence of rounds (deterministically); a single
``solve`` has no previous round.  Its MIPs run on one HiGHS thread unless ``threads`` is
set, without HiGHS's feasibility-jump heuristic (a fixed ~3 ms per small MIP).

On typed rounds (jobs with per-GPU-type matrices, :mod:`.typed`) the bound is the typed
super-machine's (one GPU type per job, ``formulations/super_machine.md``), tightened by the
counting LP on small rounds, and the routes run on the round with each job fixed to the
type that model picks; the best checked answer of that, ``tune`` and ``tune-typed`` is
returned, so OPT is never below either.  The plain pass (routes on the reference matrices)
runs only where the fixed round gives no checked answer of the whole runnable set.

Where each step lives: :mod:`.mechanism` (the ``Opt`` class: the round's steps in order,
remembered rounds and the warm start), :mod:`.search` (one round's search: the routes in
order, the swap repair, the re-optimisation, the late routes and the neighbourhood search
from the best plan), :mod:`.super_machine` (step 1's model and its demand
classes), :mod:`.bounds` (the bounds beside it), :mod:`.points` (step 3's points on a plan),
:mod:`.answer` (the checked answer against TUNE's, shared with ``opt-exact``) and
:mod:`.round_cache` (identical rounds replayed).
"""

from synergy_opt.mechanisms.opt import (
    answer,
    bounds,
    configure,
    context,
    counting_route,
    gather_move,
    mechanism,
    neighbourhood,
    packing_route,
    pattern_dive,
    pattern_route,
    points,
    relax_fix_route,
    repair,
    round_cache,
    routes,
    search,
    super_machine,
    transport,
    typed,
)
from synergy_opt.mechanisms.opt.answer import better_of, bound_for, tune_fallback
from synergy_opt.mechanisms.opt.context import Clock, GpuPlan, RoundContext, RoundingError
from synergy_opt.mechanisms.opt.mechanism import Opt
from synergy_opt.mechanisms.opt.routes import ROUTES, Route

__all__ = [
    "ROUTES",
    "Clock",
    "GpuPlan",
    "Opt",
    "Route",
    "RoundContext",
    "RoundingError",
    "answer",
    "better_of",
    "bound_for",
    "bounds",
    "configure",
    "context",
    "counting_route",
    "gather_move",
    "mechanism",
    "neighbourhood",
    "packing_route",
    "pattern_dive",
    "pattern_route",
    "points",
    "relax_fix_route",
    "repair",
    "round_cache",
    "routes",
    "search",
    "super_machine",
    "transport",
    "tune_fallback",
    "typed",
]
