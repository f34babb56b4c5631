"""NSGA-II (Deb et al., 2002) through pymoo, on a cut-bit-per-edge plan encoding.

The reference paper ran NSGA-II from OpenBox. We use pymoo instead: it is
actively maintained, works with NumPy 2 (OpenBox pins NumPy < 2), and has
first-class hooks for custom sampling and repair, which plan repair needs.

Encoding: one bit per edge between fuseable operators, 1 = cut. Decoding
takes the connected components of the uncut edges as groups, then breaks
any cycle of the group graph by halving the groups on it along the
topological order. pymoo's repair step sends the decoded plan through the
splitter and writes the repaired plan back into the genome, so the
population always holds valid plans. Crossover is two-point (edges are
ordered by their topological labels, so a segment is a region of the
network); mutation flips bits.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fuseplan.plan.moves import random_plan
from fuseplan.plan.plan import Group, Plan
from fuseplan.plan.problem import FusionProblem
from fuseplan.search.base import SearchAlgorithm, SearchContext


class EdgeCutEncoding:
    """Plans as bit vectors over ``problem.fuseable_edges`` (1 = the edge crosses groups)."""

    def __init__(self, problem: FusionProblem) -> None:
        self.problem = problem
        self.edges = problem.fuseable_edges
        self.nodes = sorted(problem.fuseable)

    def encode(self, plan: Plan) -> np.ndarray:
        group_of = plan.group_of
        return np.array([group_of[i] != group_of[j] for i, j in self.edges], dtype=bool)

    def decode(self, bits: np.ndarray) -> Plan:
        parent = {v: v for v in self.nodes}

        def find(v: int) -> int:
            while parent[v] != v:
                parent[v] = parent[parent[v]]
                v = parent[v]
            return v

        for (i, j), cut in zip(self.edges, bits):
            if not cut:
                a, b = find(i), find(j)
                if a != b:
                    parent[max(a, b)] = min(a, b)
        groups: dict[int, set[int]] = {}
        for v in self.nodes:
            groups.setdefault(find(v), set()).add(v)
        return self._break_cycles(Plan.from_groups(groups.values()))

    def _break_cycles(self, plan: Plan) -> Plan:
        problem = self.problem
        while True:
            cyclic = problem.cyclic_groups(plan)
            if not cyclic:
                return plan
            old = [plan.groups[i] for i in cyclic if len(plan.groups[i]) > 1]
            new: list[Group] = []
            for group in old:
                ordered = sorted(group)  # topological labels
                half = len(ordered) // 2
                new += problem.components(ordered[:half]) + problem.components(ordered[half:])
            plan = plan.replace(old, new)


class NSGA2(SearchAlgorithm):
    """pymoo's NSGA-II with population ``population`` (the paper's K = 10)."""

    name = "nsga2"

    def __init__(self, population: int = 10, mutation_rate: float = 2.0) -> None:
        self.population = population
        self.mutation_rate = mutation_rate  # expected bits flipped per mutation
        self._generations = 0

    def details(self) -> dict[str, Any]:
        return {"population": self.population, "generations": self._generations}

    def run(self, ctx: SearchContext) -> None:
        from pymoo.algorithms.moo.nsga2 import NSGA2 as PymooNSGA2
        from pymoo.core.problem import Problem
        from pymoo.core.repair import Repair
        from pymoo.core.sampling import Sampling
        from pymoo.operators.crossover.pntx import TwoPointCrossover
        from pymoo.operators.mutation.bitflip import BitflipMutation
        from pymoo.optimize import minimize as pymoo_minimize

        encoding = EdgeCutEncoding(ctx.problem)
        n_var = len(encoding.edges)
        if n_var < 2:  # nothing to cross over: every plan is the same
            ctx.propose(random_plan(ctx.problem, ctx.rng))
            return
        python_rng = ctx.rng
        algorithm = self

        class PlanProblem(Problem):
            def __init__(self) -> None:
                super().__init__(n_var=n_var, n_obj=1, xl=0, xu=1, vtype=bool)

            def _evaluate(self, X: np.ndarray, out: dict, *args: Any, **kwargs: Any) -> None:
                out["F"] = np.array([[ctx.propose(encoding.decode(x))[1].objective] for x in X], dtype=float)
                algorithm._generations += 1

        class RandomPlans(Sampling):
            def _do(self, problem: Any, n_samples: int, *args: Any, **kwargs: Any) -> np.ndarray:
                return np.array([encoding.encode(random_plan(ctx.problem, python_rng)) for _ in range(n_samples)])

        class SplitterRepair(Repair):
            def _do(self, problem: Any, X: np.ndarray, **kwargs: Any) -> np.ndarray:
                rows = [encoding.encode(ctx.splitter.repair(encoding.decode(np.asarray(x, dtype=bool)))) for x in X]
                return np.array(rows, dtype=bool).reshape(np.shape(X))

        optimiser = PymooNSGA2(
            pop_size=self.population,
            sampling=RandomPlans(),
            crossover=TwoPointCrossover(),
            mutation=BitflipMutation(prob_var=min(1.0, self.mutation_rate / n_var)),
            repair=SplitterRepair(),
            eliminate_duplicates=True,
        )
        seed = python_rng.getrandbits(31)
        # The context ends the run when the budget is spent; the generation cap is only a backstop.
        pymoo_minimize(PlanProblem(), optimiser, ("n_gen", ctx.budget + 1), seed=seed, verbose=False)
