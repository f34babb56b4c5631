"""Lower bounds that need no candidates: sets too big for any group, and the tensors that must cut them.

Start from the all-fused bound (:meth:`CostModel.dram_lower_bound`): each
connected component of fuseable operators priced as one group, ignoring the
buffer. A plan moves at least as much, tensor by tensor: no tensor is
written or read fewer times. Call a tensor *cut* by a plan when its producer
and some fuseable consumer lie in different groups; a cut tensor moves at
least its *penalty* more than in the all-fused bound: what the least of
its readers reads back (:meth:`CostModel.least_read`: a strided reader
touches only some rows and columns), plus its size (written) when that
bound does not write it. So a plan moves at least the all-fused bound plus the penalties
of the tensors it cuts.

Now take a connected set ``S`` of fuseable operators whose buffer floor
(:meth:`CostModel.buffer_floor`) reaches the buffer: no fitting group holds
it, so some tensor *inside* it (made by a member, read by a member) is cut,
or else its members, joined by those tensors, would share a group. Any
weights ``z_S >= 0`` on such sets with ``sum of z_S over the sets holding t
<= penalty(t)`` for every tensor ``t`` (a *packing*) then bound every plan:
``sum z_S <= sum over S of z_S * (cut tensors inside S) = sum over cut t of
(sum of z_S over S holding t) <= sum over cut t of penalty(t)``.

:func:`cut_lower_bound` packs sets with disjoint inside tensors, cut
greedily from the topological order, each weighted by its cheapest inside
tensor. :func:`packing_lower_bound` finds better packings by linear
programming: its dual is the covering problem (weights ``y`` on tensors,
least ``sum penalty * y`` with ``sum of y over the inside of S >= 1`` for
every set), and new sets are grown from every operator towards tensors
light under the last ``y``. Any family of sets gives a valid packing, so
how the sets are found never matters for the proof; only whether each
truly reaches the buffer floor, which is checked with
:meth:`CostModel.buffer_floor` itself. The final packing is rounded down to
integers and scaled until every tensor's constraint holds in integers.

Weights add a second way to pay. The all-fused bound reads every weight
once; a group re-reads weights only on its members' account
(:meth:`CostModel.reread_floor`: under BRR, streamed weights once per row
tile), and weight traffic is apart from tensor traffic. So a connected set
``S`` whose fitting holders all re-read at least ``r_S`` bytes of its
members' weights costs every plan ``min(r_S, cheapest penalty inside S)``
more: either a tensor inside it is cut, or it lies whole in one group,
which re-reads. :func:`reread_lower_bound` adds that over sets with
disjoint members (so neither their inside tensors nor their weights are
counted twice), cut from the topological order as the greedy cut sets are,
each closed once its floor reaches the buffer or its re-reads reach its
cheapest inside penalty.

These bounds hold for every plan whatever the candidates, so they serve
where the candidate enumeration is cut short and the linear relaxation over
the candidates proves nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fuseplan.plan.problem import FusionProblem
from fuseplan.search.candidates import GrowingFloor, bits

#: Rounds of growing sets and solving the covering problem, at most.
MAX_ROUNDS = 2000
#: Seeds grown per round at most: the covering problem is solved again after each batch, so later seeds
#: grow under fresher weights.
SEEDS_PER_ROUND = 100
#: Sets grown, over all blocks and rounds, at most: a counted limit, so the bound repeats exactly. GoogLeNet
#: (LBDF, 2MB) grows 2,739 before no seed is stale; a generated network of 1,005 operators (256KB), 6,436;
#: one of 5,000 operators took 30,158 and 28 s of CPU time and gained nothing over the greedy packing.
MAX_GROWTHS = 8_000
#: Members a grown set may reach before it is given up: sets that large hold many inside tensors, so weigh
#: little in a packing, and growing them costs most (GoogLeNet under LBDF at 2MB grows sets of up to 79
#: members; a generated network of 1,005 operators under BRR at 256KB, up to 436 without this limit).
MAX_MEMBERS = 128
#: Operators per block packed on its own (:func:`packing_lower_bound`).
BLOCK = 500
#: Sets kept per round at most (the most violated first): bounds the linear program's growth.
SETS_PER_ROUND = 2000


def cut_penalties(problem: FusionProblem) -> dict[int, int]:
    """Per tensor made by a fuseable operator and read by one: the least DRAM bytes cutting it adds to
    the all-fused bound (see the module docstring)."""
    cost = problem.cost
    tables = cost.tables
    b = cost.bytes_per_element
    fuseable = frozenset(problem.fuseable)
    component_of: dict[int, frozenset[int]] = {}
    for component in cost.fuseable_components():
        for v in component:
            component_of[v] = component
    penalty: dict[int, int] = {}
    for v in sorted(fuseable):
        component = component_of[v]
        for t in problem.graph.nodes[v].outputs:
            if tables.tensor_consumers[t] & fuseable:
                moved = tables.tensor_is_output[t] or not tables.tensor_consumers[t] <= component
                penalty[t] = b * (cost.least_read(t) + (0 if moved else tables.tensor_numel[t]))
    return penalty


def inside_tensors(problem: FusionProblem, group: frozenset[int]) -> set[int]:
    """Tensors made by a member of ``group`` and read by another member."""
    tables = problem.cost.tables
    return {t for u in group for t in problem.graph.nodes[u].outputs if tables.tensor_consumers[t] & group}


def _closed_runs(problem: FusionProblem, closes: Callable[[frozenset[int]], bool]) -> list[frozenset[int]]:
    """Connected sets with disjoint members: the component of the growing run of fuseable operators (in label
    order) that first ``closes`` and has tensors inside it, then a new run."""
    graph = problem.graph
    found: list[frozenset[int]] = []
    run: list[int] = []
    for v in range(len(graph)):
        if v not in problem.fuseable:
            continue
        run.append(v)
        part = next(part for part in graph.components(run) if v in part)
        if closes(part) and inside_tensors(problem, part):
            found.append(part)
            run = []
    return found


def _bound_over(problem: FusionProblem, sets: list[frozenset[int]]) -> int:
    """The all-fused bound plus each set's cheapest inside tensor's penalty."""
    penalty = cut_penalties(problem)
    extra = sum(min(penalty[t] for t in inside_tensors(problem, part)) for part in sets)
    return problem.cost.dram_lower_bound() + extra


def greedy_cut_sets(problem: FusionProblem) -> list[frozenset[int]]:
    """Connected sets whose buffer floor reaches the buffer, with disjoint inside tensors: the component of
    the growing run of operators (in label order) whose floor first reaches it, then a new run."""
    cost, beta = problem.cost, problem.buffer_bytes
    return _closed_runs(problem, lambda part: cost.buffer_floor(part) >= beta)


def cut_lower_bound(problem: FusionProblem) -> int:
    """The all-fused bound plus, for each of :func:`greedy_cut_sets`, its cheapest inside tensor's penalty
    (a packing of sets with disjoint inside tensors; see the module docstring)."""
    return _bound_over(problem, greedy_cut_sets(problem))


def reread_lower_bound(problem: FusionProblem) -> int:
    """The all-fused bound plus, over connected sets with disjoint members, each set's cheapest inside
    penalty where any plan either cuts a tensor inside it or re-reads at least that much of its members'
    weights (:meth:`CostModel.reread_floor`), or where no fitting group holds it (module docstring). Sets
    are the components of growing runs of operators in label order, as in :func:`greedy_cut_sets`. The
    cut bound's where the scheme reads every weight once."""
    cost, beta = problem.cost, problem.buffer_bytes
    penalty = cut_penalties(problem)

    def closes(part: frozenset[int]) -> bool:
        if cost.buffer_floor(part) >= beta:
            return True
        inside = inside_tensors(problem, part)
        return bool(inside) and cost.reread_floor(part) >= min(penalty[t] for t in inside)

    return _bound_over(problem, _closed_runs(problem, closes))


