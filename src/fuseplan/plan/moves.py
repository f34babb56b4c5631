"""Random plans and one-edit moves, as pure functions of ``(problem, plan, rng)``.

Every function returns plans whose groups are weakly connected and whose
group graph is acyclic; buffer validity is the splitter's business.

Acyclicity comes from one observation: cutting any topological order of the
operators into contiguous runs, and each run into its connected components,
always gives an acyclic group graph (edges only go forward along the order),
and every acyclic plan of convex groups arises this way. Random plans and
group splits are built on it; merges and single-operator moves are checked.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from fuseplan.plan.plan import Group, Plan
from fuseplan.plan.problem import FusionProblem

# Probability of continuing along the chain just extended when drawing a
# random topological order: high values keep chains together, like the
# depth-first execution order of a real network.
CHAIN_BIAS = 0.8


def random_topological_order(problem: FusionProblem, nodes: Iterable[int], rng: random.Random) -> list[int]:
    """A random linear extension of the subgraph induced by ``nodes``, biased towards chains."""
    members = set(nodes)
    successors = problem.graph.successors
    predecessors = problem.graph.predecessors
    waiting = {v: sum(1 for p in predecessors[v] if p in members) for v in members}
    ready = sorted(v for v, n in waiting.items() if n == 0)
    order: list[int] = []
    last_successors: list[int] = []
    while ready:
        chained = [s for s in last_successors if s in ready]
        if chained and rng.random() < CHAIN_BIAS:
            v = rng.choice(chained)
        else:
            v = rng.choice(ready)
        ready.remove(v)
        order.append(v)
        last_successors = []
        for s in successors[v]:
            if s in members:
                waiting[s] -= 1
                if waiting[s] == 0:
                    ready.append(s)
                    last_successors.append(s)
    return order


def cut_order(problem: FusionProblem, order: list[int], cuts: Iterable[int]) -> list[Group]:
    """Groups from cutting ``order`` before each position in ``cuts`` and at excluded operators."""
    excluded = set(problem.excluded)
    bounds = sorted(set(cuts))
    groups: list[Group] = []
    run: list[int] = []
    cut_iter = iter(bounds)
    next_cut = next(cut_iter, None)
    for position, v in enumerate(order):
        while next_cut is not None and next_cut <= position:
            if next_cut == position and run:
                groups.extend(problem.components(run))
                run = []
            next_cut = next(cut_iter, None)
        if v in excluded:
            if run:
                groups.extend(problem.components(run))
                run = []
            continue
        run.append(v)
    if run:
        groups.extend(problem.components(run))
    return groups


def random_plan(problem: FusionProblem, rng: random.Random, cut_probability: float | None = None) -> Plan:
    """A random plan: a random topological order cut at random, split into components.

    ``cut_probability`` (drawn uniformly from [0, 1) when not given) is the
    chance of a cut between two consecutive operators of the order.
    """
    order = random_topological_order(problem, range(len(problem.graph)), rng)
    p = rng.random() if cut_probability is None else cut_probability
    cuts = [i for i in range(1, len(order)) if rng.random() < p]
    return Plan.from_groups(cut_order(problem, order, cuts))


def bisect_group(problem: FusionProblem, group: Group, rng: random.Random) -> list[Group]:
    """Split ``group`` in two along a random topological order (then into components).

    The parts keep any acyclic plan acyclic: edges between them only go from
    the first part to the second, and no path can leave the group and come
    back (the group was part of an acyclic plan).
    """
    order = random_topological_order(problem, group, rng)
    cut = rng.randrange(1, len(order))
    return problem.components(order[:cut]) + problem.components(order[cut:])


def split_move(problem: FusionProblem, plan: Plan, rng: random.Random) -> Plan | None:
    candidates = [g for g in plan.groups if len(g) > 1]
    if not candidates:
        return None
    group = rng.choice(candidates)
    return plan.replace([group], bisect_group(problem, group, rng))


def _adjacent_pairs(problem: FusionProblem, plan: Plan) -> list[tuple[int, int]]:
    group_of = plan.group_of
    pairs = {
        (group_of[i], group_of[j])
        for i, j in problem.fuseable_edges
        if i in group_of and j in group_of and group_of[i] != group_of[j]
    }
    return sorted(pairs)


def merge_move(problem: FusionProblem, plan: Plan, rng: random.Random, attempts: int = 8) -> Plan | None:
    pairs = _adjacent_pairs(problem, plan)
    rng.shuffle(pairs)
    for a, b in pairs[:attempts]:
        first, second = plan.groups[a], plan.groups[b]
        merged = plan.replace([first, second], [first | second])
        if problem.is_acyclic(merged):
            return merged
    return None


def move_node_move(problem: FusionProblem, plan: Plan, rng: random.Random, attempts: int = 8) -> Plan | None:
    """Move one operator on a group boundary into a neighbouring group."""
    group_of = plan.group_of
    boundary = [
        (i, j) for i, j in problem.fuseable_edges
        if i in group_of and j in group_of and group_of[i] != group_of[j]
    ]
    # Either end of a boundary edge can move across it.
    moves = [(i, group_of[j]) for i, j in boundary] + [(j, group_of[i]) for i, j in boundary]
    rng.shuffle(moves)
    for v, target in moves[:attempts]:
        source = plan.groups[group_of[v]]
        rest = source - {v}
        if rest and not problem.graph.is_connected(rest):
            continue
        new_groups = [plan.groups[target] | {v}] + ([rest] if rest else [])
        moved = plan.replace([source, plan.groups[target]], new_groups)
        if problem.is_acyclic(moved):
            return moved
    return None


MOVES = (move_node_move, merge_move, split_move)


def mutate(problem: FusionProblem, plan: Plan, rng: random.Random) -> Plan:
    """One random edit: move an operator to a neighbouring group, merge two adjacent groups,
    or split a group. Falls back to the other kinds when the drawn one is impossible."""
    moves = list(MOVES)
    rng.shuffle(moves)
    for move in moves:
        result = move(problem, plan, rng)
        if result is not None:
            return result
    return plan


def dissolve_dearer_groups(problem: FusionProblem, plan: Plan) -> tuple[Plan, list[Group]]:
    """``plan`` with every group that costs more (in the problem's objective) than its operators each in a
    group of its own split into those operators, and the groups so split.

    Under BRR a fused schedule can move more than the operators' own schedules (a pooling that shrinks
    its input 4x, fused before a convolution whose weights stream, re-reads the larger tensor per
    weight block), and a search that proposes plans at random can keep such a group. Splitting a convex
    group of an acyclic plan into single operators keeps the plan acyclic (a cycle through them would
    have run through the group and back), so the result is a valid plan that costs strictly less by the
    groups' excess. Every single operator fits: a plan's operators are the fuseable ones, which fit
    alone by definition.
    """
    kept: list[Group] = []
    dissolved: list[Group] = []
    price = problem.group_objective
    for group in plan.groups:
        if len(group) > 1:
            singles = [frozenset((v,)) for v in sorted(group)]
            if sum(price(single) for single in singles) < price(group):
                dissolved.append(group)
                kept.extend(singles)
                continue
        kept.append(group)
    return (Plan.from_groups(kept) if dissolved else plan), dissolved
