"""Stage 3a: partition plans, the fusion problem, and moves between plans."""

from fuseplan.plan.moves import bisect_group, mutate, random_plan, random_topological_order
from fuseplan.plan.plan import Plan, PlanCost
from fuseplan.plan.problem import FusionProblem

__all__ = ["FusionProblem", "Plan", "PlanCost", "bisect_group", "mutate", "random_plan", "random_topological_order"]