@dataclass
class Packing:
    """A proven lower bound from a packing of sets too big for the buffer."""

    bound: int  # the all-fused bound plus the packing's integer weights: no valid plan moves less
    stats: dict[str, Any] = field(default_factory=dict)


class _SetGrower:
    """Grows connected sets of fuseable operators until their buffer floor reaches the buffer, each step
    taking the neighbour that adds the least weight of new inside tensors (then the one that raises the
    floor most), and shrinks them to the members that weigh."""

    def __init__(self, problem: FusionProblem, penalty: dict[int, int]) -> None:
        self.problem = problem
        self.floor = GrowingFloor(problem)
        graph = problem.graph
        tables = problem.cost.tables
        fuseable = frozenset(problem.fuseable)
        # Per operator: the internal tensors it makes (with their fuseable readers as a bitmask) and the
        # internal tensors it reads (with their producers).
        self.made: list[list[tuple[int, int]]] = [[] for _ in graph.nodes]
        self.read: list[list[tuple[int, int]]] = [[] for _ in graph.nodes]
        for t in penalty:
            producer = graph.tensors[t].producer
            readers = 0
            for c in tables.tensor_consumers[t] & fuseable:
                readers |= 1 << c
                self.read[c].append((t, producer))
            self.made[producer].append((t, readers))
        self.neighbours = [[u for u in graph.neighbours[v] if u in fuseable] for v in range(len(graph))]
        self.readers_of = {t: readers for v in problem.fuseable for t, readers in self.made[v]}
        # Per operator: the fuseable operators that make or read a tensor it makes or reads.
        self.sharing: list[set[int]] = [set() for _ in graph.nodes]
        for t in range(len(graph.tensors)):
            touching = {c for c in tables.tensor_consumers[t] if c in fuseable}
            producer = graph.tensors[t].producer
            if producer is not None and producer in fuseable:
                touching.add(producer)
            for v in touching:
                self.sharing[v] |= touching - {v}

    def new_inside(self, u: int, mask: int) -> list[int]:
        """Tensors that become inside when ``u`` joins the set ``mask``."""
        fresh = [t for t, readers in self.made[u] if readers & mask]
        for t, producer in self.read[u]:
            if mask >> producer & 1 and not self.readers_of[t] & mask:
                fresh.append(t)
        return fresh

    def grow(self, seed: int, weight: dict[int, float],
             within: frozenset[int]) -> tuple[frozenset[int] | None, list[int]]:
        """A connected set from ``seed`` whose floor reaches the buffer, light under ``weight`` (``None``
        when the seed's connected operators in ``within`` all together stay under it, or when it passes
        :data:`MAX_MEMBERS`), and the operators it was grown to before shrinking: only the weights of
        tensors they make or read were consulted."""
        floor = self.floor
        mask = 1 << seed
        members = [seed]
        own = floor.terms[seed]
        rows = floor.extra_rows(seed, 0)
        keys: dict[int, tuple[float, float, int]] = {}  # per frontier operator: how light, then how big a step

        def key(u: int) -> tuple[float, float, int]:
            light = sum(weight[t] for t in self.new_inside(u, mask))
            return light, -(floor.terms[u] + floor.extra_rows(u, mask)), u

        for u in self.neighbours[seed]:
            if u in within:
                keys[u] = key(u)
        while not (floor.b * (own + rows) >= floor.beta and floor.reaches(own, rows, tuple(members))):
            if not keys or len(members) >= MAX_MEMBERS:
                return None, members
            best = min(keys, key=keys.__getitem__)
            del keys[best]
            rows += floor.extra_rows(best, mask)
            own = floor.grown_terms(own, best)
            mask |= 1 << best
            members.append(best)
            # only operators sharing a tensor with the newcomer see their inside tensors or rows change
            for u in self.sharing[best]:
                if u in keys:
                    keys[u] = key(u)
            for u in self.neighbours[best]:
                if not mask >> u & 1 and u not in keys and u in within:
                    keys[u] = key(u)
        return self.shrink(mask, members, own, rows, weight), members

    def shrink(self, mask: int, members: list[int], own: int, rows: float,
               weight: dict[int, float]) -> frozenset[int]:
        """The set ``members`` (``mask``; floor terms ``own`` and rows ``rows``) less members whose inside
        tensors weigh, heaviest first, while it stays connected and its floor reaches the buffer."""
        floor = self.floor
        heft = dict.fromkeys(members, 0.0)
        for v in members:
            for t, readers in self.made[v]:
                if readers & mask:  # a tensor of no weight still counts a little: fewer inside tensors, fewer ties
                    heft[v] += weight[t] + 1e-9
                    for c in bits(readers & mask):
                        heft[c] += weight[t] + 1e-9
        kept = set(members)
        for v in sorted(members, key=lambda v: (-heft[v], v)):
            if heft[v] <= 0:
                break
            kept.discard(v)
            smaller = mask & ~(1 << v)
            less_own = max((floor.terms[u] for u in kept), default=0) if floor.by_max else own - floor.terms[v]
            less_rows = rows - floor.extra_rows(v, smaller)
            if kept and floor.reaches(less_own, less_rows, tuple(kept)) and self._connected(smaller, kept):
                mask, own, rows = smaller, less_own, less_rows
            else:
                kept.add(v)
        return frozenset(kept)

    def _connected(self, mask: int, members: set[int]) -> bool:
        """Whether ``members`` (``mask``) are connected."""
        start = next(iter(members))
        reached = {start}
        stack = [start]
        while stack:
            for u in self.neighbours[stack.pop()]:
                if mask >> u & 1 and u not in reached:
                    reached.add(u)
                    stack.append(u)
        return len(reached) == len(members)


