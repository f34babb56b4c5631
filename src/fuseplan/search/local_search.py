"""Local Search: a population of the K best plans, each mutated by one edit per step."""

from __future__ import annotations

from collections.abc import Sequence

from fuseplan.plan.moves import mutate, random_plan
from fuseplan.plan.plan import Plan, PlanCost
from fuseplan.search.base import SearchAlgorithm, SearchContext


class LocalSearch(SearchAlgorithm):
    """Keep the top ``population`` plans seen so far; every step proposes a one-edit
    mutation of each (move an operator, merge two groups, split a group).

    ``initial`` plans (for example an exact reference's answer) seed the
    population; random plans fill the rest.
    """

    name = "ls"

    def __init__(self, population: int = 10, initial: Sequence[Plan] = ()) -> None:
        if population < 1:
            raise ValueError("population must be at least 1")
        self.population = population
        self.initial = tuple(initial)

    def run(self, ctx: SearchContext) -> None:
        problem, rng = ctx.problem, ctx.rng
        population: list[tuple[Plan, PlanCost]] = []

        def admit(plan: Plan, cost: PlanCost) -> None:
            if all(plan != member for member, _ in population):
                population.append((plan, cost))

        for plan in self.initial:
            admit(*ctx.propose(plan))
        while len(population) < self.population:
            admit(*ctx.propose(random_plan(problem, rng)))
        while True:
            for parent, _ in list(population):
                admit(*ctx.propose(mutate(problem, parent, rng)))
            population.sort(key=lambda member: member[1].objective)  # stable: ties keep their age order
            del population[self.population:]
