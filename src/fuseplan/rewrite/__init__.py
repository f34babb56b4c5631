"""Graph rewriting: a backtracking search over substitution rules, guided by a pluggable objective.

Sits beside the search stage: it uses passes (rules, verification), the
graph importer, cost models and the interval DP; nothing below imports it.
"""

from fuseplan.rewrite.objectives import (
    OBJECTIVES, DramObjective, GroupPrices, LatencyObjective, MacsObjective, Objective, make_objective, measure_latency,
    model_macs, total_dram,
)
from fuseplan.rewrite.run import Rewritten, rewrite_model
from fuseplan.rewrite.search import RewriteResult, backtracking_search

__all__ = ["OBJECTIVES", "DramObjective", "GroupPrices", "LatencyObjective", "MacsObjective", "Objective",
           "RewriteResult", "Rewritten",
           "backtracking_search", "make_objective", "measure_latency", "model_macs", "rewrite_model", "total_dram"]