def packing_lower_bound(problem: FusionProblem, max_rounds: int = MAX_ROUNDS, max_growths: int = MAX_GROWTHS,
                        deadline: float | None = None, block: int = BLOCK) -> Packing | None:
    """The best packing the rounds find (module docstring), never below :func:`cut_lower_bound`; ``None``
    without OR-Tools.

    The fuseable operators are cut, in label order, into blocks of ``block``
    (the last may be up to twice that), each packed on its own with sets
    inside it: their inside tensors are disjoint, so the packings add up,
    and a block's weights change only with its own rounds, so a block done
    grows nothing more. A block's rounds stop when no new set is found, after
    ``max_rounds``, once its share of ``max_growths`` (by size) has been
    grown, or past ``deadline`` (a ``time.perf_counter()`` time); its packing
    is whatever they had found by then.
    """
    try:
        from ortools.linear_solver import pywraplp
    except ImportError:  # pragma: no cover - depends on the environment
        return None
    started = time.perf_counter()
    penalty = cut_penalties(problem)
    all_fused = problem.cost.dram_lower_bound()
    greedy = greedy_cut_sets(problem)
    greedy_extra = sum(min(penalty[t] for t in inside_tensors(problem, part)) for part in greedy)
    if not penalty:
        return Packing(all_fused, {"sets": 0, "rounds": 0})
    grower = _SetGrower(problem, penalty)
    operators = sorted(problem.fuseable)
    cuts = list(range(0, len(operators), block))
    if len(cuts) > 1 and len(operators) - cuts[-1] < block:
        cuts.pop()  # a short last block joins the one before
    blocks = [operators[first:last] for first, last in zip(cuts, [*cuts[1:], len(operators)])]
    packed = 0
    stats = {"sets": 0, "rounds": 0, "grown": 0, "blocks": len(blocks), "lp_bytes": all_fused}
    for members in blocks:
        inside = frozenset(members)
        share = max(1, max_growths * len(members) // len(operators))
        block_packed, block_stats = _pack_block(problem, grower, penalty, inside,
                                                [g for g in greedy if g <= inside], max_rounds, share, deadline,
                                                pywraplp)
        packed += block_packed
        stats["sets"] += block_stats["sets"]
        stats["rounds"] = max(stats["rounds"], block_stats["rounds"])
        stats["grown"] += block_stats["grown"]
        stats["lp_bytes"] += block_stats["lp_bytes"]
    stats["seconds"] = round(time.perf_counter() - started, 3)
    return Packing(all_fused + max(packed, greedy_extra), stats)


def _pack_block(problem: FusionProblem, grower: _SetGrower, penalty: dict[int, int], block: frozenset[int],
                greedy: list[frozenset[int]], max_rounds: int, max_growths: int, deadline: float | None,
                pywraplp: Any) -> tuple[int, dict[str, Any]]:
    """The integer packing of sets inside ``block`` (see :func:`packing_lower_bound`) and how it went."""
    tensors = sorted(t for t in penalty if problem.graph.tensors[t].producer in block)
    if not tensors:
        return 0, {"sets": 0, "rounds": 0, "grown": 0, "lp_bytes": 0}
    scale = max(penalty[t] for t in tensors)  # the LP in units of the largest penalty, for the solver's tolerances
    solver = pywraplp.Solver.CreateSolver("GLOP")
    y = {t: solver.NumVar(0.0, solver.infinity(), "") for t in tensors}
    objective = solver.Objective()
    for t in tensors:
        objective.SetCoefficient(y[t], penalty[t] / scale)
    objective.SetMinimization()
    sets: dict[frozenset[int], tuple[list[int], Any]] = {}  # set -> (its inside tensors, its constraint)

    def add(group: frozenset[int]) -> None:
        inside = sorted(inside_tensors(problem, group))
        row = solver.Constraint(1.0, solver.infinity())
        for t in inside:
            row.SetCoefficient(y[t], 1.0)
        sets[group] = (inside, row)

    for group in greedy:
        add(group)
    weight = {t: penalty[t] / scale for t in tensors}  # first round: light means cheap to cut
    # Seeds to grow (again), in label order from where the last round stopped. A seed grown under the
    # current weights would grow the same set, so it waits until a weight its growth consulted changes.
    order = sorted(block)
    stale = set(order)
    consulted_by: dict[int, set[int]] = {}
    touched = grower.floor.touched
    position = rounds = grown = 0
    lp_value = 0.0
    solved = False  # whether the duals answer the sets as they stand (a deadline may come before any solve)
    while stale and rounds < max_rounds and grown < max_growths:
        if deadline is not None and time.perf_counter() > deadline:
            break
        rounds += 1
        found: list[tuple[float, frozenset[int]]] = []
        batch = 0
        for _ in range(len(order)):
            if batch >= SEEDS_PER_ROUND or grown >= max_growths:
                break
            seed = order[position]
            position = (position + 1) % len(order)
            if seed not in stale:
                continue
            stale.discard(seed)
            group, reached = grower.grow(seed, weight, block)
            grown += 1
            batch += 1
            for t in {t for v in reached for t in touched[v] if t in weight}:
                consulted_by.setdefault(t, set()).add(seed)
            if group is None or group in sets:
                continue
            inside = inside_tensors(problem, group)
            if not inside or cost_floor_misses(problem, group):
                continue
            covered = sum(weight[t] for t in inside)
            if rounds == 1 or covered < 1 - 1e-6:
                found.append((covered, group))
        found.sort(key=lambda pair: pair[0])
        fresh = [group for _covered, group in found[:SETS_PER_ROUND] if group not in sets]
        for group in fresh:
            add(group)
        if not sets:
            break
        if not fresh and rounds > 1:
            continue  # the same linear program: the same weights
        solved = solver.Solve() == pywraplp.Solver.OPTIMAL
        if not solved:
            break
        lp_value = objective.Value() * scale
        previous, weight = weight, {t: max(0.0, y[t].solution_value()) for t in tensors}
        for t in tensors:
            if weight[t] != previous[t]:
                stale |= consulted_by.pop(t, set())
    packed = _integer_packing(sets, penalty, scale) if sets and solved else 0
    return packed, {"sets": len(sets), "rounds": rounds, "grown": grown, "lp_bytes": round(lp_value)}


def cost_floor_misses(problem: FusionProblem, group: frozenset[int]) -> bool:
    """Whether ``group``'s buffer floor, computed by the cost model itself, stays under the buffer (the
    grower's running floor is only a guide: the proof rests on this check)."""
    return problem.cost.buffer_floor(group) < problem.buffer_bytes


def _integer_packing(sets: dict[frozenset[int], tuple[list[int], Any]], penalty: dict[int, int],
                     scale: float) -> int:
    """The covering problem's duals as an integer packing: each set's weight in bytes rounded down, all
    scaled down together until no tensor carries more than its penalty; their sum."""
    weights = {group: int(max(0.0, row.dual_value()) * scale) for group, (_inside, row) in sets.items()}
    for _ in range(64):
        load: dict[int, int] = {}
        for group, w in weights.items():
            if w:
                for t in sets[group][0]:
                    load[t] = load.get(t, 0) + w
        over = [(penalty[t], carried) for t, carried in load.items() if carried > penalty[t]]
        if not over:
            return sum(weights.values())
        shrink = min(p / carried for p, carried in over)
        weights = {group: int(w * shrink) for group, w in weights.items()}
    return 0  # pragma: no cover - each pass removes every excess or rounds further down
