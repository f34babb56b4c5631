"""Graph rewriting: a backtracking search over substitution rules, guided by a pluggable objective.

Sits beside the search stage: it uses passes (rules, verification), the
graph importer, cost models and the interval DP; nothing below imports it.

The names below are imported when first used (PEP 562), so that reading the search's modes
(:mod:`fuseplan.rewrite.modes`, the command line's choices) does not load the stage and onnxruntime's
neighbours with it.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

# name -> the module that defines it
_EXPORTS = {
    **dict.fromkeys(("OBJECTIVES", "DramObjective", "GroupPrices", "LatencyObjective", "MacsObjective", "Objective",
                     "make_objective", "measure_latency", "model_macs", "total_dram"), "fuseplan.rewrite.objectives"),
    **dict.fromkeys(("Rewritten", "rewrite_model"), "fuseplan.rewrite.run"),
    **dict.fromkeys(("RewriteResult", "backtracking_search"), "fuseplan.rewrite.search"),
}

__all__ = ["OBJECTIVES", "DramObjective", "GroupPrices", "LatencyObjective", "MacsObjective", "Objective",
           "RewriteResult", "Rewritten",
           "backtracking_search", "make_objective", "measure_latency", "model_macs", "rewrite_model", "total_dram"]

if TYPE_CHECKING:
    from fuseplan.rewrite.objectives import (
        OBJECTIVES, DramObjective, GroupPrices, LatencyObjective, MacsObjective, Objective, make_objective,
        measure_latency, model_macs, total_dram,
    )
    from fuseplan.rewrite.run import Rewritten, rewrite_model
    from fuseplan.rewrite.search import RewriteResult, backtracking_search


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
