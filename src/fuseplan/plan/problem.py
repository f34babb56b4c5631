"""The fusion problem: a graph, a cost model, and what makes a plan valid.

Like a pymoo ``Problem``, a :class:`FusionProblem` knows how to evaluate and
check a solution (a :class:`~fuseplan.plan.plan.Plan`) but nothing about how
solutions are searched for. It never looks at which fusion scheme prices the
groups.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cached_property

from fuseplan.cost.base import CostModel
from fuseplan.graph.ir import CompGraph
from fuseplan.plan.objectives import DramObjective, Objective
from fuseplan.plan.plan import Group, Plan, PlanCost


class FusionProblem:
    """Partition the fuseable operators of ``cost.graph`` into groups that fit ``cost.buffer_bytes``,
    minimising ``objective`` summed over the groups (DRAM bytes by default)."""

    def __init__(self, cost: CostModel, objective: Objective | None = None) -> None:
        self.cost = cost
        self.objective: Objective = objective if objective is not None else DramObjective(cost)
        if self.objective.cost is not cost:
            raise ValueError("the objective must price the problem's own cost model")
        self.graph: CompGraph = cost.graph
        self.excluded: tuple[int, ...] = cost.unfuseable
        self.fuseable: frozenset[int] = frozenset(cost.fuseable)

    @cached_property
    def fuseable_edges(self) -> tuple[tuple[int, int], ...]:
        """Edges between fuseable operators: the ones a plan can keep inside a group."""
        fuseable = self.fuseable
        return tuple((i, j) for i, j in self.graph.edges if i in fuseable and j in fuseable)

    def __repr__(self) -> str:
        return (f"FusionProblem({self.graph.name!r}, {self.cost.name}, beta={self.cost.buffer_bytes}, "
                f"objective={self.objective.name})")

    @property
    def buffer_bytes(self) -> int:
        return self.cost.buffer_bytes

    # -- pricing ---------------------------------------------------------
    def fits(self, group: Group) -> bool:
        return self.cost.fits(group)

    def group_objective(self, group: Group) -> float:
        """The objective's cost of one group."""
        return self.objective.value(group, self.cost.dram(group))

    def evaluate(self, plan: Plan) -> PlanCost:
        dram = max_buffer = invalid = 0
        evaluate = self.cost.evaluate
        beta = self.cost.buffer_bytes
        value = None if isinstance(self.objective, DramObjective) else self.objective.value
        total: float = 0
        for group in plan.groups:
            buffer, group_dram = evaluate(group)
            dram += group_dram
            if value is not None:
                total += value(group, group_dram)
            if buffer > max_buffer:
                max_buffer = buffer
            if buffer >= beta:
                invalid += 1
        return PlanCost(dram=dram, max_buffer=max_buffer, invalid_groups=invalid,
                        objective=dram if value is None else total)

    # -- structure -------------------------------------------------------
    def components(self, nodes: Iterable[int]) -> list[Group]:
        """Weakly connected components of the subgraph induced by ``nodes``."""
        return self.graph.components(nodes)

    def is_acyclic(self, plan: Plan) -> bool:
        """Whether the graph of groups (excluded operators as their own groups) is a DAG."""
        return not self.cyclic_groups(plan)

    def cyclic_groups(self, plan: Plan) -> list[int]:
        """Positions (in ``plan.groups``) of groups that lie on a cycle of the group graph, or
        downstream of one; empty iff the group graph is acyclic."""
        label = dict(plan.group_of)
        n_groups = len(plan.groups)
        for offset, v in enumerate(self.excluded):
            label[v] = n_groups + offset
        # Operators outside the plan (a partial plan) are their own groups too.
        next_label = n_groups + len(self.excluded)
        succ: dict[int, set[int]] = {}
        indegree: dict[int, int] = {}
        for i, j in self.graph.edges:
            a = label.get(i)
            if a is None:
                a = label[i] = next_label
                next_label += 1
            b = label.get(j)
            if b is None:
                b = label[j] = next_label
                next_label += 1
            if a != b:
                targets = succ.setdefault(a, set())
                if b not in targets:
                    targets.add(b)
                    indegree[b] = indegree.get(b, 0) + 1
        ready = [g for g in range(next_label) if indegree.get(g, 0) == 0]
        seen = 0
        while ready:
            g = ready.pop()
            seen += 1
            for h in succ.get(g, ()):
                indegree[h] -= 1
                if indegree[h] == 0:
                    ready.append(h)
        if seen == next_label:
            return []
        return [g for g in range(n_groups) if indegree.get(g, 0) > 0]

    def check(self, plan: Plan) -> list[str]:
        """Every reason ``plan`` is not a valid plan for this problem (empty if valid)."""
        names = self.graph.nodes
        reasons: list[str] = []
        seen: dict[int, int] = {}
        for position, group in enumerate(plan.groups):
            for v in group:
                if v in seen:
                    reasons.append(f"operator {names[v].name} is in groups {seen[v]} and {position}")
                seen[v] = position
        missing = self.fuseable - seen.keys()
        if missing:
            listed = ", ".join(names[v].name for v in sorted(missing)[:5])
            more = ", ..." if len(missing) > 5 else ""
            reasons.append(f"{len(missing)} fuseable operators are in no group ({listed}{more})")
        for v in sorted(seen.keys() - self.fuseable):
            reasons.append(f"operator {names[v].name} is unfuseable (does not fit the buffer alone) but is in a group")
        for position, group in enumerate(plan.groups):
            if not group:
                reasons.append(f"group {position} is empty")
            elif not self.graph.is_connected(group):
                reasons.append(f"group {position} is not connected")
            elif not self.fits(group):
                reasons.append(
                    f"group {position} needs {self.cost.buffer(group)} bytes, more than the "
                    f"{self.cost.buffer_bytes}-byte buffer allows"
                )
        if not reasons:
            for position in self.cyclic_groups(plan):
                reasons.append(f"group {position} is on a cycle of the group graph")
        return reasons
