"""Provably optimal plans over general (not only interval) partitions.

Plan DRAM is a sum of per-group ``F_D``, so the problem is set partitioning
over the candidate groups (:mod:`fuseplan.search.candidates`) subject to
acyclicity of the graph of groups. Two exact formulations solve it:

**Downset shortest path** (:func:`downset_search`). A plan is acyclic iff
its groups can be executed one at a time, each after every group it reads
from. Executing them in such an order passes through *downsets*: sets ``D``
of operators closed under predecessors. A step from ``D`` adds a candidate
``C`` disjoint from ``D`` whose predecessors outside ``C`` all lie in ``D``;
``D ∪ C`` is again a downset. So acyclic plans are exactly the paths from
the empty set to all operators, a plan's DRAM is its path length, and the
optimum is a shortest path. Many execution orders of one plan give many
paths, but they meet in the same states, and each state is settled once.
Two rules keep the state space small without losing any plan:

* an unfuseable operator is its own fixed group; it is added as soon as its
  predecessors are (moving a group whose inputs are ready earlier in an
  execution order leaves the order valid), so no state holds a ready
  unfuseable operator;
* a step's candidate is looked up by its smallest member, which is always
  ready (labels are a topological order, so its predecessors are outside
  the candidate and must be in ``D``).

The search is A* with a consistent lower bound: every fuseable operator
``v`` is charged ``min over candidates C ∋ v of floor(F_D(C) / |C|)``, and
no candidate costs less than the sum of its members' charges. So the
smallest ``g + h`` still open is a proven lower bound at any time.

**Set partitioning with lazy cycle cuts** (:func:`partition_search`, needs
OR-Tools). One Boolean per candidate, every fuseable operator covered
exactly once, DRAM minimised by CP-SAT. A solution whose group graph has a
cycle gets a cut forbidding that set of groups together, and the model is
solved again. The solver's bound is a lower bound on the optimum at every
round, so a stopped run still reports a proven gap. CP-SAT runs on one
worker with a fixed seed and a *deterministic* time limit, so runs repeat
exactly.

:class:`Exact` runs the shortest path first and falls back to set
partitioning when its state limit is reached (wide graphs, where the number
of downsets grows with the product of branch lengths). Before either, where
the graph has articulation tensors, the optimum is found cell by cell
between them (:mod:`fuseplan.search.cells`), with no list of the groups
that cross them (under LBDF their prices add across them; under BRR they are
priced whole from records of their totals).
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from fuseplan.plan.plan import Plan
from fuseplan.plan.problem import FusionProblem
from fuseplan.search.base import SearchAlgorithm, SearchContext
from fuseplan.search.candidates import Candidates, MaskUnion, bits, enumerate_candidates, predecessor_masks
from fuseplan.search.cells import MAX_PIECE_SETS as CELLS_MAX_SETS, cell_search
from fuseplan.search.columns import MAX_OPERATORS as COLUMNS_MAX_OPERATORS, grow_columns
from fuseplan.search.decompose import independent_parts, restrict
from fuseplan.search.dominance import undominated
from fuseplan.search.interval_dp import IntervalDP, candidate_orders
from fuseplan.search.packing import cut_lower_bound, packing_lower_bound, reread_lower_bound
from fuseplan.search.relaxation import Relaxation, linear_relaxation
from fuseplan.units import format_bytes

#: Limits that keep ``exact`` (and ``auto``) from running for minutes; all are deterministic.
MAX_SETS = 400_000  # connected convex sets the enumeration may visit
MAX_STATES = 200_000  # downsets the shortest path may settle
SOLVER_TIME = 60.0  # CP-SAT deterministic time units (roughly seconds), all rounds together


@dataclass
class ExactOutcome:
    """What an exact formulation established."""

    plan: Plan | None  # the best valid plan it found (None if none)
    dram: float | None  # its objective (DRAM bytes of the fuseable operators by default)
    lower_bound: float  # proven: no valid plan costs less, in the objective's unit
    optimal: bool  # plan is proven optimal
    method: str
    stats: dict[str, Any] = field(default_factory=dict)
    bound_source: str = ""  # which proof gave lower_bound: "optimum", "linear relaxation", "cut bound", ...
    # DRAM of every fitting connected convex set, where the enumeration was complete (the interval DP's
    # groups are among them: auto's reference then prices nothing)
    prices: dict[int, int] | None = field(default=None, repr=False)


def _charges(problem: FusionProblem, candidates: Candidates) -> list[float]:
    """Per-operator lower bounds whose sum over any candidate never exceeds its price."""
    charge = [0] * len(problem.graph)
    best: dict[int, int] = {}
    for mask, dram in zip(candidates.masks, candidates.dram):
        members = bits(mask)
        # Integer prices split exactly; float prices (the latency objective) shrink by a relative 1e-12, far
        # above the rounding error of summing them, so a candidate's charges never exceed its price.
        share = dram // len(members) if isinstance(dram, int) else dram / len(members) * (1 - 1e-12)
        for v in members:
            if share < best.get(v, share + 1):
                best[v] = share
    for v, share in best.items():
        charge[v] = share
    return charge


def downset_search(problem: FusionProblem, candidates: Candidates, max_states: int = MAX_STATES,
                   charges: list[int] | None = None, fixed: int = 0, deadline: float | None = None) -> ExactOutcome:
    """A* over downsets (see the module docstring); stops after ``max_states`` settled states.

    ``charges`` replaces the per-operator heuristic: any charges whose sum over every candidate is at most
    its price keep the search exact (those of :mod:`fuseplan.search.relaxation` are tighter). ``fixed``
    (a bitmask) names fuseable operators to treat like unfuseable ones, each a group of its own at no
    cost: the search then plans the other operators only (see :mod:`fuseplan.search.decompose`). Past
    ``deadline`` (a ``time.perf_counter()`` time) it stops as at the state limit.
    """
    start_time = time.perf_counter()
    graph = problem.graph
    n = len(graph)
    full = (1 << n) - 1
    pred = predecessor_masks(problem)
    outside = candidates.outside_predecessors(problem)
    charge = _charges(problem, candidates) if charges is None else charges
    if fixed:  # fixed operators cost nothing here
        charge = [0 if fixed >> v & 1 else c for v, c in enumerate(charge)]
    excluded_mask = fixed
    for v in problem.excluded:
        excluded_mask |= 1 << v
    successor_mask = [0] * n
    for v, succs in enumerate(graph.successors):
        for s in succs:
            successor_mask[v] |= 1 << s
    masks, drams, by_min = candidates.masks, candidates.dram, candidates.by_min
    reached: dict[int, int] = {}  # per candidate: the operators outside it that read from it
    for v in problem.fuseable:
        if not by_min.get(v) and not fixed >> v & 1:  # cannot happen: a fuseable operator fits alone
            return ExactOutcome(None, None, 0, False, "downset", {"states": 0})

    successors_of = MaskUnion(successor_mask)

    def readers(added: int) -> int:
        """The operators outside ``added`` that read from it."""
        return successors_of(added) & ~added

    def advance(state: int, ready: int, added: int, reading: int) -> tuple[int, int]:
        """``state`` grown by ``added`` (``reading``: the operators outside it that read from it), then by
        every unfuseable operator that becomes ready; and the new ready set (operators outside the state
        whose predecessors are all in it)."""
        state |= added
        ready &= ~added
        while added:
            newly = 0
            for s in bits(reading & ~state):
                if pred[s] & state == pred[s]:
                    newly |= 1 << s
            ready |= newly
            added = ready & excluded_mask
            state |= added
            ready &= ~added
            if added:
                reading = readers(added)
        return state, ready

    sources = 0
    for v in range(n):
        if not pred[v]:
            sources |= 1 << v
    origin, origin_ready = advance(0, sources, sources & excluded_mask, readers(sources & excluded_mask))
    best_g = {origin: 0}
    ready_of = {origin: origin_ready}
    parent: dict[int, tuple[int, int]] = {}
    open_heap = [(sum(charge), 0, origin)]
    settled: set[int] = set()
    dropped: dict[int, Any] = {}  # per candidate: its members' charges (what a step over it takes off h)
    while open_heap:
        f, g, state = heapq.heappop(open_heap)
        if state in settled or g > best_g[state]:
            continue
        if state == full:
            groups = []
            while state != origin:
                state, c = parent[state]
                groups.append(bits(masks[c]))
            plan = Plan.from_groups(groups)
            return ExactOutcome(plan, g, g, True, "downset",
                                {"states": len(settled), "seconds": round(time.perf_counter() - start_time, 3)})
        settled.add(state)
        timed_out = deadline is not None and not len(settled) & 63 and time.perf_counter() > deadline
        if len(settled) > max_states or timed_out:
            bound = min(f, min((entry[0] for entry in open_heap), default=f))
            return ExactOutcome(None, None, bound, False, "downset",
                                {"states": len(settled), "stopped": "time limit" if timed_out else "state limit",
                                 "seconds": round(time.perf_counter() - start_time, 3)})
        h = f - g
        ready = ready_of[state]
        for r in bits(ready):
            for c in by_min.get(r, ()):
                mask = masks[c]
                if mask & state or outside[c] & state != outside[c]:
                    continue
                ng = g + drams[c]
                reading = reached.get(c)
                if reading is None:
                    reading = reached[c] = readers(mask)
                nxt, nxt_ready = advance(state, ready, mask, reading)
                if ng < best_g.get(nxt, ng + 1):
                    best_g[nxt] = ng
                    ready_of[nxt] = nxt_ready
                    parent[nxt] = (state, c)
                    drop = dropped.get(c)
                    if drop is None:
                        drop = dropped[c] = sum(charge[v] for v in bits(mask))
                    nh = h - drop
                    heapq.heappush(open_heap, (ng + nh, ng, nxt))
    return ExactOutcome(None, None, 0, False, "downset", {"states": len(settled)})


@dataclass
class PartsOutcome:
    """What solving the parts apart established."""

    plan: Plan | None  # the parts' plans together, when all parts were solved and the whole is acyclic
    lower_bound: int  # the sum of the parts' optima or bounds: no valid plan moves less
    stats: dict[str, Any]


def solve_parts(problem: FusionProblem, candidates: Candidates, parts: list[int], max_states: int,
                charges: list[int] | None = None, deadline: float | None = None) -> PartsOutcome:
    """Solve every part apart (:mod:`fuseplan.search.decompose`); ``max_states`` is shared out over the
    parts by size."""
    started = time.perf_counter()
    fuseable_mask = 0
    for v in problem.fuseable:
        fuseable_mask |= 1 << v
    groups: list[list[int]] = []
    bound = 0
    solved = 0
    states = 0
    total = len(problem.fuseable)
    for part in parts:
        share = max(1, max_states * part.bit_count() // total)
        outcome = downset_search(problem, restrict(candidates, part), share, charges, fixed=fuseable_mask & ~part,
                                 deadline=deadline)
        states += outcome.stats.get("states", 0)
        bound += int(outcome.lower_bound)
        if outcome.plan is not None:
            solved += 1
            groups.extend(sorted(g) for g in outcome.plan.groups)
    plan = None
    if solved == len(parts):
        whole = Plan.from_groups(groups)
        if not problem.check(whole):
            plan = whole
    return PartsOutcome(plan, bound, {"parts": len(parts), "parts_solved": solved, "states": states,
                                      "acyclic": plan is not None if solved == len(parts) else None,
                                      "seconds": round(time.perf_counter() - started, 3)})


def _find_cycle(problem: FusionProblem, plan: Plan) -> list[int]:
    """Positions of plan groups on one cycle of the group graph (empty if acyclic)."""
    label = dict(plan.group_of)
    n_groups = len(plan.groups)
    for offset, v in enumerate(problem.excluded):
        label[v] = n_groups + offset
    succ: dict[int, set[int]] = {}
    for i, j in problem.graph.edges:
        a, b = label[i], label[j]
        if a != b:
            succ.setdefault(a, set()).add(b)
    colour: dict[int, int] = {}
    for root in sorted(succ):
        if colour.get(root):
            continue
        stack = [(root, iter(sorted(succ.get(root, ()))))]
        path = [root]
        colour[root] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                colour[node] = 2
                stack.pop()
                path.pop()
            elif colour.get(child, 0) == 1:
                cycle = path[path.index(child):]
                return [g for g in cycle if g < n_groups]
            elif not colour.get(child):
                colour[child] = 1
                path.append(child)
                stack.append((child, iter(sorted(succ.get(child, ())))))
    return []


def partition_search(problem: FusionProblem, candidates: Candidates, time_limit: float = SOLVER_TIME,
                     seed: int = 0, hint: Plan | None = None, deadline: float | None = None) -> ExactOutcome:
    """CP-SAT set partitioning with lazy cycle cuts (see the module docstring); ``deadline`` (a
    ``time.perf_counter()`` time) adds a wall-clock limit to the deterministic one."""
    try:
        from ortools.sat.python import cp_model
    except ImportError:  # pragma: no cover - depends on the environment
        return ExactOutcome(None, None, 0, False, "partition", {"stopped": "OR-Tools not installed"})
    start_time = time.perf_counter()
    members = [bits(mask) for mask in candidates.masks]
    index = {mask: c for c, mask in enumerate(candidates.masks)}
    model = cp_model.CpModel()
    x = [model.NewBoolVar(f"g{c}") for c in range(len(members))]
    covering: dict[int, list[int]] = {}
    for c, group in enumerate(members):
        for v in group:
            covering.setdefault(v, []).append(c)
    for v in sorted(problem.fuseable):
        model.AddExactlyOne(x[c] for c in covering[v])
    model.Minimize(sum(dram * x[c] for c, dram in enumerate(candidates.dram)))
    if hint is not None:
        chosen = {index.get(sum(1 << v for v in g)) for g in hint.groups}
        if None not in chosen:
            for c in range(len(members)):
                model.AddHint(x[c], c in chosen)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = seed
    cuts = rounds = 0
    bound = 0
    remaining = time_limit
    while True:
        rounds += 1
        solver.parameters.max_deterministic_time = max(remaining, 0.01)
        if deadline is not None:
            solver.parameters.max_time_in_seconds = max(deadline - time.perf_counter(), 0.01)
        status = solver.Solve(model)
        remaining -= solver.deterministic_time
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE, cp_model.UNKNOWN):
            bound = max(bound, int(-(-solver.BestObjectiveBound() // 1)) if status != cp_model.UNKNOWN
                        else bound)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            break
        chosen = [c for c in range(len(members)) if solver.Value(x[c])]
        plan = Plan.from_groups(members[c] for c in chosen)
        cycle = _find_cycle(problem, plan)
        if not cycle:
            dram = int(round(solver.ObjectiveValue()))
            optimal = status == cp_model.OPTIMAL
            return ExactOutcome(plan, dram, dram if optimal else bound, optimal, "partition",
                                {"rounds": rounds, "cuts": cuts, "candidates": len(members),
                                 "seconds": round(time.perf_counter() - start_time, 3)})
        by_groups = {frozenset(members[c]): c for c in chosen}
        on_cycle = [by_groups[plan.groups[g]] for g in cycle]
        model.Add(sum(x[c] for c in on_cycle) <= len(on_cycle) - 1)
        cuts += 1
        model.ClearHints()
        for c in range(len(members)):
            model.AddHint(x[c], solver.Value(x[c]) == 1)
        if remaining <= 0 or deadline is not None and time.perf_counter() > deadline:
            break
    return ExactOutcome(None, None, bound, False, "partition",
                        {"rounds": rounds, "cuts": cuts, "candidates": len(members), "stopped": "time limit",
                         "seconds": round(time.perf_counter() - start_time, 3)})


def solve_exact(problem: FusionProblem, *, max_sets: int = MAX_SETS, max_states: int = MAX_STATES,
                solver_time: float = SOLVER_TIME, seed: int = 0, hint: Plan | None = None,
                relax: bool = True, by_cells: bool = True,
                on_status: Callable[[str, float | None, float | None], None] | None = None,
                deadline: float | None = None) -> ExactOutcome:
    """The optimum if the limits allow, else the best proven bound and the best plan found.

    Candidates that a split into a smaller candidate and one operator
    prices no higher are dropped first (:mod:`fuseplan.search.dominance`):
    some optimal plan does without them. When the candidates are complete and ``relax`` is set, the linear
    relaxation (:mod:`fuseplan.search.relaxation`) gives a first proven bound
    and its charges guide the downset search. When the candidates are too
    many to enumerate within ``max_sets``, the smallest ones of each seed and
    the groups of the interval plans of the interval DP's orders still give
    valid plans: the same formulations then find the best plan built from
    them (usually no worse than the interval DP's), which is not proven
    optimal, and the proven bound is the packing of sets too big for the
    buffer (:func:`fuseplan.search.packing.packing_lower_bound`, never below
    :func:`~fuseplan.search.packing.cut_lower_bound`), or the cut sets with
    sets whose fitting groups must re-read weights
    (:func:`~fuseplan.search.packing.reread_lower_bound`). The outcome's
    ``bound_source`` says which bound was the best. ``on_status`` hears after
    each stage (see :meth:`SearchContext.status`). Past ``deadline`` (a
    ``time.perf_counter()`` time) the enumeration and the searches stop as at
    their limits, and the outcome is what they had by then. Before all this, with ``by_cells``, where the
    graph has articulation tensors the optimum is found cell by cell between them
    (:mod:`fuseplan.search.cells`), with no list of the groups that cross them.
    """
    def report(stage: str, incumbent: float | None, bound: float | None) -> None:
        if on_status is not None:
            on_status(stage, incumbent, bound)

    def out_of_time() -> bool:
        return deadline is not None and time.perf_counter() > deadline

    start_time = time.perf_counter()
    solved = _solve_by_cells(problem, max_sets, deadline, lambda stage: report(stage, None, None)) \
        if by_cells else None
    if solved is not None:
        report(f"optimal cell by cell ({solved.stats['cells']} cells)", solved.dram, solved.lower_bound)
        solved.stats = {**solved.stats, "bound_source": "optimum",
                        "seconds_total": round(time.perf_counter() - start_time, 3)}
        return solved
    candidates = enumerate_candidates(problem, max_sets=max_sets,
                                      orders=list(candidate_orders(problem).values()), deadline=deadline)
    prices = dict(zip(candidates.masks, candidates.dram)) if candidates.complete else None
    stats: dict[str, Any] = {"candidates": len(candidates), "candidates_complete": candidates.complete,
                             "sets_visited": candidates.sets_visited,
                             "enumeration_seconds": round(time.perf_counter() - start_time, 3)}
    objective = problem.objective
    report(f"{len(candidates)} candidates" + ("" if candidates.complete else " (cut short)"), None,
           objective.bound_from_dram(problem.cost.dram_lower_bound()))
    relaxation: Relaxation | None = None
    if not objective.follows_dram:  # price candidates by the objective; CP-SAT needs integer prices, so no fall-back
        candidates = replace(candidates, dram=tuple(objective.value(bits(mask), dram)
                                                    for mask, dram in zip(candidates.masks, candidates.dram)))
        solver_time = 0
        stats["objective"] = objective.name
    enumerated = len(candidates)
    # Integer prices only: a float objective's sums could round a split a hair above the group it replaces.
    # Past the deadline the solvers stop at once: fewer candidates would not help them.
    if objective.follows_dram and not out_of_time():
        candidates = undominated(candidates)
    stats["dominated"] = enumerated - len(candidates)
    if (not candidates.complete and objective.follows_dram and len(problem.fuseable) <= COLUMNS_MAX_OPERATORS
            and not out_of_time()):  # the large groups a cut-short list lacks, by reduced cost
        candidates, stats["columns"] = grow_columns(problem, candidates, deadline=deadline)
        report(f"{stats['columns']['added']} groups grown by reduced cost", None, None)
    # over candidates cut short the relaxation proves nothing
    if relax and candidates.complete and objective.follows_dram:
        relaxation = linear_relaxation(problem, candidates, _positions(candidates, hint))
        if relaxation is not None:
            stats["relaxation"] = {"bound_bytes": relaxation.bound, "converged": relaxation.converged,
                                   **relaxation.stats}
            report("linear relaxation", None, relaxation.bound)
    # Proven bounds in the formulations' unit (DRAM bytes, or the objective's unit), with their sources.
    bounds: list[tuple[float, str]] = []
    if relaxation is not None:
        bounds.append((relaxation.bound, "linear relaxation"))
    charges = relaxation.charges if relaxation is not None else None
    outcome = None
    if candidates.complete and objective.follows_dram:
        parts = independent_parts(problem, candidates)
        if len(parts) > 1:
            by_parts = solve_parts(problem, candidates, parts, max_states, charges, deadline)
            stats["decomposition"] = by_parts.stats
            bounds.append((by_parts.lower_bound, "parts"))
            if by_parts.plan is not None:
                outcome = ExactOutcome(by_parts.plan, by_parts.lower_bound, by_parts.lower_bound, True,
                                       "downset by parts", {"states": by_parts.stats["states"]})
            report(f"{len(parts)} parts", by_parts.lower_bound if by_parts.plan is not None else None,
                   by_parts.lower_bound)
    if outcome is None:
        outcome = downset_search(problem, candidates, max_states, charges, deadline=deadline)
        bounds.append((outcome.lower_bound, "downset search"))
        report("downset search", outcome.dram, outcome.lower_bound if candidates.complete else None)
    # Past the deadline CP-SAT would stop at once, after building its model (seconds on large candidate lists).
    if outcome.plan is None and solver_time > 0 and not out_of_time():
        fallback = partition_search(problem, candidates, solver_time, seed, hint, deadline)
        bounds.append((fallback.lower_bound, "set partitioning"))
        report("set partitioning", fallback.dram, fallback.lower_bound if candidates.complete else None)
        fallback.lower_bound = max(fallback.lower_bound, outcome.lower_bound)
        fallback.stats = {"downset": outcome.stats, **fallback.stats}
        outcome = fallback
    dram_bounds = [(problem.cost.dram_lower_bound(), "all fused")]
    if not candidates.complete:  # optimal among the kept candidates only
        outcome.optimal = False
        dram_bounds.append((cut_lower_bound(problem), "cut bound"))
        reread = reread_lower_bound(problem)
        stats["reread_bound_bytes"] = reread
        dram_bounds.append((reread, "cut and re-read bound"))
        packing = packing_lower_bound(problem, deadline=deadline)
        if packing is not None:
            stats["packing"] = {"bound_bytes": packing.bound, **packing.stats}
            dram_bounds.append((packing.bound, "cut packing"))
            report("cut packing", outcome.dram, objective.bound_from_dram(packing.bound))
        bounds = []
        outcome.method = f"restricted {outcome.method}"
    dram_bound, dram_source = max(dram_bounds, key=lambda pair: pair[0])
    search_bound, search_source = max(bounds, key=lambda pair: pair[0], default=(0, ""))
    if objective.follows_dram:  # the formulations ran on DRAM: carry the bound over to the objective
        outcome.lower_bound = objective.bound_from_dram(max(int(search_bound), dram_bound))
        outcome.bound_source = search_source if search_bound >= dram_bound else dram_source
    else:
        converted = objective.bound_from_dram(dram_bound)
        outcome.lower_bound = max(search_bound, converted)
        outcome.bound_source = search_source if search_bound >= converted else dram_source
    if outcome.plan is not None:  # the plan's own sum, free of the order the search added it in
        outcome.dram = problem.evaluate(outcome.plan).objective
        if outcome.optimal:
            outcome.lower_bound = outcome.dram
            outcome.bound_source = "optimum"
    outcome.stats = {**stats, **outcome.stats, "bound_source": outcome.bound_source,
                     "seconds_total": round(time.perf_counter() - start_time, 3)}
    outcome.prices = prices
    return outcome


def _solve_by_cells(problem: FusionProblem, max_sets: int | None, deadline: float | None,
                    on_progress: Callable[[str], None] | None = None) -> ExactOutcome | None:
    """The optimum found cell by cell between articulation tensors (:mod:`fuseplan.search.cells`), where the
    scheme prices the groups that cross them from their parts and the cells' pieces stay within the limits
    (``max_sets`` of them at most); ``None`` otherwise. The plan is priced again group by group and checked
    (valid, acyclic, moving what the cells' search found) before it is taken for the optimum."""
    limit = CELLS_MAX_SETS if max_sets is None else min(max_sets, CELLS_MAX_SETS)
    found = cell_search(problem, max_sets=limit, deadline=deadline, on_progress=on_progress)
    if found is None:
        return None
    plan = found["plan"]
    priced = problem.evaluate(plan)
    if priced.invalid_groups or priced.dram != found["dram"] or not problem.is_acyclic(plan):
        return None  # cannot happen (tests/search/test_cells.py): the search over the whole graph decides
    return ExactOutcome(plan, priced.objective, priced.objective, True, "cells", found["stats"],
                        bound_source="optimum")


def _positions(candidates: Candidates, plan: Plan | None) -> list[int]:
    """Positions among ``candidates`` of the groups of ``plan`` that are candidates."""
    if plan is None:
        return []
    index = {mask: c for c, mask in enumerate(candidates.masks)}
    found = (index.get(sum(1 << v for v in group)) for group in plan.groups)
    return [c for c in found if c is not None]


def bound_record(bound: float, objective: str, source: str = "") -> dict[str, Any]:
    """The proven lower bound as the ``search`` record of plan.json keeps it: ``lower_bound_bytes`` for DRAM,
    else ``lower_bound`` in the objective's unit (``search.objective`` names it), and ``lower_bound_source``,
    the proof it comes from, when known."""
    record: dict[str, Any] = ({"lower_bound_bytes": int(bound)} if objective == "dram"
                              else {"objective": objective, "lower_bound": bound})
    if source:
        record["lower_bound_source"] = source
    return record


def status_line(stage: str, incumbent: float | None, bound: float | None, objective: str = "dram") -> str:
    """One line for a terminal: the stage, the best plan so far, the proven bound and the gap between."""
    def show(value: float) -> str:
        return format_bytes(int(value)) if objective == "dram" else f"{value:.6g}"

    parts = [stage]
    if incumbent is not None:
        parts.append(f"best {show(incumbent)}")
    if bound is not None:
        parts.append(f"bound {show(bound)}")
    if incumbent is not None and bound is not None and bound > 0:
        parts.append(f"gap {max(0.0, incumbent / bound - 1):.2%}")
    return ", ".join(parts)


class Exact(SearchAlgorithm):
    """Optimal over general plans, with a proof; reports the proven bound and gap when a limit stops it."""

    name = "exact"
    uses_budget = False

    def __init__(self, max_sets: int = MAX_SETS, max_states: int = MAX_STATES,
                 solver_time: float = SOLVER_TIME, by_cells: bool = True) -> None:
        self.max_sets = max_sets
        self.by_cells = by_cells  # solve_exact's: plan cell by cell between articulation tensors first
        self.max_states = max_states
        self.solver_time = solver_time
        self.outcome: ExactOutcome | None = None
        self._objective = "dram"
        self._problem: FusionProblem | None = None

    def reference(self) -> dict[str, Any] | None:
        if self.outcome is None or self._problem is None:
            return None
        return IntervalDP.known_reference(self._problem, self.outcome.prices)

    def details(self) -> dict[str, Any]:
        if self.outcome is None:
            return {}
        return {"optimal": self.outcome.optimal,
                **bound_record(self.outcome.lower_bound, self._objective, self.outcome.bound_source),
                "exact": {"method": self.outcome.method, "max_sets": self.max_sets, **self.outcome.stats}}

    def run(self, ctx: SearchContext) -> None:
        self._objective = ctx.problem.objective.name
        self._problem = ctx.problem
        self.outcome = solve_exact(ctx.problem, max_sets=self.max_sets, max_states=self.max_states,
                                   solver_time=self.solver_time, seed=ctx.rng.randrange(2**31), by_cells=self.by_cells,
                                   on_status=ctx.status, deadline=ctx.deadline)
        ctx.timed_out = ctx.deadline is not None and time.perf_counter() > ctx.deadline
        if self.outcome.plan is not None:
            ctx.deadline = None  # out of time or not, the plan the solver found is the answer
            ctx.propose(self.outcome.plan)
